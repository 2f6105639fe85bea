#!/usr/bin/env bash
# Stops and removes the fleet of docker-compose.yml with its network and its
# volumes (the etcd data: budget settings and registrations are lost). Images
# and deploy/bin/ stay, so the next scripts/docker-up.sh starts faster.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/docker-lib.sh
compose down -v --remove-orphans
