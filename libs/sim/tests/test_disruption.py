"""The budget arithmetic and the Eviction verdict of :mod:`tidegate.sim.disruption`."""

from typing import Any

import pytest

from tidegate.sim.disruption import budget_status, eviction_refusal


def pod(name: str, *, ready: bool = True, phase: str = "Running", app: str = "a") -> Any:
    return {
        "metadata": {"name": name, "labels": {"app": app}},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(name: str = "b", app: str = "a", **spec: object) -> Any:
    return {
        "metadata": {"name": name, "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "desired", "allowed"),
    [
        ({"minAvailable": 3}, 3, 1),
        ({"minAvailable": "50%"}, 2, 2),  # half of 4, rounded up
        ({"minAvailable": "60%"}, 3, 1),
        ({"maxUnavailable": 1}, 3, 1),
        ({"maxUnavailable": "30%"}, 2, 2),  # 30% of 4 rounded up is 2 unavailable
        ({}, 0, 4),
    ],
)
def test_budget_status(spec: dict[str, object], desired: int, allowed: int) -> None:
    pods = [pod(f"p{i}") for i in range(4)] + [pod("done", phase="Succeeded"), pod("x", app="b")]
    status = budget_status(pdb(**spec), pods)
    assert (status["expectedPods"], status["currentHealthy"]) == (4, 4)
    assert (status["desiredHealthy"], status["disruptionsAllowed"]) == (desired, allowed)


def test_eviction_verdicts() -> None:
    pods = [
        pod("p0"),
        pod("p1"),
        pod("sick", ready=False),
        pod("new", ready=False, phase="Pending"),
    ]
    tight = pdb(minAvailable=2)
    refusal = eviction_refusal(pods[0], [tight], pods)
    assert refusal is not None
    assert (refusal.code, refusal.reason) == (429, "TooManyRequests")
    assert "needs 2 healthy pods and has 2 currently" in str(refusal.details)
    # Pending pods, and unhealthy ones while the budget is met, may go.
    assert eviction_refusal(pods[3], [tight], pods) is None
    assert eviction_refusal(pods[2], [tight], pods) is None
    assert eviction_refusal(pods[0], [pdb(minAvailable=1)], pods) is None
    # Two budgets over one pod: the API server cannot decide.
    two = eviction_refusal(pods[0], [pdb(minAvailable=1), pdb("c", minAvailable=1)], pods)
    assert two is not None
    assert two.code == 500
