#!/usr/bin/env bash
# The compose fleet through the stall: every verifier container is frozen
# with `docker pause` for 20 s under load (0.5 C by default, naive clients:
# three immediate attempts, 2 s timeout), then unpaused; Levee's fleet and its control (the same images,
# -unguarded), one after the other. Levee must be back to full goodput within
# 2 s of the unpause; the control stays stuck. Report and plots in
# docs/lab/compose-pause/ (or $OUT). Builds the images first when they are
# missing (scripts/docker-up.sh); about 5 minutes on 2 cores. Stops the
# lab's containers when done. Runs from the product's root.
#
# Environment: OUT, LOAD (default 0.5), DURATION (default 20s).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/docker-lib.sh
out=${OUT:-docs/lab/compose-pause}
if ! docker image inspect "$LEVEE_IMAGE" >/dev/null 2>&1; then
  scripts/docker-up.sh
fi
work=$(mktemp -d)
trap 'rm -rf "$work"; compose -f docker-compose.yml -f lab/compose/docker-compose.lab.yml stop >/dev/null 2>&1 || true' EXIT
go -C lab build -o "$work/" ./cmd/levee-lab
"$work/levee-lab" -fleet compose -trigger stop -duration "${DURATION:-20s}" -load "${LOAD:-0.5}" -out "$out"
