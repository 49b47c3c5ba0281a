"""The ``kafka`` section: the brokers, the canary topic, how canaries are sent and read
back, and TLS and SASL towards the brokers.

Broker lists and topic names are checked by Kafka's own rules before any broker is asked:
a lenient broker (the embedded one) must not pass a probe that the first real cluster
would refuse. TlsConfig serves the other servers the probe connects to as well: MQTT's
(MqttTlsConfig extends it) and the Pushgateway. The section speaks no client's dialect:
probe.transport.kafka_settings turns TLS and SASL into each Kafka client's options.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
)

from probe.config.base import _Section
from probe.config.durations import MINUTE, Duration, _between
from probe.config.secret_sources import _one_secret_source, _secret_value
from probe.core.errors import ConfigError


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


class SaslConfig(_Section):
    """SASL towards the brokers. The password from exactly one place: ``password``,
    ``password_file`` (e.g. a mounted Secret), or SLA_PROBE_KAFKA_SASL_PASSWORD.

    Its repr, and every dump of the config, shows ``'**********'`` for the password.
    """

    # Where the password is set, as messages name it (the mirror's section has its own).
    password_setting: ClassVar[str] = "kafka.sasl.password"

    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str = Field(min_length=1)
    password: SecretStr | None = None
    password_file: Annotated[Path | None, Field(validate_default=True)] = None

    @field_validator("password_file")
    @classmethod
    def _one_password(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        _one_secret_source(info.data.get("password"), path, cls.password_setting, required=True)
        return path

    def password_value(self) -> str:
        """The password now (read from password_file at each call); ConfigError naming
        kafka.sasl.password_file if the file can no longer be used."""
        password = _secret_value(self.password, self.password_file, self.password_setting)
        # The validator requires one source; a model built bypassing it has none.
        if password is None:
            raise ConfigError(self.password_setting, "required")
        return password


# A host name or an IPv4 address; an IPv6 address goes in brackets: [::1]:9092.
_BROKER_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?")
_BRACKETED_IPV6 = re.compile(r"\[([^\]]*)\](?::(.*))?")


def _auto_is_none(value: object) -> object:
    """``auto`` for a setting the probe decides (held as None, as null is)."""
    return None if isinstance(value, str) and value.strip().lower() == "auto" else value


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
    # The consumer's fetch max wait. auto (null, the default): 100 ms, and 1 s once the
    # probe's own canaries show that the brokers answer a held fetch as soon as a
    # record arrives (Apache Kafka does: there a short wait only multiplies empty
    # fetches), never for brokers that hold fetches whatever arrives (the embedded
    # one: there the wait bounds measured latency); probe.core.fetch_wait. A duration
    # pins it. At most 10 s: on a broker that holds fetches every canary would wait
    # that long to be read.
    fetch_max_wait: Annotated[
        Duration | None, BeforeValidator(_auto_is_none), _between(0.001, 10.0)
    ] = None
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
    # The section these settings were written in, which messages name (a connection's
    # refusal says which setting to change): ``kafka``, or ``mirror`` for the copy the
    # mirror stage reads the target cluster with (probe.transport.mirror_config).
    _section: str = PrivateAttr("kafka")

    @property
    def section(self) -> str:
        """The section's name: ``kafka`` or ``mirror``."""
        return self._section

    def setting(self, name: str) -> str:
        """A setting's name as its user wrote it.

        >>> KafkaConfig().setting("tls.ca_file")
        'kafka.tls.ca_file'
        """
        return f"{self._section}.{name}"

    def in_section(self, section: str, **update: object) -> KafkaConfig:
        """A copy with these settings changed, whose messages name ``section``."""
        copy = self.model_copy(update=update)
        copy._section = section
        return copy
