"""Two replicas of the probe behind one Prometheus, on Apache Kafka's three brokers: what
the chart recommends (replicaCount 2) and what every rolling update runs for a while.

Every query the on-call is handed (each PromQL block and inline query of the docs, every
dashboard panel, every query an alert's description runs) is evaluated by the real
Prometheus against both replicas' series, with the shipped rules loaded: none may fail.
A join matched on labels two replicas share makes Prometheus refuse the query ("found
duplicate series for the match group"): at 3 AM, the on-call's step is an error. Then a
broker stops, and the partition at fault (its only replica on that broker: offline) must
still be named by the documented join, with its broker and that broker's address.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import yaml

from probe.apache_kafka.cluster import KafkaCluster
from tests.apache_kafka.kafka_admin import create_topic
from tests.conftest import RunningProbe, run_args, wait_for
from tests.prometheus import PLAIN_RULES, Prometheus
from tests.test_prometheus_e2e import PARTITION_TO_BROKER, dashboard_queries

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# What the docs' placeholders stand for here: the probe's target, a stage, broker 2,
# partition 1 (led by broker 2).
PLACEHOLDERS = {"<target>": "kafka", "<stage>": "consumer", "<id>": "2", "<partition>": "1"}
# What an alert's labels give its description's queries (printf's %q).
ALERT_LABEL = '"kafka"'


def filled(query: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        query = query.replace(placeholder, value)
    return query


def doc_queries() -> list[tuple[str, str]]:
    """(page, query) for every ```promql block of the docs and every inline code span
    that is a query (a function, an aggregation or a join: a span with parentheses
    naming a probe series or recording rule), placeholders filled in."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        blocks = re.findall(r"```promql\n(.*?)```", text, flags=re.S)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        spans = [
            span
            for span in re.findall(r"`([^`]+)`", prose)
            if "(" in span and ("synthetic_sla_" in span or ":ratio_rate" in span)
        ]
        found += [(page.name, filled(query)) for query in (*blocks, *spans)]
    return found


def annotation_queries() -> list[tuple[str, str]]:
    """(alert, query) for every query an alert's annotations run when it fires (Go
    templates: ``query (printf "..." $labels.x ...)``), its labels filled in."""
    rules = yaml.safe_load(PLAIN_RULES.read_text())
    query = re.compile(r'query\s*\(?\s*(?:printf\s+)?"((?:[^"\\]|\\.)*)"')
    found = []
    for group in rules["groups"]:
        for rule in group["rules"]:
            for text in (rule.get("annotations") or {}).values():
                for match in query.finditer(text):
                    promql = match.group(1).replace('\\"', '"').replace("%q", ALERT_LABEL)
                    found.append((rule["alert"], promql))
    return found


def test_the_queries_found_are_the_ones_the_on_call_is_handed() -> None:
    # The collection itself: the join of triage.md and the runbooks, an inline query,
    # and the description's broker state are among them, with no placeholder left.
    docs = doc_queries()
    pages = {page for page, _ in docs}
    assert {"triage.md", "runbooks.md", "metrics.md"} <= pages
    assert any("group_left (address)" in q for _, q in docs)
    assert not [q for _, q in docs if re.search(r"<[a-z_]+>", q)]
    alerts = dict(annotation_queries())
    assert 'listed="true"' in alerts["SyntheticSlaReplicasUnderReplicated"]


def evaluate_everything(prometheus: Prometheus) -> None:
    """Every query handed to the on-call, evaluated: Prometheus.query fails the test
    on an error, with the query and Prometheus's reason."""
    for _, query in doc_queries():
        prometheus.query(query)
    for query in dashboard_queries():
        prometheus.query(query)
    for _, query in annotation_queries():
        prometheus.query(query)


def replica_args(cluster: KafkaCluster, topic: str, key_file: Path, probe_id: str) -> list[str]:
    """A replica as the chart runs them: a probe id of its own (the pod name). The
    topic is the test's: no topic management."""
    args = run_args(cluster.bootstrap_servers, topic, key_file)
    args[args.index("--probe-id") + 1] = probe_id
    args.remove("--create-topic")
    return [*args, "--no-create-topic"]


def test_two_replicas_every_query_answers_and_the_partition_at_fault_is_named(
    own_kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    start_prometheus: Callable[..., Prometheus],
) -> None:
    cluster = own_kafka_cluster
    # One partition per broker, each with its only replica there: stopping broker 2
    # takes partition 1 offline, with no leader to name.
    create_topic(cluster.bootstrap_servers, topic, 3, assignment=[[1], [2], [3]])
    replicas = [
        start_probe(*replica_args(cluster, topic, key_file, f"sla-probe-{n}")) for n in (0, 1)
    ]
    for replica in replicas:
        wait_for(lambda r=replica: r.canaries("delivered") >= 6, timeout=60,
                 what="canaries through every broker")  # fmt: skip
    # One job, an instance per replica: as a ServiceMonitor scrapes the chart's pods.
    prometheus = start_prometheus(*(replica.port for replica in replicas))
    instances = {f"127.0.0.1:{replica.port}" for replica in replicas}

    join = filled(PARTITION_TO_BROKER)
    # Without `instance` in its matching, two replicas' leader series make the join
    # fail: what the docs said before.
    unmatched = join.replace("on (instance, ", "on (")
    wait_for(lambda: len(prometheus.query("synthetic_sla_partition_leader")) == 6,
             timeout=30, what="both replicas' leader series scraped")  # fmt: skip
    assert prometheus.query_error(unmatched) is not None

    def rows() -> dict[str, dict[str, str]]:
        return {row["metric"]["partition"]: row["metric"] for row in prometheus.query(join)}

    healthy = wait_for(lambda: (r := rows()) and len(r) == 3 and r, timeout=30,
                       what="every partition joined to its broker")  # fmt: skip
    assert {p: (m["broker"], m["address"] != "") for p, m in healthy.items()} == {
        "0": ("1", True),
        "1": ("2", True),
        "2": ("3", True),
    }
    address_2 = healthy["1"]["address"]
    up = prometheus.query('up{job="synthetic-sla-probe"}')
    assert {row["metric"]["instance"] for row in up} == instances
    evaluate_everything(prometheus)

    cluster.node(2).stop()

    def partition_1_stalest() -> dict[str, str] | None:
        ranked = prometheus.query(join)
        stale = ranked[0]["metric"] if ranked else None
        if stale is None or stale["partition"] != "1" or float(ranked[0]["value"][1]) < 5:
            return None
        return stale

    # The partition at fault tops the on-call's answer, named by the broker that led it
    # last and that broker's address, though the broker is down and the partition has
    # no leader.
    at_fault = wait_for(partition_1_stalest, timeout=60, what="partition 1 the stalest")
    assert (at_fault["broker"], at_fault["address"]) == ("2", address_2)
    offline = prometheus.query(
        'synthetic_sla_partition_replica_problem{problem="offline",partition="1"}'
    )
    assert {row["metric"]["instance"] for row in offline} == instances
    down = prometheus.query('synthetic_sla_broker_info{listed="false"}')
    assert {(row["metric"]["broker"], row["metric"]["address"]) for row in down} == {
        ("2", address_2)
    }
    evaluate_everything(prometheus)
    log = prometheus.log.read_text()
    assert "Evaluating rule failed" not in log
    assert re.search(r"level=(error|fatal)", log) is None, log[-3000:]
