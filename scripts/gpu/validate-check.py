#!/usr/bin/env python3
"""Validation on real NVIDIA GPUs (docs/validation.md, "Validation: baselines, return to
service, stalled and straggling jobs"): what issue "Validate, don't only watch" asks to see on
an H100/H200.

    python3 scripts/gpu/validate-check.py --bin ./gpuwarden --out DIR [--phases probes,clear,stall,straggler]

Needs root, the NVIDIA driver, nvidia-smi, PyTorch and CuPy. It never changes clocks, power
limits or MIG mode, never resets a GPU; the "fatal XID" is a line written to the daemon's own
kernel-log file, never to the machine's kernel log. Phases, each writing its raw output to DIR:

1. probes: the daemon probes every GPU every 16 s (probe.schedule): four probes of GPU 0 in
   the journal, then `gpuwarden report --gpu 0 --markdown` (each probe against the median of
   those before it) and `gpuwarden events --kind probe`.
2. clear: a fatal XID for GPU 0 in the daemon's kernel-log file -> unhealthy; `gpuwarden
   health clear --gpu 0` -> validating; the validation probe runs on the idle GPU -> back in
   service; `gpuwarden events --kind validation`.
3. stall: on GPU 0, 25 s each of: idle; a kernel spinning on a flag in device memory with one
   block (a collective waiting for a peer that never comes), with 32 blocks (one per NCCL
   channel), and with every SM full; a bf16 GEMM loop. gpuwarden's utilization, power, power
   limit, GPM SM/tensor/DRAM activity and SM clock are read every second, and
   `nvidia-smi dmon --gpm-metrics 2,5,10` runs beside it.
4. straggler (two GPUs or more): job 4242 on GPUs 0 and 1 through the job mapping directory,
   GPU 0 running a bf16 GEMM loop (at its power limit, its clock comes down), GPU 1 a device
   memory copy loop (its clock stays up); 90 s of the job's series every 5 s, kept as JSON for
   promtool (scripts/gpu/straggler-promtool.py turns it into a rules test).
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_text  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="./target/release/gpuwarden")
ap.add_argument("--out", default="/tmp/validate-check")
ap.add_argument("--port", type=int, default=9477)
ap.add_argument("--phases", default="probes,clear,stall,straggler")
args = ap.parse_args()
PHASES = args.phases.split(",")
os.makedirs(args.out, exist_ok=True)
BIN = os.path.abspath(args.bin)
OUT = os.path.abspath(args.out)
SOCKET = os.path.join(OUT, "gw.sock")
STATE = os.path.join(OUT, "state.db")
KMSG = os.path.join(OUT, "kmsg")
JOBS = os.path.join(OUT, "jobs")
CONFIG = os.path.join(OUT, "config.yaml")
SUMMARY = []


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    SUMMARY.append(line)


def save(name, text):
    with open(os.path.join(OUT, name), "w") as f:
        f.write(text)


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def gpus():
    out = sh(["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"]).stdout
    return [dict(zip(["index", "uuid", "bus", "name"], [x.strip() for x in line.split(",")]))
            for line in out.strip().splitlines()]


GPUS = gpus()
log("GPUs:", GPUS)
log(sh(["nvidia-smi", "--query-gpu=driver_version,power.limit", "--format=csv,noheader"]).stdout.strip())


def write_config(schedule):
    with open(CONFIG, "w") as f:
        f.write(f"""listen: 127.0.0.1:{args.port}
poll:
  interval: 1s
  timeout: 900ms
  gpm_interval: 1s
xid:
  kernel_log_path: {KMSG}
state:
  path: {STATE}
local_api:
  socket: {SOCKET}
hpc_jobs:
  mapping_dir: {JOBS}
probe:
  schedule: {"true" if schedule else "false"}
  interval: 16s
""")


open(KMSG, "w").close()
os.makedirs(JOBS, exist_ok=True)
os.chmod(JOBS, 0o755)
write_config(schedule="probes" in PHASES)
daemon = subprocess.Popen([BIN, "run", "--config", CONFIG], stderr=open(os.path.join(OUT, "daemon.log"), "w"))


def scrape():
    try:
        return metrics_text.scrape(args.port)
    except Exception:
        return ""


def value(text, name, **labels):
    found = metrics_text.series(text, name, **labels)
    return found[0][1] if found else None


def wait_for(what, check, within):
    deadline = time.time() + within
    while time.time() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    log(f"TIMED OUT waiting for {what}")
    return None


def gw(*argv):
    r = sh([BIN, *argv])
    return r.returncode, r.stdout + r.stderr


# What runs on the GPUs in the stall and straggler phases.
workload = r'''
import sys, time
kind, seconds = sys.argv[1], float(sys.argv[2])
if kind == "gemm":
    import torch
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
elif kind == "copy":
    import torch
    a = torch.empty(1 << 30, device="cuda:0", dtype=torch.uint8)
    b = torch.empty_like(a)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            b.copy_(a)
        torch.cuda.synchronize()
else:
    import cupy
    spin = cupy.RawKernel(r"""
extern "C" __global__ void spin(volatile unsigned int *flag, long long cycles) {
    long long start = clock64();
    while (*flag == 0) {
        if (clock64() - start > cycles) break;
    }
}""", "spin")
    with cupy.cuda.Device(0):
        flag = cupy.zeros(1, dtype=cupy.uint32)
        props = cupy.cuda.runtime.getDeviceProperties(0)
        sms = props["multiProcessorCount"]
        blocks = {"spin1": 1, "spin32": 32, "spinall": sms * 8}[kind]
        threads = 32 if kind != "spinall" else 256
        # SM cycles at its highest clock: the kernel ends by itself after `seconds`.
        cycles = int(seconds * 2.0e9)
        spin((blocks,), (threads,), (flag, cupy.int64(cycles)))
        cupy.cuda.Device(0).synchronize()
'''
WORKLOAD = os.path.join(OUT, "workload.py")
save("workload.py", workload)


wait_for("the first scrape", lambda: value(scrape(), "gpu_up", gpu="0") == 1.0, 30)

try:
    if "probes" in PHASES:
        log("== probes: four scheduled probes of GPU 0 into the journal")
        runs = lambda: value(scrape(), "gpu_probe_runs_total", gpu="0", result="pass") or 0
        wait_for("four passing probes of GPU 0", lambda: runs() >= 4, 200)
        time.sleep(2)  # the journal writes at most once a second
        code, report = gw("report", "--gpu", "0", "--markdown", "--state", STATE)
        save("probes-report-gpu0.md", report)
        code, events = gw("events", "--kind", "probe", "--state", STATE)
        save("probes-events.txt", events)
        history = report.split("## Probe history", 1)[-1].split("## What NVIDIA", 1)[0]
        log(history.strip())
        code, health = gw("health", "--socket", SOCKET)
        log("health after the probes:", health.strip().splitlines()[0] if health.strip() else "(none)")

    if "clear" in PHASES:
        log("== clear: a fatal XID for GPU 0 in the daemon's kernel-log file, the clear, the validation probe")
        bus = GPUS[0]["bus"]  # 00000000:19:00.0
        short = bus[4:].rsplit(".", 1)[0] if len(bus) > 12 else bus
        with open(KMSG, "a") as f:
            # As dmesg prints it: a bare driver line is not read (docs/health.md, "Where XIDs are read").
            f.write(f"[ 7000.000001] NVRM: Xid (PCI:{short}): 48, pid=1, name=validate-check, DBE (double bit error) (test line)\n")
        wait_for("GPU 0 unhealthy", lambda: value(scrape(), "gpu_health", gpu="0", state="unhealthy") == 1.0, 20)
        code, health = gw("health", "--socket", SOCKET)
        log("health after the XID (exit", code, "):", health.strip().splitlines()[0])
        code, out = gw("health", "clear", "--gpu", "0", "--reason", "validate-check: test XID", "--socket", SOCKET)
        log("clear (exit", code, "):\n" + out.strip())
        code, health = gw("health", "--socket", SOCKET)
        log("health right after the clear (exit", code, "):", health.strip().splitlines()[0])
        t0 = time.time()
        ok = wait_for("the validation to pass", lambda: gw("health", "--socket", SOCKET)[0] == 0, 90)
        code, health = gw("health", "--socket", SOCKET)
        log(f"health {time.time() - t0:.1f} s after the clear (exit {code}):", health.strip().splitlines()[0])
        time.sleep(2)
        code, events = gw("events", "--kind", "validation", "--state", STATE)
        save("validation-events.txt", events)
        log(events.strip())

    # No more scheduled probes: they would run on the idle GPU during the measurements.
    write_config(schedule=False)
    daemon.send_signal(signal.SIGHUP)
    time.sleep(2)

    if "stall" in PHASES:
        log("== stall: spinning kernels against a GEMM on GPU 0")
        dmon = subprocess.Popen(["nvidia-smi", "dmon", "-i", "0", "-s", "pu", "--gpm-metrics", "2,5,10", "-d", "1", "-o", "T"],
                                stdout=open(os.path.join(OUT, "stall-dmon.txt"), "w"), stderr=subprocess.STDOUT)
        rows = []
        results = {}
        for kind, seconds in [("idle", 15), ("spin1", 25), ("spin32", 25), ("spinall", 25), ("gemm", 25)]:
            proc = None if kind == "idle" else subprocess.Popen([sys.executable, WORKLOAD, kind, str(seconds)])
            start = time.time()
            samples = []
            while time.time() - start < seconds:
                t = scrape()
                s = {
                    "t": time.time(),
                    "phase": kind,
                    "utilization": value(t, "gpu_utilization_ratio", gpu="0"),
                    "power": value(t, "gpu_power_watts", gpu="0"),
                    "power_limit": value(t, "gpu_power_limit_watts", gpu="0"),
                    "sm_active": value(t, "gpu_sm_active_ratio", gpu="0"),
                    "tensor_active": value(t, "gpu_tensor_active_ratio", gpu="0"),
                    "dram_active": value(t, "gpu_dram_active_ratio", gpu="0"),
                    "sm_clock": value(t, "gpu_clock_hertz", gpu="0", clock="sm"),
                }
                rows.append(s)
                samples.append(s)
                time.sleep(1)
            if proc:
                proc.wait(timeout=60)
            # The last 10 s of the phase: settled.
            tail = [s for s in samples if s["t"] >= start + seconds - 10]
            def med(key):
                vals = [s[key] for s in tail if s[key] is not None]
                return statistics.median(vals) if vals else None
            results[kind] = {k: med(k) for k in ["utilization", "power", "power_limit", "sm_active", "tensor_active", "dram_active", "sm_clock"]}
            r = results[kind]
            frac = (r["power"] / r["power_limit"]) if r["power"] and r["power_limit"] else None
            log(f"{kind:8s} util {r['utilization']}  power {r['power']} W ({frac and round(frac, 3)} of limit)  "
                f"sm_active {r['sm_active']}  tensor {r['tensor_active']}  dram {r['dram_active']}  sm_clock {r['sm_clock']}")
        dmon.terminate()
        save("stall-samples.json", json.dumps(rows, indent=1))
        save("stall-summary.json", json.dumps(results, indent=1))

    if "straggler" in PHASES and len(GPUS) >= 2:
        log("== straggler: job 4242 on GPUs 0 and 1; GPU 0 a bf16 GEMM loop, GPU 1 a copy loop")
        for i in ("0", "1"):
            with open(os.path.join(JOBS, i), "w") as f:
                f.write("4242\n")
        env0 = dict(os.environ, CUDA_VISIBLE_DEVICES=GPUS[0]["uuid"])
        env1 = dict(os.environ, CUDA_VISIBLE_DEVICES=GPUS[1]["uuid"])
        p0 = subprocess.Popen([sys.executable, WORKLOAD, "gemm", "95"], env=env0)
        p1 = subprocess.Popen([sys.executable, WORKLOAD, "copy", "95"], env=env1)
        time.sleep(5)
        keep = ("gpu_clock_hertz", "gpu_utilization_ratio", "gpu_job_info", "gpu_clock_event_active", "gpu_power_watts", "gpu_power_limit_watts")
        scrapes = []
        start = time.time()
        while time.time() - start < 85:
            t = scrape()
            lines = [l for l in t.splitlines() if l.startswith(keep)]
            scrapes.append({"t": round(time.time() - start, 1), "lines": lines})
            clocks = {g["index"]: value(t, "gpu_clock_hertz", gpu=g["index"], clock="sm") for g in GPUS[:2]}
            reasons = [ls.get("reason") for ls, v in metrics_text.series(t, "gpu_clock_event_active", gpu="0") if v == 1.0]
            log(f"t={scrapes[-1]['t']:5.1f}  sm clocks {clocks}  GPU 0 reasons {reasons}")
            time.sleep(5)
        p0.wait(timeout=60)
        p1.wait(timeout=60)
        for i in ("0", "1"):
            os.remove(os.path.join(JOBS, i))
        save("straggler-scrapes.json", json.dumps(scrapes))
finally:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=20)
    except subprocess.TimeoutExpired:
        daemon.kill()
    save("summary.txt", "\n".join(SUMMARY) + "\n")
