#!/usr/bin/env bash
# The handoff experiment (late-binding paper, figure 4) at several cut times, so that the
# figure is not one phase of TCP's sawtooth: packets lost on link 1 (client -> server)
# when it goes away, per variant, and the mean over the cut times; and the longest time
# the receiving application saw nothing after the cut (the report's per-cut stall), per
# variant. The flow stops 3.5 s after the cut, which ends the stall's window (it runs
# to the flow's stop): the file's 12 s run had a later stall of its own (170 ms at
# 11.5 s under min-rtt) taken for the cut's at every cut time. 3.5 s holds the early
# variants' timeouts (up to 3 s); nothing before the stop changes.
#
# Usage: scripts/handoff-sweep.sh [CUT_S ...]   (default: 12 cut times from 5.1 to 7.3 s)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p latebind
bin=target/release/latebind
cuts=("$@")
[ ${#cuts[@]} -gt 0 ] || cuts=(5.1 5.3 5.5 5.7 5.9 6.0 6.2 6.4 6.6 6.9 7.1 7.3)
printf '%-8s %16s %18s %17s   %s\n' "cut (s)" "late, budget 2" "early, driver 50" "early, driver 5" "stall after the cut, ms (late / early 50 / early 5)"
sum=(0 0 0)
for c in "${cuts[@]}"; do
  stop=$(awk "BEGIN{print $c + 3.5}")
  out=$("$bin" sim scenarios/handoff.toml --compare --set "links.0.outages=[[$c, 1000.0]]" \
    --set "flows.0.stop_s=$stop")
  row=$(awk '/^wifi1: lost at outage, up/ {print $(NF-2), $(NF-1), $NF}' <<<"$out")
  gap=$(awk '/^cut wifi1 .*bulk: stall ms/ {print $(NF-2) " / " $(NF-1) " / " $NF}' <<<"$out")
  read -r a b d <<<"$row"
  printf '%-8s %16s %18s %17s   %s\n' "$c" "$a" "$b" "$d" "$gap"
  sum=($((sum[0] + a)) $((sum[1] + b)) $((sum[2] + d)))
done
n=${#cuts[@]}
printf '%-8s %16s %18s %17s\n' "mean" \
  "$(awk "BEGIN{printf \"%.1f\", ${sum[0]}/$n}")" \
  "$(awk "BEGIN{printf \"%.1f\", ${sum[1]}/$n}")" \
  "$(awk "BEGIN{printf \"%.1f\", ${sum[2]}/$n}")"
