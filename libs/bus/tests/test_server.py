"""The test session's nats-server is real and has JetStream on."""

import json
import socket

from tidegate.bus.server import NatsServerProcess


def test_server_speaks_nats_with_jetstream(nats_server: NatsServerProcess) -> None:
    with socket.create_connection((nats_server.host, nats_server.port), timeout=2) as sock:
        info = sock.recv(4096).decode()
    assert info.startswith("INFO ")
    fields = json.loads(info[5:])
    assert fields["jetstream"] is True
    major, minor = (int(x) for x in fields["version"].split(".")[:2])
    assert (major, minor) >= (2, 10)
