"""An unclean leader election under the probe (Apache Kafka, a cluster of its own).

The canary topic allows it (unclean.leader.election.enable, min.insync.replicas 1);
two brokers stop, the third leads every partition alone and acknowledges canaries
the others never get, then dies; the other two come back and one of them, stale, is
elected. Its logs are shorter than the reader's positions (OFFSET_OUT_OF_RANGE), it
knows nothing of an idempotent probe's producer id (OUT_OF_ORDER_SEQUENCE_NUMBER), and the
probe's clients last heard of the dead broker alone. The probe must come back by
itself as soon as the new leaders serve: every partition delivered again, no
canary read twice (no false duplicates), none of the new ones skipped (no false loss).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from probe.apache_kafka.cluster import KafkaCluster
from tests.apache_kafka.kafka_admin import admin, describe
from tests.conftest import RunningProbe, run_args, sample, wait_for

# The sink stage's Spark session, first batch included, on a loaded machine.
SINK_UP = 180.0


# The sink variant's waits add up to more than the suite's 300 s on a slow machine
# (Spark's start, then the sink catching up after the election): its own deadlines,
# which name what did not happen, must fire before pytest-timeout's.
@pytest.mark.parametrize(
    "variant",
    [
        pytest.param("plain-sink", marks=[pytest.mark.timeout(720), pytest.mark.gameday]),
        "idempotent",
    ],
)
def test_the_probe_reads_and_writes_on_after_an_unclean_election(
    variant: str,
    own_kafka_cluster: KafkaCluster,
    topic: str,
    key_file: Path,
    start_probe: Callable[..., RunningProbe],
) -> None:
    idempotence, sink = variant == "idempotent", variant == "plain-sink"
    cluster, servers = own_kafka_cluster, own_kafka_cluster.bootstrap_servers
    unclean = {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    client = admin(servers)  # held until the topic is created: a collected one fails
    client.create_topics([NewTopic(topic, 3, 3, config=unclean)])[topic].result(timeout=60)
    args = [a for a in run_args(servers, topic, key_file) if a != "--create-topic"]
    flags = ["--idempotence"] if idempotence else []
    if sink:
        flags += ["--stages", "consumer,sink", "--sink-path", str(key_file.parent / "sink")]
    probe = start_probe(*args, "--no-create-topic", *flags)

    def count(name: str, **labels: str) -> float:
        return sample(probe.metrics(), name, **labels)

    if sink:
        # First: the Spark session starts in the probe's process, and on a loaded
        # machine its start holds up the rounds too.
        wait_for(
            lambda: probe.process.poll() is not None or probe.canaries("delivered", "sink") >= 3,
            timeout=SINK_UP,
            what="canaries delivered in the sink stage",
        )
        assert probe.process.poll() is None, probe.log.read_text()[-3000:]
    wait_for(lambda: probe.canaries("delivered") >= 3 * 3, timeout=60, what="3 rounds")
    cluster.node(1).stop()
    cluster.node(3).stop()
    alone = probe.canaries("delivered")
    wait_for(lambda: probe.canaries("delivered") >= alone + 3 * 3, timeout=60,
             what="3 rounds acknowledged by broker 2 alone")  # fmt: skip
    cluster.node(2).kill()
    cluster.start_nodes(1, 3)
    wait_for(
        lambda: all(d.leader in (1, 3) for d in describe(servers, topic).values()),
        timeout=60,
        what="stale replicas elected uncleanly",
    )
    elected = probe.canaries("delivered")
    wait_for(
        lambda: (
            probe.canaries("delivered") >= elected + 3 * 5
            and count("synthetic_sla_stale_partitions", stage="consumer") == 0
        ),
        timeout=90,
        what="five rounds delivered by the new leaders, no partition stale",
    )
    if sink:
        judged = probe.canaries("delivered", "sink")
        wait_for(
            lambda: probe.canaries("delivered", "sink") >= judged + 3 * 5,
            timeout=SINK_UP,
            what="five rounds delivered at the sink after the election",
        )
    log = probe.log.read_text()
    assert "positions out of range" in log
    # Only an idempotent producer has state on the brokers to lose.
    assert ("starting a new producer" in log) is idempotence
    assert count("synthetic_sla_duplicates_total") == 0  # at every stage
    # A produce given up on when broker 2 died may still land beside its successor
    # (the client wrote it after all): every stage that reads it says resurrected,
    # never duplicate, and only of canaries whose produce was given up on.
    given_up = probe.canaries("produce_failed")
    for stage in ("consumer", "sink") if sink else ("consumer",):
        assert count("synthetic_sla_resurrected_total", stage=stage) <= given_up, stage
    assert probe.canaries("lost") == 0
