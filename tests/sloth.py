"""Sloth, the SLO generator, built from its Go source for the tests of the Sloth spec.

``install`` (`make sloth`, part of `make test`) runs ``go install`` of the pinned
version from the Go module proxy into ``~/.cache/synthetic-sla-probe/bin`` and copies
Sloth's CRD (PrometheusServiceLevel) from the same module beside it. It does nothing
when the binary there was built from that version (its Go build info says so; ``sloth
version`` says "dev" in a ``go install`` build). Nothing is fetched at test time:
:func:`sloth_binary` and :func:`sloth_crd` only say where they are.

    python -m tests.sloth install

A cold build takes 6 to 8 minutes on two cores (measured with the suite's JVMs
running beside it); with Go's build cache warm, about ten seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

SLOTH_MODULE = "github.com/slok/sloth"
SLOTH_VERSION = "v0.16.0"
# Where Go lives on the project's machines when it is not on PATH.
GO_FALLBACK = Path("/usr/local/go/bin/go")


def cache_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "synthetic-sla-probe"


def sloth_binary() -> Path:
    return cache_dir() / "bin" / "sloth"


def sloth_crd() -> Path:
    """Sloth's PrometheusServiceLevel CRD, from the module the binary was built from."""
    return cache_dir() / f"sloth-{SLOTH_VERSION}-prometheusservicelevels.crd.yaml"


def go_command() -> str:
    found = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if found is None:
        raise SystemExit(f"no Go toolchain (go on PATH or {GO_FALLBACK}): Sloth is built with it")
    return found


def built_version(binary: Path, go: str) -> str | None:
    """The Sloth module version the binary was built from, from its Go build info."""
    if not binary.exists():
        return None
    info = subprocess.run(
        [go, "version", "-m", str(binary)], capture_output=True, text=True, check=False
    )
    for line in info.stdout.splitlines():
        fields = line.split()
        if fields[:2] == ["mod", SLOTH_MODULE]:
            return fields[2]
    return None


def install() -> Path:
    go = go_command()
    binary = sloth_binary()
    if built_version(binary, go) != SLOTH_VERSION:
        env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-buildvcs=false"}
        print(f"building Sloth {SLOTH_VERSION} from source (a few minutes)", file=sys.stderr)
        subprocess.run(
            [go, "install", f"{SLOTH_MODULE}/cmd/sloth@{SLOTH_VERSION}"], env=env, check=True
        )
        if (found := built_version(binary, go)) != SLOTH_VERSION:
            raise SystemExit(f"{binary}: built from Sloth {found}, expected {SLOTH_VERSION}")
    if not sloth_crd().exists():
        # The module go install just used, from the module cache (no new download).
        download = subprocess.run(
            [go, "mod", "download", "-json", f"{SLOTH_MODULE}@{SLOTH_VERSION}"],
            capture_output=True,
            text=True,
            check=True,
        )
        module = Path(json.loads(download.stdout)["Dir"])
        crd = module / "pkg/kubernetes/gen/crd/sloth.slok.dev_prometheusservicelevels.yaml"
        partial = sloth_crd().with_suffix(".partial")
        partial.write_bytes(crd.read_bytes())
        partial.rename(sloth_crd())
    return binary


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m tests.sloth install")
    print(install())
