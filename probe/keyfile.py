"""The key file on disk: read it, write it atomically, and follow it while running.

``probe.core.keys`` is the pure key ring; this is its shell. A running ``sla-probe run``
holds one :class:`KeyRingSource`, the single owner of "the current ring": the
producer signs and the stages verify with ``source.ring`` at the moment they use it,
so a reload reaches all of them at once.

The ring is reloaded when the key file changes and on SIGHUP. A change is anything in
what ``stat`` says about the file the path leads to: a Kubernetes Secret update swaps
a ``..data`` symlink, so the resolved path and the inode change; an editor rewriting
the file in place changes its mtime or size. One small file, looked at every
``POLL_PERIOD`` seconds, needs no file-notification library. (Kubernetes updates a
Secret volume, not a file mounted from it with ``subPath``: mount the volume.)

A new file that cannot be read or is not a valid ring changes nothing: the probe keeps
signing and verifying with the ring it has and logs why, once per change of the file.
Logs name key ids only, never secrets.

Example::

    keys = KeyRingSource.from_file(Path("/keys/ring.json"))  # ConfigError if bad
    encode(canary, keys.ring)
    keys.poll()          # reload if the file changed since the last look
    keys.reload()        # reload now (SIGHUP)
    await keys.watch()   # announce the ring, then poll every POLL_PERIOD, until cancelled
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from probe.core.errors import ConfigError
from probe.core.keys import KeyRing, generate_key_ring, random_kid

log = logging.getLogger(__name__)

FIELD = "signing_key_file"
POLL_PERIOD = 2.0
# A key ring of a few keys is well under a kilobyte; reading is bounded so that a
# wrong path (a log file, /dev/zero) is an error rather than a hang or a memory blow-up.
MAX_KEY_FILE_BYTES = 1 << 20
_KEY_FILE_MODE = 0o600
_OPEN_TO_OTHERS = stat.S_IRGRP | stat.S_IROTH


@dataclass(frozen=True, slots=True)
class FileState:
    """What the key file looked like: any difference means it may have changed."""

    resolved: str
    device: int
    inode: int
    mtime_ns: int
    size: int


def look(path: Path) -> FileState | None:
    """The state of the file ``path`` leads to (following symlinks), None if none."""
    try:
        resolved = path.resolve()
        info = os.stat(resolved)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, on older Pythons
        return None
    return FileState(str(resolved), info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)


def read_key_file(path: Path, *, field: str = FIELD, follow_symlinks: bool = True) -> KeyRing:
    """The ring in a key file; any problem is a one-line ``ConfigError`` naming ``field``."""
    return _read(path, field=field, follow_symlinks=follow_symlinks)[0]


def _read(path: Path, *, field: str, follow_symlinks: bool) -> tuple[KeyRing, int]:
    """The ring and the file's mode bits."""
    # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below);
    # it changes nothing for a regular file.
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = _why(exc)
        if exc.errno == errno.ELOOP and not follow_symlinks:
            why = "is a symbolic link (give the file it points to)"
        raise ConfigError(field, f"cannot read {path}: {why}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(field, f"cannot read {path}: not a regular file")
        data = b""
        while len(data) <= MAX_KEY_FILE_BYTES and (chunk := os.read(fd, 1 << 16)):
            data += chunk
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {_why(exc)}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise ConfigError(field, f"{path} is larger than {MAX_KEY_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The offset only: the bytes around it may be part of a secret.
        raise ConfigError(field, f"{path} is not UTF-8 text (byte {exc.start})") from None
    return KeyRing.from_json(text, field=field), info.st_mode


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def open_to_others(mode: int) -> bool:
    """Whether a key file with these mode bits is readable by group or others."""
    return bool(mode & _OPEN_TO_OTHERS)


# -- writing ----------------------------------------------------------------------------


def create_key_file(path: Path, ring: KeyRing, *, field: str) -> None:
    """Write a new key file, mode 0600 from its first byte.

    Refuses anything already at ``path``, a symlink included (never followed, even
    dangling: ``O_CREAT | O_EXCL``), so a key can never be written through a link
    planted by someone else, nor replace a key file by accident.
    """
    _check_target(path, field=field)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, _KEY_FILE_MODE)
    except FileExistsError:
        raise ConfigError(field, f"{path} exists; pass --force to replace it") from None
    except OSError as exc:
        raise ConfigError(field, f"cannot write {path}: {_why(exc)}") from None
    try:
        _write_all(fd, ring)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise ConfigError(field, f"cannot write {path}: {_why(exc)}") from None
    os.close(fd)
    _sync_directory(path.parent)


def replace_key_file(path: Path, ring: KeyRing, *, field: str) -> None:
    """Replace (or create) a key file atomically, mode 0600.

    The ring goes to a temporary file in the same directory, is flushed to disk, then
    renamed over ``path``: a reader (a probe polling the file) sees the old file or the
    new one, never half of one. A symlink at ``path`` is replaced, never followed.
    """
    _check_target(path, field=field)
    try:
        # mkstemp creates the file 0600, exclusively, with an unpredictable name.
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigError(field, f"cannot write {path}: {_why(exc)}") from None
    try:
        try:
            _write_all(fd, ring)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise ConfigError(field, f"cannot write {path}: {_why(exc)}") from None
    _sync_directory(path.parent)


def _check_target(path: Path, *, field: str) -> None:
    parent = path.parent
    if not parent.exists():
        raise ConfigError(field, f"directory {parent} does not exist")
    if not parent.is_dir():
        raise ConfigError(field, f"{parent} is not a directory")
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise ConfigError(field, f"{path} is a directory")


def _write_all(fd: int, ring: KeyRing) -> None:
    os.fchmod(fd, _KEY_FILE_MODE)  # whatever the umask let through
    data = ring.to_json().encode("ascii")
    while data:
        data = data[os.write(fd, data) :]
    os.fsync(fd)


def _sync_directory(directory: Path) -> None:
    # The rename (or the new name) is durable only once the directory is; a
    # filesystem that cannot sync a directory still has the data itself on disk.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- the probe's current ring -------------------------------------------------------------


class KeyRingSource:
    """The probe's current key ring, and the key file it comes from (if any).

    Users read ``.ring`` each time they sign or verify (see ``probe.core.keys.KeySource``).
    The swap is one attribute assignment on the event loop's thread, so a round
    signs every canary with one ring or the other, and nothing needs a lock.

    >>> keys = KeyRingSource.ephemeral()
    >>> keys.ring.active_kid.startswith("ephemeral-"), keys.path
    (True, None)
    """

    def __init__(
        self,
        ring: KeyRing,
        path: Path | None = None,
        *,
        seen: FileState | None = None,
        mode: int | None = None,
    ) -> None:
        self._ring = ring
        self._path = path
        self._seen = seen
        self._mode = mode

    @classmethod
    def from_file(cls, path: Path) -> KeyRingSource:
        """Load a key file; a ``ConfigError`` (one line, naming signing_key_file) if bad."""
        # Look before reading: if the file changes in between, the next poll sees it.
        seen = look(path)
        ring, mode = _read(path, field=FIELD, follow_symlinks=True)
        return cls(ring, path, seen=seen, mode=mode)

    @classmethod
    def ephemeral(cls) -> KeyRingSource:
        """A random key only this process holds, under a random key id.

        The id is random too, so a canary left on the topic by an earlier ephemeral
        run of the same probe id is a key this run does not hold (foreign), never
        one it holds with another secret (a bad signature, i.e. tampering).
        """
        return cls(generate_key_ring(random_kid("ephemeral-")))

    @property
    def ring(self) -> KeyRing:
        return self._ring

    @property
    def path(self) -> Path | None:
        return self._path

    def announce(self) -> None:
        """Log the ring's key ids and, if the key file is open to others, a warning."""
        if self._path is None:
            log.info(
                "signing with ephemeral key %s: canaries verify only in this process",
                self._ring.active_kid,
            )
            return
        log.info("signing keys from %s: %s", self._path, _describe(self._ring))
        self._warn_if_open()

    def reload(self) -> bool:
        """Read the key file now; True if the ring was replaced (SIGHUP, or a change).

        An unreadable or invalid file keeps the current ring and logs why.
        """
        if self._path is None:
            log.info("no key file to reload: this probe signs with an ephemeral key")
            return False
        self._seen = look(self._path)
        try:
            ring, mode = _read(self._path, field=FIELD, follow_symlinks=True)
        except ConfigError as error:
            log.warning(
                "key file %s not reloaded, keeping the current ring (%s): %s",
                self._path,
                _describe(self._ring),
                error,
            )
            return False
        self._ring, self._mode = ring, mode
        log.info("signing keys reloaded from %s: %s", self._path, _describe(ring))
        self._warn_if_open()
        return True

    def poll(self) -> bool:
        """Reload if the file looks different from the last look; True if reloaded."""
        if self._path is None or look(self._path) == self._seen:
            return False
        return self.reload()

    async def watch(self, period: float = POLL_PERIOD) -> None:
        """Announce the ring, then poll the key file every ``period`` s until cancelled."""
        self.announce()
        if self._path is None:
            await asyncio.Event().wait()  # nothing to follow; ends when cancelled
        while True:
            await asyncio.sleep(period)
            self.poll()

    def _warn_if_open(self) -> None:
        if self._mode is not None and open_to_others(self._mode):
            log.warning(
                "key file %s is readable by group or others (mode %s): "
                "chmod 600 it (Kubernetes: defaultMode 0400 on the Secret volume)",
                self._path,
                oct(stat.S_IMODE(self._mode)),
            )


def _describe(ring: KeyRing) -> str:
    # Key ids only: never a secret, not even a fingerprint of one.
    return f"active {ring.active_kid}, keys {', '.join(ring.kids)}"
