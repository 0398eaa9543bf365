"""Queue status as ``kubectl get tq`` / ``kubectl describe tq`` read it: counts, usage, Active.

The test plays admission (it publishes the decisions); the real watcher turns the Jobs and
Queues of the simulated cluster (tidegate's real CRDs installed) into bus state, and the
ungater writes each Queue's status, read back here through the Kubernetes API.
"""

import asyncio
import os
import shutil
from typing import Any

from tidegate.kube import JOBS, QUEUES

from .conftest import NAMESPACE, Env, k8s, msg

H200 = "NVIDIA-H200"


async def queue_status(env: Env, name: str) -> dict[str, Any]:
    """The Queue's status as the API server stores it."""
    found = await env.kube.get(QUEUES, name)
    return dict(found.get("status") or {})


def active(status: dict[str, Any]) -> tuple[str, str] | None:
    """(status, reason) of the Active condition."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Active":
            return str(condition["status"]), str(condition["reason"])
    return None


async def test_queue_status_follows_admissions_pendings_and_releases(crd_env: Env) -> None:
    env = crd_env
    await env.start_ungater(queue_status_interval_seconds=0.2)
    await env.create(
        QUEUES,
        k8s.queue(
            "q",
            {
                "priority": 10,
                "reclaimable": False,
                "queueingStrategy": "StrictFIFO",
                "topology": "default",
                "capability": {"cpu": "16", "nvidia.com/gpu": "8"},
                "cardQuota": {H200: 8, f"{H200}/mig-1g.18gb-mixed": 4},
            },
        ),
    )
    uids = {}
    for name in ("a", "b", "c"):
        await env.job(name, 2)
        uids[name] = (await env.workload_state(name)).uid

    # Before any decision: nothing admitted or waiting, quota resources listed at zero.
    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: active(s) == ("True", "Ready")),
        what="the Queue's first status",
    )
    assert (status["admitted"], status["pending"]) == (0, 0)
    assert status["usage"] == {"cpu": "0", "nvidia.com/gpu": "0"}
    assert status["cardUsage"] == {H200: 0, f"{H200}/mig-1g.18gb-mixed": 0}

    for name in ("a", "b", "c"):
        sequence = {"a": 1, "b": 2, "c": 3}[name]
        await env.send(msg.pending(name, uid=uids[name], message="no room", sequence=sequence))
    gib = 2**30
    on_one_host = {env.host(0, 0): 2}
    await env.send(
        msg.admitted(
            "a",
            on_one_host,
            podset="main",
            levels=env.sim.levels,
            sequence=4,
            uid=uids["a"],
            charged={"cpu": 2000, "nvidia.com/gpu": 2},
            charged_cards={H200: 2},
            card_model=H200,
        )
    )
    await env.send(
        msg.admitted(
            "b",
            on_one_host,
            podset="main",
            levels=env.sim.levels,
            sequence=5,
            uid=uids["b"],
            charged={"cpu": 1500, "memory": 3 * gib},
        )
    )

    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: s.get("admitted") == 2),
        what="two admitted",
    )
    assert status["pending"] == 1
    assert status["usage"] == {"cpu": "3500m", "memory": "3Gi", "nvidia.com/gpu": "2"}
    assert status["cardUsage"] == {H200: 2, f"{H200}/mig-1g.18gb-mixed": 0}
    header, row = (await kubectl(env, "get", "tq", "q")).splitlines()
    assert header.split() == [
        "NAME",
        "PRIORITY",
        "RECLAIMABLE",
        "STRATEGY",
        "TOPOLOGY",
        "ADMITTED",
        "PENDING",
        "AGE",
    ]
    assert row.split()[:-1] == ["q", "10", "false", "StrictFIFO", "default", "2", "1"]
    described = await kubectl(env, "describe", "tq", "q")
    assert "Reason:                Ready" in described

    # b completes: its memory (a resource the quota does not name) leaves usage altogether.
    await env.send(msg.released("b", uid=uids["b"], reason="Completed", sequence=6))
    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: s.get("admitted") == 1),
        what="b released",
    )
    assert status["pending"] == 1
    assert status["usage"] == {"cpu": "2", "nvidia.com/gpu": "2"}
    assert status["cardUsage"] == {H200: 2, f"{H200}/mig-1g.18gb-mixed": 0}

    # a is evicted by preemption and waits again; c, still waiting, is deleted.
    await env.send(msg.released("a", uid=uids["a"], reason="Evicted", sequence=7))
    await env.send(
        msg.pending(
            "a",
            uid=uids["a"],
            reason="WaitingForPreemption",
            message="preemption requested",
            sequence=8,
        )
    )
    await env.kube.delete(JOBS, "c", namespace=NAMESPACE, propagation="Background")
    status = await env.until_async(
        lambda: _status_when(
            env, "q", lambda s: s.get("admitted") == 0 and s.get("usage", {}).get("cpu") == "0"
        ),
        what="a evicted",
    )
    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: s.get("pending") == 1), what="c gone"
    )
    assert status["usage"] == {"cpu": "0", "nvidia.com/gpu": "0"}
    assert status["cardUsage"] == {H200: 0, f"{H200}/mig-1g.18gb-mixed": 0}
    assert active(status) == ("True", "Ready")


async def test_an_invalid_queue_is_not_active(crd_env: Env) -> None:
    env = crd_env
    await env.start_ungater(queue_status_interval_seconds=0.2)
    await env.create(
        QUEUES, k8s.queue("broken", annotations={"volcano.sh/card.quota": "{not json"})
    )
    status = await env.until_async(
        lambda: _status_when(env, "broken", lambda s: active(s) is not None),
        what="the broken Queue's status",
    )
    assert active(status) == ("False", "Invalid")
    condition = status["conditions"][0]
    assert "volcano.sh/card.quota" in condition["message"]
    assert (status["admitted"], status["pending"], status["usage"]) == (0, 0, {})

    # Fixed: the condition turns True, with a new transition time.
    await env.kube.patch(
        QUEUES, "broken", {"metadata": {"annotations": {"volcano.sh/card.quota": '{"A": 1}'}}}
    )
    status = await env.until_async(
        lambda: _status_when(env, "broken", lambda s: active(s) == ("True", "Ready")),
        what="the fixed Queue's status",
    )
    assert status["cardUsage"] == {"A": 0}


async def kubectl(env: Env, *args: str) -> str:
    """``kubectl <args>`` against the simulated cluster, as a user types it."""
    binary = shutil.which("kubectl")
    assert binary is not None, "kubectl is needed (dev/bootstrap installs it)"
    process = await asyncio.create_subprocess_exec(
        binary,
        *args,
        env={**os.environ, "KUBECONFIG": str(env.kubeconfig)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def _status_when(env: Env, name: str, check: Any) -> dict[str, Any] | None:
    status = await queue_status(env, name)
    return status if status and check(status) else None
