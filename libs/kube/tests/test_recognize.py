"""Workload recognition through the index: owners, podsets, counts, ranks, and each family of
annotations (tidegate, Kueue, KAI, Volcano), plus every malformed case."""

from typing import Any

import pytest

from tidegate.kube.read.index import ClusterIndex, ObjectKind, StateKey
from tidegate.model import PodState, WorkloadState

GI = 2**30


def feed(index: ClusterIndex, kind: ObjectKind, *objs: dict[str, Any]) -> None:
    for obj in objs:
        applied = index.apply(kind, "ADDED", obj)
        assert applied.problems == []


def workload(index: ClusterIndex, name: str, namespace: str = "default") -> WorkloadState:
    message = index.desired(StateKey("workload", namespace, name)).message
    assert isinstance(message, WorkloadState), f"no workload {namespace}/{name}"
    return message


def pod(index: ClusterIndex, name: str, namespace: str = "default") -> PodState:
    message = index.desired(StateKey("pod", namespace, name)).message
    assert isinstance(message, PodState)
    return message


# --------------------------------------------------------------------------- owners and podsets


def test_job_with_kueue_annotations(k8s: Any) -> None:
    index = ClusterIndex()
    template = k8s.template(
        annotations={"kueue.x-k8s.io/podset-required-topology": "tidegate.io/rack"},
        containers=[k8s.container(cpu="2", memory="4Gi", gpu="8")],
        nodeSelector={"pool": "gpu"},
        tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
    )
    job = k8s.job(
        "train",
        parallelism=4,
        completions=4,
        labels={"kueue.x-k8s.io/queue-name": "research"},
        template=template,
    )
    owner = k8s.owner_ref("Job", "train")
    pods = [
        k8s.pod(
            f"train-{i}",
            owner=owner,
            annotations={"batch.kubernetes.io/job-completion-index": str(i)},
        )
        for i in range(2)
    ]
    feed(index, "Job", job)
    feed(index, "Pod", *pods)
    w = workload(index, "train")
    assert w.invalid_reason is None
    assert (w.owner_kind, w.owner_api_version, w.uid) == ("Job", "batch/v1", "uid-train")
    assert w.queue == "research"
    assert w.service_type == "training"
    assert w.preemptable
    assert w.min_members is None
    assert w.created_at == 1767225600.0
    assert w.trace_context["traceparent"].startswith("00-")
    [ps] = w.podsets
    assert (ps.name, ps.count) == ("main", 4)
    assert ps.requests == {"cpu": 2000, "memory": 4 * GI, "nvidia.com/gpu": 8}
    assert ps.topology.required == "tidegate.io/rack"
    assert ps.node_selector == {"pool": "gpu"}
    assert [(t.key, t.operator, t.effect) for t in ps.tolerations] == [
        ("gpu", "Exists", "NoSchedule")
    ]
    p1 = pod(index, "train-1")
    assert (p1.workload, p1.podset, p1.rank) == ("default/train", "main", 1)


def test_job_pod_count_is_parallelism_at_most_completions(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "Job", k8s.job("a", parallelism=8, completions=3), k8s.job("b", parallelism=None))
    feed(index, "Pod", k8s.pod("a-0", owner=k8s.owner_ref("Job", "a")))
    feed(index, "Pod", k8s.pod("b-0", owner=k8s.owner_ref("Job", "b")))
    assert workload(index, "a").podsets[0].count == 3
    assert workload(index, "b").podsets[0].count == 1


def test_jobset_podsets_per_replicated_job_with_ranks(k8s: Any) -> None:
    index = ClusterIndex()
    leader_template = k8s.template(
        annotations={"kueue.x-k8s.io/podset-preferred-topology": "tidegate.io/block"}
    )
    jobset = k8s.jobset(
        "llm",
        [
            k8s.replicated_job("leader", replicas=1, parallelism=1, template=leader_template),
            k8s.replicated_job(
                "workers",
                replicas=2,
                parallelism=4,
                annotations={"kueue.x-k8s.io/podset-group-name": "g"},
            ),
        ],
        annotations={
            "tidegate.io/queue": "research",
            "kueue.x-k8s.io/podset-required-topology": "tidegate.io/rack",
        },
    )
    jobset_ref = k8s.owner_ref("JobSet", "llm", "jobset.x-k8s.io/v1alpha2")
    child = k8s.job("llm-workers-1", parallelism=4, owner=jobset_ref)
    worker = k8s.pod(
        "llm-workers-1-2",
        owner=k8s.owner_ref("Job", "llm-workers-1"),
        labels={
            "jobset.sigs.k8s.io/replicatedjob-name": "workers",
            "jobset.sigs.k8s.io/job-index": "1",
            "batch.kubernetes.io/job-completion-index": "2",
        },
    )
    feed(index, "JobSet", jobset)
    feed(index, "Job", child)
    feed(index, "Pod", worker)
    w = workload(index, "llm")
    assert w.invalid_reason is None
    assert (w.owner_kind, w.queue, w.service_type) == ("JobSet", "research", "training")
    leader, workers = w.podsets
    assert (leader.name, leader.count, leader.pods_per_index_group) == ("leader", 1, 1)
    assert (workers.name, workers.count, workers.pods_per_index_group) == ("workers", 8, 4)
    # The pod template's annotation wins over the JobSet's for per-podset settings ...
    assert leader.topology.preferred == "tidegate.io/block"
    assert leader.topology.required == "tidegate.io/rack"
    # ... and the JobSet's applies where the template says nothing.
    assert workers.topology.required == "tidegate.io/rack"
    assert workers.group == "g"
    p = pod(index, "llm-workers-1-2")
    assert (p.workload, p.podset, p.rank) == ("default/llm", "workers", 1 * 4 + 2)


def test_deployment_with_volcano_annotations(k8s: Any) -> None:
    index = ClusterIndex()
    template = k8s.template(
        annotations={
            "volcano.sh/card.name": "NVIDIA-GeForce-RTX-4090",
            "scheduling.volcano.sh/queue-name": "queue-inference",
        },
        priorityClassName="pc-high",
    )
    deployment = k8s.deployment(
        "inference-high",
        replicas=3,
        template=template,
        annotations={
            "volcano.sh/preemptable": "false",
            "volcano.sh/card.request": '{"NVIDIA-H200/mig-1g.18gb-mixed": 2}',
        },
    )
    feed(index, "PriorityClass", k8s.priority_class("pc-high", 80000))
    feed(index, "Deployment", deployment)
    feed(index, "ReplicaSet", k8s.replicaset("inference-high-abc", deployment="inference-high"))
    feed(
        index,
        "Pod",
        k8s.pod(
            "inference-high-abc-x",
            owner=k8s.owner_ref("ReplicaSet", "inference-high-abc", "apps/v1"),
        ),
    )
    w = workload(index, "inference-high")
    assert w.invalid_reason is None
    assert w.owner_kind == "Deployment"
    assert w.service_type == "inference"
    assert not w.preemptable
    assert w.queue == "queue-inference"
    assert w.card_request == {"NVIDIA-H200/mig-1g.18gb-mixed": 2}
    assert (w.priority, w.priority_class) == (80000, "pc-high")
    [ps] = w.podsets
    assert (ps.name, ps.count, ps.card_name) == ("main", 3, "NVIDIA-GeForce-RTX-4090")
    assert pod(index, "inference-high-abc-x").workload == "default/inference-high"


def test_explicit_volcano_service_type_beats_the_owner_kind_map(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "Job", k8s.job("serve", annotations={"volcano.sh/service.type": "inference"}))
    feed(index, "Pod", k8s.pod("serve-0", owner=k8s.owner_ref("Job", "serve")))
    assert workload(index, "serve").service_type == "inference"


def test_the_owner_kind_map_is_configurable_and_unknown_stays_unknown(k8s: Any) -> None:
    index = ClusterIndex(owner_kind_service_types={"Job": "inference"})
    feed(index, "Job", k8s.job("j"))
    feed(index, "Pod", k8s.pod("j-0", owner=k8s.owner_ref("Job", "j")), k8s.pod("bare"))
    assert workload(index, "j").service_type == "inference"
    assert workload(index, "bare").service_type == "unknown"


def test_podgroup_roles_min_member_ranks_and_spec(k8s: Any) -> None:
    index = ClusterIndex()
    group = {"scheduling.k8s.io/group-name": "gang"}
    feed(index, "PriorityClass", k8s.priority_class("low", 20000))
    feed(
        index,
        "PodGroup",
        k8s.podgroup("gang", min_member=3, queue="training", priority_class="low"),
    )
    feed(
        index,
        "Pod",
        k8s.pod("leader", labels={**group, "tidegate.io/role": "leader"}),
        k8s.pod("w0", labels={**group, "tidegate.io/role": "worker", "tidegate.io/pod-index": "0"}),
        k8s.pod(
            "w1",
            annotations=group,
            labels={"tidegate.io/role": "worker", "tidegate.io/pod-index": "1"},
        ),
    )
    w = workload(index, "gang")
    assert w.invalid_reason is None
    assert (w.owner_kind, w.owner_api_version) == ("PodGroup", "tidegate.io/v1alpha1")
    assert (w.min_members, w.queue, w.priority, w.priority_class) == (3, "training", 20000, "low")
    assert [(ps.name, ps.count) for ps in w.podsets] == [("leader", 1), ("worker", 2)]
    w1 = pod(index, "w1")
    assert (w1.workload, w1.podset, w1.rank) == ("default/gang", "worker", 1)


def test_podgroup_members_without_roles_are_grouped_by_shape(k8s: Any) -> None:
    index = ClusterIndex()
    group = {"scheduling.x-k8s.io/pod-group": "g"}
    feed(index, "PodGroup", k8s.podgroup("g", min_member=3))
    big = [k8s.container(cpu="4")]
    feed(
        index,
        "Pod",
        k8s.pod("a", labels=group),
        k8s.pod("b", labels=group),
        k8s.pod("c", labels=group, containers=big),
    )
    counts = sorted((ps.count, ps.requests["cpu"]) for ps in workload(index, "g").podsets)
    assert counts == [(1, 4000), (2, 1000)]
    assert all(ps.name.startswith("pods-") for ps in workload(index, "g").podsets)


def test_podgroup_members_without_roles_stay_one_podset_after_their_release(k8s: Any) -> None:
    """deploy/examples/podgroup.yaml: members with no tidegate.io/role. The ungater's release
    adds the slot's levels (and the GPU product) to each pod's nodeSelector; that must neither
    split the gang into one-pod podsets nor pin its podset to a host."""
    index = ClusterIndex()
    levels = ["tidegate.io/block", "tidegate.io/rack", "kubernetes.io/hostname"]
    feed(index, "Topology", k8s.topology("default", levels))
    group = {"scheduling.k8s.io/group-name": "pair"}
    feed(index, "PodGroup", k8s.podgroup("pair", min_member=2, queue="offline"))
    own = {"pool": "gpu"}

    def member(i: int, host: str | None) -> dict[str, Any]:
        labels = {**group, "tidegate.io/pod-index": str(i)}
        if host is None:
            return k8s.pod(f"pair-{i}", labels=labels, nodeSelector=own)
        released = {
            **own,
            "tidegate.io/block": "b0",
            "tidegate.io/rack": "b0-r0",
            "kubernetes.io/hostname": host,
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        }
        return k8s.pod(f"pair-{i}", labels=labels, gated=False, nodeSelector=released)

    feed(index, "Pod", member(0, None), member(1, None))
    before = workload(index, "pair")
    assert [(ps.count, ps.node_selector) for ps in before.podsets] == [(2, own)]
    podset = before.podsets[0].name
    assert [pod(index, f"pair-{i}").podset for i in (0, 1)] == [podset, podset]

    # The ungater releases them onto two hosts.
    for obj in (member(0, "b0-r0-n0"), member(1, "b0-r0-n1")):
        assert index.apply("Pod", "MODIFIED", obj).problems == []
    after = workload(index, "pair")
    assert [(ps.name, ps.count, ps.node_selector) for ps in after.podsets] == [(podset, 2, own)]
    assert [(pod(index, f"pair-{i}").podset, pod(index, f"pair-{i}").rank) for i in (0, 1)] == [
        (podset, 0),
        (podset, 1),
    ]


def test_bare_pod_is_a_workload_of_one(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "Pod", k8s.pod("solo", labels={"tidegate.io/queue": "q"}))
    w = workload(index, "solo")
    assert (w.owner_kind, w.owner_api_version, w.uid, w.queue) == ("Pod", "v1", "uid-solo", "q")
    assert [(ps.name, ps.count) for ps in w.podsets] == [("main", 1)]
    assert pod(index, "solo").podset == "main"


def test_pods_of_an_owner_kind_tidegate_does_not_read_are_grouped_by_it(k8s: Any) -> None:
    index = ClusterIndex()
    owner = k8s.owner_ref("StatefulSet", "db", "apps/v1")
    feed(index, "Pod", k8s.pod("db-0", owner=owner), k8s.pod("db-1", owner=owner))
    w = workload(index, "db")
    assert (w.owner_kind, w.uid) == ("StatefulSet", "uid-db")
    assert sum(ps.count for ps in w.podsets) == 2


# --------------------------------------------------------------------------- annotation families


def test_tidegate_annotations(k8s: Any) -> None:
    index = ClusterIndex(profiles=["best-fit", "spread"])
    job = k8s.job(
        "t",
        parallelism=8,
        annotations={
            "tidegate.io/queue": "q",
            "tidegate.io/topology": "dc",
            "tidegate.io/topology-required": "tidegate.io/block",
            "tidegate.io/topology-preferred": "tidegate.io/rack",
            "tidegate.io/slice-size": "4",
            "tidegate.io/slice-topology": "tidegate.io/rack",
            "tidegate.io/placement-profile": "spread",
            "tidegate.io/on-preemption": "abort",
            "tidegate.io/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        },
    )
    feed(index, "Job", job)
    feed(index, "Pod", k8s.pod("t-0", owner=k8s.owner_ref("Job", "t")))
    w = workload(index, "t")
    assert w.invalid_reason is None
    assert (w.queue, w.topology, w.profile, w.on_preemption) == ("q", "dc", "spread", "abort")
    assert w.trace_context == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }
    request = w.podsets[0].topology
    assert (request.required, request.preferred) == ("tidegate.io/block", "tidegate.io/rack")
    assert (request.slice_size, request.slice_required) == (4, "tidegate.io/rack")


def test_kueue_slice_annotations_and_unconstrained(k8s: Any) -> None:
    index = ClusterIndex()
    sliced = k8s.template(
        annotations={
            "kueue.x-k8s.io/podset-slice-required-topology": "tidegate.io/rack",
            "kueue.x-k8s.io/podset-slice-size": "2",
            "kueue.x-k8s.io/podset-required-topology": "tidegate.io/block",
        }
    )
    free = k8s.template(annotations={"kueue.x-k8s.io/podset-unconstrained-topology": "true"})
    feed(index, "Job", k8s.job("s", parallelism=4, template=sliced), k8s.job("u", template=free))
    feed(index, "Pod", k8s.pod("s-0", owner=k8s.owner_ref("Job", "s")))
    feed(index, "Pod", k8s.pod("u-0", owner=k8s.owner_ref("Job", "u")))
    s = workload(index, "s").podsets[0].topology
    assert (s.required, s.slice_required, s.slice_size) == (
        "tidegate.io/block",
        "tidegate.io/rack",
        2,
    )
    u = workload(index, "u")
    assert u.invalid_reason is None
    assert u.podsets[0].topology.unconstrained


@pytest.mark.parametrize(
    ("annotation", "field"),
    [
        ("kueue.x-k8s.io/require-topology", "required"),
        ("kueue.x-k8s.io/prefer-topology", "preferred"),
    ],
)
def test_older_kueue_annotations_including_auto(k8s: Any, annotation: str, field: str) -> None:
    index = ClusterIndex()
    feed(index, "Job", k8s.job("old", annotations={annotation: "auto"}))
    feed(index, "Pod", k8s.pod("old-0", owner=k8s.owner_ref("Job", "old")))
    w = workload(index, "old")
    assert w.invalid_reason is None
    assert getattr(w.podsets[0].topology, field) == "auto"


def test_kai_annotations_with_short_level_names_resolved_by_the_topology(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "Topology", k8s.topology("network", ["example.com/zone", "example.com/rack"]))
    job = k8s.job(
        "kai",
        annotations={
            "kai.scheduler/topology": "network",
            "kai.scheduler/topology-required-placement": "zone",
            "kai.scheduler/topology-preferred-placement": "example.com/rack",
        },
    )
    feed(index, "Job", job)
    feed(index, "Pod", k8s.pod("kai-0", owner=k8s.owner_ref("Job", "kai")))
    w = workload(index, "kai")
    assert w.invalid_reason is None
    assert w.topology == "network"
    request = w.podsets[0].topology
    assert (request.required, request.preferred) == ("example.com/zone", "example.com/rack")


def test_kueue_topology_objects_count_as_topologies(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "KueueTopology", k8s.topology("default", ["cloud/block", "cloud/rack"], kueue=True))
    message = index.desired(StateKey("topology", None, "default")).message
    assert message is not None
    assert message.levels == ["cloud/block", "cloud/rack"]  # type: ignore[union-attr]


# --------------------------------------------------------------------------- priorities


def test_priority_from_class_global_default_and_unknown_class(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "PriorityClass", k8s.priority_class("normal", 1000, global_default=True))
    feed(
        index,
        "Job",
        k8s.job("plain"),
        k8s.job("ghost", template=k8s.template(priorityClassName="no-such-class")),
    )
    feed(index, "Pod", k8s.pod("plain-0", owner=k8s.owner_ref("Job", "plain")))
    feed(index, "Pod", k8s.pod("ghost-0", owner=k8s.owner_ref("Job", "ghost")))
    assert (workload(index, "plain").priority, workload(index, "plain").priority_class) == (
        1000,
        None,
    )
    ghost = workload(index, "ghost")
    assert (ghost.priority, ghost.priority_class, ghost.invalid_reason) == (
        0,
        "no-such-class",
        None,
    )
    # A class created later is picked up: PriorityClass events re-recognize managed workloads.
    applied = index.apply("PriorityClass", "ADDED", k8s.priority_class("no-such-class", 7))
    assert StateKey("workload", "default", "ghost") in applied.affected
    assert workload(index, "ghost").priority == 7


# --------------------------------------------------------------------------- malformed input


MALFORMED = [
    (
        {"volcano.sh/card.request": "{NVIDIA-H200: 2"},
        "annotation volcano.sh/card.request on Job default/bad: '{NVIDIA-H200: 2' is not valid JSON",
    ),
    (
        {"volcano.sh/card.request": '{"NVIDIA-H200": -2}'},
        "annotation volcano.sh/card.request on Job default/bad: count -2 for NVIDIA-H200 is negative",
    ),
    (
        {"volcano.sh/card.request": '["NVIDIA-H200"]'},
        "is not a JSON object of card model to count",
    ),
    (
        {"tidegate.io/slice-size": "-4", "tidegate.io/slice-topology": "r"},
        "annotation tidegate.io/slice-size on Job default/bad: '-4' is not positive",
    ),
    (
        {
            "kueue.x-k8s.io/podset-slice-size": "two",
            "kueue.x-k8s.io/podset-slice-required-topology": "r",
        },
        "annotation kueue.x-k8s.io/podset-slice-size on Job default/bad: 'two' is not an integer",
    ),
    (
        {"kueue.x-k8s.io/podset-slice-required-topology": "r"},
        "annotation kueue.x-k8s.io/podset-slice-required-topology on Job default/bad is set but no slice size is given",
    ),
    (
        {
            "kueue.x-k8s.io/podset-unconstrained-topology": "true",
            "kueue.x-k8s.io/podset-required-topology": "r",
        },
        "is true but the podset also asks for a topology level",
    ),
    (
        {"kueue.x-k8s.io/podset-unconstrained-topology": "maybe"},
        "annotation kueue.x-k8s.io/podset-unconstrained-topology on Job default/bad: 'maybe' is not true or false",
    ),
    (
        {"volcano.sh/service.type": "batch"},
        "annotation volcano.sh/service.type on Job default/bad: 'batch' is not inference or training",
    ),
    (
        {"volcano.sh/preemptable": "nope"},
        "annotation volcano.sh/preemptable on Job default/bad: 'nope' is not true or false",
    ),
    (
        {"tidegate.io/on-preemption": "explode"},
        "annotation tidegate.io/on-preemption on Job default/bad: 'explode' is not restart or abort",
    ),
    (
        {"tidegate.io/placement-profile": "tetris"},
        "annotation tidegate.io/placement-profile on Job default/bad: 'tetris' is not a placement profile",
    ),
    (
        {"tidegate.io/topology": "dc", "tidegate.io/topology-required": "example.com/row"},
        "annotation tidegate.io/topology-required on Job default/bad: 'example.com/row' is not a level of Topology dc",
    ),
    (
        {"kai.scheduler/topology": "dc", "kai.scheduler/topology-preferred-placement": "shelf"},
        "annotation kai.scheduler/topology-preferred-placement on Job default/bad: 'shelf' is not a level of Topology dc",
    ),
    (
        {"tidegate.io/topology-required": "  "},
        "annotation tidegate.io/topology-required on Job default/bad: '  ' is not a topology level",
    ),
    ({"tidegate.io/queue": ""}, "annotation tidegate.io/queue on Job default/bad is empty"),
]


@pytest.mark.parametrize(("annotations", "expected"), MALFORMED)
def test_malformed_annotations_mark_that_workload_and_nothing_else(
    k8s: Any, annotations: dict[str, str], expected: str
) -> None:
    index = ClusterIndex(profiles=["best-fit", "spread"])
    feed(index, "Topology", k8s.topology("dc", ["example.com/block", "example.com/rack"]))
    feed(index, "Job", k8s.job("bad", annotations=annotations), k8s.job("good"))
    feed(index, "Pod", k8s.pod("bad-0", owner=k8s.owner_ref("Job", "bad")))
    feed(index, "Pod", k8s.pod("good-0", owner=k8s.owner_ref("Job", "good")))
    bad = workload(index, "bad")
    assert bad.invalid_reason is not None
    assert expected in bad.invalid_reason
    assert workload(index, "good").invalid_reason is None
    assert pod(index, "bad-0").workload == "default/bad"


def test_malformed_specs_and_index_labels(k8s: Any) -> None:
    index = ClusterIndex()
    feed(index, "PodGroup", k8s.podgroup("zero", min_member=0))
    feed(
        index,
        "Pod",
        k8s.pod(
            "m",
            labels={"scheduling.k8s.io/group-name": "zero", "tidegate.io/pod-index": "first"},
            containers=[k8s.container(cpu="a lot")],
        ),
    )
    reason = workload(index, "zero").invalid_reason
    assert reason is not None
    assert "PodGroup default/zero: spec.minMember 0 is not positive" in reason
    assert "tidegate.io/pod-index on Pod default/m: 'first' is not an integer" in reason
    assert (
        "Pod default/m spec: containers[0].resources.requests.cpu: 'a lot' is not a quantity"
        in reason
    )
    # An owner whose spec has the wrong type is still a workload, marked invalid.
    job = k8s.job("typo")
    job["spec"]["parallelism"] = "four"
    feed(index, "Job", job)
    feed(index, "Pod", k8s.pod("typo-0", owner=k8s.owner_ref("Job", "typo")))
    assert (
        workload(index, "typo").invalid_reason
        == "Job default/typo: spec.parallelism: expected int | null, got str"
    )


def test_unreadable_objects_are_reported_not_raised(k8s: Any) -> None:
    index = ClusterIndex()
    applied = index.apply("Pod", "ADDED", {"metadata": {"namespace": "x"}})
    assert applied.problems == [
        "Pod: unreadable object (metadata: object missing required field name)"
    ]
    broken = k8s.pod("p")
    broken["spec"]["containers"] = "none"
    applied = index.apply("Pod", "ADDED", broken)
    assert applied.problems == ["Pod default/p: spec.containers: expected array, got str"]
