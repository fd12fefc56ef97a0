#!/usr/bin/env bash
# A link's MTU shrinks under a running download (a cellular modem that comes back with
# 1400 beside a 1500-byte line): one TCP download (iperf3 -R, kernel Cubic) through
# latebind over two veth links shaped to RATE Mbit/s each (tbf at both ends), the
# `aggregate` policy; AT seconds in, the client's end of link b takes MTU 1400. The
# server's end keeps 1500, so a datagram over 1400 bytes sent down link b is dropped
# where it arrives (a path that black-holes large packets, as many do without ICMP).
# Then a new download of SECONDS / 2, whose connection starts after the change. Prints
# iperf3's per-second goodput and retransmissions, and what the daemons counted.
# Needs root and iperf3. Everything happens in namespaces this script creates and
# removes.
#
# Usage: sudo scripts/mtu-shrink.sh [SECONDS [AT [RATE]]]
# LATEBIND_BIN=path runs that binary instead of building this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
at=${2:-6}
rate=${3:-20}
command -v iperf3 >/dev/null || { echo "mtu-shrink: needs iperf3 (apt-get install iperf3)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "mtu-shrink: needs root"; exit 1; }
if [ -z "${LATEBIND_BIN:-}" ]; then
  cargo build --release -q -p latebind
  bin=$PWD/target/release/latebind
else
  bin=$LATEBIND_BIN
fi
. scripts/lib/tunnel.sh
tunnel_net lbm 2 30
for i in 0 1; do
  tc -n "$C" qdisc add dev c$i root tbf rate ${rate}mbit burst 15k limit 150k
  tc -n "$S" qdisc add dev s$i root tbf rate ${rate}mbit burst 15k limit 150k
done
tunnel_start 2 30 'policy = "aggregate"'
ip netns exec "$S" iperf3 -s -D -1 -B 10.77.0.1 >/dev/null
sleep 0.3
ip netns exec "$C" iperf3 -c 10.77.0.1 -R -t "$secs" -J > "$dir/iperf.json" &
iperf=$!
sleep "$at"
ip -n "$C" link set c1 mtu 1400
wait $iperf
python3 - "$dir/iperf.json" "$at" <<'EOT'
import json, sys
r = json.load(open(sys.argv[1]))
at = float(sys.argv[2])
secs = [(i["sum"]["start"], i["sum"]["bits_per_second"] / 1e6) for i in r["intervals"]]
print("per second, Mbit/s:", " ".join(f"{b:.1f}" for _, b in secs))
before = [b for s, b in secs if s < at]
after = [b for s, b in secs if s >= at + 1]
print(f"goodput before the MTU change: {sum(before) / max(len(before), 1):.2f} Mbit/s; "
      f"from a second after it: {sum(after) / max(len(after), 1):.2f}; "
      f"lowest second after it: {min(after, default=0):.2f}")
s = r["end"]["sum_sent"]
print(f"retransmitted segments: {s.get('retransmits', 'n/a')}")
EOT
ip netns exec "$S" iperf3 -s -D -1 -B 10.77.0.1 >/dev/null
sleep 0.3
ip netns exec "$C" iperf3 -c 10.77.0.1 -R -t $((secs / 2)) -J > "$dir/iperf2.json"
python3 - "$dir/iperf2.json" <<'EOT'
import json, sys
r = json.load(open(sys.argv[1]))
secs = [i["sum"]["bits_per_second"] / 1e6 for i in r["intervals"]]
print("a new download after the change, per second, Mbit/s:", " ".join(f"{b:.1f}" for b in secs))
print(f"its goodput from its second second: {sum(secs[1:]) / max(len(secs) - 1, 1):.2f} Mbit/s; "
      f"retransmitted segments: {r['end']['sum_sent'].get('retransmits', 'n/a')}")
EOT
for role in server client; do
  "$bin" status --json --socket "$dir/$role.sock" | python3 -c '
import json, sys
role = sys.argv[1]
st = json.load(sys.stdin)
s = st["sessions"][0]
e = s["engine"]
links = " ".join(f"{l['"'"'name'"'"']}: {l.get('"'"'max_datagram'"'"')} B, {l['"'"'data_sent'"'"']} sent, {l['"'"'lost'"'"']} lost;" for l in s["links"])
print(f"{role}: tun mtu {st['"'"'mtu'"'"']}; lost {e['"'"'lost'"'"']}, oversized {e.get('"'"'data_oversized'"'"', '"'"'n/a'"'"')}, too big (dropped / answered) {e.get('"'"'too_big_dropped'"'"', '"'"'n/a'"'"')} / {e.get('"'"'too_big_signalled'"'"', '"'"'n/a'"'"')}, reinjected (lost) {e['"'"'reinjected_lost'"'"']}; {links}")
' "$role"
done
