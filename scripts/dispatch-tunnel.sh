#!/usr/bin/env bash
# The daemon's dispatch stage, both sides of the binding horizon φ (docs/RESULTS.md 9.7),
# in the lab (real daemons in namespaces). The stage's sender thread runs in SCHED_FIFO
# 45 (the lab's daemons and traffic tools run at 40, its emulator at 50).
#   1. departure accuracy: scenarios/dispatch-pacing.toml (one link, the client's pacer
#      capped at 10 or 50 Mb/s, a backlog above the binding point), link 0's tunnel
#      datagrams captured on the emulator's side of the veth (kernel timestamps), their
#      gaps against the pacer's; the stage off, then on at several φ;
#   2. what φ costs late binding: scenarios/handoff.toml (packets lost at the outage on
#      the uplink, application loss) and scenarios/urgent.toml (the urgent packet's
#      latency behind a burst), the stage off and on at φ = 0, 1 and 5 ms.
# Needs root. Usage: sudo scripts/dispatch-tunnel.sh [RUNS]   (default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2}
[ "$(id -u)" = 0 ] || { echo "dispatch-tunnel: needs root"; exit 1; }
cargo build --release -q -p latebind
bin=$PWD/target/release/latebind
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
echo "# $(uname -r), $(nproc) CPUs, commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"

# A setting: "off", or φ in µs (the stage on).
sets() {
  if [ "$1" = off ]; then
    echo "--set late.dispatch=false"
  else
    echo "--set late.dispatch=true --set late.dispatch_horizon_us=$1 --set late.dispatch_rt_priority=45"
  fi
}
json() { awk -F': ' -v k="\"$1\"" '$1 ~ k {gsub(/,/, "", $2); print $2; exit}' "$2"; }

echo
echo "## 1. departure accuracy: |measured - expected| inter-departure time, µs"
printf '%-6s %-6s %4s %7s %7s %7s %7s %8s %8s   %s\n' "Mb/s" "φ µs" run pairs mean p50 p99 max \
  "stage: late(>50µs) p99 cpu%"
for rate in 10 50; do
  for phi in off 0 200 1000 5000; do
    for r in $(seq "$runs"); do
      d="$work/acc-$rate-$phi-$r"
      # shellcheck disable=SC2046
      "$bin" lab scenarios/dispatch-pacing.toml --mode late --capture-departures \
        --work-dir "$d" --set "late.pacing_rate_mbps=$rate" --set "flows.0.rate_mbps=$((rate * 12 / 10))" \
        $(sets "$phi") >/dev/null 2>&1
      dep="$d/departures.json" st="$d/client-status.json"
      stage="-"
      if [ "$phi" != off ]; then
        stage="$(json late "$st") $(json lateness_p99_us "$st") $(printf '%.1f' "$(json cpu_percent "$st")")"
      fi
      printf '%-6s %-6s %4s %7s %7.1f %7.1f %7.1f %8.1f   %s\n' "$rate" "$phi" "$r" \
        "$(json pairs "$dep")" "$(json error_mean_us "$dep")" "$(json p50 "$dep")" \
        "$(json p99 "$dep")" "$(json max "$dep")" "$stage"
    done
  done
done

echo
echo "## 2. the cost of φ to late binding"
printf '%-9s %-6s %4s %16s %14s %10s %14s\n' scenario "φ µs" run "outage up/down" "stall ms" "flow lost" "urgent p50 ms"
for phi in off 0 1000 5000; do
  for r in $(seq "$runs"); do
    # shellcheck disable=SC2046
    out=$("$bin" lab scenarios/handoff.toml --mode late $(sets "$phi") 2>/dev/null)
    # The link row (name, sent, lost, up/down, fifo full, max below) and the cut row.
    outage=$(awk '$1 == "wifi1" && $4 ~ /\// {print $4}' <<<"$out")
    stall=$(awk '$1 == "wifi1" && $3 == "bulk" {print $4}' <<<"$out")
    lost=$(awk '$1 == "bulk" {print $5}' <<<"$out")
    printf '%-9s %-6s %4s %16s %14s %10s %14s\n' handoff "$phi" "$r" "$outage" "$stall" "$lost" "-"
    # shellcheck disable=SC2046
    out=$("$bin" lab scenarios/urgent.toml --mode late $(sets "$phi") 2>/dev/null)
    urgent=$(awk '$1 == "urgent" {print $7}' <<<"$out")
    lost=$(awk '$1 == "burst" {print $5}' <<<"$out")
    printf '%-9s %-6s %4s %16s %14s %10s %14s\n' urgent "$phi" "$r" "-" "-" "$lost" "$urgent"
  done
done
