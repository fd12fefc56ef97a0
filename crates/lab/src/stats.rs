//! Percentiles, as the simulator computes them (nearest rank on a sorted copy).

use serde::{Deserialize, Serialize};

/// Median, 99th percentile and maximum of a sample, in the unit the caller chose
/// (all 0 for an empty sample).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct Percentiles {
    /// Median (nearest rank).
    pub p50: f64,
    /// 95th percentile (nearest rank).
    #[serde(default)]
    pub p95: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Percentiles {
    /// Percentiles of `samples` (any order).
    pub fn of(samples: &[f64]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            p50: nearest_rank(&sorted, 50.0),
            p95: nearest_rank(&sorted, 95.0),
            p99: nearest_rank(&sorted, 99.0),
            max: sorted[sorted.len() - 1],
        }
    }

    /// The same figures with every value rounded to 3 decimals (as the simulator's
    /// report does).
    pub fn rounded(self) -> Self {
        Self {
            p50: round3(self.p50),
            p95: round3(self.p95),
            p99: round3(self.p99),
            max: round3(self.max),
        }
    }
}

/// Nearest-rank percentile `p` (0..=100) of a non-empty ascending slice: the smallest
/// sample such that at least `p` % of the samples are at or below it.
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// Rounds to 3 decimals.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank_match_simulator() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&s);
        assert_eq!((p.p50, p.p99, p.max), (50.0, 99.0, 100.0));
        let p = Percentiles::of(&[3.0, 1.0, 2.0]);
        assert_eq!((p.p50, p.p99, p.max), (2.0, 3.0, 3.0));
        assert_eq!(Percentiles::of(&[]), Percentiles::default());
        assert_eq!(nearest_rank(&[7.0], 99.0), 7.0);
        assert_eq!(nearest_rank(&s, 0.0), 1.0);
        assert_eq!(Percentiles::of(&s).p95, 95.0);
        let r = Percentiles {
            p50: 1.23456,
            p95: 1.5,
            p99: 2.0004,
            max: 3.9999,
        }
        .rounded();
        assert_eq!((r.p50, r.p99, r.max), (1.235, 2.0, 4.0));
    }

    #[test]
    fn percentiles_of_two_thousand_samples() {
        // 2000 samples 0.5, 1.0, ..., 1000: rank 1000 -> 500, rank 1980 -> 990.
        let s: Vec<f64> = (1..=2000).rev().map(|i| f64::from(i) / 2.0).collect();
        let p = Percentiles::of(&s);
        assert_eq!((p.p50, p.p99, p.max), (500.0, 990.0, 1000.0));
    }
}
