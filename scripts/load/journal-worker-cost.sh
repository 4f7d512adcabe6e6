#!/usr/bin/env bash
# What one journal batch costs: the daemon runs `gpuwarden journal-worker` (a child process)
# for each batch it writes. Runs N one-row batches against a journal file and prints the
# wall time and CPU (user+sys of the children) per batch, and the worker's peak RSS.
#
#   scripts/load/journal-worker-cost.sh BINARY [STATE_FILE]      (N=200 by default)
set -euo pipefail
bin=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
state=${2:-$work/state.db}
n=${N:-200}
request() {
  printf '{"request":"write","path":"%s","boot_id":"cost","host":"bench","items":[{"Insert":{"event":{"at":%s,"kind":"health","gpu":{"uuid":"GPU-cost","serial":"1","pci_bus_id":"00000000:19:00.0","index":0},"summary":"ok -> degraded","details":{"from":"ok","to":"degraded"}},"group":null}}],"facts":[],"counts":[],"kmsg_sequence":null,"prune":null}' "$state" "$(date +%s)"
}
request > "$work/request.json"
"$bin" journal-worker < "$work/request.json" | grep -q '"Ok"' || { echo "the worker failed:"; "$bin" journal-worker < "$work/request.json"; exit 1; }
python3 - "$bin" "$work/request.json" "$n" <<'PY'
import resource, subprocess, sys, time
binary, request, n = sys.argv[1], open(sys.argv[2], "rb").read(), int(sys.argv[3])
start = time.monotonic()
for _ in range(n):
    subprocess.run([binary, "journal-worker"], input=request, stdout=subprocess.DEVNULL, check=True)
wall = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{n} one-row batches: {wall * 1000 / n:.2f} ms wall, "
      f"{(usage.ru_utime + usage.ru_stime) * 1000 / n:.2f} ms CPU (user+sys) per batch; "
      f"worker peak RSS {usage.ru_maxrss / 1024:.1f} MiB")
PY
