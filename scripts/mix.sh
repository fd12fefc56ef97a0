#!/usr/bin/env bash
# Prints a two-or-more-link mix scenario (the format of scripts/mix-sweep.sh): one TCP
# flow, the aggregate policy, 1000-packet FIFOs, 20 s, seed 1.
#
# Usage: scripts/mix.sh DIRECTION RATE:DELAY:LOSS [RATE:DELAY:LOSS ...] > FILE
#   DIRECTION: up or down; RATE in Mb/s, DELAY one-way in ms, LOSS a fraction.
# Example, the lab's far-first-link case of docs/RESULTS.md 8.1:
#   scripts/mix.sh down 20:30:0 5:10:0.02 > /tmp/mix.toml
#   sudo target/release/latebind lab /tmp/mix.toml --mode late --json
set -euo pipefail
if [ $# -lt 2 ] || { [ "$1" != up ] && [ "$1" != down ]; }; then
  echo "usage: scripts/mix.sh up|down RATE:DELAY:LOSS [RATE:DELAY:LOSS ...]" >&2
  exit 2
fi
d=$1
shift
printf '[scenario]\nname = "mix"\nduration_s = 20.0\nseed = 1\n'
i=0
for l in "$@"; do
  IFS=: read -r r dl ls <<<"$l"
  if [ -z "$r" ] || [ -z "$dl" ] || [ -z "$ls" ]; then
    echo "mix.sh: link '$l': expected RATE:DELAY:LOSS (Mb/s, ms, fraction)" >&2
    exit 2
  fi
  printf '[[links]]\nname = "l%d"\nrate_mbps = %s\ndelay_ms = %s\nqueue_packets = 1000\nloss = %s\n' \
    "$i" "$r" "$dl" "$ls"
  i=$((i + 1))
done
printf '[[flows]]\nname = "bulk"\nkind = "tcp-bulk"\ndirection = "%s"\n' "$d"
printf '[late]\npolicy = "aggregate"\n'
