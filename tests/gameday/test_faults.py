"""Each built-in fault against the real embedded broker: in place after inject, gone
after heal, and the records it writes are what it promises."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from probe.core.canary import Canary, decode, encode
from probe.core.errors import CanaryRejected, RejectReason
from probe.core.keys import generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.gameday.faults import FAULTS, build_fault
from probe.gameday.faults.base import LocalTargets
from probe.gameday.faults.clock_skew import shifted_clock_environment
from probe.gameday.faults.hostile import tamper
from probe.gameday.faults.proxy import TcpProxy
from probe.gameday.scenario import (
    BrokerDataLoss,
    BrokerStop,
    Fault,
    HostileRecords,
    ProbeRestart,
    ProducerClockSkew,
    ReplayedCanaries,
    SinkStall,
)
from probe.transport.kafka_records import read_latest, write_records

RING = generate_key_ring("k1")


class _Process:
    """Stands in for the probe process: records what the fault did to it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.environment: dict[str, str] = {}

    def stop(self) -> None:
        self.calls.append("stop")

    def start(self) -> None:
        self.calls.append(f"start {self.environment.get('FAKETIME', '')}".strip())

    def send_signal(self, signal_number: int) -> None:
        self.calls.append(signal.Signals(signal_number).name)


@pytest.fixture
def targets(tmp_path: Path) -> Iterator[LocalTargets]:
    with EmbeddedBroker(log_file=tmp_path / "tansu.log") as broker, TcpProxy(broker.port) as proxy:
        yield LocalTargets(
            broker=broker,
            proxy=proxy,
            probe=_Process(),
            topic=f"fault-{uuid.uuid4().hex[:8]}",
            partitions=3,
            key_file=tmp_path / "keys.json",
            probe_id="probe-under-test",
        )


def _canaries(targets: LocalTargets, count: int) -> list[bytes]:
    canaries = [
        encode(Canary("probe-under-test", 1, "kafka", 0, seq, 1_000 + seq), RING)
        for seq in range(count)
    ]
    write_records(targets.bootstrap_servers, targets.topic, [(0, c) for c in canaries])
    return canaries


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def test_every_fault_kind_of_the_scenario_model_is_built_or_known_unbuilt() -> None:
    kinds = {
        get_args(model.model_fields["kind"].annotation)[0] for model in get_args(get_args(Fault)[0])
    }
    # Staging's hooks and the faults still to build are the only kinds without a class.
    assert kinds - set(FAULTS) == {"hooks"}
    assert set(FAULTS) <= kinds


def test_broker_stop_takes_the_broker_away_until_healed(targets: LocalTargets) -> None:
    fault = build_fault(BrokerStop(kind="broker-stop"), targets)
    fault.inject()
    assert not _listening(targets.broker.port)
    fault.heal()
    assert _listening(targets.broker.port)


def test_broker_data_loss_restarts_the_broker_empty(targets: LocalTargets) -> None:
    _canaries(targets, 3)
    assert len(read_latest(targets.bootstrap_servers, targets.topic, 0, 10)) == 3
    fault = build_fault(BrokerDataLoss(kind="broker-data-loss"), targets)
    fault.inject()
    assert _listening(targets.broker.port)
    fault.heal()
    # The topic came back (auto-created on this read's metadata request or not): empty.
    assert read_latest(targets.bootstrap_servers, targets.topic, 0, 10) == []


def test_hostile_records_are_malformed_and_tampered_canaries(targets: LocalTargets) -> None:
    _canaries(targets, 5)
    spec = HostileRecords(kind="hostile-records", random=3, tampered=2, random_size=40)
    build_fault(spec, targets).inject()
    written = read_latest(targets.bootstrap_servers, targets.topic, 0, 100)
    # Partition 0 holds the 5 canaries, the 2 tampered copies, and random record 0.
    reasons = []
    for record in written[5:]:
        with pytest.raises(CanaryRejected) as rejected:
            decode(record, RING)
        reasons.append(rejected.value.reason)
    assert sorted(reasons) == sorted(
        [RejectReason.MALFORMED, RejectReason.BAD_SIGNATURE, RejectReason.BAD_SIGNATURE]
    )


def test_tamper_flips_one_bit_of_the_mac() -> None:
    canary = encode(Canary("p", 1, "kafka", 0, 0, 1), RING)
    tampered = tamper(canary)
    assert len(tampered) == len(canary)
    assert sum(a != b for a, b in zip(canary, tampered, strict=True)) == 1
    with pytest.raises(CanaryRejected) as rejected:
        decode(tampered, RING)
    assert rejected.value.reason is RejectReason.BAD_SIGNATURE


def test_replayed_canaries_are_byte_for_byte_copies(targets: LocalTargets) -> None:
    canaries = _canaries(targets, 5)
    build_fault(ReplayedCanaries(kind="replayed-canaries", count=3), targets).inject()
    assert read_latest(targets.bootstrap_servers, targets.topic, 0, 100) == [
        *canaries,
        *canaries[2:],
    ]


def test_probe_restart_stops_then_starts_the_probe(targets: LocalTargets) -> None:
    fault = build_fault(ProbeRestart(kind="probe-restart"), targets)
    fault.inject()
    fault.heal()
    assert targets.probe.calls == ["stop", "start"]  # type: ignore[attr-defined]


def test_sink_stall_holds_the_probes_sink_until_healed(targets: LocalTargets) -> None:
    """The probe's own drill hook: SIGUSR1 holds its sink's batches, SIGUSR2 resumes
    them (what the probe does with them: tests/spark/test_sink_service.py)."""
    fault = build_fault(SinkStall(kind="sink-stall"), targets)
    fault.inject()
    assert targets.probe.calls == ["SIGUSR1"]  # type: ignore[attr-defined]
    fault.heal()
    assert targets.probe.calls == ["SIGUSR1", "SIGUSR2"]  # type: ignore[attr-defined]


def test_producer_clock_skew_restarts_the_probe_shifted_then_true(targets: LocalTargets) -> None:
    fault = build_fault(ProducerClockSkew(kind="producer-clock-skew", offset=-12.5), targets)
    fault.inject()
    assert targets.probe.calls == ["stop", "start -12.5"]  # type: ignore[attr-defined]
    fault.heal()
    assert targets.probe.calls[2:] == ["stop", "start"]  # type: ignore[attr-defined]


def test_a_shifted_clock_moves_the_wall_clock_and_leaves_the_monotonic_one(
    tmp_path: Path,
) -> None:
    """What the probe process gets at inject, on a real process: its wall clock 30 s
    ahead, the monotonic clock its event loop's timers use the same as everyone's."""
    script = "import time; print(time.time(), time.monotonic())"
    before_wall, before_mono = time.time(), time.monotonic()
    shown = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **shifted_clock_environment(30.0)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    after_wall, after_mono = time.time(), time.monotonic()
    wall, mono = float(shown[0]), float(shown[1])
    assert before_wall + 30 <= wall <= after_wall + 30
    assert before_mono <= mono <= after_mono


def test_silent_partition_strips_one_partitions_records_from_fetches(tmp_path: Path) -> None:
    """A real broker behind the Kafka-aware proxy; a real aiokafka reader through it."""
    import asyncio  # noqa: PLC0415

    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    from probe.embedded import free_loopback_port  # noqa: PLC0415
    from probe.gameday.local import ProxiedBroker  # noqa: PLC0415
    from probe.gameday.scenario import SilentPartition  # noqa: PLC0415

    proxy_port = free_loopback_port()
    topic = f"silent-{uuid.uuid4().hex[:8]}"
    with (
        ProxiedBroker(proxy_port, log_file=tmp_path / "tansu.log") as broker,
        TcpProxy(broker.port, port=proxy_port, kafka=True) as proxy,
    ):
        targets = LocalTargets(broker, proxy, _Process(), topic, 3, tmp_path / "k", "p")
        fault = build_fault(SilentPartition(kind="silent-partition", partition=1), targets)
        fault.inject()
        write_records(proxy.address, topic, [(p, f"r{p}".encode()) for p in (0, 1, 2)])

        async def read_all() -> dict[int, list[bytes]]:
            consumer = AIOKafkaConsumer(bootstrap_servers=proxy.address, fetch_max_wait_ms=50)
            tps = [TopicPartition(topic, p) for p in (0, 1, 2)]
            await consumer.start()
            try:
                consumer.assign(tps)
                for tp in tps:
                    consumer.seek(tp, 0)
                seen: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
                for _ in range(20):
                    batch = await consumer.getmany(timeout_ms=100)
                    for tp, records in batch.items():
                        seen[tp.partition] += [r.value for r in records]
                return seen
            finally:
                await consumer.stop()

        silenced = asyncio.run(read_all())
        # Acknowledged (the write returned) and in the log, never read.
        assert silenced == {0: [b"r0"], 1: [], 2: [b"r2"]}
        assert proxy.partition_filter.stripped_batches > 0
        fault.heal()
        assert asyncio.run(read_all()) == {0: [b"r0"], 1: [b"r1"], 2: [b"r2"]}


@pytest.mark.parametrize(
    ("scenario", "embedded", "mirror", "tiered"),
    [
        ("broker-stop", True, False, False),
        ("kafka-broker-stop", False, False, False),
        ("mirror-stop", False, True, False),
        ("tiered-store-unreadable", False, False, True),
    ],
)
def test_each_environment_runs_the_brokers_its_scenario_names(
    tmp_path: Path, scenario: str, embedded: bool, mirror: bool, tiered: bool
) -> None:
    # Built, not started: the embedded broker only for `broker: embedded`, Apache
    # Kafka's cluster otherwise, MirrorMaker 2 with its target cluster only for a probe
    # with the mirror stage, tiered storage only for one with tiered reads (a mirror
    # block once took the embedded broker's `else` as its own, and every cluster game
    # day ran on the embedded broker too).
    from probe.gameday.local import LocalEnvironment  # noqa: PLC0415
    from probe.gameday.scenario import load_scenario  # noqa: PLC0415

    root = Path(__file__).resolve().parents[2]
    env = LocalEnvironment(load_scenario(root / "scenarios" / f"{scenario}.yaml"), tmp_path)
    assert (env.broker is not None) is embedded
    assert (env.cluster is None) is embedded
    assert (env.mirror is not None) is mirror
    assert (env.mirror_cluster is not None) is mirror
    # Tiered storage's remote store, and the jar set with its storage manager, only for
    # a probe with tiered reads.
    assert (env.remote_store is not None) is tiered
    assert (env.targets.remote_store is not None) is tiered
    if env.cluster is not None:
        assert (env.cluster.release == "tiered") is tiered


def test_the_remote_store_fault_lets_no_read_or_copy_through_and_heals_as_it_was(
    tmp_path: Path,
) -> None:
    from probe.apache_kafka.tiered import RemoteStore  # noqa: PLC0415

    store = RemoteStore(tmp_path / "remote")
    segment = tmp_path / "remote" / "kafka-tiered-storage" / "t-0-id" / "00000.log"
    segment.parent.mkdir(parents=True)
    segment.write_bytes(b"records")
    store.make_unreadable()
    # LocalTieredStorage reads and writes under this path: a file there fails both.
    assert not segment.exists()
    assert (tmp_path / "remote" / "kafka-tiered-storage").is_file()
    store.restore()
    assert segment.read_bytes() == b"records"
