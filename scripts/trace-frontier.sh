#!/usr/bin/env bash
# Throughput against delay over each mahimahi trace of ../shared/traces (issue 7): the
# setup of scripts/bufferbloat-sweep.sh (scenarios/bufferbloat-trace.toml in the
# simulator: 20 ms one way, a 1000-packet FIFO in the network, one bulk TCP transfer and a
# probe every 20 ms), latebind only, once for each longest queue that rate control may
# keep at the link's bottleneck (`late.rate_control_max_queue_ms`; the default is 20).
# For each trace and direction: the trace's mean capacity over the run, then for each
# setting the bulk goodput as a share of that capacity and the probe's p95 one-way
# latency, and last the probe's p95 with no bulk traffic at all (the trace's own pauses:
# no sender can get under it).
# Needs jq (apt-get install jq).
#
# Usage: scripts/trace-frontier.sh [TRACE_DIR] [MAX_QUEUE_MS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../shared/traces}
shift || true
queues=("$@")
[ ${#queues[@]} -gt 0 ] || queues=(10 20 40 80)
command -v jq >/dev/null || { echo "trace-frontier: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=target/release/latebind
dur=30
run() { # trace dir extra-args... -> "goodput_mbps p95_ms"
  local t=$1 d=$2
  shift 2
  "$bin" sim scenarios/bufferbloat-trace.toml --mode late --json \
    --set "links.0.trace_down=\"$(realpath "$dir/$t.down")\"" \
    --set "links.0.trace_up=\"$(realpath "$dir/$t.up")\"" \
    --set "flows.0.direction=\"$d\"" --set "flows.1.direction=\"$d\"" "$@" |
    jq -r '(.flows[] | select(.name == "bulk")) as $b | (.flows[] | select(.name == "probe")) as $p
           | "\($b.goodput_mbps) \($p.latency_ms.p95)"'
}
printf '| trace | dir | capacity Mb/s |'
for q in "${queues[@]}"; do printf ' %s ms: %% cap / p95 ms |' "$q"; done
printf ' probe alone p95 ms |\n|---|---|---:|'
for _ in "${queues[@]}"; do printf -- '---:|'; done
printf -- '---:|\n'
for f in "$dir"/*.down; do
  t=$(basename "$f" .down)
  for d in down up; do
    cap=$(awk -v end=$((dur * 1000)) '$1 <= end {n++} END {printf "%.3f", n * 1500 * 8 / (end / 1000) / 1e6}' "$dir/$t.$d")
    printf '| %s | %s | %.2f |' "$t" "$d" "$cap"
    for q in "${queues[@]}"; do
      read -r g p < <(run "$t" "$d" --set "late.rate_control_max_queue_ms=$q")
      awk -v g="$g" -v c="$cap" -v p="$p" 'BEGIN {printf " %.0f %% / %.0f |", g / c * 100, p}'
    done
    read -r _ p < <(run "$t" "$d" --set flows.0.stop_s=0.0)
    awk -v p="$p" 'BEGIN {printf " %.0f |\n", p}'
  done
done
