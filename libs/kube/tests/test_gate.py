"""The webhook's decision on AdmissionReviews: who is gated, the patch, odd input."""

import base64
import json

import pytest

from tidegate.kube.read.gate import GateRules, review
from tidegate.model.names import ADMISSION_GATE
from tidegate.testing.manifests import Builders

k8s = Builders(server_fields=False)
"""Pods as a client sends them to be created (what the API server asks the webhook about)."""


def answer(body: bytes, rules: GateRules | None = None) -> tuple[int, dict[str, object], str]:
    """Status, decoded response and verdict."""
    result = review(body, rules or GateRules())
    return result.status, json.loads(result.body), result.verdict


def patch_of(response: dict[str, object]) -> list[dict[str, object]]:
    """The JSONPatch of an answer."""
    inner = response["response"]
    assert isinstance(inner, dict)
    assert inner["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(inner["patch"]))  # type: ignore[no-any-return]


def test_a_pod_without_gates_gets_the_gate_list() -> None:
    status, response, verdict = answer(
        json.dumps(k8s.admission_review(k8s.pod("train-0", gated=False), uid="rev-1")).encode()
    )
    assert (status, verdict) == (200, "gated")
    assert response["apiVersion"] == "admission.k8s.io/v1"
    assert response["response"]["uid"] == "rev-1"  # type: ignore[index]
    assert response["response"]["allowed"] is True  # type: ignore[index]
    assert patch_of(response) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": ADMISSION_GATE}]}
    ]


def test_other_gates_are_kept_and_ours_appended() -> None:
    _, response, _ = answer(
        json.dumps(
            k8s.admission_review(k8s.pod("train-0", gates=["example.com/other"]), uid="rev-1")
        ).encode()
    )
    assert patch_of(response) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": ADMISSION_GATE}}
    ]


@pytest.mark.parametrize(
    "key", ["tidegate.io/queue", "kueue.x-k8s.io/queue-name", "scheduling.volcano.sh/queue-name"]
)
def test_queue_families_are_gated_when_only_queued_pods_are_wanted(key: str) -> None:
    rules = GateRules(gate_all=False)
    for where in ("labels", "annotations"):
        _, _, verdict = answer(
            json.dumps(
                k8s.admission_review(
                    k8s.pod("train-0", gated=False, **{where: {key: "q"}}), uid="rev-1"
                )
            ).encode(),
            rules,
        )  # type: ignore[arg-type]
        assert verdict == "gated"
    _, response, verdict = answer(
        json.dumps(
            k8s.admission_review(k8s.pod("train-0", gated=False, labels={"app": "x"}), uid="rev-1")
        ).encode(),
        rules,
    )
    assert verdict == "passed"
    assert "patch" not in response["response"]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (k8s.pod("train-0", gates=[ADMISSION_GATE]), "carries the gate already"),
        (k8s.pod("train-0", gated=False, nodeName="n1"), "already bound to a node"),
        (
            k8s.pod(
                "train-0",
                gated=False,
                owner=k8s.owner_ref("DaemonSet", "ds", "apps/v1"),
            ),
            "a DaemonSet pod",
        ),
        (
            k8s.pod("train-0", gated=False, annotations={"kubernetes.io/config.mirror": "x"}),
            "a mirror pod",
        ),
    ],
)
def test_pods_that_cannot_wait_pass_unchanged(obj: dict[str, object], why: str) -> None:
    result = review(json.dumps(k8s.admission_review(obj, uid="rev-1")).encode(), GateRules())
    assert (result.verdict, result.reason) == ("passed", why)
    assert json.loads(result.body)["response"] == {"uid": "rev-1", "allowed": True}


def test_updates_and_other_kinds_pass() -> None:
    assert (
        answer(
            json.dumps(
                k8s.admission_review(
                    k8s.pod("train-0", gated=False), operation="UPDATE", uid="rev-1"
                )
            ).encode()
        )[2]
        == "passed"
    )
    body = json.loads(
        json.dumps(k8s.admission_review(k8s.pod("train-0", gated=False), uid="rev-1")).encode()
    )
    body["request"]["kind"]["kind"] = "Service"
    body["request"]["resource"]["resource"] = "services"
    assert answer(json.dumps(body).encode())[2] == "passed"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{not json",
        b"[]",
        json.dumps({"apiVersion": "v1", "request": {"uid": "x"}}).encode(),
        json.dumps({"apiVersion": "admission.k8s.io/v1", "request": "x"}).encode(),
        json.dumps({"apiVersion": "admission.k8s.io/v1", "request": {"uid": 5}}).encode(),
        b"\xff\xfe",
    ],
)
def test_unreadable_reviews_get_400_never_an_exception(body: bytes) -> None:
    result = review(body, GateRules())
    assert (result.status, result.verdict) == (400, "unreadable")
    assert "unreadable AdmissionReview" in json.loads(result.body)["error"]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ("a string", "request.object"),
        ({"metadata": "x", "spec": {}}, "metadata"),
        ({"metadata": {}, "spec": {"schedulingGates": "x"}}, "spec.schedulingGates"),
        ({"metadata": {}, "spec": {"schedulingGates": ["x"]}}, "spec.schedulingGates[0]"),
        ({"metadata": {"ownerReferences": {}}, "spec": {}}, "metadata.ownerReferences"),
        ({"metadata": {"labels": []}, "spec": {}}, "metadata.labels"),
    ],
)
def test_a_bad_pod_follows_the_failure_policy(obj: object, field: str) -> None:
    ignored = review(
        json.dumps(k8s.admission_review(obj, uid="rev-1")).encode(),
        GateRules(failure_policy="Ignore"),
    )
    response = json.loads(ignored.body)["response"]
    assert (ignored.verdict, response["allowed"]) == ("ignored-error", True)
    assert field in response["warnings"][0]
    refused = review(
        json.dumps(k8s.admission_review(obj, uid="rev-1")).encode(),
        GateRules(failure_policy="Fail"),
    )
    response = json.loads(refused.body)["response"]
    assert (refused.verdict, response["allowed"]) == ("refused", False)
    assert response["status"]["code"] == 400
    assert field in response["status"]["message"]
