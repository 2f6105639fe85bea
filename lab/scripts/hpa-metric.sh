#!/usr/bin/env bash
# The autoscaler's metric under a constant overload: Levee's fleet alone
# (2 verifiers of 1 worker, behind a gateway), loaded at 0.7 C, then at
# 2 × 0.7 = 1.4 C for 90 s (the lab's spike trigger), then 0.7 C again,
# while demand-trace samples every verifier's /metrics once a second:
# levee_verifier_demand_ratio (what the chart's HPA follows) beside the
# queue length a queue-depth autoscaler would follow. CSV, plot and the
# lab's report in docs/lab/hpa-metric/ (or $OUT). About 4 minutes on 2
# cores; run it alone (flock /tmp/levee-load.lock on a shared machine).
# Runs from the product's root.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/lab/hpa-metric}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go -C lab build -o "$work/bin/" ./cmd/levee-lab ./cmd/demand-trace
# Hashes of 16 MiB, 8 passes (about 0.1 s each here): the verifiers'
# workers, not the gateway, TLS or the load generator, bound C, so the
# spike overloads them.
"$work/bin/levee-lab" -fleets levee -verifiers 2 -workers 1 -hash-memory-kib 16384 -hash-iterations 8 \
  -load 0.7 -trigger spike -spike 2 -duration 90s -after 30s -out "$work/lab" > "$work/lab.log" 2>&1 &
lab=$!
# The lab's verifiers: their -metrics-listen, from the command lines of
# the processes it started under $work.
urls=""
for _ in $(seq 600); do
  urls=$(ps -eo args | grep -E '^[^ ]*/verifier .*-metrics-listen' | grep -F "$work" | grep -v -e '-unguarded' |
    sed -E 's/.*-metrics-listen ([^ ]+).*/http:\/\/\1\/metrics/' | sort | paste -sd, -) || true
  [ "$(tr ',' '\n' <<<"$urls" | grep -c http || true)" -ge 2 ] && break
  sleep 0.2
done
echo "sampling $urls" >&2
"$work/bin/demand-trace" -metrics "$urls" -for 10m -out "$out" &
trace=$!
status=0
wait "$lab" || status=$?
kill -INT "$trace" 2>/dev/null || true
wait "$trace" || true
mkdir -p "$out"
cp "$work/lab/report.md" "$out/lab-report.md" 2>/dev/null || true
cp "$work/lab/"*.png "$out/" 2>/dev/null || true
exit "$status"
