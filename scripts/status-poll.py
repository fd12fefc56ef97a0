#!/usr/bin/env python3
"""Polls a running daemon's status on its control socket and writes one JSON line per
link per poll: each link's rate control (window, rate, queueing delay at the bottleneck,
RTTs), what waits above and below the binding point, CoDel's drops and the link's
suspicions.

  scripts/status-poll.py SOCKET OUT SECONDS PERIOD

e.g. beside a lab run (`latebind lab ... --work-dir DIR`), from a second shell once
DIR/server.sock exists:

  chrt -f 1 scripts/status-poll.py DIR/server.sock poll.jsonl 28 0.2

Under the lab's load the emulator and the daemons run at real-time priority, and
`latebind status` (a full process start per call) took 1-3 s per call at 100 Mb/s;
this keeps one interpreter and reads the socket directly, and `chrt -f 1` lets it run.
"""
import json
import socket
import sys
import time


def read(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(1.0)
    s.connect(path)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    return json.loads(data)


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
