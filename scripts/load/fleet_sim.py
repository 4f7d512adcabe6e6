#!/usr/bin/env python3
"""The fleet simulation's run (scripts/load/fleet-sim.sh says what it does and how to call it):
real daemons and replayed nodes, the monitoring stack, the faults and what their alerts cost.
Where each fault goes and what each node's simulated GPUs read is fleet_layout.py's, which
scripts/load/test_fleet_layout.py tests."""
import atexit, json, os, pathlib, re, shutil, signal, socket, subprocess, sys, tempfile, threading, time
import urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_layout  # noqa: E402 (beside this file)

N = int(sys.argv[1])
MODE = os.environ.get("MODE", "victoriametrics")
if MODE not in ("prometheus", "victoriametrics"):
    raise SystemExit(f"MODE={MODE}: write prometheus or victoriametrics")
FAULTS = os.environ.get("FAULTS", "1") != "0"
ROOT = pathlib.Path.cwd()
BIN = ROOT / "target/release/gpuwarden"
LIB = ROOT / "target/release/libgpuwarden_sim_nvml.so"
CUDA = ROOT / "target/release/libgpuwarden_sim_cuda.so"
RULES = ROOT / "deploy/prometheus/gpuwarden.rules.yml"
# PROFILE=large: docs/fleet.md's large-fleet profile: scrape and evaluate every 15 s, and the
# daemon's timing of its own polls, which no rule or dashboard reads, off on the nodes
# (`metrics.poll_timing: false`) and dropped at the scrape where a node's config cannot be
# changed (the replayed real H200 pair, recorded with the defaults).
PROFILE = os.environ.get("PROFILE", "default")
if PROFILE not in ("default", "large"):
    raise SystemExit(f"PROFILE={PROFILE}: write default or large")
SCRAPE = 15 if PROFILE == "large" else 5      # seconds
EVAL = 15 if PROFILE == "large" else 1        # seconds
DROP = r"gpuwarden_vendor_call_seconds_total|gpuwarden_poll_(round_)?duration_seconds_bucket"
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
# A failure before the measurement (the template's probes, a node that does not come up) stops
# what was started too.
atexit.register(cleanup)

# ---- the nodes' scenario: the demo's eight H200s with every fault removed, ids of its own -----
demo = (ROOT / "config/demo-scenario.yaml").read_text()
quiet = fleet_layout.quiet_scenario(demo)
device_block, edit = fleet_layout.device_block, fleet_layout.edit
# Where the faults go (fractions of the fleet), and the nodes of the batch job: every GPU of
# each under the same load (the same clocks, power and activity), so none is slower than the
# others until the fault makes one so.
try:
    layout = fleet_layout.place(N, int(os.environ.get("REAL", "16")))
except ValueError as e:
    raise SystemExit(str(e))
FAULT_AT, JOB_NODES, STRAGGLER_PROBE, real_set = layout.fault_at, layout.job_nodes, layout.straggler_probe, layout.real
JOB = "777"
busy = fleet_layout.busy_scenario(quiet)
def scenario_for(i):
    return fleet_layout.scenario_for(i, quiet, busy, JOB_NODES)
def write_atomic(path, text):
    tmp = path.with_suffix(".tmp"); tmp.write_text(text); os.replace(tmp, path)

def start_daemon(name, scenario, jobs_id=None, extra="", env_extra=None):
    d = WORK / name; d.mkdir()
    port = free_port()
    (d / "scenario.yaml").write_text(scenario)
    (d / "kmsg").write_text("")
    jobs = ""
    if jobs_id:
        (d / "jobs").mkdir(mode=0o755)
        for gpu in range(8):
            (d / "jobs" / str(gpu)).write_text(jobs_id + "\n")
        jobs = f"hpc_jobs:\n  mapping_dir: {d / 'jobs'}\n"
    # Four healthy InfiniBand ports at NDR (the fixture tree), read every network.interval.
    shutil.copytree(ROOT / "tests/fixtures/sysfs/ndr-ib", d / "sysfs", symlinks=True)
    (d / "config.yaml").write_text(
        f"listen: 127.0.0.1:{port}\npoll:\n  interval: 1s\n  timeout: 500ms\n"
        f"nvml:\n  library_path: {LIB}\nxid:\n  kernel_log_path: {d / 'kmsg'}\n"
        # The simulated GPUs are on no PCI bus: no census (the tree's GPUs are not these).
        f"amd:\n  sysfs_root: {d / 'sysfs'}\npci_census: false\n"
        # Each node its own health journal and local socket, as on real nodes.
        f"state:\n  path: {d / 'state.db'}\nlocal_api:\n  socket: {d / 'gpuwarden.sock'}\n{jobs}{extra}"
        # The large-fleet profile on the node: no timing of its own polls.
        + ("metrics:\n  poll_timing: false\n" if PROFILE == "large" else ""))
    env = dict(os.environ, GPUWARDEN_SIM_NVML_SCENARIO=str(d / "scenario.yaml"), RUST_LOG="warn", **(env_extra or {}))
    p = subprocess.Popen([str(BIN), "run", "--config", str(d / "config.yaml")], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(d / "daemon.log", "w"))
    procs.append(p)
    return d, port, p

def get(url, timeout=5):
    return urllib.request.urlopen(url, timeout=timeout).read().decode()

# ---- the template: a daemon over the simulated NVML and CUDA, its probes done, a batch job ----
cuda_dir = WORK / "cuda"; cuda_dir.mkdir()
for name in ("libcuda.so", "libcuda.so.1", "libcublas.so", "libcublas.so.13"):
    (cuda_dir / name).symlink_to(CUDA)
probes = ("probe:\n  schedule: true\n  interval: 1s\n  memory_cap_mib: 256\n  max_utilization: 1.0\n  timeout: 20s\n"
          "  durations: {gemm_bf16: 200ms, fma_fp32: 200ms, hbm_copy: 200ms, pcie_h2d: 200ms, pcie_d2h: 200ms}\n")
# Under the batch job's load, as the job's real nodes: every GPU at the same clocks.
template_scenario = busy.replace("GPU-5f2c7a1e-0000-", "GPU-5f2c7a1e-9999-")
tdir, tport, tproc = start_daemon("template", template_scenario, "TEMPLATE", probes,
                                  {"LD_LIBRARY_PATH": str(cuda_dir)})
t0 = time.time()
while True:
    try:
        body = get(f"http://127.0.0.1:{tport}/metrics")
        # The demo's GPUs that run no process (0, 4 and 6): the probe waits for the others.
        if body.count('test="gemm_bf16",figure="sustained"') >= 3 and "gpu_job_info" in body:
            break
    except Exception:
        pass
    if time.time() - t0 > 120:
        raise SystemExit(f"the template daemon's probes did not finish in 120 s: {(tdir / 'daemon.log').read_text()[-2000:]}")
    time.sleep(1)
# Its probes stop here: the frames show a node between probes, as most of a fleet is.
(tdir / "config.yaml").write_text((tdir / "config.yaml").read_text().replace("schedule: true", "schedule: false"))
tproc.send_signal(signal.SIGHUP)
time.sleep(3)
frames = []
for _ in range(2):
    at_time = time.time()
    frames.append(WORK / f"template-{len(frames)}.prom")
    frames[-1].write_text(f"# recorded at {at_time} from the template daemon\n" + get(f"http://127.0.0.1:{tport}/metrics"))
    time.sleep(5)
tproc.kill(); tproc.wait()
fixtures = ROOT / "tests/fixtures/fleet"

# ---- the replayed nodes: one process --------------------------------------------------------
replay_port = free_port()
replay = subprocess.Popen([sys.executable, str(ROOT / "scripts/load/fleet-replay.py"), "--port", str(replay_port),
    "--nodes", str(N), "--template", f"{frames[0]},{frames[1]},9",
    "--template", f"{fixtures / 'h200x2-frame1.prom'},{fixtures / 'h200x2-frame2.prom'},1"],
    stdout=open(WORK / "replay.log", "w"), stderr=subprocess.STDOUT)
procs.append(replay)

# ---- the real nodes --------------------------------------------------------------------------
nodes = []
for i in range(N):
    if i in real_set:
        d, port, p = start_daemon(f"node-{i:04d}", scenario_for(i), JOB if i in JOB_NODES else None)
        nodes.append(dict(i=i, dir=d, port=port, instance=f"127.0.0.1:{port}", proc=p, real=True))
    else:
        nodes.append(dict(i=i, instance=f"node-{i:04d}:9100", real=False))
real_nodes = [n for n in nodes if n["real"]]
print(f"{N} nodes: {len(real_nodes)} real daemons, {N - len(real_nodes)} replayed", flush=True)

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
am = subprocess.Popen(["prometheus-alertmanager", f"--config.file={WORK / 'alertmanager.yml'}",
    f"--storage.path={WORK / 'am-data'}", f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
    stdout=subprocess.DEVNULL, stderr=open(WORK / "alertmanager.log", "w"))
procs.append(am)

# ---- Prometheus, or vmagent + VictoriaMetrics + vmalert: every node every 5 s, the shipped ----
# ---- rules evaluated every second -----------------------------------------------------------
prom_port = free_port()
# A replayed node is asked at the replay process with its number; it keeps its own instance.
gpuwarden_job = {
    "job_name": "gpuwarden",
    "static_configs": [{"targets": [n["instance"] for n in nodes]}],
    "relabel_configs": [
        {"source_labels": ["__address__"], "target_label": "instance"},
        {"source_labels": ["__address__"], "regex": r"node-0*(\d+):9100", "target_label": "__param_node", "replacement": "$1"},
        {"source_labels": ["__address__"], "regex": r"node-\d+:9100", "target_label": "__address__",
         "replacement": f"127.0.0.1:{replay_port}"},
    ],
}
if PROFILE == "large":
    gpuwarden_job["metric_relabel_configs"] = [{"source_labels": ["__name__"], "regex": DROP, "action": "drop"}]
def log(name):
    return open(WORK / f"{name}.log", "w")
stack = {"alertmanager": am, "replay": replay}
self_port = {}
if MODE == "prometheus":
    prom_config = {
        "global": {"scrape_interval": f"{SCRAPE}s", "evaluation_interval": f"{EVAL}s"},
        "rule_files": [str(RULES)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        "scrape_configs": [gpuwarden_job,
            # Prometheus's own metrics: head series, ingestion, rule groups.
            {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]}],
    }
    (WORK / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
    stack["prometheus"] = subprocess.Popen(["prometheus", f"--config.file={WORK / 'prometheus.yml'}",
        f"--storage.tsdb.path={WORK / 'prom-data'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=log("prometheus"))
    procs.append(stack["prometheus"])
else:
    agent_port, vmalert_port = free_port(), free_port()
    self_port = {"vmagent": agent_port, "vmalert": vmalert_port}
    scrape = {
        "global": {"scrape_interval": f"{SCRAPE}s"},
        "scrape_configs": [gpuwarden_job,
            # VictoriaMetrics' own metrics: rows inserted, for the figures.
            {"job_name": "victoriametrics", "static_configs": [{"targets": [f"127.0.0.1:{prom_port}"]}]}],
    }
    (WORK / "scrape.yml").write_text(yaml.safe_dump(scrape))
    vm = f"http://127.0.0.1:{prom_port}"
    # A query sees samples up to a second old (the default waits 30 s for late samples, which
    # would add 30 s to every alert).
    stack["victoria-metrics"] = subprocess.Popen(["victoria-metrics", f"-storageDataPath={WORK / 'vm-data'}",
        f"-httpListenAddr=127.0.0.1:{prom_port}", "-retentionPeriod=1d", "-search.latencyOffset=1s",
        "-loggerLevel=ERROR"], stdout=subprocess.DEVNULL, stderr=log("victoria-metrics"))
    stack["vmagent"] = subprocess.Popen(["vmagent", f"-promscrape.config={WORK / 'scrape.yml'}",
        f"-remoteWrite.url={vm}/api/v1/write", f"-remoteWrite.tmpDataPath={WORK / 'vmagent-data'}",
        "-remoteWrite.flushInterval=1s", f"-httpListenAddr=127.0.0.1:{agent_port}", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=log("vmagent"))
    stack["vmalert"] = subprocess.Popen(["vmalert", f"-rule={RULES}", f"-datasource.url={vm}",
        f"-remoteWrite.url={vm}", f"-remoteRead.url={vm}", f"-notifier.url=http://127.0.0.1:{am_port}",
        f"-evaluationInterval={EVAL}s", f"-httpListenAddr=127.0.0.1:{vmalert_port}", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=log("vmalert"))
    procs.extend([stack["victoria-metrics"], stack["vmagent"], stack["vmalert"]])

def query(expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        return json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
    except Exception:
        return []
def scalar(expr):
    r = query(expr)
    return float(r[0]["value"][1]) if r else None
def exposition(port):
    """A process's own /metrics, as {series text: value}."""
    out = {}
    try:
        for line in get(f"http://127.0.0.1:{port}/metrics").splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                try: out[series] = float(value)
                except ValueError: pass
    except Exception:
        pass
    return out

ticks = os.sysconf("SC_CLK_TCK")
def cpu_seconds(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / ticks
def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

def costs(seconds):
    """Each process's CPU (% of one core) and RSS over `seconds`, and the rule groups' times."""
    watched = dict(stack, **{f"daemon-{n['i']}": n["proc"] for n in real_nodes if n["proc"].poll() is None})
    c0 = {k: cpu_seconds(p.pid) for k, p in watched.items()}; w0 = time.time()
    groups0 = rule_groups()
    # Prometheus says only each group's last evaluation time: read it every 5 s and average.
    last_seen = {}
    while time.time() - w0 < seconds:
        time.sleep(min(5, max(0, seconds - (time.time() - w0))))
        if MODE == "prometheus":
            for g, (last, _, _) in prometheus_last_durations().items():
                last_seen.setdefault(g, []).append(last)
    c1 = {k: cpu_seconds(p.pid) for k, p in watched.items()}; w1 = time.time()
    groups1 = rule_groups()
    cpu = {k: 100 * (c1[k] - c0[k]) / (w1 - w0) for k in c0}
    rss = {k: rss_mib(p.pid) for k, p in watched.items()}
    evals = {}
    for g, (total, count, missed) in groups1.items():
        t, c, m = groups0.get(g, (0, 0, 0))
        if count > c:
            if MODE == "prometheus":
                mean = sum(last_seen[g]) / len(last_seen[g]) if last_seen.get(g) else total / count
            else:
                mean = (total - t) / (count - c)
            evals[g] = {"mean_seconds": mean, "evaluations": count - c, "missed": missed - m}
    return cpu, rss, evals

def per_group(port, group, names):
    """{group: (value of each of `names`, 0 where absent)} from a process's own /metrics; `group`
    is a regex whose first capture names the rule group."""
    out = {}
    for series, value in exposition(port).items():
        g = re.search(group, series)
        if not g: continue
        row = list(out.get(g.group(1), (0,) * len(names)))
        for i, name in enumerate(names):
            if series.startswith(name): row[i] = value
        out[g.group(1)] = tuple(row)
    return out

def prometheus_last_durations():
    """{group: (its last evaluation's seconds, evaluations, missed)} from Prometheus's metrics."""
    return per_group(prom_port, r'rule_group="[^"]*;([^"]+)"',
                     ("prometheus_rule_group_last_duration_seconds", "prometheus_rule_group_iterations_total",
                      "prometheus_rule_group_iterations_missed_total"))

def rule_groups():
    """{group: (seconds spent evaluating, evaluations, missed)} from the rule evaluator's own
    metrics; Prometheus says only each group's last duration, taken for every evaluation."""
    if MODE == "prometheus":
        return {g: (last * c, c, m) for g, (last, c, m) in prometheus_last_durations().items()}
    return per_group(self_port["vmalert"], r'group="([^"]+)"',
                     ("vmalert_iteration_duration_seconds_sum", "vmalert_iteration_duration_seconds_count",
                      "vmalert_iteration_missed_total"))

try:
    t0 = time.time()
    up_query = 'count(up{job="gpuwarden"} == 1)'
    while scalar(up_query) != N:
        if time.time() - t0 > 300:
            raise SystemExit(f"only {scalar(up_query)} of {N} nodes came up")
        time.sleep(2)
    print(f"{N} nodes up and scraped after {time.time() - t0:.0f}s; settling for 30s", flush=True)
    time.sleep(30)
    firing_before = query('ALERTS{alertstate="firing"}')
    if firing_before or received:
        raise SystemExit(f"alerts before any fault: {firing_before or received}")
    results = {"nodes": N, "gpus": None, "real_daemons": len(real_nodes), "replayed": N - len(real_nodes),
               "scrape_interval_s": SCRAPE, "evaluation_interval_s": EVAL, "mode": MODE, "profile": PROFILE, "faults": []}
    ok = True

    # ---- faults -------------------------------------------------------------------------------
    injected = {}
    budget = {}
    if FAULTS:
        # Each alert with its group: its `for`, the group's interval and name.
        rules = {r["alert"]: (r, g) for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
        group_of = {alert: g["name"] for alert, (_, g) in rules.items()}
        def seconds(text):
            return sum(int(v) * {"s": 1, "m": 60, "h": 3600}[u] for v, u in re.findall(r"(\d+)([smh])", text or ""))
        def for_seconds(alert):
            return seconds(rules[alert][0].get("for"))
        def group_interval(alert):
            return seconds(rules[alert][1].get("interval"))
        def reads_own_records(alert):
            rule, group = rules[alert]
            return any(r["record"] in rule["expr"] for r in group["rules"] if "record" in r)
        node_at = {n["i"]: n for n in nodes}
        def port_down(n):
            port = (n["dir"] / "sysfs/sys/class/infiniband/mlx5_2").resolve() / "ports/1"
            write_atomic(port / "phys_state", "3: Disabled\n")
            write_atomic(port / "state", "1: DOWN\n")
        def xid79(n):
            open(n["dir"] / "kmsg", "a").write("[ 4012.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=2311, name=python3, GPU has fallen off the bus.\n")
        def refused_drain(n):
            # The third node's Slurm check finds max_drained nodes already drained: it keeps
            # the node in service and says so (deploy/slurm/healthcheck.sh does this).
            xid79(n)
            subprocess.run([str(BIN), "health", "report", "--socket", str(n["dir"] / "gpuwarden.sock"),
                            "--guard", "refused", "--guard-drained", "2", "--guard-nodes", str(N), "--guard-max", "2"],
                           check=True, stdout=subprocess.DEVNULL)
        def probe_straggler(n):
            q = urllib.parse.urlencode([("node", n["i"]), ("match", 'gpu="0",'), ("match", 'test="gemm_bf16",figure="sustained"'),
                                        ("scale", "0.85")])
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{replay_port}/fault?{q}", method="POST"), timeout=5)
        # A replayed node whose template has GPU 0's GEMM probe (one in ten replays two real
        # H200s without probe figures).
        for i in list(range(STRAGGLER_PROBE, N)) + list(range(STRAGGLER_PROBE)):
            if i not in real_set and re.search(r'gpu_probe_flops_per_second\{gpu="0",[^}]*test="gemm_bf16",figure="sustained"',
                                                get(f"http://127.0.0.1:{replay_port}/metrics?node={i}")):
                straggler_node = node_at[i]
                break
        faults = [
            ("thermal violation", "GpuThermalViolation", node_at[FAULT_AT["thermal"]], "0",
             lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 0,
                 lambda b: b.replace("clock_events: { active: 1,", "clock_events: { active: 64,").replace("temperature: 34", "temperature: 91")))),
            ("fatal XID", "GpuXidFatal", node_at[FAULT_AT["xid"]], "1", xid79),
            ("fatal XID", "GpuXidFatal", node_at[FAULT_AT["xid2"]], "1", xid79),
            ("fatal XID, drain refused", "GpuXidFatal", node_at[FAULT_AT["xid3"]], "1", refused_drain),
            ("lost GPU", "GpuLost", node_at[FAULT_AT["lost"]], "3",
             lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 3, lambda b: b + "    lost: true\n"))),
            ("PCIe width drop", "GpuPcieLinkDegraded", node_at[FAULT_AT["pcie"]], "5",
             lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 5,
                 lambda b: b.replace("width: 16, width_max: 16", "width: 8, width_max: 16")))),
            # A node alert: no gpu label.
            ("network port down", "NicPortDown", node_at[FAULT_AT["port"]], "", port_down),
            # One GPU of job 777 (four nodes, 32 GPUs) held at 1400 MHz by its power cap while its
            # peers run at 1755: 20% below the job's median.
            ("job straggler", "GpuJobStraggler", node_at[JOB_NODES[2]], "3",
             lambda n: write_atomic(n["dir"] / "scenario.yaml", edit(scenario_for(n["i"]), 3,
                 lambda b: b.replace("sm: 1755, memory: 3201, graphics: 1755", "sm: 1400, memory: 3201, graphics: 1400")
                            .replace("clock_events: { active: 0,", "clock_events: { active: 4,")))),
            # A replayed GPU whose last GEMM probe reads 15% below its model's fleet median.
            ("probe straggler", "GpuProbeStraggler", straggler_node, "0", probe_straggler),
        ]
        inject_at = time.time()
        for name, alert, node, gpu, inject in faults:
            inject(node)
            injected[(alert, node["instance"], gpu)] = (name, time.time())
        # What follows from them: the same Xid on three nodes within 10 minutes (no instance),
        # and the drain guard that kept the third in service.
        injected[("GpuXidFleetPattern", None, "")] = ("fleet XID pattern", inject_at)
        injected[("GpuwardenDrainGuardActive", node_at[FAULT_AT["xid3"]]["instance"], "")] = ("drain refused", inject_at)
        print("injected: " + ", ".join(f"{name} on node {node['i']}" + (f" GPU {gpu}" if gpu else "") for name, _, node, gpu, _ in faults), flush=True)
        # The rule's `for`, how often the daemon reads what the fault changes (PCIe width is in
        # the slow tier, poll.slow_interval 10 s; the network ports every network.interval,
        # 10 s, and nic_port_down waits its 30 s debounce; the rest every 1 s poll or at once),
        # two scrapes, the rule group's interval (and, below, its evaluation's time), and 4 s for
        # Alertmanager. vmalert writes a recording rule's result to the store asynchronously, so
        # an alert that reads a record of its own group (the stragglers) sees it one evaluation
        # later (vmalert's documented limitation on chained rules; Prometheus sees it in the
        # same evaluation): one more group interval there.
        read_every = {"GpuPcieLinkDegraded": 10, "NicPortDown": 10 + 30}
        def chained(alert):
            return MODE == "victoriametrics" and reads_own_records(alert)
        budget = {key: for_seconds(key[0]) + read_every.get(key[0], 1) + 2 * SCRAPE
                  + max(EVAL, group_interval(key[0])) * (2 if chained(key[0]) else 1) + 4 for key in injected}

    # ---- costs, while the alerts are pending -------------------------------------------------
    time.sleep(30)
    cpu, rss, evals = costs(60)
    daemons = sorted(v for k, v in cpu.items() if k.startswith("daemon-"))
    daemon_rss = sorted(v for k, v in rss.items() if k.startswith("daemon-"))
    med = lambda xs: xs[len(xs) // 2] if xs else None
    results["stack"] = {k: {"cpu_percent_of_one_core": cpu[k], "rss_mib": rss[k]} for k in stack}
    results["daemon_cpu_percent_of_one_core"] = {"median": med(daemons), "max": daemons[-1] if daemons else None}
    results["daemon_rss_mib"] = {"median": med(daemon_rss), "max": daemon_rss[-1] if daemon_rss else None}
    results["rule_groups"] = evals
    if MODE == "prometheus":
        series = scalar("prometheus_tsdb_head_series")
        ingest = scalar("rate(prometheus_tsdb_head_samples_appended_total[1m])")
    else:
        # Series that took a sample within the hour (VictoriaMetrics' own count: a query over
        # every series is refused past its limit), and rows stored per second (scraped and
        # written back by vmalert).
        series = scalar('max(vm_cache_entries{job="victoriametrics",type="storage/hour_metric_ids"})')
        ingest = scalar('sum(rate(vm_rows_inserted_total{job="victoriametrics"}[1m]))')
    per_scrape = scalar('avg(scrape_samples_scraped{job="gpuwarden"})')
    kept_per_scrape = scalar('avg(scrape_samples_post_metric_relabeling{job="gpuwarden"})')
    scrape_p99 = scalar('quantile(0.99, scrape_duration_seconds{job="gpuwarden"})')
    # The slowest targets by their last scrape: which kind of node (real or replayed) they are.
    slowest = [(r["metric"].get("instance"), float(r["value"][1]))
               for r in query('topk(5, scrape_duration_seconds{job="gpuwarden"})')]
    real_instances = {n["instance"] for n in real_nodes}
    results["slowest_scrapes"] = [{"instance": i, "seconds": v, "real": i in real_instances} for i, v in slowest]
    results["gpus"] = scalar('count(gpu_info)')
    results["store"] = {"series": series, "samples_per_scrape_per_node": per_scrape,
                        "samples_kept_per_scrape_per_node": kept_per_scrape, "samples_per_second": ingest,
                        "samples_per_second_per_node": ingest / N if ingest else None, "scrape_duration_p99_s": scrape_p99}
    print(f"\n{MODE}: {series} series, {per_scrape} samples per node per scrape, {ingest} samples/s; "
          f"{results['gpus']} GPUs; scrape p99 {scrape_p99}s", flush=True)
    print("  slowest scrapes: " + ", ".join(f"{s['instance']} {s['seconds']:.3f}s ({'real' if s['real'] else 'replayed'})"
                                            for s in results["slowest_scrapes"]), flush=True)
    for k in stack:
        print(f"  {k:<18} CPU {cpu[k]:6.1f}% of a core, RSS {rss[k]:7.1f} MiB")
    print(f"  real daemons: CPU median {med(daemons):.2f}% (max {daemons[-1]:.2f}), RSS median {med(daemon_rss):.1f} MiB")
    slow = sorted(evals.items(), key=lambda kv: -kv[1]["mean_seconds"])
    for g, e in slow:
        print(f"  rule group {g:<34} {1000 * e['mean_seconds']:8.1f} ms per evaluation, {e['missed']:.0f} missed")
    if None in (series, per_scrape, ingest):
        print(f"store figures missing: series={series} per_scrape={per_scrape} ingest={ingest}")
        ok = False

    # ---- the alerts --------------------------------------------------------------------------
    if injected:
        # An alert exists only once its group's evaluation has run: add the time one took here.
        for key in budget:
            budget[key] = round(budget[key] + evals.get(group_of[key[0]], {}).get("mean_seconds", 0), 1)
        deadline = max(at for _, at in injected.values()) + max(budget.values()) + 30
        while time.time() < deadline and not all(k in received for k in injected):
            time.sleep(0.5)
        print(f"\n{'fault':<26} {'alert':<26} {'node':>5} {'latency':>9} {'budget':>8}  verdict")
        for key, (name, at_time) in injected.items():
            latency = received[key] - at_time if key in received else None
            good = latency is not None and latency <= budget[key]
            ok &= good
            node = next((n["i"] for n in nodes if n["instance"] == key[1]), "-")
            print(f"{name:<26} {key[0]:<26} {node:>5} {('%.1fs' % latency) if latency is not None else 'never':>9} {budget[key]:>7}s  {'ok' if good else 'LATE'}")
            results["faults"].append({"fault": name, "alert": key[0], "node": node, "gpu": key[2],
                                      "latency_s": latency, "budget_s": budget[key]})
        # The stragglers name the slowed GPU alone.
        for alert in ("GpuJobStraggler", "GpuProbeStraggler"):
            seen = sorted({k for k in all_alerts if k[0] == alert})
            wanted = sorted(k for k in injected if k[0] == alert)
            print(f"{alert} for: {seen} (expected {wanted})")
            ok &= seen == wanted
            results[f"{alert}_alerts"] = seen
    else:
        time.sleep(30)
    faulty = {k[1] for k in injected}
    stray = sorted({k for k in all_alerts if k[1] not in faulty}, key=str)
    print(f"alerts for nodes without a fault: {stray or 'none'}")
    ok &= not stray
    results["stray_alerts"] = stray
    live = [n for n in real_nodes if n["proc"].poll() is None]
    print(f"real daemons still running: {len(live)} of {len(real_nodes)}")
    ok &= len(live) == len(real_nodes)
    if os.environ.get("RESULTS"):
        out = pathlib.Path(os.environ["RESULTS"]); out.mkdir(parents=True, exist_ok=True)
        (out / f"fleet-sim-{MODE}-{N}{'' if PROFILE == 'default' else '-' + PROFILE}{'' if FAULTS else '-nofaults'}.json").write_text(json.dumps(results, indent=2, default=str))
    print("\nfleet-sim: " + ("PASSED" if ok else "FAILED"))
    sys.exit(0 if ok else 1)
finally:
    cleanup()
