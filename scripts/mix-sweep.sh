#!/usr/bin/env bash
# One TCP flow over two links of many mixes the scenario files were not written for
# (issue 5: a lossy or slow link must not drag the bond down): link rates 10+10, 20+5,
# 5+20, 10+2, 2+10 and 50+10 Mb/s; one-way delays 10/30, 30/10, 10/100 and 5/5 ms; loss
# on the second link 0 and LOSS (default 0.02); the flow up and down; 1000-packet FIFOs;
# 20 s in the simulator. For each mix: the aggregate policy over both links, and each link
# alone (a scenario with that link only), and the aggregate's goodput over the better
# link alone. Last, per loss rate: the geometric mean of that ratio and the worst mix.
# Needs jq (apt-get install jq).
#
# With --lab (root): the same in the lab (`latebind lab`, kernel TCP), over the flow down
# and the delays 30/10 and 10/100 only (24 mixes, 60 runs of 25 s: about 25 minutes).
# With --first: the loss on the first link instead (the nearer one at 10/30 and 10/100).
#
# Usage: scripts/mix-sweep.sh [LOSS] [--lab] [--first]
set -euo pipefail
cd "$(dirname "$0")/.."
loss=0.02
mode=sim
first=no
for arg in "$@"; do
  case $arg in
    --lab) mode=lab ;;
    --first) first=yes ;;
    *) loss=$arg ;;
  esac
done
directions="up down"
delay_pairs="10:30 30:10 10:100 5:5"
if [ "$mode" = lab ]; then
  directions=down
  delay_pairs="30:10 10:100"
fi
command -v jq >/dev/null || { echo "mix-sweep: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=$PWD/target/release/latebind
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
scenario() { # file direction links (rate:delay:loss ...)
  local f=$1
  shift
  scripts/mix.sh "$@" >"$f"
}
# (The lab's notes on stderr, the same for every run, are left out.)
goodput() { "$bin" "$mode" "$1" --mode late --json 2> >(grep -v '^note:' >&2) | jq -r '.flows[0].goodput_mbps'; }
printf '%-8s %-9s %-6s %-5s %9s %9s %9s %7s\n' rates delays loss dir aggregate "a alone" "b alone" ratio
results=$dir/results
for rates in 10:10 20:5 5:20 10:2 2:10 50:10; do
  IFS=: read -r ra rb <<<"$rates"
  for delays in $delay_pairs; do
    IFS=: read -r da db <<<"$delays"
    for d in $directions; do
      # The link without loss is the same run alone at every loss rate.
      if [ "$first" = yes ]; then
        scenario "$dir/b.toml" "$d" "$rb:$db:0.0"
        b=$(goodput "$dir/b.toml")
      else
        scenario "$dir/a.toml" "$d" "$ra:$da:0.0"
        a=$(goodput "$dir/a.toml")
      fi
      for lb in 0.0 "$loss"; do
        if [ "$first" = yes ]; then
          scenario "$dir/agg.toml" "$d" "$ra:$da:$lb" "$rb:$db:0.0"
          scenario "$dir/a.toml" "$d" "$ra:$da:$lb"
          a=$(goodput "$dir/a.toml")
        else
          scenario "$dir/agg.toml" "$d" "$ra:$da:0.0" "$rb:$db:$lb"
          scenario "$dir/b.toml" "$d" "$rb:$db:$lb"
          b=$(goodput "$dir/b.toml")
        fi
        g=$(goodput "$dir/agg.toml")
        awk -v r="$rates" -v dl="$delays" -v l="$lb" -v d="$d" -v g="$g" -v a="$a" -v b="$b" 'BEGIN {
          best = a > b ? a : b
          printf "%-8s %-9s %-6s %-5s %9.2f %9.2f %9.2f %7.2f\n", r, dl, l, d, g, a, b, g / best
        }' | tee -a "$results"
      done
    done
  done
done
echo
awk '{ n[$3]++; s[$3] += log($8); if (!($3 in w) || $8 < w[$3]) { w[$3] = $8; wm[$3] = $1 " " $2 " " $4 } }
  END { for (l in n) printf "loss %s: %d mixes, geometric mean of aggregate / better link alone %.3f, worst %.2f (%s)\n",
        l, n[l], exp(s[l] / n[l]), w[l], wm[l] }' "$results"
