#!/usr/bin/env bash
# The README's first command: the handoff experiment in the simulator, latebind beside
# Linux's early binding; then, as root, the same scenario in the lab (real kernels,
# network namespaces, the real daemons) beside the simulator.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p latebind
bin=target/release/latebind
echo "== simulator: scenarios/handoff.toml =="
"$bin" sim scenarios/handoff.toml --compare
if [ "$(id -u)" = 0 ]; then
  echo
  echo "== lab (mode late) beside the simulator: scenarios/handoff.toml =="
  "$bin" lab scenarios/handoff.toml --mode late --sim
else
  echo
  echo "(the lab part needs root: network namespaces and TUN devices; skipped)"
fi
