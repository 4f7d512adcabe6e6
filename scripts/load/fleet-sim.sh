#!/usr/bin/env bash
# Fleet simulation (docs/fleet.md): N nodes of 8 GPUs. The nodes that get a fault, the four of a
# batch job and a few healthy ones are real gpuwarden daemons over the simulated NVML; the rest
# are replayed by one process (scripts/load/fleet-replay.py) from bodies real gpuwarden daemons
# served: one recorded at the start from a daemon over the simulated NVML (the demo's eight
# H200s, with probe figures and a batch job), and tests/fixtures/fleet's two real H200s for about
# one node in ten. Either vmagent + VictoriaMetrics + vmalert (MODE=victoriametrics, the
# default) or one Prometheus (MODE=prometheus) scrapes every node every 5 s and evaluates the
# shipped rules every second; one real Alertmanager with the shipped inhibit rules sends to a
# webhook in the script.
#
# It injects faults (a thermal violation, a fatal XID on three nodes: the fleet pattern, the
# drain guard refusing one of them, a lost GPU, a PCIe width drop, a network port down, one GPU
# of a batch job across four nodes slowed down, one replayed GPU's probe 15 % below the fleet),
# measures the time from each injection to its alert reaching the webhook, checks that no other
# node alerted, and measures what the monitoring stack costs: series, samples/s, each process's
# CPU and memory, each rule group's evaluation time.
#
#   scripts/load/fleet-sim.sh [N]            N nodes (default 100)
#   FAULTS=0 scripts/load/fleet-sim.sh N     no faults: the costs, and no alert at all
#   MODE=prometheus scripts/load/fleet-sim.sh N
#   RESULTS=dir                              keep the figures as JSON (fleet-sizing.py reads them)
#   REAL=K                                   at least K real daemons (default 16; all when N <= K)
#   PROFILE=large                            docs/fleet.md's large-fleet profile (15 s, fewer series)
#
# Loopback only; bounded: it gives up 12 minutes after the injection at the latest (the job
# straggler's alert waits 10 minutes by design).
# Needs: the release build (cargo build --release --workspace), Debian's prometheus,
# prometheus-alertmanager and victoria-metrics, python3 with PyYAML.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-100}
[ -x target/release/gpuwarden ] && [ -f target/release/libgpuwarden_sim_nvml.so ] \
  || cargo build --release --workspace
# The run itself is fleet_sim.py; where the faults go and what each node reads, fleet_layout.py
# (unit tests: scripts/load/test_fleet_layout.py). At least 92 nodes.
exec python3 scripts/load/fleet_sim.py "$N"
