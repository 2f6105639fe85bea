#!/usr/bin/env bash
# Builds a local image tagged gcr.io/etcd-development/etcd:v3.5.17 (the image
# docker-compose.yml runs) from Debian's etcd-server and etcd-client packages,
# for machines that cannot pull from a registry. Anywhere else, do not run
# this: docker compose pulls the real image. The packages are etcd 3.4, whose
# command line is the same for every flag docker-compose.yml uses, and Levee's
# etcd client (v3.7) works against it.
#
# It installs the packages with apt-get when /usr/bin/etcd or /usr/bin/etcdctl
# is missing (as root, or through sudo), copies both binaries and the shared
# libraries ldd lists for them into a scratch image (deploy/etcd/Dockerfile),
# and tags it. It replaces an existing image of that tag.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/docker-lib.sh
check_compose_images

if [ ! -x /usr/bin/etcd ] || [ ! -x /usr/bin/etcdctl ]; then
  apt_install etcd-server etcd-client
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp deploy/etcd/Dockerfile "$ctx/"
standin_rootfs "$ctx" /usr/bin/etcd /usr/bin/etcdctl

echo "building $ETCD_IMAGE from $(/usr/bin/etcd --version | sed -n 1p) (Debian etcd-server), a local stand-in" >&2
docker build -q -t "$ETCD_IMAGE" "$ctx"
docker run --rm "$ETCD_IMAGE" /usr/local/bin/etcd --version | sed -n 1p
