"""The chart's reconcile values: `sla-probe reconcile` as a Deployment (`--every`) or a
CronJob, rendered by Helm's own engine and validated against the Kubernetes schemas,
and the reconciliation alerts following the values."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.test_chart import CHART, KUBERNETES_VERSIONS, Manifest, render, validate
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
