#!/usr/bin/env python3
"""CPU cost of the NVML calls gpuwarden's poll makes, one by one, and of the same readings
fetched in one nvmlDeviceGetFieldValues call: what decides gpuwarden's CPU use on a real
node (docs/performance.md). Needs only the NVIDIA driver (ctypes, no pynvml).

    python3 scripts/gpu/nvml-call-cost.py [--gpu 0] [--repeat 200]
"""
import argparse
import ctypes
import time

ap = argparse.ArgumentParser()
ap.add_argument("--gpu", type=int, default=0)
ap.add_argument("--repeat", type=int, default=200)
args = ap.parse_args()

nvml = ctypes.CDLL("libnvidia-ml.so.1")
assert nvml.nvmlInit_v2() == 0
dev = ctypes.c_void_p()
assert nvml.nvmlDeviceGetHandleByIndex_v2(args.gpu, ctypes.byref(dev)) == 0
name = ctypes.create_string_buffer(96)
nvml.nvmlDeviceGetName(dev, name, 96)


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_int), ("nvmlReturn", ctypes.c_int),
                ("value", ctypes.c_ulonglong)]


u = ctypes.c_uint()
ull = ctypes.c_ulonglong()
two = (ctypes.c_uint * 2)()
mem = (ctypes.c_ulonglong * 5)()
mem_v2 = (ctypes.c_ulonglong * 5)()
mem_v2[0] = (2 << 24) | 40  # nvmlMemory_v2: version 2, 40 bytes

calls = {
    "nvmlDeviceGetTemperature": lambda: nvml.nvmlDeviceGetTemperature(dev, 0, ctypes.byref(u)),
    "nvmlDeviceGetPowerUsage": lambda: nvml.nvmlDeviceGetPowerUsage(dev, ctypes.byref(u)),
    "nvmlDeviceGetEnforcedPowerLimit": lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(dev, ctypes.byref(u)),
    "nvmlDeviceGetTotalEnergyConsumption": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(ull)),
    "nvmlDeviceGetClockInfo(SM)": lambda: nvml.nvmlDeviceGetClockInfo(dev, 1, ctypes.byref(u)),
    "nvmlDeviceGetUtilizationRates": lambda: nvml.nvmlDeviceGetUtilizationRates(dev, two),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(dev, ctypes.byref(ull)),
    "nvmlDeviceGetMemoryInfo_v2": lambda: nvml.nvmlDeviceGetMemoryInfo_v2(dev, mem_v2),
    "nvmlDeviceGetCurrPcieLinkGeneration": lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(dev, ctypes.byref(u)),
    "nvmlDeviceGetCurrPcieLinkWidth": lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(dev, ctypes.byref(u)),
    "nvmlDeviceGetPcieReplayCounter": lambda: nvml.nvmlDeviceGetPcieReplayCounter(dev, ctypes.byref(u)),
    "nvmlDeviceGetPersistenceMode": lambda: nvml.nvmlDeviceGetPersistenceMode(dev, ctypes.byref(u)),
    "nvmlDeviceGetPerformanceState": lambda: nvml.nvmlDeviceGetPerformanceState(dev, ctypes.byref(u)),
    "nvmlDeviceGetEccMode": lambda: nvml.nvmlDeviceGetEccMode(dev, ctypes.byref(u), ctypes.byref(ctypes.c_uint())),
    "nvmlDeviceGetTotalEccErrors(uncorrected, volatile)": lambda: nvml.nvmlDeviceGetTotalEccErrors(dev, 1, 0, ctypes.byref(ull)),
    # Added 2026-11-23 with gpu_encoder/decoder_utilization_ratio.
    "nvmlDeviceGetEncoderUtilization": lambda: nvml.nvmlDeviceGetEncoderUtilization(dev, ctypes.byref(u), ctypes.byref(ctypes.c_uint())),
    "nvmlDeviceGetDecoderUtilization": lambda: nvml.nvmlDeviceGetDecoderUtilization(dev, ctypes.byref(u), ctypes.byref(ctypes.c_uint())),
    # Added 2026-11-24 with the vGPU licence state (DCGM_FI_DEV_VGPU_LICENSE_STATUS).
    "nvmlDeviceGetVirtualizationMode": lambda: nvml.nvmlDeviceGetVirtualizationMode(dev, ctypes.byref(u)),
}

# nvmlGridLicensableFeatures_t: int isGridLicenseSupported, uint count, then 3 features of
# 284 bytes each (uint code, uint state, char[128] info, char[128] product, uint enabled,
# a 16-byte expiry). 1 KiB holds it with room to spare.
grid = ctypes.create_string_buffer(1024)
calls["nvmlDeviceGetGridLicensableFeatures_v4"] = lambda: nvml.nvmlDeviceGetGridLicensableFeatures_v4(dev, grid)

# NVLink peer-to-peer status (NVML_P2P_CAPS_INDEX_NVLINK = 2) towards the next GPU; on a
# machine of one GPU, towards itself (what the call costs; the answer there means nothing).
count = ctypes.c_uint()
nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
peer = ctypes.c_void_p()
nvml.nvmlDeviceGetHandleByIndex_v2((args.gpu + 1) % max(count.value, 1), ctypes.byref(peer))
calls["nvmlDeviceGetP2PStatus(NVLINK)"] = lambda: nvml.nvmlDeviceGetP2PStatus(dev, peer, 2, ctypes.byref(u))


def fields_call(ids):
    arr = (FieldValue * len(ids))()
    for i, f in enumerate(ids):
        arr[i].fieldId = f
    return lambda: nvml.nvmlDeviceGetFieldValues(dev, len(ids), arr)


# gpuwarden's current field-values call (memory temperature, remapped rows, clock-event
# counters), and one that also carries power, energy, replays and volatile ECC totals.
CURRENT = [82, 142, 143, 144, 145, 74, 76, 251, 252, 253]
WIDER = CURRENT + [186, 83, 94, 3, 4]
calls["nvmlDeviceGetFieldValues(1 field: memory temp)"] = fields_call([82])
calls[f"nvmlDeviceGetFieldValues({len(CURRENT)} fields, gpuwarden's)"] = fields_call(CURRENT)
calls[f"nvmlDeviceGetFieldValues({len(WIDER)} fields, + power, energy, replays, ECC)"] = fields_call(WIDER)

print(f"GPU {args.gpu}: {name.value.decode()}; {args.repeat} calls each; CPU = process user+system time")
print(f"{'call':58} {'CPU ms/call':>12} {'wall ms/call':>13}")
for label, call in calls.items():
    call()
    c0, w0 = time.process_time(), time.perf_counter()
    rc = 0
    for _ in range(args.repeat):
        rc = call()
    cpu = (time.process_time() - c0) / args.repeat * 1e3
    wall = (time.perf_counter() - w0) / args.repeat * 1e3
    print(f"{label:58} {cpu:12.3f} {wall:13.3f}" + ("" if rc == 0 else f"   (returned {rc})"))

# What the licensing calls answer on this GPU (a bare-metal GPU: no vGPU licence).
rc = nvml.nvmlDeviceGetVirtualizationMode(dev, ctypes.byref(u))
print(f"\nvirtualization mode: rc {rc}, mode {u.value} (0 none, 1 passthrough, 2 vGPU guest, 3 vGPU host)")
rc = nvml.nvmlDeviceGetGridLicensableFeatures_v4(dev, grid)
supported, count = ctypes.c_int.from_buffer(grid, 0).value, ctypes.c_uint.from_buffer(grid, 4).value
print(f"grid licensable features: rc {rc}, isGridLicenseSupported {supported}, licensableFeaturesCount {count}")
for i in range(min(count, 3)):
    base = 8 + i * 284
    code, state = ctypes.c_uint.from_buffer(grid, base).value, ctypes.c_uint.from_buffer(grid, base + 4).value
    enabled = ctypes.c_uint.from_buffer(grid, base + 264).value
    product = grid.raw[base + 136:base + 264].split(b"\0")[0].decode(errors="replace")
    print(f"  feature {i}: code {code}, state {state}, enabled {enabled}, product {product!r}")
