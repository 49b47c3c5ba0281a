"""Render the SLO rules of the Helm chart as a plain Prometheus rules file.

The chart's ``templates/_slo-rules.tpl`` is the one source of the rules. This renders it
with Helm's own engine (helm-python-sdk, no helm binary) and writes the rule groups of
the PrometheusRule it produces to ``charts/prometheus/synthetic-sla-probe.rules.yml``,
for Prometheus servers without the operator. The tests render again and fail if the
committed file differs, so the two never drift.

    python charts/render_rules.py                     # rewrite the committed file
    python charts/render_rules.py --check             # exit 1 if it is out of date
    python charts/render_rules.py -f my-values.yaml -o my.rules.yml   # your objectives
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHARTS = Path(__file__).resolve().parent
CHART = CHARTS / "synthetic-sla-probe"
PLAIN_RULES = CHARTS / "prometheus" / "synthetic-sla-probe.rules.yml"
PROMETHEUS_RULE_TEMPLATE = "synthetic-sla-probe/templates/prometheusrule.yaml"

HEADER = """\
# Generated from charts/synthetic-sla-probe/templates/_slo-rules.tpl{values}
# by charts/render_rules.py: do not edit; regenerate with `make rules`.
# Load it with `rule_files:` in prometheus.yml. The probes must be scraped with
# job="synthetic-sla-probe" for the probe-down and probe-absent alerts.
"""


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Values the way Helm coalesces them: nested maps merge, anything else replaces."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def render_rule_groups(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The PrometheusRule's spec (``{"groups": [...]}``) for these values.

    A plain rules file is loaded once per Prometheus, so it covers every target that
    Prometheus scrapes (ruleScope "all") unless the values say otherwise."""
    values = merge({"ruleScope": "all"}, values or {})
    # The rules do not depend on the brokers, but the chart refuses to render without them.
    forced = {
        "config": {"kafka": {"bootstrap_servers": "rules-only.invalid:9092"}},
        "prometheusRule": {"enabled": True},
    }
    with helm.Chart.load(CHART) as chart:
        manifests = chart.render(merge(values, forced), name="rules", namespace="rules")
    rule = yaml.safe_load(manifests[PROMETHEUS_RULE_TEMPLATE])
    spec: dict[str, Any] = rule["spec"]
    return spec


class _RulesDumper(yaml.SafeDumper):
    """Multi-line PromQL as literal blocks, so the file reads like hand-written rules."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_RulesDumper.add_representer(str, _represent_str)


def dump(document: Any) -> str:
    """YAML in the chart's order, PromQL of several lines as literal blocks."""
    return yaml.dump(document, Dumper=_RulesDumper, sort_keys=False, width=100, allow_unicode=True)


def plain_rules_text(values: dict[str, Any] | None = None, values_name: str | None = None) -> str:
    spec = render_rule_groups(values)
    body = dump(spec)
    where = f"\n# with the values of {values_name}" if values_name else " with the default values"
    return HEADER.format(values=where) + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--values", type=Path, help="a values file, as for helm -f")
    parser.add_argument("-o", "--output", type=Path, default=PLAIN_RULES)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    values = yaml.safe_load(args.values.read_text(encoding="utf-8")) if args.values else None
    text = plain_rules_text(values, args.values.name if args.values else None)
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `make rules`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
