"""The Kubernetes fault proxy in front of the simulator: what it applies, refuses and loses (tests/kube_contract/test_retries.py covers Cut)."""

from pathlib import Path

import pytest

from tidegate.kube import NODES, KubeSettings, ServerError, Unreachable, connect
from tidegate.sim import SimCluster, SimSettings
from tidegate.testing.faultproxy import LoseAnswer, Refuse, kube_fault_proxy


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
