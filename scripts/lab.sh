#!/usr/bin/env bash
# The lab's standard report, in one command: every experiment behind
# docs/lab/, written there (or under $OUT). About 75 minutes on 2 cores;
# keep the machine otherwise idle (each run's summary.csv has other_cpu_cores,
# the CPU anything but the lab and the fleet used).
#
#   stall/        the seed's scenario: every verifier SIGSTOPped 10 s at 0.7 C,
#                 the Levee fleet and its control, each beside its simulation
#   grid-stop/    SIGSTOP × {1,3,5,10,20,30,60} s × {0.5,0.7,0.9} C, both fleets
#   ramp/         0.2 C → 10 C → 0.2 C, both fleets
#   sim/          the seed's fleet at C = 1,000/s, simulated: no budget,
#                 per-process budgets, the fleet budget
#   compose-pause/ docker pause of the compose fleet's verifiers for 20 s at
#                 0.5 C, both fleets (only when the compose images exist:
#                 scripts/docker-up.sh builds them)
#
# Each run's logs and etcd data go to a temporary directory, not under docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-docs/lab}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/bin/" ./cmd/verifier ./cmd/gateway ./cmd/budgetd ./cmd/levee
storm() { "$work/bin/levee" storm -bin "$work/bin" -fleet-dir "$work" "$@"; }

# The per-run CSVs of the grid are a megabyte and reproducible: only the
# summary, the report and the pictures are kept.
storm -out "$out/stall"
storm -grid -grid-triggers stop -grid-seeds 1 -warmup 3s -baseline 10s -after 30s -out "$out/grid-stop"
rm -rf "$out/grid-stop/runs"
storm -ramp -out "$out/ramp"
"$work/bin/levee" storm -sim -out "$out/sim"
if docker image inspect levee/levee:dev >/dev/null 2>&1; then
  OUT="$out/compose-pause" scripts/compose-pause.sh
else
  echo "lab: no levee/levee:dev image: compose-pause skipped (scripts/docker-up.sh builds it, or run scripts/compose-pause.sh)" >&2
fi
echo "lab: report in $out/" >&2
