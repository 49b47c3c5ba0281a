"""Typed configuration: one model per section, validated once, errors naming the field.

Settings come from three layers, later ones winning: the YAML file (``--config``),
``SLA_PROBE_<FLAG>`` environment variables, and command-line flags. The CLI turns
the last two into dotted overrides (``{"kafka.send_timeout": "5s"}``) and calls
:func:`load`; every problem surfaces as one :class:`~probe.core.errors.ConfigError` whose
field is the path in the YAML file, e.g. ``kafka.send_timeout: not a duration``.

Durations are written ``500ms``, ``20s``, ``1m30s``, ``2h`` or as plain seconds, and
are held as float seconds. Each duration setting has documented bounds
(docs/configuration.md, "Broker list and limits"): a value outside them is almost
certainly a typo (``--interval 1e9``) and would make the probe hang or flood its target
instead of measuring anything.

The model is assembled here: :class:`ProbeConfig`, :func:`load` (the YAML file, the
overrides, the secrets' variables) and the rules that need more than one section (the
MQTT target against the interval and the Kafka settings, the probe's own canaries against
canary.max_size, what each command requires). Each section's model lives in a module of
its own, which imports only its siblings, never this package:

- ``durations``: parse_duration, format_duration, Duration and the bounds of each setting;
- ``names``: TargetKind, StageName, the stage lists and CanaryText;
- ``base``: the strict base of every section and the coercions of text values;
- ``secret_sources``: the passwords' sources (SECRET_VARIABLES, ``*_file``);
- ``kafka``: KafkaConfig, TlsConfig, SaslConfig, broker list and topic name rules;
- ``mqtt``: MqttConfig, MqttTlsConfig, MqttBridgeConfig, parse_mqtt_url;
- ``judging``: JudgeConfig, CanaryConfig;
- ``metrics``: MetricsConfig, SloConfig;
- ``once``: OnceConfig, PushGatewayConfig;
- ``group``: GroupConfig;
- ``transactions``: TransactionsConfig;
- ``mirror``: MirrorConfig, MirrorSaslConfig;
- ``tiered``: TieredConfig;
- ``sink``: SinkConfig, RestartConfig;
- ``reconcile``: ReconcileConfig, ReconcileWindowConfig.

Import them from here (``from probe.config import KafkaConfig``): ``__all__`` names what
this package re-exports.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator

from probe.config.base import _names, _Section
from probe.config.durations import HOUR, Duration, _between, format_duration, parse_duration
from probe.config.group import GroupConfig
from probe.config.judging import CanaryConfig, JudgeConfig
from probe.config.kafka import KafkaConfig, SaslConfig, TlsConfig
from probe.config.metrics import MetricsConfig, SloConfig
from probe.config.mirror import MirrorConfig, MirrorSaslConfig
from probe.config.mqtt import MqttBridgeConfig, MqttConfig, MqttTlsConfig, parse_mqtt_url
from probe.config.names import CanaryText, KafkaStage, StageName, TargetKind
from probe.config.once import OnceConfig, PushGatewayConfig
from probe.config.reconcile import ReconcileConfig, ReconcileWindowConfig
from probe.config.secret_sources import SECRET_VARIABLES
from probe.config.sink import RestartConfig, SinkConfig
from probe.config.tiered import TieredConfig
from probe.config.transactions import TransactionsConfig
from probe.core.canary import Canary, encode
from probe.core.errors import ConfigError
from probe.core.keys import MAX_KID_CHARS, MIN_SECRET_BYTES, KeyRing
from probe.validation import first_problem

__all__ = [
    "SECRET_VARIABLES",
    "CanaryConfig",
    "Duration",
    "GroupConfig",
    "JudgeConfig",
    "KafkaConfig",
    "MetricsConfig",
    "MirrorConfig",
    "MirrorSaslConfig",
    "MqttBridgeConfig",
    "MqttConfig",
    "MqttTlsConfig",
    "OnceConfig",
    "ProbeConfig",
    "PushGatewayConfig",
    "ReconcileConfig",
    "ReconcileWindowConfig",
    "RestartConfig",
    "SaslConfig",
    "SinkConfig",
    "SloConfig",
    "StageName",
    "TargetKind",
    "TieredConfig",
    "TlsConfig",
    "TransactionsConfig",
    "format_duration",
    "load",
    "parse_duration",
    "parse_mqtt_url",
    "read_yaml",
    "require_for_once",
    "require_for_reconcile",
    "require_for_service",
]


def require_for_reconcile(config: ProbeConfig) -> tuple[str, str | None]:
    """The table to reconcile and the report table (None: no report table), or a
    ConfigError naming what is missing."""
    if not config.kafka.bootstrap_servers:
        raise ConfigError("kafka.bootstrap_servers", "required by reconcile (--bootstrap-servers)")
    sink_path = config.sink.path.rstrip("/") if config.sink.path else None
    table = config.reconcile.table or (f"{sink_path}/canaries" if sink_path else None)
    if table is None:
        raise ConfigError("reconcile.table", "required (--table), or sink.path (--sink-path)")
    report = config.reconcile.report_path or (f"{sink_path}/reconciliation" if sink_path else None)
    if config.reconcile.format == "canary" and config.signing_key_file is None:
        raise ConfigError(
            "signing_key_file",
            "required by reconcile with format canary: records are verified as the sink "
            "stage verifies them (--signing-key-file)",
        )
    return table, report


class ProbeConfig(_Section):
    probe_id: CanaryText = Field(default_factory=socket.gethostname, min_length=1, max_length=255)
    # The `target` label of every series: which pipeline this probe watches.
    target: CanaryText = Field(default="kafka", min_length=1, max_length=255)
    # At least 1 s: faster rounds flood the target and measure the probe itself.
    interval: Annotated[Duration, _between(1.0, HOUR)] = 20.0
    signing_key_file: Path | None = None
    allow_ephemeral_key: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    kafka: KafkaConfig = KafkaConfig()
    judge: JudgeConfig = JudgeConfig()
    canary: CanaryConfig = CanaryConfig()
    metrics: MetricsConfig = MetricsConfig()
    slo: SloConfig = SloConfig()
    once: OnceConfig = OnceConfig()
    mqtt: MqttConfig = MqttConfig()
    # Stages judging the Kafka target: the direct consumer, and the Spark sink and the
    # consumer-group members, classic and consumer protocol, the share-group member and
    # the read_committed reader of transactional writes (opt-in).
    stages: tuple[KafkaStage, ...] = Field(default=("consumer",), validate_default=True)
    sink: SinkConfig = SinkConfig()
    group: GroupConfig = GroupConfig()
    transactions: TransactionsConfig = TransactionsConfig()
    mirror: MirrorConfig = MirrorConfig()
    # Reads of canaries old enough to be served from tiered storage (opt-in).
    tiered: TieredConfig = TieredConfig()
    reconcile: ReconcileConfig = ReconcileConfig()

    def latency_threshold(self, stage: str) -> float:
        """The threshold of a stage's latency SLI, where the probe puts a bucket of its
        histogram: the sink's and the mirror's own, every other stage's
        metrics.latency_threshold."""
        if stage == StageName.SINK:
            return self.sink.latency_threshold
        if stage == StageName.MIRROR and self.mirror.latency_threshold is not None:
            return self.mirror.latency_threshold
        return self.metrics.latency_threshold

    @field_validator("stages", mode="before")
    @classmethod
    def _kafka_stages(cls, stages: object) -> object:
        if isinstance(stages, str):
            stages = [name.strip() for name in stages.split(",") if name.strip()]
        if isinstance(stages, list | tuple) and not stages:
            raise ValueError(
                "must name at least one of: consumer, sink, group, group_consumer, share, "
                "transactional, mirror"
            )
        return tuple(dict.fromkeys(stages)) if isinstance(stages, list | tuple) else stages

    # Which targets to probe, by transport name. Default: MQTT when mqtt.url is set,
    # Kafka when kafka.bootstrap_servers or once.embedded is set, or nothing else is
    # (`once` then asks for a broker). Name both to probe both.
    targets: tuple[TargetKind, ...] = Field(default=None, validate_default=True)

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, targets: object, info: ValidationInfo) -> object:
        kafka, mqtt, once = info.data.get("kafka"), info.data.get("mqtt"), info.data.get("once")
        mqtt_url = mqtt.url if isinstance(mqtt, MqttConfig) else None
        if targets is None:
            has_kafka = (isinstance(kafka, KafkaConfig) and bool(kafka.bootstrap_servers)) or (
                isinstance(once, OnceConfig) and once.embedded
            )
            derived = [name for name, given in (("kafka", has_kafka), ("mqtt", mqtt_url)) if given]
            return tuple(derived) or ("kafka",)
        targets = _names(targets)
        if not isinstance(targets, list | tuple):
            return targets
        known = ", ".join(TargetKind)
        if not targets:
            raise ValueError(f"must name at least one of: {known}")
        for name in targets:
            if name not in set(TargetKind):
                raise ValueError(f"unknown target {name!r}; known: {known}")
        if "mqtt" in targets and not mqtt_url:
            raise ValueError("mqtt needs mqtt.url (--mqtt-url)")
        return tuple(dict.fromkeys(targets))


_NO_BROKER = (
    "is not set: pass --bootstrap-servers / SLA_PROBE_BOOTSTRAP_SERVERS (or set it in "
    "--config), or --embedded to probe a broker started for this run"
)


def require_for_once(config: ProbeConfig) -> None:
    """A broker for `once` to probe: the one given, or, when asked (once.embedded),
    one started for the run. Never the embedded broker by default: a smoke test whose
    broker setting went missing must fail, not pass having checked nothing real.

    >>> require_for_once(load(overrides={"once.embedded": "true"}))  # fine
    >>> require_for_once(load())  # raises ConfigError naming kafka.bootstrap_servers
    """
    kafka_target = TargetKind.KAFKA in config.targets
    if config.once.embedded:
        if config.kafka.bootstrap_servers:
            raise ConfigError(
                "once.embedded",
                "cannot be combined with kafka.bootstrap_servers: probe the brokers given, "
                "or a broker started for this run, not both",
            )
        if not kafka_target:
            raise ConfigError(
                "once.embedded", "starts a Kafka broker, but targets leaves kafka out"
            )
    elif kafka_target and not config.kafka.bootstrap_servers:
        raise ConfigError("kafka.bootstrap_servers", _NO_BROKER)


def require_for_service(config: ProbeConfig, *, sink_only: bool = False) -> None:
    """The settings a long-running command needs beyond what any config must hold.

    ``run`` (and ``sink``, with ``sink_only``) runs for good: it has no embedded broker
    to fall back on, and a sink stage keeps its checkpoint and tables somewhere that
    outlives the process. ``once`` needs none of this.
    """
    if sink_only or StageName.SINK in config.stages:
        if not config.kafka.bootstrap_servers:
            raise ConfigError("kafka.bootstrap_servers", "required by the sink stage")
        if config.sink.path is None:
            raise ConfigError("sink.path", "required for a long-running sink (--sink-path)")
    kafka_target = not sink_only and TargetKind.KAFKA in config.targets
    if kafka_target and not config.kafka.bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap_servers", "required for run (--bootstrap-servers or --mqtt-url)"
        )


def _set_path(tree: dict[str, Any], dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for depth, name in enumerate(parents, 1):
        if name not in node:
            node[name] = {}
        child = node[name]
        if not isinstance(child, dict):
            # The file set a section to null or a scalar: an override must not hide that.
            raise ConfigError(".".join(parents[:depth]), _NOT_A_SECTION)
        node = child
    node[leaf] = value


_NOT_A_SECTION = "must be a mapping of settings (leave the section out to keep its defaults)"


def _first_error(error: ValidationError) -> ConfigError:
    # A section (kafka, kafka.tls, ...) given as null, a scalar or a list; pydantic
    # would say "instance of KafkaConfig", a name the user never wrote.
    where, message, _ = first_problem(error, not_a_mapping=_NOT_A_SECTION)
    return ConfigError(".".join(where) or "config", message)


def read_yaml(path: Path) -> object:
    """The YAML file's contents; a key given twice in one mapping is an error.

    YAML parsers keep the last of two equal keys: a second ``interval:`` further
    down a long file would silently win over the one its author is reading.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from exc
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _reject_duplicate_keys(node, (), path, set())
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError("config", f"{path} is not valid YAML{where}") from exc
    finally:
        loader.dispose()


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _reject_duplicate_keys(
    node: yaml.Node, where: tuple[str, ...], path: Path, seen: set[int]
) -> None:
    # Aliases make the node graph a DAG (or a cycle): visit each node once.
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _reject_duplicate_keys(item, (*where, str(index)), path, seen)
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key, value in node.value:
            # `<<: *defaults` merges a mapping in; keys written beside it override it.
            if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                continue
            line = key.start_mark.line + 1
            if key.value in first_line:
                raise ConfigError(
                    ".".join((*where, key.value)),
                    f"given twice in {path} (lines {first_line[key.value]} and {line})",
                )
            first_line[key.value] = line
            _reject_duplicate_keys(value, (*where, key.value), path, seen)


def load(
    path: Path | None = None,
    overrides: dict[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ProbeConfig:
    """Read the YAML file (if any), apply dotted overrides and the secrets given in
    ``environ`` (SECRET_VARIABLES; the CLI passes os.environ), validate.

    >>> load(overrides={"interval": "30s"}).interval
    30.0
    """
    tree: dict[str, Any] = {}
    if path is not None:
        loaded = read_yaml(path)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("config", f"{path} must hold a mapping of settings")
        tree = loaded or {}
    for dotted, value in (overrides or {}).items():
        _set_path(tree, dotted, value)
    _apply_secret_variables(tree, environ or {})
    try:
        config = ProbeConfig.model_validate(tree)
    except ValidationError as exc:
        raise _first_error(exc) from None
    _check_mqtt_target(config)
    _check_canary_size(config)
    _check_mirror(config)
    _check_tiered(config)
    return config


def _check_mirror(config: ProbeConfig) -> None:
    """The mirror stage reads another cluster: it must be named, and be another one (a
    mirror into the source cluster itself under the identity policy would be the
    canary topic read twice, passing whatever the mirror does)."""
    if StageName.MIRROR not in config.stages:
        return
    mirror = config.mirror
    if not mirror.bootstrap_servers:
        raise ConfigError(
            "mirror.bootstrap_servers",
            "required by the mirror stage: the brokers of the cluster MirrorMaker 2 "
            "replicates the canary topic to",
        )
    if (
        mirror.bootstrap_servers == config.kafka.bootstrap_servers
        and mirror.mirrored_topic(config.kafka.topic) == config.kafka.topic
    ):
        raise ConfigError(
            "mirror.bootstrap_servers",
            f"names the source cluster and mirror.replication_policy reads the topic "
            f"{config.kafka.topic} itself: the mirror stage would judge the canary topic, "
            "not its mirror",
        )


def _check_tiered(config: ProbeConfig) -> None:
    """Tiered reads read the Kafka target's canary topic, at or after the moment
    tiered.age ago: the topic must be probed, and the read's wait shorter than the
    time between reads (reads never overlap)."""
    if not config.tiered.enabled:
        return
    if TargetKind.KAFKA not in config.targets:
        raise ConfigError(
            "tiered.enabled",
            "reads the Kafka target's canary topic: set kafka.bootstrap_servers",
        )
    if config.tiered.timeout >= config.tiered.every:
        raise ConfigError(
            "tiered.timeout",
            f"must be shorter than tiered.every ({format_duration(config.tiered.every)}): "
            "a read ends before the next one starts",
        )


def _apply_secret_variables(tree: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Each secret's variable fills its setting, which must then come from nowhere else:
    unlike a flag over the file, a password given twice is a mistake to report (which
    one is current?), not a layer to win."""
    for dotted, variable in SECRET_VARIABLES.items():
        value = environ.get(variable)
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        section_name = ".".join(parents)
        if not value:
            raise ConfigError(dotted, f"{variable} is set but empty")
        section: object = tree
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
        if section is None and section_name in ("kafka.sasl", "mirror.sasl"):
            raise ConfigError(
                section_name,
                f"{variable} is set, but there is no {section_name} section "
                "(mechanism, username) to use it with",
            )
        if isinstance(section, dict):
            for given in (leaf, f"{leaf}_file"):
                if section.get(given) is not None:
                    raise ConfigError(
                        dotted,
                        f"given twice: by {variable} and by {section_name}.{given}; give one",
                    )
        _set_path(tree, dotted, value)


# The longest trace context a canary carries: a W3C traceparent.
_TRACEPARENT = "00-" + "0" * 32 + "-" + "0" * 16 + "-01"


def _check_canary_size(config: ProbeConfig) -> None:
    """Own canaries must pass the size check every stage applies to what it reads.

    ``canary.size`` pads a canary to exactly that many bytes when it is smaller, so a
    size within max_size is enough, unless the canary is bigger unpadded: with the
    longest key id and a trace context, for this probe id and the probed targets.
    """
    canary = config.canary
    if canary.size > canary.max_size:
        raise ConfigError(
            "canary.size",
            f"{canary.size} is above canary.max_size ({canary.max_size}): "
            "every canary would be rejected as oversized",
        )
    kid = "k" * MAX_KID_CHARS
    ring = KeyRing({kid: bytes(MIN_SECRET_BYTES)}, active=kid)
    labels = [config.mqtt.target if kind == "mqtt" else config.target for kind in config.targets]
    largest = max(
        len(encode(Canary(config.probe_id, 0, label, 0, 0, 0, _TRACEPARENT), ring))
        for label in labels
    )
    if largest > canary.max_size:
        raise ConfigError(
            "canary.max_size",
            f"{canary.max_size} is below the size of this probe's own canaries "
            f"(up to {largest} bytes with this probe_id and target)",
        )


def _check_mqtt_target(config: ProbeConfig) -> None:
    if "mqtt" not in config.targets:
        return
    mqtt = config.mqtt
    if "bridge" in mqtt.stages and not config.kafka.bootstrap_servers:
        raise ConfigError(
            "kafka.bootstrap_servers", "required by the mqtt bridge stage (the bridge's Kafka)"
        )
    if mqtt.max_send_rate and mqtt.shards / mqtt.max_send_rate >= config.interval:
        raise ConfigError(
            "mqtt.max_send_rate",
            f"{mqtt.shards} shards at {mqtt.max_send_rate:g}/s take longer than the interval "
            f"({config.interval:g}s)",
        )
    # Both targets export the same series: one label value must not hold both.
    if "kafka" in config.targets and mqtt.target == config.target:
        raise ConfigError("mqtt.target", f"must differ from target ({config.target!r})")
