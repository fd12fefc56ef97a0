//! Mahimahi delivery-opportunity traces.

use std::time::Duration;

/// Bytes that one delivery opportunity can carry (one MTU, as in mahimahi).
pub const OPPORTUNITY_BYTES: usize = 1500;

/// Largest timestamp accepted in a trace, in milliseconds (about 31 years).
pub const MAX_TRACE_MS: u64 = 1_000_000_000_000;

const NANOS_PER_MS: u128 = 1_000_000;

/// A mahimahi trace: the instants, within one period, at which the link can
/// carry [`OPPORTUNITY_BYTES`] bytes. The trace repeats forever.
///
/// Opportunity `k` (counting from 0 across repetitions) happens at
/// `(k / len) * period + opportunities_ms[k % len]` milliseconds after the
/// link's start. Since the last line equals the period, the last opportunity
/// of one repetition and the opportunities at `0` of the next one share an
/// instant, exactly as in mahimahi.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity offsets within one period, in ms, non-decreasing, non-empty.
    opportunities_ms: Vec<u64>,
    /// Length of one repetition in ms (the last offset, or 1 if that is 0).
    period_ms: u64,
}

/// Why a trace could not be parsed. Line numbers start at 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// The text holds no line at all.
    #[error(
        "trace is empty: expected one integer (milliseconds) per line, each a delivery opportunity"
    )]
    Empty,
    /// A line is not a non-negative integer (blank lines before the end count as invalid).
    #[error(
        "trace line {line}: {text:?} is not a timestamp: expected a non-negative integer number of milliseconds up to {MAX_TRACE_MS}"
    )]
    Invalid {
        /// Line number, from 1.
        line: usize,
        /// The offending line, trimmed.
        text: String,
    },
    /// A line is smaller than the one before it.
    #[error(
        "trace line {line}: {value} ms comes after {previous} ms: expected non-decreasing timestamps"
    )]
    Decreasing {
        /// Line number, from 1.
        line: usize,
        /// The value on that line.
        value: u64,
        /// The value on the previous line.
        previous: u64,
    },
}

impl Trace {
    /// Parses a mahimahi trace: one integer per line, in milliseconds,
    /// non-decreasing. Surrounding whitespace on each line (including `\r`)
    /// and trailing blank lines are ignored; any other blank or non-integer
    /// line is an error naming its line number.
    pub fn parse(text: &str) -> Result<Self, TraceError> {
        let mut opportunities_ms = Vec::new();
        for (index, raw) in text.trim_end().lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            let value = trimmed
                .parse::<u64>()
                .ok()
                .filter(|&v| v <= MAX_TRACE_MS)
                .ok_or_else(|| TraceError::Invalid {
                    line,
                    text: trimmed.to_owned(),
                })?;
            if let Some(&previous) = opportunities_ms.last()
                && value < previous
            {
                return Err(TraceError::Decreasing {
                    line,
                    value,
                    previous,
                });
            }
            opportunities_ms.push(value);
        }
        let last = *opportunities_ms.last().ok_or(TraceError::Empty)?;
        Ok(Self {
            opportunities_ms,
            period_ms: last.max(1),
        })
    }

    /// Mean capacity in bit/s: `1500 * 8 * len / period`.
    pub fn mean_rate_bps(&self) -> f64 {
        (OPPORTUNITY_BYTES * 8) as f64 * self.opportunities_ms.len() as f64
            / self.period().as_secs_f64()
    }

    /// Length of one repetition: the last timestamp, or 1 ms if that is 0.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms)
    }

    /// Number of delivery opportunities in one period (lines in the file).
    pub fn len(&self) -> usize {
        self.opportunities_ms.len()
    }

    /// Always `false` for a parsed trace (parsing rejects empty traces).
    pub fn is_empty(&self) -> bool {
        self.opportunities_ms.is_empty()
    }

    /// The opportunity offsets within one period, in milliseconds.
    pub fn opportunities_ms(&self) -> &[u64] {
        &self.opportunities_ms
    }

    /// Offset from the link's start of opportunity number `k`.
    pub(crate) fn offset_of(&self, k: u64) -> Duration {
        let n = self.opportunities_ms.len() as u64;
        let ms = (k / n)
            .saturating_mul(self.period_ms)
            .saturating_add(self.opportunities_ms[(k % n) as usize]);
        Duration::from_millis(ms)
    }

    /// Number of the first opportunity whose offset is `>= offset`, in O(log len).
    pub(crate) fn first_at_or_after(&self, offset: Duration) -> u64 {
        let n = self.opportunities_ms.len() as u64;
        let period_ns = u128::from(self.period_ms) * NANOS_PER_MS;
        let target = offset.as_nanos();
        let cycle = u64::try_from(target / period_ns).unwrap_or(u64::MAX / n - 1);
        // The previous repetition may end exactly at `target` (its last offset
        // equals the period); the next one always qualifies, as it starts after.
        for c in cycle.saturating_sub(1)..=cycle + 1 {
            let base = u128::from(c) * period_ns;
            let i = if target <= base {
                0
            } else {
                let need = target - base;
                self.opportunities_ms
                    .partition_point(|&ms| u128::from(ms) * NANOS_PER_MS < need)
            };
            if i < self.opportunities_ms.len() {
                return c * n + i as u64;
            }
        }
        (cycle + 1) * n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn trace_parse_accepts_mahimahi_text() {
        let t = Trace::parse("0\n0\r\n 1 \n5\n\n\n").unwrap();
        assert_eq!(t.opportunities_ms(), &[0, 0, 1, 5]);
        assert_eq!(t.period(), ms(5));
        assert_eq!(t.len(), 4);
        assert!(!t.is_empty());
        assert!((t.mean_rate_bps() - 4.0 * 12_000.0 / 0.005).abs() < 1e-6);
    }

    #[test]
    fn trace_parse_rejects_garbage_with_line_number() {
        let err = Trace::parse("1\n2\nthree\n4\n").unwrap_err();
        assert_eq!(
            err,
            TraceError::Invalid {
                line: 3,
                text: "three".into()
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("line 3") && msg.contains("three"), "{msg}");

        assert!(matches!(
            Trace::parse("1\n\n2\n"),
            Err(TraceError::Invalid { line: 2, .. })
        ));
        assert!(matches!(
            Trace::parse("-1\n"),
            Err(TraceError::Invalid { line: 1, .. })
        ));
        assert!(matches!(
            Trace::parse("1.5\n"),
            Err(TraceError::Invalid { line: 1, .. })
        ));
        assert_eq!(Trace::parse(""), Err(TraceError::Empty));
        assert_eq!(Trace::parse(" \n\n"), Err(TraceError::Empty));
    }

    #[test]
    fn trace_parse_rejects_decreasing_with_line_number() {
        let err = Trace::parse("1\n5\n4\n").unwrap_err();
        assert_eq!(
            err,
            TraceError::Decreasing {
                line: 3,
                value: 4,
                previous: 5
            }
        );
        assert!(err.to_string().contains("line 3"));
    }

    #[test]
    fn zero_only_trace_has_one_ms_period() {
        let t = Trace::parse("0\n0\n").unwrap();
        assert_eq!(t.period(), ms(1));
        assert_eq!(t.offset_of(0), ms(0));
        assert_eq!(t.offset_of(1), ms(0));
        assert_eq!(t.offset_of(2), ms(1));
        assert_eq!(t.first_at_or_after(Duration::from_micros(500)), 2);
        assert!((t.mean_rate_bps() - 24e6).abs() < 1e-6);
    }

    #[test]
    fn first_at_or_after_matches_linear_scan() {
        let t = Trace::parse("0\n2\n2\n7\n10\n").unwrap();
        for us in 0..40_000u64 {
            let at = Duration::from_micros(us * 3);
            let k = t.first_at_or_after(at);
            assert!(t.offset_of(k) >= at);
            assert!(k == 0 || t.offset_of(k - 1) < at, "at {at:?} got {k}");
        }
        // the period boundary is shared by the last line and the next "0"
        assert_eq!(t.first_at_or_after(ms(10)), 4);
        assert_eq!(t.offset_of(5), ms(10));
    }
}
