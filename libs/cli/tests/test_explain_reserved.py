"""``tidegate explain`` shows the reservation in force for a waiting gang, read from the bus
(docs/reservations.md): "rack r3 reserved for you; expected start HH:MM UTC when ns/x ends";
nothing once a ``reservation-dropped`` ends it."""

from tidegate.cli.busview import fill_view
from tidegate.cli.explain import explain, render
from tidegate.model import QueueConfig, ReservationDropped, Reserved, WaitedGang
from tidegate.testing.bus import connected
from tidegate.testing.harness import ServiceHarness

from .test_explain import MAIN, RACK, msg

START = 9 * 3600.0 + 30 * 60  # 09:30 UTC on the first day of 1970


def reserved(sequence: int) -> Reserved:
    return Reserved(
        workload="ns/big",
        uid="uid-big",
        queue="offline",
        sequence=sequence,
        topology="default",
        level=RACK,
        domain=["r3"],
        nodes=["n5", "n6"],
        expected_start=START,
        waits_for=[WaitedGang(workload="ns/x", expected_end=START)],
        message="rack r3 reserved; expected start 09:30 UTC (in 1h) when ns/x ends",
    )


async def test_explain_shows_the_reservation_in_force_and_not_a_dropped_one(
    nats_url: str, cluster_id: str
) -> None:
    async with connected(nats_url, cluster_id) as bus:
        h = ServiceHarness(bus, cluster_id, nats_url)
        await h.send(QueueConfig(name="offline"))
        await h.send(msg.workload("big", MAIN, queue="offline", created_at=1.0))
        await h.send(msg.pending("big", sequence=1, queue="offline"))
        await h.send(reserved(2))
        view = await fill_view(bus, cluster_id)
        answer = explain(view, "ns/big")
        assert answer is not None
        assert answer["reservation"]["message"] == (
            "rack r3 reserved for you; expected start 09:30 UTC when ns/x ends"
        )
        assert answer["reservation"]["nodes"] == ["n5", "n6"]
        assert "reserved   rack r3 reserved for you; expected start 09:30 UTC when ns/x ends" in (
            render(answer)
        )

        await h.send(
            ReservationDropped(
                workload="ns/big",
                uid="uid-big",
                queue="offline",
                reason="QueueDisallows",
                sequence=3,
                reserved_sequence=2,
            )
        )
        view = await fill_view(bus, cluster_id)
        answer = explain(view, "ns/big")
        assert answer is not None
        assert "reservation" not in answer
        assert "reserved   " not in render(answer)
