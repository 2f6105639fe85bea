#!/usr/bin/env bash
# Lints the protocol and checks that the committed generated code is exactly
# what the pinned local plugins generate. Needs buf, protoc-gen-go and
# protoc-gen-go-grpc on PATH (see .ci/run for the pinned versions).
set -euo pipefail
cd "$(dirname "$0")/../proto"
buf lint
buf generate
cd ..
if ! git diff --exit-code --stat -- gen/ || [ -n "$(git ls-files --others --exclude-standard -- gen/)" ]; then
  echo "generated code is stale: run 'cd proto && buf generate' and commit gen/" >&2
  exit 1
fi
echo "proto: lint clean, generated code up to date"
