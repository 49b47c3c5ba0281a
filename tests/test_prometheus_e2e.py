"""End to end: a real Prometheus scrapes a running probe against the real broker, with
the shipped rules loaded. The availability SLI is 1.0 while canaries flow; when the
broker stops it falls, and the availability page fires. The dashboard's queries run
against the same Prometheus.

Prometheus scrapes and evaluates every second, so the 5m recording rule has data after
two scrapes; nothing here waits for a window to fill.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

from probe.embedded import EmbeddedBroker
from tests.conftest import RunningProbe, run_args, wait_for
from tests.prometheus import Prometheus

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "synthetic-sla-probe" / "dashboards" / "synthetic-sla-probe.json"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
AVAILABILITY = 'target_stage:synthetic_sla_availability:ratio_rate5m{stage="consumer"}'
# The runbooks' one-step join from a partition to its leader broker and that broker's address.
PARTITION_TO_BROKER = """
sort_desc(
  max by (target, stage, partition, broker, address) (
    synthetic_sla_partition_staleness_seconds{target="<target>",stage="<stage>"}
    * on (instance, target, partition) group_left (broker) synthetic_sla_partition_leader
    * on (instance, target, broker) group_left (address) synthetic_sla_broker_info
  )
)
"""


def dashboard_queries() -> list[str]:
    """Every dashboard query, with Grafana's variables as a user would have them."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {
        "${latency_threshold}": "0.5",
        "${sink_latency_threshold}": "5",
        "$__rate_interval": "4s",
        "$slo_period": "5m",
        "$target": ".*",
        "$stage": ".*",
    }
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in variables.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            queries.append(expr)
    return queries


def test_prometheus_measures_the_slo_of_a_running_probe(
    own_broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    start_prometheus: Callable[..., Prometheus],
) -> None:
    probe = start_probe(*run_args(own_broker.bootstrap_servers, topic, key_file))
    # Canaries flow before Prometheus first scrapes: whatever happened while the topic
    # was being created is already in the counters and never in a rate.
    wait_for(lambda: probe.canaries("delivered") >= 3, timeout=30, what="canaries delivered")
    prometheus = start_prometheus(probe.port)

    wait_for(
        lambda: prometheus.value(AVAILABILITY) == 1.0,
        timeout=30,
        what="availability SLI of 1.0 while canaries flow",
    )
    assert prometheus.value('up{job="synthetic-sla-probe"}') == 1.0
    assert prometheus.value(f"min({AVAILABILITY})") == 1.0
    assert prometheus.query('ALERTS{alertname=~"SyntheticSla.*",alertstate="firing"}') == []

    # Every dashboard query is valid PromQL against this Prometheus, and the panels
    # about the consumer stage have data.
    for query in dashboard_queries():
        prometheus.query(query)  # valid PromQL, data or not
        # The Spark stage, the group stage, the mirror stage, tiered reads and
        # reconciliation are not running here: their panels have no data (their series
        # reach a real Prometheus in the rules' promtool tests; tests/apache_kafka
        # checks them against Kafka). Rule groups are evaluated each on its own
        # schedule: a panel reading another group's rules may get its first data an
        # evaluation later.
        idle = ("spark", "watermark", "reconciliation", "synthetic_sla_group_",
                "synthetic_sla_mirror_", "synthetic_sla_tiered_")  # fmt: skip
        if not any(word in query for word in idle):
            wait_for(lambda q=query: prometheus.query(q), timeout=15, what=f"data for {query}")

    # The runbooks' join names every partition's leader broker and its address.
    assert " ".join(PARTITION_TO_BROKER.split()) in " ".join(RUNBOOKS.read_text().split())
    join = PARTITION_TO_BROKER.replace("<target>", "kafka").replace("<stage>", "consumer")
    joined = wait_for(lambda: prometheus.query(join), timeout=15, what="the partition join")
    staleness = prometheus.query('synthetic_sla_partition_staleness_seconds{stage="consumer"}')
    assert {row["metric"]["partition"] for row in joined} == {
        row["metric"]["partition"] for row in staleness
    }
    for row in joined:
        assert row["metric"]["address"] == own_broker.bootstrap_servers, row
        assert row["metric"]["broker"], row

    own_broker.stop()

    def availability_fell() -> float | None:
        value = prometheus.value(AVAILABILITY)
        return value if value is not None and not math.isnan(value) and value < 1.0 else None

    fallen = wait_for(availability_fell, timeout=45, what="availability SLI below 1")
    assert 0.0 <= fallen < 1.0
    page = (
        'ALERTS{alertname="SyntheticSlaAvailabilityBudgetBurn",alertstate="firing",'
        'severity="critical",stage="consumer"}'
    )
    wait_for(lambda: prometheus.query(page), timeout=45, what="the availability page firing")
    # The probe is alive and still scraped through the outage.
    assert prometheus.value('up{job="synthetic-sla-probe"}') == 1.0
    # Every rule evaluated without error all along.
    log = prometheus.log.read_text()
    assert "Evaluating rule failed" not in log
    assert re.search(r"level=(error|fatal)", log) is None
