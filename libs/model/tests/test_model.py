"""Tests of the bus schema: round trips, validation paths, quantities, subjects."""

import msgspec
import pytest

from tidegate.model import (
    Admitted,
    DomainCount,
    Envelope,
    NodeState,
    QuantityError,
    QueueAging,
    QueueConfig,
    ReservationDropped,
    Reserved,
    Tombstone,
    TopologyAssignment,
    WaitedGang,
    WorkloadState,
    codec,
    format_quantity,
    parse_quantity,
    parse_resources,
    subjects,
)


def envelope(body: msgspec.Struct) -> Envelope:
    return Envelope(event_id="e1", cluster="c1", source="test", time=1.5, body=body)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "body",
    [
        NodeState(name="n1", labels={"a": "b"}, allocatable={"cpu": 8000}),
        Tombstone(object_kind="pod", namespace="ns", name="p"),
        Admitted(
            workload="ns/w",
            uid="u",
            queue="q",
            sequence=3,
            epoch=1,
            assignments={
                "workers": TopologyAssignment(
                    levels=["block", "rack"], domains=[DomainCount(values=["b1", "r1"], count=2)]
                )
            },
        ),
        Reserved(
            workload="research/pretrain",
            uid="u",
            queue="train",
            sequence=9,
            topology="default",
            level="example.com/rack",
            domain=["b1", "r2"],
            nodes=["r2-h1", "r2-h2"],
            expected_start=1_800_009_000.0,
            waits_for=[WaitedGang(workload="team/c", expected_end=1_800_009_000.0, overdue=True)],
            message="rack r2 reserved",
        ),
        ReservationDropped(
            workload="research/pretrain", uid="u", queue="train", reason="Started", sequence=10
        ),
        QueueConfig(
            name="train",
            default_max_runtime_seconds=7200.0,
            max_reservations=2,
            aging=QueueAging(step_seconds=600.0, max_boost=3),
        ),
        WorkloadState(
            namespace="ns", name="w", uid="u", owner_kind="Job", max_runtime_seconds=90.0
        ),
    ],
)
def test_round_trip(body: msgspec.Struct) -> None:
    env = envelope(body)
    assert codec.decode(codec.encode(env)) == env


def test_validation_error_names_the_path() -> None:
    bad = b'{"event_id":"e","cluster":"c","source":"s","time":1,"body":{"kind":"node","name":"n","allocatable":{"cpu":"x"}}}'
    with pytest.raises(msgspec.ValidationError, match=r"\$\.body\.allocatable"):
        codec.decode(bad)


def test_unknown_fields_from_newer_writers_are_ignored() -> None:
    data = b'{"event_id":"e","cluster":"c","source":"s","time":1,"future":1,"body":{"kind":"node","name":"n","new_field":[1]}}'
    assert codec.decode(data).body == NodeState(name="n")


@pytest.mark.parametrize(
    ("resource", "value", "expected"),
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 1.5, 1500),
        ("cpu", "100u", 1),
        ("memory", "64Gi", 64 * 2**30),
        ("memory", "1e3", 1000),
        ("memory", "1.5k", 1500),
        ("nvidia.com/gpu", 8, 8),
    ],
)
def test_parse_quantity(resource: str, value: object, expected: int) -> None:
    assert parse_quantity(resource, value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "",
        "1Q",
        "-1",
        True,
        None,
        [1],
        "-1e1000000",
        float("nan"),
        float("inf"),
    ],
)
def test_bad_quantities(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity("cpu", value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1e1000000", 2**63 - 1), ("99999999999Ei", 2**63 - 1), ("1e-999999", 1), ("0e99", 0)],
)
def test_huge_and_tiny_quantities_saturate(value: str, expected: int) -> None:
    assert parse_quantity("memory", value) == expected


def test_parse_resources_names_the_resource() -> None:
    with pytest.raises(QuantityError, match=r"^memory: 'lots' is not a quantity"):
        parse_resources({"cpu": "1", "memory": "lots"})


def test_format_quantity() -> None:
    assert format_quantity("cpu", 1500) == "1500m"
    assert format_quantity("cpu", 2000) == "2"
    assert format_quantity("memory", 64 * 2**30) == "64Gi"
    assert format_quantity("nvidia.com/gpu", 8) == "8"


def test_subject_tokens_escape_dots() -> None:
    name = "ip-10-0-0-1.ec2.internal"
    subject = subjects.node("c1", name)
    assert subject == "tg.c1.node.ip-10-0-0-1%2Eec2%2Einternal"
    assert subjects.untoken(subject.split(".")[-1]) == name
    assert subjects.untoken(subjects.token("a b*>%")) == "a b*>%"


def test_cluster_ids_are_dns_labels() -> None:
    assert subjects.validate_cluster("prod-1") == "prod-1"
    with pytest.raises(ValueError, match="DNS label"):
        subjects.validate_cluster("Prod.1")
