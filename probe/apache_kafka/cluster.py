"""A real Apache Kafka cluster on loopback: three KRaft nodes from Maven Central's jars.

Each node is both broker and controller (a static ``controller.quorum.voters``), so
three JVMs make the cluster users run: replication factor 3, ``min.insync.replicas``
2, leader election, ISR shrink and expand, controlled shutdown, consumer groups.
Nothing is fetched here: ``install`` (``make kafka``) resolves ``pom.xml`` into a
cache once, and :class:`KafkaCluster` refuses to start without it, naming the command.

>>> with KafkaCluster(workdir=Path("/tmp/kc")) as cluster:  # doctest: +SKIP
...     cluster.bootstrap_servers
'127.0.0.1:41001,127.0.0.1:41003,127.0.0.1:41005'

A node can be stopped (SIGTERM: a controlled shutdown that moves its leaderships
away first), killed (SIGKILL: what a crash does), paused (SIGSTOP: a broker that
hangs) and started again on the same ports and log directory.

Client listeners beside the main one (``listeners``) serve the same cluster another
way: plaintext, TLS with a PEM key and certificate chain, mutual TLS:

>>> tls = {"TLS": Listener("SSL", key_pem, chain_pem)}
>>> with KafkaCluster(workdir=Path("/tmp/kc"), listeners=tls) as cluster:  # doctest: +SKIP
...     cluster.bootstrap_servers_of("TLS")
'127.0.0.1:41007,127.0.0.1:41009,127.0.0.1:41011'
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from probe.core.errors import TransportError
from probe.embedded import LoopbackServer, Started, free_loopback_ports
from probe.transport.kafka_admin import live_brokers

POM = Path(__file__).with_name("pom.xml")

# The broker settings of the project's cluster: what production clusters are told to
# use (RF 3, min ISR 2, controlled shutdown, no unclean election, no auto-created
# topics), and fewer threads and __consumer_offsets partitions than the defaults, which
# size a broker for a machine of its own, not three JVMs sharing two cores.
CLUSTER_SETTINGS: Mapping[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "controlled.shutdown.enable": "true",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": "8388608",
}

# A heap for a test broker: the canary topic at 10,000 partitions RF 3 is 30,000
# replicas across three nodes, about 10,000 each.
JAVA_OPTIONS: Sequence[str] = (
    "-Xms128m",
    "-Xmx768m",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-Djava.awt.headless=true",
)
# The tests' and game days' brokers start with the JIT's first tier only: a JVM that
# compiles the broker's start-up paths with C2 took twice the CPU, and a cluster twice
# the time, to come up on two shared cores (3 nodes: 15 s and 31 CPU-s; now 8 s, 16
# CPU-s), for code that then serves a few partitions. Benchmarks run the full JIT.
QUICK_START: Sequence[str] = ("-XX:TieredStopAtLevel=1",)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


@dataclass(frozen=True, slots=True)
class Listener:
    """A client listener of every node beside the main one (EXTERNAL).

    ``protocol``: PLAINTEXT or SSL. For SSL, the broker's unencrypted PKCS#8 key and
    its certificate chain (PEM), the same on every node; with ``client_ca_pem`` the
    listener requires a client certificate signed by one of those CAs
    (``ssl.client.auth=required``).
    """

    protocol: str = "PLAINTEXT"
    key_pem: str | None = None
    chain_pem: str | None = None
    client_ca_pem: str | None = None

    def settings(self, name: str) -> dict[str, str]:
        """The broker settings of this listener, under its ``listener.name.`` prefix.

        A SASL_SSL listener takes SCRAM-SHA-512 logins, checked against the
        credentials the cluster was formatted with (``KafkaCluster(scram_users=)``)
        or altered since through the admin API."""
        if self.key_pem is None or self.chain_pem is None:
            return {}
        prefix = f"listener.name.{name.lower()}."
        own = {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.key": self.key_pem,
            "ssl.keystore.certificate.chain": self.chain_pem,
        }
        if self.protocol == "SASL_SSL":
            own |= {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                ),
            }
        if self.client_ca_pem is not None:
            own |= {
                "ssl.truststore.type": "PEM",
                "ssl.truststore.certificates": self.client_ca_pem,
                "ssl.client.auth": "required",
            }
        return {prefix + key: value for key, value in own.items()}


def _property(value: str) -> str:
    # java.util.Properties reads "\n" as a newline: a PEM value stays on one line.
    return value.replace("\\", "\\\\").replace("\n", "\\n")


# The releases the pom pins: the newest, which every test runs on, the oldest 4.x
# line (its profile ``previous``), which a smoke subset runs on, and MirrorMaker 2's
# (its profile ``mirror``; probe.apache_kafka.mirror), which the mirror stage's run on.
NEWEST = "newest"
PREVIOUS = "previous"
MIRROR = "mirror"
TIERED = "tiered"
RELEASES = (NEWEST, PREVIOUS, MIRROR, TIERED)
# Each release's jars in a directory of this name (and its version) in the cache.
_LIBS_NAMES = {MIRROR: "mirrormaker2", TIERED: "tiered-storage"}
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def kafka_version(release: str = NEWEST, pom: Path = POM) -> str:
    """The Apache Kafka version ``pom.xml`` pins for ``release``: its ``kafka.version``
    property, or that of the profile of the release's name."""
    project = ElementTree.parse(pom).getroot()
    profile = f"m:profiles/m:profile[m:id='{release}']/"
    where = "m:properties" if release == NEWEST else f"{profile}m:properties"
    found = project.find(f"{where}/m:kafka.version", _POM_NS)
    if found is None or not found.text:
        raise ValueError(f"{pom}: no kafka.version for the release {release!r}")
    return found.text.strip()


def libs_dir(release: str = NEWEST) -> Path:
    """Where a release's pinned jars live: ``apache-kafka-<version>`` (MirrorMaker 2's:
    ``mirrormaker2-<version>``, tiered storage's: ``tiered-storage-<version>``) under
    ``SLA_PROBE_KAFKA_LIBS``, else under the user's cache."""
    if configured := os.environ.get("SLA_PROBE_KAFKA_LIBS"):
        parent = Path(configured)
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        parent = cache / "synthetic-sla-probe"
    name = _LIBS_NAMES.get(release, "apache-kafka")
    return parent / f"{name}-{kafka_version(release)}"


def _pin(release: str) -> str:
    """What an install was resolved from: the pom's hash (a changed pin re-resolves)."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    return f"apache-kafka {kafka_version(release)} pom sha256 {digest}"


def installed(libs: Path | None = None, release: str = NEWEST) -> bool:
    stamp = (libs or libs_dir(release)) / "RESOLVED"
    return stamp.exists() and stamp.read_text().splitlines()[:1] == [_pin(release)]


def install(release: str = NEWEST, *, maven: str = "mvn") -> Path:
    """Resolve a release's pinned jars from Maven Central into its ``libs_dir`` (once:
    a later call finds the stamp and returns). The copy is made beside and renamed
    into place, so an interrupted install leaves nothing that looks installed."""
    libs = libs_dir(release)
    if installed(libs, release):
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".resolving-", dir=libs.parent))
    profile = [] if release == NEWEST else ["-P", release]
    try:
        subprocess.run(
            [
                maven, "-q", "-B", "-f", str(POM), *profile, "dependency:copy-dependencies",
                "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
            ],
            check=True,
        )  # fmt: skip
        jars = sorted(p.name for p in staging.glob("*.jar"))
        (staging / "RESOLVED").write_text(_pin(release) + "\n" + "\n".join(jars) + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return libs


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class JvmServer(LoopbackServer):
    """A JVM of the tests' (a Kafka node, MirrorMaker 2) that faults stop, kill, pause
    and resume."""

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL. A paused process is resumed first: it would take the
        SIGTERM only then."""
        self.resume()
        super().stop(timeout)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, unflushed writes lost as in a crash."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(30)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: the process holds its sockets and answers nothing."""
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)


class KafkaNode(JvmServer):
    """One combined broker and controller. ``port`` is its client listener."""

    # A cold JVM on a shared two-core machine: class loading and log recovery.
    start_timeout = 90.0

    def __init__(
        self,
        node_id: int,
        *,
        libs: Path,
        directory: Path,
        port: int,
        controller_port: int,
        internal_port: int,
        voters: str,
        settings: Mapping[str, str],
        advertised_port: int | None = None,
        client_protocol: str = "PLAINTEXT",
        listeners: Mapping[str, Listener] | None = None,
        listener_ports: Mapping[str, int] | None = None,
        java_options: Sequence[str] = JAVA_OPTIONS,
    ) -> None:
        super().__init__(port, log_file=directory / "server.log")
        self.java_options = tuple(java_options)
        self.node_id = node_id
        self.name = f"kafka node {node_id}"
        self.controller_port = controller_port
        self.internal_port = internal_port
        self.advertised_port = advertised_port or port
        self.directory = directory
        self._libs = libs
        self.properties = directory / "server.properties"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "log4j2.properties").write_text(_LOG4J2)
        # Clients (EXTERNAL) and replication (INTERNAL) on listeners of their own: a
        # game day that puts a proxy in front of a broker's clients (advertised_port)
        # cuts the probe off from it while the brokers still replicate.
        internal = f"INTERNAL://127.0.0.1:{self.internal_port}"
        more = dict(listeners or {})
        # Each further client listener's port; a client bootstrapping there is told
        # the brokers' addresses on that same listener.
        self.listener_ports = {name: (listener_ports or {})[name] for name in more}
        others = "".join(f",{n}://127.0.0.1:{p}" for n, p in self.listener_ports.items())
        protocols = "".join(f",{n}:{listener.protocol}" for n, listener in more.items())
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"EXTERNAL://127.0.0.1:{port},{internal},"
            f"CONTROLLER://127.0.0.1:{controller_port}{others}",
            "advertised.listeners": (
                f"EXTERNAL://127.0.0.1:{self.advertised_port},{internal}{others}"
            ),
            "listener.security.protocol.map": (
                f"EXTERNAL:{client_protocol},INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}"
            ),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "log.dirs": str(directory / "data"),
            **{k: v for name, listener in more.items() for k, v in listener.settings(name).items()},
            **settings,
        }
        self.properties.write_text("".join(f"{k}={_property(v)}\n" for k, v in lines.items()))

    def java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            *self.java_options,
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            f"{self._libs}/*",
            main,
            *args,
        ]

    def format_command(
        self, cluster: str, scram_users: Mapping[str, str] | None = None
    ) -> list[str]:
        # One id in 32 starts with "-" (URL-safe base64): as a separate argument the
        # tool's parser took it for an option and refused to format.
        # SCRAM credentials go into the metadata log at format (KIP-900), as
        # operators bootstrap the first users of a KRaft cluster.
        scram = [
            f"--add-scram=SCRAM-SHA-512=[name={name},password={password}]"
            for name, password in (scram_users or {}).items()
        ]
        return self.java(
            "kafka.tools.StorageTool", "format", f"--cluster-id={cluster}", "-c",
            str(self.properties), *scram,
        )  # fmt: skip

    def command(self) -> list[str]:
        return self.java("kafka.Kafka", str(self.properties))

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (its leaderships move first), then SIGKILL."""
        super().stop(timeout)

    def state(self) -> str:
        """Running (with its pid) or exited (with its exit code), and the last three
        WARN or ERROR lines of its log."""
        process = self._process
        if process is None:
            status = "stopped"
        elif (code := process.poll()) is not None:
            status = f"exited {code}"
        else:
            status = f"running (pid {process.pid})"
        log = self.directory / "server.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        warnings = [line for line in lines if "] WARN " in line or "] ERROR " in line][-3:]
        return f"{self.name} {status}" + "".join(f"\n  {line[:400]}" for line in warnings)

    def resident_bytes(self) -> int:
        """The JVM's resident memory (0 when not running)."""
        if self.pid is None:
            return 0
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


class KafkaCluster(Started):
    """``brokers`` KRaft nodes (broker and controller each) on loopback ports, their
    logs and data under ``workdir``. ``start`` returns once every broker is registered
    and unfenced (a topic of replication factor ``brokers`` can be created);
    ``started_in`` says how long that took."""

    ready_timeout = 120.0

    def __init__(
        self,
        brokers: int = 3,
        *,
        workdir: Path,
        settings: Mapping[str, str] | None = None,
        libs: Path | None = None,
        advertised_ports: Mapping[int, int] | None = None,
        plain_users: Mapping[str, str] | None = None,
        listeners: Mapping[str, Listener] | None = None,
        scram_users: Mapping[str, str] | None = None,
        quick_start: bool = True,
        release: str = NEWEST,
    ) -> None:
        self.release = release
        self.libs = libs or libs_dir(release)
        self._java_options = (*JAVA_OPTIONS, *(QUICK_START if quick_start else ()))
        self._scram_users = dict(scram_users or {})
        self._listeners = dict(listeners or {})
        self.workdir = workdir
        self.started_in: float | None = None
        self._brokers = brokers
        self._settings = {
            **_fitted(CLUSTER_SETTINGS, brokers),
            **_sasl_plain(plain_users),
            **(settings or {}),
        }
        self._advertised = dict(advertised_ports or {})
        self._client_protocol = "SASL_PLAINTEXT" if plain_users else "PLAINTEXT"
        self.nodes = self._new_nodes()
        self._formatted = False
        # How a client authenticates (aiokafka's names): the first PLAIN user, if any.
        self.client_security: dict[str, str] = {}
        if plain_users:
            name, password = next(iter(plain_users.items()))
            self.client_security = {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_plain_username": name,
                "sasl_plain_password": password,
            }

    def _new_nodes(self) -> dict[int, KafkaNode]:
        """Nodes on free loopback ports (the advertised ones as given)."""
        # Every port of every node taken at once, so that none repeats.
        per_node = 3 + len(self._listeners)
        free = iter(free_loopback_ports(per_node * self._brokers))
        ports = {
            i: (next(free), next(free), next(free), {name: next(free) for name in self._listeners})
            for i in range(1, self._brokers + 1)
        }
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c, _, _) in ports.items())
        return {
            i: KafkaNode(
                i,
                libs=self.libs,
                directory=self.workdir / f"node-{i}",
                port=port,
                controller_port=controller,
                internal_port=internal,
                voters=voters,
                settings=self._settings,
                advertised_port=self._advertised.get(i),
                client_protocol=self._client_protocol,
                listeners=self._listeners,
                listener_ports=more,
                java_options=self._java_options,
            )
            for i, (port, controller, internal, more) in ports.items()
        }

    @property
    def bootstrap_servers(self) -> str:
        """The client listeners' addresses as advertised (through proxies, if any)."""
        return ",".join(f"127.0.0.1:{n.advertised_port}" for n in self.nodes.values())

    def bootstrap_servers_of(self, listener: str) -> str:
        """The addresses of a further client listener (see ``listeners``)."""
        return ",".join(f"127.0.0.1:{n.listener_ports[listener]}" for n in self.nodes.values())

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id]

    def start(self) -> None:
        if not installed(self.libs, self.release):
            raise TransportError(
                f"Apache Kafka's jars are not in {self.libs}: run `make kafka` "
                "(python -m probe.apache_kafka install) first"
            )
        began = time.monotonic()
        try:
            if not self._formatted:
                self._format()
            self.start_nodes(*self.nodes)
            self.wait_ready()
        except TransportError as exc:
            # A free port is free when picked, not when the JVM binds it: a client's
            # outgoing connection may take it in between. Once, on fresh ports.
            if "Address already in use" not in str(exc) + self._logs():
                raise
            self.stop()
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.nodes = self._new_nodes()
            self._formatted = False
            self._format()
            self.start_nodes(*self.nodes)
            self.wait_ready()
        self.started_in = time.monotonic() - began

    def _logs(self) -> str:
        return "".join(
            n.directory.joinpath("server.log").read_text(errors="replace")
            for n in self.nodes.values()
            if n.directory.joinpath("server.log").exists()
        )

    def start_nodes(self, *node_ids: int) -> None:
        """Start these nodes at once. A broker opens its client listener only once the
        controller quorum has it caught up: with the quorum lost (two of three nodes
        down), nodes started one after the other would each wait for the next."""
        with concurrent.futures.ThreadPoolExecutor(max(1, len(node_ids))) as pool:
            for started in [pool.submit(self.nodes[i].start) for i in node_ids]:
                started.result()

    def _format(self) -> None:
        """Format every node's storage with one new cluster id, all three at once."""
        cluster = cluster_id()
        formats = {
            node: subprocess.Popen(
                node.format_command(cluster, self._scram_users),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for node in self.nodes.values()
        }
        for node, formatting in formats.items():
            output, _ = formatting.communicate(timeout=120)
            if formatting.returncode:
                raise TransportError(f"formatting {node.name} failed: {output[-2000:]}")
        self._formatted = True

    def wait_ready(self, brokers: int | None = None, timeout: float | None = None) -> None:
        """Until ``brokers`` (all by default) are registered and unfenced."""
        wanted = len(self.nodes) if brokers is None else brokers
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        seen: set[int] = set()
        while time.monotonic() < deadline:
            seen = live_brokers(self.bootstrap_servers, **self.client_security)
            if len(seen) >= wanted:
                return
            for node in self.nodes.values():
                if node._process is not None and node._process.poll() is not None:
                    raise TransportError(f"{node.name} exited: {node._log_tail()}")
            time.sleep(0.25)
        raise TransportError(f"Kafka cluster: brokers {sorted(seen)} of {wanted} by the deadline")

    def stop(self) -> None:
        """Kill every node: a cluster is stopped only when done with (its data goes
        with its workdir) or when its start failed, so no node need shut down
        cleanly (a clean stop of all three took 6 s, each test's teardown; with the
        quorum lost, a minute). A node to stop cleanly is stopped on its own."""
        for node in self.nodes.values():
            node.kill()

    def resident_bytes(self) -> int:
        return sum(n.resident_bytes() for n in self.nodes.values())

    def state(self) -> str:
        """Each node running or not, and its log's last warnings: what a test that
        waited in vain on the cluster (a replica never in sync) adds to its failure."""
        return "; ".join(node.state() for node in self.nodes.values())


def _fitted(settings: Mapping[str, str], brokers: int) -> dict[str, str]:
    """The settings with every replication factor and min ISR at most the node count:
    a cluster of fewer nodes could create no topic (nor its __consumer_offsets)."""
    replication = (".replication.factor", "min.insync.replicas", ".min.isr")
    return {
        name: str(min(int(value), brokers)) if name.endswith(replication) else value
        for name, value in settings.items()
    }


def _sasl_plain(users: Mapping[str, str] | None) -> dict[str, str]:
    """The client listener's SASL/PLAIN users (name to password), or nothing: clients
    then connect in plaintext, as User:ANONYMOUS. Replication and the controllers stay
    on their own plaintext listeners, as User:ANONYMOUS (a super user where an
    authorizer is set)."""
    if not users:
        return {}
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return {
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.external.plain.sasl.jaas.config": (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {entries};"
        ),
    }
