#!/usr/bin/env bash
# A year of a busy 8-GPU node in the health journal, to check that it fits state.max_size_mib
# (docs/journal.md, docs/performance.md). The daemon makes the file (its schema, and real rows:
# inventory, verdicts, the demo's XIDs); then Python's sqlite3 adds, at the shapes of those
# rows, 50 XIDs a day, a probe a day on every GPU and a verdict change every hour, for 365
# days. Prints the rows, the file's size, and how long `events` and `report` take on it.
#
#   scripts/load/journal-year.sh [BINARY]      (default target/release/gpuwarden; needs the
#                                              simulated NVML library beside it: cargo build --release --workspace)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/gpuwarden}
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:0
state:
  path: $work/state.db
YAML
"$bin" run --demo --config "$work/config.yaml" >"$work/log" 2>&1 &
pid=$!
sleep 8
kill "$pid"; wait "$pid" || true
python3 - "$work/state.db" <<'PY'
import json, random, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
def template(kind):
    row = db.execute("SELECT boot_id, host, gpu_uuid, serial, pci_bus_id, summary, details FROM events WHERE kind = ? LIMIT 1", (kind,)).fetchone()
    assert row, f"the daemon wrote no {kind} row"
    return row
xid, health = template("xid"), template("health")
gpus = db.execute("SELECT uuid, serial, pci_bus_id FROM gpu_facts").fetchall()
assert len(gpus) == 8, gpus
boot, host = xid[0], xid[1]
day = 86400.0
import time
start = time.time() - 365 * day
def test(name, expected, unit_scale):
    measured = expected * random.uniform(0.97, 1.08)
    return {"test": name, "params": {"bytes": 1 << 30, "iterations": 200}, "duration_seconds": 2.0,
            "burst": measured * 1.01, "sustained": measured, "expected": expected, "pass": True, "skipped": None,
            "under_load": {"samples": 40, "peak_temperature_celsius": 61.0, "peak_memory_temperature_celsius": 55.0,
                           "mean_sm_clock_hertz": 1.98e9, "mean_power_watts": 640.5, "mean_sm_active_ratio": 0.99,
                           "mean_tensor_active_ratio": 0.93, "mean_dram_active_ratio": 0.41,
                           "clock_event_seconds": {"sw_power_cap": 0.0, "sw_thermal_slowdown": 0.0, "hw_slowdown": 0.0}}}
rows = []
for d in range(365):
    t0 = start + d * day
    for i in range(50):
        g = gpus[random.randrange(8)]
        details = json.loads(xid[6]); details["kmsg_sequence"] = d * 1000 + i
        rows.append((t0 + i * 1700.0, boot, host, "xid", g[0], g[1], g[2], xid[5], json.dumps(details)))
    for g in gpus:
        report = {"gpu": 0, "uuid": g[0], "name": "NVIDIA H200", "started": t0 + 3600, "wall_seconds": 14.2,
                  "expectation": "H200", "pass_fraction": 0.9,
                  "tests": [test("gemm_bf16", 700e12, 1), test("fma_fp32", 60e12, 1), test("hbm_copy", 4.1e12, 1),
                            test("pcie_h2d", 52e9, 1), test("pcie_d2h", 52e9, 1)]}
        rows.append((t0 + 3600, boot, host, "probe", g[0], g[1], g[2], "probe passed", json.dumps(report)))
    for h in range(24):
        g = gpus[h % 8]
        rows.append((t0 + h * 3600 + 60, boot, host, "health", g[0], g[1], g[2], health[5], health[6]))
db.executemany("INSERT INTO events (at, boot_id, host, kind, gpu_uuid, serial, pci_bus_id, summary, details) VALUES (?,?,?,?,?,?,?,?,?)", rows)
db.commit()
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
count = db.execute("SELECT count(*) FROM events").fetchone()[0]
pages, size = db.execute("SELECT page_count, page_size FROM pragma_page_count(), pragma_page_size()").fetchone()
by_kind = db.execute("SELECT kind, count(*), sum(length(details) + length(summary)) FROM events GROUP BY kind ORDER BY 2 DESC").fetchall()
print(f"rows: {count} ({len(rows)} added for 365 days)")
for kind, n, text in by_kind:
    print(f"  {kind:<10} {n:>6} rows, {text / max(n, 1):6.0f} bytes of text each")
print(f"file: {pages * size / 2**20:.1f} MiB ({pages} pages of {size} bytes); the default cap is 64 MiB")
PY
for what in "events --since 400d" "events --gpu 3 --kind xid,probe" "report --gpu 3 --json"; do
  s=$(date +%s.%N)
  "$bin" $what --state "$work/state.db" > "$work/out"
  e=$(date +%s.%N)
  printf '%-36s %6.0f ms, %s lines\n' "gpuwarden $what:" "$(echo "($e - $s) * 1000" | bc)" "$(wc -l < "$work/out")"
done
