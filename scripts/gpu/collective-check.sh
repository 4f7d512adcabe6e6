#!/usr/bin/env bash
# The all-reduce across the node's GPUs on real hardware (docs/probe.md, "The GPUs together"):
# what the driver says of the NVLinks (NVML's per-link speed and version fields, nvidia-smi
# nvlink -s, topo -m), then `gpuwarden probe --collective` through the NCCL it finds (the
# system's, else PyTorch's), beside PyTorch's torch.distributed all-reduce of the same size.
# On a machine of one GPU only `--gpus 0` runs: it shows NCCL loads, runs and sums right.
#   scripts/gpu/run.sh collective-check      (its files in the run's results directory)
set -uo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
bin=$GW_BIN
out=$GW_OUT
nvidia-smi -q | grep -m3 -E "Driver Version|CUDA Version|Product Name" > "$out/driver.txt"
nvidia-smi nvlink -s > "$out/nvlink-s.txt" 2>&1
nvidia-smi topo -m > "$out/topo.txt" 2>&1
python3 - > "$out/nvml-nvlink-fields.txt" <<'PY'
import ctypes
nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]
count = ctypes.c_uint()
nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
for gpu in range(count.value):
    dev = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(gpu, ctypes.byref(dev))
    # 91 link count, 90 common speed (MB/s), per link: 164 speed (MB/s), 166 version, 145 state? (GET_STATE)
    asks = [(91, 0), (90, 0)] + [(f, l) for l in range(18) for f in (164, 166)]
    values = (FieldValue * len(asks))()
    for v, (f, s) in zip(values, asks):
        v.fieldId, v.scopeId = f, s
    rc = nvml.nvmlDeviceGetFieldValues(dev, len(asks), values)
    print(f"GPU {gpu}: nvmlDeviceGetFieldValues -> {rc}")
    for v in values:
        print(f"  field {v.fieldId} scope {v.scopeId}: return {v.nvmlReturn} value {v.value}")
PY
lib=$(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 2>/dev/null || python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
echo "NCCL: ${lib:-none found}" > "$out/nccl.txt"
printf 'probe:\n  nccl_library: "%s"\n' "$lib" > "$out/config.yaml"
gpus=$(nvidia-smi -L | wc -l)
failed=0  # a probe that fails fails the check
if [ "$gpus" -ge 2 ]; then
  "$bin" probe --collective --json --config "$out/config.yaml" > "$out/collective.json" 2> "$out/collective.err"
  code=$?
  echo "exit $code" >> "$out/collective.err"
  [ "$code" -eq 0 ] || failed=1
  # A file, not stdin: torch.multiprocessing's spawned children import the main script.
  cat > "$out/torch_all_reduce.py" <<'PY'
import os, sys, time, torch, torch.multiprocessing as mp
def run(rank, n):
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29511")
    dist.init_process_group("nccl", rank=rank, world_size=n)
    torch.cuda.set_device(rank)
    x = torch.ones(64 << 20, device="cuda")  # 256 MiB of fp32, as the probe's
    for _ in range(5): dist.all_reduce(x)
    torch.cuda.synchronize(); t = time.perf_counter(); k = 40
    for _ in range(k): dist.all_reduce(x)
    torch.cuda.synchronize(); s = (time.perf_counter() - t) / k
    if rank == 0:
        print(f"torch {torch.__version__} NCCL {torch.cuda.nccl.version()}: {n} GPUs, busbw {256*2**20/s*2*(n-1)/n/1e9:.1f} GB/s")
    dist.destroy_process_group()
if __name__ == "__main__":
    n = int(sys.argv[1]); mp.spawn(run, args=(n,), nprocs=n)
PY
  python3 "$out/torch_all_reduce.py" "$gpus" > "$out/torch-all-reduce.txt" 2>&1
  echo "== all $gpus GPUs: gpuwarden probe --collective, then PyTorch's all-reduce"
  cat "$out/collective.json" "$out/torch-all-reduce.txt"
fi
"$bin" probe --collective --gpus 0 --json --config "$out/config.yaml" > "$out/collective-one.json" 2> "$out/collective-one.err"
code=$?
echo "exit $code" >> "$out/collective-one.err"
[ "$code" -eq 0 ] || failed=1
echo "== GPU 0 alone: gpuwarden probe --collective --gpus 0 (exit $code)"
"$bin" probe --collective --gpus 0 --config "$out/config.yaml" 2>&1 | tee -a "$out/collective-one.err"
cat "$out/nccl.txt"
exit "$failed"
