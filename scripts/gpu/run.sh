#!/usr/bin/env bash
# The one harness for the GPU checks: runs scripts/gpu/NAME.sh with the steps every check shares
# done once. The binary: GW_BIN, else target/measure/gpuwarden (what a session carries to the
# GPU machine), else target/release/gpuwarden. The results: a directory of their own
# (RESULTS/NAME-<UTC time>, RESULTS defaults to results/gpu) with machine.txt (the GPUs, driver,
# CUDA, kernel, CPU and the binary's version), the check's output (output.txt), its exit status
# (exit), and what the check saves there (the daemon's config and log, metrics, rows). Scratch
# under /var/tmp, removed at the end. The checks' shared steps are scripts/gpu/lib.sh.
#
#   scripts/gpu/run.sh NAME [ARGS]      e.g. scripts/gpu/run.sh journal-check
#   scripts/gpu/run.sh --list           the checks
set -euo pipefail
here=$(dirname "$(readlink -f "$0")")
if [ "${1:-}" = --list ] || [ $# -eq 0 ]; then
  grep -l '^source "$(dirname "$(readlink -f "$0")")/lib.sh"' "$here"/*.sh | xargs -n1 basename | sed 's/\.sh$//'
  [ $# -gt 0 ] || { echo "usage: scripts/gpu/run.sh NAME [ARGS]" >&2; exit 64; }
  exit 0
fi
name=${1%.sh}; shift
check=$here/$name.sh
[ -f "$check" ] || { echo "no check $name in $here (scripts/gpu/run.sh --list)" >&2; exit 64; }
root=$(readlink -f "$here/../..")
bin=${GW_BIN:-}
for candidate in "$root/target/measure/gpuwarden" "$root/target/release/gpuwarden"; do
  [ -n "$bin" ] || { [ -x "$candidate" ] && bin=$candidate; }
done
[ -n "$bin" ] && [ -x "$bin" ] || { echo "no gpuwarden binary: build one (cargo build --release) or set GW_BIN" >&2; exit 66; }
GW_BIN=$(readlink -f "$bin")
GW_OUT=$(mkdir -p "${RESULTS:-results/gpu}" && readlink -f "${RESULTS:-results/gpu}")/$name-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$GW_OUT"
GW_WORK=$(mktemp -d "/var/tmp/gw-$name.XXXXXX")
GW_PORT=${GW_PORT:-19400}
export GW_BIN GW_OUT GW_WORK GW_PORT
trap 'rm -rf "$GW_WORK"' EXIT
{
  echo "check: $name $*"
  echo "date: $(date -u +%FT%TZ)"
  echo "host: $(hostname)"
  echo "kernel: $(uname -r)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
  echo "memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "binary: $GW_BIN ($("$GW_BIN" --version 2>/dev/null || echo 'version unknown'))"
  if command -v nvidia-smi >/dev/null; then
    echo "cuda: $(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1)"
    nvidia-smi --query-gpu=index,name,driver_version,vbios_version,pci.bus_id,memory.total,persistence_mode \
      --format=csv,noheader | sed 's/^/gpu: /'
  else
    echo "gpu: none (no nvidia-smi)"
  fi
} > "$GW_OUT/machine.txt"
set +e
bash "$check" "$@" 2>&1 | tee "$GW_OUT/output.txt"
status=${PIPESTATUS[0]}
set -e
echo "$status" > "$GW_OUT/exit"
echo "== $name: exit $status; results in $GW_OUT"
exit "$status"
