"""The shared builders: message subjects, suite defaults, manifests a client creates."""

import pytest

from tidegate.model import (
    CapacityDomain,
    DomainCount,
    Tombstone,
    subjects,
)
from tidegate.testing.harness import received, subject_of
from tidegate.testing.manifests import Builders
from tidegate.testing.messages import Messages

msg = Messages(namespace="team", levels=["block", "rack", "host"], node_domain=("b1", "r1"))


def test_every_message_goes_on_the_subject_its_owner_uses() -> None:
    c = "c1"
    cases = [
        (msg.node("n1"), subjects.node(c, "n1")),
        (msg.pod("p", "n1"), subjects.pod(c, "team", "p")),
        (msg.workload("w"), subjects.workload(c, "team", "w")),
        (msg.topology(), subjects.topology(c, "default")),
        (msg.queue_config(), subjects.queue(c, "q")),
        (msg.capacity_node("n1", "b1", "r1"), subjects.capacity_node(c, "default", "n1")),
        (msg.tombstone("pod", "p", "team"), subjects.pod(c, "team", "p")),
        (msg.tombstone("queue", "q"), subjects.queue(c, "q")),
        (msg.admitted("w", sequence=1), subjects.decision(c, "admitted", "team", "w")),
        (msg.released("w"), subjects.decision(c, "released", "team", "w")),
        (msg.pending("w"), subjects.decision(c, "pending", "team", "w")),
        (msg.preempted("serve", ["w"]), subjects.decision(c, "preempted", "team", "serve")),
        (msg.disruption_budget("keep", {"w": 2}), subjects.disruption_budget(c, "team", "keep")),
        (
            msg.replace_requested("w", {}, admitted_sequence=3),
            subjects.decision(c, "replace-requested", "team", "w"),
        ),
        (
            msg.preempt_requested("w", sequence=2),
            subjects.decision(c, "preempt-requested", "team", "w"),
        ),
    ]
    for body, subject in cases:
        assert subject_of(c, body) == subject, body
    with pytest.raises(ValueError, match="CapacityDomain"):
        subject_of(c, CapacityDomain(topology="t", level="rack", domain=["b1"], free={}, nodes=1))


def test_suite_defaults_apply_unless_a_call_gives_the_keyword() -> None:
    suite = Messages(defaults={"pod": {"workload": "team/train", "podset": "workers"}})
    assert (suite.pod("a").workload, suite.pod("a").podset) == ("team/train", "workers")
    assert suite.pod("a", workload=None).workload is None
    node = msg.node("n2", "b2", "r9")
    assert node.labels == {"block": "b2", "rack": "r9", "host": "n2"}
    assert msg.node("n1").labels == {"block": "b1", "rack": "r1", "host": "n1"}
    admitted = msg.admitted("team/w", {("b1", "r1", "n1"): 2}, sequence=3, per_pod={"cpu": 1})
    assert admitted.uid == "uid-w"
    assert admitted.requests == {"workers": {"cpu": 1}}
    assert [d.values for d in admitted.assignments["workers"].domains] == [["b1", "r1", "n1"]]
    assert msg.tombstone("node", "n1") == Tombstone(object_kind="node", name="n1")
    growth = msg.preempt_requested("w", sequence=4, admitted_sequence=3)
    assert (growth.workload, growth.uid, growth.queue) == ("team/w", "uid-w", "q")
    assert (growth.sequence, growth.admitted_sequence) == (4, 3)


def test_a_manifest_to_create_carries_nothing_the_api_server_sets() -> None:
    sent = Builders(server_fields=False).pod("p", namespace="team")
    assert sent["metadata"] == {"name": "p"}
    assert "status" not in sent
    stored = Builders().pod("p", namespace="team")
    assert stored["metadata"]["uid"] == "uid-p"
    assert stored["metadata"]["namespace"] == "team"
    assert Builders.container(cpu="1", memory=None, limits=True, gpu="2")["resources"] == {
        "requests": {"cpu": "1", "nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }


def test_a_pod_with_other_gates_and_a_budget_with_expressions_and_status() -> None:
    k8s = Builders()
    pod = k8s.pod("p", gates=["a", "b"])
    assert pod["spec"]["schedulingGates"] == [{"name": "a"}, {"name": "b"}]
    assert k8s.pod("q", gates=[])["spec"]["schedulingGates"] == []
    assert "schedulingGates" not in k8s.pod("r", gated=False)["spec"]
    expression = {"key": "team", "operator": "In", "values": ["a"]}
    budget = k8s.disruption_budget("keep", {}, expressions=[expression], status={"x": 1})
    assert budget["spec"]["selector"] == {"matchExpressions": [expression]}
    assert budget["status"] == {"x": 1}
    assert k8s.disruption_budget("all", {})["spec"]["selector"] == {"matchLabels": {}}


def test_a_received_message_is_on_its_owners_subject_unless_told() -> None:
    got = received("c1", msg.node("n1"), stream_sequence=7)
    assert (got.subject, got.stream_sequence) == (subjects.node("c1", "n1"), 7)
    assert got.envelope.cluster == "c1"
    assert got.envelope.body == msg.node("n1")
    assert received("c1", msg.node("n1"), subject="tg.c1.x").subject == "tg.c1.x"


def test_an_admission_review_carries_the_object_operation_and_uid() -> None:
    pod = Builders(server_fields=False).pod("p", gated=False)
    review = Builders.admission_review(pod, operation="UPDATE", uid="r-2")
    assert review["kind"] == "AdmissionReview"
    assert review["request"]["object"] is pod
    assert (review["request"]["operation"], review["request"]["uid"]) == ("UPDATE", "r-2")
    assert review["request"]["namespace"] == "team"


def test_a_run_is_said_in_the_annotations_the_simulator_reads() -> None:
    assert Builders.runs(None) == {}
    assert Builders.runs(0.5) == {"tidegate.io/sim-duration-seconds": "0.5"}
    assert Builders.runs(3, exit_code=2) == {
        "tidegate.io/sim-duration-seconds": "3",
        "tidegate.io/sim-exit-code": "2",
    }


def test_a_capacity_record_has_one_domain_value_per_level() -> None:
    assert msg.capacity_node("n1", "b1", "r1").domain == ["b1", "r1", "n1"]
    racks = Messages(levels=["rack"])
    assert racks.capacity_node("n1", "r2").domain == ["r2"]


def test_a_budget_counts_workloads_by_key_and_a_replacement_names_its_admission() -> None:
    budget = msg.disruption_budget("keep", {"w": 2, "other/v": 1}, allowed=1)
    assert budget.workloads == {"team/w": 2, "other/v": 1}
    assert (budget.uid, budget.disruptions_allowed) == ("uid-keep", 1)
    slot = DomainCount(values=["b1", "r1", "n1"], count=1)
    request = msg.replace_requested("w", {"workers": [slot]}, admitted_sequence=4, give_back=True)
    assert (request.workload, request.uid, request.admitted_sequence) == ("team/w", "uid-w", 4)
    assert request.lost == {"workers": [slot]}
    assert request.give_back
