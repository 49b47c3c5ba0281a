"""Why a connection to an MQTT broker failed, in one line naming the setting to change.

paho reports a failed TLS connection as the ssl module's words at best and as a lost
connection at worst (a plaintext client on a TLS listener waits for a CONNACK that
never comes). So when a connection fails, :func:`diagnose` connects once more on its
own, with the client's TLS context, and names what it finds, as for Kafka (the shared
layers: probe.transport.connect_errors); its request is an MQTT 3.1.1 CONNECT, which
any MQTT broker answers with a CONNACK.

A CONNACK that refuses the login is named by :func:`refusal`::

    >>> refusal("mqtt:8883", 0x87, "Not authorized", "probe").message
    "cannot connect to mqtt:8883: the broker refused the login of user 'probe' (Not
    authorized): check mqtt.username and mqtt.password"

(one line; wrapped here). No message ever holds the password.
"""

from __future__ import annotations

import ssl

from probe.config import MqttTlsConfig
from probe.errors import ConnectFailure
from probe.transport.connect_errors import (
    MQTT,
    Diagnosis,
    Failed,
    Layer,
    alert,
    answered_tls,
    certificate_problem,
    client_certificate_problem,
    closed,
    exchange,
    other,
    speaks,
    tls_expected,
    tls_failed,
    tls_unexpected,
    unreachable,
)

# CONNECT, MQTT 3.1.1: clean session, keep-alive 60 s, an empty client id (which a
# broker may refuse, but with a CONNACK: an answer of the protocol all the same).
_CONNECT = b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00"
_CONNACK = 0x20
_CONNACK_SIZE = 4

# CONNACK codes that refuse the login itself: MQTT 3.1.1 (bad user name or password,
# not authorized) and MQTT 5 (0x86, 0x87).
CREDENTIAL_CODES = frozenset({4, 5, 0x86, 0x87})


def answered_mqtt(answer: bytes) -> bool:
    """Whether these are the first bytes of a CONNACK."""
    return len(answer) >= 2 and answer[0] == _CONNACK and answer[1] in {2, 3}


def refusal(where: str, code: int, text: str, username: str | None) -> Diagnosis:
    """A CONNACK that refused the connection, with its code's text."""
    if code in CREDENTIAL_CODES:
        who = f"of user {username!r}" if username is not None else "without a user name"
        return Diagnosis(
            ConnectFailure.CREDENTIALS_REFUSED,
            f"cannot connect to {where}: the broker refused the login {who} ({text}): "
            "check mqtt.username and mqtt.password",
        )
    return other(where, f"the broker refused the connection ({text})")


def listener_problem(
    host: str,
    port: int,
    tls: MqttTlsConfig | None,
    context: ssl.SSLContext | None,
    timeout: float,
) -> Diagnosis | None:
    """What a direct connection finds wrong below MQTT (TCP, TLS, the wrong protocol on
    the port); None when the broker answered a CONNECT. Blocking: run it in a thread."""
    where = f"{host}:{port}"
    checked_name = (tls.server_name if tls is not None else None) or host

    def speaks_mqtt(over_tls: bool) -> bool:
        return speaks(
            host, port, tls=over_tls, timeout=timeout, request=_CONNECT,
            answered=answered_mqtt, wanted=_CONNACK_SIZE,
        )  # fmt: skip

    try:
        answer = exchange(
            host, port, context, timeout=timeout, request=_CONNECT, wanted=_CONNACK_SIZE
        )
    except Failed as failed:
        cause = failed.cause
        if isinstance(cause, ssl.SSLCertVerificationError):
            ca_file = str(tls.ca_file) if tls is not None and tls.ca_file else None
            return certificate_problem(MQTT, where, checked_name, cause, ca_file)
        if (refused := alert(cause)) is not None:
            cert_file = str(tls.cert_file) if tls is not None and tls.cert_file else None
            return client_certificate_problem(MQTT, where, refused, cert_file)
        if (
            failed.layer is Layer.HANDSHAKE
            and isinstance(cause, TimeoutError)
            and speaks_mqtt(False)
        ):
            # A plaintext listener that waits for the rest of a "request" (the
            # ClientHello read as one) rather than dropping the connection.
            return tls_unexpected(MQTT, where, "the broker did not answer the TLS handshake")
        if failed.layer is Layer.CONNECT or isinstance(cause, TimeoutError):
            return unreachable(MQTT, where, failed.layer, cause, timeout)
        if context is None:
            if closed(cause) and speaks_mqtt(True):
                return tls_expected(MQTT, where, "the broker closed the connection")
            return None
        if failed.layer is Layer.HANDSHAKE:
            dropped = closed(cause) or "WRONG_VERSION_NUMBER" in str(cause)
            if dropped and speaks_mqtt(False):
                return tls_unexpected(MQTT, where)
            return tls_failed(MQTT, where, cause)
        if closed(cause) and (tls is None or tls.cert_file is None):
            return client_certificate_problem(MQTT, where, "connection closed", None)
        return None
    if answered_mqtt(answer):
        return None
    if context is None and answered_tls(answer):
        return tls_expected(MQTT, where, "the broker answered with a TLS alert")
    if context is None and not answer and speaks_mqtt(True):
        return tls_expected(MQTT, where, "the broker closed the connection")
    if context is not None and not answer and (tls is None or tls.cert_file is None):
        # TLS 1.3: the handshake completes before the broker checks the client's
        # certificate; one that wants it and sent no alert just closes.
        return client_certificate_problem(
            MQTT, where, "connection closed after the handshake", None
        )
    return None
