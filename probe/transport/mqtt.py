"""MQTT transport on aiomqtt: canaries to ``<prefix>/<shard>``, read back by a subscriber.

A shard is MQTT's partition: shard N is the topic ``<prefix>/N``, and a canary's
``partition`` field is its shard number, so the judge, the metrics and the report
treat shards exactly like Kafka partitions.

Two connections, each with its own client id, because they have different jobs:

- the **publisher** (``<client_id>-pub``, clean session) sends each canary at the
  configured QoS, never retained (a retained canary would be delivered again to every
  new subscription and judged a duplicate), and waits for the broker's
  acknowledgement: PUBACK at QoS 1, PUBCOMP at QoS 2, the write to the socket at QoS 0.
  With MQTT 5 the canary's trace context also travels as a ``traceparent`` user
  property, so a bridge can carry it into Kafka headers; the canary carries its own
  (signed) copy, which is the one the stages trust.
- the **subscriber** (``<client_id>-sub``) holds one wildcard subscription,
  ``<prefix>/+``, and optionally a persistent session (MQTT 5 clean start off with a
  session expiry; MQTT 3.1.1 clean session off), so QoS 1/2 canaries published while
  it was briefly away are delivered when it is back.

Both reconnect by themselves with exponential backoff (tenacity), the subscriber
resubscribing each time. While the publisher is away, :meth:`send` fails at once
(``produce_failed``, reason ``broker_unavailable``) and :meth:`partitions` raises, so
the target turns unready; while the subscriber is away, :meth:`cover` raises. Every
refused connection is one clear line (``mqtt broker host:port refused the connection:
Bad user name or password``); client-library errors do not leave this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiomqtt
from aiomqtt import MqttCodeError, MqttError, ProtocolVersion
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.client import MQTT_ERR_NO_CONN, connack_string
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode
from paho.mqtt.subscribeoptions import SubscribeOptions
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_exponential,
)

from probe.config import MqttConfig, MqttTlsConfig, parse_mqtt_url
from probe.core.errors import ProduceFailed, ProduceFailure, TransportError
from probe.core.leadership import LeaderPlan
from probe.core.reader_signals import NO_SIGNALS, ReaderSignals
from probe.transport import Arrival
from probe.transport.connect_errors import Diagnosis
from probe.transport.mqtt_connect_errors import listener_problem, refusal

log = logging.getLogger(__name__)

# A record on a topic under the prefix that is not a shard number (``<prefix>/x``)
# is still judged (it is most likely hostile), on this pseudo-partition.
NOT_A_SHARD = -1
_SSL_SOURCE = re.compile(r"\s*\(_ssl\.c:\d+\)")
# QoS 1/2 messages in flight per connection (paho's default and Mosquitto's).
_INFLIGHT = 20


class MqttTransport:
    """Canaries to every shard topic of one MQTT broker, read back by a subscriber.

    >>> transport = MqttTransport(config.mqtt, probe_id="probe-a")
    >>> await transport.start()                 # the publisher; raises TransportError
    >>> await transport.cover(await transport.partitions())   # subscribed: safe to send
    >>> await transport.send(0, payload)        # to <prefix>/0, acknowledged
    """

    def __init__(
        self,
        config: MqttConfig,
        *,
        probe_id: str,
        on_reconnect: Callable[[], None] = lambda: None,
    ) -> None:
        if config.url is None:
            raise TransportError("mqtt.url is not set")
        scheme, self._host, self._port = parse_mqtt_url(config.url)
        self._config = config
        self._tls = scheme == "mqtts"
        self._prefix = config.topic_prefix
        self._client_id = config.client_id or f"sla-probe-{probe_id}"
        self._on_reconnect = on_reconnect
        self._v5 = config.protocol == "5"
        self._publisher: aiomqtt.Client | None = None
        self._publisher_problem = "not connected yet"
        self._subscriber: aiomqtt.Client | None = None
        self._subscriber_problem = "not connected yet"
        self._subscriber_started = False
        self._subscribed = asyncio.Event()
        self._subscriber_tried = asyncio.Event()
        self._arrivals: asyncio.Queue[Arrival] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    messaging_system = "mqtt"
    # paho holds at most _INFLIGHT unacknowledged; more sent at once would wait in its
    # queue with their produce time already stamped (1,000 shards: ~0.6 s on average).
    max_in_flight: int | None = _INFLIGHT

    @property
    def address(self) -> str:
        return f"{self._host}:{self._port}"

    # -- Transport -------------------------------------------------------------------

    async def start(self) -> None:
        """Connect the publisher once; afterwards it reconnects by itself."""
        self._publisher = await self._connect("pub", persistent=False)
        self._publisher_problem = ""
        self._tasks.append(asyncio.create_task(self._keep_publisher(), name="mqtt-publisher"))

    async def partitions(self) -> list[int]:
        # Shards are configured, not discovered; what the broker can tell is whether
        # it takes canaries right now.
        if self._publisher is None:
            raise TransportError(f"publisher: {self._publisher_problem}")
        return list(range(self._config.shards))

    async def provision(self) -> None:
        """Nothing to create: an MQTT topic exists once something is published to it."""

    def describe(self, partitions: Sequence[int]) -> str:
        prefix = self._config.topic_prefix
        return f"mqtt topics {prefix}/0..{len(partitions) - 1}: {len(partitions)} shards"

    async def cover(self, partitions: Sequence[int]) -> None:
        """Make sure the subscriber's wildcard subscription is in place.

        It covers every shard at once. The first call waits for the subscriber's
        first attempt (no canary may be sent before the subscription exists, or the
        first round would be misjudged as lost); later calls only report whether it
        is subscribed right now.
        """
        if not self._tasks:
            raise TransportError("start() first")
        if not self._subscriber_started:
            self._subscriber_started = True
            self._tasks.append(asyncio.create_task(self._keep_subscriber(), name="mqtt-subscriber"))
            # Half the send timeout, which also bounds the whole refresh: this way a
            # slow first attempt is reported with its reason, not as a bare timeout.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._config.send_timeout / 2):
                    await self._subscriber_tried.wait()
        if not self._subscribed.is_set():
            raise TransportError(f"subscriber: {self._subscriber_problem}")

    def refused(self, partition: int, since: float) -> ProduceFailure | None:
        return None  # a PUBACK that never came has no reason

    def destination(self, partition: int) -> str:
        return self.topic(partition)

    async def send(
        self,
        partition: int,
        payload: bytes,
        trace_headers: Mapping[str, str] | None = None,
        *,
        aborting: bool = False,  # never: MQTT has no transactions
    ) -> int | None:
        client = self._publisher
        if client is None:
            raise ProduceFailed(ProduceFailure.BROKER_UNAVAILABLE, self._publisher_problem)
        try:
            async with asyncio.timeout(self._config.send_timeout):
                await client.publish(
                    self.topic(partition),
                    payload,
                    qos=self._config.qos,
                    retain=False,
                    properties=self._publish_properties(trace_headers or {}),
                    # asyncio.timeout above is the one deadline.
                    timeout=math.inf,
                )
        except TimeoutError as exc:
            raise ProduceFailed(
                ProduceFailure.TIMEOUT, f"no acknowledgement in {self._config.send_timeout:g}s"
            ) from exc
        except MqttCodeError as exc:
            reason = (
                ProduceFailure.BROKER_UNAVAILABLE
                if exc.rc == MQTT_ERR_NO_CONN
                else ProduceFailure.OTHER
            )
            raise ProduceFailed(reason, str(exc)) from exc
        except MqttError as exc:
            raise ProduceFailed(ProduceFailure.OTHER, str(exc)) from exc
        return None  # MQTT has no offsets

    async def arrivals(self) -> AsyncIterator[Arrival]:
        while True:
            yield await self._arrivals.get()

    def replicas(self) -> None:
        """MQTT has no partition leaders: nothing to attribute a canary to."""
        return None

    async def spread_leaders(self, plan: LeaderPlan) -> list[str]:
        return ["MQTT has no partition leaders"]

    def signals(self) -> ReaderSignals:
        return NO_SIGNALS  # no transactions, no mirror

    def read_problem(self) -> str | None:
        # A lost subscription is what stops reading here, and cover() reports it.
        return None

    async def close(self) -> None:
        # Same budget as the Kafka transport: at most about a second, broker gone or not.
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        clients = [c for c in (self._publisher, self._subscriber) if c is not None]
        self._publisher = self._subscriber = None
        await asyncio.gather(*(self._disconnect(client) for client in clients))

    def topic(self, shard: int) -> str:
        return f"{self._prefix}/{shard}"

    # -- connections -----------------------------------------------------------------

    async def _connect(self, role: str, *, persistent: bool) -> aiomqtt.Client:
        """One connection attempt. Raises TransportError with a one-line reason."""
        client = aiomqtt.Client(**self._client_options(role, persistent=persistent))
        # No more calls than paho keeps in flight (_INFLIGHT) wait inside aiomqtt, and
        # it warns beyond its threshold: the rest of a round waits on a semaphore.
        client.pending_calls_threshold = _INFLIGHT + 1
        try:
            await client.__aenter__()
        except MqttConnectError as exc:
            raise self._refusal(exc).error(self.address) from exc
        except MqttError as exc:
            # paho's words at best ("certificate verify failed"), a lost connection at
            # worst: a connection of our own names the cause and the setting.
            context = tls_context(self._config.tls) if self._tls else None
            diagnosis = await asyncio.to_thread(
                listener_problem,
                self._host,
                self._port,
                self._config.tls,
                context,
                self._config.send_timeout,
            )
            if diagnosis is None:
                raise TransportError(
                    f"cannot connect to mqtt {self.address}: {_reason(exc)}"
                ) from exc
            raise diagnosis.error(self.address) from exc
        return client

    def _client_options(self, role: str, *, persistent: bool) -> dict[str, Any]:
        config = self._config
        options: dict[str, Any] = {
            "hostname": self._host,
            "port": self._port,
            "identifier": f"{self._client_id}-{role}",
            "protocol": ProtocolVersion.V5 if self._v5 else ProtocolVersion.V311,
            "keepalive": max(1, round(config.keepalive)),
            # aiomqtt scans every pending call on each new one, so a whole round of
            # concurrent publishes costs quadratic time (1,000 shards: ~1 ms CPU per
            # canary); paho holds no more than this many in flight anyway, which is
            # also Mosquitto's default receive maximum.
            "max_inflight_messages": _INFLIGHT,
            "max_concurrent_outgoing_calls": _INFLIGHT,
            # Bounds the wait for CONNACK and SUBACK; publishes use send_timeout.
            "timeout": config.send_timeout,
        }
        if config.username is not None:
            options["username"] = config.username
            # Read at every connection attempt: a password rotated in mqtt.password_file
            # is used from the next reconnect on, without restarting the probe.
            password = config.password_value()
            if password is not None:
                options["password"] = password
        if self._tls:
            options["tls_context"] = tls_context(config.tls)
        if self._v5:
            options["clean_start"] = not persistent
            if persistent:
                properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
                properties.SessionExpiryInterval = max(1, round(config.session_expiry))
                options["properties"] = properties
        else:
            options["clean_session"] = not persistent
        return options

    def _refusal(self, exc: MqttConnectError) -> Diagnosis:
        code = exc.rc
        text = str(code) if isinstance(code, ReasonCode) else connack_string(code or 0)
        text = text.removeprefix("Connection Refused: ").rstrip(".")
        value = 0 if code is None else int(code if isinstance(code, int) else code.value)
        return refusal(self.address, value, text, self._config.username)

    async def _reconnect(
        self, role: str, connect: Callable[[], Awaitable[aiomqtt.Client]]
    ) -> aiomqtt.Client:
        """Connect with exponential backoff until it works; each episode starts afresh,
        so a connection that held for days is retried quickly when it drops."""
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(TransportError),
            wait=wait_exponential(multiplier=0.25, max=30),
            stop=stop_never,
            before_sleep=lambda state: self._log_retry(role, state),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await connect()
        raise AssertionError("unreachable: the retrying never stops")

    def _log_retry(self, role: str, state: RetryCallState) -> None:
        problem = str(state.outcome.exception()) if state.outcome else "unknown"
        if role == "publisher":
            self._publisher_problem = problem
        else:
            self._subscriber_problem = problem
            self._subscriber_tried.set()
        delay = state.next_action.sleep if state.next_action else 0.0
        log.warning("mqtt %s: %s; retrying in %.1fs", role, problem, delay)

    async def _keep_publisher(self) -> None:
        """Wait for the publisher's connection to drop, then reconnect it; forever."""
        while True:
            client = self._publisher
            assert client is not None
            try:
                # Nothing is subscribed on this connection: the iteration only ends,
                # with MqttError, when the connection is lost.
                async for _ in client.messages:
                    pass
            except MqttError as exc:
                self._publisher_problem = f"connection lost: {_reason(exc)}"
            self._publisher = None
            log.warning("mqtt publisher: %s", self._publisher_problem)
            await self._disconnect(client)
            self._publisher = await self._reconnect(
                "publisher", lambda: self._connect("pub", persistent=False)
            )
            self._publisher_problem = ""
            log.info("mqtt publisher: reconnected to %s", self.address)
            self._on_reconnect()

    async def _keep_subscriber(self) -> None:
        """Connect, subscribe, read into the arrivals queue; on any loss start over."""
        connected_before = False
        while True:
            client = await self._reconnect("subscriber", self._connect_subscriber)
            self._subscriber = client
            self._subscriber_problem = ""
            self._subscribed.set()
            self._subscriber_tried.set()
            if connected_before:
                log.info("mqtt subscriber: reconnected to %s", self.address)
                self._on_reconnect()
            connected_before = True
            try:
                await self._read(client)
            except MqttError as exc:
                self._subscriber_problem = f"connection lost: {_reason(exc)}"
            self._subscribed.clear()
            self._subscriber = None
            log.warning("mqtt subscriber: %s", self._subscriber_problem)
            await self._disconnect(client)

    async def _connect_subscriber(self) -> aiomqtt.Client:
        """Connect and (re)subscribe: a persistent session may hold the subscription
        already, but only a SUBACK proves it, and resubscribing is idempotent."""
        client = await self._connect("sub", persistent=self._config.persistent_session)
        try:
            await self._subscribe(client)
        except TransportError:
            # A refused subscription (an ACL) is retried like a refused connection.
            await self._disconnect(client)
            raise
        return client

    async def _subscribe(self, client: aiomqtt.Client) -> None:
        wildcard = f"{self._prefix}/+"
        qos = self._config.qos
        try:
            if self._v5:
                # Retained messages are never canaries (the publisher never retains);
                # without this, one retained record would come back on every resubscribe.
                options = SubscribeOptions(
                    qos=qos, retainHandling=SubscribeOptions.RETAIN_DO_NOT_SEND
                )
                granted = await client.subscribe(wildcard, options=options)
            else:
                granted = await client.subscribe(wildcard, qos=qos)
        except MqttError as exc:
            raise TransportError(f"cannot subscribe to {wildcard}: {_reason(exc)}") from exc
        code = granted[0]
        failed = code.is_failure if isinstance(code, ReasonCode) else code >= 0x80
        if failed:
            raise TransportError(f"broker refused the subscription to {wildcard}: {code}")
        if int(code.value if isinstance(code, ReasonCode) else code) < qos:
            log.warning("mqtt subscriber: broker granted QoS %s on %s, not %d", code, wildcard, qos)

    async def _read(self, client: aiomqtt.Client) -> None:
        shard_of = _shard_parser(self._prefix)
        async for message in client.messages:
            at_ns = time.time_ns()
            payload = message.payload
            # Anything but bytes (paho always gives bytes) would be a client bug;
            # it is judged as an empty, malformed record rather than dropped.
            data = payload if isinstance(payload, bytes) else b""
            self._arrivals.put_nowait(
                Arrival(
                    shard_of(message.topic.value),
                    data,
                    at_ns,
                    traceparent=_user_property(message.properties, "traceparent"),
                )
            )

    def _publish_properties(self, trace_headers: Mapping[str, str]) -> Properties | None:
        if not self._v5 or not trace_headers:
            return None
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = list(trace_headers.items())
        return properties

    @staticmethod
    async def _disconnect(client: aiomqtt.Client) -> None:
        with contextlib.suppress(MqttError, TimeoutError, OSError):
            async with asyncio.timeout(1.0):
                await client.__aexit__(None, None, None)


def _user_property(properties: Properties | None, name: str) -> str | None:
    for key, value in getattr(properties, "UserProperty", None) or ():
        if key == name and isinstance(value, str):
            return value
    return None


def _reason(exc: BaseException) -> str:
    """A client error as one short line; TLS errors say so, without C source locations."""
    text = _SSL_SOURCE.sub("", str(exc)).strip() or type(exc).__name__
    if "SSL" in text or "certificate" in text:
        return f"TLS handshake failed: {text}"
    return text


def _shard_parser(prefix: str) -> Callable[[str], int]:
    head = prefix + "/"

    def shard_of(topic: str) -> int:
        tail = topic.removeprefix(head)
        return int(tail) if tail.isascii() and tail.isdigit() else NOT_A_SHARD

    return shard_of


class _NamedServerContext(ssl.SSLContext):
    """An SSL context that verifies the broker as ``server_name`` (and sends it as SNI).

    paho names the server after the host it dials; this context swaps in the
    configured name, for a broker reached by IP address or through a load balancer.
    """

    server_name: str | None = None

    def wrap_socket(  # noqa: PLR0917 - the signature of the method it overrides
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return super().wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=self.server_name or server_hostname,
            session=session,
        )


def tls_context(tls: MqttTlsConfig | None) -> ssl.SSLContext:
    """The client TLS context for ``mqtts://``; the system trust store without a CA file.

    Raises TransportError when a file cannot be loaded: a certificate mounted late
    is retried like an unreachable broker, with the file named in the error.
    """
    context = _NamedServerContext(ssl.PROTOCOL_TLS_CLIENT)
    ca_file = tls.ca_file if tls is not None else None
    try:
        if ca_file is not None:
            context.load_verify_locations(cafile=str(ca_file))
        else:
            context.load_default_certs()
    except (OSError, ssl.SSLError) as exc:
        raise TransportError(
            f"cannot load mqtt.tls.ca_file {ca_file}: {_file_problem(exc)}"
        ) from exc
    if tls is not None and tls.cert_file is not None and tls.key_file is not None:
        try:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        except (OSError, ssl.SSLError) as exc:
            raise TransportError(
                f"cannot load mqtt.tls.cert_file {tls.cert_file} with its key_file: "
                f"{_file_problem(exc)}"
            ) from exc
    if tls is not None:
        context.check_hostname = tls.check_hostname
        context.server_name = tls.server_name
    return context


def _file_problem(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError):
        return exc.strerror
    return _SSL_SOURCE.sub("", str(exc)).strip()
