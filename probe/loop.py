"""The event loop the commands run on: uvloop (libuv), where it is installed, else
asyncio's own.

At 10,000 partitions most of the probe's CPU goes to event-loop turns (timers,
futures, socket readiness), and uvloop's take about a tenth less of it than asyncio's
selector loop (``benchmarks/bench_scale.py``). Both are asyncio event loops: nothing
in the probe depends on which one runs it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import uvloop
except ImportError:  # not built for this platform (Windows): asyncio's loop
    uvloop = None  # type: ignore[assignment]

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the fastest loop at hand."""
    if uvloop is None:
        return asyncio.run(main)
    return uvloop.run(main)
