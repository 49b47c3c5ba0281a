"""The chart keeps secrets out of its values: the SASL and MQTT passwords and the TLS
keys come from existing Secrets, mounted as files the rendered config points at; the
whole config may come from an existing ConfigMap or Secret. And its schema takes
durations as the probe does (``interval: 20s``)."""

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
    Manifest,
    _config_file,
    _with,
    only,
    pod_specs,
    render,
    validate,
)

PASSWORD = "hunter2-must-not-render"
SASL_USER = {"mechanism": "SCRAM-SHA-512", "username": "sla-probe"}

SECURED = {
    "config": {
        "kafka": {"bootstrap_servers": "kafka-0.kafka:9093", "sasl": SASL_USER},
        "stages": ["consumer", "mirror"],
        "mirror": {"bootstrap_servers": "dr-kafka-0.dr:9093", "sasl": SASL_USER},
        "mqtt": {"url": "mqtts://mqtt.example:8883", "username": "probe"},
        "targets": ["kafka", "mqtt"],
        "sink": {"path": "s3a://sla/orders"},
        "reconcile": {"table": "s3a://sla/orders/canaries"},
    },
    "kafka": {
        "sasl": {"existingSecret": {"name": "kafka-user", "key": "password"}},
        "tls": {"existingSecret": "kafka-client-tls"},
    },
    # The mirror stage's target cluster: credentials of its own.
    "mirror": {
        "sasl": {"existingSecret": {"name": "dr-user", "key": "password"}},
        "tls": {"existingSecret": "dr-ca", "certKey": ""},
    },
    "mqtt": {
        "existingSecret": {"name": "mqtt-user", "key": "pw"},
        "tls": {"existingSecret": "mqtt-ca", "certKey": ""},
    },
    "spark": {"enabled": True, "s3a": {"connector": "image"}},
    "reconcile": {"enabled": True},
}

MOUNTS = {
    "kafka-sasl": ("kafka-user", {"password": "password"}),
    "kafka-tls": (
        "kafka-client-tls",
        {"ca.crt": "ca.crt", "tls.crt": "tls.crt", "tls.key": "tls.key"},
    ),
    "mirror-sasl": ("dr-user", {"password": "password"}),
    "mirror-tls": ("dr-ca", {"ca.crt": "ca.crt"}),
    "mqtt-password": ("mqtt-user", {"pw": "password"}),
    "mqtt-tls": ("mqtt-ca", {"ca.crt": "ca.crt"}),
}


def _pods(manifests: list[Manifest]) -> list[tuple[str, Manifest]]:
    pods = list(pod_specs(manifests))
    reconcile = [
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"].endswith("-reconcile")
    ]
    pods += [("reconcile", m["spec"]["template"]["spec"]) for m in reconcile]
    return pods


def test_passwords_and_keys_come_from_existing_secrets(tmp_path: Path) -> None:
    manifests = render(SECURED)
    for manifest in manifests:
        validate(manifest)
    pods = _pods(manifests)
    assert {name for name, _ in pods} == {"probe", "sink", "helm-test", "reconcile"}
    for name, pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        container = pod["containers"][0]
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        for volume, (secret, items) in MOUNTS.items():
            assert volumes[volume]["secret"]["secretName"] == secret, name
            given = {i["key"]: i["path"] for i in volumes[volume]["secret"]["items"]}
            assert given == items, (name, volume)
            assert mounts[volume]["mountPath"] == f"/etc/sla-probe/{volume}", name
            assert mounts[volume]["readOnly"] is True
    # No password in the config: a ConfigMap is fine, and the probe accepts it with the
    # files where the mounts put them.
    holder = next(m for m in manifests if m["metadata"]["name"].endswith("-config"))
    assert holder["kind"] == "ConfigMap"
    for name in ("probe.yaml", "sink.yaml"):
        written = yaml.safe_load(_config_file(manifests, tmp_path, name).read_text())
        assert written["kafka"]["sasl"] == {
            **SASL_USER,
            "password_file": "/etc/sla-probe/kafka-sasl/password",
        }
        assert written["kafka"]["tls"] == {
            "ca_file": "/etc/sla-probe/kafka-tls/ca.crt",
            "cert_file": "/etc/sla-probe/kafka-tls/tls.crt",
            "key_file": "/etc/sla-probe/kafka-tls/tls.key",
        }
        assert written["mirror"]["sasl"] == {
            **SASL_USER,
            "password_file": "/etc/sla-probe/mirror-sasl/password",
        }
        assert written["mirror"]["tls"] == {"ca_file": "/etc/sla-probe/mirror-tls/ca.crt"}
        assert written["mqtt"]["password_file"] == "/etc/sla-probe/mqtt-password/password"
        assert written["mqtt"]["tls"] == {"ca_file": "/etc/sla-probe/mqtt-tls/ca.crt"}


def test_the_rendered_config_is_one_the_probe_loads(tmp_path: Path) -> None:
    """With the Secrets' files where the pod has them (here: rewritten to tmp_path)."""
    text = _config_file(render(SECURED), tmp_path).read_text()
    for volume in MOUNTS:
        (tmp_path / volume).mkdir()
        for name in ("password", "ca.crt", "tls.crt", "tls.key"):
            (tmp_path / volume / name).write_text(PASSWORD + "\n")
        text = text.replace(f"/etc/sla-probe/{volume}", str(tmp_path / volume))
    path = tmp_path / "local.yaml"
    path.write_text(text)
    config = probe_config.load(path)
    assert config.kafka.sasl is not None
    assert config.kafka.sasl.password_value() == PASSWORD
    assert config.mirror.sasl is not None
    assert config.mirror.sasl.password_value() == PASSWORD
    assert config.mqtt.password_value() == PASSWORD


# Strimzi's mutual TLS (authentication: tls), as docs/secured-clusters.md gives it: the
# KafkaUser's Secret holds the user's certificate and key (user.crt, user.key), the
# cluster CA is in a Secret of its own (<cluster>-cluster-ca-cert, ca.crt).
STRIMZI_MUTUAL_TLS = {
    "config": {"kafka": {"bootstrap_servers": "orders-kafka-bootstrap:9093"}},
    "kafka": {
        "tls": {
            "existingSecret": "sla-probe",
            "certKey": "user.crt",
            "keyKey": "user.key",
            "caSecret": "orders-cluster-ca-cert",
        }
    },
}


def test_strimzi_mutual_tls_from_two_secrets(tmp_path: Path) -> None:
    manifests = render(STRIMZI_MUTUAL_TLS)
    for manifest in manifests:
        validate(manifest)
    for name, pod in pod_specs(manifests):
        volumes = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
        given = {
            volume: (volumes[volume]["secretName"], {i["key"]: i["path"] for i in items})
            for volume in ("kafka-tls", "kafka-tls-ca")
            if (items := volumes[volume]["items"])
        }
        assert given == {
            "kafka-tls": ("sla-probe", {"user.crt": "tls.crt", "user.key": "tls.key"}),
            "kafka-tls-ca": ("orders-cluster-ca-cert", {"ca.crt": "ca.crt"}),
        }, name
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["kafka-tls-ca"] == "/etc/sla-probe/kafka-tls-ca", name
    written = yaml.safe_load(_config_file(manifests, tmp_path).read_text())
    assert written["kafka"]["tls"] == {
        "ca_file": "/etc/sla-probe/kafka-tls-ca/ca.crt",
        "cert_file": "/etc/sla-probe/kafka-tls/tls.crt",
        "key_file": "/etc/sla-probe/kafka-tls/tls.key",
    }


@pytest.mark.parametrize("values", [SECURED, STRIMZI_MUTUAL_TLS], ids=["secured", "strimzi"])
def test_secrets_are_mounted_as_directories(values: dict[str, Any]) -> None:
    """The kubelet updates a Secret's files in a mounted volume, never one mounted with
    subPath: the probe re-reads rotated credentials only when they do change."""
    for name, pod in _pods(render(values)):
        for container in pod["containers"] + pod.get("initContainers", []):
            for mount in container.get("volumeMounts", []):
                assert "subPath" not in mount, (name, mount)
                assert "subPathExpr" not in mount, (name, mount)


@pytest.mark.parametrize(
    "values",
    [
        SECURED,
        _with(SECURED, existingConfig={"kind": "Secret", "name": "probe-config"}),
        # Inline, the old way: the config goes to a Secret, still never elsewhere.
        _with(
            SECURED,
            kafka={"sasl": {"existingSecret": {"name": "", "key": "password"}}},
            config={"kafka": {"sasl": {**SASL_USER, "password": PASSWORD}}},
            storeConfigInSecret=True,
        ),
    ],
    ids=["existing-secrets", "existing-config", "store-config-in-secret"],
)
def test_no_password_in_any_manifest_but_the_config_secret(values: dict[str, Any]) -> None:
    for manifest in render(values):
        if manifest["kind"] == "Secret" and manifest["metadata"]["name"].endswith("-config"):
            continue
        assert PASSWORD not in yaml.safe_dump(manifest), manifest["metadata"]["name"]


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"config": {"kafka": {"sasl": {"password": PASSWORD}}}}, r"config\.kafka\.sasl\.password"),
        ({"config": {"kafka": {"sasl": {"password_file": "/x"}}}}, r"kafka\.sasl\.password_file"),
        ({"config": {"kafka": {"tls": {"ca_file": "/x"}}}}, r"config\.kafka\.tls\.ca_file"),
        ({"config": {"mqtt": {"password": PASSWORD}}}, r"config\.mqtt\.password"),
        (
            {"config": {"mirror": {"sasl": {"password": PASSWORD}}}},
            r"config\.mirror\.sasl\.password",
        ),
        ({"config": {"mirror": {"tls": {"ca_file": "/x"}}}}, r"config\.mirror\.tls\.ca_file"),
    ],
)
def test_a_secret_given_twice_is_refused(change: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=complaint) as caught:
        render(_with(SECURED, storeConfigInSecret=True, **change))
    assert PASSWORD not in str(caught.value)


def test_the_sasl_secret_needs_the_mechanism_and_user() -> None:
    values = copy.deepcopy(SECURED)  # _with shares what it leaves alone
    del values["config"]["kafka"]["sasl"]
    with pytest.raises(helm.HelmRenderError, match=r"config\.kafka\.sasl\.mechanism"):
        render(values)


@pytest.mark.parametrize("kind", ["ConfigMap", "Secret"])
def test_the_whole_config_from_an_existing_object(kind: str) -> None:
    values = {
        # No brokers in the values: the config is not the chart's to render.
        "config": {"interval": "30s"},
        "existingConfig": {"kind": kind, "name": "team-probe-config"},
        "prometheusRule": {"enabled": True},
    }
    manifests = render(values)
    for manifest in manifests:
        validate(manifest)
    assert not [m for m in manifests if m["metadata"]["name"].endswith("-config")]
    for _, pod in pod_specs(manifests):
        config = next(v for v in pod["volumes"] if v["name"] == "config")
        if kind == "Secret":
            assert config["secret"] == {"secretName": "team-probe-config"}
        else:
            assert config["configMap"] == {"name": "team-probe-config"}
    rule = yaml.safe_dump(only(manifests, "PrometheusRule"))
    assert "threshold 90s: max(60s, 3 x the 30s interval)" in rule


# -- the schema takes the probe's durations --------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "seconds"),
    [
        ("20s", 20.0),
        ("500ms", 0.5),
        ("1m", 60.0),
        ("1m30s", 90.0),
        (20, 20.0),
        (2.5, 2.5),
        ("45", 45.0),
    ],
)
def test_interval_takes_the_probes_durations(
    tmp_path: Path, interval: object, seconds: float
) -> None:
    values = {"config": {"interval": interval, "kafka": {"bootstrap_servers": "k:9092"}}}
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
    manifests = render({**values, "prometheusRule": {"enabled": True}})
    if seconds >= 1:
        assert probe_config.load(_config_file(manifests, tmp_path)).interval == seconds
    silent_after = max(60.0, 3 * seconds)
    assert f"threshold {silent_after:g}s" in yaml.safe_dump(only(manifests, "PrometheusRule"))


@pytest.mark.parametrize("interval", ["20 seconds", "20sec", "s", "-5s", 0, -1])
def test_interval_refuses_what_the_probe_refuses(interval: object) -> None:
    values = {"config": {"interval": interval, "kafka": {"bootstrap_servers": "k:9092"}}}
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmValuesError, match="interval"):
        chart.validate_schema(values)


WEB = _with(
    SECURED,
    webConfig={"existingSecret": "probe-web"},
    serviceMonitor={
        "enabled": True,
        "tlsConfig": {"ca": {"secret": {"name": "probe-web", "key": "ca.crt"}},
                      "serverName": "sla-probe"},
        "basicAuth": {"username": {"name": "probe-scrape", "key": "username"},
                      "password": {"name": "probe-scrape", "key": "password"}},
    },
)  # fmt: skip


def test_the_web_config_secures_every_pod_and_the_scrape(tmp_path: Path) -> None:
    """webConfig.existingSecret: every pod that serves endpoints mounts it and is told
    of it (metrics.web_config_file), the kubelet checks the health port over plain
    HTTP, and the ServiceMonitor scrapes https with the TLS and basic-auth settings
    given."""
    manifests = render(WEB)
    for manifest in manifests:
        validate(manifest)
    for name, pod in _pods(manifests):
        if name == "helm-test":  # `once` serves nothing
            continue
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["web"]["secret"]["secretName"] == "probe-web", name
        assert "items" not in volumes["web"]["secret"]  # the config and the files it names
        container = pod["containers"][0]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["web"] == "/etc/sla-probe/web", name
        assert {"name": "health", "containerPort": 9465, "protocol": "TCP"} in container["ports"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SLA_PROBE_HEALTH_PORT"] == "9465", name
        for check in ("livenessProbe", "readinessProbe"):
            assert container[check]["httpGet"]["port"] == "health", (name, check)
            assert "scheme" not in container[check]["httpGet"], (name, check)
    assert not [m for m in manifests if m["metadata"]["name"].endswith("-web")]  # yours
    for file in ("probe.yaml", "sink.yaml"):
        written = yaml.safe_load(_config_file(manifests, tmp_path, file).read_text())
        assert written["metrics"]["web_config_file"] == "/etc/sla-probe/web/web-config.yml"
    (endpoint,) = only(manifests, "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == WEB["serviceMonitor"]["tlsConfig"]
    assert endpoint["basicAuth"] == WEB["serviceMonitor"]["basicAuth"]


def test_the_deprecated_kubelet_probes_setting_is_taken_and_ignored() -> None:
    """`kubeletProbes: tcp` turned readiness into a TCP check that passed with the
    brokers out of reach; values that still say so install, and the kubelet checks the
    health port."""
    manifests = render(_with(WEB, webConfig={"kubeletProbes": "tcp"}))
    for name, pod in _pods(manifests):
        if name == "helm-test":
            continue
        container = pod["containers"][0]
        for check in ("livenessProbe", "readinessProbe"):
            assert "tcpSocket" not in container[check], (name, check)
            assert container[check]["httpGet"]["port"] == "health", (name, check)


def test_the_health_port_must_not_be_the_metrics_port() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"webConfig\.healthPort: must differ"):
        render(_with(WEB, webConfig={"healthPort": 9464}))


def test_users_go_into_one_web_config_only() -> None:
    users = {"prometheus": "$2b$04$5NPZ/bojXCQtlV.H6C5f8.JiGnN6.6r3tHYSIa73RI0eKT477H0Mq"}
    with pytest.raises(helm.HelmRenderError, match=r"webConfig\.basicAuthUsers"):
        render(_with(WEB, webConfig={"basicAuthUsers": users}))


def test_without_a_web_config_nothing_changes() -> None:
    manifests = render(SECURED)
    for name, pod in _pods(manifests):
        if name == "helm-test":
            continue
        container = pod["containers"][0]
        assert "web" not in {v["name"] for v in pod["volumes"]}
        assert "scheme" not in container["readinessProbe"]["httpGet"]
        assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
        assert [p["name"] for p in container["ports"]] == ["metrics"]
        assert "SLA_PROBE_HEALTH_PORT" not in {e["name"] for e in container["env"]}
