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
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from probe.core.canary import MAX_STRING_BYTES, Canary, encode
from probe.core.errors import ConfigError
from probe.core.keys import MAX_KID_CHARS, MIN_SECRET_BYTES, KeyRing
from probe.validation import first_problem
from probe.web_config import read_web_config

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """``"1m30s"`` -> 90.0. Numbers are seconds. Raises ValueError with a short reason."""
    seconds = _seconds(value)
    # NaN compares false with every bound and infinity never elapses: both would slip
    # past a range check or hang a timer, so no duration may be either.
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def _seconds(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise ValueError("not a duration")
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {value!r} (use e.g. 500ms, 20s, 1m30s)")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """90.0 -> ``"90s"``, 3600.0 -> ``"1h"``, 0.1 -> ``"100ms"``: as a user would write it."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit in ("h", "m"):
        if (seconds / _UNIT_SECONDS[unit]).is_integer():
            return f"{seconds / _UNIT_SECONDS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be > 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]


def _between(low: float, high: float) -> AfterValidator:
    """A duration's bounds, inclusive: ``interval: Annotated[Duration, _between(1, HOUR)]``."""

    def check(seconds: float) -> float:
        if not low <= seconds <= high:
            raise ValueError(
                f"must be between {format_duration(low)} and {format_duration(high)}, "
                f"got {format_duration(seconds)}"
            )
        return seconds

    return AfterValidator(check)


MINUTE = 60.0
HOUR = 3600.0
DAY = 24 * HOUR


def _fits_a_canary(text: str) -> str:
    # Every canary carries the probe id and the target name behind a one-byte length.
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("must be valid text (it cannot be encoded as UTF-8)") from None
    if size > MAX_STRING_BYTES:
        raise ValueError(f"is {size} bytes in UTF-8; a canary holds at most {MAX_STRING_BYTES}")
    return text


# A name every canary carries: the probe id, a target's label.
CanaryText = Annotated[str, AfterValidator(_fits_a_canary)]


class _Section(BaseModel):
    # Unknown keys are errors: a typo in a YAML file must not silently keep a default.
    model_config = ConfigDict(extra="forbid", frozen=True)


class TlsConfig(_Section):
    """TLS towards the brokers. With no file given, the system trust store is used."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Annotated[Path | None, Field(validate_default=True)] = None
    check_hostname: bool = True

    @field_validator("key_file")
    @classmethod
    def _key_with_cert(cls, key_file: Path | None, info: ValidationInfo) -> Path | None:
        if (info.data.get("cert_file") is None) != (key_file is None):
            raise ValueError("cert_file and key_file must be given together")
        return key_file


def read_secret_file(path: Path) -> str:
    """A secret as its file holds it, without the trailing newline that ``echo``, editors
    and most secret stores add. Raises ValueError saying why the file cannot be used
    (never quoting its contents)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise ValueError(f"{path} is empty")
    return secret


# Secrets the environment may give, by the setting they fill (load() puts them there).
# None of them is a flag: a flag's value shows in `ps` and in a Pod's spec.
SECRET_VARIABLES = {
    "kafka.sasl.password": "SLA_PROBE_KAFKA_SASL_PASSWORD",
    "mqtt.password": "SLA_PROBE_MQTT_PASSWORD",
    "once.push_gateway.password": "SLA_PROBE_PUSH_GATEWAY_PASSWORD",
}


def _one_secret_source(inline: object, path: Path | None, setting: str, *, required: bool) -> None:
    """``setting`` (e.g. ``kafka.sasl.password``) given once: inline (or by its
    variable, which load() puts there), or as ``<setting>_file``. Checks the file
    can be read now, so a bad one exits 2 at start rather than at the first connection."""
    variable = SECRET_VARIABLES[setting]
    if inline is not None and path is not None:
        raise ValueError(f"give one of {setting}, {setting}_file or {variable}, not two")
    if required and inline is None and path is None:
        raise ValueError(f"no password: give {setting}_file, {variable} or {setting}")
    if path is not None:
        read_secret_file(path)


def _secret_value(inline: SecretStr | None, path: Path | None, setting: str) -> str | None:
    """The secret as it is now. The file is read at every call: the clients call this
    when they are created, so a password rotated in a mounted Secret reaches the next
    client made (a restarted probe; a reconnecting MQTT client), never a connection
    already open."""
    if path is None:
        return inline.get_secret_value() if inline is not None else None
    try:
        return read_secret_file(path)
    except ValueError as exc:
        raise ConfigError(f"{setting}_file", str(exc)) from None


class SaslConfig(_Section):
    """SASL towards the brokers. The password from exactly one place: ``password``,
    ``password_file`` (e.g. a mounted Secret), or SLA_PROBE_KAFKA_SASL_PASSWORD.

    Its repr, and every dump of the config, shows ``'**********'`` for the password.
    """

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str = Field(min_length=1)
    password: SecretStr | None = None
    password_file: Annotated[Path | None, Field(validate_default=True)] = None

    @field_validator("password_file")
    @classmethod
    def _one_password(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        _one_secret_source(info.data.get("password"), path, "kafka.sasl.password", required=True)
        return path

    def password_value(self) -> str:
        """The password now (read from password_file at each call); ConfigError naming
        kafka.sasl.password_file if the file can no longer be used."""
        password = _secret_value(self.password, self.password_file, "kafka.sasl.password")
        # The validator requires one source; a model built bypassing it has none.
        if password is None:
            raise ConfigError("kafka.sasl.password", "required")
        return password


# A host name or an IPv4 address; an IPv6 address goes in brackets: [::1]:9092.
_BROKER_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?")
_BRACKETED_IPV6 = re.compile(r"\[([^\]]*)\](?::(.*))?")


def _broker_list(servers: str | None) -> str | None:
    """``" a:9092, b:9092 "`` -> ``"a:9092,b:9092"``. Raises ValueError saying what is wrong.

    Only a missing setting (None) may mean "no broker given": a blank value is
    what an unset variable in a deploy pipeline looks like, and must not fall back
    to the embedded broker and pass.
    """
    if servers is None:
        return None
    entries = [entry.strip() for entry in servers.split(",")]
    if not any(entries):
        raise ValueError(f"is empty; {_BROKER_LIST_FORM}")
    for entry in entries:
        if not entry:
            raise ValueError(f"has an empty entry: {servers!r}; {_BROKER_LIST_FORM}")
        problem = _broker_problem(entry)
        if problem is not None:
            raise ValueError(f"{entry!r}: {problem}; {_BROKER_LIST_FORM}")
    return ",".join(entries)


_BROKER_LIST_FORM = "use host:port[,host:port...]"


def _broker_problem(entry: str) -> str | None:
    bracketed = _BRACKETED_IPV6.fullmatch(entry)
    if bracketed is not None:
        host, port = bracketed.group(1), bracketed.group(2)
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"{host!r} is not an IPv6 address"
    elif entry.startswith("["):
        return "only :port may follow an IPv6 address in brackets"
    else:
        host, colon, rest = entry.partition(":")
        port = rest if colon else None
        if ":" in rest:
            return "an IPv6 address goes in brackets, e.g. [::1]:9092"
        if not host:
            return "no host before ':'"
        if not _BROKER_HOST.fullmatch(host):
            return f"{host!r} is not a host name or address"
    # No port: the clients' default, 9092.
    if port is None:
        return None
    if not port:
        return "no port after ':'"
    if not (port.isascii() and port.isdigit()):
        return f"port {port!r} is not a number"
    if not 1 <= int(port) <= 65535:
        return f"port {port} is outside 1..65535"
    return None


_TOPIC_CHARACTERS = re.compile(r"[a-zA-Z0-9._-]+")


def _kafka_topic(name: str) -> str:
    """A name Kafka would accept for a topic (its own rule: 1 to 249 of
    ``[a-zA-Z0-9._-]``, neither ``.`` nor ``..``), checked before any broker is asked:
    some brokers (the embedded one) accept more, and a probe that passed there would
    fail at the first real cluster."""
    if name in (".", ".."):
        raise ValueError(f"{name!r} is not a topic name Kafka accepts")
    if not _TOPIC_CHARACTERS.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_CHARACTERS.fullmatch(c)})
        raise ValueError(
            f"{name!r} has characters Kafka refuses in a topic name ({' '.join(map(repr, bad))});"
            " use letters, digits, '.', '_' and '-'"
        )
    return name


KafkaTopic = Annotated[str, Field(min_length=1, max_length=249), AfterValidator(_kafka_topic)]


class KafkaConfig(_Section):
    """Where canaries go and how they are read back."""

    # None means none given: `once` then needs once.embedded, `run` refuses to start.
    # A blank or malformed list is an error, never "none given".
    bootstrap_servers: Annotated[str | None, AfterValidator(_broker_list)] = None
    topic: KafkaTopic = "synthetic-sla"
    client_id: str = "synthetic-sla-probe"
    # Off by default, for a probe whose every send is bounded by its deadline:
    # aiokafka's idempotent producer retries a batch until it is written, so a canary
    # judged produce_failed at its deadline lands on the log after the outage anyway
    # (measured on Apache Kafka: a false duplicates ticket after every outage that
    # refuses writes), and brokers without InitProducerId (the embedded one) refuse it.
    # True: a producer id is required (a refusal is a connection failure).
    idempotence: bool = False
    send_timeout: Annotated[Duration, _between(0.1, 5 * MINUTE)] = 10.0
    # The consumer's fetch max wait bounds measured latency on brokers that answer a
    # fetch only when it runs out (the embedded one); Apache Kafka answers as soon as
    # data arrives, so a short wait costs it only a few empty fetches per second.
    # At most 10 s: on such a broker every canary would wait that long to be read.
    fetch_max_wait: Annotated[Duration, _between(0.001, 10.0)] = 0.1
    # Topic management (the default, as in every probe of its kind): create (and
    # re-create) the topic if missing, and keep a canary partition led by every broker
    # (probe.core.leadership). False where the probe must not administer topics.
    create_topic: bool = True
    # Part of topic management: move the canary topic's leaders (partition reassignment,
    # preferred leader elections) so that every broker leads a canary partition and is
    # measured. Only the canary topic's partitions; it needs Alter on the cluster, and
    # without it the probe says so once and measures the brokers it can. False: the
    # probe creates and grows the topic but never moves a leader.
    move_leaders: bool = True
    # Canaries per second at most: a round of many partitions is spread out instead of
    # sent as one burst (10,000 partitions at 1,000/s: 10 s of a 20 s interval), never
    # over more than 80 % of the interval. 0: a whole round at once.
    max_send_rate: float = Field(default=1000.0, ge=0, allow_inf_nan=False)
    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None

    def security_options(self) -> dict[str, str | bool]:
        """TLS and SASL as Kafka clients name them: kafka-python's names, which
        aiokafka shares (but for TLS, which it takes as one SSLContext built from the
        ``ssl_*`` entries) and the Spark source translates to librdkafka's. One mapping
        for every client the probe runs."""
        options: dict[str, str | bool] = {}
        if self.tls is not None:
            options["security_protocol"] = "SSL"
            if self.tls.ca_file:
                options["ssl_cafile"] = str(self.tls.ca_file)
            if self.tls.cert_file and self.tls.key_file:
                options["ssl_certfile"] = str(self.tls.cert_file)
                options["ssl_keyfile"] = str(self.tls.key_file)
            options["ssl_check_hostname"] = self.tls.check_hostname
        if self.sasl is not None:
            options["security_protocol"] = "SASL_SSL" if self.tls else "SASL_PLAINTEXT"
            options["sasl_mechanism"] = self.sasl.mechanism
            options["sasl_plain_username"] = self.sasl.username
            options["sasl_plain_password"] = self.sasl.password_value()
        return options


def _names(value: object) -> object:
    """A list of names from YAML, or comma-separated from a flag or the environment."""
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


def _int_text(value: object) -> object:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


def _text(value: object) -> object:
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class MqttTlsConfig(TlsConfig):
    """TLS towards the MQTT broker; on exactly when the URL is ``mqtts://``."""

    # The name checked against the broker's certificate (and sent as SNI) when the
    # URL's host is not that name: an IP address, a load balancer in front.
    server_name: str | None = Field(default=None, min_length=1)


class MqttBridgeConfig(_Section):
    """An MQTT-to-Kafka bridge path: the Kafka topic a bridge copies the canaries to.

    It is read with the ``kafka`` section's connection settings (servers, TLS, SASL,
    fetch wait); the probe never writes to it.
    """

    topic: KafkaTopic


class TargetKind(StrEnum):
    """What a target is probed through: the names ``targets:`` takes. This is the one
    list of kinds; the transport map (probe.transport.TRANSPORTS) has a factory for
    each, and a test checks that they match."""

    KAFKA = "kafka"
    MQTT = "mqtt"


class StageName(StrEnum):
    """Where a target's canaries are judged; the values are the ``stage`` label values."""

    CONSUMER = "consumer"  # Kafka: a direct consumer of the canary topic
    SINK = "sink"  # Kafka: the Spark sink, judged where it writes its table
    GROUP = "group"  # Kafka: a consumer-group member of the canary topic, committing
    MQTT = "mqtt"  # MQTT: a subscriber to the shard topics
    BRIDGE = "bridge"  # MQTT: the Kafka topic an MQTT-to-Kafka bridge fills


# The stages each kind of target may name, as users write them (the messages of a
# Literal list them plainly); held as StageName once validated.
MqttStage = Annotated[Literal["mqtt", "bridge"], AfterValidator(StageName)]
MQTT_PORTS = {"mqtt": 1883, "mqtts": 8883}


class MqttConfig(_Section):
    """An MQTT target: canaries to ``<topic_prefix>/<shard>``, read back by a subscriber."""

    # mqtt://host[:1883] or mqtts://host[:8883]; None: no MQTT target.
    url: str | None = None
    # The `target` label of the MQTT target's series.
    target: CanaryText = Field(default="mqtt", min_length=1, max_length=255)
    topic_prefix: str = Field(default="synthetic-sla", min_length=1, max_length=200)
    shards: int = Field(default=3, ge=1, le=100_000)
    qos: Annotated[Literal[0, 1, 2], BeforeValidator(_int_text)] = 1
    # YAML reads `protocol: 5` as a number and `3.1.1` as text: both are accepted.
    protocol: Annotated[Literal["5", "3.1.1"], BeforeValidator(_text)] = "5"
    # Client ids are <client_id>-pub and <client_id>-sub; default sla-probe-<probe_id>.
    # The subscriber's must be stable across restarts for a persistent session.
    client_id: str | None = Field(default=None, min_length=1, max_length=100)
    username: str | None = Field(default=None, min_length=1)
    # From exactly one place: here, password_file, or SLA_PROBE_MQTT_PASSWORD.
    password: Annotated[SecretStr | None, Field(validate_default=True)] = None
    password_file: Path | None = None
    tls: MqttTlsConfig | None = None
    # Keep the subscriber's session (and the QoS 1/2 canaries queued for it) across
    # disconnects, for session_expiry (MQTT 5; MQTT 3.1.1 brokers keep it their way).
    persistent_session: bool = False
    session_expiry: Annotated[Duration, _between(1.0, 7 * DAY)] = 300.0
    # MQTT carries the keepalive as 16-bit seconds.
    keepalive: Annotated[Duration, _between(1.0, 65535.0)] = 30.0
    # No acknowledgement (PUBACK at QoS 1, PUBCOMP at 2) by then: produce_failed.
    send_timeout: Annotated[Duration, _between(0.1, 5 * MINUTE)] = 10.0
    # Canaries per second at most; a round of many shards is spread out so the probe
    # never saturates itself (its arrivals would wait behind its own sends and be
    # measured late). 1,000 shards at 500/s: 2 s per round. 0: no limit.
    max_send_rate: float = Field(default=500.0, ge=0, allow_inf_nan=False)
    bridge: MqttBridgeConfig | None = None
    # Which stages judge the canaries; default mqtt, plus bridge when a bridge is set.
    stages: tuple[MqttStage, ...] = Field(default=None, validate_default=True)

    @field_validator("topic_prefix")
    @classmethod
    def _no_wildcards(cls, prefix: str) -> str:
        if any(char in prefix for char in "+#\0"):
            raise ValueError("must not contain the MQTT wildcards + and #")
        return prefix.rstrip("/") or prefix

    @field_validator("url")
    @classmethod
    def _mqtt_url(cls, url: str | None) -> str | None:
        if url is not None:
            parse_mqtt_url(url)
        return url

    @field_validator("tls")
    @classmethod
    def _tls_with_mqtts(cls, tls: MqttTlsConfig | None, info: ValidationInfo) -> object:
        url = info.data.get("url")
        if tls is not None and url is not None and parse_mqtt_url(url)[0] != "mqtts":
            raise ValueError("set, but mqtt.url is mqtt://; TLS is on exactly with mqtts://")
        return tls

    @field_validator("password")
    @classmethod
    def _password_with_user(cls, password: SecretStr | None, info: ValidationInfo) -> object:
        if password is not None and info.data.get("username") is None:
            raise ValueError("needs mqtt.username")
        return password

    @field_validator("password_file")
    @classmethod
    def _one_password(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        if path is not None and info.data.get("username") is None:
            raise ValueError("needs mqtt.username")
        _one_secret_source(info.data.get("password"), path, "mqtt.password", required=False)
        return path

    def password_value(self) -> str | None:
        """The password now, None without one (read from password_file at each call);
        ConfigError naming mqtt.password_file if the file can no longer be used."""
        return _secret_value(self.password, self.password_file, "mqtt.password")

    @field_validator("stages", mode="before")
    @classmethod
    def _stages(cls, stages: object, info: ValidationInfo) -> object:
        has_bridge = info.data.get("bridge") is not None
        if stages is None:
            return ("mqtt", "bridge") if has_bridge else ("mqtt",)
        stages = _names(stages)
        if isinstance(stages, list | tuple):
            if not stages:
                raise ValueError("must name at least one stage: mqtt, bridge")
            if "bridge" in stages and not has_bridge:
                raise ValueError("bridge needs mqtt.bridge.topic")
            return tuple(dict.fromkeys(stages))
        return stages


def parse_mqtt_url(url: str) -> tuple[str, str, int]:
    """``mqtts://broker:8883`` -> ("mqtts", "broker", 8883). Raises ValueError.

    Credentials are refused in the URL: they would end up in logs and in ``ps``;
    they belong in mqtt.username and mqtt.password_file (or SLA_PROBE_MQTT_PASSWORD).
    """
    parts = urlsplit(url)
    if parts.scheme not in MQTT_PORTS:
        raise ValueError(f"{url!r}: use mqtt://host[:port] or mqtts://host[:port]")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "credentials do not belong in the URL; use mqtt.username and mqtt.password_file"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"{url!r}: only a scheme, a host and a port are allowed")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r}: bad port") from None
    if not parts.hostname:
        raise ValueError(f"{url!r}: no host")
    return parts.scheme, parts.hostname, port or MQTT_PORTS[parts.scheme]


class JudgeConfig(_Section):
    """When a canary counts as delivered, late or lost."""

    freshness: Annotated[Duration, _between(0.01, HOUR)] = 5.0
    loss_timeout: Annotated[Duration, _between(1.0, DAY), Field(validate_default=True)] = 60.0

    @field_validator("loss_timeout")
    @classmethod
    def _loss_after_freshness(cls, loss_timeout: float, info: ValidationInfo) -> float:
        freshness = info.data.get("freshness")
        if freshness is not None and loss_timeout < freshness:
            raise ValueError(f"must be >= judge.freshness ({format_duration(freshness)})")
        return loss_timeout


class CanaryConfig(_Section):
    # Pad each canary to at least this many bytes, to probe with realistic sizes.
    size: int = Field(default=0, ge=0, le=1_000_000)
    # Larger records are rejected as `oversized` before any parsing.
    max_size: int = Field(default=1_048_576, ge=256)


def _readable_web_config(path: Path | None) -> Path | None:
    if path is not None:
        # Its WebConfigError is a ValueError naming the field inside the file.
        read_web_config(path)
    return path


class MetricsConfig(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=0, le=65535)
    # The latency SLO threshold: a histogram bucket boundary sits exactly on it.
    latency_threshold: Annotated[Duration, _between(0.001, HOUR)] = 0.5
    # Which partitions get a per-partition staleness series: all, only those stale
    # now (older than interval + freshness), or none. The per-stage aggregates (largest
    # staleness, stale partitions) are always exported; the alerts work in every mode.
    # The partition leader series follow it (stale: the partitions stale or in replica
    # trouble); the replica problem series are there unless it is none.
    partition_series: Literal["all", "stale", "none"] = "all"
    # The exporter toolkit's web configuration (probe.web_config): TLS, client
    # certificates and basic auth on every path served. Read here to fail at start
    # (exit 2) with the file's field named, not at the first scrape.
    web_config_file: Annotated[Path | None, AfterValidator(_readable_web_config)] = None


class SloConfig(_Section):
    """The objectives the status page (``/``) measures the error budget against: the
    same as the chart's ``slo.availability.objective`` and ``slo.latency.objective``
    (its rules alert on them; the page shows what the probe itself counted)."""

    # Share of canaries delivered (within the stage's freshness) of all fates.
    availability_objective: float = Field(default=0.999, gt=0.0, lt=1.0)
    # Share of arrived canaries faster than the stage's latency threshold
    # (metrics.latency_threshold; the sink's sink.latency_threshold).
    latency_objective: float = Field(default=0.99, gt=0.0, lt=1.0)


# A Pushgateway grouping label: Prometheus' label names, and not one the push sets.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_GROUPING_OWN = frozenset({"job", "instance", "target"})


class PushGatewayConfig(_Section):
    """Where `once` pushes its result: a Prometheus Pushgateway (``--push-gateway``).

    One push per target, replacing the last one of its group: ``job``, ``instance``
    (default: the probe id), ``target``, and the ``grouping`` labels. Basic auth with
    ``username`` and a password from exactly one place (``password``,
    ``password_file``, SLA_PROBE_PUSH_GATEWAY_PASSWORD); TLS with ``tls`` (an https
    URL, a CA, a client certificate).
    """

    url: str
    job: str = Field(default="synthetic-sla-smoke", min_length=1, max_length=200)
    instance: str | None = Field(default=None, min_length=1, max_length=200)
    grouping: dict[str, str] = Field(default_factory=dict)
    timeout: Annotated[Duration, _between(0.1, 5 * MINUTE)] = 10.0
    username: str | None = Field(default=None, min_length=1)
    password: SecretStr | None = None
    password_file: Annotated[Path | None, Field(validate_default=True)] = None
    tls: TlsConfig | None = None

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parsed = urlsplit(url)
        if parsed.scheme not in {"http", "https"} or not parsed.hostname:
            raise ValueError(f"{url!r}: give http(s)://host:port of the Pushgateway")
        return url.rstrip("/")

    @field_validator("grouping")
    @classmethod
    def _label_names(cls, grouping: dict[str, str]) -> dict[str, str]:
        for name, value in grouping.items():
            if not _LABEL_NAME.fullmatch(name) or name in _GROUPING_OWN:
                raise ValueError(
                    f"{name!r}: a label name ([a-zA-Z_][a-zA-Z0-9_]*) other than "
                    "job, instance and target, which the push sets"
                )
            if not value:
                raise ValueError(f"{name}: an empty value (the Pushgateway refuses it)")
        return grouping

    @field_validator("password_file")
    @classmethod
    def _one_password(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        password = info.data.get("password")
        _one_secret_source(password, path, "once.push_gateway.password", required=False)
        if (password is not None or path is not None) and info.data.get("username") is None:
            raise ValueError("a password needs once.push_gateway.username")
        return path

    def password_value(self) -> str | None:
        return _secret_value(self.password, self.password_file, "once.push_gateway.password")


class OnceConfig(_Section):
    """The smoke test: a few quick rounds, then wait for every canary's fate."""

    rounds: int = Field(default=3, ge=1, le=1000)
    # A smoke test may go faster than `run` (100 ms), and must end in minutes.
    interval: Annotated[Duration, _between(0.1, 5 * MINUTE)] = 1.0
    loss_timeout: Annotated[Duration, _between(1.0, HOUR)] = 10.0
    # Probe a Kafka broker started for this run (the embedded one), on request only: a
    # deploy pipeline whose broker setting went missing must fail, not pass against a
    # broker that proves nothing about its pipeline.
    embedded: bool = False
    # Push the result to a Pushgateway (a deploy pipeline's or a CronJob's smoke test).
    push_gateway: PushGatewayConfig | None = None


KafkaStage = Annotated[Literal["consumer", "sink", "group"], AfterValidator(StageName)]


class GroupConfig(_Section):
    """The group stage: a member of a consumer group of its own on the canary topic,
    which finds its coordinator, joins, commits what it read, and rejoins after a
    rebalance, as the cluster's real consumers do (docs/consumer-groups.md)."""

    # The group id; None: ``synthetic-sla-probe.<probe_id>``, a group per probe, so
    # that probes (and replicas) never share one and each reads every partition.
    id: Annotated[str | None, Field(min_length=1, max_length=249)] = None
    # A commit is good when the coordinator acknowledged it within this time; it is
    # also a bucket boundary of synthetic_sla_group_commit_latency_seconds.
    commit_latency_threshold: Annotated[Duration, _between(0.001, MINUTE)] = 0.5
    # Share of commits that must be good (failed commits count against it); the
    # chart's commit-latency burn alerts use the same objective.
    commit_latency_objective: float = Field(default=0.99, gt=0.0, lt=1.0)
    # The member's fetch max wait, as kafka.fetch_max_wait for the consumer stage. A
    # group member fetches every partition it is assigned all the time (it cannot
    # follow the writer as the consumer stage does), and every empty fetch names them
    # all: at 1,000 partitions on Apache Kafka, 100 ms cost the probe 2.7x the CPU of
    # the consumer stage alone, 500 ms 1.75x. Apache Kafka answers a fetch as soon as
    # a record arrives, so a longer wait costs it no latency there; a broker that holds
    # fetches until the wait runs out (the embedded one) adds up to this much to every
    # canary of the group stage, against a 500 ms latency threshold.
    fetch_max_wait: Annotated[Duration, _between(0.001, 10.0)] = 0.1

    def group_id(self, probe_id: str) -> str:
        """The id the group stage joins with.

        >>> GroupConfig().group_id("probe-7")
        'synthetic-sla-probe.probe-7'
        """
        return self.id or f"synthetic-sla-probe.{probe_id}"


class RestartConfig(_Section):
    """How `run` restarts a sink query that died: from its checkpoint, after an
    exponentially growing delay, until failures come too fast.

    The defaults are Flink's for its recommended exponential-delay strategy (1 s
    doubling by 1.5 up to 1 min, 10 % jitter, reset after 1 h without a failure),
    plus a failure-rate cap: the 10th failure within 1 h gives the stage up (reported
    failed; the probe's other stages go on). `sla-probe sink` does not restart its
    query: it exits for its supervisor.
    """

    initial_delay: Annotated[Duration, _between(0.01, HOUR)] = 1.0
    multiplier: float = Field(default=1.5, ge=1.0, le=10.0)
    max_delay: Annotated[Duration, _between(0.01, DAY)] = 60.0
    jitter: float = Field(default=0.1, ge=0.0, le=1.0)
    # A query that ran this long without failing starts over at initial_delay.
    reset_after: Annotated[Duration, _between(1.0, 7 * DAY)] = HOUR
    max_failures: int = Field(default=10, ge=1, le=10_000)
    failure_window: Annotated[Duration, _between(1.0, 7 * DAY)] = HOUR


# The sink's Kafka sources, by the name the setting takes.
SinkSource = Literal["sla_kafka", "kafka"]


class SinkConfig(_Section):
    """The Spark sink stage: canaries judged after Spark wrote them to a table."""

    # local[*] runs Spark inside the probe; null keeps what spark-submit configured.
    master: str | None = "local[*]"
    # Tables (canaries/, quarantine/, verdicts/) and, by default, the checkpoint live
    # under it; any Hadoop-compatible URI. `once` uses a fresh temporary one if unset.
    path: str | None = None
    checkpoint: str | None = None
    trigger: Annotated[Duration, _between(0.1, HOUR)] = 2.0
    # The sink's own freshness deadline: a stream processor adds its trigger interval
    # and batch time to the broker's latency, so it gets a looser bound than judge.freshness.
    freshness: Annotated[Duration, _between(0.01, DAY)] = 30.0
    # The sink's latency SLO threshold (produce to sink commit): a histogram bucket sits
    # on it, and the rules read the sink's latency SLI there instead of at
    # metrics.latency_threshold, which a micro-batch stage cannot meet: a canary waits
    # up to one trigger for its batch, then the batch's run time. About two triggers
    # plus a batch by default.
    latency_threshold: Annotated[Duration, _between(0.001, HOUR)] = 5.0
    # The event-time watermark trails the newest canary by this much.
    allowed_lateness: Annotated[Duration, _between(1.0, DAY)] = 60.0
    max_records_per_batch: int | None = Field(default=10_000, ge=1)
    starting_offsets: Literal["latest", "earliest"] = "latest"
    # What the sink and reconcile read Kafka with: the probe's own Python source
    # (sla_kafka, pip alone) or Spark's own connector (kafka: spark-sql-kafka-0-10, its
    # jars from `make spark-kafka`, or spark.jars.packages in spark_conf). The same
    # judge and tables behind either (probe/spark/kafka_connector.py).
    source: SinkSource = "sla_kafka"
    # Where Spark's own output goes (its JVM's log lines, its Python workers' prints),
    # appended, when the probe starts Spark itself; "-" leaves it on stderr. Unset:
    # spark.log in `path` when that is a local directory (`once`'s temporary one is
    # removed at exit), else discarded. Under spark-submit it stays spark-submit's.
    spark_log: str | None = Field(default=None, min_length=1)
    # Spark settings for the sink's session (spark.jars.packages, spark.hadoop.fs.s3a.*,
    # spark.driver.memory...). They win over spark-submit's --conf, which wins over the
    # probe's own defaults (see probe/spark/session.py).
    spark_conf: dict[Annotated[str, Field(pattern=r"^spark\.")], str] = Field(default_factory=dict)
    # How long the query may take to its first batch (a cold cluster starts its Python
    # workers first: minutes). Null: no bound; readiness stays false until then.
    first_batch_timeout: Annotated[Duration | None, _between(1.0, DAY)] = None
    # The watermark-skew SLO's threshold: good seconds are those with the skew below
    # it. Null: twice allowed_lateness (the watermark trails by allowed_lateness alone).
    skew_threshold: Annotated[Duration | None, _between(1.0, DAY)] = None
    restart: RestartConfig = RestartConfig()

    @property
    def skew_threshold_s(self) -> float:
        return self.skew_threshold if self.skew_threshold is not None else 2 * self.allowed_lateness


class ReconcileWindowConfig(_Section):
    """How each partition is cut for comparison: every ``duration`` of record time
    (default 5m), or every ``offsets`` offsets. One of them, not both."""

    duration: Annotated[Duration, _between(1.0, DAY)] | None = None
    offsets: int | None = Field(default=None, ge=1)

    @field_validator("offsets")
    @classmethod
    def _one_way(cls, offsets: int | None, info: ValidationInfo) -> int | None:
        if offsets is not None and info.data.get("duration") is not None:
            raise ValueError("give reconcile.window.duration or .offsets, not both")
        return offsets

    @property
    def duration_s(self) -> float | None:
        """The time window, when windows are by time (the default)."""
        if self.offsets is not None:
            return None
        return self.duration if self.duration is not None else 5 * MINUTE


def _column_names(value: object) -> object:
    names = _names(value)
    if isinstance(names, list) and not names:
        raise ValueError("must name at least one column")
    return tuple(names) if isinstance(names, list) else names


ColumnName = Annotated[str, Field(min_length=1)]


class ReconcileConfig(_Section):
    """`sla-probe reconcile`: a topic's records against a table's rows, by count and
    checksum per window and partition (see probe/reconcile/)."""

    # The Parquet table; default the sink stage's canaries/ under sink.path.
    table: str | None = Field(default=None, min_length=1)
    # How a record becomes the row it must match (probe/spark/checksum.py).
    format: Literal["canary", "raw", "json"] = "canary"
    partition_column: ColumnName = "kafka_partition"
    offset_column: ColumnName = "kafka_offset"
    # A table without partition and offset columns is matched by a key column: the
    # record's Kafka key (UTF-8), or with source_key that field of its JSON value.
    key_column: ColumnName | None = None
    source_key: ColumnName | None = None
    # The table's time column (timestamp, date or epoch ms), matched by key: places
    # rows whose key no record holds, so they count as extra; without it they are
    # not judged.
    time_column: ColumnName | None = None
    # The table's columns the checksum covers; default: the format's own (canary: the
    # signed fields; raw: value). Required for json.
    checksum_columns: Annotated[
        tuple[ColumnName, ...] | None,
        BeforeValidator(_column_names),
        Field(validate_default=True),
    ] = None
    window: ReconcileWindowConfig = ReconcileWindowConfig()
    # Records younger than this are on their way, not missing. Default: sink.freshness.
    settle: Annotated[Duration, _between(0.01, DAY)] | None = None
    # How far back each run looks; null: the whole retained log (windows by offsets).
    lookback: Annotated[Duration, _between(1.0, 90 * DAY)] | None = HOUR
    # Keep reconciling this often, serving /metrics and /readyz; null: once, then exit.
    every: Annotated[Duration, _between(1.0, DAY)] | None = None
    # The report table (one row per window and partition, per run); default
    # <sink.path>/reconciliation, none without a sink.path.
    report_path: str | None = Field(default=None, min_length=1)
    # Offsets of each discrepancy named per window.
    sample_size: int = Field(default=10, ge=0, le=1000)

    @field_validator("lookback")
    @classmethod
    def _lookback_for_time(cls, lookback: float | None, info: ValidationInfo) -> float | None:
        window = info.data.get("window")
        if lookback is None and isinstance(window, ReconcileWindowConfig) and window.duration_s:
            raise ValueError("required with windows by time (or set reconcile.window.offsets)")
        return lookback

    @field_validator("key_column")
    @classmethod
    def _key_for_format(cls, key: str | None, info: ValidationInfo) -> str | None:
        if key is not None and info.data.get("format") == "canary":
            raise ValueError("format canary matches by partition and offset")
        return key

    @field_validator("source_key", "time_column")
    @classmethod
    def _needs_key(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("key_column") is None:
            raise ValueError("needs key_column (it matches rows by key)")
        if info.field_name == "source_key" and value and info.data.get("format") != "json":
            raise ValueError("a field of a JSON value: format json only")
        return value

    @field_validator("checksum_columns")
    @classmethod
    def _columns_for_format(
        cls, columns: tuple[str, ...] | None, info: ValidationInfo
    ) -> tuple[str, ...] | None:
        record_format = info.data.get("format")
        if record_format == "json" and not columns:
            raise ValueError("required with format json: the fields to compare")
        if record_format == "raw" and columns is not None and len(columns) != 1:
            raise ValueError("format raw compares one column with the record's value")
        if record_format == "canary" and columns is not None:
            raise ValueError("format canary compares the canary's signed fields; leave it unset")
        return columns


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
    # consumer-group member (opt-in).
    stages: tuple[KafkaStage, ...] = Field(default=("consumer",), validate_default=True)
    sink: SinkConfig = SinkConfig()
    group: GroupConfig = GroupConfig()
    reconcile: ReconcileConfig = ReconcileConfig()

    @field_validator("stages", mode="before")
    @classmethod
    def _kafka_stages(cls, stages: object) -> object:
        if isinstance(stages, str):
            stages = [name.strip() for name in stages.split(",") if name.strip()]
        if isinstance(stages, list | tuple) and not stages:
            raise ValueError("must name at least one of: consumer, sink, group")
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
    return config


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
        if section is None and section_name == "kafka.sasl":
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
