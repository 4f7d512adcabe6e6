#!/usr/bin/env python3
"""Runs `gpuwarden probe` under a W^X memory policy (prctl PR_SET_MDWE with
PR_MDWE_REFUSE_EXEC_GAIN: no mapping may become writable and executable), the kernel
mechanism behind systemd's MemoryDenyWriteExecute on systemd 253 and newer, to see whether
CUDA works under the shipped unit's sandbox on a GPU machine without systemd.

    python3 scripts/gpu/mdwe-probe.py ./gpuwarden probe --json --tests gemm_bf16,hbm_copy
"""
import ctypes
import os
import sys

PR_SET_MDWE, PR_GET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 66, 1
libc = ctypes.CDLL(None, use_errno=True)
print(f"MDWE before: {libc.prctl(PR_GET_MDWE, 0, 0, 0, 0)}", file=sys.stderr)
if libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
    sys.exit(f"prctl(PR_SET_MDWE) failed: errno {ctypes.get_errno()} (kernel older than 6.3?)")
print(f"MDWE now: {libc.prctl(PR_GET_MDWE, 0, 0, 0, 0)} (inherited by the probe)", file=sys.stderr)
os.execv(sys.argv[1], sys.argv[1:])
