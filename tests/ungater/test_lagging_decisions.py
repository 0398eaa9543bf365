"""Releases wait for the decision stream: a ``preempted`` decision the view has not seen yet
(the decision stream lags the state stream, e.g. while its NATS leader fails over) must not let
the victim's replacement pods into its old slots."""

import asyncio
from collections.abc import Collection
from pathlib import Path

from prometheus_client import CollectorRegistry

from tidegate.bus import layout
from tidegate.kube import PODS
from tidegate.model import LostAdmission, Preempted, WorkloadKey, subjects
from tidegate.policy.clusterview import ClusterView
from tidegate.testing import following
from tidegate.ungater.app import decision_subjects, state_subjects
from tidegate.ungater.handlers import Feed
from tidegate.ungater.releaser import DecisionsCurrent, Releaser, ReleaserMetrics
from tidegate.ungater.seen import FEW, PER_WORKLOAD_LIMIT, SeenDecisions

from .conftest import NAMESPACE, Env, gated


async def test_replacements_wait_while_the_view_lags_the_decision_stream(
    env: Env, tmp_path: Path
) -> None:
    view = ClusterView()
    feed = Feed(view)
    key = WorkloadKey("team/victim")
    seen = SeenDecisions(env.cluster, decision_subjects(env.cluster))

    async def current(keys: Collection[WorkloadKey]) -> set[WorkloadKey]:
        return await seen.current(env.bus, keys)

    def releaser(decisions_current: DecisionsCurrent | None) -> Releaser:
        return Releaser(
            view=view,
            kube=env.kube,
            bus=env.bus,
            cluster=env.cluster,
            settings=env.ungater_settings(),
            metrics=ReleaserMetrics(CollectorRegistry()),
            decisions_current=decisions_current,
        )

    async with following(
        env.bus,
        stream=layout.state_stream(env.cluster),
        subjects=state_subjects(env.cluster),
        handler=feed.on_state,
    ):
        job = await env.job("victim", 2)
        uid = job["metadata"]["uid"]
        await env.until(
            lambda: len([p for p in view.members(key) if p.scheduling_gates]) == 2,
            what="two gated pods in the view",
        )
        async with following(
            env.bus,
            stream=layout.decisions_stream(env.cluster),
            subjects=decision_subjects(env.cluster),
            handler=seen.wrap(feed.on_decision),
        ):
            admitted = await env.admit("team/victim", uid, {"main": [(env.host(0, 0), 2)]})
            await env.until(lambda: view.verdict(key).admitted is not None, what="the admission")
            first = releaser(current)
            first.mark([key])
            await first.round()
        # The view stops seeing decisions: the victim is preempted and its pods evicted; the
        # Job controller creates replacements, which the (live) state stream shows.
        preempted = Preempted(
            preemptor="team/serve",
            preemptor_uid="u-serve",
            victims=["team/victim"],
            lost={"team/victim": LostAdmission(uid=uid, sequence=admitted.sequence)},
        )
        await env.publish(subjects.decision(env.cluster, "preempted", "team", "serve"), preempted)
        originals = {p["metadata"]["uid"] for p in await env.pods("job-name=victim")}
        for pod in await env.pods("job-name=victim"):
            await env.kube.delete(PODS, pod["metadata"]["name"], namespace=NAMESPACE)

        def replacements_gated() -> bool:
            fresh = [p for p in view.members(key) if p.uid not in originals]
            return len(fresh) == 2 and all(p.scheduling_gates for p in fresh)

        await env.until(replacements_gated, within=30, what="gated replacements in the view")

        late = releaser(current)
        late.mark([key])
        await late.round()
        pods = [
            p for p in await env.pods("job-name=victim") if p["metadata"]["uid"] not in originals
        ]
        assert len(pods) == 2
        assert all(gated(p) for p in pods), "no replacement released into the victim's slots"


async def test_a_view_found_behind_asks_again_soon_not_after_the_window(env: Env) -> None:
    # A view found behind the decision stream (it is, for the few ms a decision takes to
    # arrive) must not stop early releases until the batch window's round. A window
    # far longer than the wait below shows that a new gang is released once the view caught up.
    view = ClusterView()
    feed = Feed(view)
    key = WorkloadKey("team/eager")
    answers = [False]

    async def current(keys: Collection[WorkloadKey]) -> set[WorkloadKey]:
        current = answers.pop() if answers else True
        return set(keys) if current else set()

    releaser = Releaser(
        view=view,
        kube=env.kube,
        bus=env.bus,
        cluster=env.cluster,
        settings=env.ungater_settings(batch_window_seconds=120.0),
        metrics=ReleaserMetrics(CollectorRegistry()),
        decisions_current=current,
    )
    stop = asyncio.Event()
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
        running = asyncio.create_task(releaser.run(stop))
        try:
            job = await env.job("eager", 2)
            await env.until(
                lambda: len([p for p in view.members(key) if p.scheduling_gates]) == 2,
                what="two gated pods in the view",
            )
            await env.admit("team/eager", job["metadata"]["uid"], {"main": [(env.host(0, 0), 2)]})
            await env.until(lambda: view.verdict(key).admitted is not None, what="the admission")
            releaser.mark([key])

            async def released() -> bool:
                pods = await env.pods("job-name=eager")
                return len(pods) == 2 and not any(gated(p) for p in pods)

            await env.until_async(released, within=30.0, what="both pods released")
            assert not answers, "the view was found behind once"
        finally:
            stop.set()
            await running


async def test_only_unseen_decisions_that_could_move_a_workload_hold_its_releases(
    env: Env,
) -> None:
    # Under load some decision is nearly always in flight; asking for a view holding every
    # one would hold early releases back until the flood passed. A decision about
    # another workload cannot move this one's pods; its own decisions and any preemption can.
    key = WorkloadKey("team/mine")
    other = WorkloadKey("team/other")
    seen = SeenDecisions(env.cluster, decision_subjects(env.cluster))
    stream = layout.decisions_stream(env.cluster)
    seen.sequence = await env.bus.last_sequence(stream)
    assert await seen.current(env.bus, [key, other]) == {key, other}

    await env.admit("team/other", "u-other", {"main": [(env.host(0, 0), 1)]})
    assert await seen.current(env.bus, [key, other]) == {key}

    seen.sequence = await env.bus.last_sequence(stream)
    await env.admit("team/mine", "u-mine", {"main": [(env.host(0, 1), 1)]})
    assert await seen.current(env.bus, [key, other]) == {other}

    seen.sequence = await env.bus.last_sequence(stream)
    preempted = Preempted(
        preemptor="team/serve",
        preemptor_uid="u-serve",
        victims=["team/mine"],
        lost={"team/mine": LostAdmission(uid="u-mine", sequence=1)},
    )
    await env.publish(subjects.decision(env.cluster, "preempted", "team", "serve"), preempted)
    assert await seen.current(env.bus, [key, other]) == set()

    # More than a few: one check of every followed decision first, then each one's own.
    several = [WorkloadKey(f"team/w{i}") for i in range(FEW + 1)]
    seen.sequence = await env.bus.last_sequence(stream)
    assert await seen.current(env.bus, several) == set(several)
    await env.admit("team/other", "u-other", {"main": [(env.host(0, 0), 1)]})
    assert await seen.current(env.bus, several) == set(several)
    await env.admit("team/w0", "u-w0", {"main": [(env.host(0, 1), 1)]})
    assert await seen.current(env.bus, several) == set(several[1:])

    # Past the per-workload limit that one check decides for all.
    many = [WorkloadKey(f"team/w{i}") for i in range(PER_WORKLOAD_LIMIT + 1)]
    seen.sequence = await env.bus.last_sequence(stream)
    assert await seen.current(env.bus, many) == set(many)
    await env.admit("team/other", "u-other", {"main": [(env.host(0, 0), 1)]})
    assert await seen.current(env.bus, many) == set()
