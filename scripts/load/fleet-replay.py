#!/usr/bin/env python3
"""Serves the /metrics of many gpuwarden nodes from one process, for the fleet simulation
(scripts/load/fleet-sim.sh, docs/fleet.md "Which part is real").

Each template is two bodies a real gpuwarden served some seconds apart (`--template
FRAME1,FRAME2[,SHARE]`, each file starting with a `# ... recorded at UNIX_TIME` line): the
simulation records one from a daemon over the simulated NVML at its start, and
tests/fixtures/fleet holds a pair from two real H200s. A node replays one template under its own
identity (its GPUs' UUIDs and serials, its batch jobs) and moves as a poll moves it:

- a counter (and a histogram's buckets, sum and count) grows at the rate it grew between the
  two frames, so rate() sees what it saw on the real node;
- a gauge that moved between the frames (power, a clock) swings between its two values, and the
  gauges a poll moves (temperature, power, clocks, utilization, memory used) by 1.5 % around
  their value where the frames held still; a timestamp stays now;
- a probe figure (`gpu_probe_*`) is the template's, within 1 % fixed per GPU;
- `hpc_job="TEMPLATE"` becomes the node's job, a new one every --job-minutes (a fleet's job
  churn: every new id is a new series);
- the rest is served as recorded.

It listens on one port; the scraper asks for `/metrics?node=N` (relabelling `__param_node`)
and keeps its own `instance`. A fault is a POST to `/fault?node=N&match=TEXT&scale=F` (`match`
given once or more): every series of node N whose text contains each TEXT is served times F
from then on.

    fleet-replay.py --port P --nodes N --template A1,A2[,SHARE] [--template B1,B2,SHARE]

One thread of asyncio; a node's body is put together from its pre-rendered pieces at each
scrape. Bounded: at most 100,000 nodes, templates of at most 16 MiB.
"""
import argparse
import asyncio
import hashlib
import math
import re
import time
import urllib.parse

MAX_NODES = 100_000
MAX_TEMPLATE = 16 << 20
MOVING_GAUGES = re.compile(
    r"^(gpu_temperature_celsius|gpu_memory_temperature_celsius|gpu_power_watts|gpu_clock_hertz|"
    r"gpu_utilization_ratio|gpu_memory_used_bytes|gpu_fan_speed_ratio|gpu_sm_active_ratio|"
    r"gpu_tensor_active_ratio|gpu_dram_active_ratio)\b"
)
UUID = re.compile(r'uuid="(GPU-[0-9a-fA-F-]+)"')
SERIAL = re.compile(r'serial="([^"]*)"')


def frame(path):
    text = open(path, encoding="utf-8", errors="replace").read(MAX_TEMPLATE)
    first = text.split("\n", 1)[0]
    at = re.search(r"recorded at ([0-9.]+)", first)
    if not at:
        raise SystemExit(f"{path}: its first line must say 'recorded at UNIX_TIME'")
    return float(at.group(1)), text


def families(text):
    """Each family's type, from its # TYPE line."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)", text, re.M)}


def kind_of(name, types):
    """counter (grows), gauge, or other, from the sample's name and the families' types."""
    if types.get(name) == "counter":
        return "counter"
    for suffix in ("_total", "_bucket", "_sum", "_count", "_created"):
        base = name[: -len(suffix)] if name.endswith(suffix) else None
        if base and types.get(base) in ("counter", "histogram", "summary"):
            return "other" if suffix == "_created" else "counter"
    return "gauge" if types.get(name) == "gauge" else "other"


def stable(*parts):
    """A number in [0, 1) fixed by its parts: a node's phase, a GPU's spread."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Template:
    """Two frames, split into static text and slots that move."""

    def __init__(self, first, second, share):
        (t1, a), (t2, b) = frame(first), frame(second)
        if t2 <= t1:
            raise SystemExit(f"{second} must be recorded after {first}")
        self.share = share
        self.t2 = t2
        types = families(b)
        before = {}
        for line in a.splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                before[series] = value
        # pieces: str (static) or a slot tuple (kind, series, v1, v2, per_second)
        self.pieces = []
        static = []
        for line in b.splitlines():
            if not line or line.startswith("#") and not line.startswith(("# HELP", "# TYPE")):
                continue
            if line.startswith("#"):
                static.append(line + "\n")
                continue
            series, _, text = line.rpartition(" ")
            try:
                v2 = float(text)
                v1 = float(before.get(series, text))
            except ValueError:
                static.append(line + "\n")
                continue
            name = series.split("{", 1)[0]
            kind = kind_of(name, types)
            slot = None
            if name.startswith("gpu_probe_") and kind == "gauge":
                slot = ("probe", series, v2, v2, 0.0)
            elif kind == "counter" and v2 > v1:
                slot = ("counter", series, v1, v2, (v2 - v1) / (t2 - t1))
            elif kind == "gauge" and v2 > 1e9 and abs(v1 - t1) < 120 and abs(v2 - t2) < 120:
                slot = ("timestamp", series, v1, v2, 0.0)
            elif kind == "gauge" and v1 != v2:
                slot = ("swing", series, v1, v2, 0.0)
            elif kind == "gauge" and v2 != 0 and MOVING_GAUGES.match(name):
                slot = ("jitter", series, v2, v2, 0.0)
            if slot is None:
                static.append(line + "\n")
            else:
                self.pieces.append("".join(static))
                static = []
                self.pieces.append(slot)
        self.pieces.append("".join(static))
        self.slots = sum(1 for p in self.pieces if isinstance(p, tuple))
        self.samples = sum(1 for line in b.splitlines() if line and not line.startswith("#"))


class Node:
    """One replayed node: its template's pieces under its own identity."""

    def __init__(self, index, template, job_seconds):
        self.index = index
        self.template = template
        self.job_seconds = job_seconds
        self.phase = stable("phase", index) * 2 * math.pi
        self.faults = []  # ([texts the series must all contain], scale)
        ids = {}

        def identity(text):
            def uuid(m):
                old = m.group(1)
                new = ids.setdefault(old, f"{old[:-12]}{index:06x}{old[-6:]}")
                return f'uuid="{new}"'

            def serial(m):
                return f'serial="{m.group(1)[:4]}{index:06d}{m.group(1)[10:]}"'

            return SERIAL.sub(serial, UUID.sub(uuid, text))

        self.pieces = []
        for piece in template.pieces:
            if isinstance(piece, str):
                self.pieces.append(identity(piece).split('hpc_job="TEMPLATE"'))
            else:
                kind, series, v1, v2, rate = piece
                self.pieces.append((kind, identity(series), v1, v2, rate))

    def job(self, now):
        # Four nodes a job, each job a new id every job_seconds, the jobs' changes spread over
        # that time rather than all at once.
        offset = stable("job", self.index // 4) * self.job_seconds
        epoch = int((now + offset) // self.job_seconds)
        return f'hpc_job="{100000 + (self.index // 4) * 1009 + epoch}"'

    def value(self, slot, now):
        kind, series, v1, v2, rate = slot
        if kind == "counter":
            value = v2 + rate * (now - self.template.t2)
        elif kind == "timestamp":
            value = now + (v2 - self.template.t2)
        elif kind == "swing":
            value = v1 + (v2 - v1) * (0.5 + 0.5 * math.sin(now / 7.0 + self.phase))
        elif kind == "jitter":
            value = v2 * (1 + 0.015 * math.sin(now / 11.0 + self.phase + len(series)))
        else:  # probe
            value = v2 * (1 + 0.02 * (stable("probe", series) - 0.5))
        for matches, scale in self.faults:
            if all(m in series for m in matches):
                value *= scale
        return value

    def body(self, now):
        job = self.job(now)
        out = []
        for piece in self.pieces:
            if isinstance(piece, list):
                out.append(job.join(piece))
            else:
                out.append(f"{piece[1]} {self.value(piece, now)!r}\n")
        return "".join(out).encode()


class Fleet:
    def __init__(self, nodes, templates, job_seconds):
        self.nodes = []
        shares = [t.share for t in templates]
        total = sum(shares)
        for i in range(nodes):
            # Spread the templates by their shares, deterministic per node.
            pick, acc = templates[-1], 0.0
            x = stable("template", i) * total
            for t in templates:
                acc += t.share
                if x < acc:
                    pick = t
                    break
            self.nodes.append(Node(i, pick, job_seconds))
        self.scrapes = 0
        self.faults = 0

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request = head.split(b"\r\n", 1)[0].decode("latin-1")
                method, target = (request.split(" ") + ["", ""])[:2]
                url = urllib.parse.urlsplit(target)
                query = urllib.parse.parse_qs(url.query)
                length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
                if length:
                    await reader.readexactly(min(int(length.group(1)), 1 << 16))
                status, body = self.answer(method, url.path, query)
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n"
                    f"Content-Length: {len(body)}\r\n\r\n".encode() + body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def answer(self, method, path, query):
        try:
            node = self.nodes[int(query.get("node", ["-1"])[0])]
        except (ValueError, IndexError):
            node = None
        if method == "GET" and path == "/metrics" and node:
            self.scrapes += 1
            return "200 OK", node.body(time.time())
        if method == "POST" and path == "/fault" and node:
            node.faults.append((query.get("match", [""]), float(query.get("scale", ["1"])[0])))
            self.faults += 1
            return "200 OK", b"ok\n"
        if method == "GET" and path == "/stats":
            return "200 OK", f"scrapes {self.scrapes}\nfaults {self.faults}\n".encode()
        return "404 Not Found", b"ask /metrics?node=N, POST /fault?node=N&match=TEXT&scale=F, or /stats\n"


async def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--template", action="append", required=True, help="FRAME1,FRAME2[,SHARE]")
    parser.add_argument("--job-minutes", type=float, default=30.0)
    args = parser.parse_args()
    if not 0 < args.nodes <= MAX_NODES:
        raise SystemExit(f"--nodes must be 1 to {MAX_NODES}")
    templates = []
    for spec in args.template:
        parts = spec.split(",")
        templates.append(Template(parts[0], parts[1], float(parts[2]) if len(parts) > 2 else 1.0))
    fleet = Fleet(args.nodes, templates, args.job_minutes * 60)
    for t in templates:
        print(f"template: {t.samples} samples, {t.slots} that move, share {t.share}", flush=True)
    server = await asyncio.start_server(fleet.handle, "127.0.0.1", args.port, backlog=4096)
    print(f"replaying {args.nodes} nodes on 127.0.0.1:{args.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
