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
import logging
import ssl
import struct
import time
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
from probe.core.errors import ConfigError, ConnectFailed, ConnectFailure, TransportError
from probe.transport.connect_errors import (
    Diagnosis,
    Request,
    kafka_client,
    listener_problem,
    other,
    shown,
)
from probe.transport.kafka_client import connection_options
from probe.transport.kafka_settings import aiokafka_login

log = logging.getLogger(__name__)

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


def sasl_problem(
    where: str,
    error: KafkaError,
    mechanism: str,
    username: str,
    password_setting: str = "kafka.sasl.password",
    *,
    section: str = "kafka.sasl",
) -> Diagnosis:
    """aiokafka's SASL error, named with the mechanism and the user (never the password);
    ``password_setting``: where the password came from (kafka.sasl.password_file);
    ``section``: the SASL section's name (mirror.sasl for the mirror's cluster)."""
    said = _broker_said(error)
    if isinstance(error, UnsupportedSaslMechanismError):
        how = f"set {section}.mechanism to one it offers ({said})"
        what = f"the broker does not offer SASL mechanism {mechanism}"
    elif isinstance(error, IllegalSaslStateError):
        what = f"the listener does not take SASL ({said})"
        how = f"it may not need {section}"
    else:
        what = f"SASL authentication failed for user {username!r} with {mechanism} ({said})"
        how = f"check {section}.username and {password_setting} (and {section}.mechanism)"
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
        kafka_client(config.section),
        request,
        host,
        port,
        context=context,
        timeout=config.send_timeout,
        tls=config.tls,
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
                **aiokafka_login(sasl),
            )
    except (
        AuthenticationFailedError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
        IllegalSaslStateError,
    ) as exc:
        section = config.setting("sasl")
        where = shown(host, port)
        if sasl.password_file is None:
            return sasl_problem(
                where, exc, sasl.mechanism, sasl.username, f"{section}.password", section=section
            )
        problem = sasl_problem(
            where, exc, sasl.mechanism, sasl.username, f"{section}.password_file", section=section
        )
        read_again = f"{sasl.password_file} is read again when it changes"
        return Diagnosis(problem.reason, f"{problem.message}; {read_again}")
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
        host, port = first_address(config.bootstrap_servers or "")
        raise (await diagnose(config, options, exc)).error(shown(host, port)) from exc
    except KafkaError as exc:
        await close()
        raise TransportError(f"cannot connect to {config.bootstrap_servers}: {exc}") from exc


async def diagnose(
    config: KafkaConfig,
    options: Mapping[str, Any],
    failure: BaseException | None = None,
    address: tuple[str, int] | None = None,
) -> Diagnosis:
    """Why the clients could not connect (``failure``: what aiokafka raised), found by
    one connection of its own to ``address`` (by default the first bootstrap server).
    ``options``: the clients' (probe.transport.kafka_client.connection_options), for
    the same TLS context."""
    servers = config.bootstrap_servers or ""
    host, port = address or first_address(servers)
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


# -- mid-run: connections lost and refused -------------------------------------------

# How often a transport diagnoses a lost connection at most, unless told (the probe's
# interval: about once a round).
DIAGNOSE_EVERY = 20.0


class ConnectionWatch:
    """Connections the clients lost mid-run and could not get back, named as at start.

    aiokafka reconnects inside its clients and says only "Unable to bootstrap" or
    nothing at all (a write to a broker it cannot reach times out): a password rotated
    on the cluster and not in the probe's file shows only once a broker restarts, as
    canaries that fail. The transport tells the watch which broker failed it
    (:meth:`suspect`: a failed metadata refresh, a write to a partition whose leader it
    lost); :meth:`look`, once a round, diagnoses one suspect in the background with
    :func:`diagnose` (a direct connection, in a thread, and SASL), at most once per
    ``every`` seconds. A cause found is counted (``on_failed``), logged in one line
    when it is new, and kept as :attr:`problem` (readiness) until a diagnosis of that
    broker finds it answering. A broker that answers a direct connection (a slow one,
    one elected away from) is no connection failure: nothing is counted.
    """

    def __init__(
        self,
        config: KafkaConfig,
        options: Callable[[], Mapping[str, Any]],
        *,
        every: float = DIAGNOSE_EVERY,
        on_failed: Callable[[ConnectFailed], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._options = options
        self._every = every
        self._on_failed = on_failed
        self._clock = clock
        # Broker label -> (address, what the client said), in the order they failed.
        self._suspects: dict[str, tuple[tuple[str, int], BaseException]] = {}
        self._last: float | None = None
        self._running: asyncio.Task[None] | None = None
        self.problem: ConnectFailed | None = None
        self._problem_address: tuple[str, int] | None = None

    def suspect(self, broker: str, address: tuple[str, int], failure: BaseException) -> None:
        """The clients failed to reach ``broker`` (its id, or its address) at ``address``."""
        self._suspects.setdefault(broker, (address, failure))

    def look(self) -> None:
        """Diagnose a suspect (or the broker of the standing problem, to see whether it
        is over) in the background, if one is due."""
        if self._running is not None and not self._running.done():
            return
        now = self._clock()
        if self._last is not None and now - self._last < self._every:
            return
        if self._suspects:
            broker = next(iter(self._suspects))
            address, failure = self._suspects.pop(broker)
        elif self.problem is not None and self._problem_address is not None:
            broker, address, failure = self.problem.broker, self._problem_address, self.problem
        else:
            return
        self._last = now
        self._running = asyncio.create_task(
            self._diagnose(broker, address, failure), name=f"diagnose broker {broker}"
        )

    async def _diagnose(
        self, broker: str, address: tuple[str, int], failure: BaseException
    ) -> None:
        try:
            diagnosis = await diagnose(self._config, self._options(), failure, address)
        except (TransportError, ConfigError) as exc:  # a file it cannot load: said elsewhere
            log.debug("broker %s not diagnosed: %s", broker, exc)
            return
        if diagnosis.reason is ConnectFailure.OTHER:
            if self.problem is not None and self.problem.broker == broker:
                log.info("kafka broker %s answers again (was: %s)", broker, self.problem)
                self.problem, self._problem_address = None, None
            return
        error = diagnosis.error(broker)
        if self.problem is None or str(self.problem) != str(error):
            log.warning("kafka broker %s: %s", broker, error)
        self.problem, self._problem_address = error, address
        self._on_failed(error)

    async def close(self) -> None:
        if self._running is not None:
            self._running.cancel()
            await asyncio.gather(self._running, return_exceptions=True)
