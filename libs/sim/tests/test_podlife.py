"""The pod lifecycle both the simulator's kubelets and the node agent follow (pure decisions)."""

from typing import Any

import pytest

from tidegate.sim import podlife
from tidegate.sim.names import rfc3339

NOW = 1_800_000_000.0


def pod(
    *,
    node: str | None = "n1",
    phase: str = "Pending",
    duration: str | None = None,
    exit_code: str | None = None,
    restart_policy: str | None = "Never",
    status: dict[str, Any] | None = None,
    deletion: tuple[float, int] | None = None,
) -> dict[str, Any]:
    """A pod as the API server would return it, with the lifecycle annotations asked for."""
    annotations: dict[str, str] = {}
    if duration is not None:
        annotations[podlife.DURATION_ANNOTATION] = duration
    if exit_code is not None:
        annotations[podlife.EXIT_CODE_ANNOTATION] = exit_code
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u-1"}
    metadata["annotations"] = annotations
    if deletion is not None:
        metadata["deletionTimestamp"] = rfc3339(deletion[0])
        metadata["deletionGracePeriodSeconds"] = deletion[1]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "img"}]}
    if node is not None:
        spec["nodeName"] = node
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, **(status or {})}}


def running(deletion: tuple[float, int] | None = None, **kwargs: Any) -> dict[str, Any]:
    """A pod that the lifecycle has already started at NOW (then deleted, if asked)."""
    base = pod(**kwargs)
    step = podlife.next_step(base, started=None, now=NOW)
    assert isinstance(step, podlife.WriteStatus)
    started = {**base, "status": step.status}
    if deletion is not None:
        started["metadata"] = {
            **base["metadata"],
            "deletionTimestamp": rfc3339(deletion[0]),
            "deletionGracePeriodSeconds": deletion[1],
        }
    return started


def test_an_unbound_pod_is_left_alone() -> None:
    assert podlife.next_step(pod(node=None), started=None, now=NOW) == podlife.Nothing()


def test_a_bound_pod_starts_running_with_ips_conditions_and_container_statuses() -> None:
    step = podlife.next_step(pod(duration="30"), started=None, now=NOW)
    assert isinstance(step, podlife.WriteStatus)
    assert step.transition == "run"
    assert step.started == NOW
    assert step.due == NOW + 30
    status = step.status
    assert status["phase"] == "Running"
    assert status["podIP"] == podlife.pod_ip("u-1")
    assert status["hostIP"] == podlife.host_ip("n1")
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
        "PodScheduled": "True",
    }
    [container] = status["containerStatuses"]
    assert container["name"] == "c"
    assert container["restartCount"] == 0
    assert container["state"] == {"running": {"startedAt": rfc3339(NOW)}}


def test_without_a_duration_a_running_pod_runs_until_deleted() -> None:
    assert podlife.next_step(running(), started=NOW, now=NOW + 1e6) == podlife.Nothing()
    step = podlife.next_step(pod(), started=None, now=NOW)
    assert isinstance(step, podlife.WriteStatus)
    assert step.due is None


def test_a_running_pod_waits_for_its_duration_scaled_by_the_time_scale() -> None:
    pod_ = running(duration="100")
    assert podlife.next_step(pod_, started=NOW, now=NOW + 4, time_scale=0.05) == podlife.Wait(
        NOW + 5
    )
    assert podlife.next_step(pod_, started=NOW, now=NOW + 50) == podlife.Wait(NOW + 100)


@pytest.mark.parametrize(
    ("policy", "code", "outcome"),
    [
        ("Never", None, "Succeeded"),
        ("Never", "3", "Failed"),
        ("OnFailure", "0", "Succeeded"),
        ("OnFailure", "3", "restart"),
        ("Always", "0", "restart"),
        (None, "0", "restart"),
        ("Never", "not-a-number", "Failed"),
    ],
)
def test_exit_follows_the_restart_policy(
    policy: str | None, code: str | None, outcome: str
) -> None:
    pod_ = running(duration="10", exit_code=code, restart_policy=policy)
    step = podlife.next_step(pod_, started=NOW, now=NOW + 10)
    assert isinstance(step, podlife.WriteStatus)
    [container] = step.status["containerStatuses"]
    if outcome == "restart":
        assert step.transition == "restart"
        assert step.status["phase"] == "Running"
        assert container["restartCount"] == 1
        assert step.started == NOW + 10
        assert step.due == NOW + 20
    else:
        assert step.transition == "finish"
        assert step.status["phase"] == outcome
        assert step.started is None
        terminated = container["state"]["terminated"]
        assert terminated["exitCode"] == (0 if outcome == "Succeeded" else podlife.exit_code(pod_))
        assert terminated["reason"] == ("Completed" if outcome == "Succeeded" else "Error")
        ready = [c for c in step.status["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "False"


def test_a_finished_pod_is_left_alone() -> None:
    for phase in ("Succeeded", "Failed"):
        assert podlife.next_step(pod(phase=phase), started=None, now=NOW) == podlife.Nothing()


def test_a_forgotten_start_is_read_from_the_container_status() -> None:
    pod_ = running(duration="60")
    # A restarted agent remembers nothing: the containers' startedAt says when they started.
    assert podlife.next_step(pod_, started=None, now=NOW + 30) == podlife.Wait(NOW + 60)
    assert podlife.started_at(pod_) == NOW


def test_a_graceful_deletion_ends_after_its_grace_period_scaled() -> None:
    requested = NOW
    pod_ = running(deletion=(requested + 30, 30))
    assert podlife.next_step(pod_, started=NOW, now=NOW + 10) == podlife.Wait(NOW + 30)
    killed = podlife.next_step(pod_, started=NOW, now=NOW + 30)
    assert isinstance(killed, podlife.WriteStatus)
    assert podlife.next_step(pod_, started=NOW, now=NOW + 2, time_scale=0.1) == podlife.Wait(
        NOW + 3
    )
    scaled = podlife.next_step(pod_, started=NOW, now=NOW + 3, time_scale=0.1)
    assert isinstance(scaled, podlife.WriteStatus)


def test_a_deleted_pod_is_marked_failed_before_it_is_removed() -> None:
    """As a kubelet does: a Job with a podFailurePolicy replaces a pod only once it is
    terminal, so a deleted pod that vanished without a terminal phase would never be
    replaced."""
    pod_ = running(deletion=(NOW, 0))
    step = podlife.next_step(pod_, started=NOW, now=NOW)
    assert isinstance(step, podlife.WriteStatus)
    assert (step.transition, step.due) == ("kill", NOW)
    assert step.status["phase"] == "Failed"
    terminated = [c["state"]["terminated"] for c in step.status["containerStatuses"]]
    assert terminated
    assert all(t["exitCode"] == 137 for t in terminated)
    ended = {**pod_, "status": step.status}
    assert podlife.next_step(ended, started=None, now=NOW) == podlife.Remove()


def test_bad_annotations_mean_no_duration() -> None:
    assert podlife.duration_seconds(pod(duration="soon")) is None
    assert podlife.duration_seconds(pod(duration="nan")) is None
    assert podlife.duration_seconds(pod(duration="-5")) == 0.0


def test_derived_ips_are_valid_host_addresses() -> None:
    for uid in (f"uid-{i}" for i in range(200)):
        octets = [int(part) for part in podlife.pod_ip(uid).split(".")]
        assert octets[0] == 10
        assert all(0 <= o <= 255 for o in octets)
        assert 1 <= octets[3] <= 254
