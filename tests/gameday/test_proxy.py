"""The TCP proxy: pass-through, added latency, blackhole and restore, on loopback."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

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
    # A connection held by a blackhole is dialled when it is restored, after its client
    # gave up: the proxy then resets it.
    with conn, contextlib.suppress(ConnectionResetError):
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
        # The kernel's own list of listening sockets: the proxy's is on 127.0.0.1 only.
        listening = {
            (address, port) for address, port in _listening_sockets() if port == proxy.port
        }
        assert listening == {("127.0.0.1", proxy.port)}


def _listening_sockets() -> set[tuple[str, int]]:
    """(address, port) of every IPv4 and IPv6 TCP socket in LISTEN state."""
    found: set[tuple[str, int]] = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(address_hex)
            # /proc prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            family = socket.AF_INET if width == 8 else socket.AF_INET6
            found.add((socket.inet_ntop(family, words), int(port_hex, 16)))
    return found


def test_the_proxy_faults_act_on_every_proxy_of_a_cluster(echo_port: int, tmp_path: Path) -> None:
    """On the Apache Kafka cluster each broker has a proxy of its own: a network fault
    between the probe and "the brokers" is on all of them."""
    from probe.gameday.faults import build_fault  # noqa: PLC0415
    from probe.gameday.faults.base import LocalTargets  # noqa: PLC0415
    from probe.gameday.scenario import ProxyBlackhole, ProxyLatency  # noqa: PLC0415

    with TcpProxy(echo_port) as one, TcpProxy(echo_port) as two:
        targets = LocalTargets(
            None,
            None,
            None,
            "t",
            6,
            tmp_path / "k",
            "p",
            broker_proxies={1: one, 2: two},  # type: ignore[arg-type]
        )
        assert targets.bootstrap_servers == f"{one.address},{two.address}"
        latency = build_fault(ProxyLatency(kind="proxy-latency", delay=0.3), targets)
        latency.inject()
        assert all(_round_trip(proxy.port) >= 0.6 for proxy in (one, two))
        latency.heal()
        blackhole = build_fault(ProxyBlackhole(kind="proxy-blackhole"), targets)
        blackhole.inject()
        for proxy in (one, two):
            with pytest.raises(TimeoutError):
                _round_trip(proxy.port, timeout=0.5)
        blackhole.heal()
        assert all(_round_trip(proxy.port) < 0.2 for proxy in (one, two))
