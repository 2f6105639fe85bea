#!/usr/bin/env bash
# Where the refusal's own cost goes: CPU profiles of N refused Verify calls
# and of N health Checks (16 concurrent callers, KeepHeapResident applied),
# and the CPU per call, from the profiles, of the server's whole handling of
# the call (grpc.(*Server).handleStream), the Verify handler, the per-call
# ORCA load report and the client's Invoke. Sampled at 100 Hz, so each
# figure is good to about half a µs at the default N. Uses the machine for
# about 30 s; the results stay in OUT.
#
# Environment: N (default 200000), OUT (default a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh

N=${N:-200000}
OUT=${OUT:-$(mktemp -d)}

machine
for op in verify health; do
  wait_quiet
  LEVEE_BENCH_HEAP=resident go test -run '^$' -bench "^BenchmarkRefusal\$/^op=$op\$/^clients=16\$" \
    -benchmem -benchtime "${N}x" -cpuprofile "$OUT/$op.cpu" -o "$OUT/bench.test" ./bench | tee "$OUT/$op.txt"
done

# per_op PROFILE FUNCTION-REGEXP prints the cumulative CPU of the function
# per call in µs (N calls, plus the single call of the first, ramp-up run).
per_op() {
  go tool pprof -top -cum "$OUT/bench.test" "$1" 2>/dev/null | awk -v re="$2" -v n="$N" '
    $6 ~ re {
      v = $4
      if (v ~ /ms$/) { sub(/ms$/, "", v); v /= 1000 } else if (v ~ /us$|µs$/) { sub(/(us|µs)$/, "", v); v /= 1e6 } else sub(/s$/, "", v)
      printf "%.1f", v / (n + 1) * 1e6
      found = 1
      exit
    }
    END { if (!found) printf "0.0" }'
}

echo
echo "CPU per call from the profiles, µs (refused Verify | health Check):"
printf '  %-52s %6s | %6s\n' "server: grpc.(*Server).handleStream (all of it)" \
  "$(per_op "$OUT/verify.cpu" '^google.golang.org/grpc.\(\*Server\).handleStream$')" \
  "$(per_op "$OUT/health.cpu" '^google.golang.org/grpc.\(\*Server\).handleStream$')"
printf '  %-52s %6s\n' "  of which verifier.(*Server).Verify (the handler)" \
  "$(per_op "$OUT/verify.cpu" '^github.com/leveehq/levee/pkg/verifier.\(\*Server\).Verify$')"
printf '  %-52s %6s\n' "  of which the per-call ORCA report (build, marshal)" \
  "$(per_op "$OUT/verify.cpu" '^google.golang.org/grpc/orca.\(\*recorderWrapper\).setTrailerMetadata$')"
printf '  %-52s %6s\n' "  of which orca.CallMetricsRecorderFromContext" \
  "$(per_op "$OUT/verify.cpu" '^google.golang.org/grpc/orca.CallMetricsRecorderFromContext$')"
printf '  %-52s %6s | %6s\n' "client: grpc.(*ClientConn).Invoke" \
  "$(per_op "$OUT/verify.cpu" '^google.golang.org/grpc.\(\*ClientConn\).Invoke$')" \
  "$(per_op "$OUT/health.cpu" '^google.golang.org/grpc.\(\*ClientConn\).Invoke$')"
echo
echo "profiles in $OUT (go tool pprof $OUT/bench.test $OUT/verify.cpu)"
