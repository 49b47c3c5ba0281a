"""The two tools `make` needs beyond Debian's packages: uv, and Go for building Sloth.

Run by the system's own ``python3`` before any venv exists, so it uses the standard
library only and never pip: Debian 12's Python refuses ``pip install`` outside a venv
(PEP 668, externally-managed-environment) and may have no pip at all.

    python3 .ci/toolchain.py uv    # prints the path of a uv that reads uv.lock
    python3 .ci/toolchain.py go    # prints the path of a go that builds Sloth

Each prints a tool already there when it is recent enough (uv on PATH; go on PATH or
/usr/local/go/bin/go), else the pinned one in ``~/.cache/synthetic-sla-probe/``
(``$XDG_CACHE_HOME`` honoured), fetching it once: uv's wheel from PyPI, Go's toolchain
module from the Go module proxy (proxy.golang.org). What is fetched is checked against
the SHA-256 pinned here before anything of it is unpacked; a download that does not
match is refused and nothing is installed.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Download:
    url: str
    sha256: str


# uv.lock was written by uv 0.13.9 (lock revision 5); an older uv on PATH is passed over
# for this one rather than trusted to read it.
UV_VERSION = (0, 13, 9)
UV_REPORTS = r"^uv (\d+)\.(\d+)\.(\d+)"  # uv 0.13.9 (x86_64-unknown-linux-gnu)
UV_WHEELS = {
    "x86_64": Download(
        "https://files.pythonhosted.org/packages/3d/aa/"
        "26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/"
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    "aarch64": Download(
        "https://files.pythonhosted.org/packages/57/15/"
        "94b6cd62ac3ff6550288328e8035288875197cbc183f51554b266a69877b/"
        "uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64"
        ".musllinux_1_1_aarch64.whl",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
}

# Sloth v0.16.0 (tests/sloth.py) says `go 1.26.0` in its go.mod; Debian 12's golang is
# 1.19. The pinned toolchain is the Go project's own build, as `go` itself fetches it
# when it switches toolchains (golang.org/toolchain on the module proxy). Checksums: the
# zips as served on 2026-11-28 (their go.sum h1: amd64 KyINmJ/FQdKRmDYGuTAAXkumyeR2DyU
# lSNHZj7XaLFg=, arm64 GFS9FmglLJxMwOSuun3qb8tBjpr8ibzOkt8tBrRLrnk=).
GO_NEEDED = (1, 26, 0)
GO_REPORTS = r" go(\d+)\.(\d+)(?:\.(\d+))?"  # go version go1.19.8 linux/amd64
GO_VERSION = "1.26.11"
GO_TOOLCHAINS = {
    "x86_64": Download(
        "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go1.26.11.linux-amd64.zip",
        "e1edb778de0aa08c8e827f5a873b35a46afe680fb241482c531725b2355e470d",
    ),
    "aarch64": Download(
        "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go1.26.11.linux-arm64.zip",
        "51902dab7e130b07083119a36ce09e0cc50fdd9d0d64184c24bd302072ad8b70",
    ),
}
# Where Go lives on the project's machines when it is not on PATH (tests/sloth.py too).
GO_FALLBACK = Path("/usr/local/go/bin/go")


def cache_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "synthetic-sla-probe"


def recent_enough(command: list[str], reports: str, needed: tuple[int, ...]) -> bool:
    """Whether the version the command prints (regex reports) is at least needed."""
    try:
        answer = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError:
        return False
    found = re.search(reports, answer.stdout)
    if answer.returncode != 0 or found is None:
        return False
    return tuple(int(part or 0) for part in found.groups()) >= needed


def pinned(downloads: dict[str, Download], what: str) -> Download:
    machine = platform.machine()
    if machine not in downloads:
        raise SystemExit(
            f"toolchain: no pinned {what} for {machine} (only {', '.join(downloads)}): "
            f"install {what} yourself and put it on PATH"
        )
    return downloads[machine]


def fetch(download: Download, into: Path) -> Path:
    """The download saved under into, its SHA-256 checked, or SystemExit."""
    target = into / download.url.rsplit("/", 1)[1]
    digest = hashlib.sha256()
    print(f"toolchain: fetching {download.url}", file=sys.stderr)
    try:
        with urllib.request.urlopen(download.url, timeout=60) as answer, target.open("wb") as out:
            while chunk := answer.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as error:  # URLError, a TLS failure, a reset: the reason in one line
        raise SystemExit(
            f"toolchain: {download.url}: {getattr(error, 'reason', error)} "
            "(behind a proxy: https_proxy; a CA of your own: SSL_CERT_FILE)"
        ) from None
    if digest.hexdigest() != download.sha256:
        raise SystemExit(
            f"toolchain: {download.url}: SHA-256 {digest.hexdigest()}, "
            f"pinned {download.sha256}: refused"
        )
    return target


def uv() -> Path:
    found = shutil.which("uv")
    if found and recent_enough([found, "--version"], UV_REPORTS, UV_VERSION):
        return Path(found)
    version = ".".join(map(str, UV_VERSION))
    binary = cache_dir() / f"uv-{version}" / "uv"
    if not binary.exists():
        wheel = pinned(UV_WHEELS, "uv")
        binary.parent.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=binary.parent.parent) as work:
            with zipfile.ZipFile(fetch(wheel, Path(work))) as archive:
                member = f"uv-{version}.data/scripts/uv"
                unpacked = Path(work) / "uv"
                unpacked.write_bytes(archive.read(member))
            unpacked.chmod(0o755)
            binary.parent.mkdir(exist_ok=True)
            unpacked.rename(binary)
    return binary


def go() -> Path:
    for found in (shutil.which("go"), str(GO_FALLBACK)):
        if found and recent_enough([found, "version"], GO_REPORTS, GO_NEEDED):
            return Path(found)
    root = cache_dir() / f"go{GO_VERSION}"
    if not (root / "bin" / "go").exists():
        toolchain = pinned(GO_TOOLCHAINS, "Go")
        root.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root.parent) as work:
            unpacked = Path(work) / "go"
            with zipfile.ZipFile(fetch(toolchain, Path(work))) as archive:
                for entry in archive.infolist():
                    # Every entry sits under golang.org/toolchain@<version>/.
                    _, _, name = entry.filename.partition("/toolchain@")
                    relative = name.partition("/")[2]
                    if not relative or entry.is_dir():
                        continue
                    path = unpacked / relative
                    if ".." in Path(relative).parts:
                        raise SystemExit(f"toolchain: {entry.filename}: outside the toolchain")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(archive.read(entry))
                    # The module zip keeps Unix modes: bin/go, pkg/tool/*/compile...
                    if mode := (entry.external_attr >> 16) & 0o777:
                        path.chmod(mode)
            unpacked.rename(root)
    return root / "bin" / "go"


if __name__ == "__main__":
    tools = {"uv": uv, "go": go}
    if len(sys.argv) != 2 or sys.argv[1] not in tools:
        raise SystemExit("usage: python3 .ci/toolchain.py uv|go")
    print(tools[sys.argv[1]]())
