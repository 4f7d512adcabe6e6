#!/usr/bin/env python3
"""Checks gpuwarden's multi-GPU readings on a real node of two or more NVIDIA GPUs against
nvidia-smi in the same run (docs/validation.md, "NVLink peers, bandwidth and the fabric").

    python3 scripts/gpu/multi-gpu-check.py --bin ./gpuwarden --out DIR [--steps ...]

Needs root, the NVIDIA driver, nvidia-smi and PyTorch. It never changes clocks, power limits
or MIG mode, never resets a GPU, and keeps NVLink multicast off (NCCL_NVLS_ENABLE=0). Steps,
each writing its raw output to DIR and a summary to stdout:

1. machine: GPUs, driver, `nvidia-smi topo -m`.
2. p2p: `gpuwarden check --json` and the daemon's `gpu_nvlink_p2p_ok` and
   `DCGM_EXP_P2P_STATUS` for every ordered pair, against `nvidia-smi topo -p2p n` (and r, w
   shown beside: gpuwarden reads the NVLink capability, which is `-p2p n`).
3. links: per-link `gpu_nvlink_up` and `gpu_nvlink_link_errors_total` against
   `nvidia-smi nvlink -s` and `-e`; the fabric per GPU against `nvidia-smi -q`'s Fabric block.
4. bandwidth: a PyTorch device-to-device copy GPU 0 -> GPU 1 for BANDWIDTH_SECONDS (30), with
   `nvidia-smi dmon --gpm-metrics 60,61` and gpuwarden's `gpu_nvlink_bytes_per_second` (GPM
   every second) sampled every second, and `gpu_nvlink_bytes_total` before and after.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_text  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="./target/release/gpuwarden")
ap.add_argument("--out", default="/tmp/multi-gpu-check")
ap.add_argument("--port", type=int, default=19121)
ap.add_argument("--steps", default="machine,p2p,links,bandwidth")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
STEPS = args.steps.split(",")
os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
BANDWIDTH_SECONDS = int(os.environ.get("BANDWIDTH_SECONDS", "30"))


def log(*a):
    print(*a, flush=True)


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout


def save(name, text):
    with open(os.path.join(args.out, name), "w") as f:
        f.write(text)


GPUS = [r.split(", ") for r in sh("nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv,noheader").strip().splitlines()]
N = len(GPUS)
if N < 2:
    sys.exit(f"this check needs two or more GPUs; nvidia-smi lists {N}")

if "machine" in STEPS:
    text = "\n".join(", ".join(g) for g in GPUS) + "\ndriver " + sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader").splitlines()[0]
    text += "\n" + sh("nvidia-smi topo -m")
    save("machine.txt", text)
    log("== machine\n" + text)

CONFIG = os.path.join(args.out, "config.yaml")
with open(CONFIG, "w") as f:
    f.write(f"""listen: 127.0.0.1:{args.port}
poll:
  interval: 1s
  slow_interval: 1s
  topology_interval: 10s
  gpm_interval: 1s
compat:
  dcgm_exporter: true
nvlink:
  per_link: true
""")
daemon = subprocess.Popen([args.bin, "run", "--config", CONFIG], stderr=open(os.path.join(args.out, "daemon.log"), "w"))


def scrape():
    return metrics_text.scrape(args.port)


series = metrics_text.series


for _ in range(100):
    try:
        scrape()
        break
    except Exception:
        time.sleep(0.2)
time.sleep(12)  # past the first topology read (P2P, NVLink counters)
failures = []


def smi_matrix(kind):
    """`nvidia-smi topo -p2p KIND` as {(row, column): cell} over GPU indices."""
    rows = [l.split() for l in sh(f"nvidia-smi topo -p2p {kind}").splitlines() if re.match(r"\s*GPU\d+\s", l)]
    return {(int(r[0][3:]), j): cell for r in rows for j, cell in enumerate(r[1:1 + N])}


if "p2p" in STEPS:
    metrics = scrape()
    check = json.loads(sh(f"{args.bin} check --json"))
    smi = {k: smi_matrix(k) for k in ("n", "r", "w")}
    lines = ["pair | nvidia-smi -p2p n / r / w | check --json nvlink_p2p | gpu_nvlink_p2p_ok | DCGM_EXP_P2P_STATUS"]
    for a in range(N):
        from_check = dict((peer, status) for peer, status in check["devices"][a]["readings"].get("nvlink_p2p", []))
        for b in range(N):
            if a == b:
                continue
            ok = series(metrics, "gpu_nvlink_p2p_ok", gpu=str(a), peer_gpu=str(b))
            dcgm = [v for ls, v in series(metrics, "DCGM_EXP_P2P_STATUS", gpu=str(a)) if ls.get("peer_gpu", ls.get("peer")) == str(b)]
            cells = [smi[k].get((a, b)) for k in ("n", "r", "w")]
            lines.append(f"{a}->{b} | {' / '.join(map(str, cells))} | {from_check.get(b)} | {ok[0][1] if ok else None} | {dcgm[0] if dcgm else None}")
            want = 1.0 if cells[0] == "OK" else 0.0
            if not ok or ok[0][1] != want or from_check.get(b) is None or (from_check.get(b) == 0) != (want == 1.0):
                failures.append(f"p2p {a}->{b}: nvidia-smi -p2p n says {cells[0]}, gpuwarden {from_check.get(b)} / {ok}")
    text = "\n".join(lines)
    save("p2p.txt", text + "\n\n--- check --json\n" + json.dumps(check, indent=1) + "\n--- topo -p2p n/r/w\n"
         + "".join(sh(f"nvidia-smi topo -p2p {k}") for k in ("n", "r", "w")))
    log("== p2p\n" + text)

if "links" in STEPS:
    metrics = scrape()
    lines = []
    for a in range(N):
        status = sh(f"nvidia-smi nvlink -s -i {a}")
        smi_up = {int(l): s for l, s in re.findall(r"Link (\d+): (\S+)", status)}
        ups = {int(ls["link"]): v for ls, v in series(metrics, "gpu_nvlink_up", gpu=str(a))}
        smi_active = {l for l, s in smi_up.items() if s != "<inactive>"}
        ours_active = {l for l, v in ups.items() if v == 1}
        lines.append(f"GPU {a}: nvidia-smi nvlink -s: {len(smi_up)} links, {len(smi_active)} with a speed; "
                     f"gpuwarden: {len(ups)} links, {len(ours_active)} up; gpu_nvlink_links {series(metrics, 'gpu_nvlink_links', gpu=str(a))[0][1] if series(metrics, 'gpu_nvlink_links', gpu=str(a)) else None}, "
                     f"gpu_nvlink_links_up {series(metrics, 'gpu_nvlink_links_up', gpu=str(a))[0][1] if series(metrics, 'gpu_nvlink_links_up', gpu=str(a)) else None}")
        if smi_active != ours_active:
            failures.append(f"GPU {a} links up: nvidia-smi {sorted(smi_active)}, gpuwarden {sorted(ours_active)}")
        errors = sh(f"nvidia-smi nvlink -e -i {a}")
        smi_err = re.findall(r"Link (\d+): (.+?): (\d+)", errors)
        ours = series(metrics, "gpu_nvlink_link_errors_total", gpu=str(a))
        lines.append(f"GPU {a}: nvidia-smi nvlink -e: {len(smi_err)} counters ({sorted(set(k for _, k, _ in smi_err))}), non-zero {[e for e in smi_err if e[2] != '0']}; "
                     f"gpuwarden: {len(ours)} series ({sorted(set(ls['type'] for ls, _ in ours))}), non-zero {[(ls['link'], ls['type'], v) for ls, v in ours if v]}")
        fabric = sh(f"nvidia-smi -q -i {a} | grep -A4 Fabric")
        state = [ls["state"] for ls, v in series(metrics, "gpu_fabric_state", gpu=str(a)) if v == 1]
        reg = series(metrics, "gpu_fabric_registration_ok", gpu=str(a))
        lines.append(f"GPU {a}: nvidia-smi fabric: {' | '.join(l.strip() for l in fabric.splitlines())}; gpuwarden state {state}, registration_ok {reg[0][1] if reg else None}")
        smi_state = re.search(r"State\s+:\s+(\S+)", fabric)
        if smi_state and (not state or state[0] != smi_state.group(1).lower().replace("-", "_")):
            failures.append(f"GPU {a} fabric: nvidia-smi {smi_state.group(1)}, gpuwarden {state}")
        save(f"links-{a}.txt", status + "\n" + errors + "\n" + fabric)
    text = "\n".join(lines)
    log("== links and fabric\n" + text)

COPY = r'''
import sys, time, torch
seconds = float(sys.argv[1])
print("can access peer", torch.cuda.can_device_access_peer(0, 1), flush=True)
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0"); y = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:1")
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
t = time.time(); n = 0
while time.time() - t < seconds:
    y.copy_(x, non_blocking=True); n += 1
    if n % 10 == 0: torch.cuda.synchronize(1)
torch.cuda.synchronize(1)
s = time.time() - t
print(f"copied {n} GiB in {s:.2f} s = {n * 2**30 / s / 1e9:.1f} GB/s", flush=True)
'''

if "bandwidth" in STEPS:
    def totals(m, gpu, direction):
        return sum(v for _, v in series(m, "gpu_nvlink_bytes_total", gpu=gpu, direction=direction))
    before = scrape()
    # No shell between: terminate() must reach nvidia-smi itself, or its pipe never closes.
    dmon = subprocess.Popen(["nvidia-smi", "dmon", "--gpm-metrics", "60,61", "-d", "1"], stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    copy = subprocess.Popen([sys.executable, "-c", COPY, str(BANDWIDTH_SECONDS)], stdout=subprocess.PIPE, text=True)
    t0 = time.time()
    ours = []  # (seconds since the copy began, gpu, direction, bytes/s)
    while copy.poll() is None:
        time.sleep(1)
        m = scrape()
        for ls, v in series(m, "gpu_nvlink_bytes_per_second"):
            ours.append((time.time() - t0, ls["gpu"], ls["direction"], v))
    copy_out = copy.communicate()[0]
    time.sleep(3)
    dmon.terminate()
    dmon_text = dmon.communicate(timeout=10)[0]
    time.sleep(10)  # one more topology read for the byte counters
    after = scrape()
    # dmon prints a header naming its columns, a units line (GPM:MiB/s for NVLink), then one
    # row per GPU per second.
    header = next((l[1:].split() for l in dmon_text.splitlines() if l.startswith("#") and "gpu" in l.lower()), [])
    rows = [l.split() for l in dmon_text.splitlines() if l.strip() and not l.startswith("#")]
    units = next((l[1:].split() for l in dmon_text.splitlines() if l.startswith("#") and "Idx" in l), [])
    lines = [copy_out.strip(), "dmon columns: " + " ".join(header) + " / units: " + " ".join(units)]

    def steady(values):
        """The seconds of the copy: non-zero samples, less the first and last two (a second
        that straddles the copy's start or end is part idle in one tool and not the other)."""
        moving = [v for v in values if v > 0]
        return moving[2:-2]
    for g in map(str, range(2)):
        for d in ("rx", "tx"):
            vals = steady([v for _, gg, dd, v in ours if gg == g and dd == d])
            dmon_vals, col = [], next((i for i, h in enumerate(header) if h.lower() == "nvl" + d), None)
            if col is not None:
                scale = 2**20 if "MiB" in (units[col] if col < len(units) else "MiB") else 1e6
                dmon_vals = steady([float(r[col]) * scale for r in rows if r[0] == g and len(r) > col and r[col] != "-"])
            mean = sum(vals) / len(vals) / 1e9 if vals else None
            dmon_mean = sum(dmon_vals) / len(dmon_vals) / 1e9 if dmon_vals else None
            grew = (totals(after, g, d) - totals(before, g, d)) / 1e9
            lines.append(f"GPU {g} {d}: gpuwarden GPM mean {mean and round(mean, 1)} GB/s over {len(vals)} s "
                         f"(min {min(vals) / 1e9 if vals else 0:.1f}, max {max(vals) / 1e9 if vals else 0:.1f}); "
                         f"dmon mean {dmon_mean and round(dmon_mean, 1)} GB/s over {len(dmon_vals)} s "
                         f"(min {min(dmon_vals) / 1e9 if dmon_vals else 0:.1f}, max {max(dmon_vals) / 1e9 if dmon_vals else 0:.1f}); "
                         f"gpu_nvlink_bytes_total grew {grew:.1f} GB")
            if bool(vals) != bool(dmon_vals) or (mean and dmon_mean and abs(mean - dmon_mean) / dmon_mean > 0.03):
                failures.append(f"GPU {g} {d}: gpuwarden {mean} GB/s, dmon {dmon_mean} GB/s")
    text = "\n".join(lines)
    save("bandwidth.txt", text + "\n\n--- gpuwarden samples (s, gpu, direction, B/s)\n" + "\n".join(map(str, ours)) + "\n\n--- dmon\n" + dmon_text)
    log("== bandwidth\n" + text)

save("scrape.txt", scrape())
daemon.terminate()
daemon.wait(timeout=10)
log_text = open(os.path.join(args.out, "daemon.log")).read()
warnings = [l for l in log_text.splitlines() if "WARN" in l or "ERROR" in l]
log(f"== daemon log: {len(warnings)} warnings or errors" + ("".join("\n  " + w for w in warnings[:10])))
log("== result: " + ("PASS" if not failures else "FAIL\n  " + "\n  ".join(failures)))
sys.exit(1 if failures else 0)
