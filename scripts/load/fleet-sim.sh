#!/usr/bin/env bash
# Fleet simulation: N gpuwarden daemons (default 100), each over 8 simulated GPUs, one real
# Prometheus scraping them every 5 s with the shipped rules, one real Alertmanager with the
# shipped inhibit rules and a webhook receiver. It injects faults on a few chosen nodes (a
# thermal violation, a fatal XID, a lost GPU, a PCIe width drop, a network port down, and one
# GPU of a batch job across four nodes slowed down: a job straggler), measures the time from each
# injection to its alert reaching the webhook, checks that no other node alerted (and that
# the straggler alert names that GPU alone), measures the daemons' memory and CPU and
# Prometheus's series and ingestion, and stops everything.
#
#   scripts/load/fleet-sim.sh [N]            (RESULTS=dir to keep the figures as JSON)
#   MODE=victoriametrics scripts/load/fleet-sim.sh [N]
#
# MODE=victoriametrics replaces Prometheus by what a fleet past one Prometheus runs: vmagent
# scrapes the nodes and remote-writes to VictoriaMetrics, vmalert evaluates the shipped rules
# file unchanged against it (recording rules and alert state written back) and sends to the
# same Alertmanager (Debian's victoria-metrics package).
#
# Loopback only; bounded: it gives up 12 minutes after the injection at the latest (the job
# straggler's alert waits 10 minutes by design).
# Needs: the release build (cargo build --release --workspace), Debian's prometheus and
# prometheus-alertmanager (and victoria-metrics for that mode), python3 with PyYAML.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-100}
[ -x target/release/gpuwarden ] && [ -f target/release/libgpuwarden_sim_nvml.so ] \
  || cargo build --release --workspace
exec python3 - "$N" <<'PY'
import json, os, pathlib, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time
import urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import yaml

N = int(sys.argv[1])
MODE = os.environ.get("MODE", "prometheus")
if MODE not in ("prometheus", "victoriametrics"):
    raise SystemExit(f"MODE={MODE}: write prometheus or victoriametrics")
ROOT = pathlib.Path.cwd()
BIN = ROOT / "target/release/gpuwarden"
LIB = ROOT / "target/release/libgpuwarden_sim_nvml.so"
RULES = ROOT / "deploy/prometheus/gpuwarden.rules.yml"
SCRAPE = 5          # seconds, as the issue asks
WORK = pathlib.Path(tempfile.mkdtemp(prefix="gpuwarden-fleet-"))
procs = []

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def cleanup(*_):
    for p in procs:
        try: p.kill()
        except Exception: pass
    for p in procs:
        try: p.wait(timeout=5)
        except Exception: pass
    shutil.rmtree(WORK, ignore_errors=True)
signal.signal(signal.SIGTERM, lambda *a: (cleanup(), sys.exit(1)))

# ---- the nodes: the demo's eight H200s with every fault removed, unique ids per node ----------
demo = (ROOT / "config/demo-scenario.yaml").read_text()
# GPU 2 of the demo runs at 88 C (1 C under slowdown) with both thermal reasons on: cool it.
quiet = (demo.replace("active: 96, supported: 511", "active: 0, supported: 511")
             .replace("temperature: 88\n", "temperature: 55\n").replace("memory_temperature: 94", "memory_temperature: 61")
             .replace("width: 8, width_max: 16", "width: 16, width_max: 16")
             .replace("uncorrected: 1 }", "uncorrected: 0 }")
             # GPU 6's driver asks for a reset (its pending row remap): it needs none here.
             .replace("recovery_action: 1\n", "recovery_action: 0\n"))
def device_block(text, index):
    marker = f"-00000000000{index}\n"
    start = text.rfind("  - name:", 0, text.index(marker))
    end = text.find("  - name:", start + 4)
    return start, (end if end >= 0 else len(text))
def edit(text, index, fn):
    s, e = device_block(text, index)
    return text[:s] + fn(text[s:e]) + text[e:]
# The nodes of the batch job: every GPU of each under the same load (the same clocks, power and
# activity), so none is slower than the others until the fault makes one so.
JOB_NODES = {min(N - 1, int(N * f)) for f in (0.88, 0.89, 0.90, 0.91)}
JOB = "777"
busy = quiet
busy = re.sub(r"utilization: \{ gpu: \d+, memory: \d+ \}", "utilization: { gpu: 100, memory: 50 }", busy)
busy = re.sub(r"clocks_mhz: \{ sm: \d+, memory: 3201, graphics: \d+ \}", "clocks_mhz: { sm: 1755, memory: 3201, graphics: 1755 }", busy)
busy = re.sub(r"power_mw: \d+\n", "power_mw: 600000\n", busy)
busy = re.sub(r"clock_events: \{ active: \d+,", "clock_events: { active: 0,", busy)
busy = re.sub(r"tensor: \d+, dram: \d+,", "tensor: 90, dram: 30,", busy)
def scenario_for(i):
    base = busy if i in JOB_NODES else quiet
    return base.replace("GPU-5f2c7a1e-0000-", f"GPU-5f2c7a1e-{i:04d}-").replace('serial: "165302400', f'serial: "1{i:04d}400')
def write_atomic(path, text):
    tmp = path.with_suffix(".tmp"); tmp.write_text(text); os.replace(tmp, path)

nodes = []
for i in range(N):
    d = WORK / f"node-{i:03d}"; d.mkdir()
    port = free_port()
    (d / "scenario.yaml").write_text(scenario_for(i))
    (d / "kmsg").write_text("")
    jobs = ""
    if i in JOB_NODES:
        (d / "jobs").mkdir(mode=0o755)
        for gpu in range(8):
            (d / "jobs" / str(gpu)).write_text(JOB + "\n")
        jobs = f"hpc_jobs:\n  mapping_dir: {d / 'jobs'}\n"
    # Four healthy InfiniBand ports at NDR (the fixture tree), read every network.interval.
    shutil.copytree(ROOT / "tests/fixtures/sysfs/ndr-ib", d / "sysfs", symlinks=True)
    (d / "config.yaml").write_text(
        f"listen: 127.0.0.1:{port}\npoll:\n  interval: 1s\n  timeout: 500ms\n"
        f"nvml:\n  library_path: {LIB}\nxid:\n  kernel_log_path: {d / 'kmsg'}\n"
        # The simulated GPUs are on no PCI bus: no census (the tree's GPUs are not these).
        f"amd:\n  sysfs_root: {d / 'sysfs'}\npci_census: false\n"
        # Each node its own health journal and local socket, as on real nodes.
        f"state:\n  path: {d / 'state.db'}\nlocal_api:\n  socket: {d / 'gpuwarden.sock'}\n{jobs}")
    env = dict(os.environ, GPUWARDEN_SIM_NVML_SCENARIO=str(d / "scenario.yaml"), RUST_LOG="warn")
    p = subprocess.Popen([str(BIN), "run", "--config", str(d / "config.yaml")], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(d / "daemon.log", "w"))
    procs.append(p)
    nodes.append(dict(i=i, dir=d, port=port, instance=f"127.0.0.1:{port}", proc=p))

# ---- the webhook: remembers when each (alertname, instance, gpu) first arrived firing --------
received = {}
all_alerts = []
class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        now = time.time()
        for a in body.get("alerts", []):
            if a.get("status") == "firing":
                key = (a["labels"].get("alertname"), a["labels"].get("instance"), a["labels"].get("gpu", ""))
                received.setdefault(key, now)
                all_alerts.append(key)
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
hook_port = free_port()
hook = ThreadingHTTPServer(("127.0.0.1", hook_port), Hook)
threading.Thread(target=hook.serve_forever, daemon=True).start()

# ---- Alertmanager: the shipped inhibit rules, a webhook receiver, quick grouping -------------
am_port = free_port()
shipped = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
am_config = {
    "route": {"receiver": "webhook", "group_by": ["alertname", "instance", "gpu"],
              "group_wait": "1s", "group_interval": "5s", "repeat_interval": "1h"},
    "inhibit_rules": shipped["inhibit_rules"],
    "receivers": [{"name": "webhook", "webhook_configs": [{"url": f"http://127.0.0.1:{hook_port}/", "send_resolved": True}]}],
}
(WORK / "alertmanager.yml").write_text(yaml.safe_dump(am_config))
procs.append(subprocess.Popen(["prometheus-alertmanager", f"--config.file={WORK / 'alertmanager.yml'}",
    f"--storage.path={WORK / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
    stdout=subprocess.DEVNULL, stderr=open(WORK / "alertmanager.log", "w")))

# ---- Prometheus, or vmagent + VictoriaMetrics + vmalert: every node every 5 s, the shipped ----
# ---- rules evaluated every second -----------------------------------------------------------
prom_port = free_port()
targets = [n["instance"] for n in nodes]
def log(name):
    return open(WORK / f"{name}.log", "w")
if MODE == "prometheus":
    prom_config = {
        "global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [
            {"job_name": "gpuwarden", "static_configs": [{"targets": targets}]},
            # Prometheus's own metrics: head series and ingestion for the figures.
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]},
        ],
    }
    (WORK / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
    procs.append(subprocess.Popen(["prometheus", f"--config.file={WORK / 'prometheus.yml'}",
        f"--storage.tsdb.path={WORK / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=log("prometheus")))
else:
    agent_port, vmalert_port = free_port(), free_port()
    scrape = {
        "global": {"scrape_interval": f"{SCRAPE}s"},
        "scrape_configs": [
            {"job_name": "gpuwarden", "static_configs": [{"targets": targets}]},
            # VictoriaMetrics' own metrics: rows inserted, for the figures.
            {"job_name": "victoriametrics", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]},
        ],
    }
    (WORK / "scrape.yml").write_text(yaml.safe_dump(scrape))
    vm = f"http://127.0.0.1:{prom_port}"
    # A query sees samples up to a second old (the default waits 30 s for late samples, which
    # would add 30 s to every alert).
    procs.append(subprocess.Popen(["victoria-metrics", f"-storageDataPath={WORK / 'vm-data'}",
        f"-httpListenAddr=127.0.0.1:{prom_port}", "-retentionPeriod=1d", "-search.latencyOffset=1s",
        "-loggerLevel=ERROR"], stdout=subprocess.DEVNULL, stderr=log("victoria-metrics")))
    procs.append(subprocess.Popen(["vmagent", f"-promscrape.config={WORK / 'scrape.yml'}",
        f"-remoteWrite.url={vm}/api/v1/write", f"-remoteWrite.tmpDataPath={WORK / 'vmagent-data'}",
        "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{agent_port}", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=log("vmagent")))
    procs.append(subprocess.Popen(["vmalert", f"-rule={RULES}", f"-datasource.url={vm}",
        f"-remoteWrite.url={vm}", f"-remoteRead.url={vm}", f"-notifier.url=http://127.0.0.1:{am_port}",
        "-evaluationInterval=1s", f"-httpListenAddr=127.0.0.1:{vmalert_port}", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=log("vmalert")))

def query(expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return json.load(urllib.request.urlopen(url, timeout=5))["data"]["result"]
    except Exception:
        return []
def scalar(expr):
    r = query(expr)
    return float(r[0]["value"][1]) if r else None

try:
    t0 = time.time()
    up_query = 'count(up{job="gpuwarden"} == 1)'
    while scalar(up_query) != N:
        if time.time() - t0 > 180:
            raise SystemExit(f"only {scalar(up_query)} of {N} nodes came up")
        time.sleep(1)
    print(f"{N} nodes up and scraped after {time.time() - t0:.0f}s; settling for 20s")
    time.sleep(20)
    firing_before = query('ALERTS{alertstate="firing"}')
    if firing_before or received:
        raise SystemExit(f"alerts before any fault: {firing_before or received}")

    # ---- faults -------------------------------------------------------------------------------
    rules = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    def for_seconds(alert):
        f = rules[alert].get("for", "0s")
        return sum(int(v) * {"s": 1, "m": 60, "h": 3600}[u] for v, u in re.findall(r"(\d+)([smh])", f))
    pick = lambda frac: nodes[min(N - 1, int(N * frac))]
    def port_down(n):
        port = (n["dir"] / "sysfs/sys/class/infiniband/mlx5_2").resolve() / "ports/1"
        write_atomic(port / "phys_state", "3: Disabled\n")
        write_atomic(port / "state", "1: DOWN\n")
    faults = [
        ("thermal violation", "GpuThermalViolation", pick(0.07), "0",
         lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 0,
             lambda b: b.replace("clock_events: { active: 1,", "clock_events: { active: 64,").replace("temperature: 34", "temperature: 91")))),
        ("fatal XID", "GpuXidFatal", pick(0.23), "1",
         lambda n: open(n["dir"] / "kmsg", "a").write("[ 4012.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=2311, name=python3, GPU has fallen off the bus.\n")),
        ("lost GPU", "GpuLost", pick(0.42), "3",
         lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 3, lambda b: b + "    lost: true\n"))),
        ("PCIe width drop", "GpuPcieLinkDegraded", pick(0.77), "5",
         lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 5,
             lambda b: b.replace("width: 16, width_max: 16", "width: 8, width_max: 16")))),
        # A node alert: no gpu label.
        ("network port down", "NicPortDown", pick(0.55), "", port_down),
        # One GPU of job 777 (four nodes, 32 GPUs) held at 1400 MHz by its power cap while its
        # peers run at 1755: 20% below the job's median.
        ("job straggler", "GpuJobStraggler", pick(0.90), "3",
         lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 3,
             lambda b: b.replace("sm: 1755, memory: 3201, graphics: 1755", "sm: 1400, memory: 3201, graphics: 1400")
                        .replace("clock_events: { active: 0,", "clock_events: { active: 4,")))),
    ]
    injected = {}
    for name, alert, node, gpu, inject in faults:
        inject(node)
        injected[(alert, node["instance"], gpu)] = (name, time.time())
    print("injected: " + ", ".join(f"{name} on node {node['i']}" + (f" GPU {gpu}" if gpu else "") for name, _, node, gpu, _ in faults))

    # The rule's `for`, how often the daemon reads what the fault changes (PCIe width is in
    # the slow tier, poll.slow_interval 10 s; the network ports every network.interval, 10 s;
    # the rest every 1 s poll or at once), two scrapes, and 5 s for evaluation and Alertmanager.
    read_every = {"GpuPcieLinkDegraded": 10, "NicPortDown": 10}
    budget = {key: for_seconds(key[0]) + read_every.get(key[0], 1) + 2 * SCRAPE + 5 for key in injected}
    deadline = time.time() + max(budget.values()) + 30
    while time.time() < deadline and not all(k in received for k in injected):
        time.sleep(0.5)

    # ---- figures ------------------------------------------------------------------------------
    results = {"nodes": N, "gpus": 8 * N, "scrape_interval_s": SCRAPE, "faults": []}
    ok = True
    print(f"\n{'fault':<20} {'alert':<22} {'node':>5} {'latency':>9} {'budget':>8}  verdict")
    for key, (name, at) in injected.items():
        latency = received[key] - at if key in received else None
        good = latency is not None and latency <= budget[key]
        ok &= good
        node = next(n for n in nodes if n["instance"] == key[1])["i"]
        print(f"{name:<20} {key[0]:<22} {node:>5} {('%.1fs' % latency) if latency is not None else 'never':>9} {budget[key]:>7}s  {'ok' if good else 'LATE'}")
        results["faults"].append({"fault": name, "alert": key[0], "node": node, "gpu": key[2],
                                  "latency_s": latency, "budget_s": budget[key]})
    faulty = {k[1] for k in injected}
    stray = sorted({k for k in all_alerts if k[1] not in faulty})
    # The straggler alert names the slowed GPU alone, on its node too.
    stragglers = sorted({k for k in all_alerts if k[0] == "GpuJobStraggler"})
    expected_stragglers = sorted(k for k in injected if k[0] == "GpuJobStraggler")
    print(f"GpuJobStraggler for: {stragglers} (expected {expected_stragglers})")
    ok &= stragglers == expected_stragglers
    results["job_straggler_alerts"] = stragglers
    print(f"alerts for nodes without a fault: {stray or 'none'}")
    ok &= not stray
    results["stray_alerts"] = stray

    ticks = os.sysconf("SC_CLK_TCK")
    def cpu_seconds(pid):
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / ticks
    def rss_kib(pid):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    live = [n for n in nodes if n["proc"].poll() is None]
    c0 = {n["i"]: cpu_seconds(n["proc"].pid) for n in live}; w0 = time.time()
    time.sleep(30)
    c1 = {n["i"]: cpu_seconds(n["proc"].pid) for n in live}; w1 = time.time()
    cpu = sorted(100 * (c1[i] - c0[i]) / (w1 - w0) for i in c0)
    rss = sorted(rss_kib(n["proc"].pid) / 1024 for n in live)
    med = lambda xs: xs[len(xs) // 2]
    results["daemon_rss_mib"] = {"median": med(rss), "max": rss[-1]}
    results["daemon_cpu_percent_of_one_core"] = {"median": med(cpu), "max": cpu[-1]}
    if MODE == "prometheus":
        series = scalar("prometheus_tsdb_head_series")
        ingest = scalar("rate(prometheus_tsdb_head_samples_appended_total[1m])")
    else:
        # Series with a sample in the last 5 minutes (what Prometheus' head holds), and rows
        # VictoriaMetrics stored per second (scraped and written back by vmalert).
        series = scalar('count({__name__!=""})')
        ingest = scalar('sum(rate(vm_rows_inserted_total{job="victoriametrics"}[1m]))')
    per_scrape = scalar('avg(scrape_samples_scraped{job="gpuwarden"})')
    results["mode"] = MODE
    results["prometheus"] = {"head_series": series, "samples_per_scrape_per_node": per_scrape,
                             "samples_per_second": ingest, "samples_per_second_per_node": ingest / N if ingest else None}
    print(f"\ndaemons still running: {len(live)} of {N}")
    print(f"per-daemon RSS: median {med(rss):.1f} MiB, max {rss[-1]:.1f} MiB")
    print(f"per-daemon CPU (1s polls of 8 GPUs): median {med(cpu):.2f}%, max {cpu[-1]:.2f}% of one core")
    if None in (series, per_scrape, ingest):
        print(f"Prometheus figures missing: series={series} per_scrape={per_scrape} ingest={ingest}")
        ok = False
    else:
        print(f"{MODE}: {series:.0f} series, {per_scrape:.0f} samples per node per scrape, "
              f"{ingest:.0f} samples/s ({ingest / N:.1f} per node)")
    ok &= len(live) == N
    if os.environ.get("RESULTS"):
        pathlib.Path(os.environ["RESULTS"]).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(os.environ["RESULTS"]) / f"fleet-sim-{MODE}.json").write_text(json.dumps(results, indent=2))
    print("\nfleet-sim: " + ("PASSED" if ok else "FAILED"))
    sys.exit(0 if ok else 1)
finally:
    cleanup()
PY
