"""The replay: recorded series stretched to production time, evaluated by promtool with
the shipped rules. Series here are written as query_range would return them."""

from __future__ import annotations

from pathlib import Path

from probe.gameday.prometheus import RecordedSeries
from probe.gameday.replay import (
    ReplayPlan,
    build_unit_test,
    parse_promtool_alerts,
    replay,
    series_values,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts" / "prometheus" / "synthetic-sla-probe.rules.yml"
T0 = 1_700_000_000.0
PROBE = {"job": "synthetic-sla-probe", "instance": "127.0.0.1:9464"}
STAGE = {"target": "kafka", "stage": "consumer", **PROBE}


def _outage(seconds: int, lost_from: int, lost_until: int) -> list[RecordedSeries]:
    """Three partitions, one canary a second each; canaries lost in [from, until)."""
    delivered, lost = [], []
    d = l_ = 0
    for i in range(seconds):
        if lost_from <= i < lost_until:
            l_ += 3
        else:
            d += 3
        delivered.append((T0 + i, float(d)))
        lost.append((T0 + i, float(l_)))
    ones = [(T0 + i, 1.0) for i in range(seconds)]
    return [
        RecordedSeries(
            {"__name__": "synthetic_sla_canaries_total", "outcome": "delivered", **STAGE}, delivered
        ),
        RecordedSeries(
            {"__name__": "synthetic_sla_canaries_total", "outcome": "lost", **STAGE}, lost
        ),
        RecordedSeries({"__name__": "up", **PROBE}, ones),
        RecordedSeries(
            {"__name__": "synthetic_sla_target_ready", "target": "kafka", **PROBE}, ones
        ),
    ]


def test_counters_continue_a_healthy_history_and_gauges_of_time_are_stretched() -> None:
    plan = ReplayPlan(live_start=T0, live_step=1.0, factor=20.0, history=100.0, fault_start=T0 + 3)
    counter = RecordedSeries(
        {"__name__": "synthetic_sla_canaries_total"},
        [(T0, 10.0), (T0 + 1, 13.0), (T0 + 2, 16.0), (T0 + 4, 1.0), (T0 + 5, 4.0)],
    )
    # 5 history steps of 20 s at the steady rate of 3 per step; the live values shifted
    # to continue them until the reset (a restarted probe), then as they were.
    assert series_values(counter, plan, 6) == "0+3x4 15 18 21 _ 1 4"
    staleness = RecordedSeries(
        {"__name__": "synthetic_sla_partition_staleness_seconds"}, [(T0, 0.5), (T0 + 1, 1.5)]
    )
    assert series_values(staleness, plan, 2) == "10x4 10 30"
    tailed = ReplayPlan(T0, 1.0, 20.0, history=0.0, fault_start=T0, tail=60.0)
    assert series_values(counter, tailed, 6) == "10 13 16 _ 1 4 7+3x2"


def test_gauges_of_a_wall_clock_moment_are_put_on_the_replays_clock() -> None:
    # MirrorMaker 2's newest heartbeat, stamped on the wall clock: live, it keeps up
    # for two seconds, then stands still (the mirror stopped), then keeps up again.
    plan = ReplayPlan(T0, 1.0, 20.0, history=100.0, fault_start=T0 + 2, tail=40.0)
    stamps = [(T0, T0), (T0 + 1, T0 + 1), (T0 + 2, T0 + 1), (T0 + 3, T0 + 1), (T0 + 4, T0 + 4)]
    beat = RecordedSeries({"__name__": "synthetic_sla_mirror_heartbeat_timestamp_seconds"}, stamps)
    # Healthy history keeps up with the replay's clock (a value of 20 s steps); live
    # stamps land where their moment does (100 s of history, then 20 s per live
    # second), and the tail keeps up again from the last.
    assert series_values(beat, plan, 5) == "0+20x4 100 120 120 120 180 200+20x1"


def test_promtool_output_is_read_back_as_alerts() -> None:
    got = (
        '{__name__="ALERTS", alertname="SyntheticSlaPartitionSilent", alertstate="firing", '
        'partition="2", severity="critical", stage="consumer", target="kafka"} 1E+00, '
        '{__name__="ALERTS", alertname="SyntheticSlaTargetNotReady", alertstate="pending", '
        'severity="critical", target="kafka"} 1E+00'
    )
    output = f"""  FAILED:
    expr: "ALERTS", time: 6h1m20s,
        exp: nil
        got: {got}
"""
    found = parse_promtool_alerts(output)
    (silent, not_ready) = found[6 * 3600 + 80.0]
    assert silent.state == "firing"
    assert silent.labels == {
        "alertname": "SyntheticSlaPartitionSilent",
        "partition": "2",
        "severity": "critical",
        "stage": "consumer",
        "target": "kafka",
    }
    assert not_ready.state == "pending"


def test_an_outage_replayed_at_production_time_pages_then_resolves(tmp_path: Path) -> None:
    # 20 s steady, 15 s of every canary lost, 25 s healthy; live 1 s = 20 s production.
    plan = ReplayPlan(
        live_start=T0, live_step=1.0, factor=20.0, history=6 * 3600, fault_start=T0 + 20,
        tail=3600,
    )  # fmt: skip
    timeline = replay(_outage(60, 20, 35), plan, T0 + 59, RULES, tmp_path)
    fault = plan.replay_time(T0 + 20)
    tracks = {(t.name, t.labels["severity"]): t for t in timeline.tracks}
    assert set(tracks) == {
        ("SyntheticSlaAvailabilityBudgetBurn", "critical"),
        ("SyntheticSlaAvailabilityBudgetBurn", "warning"),
    }
    (page,) = tracks["SyntheticSlaAvailabilityBudgetBurn", "critical"].episodes
    # A full hour of healthy history: 14.4x of a 0.1 % budget over 1 h needs 2 lost
    # intervals of 3 canaries; the first lost counts are at the fault's start here.
    assert page.firing_at is not None
    assert page.firing_at - fault == 40.0
    # The 6h/30m pair holds it for 30 minutes after the last loss (recovery at +300 s).
    assert page.end is not None
    assert 1700 <= page.end - (fault + 300) <= 1900


def test_the_replay_evaluates_every_rule_group_in_the_files_order(tmp_path: Path) -> None:
    # Without the order promtool shuffles the groups at each step: an alert read the
    # recordings of the step before in some runs, and a page moved by one step.
    plan = ReplayPlan(live_start=T0, live_step=1.0, factor=20.0, history=100.0, fault_start=T0)
    unit_test = build_unit_test(_outage(3, 1, 2), plan, 3, RULES)
    order = unit_test["group_eval_order"]
    assert order[0] == "synthetic-sla-probe.sli"
    assert order.index("synthetic-sla-probe.sli") < order.index("synthetic-sla-probe.slo-alerts")
    written = RULES.read_text()
    assert order == sorted(order, key=lambda name: written.index(f"- name: {name}\n"))
    assert all(f"- name: {name}\n" in written for name in order)
    assert written.count("\n- name: ") == len(order)
