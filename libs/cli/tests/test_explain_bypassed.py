"""``tidegate explain`` and ``tidegate queues`` name pods that started without passing the gate."""

from tidegate.cli.busview import fill_view
from tidegate.cli.explain import explain, render
from tidegate.cli.queues import queue_table
from tidegate.cli.queues import render as render_queues
from tidegate.model import QueueConfig
from tidegate.testing.bus import connected
from tidegate.testing.harness import ServiceHarness

from .test_explain import GPU, MAIN, msg


async def test_explain_and_queues_name_the_pods_that_started_without_passing_the_gate(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await h.send(QueueConfig(name="offline"))
        body = msg.workload(
            "ran",
            MAIN,
            queue="offline",
            priority=10,
            created_at=1.0,
            bypassed_pods=2,
            bypassed_requests={"cpu": 16000, GPU: 16},
        )
        await h.send(body)
        view = await fill_view(bus, cluster_id, pods_of="ns")

    answer = explain(view, "ns/ran")
    assert answer is not None
    assert answer["bypassed"]["pods"] == 2
    assert (
        "bypassed   2 pods started without passing the gate (webhook down?): cpu=16,"
        "nvidia.com/gpu=16 charged to offline until admitted or finished" in render(answer)
    )

    (row,) = queue_table(view)
    assert (row["queue"], row["bypassed_pods"]) == ("offline", 2)
    assert row["usage"] == {"cpu": 16000, GPU: 16}
    assert "bypassed   2 pods started without passing the gate (webhook down?), in usage" in (
        render_queues([row])
    )
