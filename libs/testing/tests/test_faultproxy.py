"""The Kubernetes fault proxy in front of the simulator: what it applies, refuses and loses (tests/kube_contract/test_retries.py covers Cut)."""

import asyncio
from pathlib import Path

import pytest

from tidegate.kube import NODES, KubeSettings, ServerError, Unreachable, connect
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing.faultproxy import Hold, LoseAnswer, Refuse, kube_fault_proxy


async def test_a_lost_answer_is_applied_and_counted_while_the_client_sees_a_failure(
    tmp_path: Path,
) -> None:
    async with (
        SimCluster.running(SimSettings(nodes="1x1x1x8gpu")) as sim,
        kube_fault_proxy(sim.url) as proxy,
    ):
        settings = KubeSettings(kubeconfig=proxy.write_kubeconfig(tmp_path / "kc"), max_attempts=1)
        async with await connect(settings) as kube:
            node = (await kube.list_objects(NODES)).items[0]["metadata"]["name"]  # type: ignore[index]
            proxy.arm("PATCH", f"/nodes/{node}", LoseAnswer(drop=True))
            with pytest.raises(Unreachable):
                await kube.annotate(NODES, None, str(node), {"example.com/a": "1"})
            proxy.arm("PATCH", f"/nodes/{node}", LoseAnswer())
            with pytest.raises(ServerError):
                await kube.annotate(NODES, None, str(node), {"example.com/b": "2"})
            proxy.arm("PATCH", f"/nodes/{node}", Refuse(500))
            with pytest.raises(ServerError):
                await kube.annotate(NODES, None, str(node), {"example.com/c": "3"})
            annotations = (await kube.get(NODES, str(node)))["metadata"]["annotations"]  # type: ignore[index]
        assert {k: v for k, v in annotations.items() if k.startswith("example.com/")} == {
            "example.com/a": "1",
            "example.com/b": "2",
        }, "lost answers were applied; a refused one was not"
        assert [(s.status, s.upstream) for s in proxy.seen if s.fault is not None] == [
            (0, 200),
            (504, 200),
            (500, None),
        ]
        assert proxy.injected == 3
        assert proxy.armed == 0
        assert proxy.requests["PATCH /api/v1/nodes/*"] == 3


async def test_a_held_request_reaches_the_server_only_if_its_client_still_waits(
    tmp_path: Path,
) -> None:
    async with (
        SimCluster.running(SimSettings(nodes="1x1x1x8gpu")) as sim,
        kube_fault_proxy(sim.url) as proxy,
    ):
        kubeconfig = proxy.write_kubeconfig(tmp_path / "kc")
        patient = KubeSettings(kubeconfig=kubeconfig, max_attempts=1)
        hasty = KubeSettings(kubeconfig=kubeconfig, max_attempts=1, request_timeout_seconds=0.2)
        async with await connect(patient) as kube, await connect(hasty) as gives_up:
            node = str((await kube.list_objects(NODES)).items[0]["metadata"]["name"])  # type: ignore[index]
            proxy.arm("PATCH", f"/nodes/{node}", Hold(0.6))
            await kube.annotate(NODES, None, node, {"example.com/waited": "1"})
            proxy.arm("PATCH", f"/nodes/{node}", Hold(0.6))
            with pytest.raises(Unreachable):
                await gives_up.annotate(NODES, None, node, {"example.com/gave-up": "1"})
            await asyncio.sleep(0.8)  # past the hold: nothing was sent on
            annotations = (await kube.get(NODES, node))["metadata"]["annotations"]  # type: ignore[index]
        assert "example.com/waited" in annotations
        assert "example.com/gave-up" not in annotations, "a request its client gave up landed"
        held = [s for s in proxy.seen if s.fault is not None]
        assert [(s.status, s.upstream) for s in held] == [(200, 200), (0, None)]
        assert held[0].seconds >= 0.6
        assert held[1].seconds < 0.6


async def test_a_guarded_write_held_past_the_time_its_guard_grants_never_lands(
    tmp_path: Path,
) -> None:
    """At the transport: a leader's write may take no longer than its lease
    is confirmed for (the guard's grant), so one held on its way past that is given up by the
    client and never applied — however long the client's own request timeout."""
    async with (
        SimCluster.running(SimSettings(nodes="1x1x1x8gpu")) as sim,
        kube_fault_proxy(sim.url) as proxy,
    ):
        settings = KubeSettings(kubeconfig=proxy.write_kubeconfig(tmp_path / "kc"), max_attempts=1)
        async with await connect(settings) as kube:
            leading = kube.guarded(lambda: 0.3)
            node = str((await kube.list_objects(NODES)).items[0]["metadata"]["name"])  # type: ignore[index]
            proxy.arm("PATCH", f"/nodes/{node}", Hold(1.0))
            with pytest.raises(Unreachable):
                await leading.annotate(NODES, None, node, {"example.com/late": "1"})
            await asyncio.sleep(1.0)
            annotations = (await kube.get(NODES, node))["metadata"].get("annotations") or {}  # type: ignore[union-attr]
        assert "example.com/late" not in annotations
        assert [(s.status, s.upstream) for s in proxy.seen if s.fault is not None] == [(0, None)]
