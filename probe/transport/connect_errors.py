"""Why a connection to a broker failed, in one line naming the setting to change: the
part every client shares (TCP, TLS), for Kafka (probe.transport.kafka_connect_errors)
and MQTT (probe.transport.mqtt_connect_errors).

A client library says "Unable to bootstrap" or "connection lost"; the certificate it
did not trust, the TLS alert, the listener that wanted TLS were dropped on the way. So
when a connection fails, the transport connects once more on its own, with the same
TLS context, and names what it finds at the layer it happens:

1. TCP: refused, timed out, no route, a name that does not resolve.
2. TLS: the broker's certificate (verify code), an alert about the client's
   certificate, or a connection dropped in the handshake (then a plaintext request on
   a new connection tells a plaintext listener).
3. One request of the protocol (Kafka's ApiVersions, MQTT's CONNECT): an answer of
   the protocol, a TLS alert record instead (a TLS listener, for a plaintext client),
   or a closed connection. Under TLS 1.3 a broker that wants a client certificate says
   so only here, after the handshake.

Connections use blocking standard-library sockets (run them in a thread): they must
see the raw bytes and the ssl module's own errors, which asyncio's streams and the
client libraries wrap or swallow. No message ever holds a password.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from probe.config import TlsConfig
from probe.core.errors import ConnectFailed, ConnectFailure

# TLS record content types (RFC 8446 5.1): alert, handshake; then major version 3.
_TLS_RECORD_TYPES = (0x15, 0x16)

# OpenSSL verify codes (X509_V_ERR_*) that name a cause of their own; every other
# failure to verify the broker's chain is a trust problem (the CA file).
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
class Client:
    """What the messages call things, per protocol: the settings to change."""

    protocol: str  # "Kafka", "MQTT"
    address: str  # the setting that names the broker
    tls: str  # the TLS section
    needs_tls: str  # what turns TLS on
    needs_no_tls: str  # what turns TLS off
    rename: str  # besides the address: how to check the certificate for another name


def kafka_client(section: str = "kafka") -> Client:
    """A Kafka connection's settings, in the section they were written in (``kafka``,
    or ``mirror`` for the target cluster of the mirror stage)."""
    return Client(
        protocol="Kafka",
        address=f"{section}.bootstrap_servers",
        tls=f"{section}.tls",
        needs_tls=f"{section}.tls",
        needs_no_tls=f"{section}.tls",
        rename=f"set {section}.tls.check_hostname: false",
    )


KAFKA = kafka_client()
MQTT = Client(
    protocol="MQTT",
    address="mqtt.url",
    tls="mqtt.tls",
    needs_tls="TLS (an mqtts:// mqtt.url)",
    needs_no_tls="TLS (an mqtt:// mqtt.url)",
    rename="set mqtt.tls.server_name to a name it holds, or mqtt.tls.check_hostname: false",
)


@dataclass(frozen=True, slots=True)
class Request:
    """The one request of layer 3: its bytes, its name in messages, how many bytes of
    the answer tell, and whether they are an answer of the protocol."""

    data: bytes
    name: str
    wanted: int
    answered: Callable[[bytes], bool]


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a connection failed: ``reason`` for the metric's label, ``message`` (one
    line) for the operator: the cause, the address, the setting to change."""

    reason: ConnectFailure
    message: str

    def error(self, broker: str = "") -> ConnectFailed:
        """``broker``: the broker's id where known, else its address."""
        return ConnectFailed(self.reason, self.message, broker)


class Layer(Enum):
    """Where on the way up a connection failed."""

    CONNECT = "connect"
    HANDSHAKE = "handshake"
    REQUEST = "request"


class Failed(Exception):
    """A direct connection failed at ``layer`` with ``cause``."""

    def __init__(self, layer: Layer, cause: OSError) -> None:
        super().__init__(layer, cause)
        self.layer = layer
        self.cause = cause


def shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# -- the pure part: a failure at a layer, named -------------------------------------


def certificate_problem(
    client: Client, where: str, host: str, error: ssl.SSLCertVerificationError, ca_file: str | None
) -> Diagnosis:
    """The broker's certificate did not verify."""
    code, detail = error.verify_code, error.verify_message or error.reason or str(error)
    if code in _HOSTNAME_MISMATCH:
        return Diagnosis(
            ConnectFailure.HOSTNAME_MISMATCH,
            f"cannot connect to {where}: the broker's certificate is not valid for {host} "
            f"({detail}): connect by a name the certificate holds ({client.address}), "
            f"or {client.rename}",
        )
    if code in _NOT_VALID_NOW:
        return Diagnosis(
            ConnectFailure.CERTIFICATE_EXPIRED,
            f"cannot connect to {where}: a certificate of the broker's chain is not valid "
            f"now ({detail}): the broker needs a current certificate (or the clock here "
            "is wrong)",
        )
    ca = f"{client.tls}.ca_file"
    trusted_by = f"{ca} ({ca_file})" if ca_file else "the system's trust store"
    return Diagnosis(
        ConnectFailure.UNTRUSTED_CERTIFICATE,
        f"cannot connect to {where}: the broker's certificate is not trusted by {trusted_by} "
        f"({detail}): set {ca} to the CA that signed it",
    )


def client_certificate_problem(
    client: Client, where: str, alert: str, cert_file: str | None
) -> Diagnosis:
    """The broker refused the TLS connection over the client's certificate."""
    said = alert.lower().replace("_", " ")
    cert, key = f"{client.tls}.cert_file", f"{client.tls}.key_file"
    if cert_file is None:
        return Diagnosis(
            ConnectFailure.CLIENT_CERTIFICATE,
            f"cannot connect to {where}: the broker requires a client certificate ({said}): "
            f"set {cert} and {key}",
        )
    return Diagnosis(
        ConnectFailure.CLIENT_CERTIFICATE,
        f"cannot connect to {where}: the broker refused the client certificate of "
        f"{cert} ({cert_file}; {said}): it must be signed by a CA the broker "
        f"trusts ({cert}, {key})",
    )


def unreachable(
    client: Client, where: str, layer: Layer, cause: OSError, timeout: float
) -> Diagnosis:
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
        f"cannot connect to {where}: {what}; check {client.address} and the network "
        "path to the broker",
    )


def tls_expected(client: Client, where: str, how: str) -> Diagnosis:
    return Diagnosis(
        ConnectFailure.TLS_EXPECTED,
        f"cannot connect to {where}: {how} to a plaintext {client.protocol} request: the "
        f"listener may need {client.needs_tls}",
    )


def tls_unexpected(
    client: Client, where: str, how: str = "the broker dropped the TLS handshake"
) -> Diagnosis:
    return Diagnosis(
        ConnectFailure.TLS_UNEXPECTED,
        f"cannot connect to {where}: {how} and answers {client.protocol} requests in "
        f"plaintext: the listener may not need {client.needs_no_tls}",
    )


def tls_failed(client: Client, where: str, cause: OSError) -> Diagnosis:
    detail = getattr(cause, "reason", None) or str(cause) or type(cause).__name__
    return Diagnosis(
        ConnectFailure.TLS_FAILED,
        f"cannot connect to {where}: TLS handshake failed ({detail}); check {client.tls}",
    )


def other(where: str, what: str) -> Diagnosis:
    return Diagnosis(ConnectFailure.OTHER, f"cannot connect to {where}: {what}")


def alert(error: OSError) -> str | None:
    """The OpenSSL name of a client-certificate alert the broker sent, if that is what
    this is."""
    reason = getattr(error, "reason", None)
    return reason if reason in _CLIENT_CERTIFICATE_ALERTS else None


def closed(error: OSError) -> bool:
    """A connection the peer dropped: EOF where TLS wanted more, or a reset."""
    return isinstance(
        error, ssl.SSLEOFError | ssl.SSLZeroReturnError | ConnectionResetError | BrokenPipeError
    )


def answered_tls(answer: bytes) -> bool:
    """Whether these are the first bytes of a TLS record (an alert, a handshake)."""
    return len(answer) >= 2 and answer[0] in _TLS_RECORD_TYPES and answer[1] == 3


# -- the shell: one direct connection ------------------------------------------------


def exchange(
    host: str,
    port: int,
    context: ssl.SSLContext | None,
    *,
    timeout: float,
    request: bytes,
    wanted: int,
) -> bytes:
    """Connect (over TLS with ``context``), send ``request``; the first ``wanted``
    bytes of the answer (fewer, b"" when the broker closed the connection instead).
    Raises :class:`Failed` naming the layer."""
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise Failed(Layer.CONNECT, exc) from exc
    with contextlib.ExitStack() as stack:
        connection: socket.socket = stack.enter_context(raw)
        if context is not None:
            try:
                # As asyncio's streams do: the host given is the name checked (unless
                # the context names the server itself).
                connection = stack.enter_context(context.wrap_socket(raw, server_hostname=host))
            except OSError as exc:
                raise Failed(Layer.HANDSHAKE, exc) from exc
        answer = b""
        try:
            connection.sendall(request)
            while len(answer) < wanted:
                chunk = connection.recv(wanted - len(answer))
                if not chunk:
                    break
                answer += chunk
        except OSError as exc:
            if answer:
                return answer
            raise Failed(Layer.REQUEST, exc) from exc
        return answer


def speaks(
    host: str,
    port: int,
    *,
    tls: bool,
    timeout: float,
    request: bytes,
    answered: Callable[[bytes], bool],
    wanted: int,
) -> bool:
    """Whether a new connection, plaintext or TLS (trusting anything), gets an answer
    of the protocol, or for TLS at least a completed handshake."""
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        answer = exchange(host, port, context, timeout=timeout, request=request, wanted=wanted)
    except Failed as failed:
        # The handshake done, a TLS listener may still refuse the request (it wants a
        # client certificate): it does speak TLS.
        return tls and failed.layer is Layer.REQUEST
    return answered(answer) or (tls and answer == b"")


def listener_problem(
    client: Client,
    request: Request,
    host: str,
    port: int,
    *,
    context: ssl.SSLContext | None,
    timeout: float,
    tls: TlsConfig | None,
    checked_name: str | None = None,
) -> Diagnosis | None:
    """Layers 1 to 3 (see the module's doc) of one connection with the client's TLS
    context; None when the broker answered the request. ``checked_name``: the name
    the broker's certificate is checked against, when it is not ``host``. Blocking:
    run it in a thread."""
    where = shown(host, port)

    def speaks_it(over_tls: bool) -> bool:
        return speaks(
            host, port, tls=over_tls, timeout=timeout, request=request.data,
            answered=request.answered, wanted=request.wanted,
        )  # fmt: skip

    try:
        answer = exchange(
            host, port, context, timeout=timeout, request=request.data, wanted=request.wanted
        )
    except Failed as failed:
        cause = failed.cause
        if isinstance(cause, ssl.SSLCertVerificationError):
            ca_file = str(tls.ca_file) if tls is not None and tls.ca_file else None
            return certificate_problem(client, where, checked_name or host, cause, ca_file)
        if (refused := alert(cause)) is not None:
            cert_file = str(tls.cert_file) if tls is not None and tls.cert_file else None
            return client_certificate_problem(client, where, refused, cert_file)
        if failed.layer is Layer.HANDSHAKE and isinstance(cause, TimeoutError) and speaks_it(False):
            # A plaintext listener that waits for the rest of a "request" (the
            # ClientHello read as one) rather than dropping the connection.
            return tls_unexpected(client, where, "the broker did not answer the TLS handshake")
        if failed.layer is Layer.CONNECT or isinstance(cause, TimeoutError):
            return unreachable(client, where, failed.layer, cause, timeout)
        if context is None:
            if closed(cause) and speaks_it(True):
                return tls_expected(client, where, "the broker closed the connection")
            return other(where, f"the first request failed ({cause})")
        if failed.layer is Layer.HANDSHAKE:
            # Dropped, or answered with bytes that are no TLS record (a plaintext
            # listener's reply).
            dropped = closed(cause) or "WRONG_VERSION_NUMBER" in str(cause)
            if dropped and speaks_it(False):
                return tls_unexpected(client, where)
            return tls_failed(client, where, cause)
        if closed(cause) and (tls is None or tls.cert_file is None):
            return client_certificate_problem(client, where, "connection closed", None)
        return other(where, f"the first request over TLS failed ({cause})")
    if request.answered(answer):
        return None
    if context is None and answered_tls(answer):
        return tls_expected(client, where, "the broker answered with a TLS alert")
    if context is None and not answer and speaks_it(True):
        return tls_expected(client, where, "the broker closed the connection")
    if context is not None and not answer and (tls is None or tls.cert_file is None):
        # TLS 1.3: the handshake completes before the broker checks the client's
        # certificate; one that wants it and sent no alert just closes.
        return client_certificate_problem(
            client, where, "connection closed after the handshake", None
        )
    said = f"first bytes {answer.hex()}" if answer else "closed the connection"
    return other(
        where,
        f"not a {client.protocol} answer to {request.name} ({said}): is it a "
        f"{client.protocol} listener?",
    )
