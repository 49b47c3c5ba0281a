"""The local environment of a game day: broker, proxy, probe and Prometheus, all real.

    broker (Tansu, embedded)  <-  TCP proxy  <-  sla-probe run  <-  Prometheus
                                  (faults)       (its metrics)      (shipped rules)

The broker advertises the proxy's address, so every connection of every Kafka client
goes through the proxy, where the network faults act. With ``broker: apache-kafka``
the broker is Apache Kafka's three KRaft nodes (``probe.apache_kafka``, `make
kafka`), each behind a proxy of its own that it advertises to clients, while the
nodes replicate on a listener of their own: a fault can cut the probe off from one
broker and leave replication alone. The probe creates its topic (replication factor
3) and bootstraps from the three proxies. The probe is the real
``sla-probe run`` in its own process, with a key file written by ``sla-probe keygen``
and the scenario's live configuration; Prometheus scrapes it and evaluates the
shipped rules file at the scenario's scrape interval.

With ``sink_process: own`` the sink stage runs as ``sla-probe sink`` in its own
process beside the probe (as the chart deploys it), with its own metrics port, and
Prometheus scrapes both.

``start`` returns once canaries flow and Prometheus has scraped the probe: whatever
happened while the topic was being created is already in the counters before the
first scrape, so it is never in a rate (as in tests/test_prometheus_e2e.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from probe.apache_kafka.cluster import MIRROR, NEWEST, TIERED, KafkaCluster, installed
from probe.apache_kafka.mirror import MirrorMaker2
from probe.apache_kafka.tiered import TOPIC_SETTINGS, RemoteStore
from probe.config import StageName
from probe.core.errors import ProbeError
from probe.embedded import EmbeddedBroker, Started, free_loopback_port
from probe.gameday.faults import build_fault
from probe.gameday.faults.base import LocalTargets
from probe.gameday.faults.proxy import TcpProxy
from probe.gameday.inhibition import documented_inhibit_rules
from probe.gameday.prometheus import LocalPrometheus, PrometheusApi
from probe.gameday.runner import (
    GamedayResult,
    ProgressCallback,
    judge_run,
    record_series,
    run_phases,
)
from probe.gameday.scenario import Scenario
from probe.transport.kafka_admin import TOPIC, ClusterAdmin, Config

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_RULES = ROOT / "charts" / "prometheus" / "synthetic-sla-probe.rules.yml"
PROBE_ID = "gameday-probe"


class LocalEnvironmentError(ProbeError):
    """A part of the local environment did not start or did not come up in time."""


def sla_probe_command() -> list[str]:
    """The `sla-probe` console script of this installation."""
    beside = Path(sys.executable).with_name("sla-probe")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("sla-probe")
    if found is None:
        raise LocalEnvironmentError("the sla-probe command is not installed")
    return [found]


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise LocalEnvironmentError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


class ProxiedBroker(EmbeddedBroker):
    """The embedded broker, advertising the proxy's address instead of its own."""

    def __init__(self, advertised_port: int, *, log_file: Path) -> None:
        super().__init__(log_file=log_file)
        self.advertised_port = advertised_port

    def command(self) -> list[str]:
        command = super().command()
        index = command.index("--advertised-listener-url")
        command[index + 1] = f"tcp://127.0.0.1:{self.advertised_port}"
        return command


class ProbeProcess:
    """`sla-probe run --config FILE` (or another service command: `sink`), stoppable
    (SIGTERM) and startable again; ``environment`` is added to its own at each start."""

    def __init__(
        self, config_file: Path, metrics_port: int, log_file: Path, command: str = "run"
    ) -> None:
        self.config_file = config_file
        self.metrics_port = metrics_port
        self.log_file = log_file
        self.command = command
        self.environment: dict[str, str] = {}
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_file.open("ab") as log:
            self._process = subprocess.Popen(
                [*sla_probe_command(), self.command, "--config", str(self.config_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.environment},
            )
        what = f"/healthz of sla-probe {self.command}"
        _wait(lambda: self._exited() or self._healthy(), 30, what)
        if self._exited():
            raise LocalEnvironmentError(f"sla-probe {self.command} exited: {self._log_tail()}")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def send_signal(self, signal_number: int) -> None:
        if self._process is None or self._process.poll() is not None:
            raise LocalEnvironmentError("the probe is not running")
        self._process.send_signal(signal_number)

    def canaries(self, outcome: str, stage: str | None = None) -> float:
        """Canaries of `outcome` counted so far by `stage`, or by every stage (0 if
        unreachable)."""
        counted = self.outcomes(stage)
        return 0.0 if counted is None else counted.get(outcome, 0.0)

    def outcomes(self, stage: str | None = None) -> dict[str, float] | None:
        """Canaries counted so far by outcome, by `stage` or by every stage together
        (None: the probe did not answer)."""
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=2) as reply:
                text = reply.read().decode()
        except (urllib.error.URLError, OSError):
            return None
        counted: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "synthetic_sla_canaries_total" and stage in (
                    None,
                    sample.labels.get("stage"),
                ):
                    outcome = sample.labels.get("outcome", "")
                    counted[outcome] = counted.get(outcome, 0.0) + sample.value
        return counted

    def _exited(self) -> bool:
        return self._process is None or self._process.poll() is not None

    def _healthy(self) -> bool:
        try:
            url = f"http://127.0.0.1:{self.metrics_port}/healthz"
            with urllib.request.urlopen(url, timeout=1) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-2000:]


class LocalEnvironment(Started):
    """Everything a local scenario runs on, started in order and stopped in reverse.

    >>> with LocalEnvironment(scenario, workdir) as env:
    ...     env.prometheus.api.active_alerts()
    []
    """

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        self.config = scenario.probe_config()
        self.topic = f"gameday-{scenario.name}-{uuid.uuid4().hex[:6]}"
        self.broker: ProxiedBroker | None = None
        self.proxy: TcpProxy | None = None
        self.cluster: KafkaCluster | None = None
        self.broker_proxies: dict[int, TcpProxy] = {}
        # With tiered reads: the cluster's remote store (KIP-405 on, LocalTieredStorage).
        self.remote_store: RemoteStore | None = None
        if scenario.broker == "apache-kafka":
            # The proxies' ports first: each node is told at its start to advertise its
            # proxy, and each proxy is told its node's port.
            proxy_ports = {node_id: free_loopback_port() for node_id in (1, 2, 3)}
            settings: dict[str, str] = {}
            if self.config.tiered.enabled:
                self.remote_store = RemoteStore(workdir / "remote-store")
                settings = self.remote_store.broker_settings(replication=3)
            self.cluster = KafkaCluster(
                workdir=workdir / "kafka",
                advertised_ports=proxy_ports,
                settings=settings,
                release=NEWEST if self.remote_store is None else TIERED,
            )
            # Kafka-aware where the fault holds some requests back (it reads each
            # request's API key); plain bytes otherwise.
            kafka = scenario.fault.kind == "coordinator-requests"
            self.broker_proxies = {
                node_id: TcpProxy(self.cluster.node(node_id).port, port=port, kafka=kafka)
                for node_id, port in proxy_ports.items()
            }
        else:
            proxy_port = free_loopback_port()
            self.broker = ProxiedBroker(proxy_port, log_file=workdir / "broker.log")
            self.proxy = TcpProxy(self.broker.port, port=proxy_port, kafka=True)
        # With the mirror stage: a target cluster of one broker, and MirrorMaker 2
        # replicating the canary topic to it under the probe's own mirror settings. It
        # reads the source through the proxies, as the probe does: a network fault
        # between the brokers and their clients reaches the mirror too.
        self.mirror_cluster: KafkaCluster | None = None
        self.mirror: MirrorMaker2 | None = None
        mirrored_topic = None
        if StageName.MIRROR in self.config.stages and self.cluster is not None:
            mirror = self.config.mirror
            self.mirror_cluster = KafkaCluster(1, workdir=workdir / "mirror-target")
            self.mirror = MirrorMaker2(
                self.cluster.bootstrap_servers,  # the proxies, as the brokers advertise
                self.mirror_cluster.bootstrap_servers,
                workdir=workdir / "mirrormaker2",
                topics=self.topic,
                policy=mirror.replication_policy,
                source_alias=mirror.source_alias,
                settings={"replication.policy.separator": mirror.separator},
            )
            mirrored_topic = mirror.mirrored_topic(self.topic)
        self.key_file = workdir / "keys.json"
        self.probe = ProbeProcess(
            workdir / "probe.yaml", free_loopback_port(), workdir / "probe.log"
        )
        self.sink = (
            ProbeProcess(workdir / "sink.yaml", free_loopback_port(), workdir / "sink.log", "sink")
            if scenario.sink_process == "own"
            else None
        )
        self.rules_file = scenario.prometheus.rules_file or SHIPPED_RULES
        self.prometheus = LocalPrometheus(
            workdir,
            probe_port=self.probe.metrics_port,
            rules_file=self.rules_file,
            interval=scenario.prometheus.scrape_interval,
            other_ports=() if self.sink is None else (self.sink.metrics_port,),
        )
        self.targets = LocalTargets(
            broker=self.broker,
            proxy=self.proxy,
            probe=self.probe,
            topic=self.topic,
            partitions=self.config.kafka.partitions or 3,
            key_file=self.key_file,
            probe_id=PROBE_ID,
            cluster=self.cluster,
            broker_proxies=self.broker_proxies,
            group_id=self.config.group.id,
            mirror=self.mirror,
            mirror_cluster=self.mirror_cluster,
            mirrored_topic=mirrored_topic,
            remote_store=self.remote_store,
        )

    @property
    def api(self) -> PrometheusApi:
        return self.prometheus.api

    def start(self) -> None:
        if self.cluster is not None and not installed(self.cluster.libs, self.cluster.release):
            raise LocalEnvironmentError(
                f"broker: apache-kafka needs Apache Kafka's jars, not in {self.cluster.libs}: "
                "run `make kafka` (python -m probe.apache_kafka install) first"
            )
        # Proxies before the brokers behind them: a cluster is ready once its brokers
        # answer at the addresses they advertise, the proxies'.
        for proxy in self.targets.proxies:
            proxy.start()
        if self.broker is not None:
            self.broker.start()
        if self.cluster is not None:
            self.cluster.start()
        if self.mirror is not None and self.mirror_cluster is not None:
            if not installed(self.mirror.libs, MIRROR):
                raise LocalEnvironmentError(
                    f"the mirror stage needs MirrorMaker 2's jars, not in {self.mirror.libs}: "
                    "run `make kafka` (python -m probe.apache_kafka install) first"
                )
            self.mirror_cluster.start()
            self.mirror.start()
        subprocess.run(
            [*sla_probe_command(), "keygen", "--output", str(self.key_file), "--force"],
            check=True,
            capture_output=True,
        )
        tree = self.scenario.live_probe_tree()
        tree["probe_id"] = PROBE_ID
        tree["signing_key_file"] = str(self.key_file)
        tree.setdefault("kafka", {})
        tree["kafka"] = {
            **tree["kafka"],
            "bootstrap_servers": self.targets.bootstrap_servers,
            "topic": self.topic,
        }
        tree["metrics"] = {**tree.get("metrics", {}), "port": self.probe.metrics_port}
        if self.mirror_cluster is not None:
            tree["mirror"] = {
                **tree.get("mirror", {}),
                "bootstrap_servers": self.mirror_cluster.bootstrap_servers,
            }
        if StageName.SINK in self.config.stages:
            # Tables, checkpoint and Spark's own log (spark.log) beside the run's logs.
            tree["sink"] = {"path": str(self.workdir / "sink"), **tree.get("sink", {})}
        if self.sink is not None:
            # The sink judges the probe's canaries from its own process: the same
            # topic and key file, its own metrics port; the probe runs the other stages.
            sink_tree = {**tree, "metrics": {**tree["metrics"], "port": self.sink.metrics_port}}
            self.sink.config_file.write_text(yaml.safe_dump(sink_tree))
            tree["stages"] = [str(s) for s in self.config.stages if str(s) != StageName.SINK.value]
        self.probe.config_file.write_text(yaml.safe_dump(tree))
        self.probe.start()
        if self.sink is not None:
            self.sink.start()
        partitions = self.targets.partitions
        # With the sink stage, the probe produces once Spark is up and warmed (its
        # first batch and Python workers: minutes on a busy 2-core machine), and the
        # sink's first canaries are counted too before the first scrape.
        sink = StageName.SINK in self.config.stages
        counter = self.sink or self.probe
        _wait(
            lambda: counter.canaries("delivered", "sink" if sink else None) >= 2 * partitions,
            300 if sink else 60,
            "canaries delivered before Prometheus starts",
        )
        if self.remote_store is not None and self.cluster is not None:
            self._tier_the_topic(self.cluster)
        self.prometheus.start()
        _wait(
            lambda: bool(self.api.query('up{job="synthetic-sla-probe"} == 1')),
            30,
            "Prometheus scraping the probe",
        )

    def _tier_the_topic(self, cluster: KafkaCluster) -> None:
        """Tiered storage on for the canary topic the probe created, as an operator turns
        it on for a topic: its segments then leave the brokers' disks within seconds."""
        settings = [Config(TOPIC, self.topic, name, v) for name, v in TOPIC_SETTINGS.items()]
        with ClusterAdmin(cluster.bootstrap_servers) as admin:
            refused = admin.set_configs(settings)
        if refused:
            raise LocalEnvironmentError(f"tiered storage on {self.topic}: {'; '.join(refused)}")

    def final_outcomes(self) -> dict[str, float] | None:
        """Every stage's canaries by outcome, as the probe (and an own sink process)
        counted them since they last started; None when one did not answer."""
        total: dict[str, float] = {}
        for process in [self.probe] if self.sink is None else [self.probe, self.sink]:
            counted = process.outcomes()
            if counted is None:
                return None
            for outcome, count in counted.items():
                total[outcome] = total.get(outcome, 0.0) + count
        return total

    def stop(self) -> None:
        sink_stop = [] if self.sink is None else [self.sink.stop]
        stops = [self.prometheus.stop, self.probe.stop, *sink_stop]
        if self.broker is not None:
            stops.append(self.broker.stop)
        if self.cluster is not None:
            # Killed, not shut down: the run's data is thrown away, and three nodes in
            # controlled shutdown at once wait on a quorum that is leaving with them.
            stops += [node.kill for node in self.cluster.nodes.values()]
        if self.mirror is not None and self.mirror_cluster is not None:
            stops.insert(0, self.mirror.kill)
            stops += [node.kill for node in self.mirror_cluster.nodes.values()]
        stops += [proxy.stop for proxy in self.targets.proxies]
        for stop in stops:
            try:
                stop()
            except Exception:  # stopping the rest matters more than one failure
                continue


def run_local(
    scenario: Scenario, workdir: Path, *, on_phase: ProgressCallback | None = None
) -> GamedayResult:
    """Run a local scenario end to end and judge it."""
    step = scenario.prometheus.scrape_interval
    with LocalEnvironment(scenario, workdir) as env:
        fault = build_fault(scenario.fault, env.targets)
        # Poll twice per evaluation: a firing time is known to half an interval.
        clock, watcher = run_phases(scenario, fault, env.api, step / 2, on_phase=on_phase)
        series = (
            record_series(env.api, clock.start, clock.end, step)
            if scenario.production.replay
            else None
        )
        canaries = env.final_outcomes()
    result = judge_run(
        scenario,
        clock,
        watcher,
        series=series,
        live_step=step,
        rules_file=env.rules_file,
        workdir=workdir,
        # Alertmanager as docs/alerting.md tells users to configure it.
        inhibit_rules=documented_inhibit_rules(),
    )
    result.canaries = canaries
    return result
