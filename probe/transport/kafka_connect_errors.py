"""Why a connection to Kafka failed, in one line naming the setting to change.

aiokafka tries each bootstrap server and, when none works, raises only
``KafkaConnectionError: Unable to bootstrap from [...]``: the certificate it did not
trust, the TLS alert, the refused SASL login were logged and dropped on the way. So
when a bootstrap fails, :func:`diagnose` connects once more to the first bootstrap
server, with the TLS context and SASL settings the clients use, and names what it
finds::

    >>> diagnosis = await diagnose(config.kafka, connection_options(config.kafka))
    >>> diagnosis.reason
    <ConnectFailure.UNTRUSTED_CERTIFICATE: 'untrusted_certificate'>
    >>> diagnosis.message
    "cannot connect to 127.0.0.1:9093: the broker's certificate is not trusted (self-signed
    certificate in certificate chain): set kafka.tls.ca_file to the CA that signed it"

(one line; wrapped here). The connection goes up layer by layer, each failure named
at the layer it happens:

1. TCP: refused, timed out, no route, a name that does not resolve.
2. TLS, with ``kafka.tls``: the broker's certificate (verify code), an alert about the
   client's certificate, or a connection dropped in the handshake (then a plaintext
   request on a new connection tells a plaintext listener).
3. One Kafka request, ApiVersions v0, which every broker answers before any
   authentication: a Kafka answer, a TLS alert record instead (a TLS listener, for a
   plaintext client), or a closed connection (confirmed TLS by a handshake on a new
   connection). Under TLS 1.3 a broker that wants a client certificate says so only
   here, after the handshake.
4. SASL, with ``kafka.sasl``: aiokafka's own connection, whose error is the broker's.

Layers 1 to 3 use blocking standard-library sockets in a thread: they must see the raw
bytes (a TLS record where a Kafka answer was expected) and the ssl module's own
errors, which asyncio's streams wrap or swallow. The password never reaches a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from probe.config import KafkaConfig
from probe.errors import ConnectFailed, ConnectFailure

# Kafka clients' port when a bootstrap server names none.
DEFAULT_PORT = 9092

# ApiVersions (key 18) v0: no body, answered by any broker before SASL.
_API_VERSIONS = 18
_CORRELATION_ID = 0x51A0
# TLS record content types (RFC 8446 5.1): alert, handshake; then major version 3.
_TLS_RECORD_TYPES = (0x15, 0x16)

# OpenSSL verify codes (X509_V_ERR_*) that name a cause of their own; every other
# failure to verify the broker's chain is a trust problem (kafka.tls.ca_file).
_HOSTNAME_MISMATCH = frozenset({62, 64})  # host name, IP address
_NOT_VALID_NOW = frozenset({9, 10})  # not yet valid, expired

# OpenSSL's names of the alerts a broker sends about the client's certificate: none
# given where one is required, or one it does not accept.
_CLIENT_CERTIFICATE_ALERTS = frozenset(
    {
        "TLSV13_ALERT_CERTIFICATE_REQUIRED",
        "SSLV3_ALERT_BAD_CERTIFICATE",
        "TLSV1_ALERT_UNKNOWN_CA",
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
        "SSLV3_ALERT_CERTIFICATE_EXPIRED",
        "SSLV3_ALERT_CERTIFICATE_REVOKED",
        "TLSV1_ALERT_ACCESS_DENIED",
    }
)


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a connection failed: ``reason`` for the metric's label, ``message`` (one
    line) for the operator: the cause, the address, the setting to change."""

    reason: ConnectFailure
    message: str

    def error(self) -> ConnectFailed:
        return ConnectFailed(self.reason, self.message)


class Layer(Enum):
    """Where on the way up a connection failed."""

    CONNECT = "connect"
    HANDSHAKE = "handshake"
    REQUEST = "request"


class _Failed(Exception):
    def __init__(self, layer: Layer, cause: OSError) -> None:
        super().__init__(layer, cause)
        self.layer = layer
        self.cause = cause


def first_address(bootstrap_servers: str) -> tuple[str, int]:
    """The first bootstrap server as (host, port): what aiokafka tried first.

    >>> first_address("[::1]:9093,b:9092")
    ('::1', 9093)
    >>> first_address("kafka-0")
    ('kafka-0', 9092)
    """
    entry = bootstrap_servers.split(",", maxsplit=1)[0].strip()
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = entry.partition(":")
    return host, int(port) if port else DEFAULT_PORT


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- the pure part: a failure at a layer, named -------------------------------------


def certificate_problem(
    where: str, host: str, error: ssl.SSLCertVerificationError, ca_file: str | None
) -> Diagnosis:
    """The broker's certificate did not verify."""
    code, detail = error.verify_code, error.verify_message or error.reason or str(error)
    if code in _HOSTNAME_MISMATCH:
        return Diagnosis(
            ConnectFailure.HOSTNAME_MISMATCH,
            f"cannot connect to {where}: the broker's certificate is not valid for {host} "
            f"({detail}): connect by a name the certificate holds (kafka.bootstrap_servers), "
            "or set kafka.tls.check_hostname: false",
        )
    if code in _NOT_VALID_NOW:
        return Diagnosis(
            ConnectFailure.CERTIFICATE_EXPIRED,
            f"cannot connect to {where}: a certificate of the broker's chain is not valid "
            f"now ({detail}): the broker needs a current certificate (or the clock here "
            "is wrong)",
        )
    trusted_by = f"kafka.tls.ca_file ({ca_file})" if ca_file else "the system's trust store"
    return Diagnosis(
        ConnectFailure.UNTRUSTED_CERTIFICATE,
        f"cannot connect to {where}: the broker's certificate is not trusted by {trusted_by} "
        f"({detail}): set kafka.tls.ca_file to the CA that signed it",
    )


def client_certificate_problem(where: str, alert: str, cert_file: str | None) -> Diagnosis:
    """The broker refused the TLS connection over the client's certificate."""
    said = alert.lower().replace("_", " ")
    if cert_file is None:
        return Diagnosis(
            ConnectFailure.CLIENT_CERTIFICATE,
            f"cannot connect to {where}: the broker requires a client certificate ({said}): "
            "set kafka.tls.cert_file and kafka.tls.key_file",
        )
    return Diagnosis(
        ConnectFailure.CLIENT_CERTIFICATE,
        f"cannot connect to {where}: the broker refused the client certificate of "
        f"kafka.tls.cert_file ({cert_file}; {said}): it must be signed by a CA the broker "
        "trusts (kafka.tls.cert_file, kafka.tls.key_file)",
    )


def unreachable(where: str, layer: Layer, cause: OSError, timeout: float) -> Diagnosis:
    """Nothing that answers at the address (or nothing answering in time)."""
    if isinstance(cause, TimeoutError):
        what = (
            f"no connection within {timeout:g}s (connection timed out)"
            if layer is Layer.CONNECT
            else f"the connection was accepted but nothing answered within {timeout:g}s"
        )
    elif isinstance(cause, ConnectionRefusedError):
        what = "connection refused (nothing listens on that port)"
    elif isinstance(cause, socket.gaierror):
        what = f"the host name does not resolve ({cause.strerror})"
    else:
        what = cause.strerror or str(cause) or type(cause).__name__
    return Diagnosis(
        ConnectFailure.UNREACHABLE,
        f"cannot connect to {where}: {what}; check kafka.bootstrap_servers and the network "
        "path to the broker",
    )


def tls_expected(where: str, how: str) -> Diagnosis:
    return Diagnosis(
        ConnectFailure.TLS_EXPECTED,
        f"cannot connect to {where}: {how} to a plaintext Kafka request: the listener "
        "may need kafka.tls",
    )


def tls_unexpected(where: str) -> Diagnosis:
    return Diagnosis(
        ConnectFailure.TLS_UNEXPECTED,
        f"cannot connect to {where}: the broker dropped the TLS handshake and answers Kafka "
        "requests in plaintext: the listener may not need kafka.tls",
    )


def tls_failed(where: str, cause: OSError) -> Diagnosis:
    detail = getattr(cause, "reason", None) or str(cause) or type(cause).__name__
    return Diagnosis(
        ConnectFailure.TLS_FAILED,
        f"cannot connect to {where}: TLS handshake failed ({detail}); check kafka.tls",
    )


def sasl_problem(where: str, error: KafkaError, mechanism: str, username: str) -> Diagnosis:
    """aiokafka's SASL error, named with the mechanism and the user (never the password)."""
    said = _broker_said(error)
    if isinstance(error, UnsupportedSaslMechanismError):
        how = f"set kafka.sasl.mechanism to one it offers ({said})"
        what = f"the broker does not offer SASL mechanism {mechanism}"
    elif isinstance(error, IllegalSaslStateError):
        what = f"the listener does not take SASL ({said})"
        how = "it may not need kafka.sasl"
    else:
        what = f"SASL authentication failed for user {username!r} with {mechanism} ({said})"
        how = "check kafka.sasl.username and kafka.sasl.password (and kafka.sasl.mechanism)"
    return Diagnosis(ConnectFailure.SASL_FAILED, f"cannot connect to {where}: {what}: {how}")


def _broker_said(error: KafkaError) -> str:
    """The broker's own words, without aiokafka's class-name prefix."""
    message = error.args[0] if error.args and isinstance(error.args[0], str) else str(error)
    return message.removeprefix("Kafka broker does not support ").strip() or type(error).__name__


def _alert(error: OSError) -> str | None:
    """The OpenSSL name of a client-certificate alert the broker sent, if that is what
    this is."""
    reason = getattr(error, "reason", None)
    return reason if reason in _CLIENT_CERTIFICATE_ALERTS else None


def _closed(error: OSError) -> bool:
    """A connection the peer dropped: EOF where TLS wanted more, or a reset."""
    return isinstance(
        error, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionResetError | BrokenPipeError
    )


def answered_kafka(answer: bytes) -> bool:
    """Whether these are the first bytes of a Kafka response to our request."""
    if len(answer) < 8:
        return False
    size, correlation_id = struct.unpack(">ii", answer[:8])
    return bool(4 <= size < 1 << 24 and correlation_id == _CORRELATION_ID)


def answered_tls(answer: bytes) -> bool:
    """Whether these are the first bytes of a TLS record (an alert, a handshake)."""
    return len(answer) >= 2 and answer[0] in _TLS_RECORD_TYPES and answer[1] == 3


# -- the shell: connections ---------------------------------------------------------


def _api_versions_request(client_id: str) -> bytes:
    client = client_id.encode()
    header = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(client)) + client
    return struct.pack(">i", len(header)) + header


def _exchange(
    host: str, port: int, context: ssl.SSLContext | None, timeout: float, client_id: str
) -> bytes:
    """Connect (over TLS with ``context``), send ApiVersions v0; the first bytes of the
    answer (b"" when the broker closed the connection instead). Raises _Failed."""
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise _Failed(Layer.CONNECT, exc) from exc
    with contextlib.ExitStack() as stack:
        connection: socket.socket = stack.enter_context(raw)
        if context is not None:
            try:
                # As asyncio's streams do for aiokafka: the host given is the name checked.
                connection = stack.enter_context(context.wrap_socket(raw, server_hostname=host))
            except OSError as exc:
                raise _Failed(Layer.HANDSHAKE, exc) from exc
        try:
            connection.sendall(_api_versions_request(client_id))
            answer = b""
            while len(answer) < 8:
                chunk = connection.recv(8 - len(answer))
                if not chunk:
                    break
                answer += chunk
        except OSError as exc:
            if answer:
                return answer
            raise _Failed(Layer.REQUEST, exc) from exc
        return answer


def _speaks(host: str, port: int, tls: bool, timeout: float, client_id: str) -> bool:
    """Whether a new connection, plaintext or TLS (trusting anything), gets a Kafka
    answer, or for TLS at least a completed handshake."""
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        answer = _exchange(host, port, context, timeout, client_id)
    except _Failed as failed:
        # The handshake done, a TLS listener may still refuse the request (it wants a
        # client certificate): it does speak TLS.
        return tls and failed.layer is Layer.REQUEST
    return answered_kafka(answer) or (tls and answer == b"")


def _listener_problem(
    host: str, port: int, config: KafkaConfig, context: ssl.SSLContext | None
) -> Diagnosis | None:
    """Layers 1 to 3 (see the module's doc); None when the broker answered Kafka."""
    where, timeout, client_id = _shown(host, port), config.send_timeout, config.client_id
    tls = config.tls
    try:
        answer = _exchange(host, port, context, timeout, client_id)
    except _Failed as failed:
        cause = failed.cause
        if isinstance(cause, ssl.SSLCertVerificationError):
            ca_file = str(tls.ca_file) if tls is not None and tls.ca_file else None
            return certificate_problem(where, host, cause, ca_file)
        if (alert := _alert(cause)) is not None:
            cert_file = str(tls.cert_file) if tls is not None and tls.cert_file else None
            return client_certificate_problem(where, alert, cert_file)
        if failed.layer is Layer.CONNECT or isinstance(cause, TimeoutError):
            return unreachable(where, failed.layer, cause, timeout)
        if context is None:
            if _closed(cause) and _speaks(host, port, True, timeout, client_id):
                return tls_expected(where, "the broker closed the connection")
            return _other(where, f"the first request failed ({cause})")
        if failed.layer is Layer.HANDSHAKE:
            if _closed(cause) and _speaks(host, port, False, timeout, client_id):
                return tls_unexpected(where)
            return tls_failed(where, cause)
        if _closed(cause) and (tls is None or tls.cert_file is None):
            return client_certificate_problem(where, "connection closed", None)
        return _other(where, f"the first request over TLS failed ({cause})")
    if answered_kafka(answer):
        return None
    if context is None and answered_tls(answer):
        return tls_expected(where, "the broker answered with a TLS alert")
    if context is None and not answer and _speaks(host, port, True, timeout, client_id):
        return tls_expected(where, "the broker closed the connection")
    if context is not None and not answer and (tls is None or tls.cert_file is None):
        # TLS 1.3: the handshake completes before the broker checks the client's
        # certificate; one that wants it and sent no alert just closes.
        return client_certificate_problem(where, "connection closed after the handshake", None)
    said = f"first bytes {answer.hex()}" if answer else "closed the connection"
    return _other(where, f"not a Kafka answer to ApiVersions ({said}): is it a Kafka listener?")


def _other(where: str, what: str) -> Diagnosis:
    return Diagnosis(ConnectFailure.OTHER, f"cannot connect to {where}: {what}")


async def _sasl_problem(
    host: str, port: int, config: KafkaConfig, options: Mapping[str, Any]
) -> Diagnosis | None:
    """Layer 4: aiokafka's own connection, whose SASL error is the broker's answer."""
    sasl = config.sasl
    if sasl is None:
        return None
    try:
        async with asyncio.timeout(config.send_timeout):
            connection = await create_conn(
                host,
                port,
                client_id=config.client_id,
                request_timeout_ms=int(config.send_timeout * 1000),
                ssl_context=options.get("ssl_context"),
                security_protocol=options["security_protocol"],
                sasl_mechanism=sasl.mechanism,
                sasl_plain_username=sasl.username,
                sasl_plain_password=sasl.password_value(),
            )
    except (
        AuthenticationFailedError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
    ) as exc:
        return sasl_problem(_shown(host, port), exc, sasl.mechanism, sasl.username)
    except (KafkaError, OSError, TimeoutError):
        return None
    connection.close()
    return None


async def diagnose(
    config: KafkaConfig, options: Mapping[str, Any], failure: BaseException | None = None
) -> Diagnosis:
    """Why the clients could not connect (``failure``: what aiokafka raised), found by
    one connection of its own to the first bootstrap server. ``options``: the clients'
    (probe.transport.kafka.connection_options), for the same TLS context."""
    servers = config.bootstrap_servers or ""
    host, port = first_address(servers)
    context = options.get("ssl_context")
    problem = await asyncio.to_thread(_listener_problem, host, port, config, context)
    if problem is None:
        problem = await _sasl_problem(host, port, config, options)
    if problem is not None:
        return problem
    # The first server answers now: the failure was elsewhere or is over.
    now = f"{_shown(host, port)} answers a direct connection now"
    return _other(servers, f"{failure or 'no broker answered'} ({now})")
