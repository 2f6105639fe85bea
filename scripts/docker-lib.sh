# shellcheck shell=bash disable=SC2034 # the variables are for the sourcing scripts
# Sourced by the scripts/docker-*.sh scripts; not run on its own. The caller
# has already changed to the repository root.

# The images docker-compose.yml runs. ETCD_IMAGE must be the image named in
# docker-compose.yml: check_compose_images fails when they drift apart.
# PROMETHEUS_IMAGE runs only in the monitoring profile.
LEVEE_IMAGE=levee/levee:dev
ETCD_IMAGE=gcr.io/etcd-development/etcd:v3.5.17
PROMETHEUS_IMAGE=prom/prometheus:v2.42.0

# Pinned tools, built from the Go module proxy.
GRPC_HEALTH_PROBE=github.com/grpc-ecosystem/grpc-health-probe@v0.4.63
GRPCURL=github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4

# Build output, ignored by git: image/ is what the Levee image holds
# (/usr/local/bin), host/ holds tools the scripts run on this machine.
IMAGE_BIN=deploy/bin/image
HOST_BIN=deploy/bin/host
# The compose fleet's CA and the admin and client identities, copied out of
# its certs volume for tools on this machine (grpcurl, levee, the lab).
HOST_CERTS=deploy/bin/certs

die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

# compose runs Compose v2 (docker compose) when it is installed, else the
# standalone docker-compose (v1.27 or later reads the same file).
compose() {
  if docker compose version >/dev/null 2>&1; then
    docker compose "$@"
  elif command -v docker-compose >/dev/null; then
    docker-compose "$@"
  else
    die "neither 'docker compose' nor 'docker-compose' is installed"
  fi
}

check_compose_images() {
  grep -q "image: $ETCD_IMAGE\$" docker-compose.yml ||
    die "docker-compose.yml does not run $ETCD_IMAGE: update ETCD_IMAGE in scripts/docker-lib.sh"
  grep -q "image: $LEVEE_IMAGE\$" docker-compose.yml ||
    die "docker-compose.yml does not run $LEVEE_IMAGE: update LEVEE_IMAGE in scripts/docker-lib.sh"
}

# standin_rootfs copies each program (an absolute path) to
# <dir>/rootfs/usr/local/bin/ and the shared libraries ldd lists for it to
# their own paths under <dir>/rootfs/: what a FROM scratch stand-in of a
# public image needs to run a Debian build of it.
standin_rootfs() {
  local dir=$1 bin lib
  shift
  mkdir -p "$dir/rootfs/usr/local/bin"
  for bin in "$@"; do
    cp "$bin" "$dir/rootfs/usr/local/bin/"
    # ldd prints "libc.so.6 => /lib/.../libc.so.6 (0x...)" and
    # "/lib64/ld-linux-x86-64.so.2 (0x...)"; a static binary prints no path.
    for lib in $(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true); do
      mkdir -p "$dir/rootfs$(dirname "$lib")"
      cp -L "$lib" "$dir/rootfs$lib" # the loader is a symlink: copy its target
    done
  done
}

# apt_install installs Debian packages, as root or through sudo.
apt_install() {
  command -v apt-get >/dev/null || die "missing $* and there is no apt-get to install them"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends "$@"
}
