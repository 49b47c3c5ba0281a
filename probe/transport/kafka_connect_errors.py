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
at the layer it happens (TCP and TLS as every client: probe.transport.connect_errors):
the request of layer 3 is ApiVersions v0, which every broker answers before any
authentication; layer 4 is SASL, with ``kafka.sasl``: aiokafka's own connection, whose
error is the broker's. The password never reaches a message.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)

from probe.config import KafkaConfig
from probe.core.errors import ConfigError, ConnectFailure, TransportError
from probe.transport.connect_errors import (
    KAFKA,
    Diagnosis,
    Request,
    listener_problem,
    other,
    shown,
)
from probe.transport.kafka_client import connection_options

# Kafka clients' port when a bootstrap server names none.
DEFAULT_PORT = 9092

# ApiVersions (key 18) v0: no body, answered by any broker before SASL.
_API_VERSIONS = 18
_CORRELATION_ID = 0x51A0


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


def answered_kafka(answer: bytes) -> bool:
    """Whether these are the first bytes of a Kafka response to our request."""
    if len(answer) < 8:
        return False
    size, correlation_id = struct.unpack(">ii", answer[:8])
    return bool(4 <= size < 1 << 24 and correlation_id == _CORRELATION_ID)


# -- the shell: connections ---------------------------------------------------------


def _api_versions_request(client_id: str) -> bytes:
    client = client_id.encode()
    header = struct.pack(">hhih", _API_VERSIONS, 0, _CORRELATION_ID, len(client)) + client
    return struct.pack(">i", len(header)) + header


def _listener_problem(
    host: str, port: int, config: KafkaConfig, context: ssl.SSLContext | None
) -> Diagnosis | None:
    """Layers 1 to 3 with ApiVersions; None when the broker answered Kafka."""
    request = Request(_api_versions_request(config.client_id), "ApiVersions", 8, answered_kafka)
    return listener_problem(
        KAFKA, request, host, port, context=context, timeout=config.send_timeout, tls=config.tls
    )


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
        return sasl_problem(shown(host, port), exc, sasl.mechanism, sasl.username)
    except (KafkaError, OSError, TimeoutError):
        return None
    connection.close()
    return None


async def start_or_say_why(
    start: Callable[[], Awaitable[None]],
    close: Callable[[], Awaitable[None]],
    config: KafkaConfig,
    options: Mapping[str, Any],
) -> None:
    """Start a transport's clients (``start``); on failure close them and raise a
    TransportError that says why: aiokafka's "Unable to bootstrap" diagnosed by a
    connection of the probe's own (:func:`diagnose`), any other Kafka error named."""
    try:
        await start()
    except TransportError:
        await close()
        raise
    except KafkaConnectionError as exc:
        await close()
        raise (await diagnose(config, options, exc)).error() from exc
    except KafkaError as exc:
        await close()
        raise TransportError(f"cannot connect to {config.bootstrap_servers}: {exc}") from exc


async def diagnose(
    config: KafkaConfig, options: Mapping[str, Any], failure: BaseException | None = None
) -> Diagnosis:
    """Why the clients could not connect (``failure``: what aiokafka raised), found by
    one connection of its own to the first bootstrap server. ``options``: the clients'
    (probe.transport.kafka_client.connection_options), for the same TLS context."""
    servers = config.bootstrap_servers or ""
    host, port = first_address(servers)
    context = options.get("ssl_context")
    problem = await asyncio.to_thread(_listener_problem, host, port, config, context)
    if problem is None:
        problem = await _sasl_problem(host, port, config, options)
    if problem is not None:
        return problem
    # The first server answers now: the failure was elsewhere or is over.
    now = f"{shown(host, port)} answers a direct connection now"
    return other(servers, f"{failure or 'no broker answered'} ({now})")


async def cause_of(config: KafkaConfig, failure: BaseException) -> Diagnosis | None:
    """Why another client (librdkafka on Spark's driver, the executors' readers) could
    not reach the brokers, when a connection of the probe's own finds a cause; None
    when the first broker answers it (the failure was not the connection)."""
    try:
        diagnosis = await diagnose(config, connection_options(config), failure)
    except (TransportError, ConfigError):  # a TLS file it cannot load: said elsewhere
        return None
    return None if diagnosis.reason is ConnectFailure.OTHER else diagnosis
