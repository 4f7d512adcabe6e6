#!/usr/bin/env bash
# arm64 (GH200, GB200 and GB300 hosts): cross-builds gpuwarden and the simulated NVML for
# aarch64-unknown-linux-gnu with Debian's cross gcc, runs the unit tests and a `gpuwarden
# check` over the simulated NVML under qemu-user, and builds the arm64 .deb and OCI image.
#   scripts/ci/arm64.sh        (needs: gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
#                               qemu-user-static, `rustup target add aarch64-unknown-linux-gnu`;
#                               scripts/ci/test.sh installs them)
# Prints the package path last.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/arm64-env.sh
target=$arm64_target
sysroot=$arm64_sysroot

step() { printf '\n== arm64: %s\n' "$*"; }

step "unit tests under qemu"
cargo test --lib --target "$target"

step "release build"
cargo build --release --target "$target" -p gpuwarden -p gpuwarden-sim-nvml -p gpuwarden-sim-cuda
bin=$arm64_release/gpuwarden
lib=$arm64_release/libgpuwarden_sim_nvml.so
file -L "$bin" | grep -q 'ARM aarch64' || { echo "not an arm64 binary: $(file -L "$bin")"; exit 1; }
file -L "$lib" | grep -q 'ARM aarch64' || { echo "not an arm64 library: $(file -L "$lib")"; exit 1; }

step "gpuwarden check over the simulated NVML, under qemu"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'nvml:\n  library_path: %s\nxid:\n  read_kernel_log: false\nstate:\n  path: ""\nfabric_manager:\n  check: false\n' \
  "$(readlink -f "$lib")" > "$work/config.yaml"
status=0
GPUWARDEN_SIM_NVML_SCENARIO=config/demo-scenario.yaml \
  qemu-aarch64-static -L "$sysroot" "$bin" check --json --config "$work/config.yaml" > "$work/check.json" || status=$?
# The demo's scenario has findings: exit 1, with every one of its eight GPUs read.
[ "$status" = 1 ] || { echo "check exited $status, not 1"; cat "$work/check.json"; exit 1; }
gpus=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(1 for d in r["devices"] if d.get("up")))' "$work/check.json")
[ "$gpus" = 8 ] || { echo "check read $gpus GPUs, not 8"; exit 1; }
echo "check under qemu: exit 1 (the demo's findings), 8 GPUs read"

step "the arm64 package"
cargo deb --target "$target" --no-build --output target/debian/ >/dev/null
deb=$(ls -t target/debian/gpuwarden_*_arm64.deb | head -1)
[ "$(dpkg-deb -f "$deb" Architecture)" = arm64 ] || { echo "$deb is not arm64"; exit 1; }
echo "binary $(stat -c %s "$bin") bytes; package $(stat -c %s "$deb") bytes"

step "the arm64 image"
version=$(bash scripts/version.sh)
mkdir -p target/image
bash scripts/image.sh arm64 "$bin" "target/image/gpuwarden-$version-arm64.oci.tar"
echo "$deb"
