"""A headless browser for the tests that look at a page: Debian's chromium and its driver.

Why: ``tidegate console`` is only proven working when a real browser renders it. The tests
drive Debian's ``chromium`` through Debian's ``chromedriver`` with selenium (a dev
dependency). Where the two Debian packages are missing, :func:`headless_chromium` installs
them with apt-get (the test machines run as root, like CI); where that is impossible it
fails, naming what is missing: a console test never skips.
"""

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

PACKAGES: Final = ("chromium", "chromium-driver")
"""Debian's packages of the browser and its WebDriver."""


def _installed() -> tuple[str, str] | None:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def ensure_chromium() -> tuple[str, str]:
    """Paths of ``chromium`` and ``chromedriver``, installed with apt-get when missing."""
    found = _installed()
    if found is not None:
        return found
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        done = subprocess.run(
            [*sudo, *command], env=env, capture_output=True, text=True, timeout=900, check=False
        )
        if done.returncode != 0:
            raise AssertionError(
                f"the console test needs Debian's {' and '.join(PACKAGES)}; "
                f"{' '.join(command)} failed: {done.stderr.strip()[-500:]}"
            )
    found = _installed()
    assert found is not None, f"{' and '.join(PACKAGES)} installed but not on PATH"
    return found


@contextlib.contextmanager
def headless_chromium(
    log: Path, *, width: int = 1600, height: int = 1100
) -> Iterator[webdriver.Chrome]:
    """A headless chromium under WebDriver for the length of the block (driver log: ``log``)."""
    browser, driver_path = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--window-size={width},{height}",
    ):
        options.add_argument(argument)
    service = Service(executable_path=driver_path, log_output=str(log))
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()
