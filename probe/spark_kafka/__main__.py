"""``python -m probe.spark_kafka install``: resolve the pinned connector jars (``make
spark-kafka``); ``python -m probe.spark_kafka jars``: print them comma-separated, as
spark-submit's ``--jars`` takes them (exit 1 when not installed)."""

from __future__ import annotations

import sys

from probe.spark_kafka.jars import install, jar_paths, jars_dir


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        print(install())
        return 0
    if argv == ["jars"]:
        paths = jar_paths()
        if paths is None:
            print(f"not installed in {jars_dir()}: run `make spark-kafka`", file=sys.stderr)
            return 1
        print(",".join(str(p) for p in paths))
        return 0
    print("usage: python -m probe.spark_kafka install|jars", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
