"""Build the Grafana dashboard of the Helm chart from code, with grafana-foundation-sdk.

This module is the one source of the dashboard the chart ships in a ConfigMap for
Grafana's sidecar, ``charts/synthetic-sla-probe/dashboards/synthetic-sla-probe.json``
(``make dashboard`` writes it). Every query is
written with the few PromQL shapes below (a series, a sum of increases, a quantile, an
error budget) and every panel with one builder per kind that sets its unit, so panels,
queries and units stay consistent as the metrics change. The tests build it again and
fail if the committed file differs, so the two never drift.

    python charts/dashboard.py                    # rewrite the committed file
    python charts/dashboard.py --check            # exit 1 if it is out of date
    python charts/dashboard.py -o dashboard.json  # somewhere else
"""

from __future__ import annotations

import argparse
import json
import string
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar, cast

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import heatmap as heatmap_builders
from grafana_foundation_sdk.builders.heatmap import Panel as HeatmapPanel
from grafana_foundation_sdk.builders.prometheus import Dataquery as PrometheusQuery
from grafana_foundation_sdk.builders.stat import Panel as StatPanel
from grafana_foundation_sdk.builders.timeseries import Panel as TimeseriesPanel
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as models
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

CHARTS = Path(__file__).resolve().parent
DASHBOARD_JSON = CHARTS / "synthetic-sla-probe" / "dashboards" / "synthetic-sla-probe.json"

UID = "synthetic-sla-probe"
RUNBOOKS = "https://github.com/synthetic-sla-probe/synthetic-sla-probe/blob/main/docs/runbooks.md"
# The SDK's models are Grafana 10.1's and say schema version 36; the dashboard keeps the
# version it was written in, and Grafana migrates older ones on load anyway.
SCHEMA_VERSION = 39
GRID_WIDTH = 24

# -- escape hatch -------------------------------------------------------------------------

_Model = TypeVar("_Model", bound="_Serialisable")


class _Serialisable(Protocol):
    def to_json(self) -> dict[str, object]: ...


class _Merged:
    """A built model whose JSON is the model's with `fields` added."""

    def __init__(self, model: _Serialisable, fields: Mapping[str, object]) -> None:
        self._model = model
        self._fields = fields

    def to_json(self) -> dict[str, object]:
        return {**self._model.to_json(), **self._fields}


class WithFields(cogbuilder.Builder[_Model]):
    """An SDK builder plus fields Grafana reads that the SDK's (10.1) schema lacks.

    The SDK's models serialise the fields of their schema only, and it has no setter for
    others; its builders accept any builder of the model, and its encoder any object with
    ``to_json``. This wraps a builder so that what it builds serialises with `fields` too.
    Use it only where nothing in the SDK expresses the field: the Prometheus annotation's
    formats and step, a query variable's ``definition``.
    """

    def __init__(self, builder: cogbuilder.Builder[_Model], fields: Mapping[str, object]) -> None:
        self._builder = builder
        self._fields = dict(fields)

    def build(self) -> _Model:
        return cast(_Model, _Merged(self._builder.build(), self._fields))


# -- PromQL -------------------------------------------------------------------------------

TARGET = 'target=~"$target"'
STAGE = 'stage=~"$stage"'
RATE_INTERVAL = "$__rate_interval"
SLO_PERIOD = "$slo_period"


def series(metric: str, *matchers: str) -> str:
    """``metric{matchers}``, the matchers in the order given."""
    return f"{metric}{{{','.join(matchers)}}}"


def increase_by(by: str, metric: str, *matchers: str, window: str = RATE_INTERVAL) -> str:
    return f"sum by ({by}) (increase({series(metric, *matchers)}[{window}]))"


def quantile(q: float, by: str, histogram: str, *matchers: str) -> str:
    """The `q` quantile of a histogram's buckets, per `by`."""
    buckets = series(f"{histogram}_bucket", *matchers)
    return f"histogram_quantile({q}, sum by ({by}, le) (rate({buckets}[{RATE_INTERVAL}])))"


def mean(by: str, histogram: str, window: str, *matchers: str) -> str:
    """Mean observation of a histogram over `window`, per `by`."""
    return ratio(
        f"sum by ({by}) (rate({series(f'{histogram}_sum', *matchers)}[{window}]))",
        f"sum by ({by}) (rate({series(f'{histogram}_count', *matchers)}[{window}]))",
    )


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n/\n{denominator}"


def objective(sli: str) -> str:
    """The objective the rules record (``slo.*`` in the chart's values), one series per
    target: releases with objectives of their own each record their targets'."""
    return f'synthetic_sla:objective:ratio{{sli="{sli}",{TARGET}}}'


def budget_remaining(good_ratio: str, sli: str) -> str:
    """1 - (bad share / allowed bad share): 1 untouched, 0 spent, below 0 broken, each
    target against its own objective."""
    return f"1 - (1 - ({good_ratio})) / on (target) group_left () (1 - {objective(sli)})"


def burn_rate(good_ratio_record: str, sli: str) -> str:
    return f"(1 - {good_ratio_record}) / on (target) group_left () (1 - {objective(sli)})"


# The SLIs over the SLO period, from the raw counters: the recording rules stop at 3d.
AVAILABILITY_OVER_PERIOD = ratio(
    increase_by(
        "target, stage",
        "synthetic_sla_canaries_total",
        'outcome="delivered"',
        TARGET,
        STAGE,
        window=SLO_PERIOD,
    ),
    increase_by("target, stage", "synthetic_sla_canaries_total", TARGET, STAGE, window=SLO_PERIOD),
)


def _within(threshold_variable: str, *matchers: str) -> str:
    # The bucket whose bound is the threshold: a threshold label "5" is the bucket "5.0".
    le = f'le=~"${{{threshold_variable}}}(\\\\.0)?"'
    return increase_by(
        "target, stage",
        "synthetic_sla_e2e_latency_seconds_bucket",
        le,
        TARGET,
        STAGE,
        *matchers,
        window=SLO_PERIOD,
    )


# The Spark sink stage is held to a threshold of its own (slo.latency.sinkThresholdSeconds).
LATENCY_OVER_PERIOD = ratio(
    "("
    + _within("latency_threshold", 'stage!="sink"')
    + "\nor\n"
    + _within("sink_latency_threshold", 'stage="sink"')
    + ")",
    increase_by(
        "target, stage", "synthetic_sla_e2e_latency_seconds_count", TARGET, STAGE, window=SLO_PERIOD
    ),
)

WATERMARK_SKEW_OVER_PERIOD = ratio(
    increase_by(
        "target", "synthetic_sla_watermark_skew_good_seconds_total", TARGET, window=SLO_PERIOD
    ),
    increase_by(
        "target", "synthetic_sla_watermark_skew_observed_seconds_total", TARGET, window=SLO_PERIOD
    ),
)

# -- shared pieces ------------------------------------------------------------------------

DATASOURCE = models.DataSourceRef(type_val="prometheus", uid="${datasource}")
BY_STAGE = "{{target}} / {{stage}}"
BUDGET_THRESHOLDS = ((None, "red"), (0.25, "orange"), (0.5, "green"))


def query(
    expr: str, legend: str, *, instant: bool = False, exemplar: bool = False
) -> PrometheusQuery:
    """A Prometheus query on the dashboard's data source; the panel gives its refId."""
    target = PrometheusQuery().datasource(DATASOURCE).expr(expr).legend_format(legend)
    target = target.instant() if instant else target.range()
    # Only synthetic_sla_e2e_latency_seconds carries exemplars (each canary's trace id).
    return target.exemplar(True) if exemplar else target


_Panel = TypeVar("_Panel", TimeseriesPanel, StatPanel, HeatmapPanel)


def _panel(
    panel: _Panel, title: str, description: str, queries: Sequence[PrometheusQuery]
) -> _Panel:
    panel = panel.title(title).description(description).datasource(DATASOURCE)
    for ref_id, target in zip(string.ascii_uppercase, queries, strict=False):
        panel = panel.with_target(target.ref_id(ref_id))
    return panel


def thresholds(*steps: tuple[float | None, str]) -> dashboard_builders.ThresholdsConfig:
    """Absolute thresholds from the base color (value None) upwards."""
    return (
        dashboard_builders.ThresholdsConfig()
        .mode(models.ThresholdsMode.ABSOLUTE)
        .steps([models.Threshold(value=value, color=color) for value, color in steps])
    )


def timeseries(
    title: str, description: str, unit: str, *queries: PrometheusQuery
) -> TimeseriesPanel:
    """A time series panel in `unit`, with Grafana's default legend and tooltip.

    The SDK's own options would hide the legend (showLegend false) and sort the tooltip:
    they are spelled out as Grafana's defaults.
    """
    panel = _panel(TimeseriesPanel(), title, description, queries).unit(unit)
    legend = (
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.LIST)
        .placement(common.LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs([])
    )
    tooltip = (
        common_builders.VizTooltipOptions()
        .mode(common.TooltipDisplayMode.SINGLE)
        .sort(common.SortOrder.NONE)
    )
    return panel.legend(legend).tooltip(tooltip)


def bars(panel: TimeseriesPanel, *, stacked: bool = False) -> TimeseriesPanel:
    """Counts per interval as bars; stacked, they add up to the whole."""
    panel = panel.draw_style(common.GraphDrawStyle.BARS).fill_opacity(80)
    if stacked:
        panel = panel.stacking(
            common_builders.StackingConfig().mode(common.StackingMode.NORMAL).group("A")
        )
    return panel


def stat(
    title: str,
    description: str,
    *queries: PrometheusQuery,
    unit: str | None = None,
    graph: common.BigValueGraphMode = common.BigValueGraphMode.NONE,
    color: common.BigValueColorMode = common.BigValueColorMode.VALUE,
    text: common.BigValueTextMode = common.BigValueTextMode.AUTO,
) -> StatPanel:
    """A stat of each series' last value; `unit` None for a state shown by mappings."""
    panel = (
        _panel(StatPanel(), title, description, queries)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        .graph_mode(graph)
        .color_mode(color)
        .text_mode(text)
    )
    return panel if unit is None else panel.unit(unit)


def budget_stat(title: str, description: str, budget: PrometheusQuery) -> StatPanel:
    """Error budget remaining over the SLO period: red below a quarter, green above half."""
    return (
        stat(
            title,
            description,
            budget,
            unit="percentunit",
            color=common.BigValueColorMode.BACKGROUND,
            text=common.BigValueTextMode.VALUE_AND_NAME,
        )
        .decimals(1)
        .min(-1)
        .max(1)
        .thresholds(thresholds(*BUDGET_THRESHOLDS))
    )


def state_stat(
    title: str, description: str, target: PrometheusQuery, states: Mapping[int, tuple[str, str]]
) -> StatPanel:
    """A 0/1 gauge shown as words on a colored background: {value: (text, color)}."""
    mapping = models.ValueMap(
        options={
            str(value): models.ValueMappingResult(text=text, color=color)
            for value, (text, color) in states.items()
        }
    )
    return stat(title, description, target, color=common.BigValueColorMode.BACKGROUND).mappings(
        [mapping]
    )


def staleness_heatmap(title: str, description: str, target: PrometheusQuery) -> HeatmapPanel:
    """One row per partition, hotter as its freshest canary ages, repeated per stage.

    The SDK's color builder starts from zero values (0 steps would leave no palette),
    not from Grafana's defaults: steps and fill are Grafana's own.
    """
    color = (
        heatmap_builders.HeatmapColorOptions()
        .mode(heatmap_models.HeatmapColorMode.SCHEME)
        .scheme("Oranges")
        .exponent(0.5)
        .steps(64)
        .fill("dark-orange")
        .reverse(False)
    )
    return (
        _panel(HeatmapPanel(), title, description, [target.format(PromQueryFormat.HEATMAP)])
        .calculate(False)
        .y_axis(heatmap_builders.YAxisConfig().axis_label("partition"))
        .cell_values(heatmap_builders.CellValues().unit("s"))
        .color(color)
        .rows_frame(heatmap_builders.RowsHeatmapOptions().layout(common.HeatmapCellLayout.AUTO))
        .show_tooltip()
        .hide_y_histogram()
        .repeat("stage")
        .repeat_direction("v")
    )


def query_variable(
    name: str, label: str, query_text: str, ref_id: str
) -> dashboard_builders.QueryVariable:
    # The id is the name, as Grafana names a variable that has none: the SDK's default id
    # is one zero UUID for every variable, and Grafana keys its variables' state by id.
    return (
        dashboard_builders.QueryVariable(name)
        .id(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": query_text, "refId": ref_id})
    )


def all_selected(variable: dashboard_builders.QueryVariable) -> dashboard_builders.QueryVariable:
    """Any number of values, All at first, refreshed with the time range."""
    return (
        variable.multi(True)
        .include_all(True)
        .current(models.VariableOption(text="All", value="$__all"))
        .refresh(models.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(models.VariableSort.ALPHABETICAL_ASC)
    )


def hidden(variable: dashboard_builders.QueryVariable) -> dashboard_builders.QueryVariable:
    """A value the queries read and nobody picks, read once per load."""
    return variable.hide(models.VariableHide.HIDE_VARIABLE).refresh(
        models.VariableRefresh.ON_DASHBOARD_LOAD
    )


def listed(variable: dashboard_builders.QueryVariable) -> WithFields[models.VariableModel]:
    """The variable with its query as its ``definition``, what Grafana's list shows."""
    query_text = cast(dict[str, object], variable.build().query)["query"]
    return WithFields(variable, {"definition": query_text})


def datasource_variable() -> dashboard_builders.DatasourceVariable:
    return (
        dashboard_builders.DatasourceVariable("datasource")
        .id("datasource")
        .label("Prometheus")
        .type("prometheus")
        .hide(models.VariableHide.DONT_HIDE)
    )


def slo_period_variable() -> dashboard_builders.CustomVariable:
    """The period the error budgets are spent over, the viewer's pick (raw counters)."""
    periods = ("7d", "28d", "30d")
    chosen = "30d"
    return (
        dashboard_builders.CustomVariable("slo_period")
        .id("slo_period")
        .label("SLO period")
        .values(",".join(periods))
        .current(models.VariableOption(text=chosen, value=chosen))
        .options([models.VariableOption(selected=p == chosen, text=p, value=p) for p in periods])
    )


def slo_alerts() -> WithFields[models.AnnotationQuery]:
    """The SLO alerts firing, as annotations on every panel."""
    alerts = (
        dashboard_builders.AnnotationQuery()
        .name("SLO alerts")
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color("red")
        .expr(series("ALERTS", 'alertname=~"SyntheticSla.*"', 'alertstate="firing"', TARGET))
    )
    # Prometheus annotation fields, not in the SDK's AnnotationQuery.
    return WithFields(
        alerts,
        {
            "titleFormat": "{{alertname}}",
            "textFormat": "{{target}} {{stage}} {{severity}}",
            "useValueForTime": False,
            "step": "1m",
        },
    )


def variables() -> list[cogbuilder.Builder[models.VariableModel]]:
    target = query_variable(
        "target", "Target", "label_values(synthetic_sla_canaries_total, target)", "target"
    )
    stage = query_variable(
        "stage",
        "Stage",
        f"label_values({series('synthetic_sla_canaries_total', TARGET)}, stage)",
        "stage",
    )
    # The latency thresholds, from the objective's labels (the chart's
    # slo.latency.thresholdSeconds and sinkThresholdSeconds): the latency budget reads them.
    threshold = query_variable(
        "latency_threshold",
        "Latency threshold (s)",
        f"label_values({objective('latency')}, threshold_seconds)",
        "threshold",
    )
    sink_threshold = query_variable(
        "sink_latency_threshold",
        "Spark sink latency threshold (s)",
        f"label_values({objective('latency')}, sink_threshold_seconds)",
        "sink_threshold",
    )
    return [
        datasource_variable(),
        listed(all_selected(target)),
        listed(all_selected(stage)),
        slo_period_variable(),
        listed(hidden(threshold)),
        listed(hidden(sink_threshold)),
    ]


# -- layout -------------------------------------------------------------------------------

AnyPanel = TimeseriesPanel | StatPanel | HeatmapPanel


def lay_out(
    board: dashboard_builders.Dashboard,
    rows: Sequence[tuple[dashboard_builders.Row, Sequence[AnyPanel]]],
) -> dashboard_builders.Dashboard:
    """Rows one under the other, each panel (sized with span and height) in its row.

    A panel goes as high as it fits, then as far left: panels of one height fill a line
    left to right, and a short panel beside a tall one stacks under its neighbour
    (Grafana's gravity). A row starts under the lowest panel of the row before it, so
    rows never overlap and each panel stays in its own row.
    """
    top = 0
    for header, panels in rows:
        board = board.with_row(header.grid_pos(models.GridPos(h=1, w=GRID_WIDTH, x=0, y=top)))
        skyline = [top + 1] * GRID_WIDTH  # the first free y of each column
        for panel in panels:
            size = panel.build().grid_pos
            assert size is not None, "size every panel with span() and height()"
            w, h = size.w, size.h
            y, x = min((max(skyline[x : x + w]), x) for x in range(GRID_WIDTH - w + 1))
            skyline[x : x + w] = [y + h] * w
            board = board.with_panel(panel.grid_pos(models.GridPos(h=h, w=w, x=x, y=y)))
        top = max(skyline)
    return board


def row(panel_id: int, title: str) -> dashboard_builders.Row:
    return dashboard_builders.Row(title).id(panel_id).collapsed(False)


# -- the dashboard ------------------------------------------------------------------------
# Panel ids are those the dashboard has always had: links (?viewPanel=<id>) name them.


def slo_row() -> list[AnyPanel]:
    availability_5m = "target_stage:synthetic_sla_availability:ratio_rate5m"
    availability_1h = "target_stage:synthetic_sla_availability:ratio_rate1h"
    latency_1h = "target_stage:synthetic_sla_latency:ratio_rate1h"
    return [
        stat(
            "Availability over the SLO period",
            "Share of canaries delivered (valid, within judge.freshness) of all outcomes, "
            "per stage, over the SLO period.",
            query(AVAILABILITY_OVER_PERIOD, BY_STAGE, instant=True),
            unit="percentunit",
            text=common.BigValueTextMode.VALUE_AND_NAME,
        )
        .decimals(3)
        .id(2)
        .span(8)
        .height(5),
        budget_stat(
            "Availability error budget remaining",
            "1 - (failed share / allowed failed share) over the SLO period. Below 0: the "
            "availability SLO is broken for the period.",
            query(
                budget_remaining(AVAILABILITY_OVER_PERIOD, "availability"), BY_STAGE, instant=True
            ),
        )
        .id(3)
        .span(8)
        .height(5),
        budget_stat(
            "Latency error budget remaining",
            "1 - (slow share / allowed slow share) over the SLO period; slow means above the "
            'latency threshold (synthetic_sla:objective:ratio{sli="latency"} carries it).',
            query(budget_remaining(LATENCY_OVER_PERIOD, "latency"), BY_STAGE, instant=True),
        )
        .id(4)
        .span(8)
        .height(5),
        timeseries(
            "Availability SLI",
            "Delivered share over 5m and 1h windows (the recording rules), and the objective.",
            "percentunit",
            query(series(availability_5m, TARGET, STAGE), f"5m {BY_STAGE}"),
            query(series(availability_1h, TARGET, STAGE), f"1h {BY_STAGE}"),
            query(objective("availability"), "objective {{target}}"),
        )
        .decimals(3)
        .id(5)
        .span(12)
        .height(8),
        timeseries(
            "Error budget burn rate (1h)",
            "How many times faster than sustainable each SLO's budget is spent over the last "
            "hour. The page fires above 14.4x (with the 5m window agreeing) or 6x over 6h.",
            "x",
            query(
                burn_rate(series(availability_1h, TARGET, STAGE), "availability"),
                f"availability {BY_STAGE}",
            ),
            query(burn_rate(series(latency_1h, TARGET, STAGE), "latency"), f"latency {BY_STAGE}"),
        )
        # The pages' burn rates: 6x over 6h and 30m, 14.4x over 1h and 5m (docs/alerting.md).
        .thresholds(thresholds((None, "green"), (6, "orange"), (14.4, "red")))
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(
                common.GraphTresholdsStyleMode.LINE_AND_AREA
            )
        )
        .id(6)
        .span(12)
        .height(8),
    ]


def latency_row() -> list[AnyPanel]:
    e2e = "synthetic_sla_e2e_latency_seconds"
    produce = "synthetic_sla_produce_latency_seconds"
    return [
        timeseries(
            "End-to-end latency percentiles",
            "Produce-to-arrival latency of canaries that arrived (delivered or late), per stage.",
            "s",
            *(
                query(
                    quantile(q, "target, stage", e2e, TARGET, STAGE),
                    f"p{round(q * 100)} {BY_STAGE}",
                    exemplar=True,
                )
                for q in (0.5, 0.9, 0.99)
            ),
        )
        .id(8)
        .span(12)
        .height(8),
        timeseries(
            "Latency SLI",
            "Share of arrived canaries at or under the latency threshold, over 5m and 1h, "
            "and the objective.",
            "percentunit",
            query(
                series("target_stage:synthetic_sla_latency:ratio_rate5m", TARGET, STAGE),
                f"5m {BY_STAGE}",
            ),
            query(
                series("target_stage:synthetic_sla_latency:ratio_rate1h", TARGET, STAGE),
                f"1h {BY_STAGE}",
            ),
            query(objective("latency"), "objective {{target}}"),
        )
        .decimals(2)
        .id(9)
        .span(6)
        .height(8),
        timeseries(
            "Produce acknowledgement latency",
            "Send to broker acknowledgement (acks=all), p50 and p99.",
            "s",
            *(
                query(quantile(q, "target", produce, TARGET), f"p{round(q * 100)} {{{{target}}}}")
                for q in (0.5, 0.99)
            ),
        )
        .id(10)
        .span(6)
        .height(8),
    ]


def outcomes_row() -> list[AnyPanel]:
    anomalies = (
        ("duplicate", "synthetic_sla_duplicates_total"),
        ("out_of_order", "synthetic_sla_out_of_order_total"),
        ("resurrected", "synthetic_sla_resurrected_total"),
        ("foreign", "synthetic_sla_foreign_total"),
    )
    return [
        bars(
            timeseries(
                "Canary outcomes",
                "Every canary's one outcome per stage: delivered, late, lost, produce_failed.",
                "short",
                query(
                    increase_by("stage, outcome", "synthetic_sla_canaries_total", TARGET, STAGE),
                    "{{stage}} {{outcome}}",
                ),
            ),
            stacked=True,
        )
        .id(12)
        .span(12)
        .height(8),
        bars(
            timeseries(
                "Anomalies",
                "Records that are not a canary's fate: duplicates, reordering, resurrected "
                "(arrived after being declared lost), foreign (other probe instances), invalid "
                "by reason, future_dated (produced after they arrived: the producer's clock "
                "ahead of the stage's).",
                "short",
                *(
                    query(increase_by("stage", metric, TARGET, STAGE), f"{kind} {{{{stage}}}}")
                    for kind, metric in anomalies
                ),
                query(
                    increase_by("stage, reason", "synthetic_sla_invalid_total", TARGET, STAGE),
                    "invalid {{reason}} {{stage}}",
                ),
                query(
                    increase_by("stage", "synthetic_sla_future_dated_total", TARGET, STAGE),
                    "future_dated {{stage}}",
                ),
            ),
            stacked=True,
        )
        .id(13)
        .span(12)
        .height(8),
    ]


def partitions_row() -> list[AnyPanel]:
    return [
        staleness_heatmap(
            "Staleness per partition: $stage",
            "Age of the freshest canary each partition delivered to the stage. A healthy "
            "partition stays under one interval plus the latency; a band that keeps getting "
            "hotter is a silent partition (alert above max(60 s, 3 x interval)).",
            query(
                f"max by (partition) "
                f"({series('synthetic_sla_partition_staleness_seconds', TARGET, STAGE)})",
                "{{partition}}",
            ),
        )
        .id(15)
        .span(16)
        .height(9),
        stat(
            "Partitions probed",
            "Partitions (or shards) the probe writes one canary to per round.",
            query(
                f"max by (target) ({series('synthetic_sla_partitions', TARGET)})",
                "{{target}}",
                instant=True,
            ),
            unit="short",
        )
        .id(16)
        .span(4)
        .height(4),
        state_stat(
            "Target ready",
            "1 while every probe of the target reaches its brokers and topic (/readyz).",
            query(
                f"min by (target) ({series('synthetic_sla_target_ready', TARGET)})",
                "{{target}}",
                instant=True,
            ),
            {0: ("NOT READY", "red"), 1: ("ready", "green")},
        )
        .id(17)
        .span(4)
        .height(4),
        timeseries(
            "Pending canaries",
            "Acknowledged canaries whose fate is not decided yet; grows while arrivals stall, "
            "drops as they are judged lost.",
            "short",
            query(
                f"sum by (target, stage) "
                f"({series('synthetic_sla_pending_canaries', TARGET, STAGE)})",
                BY_STAGE,
            ),
        )
        .id(18)
        .span(8)
        .height(5),
    ]


def spark_row() -> list[AnyPanel]:
    def per_target(aggregation: str, metric: str) -> str:
        return f"{aggregation} by (target) ({series(metric, TARGET)})"

    batch = "synthetic_sla_spark_batch_duration_seconds"
    commit = "synthetic_sla_spark_commit_duration_seconds"
    return [
        state_stat(
            "Sink query up",
            "1 while the sink query runs; 0 while it is down, restarting or given up "
            "(SyntheticSlaSinkQueryDown pages after 5 minutes down).",
            query(per_target("min", "synthetic_sla_spark_query_up"), "{{target}}", instant=True),
            {0: ("DOWN", "red"), 1: ("running", "green")},
        )
        .id(25)
        .span(6)
        .height(5),
        state_stat(
            "Sink query given up",
            "1 once the restart strategy hit its failure-rate cap and stopped restarting the "
            "query: nothing brings it back until the probe restarts (SyntheticSlaSinkQueryDown, "
            "state given_up, pages at once).",
            query(
                per_target("max", "synthetic_sla_spark_query_failed"), "{{target}}", instant=True
            ),
            {0: ("no", "green"), 1: ("GIVEN UP", "red")},
        )
        .id(26)
        .span(6)
        .height(5),
        budget_stat(
            "Watermark-skew error budget remaining",
            "1 - (seconds over the skew threshold / allowed share) over the SLO period. The "
            "probe counts every second from the clock, so a stalled or stopped query spends it "
            "with no record arriving. Below 0: the skew SLO is broken for the period.",
            query(
                budget_remaining(WATERMARK_SKEW_OVER_PERIOD, "watermark_skew"),
                "{{target}}",
                instant=True,
            ),
        )
        .id(27)
        .span(12)
        .height(5),
        timeseries(
            "Watermark skew",
            "Now minus the sink's event-time watermark, computed at scrape time (it keeps "
            "rising during a stall). Healthy: about the allowed lateness plus one interval. The "
            "line is the probe's default skew threshold (twice the allowed lateness: 120 s): "
            "seconds above it spend the watermark-skew error budget.",
            "s",
            query(per_target("max", "synthetic_sla_watermark_skew_seconds"), "{{target}}"),
        )
        .thresholds(thresholds((None, "green"), (120, "red")))
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(common.GraphTresholdsStyleMode.LINE)
        )
        .id(20)
        .span(8)
        .height(8),
        timeseries(
            "Watermark-skew SLI",
            "Share of seconds with the skew under the threshold, over 5m and 1h (the recording "
            "rules), and the objective. The page needs 14.4x the budget over 1h and 5m: 8.6 "
            "minutes of an hour over the threshold at 99 %.",
            "percentunit",
            query(
                series("target:synthetic_sla_watermark_skew:ratio_rate5m", TARGET), "5m {{target}}"
            ),
            query(
                series("target:synthetic_sla_watermark_skew:ratio_rate1h", TARGET), "1h {{target}}"
            ),
            query(objective("watermark_skew"), "objective {{target}}"),
        )
        .decimals(3)
        .id(28)
        .span(8)
        .height(8),
        timeseries(
            "Seconds since the last micro-batch",
            "Now minus the end of the last completed micro-batch, at scrape time. A healthy "
            "query stays near its trigger interval; a line that keeps rising is a query that "
            "completes no batch (stalled or down).",
            "s",
            query(per_target("max", "synthetic_sla_spark_seconds_since_last_batch"), "{{target}}"),
        )
        .id(29)
        .span(8)
        .height(8),
        bars(
            timeseries(
                "Sink query restarts by reason",
                "Restarts of the sink query: checkpoint (offset log, commit log or state "
                "failed), source (reading Kafka failed), batch (the batch failed, e.g. writing "
                "the tables), stopped (ended without an error), start (a start attempt failed). "
                "Three in 10 minutes raise SyntheticSlaSinkRestartLoop; any checkpoint one "
                "SyntheticSlaSinkCheckpointFailing.",
                "short",
                query(
                    increase_by(
                        "target, reason", "synthetic_sla_spark_query_restarts_total", TARGET
                    ),
                    "{{reason}} {{target}}",
                ),
            )
        )
        .id(30)
        .span(8)
        .height(8),
        timeseries(
            "Source lag",
            "Records on the topic the streaming query has not read yet. Growing for 15 minutes "
            "raises SyntheticSlaSinkLagGrowing; non-zero or steady does not.",
            "short",
            query(per_target("sum", "synthetic_sla_spark_source_lag_records"), "{{target}}"),
        )
        .id(21)
        .span(8)
        .height(8),
        timeseries(
            "Micro-batch duration",
            "How long micro-batches take, p50 and p99; above the trigger interval they overrun.",
            "s",
            *(
                query(quantile(q, "target", batch, TARGET), f"p{round(q * 100)} {{{{target}}}}")
                for q in (0.5, 0.99)
            ),
        )
        .id(22)
        .span(8)
        .height(8),
        bars(
            timeseries(
                "Trigger overruns and rows dropped by the watermark",
                "Micro-batches that took longer than their trigger interval (the query cannot "
                "keep up with its schedule), and rows older than the watermark that Spark "
                "dropped before the judge saw them (they end up lost in the sink stage). "
                "Diagnostic: no alert reads overruns; a sink that cannot keep up shows in the "
                "lag and the skew.",
                "short",
                query(
                    increase_by("target", "synthetic_sla_spark_trigger_overruns_total", TARGET),
                    "overruns {{target}}",
                ),
                query(
                    increase_by(
                        "target", "synthetic_sla_spark_rows_dropped_by_watermark_total", TARGET
                    ),
                    "dropped rows {{target}}",
                ),
            )
        )
        .id(23)
        .span(12)
        .height(7),
        timeseries(
            "Checkpoint commit duration",
            "Time to write the offset WAL and the commit log of each micro-batch: p50 and p99, "
            "and the means SyntheticSlaSinkCheckpointSlow compares (10 minutes against 1 day; "
            "it fires above 5x and 1 s for 10 minutes).",
            "s",
            *(
                query(quantile(q, "target", commit, TARGET), f"p{round(q * 100)} {{{{target}}}}")
                for q in (0.5, 0.99)
            ),
            *(
                query(mean("target", commit, window, TARGET), f"mean {window} {{{{target}}}}")
                for window in ("10m", "1d")
            ),
        )
        .id(24)
        .span(12)
        .height(7),
    ]


def scale_row() -> list[AnyPanel]:
    def per_stage(metric: str) -> str:
        return f"max by (target, stage) ({series(metric, TARGET, STAGE)})"

    def per_target(metric: str) -> str:
        return f"max by (target) ({series(metric, TARGET)})"

    by_broker = "{{stage}} broker {{broker}}"
    return [
        timeseries(
            "Largest staleness per stage",
            "The stalest partition of each stage (synthetic_sla_staleness_max_seconds): "
            "exported whatever metrics.partition_series says, so this works where per-partition "
            "staleness is not exported. A healthy stage peaks at one interval plus its latency.",
            "s",
            query(per_stage("synthetic_sla_staleness_max_seconds"), "{{target}}/{{stage}}"),
        )
        .id(102)
        .span(12)
        .height(7),
        timeseries(
            "Stale partitions per stage",
            "Partitions whose freshest canary is older than one interval plus the stage's "
            "freshness deadline: they missed at least their last round "
            "(synthetic_sla_stale_partitions).",
            "short",
            query(per_stage("synthetic_sla_stale_partitions"), "{{target}}/{{stage}}"),
        )
        .id(103)
        .span(12)
        .height(7),
        timeseries(
            "Availability by broker (1h)",
            "Share of canaries delivered, by the broker that led their partition when they were "
            "produced (target_stage_broker:synthetic_sla_availability:ratio_rate1h). The broker "
            "whose line drops is the one burning the budget.",
            "percentunit",
            query(
                "min by (target, stage, broker) ("
                + series(
                    "target_stage_broker:synthetic_sla_availability:ratio_rate1h", TARGET, STAGE
                )
                + ")",
                by_broker,
            ),
        )
        .id(104)
        .span(12)
        .height(7),
        timeseries(
            "End-to-end latency p99 by broker",
            "p99 produce-to-arrival latency of canaries by the broker that led their partition "
            "when they were produced.",
            "s",
            query(
                quantile(
                    0.99,
                    "target, stage, broker",
                    "synthetic_sla_broker_e2e_latency_seconds",
                    TARGET,
                    STAGE,
                ),
                by_broker,
            ),
        )
        .id(105)
        .span(12)
        .height(7),
        timeseries(
            "Canary partitions led per broker",
            "How many canary partitions each broker leads, and brokers that lead none (not "
            "measured by the probe). With topic management on the probe moves a leadership to "
            "every broker.",
            "short",
            query(
                f"max by (target, broker) "
                f"({series('synthetic_sla_broker_leader_partitions', TARGET)})",
                "broker {{broker}}",
            ),
            query(
                per_target("synthetic_sla_brokers_without_canary_leader"),
                "brokers leading nothing",
            ),
        )
        .id(106)
        .span(12)
        .height(7),
        timeseries(
            "Replica health of the canary topic",
            "Canary partitions under-replicated (ISR smaller than the replicas), offline (no "
            "leader) and under min ISR (acks=all produces refused), from the metadata the probe "
            "refreshes every round; and under min ISR counting the eligible leader replicas "
            "(KIP-966: the acknowledged records on fewer brokers than min ISR; the same count "
            "where the cluster keeps no ELR).",
            "short",
            query(per_target("synthetic_sla_partitions_under_replicated"), "under-replicated"),
            query(per_target("synthetic_sla_partitions_offline"), "offline"),
            query(per_target("synthetic_sla_partitions_under_min_isr"), "under min ISR"),
            query(
                per_target("synthetic_sla_partitions_under_min_isr_with_elr"),
                "under min ISR with ELR",
            ),
        )
        .id(107)
        .span(12)
        .height(7),
    ]


def reconciliation_row() -> list[AnyPanel]:
    duration = "synthetic_sla_reconciliation_duration_seconds"
    return [
        timeseries(
            "Reconciliation mismatch ratio",
            "The last `sla-probe reconcile` run's discrepancies (missing, extra, duplicated, "
            "checksum mismatches) over the records it judged, and the same over the last hour "
            "of runs.",
            "percentunit",
            query(
                series("target:synthetic_sla_reconciliation_mismatch:ratio", TARGET),
                "last run {{target}}",
            ),
            query(
                series("target:synthetic_sla_reconciliation_mismatch:ratio_rate1h", TARGET),
                "1h {{target}}",
            ),
        )
        .id(902)
        .span(8)
        .height(8),
        timeseries(
            "Reconciled records by result",
            "Records and table rows compared per interval, by result; runs overlap in what "
            "they look back on, so a record counts once per run that compares it.",
            "short",
            query(
                increase_by("target, result", "synthetic_sla_reconciliation_records_total", TARGET),
                "{{target}} {{result}}",
            ),
        )
        .id(903)
        .span(8)
        .height(8),
        timeseries(
            "Reconciled windows by status",
            "Windows (per partition) compared per interval: complete, mismatch, unverifiable "
            "(their records left the topic).",
            "short",
            query(
                increase_by("target, status", "synthetic_sla_reconciliation_windows_total", TARGET),
                "{{target}} {{status}}",
            ),
        )
        .id(904)
        .span(8)
        .height(8),
        stat(
            "Since the last completed reconciliation",
            "Time since a reconciliation run last completed, whatever it found; the stale "
            "alert fires after three periods.",
            query(
                "time() - max by (target) ("
                + series("synthetic_sla_reconciliation_last_success_timestamp_seconds", TARGET)
                + ")",
                "{{target}}",
            ),
            unit="s",
            # A range query: the sparkline shows the age climbing between runs.
            graph=common.BigValueGraphMode.AREA,
        )
        .id(905)
        .span(8)
        .height(7),
        timeseries(
            "Reconciliation runs: duration and failures",
            "Wall time of completed runs (p50, p99), and runs that could not compare (brokers, "
            "table, Spark).",
            "s",
            *(
                query(quantile(q, "target", duration, TARGET), f"p{round(q * 100)} {{{{target}}}}")
                for q in (0.5, 0.99)
            ),
            query(
                increase_by(
                    "target, result",
                    "synthetic_sla_reconciliation_runs_total",
                    TARGET,
                    'result="failed"',
                ),
                "failed runs {{target}}",
            ),
        )
        # Failed runs are a count, not seconds: on an axis of their own.
        .override_by_query("C", [models.DynamicConfigValue(id_val="unit", value="short")])
        .id(906)
        .span(16)
        .height(7),
    ]


def group_row() -> list[AnyPanel]:
    """The group stages' members (docs/consumer-groups.md): their canaries are in the
    rows above with stage="group" (classic protocol), "group_consumer" (consumer
    protocol, KIP-848) or "share" (a share group, KIP-932); here, what each lives
    through as a group member."""
    commit = "synthetic_sla_group_commit_latency_seconds"
    return [
        state_stat(
            "Group stable",
            "1 while a group stage's member holds an assignment and no rebalance is under "
            "way (SyntheticSlaGroupRebalanceStorm, state unstable, after 5 minutes at 0).",
            query(
                f"min by (target, stage) ({series('synthetic_sla_group_stable', TARGET)})",
                "{{target}}/{{stage}}",
                instant=True,
            ),
            {0: ("REBALANCING", "red"), 1: ("stable", "green")},
        )
        .id(1202)
        .span(6)
        .height(5),
        state_stat(
            "Group coordinator",
            "The broker coordinating each group stage's consumer group: a move shows as a "
            "change of broker (none while the member cannot find one).",
            query(
                f"max by (target, stage, broker) "
                f"({series('synthetic_sla_group_coordinator', TARGET)})",
                "{{target}}/{{stage}}: broker {{broker}}",
                instant=True,
            ),
            {1: ("coordinating", "green")},
        )
        .id(1203)
        .span(6)
        .height(5),
        timeseries(
            "Offset commit latency",
            "p50 and p99 of the time the coordinator took to acknowledge the member's "
            "commits (the commit SLO counts those within group.commit_latency_threshold).",
            "s",
            query(quantile(0.5, "target, stage", commit, TARGET), "p50 {{target}}/{{stage}}"),
            query(quantile(0.99, "target, stage", commit, TARGET), "p99 {{target}}/{{stage}}"),
        )
        .id(1204)
        .span(12)
        .height(8),
        bars(
            timeseries(
                "Commit failures and rebalances",
                "Failed commits per interval by reason, and the member's rebalances (each "
                "join and sync; a storm opens SyntheticSlaGroupRebalanceStorm).",
                "short",
                query(
                    increase_by(
                        "target, stage, reason", "synthetic_sla_group_commit_failures_total", TARGET
                    ),
                    "{{target}}/{{stage}} failed: {{reason}}",
                ),
                query(
                    increase_by("target, stage", "synthetic_sla_group_rebalances_total", TARGET),
                    "{{target}}/{{stage}} rebalances",
                ),
            )
        )
        .id(1205)
        .span(12)
        .height(8),
        bars(
            timeseries(
                "Share group: records delivered again",
                "Records the share stage's member was given with a delivery count above 1 "
                "(a lock that ran out at another member, an acceptance lost), per "
                "interval; the acknowledgement latency is the commit latency above, "
                "stage share.",
                "short",
                query(
                    increase_by("target, stage", "synthetic_sla_group_deliveries_count", TARGET)
                    + " - "
                    + increase_by(
                        "target, stage", "synthetic_sla_group_deliveries_bucket", TARGET, 'le="1.0"'
                    ),
                    "{{target}}/{{stage}} delivered again",
                ),
            )
        )
        .id(1206)
        .span(12)
        .height(8),
    ]


def mirror_and_tiered_row() -> list[AnyPanel]:
    """Beyond the cluster's hot log: the mirror stage's own signal (its canaries are in
    the rows above, stage="mirror"; docs/mirrors.md) and the tiered reads
    (docs/tiered-storage.md), which are no stage and have series of their own."""
    heartbeat = "synthetic_sla_mirror_heartbeat_timestamp_seconds"
    checkpoint_lag = "synthetic_sla_mirror_checkpoint_lag_records"
    first_record = "synthetic_sla_tiered_first_record_seconds"
    return [
        timeseries(
            "Mirror heartbeat age",
            "Seconds since MirrorMaker 2 stamped the newest heartbeat the mirror stage read "
            "on the target cluster (one a second by default); over 2 minutes for 2 minutes "
            "opens SyntheticSlaMirrorHeartbeatStale.",
            "s",
            query(f"time() - max by (target) ({series(heartbeat, TARGET)})", "{{target}}"),
        )
        .id(1302)
        .span(12)
        .height(8),
        timeseries(
            "Mirror checkpoint lag",
            "Records of the mirrored topic past the offset MirrorMaker 2's newest "
            "checkpoint translated the probe's group's committed offset to, the worst "
            "partition: what a consumer group failing over to the target now reads again. "
            "It grows when checkpoints stop while the topic is copied; on a busy topic "
            "MirrorMaker 2's offset syncs (every offset.lag.max records) bound how small "
            "it gets. Needs the group stage.",
            "short",
            query(
                f"max by (target) ({series(checkpoint_lag, TARGET)})",
                "{{target}}",
            ),
        )
        .id(1305)
        .span(12)
        .height(8),
        bars(
            timeseries(
                "Tiered reads",
                "Reads of canaries old enough to have left the brokers' disks, served from "
                "tiered storage, per interval by outcome (failed opens "
                "SyntheticSlaTieredReadsFailing), and the failures by the broker's reason.",
                "short",
                query(
                    increase_by("target, outcome", "synthetic_sla_tiered_reads_total", TARGET),
                    "{{target}} {{outcome}}",
                ),
                query(
                    increase_by(
                        "target, reason", "synthetic_sla_tiered_read_failures_total", TARGET
                    ),
                    "{{target}} failed: {{reason}}",
                ),
            )
        )
        .id(1303)
        .span(12)
        .height(8),
        timeseries(
            "Tiered read: time to first record",
            "p50 and p99 of the time from a tiered read's timestamp lookup to its first "
            "record (SyntheticSlaTieredReadsSlow counts those above its threshold).",
            "s",
            query(quantile(0.5, "target", first_record, TARGET), "p50 {{target}}"),
            query(quantile(0.99, "target", first_record, TARGET), "p99 {{target}}"),
        )
        .id(1304)
        .span(12)
        .height(8),
    ]


def build_dashboard() -> models.Dashboard:
    board = (
        dashboard_builders.Dashboard("Synthetic SLA probe")
        .uid(UID)
        .description(
            "End-to-end SLOs measured with signed canaries: availability and error budget per "
            "stage, latency, outcomes, per-partition staleness, the Spark sink query's health "
            "and watermark-skew SLO."
        )
        .tags(["slo", "kafka", "synthetic-sla-probe"])
        .editable()
        .tooltip(models.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("")
        .link(
            dashboard_builders.DashboardLink("Runbooks")
            .type(models.DashboardLinkType.LINK)
            .url(RUNBOOKS)
            .target_blank(True)
        )
        .annotation(slo_alerts())
        .variables(variables())
    )
    board = lay_out(
        board,
        [
            (row(1, "Service level objectives"), slo_row()),
            (row(7, "Latency"), latency_row()),
            (row(11, "Outcomes and anomalies"), outcomes_row()),
            (row(14, "Partitions"), partitions_row()),
            (row(19, "Spark sink query"), spark_row()),
            (row(101, "Scale: every partition, every broker"), scale_row()),
            (row(901, "Reconciliation"), reconciliation_row()),
            (row(1201, "Consumer group"), group_row()),
            (row(1301, "Mirrors and tiered storage"), mirror_and_tiered_row()),
        ],
    )
    model = board.build()
    model.schema_version = SCHEMA_VERSION  # a field of the model the builder has no setter for
    return model


def dashboard_json() -> str:
    """The dashboard as the committed file has it: keys sorted, two-space indent."""
    encoded = json.dumps(
        build_dashboard(), cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False
    )
    return encoded + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", type=Path, default=DASHBOARD_JSON)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = parser.parse_args(argv)
    text = dashboard_json()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `make dashboard`", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
