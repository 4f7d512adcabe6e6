"""The fleet simulation's layout (scripts/load/fleet-sim.sh, fleet_sim.py): each node's simulated
GPUs (the demo's eight H200s with every fault removed, and ids of the node's own), the nodes of a
batch job under the same load, and which nodes get a fault, run a real daemon or carry the one
GPU whose probe is slow. Pure: text and numbers in, text and numbers out
(scripts/load/test_fleet_layout.py)."""

import re
from dataclasses import dataclass


def quiet_scenario(demo):
    """The demo scenario with every fault it shows removed: a node that should never alert."""
    # GPU 2 of the demo runs at 88 C (1 C under slowdown) with both thermal reasons on: cool it.
    return (demo.replace("active: 96, supported: 511", "active: 0, supported: 511")
                .replace("temperature: 88\n", "temperature: 55\n")
                .replace("memory_temperature: 94", "memory_temperature: 61")
                .replace("width: 8, width_max: 16", "width: 16, width_max: 16")
                .replace("uncorrected: 1 }", "uncorrected: 0 }")
                # GPU 6's driver asks for a reset (its pending row remap): it needs none here.
                .replace("recovery_action: 1\n", "recovery_action: 0\n"))


def busy_scenario(quiet):
    """Every GPU of a batch job's node under the same load (clocks, power, activity), so none is
    slower than the others until a fault makes one so."""
    busy = re.sub(r"utilization: \{ gpu: \d+, memory: \d+ \}", "utilization: { gpu: 100, memory: 50 }", quiet)
    busy = re.sub(r"clocks_mhz: \{ sm: \d+, memory: 3201, graphics: \d+ \}",
                  "clocks_mhz: { sm: 1755, memory: 3201, graphics: 1755 }", busy)
    busy = re.sub(r"power_mw: \d+\n", "power_mw: 600000\n", busy)
    busy = re.sub(r"clock_events: \{ active: \d+,", "clock_events: { active: 0,", busy)
    return re.sub(r"tensor: \d+, dram: \d+,", "tensor: 90, dram: 30,", busy)


def device_block(text, index):
    """Where GPU `index`'s entry of a scenario starts and ends (its UUID ends in the index)."""
    marker = f"-00000000000{index}\n"
    start = text.rfind("  - name:", 0, text.index(marker))
    end = text.find("  - name:", start + 4)
    return start, (end if end >= 0 else len(text))


def edit(text, index, fn):
    """The scenario with GPU `index`'s entry made `fn(entry)`, the rest as it was."""
    s, e = device_block(text, index)
    return text[:s] + fn(text[s:e]) + text[e:]


def scenario_for(i, quiet, busy, job_nodes):
    """Node i's scenario: busy on a job's node, quiet elsewhere; UUIDs and serials of its own."""
    base = busy if i in job_nodes else quiet
    return (base.replace("GPU-5f2c7a1e-0000-", f"GPU-5f2c7a1e-{i:04d}-")
                .replace('serial: "165302400', f'serial: "1{i:04d}400'))


@dataclass
class Layout:
    fault_at: dict       # fault name -> node
    job_nodes: list      # the batch job's four nodes
    straggler_probe: int # the replayed node with one GPU's probe 15 % below the fleet
    real: set            # the nodes that run a real daemon


# The real daemons beyond the faulted and job nodes, as fractions of the fleet, in order.
EXTRA_REAL = (0.02, 0.15, 0.36, 0.5, 0.68, 0.81, 0.95, 0.99, 0.12, 0.6, 0.72, 0.85)


# The fewest nodes from which on every fault, each of the job's four nodes and the slow probe
# land on nodes of their own (below it some sizes make two fractions meet; test_fleet_layout.py
# checks every size up to 5000).
MIN_NODES = 92


def place(n, real_wanted=16):
    """Where each fault goes in a fleet of `n`, every one on a node of its own; ValueError when
    `n` is too small for that."""
    if n < MIN_NODES:
        raise ValueError(f"{n} nodes are too few for a node per fault and four for the job: {MIN_NODES} at least")
    at = lambda frac: min(n - 1, int(n * frac))  # noqa: E731
    fault_at = {"thermal": at(0.07), "xid": at(0.23), "xid2": at(0.31), "xid3": at(0.47), "lost": at(0.42),
                "pcie": at(0.77), "port": at(0.55)}
    job_nodes = sorted({at(f) for f in (0.88, 0.89, 0.90, 0.91)})
    straggler = at(0.63)
    if len(set(fault_at.values()) | set(job_nodes) | {straggler}) < len(fault_at) + 4 + 1:
        raise ValueError(f"{n} nodes put two faults on one node")
    real = set(fault_at.values()) | set(job_nodes)
    for frac in EXTRA_REAL:
        if len(real) >= real_wanted:
            break
        if at(frac) != straggler:
            real.add(at(frac))
    if n <= real_wanted:
        real = set(range(n)) - {straggler}
    return Layout(fault_at, job_nodes, straggler, real)
