#!/usr/bin/env python3
"""Two builds side by side over links that lose in bursts: the 48 mixes of
scripts/outage-mix.py (10 + 10 Mb/s at 10 / 30 ms, 10 + 2 at 30 / 10, 50 + 10 at 5 / 5,
20 + 5 at 10 / 100; remote outages of 10, 50 or 200 ms on either link, beside 0.5 %
random loss there; one TCP flow up or down, the aggregate policy), for each seed given.

  scripts/outage-sweep.py OLD NEW [--seeds 1,2,3,4] [--jobs N] [--policy P] [--b-set K=V]

OLD and NEW are latebind binaries. Prints, per run, each build's goodput (Mbit/s); then
the geometric mean of NEW's goodput over OLD's, how many runs rose or fell by more than
3 %, and for each build the flow's stalls after the outages (the report's
`cuts[].stall_ms`: the longest time without a delivery to the application from an
outage's start to the next outage): their mean, and how many lasted 500 ms or more.
`--policy P` writes the mixes with policy P instead of aggregate; `--b-set K=V`
(repeatable) adds `--set K=V` to every run of NEW: OLD and NEW may be the same binary,
to compare a setting (e.g. `--policy min-rtt --b-set 'late.policy="auto"'`).
"""
import argparse
import concurrent.futures
import importlib.util
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MIXES = [("10", "10", "10", "30"), ("10", "2", "30", "10"), ("50", "10", "5", "5"),
         ("20", "5", "10", "100")]


def load_policy_sweep():
    """`policy-sweep.py`'s simulator runner (its name is not a module name)."""
    spec = importlib.util.spec_from_file_location(
        "policy_sweep", os.path.join(HERE, "policy-sweep.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PS = load_policy_sweep()


def run(binary, sets, policy, mix, dur, link, direction, seed):
    spec = subprocess.run(
        [sys.executable, os.path.join(HERE, "outage-mix.py"), direction, str(dur), str(link),
         str(seed), *mix], check=True, capture_output=True, text=True).stdout
    if policy:
        assert 'policy = "aggregate"' in spec
        spec = spec.replace('policy = "aggregate"', f'policy = "{policy}"')
    report = PS.report(binary, spec, sets)
    return report["flows"][0]["goodput_mbps"], [c["stall_ms"] for c in report["cuts"]]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--seeds", default="1", help="comma-separated outage draws (default 1)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--policy", help="the mixes' policy (default aggregate)")
    p.add_argument("--b-set", action="append", default=[], metavar="K=V",
                   help="a --set for every run of NEW")
    a = p.parse_args()
    seeds = [int(s) for s in a.seeds.split(",")]
    runs = [(mix, dur, link, d, s) for s in seeds for mix in MIXES for dur in (10, 50, 200)
            for link in (0, 1) for d in ("up", "down")]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        builds = (("old", a.old, []), ("new", a.new, a.b_set))
        futs = {(r, b): pool.submit(run, binary, sets, a.policy, *r)
                for r in runs for b, binary, sets in builds}
        res = {k: f.result() for k, f in futs.items()}
    logs, up, down = [], 0, 0
    stalls = {"old": [], "new": []}
    print("mix (rates, delays) | outage ms | lossy link | dir | seed | old | new Mb/s")
    for r in runs:
        mix, dur, link, d, s = r
        (go, so), (gn, sn) = res[(r, "old")], res[(r, "new")]
        stalls["old"] += so
        stalls["new"] += sn
        ratio = gn / go
        logs.append(math.log(ratio))
        up += ratio > 1.03
        down += ratio < 0.97
        print(f"{'+'.join(mix[:2])} at {'/'.join(mix[2:])} | {dur} | {link} | {d} | {s} | "
              f"{go:.2f} | {gn:.2f}")
    print(f"geometric mean new/old {math.exp(sum(logs) / len(logs)):.3f} over {len(runs)} "
          f"runs: {up} up, {down} down by more than 3 %")
    for b in ("old", "new"):
        xs = stalls[b]
        print(f"{b}: stall after an outage {sum(xs) / max(1, len(xs)):.1f} ms (mean of "
              f"{len(xs)} cuts), {sum(x >= 500 for x in xs)} of 500 ms or more")


if __name__ == "__main__":
    main()
