"""Every test a page of docs/ or the README names as proof exists.

A claim names its proof as ``path/to/test_file.py::test_name`` (or ``::Class::test_name``,
``::test_name[param]``, or ``::test_name`` alone for one more test of the file named just
before it). Each such reference must name a test function defined in that file. Test names
quoted in prose without a file (``test_name``) must be defined in some test file, so a renamed
test cannot leave a claim pointing at nothing.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REFERENCE = re.compile(r"([\w./-]*\.py)?((?:::[A-Za-z_]\w*)+)(?:\[[^\]\s`]*\])?")
TEST_NAME = re.compile(r"\btest_\w+(?![\w*])")
FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def python_test_files(root: Path) -> list[Path]:
    """The Python test files of the repository (tests/, libs/*/tests, services/*/tests)."""
    found = [*root.glob("tests/**/test_*.py")]
    for parent in ("libs", "services"):
        found += root.glob(f"{parent}/*/tests/**/test_*.py")
    return sorted(found)


def defined_names(source: str) -> set[str]:
    """``test_x`` and ``TestY::test_x`` for every test function and test method in a module."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test"):
                names.add(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    item.name.startswith("test")
                ):
                    names.add(f"{node.name}::{item.name}")
    return names


def resolve(root: Path, name: str, candidates: list[Path]) -> Path | None:
    """The file a reference names: a path from the root, or a test file's unique base name."""
    if (root / name).is_file():
        return root / name
    if "/" not in name:
        matches = [path for path in candidates if path.name == name]
        if len(matches) == 1:
            return matches[0]
    return None


def broken_references(text: str, root: Path, candidates: list[Path]) -> list[str]:
    """Every ``file.py::test`` reference in ``text`` whose file or test does not exist."""
    broken = []
    current: Path | None = None
    parsed: dict[Path, set[str]] = {}
    for match in REFERENCE.finditer(text):
        file_name, qualified = match.group(1), match.group(2)[2:]
        if file_name:
            current = resolve(root, file_name, candidates)
            if current is None:
                broken.append(f"{match.group(0)} (no such test file)")
                continue
        elif current is None:
            broken.append(f"{match.group(0)} (no file named before it)")
            continue
        if current not in parsed:
            parsed[current] = defined_names(current.read_text())
        if qualified not in parsed[current]:
            broken.append(f"{match.group(0)} (no such test in {current.relative_to(root)})")
    return broken


def unknown_test_names(text: str, known: set[str]) -> list[str]:
    """Names like ``test_x`` in prose (outside fenced code) that are no test nor test module."""
    prose = FENCED.sub("", text)
    return sorted({name for name in TEST_NAME.findall(prose) if name not in known})


@pytest.fixture(scope="module")
def candidates() -> list[Path]:
    return python_test_files(ROOT)


@pytest.fixture(scope="module")
def known(candidates: list[Path]) -> set[str]:
    names = {path.stem for path in candidates}
    for path in candidates:
        names |= {name.rpartition("::")[2] for name in defined_names(path.read_text())}
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_test_exists(page: Path, candidates: list[Path], known: set[str]) -> None:
    broken = broken_references(page.read_text(), ROOT, candidates)
    assert not broken, f"{page.name} names tests that do not exist: {broken}"
    unknown = unknown_test_names(page.read_text(), known)
    assert not unknown, f"{page.name} names tests that no test file defines: {unknown}"


def test_the_checker_finds_a_bogus_test_a_bogus_file_and_a_dangling_continuation(
    tmp_path: Path,
) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_a.py").write_text(
        "import pytest\n"
        "def test_real() -> None: ...\n"
        "@pytest.mark.parametrize('n', [1])\n"
        "async def test_param(n: int) -> None: ...\n"
        "class TestGroup:\n"
        "    def test_method(self) -> None: ...\n"
    )
    candidates = python_test_files(tmp_path)
    good = (
        "`tests/test_a.py::test_real` and `::test_param[1]`, `test_a.py::TestGroup::test_method`."
    )
    assert broken_references(good, tmp_path, candidates) == []
    bad = (
        "`::test_real` first; `tests/test_a.py::test_bogus`, `tests/test_b.py::test_real`, "
        "`tests/test_a.py::TestGroup::test_real`."
    )
    assert broken_references(bad, tmp_path, candidates) == [
        "::test_real (no file named before it)",
        "tests/test_a.py::test_bogus (no such test in tests/test_a.py)",
        "tests/test_b.py::test_real (no such test file)",
        "tests/test_a.py::TestGroup::test_real (no such test in tests/test_a.py)",
    ]
    prose = "`test_real` and `test_renamed` (tests/test_a.py), `test_x_*`\n```\ntest_code\n```\n"
    assert unknown_test_names(prose, {"test_real", "test_a"}) == ["test_renamed"]
