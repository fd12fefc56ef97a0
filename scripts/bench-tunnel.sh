#!/usr/bin/env bash
# Tunnel throughput: one TCP stream (iperf3, 10 s) through latebind over two unshaped
# veth links, with encryption, next to the same stream over one plain veth, in the same
# run. Needs root and iperf3 (apt-get install iperf3). Everything happens in namespaces
# this script creates and removes.
#
# Usage: sudo scripts/bench-tunnel.sh [SECONDS]
# BENCH_CONF="rate_control = false" adds its lines to both daemons' main sections.
# BENCH_REVERSE=1 measures downloads (server to client: iperf3 -R) instead of uploads.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
command -v iperf3 >/dev/null || { echo "bench-tunnel: needs iperf3 (apt-get install iperf3)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench-tunnel: needs root"; exit 1; }
cargo build --release -q -p latebind
bin=$PWD/target/release/latebind
# Three veth links: the tunnel runs over the first two, the plain stream over the third.
. scripts/lib/tunnel.sh
tunnel_net lbb 3 20
tunnel_start 2 20 "${BENCH_CONF:-}"
ip netns exec "$S" iperf3 -s -D -1 -B 198.18.22.1 >/dev/null
sleep 0.3
dirflag=""; [ -n "${BENCH_REVERSE:-}" ] && dirflag=-R
# One iperf3 run from the client's namespace to $1: its bits per second.
rate() {
  ip netns exec "$C" iperf3 -c "$1" $dirflag -t "$secs" -J |
    awk -F: '/"bits_per_second"/ {v=$2} END {gsub(/[ ,]/, "", v); print v}'
}
plain=$(rate 198.18.22.1)
ip netns exec "$S" iperf3 -s -D -1 -B 10.77.0.1 >/dev/null
sleep 0.3
tunnel=$(rate 10.77.0.1)
awk -v p="$plain" -v t="$tunnel" 'BEGIN {
  printf "plain veth (one link):            %8.0f Mbit/s\n", p / 1e6
  printf "latebind, 2 veth links, encrypted: %8.0f Mbit/s\n", t / 1e6
  printf "ratio:                             %8.3f\n", t / p }'
"$bin" status --socket "$dir/client.sock" || true
