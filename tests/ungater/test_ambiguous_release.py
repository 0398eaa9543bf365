"""A release whose answer is lost after the API server applied it keeps its expectation: the
pod holds its slot until the bus shows it, so the slot is not given to another pod."""

from pathlib import Path

from prometheus_client import CollectorRegistry

from tidegate.bus import Received, layout
from tidegate.kube import KubeSettings
from tidegate.kube import connect as connect_kube
from tidegate.model import WorkloadKey
from tidegate.policy.clusterview import ClusterView
from tidegate.testing import following
from tidegate.testing.faultproxy import LoseAnswer, kube_fault_proxy
from tidegate.ungater.app import decision_subjects, state_subjects
from tidegate.ungater.handlers import Feed
from tidegate.ungater.releaser import Releaser, ReleaserMetrics

from .conftest import Env, gated


async def test_a_release_applied_but_unanswered_keeps_its_slot(env: Env, tmp_path: Path) -> None:
    view = ClusterView()
    feed = Feed(view)
    key = WorkloadKey("team/lost")

    async def on_state(received: Received) -> None:
        await feed.on_state(received)

    async with (
        following(
            env.bus,
            stream=layout.state_stream(env.cluster),
            subjects=state_subjects(env.cluster),
            handler=on_state,
        ),
        following(
            env.bus,
            stream=layout.decisions_stream(env.cluster),
            subjects=decision_subjects(env.cluster),
            handler=feed.on_decision,
        ),
        kube_fault_proxy(env.sim.url) as proxy,
    ):
        job = await env.job("lost", 2)
        await env.until(
            lambda: len([p for p in view.members(key) if p.scheduling_gates]) == 2,
            what="two gated pods in the view",
        )
        # The bus stops showing changes (the watcher is gone): only expectations count now.
        await env.stop("watcher")
        await env.admit("team/lost", job["metadata"]["uid"], {"main": [(env.host(0, 0), 2)]})
        await env.until(lambda: view.verdict(key).admitted is not None, what="the admission")

        kube = await connect_kube(
            KubeSettings(kubeconfig=proxy.write_kubeconfig(tmp_path / "kc"), max_attempts=1)
        )
        try:
            releaser = Releaser(
                view=view,
                kube=kube,
                bus=env.bus,
                cluster=env.cluster,
                settings=env.ungater_settings(),
                metrics=ReleaserMetrics(CollectorRegistry()),
            )
            proxy.arm("PATCH", "/pods/lost-", LoseAnswer(), times=2)
            releaser.mark([key])
            await releaser.round()
        finally:
            await kube.close()

        assert proxy.count("PATCH", "/pods/lost-") == 2
        pods = await env.pods("job-name=lost")
        assert len(pods) == 2
        assert not any(gated(p) for p in pods), "the server applied both releases"
        # Both still count as released into host 0, though the bus still shows them gated.
        kept = releaser.expectations.get(key, {})
        assert {e.domain for e in kept.values()} == {env.host(0, 0)}
        assert set(kept) == {p["metadata"]["uid"] for p in pods}


async def test_a_new_leader_counts_releases_the_bus_does_not_show_yet(env: Env) -> None:
    view = ClusterView()
    feed = Feed(view)
    key = WorkloadKey("team/late")
    async with (
        following(
            env.bus,
            stream=layout.state_stream(env.cluster),
            subjects=state_subjects(env.cluster),
            handler=feed.on_state,
        ),
        following(
            env.bus,
            stream=layout.decisions_stream(env.cluster),
            subjects=decision_subjects(env.cluster),
            handler=feed.on_decision,
        ),
    ):
        job = await env.job("late", 2)
        await env.until(
            lambda: len([p for p in view.members(key) if p.scheduling_gates]) == 2,
            what="two gated pods in the view",
        )
        await env.stop("watcher")
        await env.admit("team/late", job["metadata"]["uid"], {"main": [(env.host(0, 1), 2)]})
        await env.until(lambda: view.verdict(key).admitted is not None, what="the admission")
        # The predecessor released one pod just before it stopped; the bus has not shown it.
        first = sorted(view.members(key), key=lambda p: p.name)[0]
        selector = dict(zip(env.sim.levels, env.host(0, 1), strict=True))
        await env.kube.ungate_pod(
            first.namespace, first.name, gate="tidegate.io/admission", node_selector=selector
        )
        releaser = Releaser(
            view=view,
            kube=env.kube,
            bus=env.bus,
            cluster=env.cluster,
            settings=env.ungater_settings(),
            metrics=ReleaserMetrics(CollectorRegistry()),
        )
        assert await releaser.take_over() == 1
        assert {uid: e.domain for uid, e in releaser.expectations[key].items()} == {
            first.uid: env.host(0, 1)
        }
