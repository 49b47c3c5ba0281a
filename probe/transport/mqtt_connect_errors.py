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
from probe.core.errors import ConnectFailure
from probe.transport.connect_errors import (
    MQTT,
    Diagnosis,
    Request,
    other,
)
from probe.transport.connect_errors import listener_problem as shared_listener_problem

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
    return shared_listener_problem(
        MQTT,
        Request(_CONNECT, "CONNECT", _CONNACK_SIZE, answered_mqtt),
        host,
        port,
        context=context,
        timeout=timeout,
        tls=tls,
        checked_name=tls.server_name if tls is not None else None,
    )
