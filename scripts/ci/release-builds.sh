#!/usr/bin/env bash
# Builds ahead what the later steps of scripts/ci/test.sh take, with the commands they build it
# with, so that each finds it fresh: the native release build (scripts/package.sh, the image and
# the release), the arm64 unit tests' binary and the arm64 release build (scripts/ci/arm64.sh,
# scripts/release.sh). The test command runs it in the background at a low priority while the
# integration tests run: they mostly wait on daemons, and a release build's whole-program LTO
# with one codegen unit works on one core for minutes (docs/testing.md, "Where the time goes").
#   scripts/ci/release-builds.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# As scripts/package.sh builds it.
cargo build --release --workspace &
native=$!
# As scripts/ci/arm64.sh builds them (scripts/release.sh builds the same).
(
  source scripts/arm64-env.sh
  cargo test --lib --target "$arm64_target" --no-run
  cargo build --release --target "$arm64_target" -p gpuwarden -p gpuwarden-sim-nvml -p gpuwarden-sim-cuda
) &
arm64=$!
status=0
wait "$native" || status=$?
wait "$arm64" || status=$?
exit "$status"
