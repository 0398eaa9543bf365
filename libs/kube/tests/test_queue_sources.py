"""Queues and cohorts read from tidegate, Kueue, Volcano and KAI objects (docs/queues.md,
"Mapping from Kueue, Volcano and KAI"), through the index as the watcher feeds it."""

from typing import Any

from tidegate.kube.read.index import ClusterIndex, ObjectKind, StateKey
from tidegate.model.events import CohortConfig, QueueConfig, QueuePreemption, WorkloadState
from tidegate.policy.queuetree import QueueTree, check_admission
from tidegate.policy.quota import QuotaRequest

GI = 1024**3
KUEUE = "kueue.x-k8s.io/v1beta1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
KAI = "scheduling.run.ai/v2"


def queue(index: ClusterIndex, name: str) -> QueueConfig:
    message = index.desired(StateKey("queue", None, name)).message
    assert isinstance(message, QueueConfig), message
    return message


def cohort(index: ClusterIndex, name: str) -> CohortConfig:
    message = index.desired(StateKey("cohort", None, name)).message
    assert isinstance(message, CohortConfig), message
    return message


def load(index: ClusterIndex, *objects: tuple[ObjectKind, dict[str, Any]]) -> set[StateKey]:
    affected: set[StateKey] = set()
    for kind, obj in objects:
        affected |= index.apply(kind, "ADDED", obj).affected
    return affected


def test_a_tidegate_queue_and_cohort_carry_their_tree_fields(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        (
            "Queue",
            k8s.queue(
                "team-a",
                {
                    "cohort": "research",
                    "nominalQuota": {"nvidia.com/gpu": "16"},
                    "borrowingLimit": {"nvidia.com/gpu": 4},
                    "lendingLimit": {"nvidia.com/gpu": "12"},
                    "cardNominalQuota": {"NVIDIA-H200": 8},
                    "cardLendingLimit": {"NVIDIA-H200": 2},
                    "fairSharing": {"weight": "500m"},
                    "preemption": {
                        "reclaimWithinCohort": "LowerPriority",
                        "borrowWithinCohort": {
                            "policy": "LowerPriority",
                            "maxPriorityThreshold": 5,
                        },
                        "withinClusterQueue": "LowerOrNewerEqualPriority",
                    },
                },
            ),
        ),
        (
            "Cohort",
            k8s.custom(
                "tidegate.io/v1alpha1",
                "Cohort",
                "research",
                {
                    "parent": "org",
                    "capability": {"nvidia.com/gpu": "32"},
                    "nominalQuota": {"cpu": 8},
                },
            ),
        ),
    )
    team = queue(index, "team-a")
    assert team.invalid_reason is None
    assert team.parent == "research"
    assert (team.nominal, team.borrowing_limit, team.lending_limit) == (
        {"nvidia.com/gpu": 16},
        {"nvidia.com/gpu": 4},
        {"nvidia.com/gpu": 12},
    )
    assert (team.card_nominal, team.card_lending_limit) == ({"NVIDIA-H200": 8}, {"NVIDIA-H200": 2})
    assert team.fair_weight == 0.5
    assert team.preemption == QueuePreemption(
        reclaim_within_cohort="LowerPriority",
        borrow_within_cohort="LowerPriority",
        max_priority_threshold=5,
        within_cluster_queue="LowerOrNewerEqualPriority",
    )
    research = cohort(index, "research")
    assert (research.parent, research.quota, research.nominal) == (
        "org",
        {"nvidia.com/gpu": 32},
        {"cpu": 8000},
    )
    assert research.invalid_reason is None


def test_malformed_tree_fields_mark_only_that_node_invalid_naming_the_field(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        ("Queue", k8s.queue("bad", {"cohort": "c", "preemption": {"reclaimWithinCohort": "Al"}})),
        ("Queue", k8s.queue("heavy", {"fairSharing": {"weight": "-1"}})),
        ("Queue", k8s.queue("good", {"cohort": "c", "nominalQuota": {"cpu": "2"}})),
        ("Cohort", k8s.custom("tidegate.io/v1alpha1", "Cohort", "c", {"nominalQuota": "x"})),
    )
    assert queue(index, "bad").invalid_reason == (
        "Queue bad: spec.preemption.reclaimWithinCohort: 'Al' is not one of Never, "
        "LowerPriority, Any"
    )
    assert queue(index, "heavy").invalid_reason == (
        "Queue heavy: spec.fairSharing.weight: '-1' is negative"
    )
    assert queue(index, "good").invalid_reason is None
    assert cohort(index, "c").invalid_reason == (
        "Cohort c: spec.nominalQuota: expected object | null, got str"
    )


def test_a_kueue_cluster_queue_sums_its_flavors_and_keeps_its_policies(k8s: Any) -> None:
    index = ClusterIndex()
    spec = {
        "cohort": "org",
        "queueingStrategy": "StrictFIFO",
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": "h200",
                        "resources": [
                            {"name": "cpu", "nominalQuota": 9, "borrowingLimit": "1"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 8, "lendingLimit": 2},
                        ],
                    },
                    {
                        "name": "a100",
                        "resources": [
                            {"name": "cpu", "nominalQuota": "500m", "borrowingLimit": "1"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 4},
                        ],
                    },
                ],
            }
        ],
        "fairSharing": {"weight": "2"},
        "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    }
    load(index, ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "cq", spec)))
    cq = queue(index, "cq")
    assert cq.invalid_reason is None
    assert (cq.parent, cq.strategy, cq.fair_weight) == ("org", "StrictFIFO", 2.0)
    assert cq.nominal == {"cpu": 9500, "nvidia.com/gpu": 12}
    assert cq.borrowing_limit == {"cpu": 2000}
    # One flavor of the GPUs names no lending limit: all of its quota may be lent.
    assert cq.lending_limit is None
    assert cq.preemption.reclaim_within_cohort == "Any"
    assert cq.preemption.within_cluster_queue == "LowerPriority"
    assert (cq.quota, cq.card_quota, cq.priority) == (None, None, 0)


def flavor(k8s: Any, name: str, labels: dict[str, str]) -> tuple[ObjectKind, dict[str, Any]]:
    return (
        "KueueResourceFlavor",
        k8s.custom(KUEUE, "ResourceFlavor", name, {"nodeLabels": labels}),
    )


def gpu_flavors(*flavors: tuple[str, Any, Any, Any]) -> dict[str, Any]:
    """A resourceGroups spec with one ``nvidia.com/gpu`` quota per (flavor, nominal, borrowing
    limit, lending limit); a None limit is not named."""
    return {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": name,
                        "resources": [
                            {
                                "name": "nvidia.com/gpu",
                                "nominalQuota": nominal,
                                **({"borrowingLimit": borrow} if borrow is not None else {}),
                                **({"lendingLimit": lend} if lend is not None else {}),
                            }
                        ],
                    }
                    for name, nominal, borrow, lend in flavors
                ],
            }
        ]
    }


def test_a_flavor_pinning_a_gpu_product_makes_its_gpu_quota_a_card_quota_of_that_model(
    k8s: Any,
) -> None:
    """Kueue ResourceFlavors with ``nvidia.com/gpu.product`` in their nodeLabels: that
    flavor's nvidia.com/gpu quota is also the card quota of the model (per model, the limits
    by the summing rule); it still counts in nvidia.com/gpu, which bounds workloads naming no
    model; flavors pinning no product stay plain resource quotas."""
    index = ClusterIndex()
    spec = gpu_flavors(
        ("h200", 8, 4, 2),
        ("h200-spot", 2, 1, None),
        ("a100", 6, None, 6),
        ("plain", 3, 1, 1),
    )
    load(
        index,
        flavor(k8s, "h200", {"nvidia.com/gpu.product": "NVIDIA-H200", "zone": "a"}),
        flavor(k8s, "h200-spot", {"nvidia.com/gpu.product": "NVIDIA-H200"}),
        flavor(k8s, "a100", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}),
        flavor(k8s, "plain", {"zone": "b"}),
        ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "cq", {"cohort": "org", **spec})),
        ("KueueCohort", k8s.custom(KUEUE, "Cohort", "org", gpu_flavors(("h200", 0, None, None)))),
    )
    cq = queue(index, "cq")
    assert cq.invalid_reason is None
    assert cq.card_nominal == {"NVIDIA-H200": 10, "NVIDIA-A100-SXM4-40GB": 6}
    assert cq.card_borrowing_limit == {"NVIDIA-H200": 5}  # the A100 flavor names none
    assert cq.card_lending_limit == {"NVIDIA-A100-SXM4-40GB": 6}  # h200-spot names none
    assert (cq.nominal, cq.borrowing_limit, cq.lending_limit) == (
        {"nvidia.com/gpu": 19},
        None,
        None,
    )
    org = cohort(index, "org")
    assert (org.card_nominal, org.nominal) == ({"NVIDIA-H200": 0}, {"nvidia.com/gpu": 0})


def test_a_resource_flavor_change_republishes_the_queues_that_use_it(k8s: Any) -> None:
    index = ClusterIndex()
    spec = gpu_flavors(("gpus", 4, None, None))
    load(index, ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "cq", spec)))
    assert queue(index, "cq").card_nominal is None  # no such ResourceFlavor yet: plain quota
    affected = load(index, flavor(k8s, "gpus", {"nvidia.com/gpu.product": "NVIDIA-H200"}))
    assert StateKey("queue", None, "cq") in affected
    assert queue(index, "cq").card_nominal == {"NVIDIA-H200": 4}
    relabelled = k8s.custom(
        KUEUE, "ResourceFlavor", "gpus", {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-B200"}}
    )
    assert (
        StateKey("queue", None, "cq")
        in index.apply("KueueResourceFlavor", "MODIFIED", relabelled).affected
    )
    assert queue(index, "cq").card_nominal == {"NVIDIA-B200": 4}
    index.apply("KueueResourceFlavor", "DELETED", relabelled)
    assert queue(index, "cq").card_nominal is None
    assert queue(index, "cq").nominal == {"nvidia.com/gpu": 4}
    # A ResourceFlavor is not a queue of its own.
    assert index.state_keys() == {StateKey("queue", None, "cq")}


def test_kueue_cohorts_and_later_api_versions_field_names(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        (
            "KueueClusterQueue",
            k8s.custom("kueue.x-k8s.io/v1beta2", "ClusterQueue", "cq", {"cohortName": "a"}),
        ),
        (
            "KueueCohort",
            k8s.custom(
                KUEUE,
                "Cohort",
                "a",
                {
                    "parentName": "root",
                    "resourceGroups": [
                        {
                            "flavors": [
                                {
                                    "name": "f",
                                    "resources": [{"name": "memory", "nominalQuota": "1Gi"}],
                                }
                            ]
                        }
                    ],
                    "fairSharing": {"weight": 3},
                },
            ),
        ),
        ("KueueCohort", k8s.custom("kueue.x-k8s.io/v1alpha1", "Cohort", "root", {"parent": None})),
        ("KueueCohort", k8s.custom(KUEUE, "Cohort", "old", {"parent": "root"})),
    )
    assert queue(index, "cq").parent == "a"
    a = cohort(index, "a")
    assert (a.parent, a.nominal, a.fair_weight) == ("root", {"memory": GI}, 3.0)
    assert cohort(index, "root").parent is None
    assert cohort(index, "old").parent == "root"


def test_a_malformed_kueue_object_is_an_invalid_queue_and_the_rest_go_on(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "broken", {"resourceGroups": {}})),
        (
            "KueueClusterQueue",
            k8s.custom(
                KUEUE,
                "ClusterQueue",
                "badq",
                {
                    "resourceGroups": [
                        {"flavors": [{"resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}
                    ]
                },
            ),
        ),
        ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "fine", {})),
    )
    assert queue(index, "broken").invalid_reason == (
        "Kueue ClusterQueue broken: spec.resourceGroups: expected array, got object"
    )
    assert queue(index, "badq").invalid_reason == (
        "Kueue ClusterQueue badq: spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
        "'lots' is not a quantity"
    )
    assert queue(index, "fine").invalid_reason is None


def test_a_kueue_label_naming_a_local_queue_queues_the_workload_in_its_cluster_queue(
    k8s: Any,
) -> None:
    index = ClusterIndex()
    job = k8s.job("train", labels={"kueue.x-k8s.io/queue-name": "team-lq"})
    job["spec"]["suspend"] = True
    other = k8s.job("plain", labels={"kueue.x-k8s.io/queue-name": "cq"})
    other["spec"]["suspend"] = True
    load(index, ("Job", job), ("Job", other))
    workload = index.desired(StateKey("workload", "default", "train")).message
    assert isinstance(workload, WorkloadState)
    assert workload.queue == "team-lq"  # no LocalQueue yet: the name as given

    local = k8s.custom(KUEUE, "LocalQueue", "team-lq", {"clusterQueue": "cq"}, namespace="default")
    affected = index.apply("KueueLocalQueue", "ADDED", local).affected
    assert StateKey("workload", "default", "train") in affected
    workload = index.desired(StateKey("workload", "default", "train")).message
    assert isinstance(workload, WorkloadState)
    assert workload.queue == "cq"
    plain = index.desired(StateKey("workload", "default", "plain")).message
    assert isinstance(plain, WorkloadState)
    assert plain.queue == "cq"
    # A LocalQueue is not a queue of its own, and another namespace's is not consulted.
    assert StateKey("queue", None, "team-lq") not in index.state_keys()

    index.apply("KueueLocalQueue", "DELETED", local)
    workload = index.desired(StateKey("workload", "default", "train")).message
    assert isinstance(workload, WorkloadState)
    assert workload.queue == "team-lq"


def test_a_tidegate_queue_label_is_never_read_as_a_local_queue(k8s: Any) -> None:
    index = ClusterIndex()
    job = k8s.job("train", labels={"tidegate.io/queue": "team-lq"})
    job["spec"]["suspend"] = True
    load(
        index,
        ("Job", job),
        (
            "KueueLocalQueue",
            k8s.custom(KUEUE, "LocalQueue", "team-lq", {"clusterQueue": "cq"}, namespace="default"),
        ),
    )
    workload = index.desired(StateKey("workload", "default", "train")).message
    assert isinstance(workload, WorkloadState)
    assert workload.queue == "team-lq"


def test_volcano_queues_map_deserved_guarantee_capability_weight_and_card_quota(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        (
            "VolcanoQueue",
            k8s.custom(
                VOLCANO,
                "Queue",
                "research",
                {
                    "weight": 3,
                    "reclaimable": False,
                    "priority": 7,
                    "capability": {"nvidia.com/gpu": 24},
                    "deserved": {"nvidia.com/gpu": 16, "cpu": "8"},
                    "guarantee": {"resource": {"nvidia.com/gpu": 4}},
                },
                annotations={"volcano.sh/card.quota": '{"NVIDIA-H200": 16}'},
            ),
        ),
    )
    research = queue(index, "research")
    assert research.invalid_reason is None
    assert (research.fair_weight, research.reclaimable, research.priority) == (3.0, False, 7)
    assert research.quota == {"nvidia.com/gpu": 24}
    assert research.nominal == {"nvidia.com/gpu": 16, "cpu": 8000}
    assert research.lending_limit == {"nvidia.com/gpu": 12}  # the guarantee is never lent
    assert research.card_quota == {"NVIDIA-H200": 16}
    assert research.parent == "root"  # Volcano's root queue: see the tests below


def test_a_volcano_parent_queue_is_a_cohort_holding_what_its_children_are_not_given(
    k8s: Any,
) -> None:
    index = ClusterIndex()
    load(
        index,
        (
            "VolcanoQueue",
            k8s.custom(VOLCANO, "Queue", "root", {"deserved": {"nvidia.com/gpu": 32}}),
        ),
        (
            "VolcanoQueue",
            k8s.custom(
                VOLCANO, "Queue", "a", {"parent": "root", "deserved": {"nvidia.com/gpu": 16}}
            ),
        ),
    )
    assert cohort(index, "root").nominal == {"nvidia.com/gpu": 16}
    assert index.desired(StateKey("queue", None, "root")).message is None
    # A second child: the root's own share shrinks, and both keys are looked at again.
    affected = index.apply(
        "VolcanoQueue",
        "ADDED",
        k8s.custom(VOLCANO, "Queue", "b", {"parent": "root", "deserved": {"nvidia.com/gpu": 20}}),
    ).affected
    assert StateKey("cohort", None, "root") in affected
    root = cohort(index, "root")
    assert root.invalid_reason == (
        "Volcano Queue root: its children (a, b) are guaranteed 36 nvidia.com/gpu in all, "
        "more than its own 32"
    )
    assert queue(index, "a").parent == "root"
    assert queue(index, "a").invalid_reason is None


def gpu_node(k8s: Any, name: str, gpus: int) -> tuple[ObjectKind, dict[str, Any]]:
    return ("Node", k8s.node(name, allocatable={"cpu": "64", "nvidia.com/gpu": str(gpus)}))


def test_volcano_queues_naming_no_parent_share_the_cluster_under_volcanos_root(
    k8s: Any,
) -> None:
    """As in Volcano, whose root queue is every queue's parent and holds the cluster: a queue
    may use more than it deserves while the others leave room, and one that deserves nothing
    still gets the rest of the cluster (the pool is the cluster, not the deserved amounts)."""
    index = ClusterIndex()
    load(
        index,
        gpu_node(k8s, "n1", 8),
        gpu_node(k8s, "n2", 8),
        (
            "VolcanoQueue",
            k8s.custom(
                VOLCANO, "Queue", "team", {"deserved": {"nvidia.com/gpu": 4}, "capability": {}}
            ),
        ),
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "default", {"weight": 1})),
    )
    assert (queue(index, "team").parent, queue(index, "default").parent) == ("root", "root")
    root = cohort(index, "root")
    assert (root.nominal, root.parent, root.invalid_reason) == ({"nvidia.com/gpu": 12}, None, None)
    desired = index.desired(StateKey("cohort", None, "root"))
    assert desired.uid is None
    assert index.desired(StateKey("queue", None, "root")).message is None

    tree = QueueTree.build([queue(index, "team"), queue(index, "default")], [root])
    gpus = QuotaRequest(resources={"nvidia.com/gpu": 16})
    for name in ("team", "default"):
        assert check_admission(tree, {}, name, gpus).fits, name
    assert not check_admission(
        tree, {}, "team", QuotaRequest(resources={"nvidia.com/gpu": 17})
    ).fits

    # A node more: the root holds it too, and is looked at again.
    affected = load(index, gpu_node(k8s, "n3", 8))
    assert StateKey("cohort", None, "root") in affected
    assert cohort(index, "root").nominal == {"nvidia.com/gpu": 20}
    # Volcano's own root queue object: its deserved where it names one, the cluster elsewhere.
    load(
        index,
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "root", {"deserved": {"cpu": "10"}})),
    )
    root = cohort(index, "root")
    assert root.nominal == {"nvidia.com/gpu": 20, "cpu": 10000}
    assert root.invalid_reason is None
    # The same when every queue names root as its parent.
    index = ClusterIndex()
    load(
        index,
        gpu_node(k8s, "n1", 8),
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "root", {"deserved": {"cpu": "10"}})),
        (
            "VolcanoQueue",
            k8s.custom(
                VOLCANO, "Queue", "team", {"parent": "root", "deserved": {"nvidia.com/gpu": 2}}
            ),
        ),
    )
    assert cohort(index, "root").nominal == {"nvidia.com/gpu": 6, "cpu": 10000}


def test_volcano_queues_naming_no_deserved_share_nothing_and_stay_as_they_are(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        gpu_node(k8s, "n1", 8),
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "a", {"capability": {"cpu": "4"}})),
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "b", {"weight": 2})),
    )
    assert (queue(index, "a").parent, queue(index, "b").parent) == (None, None)
    assert index.state_keys() == {
        StateKey("node", None, "n1"),
        StateKey("queue", None, "a"),
        StateKey("queue", None, "b"),
    }


def test_kais_top_level_queues_share_the_cluster_and_a_zero_quota_queue_still_runs(
    k8s: Any,
) -> None:
    """KAI's quickstart queues (quota 0, limit -1) run on whatever is idle: KAI divides the
    cluster among its top-level queues. Quotas above the cluster leave the root nothing of its
    own, which is no error (not every guarantee can be met at once)."""
    index = ClusterIndex()
    unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    everything = {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}
    load(
        index,
        gpu_node(k8s, "n1", 8),
        ("KaiQueue", k8s.custom(KAI, "Queue", "default-parent-queue", {"resources": everything})),
        (
            "KaiQueue",
            k8s.custom(
                KAI,
                "Queue",
                "default-queue",
                {"parentQueue": "default-parent-queue", "resources": everything},
            ),
        ),
    )
    assert cohort(index, "default-parent-queue").parent == "kai-root"
    root = cohort(index, "kai-root")
    assert root.nominal == {"nvidia.com/gpu": 8, "cpu": 64000, "memory": 0}
    assert index.desired(StateKey("cohort", None, "kai-root")).problems == ()
    tree = QueueTree.build(
        [queue(index, "default-queue")], [root, cohort(index, "default-parent-queue")]
    )
    request = QuotaRequest(resources={"nvidia.com/gpu": 8, "cpu": 8000})
    assert check_admission(tree, {}, "default-queue", request).fits

    load(
        index,
        (
            "KaiQueue",
            k8s.custom(KAI, "Queue", "greedy", {"resources": {"gpu": {"quota": 12}}}),
        ),
    )
    root = cohort(index, "kai-root")
    assert (root.nominal, root.invalid_reason) == (
        {"nvidia.com/gpu": 0, "cpu": 64000, "memory": 0},
        None,
    )


def test_kai_queues_map_quota_limit_weight_and_parent_in_kai_units(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        (
            "KaiQueue",
            k8s.custom(
                KAI,
                "Queue",
                "department",
                {"resources": {"gpu": {"quota": 16, "limit": 24, "overQuotaWeight": 2}}},
            ),
        ),
        (
            "KaiQueue",
            k8s.custom(
                KAI,
                "Queue",
                "project",
                {
                    "parentQueue": "department",
                    "priority": 50,
                    "resources": {
                        "gpu": {"quota": 4, "limit": -1, "overQuotaWeight": 3},
                        "cpu": {"quota": 8000, "limit": -1},
                        "memory": {"quota": 2048, "limit": -1},
                    },
                },
            ),
        ),
    )
    project = queue(index, "project")
    assert project.invalid_reason is None
    assert (project.parent, project.priority, project.fair_weight) == ("department", 50, 3.0)
    assert project.nominal == {"nvidia.com/gpu": 4, "cpu": 8000, "memory": 2048 * 10**6}
    assert project.quota is None  # -1: unlimited
    department = cohort(index, "department")
    assert (department.nominal, department.quota, department.fair_weight) == (
        {"nvidia.com/gpu": 12},
        {"nvidia.com/gpu": 24},
        2.0,
    )


def test_a_fractional_or_negative_kai_quota_is_invalid_naming_the_field(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        ("KaiQueue", k8s.custom(KAI, "Queue", "half", {"resources": {"gpu": {"quota": 0.5}}})),
        ("KaiQueue", k8s.custom(KAI, "Queue", "neg", {"resources": {"cpu": {"limit": -2}}})),
    )
    assert queue(index, "half").invalid_reason == (
        "KAI Queue half: spec.resources.gpu.quota: 0.5 is not a whole number of GPUs"
    )
    assert queue(index, "neg").invalid_reason == (
        "KAI Queue neg: spec.resources.cpu.limit: -2 is negative (only -1, unlimited, is allowed)"
    )


def test_name_clashes_go_to_tidegate_then_kueue_then_kai_then_volcano(k8s: Any) -> None:
    index = ClusterIndex()
    load(
        index,
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "x", {"weight": 9})),
        ("KaiQueue", k8s.custom(KAI, "Queue", "x", {"priority": 3})),
        ("KaiQueue", k8s.custom(KAI, "Queue", "y", {"priority": 3})),
        ("VolcanoQueue", k8s.custom(VOLCANO, "Queue", "y", {"weight": 9})),
    )
    assert queue(index, "x").priority == 3  # KAI's, over Volcano's
    load(index, ("KueueClusterQueue", k8s.custom(KUEUE, "ClusterQueue", "x", {"cohort": "k"})))
    assert queue(index, "x").parent == "k"
    load(index, ("Queue", k8s.queue("x", {"priority": 1})))
    desired = index.desired(StateKey("queue", None, "x"))
    assert isinstance(desired.message, QueueConfig)
    assert desired.message.priority == 1
    assert desired.problems == (
        "Queue x shadows Kueue ClusterQueue x, KAI Queue x, Volcano Queue x of the same name, "
        "not read (tidegate's own wins a name clash, then Kueue's, KAI's, Volcano's)",
    )
    # Deleting the winner publishes the next one.
    index.apply("Queue", "DELETED", k8s.queue("x"))
    assert queue(index, "x").parent == "k"
    assert queue(index, "y").priority == 3


def test_deleting_a_queue_source_leaves_a_tombstone_to_publish(k8s: Any) -> None:
    index = ClusterIndex()
    obj = k8s.custom(KAI, "Queue", "gone", {})
    load(index, ("KaiQueue", obj))
    assert StateKey("queue", None, "gone") in index.state_keys()
    affected = index.apply("KaiQueue", "DELETED", obj).affected
    assert StateKey("queue", None, "gone") in affected
    assert index.desired(StateKey("queue", None, "gone")).message is None
    assert index.state_keys() == set()
