//! Engine configuration with documented defaults.
//!
//! The defaults are tuned for 2-4 links of 1-200 Mbit/s with 10-300 ms RTT (a phone, a
//! laptop or a home gateway with WiFi, DSL and cellular). Every field can be changed with a
//! chainable setter; [`Config::validate`] names the field, the value and what is expected.

use core::time::Duration;

use crate::policy::{OverflowParams, PolicyKind, PolicyRule};

use thiserror::Error;

/// Which end of the tunnel this engine is. Both run the same protocol; the server also
/// learns links it has not been told about from the client's datagrams.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Role {
    /// The multi-homed device: owns the links and assigns their ids.
    Client,
    /// The aggregation point.
    Server,
}

/// A configuration value that is out of range.
#[derive(Clone, Debug, Error, PartialEq)]
#[error("{key} = {value}: expected {expected}")]
pub struct ConfigError {
    /// The configuration key.
    pub key: &'static str,
    /// The value given, as text.
    pub value: String,
    /// What the key accepts.
    pub expected: &'static str,
}

/// Engine configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// This end's role.
    pub role: Role,
    /// Session id carried in every datagram's header; datagrams with another id are dropped.
    pub session: u32,
    /// Packets per link allowed below the binding point (handed to the driver, not yet
    /// departed). Default 2, as in the late-binding paper.
    pub budget_packets: usize,
    /// DRR quantum in bytes. Default 1514.
    pub quantum_bytes: usize,
    /// CoDel target sojourn time of a per-flow queue. Default 5 ms. The target in force
    /// is the larger of this and a tenth of the interval in force (10 ms at 100 ms).
    pub codel_target: Duration,
    /// Lower bound of the CoDel interval. Default 100 ms. The interval in force is the larger
    /// of this and `codel_rtt_factor` times the largest smoothed RTT of the links that are
    /// up: RFC 8289 4.3 asks for an interval on the order of the worst-case RTT, and a drop
    /// spacing shorter than one round trip makes TCPs without SACK fall back to their RTO.
    pub codel_interval: Duration,
    /// Multiple of the largest link SRTT used as the CoDel interval (see `codel_interval`).
    /// Default 2.0 (the tunnel's RTT is only part of the inner flows' RTT).
    pub codel_rtt_factor: f64,
    /// Whether CoDel marks ECN-capable packets (CE) instead of dropping them. Default on.
    pub ecn: bool,
    /// Whether a pure TCP acknowledgement that finds an older one of its connection at
    /// the tail of its flow's queue replaces it (as CAKE's ACK filter does): the
    /// acknowledgements of a download waiting for a narrow uplink leave as one datagram
    /// instead of several. Duplicate acknowledgements and those with selective
    /// acknowledgement blocks or ECN flags are never replaced. Default on.
    pub ack_filter: bool,
    /// Whether inner packets are sent as a difference from an earlier packet's headers
    /// that the peer holds (DATA_TEMPLATE and DATA_COMPACT, `docs/protocol.md` 3.9): a
    /// full-size TCP segment then takes about 34 bytes less on the link. Default on.
    pub header_compression: bool,
    /// The receive-window clamp (4.1): the windows of the acknowledgements a local TCP
    /// sender gets through the tunnel are lowered so that it keeps no more above the
    /// binding point than the links up carry in its flow's CoDel target; CoDel then
    /// leaves its queue alone. Default off.
    pub tcp_window_clamp: bool,
    /// Whether CoDel's target of a min-rtt or redundant flow also covers half the recent
    /// longest pause of the link its last packet was bound to (how long that link lately
    /// delivered nothing while packets waited: a cellular scheduler's pause), as an
    /// aggregate flow's covers the links' pauses: the queue a pause builds then meets no
    /// drop. On cellular links the download gets more of the link and a small flow beside
    /// it waits longer at the link's bottleneck (`docs/RESULTS.md` 19). Default off.
    pub codel_covers_pause: bool,
    /// Whether an `aggregate` flow's slower link is sent the packet of the flow's backlog
    /// that arrives in order there, instead of its head ([`crate::Binding::Behind`],
    /// `docs/protocol.md` 4.2): the receiver then holds the faster links' packets little
    /// or not at all for the slower link's. Beside a slow link far away a transfer gets
    /// the fast link's rate again; a flow's head then waits for the faster links by
    /// design (`docs/RESULTS.md` 8.7). Off, every slower link is sent the head. Default
    /// on.
    pub aggregate_arrival_order: bool,
    /// Total packets held above the binding point, all flows together. Default 10240.
    pub limit_packets: usize,
    /// Total bytes held above the binding point. Default 32 MiB.
    pub limit_bytes: usize,
    /// Flows tracked at once; beyond this, new flows share one overflow queue. Default 16384.
    pub max_flows: usize,
    /// A flow with an empty queue is forgotten after this long. Default 30 s.
    pub flow_idle_timeout: Duration,
    /// Send an acknowledgement after this many ack-eliciting packets on a link. Default 2.
    pub ack_every: u32,
    /// Longest an acknowledgement may be delayed. Default 5 ms.
    pub max_ack_delay: Duration,
    /// How long an acknowledgement that `ack_every` made due waits for a packet of the
    /// reverse direction to ride on (an inner TCP flow's own acknowledgement, a moment
    /// later), instead of taking a datagram of its own; it waits only while such packets
    /// lately came in time. At most `max_ack_delay`. Default zero: it goes at once (1 ms
    /// halves the datagrams a download sends back, for 0-3 % of the download's goodput
    /// in the simulator, docs/RESULTS.md 15).
    pub ack_ride_wait: Duration,
    /// Interval of loss reports (the bonding slides' T_report). Default 50 ms.
    pub loss_report_interval: Duration,
    /// A link on which nothing ack-eliciting was sent for this long gets a PING, so both
    /// ends keep RTT estimates and liveness. Default 1 s.
    pub keepalive_interval: Duration,
    /// RTT assumed for a link before its first sample. Default 100 ms.
    pub initial_rtt: Duration,
    /// Fixed reorder hold time; `None` derives it from the links' RTT spread (default).
    pub reorder_hold: Option<Duration>,
    /// Upper bound of the derived hold time. Default 500 ms.
    pub reorder_hold_max: Duration,
    /// Lower bound of the derived hold time. Default 1 ms.
    pub reorder_hold_min: Duration,
    /// Packets a single flow's reorder buffer may hold before it releases its head. Default 4096.
    pub reorder_limit_packets: usize,
    /// Lower bound of the probe interval of a suspect link (its first probe goes at once;
    /// later ones back off from the larger of this and the link's RTO-like timeout).
    /// Default 50 ms.
    pub suspect_min: Duration,
    /// The reinjection timer (fast-reinjection paper, equations 5-7): when it expires the
    /// link becomes suspect and its unacknowledged inner packets are re-sent on the other
    /// links. Default [`ReinjectTimer::SrttRttvarDelta`].
    pub reinjection: ReinjectTimer,
    /// Floor of the reinjection timer, counted from the last acknowledgement (or the send
    /// that armed it), so that tiny RTTs and scheduling noise do not cause reinjections.
    /// Default 10 ms.
    pub rej_min: Duration,
    /// A packet waiting to be reinjected (no other link could take it yet) is given up
    /// after this long. Default 1 s.
    pub reinject_max_age: Duration,
    /// The policy of flows no rule matches. Default min-rtt.
    pub default_policy: PolicyKind,
    /// Rules mapping flows to policies, first match wins (matched on a flow's first
    /// packet). Default none.
    pub rules: Vec<PolicyRule>,
    /// Parameters of the overflow policy (`t_report` is `loss_report_interval`).
    pub overflow: OverflowParams,
    /// Copies of a redundant flow's packet, the original included, each on another link:
    /// 2 (the two best links, the default) or more; 0 means one on every usable link.
    /// More than there are usable links: the rest go over the links again, round by
    /// round, best first (three over two links: two on the best one; four: two on each,
    /// so that either link dying leaves two copies on the other). A second copy on one
    /// link covers its random loss, not its death.
    pub redundant_links: usize,
    /// Playout alignment of redundant flows, on the receiving side: a flow whose packets
    /// arrive as copies over several links is delivered at the pace of its slower copies
    /// (each first copy waits for as long as the copies on the other links have lately
    /// come later, at most `reorder_hold_max`), so that losing a copy or a link leaves no
    /// gap; the price is that delay. Default off: the first copy is delivered at once.
    pub redundant_align: bool,
    /// Per-link rate and delay control (`cc.rs`): each link's sending is paced and
    /// windowed so that the queue at its bottleneck, wherever it is, stays at a couple of
    /// packets and the backlog waits in the per-flow queues above the binding point.
    /// Default on.
    pub rate_control: bool,
    /// Longest queueing delay rate control keeps at a link's bottleneck. It keeps two
    /// packets there on a steady link, and as much as the link's RTT varies (its
    /// delivery comes in bursts) up to this. Default 20 ms.
    pub rate_control_max_queue: Duration,
    /// Seed of the flow table's hash. Drivers should pass a secret random value so that
    /// remote senders cannot aim at hash collisions; tests and the simulator pass a
    /// fixed one. Default 0.
    pub hash_seed: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            role: Role::Client,
            session: 1,
            budget_packets: 2,
            quantum_bytes: 1514,
            codel_target: Duration::from_millis(5),
            codel_interval: Duration::from_millis(100),
            codel_rtt_factor: 2.0,
            ecn: true,
            ack_filter: true,
            header_compression: true,
            tcp_window_clamp: false,
            codel_covers_pause: false,
            aggregate_arrival_order: true,
            limit_packets: 10_240,
            limit_bytes: 32 << 20,
            max_flows: 16_384,
            flow_idle_timeout: Duration::from_secs(30),
            ack_every: 2,
            max_ack_delay: Duration::from_millis(5),
            ack_ride_wait: Duration::ZERO,
            loss_report_interval: Duration::from_millis(50),
            keepalive_interval: Duration::from_secs(1),
            initial_rtt: Duration::from_millis(100),
            reorder_hold: None,
            reorder_hold_max: Duration::from_millis(500),
            reorder_hold_min: Duration::from_millis(1),
            reorder_limit_packets: 4096,
            rate_control: true,
            rate_control_max_queue: Duration::from_millis(20),
            suspect_min: Duration::from_millis(50),
            reinjection: ReinjectTimer::SrttRttvarDelta,
            rej_min: Duration::from_millis(10),
            reinject_max_age: Duration::from_secs(1),
            default_policy: PolicyKind::Auto,
            rules: Vec::new(),
            overflow: OverflowParams::default(),
            redundant_links: 2,
            redundant_align: false,
            hash_seed: 0,
        }
    }
}

impl Config {
    /// Default configuration for `role`.
    pub fn new(role: Role) -> Self {
        Self {
            role,
            ..Self::default()
        }
    }

    /// Sets the session id.
    pub fn session(&mut self, session: u32) -> &mut Self {
        self.session = session;
        self
    }

    /// Sets the budget below the binding point, in packets per link.
    pub fn budget_packets(&mut self, packets: usize) -> &mut Self {
        self.budget_packets = packets;
        self
    }

    /// Sets a fixed reorder hold time (`None`: derive it from the links).
    pub fn reorder_hold(&mut self, hold: Option<Duration>) -> &mut Self {
        self.reorder_hold = hold;
        self
    }

    /// Checks every field; the error names the key, the value and what is expected.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let nonzero_ms = |key: &'static str, d: Duration| {
            if d.is_zero() {
                Err(err(key, "0 ms", "a duration above zero"))
            } else {
                Ok(())
            }
        };
        if !(1..=1024).contains(&self.budget_packets) {
            return Err(err(
                "budget_packets",
                self.budget_packets,
                "a whole number of packets from 1 to 1024",
            ));
        }
        if !(256..=65_536).contains(&self.quantum_bytes) {
            return Err(err(
                "quantum_bytes",
                self.quantum_bytes,
                "256 to 65536 bytes",
            ));
        }
        nonzero_ms("codel_target", self.codel_target)?;
        nonzero_ms("codel_interval", self.codel_interval)?;
        if !(self.codel_rtt_factor.is_finite() && (0.0..=100.0).contains(&self.codel_rtt_factor)) {
            return Err(err(
                "codel_rtt_factor",
                self.codel_rtt_factor,
                "a factor from 0 to 100",
            ));
        }
        if self.limit_packets == 0 {
            return Err(err("limit_packets", 0, "at least 1 packet"));
        }
        if self.limit_bytes < 65_536 {
            return Err(err("limit_bytes", self.limit_bytes, "at least 65536 bytes"));
        }
        if self.max_flows == 0 {
            return Err(err("max_flows", 0, "at least 1 flow"));
        }
        if self.ack_every == 0 {
            return Err(err("ack_every", 0, "at least 1 packet"));
        }
        if self.ack_ride_wait > self.max_ack_delay {
            return Err(err(
                "ack_ride_wait",
                format!("{:?}", self.ack_ride_wait),
                "at most max_ack_delay",
            ));
        }
        nonzero_ms("loss_report_interval", self.loss_report_interval)?;
        nonzero_ms("keepalive_interval", self.keepalive_interval)?;
        nonzero_ms("initial_rtt", self.initial_rtt)?;
        if self.reorder_hold_min > self.reorder_hold_max {
            return Err(err(
                "reorder_hold_min",
                format!("{:?}", self.reorder_hold_min),
                "at most reorder_hold_max",
            ));
        }
        if self.reorder_limit_packets == 0 {
            return Err(err("reorder_limit_packets", 0, "at least 1 packet"));
        }
        nonzero_ms("reinject_max_age", self.reinject_max_age)?;
        self.overflow.validate()?;
        validate_redundant_links(self.redundant_links)?;
        for r in &self.rules {
            r.validate()?;
        }
        Ok(())
    }
}

/// When a link with unacknowledged packets is declared suspect and its packets are
/// reinjected on the other links. RTTVAR is taken as the Linux kernel's (which the
/// paper's implementation read): four times the smoothed mean deviation, RFC 6298's
/// K * RTTVAR. Every variant adds the peer's `max_ack_delay` (an acknowledgement may wait
/// that long) and keeps at least `rej_min` after the last acknowledgement. The timer is armed by a send on an idle link and re-armed by every
/// acknowledgement of the link, duplicate ones included.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub enum ReinjectTimer {
    /// REJ = SRTT + RTTVAR - Δ, Δ the age of the oldest unacknowledged packet (equation 7):
    /// the timer expires SRTT + RTTVAR after that packet was sent.
    #[default]
    SrttRttvarDelta,
    /// REJ = SRTT + RTTVAR from the last acknowledgement (equation 5).
    SrttRttvar,
    /// REJ = min RTT + RTTVAR from the last acknowledgement (equation 6).
    MinRttRttvar,
    /// No reinjection: a link is suspected after SRTT + 4 RTTVAR + max_ack_delay (at least
    /// `suspect_min`) without acknowledgement, and its packets are left to the inner
    /// transport (the behaviour without this feature, for comparison).
    Off,
}

impl ReinjectTimer {
    /// The names used in configuration files and on the command line.
    pub const NAMES: [&'static str; 4] =
        ["srtt+rttvar-delta", "srtt+rttvar", "minrtt+rttvar", "off"];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Self::SrttRttvarDelta => Self::NAMES[0],
            Self::SrttRttvar => Self::NAMES[1],
            Self::MinRttRttvar => Self::NAMES[2],
            Self::Off => Self::NAMES[3],
        }
    }
}

impl core::str::FromStr for ReinjectTimer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| {
                [
                    Self::SrttRttvarDelta,
                    Self::SrttRttvar,
                    Self::MinRttRttvar,
                    Self::Off,
                ][i]
            })
            .ok_or_else(|| format!("one of {}", Self::NAMES.join(", ")))
    }
}

fn err(key: &'static str, value: impl ToString, expected: &'static str) -> ConfigError {
    ConfigError {
        key,
        value: value.to_string(),
        expected,
    }
}

impl OverflowParams {
    /// Checks the ranges; keys are named as in the configuration files (`overflow.*`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=1000).contains(&self.w_fixed) {
            return Err(err(
                "overflow.w_fixed",
                self.w_fixed,
                "a weight from 1 to 1000",
            ));
        }
        if self.w_max > 1000 {
            return Err(err("overflow.w_max", self.w_max, "a weight from 0 to 1000"));
        }
        if !(self.k.is_finite() && (0.0..=100.0).contains(&self.k)) {
            return Err(err("overflow.k", self.k, "a gain from 0 to 100"));
        }
        if self.t_dwd > Duration::from_secs(60) {
            return Err(err(
                "overflow.t_dwd_ms",
                self.t_dwd.as_secs_f64() * 1e3,
                "a time from 0 to 60000 ms",
            ));
        }
        Ok(())
    }
}

/// Checks the number of links a redundant flow's packet goes on.
pub fn validate_redundant_links(n: usize) -> Result<(), ConfigError> {
    if n == 1 || n > 64 {
        return Err(err(
            "redundant_links",
            n,
            "2 to 64 links, or 0 for every link",
        ));
    }
    Ok(())
}

impl PolicyRule {
    /// Checks the DSCP and the port range; keys are the rule's (`dscp`, `ports`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(d) = self.dscp
            && d > 63
        {
            return Err(err("dscp", d, "a DSCP from 0 to 63"));
        }
        if let Some((lo, hi)) = self.ports
            && lo > hi
        {
            return Err(err(
                "ports",
                format!("[{lo}, {hi}]"),
                "[lo, hi] with lo <= hi",
            ));
        }
        Ok(())
    }
}

/// Per-link configuration.
#[derive(Clone, Debug, Default)]
pub struct LinkConfig {
    /// Pace this link at this many bytes per second (`None`: send as the budget below the
    /// binding point allows; rate control is a later addition).
    pub pacing_rate: Option<f64>,
    /// Only used when no other link is up.
    pub backup: bool,
    /// The link's capacity, bytes per second of datagrams, if known beforehand (measured
    /// with `latebind probe`): rate control starts from it instead of searching for it
    /// from its initial window, and the delivery rate takes over as soon as acknowledgements
    /// measure it. `None` (default): search.
    pub capacity: Option<f64>,
    /// The largest datagram the engine writes for this link, bytes before the AEAD tag:
    /// the path's MTU less the outer IP and UDP headers and the tag. A data packet
    /// carries the link's due acknowledgement only as far as it fits (its newest ranges;
    /// else the acknowledgement goes alone), so that a datagram never outgrows the path
    /// and is fragmented. Inner packets are the TUN side's to bound (its MTU). `None`
    /// (default): no limit.
    pub max_datagram: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_validates() {
        assert_eq!(Config::default().validate(), Ok(()));
    }

    #[test]
    fn zero_budget_rejected_with_key_value_expectation() {
        let mut c = Config::default();
        c.budget_packets(0);
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "budget_packets");
        assert_eq!(
            e.to_string(),
            "budget_packets = 0: expected a whole number of packets from 1 to 1024"
        );
    }

    #[test]
    fn an_ack_ride_wait_beyond_the_ack_delay_is_rejected() {
        let mut c = Config {
            ack_ride_wait: Duration::from_millis(6),
            ..Config::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "ack_ride_wait = 6ms: expected at most max_ack_delay"
        );
        c.ack_ride_wait = c.max_ack_delay;
        assert_eq!(c.validate(), Ok(()));
    }
}
