"""The signing key ring: key file contract, validation, rotation, secrecy."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from probe.core.canary import Canary, decode, encode
from probe.core.errors import CanaryRejected, ConfigError, RejectReason
from probe.core.keys import KeyRing, generate_key_ring

OLD = b"old-secret-0123456789"
NEW = b"new-secret-9876543210"
CANARY = Canary("probe-a", 1, "kafka", 2, 3, 4)


def _b64(secret: bytes) -> str:
    return base64.b64encode(secret).decode("ascii")


kids = st.text(
    alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=32
)
rings = st.dictionaries(kids, st.binary(min_size=16, max_size=64), min_size=1, max_size=4).flatmap(
    lambda keys: st.sampled_from(sorted(keys)).map(lambda active: KeyRing(keys, active))
)


@given(rings)
def test_json_round_trip(ring: KeyRing) -> None:
    again = KeyRing.from_json(ring.to_json())

    assert again == ring
    assert again.active_kid == ring.active_kid
    assert again.kids == ring.kids
    assert all(again.secret_for(kid) == ring.secret_for(kid) for kid in ring.kids)


def test_reads_the_documented_key_file_format() -> None:
    text = json.dumps({"active": "k2", "keys": {"k1": _b64(OLD), "k2": _b64(NEW)}})

    ring = KeyRing.from_json(text)

    assert ring.active_kid == "k2"
    assert ring.active_secret == NEW
    assert ring.kids == ("k1", "k2")
    assert ring.secret_for("k1") == OLD
    assert ring.secret_for("k3") is None


def test_writes_the_documented_key_file_format() -> None:
    ring = KeyRing({"k1": OLD, "k2": NEW}, active="k1")

    document = json.loads(ring.to_json())

    assert document == {"active": "k1", "keys": {"k1": _b64(OLD), "k2": _b64(NEW)}}


def test_rotation_has_no_gap_and_dropping_the_old_key_ends_it() -> None:
    before = KeyRing({"old": OLD}, active="old")
    in_flight = encode(CANARY, before)
    # Step 1: add the new key everywhere; step 2: switch active to it.
    both_known = KeyRing({"old": OLD, "new": NEW}, active="old")
    switched = KeyRing({"old": OLD, "new": NEW}, active="new")
    # Step 3: drop the old key.
    after = KeyRing({"new": NEW}, active="new")

    assert decode(in_flight, both_known) == CANARY
    assert decode(in_flight, switched) == CANARY
    assert decode(encode(CANARY, switched), both_known) == CANARY
    assert decode(encode(CANARY, switched), after) == CANARY
    with pytest.raises(CanaryRejected) as rejected:
        decode(in_flight, after)
    assert rejected.value.reason is RejectReason.UNKNOWN_KEY
    assert rejected.value.claimed_probe_id == "probe-a"


def test_signs_with_the_active_key_only() -> None:
    ring = KeyRing({"old": OLD, "new": NEW}, active="new")

    with pytest.raises(CanaryRejected) as rejected:
        decode(encode(CANARY, ring), KeyRing({"old": OLD}, active="old"))

    assert rejected.value.reason is RejectReason.UNKNOWN_KEY


@pytest.mark.parametrize(
    ("keys", "active", "field", "message"),
    [
        ({}, "k1", "signing_key_file.keys", "at least one key"),
        ({"k1": OLD}, "k2", "signing_key_file.active", "must name one of the keys"),
        ({"k1": b"x" * 15}, "k1", "signing_key_file.keys.k1", "at least 16 bytes"),
        ({"k1": "not bytes"}, "k1", "signing_key_file.keys.k1", "must be bytes"),
        ({"": OLD}, "", "signing_key_file.keys", "1..32 characters"),
        ({"k" * 33: OLD}, "k" * 33, "signing_key_file.keys", "1..32 characters"),
        ({"a b": OLD}, "a b", "signing_key_file.keys", "without whitespace"),
        ({"tab\t": OLD}, "tab\t", "signing_key_file.keys", "without whitespace"),
        ({"kö": OLD}, "kö", "signing_key_file.keys", "printable ASCII"),
        ({"k\x7f": OLD}, "k\x7f", "signing_key_file.keys", "printable ASCII"),
    ],
)
def test_each_validation_error_names_its_field(
    keys: dict[str, bytes], active: str, field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        KeyRing(keys, active)

    assert error.value.field == field
    assert message in error.value.message


def test_validation_accepts_the_boundaries() -> None:
    ring = KeyRing({"k" * 32: b"s" * 16, "!~": b"t" * 16}, active="!~")

    assert ring.kids == ("!~", "k" * 32)


def test_field_prefix_is_the_callers_path() -> None:
    with pytest.raises(ConfigError) as error:
        KeyRing.from_json('{"active": "k1", "keys": {"k1": "c2hvcnQ="}}', field="targets[0].key")

    assert error.value.field == "targets[0].key.keys.k1"
    assert str(error.value) == "targets[0].key.keys.k1: secret must be at least 16 bytes"


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("", "signing_key_file", "not valid JSON"),
        ("{'active': 'k1'}", "signing_key_file", "not valid JSON"),
        ('{"active": "k1", "keys": {', "signing_key_file", "not valid JSON"),
        ("[" * 100_000, "signing_key_file", "not valid JSON"),
        ("[]", "signing_key_file", "must be a JSON object"),
        ('"k1"', "signing_key_file", "must be a JSON object"),
        ('{"active": "k1"}', "signing_key_file.keys", "missing"),
        (f'{{"keys": {{"k1": "{_b64(OLD)}"}}}}', "signing_key_file.active", "missing"),
        (f'{{"active": 1, "keys": {{"k1": "{_b64(OLD)}"}}}}', "signing_key_file.active", "string"),
        ('{"active": "k1", "keys": ["k1"]}', "signing_key_file.keys", "must be an object"),
        ('{"active": "k1", "keys": {}}', "signing_key_file.keys", "at least one key"),
        ('{"active": "k1", "keys": {"k1": 12}}', "signing_key_file.keys.k1", "base64 string"),
        (
            '{"active": "k1", "keys": {"k1": "!!not base64!!"}}',
            "signing_key_file.keys.k1",
            "base64",
        ),
        ('{"active": "k1", "keys": {"k1": "AAAA="}}', "signing_key_file.keys.k1", "base64"),
        ('{"active": "k1", "keys": {"k1": "ÄÄÄÄ"}}', "signing_key_file.keys.k1", "base64"),
        ('{"active": "k1", "keys": {"k1": "c2hvcnQ="}}', "signing_key_file.keys.k1", "16 bytes"),
        (
            f'{{"active": "k2", "keys": {{"k1": "{_b64(OLD)}"}}}}',
            "signing_key_file.active",
            "one of the keys ('k1',)",
        ),
        (
            f'{{"active": "k1", "keys": {{"k1": "{_b64(OLD)}"}}, "activ": "k1"}}',
            "signing_key_file.activ",
            "unknown field",
        ),
        (
            f'{{"active": "k1", "keys": {{"k1": "{_b64(OLD)}", "k1": "{_b64(NEW)}"}}}}',
            "signing_key_file",
            "'k1' appears twice",
        ),
        (
            f'{{"active": "k 1", "keys": {{"k 1": "{_b64(OLD)}"}}}}',
            "signing_key_file.keys",
            "without whitespace, got 'k 1'",
        ),
    ],
)
def test_bad_key_files_are_one_line_config_errors(text: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        KeyRing.from_json(text)

    assert error.value.field == field
    assert message in error.value.message
    assert "\n" not in str(error.value)
    # Secrets in a bad file must not leak into the message that gets logged.
    assert _b64(OLD) not in str(error.value)
    assert _b64(NEW) not in str(error.value)


def test_repr_and_str_never_show_secrets() -> None:
    ring = KeyRing({"k1": OLD, "k2": NEW}, active="k2")

    shown = repr(ring) + str(ring) + repr([ring]) + f"{ring}"

    assert shown.count("KeyRing(active='k2', kids=('k1', 'k2'))") == 4
    for secret in (OLD, NEW):
        assert str(secret) not in shown
        assert secret.decode() not in shown
        assert _b64(secret) not in shown
        assert secret.hex() not in shown


def test_rings_are_equal_by_content_and_hash_alike() -> None:
    ring = KeyRing({"k1": OLD, "k2": NEW}, active="k1")

    assert ring == KeyRing({"k2": NEW, "k1": OLD}, active="k1")
    assert hash(ring) == hash(KeyRing({"k2": NEW, "k1": OLD}, active="k1"))
    assert ring != KeyRing({"k1": OLD, "k2": NEW}, active="k2")
    assert ring != KeyRing({"k1": OLD, "k2": OLD}, active="k1")
    assert ring != "KeyRing"


def test_ring_does_not_follow_later_changes_to_the_callers_mapping() -> None:
    keys = {"k1": OLD}
    ring = KeyRing(keys, active="k1")

    keys["k1"] = NEW
    keys["k2"] = NEW

    assert ring.secret_for("k1") == OLD
    assert ring.kids == ("k1",)


def test_generated_rings_have_a_random_32_byte_key_and_a_random_kid() -> None:
    first, second = generate_key_ring(), generate_key_ring()

    assert re.fullmatch(r"k[0-9a-f]{8}", first.active_kid)
    assert first.kids == (first.active_kid,)
    assert len(first.active_secret) == 32
    assert first.active_kid != second.active_kid
    assert first.active_secret != second.active_secret
    assert KeyRing.from_json(first.to_json()) == first


def test_generated_ring_takes_a_kid_and_validates_it() -> None:
    assert generate_key_ring("probe-a-2024").active_kid == "probe-a-2024"
    with pytest.raises(ConfigError) as error:
        generate_key_ring("has space")
    assert error.value.field == "signing_key_file.keys"


def test_rotation_steps_return_new_rings_and_keep_the_others() -> None:
    ring = KeyRing({"old": OLD}, active="old")

    step1 = ring.with_key("new", NEW)
    step2 = step1.with_active("new")
    step3 = step2.without("old")

    assert ring == KeyRing({"old": OLD}, active="old")  # rings stay immutable
    assert step1 == KeyRing({"old": OLD, "new": NEW}, active="old")
    assert step2 == KeyRing({"old": OLD, "new": NEW}, active="new")
    assert step3 == KeyRing({"new": NEW}, active="new")
    assert ring.with_key("new", NEW, activate=True) == step2


@pytest.mark.parametrize(
    ("step", "field", "message"),
    [
        (lambda r: r.with_key("old", NEW), "signing_key_file.keys", "already has key 'old'"),
        (lambda r: r.with_key("n w", NEW), "signing_key_file.keys", "without whitespace"),
        (lambda r: r.with_key("new", b"short"), "signing_key_file.keys.new", "16 bytes"),
        (lambda r: r.with_active("gone"), "signing_key_file.active", "got 'gone'"),
        (lambda r: r.without("gone"), "signing_key_file.keys", "has no key 'gone'"),
        (lambda r: r.without("old"), "signing_key_file.active", "'old' is the active key"),
    ],
)
def test_a_rotation_step_that_makes_no_sense_is_a_config_error(
    step: Callable[[KeyRing], KeyRing], field: str, message: str
) -> None:
    ring = KeyRing({"old": OLD, "other": NEW}, active="old")

    with pytest.raises(ConfigError) as error:
        step(ring)

    assert error.value.field == field
    assert message in error.value.message
