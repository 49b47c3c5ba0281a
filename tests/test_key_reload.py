"""`sla-probe run` follows its key file: rotation without a restart, against the real broker."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from probe.core.keys import KeyRing, generate_key_ring
from probe.embedded import EmbeddedBroker
from probe.keyfile import read_key_file
from tests.conftest import SLA_PROBE, RunningProbe, run_args, sample, wait_for

PARTITIONS = (0, 1, 2)


def _messages(probe: RunningProbe) -> list[str]:
    return [
        json.loads(line)["msg"]
        for line in probe.log.read_text().splitlines()
        if line.startswith("{")
    ]


def _logged(probe: RunningProbe, *fragments: str) -> bool:
    return any(all(f in message for f in fragments) for message in _messages(probe))


def _keygen(*args: str) -> None:
    subprocess.run([SLA_PROBE, "keygen", *args], check=True, capture_output=True, timeout=30)


def _ends(consumer: Consumer, topic: str) -> dict[int, int]:
    return {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
        for p in PARTITIONS
    }


def _kids_from_now_on(broker: EmbeddedBroker, topic: str, count: int) -> set[str]:
    """Key ids of the next `count` records written to the topic (confluent-kafka)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "kid-reader",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, o) for p, o in _ends(consumer, topic).items()])
        records: list[bytes] = []

        def read_more() -> bool:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                records.append(message.value())
            return len(records) >= count

        wait_for(read_more, timeout=30, what=f"{count} new records")
        return {record[4 : 4 + record[3]].decode("ascii") for record in records}
    finally:
        consumer.close()


def _still_delivering(probe: RunningProbe) -> None:
    before = probe.canaries("delivered")
    wait_for(
        lambda: probe.canaries("delivered") >= before + 3,
        timeout=30,
        what="canaries still delivered",
    )
    assert probe.process.poll() is None
    assert sample(probe.metrics(), "synthetic_sla_invalid_total") == 0
    assert probe.canaries("lost") == 0


def test_run_reloads_its_key_file_on_change_and_on_sighup(
    broker: EmbeddedBroker,
    topic: str,
    tmp_path: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    key_file = tmp_path / "keys.json"
    key_file.write_text(generate_key_ring("k1").to_json())
    key_file.chmod(0o644)
    (tmp_path / "first.json").write_text(key_file.read_text())
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, key_file))
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")
    assert _logged(probe, "signing keys from", "active k1, keys k1")
    assert _logged(probe, "readable by group or others (mode 0o644)")

    # Rotation steps 1 and 2, each an atomic rename by keygen, picked up by polling.
    _keygen("--add", str(key_file), "--kid", "k2")
    wait_for(
        lambda: _logged(probe, "reloaded", "active k1, keys k1, k2"),
        timeout=15,
        what="step 1 reloaded",
    )
    _keygen("--activate", str(key_file), "--kid", "k2")
    wait_for(
        lambda: _logged(probe, "reloaded", "active k2, keys k1, k2"),
        timeout=15,
        what="step 2 reloaded",
    )
    assert _kids_from_now_on(broker, topic, 6) == {"k2"}
    _still_delivering(probe)

    # An in-place rewrite that keeps inode, size and mtime (k1 becomes a new active k3):
    # polling cannot see it, SIGHUP reloads it.
    current = read_key_file(key_file)
    secret = current.secret_for("k2")
    assert secret is not None
    rewritten = KeyRing({"k2": secret, "k3": b"3" * 32}, active="k3").to_json()
    size, mtime_ns = key_file.stat().st_size, key_file.stat().st_mtime_ns
    assert len(rewritten) == size
    fd = os.open(key_file, os.O_WRONLY)
    try:
        os.write(fd, rewritten.encode("ascii"))
    finally:
        os.close(fd)
    os.utime(key_file, ns=(mtime_ns, mtime_ns))
    probe.process.send_signal(signal.SIGHUP)
    wait_for(
        lambda: _logged(probe, "reloaded", "active k3, keys k2, k3"),
        timeout=15,
        what="the SIGHUP reload",
    )
    assert _kids_from_now_on(broker, topic, 6) == {"k3"}
    _still_delivering(probe)

    # Rotation step 3.
    _keygen("--drop", str(key_file), "--kid", "k2")
    wait_for(lambda: _logged(probe, "reloaded", "active k3, keys k3"), timeout=15, what="step 3")
    _still_delivering(probe)

    # An invalid new file changes nothing but a warning.
    broken = tmp_path / "broken.json"
    broken.write_text('{"active": "k4", "keys": {"k3": "' + "MzMz" * 11 + 'Mw=="}}')
    os.replace(broken, key_file)
    wait_for(
        lambda: _logged(
            probe,
            "not reloaded, keeping the current ring (active k3, keys k3)",
            "signing_key_file.active: must name one of the keys ('k3',), got 'k4'",
        ),
        timeout=15,
        what="the invalid file refused",
    )
    assert _kids_from_now_on(broker, topic, 6) == {"k3"}
    _still_delivering(probe)
    # Only the first file was open to others: keygen writes 0600.
    assert sum("readable by group or others" in m for m in _messages(probe)) == 1
    probe.stop()
    assert probe.process.returncode == 0
    log = probe.log.read_text()
    for ring in (current, read_key_file(tmp_path / "first.json"), KeyRing.from_json(rewritten)):
        for kid in ring.kids:
            assert base64.b64encode(ring.secret_for(kid) or b"").decode() not in log


def test_run_with_an_ephemeral_key_survives_sighup(
    broker: EmbeddedBroker, topic: str, start_probe: Callable[..., RunningProbe]
) -> None:
    probe = start_probe(*run_args(broker.bootstrap_servers, topic, None), "--allow-ephemeral-key")
    wait_for(lambda: probe.canaries("delivered") >= 1, timeout=30, what="a delivered canary")

    probe.process.send_signal(signal.SIGHUP)

    wait_for(lambda: _logged(probe, "no key file to reload"), timeout=15, what="SIGHUP answered")
    _still_delivering(probe)
    assert _logged(probe, "signing with ephemeral key ephemeral-")
