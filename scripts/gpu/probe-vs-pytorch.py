#!/usr/bin/env python3
"""Runs gpuwarden's CUDA probe and the same operations in PyTorch on one GPU, and prints
both side by side (docs/probe.md has the results and how they were taken).

Both sides use the same sizes (read from gpuwarden's JSON report), the same windowing
(consecutive windows timed with CUDA events, about 25 ms each) and the same two figures:
burst = the best window in the first second, sustained = all work in the second half of the
run divided by its time. PyTorch's GEMM also gets the figure a quick matmul gives (3 warm-up
matmuls, then 20 timed ones, on the cool GPU before the windowed run), which is what the
probe's burst is meant to match. The runs alternate (gpuwarden, PyTorch, gpuwarden, ...) so neither
side always meets a cooler GPU, and each side's best round is kept.

    python3 scripts/gpu/probe-vs-pytorch.py --gpuwarden ./gpuwarden --gpu 0 --rounds 2 --json out.json
"""
import argparse
import json
import subprocess
import sys
import time

WINDOW_S = 0.025  # src/probe/windows.rs WINDOW_SECONDS
QUICK_WARMUP, QUICK_ITERATIONS = 3, 20


def windows(run_batch, per_op_units, duration_s):
    """Runs `run_batch(n)` in windows of about WINDOW_S until duration_s has passed.
    Returns (burst, sustained) in units per second."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    # Calibrate: one warm-up op, then time a single op to size the windows.
    run_batch(1)
    torch.cuda.synchronize()
    start.record()
    run_batch(1)
    end.record()
    end.synchronize()
    op_s = max(start.elapsed_time(end) / 1000.0, 1e-6)
    ops = max(1, int(WINDOW_S / op_s))
    results = []  # (start offset s, seconds, units)
    elapsed = 0.0
    while elapsed < duration_s:
        start.record()
        run_batch(ops)
        end.record()
        end.synchronize()
        s = start.elapsed_time(end) / 1000.0
        results.append((elapsed, s, ops * per_op_units))
        elapsed += s
    burst = max(u / s for (t, s, u) in results if t < 1.0)
    half = elapsed / 2
    tail = [(s, u) for (t, s, u) in results if t >= half] or [(s, u) for (_, s, u) in results[-1:]]
    sustained = sum(u for _, u in tail) / sum(s for s, _ in tail)
    return burst, sustained


def quick_matmul(n):
    """What an operator types to see what a GPU does: warm up, then time 20 matmuls."""
    import torch
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(QUICK_WARMUP):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(QUICK_ITERATIONS):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    return QUICK_ITERATIONS * 2.0 * n**3 / (time.perf_counter() - t0)


def pytorch_run(report, device, pause):
    import torch
    torch.cuda.set_device(device)
    out = {}
    gemm = [t for t in report["tests"] if t["test"] == "gemm_bf16" and not t.get("skipped")]
    if gemm:
        out["gemm_bf16_quick"] = quick_matmul(gemm[0]["params"]["n"])
        torch.cuda.empty_cache()
        time.sleep(pause)  # the windowed GEMM starts on a cool GPU, as gpuwarden's does
    for test in report["tests"]:
        name, params, duration = test["test"], test.get("params", {}), test["duration_seconds"]
        if test.get("skipped"):
            continue
        if name == "gemm_bf16":
            n = params["n"]
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)

            def batch(k):
                for _ in range(k):
                    torch.matmul(a, b, out=c)
            out[name] = windows(batch, 2.0 * n * n * n, duration)
            del a, b, c
        elif name == "hbm_copy":
            nbytes = params["bytes"]
            src = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
            dst = torch.empty(nbytes, device="cuda", dtype=torch.uint8)

            def batch(k):
                for _ in range(k):
                    dst.copy_(src)
            # Read once and written once: the same accounting as gpuwarden.
            out[name] = windows(batch, 2.0 * nbytes, duration)
            del src, dst
        elif name in ("pcie_h2d", "pcie_d2h"):
            nbytes = params["bytes"]
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
            dev = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
            if name == "pcie_h2d":
                def batch(k):
                    for _ in range(k):
                        dev.copy_(host, non_blocking=True)
            else:
                def batch(k):
                    for _ in range(k):
                        host.copy_(dev, non_blocking=True)
            out[name] = windows(batch, float(nbytes), duration)
            del host, dev
        torch.cuda.empty_cache()
    return out


def pytorch_in_child(report, gpu, pause):
    """PyTorch in a process of its own: its CUDA context must be gone before gpuwarden
    runs, or gpuwarden's idle check (rightly) refuses a GPU with a compute process on it."""
    proc = subprocess.run(
        [sys.executable, __file__, "--pytorch-worker", "--gpu", str(gpu), "--pause", str(pause)],
        input=json.dumps(report), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch run failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def gpuwarden_run(binary, gpu):
    t0 = time.monotonic()
    proc = subprocess.run([binary, "probe", "--gpu", str(gpu), "--json"], capture_output=True, text=True)
    wall = time.monotonic() - t0
    if proc.returncode not in (0, 1):
        sys.exit(f"gpuwarden probe failed (exit {proc.returncode}):\n{proc.stderr}")
    report = json.loads(proc.stdout)
    return report, wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpuwarden")
    ap.add_argument("--pytorch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--pause", type=float, default=10.0, help="seconds between runs, to cool down")
    ap.add_argument("--json", help="write all raw results here")
    args = ap.parse_args()
    if args.pytorch_worker:
        print(json.dumps(pytorch_run(json.load(sys.stdin), args.gpu, args.pause)))
        return
    import torch

    gw_rounds, pt_rounds, walls = [], [], []
    for r in range(args.rounds):
        report, wall = gpuwarden_run(args.gpuwarden, args.gpu)
        gw_rounds.append(report)
        walls.append(wall)
        time.sleep(args.pause)
        pt_rounds.append(pytorch_in_child(report, args.gpu, args.pause))
        time.sleep(args.pause)

    def best(test, which):
        gw = max((t[which] for rep in gw_rounds for t in rep["tests"] if t["test"] == test and t.get(which)), default=None)
        pt = max((rnd[test][0 if which == "burst" else 1] for rnd in pt_rounds if test in rnd), default=None)
        return gw, pt

    name = gw_rounds[0].get("name", "?")
    print(f"GPU {args.gpu}: {name}; torch {torch.__version__} (CUDA {torch.version.cuda}); "
          f"{args.rounds} rounds, best of each")
    print(f"gpuwarden probe wall time per run (s): {', '.join(f'{w:.1f}' for w in walls)}")
    print()
    print("| test | figure | gpuwarden | PyTorch | ratio |")
    print("| --- | --- | --- | --- | --- |")
    failed = False
    for test in ("gemm_bf16", "fma_fp32", "hbm_copy", "pcie_h2d", "pcie_d2h"):
        for which in ("burst", "sustained"):
            gw, pt = best(test, which)
            if gw is None:
                continue
            scale, unit = (1e12, "TFLOP/s") if test in ("gemm_bf16", "fma_fp32") else (1e9, "GB/s")
            if pt is None:
                print(f"| {test} | {which} | {gw / scale:.1f} {unit} | (no PyTorch equivalent) | |")
                continue
            ratio = gw / pt
            failed |= ratio < 0.97
            print(f"| {test} | {which} | {gw / scale:.1f} {unit} | {pt / scale:.1f} {unit} | {ratio:.3f} |")
            if test == "gemm_bf16" and which == "burst":
                quick = max((rnd["gemm_bf16_quick"] for rnd in pt_rounds if "gemm_bf16_quick" in rnd), default=None)
                if quick is not None:
                    ratio = gw / quick
                    failed |= ratio < 0.97
                    print(f"| {test} | burst vs quick matmul ({QUICK_WARMUP} + {QUICK_ITERATIONS}) | {gw / scale:.1f} {unit} "
                          f"| {quick / scale:.1f} {unit} | {ratio:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpuwarden": gw_rounds, "pytorch": pt_rounds, "wall_seconds": walls}, f, indent=1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
