"""The mirror section: the target cluster's own connection (its SASL password from
its own sources), the mirrored topic's name by MirrorMaker 2's policy, and a mirror
stage that names no cluster, or the canary topic itself, refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from probe.config import StageName, TargetKind, load
from probe.core.errors import ConfigError
from probe.transport import TRANSPORTS, mirror_config

SECRET = "m1rr0r-pa55"
MIRROR = {
    "kafka.bootstrap_servers": "source:9092",
    "stages": "consumer,mirror",
    "mirror.bootstrap_servers": "target:9092",
}


@pytest.mark.parametrize(
    ("mirror", "topic"),
    [
        ({}, "source.synthetic-sla"),
        ({"mirror.source_alias": "eu-west", "mirror.separator": "_"}, "eu-west_synthetic-sla"),
        ({"mirror.replication_policy": "identity"}, "synthetic-sla"),
        ({"mirror.topic": "dr.canaries"}, "dr.canaries"),
    ],
)
def test_the_mirrored_topic_is_named_as_the_replication_policy_names_it(
    mirror: dict[str, str], topic: str
) -> None:
    config = load(overrides={**MIRROR, **mirror})
    read = mirror_config(config).kafka
    assert read.topic == topic
    assert read.bootstrap_servers == "target:9092"
    # Read, never administered: MirrorMaker 2 owns the topic.
    assert not read.create_topic
    assert not read.move_leaders
    assert read.setting("tls.ca_file") == "mirror.tls.ca_file"
    # The mirror stage reads the source's partitions, each where its canary names it.
    layout = TRANSPORTS[TargetKind.KAFKA].layout(config)
    assert StageName.MIRROR in layout.stages
    assert layout.routed(StageName.MIRROR)


@pytest.mark.parametrize("source", ["inline", "file", "environment"])
def test_the_target_clusters_sasl_password_from_its_own_sources(
    tmp_path: Path, source: str
) -> None:
    overrides: dict[str, object] = {
        **MIRROR,
        "mirror.sasl.mechanism": "SCRAM-SHA-512",
        "mirror.sasl.username": "mirror-reader",
    }
    environ = {}
    if source == "inline":
        overrides["mirror.sasl.password"] = SECRET
    elif source == "file":
        (tmp_path / "password").write_text(SECRET + "\n")
        overrides["mirror.sasl.password_file"] = str(tmp_path / "password")
    else:
        environ["SLA_PROBE_MIRROR_SASL_PASSWORD"] = SECRET
    config = load(overrides=overrides, environ=environ)
    assert config.mirror.sasl is not None
    assert config.mirror.sasl.password_value() == SECRET
    # The source's SASL is untouched: the two clusters have their own credentials.
    assert config.kafka.sasl is None
    assert SECRET not in repr(config)


@pytest.mark.parametrize(
    ("overrides", "environ", "field", "words"),
    [
        ({"stages": "consumer,mirror"}, {}, "mirror.bootstrap_servers", "required by the mirror"),
        (
            {
                **MIRROR,
                "mirror.bootstrap_servers": "source:9092",
                "mirror.replication_policy": "identity",
            },
            {},
            "mirror.bootstrap_servers",
            "not its mirror",
        ),
        ({**MIRROR, "mirror.replication_policy": "legacy"}, {}, "mirror.replication_policy", ""),
        ({**MIRROR, "mirror.source_alias": "a b"}, {}, "mirror.source_alias", ""),
        (MIRROR, {"SLA_PROBE_MIRROR_SASL_PASSWORD": SECRET}, "mirror.sasl", "no mirror.sasl"),
        (
            {**MIRROR, "mirror.sasl.mechanism": "PLAIN", "mirror.sasl.username": "u"},
            {},
            "mirror.sasl.password_file",
            "SLA_PROBE_MIRROR_SASL_PASSWORD",
        ),
    ],
)
def test_mirror_mistakes_name_the_field(
    overrides: dict[str, object], environ: dict[str, str], field: str, words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        load(overrides=overrides, environ=environ)
    assert caught.value.field == field
