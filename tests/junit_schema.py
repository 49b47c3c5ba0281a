"""Jenkins' JUnit schema (junit-10.xsd), the one CI systems read JUnit XML by, for the
tests of `once --junit`.

pytest validates its own JUnit XML against it and ships it in its source
distribution; ``install`` (`make junit-schema`, part of `make test`) takes it from
there once: the pinned sdist from PyPI, checked against its SHA-256, into the user's
cache. Nothing is fetched at test time: :func:`schema_path` only says where it is.

    python -m tests.junit_schema install
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

PYTEST_VERSION = "9.2.0"
SDIST_SHA256 = "97c4f3b1f3c7414aa36465e09b8220f1d03627993bd51b1282e193753c80557b"
# Where PyPI's simple index points for that file (content-addressed, it never moves).
SDIST_URL = (
    "https://files.pythonhosted.org/packages/79/42/"
    "bb4641652e58dedeac2ec51abc1f8cae4fee4ec63899a0999016229a0f2a/"
    f"pytest-{PYTEST_VERSION}.tar.gz"
)
MEMBER = f"pytest-{PYTEST_VERSION}/testing/example_scripts/junit-10.xsd"


def schema_path() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "synthetic-sla-probe" / f"junit-10-pytest-{PYTEST_VERSION}.xsd"


def install() -> Path:
    path = schema_path()
    if path.exists():
        return path
    with urllib.request.urlopen(SDIST_URL, timeout=300) as reply:
        sdist = reply.read()
    digest = hashlib.sha256(sdist).hexdigest()
    if digest != SDIST_SHA256:
        raise SystemExit(f"{SDIST_URL}: SHA-256 {digest}, pinned {SDIST_SHA256}")
    with tarfile.open(fileobj=io.BytesIO(sdist), mode="r:gz") as archive:
        member = archive.extractfile(MEMBER)
        assert member is not None, MEMBER
        schema = member.read()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_bytes(schema)
    partial.rename(path)
    return path


if __name__ == "__main__":
    if sys.argv[1:] != ["install"]:
        raise SystemExit("usage: python -m tests.junit_schema install")
    print(install())
