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
import importlib.resources
import json
import re
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
from probe.keys import KeyRing

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
    """The probe Deployment's pod and the helm test pod."""
    yield "probe", only(manifests, "Deployment")["spec"]["template"]["spec"]
    yield "helm-test", only(manifests, "Pod", "helm-test")["spec"]


# -- the Prometheus Operator's kinds -------------------------------------------------------

# The operator's Duration: units from years to milliseconds, largest first.
_DURATION = {
    "type": "string",
    "pattern": "^(0|"
    + "".join(f"(([0-9]+){u})?" for u in ("y", "w", "d", "h", "m", "s", "ms"))
    + ")$",
}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
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


@cache
def _kubernetes_definitions(version: str) -> referencing.Resource[Any]:
    directory = f"v{version}-local-strict"
    path = importlib.resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", directory, "_definitions.json"
    )
    return referencing.Resource.from_contents(json.loads(path.read_text()))


def validate_crd(manifest: Manifest, version: str) -> None:
    schema = CRD_SCHEMAS[manifest["kind"]]
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(
        "https://kubernetes.io/api/_definitions.json", _kubernetes_definitions(version)
    )
    jsonschema.Draft202012Validator(schema, registry=registry).validate(manifest)


def validate(manifest: Manifest) -> None:
    for version in KUBERNETES_VERSIONS:
        if manifest["kind"] in CRD_SCHEMAS:
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
                "Deployment",
                "Pod",
                "ServiceMonitor",
                "PrometheusRule",
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
        # A CPU limit would throttle the event loop and show up as canary latency.
        assert "cpu" not in container["resources"]["limits"], which
        _assert_only_spark_scratch_is_writable(pod, spark=values_name == "all-features")


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
    assert container["args"] == ["once"]
    env = {e["name"]: e for e in container["env"]}
    # Its own probe id: it never claims the running probes' canaries.
    assert env["SLA_PROBE_PROBE_ID"]["value"] == "orders-helm-test"
    probe = only(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["spec"]["volumes"] == probe["volumes"]
    assert container["volumeMounts"] == probe["containers"][0]["volumeMounts"]


def test_service_keeps_scraping_a_not_ready_probe() -> None:
    manifests = render(VALUE_SETS["all-features"])
    service = only(manifests, "Service")
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["name"] == "metrics"
    # The Service selects the probe pods only, never the helm test pod.
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "probe"
    monitor = only(manifests, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # The job label the probe-down alerts select comes from this Service label.
    job_label = monitor["spec"]["jobLabel"]
    assert service["metadata"]["labels"][job_label] == "synthetic-sla-probe"
    assert set(monitor["spec"]["selector"]["matchLabels"].items()) <= set(
        service["metadata"]["labels"].items()
    )


def test_network_policy_admits_scrapes_and_reaches_brokers_only() -> None:
    policy = only(render(VALUE_SETS["all-features"]), "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "probe"
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert ingress["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    dns, brokers = policy["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert brokers["ports"] == [{"port": 9093, "protocol": "TCP"}]


# -- the probe's config and keys ------------------------------------------------------------


def _config_file(manifests: list[Manifest], tmp_path: Path) -> Path:
    holder = next(m for m in manifests if m["metadata"]["name"].endswith("-config"))
    if holder["kind"] == "Secret":
        text = holder["stringData"]["probe.yaml"]
    else:
        text = holder["data"]["probe.yaml"]
    path = tmp_path / "probe.yaml"
    path.write_text(text)
    return path


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
    if values_name == "all-features":
        # Spark on: the sink stage judges too, with the lateness the skew alert assumes.
        assert config.stages == ("consumer", "sink")
        assert config.sink.allowed_lateness == 60.0
        assert config.sink.path == "s3a://sla-probe/orders-sink"


def test_spark_needs_a_place_for_its_tables() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"config\.sink\.path"):
        render({**MINIMAL, "spark": {"enabled": True, "allowedLatenessSeconds": 60}})


def test_latency_threshold_follows_the_slo(tmp_path: Path) -> None:
    latency = {"objective": 0.99, "thresholdSeconds": 0.25, "sinkThresholdSeconds": 8}
    config = probe_config.load(
        _config_file(render({**MINIMAL, "slo": {"latency": latency}}), tmp_path)
    )
    assert config.metrics.latency_threshold == 0.25
    assert config.sink.latency_threshold == 8.0


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
        ({"config": {"interval": "20s"}}, "/config/interval"),
        ({"alerts": {"probeDown": {"enabled": True, "severity": "page", "for": "5 min"}}}, "for"),
        ({"alerts": {"partitionSilent": {"enabled": True, "severity": "urgent"}}}, "severity"),
        ({"serviceMonitr": {"enabled": True}}, "serviceMonitr"),
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


def test_tracing_values_become_the_standard_otel_variables() -> None:
    container = only(render(VALUE_SETS["all-features"]), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
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
