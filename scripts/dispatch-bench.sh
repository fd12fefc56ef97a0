#!/usr/bin/env bash
# Precise dispatch, probing and replay (docs/RESULTS.md section 9), each figure printed
# under the command that produced it:
#   1. send-time accuracy: the pre-dispatch sender beside the sequential one, sizes
#      40-1500 B, spacings 10 µs-100 ms, idle and with busy-loop threads on every CPU,
#      plus packet pairs (latebind dispatch-bench);
#   2. the same with both senders in SCHED_FIFO, and the pre-dispatching period φ
#      from 0 to 5 ms;
#   3. latebind probe on emulated links of 5, 20 and 100 Mb/s and a mahimahi trace,
#      and with 40 % cross traffic;
#   4. replay of a synthetic capture (Poisson gaps, mean 1 ms, 3000 packets).
# Needs root (namespaces, AF_PACKET, SCHED_FIFO). Everything happens in namespaces the
# commands create and remove.
#
# Usage: sudo scripts/dispatch-bench.sh [RUNS]   (each measurement RUNS times, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-2}
[ "$(id -u)" = 0 ] || { echo "dispatch-bench: needs root"; exit 1; }
cargo build --release -q -p latebind
bin=$PWD/target/release/latebind
trace=${TRACE:-../shared/traces/TMobile-LTE-short.up}
sample=$(mktemp --suffix=.pcap)
trap 'rm -f "$sample"' EXIT INT TERM
echo "# $(uname -r), $(nproc) CPUs, commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
run() {
  echo; echo "\$ latebind $*"
  "$bin" "$@" 2>/dev/null
}
for r in $(seq "$runs"); do
  echo; echo "## run $r ($(cut -d" " -f1-3 /proc/loadavg) load average before)"
  run dispatch-bench
  run dispatch-bench --rt-priority 50
  for phi in 0 100 500 1000 5000; do
    run dispatch-bench --rt-priority 50 --sizes 200 --spacings-us 100,1000 --load idle --pairs 0 --phi-us "$phi"
  done
  run probe --eval --rates 5,20,100 --trace "$trace"
  run probe --eval --rates 5,20,100 --cross 0.4
  "$bin" replay --write-sample "$sample" --sample-packets 3000 --sample-gap-us 1000
  echo; echo "\$ latebind replay --write-sample sample.pcap --sample-packets 3000 --sample-gap-us 1000"
  run replay "$sample" --eval
  run replay "$sample" --eval --rt-priority 50
done
