//! Parameters of one link direction.

use std::sync::Arc;
use std::time::Duration;

use crate::Trace;

/// How fast the serializer drains the queue.
#[derive(Debug, Clone, PartialEq)]
pub enum Rate {
    /// A constant rate: a packet of `len` bytes takes `len * 8 / bits_per_sec` seconds.
    Fixed {
        /// Rate in bit/s; must be finite and above 0.
        bits_per_sec: f64,
    },
    /// A mahimahi trace of delivery opportunities, offsets from the link's start.
    Trace(Arc<Trace>),
}

impl Rate {
    /// The mean rate in bit/s: the fixed rate, or the trace's mean over its period.
    pub fn mean_bits_per_sec(&self) -> f64 {
        match self {
            Self::Fixed { bits_per_sec } => *bits_per_sec,
            Self::Trace(t) => t.mean_rate_bps(),
        }
    }

    /// A fixed rate given in Mbit/s (10^6 bit/s).
    pub fn fixed_mbps(mbps: f64) -> Self {
        Self::Fixed {
            bits_per_sec: mbps * 1e6,
        }
    }

    /// Long-run mean capacity in bit/s.
    pub fn mean_bps(&self) -> f64 {
        match self {
            Self::Fixed { bits_per_sec } => *bits_per_sec,
            Self::Trace(trace) => trace.mean_rate_bps(),
        }
    }
}

/// Everything that defines one direction of a link (see the crate docs for the model).
#[derive(Debug, Clone, PartialEq)]
pub struct LinkParams {
    /// Serializer rate.
    pub rate: Rate,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Each packet's delay is `delay` plus a uniform draw in `[-jitter, +jitter]`,
    /// clamped at 0; the link never reorders.
    pub jitter: Duration,
    /// Probability that a packet leaving the serializer is lost, in `0.0..=1.0`.
    pub loss: f64,
    /// Capacity of the FIFO queue in packets, not counting the packet being
    /// serialized (0 = no buffer: a packet is accepted only by an idle serializer).
    pub queue_packets: usize,
    /// Outage intervals `[start, end)`, as offsets from the link's start.
    /// Unsorted and overlapping or touching intervals are allowed; they are
    /// merged into one outage each.
    pub outages: Vec<(Duration, Duration)>,
    /// At an outage start, also lose the packets already propagating
    /// (`true`: downlink semantics) or let them arrive (`false`: uplink semantics).
    pub drop_in_flight_on_outage: bool,
}

/// A parameter out of its domain. Each message names the field, its value and
/// what is expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// The fixed rate is not a finite number above 0.
    #[error("rate = {bits_per_sec} bit/s: expected a finite rate above 0 bit/s")]
    Rate {
        /// The offending rate.
        bits_per_sec: f64,
    },
    /// The loss probability is outside `0.0..=1.0` (or NaN).
    #[error("loss = {loss}: expected a probability between 0 and 1")]
    Loss {
        /// The offending probability.
        loss: f64,
    },
    /// An outage interval does not end after it starts.
    #[error(
        "outages[{index}] = [{start:?}, {end:?}): expected an interval whose end is after its start"
    )]
    Outage {
        /// Position in [`LinkParams::outages`].
        index: usize,
        /// The interval's start.
        start: Duration,
        /// The interval's end.
        end: Duration,
    },
}

impl LinkParams {
    /// Checks every field's domain; [`LinkDirection::new`](crate::LinkDirection::new)
    /// panics on parameters that fail this.
    pub fn validate(&self) -> Result<(), ParamError> {
        if let Rate::Fixed { bits_per_sec } = self.rate
            && !(bits_per_sec.is_finite() && bits_per_sec > 0.0)
        {
            return Err(ParamError::Rate { bits_per_sec });
        }
        if !(0.0..=1.0).contains(&self.loss) {
            return Err(ParamError::Loss { loss: self.loss });
        }
        for (index, &(start, end)) in self.outages.iter().enumerate() {
            if end <= start {
                return Err(ParamError::Outage { index, start, end });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> LinkParams {
        LinkParams {
            rate: Rate::fixed_mbps(10.0),
            delay: Duration::from_millis(50),
            jitter: Duration::ZERO,
            loss: 0.0,
            queue_packets: 1000,
            outages: vec![],
            drop_in_flight_on_outage: false,
        }
    }

    #[test]
    fn validate_accepts_sane_params() {
        base().validate().unwrap();
        let mut p = base();
        p.loss = 1.0;
        p.outages = vec![(Duration::from_secs(2), Duration::from_secs(3))];
        p.rate = Rate::Trace(Arc::new(Trace::parse("1\n").unwrap()));
        p.validate().unwrap();
    }

    #[test]
    fn validate_names_field_value_and_expectation() {
        let mut p = base();
        p.loss = 1.5;
        let err = p.validate().unwrap_err();
        assert_eq!(
            err.to_string(),
            "loss = 1.5: expected a probability between 0 and 1"
        );
        p.loss = f64::NAN;
        assert!(p.validate().is_err());

        let mut p = base();
        p.rate = Rate::Fixed { bits_per_sec: 0.0 };
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .starts_with("rate = 0")
        );
        p.rate = Rate::Fixed {
            bits_per_sec: f64::INFINITY,
        };
        assert!(p.validate().is_err());

        let mut p = base();
        p.outages = vec![
            (Duration::from_secs(1), Duration::from_secs(2)),
            (Duration::from_secs(3), Duration::from_secs(3)),
        ];
        let msg = p.validate().unwrap_err().to_string();
        assert!(msg.starts_with("outages[1] = [3s, 3s)"), "{msg}");
    }
}
