"""The test session's nats-server is real and has JetStream on."""

import json
import socket

import pytest

from tidegate.bus.server import (
    LOWEST_PICKED_PORT,
    NatsServerProcess,
    ephemeral_range,
    free_port,
)


def test_server_speaks_nats_with_jetstream(nats_server: NatsServerProcess) -> None:
    with socket.create_connection((nats_server.host, nats_server.port), timeout=2) as sock:
        info = sock.recv(4096).decode()
    assert info.startswith("INFO ")
    fields = json.loads(info[5:])
    assert fields["jetstream"] is True
    major, minor = (int(x) for x in fields["version"].split(".")[:2])
    assert (major, minor) >= (2, 10)


def test_a_free_port_is_not_one_an_outgoing_connection_can_take() -> None:
    """Outgoing connections get their local ports from the ephemeral range; a port picked
    there for a server could be taken by one before the server binds it (a CI run saw a
    service's bind fail so). ``free_port`` picks below the range, and the port binds."""
    low, high = ephemeral_range()
    assert low - LOWEST_PICKED_PORT >= 1000, "this machine leaves no room below the range"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        outgoing = [socket.create_connection(listener.getsockname()) for _ in range(32)]
        try:
            taken = {sock.getsockname()[1] for sock in outgoing}
            assert all(low <= port <= high for port in taken)
            ports = [free_port() for _ in range(50)]
        finally:
            for sock in outgoing:
                sock.close()
    for port in ports:
        assert LOWEST_PICKED_PORT <= port < low, port
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_handed_out_is_not_handed_out_again_and_xdist_workers_draw_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port given to a server that is stopped for a moment (a NATS restart in the chaos test)
    must not go to another: this process never hands one out twice, and two pytest-xdist
    workers draw from disjoint slices (a CI run saw a restarted nats-server find its port
    taken)."""
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    low, _ = ephemeral_range()
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
        slices.append({free_port() for _ in range(50)})
    middle = LOWEST_PICKED_PORT + (low - LOWEST_PICKED_PORT) // 2
    assert all(port < middle for port in slices[0])
    assert all(port >= middle for port in slices[1])
