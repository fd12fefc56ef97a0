//! What a flow's application saw around each cut: the one definition the simulator's
//! flows and the lab's traffic tool share.
//!
//! A *cut* is the start of an outage of any link. For a flow active in `[start, stop)`,
//! each distinct cut instant `c` in that period gets a [`CutWindow`]:
//!
//! - the **stall window** `[c, b)`, where `b` is the next cut of any link after `c`, or
//!   the flow's `stop` if that comes first. The stall is the longest time in it without
//!   a delivery to the receiving application: from `c` to the first delivery, between
//!   two deliveries, or from the last delivery to `b` (the first of these that is
//!   longest). *Data again* is when the delivery that ends the stall came, from `c`;
//!   none if the stall runs to `b`. (Data in flight keeps arriving for a while after a
//!   cut, so the first delivery after it says little: the stall usually starts later.)
//! - the **loss window** `[c - 1 s, min(c + 2 s, next cut))` ([`LOSS_BEFORE`],
//!   [`LOSS_AFTER`]): of the UDP packets sent in it, how many were never delivered.
//!   Windows of close cuts overlap here: a packet can count for two cuts.
//!
//! A [`CutTracker`] takes the deliveries and sends as they happen and keeps one
//! [`CutStats`] per window: its memory is bounded by the number of cuts, whatever the
//! length of the run. Times are [`Duration`]s from the run's origin.

use std::time::Duration;

/// Start of the loss window before a cut.
pub const LOSS_BEFORE: Duration = Duration::from_secs(1);
/// End of the loss window after a cut (unless the next cut comes first).
pub const LOSS_AFTER: Duration = Duration::from_secs(2);

/// One cut as one flow sees it: the windows its figures are measured in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutWindow {
    /// The cut.
    pub at: Duration,
    /// End of the stall window `[at, until)`: the next cut, or the flow's stop.
    pub until: Duration,
    /// Start of the loss window: `at - LOSS_BEFORE` (0 at the earliest).
    pub loss_from: Duration,
    /// End of the loss window (excluded): `at + LOSS_AFTER`, or the next cut if earlier.
    pub loss_until: Duration,
}

/// The windows of a flow active in `[start, stop)`: one per distinct instant of `cuts`
/// (the outage starts of every link, in any order) inside that period, in time order.
pub fn windows(cuts: &[Duration], start: Duration, stop: Duration) -> Vec<CutWindow> {
    let mut at: Vec<Duration> = cuts.to_vec();
    at.sort_unstable();
    at.dedup();
    at.iter()
        .enumerate()
        .filter(|&(_, &c)| start <= c && c < stop)
        .map(|(i, &c)| {
            let next = at.get(i + 1).copied();
            CutWindow {
                at: c,
                until: next.map_or(stop, |n| n.min(stop)),
                loss_from: c.saturating_sub(LOSS_BEFORE),
                loss_until: next.map_or(c + LOSS_AFTER, |n| n.min(c + LOSS_AFTER)),
            }
        })
        .collect()
}

/// What one flow saw around one cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutStats {
    /// The cut.
    pub at: Duration,
    /// The longest time in the stall window without a delivery.
    pub stall: Duration,
    /// From the cut to the delivery that ended that stall; `None` if it ran to the end
    /// of the window.
    pub data_again: Option<Duration>,
    /// UDP packets sent in the loss window (0 for a flow that reports none).
    pub sent: u64,
    /// Of those, how many were delivered (once or more).
    pub delivered: u64,
}

impl CutStats {
    /// Packets sent in the loss window and never delivered.
    pub fn lost(&self) -> u64 {
        self.sent.saturating_sub(self.delivered)
    }
}

/// Accumulates [`CutStats`] for a flow's windows as deliveries and sends happen.
#[derive(Debug, Clone, Default)]
pub struct CutTracker {
    windows: Vec<CutWindow>,
    /// Per window: the longest stall so far and its data-again time.
    best: Vec<Option<(Duration, Option<Duration>)>>,
    sent: Vec<u64>,
    delivered: Vec<u64>,
    /// The last delivery.
    last: Option<Duration>,
    /// Windows before this one are closed (their end is behind the last delivery).
    next: usize,
}

impl CutTracker {
    /// A tracker for `windows` (from [`windows`]: sorted, stall windows disjoint).
    pub fn new(windows: Vec<CutWindow>) -> Self {
        let n = windows.len();
        Self {
            windows,
            best: vec![None; n],
            sent: vec![0; n],
            delivered: vec![0; n],
            last: None,
            next: 0,
        }
    }

    /// The windows, in time order.
    pub fn windows(&self) -> &[CutWindow] {
        &self.windows
    }

    /// Data reached the receiving application at `t` (a time before the last one is
    /// taken as the last one).
    pub fn on_delivery(&mut self, t: Duration) {
        let t = self.last.map_or(t, |l| t.max(l));
        while self.next < self.windows.len() && self.windows[self.next].until <= t {
            self.best[self.next] = self.closed(self.next);
            self.next += 1;
        }
        if let Some(w) = self.windows.get(self.next)
            && w.at <= t
        {
            let gap = t - self.last.map_or(w.at, |l| l.max(w.at));
            if self.best[self.next].is_none_or(|(stall, _)| gap > stall) {
                self.best[self.next] = Some((gap, Some(t - w.at)));
            }
        }
        self.last = Some(t);
    }

    /// A UDP packet was sent at `sent_at`.
    pub fn on_sent(&mut self, sent_at: Duration) {
        for i in self.loss_windows(sent_at) {
            self.sent[i] += 1;
        }
    }

    /// A UDP packet sent at `sent_at` was delivered for the first time.
    pub fn on_delivered_packet(&mut self, sent_at: Duration) {
        for i in self.loss_windows(sent_at) {
            self.delivered[i] += 1;
        }
    }

    /// The figures so far, one per window; a stall still open runs to its window's end.
    pub fn stats(&self) -> Vec<CutStats> {
        (0..self.windows.len())
            .map(|i| {
                let best = if i < self.next {
                    self.best[i]
                } else {
                    self.closed(i)
                };
                let (stall, data_again) = best.unwrap_or_default();
                CutStats {
                    at: self.windows[i].at,
                    stall,
                    data_again,
                    sent: self.sent[i],
                    delivered: self.delivered[i],
                }
            })
            .collect()
    }

    /// Window `i`'s best stall once nothing more arrives in it: the tail from the last
    /// delivery (or the cut) to the window's end counts too.
    fn closed(&self, i: usize) -> Option<(Duration, Option<Duration>)> {
        let w = &self.windows[i];
        let from = self.last.map_or(w.at, |l| l.max(w.at));
        let tail = w.until.saturating_sub(from);
        match self.best[i] {
            Some((stall, again)) if stall >= tail => Some((stall, again)),
            _ => Some((tail, None)),
        }
    }

    /// Indexes of the windows whose loss window holds `t`.
    fn loss_windows(&self, t: Duration) -> std::ops::Range<usize> {
        // Both ends of the loss windows grow with the cut: a contiguous run.
        let first = self.windows.partition_point(|w| w.loss_until <= t);
        let end = first
            + self.windows[first..]
                .iter()
                .take_while(|w| w.loss_from <= t)
                .count();
        first..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn windows_end_at_the_next_cut_or_the_flow_stop() {
        // Cuts of two links, unsorted, one instant shared; the flow runs [1 s, 9 s).
        let w = windows(
            &[ms(6000), ms(500), ms(2000), ms(6000), ms(9500)],
            ms(1000),
            ms(9000),
        );
        assert_eq!(
            w,
            vec![
                CutWindow {
                    at: ms(2000),
                    until: ms(6000),
                    loss_from: ms(1000),
                    loss_until: ms(4000),
                },
                CutWindow {
                    at: ms(6000),
                    until: ms(9000),
                    loss_from: ms(5000),
                    loss_until: ms(8000),
                },
            ]
        );
        // The loss window stops at the next cut even outside the flow's period, and
        // starts at 0 at the earliest.
        let w = windows(&[ms(300), ms(1500)], ms(0), ms(1000));
        assert_eq!((w.len(), w[0].loss_from), (1, ms(0)));
        assert_eq!((w[0].until, w[0].loss_until), (ms(1000), ms(1500)));
    }

    #[test]
    fn stall_is_the_longest_silence_in_the_window_and_ends_with_data_again() {
        // Every 10 ms until 1100 (in flight at the cut), a 20 ms gap, then silence from
        // 1200 to 1600, data again until the flow stops at 1700.
        let steady = (0..=1100).step_by(10).chain([1120, 1200]);
        let after = (1600..1700).step_by(10);
        let mut t = CutTracker::new(windows(&[ms(1000)], ms(0), ms(1700)));
        for v in steady.clone().chain(after) {
            t.on_delivery(ms(v));
        }
        let s = t.stats()[0];
        assert_eq!((s.stall, s.data_again), (ms(400), Some(ms(600))));
        // Nothing after 1200, the flow stopping at 5 s: the tail is the stall.
        let mut t = CutTracker::new(windows(&[ms(1000)], ms(0), ms(5000)));
        for v in steady {
            t.on_delivery(ms(v));
        }
        let s = t.stats()[0];
        assert_eq!((s.stall, s.data_again), (ms(3800), None));
        // Deliveries out of order (kernel timestamps) count at the latest time seen.
        t.on_delivery(ms(1100));
        t.on_delivery(ms(4000));
        assert_eq!(t.stats()[0].stall, ms(2800));
    }

    #[test]
    fn stall_counts_from_the_cut_and_stops_at_the_next_cut() {
        let mut t = CutTracker::new(windows(&[ms(1000), ms(3000)], ms(0), ms(10_000)));
        // Silence from 900 (before the first cut) to 2500; then from 2600 past the
        // second cut to 3200.
        for v in [900, 2500, 2600, 3200, 3210] {
            t.on_delivery(ms(v));
        }
        let s = t.stats();
        assert_eq!((s[0].stall, s[0].data_again), (ms(1500), Some(ms(1500))));
        assert_eq!((s[1].stall, s[1].data_again), (ms(6790), None));
        // No delivery at all: the whole window, never data again.
        let t = CutTracker::new(windows(&[ms(1000)], ms(0), ms(2000)));
        assert_eq!(t.stats()[0].stall, ms(1000));
        assert_eq!(t.stats()[0].data_again, None);
        // A delivery exactly at the cut and steady data: no stall longer than the period.
        let mut t = CutTracker::new(windows(&[ms(1000)], ms(0), ms(1100)));
        for v in (1000..=1100).step_by(20) {
            t.on_delivery(ms(v));
        }
        assert_eq!(
            (t.stats()[0].stall, t.stats()[0].data_again),
            (ms(20), Some(ms(20)))
        );
    }

    #[test]
    fn loss_counts_packets_sent_in_the_window_never_delivered() {
        // Cuts at 2 s and 3 s: the windows [1 s, 3 s) and [2 s, 5 s) overlap.
        let mut t = CutTracker::new(windows(&[ms(2000), ms(3000)], ms(0), ms(10_000)));
        for v in (0..6000).step_by(100) {
            t.on_sent(ms(v));
        }
        // Delivered: everything but what was sent in [2.5 s, 3.5 s).
        for v in (0..6000).step_by(100).filter(|v| !(2500..3500).contains(v)) {
            t.on_delivered_packet(ms(v));
        }
        let s = t.stats();
        assert_eq!((s[0].sent, s[0].delivered, s[0].lost()), (20, 15, 5));
        assert_eq!((s[1].sent, s[1].delivered, s[1].lost()), (30, 20, 10));
    }
}
