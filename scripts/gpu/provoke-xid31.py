#!/usr/bin/env python3
"""A real Xid 31 on GPU 0 without harm: a one-thread CUDA kernel (through CuPy) writes to an
unmapped address, an application fault the driver reports as Xid 31 (GPU memory page fault)
and survives. Used by gpu-xid-check.sh and handover-check.sh; never a reset, no clock, power
or MIG change."""
import cupy as cp

bad = cp.RawKernel(r'extern "C" __global__ void bad(unsigned long long p) { *(volatile int*)p = 1; }', "bad")
try:
    bad((1,), (1,), (cp.uint64(0x7ff000000000),))
    cp.cuda.runtime.deviceSynchronize()
    print("no fault?")
except Exception as e:
    print("the kernel faulted as intended:", type(e).__name__, str(e)[:80])
