"""The image run as the Helm chart's pods run it, and checked: run by .ci/image once it
has built the image, with the development venv (Helm's own engine, helm-python-sdk).

    .venv/bin/python docker/chart_pod.py synthetic-sla-probe:0.1.0 [--engine podman]

Each pod is rendered from charts/synthetic-sla-probe by Helm's engine and run as the
kubelet would run it: its user and group (fsGroup added), a read-only root filesystem,
its capabilities dropped, no privilege escalation, its memory and CPU limits, its env
(the pod's name for metadata.name), its ConfigMap and Secret volumes as the files the
kubelet lays out (group-readable by fsGroup), an emptyDir as a tmpfs of its sizeLimit
(executable, as an emptyDir is), and its kubelet probes, asked where they point. What
the pod says is taken as rendered; only the container's args change for `once`.

The checks, each a pass or a failure with the container's output:

  once       the probe pod running `once --embedded`: exit 0
  run        the probe pod as rendered (`run`), against the embedded broker (Tansu, from
             the same image, in a container of its own on a network of their own): the
             liveness and readiness probes answer 200 and /metrics counts a canary
             delivered at every stage
  run-auth   the same with a web config (webConfig.basicAuthUsers): the probes answer 200
             on the health port while /metrics refuses a scrape without credentials
  sink       the Spark sink's pod (its /tmp scratch, its sink.yaml, Spark's env) running
             `once --embedded --stages consumer,sink`: exit 0, the sink stage's
             canaries delivered
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "synthetic-sla-probe"
RELEASE = "orders"
BROKER_HOST = "broker"  # the broker container's alias on the checks' network
BROKER = f"{BROKER_HOST}:9092"
SCRAPER = ("prometheus", "scrape-me")  # the basic-auth user of run-auth

Manifest = dict[str, Any]


@dataclass
class Pod:
    """A pod of the chart as `docker run` options, args and where its probes ask."""

    name: str
    options: list[str]
    args: list[str]
    ports: dict[str, int]
    probes: dict[str, tuple[str, int]] = field(default_factory=dict)  # kind: (path, port)


def render(values: dict[str, Any]) -> list[Manifest]:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace="streaming")
    return [
        document
        for name, text in sorted(rendered.items())
        if name.endswith((".yaml", ".yml"))
        for document in yaml.safe_load_all(text)
        if document
    ]


def _named(manifests: list[Manifest], kind: str, name: str) -> Manifest:
    (found,) = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def _quantity(text: str) -> str:
    """A Kubernetes size (4Gi, 256Mi) as docker and tmpfs take one (4g, 256m)."""
    found = re.fullmatch(r"(\d+)([KMG])i", str(text))
    if found is None:
        raise SystemExit(f"chart_pod: size {text!r}: only Ki, Mi and Gi are mapped")
    return f"{found[1]}{found[2].lower()}"


def _volume_files(
    source: Manifest, items: list[Manifest] | None, is_secret: bool
) -> dict[str, bytes]:
    """The files a ConfigMap or Secret volume holds, by path within the volume."""
    data: dict[str, bytes] = {}
    for key, value in (source.get("data") or {}).items():
        data[key] = base64.b64decode(value) if is_secret else str(value).encode()
    for key, value in (source.get("stringData") or {}).items():
        data[key] = str(value).encode()
    if items is None:
        return data
    return {item["path"]: data[item["key"]] for item in items}


def _security_options(spec: Manifest, container: Manifest) -> list[str]:
    """The pod's and the container's securityContext, and the container's limits."""
    security = {**spec.get("securityContext", {}), **container.get("securityContext", {})}
    options = ["--user", f"{security['runAsUser']}:{security['runAsGroup']}"]
    if "fsGroup" in spec.get("securityContext", {}):
        options += ["--group-add", str(spec["securityContext"]["fsGroup"])]
    if security.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    for capability in security.get("capabilities", {}).get("drop", []):
        options += ["--cap-drop", capability]
    if security.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    limits = container.get("resources", {}).get("limits", {})
    if "memory" in limits:
        options += ["--memory", _quantity(limits["memory"])]
    if "cpu" in limits:
        options += ["--cpus", str(limits["cpu"])]
    return options


def _env_options(container: Manifest, pod_name: str) -> list[str]:
    options = []
    for variable in container.get("env", []):
        field_path = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "value" in variable:
            value = str(variable["value"])
        elif field_path == "metadata.name":
            value = pod_name
        else:
            raise SystemExit(
                f"chart_pod: env {variable['name']}: only values and the pod name are mapped"
            )
        options += ["--env", f"{variable['name']}={value}"]
    return options


def _volume_options(
    manifests: list[Manifest], spec: Manifest, container: Manifest, files: Path
) -> list[str]:
    """The container's mounts: an emptyDir as a tmpfs, a ConfigMap's or Secret's files
    written under files as the kubelet lays them out and mounted read-only."""
    fs_group = spec.get("securityContext", {}).get("fsGroup")
    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    options = []
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "emptyDir" in volume:
            # An emptyDir is writable by all and not noexec (the JVM loads native
            # libraries it unpacks there); docker's tmpfs is noexec unless told.
            tmpfs = f"{target}:rw,exec,nosuid,nodev,mode=1777"
            if "sizeLimit" in volume["emptyDir"]:
                tmpfs += f",size={_quantity(volume['emptyDir']['sizeLimit'])}"
            options += ["--tmpfs", tmpfs]
            continue
        if "configMap" in volume:
            source, is_secret = volume["configMap"], False
            manifest = _named(manifests, "ConfigMap", source["name"])
        elif "secret" in volume:
            source, is_secret = volume["secret"], True
            manifest = _named(manifests, "Secret", source["secretName"])
        else:
            raise SystemExit(f"chart_pod: volume {mount['name']}: {sorted(volume)} not mapped")
        directory = files / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        for path, content in _volume_files(manifest, source.get("items"), is_secret).items():
            written = directory / path
            written.parent.mkdir(parents=True, exist_ok=True)
            written.write_bytes(content)
            # The kubelet's atomic writer: root's files of defaultMode (0644), the group
            # fsGroup given read (a key ring of mode 0400 reaches the probe's group).
            mode = source.get("defaultMode", 0o644)
            if fs_group is not None:
                os.chown(written, 0, fs_group)
                mode |= 0o040
            written.chmod(mode)
        directory.chmod(0o755)
        options += ["--volume", f"{directory}:{target}:ro"]
    return options


def pod(manifests: list[Manifest], component: str, files: Path, name: str) -> Pod:
    """The Deployment of this component as it would run, its volumes' files under files."""
    (deployment,) = [
        m
        for m in manifests
        if m["kind"] == "Deployment"
        and m["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    options = [
        "--hostname",
        name,
        *_security_options(spec, container),
        *_env_options(container, name),
        *_volume_options(manifests, spec, container, files / name),
    ]
    ports = {port["name"]: port["containerPort"] for port in container.get("ports", [])}
    probes = {}
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        get = container.get(kind, {}).get("httpGet")
        if get:
            port = get["port"]
            probes[kind] = (get["path"], ports[port] if isinstance(port, str) else int(port))
    return Pod(name, options, list(container.get("args", [])), ports, probes)


# -- the engine ----------------------------------------------------------------------------


@dataclass
class Engine:
    command: str
    image: str
    started: list[str] = field(default_factory=list)

    def run(self, pod: Pod, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        command = [self.command, "run", "--rm", *pod.options, self.image, *args]
        print(f"chart_pod: {' '.join(command)}", file=sys.stderr)
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self, name: str, options: list[str], args: list[str]) -> None:
        command = [self.command, "run", "--detach", "--name", name, *options, self.image, *args]
        print(f"chart_pod: {' '.join(command)}", file=sys.stderr)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        self.started.append(name)

    def address(self, name: str) -> str:
        template = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"
        answer = subprocess.run(
            [self.command, "inspect", "--format", template, name],
            capture_output=True,
            text=True,
            check=True,
        )
        return answer.stdout.strip()

    def logs(self, name: str) -> str:
        answer = subprocess.run(
            [self.command, "logs", "--tail", "40", name],
            capture_output=True,
            text=True,
            check=False,
        )
        return answer.stdout + answer.stderr

    @contextlib.contextmanager
    def network(self, name: str) -> Iterator[str]:
        subprocess.run(
            [self.command, "network", "create", name], check=True, stdout=subprocess.DEVNULL
        )
        try:
            yield name
        finally:
            for container in reversed(self.started):
                subprocess.run(
                    [self.command, "rm", "--force", container], capture_output=True, check=False
                )
            self.started.clear()
            subprocess.run([self.command, "network", "rm", name], capture_output=True, check=False)


# -- the checks ----------------------------------------------------------------------------


def _delivered(stdout: str) -> dict[str, int]:
    """Canaries delivered per stage in once's JSON report (its one target)."""
    report = json.loads(stdout)
    (target,) = report["targets"]
    return {stage: tally["outcomes"]["delivered"] for stage, tally in target["stages"].items()}


def _brokers_left_to_once(manifests: list[Manifest]) -> list[Manifest]:
    """The release's config files without kafka.bootstrap_servers, which `once
    --embedded` refuses beside its own broker: everything else (the sink's Spark
    settings, its log, its paths) as the chart wrote it."""
    for manifest in manifests:
        if manifest["kind"] != "ConfigMap" or "probe.yaml" not in manifest.get("data", {}):
            continue
        for key, text in manifest["data"].items():
            config = yaml.safe_load(text)
            config.get("kafka", {}).pop("bootstrap_servers", None)
            manifest["data"][key] = yaml.safe_dump(config)
    return manifests


def check_once(
    engine: Engine, manifests: list[Manifest], files: Path, component: str, args: list[str]
) -> str:
    """The pod's container running `once` with args; raises AssertionError on failure."""
    probe = pod(_brokers_left_to_once(manifests), component, files, f"{RELEASE}-{component}-once")
    answer = engine.run(probe, args, timeout=600)
    if answer.returncode != 0:
        raise AssertionError(
            f"exit {answer.returncode}\n{answer.stdout[-3000:]}\n{answer.stderr[-3000:]}"
        )
    delivered = _delivered(answer.stdout)
    if not all(delivered.values()):
        raise AssertionError(f"exit 0 but a stage delivered nothing: {delivered}")
    return f"exit 0, delivered per stage {delivered}"


def _get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except OSError as error:
        return 0, str(error)


def _delivered_series(metrics: str) -> dict[str, float]:
    """synthetic_sla_canaries_total's delivered count per stage (labels in any order)."""
    delivered = {}
    for labels, value in re.findall(
        r"^synthetic_sla_canaries_total\{([^}]*)\} (\S+)$", metrics, flags=re.MULTILINE
    ):
        named = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if named.get("outcome") == "delivered":
            delivered[named["stage"]] = float(value)
    return delivered


def check_run(engine: Engine, values: dict[str, Any], files: Path, *, auth: bool) -> str:
    """The probe pod as rendered, against the broker container: its probes and /metrics."""
    manifests = render(values)
    probe = pod(manifests, "probe", files, f"{RELEASE}-probe-run{'-auth' if auth else ''}")
    with engine.network(f"sla-probe-image-{os.getpid()}") as network:
        # The broker as the probe's own pod would run it: no root, nothing written.
        engine.start(
            f"{probe.name}-broker",
            [
                "--network",
                network,
                "--network-alias",
                BROKER_HOST,
                "--user",
                "10001:10001",
                "--read-only",
                "--entrypoint",
                "/opt/sla-probe/bin/tansu",
            ],
            [
                "broker",
                "--listener-url",
                "tcp://0.0.0.0:9092",
                "--advertised-listener-url",
                f"tcp://{BROKER}",
            ],
        )
        engine.start(probe.name, ["--network", network, *probe.options], probe.args)
        address = engine.address(probe.name)
        metrics_port = probe.ports["metrics"]
        deadline = time.monotonic() + 180
        answers: dict[str, tuple[int, str]] = {}
        delivered: dict[str, float] = {}
        while time.monotonic() < deadline:
            answers = {
                kind: _get(f"http://{address}:{port}{path}")
                for kind, (path, port) in probe.probes.items()
            }
            status, metrics = _get(
                f"http://{address}:{metrics_port}/metrics", SCRAPER if auth else None
            )
            delivered = _delivered_series(metrics) if status == 200 else {}
            if (
                all(code == 200 for code, _ in answers.values())
                and delivered
                and all(delivered.values())
            ):
                break
            time.sleep(1)
        else:
            raise AssertionError(
                f"within 180 s: probes { ({k: v[0] for k, v in answers.items()}) }, "
                f"/metrics {status}, delivered {delivered}\n{engine.logs(probe.name)}"
            )
        asked = ", ".join(f"{kind} {path}:{port}" for kind, (path, port) in probe.probes.items())
        said = f"200 from {asked}; /metrics delivered {delivered}"
        if auth:
            refused, _ = _get(f"http://{address}:{metrics_port}/metrics")
            if refused != 401:
                raise AssertionError(f"/metrics without credentials answered {refused}, not 401")
            said += "; /metrics 401 without credentials"
        return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("image")
    parser.add_argument("--engine", default="docker")
    parser.add_argument("--files", type=Path, default=Path("/tmp/sla-probe-image/pods"))
    parser.add_argument("--only", action="append", choices=["once", "run", "run-auth", "sink"])
    options = parser.parse_args(argv)
    engine = Engine(options.engine, options.image)
    files: Path = options.files
    files.mkdir(parents=True, exist_ok=True)

    # Rounds every 5 s, not 20: a canary is delivered at every stage sooner.
    probe_values: dict[str, Any] = {
        "config": {"kafka": {"bootstrap_servers": BROKER}, "interval": 5}
    }
    hashed = bcrypt.hashpw(SCRAPER[1].encode(), bcrypt.gensalt(rounds=10)).decode()
    auth_values = {**probe_values, "webConfig": {"basicAuthUsers": {SCRAPER[0]: hashed}}}
    # The sink's tables on a volume of their own, as the chart requires of a local path.
    sink_values: dict[str, Any] = {
        "config": {"kafka": {"bootstrap_servers": BROKER}, "sink": {"path": "/data/sink"}},
        "spark": {
            "enabled": True,
            "extraVolumes": [{"name": "sink-tables", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "sink-tables", "mountPath": "/data"}],
        },
    }
    checks: dict[str, Callable[[], str]] = {
        "once": lambda: check_once(
            engine, render(probe_values), files, "probe", ["once", "--embedded", "--json"]
        ),
        "run": lambda: check_run(engine, probe_values, files, auth=False),
        "run-auth": lambda: check_run(engine, auth_values, files, auth=True),
        "sink": lambda: check_once(
            engine,
            render(sink_values),
            files,
            "sink",
            ["once", "--embedded", "--stages", "consumer,sink", "--json"],
        ),
    }
    failed = 0
    for name, check in checks.items():
        if options.only and name not in options.only:
            continue
        started = time.monotonic()
        try:
            said = check()
        except (AssertionError, subprocess.SubprocessError) as error:
            failed += 1
            print(f"chart_pod: {name}: FAILED ({time.monotonic() - started:.0f} s): {error}")
        else:
            print(f"chart_pod: {name}: passed ({time.monotonic() - started:.0f} s): {said}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
