#!/usr/bin/env python3
"""One bulk TCP flow under a binding policy (default min-rtt) over link mixes the
scenario files were not written for, in the simulator, with one build or two side by
side (docs/RESULTS.md 8.4).

  scripts/policy-sweep.py grid   [--policy P] [--b-set K=V] BIN [BIN_B]
  scripts/policy-sweep.py random [--policy P] [--seed S] [--runs N] [--b-set K=V] BIN [BIN_B]
  scripts/policy-sweep.py seeds  [--policy P] [--seed S] --mixes I,J,.. [--runs N] [--b-set K=V] BIN [BIN_B]

grid: two links, a slow one near (1, 2 or 5 Mbit/s at 2 or 10 ms one way) and a fast
one farther (10 or 50 Mbit/s at 20 or 40 ms), the flow up and down, 15 s, 1000-packet
FIFOs: the flow's goodput and its share of the fast link's rate; last, per build, the
mean share and how many mixes got under half the fast link.

random: N (default 40) mixes drawn with seed S (default 11): two or three links of
1-50 Mbit/s (times 0.7-1.3), 2-80 ms one way (times 0.8-1.2), loss 0, 0.1 or 1 %,
jitter 0 or 1 ms, the flow up or down, and beside it a probe (100-byte packets every
20 ms) whose one-way latency p50 / p99 is printed. With two builds, last: the geometric
means of B over A for the bulk goodput and the probe's p50 and p99, and the counts of
mixes where either moved by more than 10 % (bulk) or 5 ms (probe p50).

seeds: the mixes numbered I, J, .. of the draw with seed S, each run with scenario seeds
1..N (default 12): per mix and build the mean bulk goodput and its range; last, the
geometric mean of B over A of the per-mix means.

`--kind quic-bulk` makes the bulk flow the simulator's stand-in for QUIC (its TCP in UDP
datagrams to port 443, which the tunnel classifies as QUIC; docs/RESULTS.md 25).

BIN is a `latebind` binary (e.g. target/release/latebind, or a copy of an earlier build).
`--b-set K=V` (repeatable) adds `--set K=V` to every run of the second build (of the only
one if there is one): BIN and BIN_B may be the same binary, to compare a setting.
"""
import argparse
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile


# The bulk flow's kind: tcp-bulk, or quic-bulk (`--kind`).
KIND = "tcp-bulk"


def scenario(links, direction, policy, probe, duration=15.0, seed=1):
    """A scenario's text: `links` as (rate, delay, loss, jitter) or (rate, delay, loss,
    jitter, FIFO packets; 1000 if not given), one bulk flow of KIND (TCP unless `--kind`
    says otherwise) and, if `probe`, the probe beside it."""
    s = f'[scenario]\nname = "policy-sweep"\nduration_s = {duration}\nseed = {seed}\n'
    for i, (rate, delay, loss, jitter, *queue) in enumerate(links):
        queue = queue[0] if queue else 1000
        s += (f'[[links]]\nname = "l{i}"\nrate_mbps = {rate}\ndelay_ms = {delay}\n'
              f'queue_packets = {queue}\nloss = {loss}\njitter_ms = {jitter}\n')
    s += f'[[flows]]\nname = "bulk"\nkind = "{KIND}"\ndirection = "{direction}"\n'
    if probe:
        s += (f'[[flows]]\nname = "probe"\nkind = "udp-cbr"\ndirection = "{direction}"\n'
              'rate_mbps = 0.04\npacket_bytes = 100\nstart_s = 1.0\n')
    s += f'[late]\npolicy = "{policy}"\n'
    return s


def report(binary, text, sets=()):
    """The simulator's whole JSON report of scenario `text` with `binary`."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        extra = [a for kv in sets for a in ("--set", kv)]
        out = subprocess.run([binary, "sim", path, "--mode", "late", "--json", *extra],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{os.path.basename(sys.argv[0])}: {binary} sim failed: "
                     f"{out.stderr.strip()}")
        return json.loads(out.stdout)
    finally:
        os.unlink(path)


def run(binary, text, sets=()):
    return {f["name"]: f for f in report(binary, text, sets)["flows"]}


def grid(builds, policy):
    shares = [[] for _ in builds]
    for d, (r1, d1), (r2, d2) in itertools.product(
            ["up", "down"], itertools.product([1, 2, 5], [2, 10]),
            itertools.product([10, 50], [20, 40])):
        text = scenario([(r1, d1, 0, 0), (r2, d2, 0, 0)], d, policy, probe=False)
        line = f"{d:4} {r1}M/{d1}ms + {r2}M/{d2}ms |"
        for k, (b, sets) in enumerate(builds):
            f = run(b, text, sets)["bulk"]
            g = f["goodput_mbps"]
            shares[k].append(g / r2)
            line += f" {g:6.2f} Mb/s ({g / r2:.2f}) p50 {f['latency_ms']['p50']:.0f} ms |"
        print(line, flush=True)
    for (b, _), v in zip(builds, shares):
        print(f"{b}: mean share of the fast link {sum(v) / len(v):.2f}, "
              f"under half in {sum(1 for x in v if x < 0.5)} of {len(v)}")


def draws(seed, runs):
    """The random draw with `seed`: `runs` mixes, each (links, direction)."""
    rng = random.Random(seed)
    out = []
    for _ in range(runs):
        links = [(round(rng.choice([1, 2, 5, 10, 20, 50]) * rng.uniform(0.7, 1.3), 2),
                  round(rng.choice([2, 5, 10, 20, 40, 80]) * rng.uniform(0.8, 1.2), 1),
                  rng.choice([0, 0, 0, 0.001, 0.01]), rng.choice([0, 0, 1]))
                 for _ in range(rng.choice([2, 2, 3]))]
        out.append((links, rng.choice(["up", "down"])))
    return out


def describe(links, d):
    return f"{d:4} " + " ".join(f"{r}M/{dl}ms/{p}/{j}" for r, dl, p, j in links)


def rand(builds, policy, seed, runs):
    rows = []
    for n, (links, d) in enumerate(draws(seed, runs)):
        text = scenario(links, d, policy, probe=True)
        line = f"{n:2} {describe(links, d)} |"
        row = []
        for b, sets in builds:
            f = run(b, text, sets)
            g, lat = f["bulk"]["goodput_mbps"], f["probe"]["latency_ms"]
            row.append((g, lat["p50"], lat["p99"]))
            line += f" bulk {g:.2f} probe {lat['p50']:.1f}/{lat['p99']:.1f} |"
        rows.append(row)
        print(line, flush=True)
    if len(builds) == 2:
        def gm(i):
            return math.exp(sum(math.log(max(r[1][i], 1e-3) / max(r[0][i], 1e-3))
                                for r in rows) / len(rows))
        print(f"B over A, geometric means: bulk {gm(0):.3f}, probe p50 {gm(1):.3f}, "
              f"probe p99 {gm(2):.3f}")
        lower = sum(1 for a, b in rows if b[0] < 0.9 * a[0])
        higher = sum(1 for a, b in rows if b[0] > 1.1 * a[0])
        later = sum(1 for a, b in rows if b[1] > a[1] + 5)
        sooner = sum(1 for a, b in rows if b[1] < a[1] - 5)
        print(f"bulk more than 10 % lower: {lower}, higher: {higher}; probe p50 more than "
              f"5 ms higher: {later}, lower: {sooner} (of {len(rows)})")


def seeds(builds, policy, seed, mixes, n_seeds):
    all_draws = draws(seed, max(mixes) + 1)
    means = []
    for n in mixes:
        links, d = all_draws[n]
        line = f"{n:2} {describe(links, d)} |"
        row = []
        for b, sets in builds:
            g = [run(b, scenario(links, d, policy, probe=True, seed=s), sets)["bulk"]
                 ["goodput_mbps"] for s in range(1, n_seeds + 1)]
            row.append(sum(g) / len(g))
            line += f" bulk {row[-1]:.2f} [{min(g):.1f}-{max(g):.1f}] |"
        means.append(row)
        print(line, flush=True)
    if len(builds) == 2:
        gm = math.exp(sum(math.log(b / a) for a, b in means) / len(means))
        print(f"B over A, geometric mean of the per-mix means: bulk {gm:.3f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=["grid", "random", "seeds"])
    p.add_argument("bins", nargs="+", metavar="BIN")
    p.add_argument("--policy", default="min-rtt")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--runs", type=int, default=40)
    p.add_argument("--mixes", default="", metavar="I,J,..")
    p.add_argument("--seeds", type=int, default=12, metavar="N")
    p.add_argument("--b-set", action="append", default=[], metavar="K=V")
    p.add_argument("--kind", default="tcp-bulk", choices=["tcp-bulk", "quic-bulk"])
    a = p.parse_args()
    global KIND
    KIND = a.kind
    if len(a.bins) > 2:
        p.error("at most two builds")
    for b in a.bins:
        if not os.access(b, os.X_OK):
            p.error(f"BIN {b!r}: not an executable file")
    for kv in a.b_set:
        if "=" not in kv:
            p.error(f"--b-set {kv!r}: expected KEY=VALUE")
    builds = [(b, []) for b in a.bins]
    builds[-1] = (builds[-1][0], a.b_set)
    if a.what == "grid":
        grid(builds, a.policy)
    elif a.what == "random":
        rand(builds, a.policy, a.seed, a.runs)
    else:
        try:
            mixes = [int(x) for x in a.mixes.split(",") if x.strip()]
        except ValueError:
            p.error(f"--mixes {a.mixes!r}: expected mix numbers, e.g. 0,9,15")
        if not mixes or min(mixes) < 0:
            p.error(f"--mixes {a.mixes!r}: expected mix numbers, e.g. 0,9,15")
        if a.seeds < 1:
            p.error(f"--seeds {a.seeds}: expected at least 1")
        seeds(builds, a.policy, a.seed, mixes, a.seeds)


if __name__ == "__main__":
    main()
