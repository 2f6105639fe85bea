#!/usr/bin/env bash
# Builds what the compose fleet runs, from this source tree: Levee's static
# binaries and its image (levee/levee:dev), grpc-health-probe in the image,
# and, when the etcd image can be neither found nor pulled, its local
# stand-in (scripts/docker-etcd-image.sh).
# scripts/docker-up.sh runs it before starting the fleet; the fault suite's
# test runs it so that it tests this tree. Needs Go, Docker and the Go module
# proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/docker-lib.sh
check_compose_images
command -v docker >/dev/null || die "docker is not installed"

# Binaries for the Docker engine's architecture, which is not the host's on
# Docker Desktop.
arch=$(docker version --format '{{.Server.Arch}}')
echo "building Levee for linux/$arch into $IMAGE_BIN/" >&2
rm -rf "$IMAGE_BIN"
mkdir -p "$IMAGE_BIN"
export CGO_ENABLED=0
GOOS=linux GOARCH=$arch go build -trimpath -ldflags='-s -w' -o "$IMAGE_BIN/" ./cmd/...
if [ "$(go env GOHOSTOS)/$(go env GOHOSTARCH)" = "linux/$arch" ]; then
  GOBIN="$PWD/$IMAGE_BIN" go install -trimpath -ldflags='-s -w' "$GRPC_HEALTH_PROBE"
else
  # go install refuses GOBIN when cross-compiling; it then writes to
  # $GOPATH/bin/linux_<arch>/.
  env -u GOBIN GOOS=linux GOARCH="$arch" go install -trimpath -ldflags='-s -w' "$GRPC_HEALTH_PROBE"
  cp "$(go env GOPATH)/bin/linux_$arch/grpc-health-probe" "$IMAGE_BIN/"
fi

mkdir -p deploy/bin/certs-mount # empty: /certs in the image, owned by its user
# One empty directory per component: /scoped/NAME, where the certs service
# writes each component's own identity (docker-compose.yml).
mkdir -p deploy/bin/scoped-mount/{etcd,budgetd,verifier,gateway,admin}
docker build -q -t "$LEVEE_IMAGE" . >/dev/null
echo "built $LEVEE_IMAGE with: $(cd "$IMAGE_BIN" && echo *)" >&2
if ! docker image inspect "$ETCD_IMAGE" >/dev/null 2>&1 && ! docker pull "$ETCD_IMAGE"; then
  echo "cannot pull $ETCD_IMAGE: building a local stand-in (scripts/docker-etcd-image.sh)" >&2
  scripts/docker-etcd-image.sh >&2
fi

