"""Spark's class archive: which runs write one, which use it, and how concurrent runs
and killed ones are kept from a half-written archive (probe.spark.class_archive). The
JVM side, an archive written and mapped for real, is proven by
tests/spark/test_reconcile_job.py's command test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from probe.spark import class_archive
from probe.spark.class_archive import ENV, for_driver


@pytest.fixture
def archives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "archives"
    monkeypatch.setenv(ENV, str(directory))
    return directory


def _archive_of(use: class_archive.ArchiveUse) -> Path:
    assert use.archive is not None
    return use.archive


def test_a_short_run_writes_the_archive_then_every_run_uses_it(archives: Path) -> None:
    writing = for_driver({}, may_write=True)
    assert writing is not None
    assert writing.dump is not None
    assert writing.java_option == f"-XX:ArchiveClassesAtExit={writing.dump}"
    archive = _archive_of(writing)
    assert archive.parent == archives
    assert archive.suffix == ".jsa"
    # While it writes, nobody else writes or uses it.
    assert for_driver({}, may_write=True) is None
    # A JVM that exits cleanly after writing: the dump becomes the archive.
    jvm = subprocess.Popen(
        [sys.executable, "-c", f"open({str(writing.dump)!r}, 'wb').write(b'cds')"],
        stdin=subprocess.PIPE,
    )
    writing.finish(jvm)
    assert archive.read_bytes() == b"cds"
    assert sorted(p.name for p in archives.iterdir()) == [archive.name]
    for may_write in (True, False):
        using = for_driver({}, may_write=may_write)
        assert using is not None
        assert using.dump is None
        assert using.java_option == f"-XX:SharedArchiveFile={archive}"


def test_a_jvm_that_fails_leaves_no_archive_and_frees_the_lock(archives: Path) -> None:
    writing = for_driver({}, may_write=True)
    assert writing is not None
    assert writing.dump is not None
    jvm = subprocess.Popen(
        [sys.executable, "-c", f"open({str(writing.dump)!r}, 'wb').write(b'half'); exit(3)"],
        stdin=subprocess.PIPE,
    )
    writing.finish(jvm)
    assert list(archives.iterdir()) == []
    assert for_driver({}, may_write=True) is not None


def test_a_lock_left_by_a_killed_run_is_taken_over(archives: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    writing = for_driver({}, may_write=True)
    assert writing is not None
    assert writing.lock is not None
    writing.lock.write_text(gone.stdout.strip())
    assert writing.dump is not None
    writing.dump.write_bytes(b"half")
    again = for_driver({}, may_write=True)
    assert not writing.dump.exists()
    assert again is not None
    assert again.dump is not None
    assert again.lock is not None
    assert again.lock.read_text() == str(os.getpid())


def test_a_long_running_service_never_writes_one(archives: Path) -> None:
    assert for_driver({}, may_write=False) is None
    assert not archives.exists()


def test_the_archive_follows_the_classpath(archives: Path, tmp_path: Path) -> None:
    """Spark's connector jars on spark.jars make another classpath: another archive
    (the JVM would refuse the first one's)."""
    jar = tmp_path / "connector.jar"
    jar.write_bytes(b"jar")
    plain = for_driver({}, may_write=True)
    with_jar = for_driver({"spark.jars": str(jar)}, may_write=True)
    assert plain is not None
    assert with_jar is not None
    assert _archive_of(plain) != _archive_of(with_jar)


def test_off_or_an_unwritable_place_starts_spark_as_ever(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(ENV, "off")
    assert for_driver({}, may_write=True) is None
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    monkeypatch.setenv(ENV, str(blocked / "archives"))
    assert for_driver({}, may_write=True) is None


def test_only_the_archives_written_last_stay(archives: Path) -> None:
    archives.mkdir()
    for n in range(6):
        written = archives / f"spark-{n}.jsa"
        written.write_bytes(b"cds")
        os.utime(written, ns=(n * 10**9, n * 10**9))
    class_archive.prune(archives, keep=4)
    assert sorted(p.name for p in archives.iterdir()) == [f"spark-{n}.jsa" for n in (2, 3, 4, 5)]
