"""Fixtures the game-day fault tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from probe.embedded import free_loopback_port
from probe.gameday.faults.base import LocalTargets
from probe.gameday.faults.proxy import TcpProxy
from probe.gameday.local import ProxiedBroker


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[LocalTargets]:
    """An embedded broker behind the Kafka-aware proxy, with a fresh topic and probe
    id, and no probe: the faults under test act on the broker's traffic alone."""
    proxy_port = free_loopback_port()
    with (
        ProxiedBroker(proxy_port, log_file=tmp_path / "tansu.log") as broker,
        TcpProxy(broker.port, port=proxy_port, kafka=True) as proxy,
    ):
        yield LocalTargets(
            broker,
            proxy,
            None,  # type: ignore[arg-type]  # no probe: the fault never touches it
            f"faults-{uuid.uuid4().hex[:8]}",
            3,
            tmp_path / "k",
            f"p-{uuid.uuid4().hex[:8]}",
        )
