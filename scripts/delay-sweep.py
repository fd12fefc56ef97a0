#!/usr/bin/env python3
"""Each mahimahi trace of ../shared/traces as a cellular link, over several of its delays,
in the simulator (mode late): the figures of docs/RESULTS.md 10.6, which compare one build
with and without a setting.

  scripts/delay-sweep.py single [--set K=V ...]   bufferbloat-trace.toml: the trace is the
      only link; each trace down and up, its delay 15, 25 and 35 ms. Goodput in % of the
      trace's mean capacity over the 30 s (mean over the delays, then each), the probe's
      p50 and p95 (means), and each run's share of time in competitive mode.
  scripts/delay-sweep.py two [--set K=V ...]      bufferbloat-2links.toml: 10 Mb/s beside
      the trace (download; an upload with --set 'flows.0.direction="up"'), its delay 15,
      30 and 45 ms. Goodput in % of the links' sum in the flow's direction, the probe's
      p95.
  scripts/delay-sweep.py three [--set K=V ...]    aggregate-3.toml: 10 and 5 Mb/s beside the
      trace (upload), its delay 10-50 ms. Goodput in % of the links' sum (mean, least).

  scripts/delay-sweep.py rates [--set K=V ...]    bufferbloat.toml (the issue's fixed-rate
      setup) at 0.5-100 Mb/s: latebind's and the plain path's goodput in % of the link,
      the probe's p50 and p99 over idle (the same run without the download) in ms and in
      packet times (one 1500-byte packet at the link's rate).

  scripts/delay-sweep.py unused [--set K=V ...]   where each trace link's capacity went
      unused (the report's `unused_capacity`): the rows of single (the data's direction)
      and of three (the trace link's uplink), each with the goodput, the share of the
      link's capacity unused and, of that, the shares by what the sending engine was
      doing: nothing waited above its binding point, the link was not up, its window
      was full, its budget below the binding point was taken, its pacer held the next
      packet, or the policy kept the packets for other links; means over the delays.
      Its `--set`s go to both files' runs.

`--delays D,D,...` runs single, two, three or unused at those one-way delays (ms) of the trace
instead: single runs move by several points with the delay (which of the trace's bursts
and pauses CoDel's drops meet), so a change is best judged over many, e.g.
`--delays 10,12.5,15,17.5,20,22.5,25,27.5,30,32.5,35,37.5,40`.

Needs the release build (cargo build --release -p latebind), or another binary named by
LATEBIND_BIN (to compare two builds side by side).
"""
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from traces import NAMES, TRACES, capacity, trace_sets  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LATEBIND_BIN") or os.path.join(ROOT, "target", "release", "latebind")


# One-way delays of the trace link given by --delays, if any.
DELAYS = None


def sim(scenario, sets, mode="late"):
    args = [BIN, "sim", os.path.join("scenarios", scenario), "--mode", mode, "--json"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def each(delays, run):
    """`run` at each delay, two at a time."""
    with ThreadPoolExecutor(2) as ex:
        return list(ex.map(run, delays))


def single_run(name, d, delay, extra):
    """bufferbloat-trace.toml's report with trace `name` as its link, the flows going `d`."""
    sets = trace_sets(0, name) + [
        f"links.0.delay_ms={delay}",
        f'flows.0.direction="{d}"',
        f'flows.1.direction="{d}"',
    ]
    return sim("bufferbloat-trace.toml", sets + extra)


def single(extra):
    for name in NAMES:
        for d in ["down", "up"]:
            cap = capacity(os.path.join(TRACES, f"{name}.{d}"))

            def run(delay):
                j = single_run(name, d, delay, extra)
                f = {x["name"]: x for x in j["flows"]}
                comp = max(x["competitive_pct"] for x in j["links"][0]["rate_control"])
                p = f["probe"]["latency_ms"]
                return 100 * f["bulk"]["goodput_mbps"] / cap, p["p50"], p["p95"], comp

            r = each(DELAYS or [15, 25, 35], run)
            mean = lambda i: sum(x[i] for x in r) / len(r)  # noqa: E731
            print(
                f"{name:22s} {d:4s} {mean(0):5.1f} % [{' '.join('%.0f' % x[0] for x in r)}]"
                f"  p50 {mean(1):5.0f}  p95 {mean(2):6.0f} [{' '.join('%.0f' % x[2] for x in r)}]"
                f"  competing % {[round(x[3]) for x in r]}"
            )


def two(extra):
    # The download's direction, or the upload's with `--set 'flows.0.direction="up"'`.
    way = "up" if 'flows.0.direction="up"' in extra else "down"
    for name in NAMES:
        cap = 10 + capacity(os.path.join(TRACES, f"{name}.{way}"))

        def run(delay):
            j = sim("bufferbloat-2links.toml", trace_sets(1, name) + [f"links.1.delay_ms={delay}"] + extra)
            f = {x["name"]: x for x in j["flows"]}
            return 100 * f["bulk"]["goodput_mbps"] / cap, f["probe"]["latency_ms"]["p95"]

        r = each(DELAYS or [15, 30, 45], run)
        print(
            f"{name:22s} of {cap:5.2f} Mb/s: {sum(x[0] for x in r) / len(r):5.1f} %"
            f" [{' '.join('%.1f' % x[0] for x in r)}]  probe p95 {[round(x[1], 1) for x in r]}"
        )


def three(extra):
    for name in NAMES:
        cap = 15 + capacity(os.path.join(TRACES, f"{name}.up"))

        def run(delay):
            j = sim("aggregate-3.toml", trace_sets(2, name) + [f"links.2.delay_ms={delay}"] + extra)
            return 100 * j["flows"][0]["goodput_mbps"] / cap

        r = each(DELAYS or [10, 15, 20, 25, 30, 35, 40, 50], run)
        print(
            f"{name:22s} of {cap:5.2f} Mb/s: {sum(r) / len(r):5.1f} % (least {min(r):5.1f})"
            f" [{' '.join('%.1f' % x for x in r)}]"
        )


CAUSES = ["nothing_waiting_pct", "not_up_pct", "window_pct", "budget_pct", "pacer_pct", "elsewhere_pct"]


def unused_row(label, runs):
    """Prints the means over `runs` of (goodput %, unused dict) as one row."""
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    causes = "  ".join(f"{c[:-4].replace('_', ' ')} {mean([u[c] for _, u in runs]):5.1f}" for c in CAUSES)
    print(
        f"{label}  goodput {mean([g for g, _ in runs]):5.1f} %"
        f"  unused {mean([u['pct'] for _, u in runs]):5.1f} % of the link: {causes}"
    )


def unused(extra):
    """Where each trace link's capacity went unused (the report's `unused_capacity`): the
    single-link rows (the data's direction of the trace link) and the three-link upload
    (the trace link's uplink), means over the delays."""
    for name in NAMES:
        for d in ["down", "up"]:
            cap = capacity(os.path.join(TRACES, f"{name}.{d}"))

            def run(delay):
                j = single_run(name, d, delay, extra)
                u = j["links"][0]["unused_capacity"][0 if d == "up" else 1]
                return 100 * j["flows"][0]["goodput_mbps"] / cap, u

            unused_row(f"single {name:22s} {d:4s}", each(DELAYS or [15, 25, 35], run))
    for name in NAMES:
        cap = 15 + capacity(os.path.join(TRACES, f"{name}.up"))

        def run(delay):
            j = sim("aggregate-3.toml", trace_sets(2, name) + [f"links.2.delay_ms={delay}"] + extra)
            return 100 * j["flows"][0]["goodput_mbps"] / cap, j["links"][2]["unused_capacity"][0]

        unused_row(f"three  {name:22s} up  ", each(DELAYS or [10, 15, 20, 25, 30, 35, 40, 50], run))


def rates(extra):
    for rate in [0.5, 1, 2, 5, 10, 20, 50, 100]:

        def run(mode_stop):
            mode, stop = mode_stop
            sets = [f"links.0.rate_mbps={rate}"] + (["flows.0.stop_s=0.0"] if stop else [])
            j = sim("bufferbloat.toml", sets + extra, mode)
            return {x["name"]: x for x in j["flows"]}

        late, plain, idle = each([("late", False), ("early", False), ("late", True)], run)
        packet_ms = 1500 * 8 / (rate * 1e3)
        base = idle["probe"]["latency_ms"]

        def over(f, q):
            return f["probe"]["latency_ms"][q] - base[q]

        print(
            f"{rate:5g} Mb/s  latebind {100 * late['bulk']['goodput_mbps'] / rate:5.1f} %"
            f"  p50 +{over(late, 'p50'):6.1f}  p99 +{over(late, 'p99'):6.1f} ms"
            f" ({over(late, 'p99') / packet_ms:4.1f} packets)"
            f"   plain path {100 * plain['bulk']['goodput_mbps'] / rate:5.1f} %"
            f"  p50 +{over(plain, 'p50'):7.0f}  p99 +{over(plain, 'p99'):7.0f} ms"
            f"   idle p99 {base['p99']:5.1f} ms"
        )


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly
    if len(sys.argv) < 2 or sys.argv[1] not in ("single", "two", "three", "rates", "unused"):
        sys.exit(__doc__)
    global DELAYS
    extra = []
    rest = sys.argv[2:]
    while rest:
        if rest[0] == "--delays" and sys.argv[1] == "rates":
            sys.exit("delay-sweep: --delays is for single, two, three and unused; rates takes --set links.0.delay_ms=D")
        if rest[0] == "--delays" and len(rest) >= 2:
            try:
                DELAYS = [float(d) for d in rest[1].split(",")]
            except ValueError:
                sys.exit(f"delay-sweep: --delays expects milliseconds like 15,25,35, got {rest[1]!r}")
        elif rest[0] != "--set" or len(rest) < 2:
            sys.exit(f"delay-sweep: expected --set KEY=VALUE or --delays D,D,..., got {rest[0]!r}")
        else:
            extra.append(rest[1])
        rest = rest[2:]
    {"single": single, "two": two, "three": three, "rates": rates, "unused": unused}[sys.argv[1]](extra)


if __name__ == "__main__":
    main()
