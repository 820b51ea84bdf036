# syntax=docker/dockerfile:1
# acp-relay in a container: the relay is the parent of one agent process per WebSocket.
#
#   docker build -t acp-relay .
#   docker run --rm -p 127.0.0.1:8765:8765 \
#     -v "$PWD/secret:/run/secrets/acp-relay:ro" \
#     -e ACP_RELAY_AGENT="python -m relay.demo_agent" acp-relay
#
# deploy/README.md has the whole smoke test. This repository's CI has no Docker engine:
# the image is not built there; tests/test_deploy.py lints this file (hadolint) and checks
# its structure, and runs the ENTRYPOINT and HEALTHCHECK commands against a live relay.

ARG PYTHON_IMAGE=python:3.12-slim-bookworm

# --- builder: the source becomes a wheel; nothing of this stage but the wheel is kept ---
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY pyproject.toml README.md ./
COPY relay ./relay
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- final: the wheel and its dependencies from PyPI, tini, an unprivileged user --------
FROM ${PYTHON_IMAGE}

# Extras installed with the wheel. "demo" brings the demo agent (python -m relay.demo_agent)
# for smoke tests; build with --build-arg EXTRAS= to leave it out.
ARG EXTRAS=demo

# tini from Debian's packages is PID 1: it reaps orphaned grandchildren (an agent's
# double-forked helpers end up reparented to PID 1, and the relay never waits for them)
# and forwards SIGTERM/SIGINT to the relay. The relay stops its agents' process groups
# itself (stdin EOF, SIGTERM, SIGKILL after --kill-grace). -s keeps reaping working when
# tini is not PID 1 (docker run --init, a pod's shared PID namespace).
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.* \
    && rm -rf /var/lib/apt/lists/*

# Only the wheel built above is installed (bind-mounted from the builder, so it leaves no
# layer); its dependencies come from PyPI. DL3013 (pin versions) does not apply to a
# local wheel file.
# hadolint ignore=DL3013
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    set -eu; \
    wheel="$(find /wheels -name 'acp_relay-*.whl')"; \
    pip install --no-cache-dir --root-user-action=ignore "${wheel}${EXTRAS:+[${EXTRAS}]}"; \
    acp-relay --version

RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/relay \
        --shell /usr/sbin/nologin relay \
    && install -d -o relay -g relay -m 0750 /workspace

# No secret is baked in: mount one at ACP_RELAY_SECRET_FILE (readable by uid 10001), or
# give ACP_RELAY_SECRET at run time. The agent command comes from ACP_RELAY_AGENT.
# DL3064 flags the name ACP_RELAY_SECRET_FILE: its value is a path, not a secret.
# hadolint ignore=DL3064
ENV ACP_RELAY_LISTEN=0.0.0.0:8765 \
    ACP_RELAY_WORKSPACE=/workspace \
    ACP_RELAY_SECRET_FILE=/run/secrets/acp-relay \
    ACP_RELAY_LOG_FORMAT=json \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

USER 10001:10001
WORKDIR /workspace
EXPOSE 8765

# The relay shuts down on SIGTERM within --kill-grace + 2 s (5 s by default): docker stop's
# 10 s default is enough; raise --stop-timeout with a larger ACP_RELAY_KILL_GRACE.
STOPSIGNAL SIGTERM

# slim has no curl: ask /healthz with Python's urllib, on the port of ACP_RELAY_LISTEN.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('ACP_RELAY_LISTEN', '0.0.0.0:8765').rpartition(':')[2]; urllib.request.urlopen('http://127.0.0.1:' + port + '/healthz', timeout=4)"]

ENTRYPOINT ["/usr/bin/tini", "-s", "--", "acp-relay", "serve"]
