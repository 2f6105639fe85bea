#!/usr/bin/env bash
# Builds Levee's binaries and image, starts the fleet of docker-compose.yml,
# waits until every container is healthy, and checks the gateway on
# 127.0.0.1:7700 with one Hash and one Verify of that hash through it. Safe to run again: compose only
# recreates what changed. scripts/docker-down.sh removes it all, data included.
#
# Needs Go, Docker with compose, and the Go module proxy (for grpc-health-probe
# and grpcurl, built once into deploy/bin/). When the etcd image can be neither
# found nor pulled, it builds the local stand-in (scripts/docker-etcd-image.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/docker-lib.sh
command -v docker >/dev/null || die "docker is not installed"
compose version >/dev/null

scripts/docker-build.sh
grpcurl="$HOST_BIN/grpcurl"
[ -x "$grpcurl" ] || GOBIN="$PWD/$HOST_BIN" go install "$GRPCURL"

compose up -d

# Every service has a healthcheck: wait until all report healthy (the gateway
# does once a verifier registered in etcd is eligible), then check the
# published port from here.
echo "waiting for every container to be healthy..." >&2
deadline=$((SECONDS + 120))
unhealthy() { # prints the containers not (yet) healthy; fails when it cannot tell
  local ids states
  ids=$(compose ps -a -q) && [ -n "$ids" ] || return 1 # -a: an exited one too
  # shellcheck disable=SC2086 # one argument per container id
  states=$(docker inspect $ids --format \
    '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}:{{.State.ExitCode}}{{end}}') || return 1
  # The one-shot services (certs, etcd-auth) are done once exited with 0.
  echo "$states" | grep -v -e ' healthy$' -e ' exited:0$' || true
}
until out=$(unhealthy) && [ -z "$out" ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then
    compose ps >&2
    die "not healthy within 120 s: see 'docker compose logs <service>'"
  fi
  sleep 2
done
compose ps

# The development CA and the identities tools on this host present: the
# admin's (settings, the capacity knob, budgetd status), a client's (tenant
# default) and the front end's (names tenants; the lab's load).
certs_id=$(compose ps -q certs) && [ -n "$certs_id" ] || die "no container of the certs service"
rm -rf "$HOST_CERTS" && mkdir -p "$HOST_CERTS"
for f in ca.crt admin.crt admin.key client.crt client.key frontend.crt frontend.key; do
  docker cp "$certs_id:/certs/$f" "$HOST_CERTS/$f"
done
chmod 600 "$HOST_CERTS"/*.key
tls=(-cacert "$HOST_CERTS/ca.crt" -cert "$HOST_CERTS/client.crt" -key "$HOST_CERTS/client.key")
"$grpcurl" "${tls[@]}" -max-time 5 127.0.0.1:7700 grpc.health.v1.Health/Check | grep -q '"SERVING"' ||
  die "the gateway is healthy but 127.0.0.1:7700 does not answer SERVING"
"$grpcurl" -plaintext -max-time 5 127.0.0.1:7700 grpc.health.v1.Health/Check >/dev/null 2>&1 &&
  die "the gateway answers plaintext: TLS is off"

# aHVudGVyMg== is "hunter2": passwords are bytes, so JSON carries base64.
echo "Hash through the gateway:" >&2
hash=$("$grpcurl" "${tls[@]}" -max-time 10 -d '{"password":"aHVudGVyMg=="}' \
  127.0.0.1:7700 levee.verify.v1.VerifyService/Hash | sed -n 's/.*"encodedHash": *"\([^"]*\)".*/\1/p')
[ -n "$hash" ] || die "Hash returned no encodedHash"
echo "  $hash" >&2
echo "Verify through the gateway:" >&2
result=$("$grpcurl" "${tls[@]}" -max-time 10 -d "{\"encoded_hash\":\"$hash\",\"password\":\"aHVudGVyMg==\"}" \
  127.0.0.1:7700 levee.verify.v1.VerifyService/Verify)
echo "$result"
echo "$result" | grep -q '"match": *true' || die "Verify did not match"
echo "Levee is up: gRPC with TLS on 127.0.0.1:7700 (CA: $HOST_CERTS/ca.crt), metrics http://127.0.0.1:9700/metrics (docs/docker.md)" >&2
