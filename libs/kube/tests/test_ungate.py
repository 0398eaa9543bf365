"""The ungate patch: one gate removed, others kept, nodeSelector merged, precondition set."""

from tidegate.kube.ungate import has_gate, ungate_patch

GATE = "tidegate.io/admission"


def pod(gates: list[str], selector: dict[str, str] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {"schedulingGates": [{"name": g} for g in gates]}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"metadata": {"name": "p", "resourceVersion": "42"}, "spec": spec}


def test_removes_only_the_given_gate_and_keeps_order() -> None:
    patch = ungate_patch(pod(["a", GATE, "b"]), GATE, {"rack": "r1"})
    assert patch == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"schedulingGates": [{"name": "a"}, {"name": "b"}], "nodeSelector": {"rack": "r1"}},
    }


def test_last_gate_removal_deletes_the_field() -> None:
    patch = ungate_patch(pod([GATE]), GATE, {})
    assert patch == {"metadata": {"resourceVersion": "42"}, "spec": {"schedulingGates": None}}


def test_selector_keys_already_set_are_not_resent() -> None:
    patch = ungate_patch(pod([GATE], {"block": "b1"}), GATE, {"block": "b1", "rack": "r2"})
    assert patch is not None
    assert patch["spec"] == {"schedulingGates": None, "nodeSelector": {"rack": "r2"}}


def test_changed_selector_key_is_sent_for_the_server_to_judge() -> None:
    patch = ungate_patch(pod([], {"rack": "r1"}), GATE, {"rack": "r2"})
    assert patch == {
        "metadata": {"resourceVersion": "42"},
        "spec": {"nodeSelector": {"rack": "r2"}},
    }


def test_nothing_to_do_is_none() -> None:
    assert ungate_patch(pod(["other"], {"rack": "r1"}), GATE, {"rack": "r1"}) is None
    assert ungate_patch({"metadata": {}, "spec": {}}, GATE, {}) is None


def test_has_gate() -> None:
    assert has_gate(pod(["x", GATE]), GATE)
    assert not has_gate(pod(["x"]), GATE)
    assert not has_gate({"spec": {"schedulingGates": "junk"}}, GATE)
