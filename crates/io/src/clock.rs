//! The monotonic clock.

use nix::time::{ClockId, clock_gettime};

/// Nanoseconds of `CLOCK_MONOTONIC`. Shared by all network namespaces, so times taken in
/// different namespaces can be subtracted.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux.
    let ts = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always available");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Wall-clock time since the Unix epoch (for handshake timestamps only).
pub fn unix_now() -> std::time::Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}
