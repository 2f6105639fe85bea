#!/usr/bin/env bash
# Builds a local image tagged prom/prometheus:v2.42.0 (the image the compose
# fleet's monitoring profile runs) from Debian's prometheus package, for
# machines that cannot pull from a registry. Anywhere else, do not run this:
# docker compose pulls the real image. Debian's package is Prometheus 2.42.0,
# the version of that tag.
#
# It installs the package with apt-get when /usr/bin/prometheus is missing
# (as root, or through sudo), copies the binary and the shared libraries ldd
# lists for it into a scratch image (deploy/prometheus/Dockerfile), and tags
# it. It replaces an existing image of that tag.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/docker-lib.sh

[ -x /usr/bin/prometheus ] || apt_install prometheus
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp deploy/prometheus/Dockerfile "$ctx/"
mkdir -p "$ctx/data"
standin_rootfs "$ctx" /usr/bin/prometheus /usr/bin/promtool
echo "building $PROMETHEUS_IMAGE from $(/usr/bin/prometheus --version 2>&1 | sed -n 1p) (Debian), a local stand-in" >&2
docker build -q -t "$PROMETHEUS_IMAGE" "$ctx"
docker run --rm "$PROMETHEUS_IMAGE" /usr/local/bin/prometheus --version 2>&1 | sed -n 1p
