"""What a user sees: Events on the top owner and PodGroup status, read like kubectl does."""

import asyncio
import json
import os
import shutil
from typing import Any

from tidegate.kube import PODGROUPS, PODS
from tidegate.model import Pending, Preempted, Released, subjects

from .conftest import NAMESPACE, Env, gated, k8s

GROUP_LABEL = "scheduling.k8s.io/group-name"
PAIR = {GROUP_LABEL: "pair", "tidegate.io/queue": "q"}
"""The labels of a bare pod of PodGroup ``pair`` in queue q (the simulated webhook gates it)."""
CPU = [k8s.container(memory=None)]
"""One container asking for one cpu."""


async def kubectl(env: Env, *args: str) -> dict[str, Any] | None:
    """``kubectl <args> -o json`` against the simulated cluster; None when kubectl is absent
    (the same facts are then read through kubernetes-asyncio only)."""
    binary = shutil.which("kubectl")
    if binary is None:
        return None
    process = await asyncio.create_subprocess_exec(
        binary,
        *args,
        "-o",
        "json",
        env={**os.environ, "KUBECONFIG": str(env.kubeconfig)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return json.loads(out)  # type: ignore[no-any-return]


async def test_events_and_podgroup_status_as_a_user_sees_them(crd_env: Env) -> None:
    env = crd_env
    await env.start_ungater()
    group = await env.create(
        PODGROUPS,
        {
            "apiVersion": "tidegate.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pair"},
            "spec": {"minMember": 2, "queue": "q"},
        },
    )
    uid = group["metadata"]["uid"]
    for name in ("pair-a", "pair-b"):
        await env.create(PODS, k8s.pod(name, gated=False, labels=PAIR, containers=CPU))
    await env.create(  # someone else's gate too
        PODS,
        k8s.pod(
            "pair-c",
            gated=False,
            labels=PAIR,
            containers=CPU,
            schedulingGates=[{"name": "example.com/hold"}],
        ),
    )

    async def three_members() -> Any:
        workload = await env.workload_state("pair")
        return workload if sum(p.count for p in workload.podsets) == 3 else None

    workload = await env.until_async(three_members, what="the PodGroup's three members")
    podset = workload.podsets[0].name

    async def decide(body: Any, kind: str) -> None:
        await env.publish(subjects.decision(env.cluster, kind, NAMESPACE, "pair"), body)

    # Waiting: a Pending Event with the reason token, and the reason in the status.
    await decide(
        Pending(
            workload="team/pair",
            uid=uid,
            queue="q",
            reason="WaitingForCapacity",
            message="couldn't fit 3 pods in any rack: best rack fits 2",
            sequence=1,
        ),
        "pending",
    )
    events = await env.until_async(lambda: reasons(env, {"Pending"}), what="Pending event")
    assert events["Pending"]["message"] == (
        "WaitingForCapacity: couldn't fit 3 pods in any rack: best rack fits 2"
    )
    assert events["Pending"]["involvedObject"]["kind"] == "PodGroup"
    assert events["Pending"]["involvedObject"]["uid"] == uid

    async def waiting_status() -> dict[str, Any] | None:
        # The status may show phase Pending from before the decision; wait for its reason.
        status = await podgroup_status(env, "Pending")
        if status is None or condition(status, "Admitted") != ("False", "WaitingForCapacity"):
            return None
        return status

    status = await env.until_async(waiting_status, what="status with reason WaitingForCapacity")
    assert condition(status, "Admitted") == ("False", "WaitingForCapacity")

    # Invalid: a Warning.
    await decide(
        Pending(
            workload="team/pair",
            uid=uid,
            queue="q",
            reason="Invalid",
            message="annotation volcano.sh/card.request on PodGroup team/pair: not JSON",
            sequence=2,
        ),
        "pending",
    )
    events = await env.until_async(lambda: reasons(env, {"Invalid"}), what="Invalid event")
    assert events["Invalid"]["type"] == "Warning"
    assert "not JSON" in events["Invalid"]["message"]

    # Admitted: released onto two hosts; the pod with another gate stays held by it.
    hosts = [env.host(0, 1), env.host(0, 2)]
    await env.admit("team/pair", uid, {podset: [(hosts[0], 2), (hosts[1], 1)]})

    async def both_running() -> dict[str, Any] | None:
        # Phase Running shows as soon as one pod runs; wait for both released pods.
        status = await podgroup_status(env, "Running")
        return status if status is not None and status.get("running") == 2 else None

    status = await env.until_async(both_running, what="Running status with 2 pods running")
    assert (status["admitted"], status["running"], status["succeeded"], status["failed"]) == (
        3,
        2,
        0,
        0,
    )
    assert condition(status, "Admitted") == ("True", "Admitted")
    assert condition(status, "PodsReady") == ("True", "PodsReady")
    held = await env.kube.get(PODS, "pair-c", namespace=NAMESPACE)
    assert not gated(held)
    assert held["spec"]["schedulingGates"] == [{"name": "example.com/hold"}]
    assert "nodeName" not in held["spec"]
    events = await env.until_async(lambda: reasons(env, {"Admitted"}), what="Admitted event")
    assert "pods in 2 domains" in events["Admitted"]["message"]

    # Preempted, then released by admission: a Warning naming the preemptor, status Evicted.
    await decide(
        Preempted(
            preemptor="team/infer",
            preemptor_uid="infer-uid",
            victims=["team/pair"],
            mode={"team/pair": "restart"},
            message="8 GPUs for team/infer",
        ),
        "preempted",
    )
    await decide(
        Released(
            workload="team/pair",
            uid=uid,
            queue="q",
            reason="Evicted",
            sequence=500,
            message="preempted for team/infer",
        ),
        "released",
    )
    events = await env.until_async(lambda: reasons(env, {"Preempted"}), what="Preempted event")
    assert events["Preempted"]["type"] == "Warning"
    assert (
        events["Preempted"]["message"]
        == "preempted by team/infer and re-queued: 8 GPUs for team/infer"
    )
    status = await env.until_async(
        lambda: podgroup_status(env, "Pending"), what="status after eviction"
    )
    assert condition(status, "Evicted") == ("True", "Preempted")
    assert condition(status, "Admitted") == ("False", "Evicted")

    # The same, read by kubectl as a user would (when kubectl is installed).
    listed = await kubectl(env, "get", "events", "-n", NAMESPACE)
    if listed is not None:
        seen = {e["reason"] for e in listed["items"] if e["involvedObject"]["name"] == "pair"}
        assert {"Pending", "Invalid", "Admitted", "Preempted"} <= seen
        shown = await kubectl(env, "get", "tpg", "pair", "-n", NAMESPACE)
        assert shown is not None
        assert shown["status"]["phase"] == "Pending"


async def reasons(env: Env, wanted: set[str]) -> dict[str, dict[str, Any]] | None:
    """Events about the PodGroup ``pair`` by reason, once all ``wanted`` exist."""
    events = await env.events("pair")
    return events if wanted <= set(events) else None


async def podgroup_status(env: Env, phase: str) -> dict[str, Any] | None:
    """The PodGroup's status once it shows ``phase``."""
    stored = await env.kube.get(PODGROUPS, "pair", namespace=NAMESPACE)
    status = stored.get("status") or {}
    return status if status.get("phase") == phase else None


def condition(status: dict[str, Any], kind: str) -> tuple[str, str]:
    """(status, reason) of one condition."""
    for item in status.get("conditions", []):
        if item["type"] == kind:
            assert item["lastTransitionTime"]
            return item["status"], item["reason"]
    raise AssertionError(f"no condition {kind} in {status}")
