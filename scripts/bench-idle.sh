#!/usr/bin/env bash
# One Argon2id hash at the default policy right after the process sat idle
# (0 s and 2m30s), under the default GC and with verifier.KeepHeapResident
# applied: the page faults and system time the hash pays show whether the
# runtime handed the freed Argon2 arrays back to the OS in between. Prints
# the benchstat table of docs/benchmarks.md; the results stay in OUT.
# Takes about 16 minutes, nearly all of it asleep.
#
# Environment: COUNT (default 3), OUT (default a new temporary directory).
# Needs benchstat: go install golang.org/x/perf/cmd/benchstat@latest
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

COUNT=${COUNT:-3}
OUT=${OUT:-$(mktemp -d)}
BENCHSTAT=$(benchstat_bin)

machine
for heap in default resident; do
  LEVEE_BENCH_HEAP=$heap go test -run '^$' -bench '^BenchmarkHashAfterIdle$' -benchtime 1x \
    -count "$COUNT" -timeout 30m ./bench | tee "$OUT/idle-$heap.txt"
done
echo
echo "### resident heap vs default GC, one hash after an idle period"
"$BENCHSTAT" -row /idle -col heap "$OUT/idle-default.txt" "$OUT/idle-resident.txt"
echo
echo "results in $OUT"
