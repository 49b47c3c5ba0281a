"""No module of the package shadows a standard library module.

spark-submit runs ``probe/submit.py`` as a script, with its directory first on
``sys.path``; a module there named like a standard one (``operator``, ``http``)
would be imported in its place by everything that follows.
"""

from __future__ import annotations

import sys
from pathlib import Path

import probe


def test_no_module_is_named_like_a_standard_one() -> None:
    package = Path(probe.__file__).parent
    names = {path.stem for path in package.rglob("*.py")} - {"__init__"}
    assert not names & sys.stdlib_module_names
