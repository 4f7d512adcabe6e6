#!/usr/bin/env python3
"""The sizing table and plot of docs/fleet.md from fleet-sim.sh's results.

    python3 scripts/load/fleet-sizing.py RESULTS_DIR [--plot docs/fleet-sizing.png]

Reads every fleet-sim-MODE-N*.json in RESULTS_DIR (RESULTS=dir scripts/load/fleet-sim.sh N),
fits each cost against the node count by least squares (a + b x nodes: every figure here grows
with what is scraped and evaluated, which grows with the nodes), prints a Markdown table of
what was measured beside the fit's 10,000 nodes, and draws the figures against the nodes with
the fits carried to 10,000 (needs matplotlib: pip install matplotlib).
"""
import argparse
import glob
import json
import os

EXTRAPOLATE = 10_000


def load(directory):
    runs = {}
    for path in sorted(glob.glob(os.path.join(directory, "fleet-sim-*.json"))):
        r = json.load(open(path))
        profile = r.get("profile", "default")
        runs.setdefault(r["mode"] + ("" if profile == "default" else f", {profile} profile"), []).append(r)
    for mode in runs:
        # One run per size: with and without faults cost the same; the later one counts.
        by_n = {}
        for r in runs[mode]:
            by_n[r["nodes"]] = r
        runs[mode] = [by_n[n] for n in sorted(by_n)]
    return runs


def figures(run):
    """name -> (value, unit) for one run."""
    out = {
        "series": (run["store"]["series"], ""),
        "samples/s stored": (run["store"]["samples_per_second"], ""),
    }
    stack_cpu = 0.0
    stack_rss = 0.0
    for name, f in run["stack"].items():
        if name in ("replay",):
            continue
        out[f"{name} CPU"] = (f["cpu_percent_of_one_core"], "% of a core")
        out[f"{name} RSS"] = (f["rss_mib"], "MiB")
        stack_cpu += f["cpu_percent_of_one_core"]
        stack_rss += f["rss_mib"]
    out["monitoring stack CPU"] = (stack_cpu, "% of a core")
    out["monitoring stack RSS"] = (stack_rss, "MiB")
    groups = run.get("rule_groups", {})
    out["rule evaluation, all groups"] = (sum(g["mean_seconds"] for g in groups.values()) * 1000, "ms per round")
    # Each group's one evaluation: the slowest one decides whether its interval is kept.
    for name, g in sorted(groups.items()):
        out[f"group {name}, one evaluation"] = (g["mean_seconds"] * 1000, "ms")
    if groups:
        out["missed evaluations"] = (sum(g["missed"] for g in groups.values()), "in 60 s")
    return out


def fit(xs, ys):
    """Least squares a + b x; b = 0 with one point."""
    n = len(xs)
    if n < 2:
        return ys[0], 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def human(v, unit):
    if v is None:
        return "-"
    if unit == "" and abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:,.1f}"


def table(mode, runs):
    sizes = [r["nodes"] for r in runs]
    per_run = [figures(r) for r in runs]
    names = list(per_run[-1])
    lines = [f"| {mode} | " + " | ".join(f"{n:,} nodes" for n in sizes) + f" | {EXTRAPOLATE:,} nodes (fit) |",
             "| --- |" + " --- |" * (len(sizes) + 1)]
    fits = {}
    for name in names:
        unit = per_run[-1][name][1]
        ys = [f.get(name, (None,))[0] for f in per_run]
        known = [(x, y) for x, y in zip(sizes, ys) if y is not None]
        a, b = fit([x for x, _ in known], [y for _, y in known]) if known else (None, None)
        fits[name] = (a, b, unit)
        far = a + b * EXTRAPOLATE if a is not None and name != "missed evaluations" else None
        label = f"{name} ({unit})" if unit else name
        carried = human(far, unit)
        if far is not None and b <= 0:
            # Noise around a figure that does not grow: no line to carry.
            carried = f"{human(max(y for _, y in known), unit)} (did not grow)"
        lines.append(f"| {label} | " + " | ".join(human(y, unit) for y in ys) + f" | {carried} |")
    return "\n".join(lines), fits


def plot(runs_by_mode, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("series", "series stored"), ("samples/s stored", "samples stored per second"),
              ("monitoring stack CPU", "monitoring stack CPU (% of one core)"),
              ("monitoring stack RSS", "monitoring stack memory (MiB)"),
              ("rule evaluation, all groups", "rule evaluation, all groups (ms per round)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8))
    for ax, (name, title) in zip(axes, panels):
        for mode, runs in runs_by_mode.items():
            xs = [r["nodes"] for r in runs]
            ys = [figures(r).get(name, (None,))[0] for r in runs]
            pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
            if not pts:
                continue
            line = ax.plot([x for x, _ in pts], [y for _, y in pts], "o", label=f"{mode} (measured)")[0]
            a, b = fit([x for x, _ in pts], [y for _, y in pts])
            far = [50, 100, 200, 500, 1000, 2000, 5000, EXTRAPOLATE]
            ax.plot(far, [a + b * x for x in far], "--", color=line.get_color(), label=f"{mode} (fit)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(50, EXTRAPOLATE * 1.2)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("nodes (8 GPUs each)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("gpuwarden fleet simulation: the monitoring stack's cost by fleet size (scripts/load/fleet-sim.sh)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--plot")
    args = parser.parse_args()
    runs = load(args.results)
    if not runs:
        raise SystemExit(f"no fleet-sim-*.json in {args.results}")
    for mode, rs in runs.items():
        text, _ = table(mode, rs)
        print(text + "\n")
    if args.plot:
        plot(runs, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
