"""Behaviour that only shows between processes: one trace across them, and a graceful SIGTERM."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tidegate.bus import BusSettings, connect, layout
from tidegate.model import Envelope, Released, subjects

PEER = Path(__file__).with_name("peer.py")


def run_peer(*args: str, env: dict[str, str]) -> None:
    completed = subprocess.run(
        [sys.executable, str(PEER), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr


def spans(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_consumers_span_in_another_process_is_a_child_of_the_publish(
    nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    published_file, consumed_file = tmp_path / "publisher.jsonl", tmp_path / "consumer.jsonl"
    run_peer(
        "publish", nats_url, cluster_id, "evt-1", env={"TIDEGATE_TRACE_FILE": str(published_file)}
    )
    run_peer("consume", nats_url, cluster_id, "1", env={"TIDEGATE_TRACE_FILE": str(consumed_file)})

    subject = subjects.decision(cluster_id, "released", "ns", "w")
    (producer,) = [s for s in spans(published_file) if s["name"] == f"{subject} publish"]
    (consumer,) = [s for s in spans(consumed_file) if s["name"] == f"{subject} process"]
    assert producer["kind"] == "SpanKind.PRODUCER"
    assert consumer["kind"] == "SpanKind.CONSUMER"
    producer_context = producer["context"]
    consumer_context = consumer["context"]
    assert isinstance(producer_context, dict)
    assert isinstance(consumer_context, dict)
    assert consumer_context["trace_id"] == producer_context["trace_id"]
    assert consumer["parent_id"] == producer_context["span_id"]
    resource = consumer["resource"]
    assert isinstance(resource, dict)
    assert resource["attributes"]["service.name"] == "peer-consume"


async def test_sigterm_finishes_the_batch_in_hand_then_exits_0(
    nats_url: str, cluster_id: str, tmp_path: Path
) -> None:
    bus = await connect(BusSettings(servers=(nats_url,), wait_for_server_seconds=5))
    await bus.ensure_layout(cluster_id)
    for index in range(6):
        envelope = Envelope(
            event_id=f"e{index}",
            cluster=cluster_id,
            source="test",
            time=time.time(),
            body=Released(workload=f"ns/w{index}", uid="u", queue="q", reason="Completed"),
        )
        await bus.publish(subjects.decision(cluster_id, "released", "ns", f"w{index}"), envelope)

    output = tmp_path / "handled.txt"
    service = await asyncio.create_subprocess_exec(
        sys.executable,
        str(PEER),
        "service",
        env={
            **os.environ,
            "TIDEGATE_CLUSTER": cluster_id,
            "TIDEGATE_NATS_URL": nats_url,
            "TIDEGATE_HTTP_PORT": "0",
            "TIDEGATE_OUTPUT_FILE": str(output),
            "TIDEGATE_HANDLER_DELAY_SECONDS": "0.4",
            "TIDEGATE_BATCH_SIZE": "3",
        },
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(30):
            while not (output.exists() and output.read_text()):
                assert service.returncode is None, "the service exited early"
                await asyncio.sleep(0.02)
            service.send_signal(signal.SIGTERM)  # in the middle of the first batch of three
            _, stderr_bytes = await service.communicate()
    finally:
        if service.returncode is None:
            service.kill()
            await service.wait()
    stderr = stderr_bytes.decode()
    assert service.returncode == 0, stderr
    assert output.read_text().split() == ["e0", "e1", "e2"], "the batch in hand was finished"
    log_lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line["message"] == "peer stopped (exit 0)" for line in log_lines)

    info = await bus.jetstream.consumer_info(layout.decisions_stream(cluster_id), "peer")
    assert info.num_ack_pending == 0, "everything handled was acked before the exit"
    assert info.num_pending == 3, "the rest waits for the next start"
    await bus.close()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TIDEGATE_HANDLER_DELAY_SECONDS": "slow"},
            "TIDEGATE_HANDLER_DELAY_SECONDS: 'slow' is not a number",
        )
    ],
)
def test_a_bad_setting_stops_the_process_before_it_starts(
    env: dict[str, str], message: str
) -> None:
    completed = subprocess.run(
        [sys.executable, str(PEER), "service"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert completed.stderr.strip() == f"tidegate-peer: invalid setting {message}"
