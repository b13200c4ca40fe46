"""infra.process.free_port: ports below the ephemeral range, so an outgoing connection never takes one between
the pick and the server's bind; never the same port twice in a process; a taken port is never handed out."""

from __future__ import annotations

import socket

from infra import process
from infra.process import LISTEN_PORTS_FROM, ephemeral_ports, free_port


def test_ports_are_below_the_ephemeral_range_and_distinct():
    low, high = ephemeral_ports()
    assert 1024 < low <= high
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    if low - LISTEN_PORTS_FROM >= 1000:
        assert all(LISTEN_PORTS_FROM <= p < low for p in ports)
    for port in ports[:20]:  # each one can be listened on
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", LISTEN_PORTS_FROM + 7))
        taken.listen()
        draws = iter([LISTEN_PORTS_FROM + 7, LISTEN_PORTS_FROM + 8])

        class Draw:
            def randrange(self, a, b):
                return next(draws)

        monkeypatch.setattr("random.SystemRandom", lambda: Draw())
        process._handed_out.discard(LISTEN_PORTS_FROM + 8)
        assert free_port() == LISTEN_PORTS_FROM + 8
