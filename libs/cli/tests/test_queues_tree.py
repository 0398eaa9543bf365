"""``tidegate queues`` shows the queue tree (docs/queues.md, "The queue tree"): per node its
nominal and subtree quota, usage, borrowed and lendable amounts and share, from the Queue and
Cohort definitions and the decisions on a real bus."""

import asyncio
import json

import pytest

from tidegate.bus import Bus
from tidegate.cli.busview import fill_view
from tidegate.cli.main import main
from tidegate.cli.queues import cohort_table, queue_table, render, tree_reports
from tidegate.model import (
    Admitted,
    CohortConfig,
    Message,
    PodSetSpec,
    QueueConfig,
    Tombstone,
    WorkloadState,
    subjects,
)
from tidegate.testing.bus import connected, envelope

GPU = "nvidia.com/gpu"


async def put(bus: Bus, cluster: str, subject: str, body: Message) -> None:
    await bus.publish(subject, envelope(cluster, body))


async def scenario(bus: Bus, cluster: str) -> None:
    """team-a and team-b share cohort research (16 GPUs each); team-b holds 24: 8 borrowed
    from team-a's idle quota, of which team-a lends at most 12."""
    await put(
        bus,
        cluster,
        subjects.cohort(cluster, "research"),
        CohortConfig(name="research", quota={GPU: 32}),
    )
    await put(
        bus,
        cluster,
        subjects.queue(cluster, "team-a"),
        QueueConfig(name="team-a", parent="research", nominal={GPU: 16}, lending_limit={GPU: 12}),
    )
    await put(
        bus,
        cluster,
        subjects.queue(cluster, "team-b"),
        QueueConfig(name="team-b", parent="research", nominal={GPU: 16}),
    )
    await put(
        bus,
        cluster,
        subjects.queue(cluster, "broken"),
        QueueConfig(name="broken", parent="research", nominal={GPU: -1}),
    )
    body = WorkloadState(
        namespace="ns",
        name="big",
        uid="uid-big",
        owner_kind="Job",
        queue="team-b",
        podsets=[PodSetSpec(name="main", count=3, requests={GPU: 8})],
    )
    await put(bus, cluster, subjects.workload(cluster, "ns", "big"), body)
    decision = Admitted(
        workload="ns/big",
        uid="uid-big",
        queue="team-b",
        sequence=1,
        epoch=1,
        assignments={},
        charged={GPU: 24},
    )
    await put(bus, cluster, subjects.decision(cluster, "admitted", "ns", "big"), decision)


async def test_queues_show_the_tree_with_borrowed_lendable_and_share(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(bus, cluster_id)
        view = await fill_view(bus, cluster_id)
    reports = tree_reports(view)
    rows = {row["queue"]: row for row in queue_table(view, reports)}
    team_b = rows["team-b"]["tree"]
    assert (team_b["parent"], team_b["depth"]) == ("research", 1)
    assert team_b["nominal"] == {GPU: 16}
    assert team_b["usage"] == {GPU: 24}
    assert team_b["borrowed"] == {GPU: 8}
    assert team_b["share"] > 0
    team_a = rows["team-a"]["tree"]
    assert (team_a["usage"], team_a["borrowed"], team_a["lendable"]) == ({}, {}, {GPU: 12})
    assert team_a["share"] == 0
    assert rows["broken"]["tree"]["blocked"] is not None
    (research,) = cohort_table(reports)
    assert research["cohort"] == "research"
    assert research["tree"]["depth"] == 0

    text = render(list(rows.values()), cohort_table(reports))
    lines = text.splitlines()
    assert lines[0] == "queue tree (nominal / quota / usage / borrowed / lendable / share)"
    assert lines[1] == "  cohort research"
    assert "    queue team-b" in lines
    at = lines.index("    queue team-b")
    assert lines[at + 1] == (
        "        nominal nvidia.com/gpu 16; quota nvidia.com/gpu 16; usage nvidia.com/gpu 24"
    )
    assert lines[at + 2].startswith("        borrowed nvidia.com/gpu 8; lendable -; share ")
    assert any(line.startswith("    queue broken  [Invalid: ") for line in lines)


@pytest.mark.usefixtures("nats_server")
async def test_queues_json_lists_queues_then_cohorts_and_a_tombstoned_cohort_goes(
    nats_url: str, cluster_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        await scenario(bus, cluster_id)
    options = ["--cluster", cluster_id, "--nats-url", nats_url]
    assert await asyncio.to_thread(main, ["queues", "--json", *options]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row.get("queue", row.get("cohort")) for row in rows] == [
        "broken",
        "team-a",
        "team-b",
        "research",
    ]
    async with connected(nats_url, cluster_id) as bus:
        gone = Tombstone(object_kind="cohort", name="research")
        await put(bus, cluster_id, subjects.cohort(cluster_id, "research"), gone)
        view = await fill_view(bus, cluster_id)
    assert view.cohorts == {}
    # research is still named as the queues' parent: an implicit cohort (Kueue's).
    (implicit,) = cohort_table(tree_reports(view))
    assert implicit["cohort"] == "research"
