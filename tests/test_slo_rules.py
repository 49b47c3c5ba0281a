"""The SLO rules: one source, valid, tested with promtool, documented, and the documented
Alertmanager inhibition proven in a real Alertmanager.

The rules live in the chart (templates/_slo-rules.tpl); the plain rules file is rendered
from it. promtool's unit tests in tests/rules/ prove the alerts' behaviour on series.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from probe.embedded import free_loopback_port
from probe.gameday.inhibition import documented_inhibit_rules
from probe.metrics import ProbeMetrics
from probe.reconcile.metrics import ReconcileMetrics
from probe.services.report import Tally
from probe.services.smoke_push import smoke_registry
from tests.conftest import wait_for

ROOT = Path(__file__).resolve().parent.parent
PLAIN_RULES = ROOT / "charts" / "prometheus" / "synthetic-sla-probe.rules.yml"
UNIT_TESTS = sorted((ROOT / "tests" / "rules").glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks.md"
ALERTING = ROOT / "docs" / "alerting.md"
DASHBOARD = ROOT / "charts" / "synthetic-sla-probe" / "dashboards" / "synthetic-sla-probe.json"


def _spark_metrics() -> set[str]:
    """The Spark sink stage's metric names, from its own collector (no Spark started)."""
    from probe.spark.health import SparkHealth  # noqa: PLC0415 - imports pyspark

    registry = CollectorRegistry()
    SparkHealth(registry, "kafka", trigger_s=2.0)
    return _names(registry)


def _names(registry: CollectorRegistry) -> set[str]:
    names = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
    return names


SPARK_METRICS = _spark_metrics()


def _load_renderer() -> Any:
    """charts/render_rules.py, the script `make rules` runs (not a package module)."""
    spec = importlib.util.spec_from_file_location("render_rules", ROOT / "charts/render_rules.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_rules = _load_renderer()


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: `make test` installs it (Debian package)"
    return path


def _rules(groups: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for group in groups["groups"]:
        yield from group["rules"]


def _alerts(groups: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for rule in _rules(groups) if "alert" in rule]


# -- one source ---------------------------------------------------------------------------


def test_plain_rules_file_is_rendered_from_the_chart() -> None:
    assert PLAIN_RULES.read_text() == render_rules.plain_rules_text(), (
        "charts/prometheus/synthetic-sla-probe.rules.yml is out of date: run `make rules`"
    )


def test_prometheus_rule_and_rules_configmap_carry_the_same_groups() -> None:
    from tests.test_chart import VALUE_SETS, render  # noqa: PLC0415 - one renderer for both

    manifests = render(VALUE_SETS["all-features"])
    rule = next(m for m in manifests if m["kind"] == "PrometheusRule")
    configmap = next(m for m in manifests if m["metadata"]["name"].endswith("-rules"))
    assert yaml.safe_load(configmap["data"]["synthetic-sla-probe.rules.yml"]) == rule["spec"]
    # With default values and the plain file's scope (every target) the PrometheusRule
    # is exactly the plain file.
    default = render(
        {**VALUE_SETS["default"], "prometheusRule": {"enabled": True}, "ruleScope": "all"}
    )
    default_rule = next(m for m in default if m["kind"] == "PrometheusRule")
    assert default_rule["spec"] == yaml.safe_load(PLAIN_RULES.read_text())
    # additionalLabels reach every alert, and only alerts.
    for alert in _alerts(rule["spec"]):
        assert alert["labels"]["team"] == "streaming"


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    from tests.test_chart import VALUE_SETS, render  # noqa: PLC0415

    spec = next(m for m in render(VALUE_SETS["all-features"]) if m["kind"] == "PrometheusRule")
    operator_rules = tmp_path / "operator.rules.yml"
    operator_rules.write_text(yaml.safe_dump(spec["spec"]))
    for rules in (PLAIN_RULES, operator_rules):
        result = subprocess.run(
            [_tool("promtool"), "check", "rules", str(rules)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 80 rules found" in result.stdout


@pytest.mark.parametrize("unit_test", UNIT_TESTS, ids=lambda path: path.stem)
def test_promtool_unit_tests(unit_test: Path) -> None:
    result = subprocess.run(
        [_tool("promtool"), "test", "rules", str(unit_test)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


# The availability page firing (the ticket of the same name is severity warning).
PAGE_LABELS = 'alertname="SyntheticSlaAvailabilityBudgetBurn",severity="critical"'
PAGE = f'ALERTS{{{PAGE_LABELS},alertstate="firing"}}'


def _two_releases_test(tmp_path: Path, scope: str) -> subprocess.CompletedProcess[str]:
    """promtool's unit test of two releases' rules on one Prometheus: orders (objective
    0.999) and payments (0.99), each losing 2 % of its canaries. A 20x burn of orders'
    budget pages; a 2x burn of payments' does not."""
    releases = {"orders": 0.999, "payments": 0.99}
    files = []
    for target, objective in releases.items():
        values = {
            "ruleScope": scope,
            "config": {"target": target},
            "slo": {"availability": {"objective": objective}},
        }
        path = tmp_path / f"{target}.rules.yml"
        path.write_text(yaml.safe_dump(render_rules.render_rule_groups(values)))
        files.append(path.name)
    series = [
        {"series": f'synthetic_sla_canaries_total{{target="{t}",stage="consumer",'
                   f'outcome="{outcome}",instance="10.0.0.{n}:9464"}}', "values": values}
        for n, t in enumerate(releases)
        for outcome, values in (("delivered", "0+98x60"), ("lost", "0+2x60"))
    ]  # fmt: skip
    unit = {
        "rule_files": files,
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": 'synthetic_sla:objective:ratio{sli="availability"}',
                        "eval_time": "30m",
                        "exp_samples": [
                            {
                                "labels": f'synthetic_sla:objective:ratio{{sli="availability",'
                                f'target="{t}"}}',
                                "value": objective,
                            }
                            for t, objective in releases.items()
                        ],
                    },
                    {
                        "expr": f"count by (target) ({PAGE})",
                        "eval_time": "30m",
                        "exp_samples": [{"labels": '{target="orders"}', "value": 1}],
                    },
                ],
            }
        ],
    }
    test_file = tmp_path / "two-releases.yml"
    test_file.write_text(yaml.safe_dump(unit))
    return subprocess.run(
        [_tool("promtool"), "test", "rules", str(test_file)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def test_two_releases_rules_keep_to_their_own_targets_and_objectives(tmp_path: Path) -> None:
    # Each release's rules (ruleScope "release", the chart's default) cover its own
    # targets: one objective series per target, and only the burn that breaks its own
    # objective pages.
    result = _two_releases_test(tmp_path, "release")
    assert result.returncode == 0, result.stdout + result.stderr
    # Every release covering every target (the plain file's scope, installed with each
    # release as the quickstart once did): the two objectives clash on one series,
    # which Prometheus refuses ("duplicate sample for timestamp").
    clashing = _two_releases_test(tmp_path, "all")
    assert clashing.returncode != 0
    said = clashing.stdout + clashing.stderr
    assert "synthetic_sla:objective:ratio" in said, said


def _pass_promtool_tests(rules: Path, tests: list[dict[str, Any]]) -> None:
    """Run these promtool unit tests of a rules file (beside it) and assert they pass."""
    unit_test = rules.with_suffix(".test.yml")
    unit_test.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    result = subprocess.run(
        [_tool("promtool"), "test", "rules", str(unit_test)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_latency_sli_reads_a_whole_second_threshold_in_both_bucket_forms(
    tmp_path: Path,
) -> None:
    """Prometheus 3 stores le="1" as le="1.0"; Go clients write "1", Python "1.0"."""
    rules = tmp_path / "threshold-1s.rules.yml"
    whole_second = {"slo": {"latency": {"objective": 0.99, "thresholdSeconds": 1}}}
    rules.write_text(render_rules.plain_rules_text(whole_second))
    stage = 'target="kafka",stage="consumer"'
    sli = "target_stage:synthetic_sla_latency:ratio_rate5m"
    cases = [
        {
            "name": f'le="{le}"',
            "interval": "1m",
            "input_series": [
                # 6 of 9 arrivals a minute within 1 s.
                {
                    "series": f'synthetic_sla_e2e_latency_seconds_bucket{{{stage},le="{le}"}}',
                    "values": "0+6x30",
                },
                {
                    "series": f"synthetic_sla_e2e_latency_seconds_count{{{stage}}}",
                    "values": "0+9x30",
                },
            ],
            "promql_expr_test": [
                {
                    "expr": sli,
                    "eval_time": "30m",
                    "exp_samples": [{"labels": f"{sli}{{{stage}}}", "value": 6 / 9}],
                }
            ],
        }
        for le in ("1", "1.0")
    ]
    _pass_promtool_tests(rules, cases)
    assert 'le=~"1(\\\\.0)?"' in rules.read_text()


def test_the_mirror_stage_reads_its_latency_at_its_own_threshold(tmp_path: Path) -> None:
    """A mirror across regions is promised more than the local stages: its bucket is
    read where slo.latency.mirrorThresholdSeconds says, every other stage's where
    thresholdSeconds does."""
    rules = tmp_path / "mirror-2s.rules.yml"
    latency = {"objective": 0.99, "thresholdSeconds": 0.5, "mirrorThresholdSeconds": 2}
    rules.write_text(render_rules.plain_rules_text({"slo": {"latency": latency}}))
    sli = "target_stage:synthetic_sla_latency:ratio_rate5m"

    def stage_series(stage: str) -> list[dict[str, str]]:
        labels = f'target="kafka",stage="{stage}"'
        bucket = "synthetic_sla_e2e_latency_seconds_bucket"
        # A minute's 10 arrivals: 3 within 0.5 s, 5 within 2 s.
        return [
            {"series": f'{bucket}{{{labels},le="0.5"}}', "values": "0+3x30"},
            {"series": f'{bucket}{{{labels},le="2.0"}}', "values": "0+5x30"},
            {"series": f"synthetic_sla_e2e_latency_seconds_count{{{labels}}}", "values": "0+10x30"},
        ]

    case = {
        "name": "each stage at its threshold",
        "interval": "1m",
        "input_series": stage_series("consumer") + stage_series("mirror"),
        "promql_expr_test": [
            {
                "expr": sli,
                "eval_time": "30m",
                "exp_samples": [
                    {"labels": f'{sli}{{target="kafka",stage="consumer"}}', "value": 0.3},
                    {"labels": f'{sli}{{target="kafka",stage="mirror"}}', "value": 0.5},
                ],
            }
        ],
    }
    _pass_promtool_tests(rules, [case])
    # The burn alerts say so, where it differs from the default.
    assert "the Spark sink 5s; the mirror 2s)" in rules.read_text()
    assert "; the mirror" not in render_rules.plain_rules_text({})


def test_values_reach_the_thresholds() -> None:
    values = {
        "config": {"interval": 30},
        "spark": {"enabled": False, "allowedLatenessSeconds": 90},
        "slo": {
            "availability": {"objective": 0.995},
            "latency": {"objective": 0.95, "thresholdSeconds": 0.25},
            "sink": {"skewObjective": 0.98},
        },
        "alerts": {
            "severityLabels": {"page": "P1", "ticket": "P3"},
            "invalidCanaries": {"enabled": False, "severity": "ticket"},
        },
    }
    alerts = {}
    for alert in _alerts(render_rules.render_rule_groups(values)):
        alerts.setdefault(alert["alert"], []).append(alert)
    # Per partition, and from the stage's aggregate when the probe exports no partitions.
    silent, aggregate = alerts["SyntheticSlaPartitionSilent"]
    assert silent["expr"].endswith("> 90")  # max(60 s, 3 x 30 s)
    assert "synthetic_sla_staleness_max_seconds) > 90\nunless" in aggregate["expr"]
    skew_page, skew_ticket = alerts["SyntheticSlaWatermarkSkewBudgetBurn"]
    skew_sli = "target:synthetic_sla_watermark_skew:ratio_rate1h"
    assert f"(1 - {skew_sli}) / (1 - 0.98) > 14.4" in skew_page["expr"]
    assert [skew_page["labels"]["severity"], skew_ticket["labels"]["severity"]] == ["P1", "P3"]
    # The probe holds the skew threshold; the text names it: 2 x 90 s by default.
    skew_text = skew_page["annotations"]["description"]
    assert "(180s, twice the allowed lateness of 90s; objective 0.98)" in skew_text
    assert "(1 - 0.995) > 14.4" in alerts["SyntheticSlaAvailabilityBudgetBurn"][0]["expr"]
    assert "(1 - 0.95) > 1" in alerts["SyntheticSlaLatencyBudgetBurn"][1]["expr"]
    assert [a["labels"]["severity"] for a in alerts["SyntheticSlaLatencyBudgetBurn"]] == [
        "P1",
        "P3",
    ]
    assert "SyntheticSlaInvalidCanaries" not in alerts
    groups = render_rules.render_rule_groups(values)
    recorded = {rule["record"]: rule["expr"] for rule in _rules(groups) if "record" in rule}
    latency = recorded["target_stage:synthetic_sla_latency:ratio_rate1h"]
    assert 'le=~"0\\\\.25(\\\\.0)?"' in latency


def test_values_reach_the_sink_query_gates() -> None:
    values = {
        "config": {"sink": {"skew_threshold": "3m"}},
        "alerts": {
            "sinkQueryDown": {"enabled": True, "severity": "ticket", "for": "8m"},
            "sinkRestartLoop": {
                "enabled": True,
                "severity": "page",
                "window": "15m",
                "restarts": 5,
            },
            "sinkCheckpointFailing": {"enabled": True, "severity": "ticket", "window": "30m"},
            "sinkCheckpointSlow": {
                "enabled": True,
                "severity": "ticket",
                "for": "20m",
                "window": "15m",
                "baselineWindow": "7d",
                "factor": 3,
                "floorSeconds": 2.5,
            },
            "sinkLagGrowing": {"enabled": False, "severity": "ticket"},
        },
    }
    groups = render_rules.render_rule_groups(values)
    alerts: dict[str, list[dict[str, Any]]] = {}
    for alert in _alerts(groups):
        alerts.setdefault(alert["alert"], []).append(alert)
    given_up, down = alerts["SyntheticSlaSinkQueryDown"]
    assert "for" not in given_up  # a latched gauge
    assert (down["for"], down["labels"]["severity"]) == ("8m", "warning")
    assert [given_up["labels"]["state"], down["labels"]["state"]] == ["given_up", "down"]
    (loop,) = alerts["SyntheticSlaSinkRestartLoop"]
    assert loop["expr"].endswith("[15m])) >= 5")
    assert loop["labels"]["severity"] == "critical"
    (failing,) = alerts["SyntheticSlaSinkCheckpointFailing"]
    assert 'reason="checkpoint"}[30m]' in failing["expr"]
    (slow,) = alerts["SyntheticSlaSinkCheckpointSlow"]
    assert slow["for"] == "20m"
    assert "> 3 * (" in slow["expr"]
    assert "_sum[7d]" in slow["expr"]
    assert "_count[15m]" in slow["expr"]
    assert slow["expr"].endswith(") > 2.5")
    assert "SyntheticSlaSinkLagGrowing" not in alerts
    # A skew threshold set in the probe's config is the one the skew alerts name.
    skew_text = alerts["SyntheticSlaWatermarkSkewBudgetBurn"][0]["annotations"]["description"]
    assert "(3m, config.sink.skew_threshold; objective 0.99)" in skew_text
    recorded = {rule["record"] for rule in _rules(groups) if "record" in rule}
    windows = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
    assert {f"target:synthetic_sla_watermark_skew:ratio_rate{w}" for w in windows} <= recorded


def test_values_reach_the_replica_tickets() -> None:
    values = {
        "alerts": {
            "replicasUnderReplicated": {"enabled": True, "severity": "page", "for": "20m"},
            "replicasUnderMinIsr": {"enabled": False, "severity": "ticket", "for": "1m"},
        },
    }
    alerts = {alert["alert"]: alert for alert in _alerts(render_rules.render_rule_groups(values))}
    under_replicated = alerts["SyntheticSlaReplicasUnderReplicated"]
    assert (under_replicated["for"], under_replicated["labels"]["severity"]) == ("20m", "critical")
    # Per broker: `for` is how long one broker is out, not how long a rolling restart
    # keeps some broker out (tests/rules/replica_health.yml).
    assert under_replicated["expr"].startswith("max by (target, broker) (")
    assert "for 20m" in under_replicated["annotations"]["summary"]
    assert "SyntheticSlaReplicasUnderMinIsr" not in alerts
    plain = {alert["alert"]: alert for alert in _alerts(yaml.safe_load(PLAIN_RULES.read_text()))}
    assert plain["SyntheticSlaReplicasUnderReplicated"]["for"] == "10m"
    assert plain["SyntheticSlaReplicasUnderMinIsr"]["for"] == "1m"


def test_values_reach_the_group_rules() -> None:
    values = {
        "slo": {"groupCommit": {"objective": 0.995, "thresholdSeconds": 1}},
        "alerts": {
            "groupRebalanceStorm": {
                "enabled": True,
                "severity": "page",
                "window": "30m",
                "rebalances": 10,
                "for": "10m",
            },
            "groupCommitFailing": {"enabled": False, "severity": "ticket"},
        },
    }
    groups = render_rules.render_rule_groups(values)
    alerts: dict[str, list[dict[str, Any]]] = {}
    for alert in _alerts(groups):
        alerts.setdefault(alert["alert"], []).append(alert)
    page, ticket = alerts["SyntheticSlaGroupCommitLatencyBudgetBurn"]
    sli = "target_stage:synthetic_sla_group_commit_latency:ratio_rate"
    assert f"(1 - {sli}1h) / (1 - 0.995) > 14.4" in page["expr"]
    assert f"(1 - {sli}3d) / (1 - 0.995) > 1" in ticket["expr"]
    assert "within 1s" in page["annotations"]["description"]
    recorded = {rule["record"]: rule for rule in _rules(groups) if "record" in rule}
    # A whole-second threshold in both bucket spellings, as the latency SLI reads it.
    assert 'le=~"1(\\\\.0)?"' in recorded[f"{sli}5m"]["expr"]
    (objective,) = [
        rule
        for rule in _rules(groups)
        if rule.get("labels", {}).get("sli") == "group_commit_latency"
    ]
    assert objective["expr"] == "0.995 + 0 * group by (target) (synthetic_sla_canaries_total)"
    assert objective["labels"]["threshold_seconds"] == "1"
    rebalancing, unstable = alerts["SyntheticSlaGroupRebalanceStorm"]
    assert rebalancing["expr"].endswith("[30m])) > 10")
    assert "for" not in rebalancing  # the window holds it
    assert (unstable["for"], unstable["labels"]["severity"]) == ("10m", "critical")
    assert [rebalancing["labels"]["state"], unstable["labels"]["state"]] == [
        "rebalancing",
        "unstable",
    ]
    assert "SyntheticSlaGroupCommitFailing" not in alerts


# -- documented -----------------------------------------------------------------------------


def _github_anchor(heading: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def _runbook_sections() -> dict[str, str]:
    sections = re.split(r"^## ", RUNBOOKS.read_text(), flags=re.MULTILINE)[1:]
    return {section.splitlines()[0]: section for section in sections}


def test_every_alert_has_a_runbook_that_says_what_to_do() -> None:
    groups = yaml.safe_load(PLAIN_RULES.read_text())
    sections = _runbook_sections()
    alert_names = {alert["alert"] for alert in _alerts(groups)}
    assert alert_names == set(sections), "one runbook section per alert, no more"
    for alert in _alerts(groups):
        annotations = alert["annotations"]
        assert annotations["summary"], alert["alert"]
        assert annotations["description"], alert["alert"]
        base, _, anchor = annotations["runbook_url"].partition("#")
        assert base.endswith("/docs/runbooks.md"), annotations["runbook_url"]
        assert anchor == _github_anchor(alert["alert"]), annotations["runbook_url"]
        section = sections[alert["alert"]]
        assert "**Meaning.**" in section, alert["alert"]
        assert "**Mitigate.**" in section, alert["alert"]
        checks = section.split("**Check first.**")[1].split("**Mitigate.**")[0]
        numbered = re.findall(r"^(\d)\. ", checks, flags=re.MULTILINE)
        assert numbered == ["1", "2", "3"], alert["alert"]


RECORDED = re.compile(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+")


def _metric_names(expr: str) -> set[str]:
    """Raw metric names an expression reads (recording rules' names left out)."""
    names = set(re.findall(r"\b(synthetic_sla_[a-z0-9_]+)", RECORDED.sub("", expr)))
    return {re.sub(r"_(bucket|count|sum)$", "", name) for name in names}


def _exported_metrics() -> set[str]:
    registry = CollectorRegistry()
    ProbeMetrics(registry)
    ReconcileMetrics(registry, "kafka")  # `sla-probe reconcile`'s own series
    # What `sla-probe once --push-gateway` pushes for a target, read from the Pushgateway.
    pushed = smoke_registry(Tally("kafka"), ended_at=0.0, duration_s=0.0, buckets=(0.5,))
    return _names(registry) | _names(pushed) | SPARK_METRICS


def test_rules_and_dashboard_read_only_metrics_that_exist() -> None:
    groups = yaml.safe_load(PLAIN_RULES.read_text())
    exported = _exported_metrics()
    for rule in _rules(groups):
        missing = _metric_names(rule["expr"]) - exported
        assert not missing, f"{rule.get('record') or rule.get('alert')} reads {missing}"
    recorded = {rule["record"] for rule in _rules(groups) if "record" in rule}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert exprs
    for expr in exprs:
        missing = _metric_names(expr) - exported
        assert not missing, f"dashboard query reads {missing}: {expr}"
        for record in RECORDED.findall(expr):
            assert record in recorded, f"dashboard query reads unknown rule {record}"


def test_dashboard_shows_what_the_slo_needs() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    titles = [p["title"] for p in panels]
    assert any("budget remaining" in t.lower() for t in titles)
    assert "target_stage:synthetic_sla_availability:ratio_rate" in exprs
    assert "histogram_quantile(0.99, sum by (target, stage, le) (rate(" in exprs
    staleness = next(
        p for p in panels if "synthetic_sla_partition_staleness" in p["targets"][0]["expr"]
    )
    assert staleness["type"] == "heatmap"
    assert staleness["targets"][0]["legendFormat"] == "{{partition}}"
    assert "sum by (stage, outcome) (increase(synthetic_sla_canaries_total" in exprs
    # The Spark stage's health: every metric it exports has a panel.
    for metric in {name.removesuffix("_total") for name in SPARK_METRICS}:
        assert metric in exprs, metric
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "target", "stage", "slo_period"} <= variables


# -- inhibition, in a real Alertmanager ---------------------------------------------------


def _documented_inhibit_rules() -> dict[str, Any]:
    text = ALERTING.read_text()
    marker = text.index("<!-- inhibit_rules")
    block = text[marker:].split("```yaml\n", 1)[1].split("```", 1)[0]
    rules: dict[str, Any] = yaml.safe_load(block)
    return rules


def _post_alerts(port: int, alerts: list[dict[str, Any]]) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v2/alerts",
        data=json.dumps(alerts).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as reply:
        assert reply.status == 200


def _alert_states(port: int) -> dict[tuple[str, ...], str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/alerts", timeout=5) as reply:
        alerts = json.load(reply)
    return {
        (a["labels"]["alertname"], a["labels"]["target"], a["labels"]["severity"]): a["status"][
            "state"
        ]
        for a in alerts
    }


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[int]:
    """A real Alertmanager with the documented inhibit rules and a receiver that drops."""
    config = {
        "route": {"receiver": "drop", "group_by": ["alertname", "target"]},
        "receivers": [{"name": "drop"}],
        **_documented_inhibit_rules(),
    }
    config_file = tmp_path / "alertmanager.yml"
    config_file.write_text(yaml.safe_dump(config))
    port = free_loopback_port()
    log = tmp_path / "alertmanager.log"
    process = subprocess.Popen(
        [
            _tool("prometheus-alertmanager"),
            f"--config.file={config_file}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip port: a single instance
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: process.poll() is not None or _ready(port),
            timeout=20,
            what="Alertmanager ready",
        )
        assert process.poll() is None, log.read_text()
        yield port
    finally:
        process.terminate()
        process.wait(10)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def test_documented_inhibition_holds_in_alertmanager(alertmanager: int) -> None:
    """A silent partition suppresses the watermark-skew burn alerts of its target, not
    of another target; a fast-burn page suppresses the slow-burn ticket of its SLO."""
    # Label sets as the rules produce them (see the ALERTS series in tests/rules/).
    silent = {"stage": "consumer", "partition": "2"}
    sink = {"stage": "sink"}
    skew = {"slo": "watermark_skew"}
    firing = [
        ("SyntheticSlaPartitionSilent", "orders", "critical", silent),
        ("SyntheticSlaWatermarkSkewBudgetBurn", "orders", "critical", skew),
        ("SyntheticSlaWatermarkSkewBudgetBurn", "orders", "warning", skew),
        ("SyntheticSlaWatermarkSkewBudgetBurn", "payments", "critical", skew),
        ("SyntheticSlaWatermarkSkewBudgetBurn", "payments", "warning", skew),
        (
            "SyntheticSlaAvailabilityBudgetBurn",
            "orders",
            "critical",
            {**sink, "slo": "availability"},
        ),
        (
            "SyntheticSlaAvailabilityBudgetBurn",
            "orders",
            "warning",
            {**sink, "slo": "availability"},
        ),
        ("SyntheticSlaLatencyBudgetBurn", "orders", "warning", {**sink, "slo": "latency"}),
    ]
    _post_alerts(
        alertmanager,
        [
            {
                "labels": {"alertname": name, "target": target, "severity": severity, **labels},
                "annotations": {"summary": name},
            }
            for name, target, severity, labels in firing
        ],
    )
    expected = {
        ("SyntheticSlaPartitionSilent", "orders", "critical"): "active",
        ("SyntheticSlaWatermarkSkewBudgetBurn", "orders", "critical"): "suppressed",
        ("SyntheticSlaWatermarkSkewBudgetBurn", "orders", "warning"): "suppressed",
        # Another target's skew pages; its own page makes its ticket the same news.
        ("SyntheticSlaWatermarkSkewBudgetBurn", "payments", "critical"): "active",
        ("SyntheticSlaWatermarkSkewBudgetBurn", "payments", "warning"): "suppressed",
        ("SyntheticSlaAvailabilityBudgetBurn", "orders", "critical"): "active",
        ("SyntheticSlaAvailabilityBudgetBurn", "orders", "warning"): "suppressed",
        # No latency page: its ticket stays.
        ("SyntheticSlaLatencyBudgetBurn", "orders", "warning"): "active",
    }
    wait_for(
        lambda: _alert_states(alertmanager) == expected,
        timeout=20,
        what="the documented inhibition",
    )
    # The game days apply the same rules to their timelines without an Alertmanager
    # (probe.gameday.inhibition): it must agree with the real one.
    rules = documented_inhibit_rules()
    labels = [
        {"alertname": name, "target": target, "severity": severity, **extra}
        for name, target, severity, extra in firing
    ]
    by_rules = {
        (alert["alertname"], alert["target"], alert["severity"]): (
            "suppressed"
            if any(rule.mutes(source, alert) for rule in rules for source in labels)
            else "active"
        )
        for alert in labels
    }
    assert by_rules == expected


def test_inhibit_rules_name_real_alerts_and_labels() -> None:
    groups = yaml.safe_load(PLAIN_RULES.read_text())
    alert_names = {alert["alert"] for alert in _alerts(groups)}
    for rule in _documented_inhibit_rules()["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            found = re.fullmatch(r'(\w+)(=~|=)"(.*)"', matcher)
            assert found, matcher
            name, op, value = found.groups()
            if name == "alertname":
                pattern = value if op == "=~" else re.escape(value)
                assert any(re.fullmatch(pattern, a) for a in alert_names), matcher
        # The labels compared are ones these alerts carry (the rules aggregate by
        # target and stage; the ALERTS series in tests/rules/ show them).
        assert set(rule["equal"]) <= {"alertname", "target", "stage"}, rule["equal"]
        assert "target" in rule["equal"], "an inhibition must never cross targets"
