"""Headless Chromium (Debian's `chromium`), for tests of what a browser makes of a page.

Each call starts the browser on a profile of the test's own, with everything that
would reach out to the network turned off, and ends it: ``dom`` returns the document
after the browser parsed and laid it out (``--dump-dom``), ``screenshot`` writes a
PNG. Screenshots a test keeps go under ``test-artifacts/`` (git-ignored), where CI
collects them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ARTIFACTS = Path(__file__).parents[1] / "test-artifacts"

_QUIET = [
    "--headless",
    "--no-sandbox",  # tests run as root in containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


class Chromium:
    """>>> Chromium(tmp_path / "profile").dom("http://127.0.0.1:9464/")  # doctest: +SKIP"""

    def __init__(self, profile: Path, timeout: float = 60.0) -> None:
        binary = shutil.which("chromium")
        assert binary, "chromium is not installed: `make system-deps` installs it (Debian)"
        self._binary = binary
        self._profile = profile
        self._timeout = timeout
        profile.mkdir(parents=True, exist_ok=True)

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self._binary, *_QUIET, f"--user-data-dir={self._profile}", *args],
            capture_output=True,
            text=True,
            timeout=self._timeout,
            check=False,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    def dom(self, url: str) -> str:
        """The document as the browser holds it once loaded."""
        return self._run("--dump-dom", url).stdout

    def screenshot(self, url: str, path: Path, width: int = 1280, height: int = 2400) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._run(f"--screenshot={path}", f"--window-size={width},{height}", url)
        assert path.stat().st_size > 0, path
        return path
