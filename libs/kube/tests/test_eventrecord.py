"""Event names and bodies."""

import re
from datetime import UTC, datetime

import pytest

from tidegate.kube.eventrecord import ObjectRef, event_name, new_event, repeat_patch, timestamp

POD = ObjectRef(api_version="v1", kind="Pod", name="train-0", namespace="ml", uid="u1")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def test_name_is_stable_per_object_reason_and_type() -> None:
    name = event_name(POD, "Admitted", "Normal")
    assert name == event_name(POD, "Admitted", "Normal")
    assert name != event_name(POD, "Pending", "Normal")
    assert name != event_name(POD, "Admitted", "Warning")
    other_uid = ObjectRef(api_version="v1", kind="Pod", name="train-0", namespace="ml", uid="u2")
    assert name != event_name(other_uid, "Admitted", "Normal")
    assert name.startswith("train-0.")
    assert DNS_SUBDOMAIN.match(name)


def test_long_names_fit_the_limit() -> None:
    ref = ObjectRef(api_version="v1", kind="Pod", name="a" * 253, namespace="ml")
    name = event_name(ref, "X", "Normal")
    assert len(name) <= 253
    assert DNS_SUBDOMAIN.match(name)


def test_ref_from_object_and_cluster_scoped_namespace() -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "nu"}}
    ref = ObjectRef.of(node)
    assert ref.event_namespace == "default"
    assert ref.as_involved_object() == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "nu",
    }


def test_ref_names_the_missing_field() -> None:
    with pytest.raises(ValueError, match=r"metadata\.name"):
        ObjectRef.of({"apiVersion": "v1", "kind": "Pod", "metadata": {}})


def test_bodies() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 999, tzinfo=UTC)
    body = new_event(
        POD,
        reason="Admitted",
        message="m1",
        event_type="Normal",
        action="Admit",
        component="tidegate-ungater",
        instance="h",
        now=when,
    )
    assert body["count"] == 1
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2026-01-02T03:04:05Z"
    assert body["metadata"] == {"name": event_name(POD, "Admitted", "Normal"), "namespace": "ml"}
    assert body["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "train-0",
        "namespace": "ml",
        "uid": "u1",
    }
    stored = dict(body, metadata={"name": "x", "resourceVersion": "9"}, count=4)
    patch = repeat_patch(stored, message="m2", action="", now=when)
    assert patch == {
        "count": 5,
        "lastTimestamp": "2026-01-02T03:04:05Z",
        "message": "m2",
        "metadata": {"resourceVersion": "9"},
    }


def test_timestamp_is_utc() -> None:
    assert timestamp(datetime(2026, 5, 1, 12, 0, tzinfo=UTC)) == "2026-05-01T12:00:00Z"
