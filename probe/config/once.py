"""The ``once`` section: the smoke test's rounds and deadlines, the embedded broker it may
start on request, whether it may manage the topic, and the Pushgateway it may push its
result to.

The embedded broker is never a default: a deploy pipeline whose broker setting went
missing must fail (probe.config.require_for_once), not pass against a broker that
proves nothing about its pipeline. Nor is topic management: a smoke test against
production writes and reads canaries, and changes nothing else on the cluster unless
asked (once.create_topic, once.move_leaders), whatever kafka.create_topic says for
``run``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from probe.config.base import _Section
from probe.config.durations import HOUR, MINUTE, Duration, _between
from probe.config.kafka import TlsConfig
from probe.config.secret_sources import _one_secret_source, _secret_value

# A Pushgateway grouping label: Prometheus' label names, and not one the push sets.
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_GROUPING_OWN = frozenset({"job", "instance", "target"})


class PushGatewayConfig(_Section):
    """Where `once` pushes its result: a Prometheus Pushgateway (``--push-gateway``).

    One push per target, replacing the last one of its group: ``job``, ``instance``
    (default: the target's name), ``target``, and the ``grouping`` labels. Basic auth with
    ``username`` and a password from exactly one place (``password``,
    ``password_file``, SLA_PROBE_PUSH_GATEWAY_PASSWORD); TLS with ``tls`` (an https
    URL, a CA, a client certificate).
    """

    url: str
    job: str = Field(default="synthetic-sla-smoke", min_length=1, max_length=200)
    # None: the target's name. Never the host name (the probe id's default): a CI job's
    # host changes every run, and each run would leave a group of its own behind, stale
    # for ever, with a failed run's alert never resolved by the next run's pass.
    instance: str | None = Field(default=None, min_length=1, max_length=200)
    grouping: dict[str, str] = Field(default_factory=dict)
    # A push that takes longer fails (logged; `once` keeps its own exit code).
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
    # How long `once` waits for an acknowledged canary before it is lost: its run takes
    # at most rounds x interval plus this.
    loss_timeout: Annotated[Duration, _between(1.0, HOUR)] = 10.0
    # Probe a Kafka broker started for this run (the embedded one), on request only: a
    # deploy pipeline whose broker setting went missing must fail, not pass against a
    # broker that proves nothing about its pipeline.
    embedded: bool = False
    # Topic management for this run, off unless asked: a smoke test against production
    # writes and reads canaries and must not create a topic or move a leader. In place
    # of kafka.create_topic and kafka.move_leaders, which are `run`'s (a config file
    # shared with the running probe turns them on). The embedded broker's topic is
    # created whatever this says: nobody else makes it.
    create_topic: bool = False
    # Needs create_topic: moving the canary topic's leaders is part of managing it.
    move_leaders: bool = False
    # Push the result to a Pushgateway (a deploy pipeline's or a CronJob's smoke test).
    push_gateway: PushGatewayConfig | None = None

    @field_validator("push_gateway", mode="before")
    @classmethod
    def _push_needs_url(cls, push: object) -> object:
        # A job or instance given (SLA_PROBE_PUSH_GATEWAY_INSTANCE, say) with nowhere to
        # push: said, rather than pydantic's "url: Field required".
        if isinstance(push, dict) and push.get("url") is None:
            given = ", ".join(sorted(push)) or "the section"
            raise ValueError(
                f"{given} given without url: the Pushgateway to push to "
                "(--push-gateway URL, SLA_PROBE_PUSH_GATEWAY)"
            )
        return push

    @field_validator("move_leaders")
    @classmethod
    def _moving_leaders_manages_the_topic(cls, move: bool, info: ValidationInfo) -> bool:
        if move and not info.data.get("create_topic"):
            raise ValueError(
                "needs once.create_topic (--create-topic): moving the canary topic's "
                "leaders is part of managing the topic"
            )
        return move
