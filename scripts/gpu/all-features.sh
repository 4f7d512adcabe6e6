# Sourced by footprint.sh and call-breakdown.sh: one config with every feature on
# (dcgm-exporter compat, per-process series, per-link NVLink, a job mapping directory with one
# job), listening on $PORT, in $work/config.yaml, and a PyTorch bf16 matmul that keeps a
# compute process on GPU 0 (so the per-process calls run) until the caller exits.
# FEATURES=defaults writes the default config instead (only `listen`: the journal, where the
# binary has one, goes to /var/lib/gpuwarden/state.db, which the caller makes).
work=$(mktemp -d)
mkdir -p "$work/jobs"
echo 48217 > "$work/jobs/0"
if [ "${FEATURES:-all}" = defaults ]; then
cat > "$work/config.yaml" <<YAML
listen: 127.0.0.1:$PORT
YAML
else
source "$(dirname "${BASH_SOURCE[0]}")/every-feature.sh"
{
  echo "listen: 127.0.0.1:$PORT"
  every_feature_yaml "$work/jobs"
  printf 'state:\n  path: %s\n' "$work/state.db"
} > "$work/config.yaml"
fi
python3 - <<'PY' &
import torch, time
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
end = time.time() + 3600
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()
    time.sleep(0.05)
PY
load=$!
trap 'kill $load 2>/dev/null; rm -rf "$work"' EXIT
# Let the workload's CUDA context come up before anything is measured.
sleep 10
