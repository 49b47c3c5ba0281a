"""Wall time of the smoke test: the whole ``sla-probe once`` process on the embedded broker.

Run: ``python benchmarks/bench_once.py [--runs N] [--stages consumer,sink]``

Each run is a fresh process, timed from spawn to exit with ``time.perf_counter``, so
interpreter start, imports, broker start and stop are all in the figure: that is what
a deploy pipeline waits for. The median over the runs is reported, so one noisy run on
a shared machine does not move it. The target (<= 10 s) is the budget for a smoke test
in a deploy gate; with the Spark sink stage (``--stages consumer,sink``) it is 60 s, as
Spark's start-up (~5-8 s here), the sink query's first batch and its warm-up come on
top. Figures only; speed is not asserted, but a run that does not exit 0 is a broken
probe, not a slow one, and fails the benchmark.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET_SECONDS = {"consumer": 10.0, "consumer,sink": 60.0}
SLA_PROBE = Path(sys.executable).with_name("sla-probe")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs (median reported)")
    parser.add_argument("--stages", choices=sorted(TARGET_SECONDS), default="consumer")
    options = parser.parse_args()
    target_s = TARGET_SECONDS[options.stages]

    # SLA_PROBE_* variables in the caller's shell (a broker address, more rounds) would
    # change what is measured: every run gets the defaults and the embedded broker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLA_PROBE_")}
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, {options.runs} runs of "
        f"`sla-probe once --stages {options.stages}` (embedded broker)"
    )
    seconds = []
    for run in range(1, options.runs + 1):
        start = time.perf_counter()
        result = subprocess.run(
            [str(SLA_PROBE), "once", "--embedded", "--stages", options.stages],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        seconds.append(time.perf_counter() - start)
        print(f"  run {run}: {seconds[-1]:.2f} s (exit {result.returncode})")
        if result.returncode != 0:
            print(f"FAILED: run {run} exited {result.returncode}; no figures")
            print(result.stdout + result.stderr, end="")
            raise SystemExit(1)
    median = statistics.median(seconds)
    verdict = "met" if median <= target_s else "MISSED"
    print(
        f"once --stages {options.stages}: median {median:.2f} s  (min {min(seconds):.2f}, "
        f"max {max(seconds):.2f}; target <= {target_s:g} s: {verdict})"
    )


if __name__ == "__main__":
    main()
