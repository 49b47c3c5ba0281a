"""Spark's own Kafka connector: its jars, pinned in ``pom.xml``, in a local cache.

``install`` (``make spark-kafka``) resolves the pom from Maven Central once, into
``~/.cache/synthetic-sla-probe/spark-sql-kafka-<version>/`` (``SLA_PROBE_SPARK_KAFKA_JARS``
elsewhere), and stamps it with the pom's hash: a changed pin resolves again. Nothing
here reaches Maven at run time; a session that reads with ``sink.source: kafka`` is
handed :func:`jar_paths`, or told to run ``make spark-kafka``.

Importing this module never imports pyspark: ``make`` runs it before anything Spark.

>>> jars_dir().name  # doctest: +SKIP
'spark-sql-kafka-4.2.0'
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from probe.core.errors import ConfigError

POM = Path(__file__).with_name("pom.xml")
STAMP = "RESOLVED"
ENV = "SLA_PROBE_SPARK_KAFKA_JARS"
SOURCE_SETTING = "sink.source"
_ARTIFACT = "spark-sql-kafka-0-10"
# What a session needs, by artifact: a cache missing one is not installed.
ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
)


def connector_version(pom: Path = POM) -> str:
    """The pinned connector version (``spark.version`` in ``pom.xml``)."""
    found = re.search(r"<spark\.version>([^<]+)</spark\.version>", pom.read_text())
    if found is None:
        raise ValueError(f"{pom}: no <spark.version>")
    return found.group(1)


def package_coordinate() -> str:
    """The connector's Maven coordinate, for ``spark.jars.packages`` (resolved by Spark
    itself at start, when a user asks for that instead of the cache)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{connector_version()}"


def jars_dir() -> Path:
    """Where the pinned jars live: ``SLA_PROBE_SPARK_KAFKA_JARS``, else the user's cache."""
    if configured := os.environ.get(ENV):
        return Path(configured)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "synthetic-sla-probe" / f"spark-sql-kafka-{connector_version()}"


def _pin() -> str:
    """What an install was resolved from: the pom's hash (a changed pin re-resolves)."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    return f"spark-sql-kafka {connector_version()} pom sha256 {digest}"


def installed(jars: Path | None = None) -> bool:
    stamp = (jars or jars_dir()) / STAMP
    return stamp.exists() and stamp.read_text().splitlines()[:1] == [_pin()]


def jar_paths(jars: Path | None = None) -> list[Path] | None:
    """The installed jars, one per artifact the connector needs; None when the cache
    is missing, stale (another pin) or lacks one of them."""
    jars = jars or jars_dir()
    if not installed(jars):
        return None
    found = sorted(jars.glob("*.jar"))
    for artifact in ARTIFACTS:
        if not any(re.fullmatch(rf"{re.escape(artifact)}-\d[^/]*\.jar", p.name) for p in found):
            return None
    return found


def asked_for(conf: Mapping[str, str]) -> bool:
    """Whether Spark settings bring the connector already: ``spark.jars.packages`` (Spark
    resolves it at start) or ``spark.jars`` naming it. The user's choice then stands."""
    return any(_ARTIFACT in conf.get(name, "") for name in ("spark.jars", "spark.jars.packages"))


def session_jars(conf: Mapping[str, str], *, own_jvm: bool) -> list[str]:
    """The jars to add to ``spark.jars`` of a session that reads with the connector,
    given the Spark settings ``conf`` it is built with (spark-submit's, then
    ``sink.spark_conf``): none when ``conf`` asks for the connector itself, else the
    cached ones. ``own_jvm`` False: spark-submit started the driver's JVM, whose
    classpath a later ``spark.jars`` no longer reaches.

    Raises ConfigError naming ``sink.source``, in one line saying what to do, when
    the connector is nowhere to be had.
    """
    if asked_for(conf):
        return []
    if not own_jvm:
        raise ConfigError(
            SOURCE_SETTING,
            "kafka: Spark's Kafka connector is not on spark-submit's classpath: pass "
            "--jars $(python -m probe.spark_kafka jars) (after `make spark-kafka`) or "
            f"--packages {package_coordinate()}",
        )
    paths = jar_paths()
    if paths is None:
        raise ConfigError(
            SOURCE_SETTING,
            f"kafka: Spark's Kafka connector jars are not in {jars_dir()}: run "
            "`make spark-kafka` (python -m probe.spark_kafka install), or set "
            f"sink.spark_conf spark.jars.packages: {package_coordinate()}",
        )
    return [str(path) for path in paths]


def require_connector(source: str, spark_conf: Mapping[str, str]) -> None:
    """``sink.source: kafka`` with Spark's connector nowhere to be had (no cached jars,
    none asked for in ``sink.spark_conf``): the ConfigError of :func:`session_jars`,
    raised before a broker, a probe or Spark starts, by every command with a Spark
    query. Under spark-submit the session checks spark-submit's own settings instead
    (probe/spark/session.py), which only the started JVM knows."""
    if source != "kafka" or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    session_jars(spark_conf, own_jvm=True)


def install(jars: Path | None = None, *, maven: str = "mvn") -> Path:
    """Resolve the pinned jars from Maven Central into ``jars`` (once: a later call
    finds the stamp and returns). The copy is made beside and renamed into place, so
    an interrupted install leaves nothing that looks installed."""
    jars = jars or jars_dir()
    if installed(jars):
        return jars
    jars.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".resolving-", dir=jars.parent))
    try:
        subprocess.run(
            [
                maven, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
                "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
            ],
            check=True,
        )  # fmt: skip
        names = sorted(p.name for p in staging.glob("*.jar"))
        (staging / STAMP).write_text(_pin() + "\n" + "\n".join(names) + "\n")
        shutil.rmtree(jars, ignore_errors=True)
        staging.rename(jars)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return jars
