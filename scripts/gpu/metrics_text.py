"""Reading a running gpuwarden's /metrics from the GPU checks under scripts/gpu/."""
import re
import urllib.request


def scrape(port):
    """The text of http://127.0.0.1:PORT/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def series(text, name, **labels):
    """[(labels, value)] of the samples of `name` (with or without labels, digits allowed in
    the name, as in gpu_nvlink_p2p_ok) whose labels include `labels`."""
    out = []
    for line in text.splitlines():
        m = re.match(r'([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        if not m or m.group(1) != name:
            continue
        ls = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(ls.get(k) == v for k, v in labels.items()):
            out.append((ls, float(m.group(3))))
    return out
