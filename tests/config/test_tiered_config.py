"""The tiered section: off unless enabled; enabled, it needs the Kafka target and a read
that ends before the next starts, refused naming the field, as `run` exits 2 on it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from probe.config import load
from probe.core.errors import ConfigError
from tests.conftest import SLA_PROBE


def test_tiered_reads_are_off_by_default_and_on_with_one_value() -> None:
    assert not load(overrides={"kafka.bootstrap_servers": "k:9092"}).tiered.enabled
    tiered = load(overrides={"kafka.bootstrap_servers": "k:9092", "tiered.enabled": "true"}).tiered
    assert (tiered.enabled, tiered.age, tiered.every, tiered.timeout) == (True, 3600, 60, 30)


@pytest.mark.parametrize(
    ("overrides", "field", "says"),
    [
        ({"mqtt.url": "mqtt://m:1883"}, "tiered.enabled", "set kafka.bootstrap_servers"),
        (
            {"kafka.bootstrap_servers": "k:9092", "tiered.every": "20s"},
            "tiered.timeout",
            "shorter than tiered.every (20s)",
        ),
        ({"kafka.bootstrap_servers": "k:9092", "tiered.age": "0s"}, "tiered.age", ""),
        ({"kafka.bootstrap_servers": "k:9092", "tiered.partitions": "0"}, "tiered.partitions", ""),
    ],
)
def test_a_tiered_read_that_cannot_work_is_refused_naming_the_field(
    overrides: dict[str, str], field: str, says: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load(overrides={"tiered.enabled": "true", **overrides})
    assert refused.value.field == field
    assert says in str(refused.value)


def test_run_exits_2_with_one_line_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text("tiered: {enabled: true, every: 10s}\n")
    done = subprocess.run(
        [SLA_PROBE, "run", "--bootstrap-servers", "k:9092", "--allow-ephemeral-key",
         "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("sla-probe: config error: tiered.timeout:"), lines
