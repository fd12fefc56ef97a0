//! `tcp-bulk`: a real TCP connection between two smoltcp stacks.
//!
//! Each end is a smoltcp [`Interface`] (`Medium::Ip`, IP MTU = `packet_bytes`) over
//! an in-memory device: [`TcpFlow::handle_packet`] pushes into the device's receive
//! queue and polls the interface, [`TcpFlow::poll_transmit`] drains its transmit
//! queue. Each end has one TCP socket (1 MiB send and receive buffers, so window
//! scaling is on; Cubic; Nagle on, see [`NAGLE`]; smoltcp's default delayed ACK of 10 ms). The
//! sending end connects at `start` to the listener on the other end and keeps its
//! send buffer full (an unlimited source of zero bytes) until `stop`, then stops
//! writing (no FIN: what is buffered still drains). With a rate (`FlowSpec::rate_bps`
//! above 0) the application is the limit instead: by time `t` it has offered
//! `rate * (t - start)` bits of payload, and writes what it has offered as the send
//! buffer takes it (what a full buffer holds back is written later, as by a blocking
//! writer fed at that rate); the flow asks to be polled when the next MSS of payload is
//! due. The receiving end reads everything on every poll, so its window stays open.
//!
//! # What smoltcp 0.14's TCP does on loss (read from its source)
//!
//! - RTO per RFC 6298: initial 1 s, **minimum 1 s** (`RTTE_MIN_RTO = 1000` ms),
//!   maximum 60 s, doubled on every expiry (srtt/rttvar are forgotten after 3
//!   expiries in a row). RTT samples are taken in whole milliseconds, one segment
//!   at a time (Karn: none while retransmitting).
//! - On RTO expiry it goes back N: "last sequence sent" is rewound to the last
//!   cumulative ACK and everything after it is sent again (as the congestion
//!   window allows; the controller restarts from slow start).
//! - **Fast retransmit: yes**, on exactly the 3rd duplicate ACK, of one segment
//!   (the first unacknowledged one); the congestion controller's `on_loss`
//!   reduces the window. There is no NewReno-style partial-ACK recovery: a second
//!   hole in the same window needs 3 more duplicate ACKs or the RTO.
//! - **SACK: receive side only.** It offers SACK-permitted in its SYN and, when
//!   the peer agreed, puts one SACK block (from its reassembly buffer) in its
//!   ACKs, but the sender ignores incoming SACK blocks for retransmission.
//! - The receiver's out-of-order reassembly keeps at most 4 holes
//!   (`ASSEMBLER_MAX_SEGMENT_COUNT` = 4); a segment that would need more is dropped.
//! - No timestamps option unless a generator is set (not set here), no pacing:
//!   a window's worth of segments leaves at one instant.
//!
//! # Accounting
//!
//! Computed from the segments the flow itself emits (sender end, in
//! `poll_transmit`) and receives (receiver end, in `handle_packet`), with sequence
//! numbers unwrapped to 64-bit byte offsets from the sender's ISN (wrapping
//! arithmetic, nearest to a reference point). A segment "arrived" here even if
//! smoltcp then discards it (e.g. beyond its 4 reassembly holes).

use std::collections::VecDeque;
use std::fmt;
use std::net::Ipv4Addr;
use std::time::Duration;

use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp::{self as stcp, CongestionControl};
use smoltcp::time::Instant;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};

use crate::cuts::CutTracker;
use crate::ip;
use crate::report::{self, Latency};
use crate::{FlowKind, FlowReport, FlowSpec, Side};

/// Size of each socket buffer (send and receive, on both ends).
const BUFFER_BYTES: usize = 1 << 20;
/// Prefix length of both ends' addresses: 198.18.0.0/15 holds both, so each end
/// reaches the other on-link.
const PREFIX_LEN: u8 = 15;
/// Nagle's algorithm on the sending socket. On, although the brief said off: the
/// source is unlimited, so Nagle never holds back data that could fill a segment;
/// what it does prevent is smoltcp sending a runt segment whenever the congestion
/// window (counted in bytes) has less than one MSS left. With Nagle off, a 5 s
/// transfer over a 10 Mb/s, 20 ms pipe sent about a quarter of its segments with
/// 16 bytes of payload (with the same goodput), which skews every per-packet
/// count and wastes per-packet budgets in the tunnel. Linux never sends such runts
/// in bulk transfer (its cwnd is counted in segments).
const NAGLE: bool = true;
/// Smallest IP MTU used for TCP (MSS 88).
const MIN_MTU: usize = 128;
/// The server's UDP port of a quic-bulk flow.
pub(crate) const QUIC_PORT: u16 = 443;

fn instant(t: Duration) -> Instant {
    Instant::from_micros(i64::try_from(t.as_micros()).unwrap_or(i64::MAX))
}

fn duration(t: Instant) -> Duration {
    Duration::from_micros(u64::try_from(t.total_micros()).unwrap_or(0))
}

fn side_index(side: Side) -> usize {
    match side {
        Side::Client => 0,
        Side::Server => 1,
    }
}

fn side_addr(side: Side) -> Ipv4Addr {
    match side {
        Side::Client => ip::CLIENT_ADDR,
        Side::Server => ip::SERVER_ADDR,
    }
}

/// An in-memory IP device: packets handed in wait in `rx`, packets smoltcp emits
/// wait in `tx`.
#[derive(Debug)]
struct QueueDevice {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
    mtu: usize,
}

impl Device for QueueDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((RxToken(packet), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = self.mtu;
        caps
    }
}

struct RxToken(Vec<u8>);

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(&self.0)
    }
}

struct TxToken<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.0.push_back(buf);
        r
    }
}

/// One end: a smoltcp stack with one TCP socket.
struct End {
    iface: Interface,
    dev: QueueDevice,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    /// smoltcp's next deadline as of the last service (`None`: only on ingress).
    next_poll: Option<Duration>,
    /// `now` of the last service, i.e. when what waits in `dev.tx` was emitted.
    last_service: Duration,
}

impl End {
    fn new(spec: &FlowSpec, side: Side, mtu: usize) -> Self {
        let mut dev = QueueDevice {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            mtu,
        };
        let mut config = Config::new(HardwareAddress::Ip);
        // Fixed seed: the ISNs are deterministic (and differ per flow and end).
        config.random_seed =
            0x6c62_7431_0000_0000 | (u64::from(spec.index) << 1) | side_index(side) as u64;
        let mut iface = Interface::new(config, &mut dev, Instant::ZERO);
        iface.update_ip_addrs(|addrs| {
            addrs
                .push(IpCidr::new(IpAddress::Ipv4(side_addr(side)), PREFIX_LEN))
                .expect("an interface holds at least one address");
        });
        let mut socket = stcp::Socket::new(
            stcp::SocketBuffer::new(vec![0u8; BUFFER_BYTES]),
            stcp::SocketBuffer::new(vec![0u8; BUFFER_BYTES]),
        );
        socket.set_congestion_control(CongestionControl::Cubic);
        socket.set_nagle_enabled(NAGLE);
        if side != spec.direction.sender() {
            socket
                .listen(spec.port(side))
                .expect("listening on a fresh socket with a non-zero port");
        }
        let mut sockets = SocketSet::new(Vec::new());
        let handle = sockets.add(socket);
        Self {
            iface,
            dev,
            sockets,
            handle,
            next_poll: None,
            last_service: Duration::ZERO,
        }
    }

    fn socket(&mut self) -> &mut stcp::Socket<'static> {
        self.sockets.get_mut::<stcp::Socket>(self.handle)
    }

    fn poll(&mut self, now: Instant) {
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }
}

/// Maps a 32-bit sequence number to a byte offset (0 = the first data byte after
/// the SYN), choosing the offset nearest to `reference`.
fn unwrap_seq(seq: u32, isn: u32, reference: u64) -> u64 {
    let rel = seq.wrapping_sub(isn.wrapping_add(1));
    let diff = rel.wrapping_sub(reference as u32) as i32;
    reference.saturating_add_signed(i64::from(diff))
}

/// Byte ranges that have arrived at the receiving end.
#[derive(Debug, Default)]
struct Received {
    /// Every byte below this offset has arrived.
    cum: u64,
    /// Sorted, disjoint, non-touching ranges above `cum`.
    above: Vec<(u64, u64)>,
}

impl Received {
    /// The first byte of `[s, e)` that has not arrived, if any.
    fn first_missing(&self, s: u64, e: u64) -> Option<u64> {
        let mut b = s.max(self.cum);
        for &(lo, hi) in &self.above {
            if b >= e || lo > b {
                break;
            }
            b = b.max(hi);
        }
        (b < e).then_some(b)
    }

    fn insert(&mut self, s: u64, e: u64) {
        let (mut lo, mut hi) = (s.max(self.cum), e);
        if hi <= lo {
            return;
        }
        self.above.retain(|&(a, z)| {
            if z < lo || a > hi {
                true
            } else {
                lo = lo.min(a);
                hi = hi.max(z);
                false
            }
        });
        let at = self.above.partition_point(|&(a, _)| a < lo);
        self.above.insert(at, (lo, hi));
        while let Some(&(a, z)) = self.above.first() {
            if a > self.cum {
                break;
            }
            self.cum = self.cum.max(z);
            self.above.remove(0);
        }
    }
}

/// Counters of one tcp-bulk flow.
#[derive(Debug, Default)]
struct Accounting {
    /// The sending end's initial sequence number (from its SYN).
    isn: Option<u32>,
    // Sending end.
    sent: u64,
    retransmitted: u64,
    /// Offset just past the highest byte sent so far.
    high_sent: u64,
    /// When each chunk of bytes was first sent: `(first offset, time)`, ascending;
    /// a chunk runs to the next one's start (the last one to `high_sent`). Chunks
    /// wholly below the receiver's cumulative point are pruned.
    first_tx: VecDeque<(u64, Duration)>,
    first_data_tx: Option<Duration>,
    // Receiving end.
    delivered: u64,
    duplicates: u64,
    received: Received,
    latencies_ms: Vec<f64>,
    // Receiving application.
    app_bytes: u64,
    app_bytes_by_stop: u64,
    /// Last time (clipped to `stop`) new in-order bytes reached the application,
    /// or the first data transmission.
    last_delivery: Option<Duration>,
    max_gap: Duration,
}

impl Accounting {
    /// A segment emitted by the sending end.
    fn on_sender_tx(&mut self, now: Duration, seg: ip::TcpSegment) {
        if seg.syn && !seg.ack {
            self.isn = Some(seg.seq);
        }
        let Some(isn) = self.isn else {
            return;
        };
        if seg.payload_len == 0 || seg.syn {
            return;
        }
        let s = unwrap_seq(seg.seq, isn, self.high_sent);
        let e = s + u64::from(seg.payload_len);
        self.sent += 1;
        if s < self.high_sent {
            self.retransmitted += 1;
        }
        if e > self.high_sent {
            self.first_tx.push_back((s.max(self.high_sent), now));
            self.high_sent = e;
        }
        if self.first_data_tx.is_none() {
            self.first_data_tx = Some(now);
            self.last_delivery.get_or_insert(now);
        }
    }

    /// When the byte at `offset` was first sent.
    fn first_sent(&self, offset: u64) -> Option<Duration> {
        let idx = self.first_tx.partition_point(|&(s, _)| s <= offset);
        idx.checked_sub(1).map(|i| self.first_tx[i].1)
    }

    /// A segment arriving at the receiving end.
    fn on_receiver_rx(&mut self, now: Duration, seg: ip::TcpSegment) {
        let Some(isn) = self.isn else {
            return;
        };
        if seg.payload_len == 0 || seg.syn {
            return;
        }
        let s = unwrap_seq(seg.seq, isn, self.received.cum);
        let e = s + u64::from(seg.payload_len);
        self.delivered += 1;
        let Some(b) = self.received.first_missing(s, e) else {
            self.duplicates += 1;
            return;
        };
        if let Some(t) = self.first_sent(b) {
            self.latencies_ms.push(report::ms(now.saturating_sub(t)));
        }
        self.received.insert(s, e);
        let cum = self.received.cum;
        while self.first_tx.len() >= 2 && self.first_tx[1].0 <= cum {
            self.first_tx.pop_front();
        }
    }

    /// `n` new in-order bytes read by the receiving application.
    fn on_app_read(&mut self, now: Duration, n: usize, stop: Duration) {
        if n == 0 {
            return;
        }
        self.app_bytes += n as u64;
        if now <= stop {
            self.app_bytes_by_stop += n as u64;
        }
        let t = now.min(stop);
        if let Some(last) = self.last_delivery {
            self.max_gap = self.max_gap.max(t.saturating_sub(last));
        }
        self.last_delivery = Some(t);
    }
}

/// The sending application of a rate-limited flow: it offers `rate_bps` bits of payload
/// per second from the flow's start.
#[derive(Debug)]
struct Source {
    rate_bps: f64,
    /// Payload bytes written into the socket so far.
    written: u64,
    /// Bytes per wake-up when the application is the limit (one MSS).
    chunk: u64,
}

impl Source {
    /// Payload bytes offered by `now`.
    fn offered(&self, start: Duration, now: Duration) -> u64 {
        let ns = now.saturating_sub(start).as_nanos() as f64;
        (ns * self.rate_bps / 8e9).floor() as u64
    }

    /// When `bytes` of payload have been offered.
    fn offered_at(&self, start: Duration, bytes: u64) -> Duration {
        start + Duration::from_nanos((bytes as f64 * 8e9 / self.rate_bps).ceil() as u64)
    }
}

/// A tcp-bulk flow: two smoltcp stacks and the accounting.
pub(crate) struct TcpFlow {
    spec: FlowSpec,
    sender: Side,
    /// Indexed by [`side_index`].
    ends: [End; 2],
    connected: bool,
    acct: Accounting,
    /// A rate-limited application (`None`: it keeps the send buffer full).
    source: Option<Source>,
    /// Deliveries to the receiving application around the cuts.
    cuts: CutTracker,
}

impl fmt::Debug for TcpFlow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpFlow")
            .field("spec", &self.spec)
            .field("connected", &self.connected)
            .field("acct", &self.acct)
            .finish_non_exhaustive()
    }
}

impl TcpFlow {
    pub(crate) fn new(spec: FlowSpec) -> Self {
        // A quic-bulk datagram is the TCP segment and QUIC_OVERHEAD bytes more: the
        // segments are that much smaller, so that the datagram is packet_bytes.
        let overhead = match spec.kind {
            FlowKind::QuicBulk => ip::QUIC_OVERHEAD,
            _ => 0,
        };
        let mtu = spec.packet_bytes.clamp(MIN_MTU, usize::from(u16::MAX)) - overhead;
        let ends = [
            End::new(&spec, Side::Client, mtu),
            End::new(&spec, Side::Server, mtu),
        ];
        let source = (spec.rate_bps.is_finite() && spec.rate_bps > 0.0).then(|| Source {
            rate_bps: spec.rate_bps,
            written: 0,
            chunk: (mtu - 40) as u64,
        });
        let cuts = CutTracker::new(spec.cuts.clone());
        Self {
            sender: spec.direction.sender(),
            spec,
            ends,
            connected: false,
            acct: Accounting::default(),
            source,
            cuts,
        }
    }

    pub(crate) fn spec(&self) -> &FlowSpec {
        &self.spec
    }

    /// Runs end `side` at `now`: connect if due, process received packets, let
    /// the application write (sender) or read (receiver), emit what TCP sends.
    fn service(&mut self, now: Duration, side: Side) {
        let at = instant(now);
        let is_sender = side == self.sender;
        let end = &mut self.ends[side_index(side)];
        if is_sender && !self.connected && now >= self.spec.start {
            let peer = side.peer();
            let remote = (IpAddress::Ipv4(side_addr(peer)), self.spec.port(peer));
            let local = self.spec.port(side);
            let socket = end.sockets.get_mut::<stcp::Socket>(end.handle);
            socket
                .connect(end.iface.context(), remote, local)
                .expect("connecting a fresh socket to a valid endpoint");
            self.connected = true;
        }
        // Poll, run the application, and poll again if it wrote or read anything.
        for _ in 0..4 {
            end.poll(at);
            let socket = end.socket();
            let progressed = if is_sender {
                let limit = self.source.as_ref().map_or(usize::MAX, |s| {
                    let due = s.offered(self.spec.start, now).saturating_sub(s.written);
                    usize::try_from(due).unwrap_or(usize::MAX)
                });
                let n = if now < self.spec.stop {
                    fill(socket, limit)
                } else {
                    0
                };
                if let Some(s) = self.source.as_mut() {
                    s.written += n as u64;
                }
                n > 0
            } else {
                let n = drain(socket);
                self.acct.on_app_read(now, n, self.spec.stop);
                if n > 0 {
                    self.cuts.on_delivery(now);
                }
                n > 0
            };
            if !progressed {
                break;
            }
        }
        // A rate-limited application that has written all it offered wakes when the next
        // MSS is due; one held back by a full buffer is woken by the acknowledgements.
        let app_wake = self.source.as_ref().filter(|_| is_sender).and_then(|s| {
            let start = self.spec.start;
            (s.written >= s.offered(start, now))
                .then(|| s.offered_at(start, s.written + s.chunk))
                .filter(|&t| t < self.spec.stop)
        });
        end.last_service = now;
        end.next_poll = end
            .iface
            .poll_at(at, &end.sockets)
            .map(duration)
            .into_iter()
            .chain(app_wake)
            .min()
            // After a full poll smoltcp has nothing left for this instant; never
            // ask to be polled again at the same time (no busy loop).
            .map(|t| t.max(now + Duration::from_micros(1)));
    }

    pub(crate) fn poll_transmit(&mut self, now: Duration, side: Side) -> Option<Vec<u8>> {
        let i = side_index(side);
        if self.ends[i].dev.tx.is_empty() {
            let end = &self.ends[i];
            let connect_due = side == self.sender && !self.connected && now >= self.spec.start;
            if connect_due || end.next_poll.is_some_and(|t| t <= now) {
                self.service(now, side);
            }
        }
        let mut packet = self.ends[i].dev.tx.pop_front()?;
        if side == self.sender
            && let Some(seg) = ip::parse_tcp(&packet)
        {
            self.acct.on_sender_tx(now, seg);
        }
        if self.spec.dscp != 0 {
            ip::set_dscp(&mut packet, self.spec.dscp & 0x3f);
        }
        if self.spec.kind == FlowKind::QuicBulk {
            let (from, to) = (self.outer_port(side), self.outer_port(side.peer()));
            packet = ip::wrap_in_udp(&packet, from, to)?;
        }
        Some(packet)
    }

    /// A quic-bulk datagram's UDP port at end `side`: the client's flow port, the
    /// server's 443 (QUIC's).
    fn outer_port(&self, side: Side) -> u16 {
        match side {
            Side::Client => self.spec.port(Side::Client),
            Side::Server => QUIC_PORT,
        }
    }

    pub(crate) fn handle_packet(&mut self, now: Duration, side: Side, packet: &[u8]) {
        let unwrapped;
        let packet = if self.spec.kind == FlowKind::QuicBulk {
            let Some(p) = ip::unwrap_from_udp(packet) else {
                return;
            };
            unwrapped = p;
            &unwrapped[..]
        } else {
            packet
        };
        if side != self.sender
            && let Some(seg) = ip::parse_tcp(packet)
        {
            self.acct.on_receiver_rx(now, seg);
        }
        self.ends[side_index(side)]
            .dev
            .rx
            .push_back(packet.to_vec());
        self.service(now, side);
    }

    /// Bytes the sender has transmitted at least once, and bytes still waiting in
    /// its send buffer (tests).
    #[cfg(test)]
    fn sender_progress(&mut self) -> (u64, usize) {
        let queued = self.ends[side_index(self.sender)].socket().send_queue();
        (self.acct.high_sent, queued)
    }

    pub(crate) fn poll_timeout(&self) -> Option<Duration> {
        let connect = (!self.connected).then_some(self.spec.start);
        self.ends
            .iter()
            .flat_map(|e| {
                [
                    (!e.dev.tx.is_empty()).then_some(e.last_service),
                    e.next_poll,
                ]
            })
            .chain([connect])
            .flatten()
            .min()
    }

    pub(crate) fn report(&self, end: Duration) -> FlowReport {
        let a = &self.acct;
        let active_end = self.spec.stop.min(end);
        let from = a.last_delivery.unwrap_or(self.spec.start);
        let max_gap = a.max_gap.max(active_end.saturating_sub(from));
        FlowReport {
            name: self.spec.name.clone(),
            kind: self.spec.kind,
            sent: a.sent,
            delivered: a.delivered,
            lost: a.retransmitted,
            duplicates: a.duplicates,
            latency_ms: Latency::from_samples(&a.latencies_ms),
            max_gap_ms: report::ms(max_gap),
            goodput_mbps: report::mbps(
                a.app_bytes_by_stop,
                active_end.saturating_sub(self.spec.start),
            ),
            retransmitted: a.retransmitted,
            bytes_delivered: a.app_bytes,
            cuts: self.cuts.stats(),
        }
    }
}

/// Writes up to `limit` bytes into the socket's send buffer (zero bytes, no copy), as
/// many as it takes; returns bytes enqueued.
fn fill(socket: &mut stcp::Socket<'_>, limit: usize) -> usize {
    let mut total = 0;
    while socket.may_send() && total < limit {
        let left = limit - total;
        match socket.send(|buf| {
            let n = buf.len().min(left);
            (n, n)
        }) {
            Ok(n) if n > 0 => total += n,
            _ => break,
        }
    }
    total
}

/// Reads everything the socket has in order; returns bytes read.
fn drain(socket: &mut stcp::Socket<'_>) -> usize {
    let mut total = 0;
    while socket.can_recv() {
        match socket.recv(|buf| (buf.len(), buf.len())) {
            Ok(n) if n > 0 => total += n,
            _ => break,
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Received, unwrap_seq};
    use crate::testpipe::Pipe;
    use crate::{Direction, Flow, FlowKind, FlowReport, FlowSpec, Side, ip};

    fn spec(direction: Direction) -> FlowSpec {
        FlowSpec {
            name: "bulk".into(),
            kind: FlowKind::TcpBulk,
            direction,
            start: Duration::from_millis(100),
            stop: Duration::from_secs(5),
            rate_bps: 0.0,
            packet_bytes: 1400,
            count: 0,
            dscp: 10,
            index: 4,
            cuts: Vec::new(),
        }
    }

    fn run(spec: FlowSpec, pipe: &mut Pipe, end: Duration) -> (Flow, FlowReport) {
        let mut flow = Flow::new(spec);
        pipe.run(&mut flow, end);
        let r = flow.report(end);
        (flow, r)
    }

    #[test]
    fn unwrap_seq_handles_wraparound() {
        let isn = u32::MAX - 10;
        // Offset 0 is isn + 1.
        assert_eq!(unwrap_seq(isn.wrapping_add(1), isn, 0), 0);
        assert_eq!(unwrap_seq(isn.wrapping_add(101), isn, 0), 100);
        assert_eq!(unwrap_seq(5, isn, 0), 15);
        // Near 2^32 bytes in, the nearest candidate wins.
        let r = (1u64 << 32) - 100;
        assert_eq!(
            unwrap_seq(isn.wrapping_add(1).wrapping_add(r as u32), isn, r),
            r
        );
        assert_eq!(
            unwrap_seq(isn.wrapping_add(1).wrapping_add(50), isn, r),
            (1 << 32) + 50
        );
        // Old data just below the reference.
        assert_eq!(
            unwrap_seq(isn.wrapping_add(1).wrapping_add(r as u32 - 1400), isn, r),
            r - 1400
        );
    }

    #[test]
    fn received_ranges_merge() {
        let mut r = Received::default();
        assert_eq!(r.first_missing(0, 10), Some(0));
        r.insert(20, 30);
        r.insert(40, 50);
        assert_eq!(r.first_missing(20, 30), None);
        assert_eq!(r.first_missing(25, 45), Some(30));
        r.insert(30, 40);
        assert_eq!(r.above, vec![(20, 50)]);
        r.insert(0, 20);
        assert_eq!((r.cum, r.above.len()), (50, 0));
        assert_eq!(r.first_missing(10, 50), None);
        assert_eq!(r.first_missing(10, 51), Some(50));
    }

    #[test]
    fn tcp_transfers_over_lossless_pipe() {
        for direction in [Direction::Up, Direction::Down] {
            let mut pipe = Pipe::new(Duration::from_millis(20), Some(10e6));
            let (_, r) = run(spec(direction), &mut pipe, Duration::from_secs(5));
            assert!(r.goodput_mbps > 6.0, "{direction:?}: {r:?}");
            assert!(r.goodput_mbps < 10.0, "{direction:?}: {r:?}");
            assert_eq!(r.retransmitted, 0, "{r:?}");
            assert_eq!(r.lost, 0, "{r:?}");
            assert_eq!(r.duplicates, 0, "{r:?}");
            // The pipe's queue is unbounded, so segments are still in flight at the end.
            assert!(r.delivered <= r.sent, "{r:?}");
            assert!(r.latency_ms.p50 >= 21.0, "{r:?}");
            assert!(r.max_gap_ms < 200.0, "{r:?}");
            // All full-sized segments: MSS 1360.
            assert!(r.bytes_delivered > r.delivered * 1300, "{r:?}");
        }
    }

    #[test]
    fn tcp_with_a_rate_sends_at_that_rate_on_a_fast_link() {
        // 100 Mbit/s, 10 ms each way: TCP alone would fill far more than 5 Mbit/s.
        let pipe = || Pipe::new(Duration::from_millis(10), Some(100e6));
        let end = Duration::from_secs(6);
        for direction in [Direction::Up, Direction::Down] {
            let mut s = spec(direction);
            s.rate_bps = 5e6;
            let (_, r) = run(s, &mut pipe(), end);
            assert!((r.goodput_mbps - 5.0).abs() < 0.05, "{direction:?}: {r:?}");
            // Application-limited: no queue builds, every segment is full-sized.
            assert!(r.latency_ms.p99 < 11.0, "{direction:?}: {r:?}");
            assert!(r.bytes_delivered > r.delivered * 1300, "{r:?}");
            assert_eq!(r.retransmitted, 0, "{r:?}");
        }
        let (_, unlimited) = run(spec(Direction::Up), &mut pipe(), end);
        assert!(unlimited.goodput_mbps > 20.0, "{unlimited:?}");
    }

    #[test]
    fn tcp_reports_deliveries_around_a_cut() {
        // A lossless pipe: the cut costs nothing, data keeps coming within a few ms.
        let mut s = spec(Direction::Up);
        s.cuts = crate::cuts::windows(&[Duration::from_secs(2)], s.start, s.stop);
        let mut pipe = Pipe::new(Duration::from_millis(20), Some(10e6));
        let (_, r) = run(s, &mut pipe, Duration::from_secs(5));
        let c = r.cuts[0];
        assert_eq!(c.at, Duration::from_secs(2));
        assert!(c.stall < Duration::from_millis(10), "{c:?}");
        assert!(
            c.data_again.is_some_and(|t| t < Duration::from_secs(3)),
            "{c:?}"
        );
        assert_eq!((c.sent, c.delivered), (0, 0));
    }

    #[test]
    fn tcp_packets_are_well_formed() {
        let mut flow = Flow::new(spec(Direction::Up));
        assert_eq!(flow.poll_timeout(), Some(Duration::from_millis(100)));
        assert_eq!(
            flow.poll_transmit(Duration::from_millis(50), Side::Client),
            None
        );
        let t = Duration::from_millis(100);
        let syn = flow.poll_transmit(t, Side::Client).expect("SYN at start");
        assert!(ip::ipv4_checksum_ok(&syn));
        assert_eq!(syn[1] >> 2, 10);
        assert_eq!(syn[9], ip::PROTO_TCP);
        assert_eq!(&syn[12..16], &ip::CLIENT_ADDR.octets());
        assert_eq!(&syn[16..20], &ip::SERVER_ADDR.octets());
        assert_eq!(u16::from_be_bytes([syn[20], syn[21]]), 10_004);
        assert_eq!(u16::from_be_bytes([syn[22], syn[23]]), 20_004);
        let seg = ip::parse_tcp(&syn).expect("tcp");
        assert!(seg.syn && !seg.ack);
        flow.handle_packet(t, Side::Server, &syn);
        let synack = flow.poll_transmit(t, Side::Server).expect("SYN-ACK");
        assert!(ip::ipv4_checksum_ok(&synack));
        let seg = ip::parse_tcp(&synack).expect("tcp");
        assert!(seg.syn && seg.ack);
        assert_eq!(u16::from_be_bytes([synack[20], synack[21]]), 20_004);
    }

    /// quic-bulk: the same transfer in UDP datagrams between the client's port and the
    /// server's 443, none larger than `packet_bytes`, each payload starting with QUIC's
    /// fixed bit (what the tunnel classifies as QUIC); a lost datagram is sent again.
    #[test]
    fn quic_bulk_carries_the_transfer_in_udp_datagrams_to_port_443() {
        let mut s = spec(Direction::Up);
        s.kind = FlowKind::QuicBulk;
        let mut flow = Flow::new(s.clone());
        let t = Duration::from_millis(100);
        let first = flow
            .poll_transmit(t, Side::Client)
            .expect("the SYN's datagram");
        assert!(ip::ipv4_checksum_ok(&first));
        assert_eq!(first[9], ip::PROTO_UDP);
        assert_eq!(first[1] >> 2, 10, "the DSCP");
        assert_eq!(u16::from_be_bytes([first[20], first[21]]), 10_004);
        assert_eq!(u16::from_be_bytes([first[22], first[23]]), 443);
        assert_eq!(first[28], 0x40);
        flow.handle_packet(t, Side::Server, &first);
        let answer = flow
            .poll_transmit(t, Side::Server)
            .expect("the SYN-ACK's datagram");
        assert_eq!(u16::from_be_bytes([answer[20], answer[21]]), 443);
        assert_eq!(u16::from_be_bytes([answer[22], answer[23]]), 10_004);

        let mut pipe = Pipe::new(Duration::from_millis(20), Some(10e6)).with_drop(Box::new(
            |side, n, pkt: &[u8]| {
                assert!(pkt.len() <= 1400, "a datagram of {} bytes", pkt.len());
                assert_eq!(pkt[9], ip::PROTO_UDP);
                side == Side::Client && n == 300
            },
        ));
        let (_, r) = run(s, &mut pipe, Duration::from_secs(5));
        assert!(r.goodput_mbps > 6.0, "{r:?}");
        assert!(r.retransmitted >= 1, "{r:?}");
        assert_eq!(r.lost, r.retransmitted, "{r:?}");
        // Full-sized segments: 1400 - 20 - 9 - 20 = 1351 bytes.
        assert!(r.bytes_delivered > r.delivered * 1300, "{r:?}");
    }

    #[test]
    fn tcp_retransmits_after_drop() {
        // Drop the 3 client->server packets number 30, 200 and 500 (data segments:
        // packet 0 is the SYN, 1 the handshake ACK).
        let drop = [30u64, 200, 500];
        let mut pipe = Pipe::new(Duration::from_millis(20), Some(10e6)).with_drop(Box::new(
            move |side, n, pkt| {
                side == Side::Client
                    && drop.contains(&n)
                    && ip::parse_tcp(pkt).is_some_and(|s| s.payload_len > 0)
            },
        ));
        let mut s = spec(Direction::Up);
        s.stop = Duration::from_secs(3);
        let (mut flow, r) = run(s, &mut pipe, Duration::from_secs(6));
        assert_eq!(pipe.dropped, 3);
        assert!(r.retransmitted >= 3, "{r:?}");
        assert_eq!(r.lost, r.retransmitted);
        // Every byte sent arrived in order: the receiver read exactly what was
        // acknowledged and nothing is missing.
        let crate::Inner::Tcp(tcp) = &mut flow.inner else {
            unreachable!("tcp-bulk flow")
        };
        let (high_sent, queued) = tcp.sender_progress();
        assert_eq!(queued, 0, "send buffer drained after stop");
        // Everything is acknowledged and no timer is left (no keep-alive).
        assert_eq!(flow.poll_timeout(), None);
        assert_eq!(r.bytes_delivered, high_sent, "{r:?}");
        assert!(r.bytes_delivered > 1_000_000, "{r:?}");
        assert_eq!(r.sent, r.delivered + 3, "{r:?}");
        assert!(r.goodput_mbps > 2.0, "{r:?}");
    }

    #[test]
    fn tcp_reports_are_deterministic() {
        let go = || {
            let mut pipe = Pipe::new(Duration::from_millis(15), Some(8e6))
                .with_drop(Box::new(|_, n, _| n % 97 == 50));
            let mut s = spec(Direction::Down);
            s.stop = Duration::from_secs(2);
            run(s, &mut pipe, Duration::from_secs(3)).1
        };
        let a = go();
        assert!(a.retransmitted > 0, "{a:?}");
        assert_eq!(a, go());
    }
}
