#!/usr/bin/env python3
"""Polls a running daemon's status (`latebind status --json`) and writes one JSON line per
link per poll: each link's rate control (window, rate, queueing delay at the bottleneck,
RTTs), what waits above and below the binding point, CoDel's drops and the link's
suspicions.

  scripts/status-poll.py SOCKET OUT SECONDS PERIOD

e.g. beside a lab run (`latebind lab ... --work-dir DIR`), from a second shell once
DIR/server.sock exists:

  chrt -f 1 scripts/status-poll.py DIR/server.sock poll.jsonl 28 0.2

The emulator and the daemons run at real-time priority; `chrt -f 1` keeps the polls on
time beside them. Uses the release build, or the binary named by LATEBIND_BIN.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("LATEBIND_BIN") or os.path.join(ROOT, "target", "release", "latebind")


def read(path):
    out = subprocess.run(
        [BIN, "status", "--json", "--socket", path], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    path, out = sys.argv[1], sys.argv[2]
    try:
        secs, period = float(sys.argv[3]), float(sys.argv[4])
    except ValueError:
        sys.exit(f"status-poll: SECONDS and PERIOD are numbers, got {sys.argv[3]!r} {sys.argv[4]!r}")
    t0 = time.time()
    with open(out, "w") as f:
        while time.time() - t0 < secs:
            try:
                j = read(path)
            except subprocess.CalledProcessError as e:
                print(f"status-poll: {e.stderr.strip() or e}", file=sys.stderr)
                time.sleep(period)
                continue
            except (OSError, ValueError) as e:
                print(f"status-poll: {path}: {e}", file=sys.stderr)
                time.sleep(period)
                continue
            t = round(time.time() - t0, 3)
            for ses in j.get("sessions", []):
                for l in ses["links"]:
                    row = {
                        "t": t,
                        "link": l["name"],
                        "state": l["state"],
                        "cwnd": l["cwnd_bytes"],
                        "in_flight": l["in_flight"],
                        "cc_rate_mbps": l["cc_rate_mbps"],
                        "delivery_mbps": l["delivery_rate_mbps"],
                        "queue_ms": l["queue_delay_ms"],
                        "back_ms": l["return_delay_ms"],
                        "srtt_ms": l["srtt_ms"],
                        "min_rtt_ms": l["min_rtt_ms"],
                        "below_binding": l["below_binding"],
                        "suspected": l["suspected"],
                        "queued_bytes": ses["queued_bytes"],
                        "aqm_dropped": ses["engine"]["aqm_dropped"],
                    }
                    f.write(json.dumps(row) + "\n")
            f.flush()
            time.sleep(period)


if __name__ == "__main__":
    main()
