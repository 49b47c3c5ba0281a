"""The SLOs in the formats SLO tooling reads: the chart's Sloth PrometheusServiceLevel and
Pyrra ServiceLevelObjectives, and the plain files charts/render_slo_specs.py writes from
them (charts/sloth/, charts/pyrra/).

Sloth is real: built from its Go source by `make sloth` (tests/sloth.py), it generates
rules from the committed spec and from the chart's resource; promtool accepts them, and
its unit test tests/rules/sloth/burn.yml proves they page on the shipped rules' outages,
for the same target and stage, and stay quiet on a healthy probe. Pyrra cannot be built
here (its module is not on the Go module proxy this project reaches): its resources are
validated against Pyrra's CRD (v0.9.5, tests/data/pyrra/) and the checks its admission
webhook makes, and their selectors are evaluated by promtool against the shipped rules'
SLIs on the same series.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import ValidationError

from tests.sloth import SLOTH_VERSION, built_version, go_command, sloth_binary, sloth_crd
from tests.test_chart import VALUE_SETS, render, validate_crd

ROOT = Path(__file__).resolve().parent.parent
SLOTH_SPEC = ROOT / "charts" / "sloth" / "synthetic-sla-probe.sloth.yml"
PYRRA_DIR = ROOT / "charts" / "pyrra"
PLAIN_RULES = ROOT / "charts" / "prometheus" / "synthetic-sla-probe.rules.yml"
SLOTH_UNIT_TEST = ROOT / "tests" / "rules" / "sloth" / "burn.yml"
STAGES = (
    "consumer", "group", "group_consumer", "share", "transactional", "mirror", "sink", "mqtt",
    "bridge",
)  # fmt: skip
# Spark on, so both thresholds are in play; the probes' own values otherwise.
KAFKA_AND_SPARK = VALUE_SETS["all-features"]


def _load_script() -> Any:
    """charts/render_slo_specs.py, the script `make slo-specs` runs (not a package module)."""
    path = ROOT / "charts" / "render_slo_specs.py"
    spec = importlib.util.spec_from_file_location("render_slo_specs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_slo_specs = _load_script()
render_rules = sys.modules["render_rules"]  # what it imported, from beside it


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed: `make test` installs it (Debian package)"
    return path


def _sloth() -> str:
    binary = sloth_binary()
    assert binary.exists(), f"Sloth {SLOTH_VERSION} is not built: `make sloth` (part of make test)"
    return str(binary)


def _run(*command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _generate(spec: Path, rules: Path) -> dict[str, Any]:
    """Sloth's rules for a spec (either format; Sloth tells them apart)."""
    _run(_sloth(), "generate", "--no-log", "-i", str(spec), "-o", str(rules))
    generated: dict[str, Any] = yaml.safe_load(rules.read_text())
    return generated


def _chart_resources(values: dict[str, Any]) -> list[dict[str, Any]]:
    on = {"sloth": {"enabled": True}, "pyrra": {"enabled": True}}
    return [
        m
        for m in render(render_slo_specs.merge(values, on))
        if m["kind"] in ("PrometheusServiceLevel", "ServiceLevelObjective")
    ]


# -- one source ---------------------------------------------------------------------------


def test_committed_specs_are_rendered_from_the_chart() -> None:
    files = render_slo_specs.spec_files()
    for path, text in files.items():
        assert path.read_text() == text, f"{path} is out of date: run `make slo-specs`"
    assert set(PYRRA_DIR.glob("*.yaml")) == {p for p in files if p.parent == PYRRA_DIR}
    assert render_slo_specs.main(["--check"]) == 0


def test_check_fails_on_a_stale_or_missing_file(tmp_path: Path) -> None:
    sloth, pyrra = tmp_path / "spec.sloth.yml", tmp_path / "pyrra"
    paths = ["--sloth-output", str(sloth), "--pyrra-output", str(pyrra)]
    assert render_slo_specs.main(["--check", *paths]) == 1
    assert render_slo_specs.main(paths) == 0
    assert render_slo_specs.main(["--check", *paths]) == 0
    (pyrra / "synthetic-sla-probe-gone-latency.yaml").write_text("left from a removed stage\n")
    assert render_slo_specs.main(["--check", *paths]) == 1
    sloth.write_text(sloth.read_text().replace("objective: 99.9", "objective: 99.5"))
    assert render_slo_specs.main(paths) == 0
    assert render_slo_specs.main(["--check", *paths]) == 0
    assert not (pyrra / "synthetic-sla-probe-gone-latency.yaml").exists()


def test_specs_carry_the_objectives_and_thresholds_of_the_rules() -> None:
    """A values change reaches the rules and both specs alike."""
    values = {
        "slo": {
            "availability": {"objective": 0.995},
            "latency": {"objective": 0.95, "thresholdSeconds": 0.25, "sinkThresholdSeconds": 10},
            "stages": ["consumer", "sink"],
        }
    }
    service_level, objectives = render_slo_specs.render_slo_resources(values)
    slos = {slo["name"]: slo for slo in service_level["spec"]["slos"]}
    assert {name: slo["objective"] for name, slo in slos.items()} == {
        "consumer-availability": 99.5,
        "consumer-latency": 95,
        "sink-availability": 99.5,
        "sink-latency": 95,
    }
    assert 'le=~"0\\\\.25(\\\\.0)?"' in slos["consumer-latency"]["sli"]["events"]["errorQuery"]
    assert 'le=~"10(\\\\.0)?"' in slos["sink-latency"]["sli"]["events"]["errorQuery"]
    pyrra = {o["metadata"]["name"]: o["spec"] for o in objectives}
    assert {name: spec["target"] for name, spec in pyrra.items()} == {
        "synthetic-sla-probe-consumer-availability": "99.5",
        "synthetic-sla-probe-consumer-latency": "95",
        "synthetic-sla-probe-sink-availability": "99.5",
        "synthetic-sla-probe-sink-latency": "95",
    }
    latency = pyrra["synthetic-sla-probe-sink-latency"]["indicator"]["latency"]
    assert latency["success"]["metric"].endswith('le="10.0"}')
    # The rules read the same buckets.
    rules = render_rules.dump(render_rules.render_rule_groups(values))
    assert 'le=~"0\\\\.25(\\\\.0)?"' in rules
    assert 'le=~"10(\\\\.0)?"' in rules
    assert "0.995 + 0 * group by (target)" in rules


# -- the chart -----------------------------------------------------------------------------


def test_off_by_default() -> None:
    kinds = {m["kind"] for m in render(VALUE_SETS["default"])}
    assert not kinds & {"PrometheusServiceLevel", "ServiceLevelObjective"}


@pytest.mark.parametrize(
    ("values", "stages"),
    [
        (VALUE_SETS["default"], ["consumer"]),
        (KAFKA_AND_SPARK, ["consumer", "sink"]),
        # The stages as the probe takes them on the command line, too.
        (
            {"config": {**VALUE_SETS["default"]["config"], "stages": "consumer, group"}},
            ["consumer", "group"],
        ),
        ({"config": {"mqtt": {"url": "mqtt://mqtt:1883"}}}, ["mqtt"]),
        (
            {"config": {"mqtt": {"url": "mqtt://mqtt:1883", "bridge": {"topic": "from-mqtt"}}}},
            ["mqtt", "bridge"],
        ),
        ({**VALUE_SETS["default"], "slo": {"stages": ["bridge"]}}, ["bridge"]),
    ],
    ids=["kafka", "kafka-and-spark", "kafka-and-group", "mqtt", "mqtt-and-bridge", "slo.stages"],
)
def test_slos_for_the_stages_the_release_runs(values: dict[str, Any], stages: list[str]) -> None:
    resources = _chart_resources(values)
    (service_level,) = [m for m in resources if m["kind"] == "PrometheusServiceLevel"]
    expected = [f"{stage}-{sli}" for stage in stages for sli in ("availability", "latency")]
    assert [slo["name"] for slo in service_level["spec"]["slos"]] == expected
    pyrra = [m for m in resources if m["kind"] == "ServiceLevelObjective"]
    assert [m["metadata"]["name"] for m in pyrra] == [
        f"orders-synthetic-sla-probe-{name}" for name in expected
    ]
    assert [m["metadata"]["labels"]["pyrra.dev/stage"] for m in pyrra] == [
        stage for stage in stages for _ in range(2)
    ]


def test_the_resources_are_valid_for_their_crds() -> None:
    """Sloth's CRD from the module it was built from; Pyrra's from its v0.9.5 release."""
    resources = _chart_resources(KAFKA_AND_SPARK)
    assert {m["kind"] for m in resources} == {"PrometheusServiceLevel", "ServiceLevelObjective"}
    for manifest in resources:
        validate_crd(manifest, "1.29.0")
    plain = [yaml.safe_load(p.read_text()) for p in sorted(PYRRA_DIR.glob("*.yaml"))]
    for objective in plain:
        validate_crd({**objective, "metadata": {**objective["metadata"]}}, "1.29.0")


def test_an_invalid_resource_is_caught() -> None:
    """The CRD validation rejects what the API server would (it is not vacuous)."""
    resources = _chart_resources(VALUE_SETS["default"])
    service_level = next(m for m in resources if m["kind"] == "PrometheusServiceLevel")
    service_level["spec"]["slos"][0]["sli"]["events"]["errorQueryTypo"] = "x"
    with pytest.raises(ValidationError, match="errorQueryTypo"):
        validate_crd(service_level, "1.29.0")
    objective = next(m for m in resources if m["kind"] == "ServiceLevelObjective")
    del objective["spec"]["window"]
    with pytest.raises(ValidationError, match="window"):
        validate_crd(objective, "1.29.0")


# -- Sloth, for real -----------------------------------------------------------------------


def test_sloth_is_the_pinned_version_built_from_source() -> None:
    """Its Go build info names the module version (``sloth version`` says "dev")."""
    assert built_version(Path(_sloth()), go_command()) == SLOTH_VERSION
    assert sloth_crd().exists(), "`make sloth` copies Sloth's CRD beside the binary"


def test_sloth_generates_rules_promtool_accepts(tmp_path: Path) -> None:
    rules = _generate(SLOTH_SPEC, tmp_path / "sloth.rules.yml")
    result = _run(_tool("promtool"), "check", "rules", str(tmp_path / "sloth.rules.yml"))
    # Per SLO: 8 SLI windows, 7 meta records, a page and a ticket.
    assert f"SUCCESS: {len(STAGES) * 2 * 17} rules found" in result.stdout
    alerts = [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
    assert {(a["alert"], a["labels"]["stage"], a["labels"]["severity"]) for a in alerts} == {
        (f"SyntheticSla{sli}BudgetBurn", stage, severity)
        for sli in ("Availability", "Latency")
        for stage in STAGES
        for severity in ("critical", "warning")
    }


def test_the_chart_resource_and_the_plain_spec_give_sloth_the_same_rules(
    tmp_path: Path,
) -> None:
    """The plain prometheus/v1 file is the PrometheusServiceLevel's spec, key for key."""
    service_level, _ = render_slo_specs.render_slo_resources()
    resource = tmp_path / "service-level.yaml"
    resource.write_text(yaml.safe_dump(service_level))
    from_resource = _generate(resource, tmp_path / "from-resource.rules.yml")
    from_plain = _generate(SLOTH_SPEC, tmp_path / "from-plain.rules.yml")
    # A Kubernetes spec comes out as a PrometheusRule; Sloth's info series says which spec.
    groups = from_resource.get("spec", from_resource)["groups"]
    for rules in (groups, from_plain["groups"]):
        for group in rules:
            for rule in group["rules"]:
                for label in ("sloth_spec", "sloth_mode"):
                    rule.get("labels", {}).pop(label, None)
    assert groups == from_plain["groups"]


def test_sloth_rules_page_on_the_shipped_outages(tmp_path: Path) -> None:
    """tests/rules/sloth/burn.yml: Sloth's rules beside ours, on the same series."""
    _generate(SLOTH_SPEC, tmp_path / "sloth.rules.yml")
    shutil.copy(PLAIN_RULES, tmp_path / PLAIN_RULES.name)
    unit_test = tmp_path / SLOTH_UNIT_TEST.name
    shutil.copy(SLOTH_UNIT_TEST, unit_test)
    result = _run(_tool("promtool"), "test", "rules", str(unit_test), timeout=300)
    assert "SUCCESS" in result.stdout


# -- Pyrra ---------------------------------------------------------------------------------


def _pyrra_objectives() -> list[dict[str, Any]]:
    return [yaml.safe_load(path.read_text()) for path in sorted(PYRRA_DIR.glob("*.yaml"))]


def test_pyrra_objectives_pass_its_admission_checks() -> None:
    """What Pyrra's webhook (ServiceLevelObjective.validate, v0.9.5) refuses or warns of."""
    objectives = _pyrra_objectives()
    assert len(objectives) == len(STAGES) * 2
    for objective in objectives:
        spec = objective["spec"]
        target = float(spec["target"])
        assert 1 <= target < 100, "a percentage, not a ratio (Pyrra warns below 1)"
        assert spec["window"] == "30d"
        indicator = spec["indicator"]
        if "ratio" in indicator:
            ratio = indicator["ratio"]
            assert ratio["errors"]["metric"] != ratio["total"]["metric"]
        else:
            latency = indicator["latency"]
            assert latency["total"]["metric"].split("{")[0].endswith("_count")
            bucket, matchers = latency["success"]["metric"].rstrip("}").split("{")
            assert bucket.endswith("_bucket")
            (le,) = [m for m in matchers.split(",") if m.startswith("le=")]
            float(json.loads(le.removeprefix("le=")))  # an exact float, as Pyrra requires
        assert indicator[next(iter(indicator))]["grouping"] == ["target"]


def test_pyrra_selectors_count_what_the_shipped_slis_count(tmp_path: Path) -> None:
    """Each objective's metrics, as Pyrra aggregates them (by its grouping), give the shipped
    rules' SLI on the same series: a stage with slow and lost canaries, and none of another
    stage's series leaking in. promtool parses every selector on the way."""
    records = []
    checks = []
    for objective in _pyrra_objectives():
        record = "pyrra:" + objective["metadata"]["name"].replace("-", "_") + ":ratio"
        stage = objective["metadata"]["labels"]["pyrra.dev/stage"]
        indicator = objective["spec"]["indicator"]

        def rate(metric: str) -> str:
            return f"sum by (target) (rate({metric}[30m]))"

        if "ratio" in indicator:
            ratio = indicator["ratio"]
            good = f"1 - {rate(ratio['errors']['metric'])} / {rate(ratio['total']['metric'])}"
            shipped = "target_stage:synthetic_sla_availability:ratio_rate30m"
        else:
            latency = indicator["latency"]
            good = f"{rate(latency['success']['metric'])} / {rate(latency['total']['metric'])}"
            shipped = "target_stage:synthetic_sla_latency:ratio_rate30m"
        records.append({"record": record, "expr": good})
        checks.append(
            {
                "expr": f'abs({record} - on (target) {shipped}{{stage="{stage}"}}) < bool 1e-12',
                "eval_time": "60m",
                "exp_samples": [{"labels": '{target="kafka"}', "value": 1}],
            }
        )
    rules = tmp_path / "pyrra-slis.rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "pyrra-slis", "rules": records}]}))
    shutil.copy(PLAIN_RULES, tmp_path / PLAIN_RULES.name)
    series = []
    for number, stage in enumerate(STAGES):
        fast, slow, lost = 6 + number, 2, 1  # a different mix per stage
        threshold = "5.0" if stage == "sink" else "0.5"
        labels = f'target="kafka",stage="{stage}"'
        series += [
            {
                "series": f'synthetic_sla_canaries_total{{{labels},outcome="delivered"}}',
                "values": f"0+{fast + slow}x60",
            },
            {
                "series": f'synthetic_sla_canaries_total{{{labels},outcome="lost"}}',
                "values": f"0+{lost}x60",
            },
            {
                "series": f'synthetic_sla_e2e_latency_seconds_bucket{{{labels},le="{threshold}"}}',
                "values": f"0+{fast}x60",
            },
            {
                "series": f"synthetic_sla_e2e_latency_seconds_count{{{labels}}}",
                "values": f"0+{fast + slow}x60",
            },
        ]
    unit_test = tmp_path / "pyrra.test.yml"
    unit_test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name, PLAIN_RULES.name],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
            }
        )
    )
    result = _run(_tool("promtool"), "test", "rules", str(unit_test))
    assert "SUCCESS" in result.stdout
