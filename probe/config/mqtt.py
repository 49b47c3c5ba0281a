"""The ``mqtt`` section: an MQTT target, its broker's URL, TLS and credentials, its shards,
and the Kafka topic an MQTT-to-Kafka bridge copies its canaries to.

The URL holds no credentials (they would reach logs and ``ps``), and TLS is on exactly
with ``mqtts://``. Rules that need other sections (the bridge's Kafka, the pace against
the interval) are checked where the whole model is assembled (probe.config).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, ValidationInfo, field_validator

from probe.config.base import _int_text, _names, _Section, _text
from probe.config.durations import DAY, MINUTE, Duration, _between
from probe.config.kafka import KafkaTopic, TlsConfig
from probe.config.names import CanaryText, MqttStage
from probe.config.secret_sources import _one_secret_source, _secret_value


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
