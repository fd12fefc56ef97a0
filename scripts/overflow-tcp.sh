#!/usr/bin/env bash
# The bonding slides' TCP cross-traffic case: scenarios/overflow-tcp.toml with T_dwd of
# 50, 250, 500 and 1000 ms, with rate control (the default) and without (the slides'
# loss-driven weights alone). For each: the TCP download's goodput (outside the tunnel,
# over the fixed line, 5-25 s), the tunnel's UDP loss, and the share of the tunnel's
# packets on the mobile link before (1-5 s), beside (10-24 s) and after (27-30 s) the
# TCP flow. Needs jq (apt-get install jq).
#
# Usage: scripts/overflow-tcp.sh [SCENARIO] [--set KEY=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-scenarios/overflow-tcp.toml}
shift || true
command -v jq >/dev/null || { echo "overflow-tcp: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=target/release/latebind
printf '%-12s %-9s %12s %10s %14s %14s %14s\n' \
  "rate ctrl" "T_dwd ms" "TCP Mb/s" "UDP loss %" "LTE before %" "LTE beside %" "LTE after %"
for rc in true false; do
  for t in 50.0 250.0 500.0 1000.0; do
    "$bin" sim "$scenario" --mode late --json "$@" \
      --set "late.rate_control=$rc" --set "late.overflow.t_dwd_ms=$t" |
      jq -r --arg rc "$rc" --arg t "$t" '
        def share(a; b): ([.links[1].data_sent_per_s[a:b][]] | add) as $lte |
          ([.links[].data_sent_per_s[a:b][]] | add) as $all |
          (if $all > 0 then $lte / $all * 100 else 0 end);
        (.flows[] | select(.name == "udp")) as $udp |
        (.flows[] | select(.name == "tcp")) as $tcp |
        [$rc, $t, $tcp.goodput_mbps, ($udp.lost / $udp.sent * 100),
         share(1; 5), share(10; 24), share(27; 30)] | @tsv' |
      awk -F'\t' '{printf "%-12s %-9s %12.2f %10.3f %14.1f %14.1f %14.1f\n", $1, $2, $3, $4, $5, $6, $7}'
  done
done
