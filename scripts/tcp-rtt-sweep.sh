#!/usr/bin/env bash
# One TCP flow (smoltcp, cubic) over one 5 Mb/s link at several one-way delays:
# goodput and segment latency, latebind (mode late) beside Linux early binding with a
# 1000-packet qdisc. Usage: scripts/tcp-rtt-sweep.sh [DELAY_MS ...]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p latebind
bin=target/release/latebind
delays=("$@")
[ ${#delays[@]} -gt 0 ] || delays=(5 10 25 50 100 150)
printf '%-10s %14s %14s %16s %16s\n' "delay ms" "late Mbit/s" "early Mbit/s" "late p99 ms" "early p99 ms"
for d in "${delays[@]}"; do
  out=$("$bin" sim scenarios/tcp-single-link.toml --compare --set "links.0.delay_ms=$d")
  g=$(awk '/^bulk: goodput/ {print $(NF-1), $NF}' <<<"$out")
  p=$(awk '/^bulk: latency p99/ {print $(NF-1), $NF}' <<<"$out")
  read -r gl ge <<<"$g"
  read -r pl pe <<<"$p"
  printf '%-10s %14s %14s %16s %16s\n' "$d" "$gl" "$ge" "$pl" "$pe"
done
