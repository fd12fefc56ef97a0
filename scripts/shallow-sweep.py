#!/usr/bin/env python3
"""Long paths and shallow bottleneck buffers (docs/RESULTS.md 10.8): one bulk TCP flow
and a probe over random link mixes, in the simulator, two builds side by side.

  scripts/shallow-sweep.py [--seed S] [--runs N] [--seeds K] BIN_A BIN_B

N (default 30) mixes drawn with seed S (default 1): one or two links of 5-50 Mbit/s
(times 0.7-1.3), 40-150 ms one way (times 0.8-1.2), each behind a FIFO of 0.1, 0.25,
0.5 or 1 times its bandwidth-delay product (at least 10 packets), loss 0, 0.1 or 1 %,
jitter 0 or 1 ms; the flow up or down, under min-rtt or aggregate, 30 s, a probe
(100-byte packets every 20 ms) beside it. Each mix runs with the simulator's seeds 1-K
(default 6: one run of such a path moves by up to half with the draw of its random
losses) and prints the bulk goodput's mean and the probe's worst p99 for each build.
Last: the geometric means of B over A, and how many mixes moved by more than 10 %.

BIN_A and BIN_B are `latebind` binaries (a copy of an earlier build, and this one).
"""
import argparse
import importlib.util
import math
import os
import random
from concurrent.futures import ThreadPoolExecutor


def load_policy_sweep():
    """`policy-sweep.py`'s scenario writer and runner (its name is not a module name)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "policy-sweep.py")
    spec = importlib.util.spec_from_file_location("policy_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PS = load_policy_sweep()


def run(binary, text):
    flows = PS.run(binary, text)
    return flows["bulk"]["goodput_mbps"], flows["probe"]["latency_ms"]["p99"]


def mixes(seed, n):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        links = []
        for _ in range(rng.choice([1, 2, 2])):
            rate = round(rng.choice([5, 10, 20, 50]) * rng.uniform(0.7, 1.3), 1)
            delay = round(rng.choice([40, 60, 100, 150]) * rng.uniform(0.8, 1.2), 0)
            bdp = rate * 1e6 / 8 * 2 * delay / 1e3 / 1500
            queue = max(10, int(bdp * rng.choice([0.1, 0.25, 0.5, 1.0])))
            loss, jitter = rng.choice([0, 0, 0.001, 0.01]), rng.choice([0, 1])
            links.append((rate, delay, loss, jitter, queue))
        out.append((links, rng.choice(["up", "down"]), rng.choice(["min-rtt", "aggregate"])))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("bins", nargs=2)
    a = p.parse_args()

    def both(mix):
        links, direction, policy = mix
        texts = [PS.scenario(links, direction, policy, True, duration=30.0, seed=s)
                 for s in range(1, a.seeds + 1)]
        res = []
        for b in a.bins:
            runs = [run(b, t) for t in texts]
            res.append((sum(r[0] for r in runs) / len(runs), max(r[1] for r in runs)))
        return res

    cases = mixes(a.seed, a.runs)
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        results = list(ex.map(both, cases))
    ratios = []
    for n, ((links, direction, policy), (ra, rb)) in enumerate(zip(cases, results)):
        desc = " ".join(f"{r}M/{d:.0f}ms/q{q}/p{l}/j{j}" for r, d, l, j, q in links)
        ratio = max(rb[0], 1e-3) / max(ra[0], 1e-3)
        ratios.append((ratio, max(rb[1], 1e-3) / max(ra[1], 1e-3)))
        print(f"{n:2} {direction:4} {policy:9} {desc} | bulk {ra[0]:6.2f} probe p99 "
              f"{ra[1]:7.1f} | bulk {rb[0]:6.2f} probe p99 {rb[1]:7.1f} | x{ratio:.2f}",
              flush=True)
    g = math.exp(sum(math.log(r) for r, _ in ratios) / len(ratios))
    gp = math.exp(sum(math.log(q) for _, q in ratios) / len(ratios))
    print(f"B over A, geometric means: bulk {g:.3f}, probe p99 {gp:.3f}")
    print(f"bulk more than 10 % lower: {sum(r < 0.9 for r, _ in ratios)}, "
          f"higher: {sum(r > 1.1 for r, _ in ratios)} (of {len(ratios)})")


if __name__ == "__main__":
    main()
