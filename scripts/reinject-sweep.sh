#!/usr/bin/env bash
# Spurious reinjections under jitter and loss (fast-reinjection paper, IV-D):
# scenarios/reinject-jitter.toml over N seeds (default 30) for each reinjection timer:
# the reinjection rate (reinjected packets over application packets), its median, the
# suspicions and the longest one. Needs jq (apt-get install jq).
#
# Usage: scripts/reinject-sweep.sh [SEEDS] [SCENARIO]
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-30}
scenario=${2:-scenarios/reinject-jitter.toml}
command -v jq >/dev/null || { echo "reinject-sweep: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=target/release/latebind
printf '%-16s %8s %8s %10s %10s %12s %14s\n' timer seeds "median %" "max %" suspicions "longest ms" "app lost (sum)"
for timer in srtt+rttvar-delta srtt+rttvar minrtt+rttvar; do
  rates=(); susp=0; longest=0; lost=0
  for seed in $(seq 1 "$seeds"); do
    line=$("$bin" sim "$scenario" --mode late --json \
      --set "scenario.seed=$seed" --set "late.reinjection=\"$timer\"" |
      jq -r '[(.totals.reinjected / ([.flows[].sent] | add) * 100), .engine.suspected,
               .engine.longest_suspect_ms, .totals.lost] | @tsv')
    read -r rate s l lo <<<"$line"
    rates+=("$rate"); susp=$((susp + s)); lost=$((lost + lo))
    longest=$(awk -v a="$longest" -v b="$l" 'BEGIN{print (b > a) ? b : a}')
  done
  sorted=$(printf '%s\n' "${rates[@]}" | sort -g)
  median=$(awk '{a[NR]=$1} END{if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}' <<<"$sorted")
  max=$(tail -1 <<<"$sorted")
  printf '%-16s %8d %8.4f %10.4f %10d %12.1f %14d\n' "$timer" "$seeds" "$median" "$max" "$susp" "$longest" "$lost"
done
