"""The ungate patch: one gate removed, others kept, nodeSelector merged, precondition set."""

from tidegate.kube.ungate import has_gate, ungate_patch
from tidegate.testing.manifests import Builders

GATE = "tidegate.io/admission"
RV = "100"
"""The resourceVersion of the first object a test's ``k8s`` builds."""


def test_removes_only_the_given_gate_and_keeps_order(k8s: Builders) -> None:
    patch = ungate_patch(k8s.pod("p", gates=["a", GATE, "b"]), GATE, {"rack": "r1"})
    assert patch == {
        "metadata": {"resourceVersion": RV},
        "spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}], "nodeSelector": {"rack": "r1"}},
    }


def test_last_gate_removal_deletes_the_field(k8s: Builders) -> None:
    patch = ungate_patch(k8s.pod("p", gates=[GATE]), GATE, {})
    assert patch == {"metadata": {"resourceVersion": RV}, "spec": {"schedulingGates": None}}


def test_selector_keys_already_set_are_not_resent(k8s: Builders) -> None:
    patch = ungate_patch(
        k8s.pod("p", gates=[GATE], nodeSelector={"block": "b1"}),
        GATE,
        {"block": "b1", "rack": "r2"},
    )
    assert patch is not None
    assert patch["spec"] == {"schedulingGates": None, "nodeSelector": {"rack": "r2"}}


def test_changed_selector_key_is_sent_for_the_server_to_judge(k8s: Builders) -> None:
    patch = ungate_patch(k8s.pod("p", gates=[], nodeSelector={"rack": "r1"}), GATE, {"rack": "r2"})
    assert patch == {
        "metadata": {"resourceVersion": RV},
        "spec": {"nodeSelector": {"rack": "r2"}},
    }


def test_nothing_to_do_is_none(k8s: Builders) -> None:
    assert (
        ungate_patch(
            k8s.pod("p", gates=["other"], nodeSelector={"rack": "r1"}), GATE, {"rack": "r1"}
        )
        is None
    )
    assert ungate_patch({"metadata": {}, "spec": {}}, GATE, {}) is None


def test_has_gate(k8s: Builders) -> None:
    assert has_gate(k8s.pod("p", gates=["x", GATE]), GATE)
    assert not has_gate(k8s.pod("p", gates=["x"]), GATE)
    assert not has_gate({"spec": {"schedulingGates": "junk"}}, GATE)
