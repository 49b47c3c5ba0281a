"""The TCP proxy: pass-through, added latency, blackhole and restore, on loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from probe.gameday.faults.proxy import TcpProxy


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback echo server: the simplest upstream that answers every byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(4096):
            conn.sendall(data)


def _round_trip(port: int, payload: bytes = b"canary", timeout: float = 5.0) -> float:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        client.sendall(payload)
        assert client.recv(4096) == payload
    return time.monotonic() - started


def test_pass_through_then_latency_both_ways(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        assert proxy.address.startswith("127.0.0.1:")
        assert _round_trip(proxy.port) < 0.2
        proxy.set_delay(0.3)
        # 0.3 s on the way in and 0.3 s on the way back.
        assert 0.6 <= _round_trip(proxy.port) < 1.5
        proxy.restore()
        assert _round_trip(proxy.port) < 0.2


def test_blackhole_holds_traffic_until_restored(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        with client:
            client.sendall(b"before")
            assert client.recv(4096) == b"before"
            proxy.blackhole()
            client.sendall(b"held")
            client.settimeout(0.5)
            with pytest.raises(TimeoutError):
                client.recv(4096)
            # A new connection is accepted but goes nowhere.
            with pytest.raises(TimeoutError):
                _round_trip(proxy.port, timeout=0.5)
            proxy.restore()
            client.settimeout(5)
            assert client.recv(4096) == b"held"
        assert _round_trip(proxy.port) < 0.5


def test_the_proxy_listens_on_loopback_only(echo_port: int) -> None:
    with TcpProxy(echo_port) as proxy:
        host = socket.gethostbyname(socket.gethostname())
        if host.startswith("127."):
            pytest.skip("this host's name resolves to loopback")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, proxy.port), timeout=1).close()
