#!/usr/bin/env bash
# Build layerbench:cpu on a machine with Debian's docker.io and no image registry (as root):
# start the engine if it is installed and not running, make a Debian base image once (cached),
# put the host's CA bundle and torch CPU wheel in docker/local/ (the build stage only), build.
# `make docker-test` runs this, then tests/test_docker_stack.py; docs/deploy.md has the figures.
# On a machine with a registry (CI): LAYERBENCH_BASE_IMAGE=python:3.11-slim-bookworm, pulled
# first, skips debootstrap, and TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu gives pip
# the CPU torch wheel where no find-links folder holds it.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${LAYERBENCH_BASE_IMAGE:-layerbench-base:bookworm}
IMAGE=layerbench:${TORCH_FLAVOUR:-cpu}
WORK=${LAYERBENCH_DOCKER_WORK:-/var/tmp/layerbench-docker}
mkdir -p "$WORK"

if ! command -v docker >/dev/null; then
    echo "docker is not installed: apt-get install -y docker.io docker-compose debootstrap" >&2
    exit 2
fi
if ! docker info >/dev/null 2>&1; then
    echo "starting dockerd (no default bridge, no iptables rules; log: $WORK/dockerd.log)"
    nohup dockerd --bridge=none --iptables=false >"$WORK/dockerd.log" 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null
fi

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    echo "making the base image $BASE with debootstrap (about a minute)"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$WORK/rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log"
    tar -C "$WORK/rootfs" -c . | docker import --change 'ENV LANG=C.UTF-8' - "$BASE"
    rm -rf "$WORK/rootfs"
fi

# The host's pip trusts this CA bundle ($PIP_CERT, else the system's) and finds torch in its
# find-links folder ($PIP_FIND_LINKS, which may be unset).
mkdir -p docker/local/wheels
cp "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" docker/local/ca.crt
for links in ${PIP_FIND_LINKS:-}; do
    find "$links" -maxdepth 1 -name 'torch-*+cpu-*.whl' -exec cp -u {} docker/local/wheels/ \;
done

start=$(date +%s)
docker build --network host -f docker/Dockerfile \
    --build-arg BASE_IMAGE="$BASE" --build-arg TORCH_INDEX_URL="${TORCH_INDEX_URL:-}" -t "$IMAGE" .
echo "built $IMAGE in $(($(date +%s) - start)) s; size $(docker image inspect -f '{{.Size}}' "$IMAGE") bytes"
