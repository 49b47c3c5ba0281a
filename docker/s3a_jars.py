"""Put Hadoop's S3A connector on PySpark's classpath: the image's ``S3A=true`` build.

The pyspark wheel ships Hadoop's client (``hadoop-client-api-<version>.jar``) but not
``hadoop-aws``, so an ``s3a://`` sink path fails with ``ClassNotFoundException:
org.apache.hadoop.fs.s3a.S3AFileSystem``. This adds ``hadoop-aws`` of exactly that
Hadoop release and what it is built against, at the versions its parent POM
(``hadoop-project-<version>.pom``) names: the AWS SDK v2 ``bundle`` and, where the
release has them, the S3 analytics accelerator and wildfly-openssl. Versions are read
from the installation, never pinned here, so they cannot drift from pyspark's Hadoop;
a mismatch shows only when the first ``s3a://`` path is opened (``NoSuchMethodError``).

    python docker/s3a_jars.py                       # into the installed pyspark's jars/
    python docker/s3a_jars.py --repository https://maven.example/maven2 --jars DIR

Each jar is checked against the ``.sha1`` the repository publishes beside it (a
truncated or corrupted download fails the build; it is no defence against the
repository itself). Exit 1 with one line on stderr on any problem.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import re
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

# (group, artifact, the hadoop-project POM property holding its version, required)
_CONNECTOR = (
    ("software.amazon.awssdk", "bundle", "aws-java-sdk-v2.version", True),
    (
        "software.amazon.s3.analyticsaccelerator",
        "analyticsaccelerator-s3",
        "amazon-s3-analyticsaccelerator-s3.version",
        False,
    ),
    ("org.wildfly.openssl", "wildfly-openssl", "openssl-wildfly.version", False),
)


class S3aJarsError(Exception):
    """Why the connector could not be added."""


@dataclass(frozen=True)
class Artifact:
    group: str
    name: str
    version: str

    @property
    def file_name(self) -> str:
        return f"{self.name}-{self.version}.jar"

    def url(self, repository: str) -> str:
        group = self.group.replace(".", "/")
        return f"{repository.rstrip('/')}/{group}/{self.name}/{self.version}/{self.file_name}"


def pyspark_jars() -> Path:
    """The installed pyspark's jars directory (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise S3aJarsError("pyspark is not installed in this interpreter")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def hadoop_version(jars: Path) -> str:
    """The Hadoop release pyspark ships, from its hadoop-client-api jar's name."""
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    if len(found) != 1:
        raise S3aJarsError(f"expected one hadoop-client-api-*.jar in {jars}, found {len(found)}")
    return found[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def pom_property(pom: str, name: str) -> str | None:
    match = re.search(rf"<{re.escape(name)}>\s*([^<\s]+)\s*</{re.escape(name)}>", pom)
    return match.group(1) if match else None


def connector(hadoop: str, project_pom: str) -> list[Artifact]:
    """hadoop-aws of this Hadoop release and the jars it is built against."""
    artifacts = [Artifact("org.apache.hadoop", "hadoop-aws", hadoop)]
    for group, name, prop, required in _CONNECTOR:
        version = pom_property(project_pom, prop)
        if version is None:
            if required:
                raise S3aJarsError(f"hadoop-project-{hadoop}.pom has no <{prop}>")
            continue
        artifacts.append(Artifact(group, name, version))
    return artifacts


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=300) as response:
            body: bytes = response.read()
    except OSError as exc:  # URLError and HTTPError are OSErrors
        raise S3aJarsError(f"cannot fetch {url}: {exc}") from exc
    return body


def install(jars: Path, repository: str = MAVEN_CENTRAL) -> list[Path]:
    """Add the S3A connector to ``jars``; the files written."""
    hadoop = hadoop_version(jars)
    project = Artifact("org.apache.hadoop", "hadoop-project", hadoop)
    pom = _get(project.url(repository).removesuffix(".jar") + ".pom").decode()
    written = []
    for artifact in connector(hadoop, pom):
        url = artifact.url(repository)
        body = _get(url)
        expected = _get(url + ".sha1").decode().split()[0].lower()
        if hashlib.sha1(body).hexdigest() != expected:
            raise S3aJarsError(f"{artifact.file_name}: SHA-1 differs from {url}.sha1")
        target = jars / artifact.file_name
        partial = target.with_suffix(".jar.part")
        partial.write_bytes(body)
        partial.replace(target)
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--jars", type=Path, help="pyspark's jars directory (default: found)")
    parser.add_argument("--repository", default=MAVEN_CENTRAL, help="Maven repository URL")
    args = parser.parse_args(argv)
    try:
        jars = args.jars or pyspark_jars()
        for path in install(jars, args.repository):
            print(f"added {path.name}", file=sys.stderr)
    except S3aJarsError as exc:
        print(f"s3a_jars: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
