//! Sans-IO traffic sources and sinks for the latebind simulator.
//!
//! A [`Flow`] is one application flow of a scenario (DESIGN.md section 4) with
//! both of its ends: the client end (198.18.0.2, port `10000 + index`) and the
//! server end (198.19.0.1, port `20000 + index`). The ends exchange raw IPv4
//! packets through a tunnel the simulator provides: the simulator drains what an
//! end emits with [`Flow::poll_transmit`], carries it, and hands it to the other
//! end with [`Flow::handle_packet`]. [`Flow::poll_timeout`] says when the flow
//! next needs polling.
//!
//! Kinds ([`FlowKind`]):
//! - `udp-cbr`, `udp-burst`, `urgent`: UDP probe packets (`LBT1` payload with a
//!   sequence number and send time) from a source to a sink that counts unique
//!   packets, duplicates, latency and gaps;
//! - `tcp-bulk`: a real TCP connection between two smoltcp stacks (see the
//!   `tcp` module for what smoltcp's TCP does on loss).
//!
//! Nothing here reads a clock, spawns a thread, opens a socket or draws a random
//! number: time is a [`Duration`] from an arbitrary origin passed in by the
//! caller, and the same calls give the same packets and the same reports.

#![warn(missing_docs)]

pub mod cuts;
mod ip;
mod report;
mod tcp;
mod udp;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use report::{FlowReport, Latency};

/// One end of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The client end (198.18.0.2, port `10000 + index`).
    Client,
    /// The server end (198.19.0.1, port `20000 + index`).
    Server,
}

impl Side {
    /// The other end.
    pub fn peer(self) -> Self {
        match self {
            Self::Client => Self::Server,
            Self::Server => Self::Client,
        }
    }
}

/// Which way a flow's data goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

impl Direction {
    /// The end that sends the data (client for `Up`, server for `Down`).
    pub fn sender(self) -> Side {
        match self {
            Self::Up => Side::Client,
            Self::Down => Side::Server,
        }
    }

    /// The end that receives the data.
    pub fn receiver(self) -> Side {
        self.sender().peer()
    }
}

/// What a flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowKind {
    /// `tcp-bulk`: a TCP connection that sends as fast as TCP allows, or, with a rate,
    /// whose application writes at that rate.
    TcpBulk,
    /// `udp-cbr`: UDP packets at a constant bit rate.
    UdpCbr,
    /// `udp-burst`: `count` UDP packets back to back at the start.
    UdpBurst,
    /// `urgent`: `count` small UDP packets at the start, on their own 5-tuple.
    Urgent,
    /// `quic-bulk`: what the tunnel sees of a QUIC transfer. The simulator's TCP (as
    /// `tcp-bulk`) carried in UDP datagrams between the client's port and the server's
    /// port 443, each payload a QUIC short header's first byte (0x40) and then the TCP
    /// segment: a reliable, congestion-controlled transfer over UDP. Not a QUIC
    /// implementation (no streams, no QUIC loss recovery).
    QuicBulk,
}

impl FlowKind {
    /// All kinds, in the order of their scenario names.
    pub const ALL: [Self; 5] = [
        Self::TcpBulk,
        Self::UdpCbr,
        Self::UdpBurst,
        Self::Urgent,
        Self::QuicBulk,
    ];

    /// The scenario name of the kind (`tcp-bulk`, `udp-cbr`, `udp-burst`, `urgent`,
    /// `quic-bulk`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TcpBulk => "tcp-bulk",
            Self::UdpCbr => "udp-cbr",
            Self::UdpBurst => "udp-burst",
            Self::Urgent => "urgent",
            Self::QuicBulk => "quic-bulk",
        }
    }

    /// The scenario names of every kind, comma-separated (for error messages).
    pub fn names() -> String {
        Self::ALL.map(Self::as_str).join(", ")
    }

    /// Whether the flow is a congestion-controlled transfer that re-sends its losses
    /// (`tcp-bulk`, `quic-bulk`): its report counts no loss of its own.
    pub fn is_reliable(self) -> bool {
        matches!(self, Self::TcpBulk | Self::QuicBulk)
    }

    /// The IP protocol of the flow's packets.
    pub fn ip_protocol(self) -> u8 {
        match self {
            Self::TcpBulk => 6,
            _ => 17,
        }
    }
}

impl fmt::Display for FlowKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error of [`FlowKind::from_str`]: the name is not a flow kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown flow kind {name:?}; valid kinds: {}", FlowKind::names())]
pub struct ParseFlowKindError {
    /// The name that was given.
    pub name: String,
}

impl FromStr for FlowKind {
    type Err = ParseFlowKindError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| ParseFlowKindError { name: s.to_owned() })
    }
}

/// The description of one flow (one `[[flows]]` entry of a scenario).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// Name, copied into the report.
    pub name: String,
    /// Kind of traffic.
    pub kind: FlowKind,
    /// Which end sends.
    pub direction: Direction,
    /// When the flow starts (first packet, or TCP connect).
    pub start: Duration,
    /// When the flow stops sending (udp-cbr sends while `t < stop`; tcp-bulk stops
    /// writing new data at `stop`).
    pub stop: Duration,
    /// udp-cbr: sending rate in bits of whole IP packets per second. tcp-bulk: the
    /// application's write rate in bits of payload per second (an application-limited
    /// sender), or 0 for a sender that keeps its socket buffer full.
    pub rate_bps: f64,
    /// UDP kinds: total IPv4 packet size (at least 52 = headers + probe payload);
    /// tcp-bulk: the IP MTU of both TCP ends (MSS = `packet_bytes - 40`).
    pub packet_bytes: usize,
    /// udp-burst / urgent: number of packets sent back to back at `start`.
    pub count: u64,
    /// DSCP written into the IPv4 header of every packet the flow emits.
    pub dscp: u8,
    /// Flow index, unique per scenario: client port `10000 + index`, server port
    /// `20000 + index`.
    pub index: u16,
    /// The cuts to report on, from [`cuts::windows`] (empty: none); the report's
    /// [`FlowReport::cuts`] has one entry per window.
    pub cuts: Vec<cuts::CutWindow>,
}

impl FlowSpec {
    /// Port of the end `side`.
    pub fn port(&self, side: Side) -> u16 {
        match side {
            Side::Client => 10_000u16.wrapping_add(self.index),
            Side::Server => 20_000u16.wrapping_add(self.index),
        }
    }
}

/// One flow, both ends.
#[derive(Debug)]
pub struct Flow {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Udp(Box<udp::UdpFlow>),
    Tcp(Box<tcp::TcpFlow>),
}

impl Flow {
    /// Creates the flow. Nothing is sent before `spec.start`.
    pub fn new(spec: FlowSpec) -> Self {
        let inner = match spec.kind {
            FlowKind::TcpBulk | FlowKind::QuicBulk => Inner::Tcp(Box::new(tcp::TcpFlow::new(spec))),
            FlowKind::UdpCbr | FlowKind::UdpBurst | FlowKind::Urgent => {
                Inner::Udp(Box::new(udp::UdpFlow::new(spec)))
            }
        };
        Self { inner }
    }

    /// Next IP packet that end `side` emits at or before `now`, if any. The simulator
    /// calls this repeatedly until `None` after every event touching this flow and at
    /// [`poll_timeout`](Self::poll_timeout).
    pub fn poll_transmit(&mut self, now: Duration, side: Side) -> Option<Vec<u8>> {
        match &mut self.inner {
            Inner::Udp(f) => f.poll_transmit(now, side),
            Inner::Tcp(f) => f.poll_transmit(now, side),
        }
    }

    /// An IP packet delivered to end `side` (by the tunnel) at `now`.
    pub fn handle_packet(&mut self, now: Duration, side: Side, packet: &[u8]) {
        match &mut self.inner {
            Inner::Udp(f) => f.handle_packet(now, side, packet),
            Inner::Tcp(f) => f.handle_packet(now, side, packet),
        }
    }

    /// When this flow next needs [`poll_transmit`](Self::poll_transmit) (either side),
    /// or `None` if it has nothing scheduled. May be in the past (at the `now` of the
    /// last call) when packets are waiting to be drained.
    pub fn poll_timeout(&self) -> Option<Duration> {
        match &self.inner {
            Inner::Udp(f) => f.poll_timeout(),
            Inner::Tcp(f) => f.poll_timeout(),
        }
    }

    /// Per-flow report at the end of the run (`end` = simulation end time).
    pub fn report(&self, end: Duration) -> FlowReport {
        match &self.inner {
            Inner::Udp(f) => f.report(end),
            Inner::Tcp(f) => f.report(end),
        }
    }

    /// The spec the flow was made from.
    pub fn spec(&self) -> &FlowSpec {
        match &self.inner {
            Inner::Udp(f) => f.spec(),
            Inner::Tcp(f) => f.spec(),
        }
    }
}

/// A tiny deterministic network for the tests: one pipe per direction with a fixed
/// one-way delay, an optional rate limit and chosen packets dropped.
#[cfg(test)]
pub(crate) mod testpipe {
    use std::collections::VecDeque;
    use std::time::Duration;

    use crate::{Flow, Side};

    /// Decides, per packet, whether the pipe drops it: `(side that sent it, the
    /// n-th packet that side sent (from 0), packet) -> drop?`.
    pub(crate) type DropFn = Box<dyn FnMut(Side, u64, &[u8]) -> bool>;

    /// One direction of the pipe: serialization at `rate_bps` (if any) then `delay`.
    struct Link {
        delay: Duration,
        rate_bps: Option<f64>,
        busy_until: Duration,
        in_flight: VecDeque<(Duration, Vec<u8>)>,
        count: u64,
    }

    impl Link {
        fn send(&mut self, now: Duration, pkt: Vec<u8>) {
            let departs = match self.rate_bps {
                Some(rate) => {
                    let start = self.busy_until.max(now);
                    let ser = Duration::from_secs_f64(pkt.len() as f64 * 8.0 / rate);
                    self.busy_until = start + ser;
                    self.busy_until
                }
                None => now,
            };
            self.in_flight.push_back((departs + self.delay, pkt));
        }
    }

    /// A pipe between the two ends of one flow.
    pub(crate) struct Pipe {
        /// Client -> server.
        up: Link,
        /// Server -> client.
        down: Link,
        drop: DropFn,
        /// Virtual time reached so far.
        now: Duration,
        /// Packets dropped so far.
        pub(crate) dropped: u64,
    }

    impl Pipe {
        /// A pipe with the same delay and rate in both directions, dropping nothing.
        pub(crate) fn new(delay: Duration, rate_bps: Option<f64>) -> Self {
            let link = || Link {
                delay,
                rate_bps,
                busy_until: Duration::ZERO,
                in_flight: VecDeque::new(),
                count: 0,
            };
            Self {
                up: link(),
                down: link(),
                drop: Box::new(|_, _, _| false),
                now: Duration::ZERO,
                dropped: 0,
            }
        }

        /// Drops the packets for which `f` says so.
        pub(crate) fn with_drop(mut self, f: DropFn) -> Self {
            self.drop = f;
            self
        }

        fn drain(&mut self, flow: &mut Flow, now: Duration) {
            for side in [Side::Client, Side::Server] {
                while let Some(pkt) = flow.poll_transmit(now, side) {
                    let link = match side {
                        Side::Client => &mut self.up,
                        Side::Server => &mut self.down,
                    };
                    let n = link.count;
                    link.count += 1;
                    if (self.drop)(side, n, &pkt) {
                        self.dropped += 1;
                    } else {
                        link.send(now, pkt);
                    }
                }
            }
        }

        /// Runs `flow` over the pipe until `end` (virtual time), event by event;
        /// a later call continues where this one stopped.
        pub(crate) fn run(&mut self, flow: &mut Flow, end: Duration) {
            let mut now = self.now;
            let mut steps = 0u64;
            loop {
                self.drain(flow, now);
                let next_arrival = [&self.up, &self.down]
                    .iter()
                    .filter_map(|l| l.in_flight.front().map(|(t, _)| *t))
                    .min();
                let next = match (next_arrival, flow.poll_timeout()) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => match a.or(b) {
                        Some(t) => t,
                        None => break,
                    },
                };
                let next = next.max(now);
                if next > end {
                    self.now = end;
                    break;
                }
                steps += 1;
                assert!(steps < 50_000_000, "simulation does not progress");
                now = next;
                for (link, to) in [(&mut self.up, Side::Server), (&mut self.down, Side::Client)] {
                    while link.in_flight.front().is_some_and(|(t, _)| *t <= now) {
                        let (_, pkt) = link.in_flight.pop_front().expect("front exists");
                        flow.handle_packet(now, to, &pkt);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_roundtrip() {
        for k in FlowKind::ALL {
            assert_eq!(k.to_string().parse::<FlowKind>(), Ok(k));
        }
        assert_eq!("udp-cbr".parse::<FlowKind>(), Ok(FlowKind::UdpCbr));
        let err = "tcp".parse::<FlowKind>().unwrap_err();
        let msg = err.to_string();
        for k in FlowKind::ALL {
            assert!(msg.contains(k.as_str()), "{msg}");
        }
        assert!(msg.contains("\"tcp\""), "{msg}");
    }

    #[test]
    fn ports_and_sides() {
        let spec = FlowSpec {
            name: "x".into(),
            kind: FlowKind::UdpCbr,
            direction: Direction::Down,
            start: Duration::ZERO,
            stop: Duration::from_secs(1),
            rate_bps: 1e6,
            packet_bytes: 1000,
            count: 1,
            dscp: 0,
            index: 7,
            cuts: Vec::new(),
        };
        assert_eq!(spec.port(Side::Client), 10_007);
        assert_eq!(spec.port(Side::Server), 20_007);
        assert_eq!(spec.direction.sender(), Side::Server);
        assert_eq!(spec.direction.receiver(), Side::Client);
        assert_eq!(Direction::Up.sender(), Side::Client);
    }
}
