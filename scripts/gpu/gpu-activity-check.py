#!/usr/bin/env python3
"""Checks gpuwarden's attribution, GPM, NVLink and fabric readings on real NVIDIA GPUs against
nvidia-smi, and measures what the new NVML calls cost (docs/validation.md, docs/performance.md).

    python3 scripts/gpu/gpu-activity-check.py --bin ./target/release/gpuwarden --out DIR

Needs root, the NVIDIA driver, nvidia-smi and PyTorch; grpcio for the fake kubelet (installed
from WHEELS, a directory of wheels, when missing). Two GPUs joined by NVLink for the NVLink
part (skipped with one). It never changes clocks, power limits or MIG mode and never resets a
GPU. Steps, each writing its raw output to DIR:

1. cost: CPU time per call of GPM sampling, the NVLink field values, fabric info, MIG mode,
   per-process utilisation and the compute-process list (ctypes, no pynvml).
2. gpm-parallel: GPM sampled on every GPU from one thread each at once, 2000 times, in a
   child process: does it crash?
3. processes: two CUDA processes on GPU 0; gpuwarden's gpu_processes and per-process series
   against nvidia-smi --query-compute-apps; a fake kubelet naming GPU 0's UUID -> gpu_pod_info.
4. probe-gpm: `gpuwarden probe --gpu N --force` while gpuwarden's GPM series and
   `nvidia-smi dmon --gpm-metrics` are sampled every second.
5. nvlink: a peer-to-peer copy GPU 0 -> GPU 1; NVLink byte counters and GPM NVLink rates
   before, during and after; link states and error counters against nvidia-smi nvlink -s/-e.
6. cpu: the daemon's CPU time over 30 idle seconds, per GPU.
"""
import argparse
import ctypes
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_text  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--bin", default="./target/release/gpuwarden")
ap.add_argument("--out", default="/tmp/gpu-activity-check")
ap.add_argument("--wheels", default="target/device-wheels")
ap.add_argument("--port", type=int, default=19111)
ap.add_argument("--steps", default="cost,cost-detail,cadence,gpm-parallel,processes,probe-gpm,nvlink,cpu")
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
STEPS = args.steps.split(",")


def log(*a):
    print(*a, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, **kw).stdout


def save(name, text):
    with open(os.path.join(args.out, name), "w") as f:
        f.write(text)


def gpu_list():
    rows = sh("nvidia-smi --query-gpu=index,uuid,name,pci.bus_id --format=csv,noheader").strip().splitlines()
    return [dict(zip(["index", "uuid", "name", "bus"], [x.strip() for x in r.split(",")])) for r in rows]


GPUS = gpu_list()
log("== GPUs:", json.dumps(GPUS))
log(sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader").strip())

# ---- ctypes NVML ------------------------------------------------------------------------
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0


def handle(i):
    h = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
    return h


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


class GpmMetric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class GpmMetricsGet(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", GpmMetric * 210)]


GPM_IDS = [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 20, 21, 60, 61]  # what gpuwarden asks for


def gpm_pair(h):
    s1, s2 = ctypes.c_void_p(), ctypes.c_void_p()
    nvml.nvmlGpmSampleAlloc(ctypes.byref(s1))
    nvml.nvmlGpmSampleAlloc(ctypes.byref(s2))
    return s1, s2


def gpm_metrics(s1, s2):
    req = GpmMetricsGet()
    req.version = 1
    req.numMetrics = len(GPM_IDS)
    req.sample1, req.sample2 = s1, s2
    for i, m in enumerate(GPM_IDS):
        req.metrics[i].metricId = m
    rc = nvml.nvmlGpmMetricsGet(ctypes.byref(req))
    return rc, req


def cpu_cost(fn, repeat=200):
    fn()
    t0 = time.process_time()
    w0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.process_time() - t0) / repeat * 1e6, (time.perf_counter() - w0) / repeat * 1e6


if "cost" in STEPS:
    log("== cost: CPU and wall time per call on GPU 0 (microseconds, mean of 200)")
    h = handle(0)
    out = []
    s1, s2 = gpm_pair(h)
    rc = nvml.nvmlGpmSampleGet(h, s1)
    out.append(f"nvmlGpmSampleGet first rc={rc}")
    time.sleep(0.1)
    nvml.nvmlGpmSampleGet(h, s2)
    rc, req = gpm_metrics(s1, s2)
    units = {m: (req.metrics[i].nvmlReturn, (req.metrics[i].unit or b"").decode()) for i, m in enumerate(GPM_IDS)}
    out.append(f"nvmlGpmMetricsGet rc={rc}; per metric (rc, unit): {units}")
    nlinks = (FieldValue * 1)()
    nlinks[0].fieldId = 91
    nvml.nvmlDeviceGetFieldValues(h, 1, nlinks)
    links = nlinks[0].value & 0xFFFFFFFF if nlinks[0].nvmlReturn == 0 else 0
    out.append(f"NVML_FI_DEV_NVLINK_LINK_COUNT rc={nlinks[0].nvmlReturn} value={links}")
    per_link = [165, 163, 161, 162, 138, 139]
    reqs = [(f, l) for l in range(links) for f in per_link] + [(f, 0) for f in (list(range(39, 45)) + list(range(102, 108)))[:links]]
    fv = (FieldValue * max(1, len(reqs)))()
    for i, (f, l) in enumerate(reqs):
        fv[i].fieldId, fv[i].scopeId = f, l

    def field_call():
        for i, (f, l) in enumerate(reqs):
            fv[i].fieldId, fv[i].scopeId = f, l
        nvml.nvmlDeviceGetFieldValues(h, len(reqs), fv)

    fabric = (ctypes.c_ubyte * 64)()
    ctypes.c_uint.from_buffer(fabric, 0).value = 40 | (3 << 24)  # sizeof(nvmlGpuFabricInfo_v3_t), version 3
    u1, u2 = ctypes.c_uint(), ctypes.c_uint()
    procs = (ctypes.c_ubyte * (64 * 24))()
    pcount = ctypes.c_uint(64)
    samples = (ctypes.c_ubyte * (64 * 32))()
    scount = ctypes.c_uint(64)
    calls = {
        "nvmlGpmSampleGet": lambda: nvml.nvmlGpmSampleGet(h, s2),
        "nvmlGpmMetricsGet (16 metrics)": lambda: gpm_metrics(s1, s2),
        f"nvmlDeviceGetFieldValues (NVLink, {len(reqs)} values)": field_call,
        "nvmlDeviceGetGpuFabricInfoV": lambda: nvml.nvmlDeviceGetGpuFabricInfoV(h, fabric),
        "nvmlDeviceGetMigMode": lambda: nvml.nvmlDeviceGetMigMode(h, ctypes.byref(u1), ctypes.byref(u2)),
        "nvmlDeviceGetComputeRunningProcesses_v3": lambda: (pcount.__setattr__("value", 64), nvml.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(pcount), procs)),
        "nvmlDeviceGetProcessUtilization": lambda: (scount.__setattr__("value", 64), nvml.nvmlDeviceGetProcessUtilization(h, samples, ctypes.byref(scount), ctypes.c_ulonglong(int(time.time() * 1e6) - 1000000))),
    }
    out.append("fabric rc=%d state=%d status=%d" % (nvml.nvmlDeviceGetGpuFabricInfoV(h, fabric), fabric[28], ctypes.c_int.from_buffer(fabric, 20).value))
    out.append("mig rc=%d current=%d pending=%d" % (nvml.nvmlDeviceGetMigMode(h, ctypes.byref(u1), ctypes.byref(u2)), u1.value, u2.value))
    for name, fn in calls.items():
        cpu, wall = cpu_cost(fn)
        out.append(f"{name:55s} cpu {cpu:8.1f} us  wall {wall:8.1f} us")
    text = "\n".join(out)
    log(text)
    save("cost.txt", text)

if "cost-detail" in STEPS:
    log("== cost-detail: what in the NVLink and GPM reads costs (CPU microseconds per call, mean of 50)")
    h = handle(0)
    out = []
    for name, fields in [("GET_STATE", [165]), ("ERROR_DL_CRC", [163]), ("ERROR_DL_REPLAY", [161]), ("ERROR_DL_RECOVERY", [162]),
                         ("THROUGHPUT_DATA_TX", [138]), ("THROUGHPUT_DATA_RX", [139]), ("THROUGHPUT_DATA_TX+RX", [138, 139]),
                         ("all six", [165, 163, 161, 162, 138, 139])]:
        for links in (1, 18):
            reqs = [(f, l) for l in range(links) for f in fields]
            fv = (FieldValue * len(reqs))()

            def call():
                for i, (f, l) in enumerate(reqs):
                    fv[i].fieldId, fv[i].scopeId = f, l
                nvml.nvmlDeviceGetFieldValues(h, len(reqs), fv)
            cpu, wall = cpu_cost(call, 50)
            out.append(f"field values {name:22s} x {links:2d} links: cpu {cpu:9.1f} us wall {wall:9.1f} us; rc {[fv[i].nvmlReturn for i in range(min(len(reqs), 3))]}")
    legacy = (FieldValue * 12)()
    def legacy_call():
        for i in range(12):
            legacy[i].fieldId, legacy[i].scopeId = (list(range(39, 45)) + list(range(102, 108)))[i], 0
        nvml.nvmlDeviceGetFieldValues(h, 12, legacy)
    cpu, wall = cpu_cost(legacy_call, 50)
    out.append(f"field values CRC_DATA legacy x 12: cpu {cpu:9.1f} us; rc {[legacy[i].nvmlReturn for i in range(12)]}")
    u = ctypes.c_uint()
    ull = ctypes.c_ulonglong()
    cpu, wall = cpu_cost(lambda: [nvml.nvmlDeviceGetNvLinkState(h, l, ctypes.byref(u)) for l in range(18)], 50)
    out.append(f"nvmlDeviceGetNvLinkState x 18: cpu {cpu:9.1f} us (rc link 0: {nvml.nvmlDeviceGetNvLinkState(h, 0, ctypes.byref(u))})")
    for counter, name in ((0, "DL_REPLAY"), (1, "DL_RECOVERY"), (2, "DL_CRC_FLIT"), (3, "DL_CRC_DATA")):
        cpu, wall = cpu_cost(lambda: [nvml.nvmlDeviceGetNvLinkErrorCounter(h, l, counter, ctypes.byref(ull)) for l in range(18)], 20)
        out.append(f"nvmlDeviceGetNvLinkErrorCounter {name} x 18: cpu {cpu:9.1f} us (rc link 0: {nvml.nvmlDeviceGetNvLinkErrorCounter(h, 0, counter, ctypes.byref(ull))})")
    s1, s2 = gpm_pair(h)
    nvml.nvmlGpmSampleGet(h, s1)
    time.sleep(0.1)
    nvml.nvmlGpmSampleGet(h, s2)
    every = GPM_IDS
    for n in (1, 5, 16):
        GPM_IDS = every[:n]
        cpu, wall = cpu_cost(lambda: gpm_metrics(s1, s2), 50)
        out.append(f"nvmlGpmMetricsGet with {n:2d} metrics: cpu {cpu:9.1f} us")
    GPM_IDS = every
    text = "\n".join(out)
    log(text)
    save("cost-detail.txt", text)

if "cadence" in STEPS:
    log("== cadence: each call once a second, 10 times, as the daemon makes them (a tight loop can hit driver caches); CPU microseconds per call")
    h = handle(0)
    u = ctypes.c_uint()
    states = (FieldValue * 18)()
    counters = (FieldValue * 90)()
    fabric = (ctypes.c_ubyte * 64)()
    ctypes.c_uint.from_buffer(fabric, 0).value = 40 | (3 << 24)
    u1, u2 = ctypes.c_uint(), ctypes.c_uint()
    s1, s2 = gpm_pair(h)
    nvml.nvmlGpmSampleGet(h, s1)

    def fill(fv, fields):
        for i, (f, l) in enumerate(fields):
            fv[i].fieldId, fv[i].scopeId = f, l
        return fv
    calls = {
        "nvmlDeviceGetNvLinkState x 18": lambda: [nvml.nvmlDeviceGetNvLinkState(h, l, ctypes.byref(u)) for l in range(18)],
        "field values GET_STATE x 18 links": lambda: nvml.nvmlDeviceGetFieldValues(h, 18, fill(states, [(165, l) for l in range(18)])),
        "field values 5 counters x 18 links": lambda: nvml.nvmlDeviceGetFieldValues(h, 90, fill(counters, [(f, l) for l in range(18) for f in (163, 161, 162, 138, 139)])),
        "nvmlGpmSampleGet + nvmlGpmMetricsGet": lambda: (nvml.nvmlGpmSampleGet(h, s2), gpm_metrics(s1, s2)),
        "nvmlDeviceGetGpuFabricInfoV": lambda: nvml.nvmlDeviceGetGpuFabricInfoV(h, fabric),
        "nvmlDeviceGetMigMode": lambda: nvml.nvmlDeviceGetMigMode(h, ctypes.byref(u1), ctypes.byref(u2)),
        "nvmlDeviceGetTemperature (for scale)": lambda: nvml.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u)),
    }
    totals = {k: 0.0 for k in calls}
    for _ in range(10):
        for name, fn in calls.items():
            t0 = time.process_time()
            fn()
            totals[name] += time.process_time() - t0
        time.sleep(1)
    text = "\n".join(f"{k:45s} cpu {v / 10 * 1e6:9.1f} us" for k, v in totals.items())
    log(text)
    save("cadence.txt", text)

if "gpm-parallel" in STEPS:
    log("== gpm-parallel: one thread per GPU sampling GPM at once, 2000 rounds each, in a child")
    child = r'''
import ctypes, threading, sys
nvml = ctypes.CDLL("libnvidia-ml.so.1"); assert nvml.nvmlInit_v2() == 0
n = ctypes.c_uint(); nvml.nvmlDeviceGetCount_v2(ctypes.byref(n))
class M(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint), ("rc", ctypes.c_int), ("v", ctypes.c_double), ("a", ctypes.c_char_p), ("b", ctypes.c_char_p), ("c", ctypes.c_char_p)]
class G(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("n", ctypes.c_uint), ("s1", ctypes.c_void_p), ("s2", ctypes.c_void_p), ("m", M * 210)]
errors = []
def work(i):
    h = ctypes.c_void_p(); nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
    s = [ctypes.c_void_p(), ctypes.c_void_p()]
    for x in s: nvml.nvmlGpmSampleAlloc(ctypes.byref(x))
    for k in range(2000):
        rc = nvml.nvmlGpmSampleGet(h, s[k % 2])
        if rc: errors.append(("sample", i, rc)); continue
        if k:
            g = G(); g.version = 1; g.n = 5; g.s1 = s[(k + 1) % 2]; g.s2 = s[k % 2]
            for j, m in enumerate([1, 2, 3, 5, 10]): g.m[j].id = m
            rc = nvml.nvmlGpmMetricsGet(ctypes.byref(g))
            if rc: errors.append(("metrics", i, rc))
ts = [threading.Thread(target=work, args=(i,)) for i in range(n.value)]
[t.start() for t in ts]; [t.join() for t in ts]
print("gpus", n.value, "errors", len(errors), errors[:5])
'''
    t0 = time.time()
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=300)
    text = f"exit {r.returncode} in {time.time() - t0:.1f} s\n{r.stdout}{r.stderr[-2000:]}"
    log(text)
    save("gpm-parallel.txt", text)

# ---- the daemon -------------------------------------------------------------------------
import importlib.util
if importlib.util.find_spec("grpc") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", args.wheels, "grpcio"], check=False,
                   capture_output=True)
KUBELET_DIR = os.path.join(args.out, "kubelet")
os.makedirs(KUBELET_DIR, exist_ok=True)
SOCKET = os.path.join(KUBELET_DIR, "kubelet.sock")
ANSWER = os.path.join(KUBELET_DIR, "answer.json")
with open(ANSWER, "w") as f:
    json.dump({"pods": [{"namespace": "ml", "name": "trainer-0", "containers": [
        {"name": "main", "devices": [{"resource": "nvidia.com/gpu", "ids": [GPUS[0]["uuid"]]}]},
        {"name": "sidecar", "devices": [{"resource": "example.com/nic", "ids": ["nic0"]}]}]}]}, f)
kubelet = subprocess.Popen([sys.executable, "tests/fake_kubelet.py", SOCKET, ANSWER], stderr=open(os.path.join(args.out, "kubelet.log"), "w"))
CONFIG = os.path.join(args.out, "config.yaml")
with open(CONFIG, "w") as f:
    f.write(f"""listen: 127.0.0.1:{args.port}
poll:
  interval: 1s
  timeout: 900ms
  slow_interval: 1s
  topology_interval: 10s
  gpm_interval: 1s
processes:
  per_process: true
kubernetes:
  pod_resources_socket: {SOCKET}
  refresh: 2s
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
time.sleep(3)

WORKER = r'''
import sys, time, torch
dev, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
torch.cuda.set_device(dev)
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
pad = torch.empty(int(sys.argv[4]) << 20, dtype=torch.uint8, device="cuda")
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(10): c = a @ b
    torch.cuda.synchronize()
    time.sleep(float(sys.argv[5]))
'''

if "processes" in STEPS:
    log("== processes: two CUDA processes on GPU 0")
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, "0", "4096", "25", str(mib), pause], stdout=subprocess.PIPE, text=True)
               for mib, pause in ((2048, "0"), (6144, "0.05"))]
    for w in workers:
        w.stdout.readline()
    time.sleep(6)
    smi_before = sh("nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits")
    m = scrape()
    smi_after = sh("nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits")
    pmon = sh("nvidia-smi pmon -i 0 -c 1 -s u")
    save("processes-scrape.txt", m)
    save("processes-smi.txt", smi_before + "\n--- after\n" + smi_after + "\n--- pmon\n" + pmon)
    ours = {int(ls["pid"]): v for ls, v in series(m, "gpu_process_memory_used_bytes", gpu="0")}
    smi = {int(r.split(",")[0]): int(r.split(",")[2]) for r in smi_before.strip().splitlines() if r.strip() and r.split(",")[1].strip() == GPUS[0]["uuid"]}
    lines = [f"gpu_processes{{gpu=0}} = {series(m, 'gpu_processes', gpu='0')[0][1] if series(m, 'gpu_processes', gpu='0') else None}; nvidia-smi lists {len(smi)}"]
    for pid in sorted(set(ours) | set(smi)):
        sm = [v for ls, v in series(m, "gpu_process_sm_utilization_ratio", gpu="0", pid=str(pid))]
        name = [ls["process"] for ls, v in series(m, "gpu_process_memory_used_bytes", gpu="0", pid=str(pid))]
        lines.append(f"pid {pid} ({name[0] if name else '?'}): gpuwarden {ours.get(pid, 0) / 2**20:.0f} MiB, sm {sm[0] if sm else None}; nvidia-smi {smi.get(pid)} MiB")
    lines.append("pod: " + json.dumps([ls for ls, v in series(m, "gpu_pod_info")]) + f" kubelet_up {series(m, 'gpuwarden_kubelet_up')}")
    text = "\n".join(lines)
    log(text)
    save("processes.txt", text + "\n--- pmon\n" + pmon)
    for w in workers:
        w.kill()

if "probe-gpm" in STEPS:
    gpu = 1 if len(GPUS) > 1 else 0
    log(f"== probe-gpm: gpuwarden probe on GPU {gpu}, with gpuwarden's GPM series and nvidia-smi dmon --gpm-metrics every second")
    dmon = subprocess.Popen(f"nvidia-smi dmon -i {gpu} --gpm-metrics 1,2,3,5,10 -d 1", shell=True, stdout=subprocess.PIPE, text=True)
    samples = []
    stop = threading.Event()
    dmon_lines = []

    def read_dmon():
        for line in dmon.stdout:
            dmon_lines.append((time.time(), line.rstrip()))

    def sample():
        while not stop.is_set():
            t = time.time()
            try:
                m = scrape()
                row = {k: (series(m, f"gpu_{k}_ratio", gpu=str(gpu)) or [(None, None)])[0][1]
                       for k in ("graphics_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active")}
                samples.append((t, row))
            except Exception as e:
                samples.append((t, {"error": str(e)}))
            stop.wait(1.0)

    threading.Thread(target=read_dmon, daemon=True).start()
    th = threading.Thread(target=sample)
    th.start()
    time.sleep(3)
    probe = subprocess.run([args.bin, "probe", "--gpu", str(gpu), "--force", "--json", "--config", CONFIG], capture_output=True, text=True)
    time.sleep(3)
    stop.set()
    th.join()
    dmon.kill()
    save("probe.json", probe.stdout + probe.stderr[-3000:])
    t0 = samples[0][0] if samples else time.time()
    text = "gpuwarden (t, graphics, sm, occupancy, tensor, dram in %):\n" + "\n".join(
        f"{t - t0:6.1f} " + " ".join("-" if r.get(k) is None else f"{r[k] * 100:5.1f}" for k in ("graphics_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"))
        for t, r in samples)
    text += "\n\nnvidia-smi dmon --gpm-metrics 1,2,3,5,10:\n" + "\n".join(f"{t - t0:6.1f} {l}" for t, l in dmon_lines)
    log(text)
    save("probe-gpm.txt", text)
    try:
        rep = json.loads(probe.stdout)
        log("probe:", json.dumps(rep)[:1500])
    except Exception:
        log("probe output:", probe.stdout[-1500:], probe.stderr[-1500:])

if "nvlink" in STEPS and len(GPUS) > 1:
    log("== nvlink: peer-to-peer copy GPU 0 -> GPU 1")
    copy = r'''
import time, torch
print("p2p", torch.cuda.can_device_access_peer(0, 1), flush=True)
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:0"); y = torch.empty(1 << 30, dtype=torch.uint8, device="cuda:1")
torch.cuda.synchronize(0); torch.cuda.synchronize(1)
t = time.time(); n = 0
while time.time() - t < 8:
    y.copy_(x, non_blocking=True); n += 1
    if n % 10 == 0: torch.cuda.synchronize(1)
torch.cuda.synchronize(1)
print("copied GiB", n, "in", round(time.time() - t, 2), "s", flush=True)
'''
    def link_totals(m, gpu, direction):
        return sum(v for ls, v in series(m, "gpu_nvlink_bytes_total", gpu=gpu, direction=direction))
    time.sleep(11)  # a fresh slow-tier read before
    before = scrape()
    smi_before = sh("nvidia-smi nvlink -gt d")
    proc = subprocess.Popen([sys.executable, "-c", copy], stdout=subprocess.PIPE, text=True)
    during = []
    for _ in range(8):
        time.sleep(1)
        m = scrape()
        during.append({g: {d: (series(m, "gpu_nvlink_bytes_per_second", gpu=g, direction=d) or [(None, None)])[0][1] for d in ("tx", "rx")} for g in ("0", "1")})
    out = proc.communicate()[0]
    time.sleep(11)
    after = scrape()
    smi_after = sh("nvidia-smi nvlink -gt d")
    status, errors = sh("nvidia-smi nvlink -s"), sh("nvidia-smi nvlink -e")
    save("nvlink-scrape-before.txt", before)
    save("nvlink-scrape-after.txt", after)
    save("nvlink-smi.txt", "--- -gt d before\n" + smi_before + "\n--- after\n" + smi_after + "\n--- -s\n" + status + "\n--- -e\n" + errors)
    lines = [out.strip()]
    for g in ("0", "1"):
        for d in ("tx", "rx"):
            lines.append(f"gpu {g} {d}: gpu_nvlink_bytes_total grew {(link_totals(after, g, d) - link_totals(before, g, d)) / 2**30:.1f} GiB")
    lines.append("GPM NVLink rates during (GB/s): " + json.dumps([{g: {d: (v / 1e9 if v is not None else None) for d, v in r.items()} for g, r in s.items()} for s in during]))
    ups = series(after, "gpu_nvlink_up")
    lines.append(f"gpu_nvlink_up: {sum(1 for _, v in ups if v == 1)} up, {sum(1 for _, v in ups if v == 0)} down; links {[(ls['gpu'], v) for ls, v in series(after, 'gpu_nvlink_links')]}")
    errs = series(after, "gpu_nvlink_errors_total")
    lines.append(f"gpu_nvlink_errors_total: {len(errs)} series, types {sorted(set(ls['type'] for ls, _ in errs))}, non-zero {[(ls['gpu'], ls['link'], ls['type'], v) for ls, v in errs if v]}")
    lines.append(f"fabric: {[(ls['gpu'], ls['state'], v) for ls, v in series(after, 'gpu_fabric_state') if v]} ok={series(after, 'gpu_fabric_registration_ok')}")
    smi_up = len(re.findall(r"Link \d+: [\d.]+ GB/s", status))
    smi_down = len(re.findall(r"Link \d+: <inactive>", status))
    lines.append(f"nvidia-smi nvlink -s: {smi_up} links with a speed, {smi_down} inactive")
    smi_err = re.findall(r"Link (\d+): (.+?): (\d+)", errors)
    lines.append(f"nvidia-smi nvlink -e: {len(smi_err)} counters, non-zero {[e for e in smi_err if e[2] != '0']}")
    text = "\n".join(lines)
    log(text)
    save("nvlink.txt", text)

if "cpu" in STEPS:
    log("== cpu: CPU over CPU_SECONDS (120) idle seconds of gpuwarden with the default config, and of BEFORE (an earlier build) beside it")
    daemon.terminate()
    daemon.wait(timeout=10)
    runs = {"default": args.bin}
    if os.environ.get("BEFORE"):
        runs["before"] = os.environ["BEFORE"]
    procs = {}
    for n, (name, binary) in enumerate(runs.items()):
        path = os.path.join(args.out, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"listen: 127.0.0.1:{args.port + 1 + n}\n")
        procs[name] = (subprocess.Popen([binary, "run", "--config", path], stderr=open(os.path.join(args.out, f"{name}.log"), "w")), args.port + 1 + n)
    time.sleep(15)  # past start-up and the first slow and NVLink reads

    def cpu_ns(pid):
        # Nanoseconds on a CPU, all threads (schedstat), rather than clock ticks of 10 ms.
        return sum(int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0]) for t in os.listdir(f"/proc/{pid}/task"))

    def own(port):
        m = metrics_text.scrape(port)
        by_call = {}
        for ls, v in series(m, "gpuwarden_vendor_call_seconds_total"):
            by_call[ls.get("call", "all")] = by_call.get(ls.get("call", "all"), 0) + v
        polls = sum(v for _, v in series(m, "gpuwarden_poll_duration_seconds_sum"))
        return sum(by_call.values()), polls, by_call
    t0 = time.time()
    c0 = {k: cpu_ns(p.pid) for k, (p, _) in procs.items()}
    o0 = {k: own(port) for k, (_, port) in procs.items()}
    time.sleep(float(os.environ.get("CPU_SECONDS", "120")))  # at least one of each tier: NVLink counters every 2 min
    t1 = time.time()
    c1 = {k: cpu_ns(p.pid) for k, (p, _) in procs.items()}
    o1 = {k: own(port) for k, (_, port) in procs.items()}
    lines = []
    for k, (p, port) in procs.items():
        share = (c1[k] - c0[k]) / 1e9 / (t1 - t0)
        rss = [l for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0].split(":")[1].strip()
        lines.append(f"{k}: CPU {share * 100:.3f}% of a core over {t1 - t0:.0f} s = {share * 100 / len(GPUS):.3f}% per GPU ({len(GPUS)} GPUs, poll 1 s); "
                     f"wall time inside NVML calls {(o1[k][0] - o0[k][0]) / (t1 - t0) * 100:.3f}% , polls {(o1[k][1] - o0[k][1]) / (t1 - t0) * 100:.3f}% of the time; RSS {rss}")
        per_call = sorted(((o1[k][2].get(c, 0) - o0[k][2].get(c, 0)) / (t1 - t0) / len(GPUS) * 1e6, c) for c in o1[k][2])
        if len(per_call) > 1:
            lines.append("  per GPU, microseconds inside each call per second: " + ", ".join(f"{c} {us:.1f}" for us, c in reversed(per_call) if us >= 0.05))
        p.terminate()
    text = "\n".join(lines)
    log(text)
    save("cpu.txt", text)

daemon.terminate()
kubelet.terminate()
