#!/usr/bin/env bash
# Saturation throughput: argon2.IDKey in process vs Verify through a real
# verifier over gRPC, on the same cores, under the default GC and with
# verifier.KeepHeapResident applied (separate go test invocations, because
# the setting is process-wide, alternating round by round). Prints the
# benchstat tables of docs/benchmarks.md and the same comparisons paired
# within rounds; the results stay in OUT.
#
# Results disturbed by other processes are dropped and re-measured (see
# bench_heaps in scripts/bench-lib.sh). About 40 s a round when the machine
# is quiet, so some 15 minutes for the default COUNT.
#
# Environment: COUNT (default 12), BENCHTIME (default 60x: 60 hashes a run),
# OUT (default a new temporary directory).
# Needs benchstat: go install golang.org/x/perf/cmd/benchstat@latest
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

COUNT=${COUNT:-12}
BENCHTIME=${BENCHTIME:-60x}
OUT=${OUT:-$(mktemp -d)}
BENCHSTAT=$(benchstat_bin)

machine
bench_heaps "$OUT/saturation" "$COUNT" \
  -run '^$' -bench '^BenchmarkSaturation$' -benchtime "$BENCHTIME" -timeout 10m ./bench

for heap in default resident; do
  echo
  echo "### gRPC vs in process, heap: $heap"
  "$BENCHSTAT" -row /p -col /via "$OUT/saturation-$heap.txt"
  echo
  echo "### gRPC vs in process, paired within rounds, heap: $heap"
  paired_ratios "$OUT/saturation-$heap.txt" hashes/s
  paired_ratios "$OUT/saturation-$heap.txt" cpu-ms/hash
done
echo
echo "### resident heap vs default GC"
"$BENCHSTAT" -row /p,/via -col heap "$OUT/saturation-default.txt" "$OUT/saturation-resident.txt"
echo
echo "### resident heap vs default GC, paired within rounds"
paired_heap_ratios "$OUT/saturation-default.txt" "$OUT/saturation-resident.txt" hashes/s
paired_heap_ratios "$OUT/saturation-default.txt" "$OUT/saturation-resident.txt" cpu-ms/hash
echo
echo "results in $OUT"
