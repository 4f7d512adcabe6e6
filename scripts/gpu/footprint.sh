#!/usr/bin/env bash
# The daemon's CPU and memory on a real GPU node with every feature on (dcgm-exporter compat,
# per-process series, per-link NVLink, a job mapping directory), while a PyTorch matmul keeps
# a compute process on GPU 0 (so the per-process calls run). Each binary given runs in turn,
# twice (A B A B, so drift on the node shows), for WINDOW seconds after WARMUP seconds.
# CPU: utime+stime from /proc/PID/stat over the window; RSS: VmRSS at its end.
#
#   scripts/gpu/footprint.sh BINARY...        (as root, on the GPU machine)
#   WINDOW=90 WARMUP=20 scripts/gpu/footprint.sh before/gpuwarden after/gpuwarden
set -euo pipefail
WINDOW=${WINDOW:-90}
WARMUP=${WARMUP:-20}
work=$(mktemp -d)
mkdir -p "$work/jobs"
echo 48217 > "$work/jobs/0"
cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:9400
compat:
  dcgm_exporter: true
nvlink:
  per_link: true
processes:
  per_process: true
hpc_jobs:
  mapping_dir: $work/jobs
YAML
python3 - <<'PY' &
import torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end = time.time() + 3600
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    time.sleep(0.05)
PY
load=$!
trap 'kill $load 2>/dev/null; rm -rf "$work"' EXIT
sleep 10
ticks=$(getconf CLK_TCK)
for pass in 1 2; do
  for bin in "$@"; do
    "$bin" run --config "$work/config.yaml" >"$work/log" 2>&1 &
    pid=$!
    sleep "$WARMUP"
    read -r -a s0 < "/proc/$pid/stat"
    sleep "$WINDOW"
    read -r -a s1 < "/proc/$pid/stat"
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    scrape=$(curl -s 127.0.0.1:9400/metrics | grep -c '^[a-zA-Z]' || true)
    kill "$pid"; wait "$pid" || true
    cpu=$(( (s1[13] + s1[14]) - (s0[13] + s0[14]) ))
    awk -v b="$bin" -v p="$pass" -v c="$cpu" -v t="$ticks" -v w="$WINDOW" -v r="$rss" -v n="$scrape" \
      'BEGIN { printf "%s pass %s: CPU %.3f %% of a core (%d ticks in %d s), RSS %.1f MiB, %d series\n", b, p, 100 * c / t / w, c, w, r / 1024, n }'
  done
done
