"""How the probe's aiokafka clients (producer, consumer, admin client, and the
connection that diagnoses a failed one) reach the brokers: addresses, timeouts, TLS
and SASL, from the ``kafka`` section."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any, TypeVar

from aiokafka.helpers import create_ssl_context

from probe.config import KafkaConfig, TlsConfig
from probe.core.errors import ConfigError


def connection_options(config: KafkaConfig) -> dict[str, Any]:
    """Client options shared by producer, consumer and admin client."""
    options: dict[str, Any] = {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": config.client_id,
        "request_timeout_ms": int(config.send_timeout * 1000),
    }
    # The SASL password (kafka.sasl.password_file) is read here, once per transport:
    # at the probe's start, and again whenever a transport is made anew. aiokafka's
    # own reconnections reuse it, so a rotated password reaches a running probe's
    # clients when the probe restarts (the chart's rollout), not before.
    security = config.security_options()
    tls = {name: security.pop(name) for name in list(security) if name.startswith("ssl_")}
    if config.tls is not None:
        context = _tls_context(config.tls)
        context.check_hostname = bool(tls["ssl_check_hostname"])
        options["ssl_context"] = context
    return {**options, **security}


def _tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """The clients' TLS context; a file it cannot use is a ConfigError naming the setting
    (the files are read here first, before any broker is asked)."""
    try:
        context: ssl.SSLContext = create_ssl_context(cafile=tls.ca_file)
    except (OSError, ValueError) as exc:
        raise ConfigError("kafka.tls.ca_file", _unusable(tls.ca_file, exc)) from exc
    if tls.cert_file is not None and tls.key_file is not None:
        for field, path in (("cert_file", tls.cert_file), ("key_file", tls.key_file)):
            if not path.is_file():
                raise ConfigError(f"kafka.tls.{field}", f"{path}: no such file")
        try:
            context.load_cert_chain(tls.cert_file, tls.key_file, password=_no_key_password)
        except (OSError, ValueError) as exc:
            raise ConfigError(
                "kafka.tls.cert_file",
                f"{_unusable(tls.cert_file, exc)} with kafka.tls.key_file {tls.key_file}: "
                "they must be a PEM certificate and its unencrypted private key",
            ) from exc
    return context


def _no_key_password() -> str:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key's
    # password, and a service would hang there.
    raise ValueError("the key is encrypted; the probe takes an unencrypted PEM key")


def _unusable(path: object, error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return f"{path}: no such file"
    detail = getattr(error, "reason", None) or getattr(error, "strerror", None) or str(error)
    return f"{path}: cannot be used ({detail})"


Reason = TypeVar("Reason")


def reason_for(
    exc: BaseException, reasons: Sequence[tuple[type[BaseException], Reason]], other: Reason
) -> Reason:
    """The reason label of the first exception type in ``reasons`` that ``exc`` is,
    else ``other``: a client's exceptions mapped to a small, stable set of labels.

    >>> reason_for(TimeoutError(), [(OSError, "io"), (TimeoutError, "timeout")], "other")
    'io'
    """
    for kind, reason in reasons:
        if isinstance(exc, kind):
            return reason
    return other
