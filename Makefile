# Quickstart on a stock Debian 12 machine with python3, make and Java 17
# (openjdk-17-jre-headless), as root or a user with sudo; everything else is installed:
#   make demo   set everything up, run `sla-probe once --embedded` (a broker started for it)
#   make test   set everything up, run every test
# .ci/stock-debian proves it on a clean Debian 12 root file system.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
# uv: the one on PATH when it reads uv.lock, else the pinned one .ci/toolchain.py fetches
# from PyPI into ~/.cache/synthetic-sla-probe/ (SHA-256 checked), never `pip install`:
# Debian's Python refuses that outside a venv (PEP 668). Looked up once per make run,
# and only by a target that uses it.
UV = $(eval UV := $(shell $(PYTHON) .ci/toolchain.py uv || echo uv-not-found))$(UV)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# What `make demo` needs of Debian beyond python3 and Java: the CA certificates the
# toolchain's downloads check PyPI's and the Go proxy's certificates with (a path: a
# user's PATH has no /usr/sbin).
DEMO_DEBIAN_PACKAGES := ca-certificates:/usr/sbin/update-ca-certificates
# Debian packages the tests run for real: promtool and Prometheus, Mosquitto and its
# own client (an MQTT client independent of the probe's, for hostile records),
# Alertmanager (the documented inhibition of the SLO alerts), libfaketime (a
# producing probe whose clock runs ahead, in the producer-clock-skew game day), and
# Maven (Apache Kafka's jars and Spark's Kafka connector from Maven Central, `make kafka`,
# `make spark-kafka`), the Pushgateway (`once --push-gateway`), Chromium (the status
# page, rendered headless) and openssl (the test CAs of Mosquitto's and Kafka's TLS
# tests). Each as package:command, installed when the command is missing.
DEBIAN_PACKAGES := $(DEMO_DEBIAN_PACKAGES) openssl:openssl \
  prometheus:promtool mosquitto:mosquitto mosquitto-clients:mosquitto_pub \
  prometheus-alertmanager:prometheus-alertmanager faketime:faketime maven:mvn \
  prometheus-pushgateway:prometheus-pushgateway chromium:chromium
export UV_PYTHON_DOWNLOADS := never

.PHONY: demo test setup system-deps demo-system-deps python-deps demo-deps uv kafka spark-kafka junit-schema \
  sloth lint docs bench lock rules slo-specs dashboard reference gameday gameday-tests detection-table clean

demo: demo-deps
	$(VENV)/bin/sla-probe once --embedded --stages consumer,sink

test: setup
	$(VENV)/bin/pytest

setup: system-deps python-deps kafka spark-kafka junit-schema sloth

# Apache Kafka's broker jars, pinned in probe/apache_kafka/pom.xml, resolved from Maven
# Central once into ~/.cache/synthetic-sla-probe/ (SLA_PROBE_KAFKA_LIBS elsewhere): the
# three-broker KRaft cluster of the tests and the broker game days (the newest release)
# and of the smoke subset (the oldest 4.x line), and MirrorMaker 2's (connect-mirror)
# for the mirror stage's. Nothing is fetched at test time.
kafka: system-deps python-deps
	$(VENV)/bin/python -m probe.apache_kafka install

# Spark's own Kafka connector (spark-sql-kafka-0-10 and the three jars it needs that
# pyspark lacks), pinned in probe/spark_kafka/pom.xml, resolved once into
# ~/.cache/synthetic-sla-probe/ (SLA_PROBE_SPARK_KAFKA_JARS elsewhere): what a session
# with sink.source: kafka puts on spark.jars. Nothing is fetched at run time.
spark-kafka: system-deps python-deps
	$(VENV)/bin/python -m probe.spark_kafka install

# Jenkins' JUnit schema, which `once --junit` is validated against in the tests: from
# pytest's source distribution on PyPI (pinned, SHA-256 checked) into the cache, once.
junit-schema: python-deps
	$(VENV)/bin/python -m tests.junit_schema install

# Sloth, which the tests turn the chart's Sloth spec into rules with: built from its Go
# source (github.com/slok/sloth/cmd/sloth, pinned in tests/sloth.py) with `go install`
# into ~/.cache/synthetic-sla-probe/bin, its CRD beside it, once: skipped when the binary
# there was built from the pinned version. Go from PATH, else /usr/local/go/bin/go. A cold
# build takes 6 to 8 minutes on two cores (Go's build cache: seconds). Sloth needs Go
# 1.26 (Debian 12's golang is 1.19): the go on PATH or /usr/local/go/bin/go when recent
# enough, else the pinned toolchain .ci/toolchain.py fetches from the Go module proxy
# into ~/.cache/synthetic-sla-probe/ (SHA-256 checked), put first on PATH here.
sloth: python-deps
	@go=$$($(PYTHON) .ci/toolchain.py go) && \
	PATH="$${go%/go}:$$PATH" $(VENV)/bin/python -m tests.sloth install

# Installs a Debian package only when its command is missing.
define install-missing
@missing=""; \
for pair in $(1); do \
  command -v "$${pair#*:}" >/dev/null 2>&1 || missing="$$missing $${pair%%:*}"; \
done; \
if [ -n "$$missing" ]; then \
  echo "installing Debian packages:$$missing"; \
  $(SUDO) apt-get update -qq && \
  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
fi
endef

system-deps:
	$(call install-missing,$(DEBIAN_PACKAGES))

demo-system-deps:
	$(call install-missing,$(DEMO_DEBIAN_PACKAGES))

# Every Python package comes from uv.lock, exactly. `uv sync` makes the venv match
# what is asked, so after `make demo` the next `make test` adds the dev group back.
# Compiled to bytecode once, here: where PYTHONDONTWRITEBYTECODE is set (CI images set
# it) every Python process would otherwise compile pandas, pyarrow and pyspark from
# source, 2 CPU-seconds each time, and Spark starts several Python workers per query.
python-deps: uv
	$(UV) sync --frozen --all-extras --compile-bytecode --python $(PYTHON)
	$(VENV)/bin/python -m compileall -q probe

# The demo needs the runtime and the Spark extra only: no test or lint tools, no Helm.
demo-deps: uv
	$(UV) sync --frozen --no-dev --extra spark --compile-bytecode --python $(PYTHON)
	$(VENV)/bin/python -m compileall -q probe

uv: demo-system-deps
	@$(UV) --version

lint: python-deps
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check probe tests benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(MAKE) --no-print-directory docs

# The docs as a site in .site/ (MkDocs, config in docs/.mkdocs/): --strict, so a link to
# a page or an anchor that does not exist fails the build, and `make lint` with it.
docs: python-deps
	$(VENV)/bin/mkdocs build --strict --quiet -f docs/.mkdocs/mkdocs.yml

bench: python-deps
	@for script in benchmarks/bench_*.py; do echo "== $$script"; $(VENV)/bin/python $$script || exit 1; done
	@echo "== benchmarks/bench_once.py --stages consumer,sink"
	@$(VENV)/bin/python benchmarks/bench_once.py --stages consumer,sink

lock:
	$(UV) lock --python $(PYTHON)

# Re-render the plain Prometheus rules file from the chart's rules template.
rules: python-deps
	$(VENV)/bin/python charts/render_rules.py

# Re-render the plain Sloth spec (charts/sloth/) and Pyrra's ServiceLevelObjectives
# (charts/pyrra/) from the chart's SLO definitions, the same as the rules'.
slo-specs: python-deps
	$(VENV)/bin/python charts/render_slo_specs.py

# Re-build the chart's Grafana dashboard (dashboards/synthetic-sla-probe.json) from its
# code, charts/dashboard.py (grafana-foundation-sdk, a dev dependency).
dashboard: python-deps
	$(VENV)/bin/python charts/dashboard.py

# Re-generate the reference pages (docs/reference/: settings, metrics, commands) from the
# code, docs/reference/generate.py; tests/test_reference_docs.py fails when they are stale.
reference: python-deps
	$(VENV)/bin/python docs/reference/generate.py

# The slow game days: the tests marked `gameday` (a fault injected under a running probe,
# end to end: broker-stop and kafka-rolling-restart through `sla-probe gameday`, staging
# mode, the sink's JVM killed, an executor lost, a broker restarted empty, an unclean
# election under the sink, a member flapping in the probe's group), which `make test`
# leaves out for time; then every local scenario, the slow ones too, each held to its
# `expect:`.
gameday: gameday-tests
	$(VENV)/bin/sla-probe gameday --all scenarios/ --slow

# The slow game days of the test suite alone (about 8 minutes on two cores); every
# scenario (above) takes an hour more.
gameday-tests: setup
	$(VENV)/bin/pytest -m gameday

# Run every local scenario and rewrite the table of measured times-to-detect in
# docs/detection.md (README links to it).
detection-table: setup
	$(VENV)/bin/sla-probe gameday --all scenarios/ --slow --write-table docs/detection.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
