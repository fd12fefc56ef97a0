#!/usr/bin/env python3
"""Two builds side by side in the lab: runs one scenario with build A, then build B, N
times in turn (so that the machine's drift over the session falls on both alike), and
prints each run's flows (goodput, latency p50 / p95 / p99, lost) and each flow's
goodput per second, then each flow's goodput over the runs of each build. With more than
one flow (a tunnel's transfer beside one outside it), also each flow's share of their
goodput, per run and over the runs. As root.

  scripts/lab-pairs.py BIN_A BIN_B N SCENARIO [latebind lab arguments ...]

  e.g. scripts/lab-pairs.py /tmp/a/latebind target/release/latebind 4 \\
           scenarios/aggregate-3.toml --mode late --cc bbr

BIN_A and BIN_B are two `latebind` binaries (a copy of an earlier build, and this one).
Each run keeps its files in a temporary directory (`--work-dir`), read for the
receivers' bytes per 10 ms and removed after.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile


def run(binary, scenario, extra):
    work = tempfile.mkdtemp(prefix="latebind-pair-")
    try:
        args = [binary, "lab", scenario, "--json", "--work-dir", work] + extra
        out = subprocess.run(args, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        report = json.loads(out.stdout)
        per_s = {}
        for i, f in enumerate(report["flows"]):
            path = os.path.join(work, f"flow{i}-recv.json")
            if os.path.exists(path):
                with open(path) as fh:
                    b = json.load(fh).get("bytes_per_10ms", [])
                per_s[f["name"]] = [sum(b[k : k + 100]) * 8 / 1e6 for k in range(0, len(b), 100)]
        return report, per_s
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    a, b, n, scenario, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
    try:
        n = int(n)
    except ValueError:
        sys.exit(f"N: {n!r} is not a number of pairs: expected a positive integer")
    if n < 1:
        sys.exit(f"N: {n} pairs: expected at least 1")
    for binary in (a, b):
        if not os.access(binary, os.X_OK):
            sys.exit(f"{binary}: not an executable latebind binary")
    goodput = {"A": {}, "B": {}}
    shares = {"A": {}, "B": {}}
    for i in range(n):
        for label, binary in (("A", a), ("B", b)):
            report, per_s = run(binary, scenario, extra)
            total = sum(f["goodput_mbps"] for f in report["flows"])
            for f in report["flows"]:
                lat = f["latency_ms"]
                goodput[label].setdefault(f["name"], []).append(f["goodput_mbps"])
                print(
                    f"pair {i + 1} {label} {f['name']}: {f['goodput_mbps']:.2f} Mb/s, "
                    f"p50 / p95 / p99 {lat['p50']:.0f} / {lat['p95']:.0f} / {lat['p99']:.0f} ms, "
                    f"lost {f['lost']}"
                )
                if f["name"] in per_s:
                    print("    per s:", " ".join(f"{x:.1f}" for x in per_s[f["name"]]))
            if len(report["flows"]) > 1 and total > 0:
                run_shares = [(f["name"], 100 * f["goodput_mbps"] / total) for f in report["flows"]]
                for name, share in run_shares:
                    shares[label].setdefault(name, []).append(share)
                print(
                    f"pair {i + 1} {label} shares: "
                    + ", ".join(f"{name} {share:.1f} %" for name, share in run_shares)
                )
            sys.stdout.flush()
    for label, binary in (("A", a), ("B", b)):
        for name, v in goodput[label].items():
            print(
                f"{label} ({binary}) {name}: mean {statistics.mean(v):.2f} Mb/s, "
                f"{min(v):.2f}-{max(v):.2f} over {len(v)} runs"
            )
            share = shares[label].get(name)
            if share:
                print(
                    f"{label} ({binary}) {name}: share mean {statistics.mean(share):.1f} %, "
                    f"{min(share):.1f}-{max(share):.1f} over {len(share)} runs"
                )


if __name__ == "__main__":
    main()
