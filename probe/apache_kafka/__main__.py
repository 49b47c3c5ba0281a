"""``python -m probe.apache_kafka install``: resolve the pinned jars (``make kafka``);
``python -m probe.apache_kafka libs``: print where they are."""

from __future__ import annotations

import sys

from probe.apache_kafka.cluster import install, libs_dir


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        print(install())
        return 0
    if argv == ["libs"]:
        print(libs_dir())
        return 0
    print("usage: python -m probe.apache_kafka install|libs", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
