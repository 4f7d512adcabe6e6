#!/usr/bin/env bash
# Compares gpuwarden with nvidia-smi on a real NVIDIA GPU.
#
#   scripts/gpu/run.sh gpu-smoke [path/to/gpuwarden]     (default: the harness's binary)
#
# Needs: root (persistence mode), nvidia-smi, python3; PyTorch for the load phase (skipped
# without it). It never changes clocks, power limits or MIG mode and never resets a GPU;
# the daemon may turn persistence mode on, which is what it is for.
#
# For each GPU it reads nvidia-smi just before and just after gpuwarden (`check --json`, and
# a scrape of a running daemon), and accepts gpuwarden's value when it lies within the range
# nvidia-smi showed, widened by a tolerance (power 5%, temperature 1 C, SM clock 2%). Then it
# loads GPU 0 with a bf16 matmul for LOAD_SECONDS and compares the active clock-event reasons
# and the growth of the driver's clock-event counters with nvidia-smi -q -d PERFORMANCE.
# Exit status 0 when everything agrees. Every file the comparison used (scrapes, nvidia-smi
# output, the daemon's log) stays in the run's results directory.
set -euo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
BIN=$(readlink -f "${1:-$GW_BIN}")
LOAD_SECONDS=${LOAD_SECONDS:-15}
PORT=$GW_PORT
WORK=$GW_OUT

smi() {
  nvidia-smi --query-gpu=index,uuid,temperature.gpu,power.draw,clocks.sm,pcie.link.gen.current,pcie.link.width.current,pcie.link.width.max,persistence_mode \
    --format=csv,noheader,nounits
}

echo "== $(date -u +%FT%TZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
"$BIN" --version

echo "== check --json vs nvidia-smi"
smi > "$WORK/smi_before.csv"
"$BIN" check --json > "$WORK/check.json" || true   # exit 1 just means findings
smi > "$WORK/smi_after.csv"

echo "== daemon scrape vs nvidia-smi"
printf 'poll:\n  interval: 500ms\n  timeout: 400ms\n' | gw_config
GW_BIN=$BIN gw_start
smi > "$WORK/smi_scrape_before.csv"
curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/scrape.txt"
smi > "$WORK/smi_scrape_after.csv"

python3 - "$WORK" <<'PY'
import csv, json, re, sys
work = sys.argv[1]
def smi(name):
    rows = {}
    for r in csv.reader(open(f"{work}/{name}")):
        r = [x.strip() for x in r]
        rows[int(r[0])] = dict(uuid=r[1], temp=float(r[2]), power=float(r[3]), sm=float(r[4]),
                               gen=int(r[5]), width=int(r[6]), width_max=int(r[7]), persist=(r[8] == "Enabled"))
    return rows
def scrape(name):
    out = {}
    for line in open(f"{work}/{name}"):
        m = re.match(r'^(\w+)\{(.*)\} (\S+)$', line.strip())
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out
def one(metrics, name, gpu, **want):
    for labels, v in metrics.get(name, []):
        if labels.get("gpu") == str(gpu) and all(labels.get(k) == w for k, w in want.items()):
            return v
    return None
failures = []
def compare(source, gpu, field, ours, before, after, tol_abs=0.0, tol_rel=0.0):
    lo, hi = min(before, after), max(before, after)
    slack = max(tol_abs, tol_rel * hi)
    ok = ours is not None and lo - slack <= ours <= hi + slack
    print(f"  gpu{gpu} {field:<18} nvidia-smi {before:>9g} .. {after:<9g} {source:<7} {ours!s:<12} {'ok' if ok else 'MISMATCH'}")
    if not ok:
        failures.append((source, gpu, field))

check = json.load(open(f"{work}/check.json"))
b, a = smi("smi_before.csv"), smi("smi_after.csv")
for d in check["devices"]:
    i = d["identity"]["index"]; r = d["readings"] or {}
    assert d["identity"]["uuid"] == b[i]["uuid"], "uuid"
    compare("check", i, "temperature C", r.get("temperatures", {}).get("gpu"), b[i]["temp"], a[i]["temp"], tol_abs=1)
    compare("check", i, "power W", r.get("power_watts"), b[i]["power"], a[i]["power"], tol_rel=0.05)
    sm = r.get("clocks_hertz", {}).get("sm"); compare("check", i, "SM clock MHz", sm / 1e6 if sm else None, b[i]["sm"], a[i]["sm"], tol_rel=0.02)
    compare("check", i, "PCIe gen", r.get("pcie", {}).get("generation"), b[i]["gen"], a[i]["gen"])
    compare("check", i, "PCIe width", r.get("pcie", {}).get("width"), b[i]["width"], a[i]["width"])
    compare("check", i, "PCIe width max", r.get("pcie", {}).get("width_max"), b[i]["width_max"], a[i]["width_max"])
    compare("check", i, "persistence", r.get("persistence_mode"), b[i]["persist"], a[i]["persist"])

m = scrape("scrape.txt")
b, a = smi("smi_scrape_before.csv"), smi("smi_scrape_after.csv")
for i in sorted(b):
    compare("scrape", i, "temperature C", one(m, "gpu_temperature_celsius", i, sensor="gpu"), b[i]["temp"], a[i]["temp"], tol_abs=1)
    compare("scrape", i, "power W", one(m, "gpu_power_watts", i), b[i]["power"], a[i]["power"], tol_rel=0.05)
    sm = one(m, "gpu_clock_hertz", i, clock="sm"); compare("scrape", i, "SM clock MHz", sm / 1e6 if sm else None, b[i]["sm"], a[i]["sm"], tol_rel=0.02)
    compare("scrape", i, "PCIe gen", one(m, "gpu_pcie_link_generation", i), b[i]["gen"], a[i]["gen"])
    compare("scrape", i, "PCIe width", one(m, "gpu_pcie_link_width_lanes", i), b[i]["width"], a[i]["width"])
    compare("scrape", i, "PCIe width max", one(m, "gpu_pcie_link_width_max_lanes", i), b[i]["width_max"], a[i]["width_max"])
    compare("scrape", i, "persistence", one(m, "gpu_persistence_mode", i), float(b[i]["persist"]), float(a[i]["persist"]))
errors = m.get("gpuwarden_collector_errors_total", [])
print("  collector errors:", errors or "none")
families = sorted({k for k in m if k.startswith("gpu_")})
print("  gpu_* families present:", len(families)); print("   ", " ".join(families))
h_sum = [v for l, v in m.get("gpuwarden_poll_duration_seconds_sum", [])]
h_cnt = [v for l, v in m.get("gpuwarden_poll_duration_seconds_count", [])]
if h_cnt and h_cnt[0]:
    print(f"  mean poll time per GPU: {1000 * h_sum[0] / h_cnt[0]:.2f} ms over {int(h_cnt[0])} polls")
json.dump({"failures": failures}, open(f"{work}/compare.json", "w"))
if failures:
    print("MISMATCHES:", failures); sys.exit(1)
PY

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "== ${LOAD_SECONDS}s bf16 matmul on GPU 0: clock events and counters vs nvidia-smi"
  perf() { nvidia-smi -i 0 -q -d PERFORMANCE; }
  perf > "$WORK/perf_before.txt"
  curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/load_before.txt"
  python3 - "$LOAD_SECONDS" <<'PY' &
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20): a @ b
    torch.cuda.synchronize()
PY
  LOAD=$!
  sleep $((LOAD_SECONDS / 2))
  curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/load_during.txt"
  nvidia-smi -i 0 --query-gpu=clocks_event_reasons.active,power.draw,temperature.gpu,clocks.sm --format=csv > "$WORK/smi_during.csv"
  wait $LOAD
  sleep 1
  perf > "$WORK/perf_after.txt"
  curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/load_after.txt"
  echo "-- nvidia-smi during load:"; cat "$WORK/smi_during.csv"
  echo "-- gpuwarden during load (GPU 0):"
  grep -E '^gpu_(clock_event_active|power_watts|temperature_celsius|clock_hertz)\{gpu="0"' "$WORK/load_during.txt" | grep -v ' 0.0$' || true
  echo "-- clock-event counters, gpuwarden (s) before -> after:"
  paste <(grep -E '^gpu_clock_event_seconds_total\{gpu="0"' "$WORK/load_before.txt") <(grep -E '^gpu_clock_event_seconds_total\{gpu="0"' "$WORK/load_after.txt" | awk '{print $2}')
  echo "-- nvidia-smi Clocks Event Reasons Counters before -> after:"
  paste <(grep -A5 'Reasons Counters' "$WORK/perf_before.txt") <(grep -A5 'Reasons Counters' "$WORK/perf_after.txt" | awk -F: '{print $2}') || true
fi

echo "== poll timing (GPUs are polled in parallel: a round should take about one GPU's poll, not the sum)"
curl -sf "http://127.0.0.1:$PORT/metrics" > "$WORK/final.txt"
python3 - "$WORK/final.txt" <<'PY'
import re, sys
vals = {}
for line in open(sys.argv[1]):
    m = re.match(r'^(gpuwarden_poll(?:_round)?_duration_seconds_(?:sum|count))(?:\{[^}]*\})? (\S+)$', line.strip())
    if m:
        vals[m.group(1)] = float(m.group(2))
gpus = sum(1 for l in open(sys.argv[1]) if l.startswith("gpu_up{"))
per_gpu = vals["gpuwarden_poll_duration_seconds_sum"] / vals["gpuwarden_poll_duration_seconds_count"]
rounds = vals["gpuwarden_poll_round_duration_seconds_count"]
per_round = vals["gpuwarden_poll_round_duration_seconds_sum"] / rounds
print(f"  {gpus} GPU(s), {int(rounds)} rounds: mean poll per GPU {per_gpu*1e3:.2f} ms, "
      f"mean round {per_round*1e3:.2f} ms, sum over GPUs {gpus*per_gpu*1e3:.2f} ms")
if gpus > 1 and per_round > 0.75 * gpus * per_gpu:
    print("  gpu-smoke: FAILED: rounds take about the sum of the GPUs' polls: not parallel"); sys.exit(1)
PY

echo "== daemon log"
cat "$WORK/daemon.log"
if grep -qE ' (ERROR|WARN) ' "$WORK/daemon.log"; then echo "gpu-smoke: FAILED: the daemon logged warnings or errors"; exit 1; fi
echo "== gpu-smoke: all comparisons agree"
