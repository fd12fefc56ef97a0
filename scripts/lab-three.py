#!/usr/bin/env python3
"""Issue 5's three-link upload (scenarios/aggregate-3.toml: 10 Mb/s, 5 Mb/s and a cellular
uplink trace) with each mahimahi trace of ../shared/traces as the third link, in the lab
(root) or the simulator, beside the same upload over the two fixed links alone: does the
trace link add to the bond, or drag it down? The figures of docs/RESULTS.md 21.2.

  sudo scripts/lab-three.py [N] [--mptcp]   the lab: N runs (default 2) of each trace with
      the latebind daemons, one of the two fixed links alone; --mptcp adds one run of each
      with kernel MPTCP (and of the fixed links alone)
  scripts/lab-three.py --sim                the simulator, one run of each at the file's
      delay, with the trace link's bottleneck at the client (the file's) and in the network

Each row: goodput (Mb/s and % of the links' sum: the fixed links' rates plus the trace's
mean over the scenario's run, both read from the file), the flow's p95 latency, what each
link carried (the emulator's or the link model's bytes, every header counted), goodput
over those bytes, and the goodput less what the two fixed links alone gave the same stack
("over fixed"; below 0, the trace link drags the bond down).

LATEBIND_BIN names another binary (default: target/release/latebind).
"""
import json
import os
import subprocess
import sys
import tempfile
import tomllib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from traces import NAMES, TRACES, capacity, trace_sets  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LATEBIND_BIN") or os.path.join(ROOT, "target", "release", "latebind")
SCENARIO = os.path.join(ROOT, "scenarios", "aggregate-3.toml")
with open(SCENARIO, "rb") as _f:
    _SPEC = tomllib.load(_f)
# The run's length, and the fixed links' sum (the links without a trace).
DURATION = float(_SPEC["scenario"]["duration_s"])
FIXED_MBPS = sum(l["rate_mbps"] for l in _SPEC["links"] if "trace_up" not in l)


def fixed_only(directory):
    """aggregate-3.toml without its trace link (and without its variants)."""
    with open(SCENARIO) as f:
        text = f.read()
    start = text.index('[[links]]\nname = "lte"')
    text = text[:start] + text[text.index("[[flows]]") :]
    text = text[: text.index("[[variants]]")]
    path = os.path.join(directory, "aggregate-2-fixed.toml")
    with open(path, "w") as f:
        f.write(text.replace('name = "aggregate-3"', 'name = "aggregate-2-fixed"'))
    return path


def run(tool, scenario, mode, sets):
    args = [BIN, tool, scenario, "--mode", mode, "--json"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {out.returncode}\n{out.stderr}")
    return json.loads(out.stdout)


def row(label, cap, j, fixed):
    flow = j["flows"][0]
    links = [l["bytes_delivered"][0] * 8 / DURATION / 1e6 for l in j["links"]]
    g = flow["goodput_mbps"]
    over = "" if fixed is None else f"  over fixed {g - fixed:+5.2f}"
    print(
        f"{label:34s} {g:6.2f} Mb/s {100 * g / cap:5.1f} % of {cap:5.2f}"
        f"  p95 {flow['latency_ms']['p95']:5.0f} ms"
        f"  links {' '.join('%.2f' % x for x in links)}"
        f"  goodput/bytes {100 * g / sum(links):4.1f} %{over}"
    )
    return g


def main():
    argv = sys.argv[1:]
    with tempfile.TemporaryDirectory() as d:
        fixed_file = fixed_only(d)
        if "--sim" in argv:
            j = run("sim", fixed_file, "late", [])
            fixed = row("sim, fixed links alone", FIXED_MBPS, j, None)
            for name in NAMES:
                cap = FIXED_MBPS + capacity(os.path.join(TRACES, f"{name}.up"), DURATION)
                for where in ["client", "network"]:
                    sets = trace_sets(2, name) + [f'links.2.uplink_bottleneck="{where}"']
                    row(f"sim {name} ({where})", cap, run("sim", SCENARIO, "late", sets), fixed)
            return
        if os.geteuid() != 0:
            sys.exit("the lab needs root (or run with --sim)")
        n = int(next((a for a in argv if a.isdigit()), "2"))
        modes = ["late"] + (["mptcp"] if "--mptcp" in argv else [])
        fixed = {
            m: row(f"lab {m}, fixed links alone", FIXED_MBPS, run("lab", fixed_file, m, []), None)
            for m in modes
        }
        for name in NAMES:
            cap = FIXED_MBPS + capacity(os.path.join(TRACES, f"{name}.up"), DURATION)
            sets = trace_sets(2, name)
            for i in range(n):
                j = run("lab", SCENARIO, "late", sets)
                row(f"lab late {name} #{i + 1}", cap, j, fixed["late"])
            if "mptcp" in modes:
                row(f"lab mptcp {name}", cap, run("lab", SCENARIO, "mptcp", sets), fixed["mptcp"])


if __name__ == "__main__":
    main()
