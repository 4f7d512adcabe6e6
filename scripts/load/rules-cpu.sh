#!/usr/bin/env bash
# The daemon's idle CPU with and without the operator's rules: `gpuwarden run --demo` (eight
# simulated GPUs, poll 1 s) with no rule, then with the ten shipped in deploy/rules/ (its
# custom_rules_dir), alternately, each run SECONDS long after a 15 s warm-up; the CPU time the
# process took (utime + stime from /proc/PID/stat) over the run, as a share of one core, and
# its resident memory at the end.
#
#   scripts/load/rules-cpu.sh [BINARY] [SECONDS] [PAIRS]
#
# docs/performance.md, "Operator rules", has the figures and the machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$root/target/release/gpuwarden}
seconds=${2:-120}
pairs=${3:-2}
work=$(mktemp -d)
daemon=""
trap '[ -n "$daemon" ] && kill "$daemon" 2>/dev/null; rm -rf "$work"' EXIT
ticks=$(getconf CLK_TCK)

printf 'health:\n  custom_rules_dir: ""\n' > "$work/none.yaml"
mkdir "$work/rules.d"
cp "$root/deploy/rules/operator-examples.yaml" "$root/deploy/rules/builtins-as-rules.yaml" "$work/rules.d/"
printf 'health:\n  custom_rules_dir: %s\n' "$work/rules.d" > "$work/ten.yaml"

cpu_share() {
    local config=$1 port=$2
    "$bin" run --demo --config "$config" --listen "127.0.0.1:$port" > "$work/log" 2>&1 &
    local pid=$!
    daemon=$pid
    sleep 15
    local before after
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    sleep "$seconds"
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    curl -fsS -o "$work/metrics" "http://127.0.0.1:$port/metrics" || true
    if ! grep -q '^gpu_up' "$work/metrics"; then
        echo "the daemon did not serve metrics; its log:" >&2
        cat "$work/log" >&2
        exit 1
    fi
    grep '^gpuwarden_custom_rule_up' "$work/metrics" | sort > "$work/rules" || true
    kill -TERM "$pid"
    wait "$pid" || true
    daemon=""
    awk -v b="$before" -v a="$after" -v t="$ticks" -v s="$seconds" -v r="$rss_kib" \
        'BEGIN { printf "%.3f %% CPU, %.1f MiB RSS", 100 * (a - b) / t / s, r / 1024 }'
}

echo "idle CPU of gpuwarden run --demo, % of one core over ${seconds}s ($(nproc) cores, $(uname -m))"
for pair in $(seq 1 "$pairs"); do
    none=$(cpu_share "$work/none.yaml" 19181)
    ten=$(cpu_share "$work/ten.yaml" 19182)
    running=$(grep -cE ' 1(\.0)?$' "$work/rules" || true)
    echo "pair $pair: no rules ${none}; ten rules ${ten} (${running} of 10 rules running)"
done
