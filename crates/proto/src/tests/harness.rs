//! `Pair`: a client and a server `Endpoint` joined by N virtual links, on a virtual clock
//! (quinn's `Pair`, minus the sockets).
//!
//! Model, per link:
//!  1. Client side: the driver's interface queue. A datagram handed over by
//!     `poll_transmit` serializes at the link's `rate` (FIFO behind the ones before it);
//!     when it has left, the client gets `handle_tx_done` and the datagram starts its
//!     one-way `up` delay. Without a rate it leaves at once. A local link-down event
//!     (`Pair::link_change`) empties this queue, as the engine assumes.
//!  2. Server side: datagrams leave at once (`handle_tx_done` right after `poll_transmit`)
//!     and travel for the link's `down` delay.
//!  3. An optional drop function sees every departure (time, direction, link, indices,
//!     bytes) and may drop it; a datagram for a client interface that is down is lost.
//!
//! `step` jumps to the earliest of: either engine's `poll_timeout`, a departure (tx done),
//! an arrival, a scheduled TUN packet. At that instant it feeds departures, arrivals and
//! TUN packets, fires due timers, then drains `poll_transmit`, `poll_deliver` and
//! `poll_event` on both engines. Everything is recorded with its time for assertions.
//! Timers are honoured exactly: a `poll_timeout` that stays at `now` after
//! `handle_timeout(now)` would spin a driver forever, so the harness panics on it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use core::time::Duration;

use crate::wire;
use crate::{Config, Endpoint, Event, LinkChange, LinkConfig, LinkId, LinkView, Role};
use crate::{Instant, Transmit};

/// Session id both ends use.
pub(crate) const SESSION: u32 = 0x1a7e_b1d0;

/// Steps at one instant before the harness calls it a busy loop.
const MAX_STEPS_AT_ONE_INSTANT: u32 = 1_000;
/// Steps `drive_bounded` allows before it gives up.
const MAX_STEPS: u64 = 500_000;
/// Virtual time `drive_bounded` allows before it gives up.
const MAX_VIRTUAL_TIME: Duration = Duration::from_secs(120);

/// `n` milliseconds.
pub(crate) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The instant `n` milliseconds after the origin.
pub(crate) const fn at_ms(n: u64) -> Instant {
    Instant::from_nanos(n * 1_000_000)
}

/// One end of the pair.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub(crate) enum Side {
    Client,
    Server,
}

impl Side {
    pub(crate) const fn peer(self) -> Self {
        match self {
            Self::Client => Self::Server,
            Self::Server => Self::Client,
        }
    }

    pub(crate) const fn idx(self) -> usize {
        match self {
            Self::Client => 0,
            Self::Server => 1,
        }
    }
}

/// One virtual link.
#[derive(Clone, Debug)]
pub(crate) struct LinkSpec {
    /// One-way delay client -> server.
    pub(crate) up: Duration,
    /// One-way delay server -> client.
    pub(crate) down: Duration,
    /// Serialization rate of the client's interface, bytes per second (`None`: instant).
    pub(crate) rate: Option<f64>,
    /// The engine's configuration of the link (client side).
    pub(crate) config: LinkConfig,
    /// Pauses of the uplink, as a cellular scheduler's: a client datagram due at the
    /// server within one arrives at its end (in order).
    pub(crate) up_pauses: Vec<(Instant, Instant)>,
    /// With a pause: what it held leaves its end one datagram per this time (a
    /// bottleneck in the network that drains at its rate), not all at once.
    pub(crate) up_drain: Option<Duration>,
}

impl LinkSpec {
    /// A symmetric link with `one_way` delay each way and no rate limit.
    pub(crate) fn new(one_way: Duration) -> Self {
        Self {
            up: one_way,
            down: one_way,
            rate: None,
            config: LinkConfig::default(),
            up_pauses: Vec::new(),
            up_drain: None,
        }
    }

    /// The uplink delivers nothing in `[from, until)`; what it carries then arrives at
    /// `until`.
    pub(crate) fn up_pause(mut self, from: Instant, until: Instant) -> Self {
        self.up_pauses.push((from, until));
        self
    }

    /// The uplink's pauses hold what comes in them at a bottleneck that then drains one
    /// datagram per `per_datagram`.
    pub(crate) fn up_drain(mut self, per_datagram: Duration) -> Self {
        self.up_drain = Some(per_datagram);
        self
    }

    /// Serializes the client's datagrams at `bits_per_sec`.
    pub(crate) fn rate_bps(mut self, bits_per_sec: f64) -> Self {
        self.rate = Some(bits_per_sec / 8.0);
        self
    }

    /// Sets the server -> client delay.
    pub(crate) fn down_delay(mut self, down: Duration) -> Self {
        self.down = down;
        self
    }
}

/// What a drop function sees of a departing datagram.
#[derive(Debug)]
pub(crate) struct Departure<'a> {
    /// When it leaves its interface.
    pub(crate) time: Instant,
    /// Its sender.
    pub(crate) from: Side,
    /// Its link.
    pub(crate) link: LinkId,
    /// Position among the datagrams `from` sent on `link` (from 0).
    pub(crate) index: u64,
    /// Position among the data datagrams `from` sent on `link`, if it carries data.
    pub(crate) data_index: Option<u64>,
    /// Its bytes.
    pub(crate) bytes: &'a [u8],
}

/// Decides whether a departing datagram is lost.
pub(crate) type DropFn = Box<dyn FnMut(&Departure<'_>) -> bool>;

/// Drops the `k`-th (from 0) data datagram `from` sends on `link`.
pub(crate) fn drop_nth_data(from: Side, link: u16, k: u64) -> DropFn {
    Box::new(move |d| d.from == from && d.link == LinkId(link) && d.data_index == Some(k))
}

/// Drops every datagram carrying packet `seq` of the flow from `port`.
pub(crate) fn drop_packet(port: u16, seq: u32) -> DropFn {
    Box::new(move |d| {
        data_in(d.bytes)
            .iter()
            .any(|i| i.src_port == port && i.seq == seq)
    })
}

/// Drops everything leaving on `link`, both directions, during `[t0, t1)`.
pub(crate) fn blackhole(link: u16, t0: Instant, t1: Instant) -> DropFn {
    Box::new(move |d| d.link == LinkId(link) && d.time >= t0 && d.time < t1)
}

/// A datagram handed to the driver by `poll_transmit`.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(crate) struct TxRecord {
    /// When `poll_transmit` returned it.
    pub(crate) time: Instant,
    pub(crate) from: Side,
    pub(crate) link: LinkId,
    pub(crate) carries_data: bool,
    pub(crate) bytes: Vec<u8>,
}

/// A datagram fed to `handle_datagram`.
#[derive(Clone, Debug)]
pub(crate) struct Arrival {
    pub(crate) time: Instant,
    pub(crate) to: Side,
    pub(crate) link: LinkId,
    pub(crate) bytes: Vec<u8>,
}

/// An inner packet returned by `poll_deliver`.
#[derive(Clone, Debug)]
pub(crate) struct Delivery {
    pub(crate) time: Instant,
    pub(crate) bytes: Vec<u8>,
}

impl Delivery {
    pub(crate) fn inner(&self) -> Inner {
        parse_inner(&self.bytes)
    }
}

// ---- inner packets ----

/// An inner UDP flow: distinct ports make distinct engine flows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowSpec {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) dscp: u8,
    /// UDP payload bytes (at least 4: the sequence number).
    pub(crate) payload_len: usize,
    /// The packets' DF bit (set by default, as TCP and most UDP senders set it).
    pub(crate) dont_fragment: bool,
}

impl FlowSpec {
    /// A best-effort flow from `port` to port 9, `payload_len` bytes of UDP payload.
    pub(crate) const fn bulk(port: u16, payload_len: usize) -> Self {
        Self {
            src_port: port,
            dst_port: 9,
            dscp: 0,
            payload_len,
            dont_fragment: true,
        }
    }

    /// The same flow, with packets that may be fragmented (DF clear).
    pub(crate) const fn fragmentable(mut self) -> Self {
        self.dont_fragment = false;
        self
    }

    /// Packet `seq` of this flow.
    pub(crate) fn packet(&self, seq: u32) -> Vec<u8> {
        inner_packet(self, seq)
    }
}

/// What a test reads back from a delivered inner packet.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub(crate) struct Inner {
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) dscp: u8,
    pub(crate) seq: u32,
}

/// A valid IPv4/UDP packet (10.0.0.1 -> 10.0.0.2) whose payload starts with `seq`.
pub(crate) fn inner_packet(flow: &FlowSpec, seq: u32) -> Vec<u8> {
    let payload_len = flow.payload_len.max(4);
    let udp_len = 8 + payload_len;
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.push(0x45);
    p.push(flow.dscp << 2);
    p.extend_from_slice(&u16::try_from(total).expect("small packet").to_be_bytes());
    p.extend_from_slice(&(seq as u16).to_be_bytes()); // identification
    // Flags and fragment offset: don't fragment, or nothing.
    p.extend_from_slice(&[if flow.dont_fragment { 0x40 } else { 0 }, 0x00]);
    p.push(64); // ttl
    p.push(17); // udp
    p.extend_from_slice(&[0, 0]); // checksum, filled below
    p.extend_from_slice(&[10, 0, 0, 1]);
    p.extend_from_slice(&[10, 0, 0, 2]);
    let sum = ipv4_checksum(&p[..20]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
    p.extend_from_slice(&flow.src_port.to_be_bytes());
    p.extend_from_slice(&flow.dst_port.to_be_bytes());
    p.extend_from_slice(&u16::try_from(udp_len).expect("small packet").to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no udp checksum
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend((4..payload_len).map(|i| (i as u8) ^ (seq as u8)));
    p
}

fn ipv4_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Reads back a packet made by [`inner_packet`]; panics on anything else.
pub(crate) fn parse_inner(p: &[u8]) -> Inner {
    assert!(p.len() >= 32, "inner packet too short: {} bytes", p.len());
    assert_eq!(p[0], 0x45, "not an ipv4 packet from the harness");
    assert_eq!(ipv4_checksum(&p[..20]), 0, "ipv4 header checksum");
    assert_eq!(
        usize::from(u16::from_be_bytes([p[2], p[3]])),
        p.len(),
        "ipv4 total length"
    );
    Inner {
        src_port: u16::from_be_bytes([p[20], p[21]]),
        dst_port: u16::from_be_bytes([p[22], p[23]]),
        dscp: p[1] >> 2,
        seq: u32::from_be_bytes([p[28], p[29], p[30], p[31]]),
    }
}

/// The inner packets carried by DATA frames in a datagram (empty if it does not parse).
pub(crate) fn data_in(datagram: &[u8]) -> Vec<Inner> {
    let Ok((_, frames)) = wire::parse(datagram) else {
        return Vec::new();
    };
    frames
        .filter_map(|f| match f {
            Ok(wire::Frame::Data(d)) => Some(parse_inner(d.payload)),
            _ => None,
        })
        .collect()
}

/// The links acknowledged by ACK frames in a datagram.
pub(crate) fn acks_in(datagram: &[u8]) -> Vec<u16> {
    let Ok((_, frames)) = wire::parse(datagram) else {
        return Vec::new();
    };
    frames
        .filter_map(|f| match f {
            Ok(wire::Frame::Ack(a)) => Some(a.link),
            _ => None,
        })
        .collect()
}

// ---- the pair ----

#[derive(Debug, Eq, Ord, PartialEq, PartialOrd)]
struct InFlight {
    at: Instant,
    order: u64,
    to: Side,
    link: LinkId,
    carries_data: bool,
    bytes: Vec<u8>,
}

#[derive(Debug, Eq, Ord, PartialEq, PartialOrd)]
struct Scheduled {
    at: Instant,
    order: u64,
    side: Side,
    packet: Vec<u8>,
}

#[derive(Debug)]
struct Pending {
    done: Instant,
    carries_data: bool,
    bytes: Vec<u8>,
}

#[derive(Debug)]
struct VLink {
    spec: LinkSpec,
    /// The client's interface for this link is down.
    iface_down: bool,
    busy_until: Instant,
    /// The client's interface queue (serializing or waiting).
    queue: VecDeque<Pending>,
    sent: [u64; 2],
    data_sent: [u64; 2],
    /// When the uplink's bottleneck behind a pause has drained ([`LinkSpec::up_drain`]).
    up_free_at: Instant,
}

/// Builds a [`Pair`].
pub(crate) struct PairBuilder {
    links: Vec<LinkSpec>,
    client: Config,
    server: Config,
    drop: Option<DropFn>,
}

impl PairBuilder {
    /// Default configurations (session [`SESSION`]), no links; but header compression
    /// off, so that the datagrams' inner packets can be read from each datagram alone
    /// ([`data_in`]); `tests/compact.rs` turns it on.
    pub(crate) fn new() -> Self {
        let mut client = Config::new(Role::Client);
        client.session(SESSION);
        client.header_compression = false;
        let mut server = Config::new(Role::Server);
        server.session(SESSION);
        server.header_compression = false;
        Self {
            links: Vec::new(),
            client,
            server,
            drop: None,
        }
    }

    /// Adds a link; its id is its position (0, 1, ...).
    pub(crate) fn link(mut self, spec: LinkSpec) -> Self {
        self.links.push(spec);
        self
    }

    /// Changes both ends' configuration.
    pub(crate) fn config(mut self, f: impl Fn(&mut Config)) -> Self {
        f(&mut self.client);
        f(&mut self.server);
        self
    }

    /// Installs a drop function.
    pub(crate) fn drop_fn(mut self, f: DropFn) -> Self {
        self.drop = Some(f);
        self
    }

    /// The pair at time zero: the client knows its links, the server learns them.
    pub(crate) fn build(self) -> Pair {
        let now = Instant::ZERO;
        let mut client = Endpoint::new(self.client, now).expect("valid client config");
        let server = Endpoint::new(self.server, now).expect("valid server config");
        for (i, spec) in self.links.iter().enumerate() {
            let id = LinkId(u16::try_from(i).expect("few links"));
            assert!(client.add_link(now, id, spec.config.clone()));
        }
        let n = self.links.len();
        let mut pair = Pair {
            now,
            client,
            server,
            links: self
                .links
                .into_iter()
                .map(|spec| VLink {
                    spec,
                    iface_down: false,
                    busy_until: now,
                    queue: VecDeque::new(),
                    sent: [0; 2],
                    data_sent: [0; 2],
                    up_free_at: now,
                })
                .collect(),
            wire: BinaryHeap::new(),
            tun: BinaryHeap::new(),
            order: 0,
            drop: self.drop,
            buf: Vec::new(),
            steps: 0,
            steps_at_now: 0,
            last_step: None,
            transmits: Vec::new(),
            arrivals: Vec::new(),
            dropped: Vec::new(),
            delivered: [Vec::new(), Vec::new()],
            events: [Vec::new(), Vec::new()],
            data_below: vec![0; n],
            max_data_below: vec![0; n],
            unroutable: 0,
        };
        pair.flush(Side::Client);
        pair.flush(Side::Server);
        pair
    }
}

/// Two engines joined by virtual links.
pub(crate) struct Pair {
    /// The virtual clock.
    pub(crate) now: Instant,
    pub(crate) client: Endpoint,
    pub(crate) server: Endpoint,
    links: Vec<VLink>,
    wire: BinaryHeap<Reverse<InFlight>>,
    tun: BinaryHeap<Reverse<Scheduled>>,
    /// Tie-break of simultaneous events: insertion order.
    order: u64,
    drop: Option<DropFn>,
    buf: Vec<u8>,
    pub(crate) steps: u64,
    steps_at_now: u32,
    last_step: Option<Instant>,
    /// Every datagram either engine handed to its driver, in order.
    pub(crate) transmits: Vec<TxRecord>,
    /// Every datagram fed to an engine, in order.
    pub(crate) arrivals: Vec<Arrival>,
    /// Datagrams lost on the way (drop function, interface down, link unknown).
    pub(crate) dropped: Vec<TxRecord>,
    /// Inner packets delivered, by receiving side (client 0, server 1).
    pub(crate) delivered: [Vec<Delivery>; 2],
    /// Engine events with their time, by side.
    pub(crate) events: [Vec<(Instant, Event)>; 2],
    /// Client data datagrams handed to the driver and not yet tx-done, per link.
    pub(crate) data_below: Vec<usize>,
    /// The most `data_below` ever was, per link.
    pub(crate) max_data_below: Vec<usize>,
    /// Datagrams sent on a link id the harness does not model.
    pub(crate) unroutable: u64,
}

impl Pair {
    pub(crate) fn endpoint(&mut self, side: Side) -> &mut Endpoint {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    pub(crate) fn endpoint_ref(&self, side: Side) -> &Endpoint {
        match side {
            Side::Client => &self.client,
            Side::Server => &self.server,
        }
    }

    /// The live view of `link` at `side`.
    pub(crate) fn view(&self, side: Side, link: u16) -> LinkView {
        self.endpoint_ref(side)
            .link_views(self.now)
            .into_iter()
            .find(|v| v.id == LinkId(link))
            .unwrap_or_else(|| panic!("{side:?} does not know link {link}"))
    }

    /// Inner packets delivered at `side`, decoded.
    pub(crate) fn delivered_inner(&self, side: Side) -> Vec<Inner> {
        self.delivered[side.idx()]
            .iter()
            .map(Delivery::inner)
            .collect()
    }

    /// Inner packets in the client's interface queue of `link` (handed over, not departed).
    pub(crate) fn interface_queue(&self, link: u16) -> Vec<Inner> {
        self.links[usize::from(link)]
            .queue
            .iter()
            .flat_map(|p| data_in(&p.bytes))
            .collect()
    }

    /// Events at `side` with their time.
    pub(crate) fn events(&self, side: Side) -> &[(Instant, Event)] {
        &self.events[side.idx()]
    }

    /// Data datagrams `from` handed to its driver.
    pub(crate) fn data_transmits(&self, from: Side) -> impl Iterator<Item = &TxRecord> {
        self.transmits
            .iter()
            .filter(move |t| t.from == from && t.carries_data)
    }

    // ---- inputs ----

    /// Hands `packet` to `side`'s TUN input now.
    pub(crate) fn send_now(&mut self, side: Side, packet: &[u8]) {
        let now = self.now;
        self.endpoint(side)
            .handle_tun_packet(now, packet)
            .expect("harness packets are valid");
        self.flush(side);
    }

    /// Schedules `packet` for `side`'s TUN input at `at`.
    pub(crate) fn send_at(&mut self, at: Instant, side: Side, packet: Vec<u8>) {
        assert!(at >= self.now, "cannot schedule in the past");
        let order = self.next_order();
        self.tun.push(Reverse(Scheduled {
            at,
            order,
            side,
            packet,
        }));
    }

    /// Schedules packets `0..count` of `flow` from `side`, one every `every`, from `start`.
    pub(crate) fn send_stream(
        &mut self,
        side: Side,
        flow: &FlowSpec,
        count: u32,
        start: Instant,
        every: Duration,
    ) {
        for seq in 0..count {
            self.send_at(start + every * seq, side, flow.packet(seq));
        }
    }

    /// Feeds `side` a datagram from outside the model (replays, garbage) now.
    /// Returns whether the engine took it ([`Endpoint::handle_datagram`]).
    pub(crate) fn inject(&mut self, side: Side, link: LinkId, bytes: &[u8]) -> bool {
        let now = self.now;
        self.arrivals.push(Arrival {
            time: now,
            to: side,
            link,
            bytes: bytes.to_vec(),
        });
        let taken = self.endpoint(side).handle_datagram(now, bytes);
        self.flush(side);
        taken
    }

    /// The link's path changes: datagrams leaving from now on take `one_way` each way
    /// (those on the wire keep their delay).
    pub(crate) fn set_delay(&mut self, link: u16, one_way: Duration) {
        let spec = &mut self.links[usize::from(link)].spec;
        spec.up = one_way;
        spec.down = one_way;
    }

    /// A local interface event at the client. Down also empties the interface queue and
    /// makes the interface deaf until it is up again.
    pub(crate) fn link_change(&mut self, link: u16, change: LinkChange) {
        let now = self.now;
        let li = usize::from(link);
        let l = &mut self.links[li];
        match change {
            LinkChange::Down => {
                l.iface_down = true;
                l.busy_until = now;
                for p in l.queue.drain(..) {
                    self.dropped.push(TxRecord {
                        time: now,
                        from: Side::Client,
                        link: LinkId(link),
                        carries_data: p.carries_data,
                        bytes: p.bytes,
                    });
                }
                self.data_below[li] = 0;
            }
            LinkChange::Up => l.iface_down = false,
        }
        self.client.handle_link_change(now, LinkId(link), change);
        self.flush(Side::Client);
    }

    // ---- driving ----

    fn next_order(&mut self) -> u64 {
        self.order += 1;
        self.order
    }

    /// The earliest thing that will happen.
    pub(crate) fn next_time(&self) -> Instant {
        let mut next = Instant::MAX;
        for t in [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
        {
            next = next.min(t);
        }
        if let Some(Reverse(f)) = self.wire.peek() {
            next = next.min(f.at);
        }
        if let Some(Reverse(s)) = self.tun.peek() {
            next = next.min(s.at);
        }
        for l in &self.links {
            if let Some(p) = l.queue.front() {
                next = next.min(p.done);
            }
        }
        next
    }

    /// Advances to the next event and handles everything due then.
    pub(crate) fn step(&mut self) {
        let t = self.next_time().max(self.now);
        assert!(t < Instant::MAX, "nothing will ever happen");
        if self.last_step == Some(t) {
            self.steps_at_now += 1;
            assert!(
                self.steps_at_now < MAX_STEPS_AT_ONE_INSTANT,
                "busy loop at {t:?}: client poll_timeout {:?}, server poll_timeout {:?} stay due \
                 after handle_timeout",
                self.client.poll_timeout(),
                self.server.poll_timeout(),
            );
        } else {
            self.steps_at_now = 0;
        }
        self.last_step = Some(t);
        self.now = t;
        self.steps += 1;
        // 1. Departures from the client's interfaces.
        for li in 0..self.links.len() {
            while self.links[li].queue.front().is_some_and(|p| p.done <= t) {
                let p = self.links[li].queue.pop_front().expect("checked");
                if p.carries_data {
                    self.data_below[li] -= 1;
                }
                let link = LinkId(li as u16);
                self.client.handle_tx_done(t, link);
                self.depart(Side::Client, link, p.carries_data, p.bytes);
            }
        }
        // 2. Arrivals.
        while self.wire.peek().is_some_and(|Reverse(f)| f.at <= t) {
            let Reverse(f) = self.wire.pop().expect("checked");
            let deaf = f.to == Side::Client && self.links[usize::from(f.link.0)].iface_down;
            if deaf {
                self.dropped.push(TxRecord {
                    time: t,
                    from: f.to.peer(),
                    link: f.link,
                    carries_data: f.carries_data,
                    bytes: f.bytes,
                });
                continue;
            }
            self.endpoint(f.to).handle_datagram(t, &f.bytes);
            self.arrivals.push(Arrival {
                time: t,
                to: f.to,
                link: f.link,
                bytes: f.bytes,
            });
        }
        // 3. TUN input.
        while self.tun.peek().is_some_and(|Reverse(s)| s.at <= t) {
            let Reverse(s) = self.tun.pop().expect("checked");
            match self.endpoint(s.side).handle_tun_packet(t, &s.packet) {
                // Larger than the links carry: answered "packet too big" (the tests
                // that send such packets read the answers and the counters).
                Ok(()) | Err(crate::TunError::TooBig { .. }) => {}
                Err(e) => panic!("harness packets are valid: {e}"),
            }
        }
        // 4. Timers.
        for side in [Side::Client, Side::Server] {
            let ep = self.endpoint(side);
            if ep.poll_timeout().is_some_and(|d| d <= t) {
                ep.handle_timeout(t);
            }
        }
        // 5. Outputs.
        self.flush(Side::Client);
        self.flush(Side::Server);
    }

    /// Drains `side`'s outputs at `now`.
    fn flush(&mut self, side: Side) {
        let now = self.now;
        let mut buf = std::mem::take(&mut self.buf);
        while let Some(tx) = self.endpoint(side).poll_transmit(now, &mut buf) {
            let bytes = buf[..tx.len].to_vec();
            self.on_transmit(side, tx, bytes);
        }
        self.buf = buf;
        while let Some(p) = self.endpoint(side).poll_deliver() {
            self.delivered[side.idx()].push(Delivery {
                time: now,
                bytes: p,
            });
        }
        while let Some(e) = self.endpoint(side).poll_event() {
            self.events[side.idx()].push((now, e));
        }
    }

    fn on_transmit(&mut self, side: Side, tx: Transmit, bytes: Vec<u8>) {
        let now = self.now;
        assert_eq!(tx.len, bytes.len());
        self.transmits.push(TxRecord {
            time: now,
            from: side,
            link: tx.link,
            carries_data: tx.carries_data,
            bytes: bytes.clone(),
        });
        let li = usize::from(tx.link.0);
        if li >= self.links.len() {
            // A link the model does not have (e.g. learnt from a forged datagram).
            self.unroutable += 1;
            self.endpoint(side).handle_tx_done(now, tx.link);
            self.dropped
                .push(self.transmits.last().expect("pushed").clone());
            return;
        }
        if side == Side::Server {
            self.server.handle_tx_done(now, tx.link);
            self.depart(side, tx.link, tx.carries_data, bytes);
            return;
        }
        if self.links[li].iface_down {
            // The interface refuses it: it has "left" and is lost.
            self.client.handle_tx_done(now, tx.link);
            self.dropped
                .push(self.transmits.last().expect("pushed").clone());
            return;
        }
        let Some(rate) = self.links[li].spec.rate else {
            self.client.handle_tx_done(now, tx.link);
            self.depart(side, tx.link, tx.carries_data, bytes);
            return;
        };
        if tx.carries_data {
            self.data_below[li] += 1;
            self.max_data_below[li] = self.max_data_below[li].max(self.data_below[li]);
        }
        let l = &mut self.links[li];
        let start = l.busy_until.max(now);
        let done = start + Duration::from_secs_f64(bytes.len() as f64 / rate);
        l.busy_until = done;
        l.queue.push_back(Pending {
            done,
            carries_data: tx.carries_data,
            bytes,
        });
    }

    /// A datagram leaves `from`'s interface now.
    fn depart(&mut self, from: Side, link: LinkId, carries_data: bool, bytes: Vec<u8>) {
        let now = self.now;
        let l = &mut self.links[usize::from(link.0)];
        let index = l.sent[from.idx()];
        l.sent[from.idx()] += 1;
        let data_index = carries_data.then(|| {
            l.data_sent[from.idx()] += 1;
            l.data_sent[from.idx()] - 1
        });
        let delay = match from {
            Side::Client => l.spec.up,
            Side::Server => l.spec.down,
        };
        let lost = self.drop.as_mut().is_some_and(|f| {
            f(&Departure {
                time: now,
                from,
                link,
                index,
                data_index,
                bytes: &bytes,
            })
        });
        if lost {
            self.dropped.push(TxRecord {
                time: now,
                from,
                link,
                carries_data,
                bytes,
            });
            return;
        }
        let mut at = now + delay;
        if from == Side::Client {
            let l = &mut self.links[usize::from(link.0)];
            let paused = l.spec.up_pauses.iter().find(|&&(a, b)| at >= a && at < b);
            if let Some(&(_, until)) = paused {
                at = until;
            }
            if let Some(per) = l.spec.up_drain
                && (paused.is_some() || at < l.up_free_at)
            {
                at = at.max(l.up_free_at);
                l.up_free_at = at + per;
            }
        }
        let order = self.next_order();
        self.wire.push(Reverse(InFlight {
            at,
            order,
            to: from.peer(),
            link,
            carries_data,
            bytes,
        }));
    }

    /// Steps until the next event would be after `t`, then sets the clock to `t`.
    pub(crate) fn drive_until(&mut self, t: Instant) {
        while self.next_time() <= t {
            self.step();
        }
        self.now = self.now.max(t);
    }

    /// Steps for `d` of virtual time.
    pub(crate) fn drive_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.drive_until(t);
    }

    /// Whether no inner packet is left to carry: no scheduled input, no data on the wire,
    /// nothing in an interface queue, queued above the binding point or held for
    /// reordering. (Control traffic never stops: loss reports go out every 50 ms.)
    pub(crate) fn quiescent(&self) -> bool {
        self.tun.is_empty()
            && !self.wire.iter().any(|Reverse(f)| f.carries_data)
            && self.links.iter().all(|l| l.queue.is_empty())
            && self.client.queued_packets() == 0
            && self.server.queued_packets() == 0
            && self.client.reorder_held() == 0
            && self.server.reorder_held() == 0
    }

    /// Steps until [`Pair::quiescent`]; panics if that takes more than [`MAX_STEPS`] steps
    /// or [`MAX_VIRTUAL_TIME`]. Returns the time it became quiescent.
    pub(crate) fn drive_bounded(&mut self) -> Instant {
        let start_steps = self.steps;
        let deadline = self.now + MAX_VIRTUAL_TIME;
        while !self.quiescent() {
            assert!(
                self.steps - start_steps < MAX_STEPS,
                "not quiescent after {MAX_STEPS} steps (now {:?})",
                self.now
            );
            assert!(
                self.now < deadline,
                "not quiescent after {MAX_VIRTUAL_TIME:?} of virtual time"
            );
            self.step();
        }
        self.now
    }
}
