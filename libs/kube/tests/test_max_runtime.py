"""Reading expected runtimes (docs/reservations.md, "Expected ends"): ``tidegate.io/max-runtime``,
Kueue's ``max-exec-time-seconds``, a Job's ``activeDeadlineSeconds``, and the Queue settings of
reservations and aging, through the index as the watcher feeds it."""

from typing import Any

import pytest

from tidegate.kube.read.index import ClusterIndex, ObjectKind, StateKey
from tidegate.model import QueueAging, QueueConfig, WorkloadState


def feed(index: ClusterIndex, kind: ObjectKind, *objs: dict[str, Any]) -> None:
    for obj in objs:
        assert index.apply(kind, "ADDED", obj).problems == []


def workload(index: ClusterIndex, name: str) -> WorkloadState:
    message = index.desired(StateKey("workload", "default", name)).message
    assert isinstance(message, WorkloadState), f"no workload default/{name}"
    return message


def queue(index: ClusterIndex, name: str) -> QueueConfig:
    message = index.desired(StateKey("queue", None, name)).message
    assert isinstance(message, QueueConfig), message
    return message


def job_workload(k8s: Any, job: dict[str, Any]) -> WorkloadState:
    index = ClusterIndex()
    feed(index, "Job", job)
    name = job["metadata"]["name"]
    feed(index, "Pod", k8s.pod(f"{name}-0", owner=k8s.owner_ref("Job", name)))
    return workload(index, name)


@pytest.mark.parametrize(
    ("annotations", "labels", "deadline", "expected"),
    [
        ({}, {}, None, None),
        ({"tidegate.io/max-runtime": "2h30m"}, {}, None, 9000.0),
        ({"tidegate.io/max-runtime": "90m"}, {}, None, 5400.0),
        ({"tidegate.io/max-runtime": "45s"}, {}, None, 45.0),
        ({"tidegate.io/max-runtime": "1.5h"}, {}, None, 5400.0),
        ({"tidegate.io/max-runtime": "3600"}, {}, None, 3600.0),
        ({}, {"kueue.x-k8s.io/max-exec-time-seconds": "600"}, None, 600.0),
        # tidegate's own key wins over Kueue's.
        (
            {"tidegate.io/max-runtime": "20m"},
            {"kueue.x-k8s.io/max-exec-time-seconds": "600"},
            None,
            1200.0,
        ),
        ({}, {}, 1800, 1800.0),
        # Both: the shorter, since Kubernetes stops the Job at its deadline anyway.
        ({"tidegate.io/max-runtime": "2h"}, {}, 1800, 1800.0),
        ({"tidegate.io/max-runtime": "10m"}, {}, 1800, 600.0),
    ],
)
def test_a_jobs_declared_runtime(
    k8s: Any,
    annotations: dict[str, str],
    labels: dict[str, str],
    deadline: int | None,
    expected: float | None,
) -> None:
    job = k8s.job("train", annotations=annotations, labels=labels)
    if deadline is not None:
        job["spec"]["activeDeadlineSeconds"] = deadline
    w = job_workload(k8s, job)
    assert w.invalid_reason is None
    assert w.max_runtime_seconds == expected


def test_the_annotation_on_the_pod_template_is_read(k8s: Any) -> None:
    template = k8s.template(annotations={"tidegate.io/max-runtime": "15m"})
    w = job_workload(k8s, k8s.job("train", template=template))
    assert w.max_runtime_seconds == 900.0


@pytest.mark.parametrize(
    ("annotations", "deadline", "expected"),
    [
        (
            {"tidegate.io/max-runtime": "soon"},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: 'soon' is not a duration",
        ),
        (
            {"tidegate.io/max-runtime": "0"},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: '0' is not a positive "
            "duration",
        ),
        (
            {"tidegate.io/max-runtime": "-5m"},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: '-5m' is not a duration",
        ),
        (
            {"tidegate.io/max-runtime": "2d"},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: '2d' is not a duration",
        ),
        (
            {"tidegate.io/max-runtime": "1h1h"},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: '1h1h' is not a duration",
        ),
        (
            {"tidegate.io/max-runtime": ""},
            None,
            "annotation tidegate.io/max-runtime on Job default/train: '' is not a duration",
        ),
        ({}, 0, "Job default/train: spec.activeDeadlineSeconds 0 is not positive"),
    ],
)
def test_a_malformed_runtime_marks_the_workload_invalid_naming_the_key(
    k8s: Any, annotations: dict[str, str], deadline: int | None, expected: str
) -> None:
    job = k8s.job("train", annotations=annotations)
    if deadline is not None:
        job["spec"]["activeDeadlineSeconds"] = deadline
    w = job_workload(k8s, job)
    assert w.invalid_reason is not None
    assert expected in w.invalid_reason
    assert w.max_runtime_seconds is None


# --------------------------------------------------------------------------- Queue settings


def test_queue_reservation_and_aging_settings(k8s: Any) -> None:
    index = ClusterIndex()
    feed(
        index,
        "Queue",
        k8s.queue(
            "train",
            {
                "defaultMaxRuntime": "4h",
                "maxReservations": 2,
                "aging": {"step": "10m", "maxBoost": 5},
            },
        ),
        k8s.queue("plain", {}),
        k8s.queue("seconds", {"defaultMaxRuntime": 900, "aging": {"step": 60, "maxBoost": 0}}),
    )
    train = queue(index, "train")
    assert train.invalid_reason is None
    assert train.default_max_runtime_seconds == 4 * 3600.0
    assert train.max_reservations == 2
    assert train.aging == QueueAging(step_seconds=600.0, max_boost=5)
    plain = queue(index, "plain")
    assert (plain.default_max_runtime_seconds, plain.max_reservations, plain.aging) == (
        None,
        1,
        None,
    )
    seconds = queue(index, "seconds")
    assert seconds.default_max_runtime_seconds == 900.0
    assert seconds.aging == QueueAging(step_seconds=60.0, max_boost=0)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"defaultMaxRuntime": "forever"}, "spec.defaultMaxRuntime: 'forever' is not a duration"),
        ({"maxReservations": -1}, "spec.maxReservations: -1 is negative"),
        ({"aging": {"step": "10m"}}, "spec.aging: both step and maxBoost are needed"),
        ({"aging": {"step": "0s", "maxBoost": 1}}, "spec.aging.step: '0s' is not a positive"),
        ({"aging": {"step": "1m", "maxBoost": -1}}, "spec.aging.maxBoost: -1 is negative"),
    ],
)
def test_malformed_queue_settings_mark_the_queue_invalid_naming_the_field(
    k8s: Any, spec: dict[str, Any], expected: str
) -> None:
    index = ClusterIndex()
    feed(index, "Queue", k8s.queue("bad", spec))
    reason = queue(index, "bad").invalid_reason
    assert reason is not None
    assert expected in reason
