"""``python -m probe.apache_kafka install``: resolve the pinned jars of every release
the pom pins (``make kafka``); ``python -m probe.apache_kafka libs``: print where the
newest release's are."""

from __future__ import annotations

import sys

from probe.apache_kafka.cluster import RELEASES, install, libs_dir


def main(argv: list[str]) -> int:
    if argv == ["install"]:
        for release in RELEASES:
            print(install(release))
        return 0
    if argv == ["libs"]:
        print(libs_dir())
        return 0
    print("usage: python -m probe.apache_kafka install|libs", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
