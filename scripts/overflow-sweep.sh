#!/usr/bin/env bash
# The bonding slides' evaluation: scenarios/overflow.toml with the nine combinations of
# k (0.1, 0.5, 1) and T_dwd (50, 250, 500 ms). For each: the loss rate (packets lost over
# packets sent, all flows), the share of the data packets the LTE link carried, and the
# excess the DSL link could not carry (the part of the offered load above its rate).
# Needs jq (apt-get install jq).
#
# Usage: scripts/overflow-sweep.sh [SCENARIO EXCESS_PERCENT]
# EXCESS_PERCENT is the share of the offered bytes above the DSL's rate: for
# scenarios/overflow.toml, 16 Mb/s over 10 s of 1600 Mb offered in all, 10 %.
set -euo pipefail
cd "$(dirname "$0")/.."
scenario=${1:-scenarios/overflow.toml}
excess=${2:-10.0}
command -v jq >/dev/null || { echo "overflow-sweep: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=target/release/latebind
printf '%-6s %-10s %10s %12s %12s\n' k "T_dwd ms" "loss %" "LTE share %" "excess %"
for k in 0.1 0.5 1.0; do
  for t in 50.0 250.0 500.0; do
    "$bin" sim "$scenario" --mode late --json \
      --set "late.overflow.k=$k" --set "late.overflow.t_dwd_ms=$t" |
      jq -r --arg k "$k" --arg t "$t" --argjson excess "$excess" '
        ([.flows[].sent] | add) as $sent |
        ([.flows[].lost] | add) as $lost |
        ([.links[].data_sent] | add) as $data |
        (.links[1].data_sent) as $lte |
        [$k, $t, ($lost / $sent * 100), ($lte / $data * 100), $excess] |
        @tsv' |
      awk -F'\t' '{printf "%-6s %-10s %10.3f %12.2f %12.2f\n", $1, $2, $3, $4, $5}'
  done
done
