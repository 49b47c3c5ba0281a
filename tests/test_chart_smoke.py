"""The chart's smokeTest values: a CronJob running `sla-probe once` as the helm test does,
pushing its result to a Pushgateway through a config file of its own (smoke.yaml),
rendered by Helm's own engine and validated against the Kubernetes schemas; and the
smoke test's alerts following the values."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from probe import config as probe_config
from tests.test_chart import (
    CHART,
    KUBERNETES_VERSIONS,
    MINIMAL,
    Manifest,
    _config_text,
    _with,
    components,
    only,
    render,
    validate,
)
from tests.test_slo_rules import render_rules

PUSH_GATEWAY = "https://pushgateway.monitoring:9091"

SMOKE: dict[str, Any] = _with(
    MINIMAL,
    smokeTest={
        "enabled": True,
        "schedule": "*/15 * * * *",
        "periodSeconds": 900,
        "activeDeadlineSeconds": 240,
        "pushGateway": {
            "url": PUSH_GATEWAY,
            "grouping": {"cluster": "eu-west-1"},
            "timeout": "5s",
            "username": "smoke",
            "existingSecret": {"name": "pushgateway-auth", "key": "smoke-password"},
            "tls": {"existingSecret": "pushgateway-ca", "certKey": ""},
        },
    },
)

PUSH_MOUNTS = {
    "push-gateway-password": ("pushgateway-auth", {"smoke-password": "password"}),
    "push-gateway-tls": ("pushgateway-ca", {"ca.crt": "ca.crt"}),
}


def _cronjob(manifests: list[Manifest]) -> Manifest:
    return only(manifests, "CronJob", "smoke-test")


def _pod(manifests: list[Manifest]) -> Manifest:
    pod: Manifest = _cronjob(manifests)["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pod


def test_every_rendered_manifest_is_valid() -> None:
    manifests = render(SMOKE)
    for manifest in manifests:
        validate(manifest)
    assert [m["kind"] for m in components(manifests, "smoke-test")] == ["CronJob"]


@pytest.mark.parametrize("kube_version", KUBERNETES_VERSIONS)
def test_lint_is_clean(kube_version: str) -> None:
    report = helm.lint(CHART, SMOKE, strict=True, kube_version=f"v{kube_version}")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_nothing_is_rendered_while_disabled() -> None:
    manifests = render(MINIMAL)
    assert components(manifests, "smoke-test") == []
    assert not [m for m in manifests if "smoke" in m["metadata"]["name"]]
    config = only(manifests, "ConfigMap")
    assert set(config["data"]) == {"probe.yaml"}
    # Its settings alone render nothing either, not even the check of its URL.
    idle = _with(MINIMAL, smokeTest={"schedule": "0 * * * *", "pushGateway": {"url": ""}})
    assert components(render(idle), "smoke-test") == []


def test_the_cronjob_runs_once_per_schedule_and_never_retries() -> None:
    cronjob = _cronjob(render(SMOKE))
    spec = cronjob["spec"]
    assert spec["schedule"] == "*/15 * * * *"
    # Never two runs at once, pushing to one group; a slot missed by a period is skipped.
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] == 900
    job = spec["jobTemplate"]["spec"]
    # A failed smoke test is a result: no retry; and a run is bounded.
    assert job["backoffLimit"] == 0
    assert job["activeDeadlineSeconds"] == 240
    pod = _pod([cronjob])
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    # As the helm test: the consumer stage only (never a query on the live sink's
    # checkpoint), and the running probe owns the topic.
    assert container["args"] == ["once", "--stages", "consumer", "--no-create-topic"]
    assert container["resources"]["limits"] == {"memory": "256Mi"}
    assert "cpu" not in container["resources"]["limits"]
    # Hardened like every pod of the release.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_smoke_test_has_the_release_config_keys_and_the_push_secrets() -> None:
    manifests = render(SMOKE)
    pod = _pod(manifests)
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    # A probe id of its own: the running probes and the helm test have others.
    assert env["SLA_PROBE_PROBE_ID"]["value"] == "orders-smoke"
    assert env["SLA_PROBE_CONFIG"]["value"] == "/etc/sla-probe/config/smoke.yaml"
    assert env["SLA_PROBE_SIGNING_KEY_FILE"]["value"] == "/etc/sla-probe/keys/keys.json"
    # The helm test pod's volumes and mounts (the release's config, key ring, Secrets and
    # extras), and the push's Secrets, which no other pod mounts.
    helm_test = only(manifests, "Pod", "helm-test")["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert pod["volumes"][: len(helm_test["volumes"])] == helm_test["volumes"]
    helm_test_mounts = helm_test["containers"][0]["volumeMounts"]
    assert container["volumeMounts"][: len(helm_test_mounts)] == helm_test_mounts
    assert set(volumes) == {v["name"] for v in helm_test["volumes"]} | set(PUSH_MOUNTS)
    for volume, (secret, items) in PUSH_MOUNTS.items():
        assert volumes[volume]["secret"]["secretName"] == secret
        given = {i["key"]: i["path"] for i in volumes[volume]["secret"]["items"]}
        assert given == items, volume
        assert mounts[volume] == {
            "name": volume,
            "mountPath": f"/etc/sla-probe/{volume}",
            "readOnly": True,
        }
    for manifest in manifests:
        if manifest["kind"] in {"Deployment", "Pod"}:
            spec = manifest["spec"].get("template", {}).get("spec", manifest["spec"])
            assert not set(PUSH_MOUNTS) & {v["name"] for v in spec["volumes"]}


def test_smoke_config_is_the_probe_config_with_the_push_settings() -> None:
    manifests = render(SMOKE)
    probe = yaml.safe_load(_config_text(manifests))
    smoke = yaml.safe_load(_config_text(manifests, "smoke.yaml"))
    # Only the smoke test pushes: the probes' and the helm test's file has no push.
    assert "once" not in probe
    push = smoke.pop("once")["push_gateway"]
    assert smoke == probe
    assert push == {
        "url": PUSH_GATEWAY,
        "job": "synthetic-sla-smoke",
        # The CronJob's group, apart from a deploy pipeline's for the same target.
        "instance": "orders-smoke",
        "grouping": {"cluster": "eu-west-1"},
        "timeout": "5s",
        "username": "smoke",
        "password_file": "/etc/sla-probe/push-gateway-password/password",
        "tls": {"ca_file": "/etc/sla-probe/push-gateway-tls/ca.crt"},
    }
    # pushGateway.instance names the group instead; config.once keeps its
    # other settings, and its own push_gateway stays the helm test's.
    values = _with(
        SMOKE,
        config={"once": {"rounds": 5, "push_gateway": {"url": "http://ci-gateway:9091"}}},
        smokeTest={"pushGateway": {"instance": "eu-west-1-orders"}},
    )
    rendered = render(values)
    once = yaml.safe_load(_config_text(rendered, "smoke.yaml"))["once"]
    assert once["rounds"] == 5
    assert once["push_gateway"]["url"] == PUSH_GATEWAY
    assert once["push_gateway"]["instance"] == "eu-west-1-orders"
    helm_test_once = yaml.safe_load(_config_text(rendered))["once"]
    assert helm_test_once["push_gateway"] == {"url": "http://ci-gateway:9091"}


def test_smoke_config_is_one_the_probe_loads(tmp_path: Path) -> None:
    """With the push's Secrets where the pod has them (here: rewritten to tmp_path)."""
    text = _config_text(render(SMOKE), "smoke.yaml")
    for volume in PUSH_MOUNTS:
        (tmp_path / volume).mkdir()
        for name in ("password", "ca.crt"):
            (tmp_path / volume / name).write_text("pushed-by-a-secret\n")
        text = text.replace(f"/etc/sla-probe/{volume}", str(tmp_path / volume))
    path = tmp_path / "smoke.yaml"
    path.write_text(text)
    config = probe_config.load(path)
    push = config.once.push_gateway
    assert push is not None
    assert push.url == PUSH_GATEWAY
    assert push.job == "synthetic-sla-smoke"
    assert push.instance == "orders-smoke"
    assert push.timeout == 5.0
    assert push.password_value() == "pushed-by-a-secret"
    assert push.tls is not None
    assert push.tls.ca_file == tmp_path / "push-gateway-tls" / "ca.crt"


def test_without_a_push_gateway_the_chart_refuses_to_render() -> None:
    values = _with(SMOKE, smokeTest={"pushGateway": {"url": ""}})
    with pytest.raises(helm.HelmRenderError, match=r"smokeTest\.pushGateway\.url, e\.g\. http"):
        render(values)
    # A password without the user it belongs to is refused by name too.
    values = _with(SMOKE, smokeTest={"pushGateway": {"username": ""}})
    with pytest.raises(helm.HelmRenderError, match=r"needs smokeTest\.pushGateway\.username"):
        render(values)


def test_an_existing_config_holds_the_push_settings() -> None:
    """existingConfig is not the chart's to read: its smoke.yaml says where to push."""
    values = copy.deepcopy(SMOKE)
    values["existingConfig"] = {"kind": "Secret", "name": "team-probe-config"}
    values["smokeTest"]["pushGateway"]["url"] = ""
    manifests = render(values)
    pod = _pod(manifests)
    config = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config["secret"] == {"secretName": "team-probe-config"}
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SLA_PROBE_CONFIG"]["value"] == "/etc/sla-probe/config/smoke.yaml"
    # The push's Secrets are still mounted, where its smoke.yaml can name them.
    assert set(PUSH_MOUNTS) <= {v["name"] for v in pod["volumes"]}


PASSWORD = "hunter2-must-not-render"


@pytest.mark.parametrize(
    "values",
    [
        SMOKE,
        # Inline in the config, the old way: the config goes to a Secret, never elsewhere.
        _with(
            SMOKE,
            config={"once": {"push_gateway": {"password": PASSWORD}}},
            storeConfigInSecret=True,
        ),
    ],
    ids=["existing-secret", "store-config-in-secret"],
)
def test_no_password_in_any_manifest_but_the_config_secret(values: dict[str, Any]) -> None:
    for manifest in render(values):
        if manifest["kind"] == "Secret" and manifest["metadata"]["name"].endswith("-config"):
            continue
        assert PASSWORD not in yaml.safe_dump(manifest), manifest["metadata"]["name"]


def test_a_push_password_never_goes_into_a_configmap() -> None:
    values = _with(SMOKE, config={"once": {"push_gateway": {"password": PASSWORD}}})
    with pytest.raises(helm.HelmRenderError, match=r"once\.push_gateway\.password") as caught:
        render(values)
    assert PASSWORD not in str(caught.value)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        # Never a password in the values: a Secret's key only.
        ({"pushGateway": {"url": PUSH_GATEWAY, "password": PASSWORD}}, "properties 'password' not"),
        ({"pushGateway": {"url": "pushgateway:9091"}}, "/smokeTest/pushGateway/url"),
        (
            {"pushGateway": {"url": PUSH_GATEWAY, "grouping": {"target": "x"}}},
            "propertyName 'target'",
        ),
        ({"pushGateway": {"url": PUSH_GATEWAY, "timeout": "ten seconds"}}, "/pushGateway/timeout"),
        ({"periodSeconds": "30m"}, "/smokeTest/periodSeconds"),
        ({"concurrencyPolicy": "Allow"}, "properties 'concurrencyPolicy' not"),
    ],
)
def test_the_values_schema_rejects_mistakes(change: dict[str, Any], complaint: str) -> None:
    values = _with(SMOKE, smokeTest=change)
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=complaint):
        chart.validate_schema(values)


def test_a_long_release_name_leaves_room_for_the_jobs_suffix() -> None:
    values = _with(
        SMOKE, fullnameOverride="a-release-name-of-exactly-sixty-three-characters-for-this-test"
    )
    cronjob = _cronjob(render(values))
    assert len(cronjob["metadata"]["name"]) <= 52
    assert cronjob["metadata"]["name"].endswith("-smoke")


# -- the alerts --------------------------------------------------------------------------


def _smoke_alerts(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    groups = render_rules.render_rule_groups(values)
    (group,) = [g for g in groups["groups"] if g["name"] == "synthetic-sla-smoke"]
    return {rule["alert"]: rule for rule in group["rules"]}


def test_the_alerts_follow_the_smoke_values() -> None:
    alerts = _smoke_alerts(
        {
            "smokeTest": {"periodSeconds": 900},
            "alerts": {
                "smokeTest": {
                    "failed": {"enabled": True, "severity": "page", "for": "2m"},
                    "stale": {"enabled": True, "severity": "ticket", "periods": 4, "for": "10m"},
                }
            },
        }
    )
    failed = alerts["SyntheticSlaSmokeTestFailed"]
    assert failed["expr"] == "max by (job, instance, target) (synthetic_sla_smoke_success) == 0"
    assert (failed["for"], failed["labels"]["severity"]) == ("2m", "critical")
    stale = alerts["SyntheticSlaSmokeTestStale"]
    assert stale["expr"] == (
        "time() - max by (job, instance, target) "
        "(synthetic_sla_smoke_last_run_timestamp_seconds) > 3600"
    )
    assert (stale["for"], stale["labels"]["severity"]) == ("10m", "warning")
    assert "4 periods (3600s at one run every 900s)" in stale["annotations"]["description"]


def test_the_alerts_are_there_whatever_smoke_test_enabled_says() -> None:
    """A deploy pipeline may push without the CronJob: the default rules cover it."""
    alerts = _smoke_alerts({})
    assert alerts["SyntheticSlaSmokeTestStale"]["expr"].endswith(") > 5400")
    assert alerts["SyntheticSlaSmokeTestFailed"]["for"] == "5m"
    off = {"enabled": False, "severity": "ticket", "for": "5m"}
    values = {"alerts": {"smokeTest": {"failed": off, "stale": {**off, "periods": 3}}}}
    groups = render_rules.render_rule_groups(values)
    assert "synthetic-sla-smoke" not in {g["name"] for g in groups["groups"]}
