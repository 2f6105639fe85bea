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
  command -v apt-get >/dev/null ||
    die "/usr/bin/etcd or /usr/bin/etcdctl is missing and there is no apt-get: install etcd 3.4 or later"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends etcd-server etcd-client
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/usr/local/bin"
cp deploy/etcd/Dockerfile "$ctx/"
for bin in etcd etcdctl; do
  cp /usr/bin/$bin "$ctx/rootfs/usr/local/bin/"
  # ldd prints "libc.so.6 => /lib/.../libc.so.6 (0x...)" and
  # "/lib64/ld-linux-x86-64.so.2 (0x...)"; a static binary prints no path.
  for lib in $(ldd /usr/bin/$bin 2>/dev/null | grep -o '/[^ ]*' || true); do
    mkdir -p "$ctx/rootfs$(dirname "$lib")"
    cp -L "$lib" "$ctx/rootfs$lib" # the loader is a symlink: copy its target
  done
done

echo "building $ETCD_IMAGE from $(/usr/bin/etcd --version | sed -n 1p) (Debian etcd-server), a local stand-in" >&2
docker build -q -t "$ETCD_IMAGE" "$ctx"
docker run --rm "$ETCD_IMAGE" /usr/local/bin/etcd --version | sed -n 1p
