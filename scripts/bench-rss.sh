#!/usr/bin/env bash
# Peak RSS of cmd/verifier at saturation, against workers × m and the soft
# memory limit that KeepHeapResident sets.
#
# For each configuration (default flags, which keep the heap resident, and
# -resident-heap=false) it builds cmd/verifier, runs it under /usr/bin/time -v
# on its default addresses (gRPC 127.0.0.1:7701, metrics 127.0.0.1:9701),
# waits until it serves, drives it at saturation with ghz (REQUESTS calls from
# CONCURRENCY callers; MAX_DURATION kills the load, and fails the script,
# should the node be much slower than expected), sends SIGTERM, and prints
# the peak RSS, the hashes/s it achieved and its mean service time (from
# levee_verifier_service_seconds_sum/_count).
#
# Needs /usr/bin/time (apt-get install -y time), curl, and ghz:
#   go install github.com/bojand/ghz/cmd/ghz@v0.93.0
#
# Environment: REQUESTS (default 200: about 25 s at the 8 hashes/s of a
# quiet 2-core machine), CONCURRENCY (default 3 × workers: two requests queued
# per worker, a projected wait well under the default -max-queue-wait),
# MAX_DURATION (default 90s), M_KIB (the policy's m, default 65536; used only
# for the workers × m comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

REQUESTS=${REQUESTS:-200}
MAX_DURATION=${MAX_DURATION:-90s}
M_KIB=${M_KIB:-65536}
GRPC_ADDR=127.0.0.1:7701
METRICS_URL=http://127.0.0.1:9701/metrics
GHZ=$(command -v ghz || echo "$(go env GOPATH)/bin/ghz")

for tool in /usr/bin/time curl "$GHZ"; do
  if [ ! -x "$(command -v "$tool" || true)" ]; then
    echo "bench-rss: $tool not found (see the header of $0)" >&2
    exit 1
  fi
done
for port in 7701 9701; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "bench-rss: 127.0.0.1:$port is in use; stop whatever listens there first" >&2
    exit 1
  fi
done

tmp=$(mktemp -d)
verifier_pid=
cleanup() {
  if [ -n "$verifier_pid" ]; then kill "$verifier_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/verifier" ./cmd/verifier

# A stored default-policy hash of the password "a" (YQ== in base64): every
# call hashes once at m=64 MiB, t=3, p=4 and matches.
STORED='$argon2id$v=19$m=65536,t=3,p=4$LgFzG1E5rSTnsqXWRTi2dw$d2o408ATrmkakzyI+zETvgzLLkVmCVMKa33sdvkWP8M'

# metric NAME prints the sum of every sample of NAME on the metrics endpoint.
metric() {
  curl -fsS "$METRICS_URL" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%.6f\n", s }'
}

# host_ticks prints the busy CPU time of the whole machine, proc_ticks that
# of one process, both in 1/100 s.
host_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }
proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

run() {
  local label=$1; shift
  wait_quiet
  echo "=== $label: verifier $*"
  /usr/bin/time -v -o "$tmp/time.txt" "$tmp/verifier" "$@" 2>"$tmp/verifier.log" &
  local time_pid=$!
  for _ in $(seq 100); do
    verifier_pid=$(pgrep -P "$time_pid" || true)
    [ -n "$verifier_pid" ] && break
    sleep 0.1
  done
  [ -n "$verifier_pid" ] || { echo "bench-rss: verifier did not start" >&2; cat "$tmp/verifier.log" >&2; exit 1; }
  for _ in $(seq 600); do
    grep -q 'msg="verifier serving"' "$tmp/verifier.log" && break
    kill -0 "$verifier_pid" 2>/dev/null || { cat "$tmp/verifier.log" >&2; exit 1; }
    sleep 0.1
  done
  grep -q 'msg="verifier serving"' "$tmp/verifier.log" || { echo "bench-rss: verifier not serving after 60s" >&2; exit 1; }

  local workers concurrency
  workers=$(metric levee_verifier_workers_active | cut -d. -f1)
  concurrency=${CONCURRENCY:-$((3 * workers))}
  local count0 sum0 start end
  count0=$(metric levee_verifier_service_seconds_count)
  sum0=$(metric levee_verifier_service_seconds_sum)
  local host0 proc0
  host0=$(host_ticks)
  proc0=$(proc_ticks "$verifier_pid")
  start=$(date +%s.%N)
  # ghz's own -x would override -n; timeout bounds the load instead.
  timeout "$MAX_DURATION" /usr/bin/time -f '%U %S' -o "$tmp/ghz.cpu" "$GHZ" --insecure \
    --call levee.verify.v1.VerifyService.Verify \
    -d "{\"encoded_hash\":\"$STORED\",\"password\":\"YQ==\"}" \
    -c "$concurrency" -n "$REQUESTS" -t 30s "$GRPC_ADDR" >"$tmp/ghz.txt"
  end=$(date +%s.%N)
  local host1 proc1 foreign
  host1=$(host_ticks)
  proc1=$(proc_ticks "$verifier_pid")
  # CPU used by neither the verifier nor ghz during the load, in cores.
  foreign=$(awk -v h="$((host1 - host0))" -v p="$((proc1 - proc0))" -v t0="$start" -v t1="$end" \
    '{ printf "%.2f", (h - p - ($1 + $2) * 100) / 100 / (t1 - t0) }' "$tmp/ghz.cpu")
  local count1 sum1 rss_now dropped late
  count1=$(metric levee_verifier_service_seconds_count)
  sum1=$(metric levee_verifier_service_seconds_sum)
  rss_now=$(metric process_resident_memory_bytes)
  dropped=$(metric levee_verifier_dropped_total)
  late=$(metric levee_verifier_late_total)

  kill -TERM "$verifier_pid"
  wait "$time_pid" || true
  verifier_pid=

  local limit peak_kib
  limit=$(sed -n 's/.*soft_memory_limit_mib=\([0-9]*\).*/\1/p' "$tmp/verifier.log")
  peak_kib=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$tmp/time.txt")
  sed -n '/^Summary:/,/^$/p;/^Status code distribution:/,/^$/p' "$tmp/ghz.txt"
  awk -v w="$workers" -v m="$M_KIB" -v lim="${limit:-none}" -v peak="$peak_kib" -v now="$rss_now" \
      -v c0="$count0" -v c1="$count1" -v s0="$sum0" -v s1="$sum1" -v t0="$start" -v t1="$end" \
      -v conc="$concurrency" -v dropped="$dropped" -v late="$late" -v foreign="$foreign" 'BEGIN {
    arrays = w * m / 1024
    n = c1 - c0
    printf "workers                      %d (callers %d)\n", w, conc
    printf "workers x m                  %d MiB\n", arrays
    printf "soft memory limit            %s%s\n", lim, (lim == "none" ? "" : " MiB")
    printf "peak RSS (time -v)           %.0f MiB  (%.2f x workers x m)\n", peak / 1024, peak / 1024 / arrays
    printf "RSS after the load           %.0f MiB\n", now / 1048576
    printf "hashes under load            %d in %.1f s = %.2f hashes/s\n", n, t1 - t0, n / (t1 - t0)
    printf "mean service time            %.1f ms\n", (n > 0 ? (s1 - s0) / n * 1000 : 0)
    printf "dropped / late (whole run)   %d / %d\n", dropped, late
    printf "other processes (load)       %.2f cores%s\n", foreign, (foreign > 0.05 ? "  WARNING: the machine was not quiet" : "")
  }'
  grep -E 'User time|System time|Elapsed \(wall' "$tmp/time.txt" | sed 's/^\t*/process: /'
  echo
}

machine
run "resident heap (default flags)"
run "default GC (-resident-heap=false)" -resident-heap=false
