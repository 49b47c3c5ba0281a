"""The status page of a real `sla-probe run`, rendered by headless Chromium, through a
broker outage and its recovery.

What the browser made of the page (``--dump-dom``) is asserted on, not the bytes
served: the page must hold up as a document without JavaScript. The conditions are
waited for on the served page (cheap), then checked in the browser; a screenshot of
each phase, and the DOM it was asserted on, stay in test-artifacts/status-page/ for a
person (and CI's artefacts) to look at.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from probe.embedded import EmbeddedBroker
from tests.chromium import ARTIFACTS, Chromium
from tests.conftest import RunningProbe, run_args, wait_for
from tests.status_dom import Element, parse

pytestmark = pytest.mark.broker


def served(url: str) -> Element | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return parse(reply.read().decode())
    except OSError:
        return None


def keep(dom: str, path: Path) -> str:
    """The browser's DOM, kept beside the screenshots."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dom)
    return dom


def readiness(dom: Element) -> tuple[str, str]:
    element = dom.by_id("readiness")
    assert element is not None
    return element.attrs["data-ready"], element.cell("reason")


def consumer_stage(dom: Element) -> Element:
    (stage,) = [s for s in dom.find_all("section", "stage") if s.attrs["data-stage"] == "consumer"]
    return stage


def completed_rounds(dom: Element) -> list[Element]:
    """The consumer stage's rounds, newest first, the one in progress left out."""
    return [
        row
        for row in consumer_stage(dom).find_all("tr", "round")
        if "in progress" not in row.cell("verdict")
    ]


def failures(dom: Element, outcome: str) -> list[Element]:
    return [row for row in dom.find_all("tr", "failure") if row.attrs["data-outcome"] == outcome]


def delivering_again(dom: Element | None) -> bool:
    """Ready, and the newest finished round delivered everything it decided."""
    if dom is None or readiness(dom)[0] != "true":
        return False
    rounds = completed_rounds(dom)
    return bool(rounds) and rounds[0].attrs["data-verdict"] == "ok"


def test_the_status_page_shows_an_outage_and_the_recovery_in_a_browser(
    own_broker: EmbeddedBroker,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
    tmp_path: Path,
) -> None:
    # Losses are declared 5 s after the produce, so the outage's canaries are decided
    # while the test watches rather than a minute later.
    config = tmp_path / "probe.yaml"
    config.write_text("judge:\n  loss_timeout: 5s\n")
    probe = start_probe(
        *run_args(own_broker.bootstrap_servers, topic, key_file), "--config", str(config)
    )
    url = f"http://127.0.0.1:{probe.port}/"
    browser = Chromium(tmp_path / "chromium-profile")
    shots = ARTIFACTS / "status-page"

    wait_for(lambda: delivering_again(served(url)), timeout=30, what="a round delivered")
    healthy = parse(keep(browser.dom(url), shots / "1-healthy.html"))
    assert readiness(healthy)[0] == "true"
    refresh = [m for m in healthy.find_all("meta") if m.attrs.get("http-equiv") == "refresh"]
    assert refresh, "the page refreshes itself"
    assert not healthy.find_all("script")
    browser.screenshot(url, shots / "1-healthy.png")

    own_broker.stop()

    def outage_shown() -> Element | None:
        dom = served(url)
        if dom is None or readiness(dom)[0] != "false":
            return None
        return dom if failures(dom, "produce_failed") else None

    wait_for(outage_shown, timeout=40, what="the outage on the page")
    during = parse(keep(browser.dom(url), shots / "2-outage.html"))
    browser.screenshot(url, shots / "2-outage.png")
    ready, reason = readiness(during)
    assert ready == "false"
    # The target's own words, naming the broker: first what the client saw ("no broker
    # of ... answered"), then, once the lost connection is diagnosed, why ("cannot
    # connect to ...: connection refused ..."): which one the page shows depends on
    # when it is read.
    assert own_broker.bootstrap_servers in reason, reason
    assert "answered" in reason or "connection refused" in reason, reason
    failed = failures(during, "produce_failed")
    assert failed
    for row in failed:
        assert row.cell("reason").startswith("not acknowledged: "), row.cell("reason")
        assert row.cell("partition").isdigit()
        assert row.cell("stage") == "consumer"
    rounds = consumer_stage(during).find_all("tr", "round")
    assert any(r.attrs["data-verdict"] == "failing" for r in rounds)
    availability = consumer_stage(during).find_all("table", "slo")[0]
    five_minutes = availability.find_all("tr", "window")[0]
    assert five_minutes.attrs["data-window"] == "5m"
    assert float(five_minutes.attrs["data-burn-rate"]) > 1.0

    own_broker.start()
    wait_for(lambda: delivering_again(served(url)), timeout=90, what="delivering again")
    after = parse(keep(browser.dom(url), shots / "3-recovered.html"))
    browser.screenshot(url, shots / "3-recovered.png")
    assert readiness(after)[0] == "true"
    newest = completed_rounds(after)[0]
    assert newest.attrs["data-verdict"] == "ok"
    assert int(newest.cell("delivered")) > 0
    # The outage stays listed among the last failures after the recovery.
    assert failures(after, "produce_failed")
    assert probe.process.poll() is None
