"""`sla-probe keygen`: new rings, the three rotation steps, and refusing what is unsafe."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from probe.cli import main
from probe.core.canary import Canary, decode, encode
from probe.core.keys import KeyRing
from probe.keyfile import read_key_file


def _keygen(*args: str) -> Result:
    return CliRunner().invoke(main, ["keygen", *args])


def _one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_prints_a_new_ring() -> None:
    result = _keygen("--kid", "k1")

    assert result.exit_code == 0
    assert KeyRing.from_json(result.stdout).kids == ("k1",)


def test_output_writes_0600_and_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"

    assert _keygen("--output", str(path), "--kid", "k1").exit_code == 0
    first = read_key_file(path)
    assert _mode(path) == 0o600

    _one_line_error(_keygen("--output", str(path)), "--output", "exists; pass --force")
    assert read_key_file(path) == first

    assert _keygen("--output", str(path), "--force", "--kid", "k9").exit_code == 0
    assert read_key_file(path).kids == ("k9",)
    assert _mode(path) == 0o600


def test_output_never_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "planted"
    link = tmp_path / "keys.json"
    link.symlink_to(target)

    _one_line_error(_keygen("--output", str(link)), "exists")
    assert not target.exists()

    assert _keygen("--output", str(link), "--force").exit_code == 0
    assert not link.is_symlink()  # the link was replaced, not written through
    assert not target.exists()


def test_output_into_a_missing_directory_or_onto_a_directory(tmp_path: Path) -> None:
    _one_line_error(_keygen("--output", str(tmp_path / "missing" / "keys.json")), "does not exist")
    _one_line_error(_keygen("--output", str(tmp_path)), "is a directory")
    _one_line_error(_keygen("--output", str(tmp_path), "--force"), "is a directory")


def test_rotation_is_three_commands_without_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    assert _keygen("--output", str(path), "--kid", "k1").exit_code == 0
    canary = Canary("p", 1, "kafka", 0, 0, 1)
    signed_before = encode(canary, read_key_file(path))

    step1 = _keygen("--add", str(path), "--kid", "k2")
    after1 = read_key_file(path)
    step2 = _keygen("--activate", str(path), "--kid", "k2")
    after2 = read_key_file(path)
    step3 = _keygen("--drop", str(path), "--kid", "k1")
    after3 = read_key_file(path)

    assert [step.exit_code for step in (step1, step2, step3)] == [0, 0, 0]
    assert (after1.active_kid, after1.kids) == ("k1", ("k1", "k2"))
    assert (after2.active_kid, after2.kids) == ("k2", ("k1", "k2"))
    assert (after3.active_kid, after3.kids) == ("k2", ("k2",))
    assert after1.secret_for("k1") == after2.secret_for("k1")  # existing keys are kept
    assert after1.secret_for("k2") == after3.secret_for("k2")
    assert decode(signed_before, after1) == canary
    assert decode(signed_before, after2) == canary
    assert decode(encode(canary, after2), after1) == canary
    assert "added k2 to" in step1.stderr
    assert "active k1, keys k1, k2" in step1.stderr
    assert "activated k2 in" in step2.stderr
    assert "dropped k1 from" in step3.stderr
    assert "active k2, keys k2" in step3.stderr
    assert _mode(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keys.json"]


def test_add_without_kid_adds_a_random_one(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    _keygen("--output", str(path), "--kid", "k1")

    result = _keygen("--add", str(path))

    ring = read_key_file(path)
    assert result.exit_code == 0
    assert len(ring.kids) == 2
    assert ring.active_kid == "k1"
    (added,) = set(ring.kids) - {"k1"}
    assert f"added {added} to" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--add", "{ring}", "--kid", "k1"], ["signing_key_file.keys", "already has key 'k1'"]),
        (["--activate", "{ring}", "--kid", "k7"], ["must name one of the keys", "'k7'"]),
        (["--activate", "{ring}"], ["--activate", "needs --kid"]),
        (["--drop", "{ring}", "--kid", "k1"], ["'k1' is the active key"]),
        (["--drop", "{ring}", "--kid", "k7"], ["has no key 'k7'"]),
        (["--add", "{ring}", "--output", "{ring}"], ["cannot be combined"]),
        (["--add", "{ring}", "--drop", "{ring}", "--kid", "k1"], ["cannot be combined"]),
        (["--add", "{ring}", "--force"], ["--force", "only applies to --output"]),
        (["--add", "{dir}/missing.json"], ["cannot read", "No such file or directory"]),
        (["--add", "{dir}/link.json"], ["is a symbolic link"]),
        (["--add", "{dir}/latin1.json"], ["signing_key_file", "is not UTF-8 text"]),
        (["--kid", "has space"], ["signing_key_file.keys", "without whitespace"]),
    ],
)
def test_edit_errors_are_one_line_and_change_nothing(
    tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    ring = tmp_path / "keys.json"
    _keygen("--output", str(ring), "--kid", "k1")
    before = ring.read_bytes()
    (tmp_path / "link.json").symlink_to(ring)
    (tmp_path / "latin1.json").write_bytes(b'{"active": "k\xe9"}')

    result = _keygen(*(arg.format(ring=ring, dir=tmp_path) for arg in args))

    _one_line_error(result, *fragments)
    assert ring.read_bytes() == before
    assert (tmp_path / "link.json").is_symlink()


@pytest.mark.parametrize("command", ["once", "run"])
def test_a_key_file_that_is_not_utf8_exits_two_naming_the_field(
    tmp_path: Path, command: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(b'{"active": "k1", "keys": {"k1": "\xc3\x28"}}')

    result = CliRunner().invoke(
        main,
        [command, "--signing-key-file", str(path), "--bootstrap-servers", "127.0.0.1:9"],
    )

    _one_line_error(result, "signing_key_file", "is not UTF-8 text")
    assert "Traceback" not in result.output


def test_printed_ring_is_the_documented_format() -> None:
    document = json.loads(_keygen("--kid", "k1").stdout)

    assert set(document) == {"active", "keys"}
    assert document["active"] == "k1"
