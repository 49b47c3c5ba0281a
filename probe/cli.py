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
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from probe import config as config_module
from probe import logs, loop, tracing
from probe.config import ProbeConfig, StageName
from probe.core.errors import ConfigError
from probe.core.keys import generate_key_ring, random_kid, random_secret
from probe.keyfile import (
    KeyRingSource,
    create_key_file,
    read_key_file,
    replace_key_file,
)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2
# `sla-probe sink`: its query ended by itself (failed, stopped, no first batch within
# sink.first_batch_timeout, Spark's JVM gone); the reason is its last line on stderr.
EXIT_SINK_ENDED = 1


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
                "Kafka stages: consumer, sink (Spark) and group (a consumer-group member), "
                "e.g. consumer,group.",
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
                "fetch-max-wait", "kafka.fetch_max_wait", "Consumer fetch max wait (1ms..10s)."
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


_NO_KEY_FILE = "required (create one with `sla-probe keygen`), or pass --allow-ephemeral-key"


def _keyring(
    config: ProbeConfig, *, ephemeral_ok: bool, missing: str = _NO_KEY_FILE
) -> KeyRingSource:
    """The key ring from ``signing_key_file``; without one, an ephemeral ring if
    ``ephemeral_ok``, else a ConfigError saying ``missing``."""
    if config.signing_key_file is None:
        if ephemeral_ok:
            return KeyRingSource.ephemeral()
        raise ConfigError("signing_key_file", missing)
    return KeyRingSource.from_file(config.signing_key_file)


def _install_tracing(config: ProbeConfig) -> None:
    """Tracing by the OTEL_* environment, with this probe's id and targets as its
    resource (ConfigError for an exporter setting it cannot use)."""
    from probe.stages.target import target_name  # noqa: PLC0415 - keep `--help` fast

    targets = [target_name(config, kind) for kind in config.targets]
    tracing.install_tracer_provider(config.probe_id, targets)


def _check_writable(path: Path, flag: str) -> None:
    """A report file the run could not write at its end: said now, before the run."""
    directory = path.parent if str(path.parent) else Path()
    if not directory.is_dir():
        raise ConfigError(flag, f"{path}: no directory {directory}")
    if not os.access(directory, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(flag, f"{path}: not writable")


def _fail_config(error: ConfigError) -> None:
    click.echo(f"sla-probe: config error: {error}", err=True)
    sys.exit(EXIT_USAGE)


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

    try:
        config = _load(config_file, flags)
        config_module.require_for_once(config)
        if StageName.SINK in config.stages:
            _require_connector(config)
        keyring = _keyring(config, ephemeral_ok=True)
        _install_tracing(config)
        if junit is not None:
            _check_writable(junit, "--junit")
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level if config.log_level != "info" else "warning")
    try:
        code = run_once(config, keyring.ring, as_json=bool(json), junit=junit)
    except ConfigError as error:  # found only once running: the Spark log file
        _fail_config(error)
        return
    finally:
        tracing.shutdown()
    sys.exit(code)


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
    from probe.services.run import serve  # noqa: PLC0415 - keep `--help` fast

    try:
        config = _load(config_file, flags)
        keyring = _keyring(config, ephemeral_ok=config.allow_ephemeral_key)
        config_module.require_for_service(config)
        if StageName.SINK in config.stages:
            _require_connector(config)
        _install_tracing(config)
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level)
    try:
        loop.run(serve(config, keyring))
    except ConfigError as error:
        # Found only when the service starts: the metrics port or host (probe/endpoints.py).
        _fail_config(error)
    finally:
        tracing.shutdown()


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
    try:
        config = _load(config_file, flags)
        keyring = _keyring(
            config,
            ephemeral_ok=False,
            missing="required: the sink verifies canaries signed by a `sla-probe run` "
            "elsewhere, so give it the same key file (--signing-key-file)",
        )
        config_module.require_for_service(config, sink_only=True)
        _require_connector(config)
        # The sink's commit spans join the traces of the probe producing elsewhere.
        _install_tracing(config)
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level)
    from probe.spark.standalone import LastWords, serve_sink  # noqa: PLC0415 - Spark only here

    last_words = LastWords()
    try:
        ended = loop.run(serve_sink(config, keyring.ring))
    except ConfigError as error:
        # Found only when the metrics server starts: the metrics port or host.
        _fail_config(error)
        return
    finally:
        tracing.shutdown()
    if ended is not None:
        last_words.say(
            f"sla-probe: sink stage ended: {ended.detail}", jvm_gone=ended.reason == "jvm"
        )
        sys.exit(EXIT_SINK_ENDED)


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
    try:
        config = _load(config_file, flags)
        config_module.require_for_reconcile(config)
        _require_connector(config)
        if config.reconcile.every is None:
            _require_sink_tables(config)
        if run_id is not None:
            from probe.reconcile.runner import check_run_id  # noqa: PLC0415 - Spark only here

            check_run_id(run_id)
        keyring_json = (
            KeyRingSource.from_file(config.signing_key_file).ring.to_json()
            if config.reconcile.format == "canary" and config.signing_key_file is not None
            else None
        )
    except ConfigError as error:
        _fail_config(error)
        return
    from probe.reconcile.runner import (  # noqa: PLC0415 - Spark only here
        reconcile_once,
        serve_reconcile,
    )

    if config.reconcile.every is not None:
        logs.configure(config.log_level)
        try:
            loop.run(serve_reconcile(config, keyring_json))
        except ConfigError as error:  # the metrics port or host
            _fail_config(error)
        return
    # The report is the output: the log's per-window warnings would repeat it.
    logs.configure(config.log_level if config.log_level != "info" else "error")
    try:
        code = reconcile_once(
            config,
            keyring_json,
            run_id=run_id,
            as_json_output=bool(json),
        )
    except ConfigError as error:  # found only once running: a table that does not fit
        _fail_config(error)
        return
    sys.exit(code)


def _require_connector(config: ProbeConfig) -> None:
    """``sink.source: kafka`` with Spark's connector nowhere to be had (no cached jars,
    none asked for in sink.spark_conf): one line naming the setting, before a broker,
    a probe or Spark starts. Under spark-submit the session checks spark-submit's own
    settings instead (probe/spark/session.py)."""
    if config.sink.source != "kafka" or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    from probe.spark_kafka.jars import session_jars  # noqa: PLC0415 - only when asked

    session_jars(config.sink.spark_conf, own_jvm=True)


def _require_sink_tables(config: ProbeConfig) -> None:
    """One run against the sink's own tables (no --table) on a local sink path that
    does not exist: there is nothing to reconcile. Said in one line naming the
    setting, before Spark starts and before anything is created there. (``--every``
    waits for the tables instead, its /readyz saying so.)"""
    path = config.sink.path
    if config.reconcile.table is not None or path is None:
        return
    url = urlsplit(path)
    local = url.path if url.scheme == "file" else path if url.scheme == "" else None
    if local is not None and not os.path.isdir(local):
        raise ConfigError(
            "sink.path",
            f"{path}: no such directory, so no sink tables to reconcile "
            "(--sink-path: where a sink stage writes them; --table: another table)",
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
    edits = {"--add": add_to, "--activate": activate_in, "--drop": drop_from}
    try:
        _keygen(kid, output, force=force, edits=edits)
    except ConfigError as error:
        _fail_config(error)


def _keygen(
    kid: str | None, output: Path | None, *, force: bool, edits: dict[str, Path | None]
) -> None:
    given = [name for name, path in {"--output": output, **edits}.items() if path is not None]
    if len(given) > 1:
        raise ConfigError(given[1], f"cannot be combined with {given[0]}")
    if force and output is None:
        raise ConfigError("--force", "only applies to --output")
    if not given or output is not None:
        ring = generate_key_ring(kid)
        if output is None:
            click.echo(ring.to_json(), nl=False)
            return
        write = replace_key_file if force else create_key_file
        write(output, ring, field="--output")
        click.echo(f"wrote {output}: active {ring.active_kid}", err=True)
        return
    option = given[0]
    path = edits[option]
    assert path is not None
    if option == "--add":
        kid = kid or random_kid()
    elif kid is None:
        raise ConfigError(option, "needs --kid, the key to act on")
    # The file is replaced by a rename, which would turn a symlink into a file of its
    # own: the file the link points to is the one to edit.
    ring = read_key_file(path, follow_symlinks=False)
    if option == "--add":
        ring, done = ring.with_key(kid, random_secret()), f"added {kid} to"
    elif option == "--activate":
        ring, done = ring.with_active(kid), f"activated {kid} in"
    else:
        ring, done = ring.without(kid), f"dropped {kid} from"
    replace_key_file(path, ring, field=option)
    click.echo(f"{done} {path}: active {ring.active_kid}, keys {', '.join(ring.kids)}", err=True)


# `sla-probe gameday` lives in its own package; registered here so the one console
# script has every subcommand.
from probe.gameday.cli import gameday as _gameday  # noqa: E402

main.add_command(_gameday)


if __name__ == "__main__":  # `python -m probe.cli`; spark-submit takes probe/submit.py
    main()
