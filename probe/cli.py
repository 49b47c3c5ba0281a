"""The `sla-probe` command line.

    sla-probe once                          # embedded broker, 3 rounds, report, exit 0/1
    sla-probe once --bootstrap-servers kafka:9092 --json
    sla-probe once --mqtt-url mqtt://broker:1883     # the MQTT target only
    sla-probe run --config probe.yaml --signing-key-file /keys/ring.json
    sla-probe keygen --output ring.json
    sla-probe keygen --add ring.json --kid k2       # key rotation: --add, --activate, --drop

Every flag can also be set as ``SLA_PROBE_<FLAG>`` (``--bootstrap-servers`` is
``SLA_PROBE_BOOTSTRAP_SERVERS``); flags win over the environment, which wins over
the ``--config`` YAML file. Exit codes: 0 all canaries delivered, 1 SLO failed,
2 usage or configuration error (one line on stderr naming the field).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from probe import config as config_module
from probe import logs, tracing
from probe.config import ProbeConfig
from probe.errors import ConfigError
from probe.keyfile import (
    KeyRingSource,
    create_key_file,
    read_key_file,
    replace_key_file,
)
from probe.keys import generate_key_ring, random_kid, random_secret

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2


def _env(flag: str) -> str:
    return "SLA_PROBE_" + flag.upper().replace("-", "_")


class ConfigOption(click.Option):
    """A flag that overrides one config field (``config_path``, e.g. ``kafka.topic``)."""

    def __init__(self, *args: Any, config_path: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.config_path = config_path


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


def _common(interval_path: str) -> Callable[[F], F]:
    def decorate(command: F) -> F:
        options = [
            click.option(
                "--config",
                "config_file",
                envvar=_env("config"),
                show_envvar=True,
                type=click.Path(path_type=Path),
                help="YAML configuration file.",
            ),
            _option("bootstrap-servers", "kafka.bootstrap_servers", "Kafka bootstrap servers."),
            _option("topic", "kafka.topic", "Canary topic (default synthetic-sla)."),
            _option(
                "stages", "stages", "Kafka stages: consumer, and sink (Spark), e.g. consumer,sink."
            ),
            _option("sink-path", "sink.path", "Sink tables and checkpoint (Spark sink stage)."),
            _option("interval", interval_path, "Time between rounds, e.g. 20s."),
            _option("probe-id", "probe_id", "This probe instance's id (default: host name)."),
            _option("target", "target", "Name of the probed pipeline (the `target` label)."),
            _option("signing-key-file", "signing_key_file", "Key ring file (sla-probe keygen)."),
            _option("fetch-max-wait", "kafka.fetch_max_wait", "Consumer fetch max wait."),
            _option("send-timeout", "kafka.send_timeout", "Produce acknowledgement timeout."),
            _option(
                "create-topic",
                "kafka.create_topic",
                "Create the topic if missing.",
                is_flag=True,
                flag_value=True,
            ),
            _option(
                "idempotence",
                "kafka.idempotence",
                "Idempotent producer.",
                is_flag=True,
                flag_value=True,
            ),
            _option("log-level", "log_level", "debug, info, warning or error."),
            _option(
                "targets",
                "targets",
                "Targets to probe, comma-separated: kafka, mqtt (default: those given).",
            ),
            _option("mqtt-url", "mqtt.url", "MQTT broker, mqtt://host:1883 or mqtts://host:8883."),
            _option("mqtt-target", "mqtt.target", "The MQTT target's `target` label (mqtt)."),
            _option("mqtt-topic-prefix", "mqtt.topic_prefix", "Shard topics <prefix>/<shard>."),
            _option("mqtt-shards", "mqtt.shards", "Number of MQTT shards (default 3).", type=int),
            _option("mqtt-qos", "mqtt.qos", "MQTT QoS: 0, 1 or 2 (default 1).", type=int),
            _option("mqtt-username", "mqtt.username", "MQTT user name."),
            _option(
                "mqtt-password",
                "mqtt.password",
                "MQTT password (prefer the environment variable: a flag shows in ps).",
            ),
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
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _load(config_file: Path | None, flags: dict[str, Any]) -> ProbeConfig:
    paths = {
        param.name: param.config_path
        for param in click.get_current_context().command.params
        if isinstance(param, ConfigOption) and param.config_path is not None
    }
    overrides = {paths[name]: value for name, value in flags.items() if value is not None}
    return config_module.load(config_file, overrides)


def _keyring(config: ProbeConfig, *, ephemeral_ok: bool) -> KeyRingSource:
    if config.signing_key_file is None:
        if ephemeral_ok:
            return KeyRingSource.ephemeral()
        raise ConfigError(
            "signing_key_file",
            "required (create one with `sla-probe keygen`), or pass --allow-ephemeral-key",
        )
    return KeyRingSource.from_file(config.signing_key_file)


def _fail_config(error: ConfigError) -> None:
    click.echo(f"sla-probe: config error: {error}", err=True)
    sys.exit(EXIT_USAGE)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def main() -> None:
    """Synthetic end-to-end SLO probe: signed canaries through Kafka, judged on arrival."""


@main.command()
@_common("once.interval")
@_option("rounds", "once.rounds", "Rounds to produce (default 3).", type=int)
@_option("json", None, "Print the report as JSON.", is_flag=True, flag_value=True)
def once(config_file: Path | None, json: bool | None, **flags: Any) -> None:
    """Run a few rounds, wait for every canary's fate, report, exit 0 (ok) or 1.

    Without --bootstrap-servers an embedded broker is started on a free loopback
    port and stopped afterwards, unless only other targets are given (--mqtt-url).
    """
    from probe.once import run_once  # noqa: PLC0415 - keep `--help` fast

    try:
        config = _load(config_file, flags)
        keyring = _keyring(config, ephemeral_ok=True)
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level if config.log_level != "info" else "warning")
    tracing.install_tracer_provider()
    sys.exit(run_once(config, keyring.ring, as_json=bool(json)))


@main.command()
@_common("interval")
@_option("metrics-port", "metrics.port", "Port of /metrics, /healthz, /readyz.", type=int)
@_option(
    "allow-ephemeral-key",
    "allow_ephemeral_key",
    "Run with a random key when no key file is given (canaries then verify only here).",
    is_flag=True,
    flag_value=True,
)
def run(config_file: Path | None, **flags: Any) -> None:
    """Probe continuously and serve metrics until SIGTERM or SIGINT."""
    from probe.service import serve  # noqa: PLC0415 - keep `--help` fast

    try:
        config = _load(config_file, flags)
        keyring = _keyring(config, ephemeral_ok=config.allow_ephemeral_key)
        if "kafka" in config.targets and not config.kafka.bootstrap_servers:
            raise ConfigError(
                "kafka.bootstrap_servers", "required for run (--bootstrap-servers or --mqtt-url)"
            )
        if "sink" in config.stages:
            _require_sink_settings(config)
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level)
    tracing.install_tracer_provider()
    asyncio.run(serve(config, keyring))


@main.command()
@_common("interval")
@_option("metrics-port", "metrics.port", "Port of /metrics, /healthz, /readyz.", type=int)
def sink(config_file: Path | None, **flags: Any) -> None:
    """Run only the Spark sink stage and serve its metrics (e.g. under spark-submit)."""
    try:
        config = _load(config_file, flags)
        keyring = _keyring(config, ephemeral_ok=False)
        _require_sink_settings(config)
    except ConfigError as error:
        _fail_config(error)
        return
    logs.configure(config.log_level)
    from probe.spark.standalone import serve_sink  # noqa: PLC0415 - Spark only here

    problem = asyncio.run(serve_sink(config, keyring.ring))
    if problem is not None:
        click.echo(f"sla-probe: sink stage ended: {problem}", err=True)
        sys.exit(1)


def _require_sink_settings(config: ProbeConfig) -> None:
    # A long-running sink must keep its checkpoint and tables somewhere durable.
    if not config.kafka.bootstrap_servers:
        raise ConfigError("kafka.bootstrap_servers", "required by the sink stage")
    if config.sink.path is None:
        raise ConfigError("sink.path", "required for a long-running sink (--sink-path)")


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


if __name__ == "__main__":  # `python -m probe.cli`; spark-submit takes probe/spark/submit.py
    main()
