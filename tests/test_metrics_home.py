"""Every series the probe exports is built in probe/metrics/, its one home: nowhere else
in probe/ is a metric of prometheus_client (Counter, Gauge, Histogram, Summary, Info,
Enum), a metric family (GaugeMetricFamily... and Metric itself) or one of probe.metrics'
own (RenderedGauge) constructed or subclassed.

A test rather than an import-linter contract because import-linter sees an external
package only whole (it refuses `prometheus_client.metrics` as a forbidden module), and
modules outside probe/metrics import prometheus_client for what is not a series: the
registry's type (probe.spark.health, probe.spark.stage), its exposition
(probe.endpoints), the push (probe.services.smoke_push), the text parser
(probe.gameday.local). Each would be exempt whole and could build a Gauge unseen; this
test looks at what a module builds, whatever it imports.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

import probe

PROBE = Path(probe.__file__).parent
HOME = PROBE / "metrics"
# Where a metric class can come from: the client library, and the package that
# defines the probe's own (RenderedGauge).
SOURCES = ("prometheus_client", "probe.metrics")


def _is_metric_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, MetricWrapperBase | Metric)


def _watched(module: str) -> bool:
    return any(module == source or module.startswith(f"{source}.") for source in SOURCES)


def _member(module: ModuleType, name: str) -> object:
    """``from module import name``: an attribute, else a submodule."""
    if hasattr(module, name):
        return getattr(module, name)
    try:
        return importlib.import_module(f"{module.__name__}.{name}")
    except ModuleNotFoundError:
        return None


def _bindings(tree: ast.Module, module: str) -> dict[str, object]:
    """What each name a module imports from SOURCES stands for (wherever the import
    is: a function's, one under TYPE_CHECKING)."""
    bound: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not _watched(alias.name):
                    continue
                if alias.asname is not None:  # `import a.b as c` binds c to a.b
                    bound[alias.asname] = importlib.import_module(alias.name)
                else:  # `import a.b` binds a
                    top = alias.name.split(".")[0]
                    bound[top] = importlib.import_module(top)
        elif isinstance(node, ast.ImportFrom):
            source = importlib.util.resolve_name("." * node.level + (node.module or ""), module)
            if _watched(source):
                imported = importlib.import_module(source)
                for alias in node.names:
                    bound[alias.asname or alias.name] = _member(imported, alias.name)
    return bound


def _resolve(node: ast.expr, bound: dict[str, object]) -> object:
    """The object a name or a dotted name stands for (None: nothing imported)."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, bound)
        return None if owner is None else getattr(owner, node.attr, None)
    return None


def built_metrics(source: str, module: str) -> list[str]:
    """Where the module's source builds a metric: ``line: class``, a construction or a
    subclass (a family of its own)."""
    tree = ast.parse(source)
    bound = _bindings(tree, module)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            used = [node.func]
        elif isinstance(node, ast.ClassDef):
            used = node.bases
        else:
            continue
        for expr in used:
            value = _resolve(expr, bound)
            if isinstance(value, type) and _is_metric_class(value):
                found.append((node.lineno, value.__name__))
    return [f"{line}: {name}" for line, name in sorted(found)]


def _modules(root: Path) -> dict[str, Path]:
    """Every module under root by its dotted name."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(PROBE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def test_no_series_is_built_outside_probe_metrics() -> None:
    offences = {
        f"{path.relative_to(PROBE.parent)}:{where}"
        for name, path in _modules(PROBE).items()
        if not path.is_relative_to(HOME)
        for where in built_metrics(path.read_text(encoding="utf-8"), name)
    }
    assert not offences, f"series built outside probe/metrics/: {sorted(offences)}"


def test_the_check_sees_the_series_of_probe_metrics() -> None:
    """The check is not blind: in their home it finds every kind the probe builds."""
    found = {
        where.split(": ")[1]
        for name, path in _modules(HOME).items()
        for where in built_metrics(path.read_text(encoding="utf-8"), name)
    }
    assert {"Counter", "Gauge", "Histogram", "Info", "GaugeMetricFamily"} <= found
    assert {"CounterMetricFamily", "InfoMetricFamily"} <= found


@pytest.mark.parametrize(
    ("source", "built"),
    [
        ("from prometheus_client import Gauge\nGauge('a', 'b')", ["2: Gauge"]),
        ("from prometheus_client import Counter as C\nC('a', 'b')", ["2: Counter"]),
        ("import prometheus_client\nprometheus_client.Summary('a', 'b')", ["2: Summary"]),
        ("import prometheus_client as pc\npc.Enum('a', 'b', states=['x'])", ["2: Enum"]),
        (
            "import prometheus_client.core\nprometheus_client.core.GaugeMetricFamily('a', 'b')",
            ["2: GaugeMetricFamily"],
        ),
        (
            "from prometheus_client import core\ncore.HistogramMetricFamily('a', 'b')",
            ["2: HistogramMetricFamily"],
        ),
        (
            "from prometheus_client.metrics_core import Metric\nMetric('a', 'b', 'gauge')",
            ["2: Metric"],
        ),
        (
            "from prometheus_client.core import InfoMetricFamily\n"
            "class Mine(InfoMetricFamily):\n    pass",
            ["2: InfoMetricFamily"],
        ),
        (
            "def f():\n    from probe.metrics import RenderedGauge\n"
            "    return RenderedGauge('a', 'b', [])",
            ["3: RenderedGauge"],
        ),
        # What the probe imports prometheus_client for besides a series.
        ("from prometheus_client import CollectorRegistry\nCollectorRegistry()", []),
        ("from prometheus_client import push_to_gateway\npush_to_gateway('u', job='j')", []),
        ("from prometheus_client.parser import text_string_to_metric_families as t\nt('')", []),
        ("from probe.metrics import served_registry\nserved_registry()", []),
        # A name of its own that happens to read like one (collections.Counter).
        ("from collections import Counter\nCounter('abc')", []),
    ],
)
def test_the_check_finds_a_series_however_it_is_imported(source: str, built: list[str]) -> None:
    assert built_metrics(source, "probe.somewhere") == built
