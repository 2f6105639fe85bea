#!/usr/bin/env bash
# Levee's whole test suite, on a machine with Go and Docker: the product
# module, the Helm chart's module (deploy/helm/), then the lab module
# (lab/), each with the race detector and every go vet analyzer (-vet=all:
# vet reuses the tests' build instead of compiling the module a second
# time, as a separate go vet would).
#
# The tests need, besides Go and a running Docker with Compose (the lab's
# fault suite builds the images from this tree and runs the compose fleet),
# foreign implementations for the interop tests and promtool for the
# alerting rules. This script installs what is missing with apt-get when it
# can (as root, or with passwordless sudo, on Debian or Ubuntu); otherwise
# it names each missing piece and the command that installs it, and stops.
#
# The product's tests run first and the lab's after them, so that the lab's
# fleets, which load the machine for minutes, never share the cores with a
# test that measures time.
#
#   scripts/test.sh                 everything
#   scripts/test.sh -run TestX      extra flags go to every go test run
set -euo pipefail
cd "$(dirname "$0")/.."

# name:package — a command the tests run, and the Debian package it comes in.
tools=(argon2:argon2 mkpasswd:whois openssl:openssl promtool:prometheus)
# Debian's own interpreter: the interop tests run it, with passlib.
python=/usr/bin/python3

missing_packages() {
  local pkgs=() t
  for t in "${tools[@]}"; do
    command -v "${t%%:*}" >/dev/null 2>&1 || pkgs+=("${t#*:}")
  done
  if ! [ -x "$python" ] || ! "$python" -c 'import passlib, argon2' >/dev/null 2>&1; then
    pkgs+=(python3 python3-passlib python3-argon2)
  fi
  echo "${pkgs[@]}"
}

pkgs=$(missing_packages)
if [ -n "$pkgs" ]; then
  sudo=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo="sudo -n"
  fi
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; }; then
    echo "--- installing with apt-get: $pkgs"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    # shellcheck disable=SC2086 # one word per package
    $sudo apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
  fi
  pkgs=$(missing_packages)
  if [ -n "$pkgs" ]; then
    echo "scripts/test.sh: the tests need these Debian packages, and this script cannot install them here:" >&2
    echo "  apt-get install $pkgs" >&2
    exit 1
  fi
fi

if ! command -v docker >/dev/null 2>&1 || ! docker info >/dev/null 2>&1; then
  echo "scripts/test.sh: the lab's fault suite needs a running Docker Engine that this user may use (docker info failed)" >&2
  exit 1
fi
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  echo "scripts/test.sh: the lab's fault suite needs Docker Compose (the docker compose plugin, or docker-compose)" >&2
  exit 1
fi

# Docker is here: the fault suite must run, not skip.
export LEVEE_REQUIRE_DOCKER=1

start=$SECONDS
echo "--- product: go test -race ./..."
go test -race -vet=all -timeout 30m "$@" ./...
echo "--- product tests took $((SECONDS - start)) s"

start=$SECONDS
echo "--- helm chart: go test -race ./... in deploy/helm/"
# Renders the chart with Helm's Go packages and validates every object
# against the Kubernetes API types and OpenAPI schemas (a module of its own:
# neither the product nor the lab builds Helm or the Kubernetes API).
(cd deploy/helm && go test -race -vet=all -timeout 15m "$@" ./...)
echo "--- helm chart tests took $((SECONDS - start)) s"

start=$SECONDS
echo "--- lab: go test -race ./... in lab/"
(cd lab && go test -race -vet=all -timeout 30m "$@" ./...)
echo "--- lab tests took $((SECONDS - start)) s"
