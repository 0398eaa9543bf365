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
from tidegate.model import Admitted, DomainCount, Pending, Released, TopologyAssignment, subjects

from .conftest import NAMESPACE, Env

H200 = "NVIDIA-H200"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    """A Queue object."""
    return {
        "apiVersion": "tidegate.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name, "annotations": spec.pop("annotations", {})},
        "spec": spec,
    }


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
        queue(
            "q",
            priority=10,
            reclaimable=False,
            queueingStrategy="StrictFIFO",
            topology="default",
            capability={"cpu": "16", "nvidia.com/gpu": "8"},
            cardQuota={H200: 8, f"{H200}/mig-1g.18gb-mixed": 4},
        ),
    )
    uids = {}
    for name in ("a", "b", "c"):
        await env.job(name, 2)
        uids[name] = (await env.workload_state(name)).uid

    async def decide(kind: str, name: str, body: Any) -> None:
        await env.publish(subjects.decision(env.cluster, kind, NAMESPACE, name), body)

    def admitted(name: str, sequence: int, charged: dict[str, int], cards: dict[str, int]) -> Any:
        domain = DomainCount(values=list(env.host(0, 0)), count=2)
        return Admitted(
            workload=f"{NAMESPACE}/{name}",
            uid=uids[name],
            queue="q",
            sequence=sequence,
            epoch=1,
            assignments={"main": TopologyAssignment(levels=env.sim.levels, domains=[domain])},
            charged=charged,
            charged_cards=cards,
            card_model=H200 if cards else None,
        )

    # Before any decision: nothing admitted or waiting, quota resources listed at zero.
    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: active(s) == ("True", "Ready")),
        what="the Queue's first status",
    )
    assert (status["admitted"], status["pending"]) == (0, 0)
    assert status["usage"] == {"cpu": "0", "nvidia.com/gpu": "0"}
    assert status["cardUsage"] == {H200: 0, f"{H200}/mig-1g.18gb-mixed": 0}

    for name in ("a", "b", "c"):
        pending = Pending(
            workload=f"{NAMESPACE}/{name}",
            uid=uids[name],
            queue="q",
            reason="WaitingForCapacity",
            message="no room",
            sequence={"a": 1, "b": 2, "c": 3}[name],
        )
        await decide("pending", name, pending)
    gib = 2**30
    await decide("admitted", "a", admitted("a", 4, {"cpu": 2000, "nvidia.com/gpu": 2}, {H200: 2}))
    await decide("admitted", "b", admitted("b", 5, {"cpu": 1500, "memory": 3 * gib}, {}))

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
    await decide(
        "released",
        "b",
        Released(
            workload=f"{NAMESPACE}/b", uid=uids["b"], queue="q", reason="Completed", sequence=6
        ),
    )
    status = await env.until_async(
        lambda: _status_when(env, "q", lambda s: s.get("admitted") == 1),
        what="b released",
    )
    assert status["pending"] == 1
    assert status["usage"] == {"cpu": "2", "nvidia.com/gpu": "2"}
    assert status["cardUsage"] == {H200: 2, f"{H200}/mig-1g.18gb-mixed": 0}

    # a is evicted by preemption and waits again; c, still waiting, is deleted.
    await decide(
        "released",
        "a",
        Released(workload=f"{NAMESPACE}/a", uid=uids["a"], queue="q", reason="Evicted", sequence=7),
    )
    await decide(
        "pending",
        "a",
        Pending(
            workload=f"{NAMESPACE}/a",
            uid=uids["a"],
            queue="q",
            reason="WaitingForPreemption",
            message="preemption requested",
            sequence=8,
        ),
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
    await env.create(QUEUES, queue("broken", annotations={"volcano.sh/card.quota": "{not json"}))
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
