#!/usr/bin/env bash
# Tunnel throughput: one TCP stream (iperf3, 10 s) through latebind over two unshaped
# veth links, with encryption, next to the same stream over one plain veth, in the same
# run. Needs root and iperf3 (apt-get install iperf3). Everything happens in namespaces
# this script creates and removes.
#
# Usage: sudo scripts/bench-tunnel.sh [SECONDS]
# BENCH_CONF="rate_control = false" adds its lines to both daemons' main sections.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
command -v iperf3 >/dev/null || { echo "bench-tunnel: needs iperf3 (apt-get install iperf3)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bench-tunnel: needs root"; exit 1; }
cargo build --release -q -p latebind
bin=$PWD/target/release/latebind
id=$$
C=lbb-c$id; S=lbb-s$id
dir=$(mktemp -d)
cleanup() {
  set +e
  [ -n "${pids:-}" ] && kill $pids 2>/dev/null; sleep 0.3; [ -n "${pids:-}" ] && kill -9 $pids 2>/dev/null
  ip netns del "$C" 2>/dev/null; ip netns del "$S" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
ip netns add "$C"; ip netns add "$S"
ip -n "$C" link set lo up; ip -n "$S" link set lo up
for i in 0 1 2; do
  ip link add lbbc$i$id type veth peer name lbbs$i$id
  ip link set lbbc$i$id netns "$C" name c$i; ip link set lbbs$i$id netns "$S" name s$i
  ip -n "$C" addr add 198.18.$((20 + i)).2/24 dev c$i; ip -n "$S" addr add 198.18.$((20 + i)).1/24 dev s$i
  ip -n "$C" link set c$i up; ip -n "$S" link set s$i up
done
ck=$("$bin" genkey); cp=$(echo "$ck" | "$bin" pubkey)
sk=$("$bin" genkey); sp=$(echo "$sk" | "$bin" pubkey)
cat > "$dir/server.toml" <<EOT
[server]
private_key = "$sk"
listen = ["0.0.0.0:51820"]
address = "10.77.0.1/24"
control_socket = "$dir/server.sock"
${BENCH_CONF:-}
[[peers]]
public_key = "$cp"
address = "10.77.0.2"
EOT
cat > "$dir/client.toml" <<EOT
[client]
private_key = "$ck"
server_public_key = "$sp"
address = "10.77.0.2/24"
control_socket = "$dir/client.sock"
${BENCH_CONF:-}
[[links]]
name = "a"
interface = "c0"
server = "198.18.20.1:51820"
[[links]]
name = "b"
interface = "c1"
server = "198.18.21.1:51820"
EOT
ip netns exec "$S" "$bin" server --config "$dir/server.toml" 2>"$dir/server.log" & pids="$!"
sleep 0.2
ip netns exec "$C" "$bin" client --config "$dir/client.toml" 2>"$dir/client.log" & pids="$pids $!"
for _ in $(seq 50); do
  "$bin" status --json --socket "$dir/client.sock" 2>/dev/null | grep -q '"established":true' && break
  sleep 0.1
done
ip netns exec "$S" iperf3 -s -D -1 -B 198.18.22.1 >/dev/null
sleep 0.3
plain=$(ip netns exec "$C" iperf3 -c 198.18.22.1 -t "$secs" -J | awk -F: '/"bits_per_second"/ {v=$2} END {gsub(/[ ,]/, "", v); print v}')
ip netns exec "$S" iperf3 -s -D -1 -B 10.77.0.1 >/dev/null
sleep 0.3
tunnel=$(ip netns exec "$C" iperf3 -c 10.77.0.1 -t "$secs" -J | awk -F: '/"bits_per_second"/ {v=$2} END {gsub(/[ ,]/, "", v); print v}')
awk -v p="$plain" -v t="$tunnel" 'BEGIN {
  printf "plain veth (one link):            %8.0f Mbit/s\n", p / 1e6
  printf "latebind, 2 veth links, encrypted: %8.0f Mbit/s\n", t / 1e6
  printf "ratio:                             %8.3f\n", t / p }'
"$bin" status --socket "$dir/client.sock" || true
