"""The chart's reconcile values: `sla-probe reconcile` as a Deployment (`--every`) or a
CronJob, rendered by Helm's own engine and validated against the Kubernetes schemas,
and the reconciliation alerts following the values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import pytest

from probe.config import ProbeConfig, load, require_for_reconcile
from tests.test_chart import (
    CHART,
    KUBERNETES_VERSIONS,
    VALUE_SETS,
    Manifest,
    _config_text,
    render,
    validate,
)
from tests.test_slo_rules import render_rules

VALUES: dict[str, Any] = {
    "config": {
        "kafka": {"bootstrap_servers": "kafka-0.kafka:9092"},
        "sink": {"path": "s3a://bucket/sla-sink"},
    },
    "reconcile": {"enabled": True},
}


def _with(mode: str, **reconcile: Any) -> dict[str, Any]:
    return {**VALUES, "reconcile": {"enabled": True, "mode": mode, **reconcile}}


def _reconcile(manifests: list[Manifest], kind: str) -> Manifest:
    (found,) = [
        m
        for m in manifests
        if m["kind"] == kind
        and m["metadata"]["labels"].get("app.kubernetes.io/component") == "reconcile"
    ]
    return found


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_every_rendered_manifest_is_valid(mode: str) -> None:
    manifests = render(_with(mode))
    for manifest in manifests:
        validate(manifest)
    kinds = {m["kind"] for m in manifests if "reconcile" in m["metadata"]["name"]}
    assert kinds == ({"Deployment", "Service"} if mode == "deployment" else {"CronJob"})


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
@pytest.mark.parametrize("kube_version", KUBERNETES_VERSIONS)
def test_lint_is_clean(mode: str, kube_version: str) -> None:
    report = helm.lint(CHART, _with(mode), strict=True, kube_version=f"v{kube_version}")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_deployment_reconciles_every_period_and_is_scraped_like_the_probe() -> None:
    manifests = render(_with("deployment", everySeconds=600))
    deployment = _reconcile(manifests, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["reconcile", "--every", "600s"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = _reconcile(manifests, "Service")
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "reconcile"
    # The probe's own Service and Deployment never select the reconciler's pod.
    probe = next(m for m in manifests if m["kind"] == "Deployment" and m is not deployment)
    assert probe["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == "probe"
    _assert_hardened(pod)


def test_the_cronjob_runs_once_per_schedule_under_the_jobs_name() -> None:
    cronjob = _reconcile(render(_with("cronjob", schedule="*/10 * * * *")), "CronJob")
    assert cronjob["spec"]["schedule"] == "*/10 * * * *"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["reconcile", "--run-id", "$(JOB_NAME)"]
    env = {e["name"]: e for e in container["env"]}
    assert env["JOB_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"
    assert pod["restartPolicy"] == "Never"
    _assert_hardened(pod)


def _assert_hardened(pod: Manifest) -> None:
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "cpu" not in container["resources"]["limits"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [
        m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in volumes[m["name"]]
    ]
    assert writable == ["/tmp"]  # Spark's scratch, nothing else


def test_without_a_table_the_chart_refuses_to_render() -> None:
    values = {**_with("deployment"), "config": {"kafka": {"bootstrap_servers": "k:9092"}}}
    with pytest.raises(Exception, match=r"reconcile\.enabled needs config\.reconcile\.table"):
        render(values)


def test_the_alerts_follow_the_reconcile_values() -> None:
    groups = render_rules.render_rule_groups(
        {
            "reconcile": {
                "everySeconds": 120,
                "alerts": {
                    "mismatch": {
                        "enabled": True,
                        "severity": "ticket",
                        "threshold": 0.001,
                        "for": "30m",
                    },
                    "stale": {"enabled": True, "severity": "page", "runs": 5, "for": "10m"},
                },
            }
        }
    )
    (group,) = [g for g in groups["groups"] if g["name"] == "synthetic-sla-reconciliation"]
    alerts = {rule["alert"]: rule for rule in group["rules"] if "alert" in rule}
    mismatch = alerts["SyntheticSlaReconciliationMismatch"]
    assert mismatch["expr"].endswith("> 0.001")
    assert (mismatch["for"], mismatch["labels"]["severity"]) == ("30m", "warning")
    stale = alerts["SyntheticSlaReconciliationStale"]
    assert stale["expr"].endswith("> 600")  # 5 runs of 120 s
    assert (stale["for"], stale["labels"]["severity"]) == ("10m", "critical")
    off = render_rules.render_rule_groups(
        {
            "reconcile": {
                "alerts": {
                    "stale": {"enabled": False, "severity": "ticket", "runs": 3, "for": "5m"}
                }
            }
        }
    )
    (group,) = [g for g in off["groups"] if g["name"] == "synthetic-sla-reconciliation"]
    assert [r.get("alert") for r in group["rules"] if "alert" in r] == [
        "SyntheticSlaReconciliationMismatch"
    ]


def test_with_the_sink_in_its_own_deployment_reconcile_reads_the_sinks_own_table(
    tmp_path: Path,
) -> None:
    """spark.enabled leaves probe.yaml without a sink path (helm test must never touch
    the live sink's tables): reconcile reads reconcile.yaml, where the sink's table is
    where the sink workload writes it, per release here, and the object store's
    settings come along, but not the sink pod's Spark sizing."""
    features = VALUE_SETS["all-features"]
    values = {
        **features,
        "spark": {**features["spark"], "sinkPathPerRelease": True},
        "reconcile": {"enabled": True},
    }
    manifests = render(values)
    (container,) = _reconcile(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    variables = {variable["name"]: variable.get("value") for variable in container["env"]}
    assert variables["SLA_PROBE_CONFIG"] == "/etc/sla-probe/config/reconcile.yaml"
    # As the pod loads it: the key file from its variable.
    key_file = {"signing_key_file": variables["SLA_PROBE_SIGNING_KEY_FILE"]}
    reconcile = _loaded(manifests, tmp_path, "reconcile.yaml", key_file)
    sink = _loaded(manifests, tmp_path, "sink.yaml")
    probes = _loaded(manifests, tmp_path, "probe.yaml")
    assert sink.sink.path == "s3a://sla-probe/orders-sink/streaming/orders"
    assert reconcile.sink.path == sink.sink.path
    table, report = require_for_reconcile(reconcile)
    assert (table, report) == (f"{sink.sink.path}/canaries", f"{sink.sink.path}/reconciliation")
    assert probes.sink.path is None
    region = "spark.hadoop.fs.s3a.endpoint.region"
    assert reconcile.sink.spark_conf[region] == sink.sink.spark_conf[region]
    assert "spark.driver.memory" in sink.sink.spark_conf
    assert "spark.driver.memory" not in reconcile.sink.spark_conf
    assert reconcile.sink.master != sink.sink.master


def _loaded(
    manifests: list[Manifest], tmp_path: Path, name: str, overrides: dict[str, Any] | None = None
) -> ProbeConfig:
    path = tmp_path / name
    path.write_text(_config_text(manifests, name))
    return load(path, overrides or {})
