#!/usr/bin/env bash
# CPU per request refused at arrival (RESOURCE_EXHAUSTED, "queue full"), the
# gRPC health Check baseline on the same server, and the refusal decision
# alone, with verifier.KeepHeapResident applied (as cmd/verifier does by
# default) and under the default GC, alternating round by round. Prints the
# benchstat tables of docs/benchmarks.md and the refusal's own cost paired
# within rounds; the results stay in OUT.
#
# Results disturbed by other processes are dropped and re-measured (see
# bench_heaps in scripts/bench-lib.sh). About 20 s a round when the machine
# is quiet.
#
# Environment: COUNT (default 6), OUT (default a new temporary directory).
# Needs benchstat: go install golang.org/x/perf/cmd/benchstat@latest
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

COUNT=${COUNT:-6}
OUT=${OUT:-$(mktemp -d)}
BENCHSTAT=$(benchstat_bin)

machine
bench_heaps "$OUT/refusal" "$COUNT" -run '^$' -bench '^BenchmarkRefusal$' -benchmem -timeout 10m ./bench

for heap in resident default; do
  echo
  echo "### every op, heap: $heap"
  "$BENCHSTAT" -row '/op@(submit handler health verify)' -col /clients "$OUT/refusal-$heap.txt"
  echo
  echo "### refused Verify vs health Check, heap: $heap (the difference is the refusal's own cost)"
  "$BENCHSTAT" -filter '/op:(health OR verify)' -row /clients -col '/op@(health verify)' "$OUT/refusal-$heap.txt"
  echo
  echo "### the same difference, paired within each round, heap: $heap"
  paired_refusal_diff "$OUT/refusal-$heap.txt"
done
echo
echo "results in $OUT"
