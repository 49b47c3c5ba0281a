"""`once`'s result pushed to a Prometheus Pushgateway, where batch jobs report.

A smoke test in a deploy pipeline or a CronJob prints its report and exits; nothing
would record that the last one failed, or that none ran for hours. So each target's
result is pushed as its own group (``job``, ``instance``, ``target``, and any
``grouping`` labels; the instance defaults to the target, never to the host name a CI
job changes every run), with PUT: the push replaces the group's last one, so the
Pushgateway holds the latest result per target, never a mixture::

    >>> registry = smoke_registry(tally, ended_at=1767268800.0, duration_s=4.2, buckets=(...))
    >>> push_report(config, report, ended_at=..., duration_s=...)   # [] or the failures

The series (all gauges but the latency histogram, each of this run alone; defined in
:mod:`probe.metrics.smoke`):
``synthetic_sla_smoke_success`` (1 passed, 0 failed), ``synthetic_sla_smoke_canaries
{stage,outcome}``, ``synthetic_sla_smoke_latency_seconds{stage}``,
``synthetic_sla_smoke_failing_partitions{stage}``,
``synthetic_sla_smoke_last_run_timestamp_seconds`` and
``synthetic_sla_smoke_duration_seconds``. The shipped rules ticket a failed smoke
test and one that stopped running (SyntheticSlaSmokeTestFailed, ...Stale).

A push that fails does not change the run's verdict: it is reported (one line on
stderr, and in the log) and the exit code stays the smoke test's.
"""

from __future__ import annotations

import base64
import logging
import ssl
import urllib.request
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, push_to_gateway

from probe.config import ProbeConfig, PushGatewayConfig, StageName
from probe.core.judge import Outcome
from probe.metrics import SmokeSeries, latency_buckets
from probe.services.report import Report, Tally

log = logging.getLogger(__name__)

# What prometheus_client calls a handler: (url, method, timeout, headers, data) -> a
# function that sends the request.
Handler = Callable[[str, str, float | None, list[tuple[str, str]], bytes], Callable[[], None]]


def smoke_registry(
    tally: Tally, *, ended_at: float, duration_s: float, buckets: Sequence[float]
) -> CollectorRegistry:
    """One target's result as the series of one push (:class:`SmokeSeries`), on a
    registry of its own."""
    registry = CollectorRegistry()
    series = SmokeSeries(registry, latency_buckets=buckets)
    series.success.set(1 if tally.ok else 0)
    for stage, stage_tally in sorted(tally.stages.items()):
        for outcome in Outcome:
            series.canaries.labels(stage, outcome.value).set(stage_tally.outcomes[outcome.value])
        latency = series.latency.labels(stage)
        for milliseconds in stage_tally.latencies_ms:
            latency.observe(milliseconds / 1000)
        series.failing.labels(stage).set(len(stage_tally.failing))
    series.last_run.set(ended_at)
    series.duration.set(duration_s)
    return registry


def grouping_key(settings: PushGatewayConfig, target: str) -> dict[str, str]:
    """The group a target's push replaces: instance, target and the extra labels (the
    job is the push's own argument).

    The instance is the one configured, else the target's name: the same for every run
    of a pipeline whichever runner or pod it lands on, so each push replaces the last
    one's result and the smoke alerts resolve with the next passing run::

        >>> grouping_key(PushGatewayConfig(url="http://pushgateway:9091"), "orders")
        {'instance': 'orders', 'target': 'orders'}
    """
    return {**settings.grouping, "instance": settings.instance or target, "target": target}


def handler(settings: PushGatewayConfig) -> Handler:
    """A request sender with the configured basic auth and TLS (prometheus_client's
    own handlers take one or the other, and TLS only with a client certificate)."""
    context: ssl.SSLContext | None = None
    if settings.tls is not None:
        tls = settings.tls
        context = ssl.create_default_context(
            cafile=str(tls.ca_file) if tls.ca_file is not None else None
        )
        context.check_hostname = tls.check_hostname
        if tls.cert_file is not None and tls.key_file is not None:
            context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    authorization: str | None = None
    if settings.username is not None:
        # Read here, at the push: a password rotated in its file is used by the next run.
        secret = f"{settings.username}:{settings.password_value() or ''}".encode()
        authorization = "Basic " + base64.b64encode(secret).decode()

    def send(
        url: str, method: str, timeout: float | None, headers: list[tuple[str, str]], data: bytes
    ) -> Callable[[], None]:
        def sending() -> None:
            request = urllib.request.Request(url, data=data, method=method)
            for name, value in headers:
                request.add_header(name, value)
            if authorization is not None:
                request.add_header("Authorization", authorization)
            with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
                if reply.status >= 400:
                    raise OSError(f"the Pushgateway answered {reply.status} {reply.reason}")

        return sending

    return send


def push_report(
    config: ProbeConfig, report: Report, *, ended_at: float, duration_s: float
) -> list[str]:
    """Push each target's result; the failures, one line each (none: all pushed)."""
    settings = config.once.push_gateway
    if settings is None:
        return []
    buckets = latency_buckets(
        *(config.latency_threshold(stage) for stage in StageName), config.judge.freshness
    )
    try:
        send = handler(settings)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return [f"cannot push to {settings.url}: {exc}"]
    failures = []
    for tally in report.tallies:
        registry = smoke_registry(tally, ended_at=ended_at, duration_s=duration_s, buckets=buckets)
        group = grouping_key(settings, tally.target)
        try:
            push_to_gateway(
                settings.url,
                job=settings.job,
                registry=registry,
                grouping_key=group,
                timeout=settings.timeout,
                handler=send,
            )
        except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
            failures.append(f"cannot push target {tally.target} to {settings.url}: {exc}")
        else:
            log.info("pushed the result of %s to %s", tally.target, settings.url)
    return failures
