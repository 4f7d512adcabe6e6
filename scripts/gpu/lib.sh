# The shared steps of the GPU checks, sourced by each check that scripts/gpu/run.sh runs: the
# daemon's config, its start (waiting for its first poll, not a fixed time), what it serves,
# its stop, a load on the GPU, the C loop of the same NVML calls and a process's CPU over a window.
# run.sh sets what these use: GW_BIN (the binary), GW_OUT (the run's results
# directory), GW_WORK (scratch, removed at the end), GW_PORT (the daemon's port).
# shellcheck shell=bash

if [ -z "${GW_OUT:-}" ] || [ -z "${GW_BIN:-}" ]; then
  echo "run it through the harness: scripts/gpu/run.sh $(basename "${0%.*}") [ARGS]" >&2
  exit 64
fi
GW_PID=
GW_SOCKET=$GW_WORK/gw.sock
GW_STATE=$GW_WORK/state.db

gw_fail() { echo "$(basename "${0%.*}"): FAILED: $*"; exit 1; }

# The daemon's config: listen, journal and local socket in the run's places, then the check's
# own YAML from stdin (top-level keys other than those three).
gw_config() {
  {
    printf 'listen: 127.0.0.1:%s\n' "$GW_PORT"
    printf 'state:\n  path: %s\n  boot_id_file: %s\n' "$GW_STATE" "${GW_BOOT_ID_FILE:-/proc/sys/kernel/random/boot_id}"
    printf 'local_api:\n  socket: %s\n' "$GW_SOCKET"
    cat
  } > "$GW_WORK/config.yaml"
  cp "$GW_WORK/config.yaml" "$GW_OUT/config.yaml"
}

# Starts the daemon on the config and waits until /metrics shows its first poll round
# (`gpu_up`), 60 s at most. Its log goes to the results (appended across restarts).
gw_start() {
  "$GW_BIN" run --config "$GW_WORK/config.yaml" >> "$GW_OUT/daemon.log" 2>&1 &
  GW_PID=$!
  gw_wait_metric '^gpu_up\{' 60 || gw_fail "the daemon served no poll round within 60 s (see daemon.log)"
}

# Stops the daemon as systemd would (SIGTERM; SIGKILL after 15 s).
gw_stop() {
  [ -n "$GW_PID" ] || return 0
  kill -TERM "$GW_PID" 2>/dev/null || true
  for _ in $(seq 150); do kill -0 "$GW_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$GW_PID" 2>/dev/null || true
  wait "$GW_PID" 2>/dev/null || true
  GW_PID=
}

# What /metrics serves now, the lines matching REGEX when one is given.
gw_metrics() {
  if [ $# -gt 0 ]; then
    curl -sf "http://127.0.0.1:$GW_PORT/metrics" | grep -E "$1" || true
  else
    curl -sf "http://127.0.0.1:$GW_PORT/metrics"
  fi
}

# Runs COMMAND every 0.2 s until it succeeds, SECONDS at most; 1 when it never did. A daemon
# that exits meanwhile fails the check at once (no use waiting on it).
gw_until() {
  local deadline=$((SECONDS + $1)); shift
  while [ "$SECONDS" -lt "$deadline" ]; do
    "$@" && return 0
    [ -z "$GW_PID" ] || kill -0 "$GW_PID" 2>/dev/null || gw_fail "the daemon exited (see daemon.log)"
    sleep 0.2
  done
  return 1
}

# Waits until /metrics has a line matching REGEX, SECONDS at most (default 60); 1 when not.
gw_wait_metric() { gw_until "${2:-60}" gw_has_metric "$1"; }
# The whole body first: `curl | grep -q` under pipefail fails when grep stops at its first match
# and curl, still writing a large /metrics, gets SIGPIPE.
gw_has_metric() {
  local body
  body=$(curl -sf "http://127.0.0.1:$GW_PORT/metrics" 2>/dev/null) || return 1
  grep -qE "$1" <<< "$body"
}

# Waits until the daemon's log has a line matching REGEX, SECONDS at most (default 60).
gw_wait_log() { gw_until "${2:-60}" grep -qsE "$1" "$GW_OUT/daemon.log"; }

# Waits until the journal has a row of KIND (the writer batches once a second), SECONDS at most.
gw_wait_row() { gw_until "${2:-30}" gw_has_row "$1"; }
gw_has_row() {
  "$GW_BIN" events --state "$GW_STATE" --kind "$1" --all --json 2>/dev/null \
    | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin) else 1)' 2>/dev/null
}

gw_health() { "$GW_BIN" health --socket "$GW_SOCKET" "$@"; }
gw_events() { "$GW_BIN" events --state "$GW_STATE" "$@"; }

# GPU N's PCI address as the kernel log writes it in an XID line: 0000:19:00 (no function).
gw_kmsg_bus() {
  nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i "${1:-0}" | tr 'A-F' 'a-f' \
    | sed -E 's/^0*([0-9a-f]{4}):/\1:/' | cut -d. -f1
}

# Every process a check starts in the background (a load, a C loop, daemons of another build)
# goes when the check ends, with the daemon.
gw_cleanup() {
  gw_stop
  local jobs
  jobs=$(jobs -p)
  [ -z "$jobs" ] || kill $jobs 2>/dev/null || true
  wait 2>/dev/null || true
}
trap gw_cleanup EXIT

# What "every feature on" means in the measurements (docs/performance.md), in one place: the
# config sections that turn on what the defaults leave off (dcgm-exporter's names, per-link
# NVLink series, per-process series, a job mapping directory holding one job). The journal is
# on at the defaults.
gw_every_feature_yaml() {
  mkdir -p "$GW_WORK/jobs"
  echo 48217 > "$GW_WORK/jobs/0"
  cat <<YAML
compat:
  dcgm_exporter: true
nvlink:
  per_link: true
processes:
  per_process: true
hpc_jobs:
  mapping_dir: $GW_WORK/jobs
YAML
}

# A PyTorch bf16 matmul that keeps a compute process on GPU 0 (so the per-process calls run)
# until the check ends; returns once its CUDA context is up.
gw_gpu_load() {
  python3 -c '
import torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
print("load up", flush=True)
end = time.time() + 3600
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    time.sleep(0.05)
' > "$GW_WORK/load.log" 2>&1 &
  gw_until 120 grep -q "load up" "$GW_WORK/load.log" || gw_fail "the PyTorch load did not start: $(tail -3 "$GW_WORK/load.log")"
}

# scripts/gpu/nvml-loop.c built into $GW_WORK/nvml-loop (NVML_INCLUDE: where nvml.h is, if not
# under /usr/local/cuda/include): the same NVML calls as the daemon at its cadence, nothing else.
gw_build_nvml_loop() {
  gcc -O2 -o "$GW_WORK/nvml-loop" "$(dirname "${BASH_SOURCE[0]}")/nvml-loop.c" \
    -I"${NVML_INCLUDE:-/usr/local/cuda/include}" -l:libnvidia-ml.so.1 -lpthread
}

# A process's CPU in nanoseconds, summed over its live threads (schedstat). printf, not print:
# awk may print a sum past 2^31 as 2.4e+09.
gw_cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%d\n", s }'; }

# gw_cpu_ms_over WINDOW NAME...: after 15 s of settling, each named process's CPU (ms, from the
# caller's pid[NAME]) over the next WINDOW seconds, into ms[NAME].
gw_cpu_ms_over() {
  local window=$1 n
  shift
  declare -gA ms
  declare -A before
  sleep 15
  for n in "$@"; do before[$n]=$(gw_cpu_ns "${pid[$n]}"); done
  sleep "$window"
  for n in "$@"; do
    ms[$n]=$(awk -v ns=$(( $(gw_cpu_ns "${pid[$n]}") - ${before[$n]} )) 'BEGIN { printf "%.1f", ns / 1e6 }')
  done
}
