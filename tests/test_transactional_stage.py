"""The transactional stage where it cannot run: the embedded broker grants no
transactional producer id. On Apache Kafka: tests/apache_kafka/test_transactions_on_kafka.py;
its pure parts: tests/stages/test_aborted_rounds.py."""

from __future__ import annotations

import json
import subprocess

from tests.conftest import SLA_PROBE


def test_the_transactional_stage_on_a_broker_without_transactions_says_what_it_needs() -> None:
    done = subprocess.run(
        [SLA_PROBE, "once", "--embedded", "--json", "--stages", "consumer,transactional",
         "--rounds", "1"],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    (target,) = json.loads(done.stdout)["targets"]
    assert "no producer id granted for transactional id synthetic-sla-probe." in target["error"]
    assert "drop transactional from stages" in target["error"]
