"""Render the chart's SLOs as the plain files Sloth's CLI and Pyrra's filesystem mode read.

The chart's ``templates/_slo-definitions.tpl`` holds the availability and latency SLOs
(objectives, SLIs, each stage's threshold) that its rules, its Sloth
PrometheusServiceLevel and its Pyrra ServiceLevelObjectives are made of. This renders
the last two with Helm's own engine (helm-python-sdk, no helm binary) and writes

- ``charts/sloth/synthetic-sla-probe.sloth.yml``: a Sloth ``prometheus/v1`` spec
  (``sloth generate -i``), the PrometheusServiceLevel's spec in that format's keys;
- ``charts/pyrra/<name>.yaml``: one ServiceLevelObjective per SLO and stage, as Pyrra's
  filesystem mode reads them (``pyrra filesystem --config-files='charts/pyrra/*.yaml'``),
  without the chart's labels and namespace.

Every stage is declared unless the values' slo.stages names some: keep the files of the
stages you run. The tests render again and fail if the committed files differ.

    python charts/render_slo_specs.py                 # rewrite the committed files
    python charts/render_slo_specs.py --check         # exit 1 if they are out of date
    python charts/render_slo_specs.py -f my-values.yaml --sloth-output my.sloth.yml \\
        --pyrra-output my-pyrra/                      # your objectives and stages
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

# Its sibling render_rules.py, which these scripts are run beside (not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from render_rules import CHART, CHARTS, dump, merge

SLOTH_SPEC = CHARTS / "sloth" / "synthetic-sla-probe.sloth.yml"
PYRRA_DIR = CHARTS / "pyrra"
SLOTH_TEMPLATE = "synthetic-sla-probe/templates/sloth-prometheusservicelevel.yaml"
PYRRA_TEMPLATE = "synthetic-sla-probe/templates/pyrra-servicelevelobjectives.yaml"
EVERY_STAGE = [
    "consumer",
    "group",
    "group_consumer",
    "share",
    "transactional",
    "mirror",
    "sink",
    "mqtt",
    "bridge",
]
# The release the files are rendered as: its full name is the chart's, synthetic-sla-probe.
RELEASE = "synthetic-sla-probe"

HEADER = """\
# Generated from charts/synthetic-sla-probe/templates/_slo-definitions.tpl{values}
# by charts/render_slo_specs.py: do not edit; regenerate with `make slo-specs`.
"""
SLOTH_USAGE = """\
# The probe's availability and latency SLOs per stage, as the chart's rules have them.
# Rules from it: sloth generate -i charts/sloth/synthetic-sla-probe.sloth.yml
# The probes must be scraped as for charts/prometheus/synthetic-sla-probe.rules.yml.
"""
PYRRA_USAGE = """\
# One of the probe's SLOs, as the chart's rules have it, for Pyrra's filesystem mode.
"""

# A Kubernetes Sloth spec's keys that Sloth's prometheus/v1 format spells differently.
_SLOTH_V1_KEYS = {
    "sloPlugins": "slo_plugins",
    "errorRatioQuery": "error_ratio_query",
    "errorQuery": "error_query",
    "totalQuery": "total_query",
    "pageAlert": "page_alert",
    "ticketAlert": "ticket_alert",
}
# Where those keys are: the key paths (list items skipped) whose mappings hold them.
_SLOTH_V1_PLACES = {(), ("slos",), ("slos", "sli", "raw"), ("slos", "sli", "events")}
_SLOTH_V1_PLACES |= {("slos", "alerting")}


def render_slo_resources(values: dict[str, Any] | None = None) -> tuple[Any, list[Any]]:
    """The chart's Sloth PrometheusServiceLevel and Pyrra ServiceLevelObjectives."""
    forced: dict[str, Any] = {"sloth": {"enabled": True}, "pyrra": {"enabled": True}}
    # The SLOs do not depend on the brokers, but the chart refuses to render without them.
    defaults: dict[str, Any] = {
        "config": {"kafka": {"bootstrap_servers": "specs-only.invalid:9092"}},
        "slo": {"stages": EVERY_STAGE},
    }
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(
            merge(merge(defaults, values or {}), forced), name=RELEASE, namespace=RELEASE
        )
    service_level = yaml.safe_load(manifests[SLOTH_TEMPLATE])
    objectives = [doc for doc in yaml.safe_load_all(manifests[PYRRA_TEMPLATE]) if doc]
    return service_level, objectives


def sloth_v1(service_level: dict[str, Any]) -> dict[str, Any]:
    """A PrometheusServiceLevel's spec as a Sloth ``prometheus/v1`` spec."""

    def convert(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [convert(item, path) for item in node]
        if not isinstance(node, dict):
            return node
        renames = _SLOTH_V1_KEYS if path in _SLOTH_V1_PLACES else {}
        return {renames.get(key, key): convert(value, (*path, key)) for key, value in node.items()}

    spec: dict[str, Any] = convert(service_level["spec"], ())
    return {"version": "prometheus/v1", **spec}


def plain_objective(objective: dict[str, Any]) -> dict[str, Any]:
    """A ServiceLevelObjective as a file: its name and Pyrra's labels, not the chart's."""
    metadata = objective["metadata"]
    labels = {k: v for k, v in metadata.get("labels", {}).items() if k.startswith("pyrra.dev/")}
    return {**objective, "metadata": {"name": metadata["name"], "labels": labels}}


def spec_files(
    values: dict[str, Any] | None = None,
    values_name: str | None = None,
    sloth_output: Path = SLOTH_SPEC,
    pyrra_output: Path = PYRRA_DIR,
) -> dict[Path, str]:
    """Every file to write, by path, with its text."""
    service_level, objectives = render_slo_resources(values)
    where = f"\n# with the values of {values_name}" if values_name else " with the default values"
    header = HEADER.format(values=where)
    files = {sloth_output: header + SLOTH_USAGE + dump(sloth_v1(service_level))}
    for objective in objectives:
        path = pyrra_output / f"{objective['metadata']['name']}.yaml"
        files[path] = header + PYRRA_USAGE + dump(plain_objective(objective))
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--values", type=Path, help="a values file, as for helm -f")
    parser.add_argument("--sloth-output", type=Path, default=SLOTH_SPEC)
    parser.add_argument("--pyrra-output", type=Path, default=PYRRA_DIR, help="a directory")
    parser.add_argument("--check", action="store_true", help="exit 1 if any file differs")
    args = parser.parse_args(argv)
    values = yaml.safe_load(args.values.read_text(encoding="utf-8")) if args.values else None
    name = args.values.name if args.values else None
    files = spec_files(values, name, args.sloth_output, args.pyrra_output)
    # A stage or SLO no longer rendered leaves a file behind: it is stale too.
    stale = (
        set(args.pyrra_output.glob("*.yaml")) - set(files) if args.pyrra_output.is_dir() else set()
    )
    if args.check:
        differ = [
            path
            for path, text in files.items()
            if not path.exists() or path.read_text(encoding="utf-8") != text
        ]
        for path in sorted(differ) + sorted(stale):
            print(f"{path} is out of date: run `make slo-specs`", file=sys.stderr)
        return 1 if differ or stale else 0
    for path in stale:
        path.unlink()
        print(f"removed {path}", file=sys.stderr)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
