#!/usr/bin/env python3
"""How a bf16 GEMM's rate changes in its first seconds on a cool GPU, timed per operation with
CUDA events, next to the figure a "quick PyTorch matmul" gives (a few warm-up matmuls, then
20 timed ones). It shows how long a GPU runs before its power cap bites, and so how long the
probe's burst window may be for burst to mean what such a quick matmul shows (docs/probe.md).

    python3 scripts/gpu/gemm-burst-profile.py --gpu 0 --rounds 3 --cool 15

Each round waits `--cool` seconds with the GPU idle, then runs the quick matmul, waits again,
then profiles: one warm-up matmul, then 3 s of matmuls with an event after each.
"""
import argparse
import importlib.util
import pathlib
import time

import torch

# The quick matmul is probe-vs-pytorch.py's, so both scripts mean the same by it.
_spec = importlib.util.spec_from_file_location(
    "probe_vs_pytorch", pathlib.Path(__file__).with_name("probe-vs-pytorch.py"))
probe_vs_pytorch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe_vs_pytorch)


def profile(a, b, c, seconds=3.0):
    """Per-operation end times (seconds from the first op's start) over `seconds` of work."""
    torch.matmul(a, b, out=c)  # warm-up, like the probe's
    torch.cuda.synchronize()
    op_s = 0.0015
    count = int(seconds / op_s)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(count + 1)]
    events[0].record()
    for i in range(count):
        torch.matmul(a, b, out=c)
        events[i + 1].record()
    events[-1].synchronize()
    return [events[0].elapsed_time(e) / 1000.0 for e in events[1:]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cool", type=float, default=15.0)
    args = ap.parse_args()
    torch.cuda.set_device(args.gpu)
    n = args.n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flop = 2.0 * n**3
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} n={n}")
    for r in range(args.rounds):
        time.sleep(args.cool)
        q = probe_vs_pytorch.quick_matmul(n)
        print(f"round {r} quick matmul (3 warm-up + 20 timed): {q / 1e12:.1f} TFLOP/s")
        time.sleep(args.cool)
        ends = profile(a, b, c)
        starts = [0.0] + ends[:-1]

        def rate(i, j):  # ops i..j-1
            return (j - i) * flop / (ends[j - 1] - starts[i]) / 1e12

        firsts = ", ".join(f"first {k}: {rate(0, k):.1f}" for k in (10, 20, 50, 100, 200, 500))
        print(f"round {r} from cool, cumulative TFLOP/s: {firsts}")
        # Rate per ~25 ms bucket over the first 1.5 s, then per 250 ms.
        line, i = [], 0
        while i < len(ends) and starts[i] < 3.0:
            span = 0.025 if starts[i] < 1.5 else 0.25
            j = i
            while j < len(ends) and ends[j] - starts[i] < span:
                j += 1
            j = min(j + 1, len(ends))
            line.append(f"{starts[i]:.3f}s:{rate(i, j):.0f}")
            i = j
        print(f"round {r} profile (start: TFLOP/s): " + " ".join(line))
        for w_ms in (25, 50, 100):
            best, i = 0.0, 0
            while i < len(ends) and starts[i] < 1.0:
                j = i
                while j < len(ends) and ends[j] - starts[i] < w_ms / 1000.0:
                    j += 1
                j = min(j + 1, len(ends))
                best = max(best, rate(i, j))
                i = j
            print(f"round {r} best {w_ms} ms window starting in the first second: {best:.1f} TFLOP/s")


if __name__ == "__main__":
    main()
