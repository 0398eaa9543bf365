"""Queue definitions from Kueue, Volcano, KAI and tidegate's own Cohorts, end to end: objects
written through the simulated API server are published as ``queue`` and ``cohort`` messages
(docs/queues.md, "Mapping from Kueue, Volcano and KAI"); a CRD installed after the watcher
started is picked up when it looks again; a malformed object marks only its own queue."""

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from tidegate.bus import BusSettings, Received, connect, layout
from tidegate.kube import (
    COHORTS,
    CRDS,
    KAI_QUEUES,
    KUEUE_CLUSTER_QUEUES,
    KUEUE_COHORTS,
    KUEUE_LOCAL_QUEUES,
    KUEUE_RESOURCE_FLAVORS,
    NODES,
    QUEUES,
    VOLCANO_QUEUES,
    KubeSettings,
)
from tidegate.kube import connect as connect_kube
from tidegate.model import CohortConfig, QueueConfig, Tombstone, subjects
from tidegate.sim import SimCluster, SimSettings
from tidegate.sim.bundled import bundled_crds
from tidegate.testing import following, until
from tidegate.watcher.app import Watcher
from tidegate.watcher.config import WatcherSettings

from .conftest import Harness


def obj(name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, **meta}, "spec": spec}


def queue(harness: Harness, name: str) -> QueueConfig:
    message = harness.last.get(subjects.queue(harness.cluster, name))
    assert isinstance(message, QueueConfig), f"queue {name}: {message!r}"
    return message


def cohort(harness: Harness, name: str) -> CohortConfig:
    message = harness.last.get(subjects.cohort(harness.cluster, name))
    assert isinstance(message, CohortConfig), f"cohort {name}: {message!r}"
    return message


async def test_every_family_is_published_as_queues_and_cohorts(harness: Harness) -> None:
    gpu_quota = [{"name": "h200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]
    await harness.create(
        KUEUE_CLUSTER_QUEUES,
        obj("kq", {"cohort": "org", "resourceGroups": [{"flavors": gpu_quota}]}),
        namespace=None,
    )
    await harness.create(KUEUE_COHORTS, obj("org", {"fairSharing": {"weight": 2}}), namespace=None)
    await harness.create(KUEUE_LOCAL_QUEUES, obj("team-lq", {"clusterQueue": "kq"}))
    await harness.create(VOLCANO_QUEUES, obj("vroot", {"deserved": {"cpu": "10"}}), namespace=None)
    await harness.create(
        VOLCANO_QUEUES,
        obj(
            "vq",
            {"parent": "vroot", "deserved": {"cpu": "4"}, "weight": 2},
            annotations={"volcano.sh/card.quota": '{"NVIDIA-H200": 4}'},
        ),
        namespace=None,
    )
    await harness.create(
        KAI_QUEUES,
        obj("kai-team", {"parentQueue": "dept", "resources": {"gpu": {"quota": 2, "limit": 4}}}),
        namespace=None,
    )
    await harness.create(COHORTS, obj("dept", {"capability": {"cpu": "64"}}), namespace=None)
    await harness.create(QUEUES, obj("tq", {"cohort": "dept"}), namespace=None)
    await harness.start_watcher()

    def published() -> bool:
        assert queue(harness, "kq").nominal == {"nvidia.com/gpu": 16}
        assert queue(harness, "kq").parent == "org"
        assert cohort(harness, "org").fair_weight == 2.0
        assert (queue(harness, "vq").parent, queue(harness, "vq").card_quota) == (
            "vroot",
            {"NVIDIA-H200": 4},
        )
        assert cohort(harness, "vroot").nominal == {"cpu": 6000}
        assert queue(harness, "kai-team").quota == {"nvidia.com/gpu": 4}
        assert cohort(harness, "dept").quota == {"cpu": 64000}
        assert queue(harness, "tq").parent == "dept"
        return True

    await harness.until(published, what="every family's queues and cohorts")
    # A LocalQueue is a name for its ClusterQueue, not a queue of its own.
    assert subjects.queue(harness.cluster, "team-lq") not in harness.last

    # A malformed object marks its own queue Invalid; the watcher and the others go on.
    await harness.create(
        KAI_QUEUES, obj("broken", {"resources": {"gpu": {"quota": "lots"}}}), namespace=None
    )
    await harness.until(
        lambda: (
            queue(harness, "broken").invalid_reason
            == "KAI Queue broken: spec.resources.gpu.quota: expected float | null, got str"
        ),
        what="the malformed KAI queue published as invalid",
    )
    assert queue(harness, "kai-team").invalid_reason is None

    # Deleting the child makes the Volcano parent a queue again; the cohort is tombstoned.
    await harness.delete(VOLCANO_QUEUES, "vq", namespace=None)

    def reshaped() -> bool:
        assert isinstance(harness.last[subjects.cohort(harness.cluster, "vroot")], Tombstone)
        assert isinstance(harness.last[subjects.queue(harness.cluster, "vq")], Tombstone)
        assert queue(harness, "vroot").nominal == {"cpu": 10000}
        return True

    await harness.until(reshaped, what="vroot a queue again")


async def test_a_gpu_flavor_is_a_card_quota_and_flavor_or_queue_changes_republish_it(
    harness: Harness,
) -> None:
    """A ClusterQueue's nvidia.com/gpu quota of a ResourceFlavor pinning a GPU product is the
    card quota of that model; changing the ClusterQueue or the ResourceFlavor republishes it."""

    def quota(nominal: int) -> dict[str, Any]:
        resources = [{"name": "nvidia.com/gpu", "nominalQuota": nominal, "borrowingLimit": 2}]
        return {
            "cohort": "org",
            "resourceGroups": [{"flavors": [{"name": "h200", "resources": resources}]}],
        }

    await harness.create(
        KUEUE_RESOURCE_FLAVORS,
        obj("h200", {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H200"}}),
        namespace=None,
    )
    await harness.create(KUEUE_CLUSTER_QUEUES, obj("kq", quota(8)), namespace=None)
    await harness.start_watcher()
    await harness.until(
        lambda: (
            (queue(harness, "kq").card_nominal, queue(harness, "kq").card_borrowing_limit)
            == ({"NVIDIA-H200": 8}, {"NVIDIA-H200": 2})
        ),
        what="the H200 flavor's GPUs published as H200 card quota",
    )
    assert queue(harness, "kq").nominal == {"nvidia.com/gpu": 8}
    assert harness.kube is not None
    await harness.kube.patch(KUEUE_CLUSTER_QUEUES, "kq", {"spec": quota(4)})
    await harness.until(
        lambda: queue(harness, "kq").card_nominal == {"NVIDIA-H200": 4},
        what="the ClusterQueue's new quota republished",
    )
    await harness.kube.patch(
        KUEUE_RESOURCE_FLAVORS,
        "h200",
        {"spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-B200"}}},
    )
    await harness.until(
        lambda: queue(harness, "kq").card_nominal == {"NVIDIA-B200": 4},
        what="the relabelled flavor's model republished",
    )
    await harness.delete(KUEUE_RESOURCE_FLAVORS, "h200")
    await harness.until(
        lambda: queue(harness, "kq").card_nominal is None,
        what="a plain GPU quota once the flavor is gone",
    )
    assert queue(harness, "kq").nominal == {"nvidia.com/gpu": 4}


async def test_top_level_volcano_and_kai_queues_share_the_cluster_under_their_root(
    harness: Harness,
) -> None:
    """Volcano Queues naming no parent go under Volcano's root, KAI's top-level queues under
    kai-root; each root's nominal quota is the cluster's less what its queues deserve, and a
    node joining republishes it."""
    assert harness.kube is not None
    nodes = await harness.kube.list_objects(NODES)
    gpus = sum(int(n["status"]["allocatable"].get("nvidia.com/gpu", 0)) for n in nodes.items)
    await harness.create(
        VOLCANO_QUEUES, obj("team", {"deserved": {"nvidia.com/gpu": 4}}), namespace=None
    )
    await harness.create(VOLCANO_QUEUES, obj("default", {"weight": 1}), namespace=None)
    await harness.create(
        KAI_QUEUES, obj("dept", {"resources": {"gpu": {"quota": 0, "limit": -1}}}), namespace=None
    )
    await harness.start_watcher()

    def shared(total: int) -> bool:
        assert (queue(harness, "team").parent, queue(harness, "default").parent) == (
            "root",
            "root",
        )
        assert cohort(harness, "root").nominal == {"nvidia.com/gpu": total - 4}
        assert queue(harness, "dept").parent == "kai-root"
        assert cohort(harness, "kai-root").nominal == {"nvidia.com/gpu": total}
        return True

    await harness.until(lambda: shared(gpus), what="both roots holding the cluster's GPUs")
    await harness.create(
        NODES,
        {
            "metadata": {"name": "late-node"},
            "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}},
        },
    )
    await harness.until(lambda: shared(gpus + 8), what="the roots growing with a new node")


async def test_a_queue_crd_installed_later_is_read_when_the_watcher_looks_again(
    tmp_path: Path, nats_url: str, cluster_id: str
) -> None:
    settings = SimSettings(
        nodes="1x1x2x8gpu",
        controllers=False,
        scheduler=False,
        kubelet=False,
        admission_gate=False,
        install_crds=False,
    )
    async with SimCluster.running(settings) as sim:
        kube = await connect_kube(KubeSettings(kubeconfig=sim.write_kubeconfig(tmp_path / "kc")))
        bus = await connect(BusSettings(servers=(nats_url,)))
        watcher = Watcher(
            bus=bus,
            kube=kube,
            settings=WatcherSettings(cluster=cluster_id, absent_retry_seconds=0.3),
        )
        last: dict[str, object] = {}

        async def remember(received: Received) -> None:
            last[received.subject] = received.envelope.body

        task = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.ready.wait(), 20)
            async with following(
                bus,
                stream=layout.state_stream(cluster_id),
                subjects=subjects.state_wildcards(cluster_id),
                handler=remember,
            ):
                assert "KaiQueue" in watcher.unavailable
                (crd,) = [
                    c
                    for c in bundled_crds()
                    if c["metadata"] == {"name": "queues.scheduling.run.ai"}
                ]
                await kube.create(CRDS, crd)
                await kube.create(KAI_QUEUES, obj("late", {"priority": 9}))
                subject = subjects.queue(cluster_id, "late")
                await until(
                    lambda: isinstance(last.get(subject), QueueConfig),
                    within=10,
                    what="the KAI queue published once its CRD is served",
                )
                message = last[subject]
                assert isinstance(message, QueueConfig)
                assert message.priority == 9
                assert "KaiQueue" not in watcher.unavailable
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await bus.drain()
            await kube.close()
