"""End to end: ``tidegate console`` in a real browser, beside the whole system running.

The stack runs as in production (:mod:`tests.e2e.system`) on a simulated cluster of 2 blocks
× 2 racks × 2 nodes of 8 GPUs; the console follows its bus (:func:`serving`, what
``tidegate console`` runs) and Debian's chromium renders the page headless
(:mod:`tests.e2e.browser`). Checked on the page, against what the bus says:

* the map shows 2 blocks, 4 racks and 8 nodes of 8 GPUs, all free before anything runs;
* a training Job admitted during the test appears in the decision stream, and clicking the
  rack its admission names lists it among that rack's gangs, while the rack's node cells
  show its 16 GPUs running;
* a Job that names a queue that does not exist is listed as waiting with the reason the bus
  gave it (``QueueNotFound``), and its ``explain`` answer says so too;
* the stream's filter hides the other kinds;
* once the cluster is full, a rack-required gang that fits nowhere is reserved a rack: the
  map marks that rack (the gang and its expected start) and its nodes, the reservations table
  lists it, and the stream shows the ``reserved`` decision.

A screenshot of the page lands in the test's directory (and where
``TIDEGATE_CONSOLE_SCREENSHOT`` names, which is how docs/console.png was made).
"""

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tidegate.bus import BusSettings
from tidegate.cli.console_server import serving
from tidegate.cli.console_view import ConsoleView
from tidegate.cli.demo_trace import QueueEntry, WorkloadEntry
from tidegate.model import Admitted, Pending, Reserved

from .browser import headless_chromium
from .system import CLUSTER, System, running_system

pytestmark = [pytest.mark.slow(40), pytest.mark.timeout(300)]

NODES = "2x2x2x8gpu"
NAMESPACE = "console"
RACK = "tidegate.io/rack"
BLOCK = "tidegate.io/block"
TRACE_URL = "http://traces.example/trace/{trace_id}"


def job(name: str, *, pods: int, queue: str = "research", **annotations: str) -> WorkloadEntry:
    """A training Job of ``pods`` 8-GPU pods that runs for a long while."""
    return WorkloadEntry(
        name=name,
        queue=queue,
        pods=pods,
        requests={"cpu": "4", "nvidia.com/gpu": 8},
        duration=100_000,
        annotations=dict(annotations),
    )


async def on_page(system: System, driver: WebDriver, script: str, *, what: str) -> Any:
    """Run ``script`` in the page until it returns something truthy (within 30 s)."""

    async def check() -> Any:
        return await asyncio.to_thread(driver.execute_script, script)

    return await system.until_async(check, within=30, what=what, interval=0.3)


COUNTS = """
const count = (selector) => document.querySelectorAll(selector).length;
const blocks = count('.domain[data-level="tidegate.io/block"]');
const racks = count('.domain[data-level="tidegate.io/rack"]');
const nodes = [...document.querySelectorAll('.node')];
if (!nodes.length) return null;
return {blocks, racks, nodes: nodes.length,
        gpus: nodes.map((n) => +n.dataset.gpus), free: nodes.map((n) => +n.dataset.free)};
"""


async def test_console_in_a_browser(tmp_path: Path) -> None:
    """The page shows the topology, an admission on its rack, a wait with its reason."""
    async with running_system(
        tmp_path / "stack", nodes=NODES, time_scale=0.05, namespace=NAMESPACE
    ) as system:
        await system.set_up(
            priority_classes={},
            queues=[QueueEntry(name="research", spec={"capability": {"nvidia.com/gpu": "96"}})],
        )
        settings = BusSettings(
            servers=(system.stack.nats_url,), name="console-test", wait_for_server_seconds=10
        )
        view = ConsoleView(cluster=CLUSTER, trace_url_template=TRACE_URL)
        async with serving(settings, view) as (console, url):
            async with asyncio.timeout(30):
                await console.replayed.wait()
            with headless_chromium(tmp_path / "chromedriver.log") as driver:
                await asyncio.to_thread(driver.get, url)
                counts = await on_page(system, driver, COUNTS, what="the map")
                assert counts == {
                    "blocks": 2,
                    "racks": 4,
                    "nodes": 8,
                    "gpus": [8] * 8,
                    "free": [8] * 8,
                }, counts

                await system.submit(
                    job("train-a", pods=2, **{"tidegate.io/topology-required": RACK}),
                    job("lost", pods=1, queue="nowhere"),
                )
                admitted = await system.until(
                    lambda: system.of(Admitted, "train-a"), within=60, what="train-a admitted"
                )
                pending = await system.until(
                    lambda: system.of(Pending, "lost"), within=60, what="lost pending"
                )
                assert pending[-1].reason == "QueueNotFound", pending[-1]
                domains = admitted[-1].assignments["main"].domains
                racks = {tuple(d.values[:2]) for d in domains if d.count}
                assert len(racks) == 1, domains
                rack = "/".join(racks.pop())

                # The stream shows the admission.
                await on_page(
                    system,
                    driver,
                    """return document.querySelector(
                        '#stream li[data-kind="admitted"][data-workload="console/train-a"]');""",
                    what="train-a in the decision stream",
                )
                # Its rack's nodes run its 16 GPUs, and clicking the rack lists it.
                running = await on_page(
                    system,
                    driver,
                    f"""const rack = document.querySelector('.domain[data-path="{rack}"]');
                    const used = [...rack.querySelectorAll('.node')]
                        .reduce((s, n) => s + +n.dataset.running, 0);
                    return used === 16 ? used : null;""",
                    what=f"16 GPUs running in rack {rack}",
                )
                assert running == 16
                await asyncio.to_thread(
                    driver.execute_script,
                    f"""document.querySelector('.domain[data-path="{rack}"] > .title').click();""",
                )
                await on_page(
                    system,
                    driver,
                    f"""const panel = document.getElementById('domain');
                    return panel.dataset.path === '{rack}' && panel.querySelector(
                        'tr[data-workload="console/train-a"]');""",
                    what=f"train-a among the gangs of {rack}",
                )
                elsewhere = await asyncio.to_thread(
                    driver.execute_script,
                    f"""return [...document.querySelectorAll('.domain[data-level="{RACK}"]')]
                        .filter((r) => r.dataset.path !== '{rack}')
                        .flatMap((r) => [...r.querySelectorAll('.node')])
                        .reduce((s, n) => s + +n.dataset.gpus - +n.dataset.free, 0);""",
                )
                assert elsewhere == 0, f"GPUs in use outside {rack}: {elsewhere}"

                # The waiting Job shows the reason the bus gave it, and its explain answer.
                reason = await on_page(
                    system,
                    driver,
                    """const row = document.querySelector('#pending tr[data-workload="console/lost"]');
                    return row && row.dataset.reason;""",
                    what="lost in the waiting table",
                )
                assert reason == pending[-1].reason
                await asyncio.to_thread(
                    driver.execute_script,
                    """document.querySelector(
                        '#pending tr[data-workload="console/lost"] button.explain').click();""",
                )
                answer = await on_page(
                    system,
                    driver,
                    """const pre = document.querySelector('#pending pre.explain');
                    return pre && pre.textContent;""",
                    what="the explain answer of lost",
                )
                assert "QueueNotFound" in answer, answer
                assert "console/lost" in answer, answer
                queues = await asyncio.to_thread(
                    driver.execute_script,
                    """return [...document.querySelectorAll('#queues tr[data-queue]')]
                        .map((r) => r.dataset.queue);""",
                )
                assert {"research", "nowhere"} <= set(queues), queues

                # The filter leaves only the kinds ticked.
                kinds = await asyncio.to_thread(
                    driver.execute_script,
                    """const box = document.querySelector('.filters input[data-kind="admitted"]');
                    box.click();
                    return [...document.querySelectorAll('#stream li')].map((li) => li.dataset.kind);""",
                )
                assert "admitted" not in kinds, kinds
                assert "pending" in kinds, kinds
                await asyncio.to_thread(
                    driver.execute_script,
                    """document.querySelector('.filters input[data-kind="admitted"]').click();""",
                )

                # The cluster fills with one-pod jobs declaring two hours; a rack-required
                # gang then fits nowhere and is reserved the rack whose jobs end first.
                fillers = [
                    job(f"fill-{i}", pods=1, **{"tidegate.io/max-runtime": "2h"}) for i in range(6)
                ]
                await system.submit(*fillers)
                await system.until(
                    lambda: all(system.of(Admitted, f.name) for f in fillers),
                    within=60,
                    what="the fillers admitted",
                )
                await system.submit(job("big", pods=2, **{"tidegate.io/topology-required": RACK}))
                (reserved, *_) = await system.until(
                    lambda: system.of(Reserved, "big"), within=60, what="big reserved"
                )
                held = "/".join(reserved.domain)
                assert reserved.level == RACK, reserved
                assert held != rack, reserved  # train-a declares no end: never its rack
                marked = await on_page(
                    system,
                    driver,
                    """const box = document.querySelector(
                        '.domain.reserved-domain[data-reserved-for="console/big"]');
                    if (!box) return null;
                    return {path: box.dataset.path,
                            line: box.querySelector('.reservation').textContent,
                            nodes: [...box.querySelectorAll('.node')]
                                .map((n) => n.dataset.reservedFor)};""",
                    what="the reserved rack on the map",
                )
                assert marked["path"] == held, marked
                assert marked["line"].startswith("reserved for console/big"), marked
                assert (
                    "expected start " + reserved.message.split("expected start ")[1][:9]
                    in (marked["line"])
                ), (marked, reserved.message)
                assert marked["nodes"] == ["console/big"] * 2, marked
                listed = await on_page(
                    system,
                    driver,
                    """return document.querySelector(
                        '#reservations tr[data-workload="console/big"]') &&
                        !document.getElementById('reservations-section').hidden &&
                        document.querySelector('#stream li[data-kind="reserved"]' +
                            '[data-workload="console/big"]');""",
                    what="big in the reservations table and the stream",
                )
                assert listed

                shot = tmp_path / "console.png"
                await asyncio.to_thread(driver.save_screenshot, str(shot))
                assert shot.stat().st_size > 10_000
                copy = os.environ.get("TIDEGATE_CONSOLE_SCREENSHOT")
                if copy:
                    shutil.copyfile(shot, copy)
        system.assert_healthy("after the console test")
