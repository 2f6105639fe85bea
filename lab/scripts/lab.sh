#!/usr/bin/env bash
# The lab's standard report, in one command: every experiment behind
# docs/lab/, written there (or under $OUT). About four hours on 2 cores;
# keep the machine otherwise idle (each run's summary.csv has other_cpu_cores,
# the CPU anything but the lab and the fleet used). LAB_QUICK=1 runs only
# stall/, healthy/, ramp/ and sim/ (about 25 minutes).
#
#   stall/        every verifier SIGSTOPped 10 s at 0.7 C under naive clients
#                 (three immediate attempts, 2 s timeout), the Levee fleet and
#                 its control, each beside its simulation
#   healthy/      no trigger at 0.7 and 0.9 C, three seeds, both fleets:
#                 success and p99 against the unloaded reference
#   grid-stop/    SIGSTOP × {1,3,5,10,20,30,60} s × {0.5,0.7,0.9} C, both fleets
#   grid-cpu-knob/ CPU cut and capacity knob × {1,5,10,30,60} s × {0.5,0.7,0.9} C,
#                 both fleets
#   grid-mix/     the mixed population (naive 0.6, levee 0.3, human 0.1):
#                 SIGSTOP, CPU cut and knob × 30 s × {0.5,0.9} C, both fleets
#   ramp/         0.2 C → 10 C → 0.2 C, both fleets
#   sim/          a 19 s failover at C = 1,000/s, simulated: no budget,
#                 per-process budgets, the fleet budget
#   compose-pause/ docker pause of the compose fleet's verifiers for 20 s at
#                 0.5 C, both fleets (only when the compose images exist:
#                 scripts/docker-up.sh builds them)
#
# It builds levee-lab from the lab module and the fleet's programs (verifier,
# gateway, budgetd, levee) from the product, and runs from the product's
# root. Each run's logs and etcd data go to a temporary directory, not under
# docs/.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-docs/lab}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/bin/" ./cmd/verifier ./cmd/gateway ./cmd/budgetd ./cmd/levee
go -C lab build -o "$work/bin/" ./cmd/levee-lab
lab() { "$work/bin/levee-lab" -bin "$work/bin" -fleet-dir "$work" "$@"; }

# The per-run CSVs of the grid are a megabyte and reproducible: only the
# summary, the report and the pictures are kept.
lab -out "$out/stall"
# Healthy load: the runs' summaries in one CSV, and the first seed's plots
# (healthy/report.md, which reads them, is written by hand).
mkdir -p "$out/healthy" && rm -f "$out/healthy/summary.csv"
for load in 0.7 0.9; do
  for seed in 1 2 3; do
    lab -trigger none -load "$load" -warmup 5s -baseline 30s -after 0s -seed "$seed" -out "$work/healthy-$load-$seed"
    if [ ! -f "$out/healthy/summary.csv" ]; then head -1 "$work/healthy-$load-$seed/summary.csv" >"$out/healthy/summary.csv"; fi
    tail -n +2 "$work/healthy-$load-$seed/summary.csv" >>"$out/healthy/summary.csv"
  done
  cp "$work/healthy-$load-1/compare.png" "$out/healthy/compare-${load}C-seed1.png"
done
lab -ramp -out "$out/ramp"
"$work/bin/levee-lab" -sim -out "$out/sim"
if [ -n "${LAB_QUICK:-}" ]; then
  echo "lab: LAB_QUICK: grids and compose skipped; report in $out/" >&2
  exit 0
fi
lab -grid -grid-triggers stop -grid-seeds 1 -warmup 3s -baseline 10s -after 30s -out "$out/grid-stop"
rm -rf "$out/grid-stop/runs"
lab -grid -grid-triggers cpu,knob -grid-durations 1s,5s,10s,30s,60s -grid-seeds 1 -warmup 3s -baseline 10s -after 20s \
  -out "$out/grid-cpu-knob"
rm -rf "$out/grid-cpu-knob/runs"
lab -grid -grid-triggers stop,cpu,knob -grid-durations 30s -grid-loads 0.5,0.9 -grid-seeds 1 -warmup 3s -baseline 10s \
  -after 30s -mix naive:0.6,levee:0.3,human:0.1 -out "$out/grid-mix"
rm -rf "$out/grid-mix/runs"
if docker image inspect levee/levee:dev >/dev/null 2>&1; then
  OUT="$out/compose-pause" lab/scripts/compose-pause.sh
else
  echo "lab: no levee/levee:dev image: compose-pause skipped (scripts/docker-up.sh builds it, or run lab/scripts/compose-pause.sh)" >&2
fi
echo "lab: report in $out/" >&2
