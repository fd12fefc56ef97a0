//! The per-flow report and the statistics helpers behind it.

use std::time::Duration;

use crate::FlowKind;
use crate::cuts::CutStats;

/// Latency percentiles of one flow, in milliseconds (all 0 when there are no samples).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Latency {
    /// Median (nearest-rank).
    pub p50: f64,
    /// 95th percentile (nearest-rank).
    pub p95: f64,
    /// 99th percentile (nearest-rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Latency {
    /// Percentiles of `samples_ms` (nearest-rank on a sorted copy).
    pub fn from_samples(samples_ms: &[f64]) -> Self {
        if samples_ms.is_empty() {
            return Self::default();
        }
        let mut sorted = samples_ms.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            p50: nearest_rank(&sorted, 50.0),
            p95: nearest_rank(&sorted, 95.0),
            p99: nearest_rank(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
        }
    }
}

/// Nearest-rank percentile `p` (0..=100) of a non-empty ascending slice:
/// the smallest sample such that at least `p`% of the samples are <= it.
pub(crate) fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    debug_assert!(!sorted.is_empty());
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Milliseconds of a duration as `f64`.
pub(crate) fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Megabits per second for `bytes` over `over` (0 when `over` is zero).
pub(crate) fn mbps(bytes: u64, over: Duration) -> f64 {
    let secs = over.as_secs_f64();
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e6
    } else {
        0.0
    }
}

/// What one flow did, as reported at the end of a run
/// (the `flows[]` objects of the JSON report, DESIGN.md section 4).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReport {
    /// Flow name from the scenario.
    pub name: String,
    /// Flow kind.
    pub kind: FlowKind,
    /// UDP: packets the sending end emitted. TCP: data-carrying segments the sender
    /// transmitted (first transmissions and retransmissions).
    pub sent: u64,
    /// UDP: unique packets received. TCP: data segments that arrived at the receiver.
    pub delivered: u64,
    /// UDP: `sent - delivered`. TCP: segments retransmitted by the sender's TCP.
    pub lost: u64,
    /// UDP: packets whose sequence number was already received. TCP: arriving data
    /// segments whose bytes had all arrived before.
    pub duplicates: u64,
    /// One-way latency of unique packets (TCP: of segments carrying new bytes,
    /// measured from the first transmission of those bytes).
    pub latency_ms: Latency,
    /// Longest time the receiving application saw nothing while the flow was active.
    pub max_gap_ms: f64,
    /// Application goodput in Mb/s.
    pub goodput_mbps: f64,
    /// TCP: data segments the sender transmitted again. UDP: 0.
    pub retransmitted: u64,
    /// TCP: application payload bytes delivered in order. UDP: UDP payload bytes of
    /// unique packets.
    pub bytes_delivered: u64,
    /// What the receiving application saw around each cut of [`FlowSpec::cuts`]
    /// (`crate::FlowSpec`), in the same order; `sent` and `delivered` are 0 for TCP.
    pub cuts: Vec<CutStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&s, 50.0), 50.0);
        assert_eq!(nearest_rank(&s, 99.0), 99.0);
        assert_eq!(nearest_rank(&s, 100.0), 100.0);
        assert_eq!(nearest_rank(&s, 0.0), 1.0);
        assert_eq!(nearest_rank(&[7.0], 50.0), 7.0);
        let l = Latency::from_samples(&[3.0, 1.0, 2.0]);
        assert_eq!(
            l,
            Latency {
                p50: 2.0,
                p95: 3.0,
                p99: 3.0,
                max: 3.0
            }
        );
        assert_eq!(Latency::from_samples(&[]), Latency::default());
    }

    #[test]
    fn rates() {
        assert_eq!(mbps(1_250_000, Duration::from_secs(1)), 10.0);
        assert_eq!(mbps(5, Duration::ZERO), 0.0);
        assert_eq!(ms(Duration::from_micros(1500)), 1.5);
    }
}
