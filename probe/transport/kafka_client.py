"""How the probe's aiokafka clients (producer, consumer, admin client, and the
connection that diagnoses a failed one) reach the brokers: addresses, timeouts, TLS
and SASL, from the ``kafka`` section (TLS and SASL as probe.transport.kafka_settings
names them for aiokafka); and how a rotated password or certificate reaches clients
already running (:class:`CredentialFiles`).

**Rotated credentials.** A Secret mounted as a directory is updated in place by the
kubelet (a ``..data`` symlink swapped). Each transport looks at its credential files
once a round (``stat`` only: probe.keyfile.look); when one changed it reads them all
again and gives every client it runs the new password and TLS context. The clients
are not rebuilt: a new consumer would throw away its positions and fetches in flight
(a canary sent meanwhile judged lost), a new producer its batches and producer id.
aiokafka takes the password and the TLS context from its client at each connection it
opens, and the broker keeps a connection authenticated for as long as it stays open,
so the clients' next connections (a broker restarted, a connection dropped) log in
with the new ones.

**No topic made by asking about it.** aiokafka's metadata requests let the broker
auto-create the topics they name (``allow_auto_topic_creation``, true unless told, with
no client option to say otherwise); librdkafka and franz-go (KMinion's client) ask it
not to. Brokers that auto-create (Apache Kafka's default, the embedded one) would then
make the canary topic with their own partition count and replication factor whenever a
probe's client asks about a topic that is gone: a broker back empty after losing its
storage, or a deleted topic. That topic also hides that the log started over (the
probe re-creates and follows it, kafka._follow_restarted_logs): the reader waited at its
old positions, every canary meanwhile lost. The topic is the probe's to provision
(``kafka.create_topic``) or the operator's; so every metadata request of the probe's
producer and consumers says no (:func:`never_auto_create`); other aiokafka clients in
the same process (a test's) keep aiokafka's default.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import aiokafka.client
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from probe.config import KafkaConfig
from probe.core.credentials import PASSWORD_FILE, TLS_FILES, Renewal, changed, renewal
from probe.core.errors import ConfigError
from probe.keyfile import FileState, look
from probe.transport.kafka_settings import aiokafka_security

log = logging.getLogger(__name__)


def credential_files(config: KafkaConfig) -> dict[str, str]:
    """The files the Kafka clients' credentials come from, by setting
    (probe.core.credentials names the settings)."""
    files: dict[str, str] = {}
    if config.sasl is not None and config.sasl.password_file is not None:
        files[PASSWORD_FILE] = str(config.sasl.password_file)
    if config.tls is not None:
        for setting, path in zip(
            TLS_FILES, (config.tls.ca_file, config.tls.cert_file, config.tls.key_file), strict=True
        ):
            if path is not None:
                files[setting] = str(path)
    return files


# True while one of the probe's own clients makes a metadata request (never_auto_create):
# a context variable, so that any other aiokafka client in the process (a test's, a
# bridge's) keeps aiokafka's default.
_PROBES_OWN: ContextVar[bool] = ContextVar("probes_own_metadata_request", default=False)


class _MetadataRequest(MetadataRequest):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's metadata request, which for the probe's own clients never has the
    broker create the topics it names (see the module's doc). Versions 0-3 have no
    such flag; every broker since Kafka 0.11 takes version 4 or later."""

    def __init__(
        self, topics: list[str] | None = None, allow_auto_topic_creation: bool | None = None
    ) -> None:
        if allow_auto_topic_creation is None and _PROBES_OWN.get():
            allow_auto_topic_creation = False
        super().__init__(topics, allow_auto_topic_creation=allow_auto_topic_creation)


# aiokafka's client builds its metadata requests by this name; for any client but the
# probe's own, the request is aiokafka's as it was.
aiokafka.client.MetadataRequest = _MetadataRequest


def never_auto_create(client: AIOKafkaClient) -> None:
    """This client's metadata requests (aiokafka's private ``_metadata_update``, which
    builds the request before its first await) never have the broker create a topic.
    The admin client needs none: its metadata requests name no topic."""
    update = client._metadata_update

    async def _metadata_update(cluster_metadata: Any, topics: Any) -> Any:
        token = _PROBES_OWN.set(True)
        try:
            return await update(cluster_metadata, topics)
        finally:
            _PROBES_OWN.reset(token)

    client._metadata_update = _metadata_update


async def known_to_every_broker(client: AIOKafkaClient, topic: str) -> bool:
    """Whether the metadata of every broker the client knows lists ``topic``. A topic
    the controller created reaches each broker's metadata a moment apart (on Apache
    Kafka 4.0.2, a refresh right after one broker listed it went to another that did
    not, and ``once`` stopped on "topic not found"); aiokafka asks a random broker."""
    request = _MetadataRequest([topic], allow_auto_topic_creation=False)
    for broker in client.cluster.brokers():
        try:
            conn = await client._get_conn(broker.nodeId)
            if conn is None:
                return False
            answer = await conn.send(request)
        except (KafkaError, OSError, TimeoutError):
            return False
        seen = ClusterMetadata()
        seen.update_metadata(answer)
        if not seen.partitions_for_topic(topic):
            return False
    return True


def connection_options(config: KafkaConfig) -> dict[str, Any]:
    """Client options shared by producer, consumer and admin client."""
    # The SASL password (kafka.sasl.password_file) and the TLS files are read here:
    # when a transport is made, and again when one of the files changed
    # (CredentialFiles.renewed).
    return {
        "bootstrap_servers": config.bootstrap_servers,
        "client_id": config.client_id,
        "request_timeout_ms": int(config.send_timeout * 1000),
        **aiokafka_security(config),
    }


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


class CredentialFiles:
    """The files one transport's clients take their credentials from, and whether
    they changed since the last look::

        files = CredentialFiles(config)
        if (renewed := files.renewed()) is not None:  # once a round
            what, options = renewed
            give_credentials(clients, options, what)

    A changed file that cannot be used (half-written, a key that does not match its
    certificate) changes nothing: the clients keep what they have, and one line says
    why, once per change."""

    def __init__(self, config: KafkaConfig) -> None:
        self._config = config
        self._files = {setting: Path(path) for setting, path in credential_files(config).items()}
        self._seen = self._look()

    def _look(self) -> dict[str, FileState | None]:
        return {setting: look(path) for setting, path in self._files.items()}

    def renewed(self) -> tuple[Renewal, dict[str, Any]] | None:
        """What to renew and the clients' new options, when a file changed since the
        last look and all of them can be used; None otherwise."""
        if not self._files:
            return None
        now = self._look()
        settings = changed(self._seen, now)
        if not settings:
            return None
        self._seen = now
        try:
            options = connection_options(self._config)
        except ConfigError as error:
            log.warning(
                "kafka credentials not renewed (%s changed), the clients keep theirs: %s",
                ", ".join(settings),
                error,
            )
            return None
        log.info("kafka credentials renewed from %s: new connections use them", ", ".join(settings))
        return renewal(settings), options


def give_credentials(
    clients: Iterable[AIOKafkaClient], options: Mapping[str, Any], what: Renewal
) -> None:
    """Give running aiokafka clients a new password or TLS context for the connections
    they open from now on (see the module's doc). aiokafka keeps both on its client
    (``_sasl_plain_password``, ``_ssl_context``) and reads them at each connection."""
    for client in clients:
        if what.password:
            client._sasl_plain_password = options.get("sasl_plain_password")
        if what.tls:
            client._ssl_context = options.get("ssl_context")


def fetch_max_wait_ms(seconds: float) -> int:
    """A fetch max wait as aiokafka takes it: whole milliseconds, at least one."""
    return max(1, round(seconds * 1000))


def set_fetch_max_wait(consumer: Any, seconds: float) -> None:
    """Change a running aiokafka consumer's fetch max wait: its next fetch asks for it.

    aiokafka reads it from its fetcher at every fetch request it builds and has no
    public setter; a new consumer instead would throw away its positions and fetches.
    A consumer not started yet has no fetcher: it was built with the wait it needs."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is not None:
        fetcher._fetch_max_wait_ms = fetch_max_wait_ms(seconds)
