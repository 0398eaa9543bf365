"""The pod-state rules are written once: no service keeps its own terminal-phase set.

Which pods hold capacity, run, or are active is :mod:`tidegate.model.pods` (re-exported by
:mod:`tidegate.policy.common`). A service, or policy or placement, that spells the terminal
phases itself (``{"Succeeded", "Failed"}`` as a set, tuple or list literal) has made a second
copy of that rule; this test names it. The simulator (libs/sim) is left out on purpose: it
imitates Kubernetes independently, so tidegate's rules are tested against it, not with it.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TERMINAL = {"Succeeded", "Failed"}


def terminal_phase_sets(source: str) -> list[int]:
    """Line numbers of the collection literals in ``source`` whose strings are exactly the
    terminal phases."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            strings = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if strings == TERMINAL and len(node.elts) == len(TERMINAL):
                lines.append(node.lineno)
    return lines


def test_the_detector_finds_a_copy_in_any_spelling() -> None:
    assert terminal_phase_sets('X = frozenset({"Succeeded", "Failed"})') == [1]
    assert terminal_phase_sets('ok = p.phase not in ("Failed", "Succeeded")') == [1]
    assert terminal_phase_sets('x = ["Succeeded", "Failed"]') == [1]
    assert terminal_phase_sets('PHASES = ("Pending", "Running", "Succeeded", "Failed")') == []
    assert terminal_phase_sets('done = p.phase == "Succeeded"') == []


def test_no_service_or_domain_library_defines_its_own_terminal_phases() -> None:
    sources = sorted(
        [
            *(ROOT / "services").glob("*/src/**/*.py"),
            *(ROOT / "libs/policy/src").glob("**/*.py"),
            *(ROOT / "libs/placement/src").glob("**/*.py"),
        ]
    )
    assert sources, "no service sources found"
    copies = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources
        for line in terminal_phase_sets(path.read_text())
    ]
    assert copies == [], f"use tidegate.policy.common (TERMINAL_PHASES, active, …): {copies}"


REPLICA = ROOT / "libs/model/src/tidegate/model/replica.py"


def in_force_rule_calls(source: str) -> list[int]:
    """Line numbers of calls that decide whether a decision ends an admission: a preemption's
    ``.ends(…)`` (:meth:`tidegate.model.Preempted.ends`), which only the replica may apply."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "ends"
    ]


def test_the_in_force_detector_finds_a_copy() -> None:
    assert in_force_rule_calls("if event.ends(key, uid=u, sequence=s):\n    pass") == [1]
    assert in_force_rule_calls("x = verdict.ended_by") == []


def test_only_the_replica_decides_which_admission_is_in_force() -> None:
    """One rule for what is in force, not one per service: the replica
    (:mod:`tidegate.model.replica`) is the one, and nobody else applies a preemption."""
    sources = sorted(
        [
            *(ROOT / "services").glob("*/src/**/*.py"),
            *(ROOT / "libs").glob("*/src/**/*.py"),
        ]
    )
    copies = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources
        if path != REPLICA and "/sim/" not in str(path)
        for line in in_force_rule_calls(path.read_text())
    ]
    assert copies == [], f"read the decisions in force from tidegate.model.replica: {copies}"


PODS = ROOT / "libs/model/src/tidegate/model/pods.py"
GATE = "tidegate.io/admission"


def gate_comparisons(source: str) -> list[int]:
    """Line numbers of comparisons with tidegate's admission gate (``== ADMISSION_GATE``,
    ``ADMISSION_GATE in gates``, or the gate's name spelt out): each decides whether a pod is
    gated, which :func:`tidegate.model.pods.admission_gated` alone may do."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                named = isinstance(operand, ast.Name | ast.Attribute) and (
                    getattr(operand, "id", None) == "ADMISSION_GATE"
                    or getattr(operand, "attr", None) == "ADMISSION_GATE"
                )
                if named or (isinstance(operand, ast.Constant) and operand.value == GATE):
                    lines.append(node.lineno)
                    break
    return lines


def test_the_gate_detector_finds_a_copy_in_any_spelling() -> None:
    assert gate_comparisons("ok = ADMISSION_GATE in pod.scheduling_gates") == [1]
    assert gate_comparisons("ok = any(g.name == names.ADMISSION_GATE for g in gates)") == [1]
    assert gate_comparisons('ok = g.get("name") == "tidegate.io/admission"') == [1]
    assert gate_comparisons('gates = [{"name": ADMISSION_GATE}]') == []
    assert gate_comparisons("ok = admission_gated(names)") == []


def test_only_the_model_decides_whether_a_pod_is_gated() -> None:
    """One test for tidegate's gate, not one each in the watcher, the replica, the webhook,
    the demo and the benchmarks: :mod:`tidegate.model.pods` is the one. The simulator
    imitates Kubernetes on its own and is left out."""
    sources = sorted(
        [
            *(ROOT / "services").glob("*/src/**/*.py"),
            *(ROOT / "libs").glob("*/src/**/*.py"),
            *(ROOT / "bench").glob("*.py"),
        ]
    )
    copies = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sources
        if path != PODS and "/sim/" not in str(path)
        for line in gate_comparisons(path.read_text())
    ]
    assert copies == [], f"use tidegate.model.pods.admission_gated (or gated): {copies}"
