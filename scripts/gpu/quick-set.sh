#!/usr/bin/env bash
# Every measurement and probe check of the harness once, with short windows, one after another
# within BUDGET seconds (default 540): for one lease of a GPU machine with a time limit, to show
# each still runs on a real GPU, not for figures to quote (docs/performance.md's runs use the
# checks' own windows). Each check goes through scripts/gpu/run.sh (GW_BIN, RESULTS and
# NVML_INCLUDE as there); a check that would start with under 20 s left is named, not run.
# TAR=FILE: the results directory packed into FILE after each check (a lease returns few files,
# and one taken back mid-run still returns what had finished).
#
# TOOLS=FILE: the tarball scripts/gpu/carry-tools.sh makes (perf and strace for a GPU machine
# without them), unpacked here and used for PERF and STRACE.
#
#   BUDGET=380 TAR=$OUT/results.tgz TOOLS=target/gpucheck/tools.tar.xz scripts/gpu/quick-set.sh
set -u
here=$(dirname "$(readlink -f "$0")")
export RESULTS=${RESULTS:-results/gpu}
mkdir -p "$RESULTS"
end=$((SECONDS + ${BUDGET:-540}))
if [ -n "${TOOLS:-}" ]; then
  tools=$(mktemp -d /var/tmp/gw-tools.XXXXXX)
  trap 'rm -rf "$tools"' EXIT
  tar xJf "$TOOLS" -C "$tools" || { echo "quick-set: cannot unpack TOOLS=$TOOLS" >&2; exit 2; }
  export PERF=$tools/bin/perf STRACE=$tools/bin/strace
fi
failed=0
check() {
  local cap=$1 left=$((end - SECONDS)) t0=$SECONDS status
  shift
  if [ "$left" -le 20 ]; then echo "$*: not run (the budget is spent)"; failed=1; return; fi
  [ "$cap" -lt "$left" ] || cap=$left
  timeout -k 5 "$cap" "$@" > "$RESULTS/console-$(date +%s%N).txt" 2>&1
  status=$?
  echo "$*: exit $status in $((SECONDS - t0)) s" | tee -a "$RESULTS/quick-set.txt"
  [ "$status" -eq 0 ] || failed=1
  pack
}
pack() {
  if [ -n "${TAR:-}" ]; then tar czf "$TAR.part" -C "$RESULTS" . && mv -f "$TAR.part" "$TAR"; fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$RESULTS/quick-set.txt"
check 60 env LOAD_SECONDS=8 "$here/run.sh" gpu-smoke
check 60 env WINDOW=10 WARMUP=5 PASSES=1 "$here/run.sh" footprint
check 45 env WINDOW=8 "$here/run.sh" call-breakdown
check 45 env WARMUP=5 "$here/run.sh" rss-breakdown
check 40 "$here/run.sh" loop-phase-check 10
check 40 "$here/run.sh" threads-by-design 8 5
check 60 env SETTLE=10 STAT=5 RECORD=8 TRACE=8 STACKS=5 PERF="${PERF:-$(command -v perf || true)}" "$here/run.sh" gpu-thread-syscalls
check 60 env COPIES=1 SETTLE=10 "$here/run.sh" cost-vs-loop "" 15
check 40 "$here/run.sh" loop-cpu-check 10
check 90 env SETTLE=10 STAT=5 RECORD=8 DWARF=8 "$here/run.sh" coordinator-profile
check 70 "$here/run.sh" sdc-check 0
check 70 "$here/run.sh" collective-check
for d in "$RESULTS"/*/; do
  echo "== $(basename "$d"): exit $(cat "$d/exit" 2>/dev/null)"
  tail -3 "$d/output.txt" 2>/dev/null | cut -c1-300
done
pack
exit "$failed"
