"""A class archive for Spark's driver JVM: the classes a run loaded, kept ready to map.

Starting Spark is mostly its JVM loading, verifying and interpreting tens of thousands
of classes from its jars, every time. JDK 17's application class data sharing (AppCDS)
keeps them in an archive the next JVM maps instead: `sla-probe reconcile` of a few
records took 19 to 21 s and took 11.5 s with one (local[2], a 2-core VM, the first JIT
tier). JDK 17 builds such an archive only at a JVM's exit (``-XX:ArchiveClassesAtExit``;
JDK 19's ``-XX:+AutoCreateSharedArchive`` would do all of this itself).

So, for a driver JVM this process launches:

- an archive for this JVM and this classpath exists: it is used
  (``-XX:SharedArchiveFile``);
- none exists and this is a short run (`once`, a single `reconcile`): its JVM writes
  one when it exits, to a file of its own, which becomes the archive only once that
  JVM has exited cleanly (this process waits for it at exit, a few seconds the first
  time). A lock file keeps concurrent runs from writing the same archive; they run
  without one. Long-running services never write one (their stop stays prompt) but
  use one if present.

An archive is named by what it must match (:func:`archive_key`): the Java runtime,
the jars on the classpath (pyspark's, and any on ``spark.jars``). The JVM checks the
match again and, on any mismatch, simply runs without it. They live in
``~/.cache/synthetic-sla-probe/class-archives/`` (about 190 MB each, the last
:data:`KEEP` written),
``SLA_PROBE_CLASS_ARCHIVES`` to put them elsewhere, ``off`` to use none. A directory
that cannot be written is no error: the JVM starts as it always did.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pyspark

log = logging.getLogger(__name__)

ENV = "SLA_PROBE_CLASS_ARCHIVES"
# How long this process waits at exit for a JVM writing an archive: dumping takes a
# few seconds; past this the archive is given up, never half used.
DUMP_WAIT_S = 60.0
# Archives kept in the directory, the last written.
KEEP = 4


def archive_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where archives live, None when turned off.

    >>> archive_dir({ENV: "off"}) is None
    True
    >>> str(archive_dir({ENV: "/var/cache/cds"}))
    '/var/cache/cds'
    """
    chosen = environ.get(ENV, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    cache = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "synthetic-sla-probe" / "class-archives"


def archive_key(java: Path, jar_dirs: list[Path], jars: list[Path]) -> str:
    """A name for the archive of a JVM started with ``java`` over these jars: it
    changes when the runtime or any jar does (name, size, modification time), as the
    JVM's own check does."""
    digest = hashlib.sha256()
    for path in [java.resolve(), *sorted(_jar_files(jar_dirs)), *sorted(jars)]:
        with contextlib.suppress(OSError):
            stat = path.stat()
            digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def _jar_files(directories: list[Path]) -> list[Path]:
    return [jar for directory in directories for jar in directory.glob("*.jar")]


@dataclass(frozen=True)
class ArchiveUse:
    """What to add to the driver's options; ``writing``: the archive's path without
    its suffix, when this run's JVM writes it (its dump, the archive, the lock are
    that path's ``.dumping``, ``.jsa`` and ``.lock``; the lock lets one run at a time
    write, so one dump file per archive is enough)."""

    java_option: str
    writing: Path | None = None

    @property
    def dump(self) -> Path | None:
        return None if self.writing is None else self.writing.with_suffix(".dumping")

    @property
    def archive(self) -> Path | None:
        return None if self.writing is None else self.writing.with_suffix(".jsa")

    @property
    def lock(self) -> Path | None:
        return None if self.writing is None else self.writing.with_suffix(".lock")

    def finish(self, jvm: subprocess.Popen[bytes]) -> None:
        """After the run: let the JVM exit (its stdin closes, pyspark's signal to go),
        wait while it writes the archive, and keep it only from a clean exit."""
        if self.dump is None or self.archive is None or self.lock is None:
            return
        try:
            if jvm.stdin is not None:
                with contextlib.suppress(OSError):
                    jvm.stdin.close()
            try:
                code = jvm.wait(DUMP_WAIT_S)
            except subprocess.TimeoutExpired:
                log.debug("class archive: the JVM did not exit within %ss", DUMP_WAIT_S)
                return
            if code == 0 and self.dump.is_file() and self.dump.stat().st_size > 0:
                os.replace(self.dump, self.archive)
                log.debug("class archive: %s written", self.archive)
                prune(self.archive.parent)
        finally:
            with contextlib.suppress(OSError):
                self.dump.unlink()
            with contextlib.suppress(OSError):
                self.lock.unlink()


def prune(directory: Path, keep: int = KEEP) -> None:
    """Only the ``keep`` archives written last stay: each Java update, pyspark
    upgrade or new virtualenv makes another (a classpath of its own), and the old
    ones would pile up, 190 MB each."""
    archives = sorted(directory.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime_ns)
    for old in archives[:-keep]:
        with contextlib.suppress(OSError):
            old.unlink()


def for_driver(settings: Mapping[str, str], *, may_write: bool) -> ArchiveUse | None:
    """The archive a driver JVM launched with these settings should use or write;
    None to start it as usual (turned off, no Java found, or another run is writing
    it)."""
    directory = archive_dir()
    java = _java()
    if directory is None or java is None:
        return None
    # The jars shipped with pyspark: the driver's classpath.
    spark_jars = Path(pyspark.__file__).parent / "jars"
    extra = [Path(jar) for jar in settings.get("spark.jars", "").split(",") if jar]
    key = archive_key(java, [spark_jars], extra)
    named = directory / f"spark-{key}"
    archive = named.with_suffix(".jsa")
    if archive.is_file():
        return ArchiveUse(f"-XX:SharedArchiveFile={archive}")
    if not may_write:
        return None
    writing = ArchiveUse(f"-XX:ArchiveClassesAtExit={named.with_suffix('.dumping')}", named)
    lock = named.with_suffix(".lock")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = _take(lock)
    except OSError as exc:
        log.debug("class archive: %s not writable (%s): none written", directory, exc)
        return None
    if descriptor is None:
        return None
    with os.fdopen(descriptor, "w") as held:
        held.write(str(os.getpid()))
    return writing


def _take(lock: Path) -> int | None:
    """The lock, created for this process (its descriptor), or None while another
    live run holds it. A lock whose run is gone (killed before its JVM exited) is
    taken over."""
    for _ in range(2):
        try:
            return os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _holder_alive(lock):
                return None
            # Its dump too, if its JVM got as far as writing one.
            lock.with_suffix(".dumping").unlink(missing_ok=True)
            lock.unlink(missing_ok=True)
    return None


def _java() -> Path | None:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found) if found and os.path.exists(found) else None


def _holder_alive(lock: Path) -> bool:
    try:
        pid = int(lock.read_text().strip() or "0")
    except (OSError, ValueError):
        return True  # being written this moment
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
