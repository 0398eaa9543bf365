"""Releasing gated pods: rank order, the selector, expectations, lazily created and replacement pods."""

import json
from typing import Any

from tidegate.kube import JOBS, PODS
from tidegate.model import PodState, subjects
from tidegate.sim.kinds import PODS as SIM_PODS
from tidegate.sim.store import WatchEvent

from .conftest import NAMESPACE, Env, gated, index_of

LEVELS = ("tidegate.io/block", "tidegate.io/rack", "kubernetes.io/hostname")


def domain_of(pod: dict[str, Any]) -> tuple[str, ...]:
    """The domain a released pod's nodeSelector names."""
    selector = pod["spec"]["nodeSelector"]
    return tuple(selector[level] for level in LEVELS)


async def test_consecutive_ranks_land_in_the_same_or_neighbouring_domains(env: Env) -> None:
    await env.start_ungater()
    job = await env.job("train", 6)
    hosts = [env.host(0, 0), env.host(0, 1), env.host(1, 0)]
    admitted = await env.admit(
        "team/train",
        job["metadata"]["uid"],
        {"main": [(hosts[0], 2), (hosts[1], 2), (hosts[2], 2)]},
        card_model="NVIDIA-H200",
    )

    async def running() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=train")
        ok = len(pods) == 6 and all(p.get("status", {}).get("phase") == "Running" for p in pods)
        return pods if ok else None

    pods = await env.until_async(running, what="six running pods")
    for pod in pods:
        index = index_of(pod)
        assert domain_of(pod) == hosts[index // 2], f"index {index}"
        assert pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H200"
        assert pod["spec"]["nodeName"] == hosts[index // 2][-1]
        assert not gated(pod)
    assert max(env.monitor.most.values()) == 2

    # What a user sees on the Job: the Admitted Event with the placement, and the trace context.
    events = await env.until_async(
        lambda: _reasons(env, "train", {"Admitted"}), what="Admitted event"
    )
    assert events["Admitted"]["type"] == "Normal"
    message = events["Admitted"]["message"]
    assert "queue q on NVIDIA-H200" in message
    assert "main: 6 pods in 3 domains" in message
    assert "block0/block0-rack0/block0-rack0-node0 ×2" in message

    async def annotated() -> str | None:
        stored = await env.kube.get(JOBS, "train", namespace=NAMESPACE)
        return stored["metadata"].get("annotations", {}).get("tidegate.io/trace-context")

    carrier = json.loads(await env.until_async(annotated, what="trace annotation"))
    workload = await env.workload_state("train")
    assert (
        carrier["traceparent"].split("-")[1] == workload.trace_context["traceparent"].split("-")[1]
    )
    assert admitted.sequence > 0


async def test_duplicated_and_reordered_events_never_release_more_than_assigned(env: Env) -> None:
    # One release at a time, so stale events arrive while releases are in flight.
    await env.start_ungater(max_concurrent_patches=1)
    job = await env.job("dup", 8)
    uid = job["metadata"]["uid"]

    async def eight_gated() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=dup")
        return pods if len(pods) == 8 and all(gated(p) for p in pods) else None

    pods = await env.until_async(eight_gated, what="eight gated pods")
    stale = {p["metadata"]["name"]: p for p in pods}
    hosts = [env.host(0, 0), env.host(0, 1), env.host(0, 2), env.host(0, 3)]
    newer = {"main": [(h, 2) for h in hosts]}
    older = {"main": [(env.host(1, 0), 8)]}
    await env.admit("team/dup", uid, newer, sequence=20)
    await env.admit("team/dup", uid, newer, sequence=20)  # a duplicate
    await env.admit("team/dup", uid, older, sequence=10)  # an older decision, arriving late
    await env.until_async(lambda: _released(env, "dup", 4), what="half released")
    # Stale gated snapshots of every pod, as a lagging or repeating stream would deliver them.
    for name, pod in stale.items():
        snapshot = PodState(
            namespace=NAMESPACE,
            name=name,
            uid=pod["metadata"]["uid"],
            scheduling_gates=["tidegate.io/admission"],
            workload="team/dup",
            podset="main",
            rank=index_of(pod),
        )
        await env.publish(subjects.pod(env.cluster, NAMESPACE, name), snapshot)
    await env.admit("team/dup", uid, newer, sequence=20)  # and the decision once more
    released = await env.until_async(lambda: _released(env, "dup", 8), what="all released")
    assert sorted(domain_of(p) for p in released) == sorted(h for h in hosts for _ in range(2))
    assert env.monitor.most == dict.fromkeys(hosts, 2)


async def test_a_restart_mid_release_recounts_from_the_selectors(env: Env) -> None:
    # Slow releases (one at a time, few requests per second) so the stop lands mid-way.
    await env.start_ungater(max_concurrent_patches=1, kube_qps=4.0, kube_burst=1)
    job = await env.job("restart", 12)
    hosts = [env.host(1, n) for n in range(4)]
    await env.admit("team/restart", job["metadata"]["uid"], {"main": [(h, 3) for h in hosts]})
    await env.until_async(lambda: _released(env, "restart", 3), what="a few released")
    await env.stop("ungater")
    before = len(await _released(env, "restart", 0) or [])
    assert 3 <= before < 12
    await env.start_ungater()
    released = await env.until_async(lambda: _released(env, "restart", 12), what="all released")
    by_index = {index_of(p): domain_of(p) for p in released}
    assert by_index == {i: hosts[i // 3] for i in range(12)}
    assert env.monitor.most == dict.fromkeys(hosts, 3)


async def test_lazily_created_pods_and_replacements_take_freed_slots(env: Env) -> None:
    await env.start_ungater()
    # Two at a time, six in all: the Job controller creates each next index as one finishes.
    job = await env.job("lazy", 2, completions=6, duration=0.3)
    hosts = [env.host(0, 0), env.host(0, 1)]
    await env.admit("team/lazy", job["metadata"]["uid"], {"main": [(hosts[0], 1), (hosts[1], 1)]})

    async def complete() -> bool:
        stored = await env.kube.get(JOBS, "lazy", namespace=NAMESPACE)
        return stored.get("status", {}).get("succeeded") == 6

    await env.until_async(complete, within=30, what="six completions")
    pods = await env.pods("job-name=lazy")
    assert {index_of(p) for p in pods} == set(range(6))
    assert all(domain_of(p) in hosts for p in pods)
    assert env.monitor.most == dict.fromkeys(hosts, 1)


async def test_a_failed_or_deleted_pod_is_replaced_in_its_slot(env: Env) -> None:
    await env.start_ungater()
    # Two failures: the Job controller waits 10 s per index before replacing them (20 s
    # counted for the whole Job), as Kubernetes does.
    job = await env.job("heal", 4, backoff_limit_per_index=6)
    hosts = [env.host(1, 2), env.host(1, 3)]
    await env.admit("team/heal", job["metadata"]["uid"], {"main": [(hosts[0], 2), (hosts[1], 2)]})
    pods = await env.until_async(lambda: _running(env, "heal", 4), what="four running")
    by_index = {index_of(p): p for p in pods}
    # Index 1 fails (its container exits 1), index 2 is deleted.
    failed = by_index[1]
    await env.kube.patch(
        PODS,
        failed["metadata"]["name"],
        {"status": {"phase": "Failed"}},
        namespace=NAMESPACE,
        subresource="status",
    )
    await env.kube.delete(
        PODS, by_index[2]["metadata"]["name"], namespace=NAMESPACE, grace_seconds=0
    )
    gone = {failed["metadata"]["uid"], by_index[2]["metadata"]["uid"]}

    async def replaced() -> list[dict[str, Any]] | None:
        pods = await _running(env, "heal", 4)
        if pods is None or gone & {p["metadata"]["uid"] for p in pods}:
            return None
        return pods

    pods = await env.until_async(replaced, within=40, what="two replacements running")
    assert {index_of(p): domain_of(p) for p in pods} == {
        0: hosts[0],
        1: hosts[0],
        2: hosts[1],
        3: hosts[1],
    }
    assert env.monitor.most == dict.fromkeys(hosts, 2)


async def _released(env: Env, job: str, at_least: int) -> list[dict[str, Any]] | None:
    pods = [p for p in await env.pods(f"job-name={job}") if not gated(p)]
    return pods if len(pods) >= at_least else None


async def _running(env: Env, job: str, count: int) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in await env.pods(f"job-name={job}")
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    return pods if len(pods) == count else None


async def _reasons(env: Env, name: str, wanted: set[str]) -> dict[str, dict[str, Any]] | None:
    events = await env.events(name)
    return events if wanted <= set(events) else None


async def test_a_new_gang_whose_pods_are_all_there_is_released_without_waiting_the_window(
    env: Env,
) -> None:
    # The batch window waits for pods created together and coalesces failures; a first
    # admission with a gated pod for each slot has nothing to wait for (with the 1 s default,
    # waiting out the window would be most of a Job's time from creation to release). A window far
    # longer than the wait below shows it is not waited out.
    await env.start_ungater(batch_window_seconds=120.0)
    job = await env.job("eager", 4)

    async def four_gated() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=eager")
        return pods if len(pods) == 4 and all(gated(p) for p in pods) else None

    await env.until_async(four_gated, what="four gated pods")
    hosts = [env.host(0, 0), env.host(0, 1)]
    await env.admit("team/eager", job["metadata"]["uid"], {"main": [(h, 2) for h in hosts]})

    async def released() -> list[dict[str, Any]] | None:
        pods = await env.pods("job-name=eager")
        return pods if len(pods) == 4 and not any(gated(p) for p in pods) else None

    pods = await env.until_async(released, within=60.0, what="four released pods")
    for pod in pods:
        assert domain_of(pod) == hosts[index_of(pod) // 2]


async def release_order_of_a_small_gang_beside_a_big_one(
    env: Env, *, batch_window_seconds: float, slots_per_host: int
) -> list[str]:
    """Admit a 160-pod gang to 8 hosts, then, once its first pod is released, a 1-pod gang;
    the pods in the order the API server committed their releases (at most 2 writes at once,
    so the big gang's take a while)."""
    released: list[str] = []

    def on_pod(event: WatchEvent) -> None:
        pod: dict[str, Any] = dict(event.obj)
        name = pod["metadata"]["name"]
        if not gated(pod) and name not in released:
            released.append(name)

    unsubscribe = env.sim.store.subscribe(SIM_PODS.key, on_pod)
    try:
        await env.start_ungater(batch_window_seconds=batch_window_seconds, max_concurrent_patches=2)
        big = await env.job("big", 160)
        small = await env.job("small", 1)

        async def all_gated() -> bool:
            pods = await env.pods()
            return len(pods) == 161 and all(gated(p) for p in pods)

        await env.until_async(all_gated, within=60.0, what="161 gated pods")
        hosts = [env.host(rack, node) for rack in range(2) for node in range(4)]
        slots = [(h, slots_per_host) for h in hosts]
        await env.admit("team/big", big["metadata"]["uid"], {"main": slots})
        await env.until(lambda: released, within=60.0, what="the big gang's first release")
        await env.admit("team/small", small["metadata"]["uid"], {"main": [(hosts[0], 1)]})
        await env.until(lambda: len(released) == 161, within=120.0, what="every pod released")
    finally:
        unsubscribe()
    return released


def small_before_big_ended(released: list[str]) -> bool:
    """Whether the small gang's pod was released before the big gang's last one."""
    small_at = next(i for i, name in enumerate(released) if name.startswith("small-"))
    return small_at < len(released) - 1


async def test_a_small_gang_is_not_held_back_by_a_big_one_being_released(env: Env) -> None:
    # A 256-pod gang's releases take about 0.7 s, and every Job planned after it would wait
    # for them. So a big gang's writes go on in the background with at most half of
    # the concurrent writes, so a small gang admitted meanwhile is released before the big
    # one's last pod. Here the big gang is complete and new: released at once, not after the
    # (long) window.
    released = await release_order_of_a_small_gang_beside_a_big_one(
        env, batch_window_seconds=120.0, slots_per_host=20
    )
    assert small_before_big_ended(released), "the small gang waited for the big one's releases"


async def test_a_small_gang_is_not_held_back_by_a_big_one_released_in_the_windows_round(
    env: Env,
) -> None:
    # The same for a gang released by the batch window's round rather than at once (here:
    # admitted to more slots than it has pods, 168 for 160, so never a complete new gang):
    # if that round's writes held the releaser until the last was sent, every Job admitted
    # meanwhile would wait for them (~1 s behind a 256-pod gang on a loaded machine).
    released = await release_order_of_a_small_gang_beside_a_big_one(
        env, batch_window_seconds=0.2, slots_per_host=21
    )
    assert small_before_big_ended(released), "the small gang waited for the big one's releases"
