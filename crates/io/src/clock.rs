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

/// Keeps a thread that spins towards deadlines asleep for a share of every window, so
/// that spinning under `SCHED_FIFO` never reaches the kernel's real-time throttling
/// (`sched_rt_runtime_us`, 950 ms of every second by default, shared by every real-time
/// thread). A thread that spins through it is stopped for the rest of the period, 50 ms
/// at once, with every other real-time thread: the lab's emulator then delayed every frame
/// of every link by up to 50 ms once a second, which the daemons read as links that
/// paused. Out of budget, the thread sleeps until its deadline instead of spinning
/// towards it: late by a wake-up (tens of µs), not by 50 ms.
#[derive(Debug)]
pub struct SpinBudget {
    window_start: u64,
    slept: u64,
}

impl SpinBudget {
    /// The window over which the sleep share is kept.
    pub const WINDOW_NS: u64 = 10_000_000;
    /// The share of each window the thread runs at most before it stops spinning: well
    /// under the default 95 %, with room for the other real-time threads.
    pub const RUN_SHARE: f64 = 0.8;

    /// A budget whose first window starts at `now` (ns of `CLOCK_MONOTONIC`).
    pub fn new(now: u64) -> Self {
        Self {
            window_start: now,
            slept: 0,
        }
    }

    /// Whether the thread may spin towards a deadline at `now`.
    pub fn may_spin(&mut self, now: u64) -> bool {
        let elapsed = now.saturating_sub(self.window_start);
        if elapsed >= Self::WINDOW_NS {
            self.window_start = now;
            self.slept = 0;
            return true;
        }
        let ran = elapsed.saturating_sub(self.slept);
        (ran as f64) < Self::RUN_SHARE * Self::WINDOW_NS as f64
    }

    /// The thread slept (or blocked) from `from` to `to`.
    pub fn slept(&mut self, from: u64, to: u64) {
        self.slept += to.saturating_sub(from.max(self.window_start));
    }
}

#[cfg(test)]
mod tests {
    use super::SpinBudget;

    #[test]
    fn spin_budget_forces_a_sleep_share_in_every_window() {
        const MS: u64 = 1_000_000;
        let mut b = SpinBudget::new(0);
        assert!(b.may_spin(0));
        assert!(b.may_spin(7 * MS));
        // 8 ms of the window run without a sleep: no more spinning in it.
        assert!(!b.may_spin(8 * MS));
        // Sleeping buys it back.
        b.slept(8 * MS, 9 * MS);
        assert!(b.may_spin(9 * MS - 1));
        assert!(!b.may_spin(9 * MS + 1));
        // A new window starts afresh; a sleep begun before it counts from its start.
        assert!(b.may_spin(10 * MS));
        b.slept(9 * MS, 12 * MS);
        assert!(b.may_spin(19 * MS));
    }
}
