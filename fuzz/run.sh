#!/usr/bin/env bash
# Builds every fuzz target and runs each for SECONDS (default 60), one after another.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`). The checked-in
# seeds (seeds/<target>/) are copied into the working corpus (corpus/<target>/, not
# checked in) before each run; crashes land in artifacts/<target>/. Extra libFuzzer flags
# can be passed in FUZZ_FLAGS, e.g. FUZZ_FLAGS="-max_len=8192". LATEBIND_FUZZ_STRICT=1
# makes known engine bugs fail the engine targets (see src/engine.rs, `strict`).
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(wire_parse engine_datagrams engine_tun crypto_open)
fi

cargo +nightly fuzz build
status=0
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  cp -n "seeds/$t/"* "corpus/$t/" 2>/dev/null || true
  echo "=== $t: ${seconds}s ==="
  # shellcheck disable=SC2086
  if ! cargo +nightly fuzz run "$t" "corpus/$t" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 ${FUZZ_FLAGS:-}; then
    echo "=== $t: FAILED (see artifacts/$t/) ==="
    status=1
  fi
done
exit "$status"
