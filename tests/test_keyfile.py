"""The key file: reading it, writing it atomically, and following it while running.

The reload logic is driven by hand (``poll()``, ``reload()``): no sleeps, no watcher.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import stat
from pathlib import Path

import pytest

from probe.core.errors import ConfigError
from probe.core.keys import KeyRing
from probe.keyfile import (
    MAX_KEY_FILE_BYTES,
    KeyRingSource,
    create_key_file,
    look,
    read_key_file,
    replace_key_file,
)

OLD = KeyRing({"k1": b"1" * 32}, active="k1")
BOTH = KeyRing({"k1": b"1" * 32, "k2": b"2" * 32}, active="k1")
NEW = KeyRing({"k1": b"1" * 32, "k2": b"2" * 32}, active="k2")


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    path.chmod(mode)


def _source(tmp_path: Path, ring: KeyRing = OLD) -> tuple[KeyRingSource, Path]:
    path = tmp_path / "keys.json"
    _write(path, ring.to_json())
    return KeyRingSource.from_file(path), path


def _secrets_in(text: str, *rings: KeyRing) -> list[str]:
    return [
        shown
        for ring in rings
        for kid in ring.kids
        for secret in [ring.secret_for(kid) or b""]
        for shown in (base64.b64encode(secret).decode(), secret.decode(errors="replace"))
        if shown in text
    ]


# -- reading --------------------------------------------------------------------------


def test_reads_a_key_file(tmp_path: Path) -> None:
    source, path = _source(tmp_path, BOTH)

    assert source.ring == BOTH
    assert source.path == path
    assert read_key_file(path) == BOTH


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"active": "k1", "keys": {"k1": "\xff\xfe"}}', "is not UTF-8 text (byte 33)"),
        (b"\x80", "is not UTF-8 text (byte 0)"),
        (b"{" * 10, "not valid JSON"),
        (b" " * (MAX_KEY_FILE_BYTES + 1), f"larger than {MAX_KEY_FILE_BYTES} bytes"),
    ],
)
def test_a_bad_key_file_is_one_line_naming_the_field(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_bytes(content)

    with pytest.raises(ConfigError) as error:
        KeyRingSource.from_file(path)

    assert error.value.field == "signing_key_file"
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_missing_file_a_directory_and_a_fifo_are_config_errors(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    problems = {
        tmp_path / "missing.json": "No such file or directory",
        tmp_path: "not a regular file",
        fifo: "not a regular file",  # and no hang waiting for a writer
    }
    for path, message in problems.items():
        with pytest.raises(ConfigError) as error:
            read_key_file(path)
        assert error.value.field == "signing_key_file"
        assert f"cannot read {path}: {message}" in str(error.value)


def test_reading_for_an_edit_refuses_a_symlink(tmp_path: Path) -> None:
    _source(tmp_path, OLD)
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "keys.json")

    assert read_key_file(link) == OLD
    with pytest.raises(ConfigError, match="is a symbolic link"):
        read_key_file(link, follow_symlinks=False)


# -- writing --------------------------------------------------------------------------


def test_create_writes_mode_0600_and_refuses_anything_there(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    old_umask = os.umask(0)  # the mode must not depend on a permissive umask
    try:
        create_key_file(path, OLD, field="--output")
    finally:
        os.umask(old_umask)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_key_file(path) == OLD
    with pytest.raises(ConfigError, match="exists; pass --force"):
        create_key_file(path, NEW, field="--output")
    assert read_key_file(path) == OLD


def test_create_never_writes_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    link = tmp_path / "keys.json"
    link.symlink_to(target)  # dangling: creating would make `target`

    with pytest.raises(ConfigError, match="exists"):
        create_key_file(link, OLD, field="--output")
    assert not target.exists()


@pytest.mark.parametrize("write", [create_key_file, replace_key_file])
def test_writing_into_a_missing_directory_or_onto_a_directory_is_one_line(
    tmp_path: Path, write: object
) -> None:
    assert callable(write)
    cases = {
        tmp_path / "nowhere" / "keys.json": f"directory {tmp_path / 'nowhere'} does not exist",
        tmp_path: f"{tmp_path} is a directory",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError) as error:
            write(path, OLD, field="--output")
        assert error.value.field == "--output"
        assert message in str(error.value)
        assert "\n" not in str(error.value)


def test_replace_is_atomic_keeps_0600_and_replaces_a_symlink_not_its_target(
    tmp_path: Path,
) -> None:
    _, path = _source(tmp_path, OLD)
    path.chmod(0o644)
    before = path.stat().st_ino

    replace_key_file(path, NEW, field="--add")

    assert read_key_file(path) == NEW
    assert path.stat().st_ino != before  # a new file renamed over the old one
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["keys.json"]  # no temporary left
    target = tmp_path / "target.json"
    _write(target, OLD.to_json())
    link = tmp_path / "link.json"
    link.symlink_to(target)
    replace_key_file(link, NEW, field="--output")
    assert not link.is_symlink()
    assert read_key_file(target) == OLD


# -- following the file -----------------------------------------------------------------


def test_nothing_changed_nothing_reloaded(tmp_path: Path) -> None:
    source, _ = _source(tmp_path)

    assert not source.poll()
    assert source.ring == OLD


def test_atomic_rename_is_picked_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    source, path = _source(tmp_path)

    replace_key_file(path, BOTH, field="--add")
    with caplog.at_level(logging.INFO, logger="probe.keyfile"):
        assert source.poll()

    assert source.ring == BOTH
    assert "signing keys reloaded from" in caplog.text
    assert "active k1, keys k1, k2" in caplog.text
    assert not source.poll()  # once per change
    assert _secrets_in(caplog.text, OLD, BOTH) == []


def test_a_kubernetes_secret_update_is_picked_up(tmp_path: Path) -> None:
    """The kubelet writes a new timestamped directory and swaps the `..data` link."""
    mount = tmp_path / "secret"
    mount.mkdir()
    first = mount / "..2024_01_01_00_00_00.000000001"
    first.mkdir()
    _write(first / "keys.json", OLD.to_json())
    (mount / "..data").symlink_to(first.name)
    (mount / "keys.json").symlink_to("..data/keys.json")
    source = KeyRingSource.from_file(mount / "keys.json")
    assert source.ring == OLD

    second = mount / "..2024_01_01_00_01_00.000000002"
    second.mkdir()
    _write(second / "keys.json", NEW.to_json())
    (mount / "..data_tmp").symlink_to(second.name)
    os.replace(mount / "..data_tmp", mount / "..data")

    assert source.poll()
    assert source.ring == NEW


def test_an_in_place_rewrite_is_picked_up_by_mtime_or_size(tmp_path: Path) -> None:
    source, path = _source(tmp_path, BOTH)
    inode = path.stat().st_ino
    # Same size (same kids and secret lengths), same inode: only the mtime tells.
    with path.open("r+") as handle:
        handle.write(NEW.to_json())
    stamp = path.stat().st_mtime_ns + 1_000_000_000
    os.utime(path, ns=(stamp, stamp))
    assert path.stat().st_ino == inode

    assert source.poll()
    assert source.ring == NEW

    path.write_text(OLD.to_json())  # shorter, in place
    os.utime(path, ns=(stamp, stamp))  # even with the mtime put back
    assert source.poll()
    assert source.ring == OLD


def test_sighup_reload_reads_even_when_the_file_looks_the_same(tmp_path: Path) -> None:
    source, path = _source(tmp_path, BOTH)
    stamp = path.stat().st_mtime_ns
    with path.open("r+") as handle:
        handle.write(NEW.to_json())
    os.utime(path, ns=(stamp, stamp))

    assert not source.poll()
    assert source.reload()
    assert source.ring == NEW


def test_an_invalid_new_file_keeps_the_old_ring_and_says_why_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, path = _source(tmp_path, OLD)
    bad = tmp_path / "bad.json"
    bad.write_text('{"active": "k9", "keys": {"k1": "' + "MTEx" * 8 + '"}}')
    os.replace(bad, path)

    with caplog.at_level(logging.INFO, logger="probe.keyfile"):
        assert not source.poll()
        assert not source.poll()

    assert source.ring == OLD
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "keeping the current ring (active k1, keys k1)" in message
    assert "signing_key_file.active: must name one of the keys ('k1',), got 'k9'" in message

    replace_key_file(path, NEW, field="--activate")  # fixed: picked up as usual
    assert source.poll()
    assert source.ring == NEW


def test_an_unreadable_or_vanished_file_keeps_the_old_ring(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, path = _source(tmp_path, OLD)

    path.write_bytes(b'{"active": "\xff"}')
    with caplog.at_level(logging.WARNING, logger="probe.keyfile"):
        assert not source.poll()
    assert "is not UTF-8 text" in caplog.text

    path.unlink()
    # Asked for again: a command run earlier in this process may have set the level.
    with caplog.at_level(logging.WARNING, logger="probe.keyfile"):
        assert not source.poll()
        assert not source.reload()
    assert source.ring == OLD
    assert "No such file or directory" in caplog.text


@pytest.mark.parametrize(("mode", "warned"), [(0o600, False), (0o400, False), (0o640, True)])
def test_a_key_file_readable_by_others_is_warned_at_start_and_each_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: int, warned: bool
) -> None:
    path = tmp_path / "keys.json"
    _write(path, OLD.to_json(), mode)
    source = KeyRingSource.from_file(path)

    with caplog.at_level(logging.INFO, logger="probe.keyfile"):
        source.announce()
        source.reload()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == (2 if warned else 0)
    if warned:
        assert f"readable by group or others (mode {oct(mode)})" in warnings[0]
    assert "signing keys from" in caplog.text


def test_look_follows_links_to_the_file(tmp_path: Path) -> None:
    _, path = _source(tmp_path)
    link = tmp_path / "link.json"
    link.symlink_to(path)

    seen = look(link)

    assert seen is not None
    assert seen.resolved == str(path.resolve())
    assert seen.inode == path.stat().st_ino
    assert look(tmp_path / "missing") is None


def test_users_reading_ring_at_use_see_the_new_ring(tmp_path: Path) -> None:
    """The producer and the stages read `.ring` each time: one swap reaches both."""
    from probe.core.canary import Canary, decode, encode  # noqa: PLC0415

    source, path = _source(tmp_path, BOTH)
    canary = Canary("p", 1, "kafka", 0, 0, 1)
    replace_key_file(path, NEW, field="--activate")
    source.poll()

    signed = encode(canary, source.ring)
    assert signed[4:6] == b"k2"
    assert decode(signed, source.ring) == canary
    assert OLD.ring is OLD  # a fixed ring is its own source


def test_watch_announces_polls_and_stops_when_cancelled(tmp_path: Path) -> None:
    source, path = _source(tmp_path, OLD)

    async def scenario() -> None:
        watcher = asyncio.create_task(source.watch(period=0.01))
        replace_key_file(path, NEW, field="--add")
        async with asyncio.timeout(10):
            # The watcher signals nothing; its effect is the ring it swaps in.
            while source.ring != NEW:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher

    asyncio.run(scenario())
    assert source.ring == NEW


def test_an_ephemeral_source_watches_nothing_until_cancelled() -> None:
    source = KeyRingSource.ephemeral()

    async def scenario() -> None:
        watcher = asyncio.create_task(source.watch(period=0.01))
        done, _ = await asyncio.wait([watcher], timeout=0.05)
        assert not done
        watcher.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watcher

    asyncio.run(scenario())
