"""The `sla-probe` command line.

    sla-probe once --bootstrap-servers kafka:9092 --json   # 3 rounds, report, exit 0/1
    sla-probe once --embedded               # on a broker started for this run (a demo)
    sla-probe once --mqtt-url mqtt://broker:1883     # the MQTT target only
    sla-probe run --config probe.yaml --signing-key-file /keys/ring.json
    sla-probe keygen --output ring.json
    sla-probe keygen --add ring.json --kid k2       # key rotation: --add, --activate, --drop

Every flag of once, run, sink and reconcile can also be set as ``SLA_PROBE_<FLAG>``
(``--bootstrap-servers`` is ``SLA_PROBE_BOOTSTRAP_SERVERS``); flags win over the
environment, which wins over the ``--config`` YAML file. Exit codes: 0 all canaries
delivered, 1 SLO failed, 2 usage or configuration error (one line on stderr naming the
field, e.g.
``sla-probe: config error: kafka.bootstrap_servers: is empty; ...``).

This module only parses: the flags, the environment and the file become the settings,
which each command hands to its service in ``probe.services`` (imported when the
command runs, so ``--help`` stays fast); the service's exit code is the command's, and
a ConfigError, whenever the service finds it, is exit 2 with its one line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from probe import config as config_module
from probe.config import ProbeConfig
from probe.core.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


def _env(flag: str) -> str:
    return "SLA_PROBE_" + flag.upper().replace("-", "_")


class ConfigOption(click.Option):
    """A flag that overrides one config field (``config_path``, e.g. ``kafka.topic``).

    Values go to the config model as text, unconverted: its validation is the one
    place that turns them into types, so a bad value gets the same one-line error
    naming the field whether it came from a flag, the environment or the file.
    """

    def __init__(
        self,
        *args: Any,
        config_path: str | None = None,
        empty_env_is_value: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.config_path = config_path
        self.empty_env_is_value = empty_env_is_value

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        # Click reads a set but empty variable as unset; for some settings an empty
        # value is an error to report, not a reason to fall back to a default.
        if self.empty_env_is_value and isinstance(self.envvar, str):
            value = os.environ.get(self.envvar)
            if value is not None:
                return value
        return super().resolve_envvar_value(ctx)

    def value_from_envvar(self, ctx: click.Context) -> Any:
        value = super().value_from_envvar(ctx)
        if self.is_flag and self.flag_value is False and value is not None:
            # A negative flag (--no-create-topic): its variable says whether the flag is
            # given, as for any flag, so SLA_PROBE_NO_CREATE_TOPIC=true turns creation
            # off. Click would hand on the variable's truth as the setting's value.
            return False if click.BOOL.convert(value, self, ctx) else None
        return value


def _option(flag: str, path: str | None, help_text: str, **kwargs: Any) -> Callable[[F], F]:
    """A flag that overrides config field ``path``, also read from SLA_PROBE_<FLAG>.

    ``path`` None means the flag is not a config field (``--json``).
    """
    return click.option(
        f"--{flag}",
        flag.replace("-", "_"),
        cls=ConfigOption,
        config_path=path,
        envvar=_env(flag),
        show_envvar=True,
        default=None,
        help=help_text,
        **kwargs,
    )


def _options(*options: Callable[[F], F]) -> Callable[[F], F]:
    """Apply flags so that ``--help`` lists them in the order given."""

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _config_file() -> Callable[[F], F]:
    return click.option(
        "--config",
        "config_file",
        envvar=_env("config"),
        show_envvar=True,
        type=click.Path(path_type=Path),
        help="YAML configuration file.",
    )


def _bootstrap_servers() -> Callable[[F], F]:
    return _option(
        "bootstrap-servers",
        "kafka.bootstrap_servers",
        "Kafka brokers, host:port[,host:port...]. Blank is an error, not 'none'.",
        # An empty variable is a deploy pipeline's unset one: it must fail, not make
        # `once` probe the embedded broker and pass.
        empty_env_is_value=True,
    )


def _topic() -> Callable[[F], F]:
    return _option("topic", "kafka.topic", "Canary topic (default synthetic-sla).")


def _sink_path() -> Callable[[F], F]:
    return _option("sink-path", "sink.path", "Sink tables and checkpoint (Spark sink stage).")


def _sink_source() -> Callable[[F], F]:
    return _option(
        "sink-source",
        "sink.source",
        "What Spark reads Kafka with: sla_kafka (the probe's source, default) or kafka "
        "(Spark's connector; its jars from `make spark-kafka`).",
    )


def _spark_log() -> Callable[[F], F]:
    return _option(
        "spark-log",
        "sink.spark_log",
        "File for Spark's own output (JVM log, workers' prints); - for stderr.",
        metavar="FILE",
    )


def _target() -> Callable[[F], F]:
    return _option("target", "target", "Name of the probed pipeline (the `target` label).")


def _signing_key_file() -> Callable[[F], F]:
    return _option("signing-key-file", "signing_key_file", "Key ring file (sla-probe keygen).")


def _log_level() -> Callable[[F], F]:
    return _option("log-level", "log_level", "debug, info, warning or error.")


def _metrics_port() -> Callable[[F], F]:
    return _option(
        "metrics-port", "metrics.port", "Port of /metrics, /healthz, /readyz.", metavar="PORT"
    )


def _metrics_host() -> Callable[[F], F]:
    return _option(
        "metrics-host",
        "metrics.host",
        "Address /metrics, /healthz, /readyz bind to (default 0.0.0.0: every interface).",
        metavar="HOST",
    )


def _web_config_file() -> Callable[[F], F]:
    return click.option(
        "--web-config-file",
        "web_config_file",
        cls=ConfigOption,
        config_path="metrics.web_config_file",
        # SLA_PROBE_<FLAG> as every flag, and the variable named after the setting
        # (metrics.web_config_file), as the chart and issue 24 name it.
        envvar=[_env("web-config-file"), "SLA_PROBE_METRICS_WEB_CONFIG_FILE"],
        show_envvar=True,
        default=None,
        help="TLS, client certificates and basic auth for every endpoint: the exporter "
        "toolkit's web configuration file (as Prometheus exporters' --web.config.file).",
        metavar="FILE",
    )


def _health_port() -> Callable[[F], F]:
    return _option(
        "health-port",
        "metrics.health_port",
        "A second port, plain HTTP, serving /healthz and /readyz only: for Kubernetes "
        "probes when --web-config-file secures the metrics port (default: none).",
        metavar="PORT",
    )


# The help of the topic management's flags, by the section holding their settings.
_TOPIC_MANAGEMENT_HELP = {
    "kafka": (
        "Manage the topic: create it if missing, every broker leading a partition (the default).",
        "Do not create or administer the topic (it must exist).",
        "Let topic management move the canary topic's leaders so that every broker leads "
        "one (partition reassignment, leader elections: Alter on the cluster; the default).",
        "Topic management without moving leaders: no partition reassignment or leader "
        "election (which need Alter on the cluster).",
    ),
    "once": (
        "Manage the topic for this run: create it if missing, every broker leading a "
        "partition (off by default: a smoke test only writes and reads canaries).",
        "Do not create or administer the topic: it must exist (the default).",
        "With --create-topic, also move the canary topic's leaders so that every broker "
        "leads one (partition reassignment, leader elections: Alter on the cluster).",
        "Never move a leader (the default).",
    ),
}


def _topic_management(section: str) -> list[Callable[[F], F]]:
    """Whether the probe manages the canary topic: ``run``'s kafka.create_topic and
    kafka.move_leaders (on by default), or ``once``'s once.create_topic and
    once.move_leaders (off unless asked: a smoke test changes nothing on the cluster)."""
    create, no_create, move, no_move = _TOPIC_MANAGEMENT_HELP[section]
    return [
        _option("create-topic", f"{section}.create_topic", create, is_flag=True, flag_value=True),
        _option(
            "no-create-topic", f"{section}.create_topic", no_create, is_flag=True, flag_value=False
        ),
        _option("move-leaders", f"{section}.move_leaders", move, is_flag=True, flag_value=True),
        _option(
            "no-move-leaders", f"{section}.move_leaders", no_move, is_flag=True, flag_value=False
        ),
    ]


def _common(interval_path: str, interval_help: str, *, section: str) -> Callable[[F], F]:
    """The flags of the commands that produce canaries: `once` and `run`. ``section``
    holds their settings that differ between the two (the topic management's)."""

    def decorate(command: F) -> F:
        options = [
            _config_file(),
            _bootstrap_servers(),
            _topic(),
            _option(
                "stages",
                "stages",
                "Kafka stages: consumer, sink (Spark), group (a consumer-group member), "
                "group_consumer (one on the consumer group protocol, KIP-848), share (a "
                "share-group member, KIP-932; a preview), transactional (canaries "
                "written in transactions, read read_committed) and mirror (the canary "
                "topic as MirrorMaker 2 replicated it to mirror.bootstrap_servers), e.g. "
                "consumer,group.",
            ),
            _option("group-id", "group.id", "The group stage's consumer group id."),
            _sink_path(),
            _sink_source(),
            _spark_log(),
            _option("interval", interval_path, interval_help),
            _option("probe-id", "probe_id", "This probe instance's id (default: host name)."),
            _target(),
            _signing_key_file(),
            _option(
                "fetch-max-wait",
                "kafka.fetch_max_wait",
                "Consumer fetch max wait (1ms..10s, or auto).",
            ),
            _option(
                "send-timeout", "kafka.send_timeout", "Produce acknowledgement timeout (100ms..5m)."
            ),
            *_topic_management(section),
            _option(
                "idempotence",
                "kafka.idempotence",
                "Idempotent producer (a producer id is required; off by default).",
                is_flag=True,
                flag_value=True,
            ),
            _log_level(),
            _option(
                "targets",
                "targets",
                "Targets to probe, comma-separated: kafka, mqtt (default: those given).",
            ),
            _option("mqtt-url", "mqtt.url", "MQTT broker, mqtt://host:1883 or mqtts://host:8883."),
            _option("mqtt-target", "mqtt.target", "The MQTT target's `target` label (mqtt)."),
            _option("mqtt-topic-prefix", "mqtt.topic_prefix", "Shard topics <prefix>/<shard>."),
            _option(
                "mqtt-shards", "mqtt.shards", "Number of MQTT shards (default 3).", metavar="N"
            ),
            _option("mqtt-qos", "mqtt.qos", "MQTT QoS: 0, 1 or 2 (default 1).", metavar="N"),
            # No password flag: a flag's value shows in ps. The password comes from
            # mqtt.password_file or SLA_PROBE_MQTT_PASSWORD (config.SECRET_VARIABLES).
            _option("mqtt-username", "mqtt.username", "MQTT user name."),
            _option(
                "mqtt-persistent-session",
                "mqtt.persistent_session",
                "Keep the MQTT subscriber's session across disconnects.",
                is_flag=True,
                flag_value=True,
            ),
            _option(
                "mqtt-bridge-topic",
                "mqtt.bridge.topic",
                "Kafka topic an MQTT-to-Kafka bridge copies the canaries to (stage bridge).",
            ),
            _option("mqtt-stages", "mqtt.stages", "MQTT target stages: mqtt, bridge."),
        ]
        return _options(*options)(command)

    return decorate


def _load(config_file: Path | None, flags: dict[str, Any]) -> ProbeConfig:
    paths = {
        param.name: param.config_path
        for param in click.get_current_context().command.params
        if isinstance(param, ConfigOption) and param.config_path is not None
    }
    overrides = {paths[name]: value for name, value in flags.items() if value is not None}
    return config_module.load(config_file, overrides, environ=os.environ)


def _fail_config(error: ConfigError) -> NoReturn:
    click.echo(f"sla-probe: config error: {error}", err=True)
    sys.exit(EXIT_USAGE)


def _exit_with(service: Callable[[], int]) -> NoReturn:
    """Run a command's service and exit with its code; a ConfigError, whether of the
    settings or found once running, is exit 2 with its one line."""
    try:
        code = service()
    except ConfigError as error:
        _fail_config(error)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Synthetic end-to-end SLO probe: signed canaries through Kafka, judged on arrival."""


@main.command()
@_common("once.interval", "Time between rounds, 100ms..5m (default 1s).", section="once")
@_option("rounds", "once.rounds", "Rounds to produce (default 3).", metavar="N")
@_option(
    "embedded",
    "once.embedded",
    "Probe a Kafka broker started for this run on a free loopback port (a demo, not "
    "a check of any pipeline); instead of --bootstrap-servers.",
    is_flag=True,
    flag_value=True,
)
@_option(
    "push-gateway",
    "once.push_gateway.url",
    "Push the result to this Prometheus Pushgateway (http(s)://host:9091), one group "
    "per target; a failed push is reported and leaves the exit code as it is.",
    metavar="URL",
)
@_option(
    "push-gateway-job",
    "once.push_gateway.job",
    "The pushed groups' job label (default synthetic-sla-smoke).",
    metavar="JOB",
)
@_option(
    "push-gateway-instance",
    "once.push_gateway.instance",
    "The pushed groups' instance label (default: the target's name, the same every run, "
    "never the host name a CI job changes).",
    metavar="NAME",
)
@_option("json", None, "Print the report as JSON.", is_flag=True, flag_value=True)
@_option(
    "junit",
    None,
    "Also write the report as JUnit XML to FILE (one case per target and stage, and "
    "per failing partition), for a CI system to display.",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
)
def once(config_file: Path | None, json: bool | None, junit: Path | None, **flags: Any) -> None:
    """Run a few rounds, wait for every canary's fate, report, exit 0 (ok) or 1.

    Kafka is probed at --bootstrap-servers, or with --embedded on a broker started
    for this run and stopped afterwards. Neither given (an unset variable, a
    forgotten --config) is an error, exit 2, never a pass on some other broker; so
    is a blank or malformed broker list. With only --mqtt-url, only MQTT is probed.

    \b
    Exit codes:
      0  every canary delivered in time at every stage, nothing unexpected seen
      1  SLO failed: a canary late, lost or never acknowledged, an anomaly
         (duplicate, out of order, invalid record), or nothing measured (the
         report's error says why: broker unreachable, topic missing)
      2  usage or configuration error: one line on stderr naming the setting
      130, 143  stopped by SIGINT or SIGTERM before it could report
    """
    from probe.services.once import run_once  # noqa: PLC0415 - keep `--help` fast

    _exit_with(lambda: run_once(_load(config_file, flags), as_json=bool(json), junit=junit))


@main.command()
@_common("interval", "Time between rounds, 1s..1h (default 20s).", section="kafka")
@_metrics_port()
@_metrics_host()
@_web_config_file()
@_health_port()
@_option(
    "allow-ephemeral-key",
    "allow_ephemeral_key",
    "Run with a random key when no key file is given (canaries then verify only here).",
    is_flag=True,
    flag_value=True,
)
def run(config_file: Path | None, **flags: Any) -> None:
    """Probe continuously and serve metrics until SIGTERM or SIGINT.

    Exits 2 with one line on stderr for a configuration error, including a metrics
    port already in use or a metrics host that does not resolve.
    """
    from probe.services.run import run_probe  # noqa: PLC0415 - keep `--help` fast

    _exit_with(lambda: run_probe(_load(config_file, flags)))


@main.command()
@_options(
    _config_file(),
    _bootstrap_servers(),
    _topic(),
    _sink_path(),
    _sink_source(),
    _spark_log(),
    _target(),
    _signing_key_file(),
    _log_level(),
    _metrics_port(),
    _metrics_host(),
    _web_config_file(),
    _health_port(),
)
def sink(config_file: Path | None, **flags: Any) -> None:
    """Run only the Spark sink stage and serve its metrics (e.g. under spark-submit).

    It judges the canaries of a `sla-probe run` elsewhere, so it needs that probe's
    key file (--signing-key-file) and topic.
    """
    from probe.services.sink import run_sink  # noqa: PLC0415 - keep `--help` fast

    _exit_with(lambda: run_sink(_load(config_file, flags)))


@main.command()
@_options(
    _config_file(),
    _bootstrap_servers(),
    _topic(),
    _sink_path(),
    _option(
        "table",
        "reconcile.table",
        "Parquet table to reconcile (default: the sink stage's <sink path>/canaries).",
        metavar="URI",
    ),
    _option(
        "format",
        "reconcile.format",
        "How a record becomes its row: canary (the sink's canaries/), raw (value bytes), "
        "json (value fields).",
    ),
    _option(
        "partition-column", "reconcile.partition_column", "Table column of the Kafka partition."
    ),
    _option("offset-column", "reconcile.offset_column", "Table column of the Kafka offset."),
    _option(
        "key-column",
        "reconcile.key_column",
        "Match rows by this table column instead of partition and offset.",
    ),
    _option(
        "source-key",
        "reconcile.source_key",
        "With --key-column, format json: the value's field holding the key "
        "(default: the record's Kafka key).",
    ),
    _option(
        "time-column",
        "reconcile.time_column",
        "With --key-column: the table's time column, so rows no record matches count as extra.",
    ),
    _option(
        "checksum-columns",
        "reconcile.checksum_columns",
        "Table columns the checksum covers, comma-separated (raw: 1; json: the fields).",
    ),
    _option("window", "reconcile.window.duration", "Windows of record time (default 5m)."),
    _option(
        "window-offsets",
        "reconcile.window.offsets",
        "Windows of N offsets instead of time.",
        metavar="N",
    ),
    _option(
        "settle",
        "reconcile.settle",
        "Records younger than this are in flight, not missing (default: sink.freshness).",
    ),
    _option("lookback", "reconcile.lookback", "How far back each run looks (default 1h)."),
    _option(
        "every",
        "reconcile.every",
        "Keep reconciling this often, serving /metrics and /readyz (default: once).",
    ),
    _option(
        "report-path", "reconcile.report_path", "Report table (default <sink path>/reconciliation)."
    ),
    _option("run-id", None, "This run's id in the report table (a rerun replaces its rows)."),
    _sink_source(),
    _spark_log(),
    _target(),
    _signing_key_file(),
    _log_level(),
    _metrics_port(),
    _metrics_host(),
    _web_config_file(),
    _health_port(),
    _option("json", None, "Print the result as JSON.", is_flag=True, flag_value=True),
)
def reconcile(
    config_file: Path | None, json: bool | None, run_id: str | None, **flags: Any
) -> None:
    """Prove every record of the topic reached its table, by count and checksum per
    window and partition (a Spark batch job; spark-submit: probe/submit.py).

    \b
    sla-probe reconcile --bootstrap-servers kafka:9092 --sink-path /data/sla-sink \\
        --signing-key-file keys.json           # the sink stage's canaries/ table
    sla-probe reconcile --topic orders --table s3a://lake/orders --format json \\
        --checksum-columns id,amount --window 10m --json
    sla-probe reconcile ... --every 5m --metrics-port 9465     # as a service

    \b
    Exit codes (one run):
      0  records were compared and every window older than the settle delay is
         complete (unverifiable ones, whose records left the topic, are reported,
         not judged)
      1  a record is missing, extra, duplicated or has another checksum; or no
         comparison could be made (the result says why)
      2  usage or configuration error: one line on stderr naming the setting
      3  nothing compared, not a pass: every window empty or unverifiable; records
         written lately wait in windows still open, and the result says when a run
         compares them (a window's end plus the settle delay)
    """
    from probe.services.reconcile import run_reconcile  # noqa: PLC0415 - keep `--help` fast

    _exit_with(
        lambda: run_reconcile(_load(config_file, flags), run_id=run_id, as_json_output=bool(json))
    )


@main.command()
@click.option(
    "--kid",
    default=None,
    help="Key id: of the new key (default: random), or of the key to activate or drop.",
)
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Write a new key ring here (mode 0600) instead of printing it.",
)
@click.option("--force", is_flag=True, help="With --output: replace an existing file.")
@click.option(
    "--add",
    "add_to",
    type=click.Path(path_type=Path),
    default=None,
    help="Add a new random key to this key file; the active key stays (rotation step 1).",
)
@click.option(
    "--activate",
    "activate_in",
    type=click.Path(path_type=Path),
    default=None,
    help="Make key --kid the active key of this key file (rotation step 2).",
)
@click.option(
    "--drop",
    "drop_from",
    type=click.Path(path_type=Path),
    default=None,
    help="Remove key --kid from this key file (rotation step 3).",
)
def keygen(
    *,
    kid: str | None,
    output: Path | None,
    force: bool,
    add_to: Path | None,
    activate_in: Path | None,
    drop_from: Path | None,
) -> None:
    """Create a key ring {"active": kid, "keys": {kid: base64 secret}}, or edit one.

    \b
    sla-probe keygen --output keys.json              # a new ring (refuses to overwrite)
    sla-probe keygen --add keys.json --kid k2        # 1. every verifier accepts k2
    sla-probe keygen --activate keys.json --kid k2   # 2. canaries are signed with k2
    sla-probe keygen --drop keys.json --kid k1       # 3. k1 is no longer accepted

    Files are written with mode 0600; edits replace the file atomically, so a running
    `sla-probe run` reloads either the old ring or the new one. Symlinks are never
    followed. Exit code 2 with one line on any problem.
    """
    from probe.services.keygen import run_keygen  # noqa: PLC0415 - keep `--help` fast

    edits = {"--add": add_to, "--activate": activate_in, "--drop": drop_from}
    _exit_with(lambda: run_keygen(kid, output, force=force, edits=edits))


@main.command()
@click.argument("scenario_files", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--all",
    "all_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Run every local scenario in this directory (slow ones with --slow).",
)
@click.option("--slow", is_flag=True, help="With --all: the slow scenarios too.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--markdown", is_flag=True, help="The detection table (docs/detection.md).")
@click.option(
    "--write-table",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the detection table into this Markdown file (between its markers): the "
    "whole table with --all, only the named scenarios' rows otherwise.",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Keep logs, configs and the replay's promtool test here.",
)
def gameday(
    *,
    scenario_files: tuple[Path, ...],
    all_dir: Path | None,
    slow: bool,
    as_json: bool,
    markdown: bool,
    write_table: Path | None,
    workdir: Path | None,
) -> None:
    """Inject a fault, watch the alerts, report time-to-detect live and at production time.

    \b
    sla-probe gameday scenarios/broker-stop.yaml
    sla-probe gameday scenarios/broker-stop.yaml --json
    sla-probe gameday --all scenarios/ --markdown

    Exit codes: 0 every expectation holds, 1 one does not, 2 bad scenario file.
    """
    from probe.services.gameday import (  # noqa: PLC0415 - keep `--help` fast
        EXIT_FAILED,
        ScenarioFailed,
        run_gamedays,
    )

    if not scenario_files and all_dir is None:
        raise click.UsageError("give a scenario file, or --all DIRECTORY")
    try:
        _exit_with(
            lambda: run_gamedays(
                scenario_files,
                all_dir,
                slow=slow,
                as_json=as_json,
                markdown=markdown,
                write_table=write_table,
                workdir=workdir,
            )
        )
    except ScenarioFailed as failed:
        click.echo(f"sla-probe: {failed}", err=True)
        sys.exit(EXIT_FAILED)


if __name__ == "__main__":  # `python -m probe.cli`; spark-submit takes probe/submit.py
    main()
