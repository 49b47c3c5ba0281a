"""The `sla-probe` console script on bad input: exit 2, one line naming the setting.

Each test drives the real console script in a subprocess, as a user or a deploy
pipeline would, and bounds it with a deadline: before these rules, some of these
inputs hung (`--interval inf`) or passed on the embedded broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from probe import cli
from probe.config import ProbeConfig
from tests.conftest import SLA_PROBE

# A config error is found before any broker is contacted: well within this.
DEADLINE = 60

NO_BROKER = ["--bootstrap-servers", "127.0.0.1:1"]


def sla_probe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The caller's SLA_PROBE_* variables must not leak into what is tested here.
    base = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    return subprocess.run(
        [SLA_PROBE, *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def assert_config_error(result: subprocess.CompletedProcess[str], field: str) -> str:
    """Exit 2, exactly one line on stderr, naming ``field``; returns that line."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"sla-probe: config error: {field}: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


# --- A blank or malformed broker list never falls back to the embedded broker ----------


@pytest.mark.parametrize("servers", ["", "  ", "host:notaport", "a:9092,,b:9092"])
def test_once_refuses_a_blank_or_malformed_broker_flag(servers: str) -> None:
    assert_config_error(
        sla_probe("once", "--bootstrap-servers", servers), "kafka.bootstrap_servers"
    )


def test_once_refuses_an_empty_broker_variable() -> None:
    result = sla_probe("once", env={"SLA_PROBE_BOOTSTRAP_SERVERS": ""})
    assert_config_error(result, "kafka.bootstrap_servers")


def test_once_refuses_an_empty_broker_list_in_the_file(tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text('kafka:\n  bootstrap_servers: ""\n')
    result = sla_probe("once", "--config", str(config))
    assert_config_error(result, "kafka.bootstrap_servers")


# --- No broker at all: `once` asks for one; the embedded broker only with --embedded -----

NO_BROKER_LINE = (
    "sla-probe: config error: kafka.bootstrap_servers: is not set: pass --bootstrap-servers "
    "/ SLA_PROBE_BOOTSTRAP_SERVERS (or set it in --config), or --embedded to probe a broker "
    "started for this run"
)


def test_once_without_a_broker_exits_two_saying_how_to_give_one(tmp_path: Path) -> None:
    """The CI job whose variable is unset, or whose --config was forgotten, used to
    pass against the embedded broker, having checked nothing of its pipeline."""
    unset = sla_probe("once", "--json")
    assert_config_error(unset, "kafka.bootstrap_servers")
    assert unset.stderr.splitlines() == [NO_BROKER_LINE]
    assert unset.stdout == ""
    config = tmp_path / "probe.yaml"
    config.write_text("once:\n  rounds: 1\n")  # a file that names no broker
    no_broker_in_file = sla_probe("once", "--config", str(config))
    assert no_broker_in_file.stderr.splitlines() == [NO_BROKER_LINE]
    off = sla_probe("once", env={"SLA_PROBE_EMBEDDED": "false"})
    assert off.stderr.splitlines() == [NO_BROKER_LINE]


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--embedded", "--bootstrap-servers", "kafka:9092"],
            {},
            "cannot be combined with kafka.bootstrap_servers",
        ),
        (
            [],
            {"SLA_PROBE_EMBEDDED": "1", "SLA_PROBE_BOOTSTRAP_SERVERS": "kafka:9092"},
            "cannot be combined with kafka.bootstrap_servers",
        ),
        (
            ["--embedded", "--targets", "mqtt", "--mqtt-url", "mqtt://127.0.0.1:1"],
            {},
            "starts a Kafka broker, but targets leaves kafka out",
        ),
    ],
)
def test_embedded_with_nothing_to_start_it_for_exits_two(
    args: list[str], env: dict[str, str], message: str
) -> None:
    line = assert_config_error(sla_probe("once", *args, env=env), "once.embedded")
    assert message in line


def test_run_has_no_embedded_broker() -> None:
    """`run` never had a fallback: it refuses to start without a broker, and --embedded
    is not one of its flags."""
    result = sla_probe("run", "--allow-ephemeral-key")
    assert_config_error(result, "kafka.bootstrap_servers")
    assert sla_probe("run", "--embedded").returncode == 2


def test_run_and_sink_refuse_a_blank_broker_list(tmp_path: Path) -> None:
    result = sla_probe("run", "--allow-ephemeral-key", env={"SLA_PROBE_BOOTSTRAP_SERVERS": " "})
    assert_config_error(result, "kafka.bootstrap_servers")
    result = sla_probe("sink", "--bootstrap-servers", "", "--sink-path", str(tmp_path))
    assert_config_error(result, "kafka.bootstrap_servers")


# --- Durations and numbers: bounded, finite, one line -----------------------------------


@pytest.mark.parametrize(
    ("command", "args", "field"),
    [
        ("once", ["--interval", "nan"], "once.interval"),
        ("once", ["--interval", "inf"], "once.interval"),
        ("once", ["--interval", "1e9"], "once.interval"),
        ("once", ["--interval", "0.001"], "once.interval"),
        ("once", ["--fetch-max-wait", "1h"], "kafka.fetch_max_wait"),
        ("once", ["--send-timeout", "inf"], "kafka.send_timeout"),
        ("once", ["--rounds", "many"], "once.rounds"),
        ("run", ["--interval", "0.001"], "interval"),
        ("run", ["--interval", "inf"], "interval"),
        ("run", ["--metrics-port", "http"], "metrics.port"),
        ("run", ["--metrics-port", "70000"], "metrics.port"),
    ],
)
def test_bad_values_exit_two_with_one_line(command: str, args: list[str], field: str) -> None:
    extra = ["--allow-ephemeral-key"] if command == "run" else []
    assert_config_error(sla_probe(command, *NO_BROKER, *extra, *args), field)


@pytest.mark.parametrize(
    ("yaml_text", "field"),
    [
        ("kafka: null\n", "kafka"),
        ("judge: 5s\n", "judge"),
        ("interval: 20s\nkafka:\n  topic: a\ninterval: 2s\n", "interval"),
        ("canary:\n  size: 5000\n  max_size: 4096\n", "canary.size"),
    ],
)
def test_bad_files_exit_two_with_one_line(tmp_path: Path, yaml_text: str, field: str) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text(yaml_text)
    line = assert_config_error(sla_probe("once", "--config", str(config)), field)
    assert "Config" not in line  # no pydantic model names


# --- The metrics server's port and host: known only when `run` or `sink` starts ---------


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port someone else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def test_run_on_a_busy_metrics_port_exits_two(busy_port: int) -> None:
    result = sla_probe("run", "--metrics-port", str(busy_port), *NO_BROKER, "--allow-ephemeral-key")
    line = assert_config_error(result, "metrics.port")
    assert str(busy_port) in line


def test_run_on_an_unresolvable_metrics_host_exits_two(tmp_path: Path) -> None:
    config = tmp_path / "probe.yaml"
    config.write_text("metrics:\n  host: no-such-host.invalid\n  port: 0\n")
    result = sla_probe("run", "--config", str(config), *NO_BROKER, "--allow-ephemeral-key")
    line = assert_config_error(result, "metrics.host")
    assert "no-such-host.invalid" in line


def test_sink_on_a_busy_metrics_port_exits_two(
    busy_port: int, key_file: Path, tmp_path: Path
) -> None:
    # The port is taken before Spark starts: no Spark session is needed to see this.
    result = sla_probe(
        "sink", "--metrics-port", str(busy_port), *NO_BROKER,
        "--sink-path", str(tmp_path / "sink"), "--signing-key-file", str(key_file),
    )  # fmt: skip
    assert_config_error(result, "metrics.port")


def test_sink_exports_traces_by_the_otel_environment(key_file: Path, tmp_path: Path) -> None:
    # The sink installs the tracer provider (its commit spans join the producer's
    # traces): an export setting it cannot use is refused before Spark starts.
    result = sla_probe(
        "sink", *NO_BROKER,
        "--sink-path", str(tmp_path / "sink"), "--signing-key-file", str(key_file),
        env={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
    )  # fmt: skip
    assert_config_error(result, "OTEL_EXPORTER_OTLP_PROTOCOL")


# --- reconcile on a sink path that holds no tables ----------------------------------------


def test_reconcile_on_a_sink_path_that_does_not_exist_says_so_in_one_line(
    key_file: Path, tmp_path: Path
) -> None:
    """The sink's tables are not there: nothing to reconcile, said before Spark starts
    (it once ended in a traceback about Spark's log file), and nothing is created."""
    missing = tmp_path / "not-yet" / "sink"
    result = sla_probe(
        "reconcile", *NO_BROKER,
        "--sink-path", str(missing), "--signing-key-file", str(key_file),
    )  # fmt: skip
    line = assert_config_error(result, "sink.path")
    assert str(missing) in line
    assert "--sink-path" in line
    assert not missing.parent.exists()


# --- Help and hints that say what applies -----------------------------------------------


def test_sink_without_a_key_file_asks_for_the_shared_one(tmp_path: Path) -> None:
    result = sla_probe("sink", *NO_BROKER, "--sink-path", str(tmp_path / "sink"))
    line = assert_config_error(result, "signing_key_file")
    assert "--signing-key-file" in line
    assert "--allow-ephemeral-key" not in line  # sink has no such flag


def test_sink_help_lists_only_the_flags_that_apply() -> None:
    result = sla_probe("sink", "--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--bootstrap-servers", "--topic", "--sink-path", "--signing-key-file"):
        assert flag in result.stdout
    for flag in ("--mqtt", "--targets", "--stages", "--interval", "--send-timeout", "--json"):
        assert flag not in result.stdout
    # Every flag it lists is one it accepts.
    assert sla_probe("sink", "--allow-ephemeral-key").returncode == 2


def test_once_help_lists_every_exit_code() -> None:
    result = sla_probe("once", "--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "Exit codes:" in text
    for code in ("0 every canary delivered", "1 SLO failed", "2 usage or configuration error"):
        assert code in text


def _loaded(command_name: str, *args: str) -> ProbeConfig:
    """The config a command would run with, from its flags and the environment."""
    command = cli.main.commands[command_name]  # type: ignore[attr-defined]
    with command.make_context(command_name, ["--bootstrap-servers", "kafka-0:9092", *args]) as ctx:
        flags = {k: v for k, v in ctx.params.items() if k not in {"config_file", "json", "junit"}}
        return cli._load(None, flags)


@pytest.mark.parametrize(("value", "managed"), [("true", False), ("1", False), ("false", True)])
def test_a_negative_flags_variable_says_whether_the_flag_is_given(
    value: str, managed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SLA_PROBE_NO_CREATE_TOPIC=true is --no-create-topic (creation off), as any flag's
    variable is the flag; click would have taken its truth for the setting's value."""
    monkeypatch.setenv("SLA_PROBE_NO_CREATE_TOPIC", value)
    monkeypatch.setenv("SLA_PROBE_NO_MOVE_LEADERS", value)
    config = _loaded("run")
    assert config.kafka.create_topic is managed
    assert config.kafka.move_leaders is managed


def test_once_manages_the_topic_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` manages the topic by default (kafka.create_topic, kafka.move_leaders); `once`,
    a smoke test that may run against production, only when asked (once.create_topic,
    once.move_leaders), by flag or variable."""
    once = _loaded("once").once
    assert (once.create_topic, once.move_leaders) == (False, False)
    once = _loaded("once", "--create-topic").once
    assert (once.create_topic, once.move_leaders) == (True, False)
    monkeypatch.setenv("SLA_PROBE_CREATE_TOPIC", "true")
    monkeypatch.setenv("SLA_PROBE_MOVE_LEADERS", "true")
    once = _loaded("once").once
    assert (once.create_topic, once.move_leaders) == (True, True)
    # The same flags for `run` set kafka's settings.
    monkeypatch.delenv("SLA_PROBE_CREATE_TOPIC")
    monkeypatch.delenv("SLA_PROBE_MOVE_LEADERS")
    run = _loaded("run", "--no-create-topic")
    assert (run.kafka.create_topic, run.once.create_topic) == (False, False)


def test_once_moves_leaders_only_managing_the_topic() -> None:
    line = assert_config_error(
        sla_probe("once", "--bootstrap-servers", "kafka-0:9092", "--move-leaders"),
        "once.move_leaders",
    )
    assert "needs once.create_topic (--create-topic)" in line
