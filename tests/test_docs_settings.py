"""Every service setting is documented as ``TIDEGATE_<FIELD>`` with its true default.

The settings every service has (:class:`tidegate.runtime.ServiceSettings`) belong in
docs/operations.md; a service's own settings in that service's page. A setting is documented
by a table row whose first cell names the variable and whose second cell gives its default
(rows naming several variables, like ``TIDEGATE_KUBE_QPS`` / ``TIDEGATE_KUBE_BURST``, give
their defaults in the same order separated by ``/`` or ``,``). This test does not check the
prose of the meaning column.
"""

import dataclasses
import re
from pathlib import Path

import pytest

from tidegate.admission.config import Settings as AdmissionSettings
from tidegate.preemption.config import Settings as PreemptionSettings
from tidegate.runtime import ServiceSettings
from tidegate.runtime.settings import env_name
from tidegate.topology_cache.config import Settings as TopologyCacheSettings
from tidegate.ungater.config import UngaterSettings
from tidegate.watcher.config import WatcherSettings

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMMON_PAGE = "operations.md"
SERVICE_PAGES: dict[str, tuple[type[ServiceSettings], str]] = {
    "admission": (AdmissionSettings, "admission.md"),
    "preemption": (PreemptionSettings, "preemption-service.md"),
    "topology-cache": (TopologyCacheSettings, "topology-cache.md"),
    "ungater": (UngaterSettings, "ungater.md"),
    "watcher": (WatcherSettings, "workloads.md"),
}
VARIABLE = re.compile(r"TIDEGATE_[A-Z0-9_]+")
NO_VALUE = {"", "—", "-", "none", "unset"}


def documented_defaults(page: str) -> dict[str, str]:
    """Variable → the default cell text, from every table row of ``page`` naming variables."""
    found: dict[str, str] = {}
    for line in (DOCS / page).read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 2:
            continue
        names = VARIABLE.findall(cells[0])
        if not names:
            continue
        values = [cells[1]] if len(names) == 1 else re.split(r"\s*[/,]\s*", cells[1])
        if len(values) != len(names):
            values = [cells[1]] * len(names)
        for name, value in zip(names, values, strict=True):
            found.setdefault(name, value.replace("`", "").strip())
    return found


def matches(default: object, text: str) -> bool:
    """Whether the documented ``text`` states ``default``."""
    if default is None:
        return True  # documented as absent, or as what absence means (e.g. host-pid-random)
    if isinstance(default, bool):
        return text.lower() == str(default).lower()
    if isinstance(default, (int, float)):
        try:
            return float(text) == float(default)
        except ValueError:
            return False
    if isinstance(default, tuple):
        return [part.strip() for part in text.split(",")] == list(default)
    return text == str(default)


def cases() -> list[object]:
    """(service, page, variable, default) of every setting of every service, as test params."""
    common = {f.name for f in dataclasses.fields(ServiceSettings)}
    rows = []
    for service, (settings_type, own_page) in SERVICE_PAGES.items():
        for item in dataclasses.fields(settings_type):
            page = COMMON_PAGE if item.name in common else own_page
            variable = env_name(item.name)
            rows.append(
                pytest.param(service, page, variable, item.default, id=f"{service}-{variable}")
            )
    return rows


@pytest.mark.parametrize(
    ("service", "page", "variable", "default"),
    cases(),
)
def test_setting_is_documented_with_its_default(
    service: str, page: str, variable: str, default: object
) -> None:
    documented = documented_defaults(page)
    assert variable in documented, f"{service}'s {variable} has no table row in docs/{page}"
    text = documented[variable]
    assert text.lower() not in NO_VALUE or default is None, (
        f"docs/{page} gives {variable} no default; the code's is {default!r}"
    )
    assert matches(default, text), (
        f"docs/{page} gives {variable} the default {text!r}; the code's is {default!r}"
    )
