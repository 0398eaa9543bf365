"""Pure parts of the simulator: patches, selectors, the store's history, index ranges."""

import pytest

from tidegate.sim.errors import ApiError
from tidegate.sim.patching import json_patch, merge_patch, strategic_merge_patch
from tidegate.sim.selectors import Selector, parse_label_selector
from tidegate.sim.store import Store
from tidegate.sim.workloads import compress_indexes, rollout

POD = {
    "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"}},
    "spec": {
        "containers": [
            {"name": "main", "image": "i1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s1"},
        ],
        "schedulingGates": [{"name": "g1"}, {"name": "g2"}],
        "tolerations": [{"key": "t1", "operator": "Exists"}],
    },
}


def test_merge_patch_rfc7386() -> None:
    patched = merge_patch(
        POD, {"metadata": {"labels": {"x": None, "y": "2"}}, "spec": {"tolerations": []}}
    )
    assert isinstance(patched, dict)
    assert patched["metadata"]["labels"] == {"y": "2"}
    assert patched["spec"]["tolerations"] == []
    assert POD["metadata"]["labels"] == {"x": "1"}, "inputs are not mutated"


def test_strategic_merge_by_key_and_directives() -> None:
    patched = strategic_merge_patch(
        POD,
        {
            "metadata": {"finalizers": ["b"]},
            "spec": {
                "containers": [
                    {"name": "main", "env": [{"name": "B", "value": "2"}]},
                    {"name": "side", "$patch": "delete"},
                    {"name": "new", "image": "n1"},
                ],
                "schedulingGates": [{"name": "g1", "$patch": "delete"}],
                "tolerations": [{"key": "t2", "operator": "Exists"}],
                "$setElementOrder/containers": [{"name": "main"}, {"name": "new"}],
            },
        },
        "Pod",
    )
    spec = patched["spec"]
    assert isinstance(spec, dict)
    assert [c["name"] for c in spec["containers"]] == ["main", "new"]
    assert spec["containers"][0]["image"] == "i1"
    assert spec["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "2"},
    ]
    assert spec["schedulingGates"] == [{"name": "g2"}]
    assert spec["tolerations"] == [{"key": "t2", "operator": "Exists"}], "no merge key: replaced"
    assert patched["metadata"]["finalizers"] == ["a", "b"]  # type: ignore[index]
    replaced = strategic_merge_patch(
        POD, {"spec": {"schedulingGates": [{"$patch": "replace"}, {"name": "g3"}]}}, "Pod"
    )
    assert replaced["spec"]["schedulingGates"] == [{"name": "g3"}]  # type: ignore[index]
    removed = strategic_merge_patch(
        POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, "Pod"
    )
    assert removed["metadata"]["finalizers"] == []  # type: ignore[index]


def test_strategic_merge_needs_merge_key() -> None:
    with pytest.raises(ApiError) as error:
        strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}}, "Pod")
    assert error.value.code == 400


def test_json_patch_errors_are_422() -> None:
    assert json_patch(POD, [{"op": "test", "path": "/metadata/name", "value": "p"}])["metadata"]
    with pytest.raises(ApiError) as error:
        json_patch(POD, [{"op": "remove", "path": "/spec/nothing"}])
    assert error.value.code == 422
    with pytest.raises(ApiError) as bad:
        json_patch(POD, {"op": "remove"})
    assert bad.value.code == 400


def test_label_selector_syntax() -> None:
    requirements = parse_label_selector("a=b, c!=d, e in (f, g),h notin (i),j,!k")
    assert [(r.key, r.operator) for r in requirements] == [
        ("a", "="),
        ("c", "!="),
        ("e", "in"),
        ("h", "notin"),
        ("j", "exists"),
        ("k", "!exists"),
    ]
    selector = Selector.parse("e in (f,g),!k", "metadata.name=n", "Pod")
    assert selector.matches({"metadata": {"name": "n", "labels": {"e": "g"}}})
    assert not selector.matches({"metadata": {"name": "n", "labels": {"e": "g", "k": ""}}})
    for bad in ("a in (b", "a b", "-a=b", "a=" + "v" * 64):
        with pytest.raises(ApiError):
            parse_label_selector(bad)


def test_store_history_window_and_versions() -> None:
    store = Store(history_window=3)
    for i in range(5):
        store.put(("", "pods"), {"metadata": {"name": f"p{i}", "namespace": "a" if i % 2 else "b"}})
    assert store.resource_version == 5
    watcher, replay = store.watch(("", "pods"), "a", 2)
    assert [e.obj["metadata"]["name"] for e in replay] == ["p3"]  # type: ignore[index]
    watcher.close()
    with pytest.raises(ApiError) as gone:
        store.watch(("", "pods"), None, 1)
    assert gone.value.code == 410
    # Other resources keep their own history.
    store.watch(("", "nodes"), None, 0)[0].close()
    event = store.remove(("", "pods"), "b", "p0")
    assert event is not None
    assert event.obj["metadata"]["resourceVersion"] == "6"  # type: ignore[index]
    store.compact()
    with pytest.raises(ApiError):
        store.watch(("", "pods"), None, 5)
    store.watch(("", "pods"), None, 6)[0].close()


def test_compress_indexes() -> None:
    assert compress_indexes(set()) == ""
    assert compress_indexes({0, 1, 2, 3, 5, 7, 8}) == "0-3,5,7-8"


def _rs(name: str, order: int, replicas: int, available: int) -> dict[str, object]:
    return {
        "metadata": {"namespace": "d", "name": name, "resourceVersion": str(order)},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "availableReplicas": available},
    }


def test_a_rolling_update_surges_and_scales_old_pods_down_only_as_new_ones_are_available() -> None:
    """The default strategy on 1 replica (maxSurge 25% → 1, maxUnavailable 25% → 0): the
    new pod is added beside the old one, which goes only once the new one is available."""
    old, new = _rs("old", 1, 1, 1), _rs("new", 2, 0, 0)
    assert rollout({}, 1, new, [old, new]) == {("d", "old"): 1, ("d", "new"): 1}
    new = _rs("new", 2, 1, 0)  # created, not Ready yet
    assert rollout({}, 1, new, [old, new]) == {("d", "old"): 1, ("d", "new"): 1}
    new = _rs("new", 2, 1, 1)  # Ready
    assert rollout({}, 1, new, [old, new]) == {("d", "old"): 0, ("d", "new"): 1}
    # maxUnavailable 1, no surge: the old pod goes first.
    strategy = {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    new = _rs("new", 2, 0, 0)
    assert rollout(strategy, 1, new, [old, new]) == {("d", "old"): 0, ("d", "new"): 0}
    old = _rs("old", 1, 0, 0)
    assert rollout(strategy, 1, new, [old, new])[("d", "new")] == 1
    # Recreate: old ones to zero first; the new one once no old pod is left.
    old = _rs("old", 1, 4, 4)
    assert rollout({"type": "Recreate"}, 4, new, [old, new]) == {("d", "old"): 0, ("d", "new"): 0}
    # ... not while an old pod is Terminating (its ReplicaSet counts it no more, its
    # containers still run), as kube-controller-manager's oldPodsRunning.
    old = _rs("old", 0, 0, 0)
    recreate = {"type": "Recreate"}
    assert rollout(recreate, 4, new, [old, new], old_pods_running=True)[("d", "new")] == 0
    assert rollout(recreate, 4, new, [old, new], old_pods_running=False)[("d", "new")] == 4
    # Four replicas, 25% each way: one surge pod, one unavailable.
    old, new = _rs("old", 1, 4, 4), _rs("new", 2, 0, 0)
    assert rollout({}, 4, new, [old, new]) == {("d", "old"): 3, ("d", "new"): 1}
