"""Typed configuration: one model per section, validated once, errors naming the field.

Settings come from three layers, later ones winning: the YAML file (``--config``),
``SLA_PROBE_<FLAG>`` environment variables, and command-line flags. The CLI turns
the last two into dotted overrides (``{"kafka.send_timeout": "5s"}``) and calls
:func:`load`; every problem surfaces as one :class:`~probe.errors.ConfigError` whose
field is the path in the YAML file, e.g. ``kafka.send_timeout: not a duration``.

Durations are written ``500ms``, ``20s``, ``1m30s``, ``2h`` or as plain seconds, and
are held as float seconds.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

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

from probe.errors import ConfigError

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object) -> float:
    """``"1m30s"`` -> 90.0. Numbers are seconds. Raises ValueError with a short reason."""
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


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be > 0")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]


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


class SaslConfig(_Section):
    mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    username: str = Field(min_length=1)
    password: SecretStr


class KafkaConfig(_Section):
    """Where canaries go and how they are read back."""

    # None means: `once` starts the embedded broker; `run` refuses to start.
    bootstrap_servers: str | None = None
    topic: str = Field(default="synthetic-sla", min_length=1, max_length=249)
    client_id: str = "synthetic-sla-probe"
    # Off by default: brokers without InitProducerId (the embedded one) refuse it.
    idempotence: bool = False
    send_timeout: Duration = 10.0
    # The consumer's fetch max wait bounds measured latency on brokers that answer a
    # fetch only when it runs out (the embedded one); Apache Kafka answers as soon as
    # data arrives, so a short wait costs it only a few empty fetches per second.
    fetch_max_wait: Duration = 0.1
    create_topic: bool = False
    partitions: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    tls: TlsConfig | None = None
    sasl: SaslConfig | None = None


class JudgeConfig(_Section):
    """When a canary counts as delivered, late or lost."""

    freshness: Duration = 5.0
    loss_timeout: Annotated[Duration, Field(validate_default=True)] = 60.0

    @field_validator("loss_timeout")
    @classmethod
    def _loss_after_freshness(cls, loss_timeout: float, info: ValidationInfo) -> float:
        freshness = info.data.get("freshness")
        if freshness is not None and loss_timeout < freshness:
            raise ValueError(f"must be >= judge.freshness ({freshness:g}s)")
        return loss_timeout


class CanaryConfig(_Section):
    # Pad each canary to at least this many bytes, to probe with realistic sizes.
    size: int = Field(default=0, ge=0, le=1_000_000)
    # Larger records are rejected as `oversized` before any parsing.
    max_size: int = Field(default=1_048_576, ge=256)


class MetricsConfig(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=9464, ge=0, le=65535)
    # The latency SLO threshold: a histogram bucket boundary sits exactly on it.
    latency_threshold: Duration = 0.5


class OnceConfig(_Section):
    """The smoke test: a few quick rounds, then wait for every canary's fate."""

    rounds: int = Field(default=3, ge=1, le=1000)
    interval: Duration = 1.0
    loss_timeout: Duration = 10.0


class ProbeConfig(_Section):
    probe_id: str = Field(default_factory=socket.gethostname, min_length=1, max_length=255)
    # The `target` label of every series: which pipeline this probe watches.
    target: str = Field(default="kafka", min_length=1, max_length=255)
    interval: Duration = 20.0
    signing_key_file: Path | None = None
    allow_ephemeral_key: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    kafka: KafkaConfig = KafkaConfig()
    judge: JudgeConfig = JudgeConfig()
    canary: CanaryConfig = CanaryConfig()
    metrics: MetricsConfig = MetricsConfig()
    once: OnceConfig = OnceConfig()


def _set_path(tree: dict[str, Any], dotted: str, value: object) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for name in parents:
        child = node.get(name)
        if not isinstance(child, dict):
            child = {}
            node[name] = child
        node = child
    node[leaf] = value


def _first_error(error: ValidationError) -> ConfigError:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "config"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown setting"
    return ConfigError(field, message)


def load(path: Path | None = None, overrides: dict[str, object] | None = None) -> ProbeConfig:
    """Read the YAML file (if any), apply dotted overrides, validate.

    >>> load(overrides={"interval": "30s"}).interval
    30.0
    """
    tree: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise ConfigError("config", f"{path} is not valid YAML{where}") from exc
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError("config", f"{path} must hold a mapping of settings")
        tree = loaded or {}
    for dotted, value in (overrides or {}).items():
        _set_path(tree, dotted, value)
    try:
        config = ProbeConfig.model_validate(tree)
    except ValidationError as exc:
        raise _first_error(exc) from None
    # Across sections: a canary cannot be lost before it could have been late.
    if config.once.loss_timeout < config.judge.freshness:
        raise ConfigError(
            "once.loss_timeout", f"must be >= judge.freshness ({config.judge.freshness:g}s)"
        )
    return config
