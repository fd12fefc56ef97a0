#!/usr/bin/env bash
# Latency under load over each mahimahi trace of ../shared/traces (issue 7): for every
# trace, the download (the trace's .down file shapes the path) and the upload (.up, with
# the bottleneck in the network), scenarios/bufferbloat-trace.toml in the simulator with
# latebind and with the plain path (Linux). For each: the trace's mean capacity over the
# run (1500-byte delivery opportunities per millisecond line, from the flows' start to
# the end), the bulk TCP goodput and its share of that capacity, and the probe's p50 /
# p95 latency against the idle path (20 ms one way plus serialization).
# Needs jq (apt-get install jq).
#
# Usage: scripts/bufferbloat-sweep.sh [TRACE_DIR] [EXTRA --set ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-../shared/traces}
shift || true
command -v jq >/dev/null || { echo "bufferbloat-sweep: needs jq (apt-get install jq)"; exit 1; }
cargo build --release -q -p latebind
bin=target/release/latebind
dur=30
printf '%-24s %-4s %9s | %-9s %8s %6s %8s %8s\n' trace dir "cap Mb/s" mode "Mb/s" "% cap" "p50 ms" "p95 ms"
for f in "$dir"/*.down; do
  t=$(basename "$f" .down)
  for d in down up; do
    trace="$dir/$t.$d"
    cap=$(awk -v end=$((dur * 1000)) '$1 <= end {n++} END {printf "%.3f", n * 1500 * 8 / (end / 1000) / 1e6}' "$trace")
    for mode in late early; do
      "$bin" sim scenarios/bufferbloat-trace.toml --mode "$mode" --json \
        --set "links.0.trace_down=\"$(realpath "$dir/$t.down")\"" \
        --set "links.0.trace_up=\"$(realpath "$dir/$t.up")\"" \
        --set "flows.0.direction=\"$d\"" --set "flows.1.direction=\"$d\"" "$@" |
        jq -r --arg t "$t" --arg d "$d" --arg m "$mode" --argjson cap "$cap" '
          (.flows[] | select(.name == "bulk")) as $b |
          (.flows[] | select(.name == "probe")) as $p |
          [$t, $d, $cap, $m, $b.goodput_mbps, ($b.goodput_mbps / $cap * 100),
           $p.latency_ms.p50, $p.latency_ms.p95] | @tsv' |
        awk -F'\t' '{printf "%-24s %-4s %9.2f | %-9s %8.2f %6.0f %8.1f %8.1f\n", $1, $2, $3, $4, $5, $6, $7, $8}'
    done
  done
done
