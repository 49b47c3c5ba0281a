"""How the producer feeds a transport with a small in-flight window (MQTT) at many shards."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence

import pytest

from probe.config import load
from probe.core.errors import ConfigError
from probe.core.judge import OwnProbe
from probe.core.keys import generate_key_ring
from probe.stages.producer import CanaryProducer
from probe.transport import Arrival


class WindowedTransport:
    """Acknowledges each canary after a while; records how many were in flight."""

    def __init__(self, max_in_flight: int | None) -> None:
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.most_in_flight = 0
        self.sent_at: list[float] = []

    async def start(self) -> None: ...

    async def partitions(self) -> list[int]:
        return []

    async def cover(self, partitions: Sequence[int]) -> None: ...

    messaging_system = "mqtt"

    def destination(self, partition: int) -> str:
        return f"shard/{partition}"

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,
    ) -> int | None:
        self.sent_at.append(time.monotonic())
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0.002)
        self.in_flight -= 1
        return None

    async def arrivals(self) -> AsyncIterator[Arrival]:
        if False:
            yield

    async def close(self) -> None: ...


def _producer(transport: WindowedTransport, spacing: float = 0.0) -> CanaryProducer:
    return CanaryProducer(
        own=OwnProbe("p", 1),
        target="mqtt",
        transport=transport,
        keyring=generate_key_ring(),
        stages=[],
        max_in_flight=transport.max_in_flight,
        spacing=spacing,
    )


async def test_no_more_in_flight_than_the_transport_takes() -> None:
    transport = WindowedTransport(max_in_flight=4)
    await _producer(transport).produce_round(range(50))
    assert len(transport.sent_at) == 50
    assert transport.most_in_flight == 4


async def test_a_round_is_spread_at_the_send_rate() -> None:
    transport = WindowedTransport(max_in_flight=5)
    started = time.monotonic()
    await _producer(transport, spacing=0.004).produce_round(range(40))  # 250/s
    took = time.monotonic() - started
    # Eight bursts of five, one every 20 ms: the last starts 140 ms after the first.
    assert 0.14 <= transport.sent_at[-1] - transport.sent_at[0] < 0.5
    assert took >= 0.14
    assert transport.most_in_flight <= 5


async def test_a_whole_round_at_once_without_a_window() -> None:
    transport = WindowedTransport(max_in_flight=None)
    await _producer(transport).produce_round(range(50))
    assert transport.most_in_flight == 50


def test_a_round_must_fit_in_the_interval() -> None:
    with pytest.raises(ConfigError) as caught:
        load(overrides={"mqtt.url": "mqtt://b", "mqtt.shards": 20_000, "interval": "20s"})
    assert caught.value.field == "mqtt.max_send_rate"
    assert "20000 shards at 500/s take longer than the interval (20s)" in caught.value.message
    unlimited = {"mqtt.url": "mqtt://b", "mqtt.shards": 20_000, "mqtt.max_send_rate": 0}
    assert load(overrides=unlimited).mqtt.shards == 20_000
