//! A fuzzing driver around one [`Endpoint`], and the two engine targets built on it.
//!
//! The driver plays the daemon's part: it feeds inputs, then drains `poll_transmit`,
//! `poll_deliver` and `poll_event` and honours `poll_timeout`, as the call order on
//! `Endpoint` prescribes, and checks after every step that
//!
//! 1. every datagram the engine emits parses with `wire::parse`, every frame decodes, the
//!    header carries the session, the link of the `Transmit` and that link's next packet
//!    number, `Transmit::len` is the buffer's length and `carries_data` says whether a
//!    DATA frame is inside; it never goes out on a link the driver reported down; ACK,
//!    LOSS_REPORT and LINK_STATUS frames name links the engine has;
//! 2. DATA frames carry consecutive global sequence numbers and only inner packets the
//!    TUN side handed in (as given, or CE-marked), each at most once; a DATA_COMPACT
//!    frame expands, by an expander written here from `docs/protocol.md` 3.10, against
//!    the template the engine last sent in its slot;
//! 3. every packet `poll_deliver` returns was carried by a DATA frame of a datagram fed
//!    in (a DATA_COMPACT frame: expanded against a template fed in), or is the "packet too big" answer to a TUN packet the engine refused as larger
//!    than its links carry, and is delivered at most as often as it was carried or
//!    answered (delivered buffers are given back with `recycle`, so a stale pooled
//!    buffer would show up here);
//! 4. timers make progress: after `handle_timeout(now)` and draining, `poll_timeout` is
//!    later than `now` within [`MAX_SETTLE_ROUNDS`] rounds (otherwise a driver that arms
//!    its timer at `poll_timeout` spins), and `run_timers` jumps to each returned
//!    deadline and fires it;
//! 5. `stats()` counts every datagram fed in and every TUN packet accepted, and
//!    `handle_tun_packet` accepts exactly the packets `classify` accepts that fit a DATA
//!    frame, but for those it refuses as larger than its links carry.
//!
//! Input format of both targets (see [`crate::input`]): the first byte holds the engine
//! knobs ([`Knobs`]), then ops follow, each an op byte and its operands, until the input
//! ends. The op tables are on [`run_datagrams`] and [`run_tun`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::OnceLock;

use core::time::Duration;

use latebind_proto::classify::{classify, mark_ce};
use latebind_proto::wire::{self, Frame};
use latebind_proto::{
    Config, Endpoint, Event, Instant, LinkChange, LinkConfig, LinkId, LinkState, Role, TunError,
};

use crate::input::Reader;

/// Session id of the engine under test; framed datagrams carry it unless told otherwise.
pub const SESSION: u32 = 0x1a7e_b1d0;

/// The driver's clock at the start (one second after the origin).
pub const START: Instant = Instant::from_nanos(1_000_000_000);

/// Latest instant the driver moves to (2^60 ns, about 36 years): far beyond any uptime,
/// and far enough below `Instant::MAX` ("never") that saturating arithmetic at the end of
/// time is not mistaken for a bug.
pub const END: Instant = Instant::from_nanos(1 << 60);

/// Rounds of `handle_timeout(now)` plus draining after which a `poll_timeout` that is
/// still not later than `now` counts as a spin.
pub const MAX_SETTLE_ROUNDS: usize = 16;

/// Datagrams one drain may produce before `poll_transmit` counts as never ending.
const MAX_TRANSMITS_PER_DRAIN: usize = 200_000;

/// Ops per input (keeps every run short).
const MAX_OPS: usize = 512;

/// TUN packets above 60 000 bytes per input.
const MAX_BIG_PACKETS: usize = 4;

/// Pacing rate of client link 1 when [`Knobs::paced`] is set: 1 Mbit/s.
const PACING_RATE: f64 = 125_000.0;

/// Whether known engine bugs fail the run (`LATEBIND_FUZZ_STRICT=1`).
///
/// By default the driver lets a known bug pass where it can tell it apart precisely, so
/// that fuzzing goes on to find other ones; each known bug has an input under
/// `regressions/` that fails in strict mode. Known bugs:
///
/// - **pacing spin** (`regressions/engine_*/pacing-spin-*`): with a paced link that is
///   up and whose pacer allows a packet, and packets queued above the binding point that
///   the policy does not bind (the link it prefers has no room below the binding point),
///   `Endpoint::poll_timeout` returns the pacer's `ready_at(1500)`, which is the time of
///   the link's last send (in the past), and `handle_timeout` cannot move it: a driver
///   that arms its timer at `poll_timeout` spins until the next departure.
/// - **reorder gap walk** (`regressions/engine_datagrams/reorder-gap-*`): `Reorder::skip_to`
///   counts the skipped sequence numbers one by one (`(f.next..seq).filter(..).count()`),
///   so one DATA frame whose flow sequence number is far ahead of its flow (up to 2^32
///   for a new flow) makes the hold-time expiry walk billions of numbers: seconds of CPU
///   per datagram. By default the driver keeps every DATA frame's flow sequence number
///   below 2^16 (it clears the high half before feeding the datagram), which bounds
///   every gap by 2^16.
/// - **frameless control datagram** (`regressions/engine_datagrams/empty-control-*`): when
///   a PING is due on a link that is down (e.g. a server learns a link from a datagram
///   whose LINK_STATUS says that very link is down) and nothing else is owed,
///   `poll_control` reroutes the control datagram to another link, writes its header,
///   clears the PING and returns the 12-byte datagram without a single frame (§2.3: a
///   datagram carries at least one frame; the peer drops it as truncated). By default the
///   driver accepts a header-only datagram, still checking its header.
pub fn strict() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| {
        std::env::var_os("LATEBIND_FUZZ_STRICT").is_some_and(|v| !v.is_empty() && v != "0")
    })
}

/// Engine and driver settings, from an input's first byte.
///
/// | bit  | meaning                                                          |
/// |------|------------------------------------------------------------------|
/// | 0    | server role (else client)                                        |
/// | 1    | the driver reports departures only on the tx-done op (else at once) |
/// | 2    | client link 1 is paced at 1 Mbit/s                               |
/// | 3    | fixed reorder hold of 10 ms (else derived from the links)        |
/// | 4-5  | `ack_every`: 2, 1, 3 or 8                                        |
/// | 6    | budget below the binding point of 1 packet (else 2)              |
/// | 7    | client link 0 is a backup link                                   |
///
/// A client starts with links 0 and 1; a server learns links from datagrams (engine
/// datagram target) or is configured with links 0 and 1 (TUN target).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Knobs(pub u8);

impl Knobs {
    /// Server role.
    pub const SERVER: u8 = 0x01;
    /// Departures only on the tx-done op.
    pub const MANUAL_TX_DONE: u8 = 0x02;
    /// Client link 1 paced.
    pub const PACED: u8 = 0x04;
    /// Fixed reorder hold.
    pub const FIXED_HOLD: u8 = 0x08;

    fn role(self) -> Role {
        if self.0 & Self::SERVER != 0 {
            Role::Server
        } else {
            Role::Client
        }
    }

    fn manual_tx_done(self) -> bool {
        self.0 & Self::MANUAL_TX_DONE != 0
    }

    fn paced(self) -> bool {
        self.0 & Self::PACED != 0
    }

    fn fixed_hold(self) -> bool {
        self.0 & Self::FIXED_HOLD != 0
    }

    fn ack_every(self) -> u32 {
        [2, 1, 3, 8][usize::from((self.0 >> 4) & 3)]
    }

    fn budget(self) -> usize {
        if self.0 & 0x40 != 0 { 1 } else { 2 }
    }

    fn backup(self) -> bool {
        self.0 & 0x80 != 0
    }
}

/// One engine and everything the driver remembers to check it.
#[derive(Debug)]
pub struct Driver {
    ep: Endpoint,
    now: Instant,
    knobs: Knobs,
    buf: Vec<u8>,
    /// Datagrams emitted per link: the low 32 bits are the next one's packet number.
    tx_count: BTreeMap<u16, u64>,
    /// Datagrams handed over and not yet reported departed, per link (manual mode).
    below: BTreeMap<u16, u64>,
    /// Links the driver reported down.
    local_down: BTreeSet<u16>,
    /// Global sequence number the next DATA frame must carry.
    next_gseq: u64,
    /// Inner packets bound so far, by global sequence: a reinjection or a redundant copy
    /// carries one of them again, unchanged.
    bound: HashMap<u32, Vec<u8>>,
    /// Inner packets accepted from the TUN side and not sent yet (multiset by content).
    queued_tun: HashMap<Vec<u8>, u64>,
    /// CE-marked form of an accepted packet -> the packet as accepted.
    ce_marked: HashMap<Vec<u8>, Vec<u8>>,
    tun_accepted: u64,
    big_packets: usize,
    /// DATA payloads carried by well-formed datagrams of this session fed in, minus the
    /// ones delivered (multiset by content).
    carried: HashMap<Vec<u8>, u64>,
    /// Datagrams fed in.
    fed: u64,
    /// The last datagrams fed in, for the replay op.
    history: Vec<Vec<u8>>,
    /// Numbering of the simulated peer for framed datagrams.
    peer_pn: BTreeMap<u16, u64>,
    peer_gseq: u64,
    peer_fseq: [u64; 4],
    /// Header templates (`docs/protocol.md` 3.9) in DATA_TEMPLATE frames fed in, per
    /// slot: every one seen, for the engine may not have kept each (a datagram dropped
    /// as a replay), so a DATA_COMPACT frame counts as carrying its expansion against
    /// any of them with its generation's bits.
    peer_templates: HashMap<u16, Vec<Template>>,
    /// The templates the engine sent, the latest per slot: its DATA_COMPACT frames expand
    /// against them.
    own_templates: HashMap<u16, Template>,
}

/// A header template as the receiver keeps it (3.9).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Template {
    generation: u16,
    bytes: Vec<u8>,
    ipv4_checksum: bool,
}

impl Template {
    fn new(generation: u16, hlen: u8, packet: &[u8], ipv4_checksum: bool) -> Self {
        let mut bytes = packet[..usize::from(hlen)].to_vec();
        let ipv4_checksum = ipv4_checksum && bytes.len() >= 12;
        if ipv4_checksum {
            bytes[10..12].fill(0);
        }
        Self {
            generation,
            bytes,
            ipv4_checksum,
        }
    }

    fn matches(&self, generation: u8) -> bool {
        self.generation & ((1 << wire::COMPACT_GENERATION_BITS) - 1) == u16::from(generation)
    }

    /// The packet a DATA_COMPACT body encodes against this template, written from the
    /// text of `docs/protocol.md` 3.10 (not from the engine's code); `None` where the
    /// receiver must drop it.
    fn expand(&self, body: &[u8]) -> Option<Vec<u8>> {
        let h = self.bytes.len();
        let bitmap = body.get(..h.div_ceil(8))?;
        let mut rest = &body[bitmap.len()..];
        let mut out = Vec::with_capacity(h + rest.len());
        for i in 0..bitmap.len() * 8 {
            let set = bitmap[i / 8] & (0x80 >> (i % 8)) != 0;
            match (i < h, set) {
                (false, true) => return None,
                (false, false) => {}
                (true, false) => out.push(self.bytes[i]),
                (true, true) => {
                    let (b, r) = rest.split_first()?;
                    out.push(*b);
                    rest = r;
                }
            }
        }
        out.extend_from_slice(rest);
        if self.ipv4_checksum {
            let ihl = usize::from(out[0] & 0x0f) * 4;
            if out[0] >> 4 != 4 || ihl < 20 || out.len() < ihl {
                return None;
            }
            out[10..12].fill(0);
            let mut sum: u32 = out[..ihl]
                .chunks(2)
                .map(|c| u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0)))
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            out[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        Some(out)
    }
}

impl Driver {
    /// A fresh engine at [`START`]. A client gets links 0 and 1; so does a server when
    /// `configure_server_links` is set (otherwise it learns links from datagrams).
    pub fn new(knobs: Knobs, configure_server_links: bool) -> Self {
        let mut config = Config::new(knobs.role());
        config.session(SESSION).budget_packets(knobs.budget());
        config.ack_every = knobs.ack_every();
        if knobs.fixed_hold() {
            config.reorder_hold(Some(Duration::from_millis(10)));
        }
        let mut ep = Endpoint::new(config, START).expect("the fuzz configuration validates");
        if knobs.role() == Role::Client || configure_server_links {
            let link0 = LinkConfig {
                pacing_rate: None,
                backup: knobs.backup(),
                capacity: None,
                max_datagram: None,
            };
            // A paced link also starts its rate control from a known capacity.
            let link1 = LinkConfig {
                pacing_rate: knobs.paced().then_some(PACING_RATE),
                backup: false,
                capacity: knobs.paced().then_some(PACING_RATE),
                // Acknowledgements trimmed to fit a full-size data packet, or sent alone.
                max_datagram: Some(1456),
            };
            assert!(ep.add_link(START, LinkId(0), link0));
            assert!(ep.add_link(START, LinkId(1), link1));
            assert!(!ep.add_link(START, LinkId(1), LinkConfig::default()));
        }
        let mut d = Self {
            ep,
            now: START,
            knobs,
            buf: Vec::new(),
            tx_count: BTreeMap::new(),
            below: BTreeMap::new(),
            local_down: BTreeSet::new(),
            next_gseq: 0,
            bound: HashMap::new(),
            queued_tun: HashMap::new(),
            ce_marked: HashMap::new(),
            tun_accepted: 0,
            big_packets: 0,
            carried: HashMap::new(),
            peer_templates: HashMap::new(),
            own_templates: HashMap::new(),
            fed: 0,
            history: Vec::new(),
            peer_pn: BTreeMap::new(),
            peer_gseq: 0,
            peer_fseq: [0; 4],
        };
        d.settle();
        d
    }

    /// The engine under test.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The driver's clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    // ---- inputs ----

    /// Feeds a datagram from the network, then settles.
    pub fn datagram(&mut self, datagram: &[u8]) {
        let mut datagram = datagram.to_vec();
        if !strict() {
            tame_flow_seqs(&mut datagram);
        }
        self.note_carried(&datagram);
        self.fed += 1;
        self.ep.handle_datagram(self.now, &datagram);
        if self.history.len() < 64 {
            self.history.push(datagram);
        }
        self.settle();
    }

    /// Feeds again the `i`-th datagram fed so far (modulo their number).
    pub fn replay(&mut self, i: u8) {
        if self.history.is_empty() {
            return;
        }
        let d = self.history[usize::from(i) % self.history.len()].clone();
        self.datagram(&d);
    }

    /// Hands a packet from the TUN side to the engine, then settles.
    pub fn tun(&mut self, packet: &[u8]) {
        if packet.len() > 60_000 {
            if self.big_packets >= MAX_BIG_PACKETS {
                return;
            }
            self.big_packets += 1;
        }
        let signalled = self.ep.stats().too_big_signalled;
        let res = self.ep.handle_tun_packet(self.now, packet);
        let class = classify(packet);
        match (&res, class) {
            (Ok(()), Ok(_)) => assert!(packet.len() <= wire::MAX_DATA_PAYLOAD),
            (Err(TunError::TooBig { len, mtu }), Ok(_)) => {
                assert_eq!(*len, packet.len());
                assert!(len > mtu, "refused a packet that fits the links");
                // Its answer, if one went (rate-limited), is delivered to the TUN side.
                if self.ep.stats().too_big_signalled > signalled {
                    let reply = latebind_proto::pmtu::too_big_reply(packet, *mtu)
                        .expect("the engine answered a packet that gets no answer");
                    *self.carried.entry(reply).or_default() += 1;
                }
            }
            (Err(TunError::TooLarge(n)), _) => {
                assert_eq!(*n, packet.len());
                assert!(
                    packet.len() > wire::MAX_DATA_PAYLOAD,
                    "refused a packet that fits"
                );
            }
            (Err(TunError::Invalid(e)), Err(c)) => {
                assert_eq!(*e, c);
                assert!(packet.len() <= wire::MAX_DATA_PAYLOAD);
            }
            (res, class) => {
                panic!("handle_tun_packet returned {res:?} where classify returned {class:?}")
            }
        }
        if res.is_ok() {
            self.tun_accepted += 1;
            *self.queued_tun.entry(packet.to_vec()).or_default() += 1;
            let mut marked = packet.to_vec();
            if mark_ce(&mut marked) && marked != packet {
                self.ce_marked.insert(marked, packet.to_vec());
            }
        }
        self.settle();
    }

    /// Moves the clock forward by `dt` (up to [`END`]), calls `handle_timeout`, settles.
    pub fn advance(&mut self, dt: Duration) {
        self.now = (self.now + dt).min(END);
        self.ep.handle_timeout(self.now);
        self.settle();
    }

    /// Up to `steps` times: jumps the clock to `poll_timeout()` and fires it.
    pub fn run_timers(&mut self, steps: u32) {
        for _ in 0..steps {
            let Some(t) = self.ep.poll_timeout() else {
                return;
            };
            if t > END {
                return;
            }
            if t <= self.now && !strict() && self.known_pacing_spin() {
                return;
            }
            // `settle` left the deadline in the future.
            assert!(
                t > self.now,
                "poll_timeout {t:?} not after now {:?}",
                self.now
            );
            self.now = t;
            self.ep.handle_timeout(t);
            self.settle();
        }
    }

    /// Reports the departure of the oldest datagram handed over on `link` (also when
    /// there is none: the engine must ignore a spurious report), then settles.
    pub fn tx_done(&mut self, link: u16) {
        if let Some(n) = self.below.get_mut(&link) {
            *n = n.saturating_sub(1);
        }
        self.ep.handle_tx_done(self.now, LinkId(link));
        self.settle();
    }

    /// Reports a local link going up or down, then settles.
    pub fn link_change(&mut self, link: u16, up: bool) {
        let change = if up { LinkChange::Up } else { LinkChange::Down };
        if self.ep.link_stats(LinkId(link)).is_some() {
            if up {
                self.local_down.remove(&link);
            } else {
                self.local_down.insert(link);
                // What was handed over on it is gone with it.
                self.below.remove(&link);
            }
        }
        self.ep.handle_link_change(self.now, LinkId(link), change);
        self.settle();
    }

    /// Runs the timers a while longer so held packets are released and checked.
    pub fn finish(&mut self) {
        self.run_timers(8);
    }

    // ---- outputs and checks ----

    /// Drains outputs; repeats `handle_timeout(now)` while `poll_timeout` is not later
    /// than `now`, and fails if that does not end within [`MAX_SETTLE_ROUNDS`].
    pub fn settle(&mut self) {
        for _ in 0..MAX_SETTLE_ROUNDS {
            self.drain();
            match self.ep.poll_timeout() {
                Some(t) if t <= self.now => self.ep.handle_timeout(self.now),
                _ => return,
            }
        }
        if !strict() && self.known_pacing_spin() {
            return;
        }
        panic!(
            "engine spins: poll_timeout() = {:?} <= now = {:?} after {MAX_SETTLE_ROUNDS} rounds \
             of handle_timeout(now) and draining; views: {:?}; queued packets: {}",
            self.ep.poll_timeout(),
            self.now,
            self.ep.link_views(self.now),
            self.ep.queued_packets(),
        );
    }

    /// Whether the engine is in the state of the known pacing spin (see [`strict`]): a
    /// paced link is up with its pacer ready while packets wait above the binding point.
    fn known_pacing_spin(&self) -> bool {
        self.knobs.paced()
            && self.ep.queued_packets() > 0
            && self
                .ep
                .link_views(self.now)
                .iter()
                .any(|v| v.id == LinkId(1) && v.state == LinkState::Up && v.pacer_next <= self.now)
    }

    fn drain(&mut self) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut n = 0;
        while let Some(t) = self.ep.poll_transmit(self.now, &mut buf) {
            self.check_transmit(t.link, t.len, t.carries_data, &buf);
            if self.knobs.manual_tx_done() {
                *self.below.entry(t.link.0).or_default() += 1;
            } else {
                self.ep.handle_tx_done(self.now, t.link);
            }
            n += 1;
            assert!(
                n < MAX_TRANSMITS_PER_DRAIN,
                "poll_transmit never returns None"
            );
        }
        self.buf = buf;

        while let Some(p) = self.ep.poll_deliver() {
            match self.carried.get_mut(&p) {
                Some(c) if *c > 0 => *c -= 1,
                _ => panic!(
                    "delivered a packet ({} bytes) that no DATA frame carried, or more often \
                     than carried: {:02x?}",
                    p.len(),
                    &p[..p.len().min(64)]
                ),
            }
            self.ep.recycle(p);
        }

        while let Some(e) = self.ep.poll_event() {
            match e {
                Event::LinkStateChanged { link, from, to } => {
                    assert_ne!(from, to, "state change to the same state");
                    assert!(
                        self.ep.link_stats(link).is_some(),
                        "event for unknown {link}"
                    );
                }
                Event::LinkLearnt { link } => {
                    assert_eq!(self.knobs.role(), Role::Server, "a client learnt a link");
                    assert!(
                        self.ep.link_stats(link).is_some(),
                        "learnt {link} is unknown"
                    );
                }
                Event::Reinjected { link, packets, .. } => {
                    assert!(packets > 0, "an empty reinjection event");
                    assert!(
                        self.ep.link_stats(link).is_some(),
                        "reinjection from unknown {link}"
                    );
                }
            }
        }

        let stats = self.ep.stats();
        assert_eq!(stats.datagrams_received, self.fed);
        assert_eq!(stats.tun_packets, self.tun_accepted);
    }

    fn check_transmit(&mut self, link: LinkId, len: usize, carries_data: bool, buf: &[u8]) {
        assert_eq!(len, buf.len(), "Transmit::len is not the datagram's length");
        assert!(self.ep.link_stats(link).is_some(), "sent on unknown {link}");
        assert!(
            !self.local_down.contains(&link.0),
            "sent on {link}, which the driver reported down"
        );
        if buf.len() == wire::HEADER_LEN && !carries_data && !strict() {
            // The known frameless control datagram (see `strict`): check the header only.
            let (header, _) = wire::Header::parse(buf).expect("a whole header");
            assert_eq!(header.session, SESSION);
            assert_eq!(
                header.link, link.0,
                "header link is not the Transmit's link"
            );
            let sent = self.tx_count.entry(link.0).or_default();
            assert_eq!(
                header.pn, *sent as u32,
                "packet numbers on {link} are not consecutive"
            );
            *sent += 1;
            return;
        }
        let (header, frames) = wire::parse(buf)
            .unwrap_or_else(|e| panic!("emitted datagram does not parse: {e}: {buf:02x?}"));
        assert_eq!(header.session, SESSION);
        assert_eq!(
            header.link, link.0,
            "header link is not the Transmit's link"
        );
        let sent = self.tx_count.entry(link.0).or_default();
        assert_eq!(
            header.pn, *sent as u32,
            "packet numbers on {link} are not consecutive"
        );
        *sent += 1;

        let mut data_frames = 0;
        for frame in frames {
            let frame = frame.unwrap_or_else(|e| {
                panic!("emitted datagram has a frame that does not decode: {e}: {buf:02x?}")
            });
            match frame {
                Frame::Data(data) => {
                    data_frames += 1;
                    let expanded;
                    let payload = match data.form {
                        wire::DataForm::Full => data.payload,
                        wire::DataForm::Template {
                            slot,
                            generation,
                            hlen,
                            ipv4_checksum,
                        } => {
                            let t = Template::new(generation, hlen, data.payload, ipv4_checksum);
                            self.own_templates.insert(slot, t);
                            data.payload
                        }
                        wire::DataForm::Compact { slot, generation } => {
                            let t = self
                                .own_templates
                                .get(&slot)
                                .filter(|t| t.matches(generation))
                                .unwrap_or_else(|| {
                                    panic!("DATA_COMPACT against a template never sent: {buf:02x?}")
                                });
                            expanded = t.expand(data.payload).unwrap_or_else(|| {
                                panic!("DATA_COMPACT that does not expand: {buf:02x?}")
                            });
                            &expanded[..]
                        }
                    };
                    if data.global_seq == self.next_gseq as u32 {
                        self.next_gseq += 1;
                        self.bound.insert(data.global_seq, payload.to_vec());
                        self.take_tun(payload);
                    } else {
                        // Sent again (reinjection, redundant copy): a packet already bound,
                        // with the same payload.
                        assert_eq!(
                            self.bound.get(&data.global_seq).map(Vec::as_slice),
                            Some(payload),
                            "global sequence {} is neither the next one ({}) nor a packet \
                             sent before with this payload",
                            data.global_seq,
                            self.next_gseq
                        );
                    }
                }
                Frame::Ack(ack) => {
                    assert!(self.ep.link_stats(LinkId(ack.link)).is_some());
                    assert!(ack.ranges().len() <= wire::MAX_ACK_RANGES);
                }
                Frame::LossReport(report) => {
                    assert!(!report.is_empty(), "empty LOSS_REPORT sent");
                    for e in report.entries() {
                        assert!(self.ep.link_stats(LinkId(e.link)).is_some());
                    }
                }
                Frame::LinkStatus { link, .. }
                | Frame::RxTime { link, .. }
                | Frame::LinkMtu { link, .. } => {
                    assert!(self.ep.link_stats(LinkId(link)).is_some());
                }
                Frame::Ping | Frame::Probe { .. } | Frame::Padding => {}
            }
        }
        assert!(data_frames <= 1, "more than one DATA frame in a datagram");
        assert_eq!(
            carries_data,
            data_frames == 1,
            "Transmit::carries_data is wrong"
        );
    }

    /// Removes one accepted TUN packet that `payload` is (as given or CE-marked).
    fn take_tun(&mut self, payload: &[u8]) {
        if take_one(&mut self.queued_tun, payload) {
            return;
        }
        if let Some(orig) = self.ce_marked.get(payload)
            && take_one(&mut self.queued_tun, orig)
        {
            return;
        }
        panic!(
            "sent a DATA payload ({} bytes) that is no accepted TUN packet not sent before: \
             {:02x?}",
            payload.len(),
            &payload[..payload.len().min(64)]
        );
    }

    /// Counts the DATA payloads of a datagram the engine must accept as a whole.
    fn note_carried(&mut self, datagram: &[u8]) {
        let Ok((header, frames)) = wire::parse(datagram) else {
            return;
        };
        if header.session != SESSION || frames.is_ack_eliciting().is_err() {
            return;
        }
        for frame in frames.flatten() {
            let Frame::Data(data) = frame else {
                continue;
            };
            match data.form {
                wire::DataForm::Full => {
                    *self.carried.entry(data.payload.to_vec()).or_default() += 1;
                }
                wire::DataForm::Template {
                    slot,
                    generation,
                    hlen,
                    ipv4_checksum,
                } => {
                    *self.carried.entry(data.payload.to_vec()).or_default() += 1;
                    let t = Template::new(generation, hlen, data.payload, ipv4_checksum);
                    let seen = self.peer_templates.entry(slot).or_default();
                    if !seen.contains(&t) && seen.len() < 64 {
                        seen.push(t);
                    }
                }
                wire::DataForm::Compact { slot, generation } => {
                    let expansions: Vec<_> = self
                        .peer_templates
                        .get(&slot)
                        .into_iter()
                        .flatten()
                        .filter(|t| t.matches(generation))
                        .filter_map(|t| t.expand(data.payload))
                        .collect();
                    for p in expansions {
                        *self.carried.entry(p).or_default() += 1;
                    }
                }
            }
        }
    }

    // ---- the simulated peer ----

    /// Builds a datagram from frame descriptions read from `r` (see [`run_datagrams`]).
    pub fn framed(&mut self, r: &mut Reader<'_>) -> Vec<u8> {
        let sel = r.u8();
        let link = link_sel(sel, r);
        let session = if sel & 0x04 != 0 { r.u32() } else { SESSION };
        let pn = if sel & 0x08 != 0 {
            r.u32()
        } else {
            let next = self.peer_pn.entry(link).or_default();
            let pn = *next;
            *next += 1;
            pn as u32
        };
        let mut d = Vec::new();
        wire::Header { session, link, pn }.emit(&mut d);
        if sel & 0x10 != 0 {
            d[1] = r.u8();
        }
        for _ in 0..r.u8() % 8 {
            self.frame(r, &mut d);
        }
        d
    }

    fn frame(&mut self, r: &mut Reader<'_>, d: &mut Vec<u8>) {
        match r.u8() % 8 {
            0 => wire::emit_ping(d),
            1 => self.ack_frame(r, d),
            2 => {
                // LOSS_REPORT, written raw (0 to 3 entries).
                let n = r.u8() % 4;
                d.extend_from_slice(&[0x03, n]);
                for _ in 0..n {
                    let sel = r.u8();
                    let link = link_sel(sel, r);
                    d.extend_from_slice(&link.to_be_bytes());
                    d.extend_from_slice(&u64::from(r.u32()).to_be_bytes());
                    d.extend_from_slice(&u64::from(r.u32()).to_be_bytes());
                }
            }
            3 => {
                // DATA numbered like a real peer: mostly in order, with gaps and repeats.
                let flow = usize::from(r.u8() % 4);
                let gseq = next_seq(&mut self.peer_gseq, r.u8());
                let fseq = next_seq(&mut self.peer_fseq[flow], r.u8());
                let payload = r.short();
                // Flows 2 and 3 come as DATA_RECOVERED (their sender re-sends losses).
                wire::emit_data(d, gseq as u32, flow as u32, fseq as u32, payload, flow >= 2)
                    .expect("at most 255 bytes");
            }
            4 => {
                // LINK_STATUS, state 2 being malformed.
                let sel = r.u8();
                let link = link_sel(sel, r);
                d.push(0x05);
                d.extend_from_slice(&link.to_be_bytes());
                d.push(r.u8() % 3);
            }
            5 => wire::emit_padding(d, usize::from(r.u8()) + 1),
            6 => d.extend_from_slice(r.short()),
            _ => {
                // DATA with raw numbers; with the flow's top bits 10 a DATA_TEMPLATE, 11 a
                // DATA_COMPACT (slot 0-3, generation from the flow sequence's low bits,
                // the body raw).
                let (gseq, flow, fseq) = (r.u32(), r.u32(), r.u32());
                let payload = r.short();
                let n = wire::DataNumbers {
                    global_seq: gseq,
                    flow_id: flow,
                    flow_seq: fseq,
                    recovered: flow & 1 == 1,
                };
                let slot = (flow & 3) as u16;
                match flow >> 30 {
                    2 if !payload.is_empty() => {
                        let hlen = (fseq >> 8) as usize % payload.len().min(128) + 1;
                        let ipv4_checksum = flow & 4 != 0;
                        wire::emit_data_template(
                            d,
                            n,
                            slot,
                            (fseq & 7) as u16,
                            hlen as u8,
                            ipv4_checksum,
                            payload,
                        )
                        .expect("in range");
                    }
                    3 => wire::emit_data_compact(d, n, slot, (fseq & 7) as u8, |o| {
                        o.extend_from_slice(payload)
                    })
                    .expect("in range"),
                    _ => wire::emit_data(d, gseq, flow, fseq, payload, flow & 1 == 1)
                        .expect("at most 255 bytes"),
                }
            }
        }
    }

    /// An ACK frame, written raw so that malformed ranges occur too. Its largest packet
    /// number is, unless given raw, one the engine sent on that link (or 0).
    fn ack_frame(&mut self, r: &mut Reader<'_>, d: &mut Vec<u8>) {
        let sel = r.u8();
        let link = link_sel(sel, r);
        let sent = self.tx_count.get(&link).copied().unwrap_or(0);
        let back = u64::from(r.u8());
        let largest = if sel & 0x04 != 0 {
            r.u64()
        } else {
            sent.saturating_sub(1 + back % sent.max(1))
        };
        let delay = u32::from(r.u16());
        let first_range = if sel & 0x08 != 0 {
            r.u32()
        } else {
            u32::from(r.u8())
        };
        let count = if sel & 0x10 != 0 { r.u8() } else { r.u8() % 4 };
        d.push(0x02);
        d.extend_from_slice(&link.to_be_bytes());
        d.extend_from_slice(&largest.to_be_bytes());
        d.extend_from_slice(&delay.to_be_bytes());
        d.extend_from_slice(&first_range.to_be_bytes());
        d.push(count);
        for _ in 0..count {
            d.extend_from_slice(&u32::from(r.u8()).to_be_bytes());
            d.extend_from_slice(&u32::from(r.u8()).to_be_bytes());
        }
    }
}

/// Clears the high half of the flow sequence number of every DATA frame of a datagram the
/// engine would accept, so that no reorder gap exceeds 2^16 (the known reorder gap walk,
/// see [`strict`]).
fn tame_flow_seqs(datagram: &mut [u8]) {
    let mut at = Vec::new();
    if let Ok((header, frames)) = wire::parse(datagram)
        && header.session == SESSION
        && frames.is_ack_eliciting().is_ok()
    {
        let base = datagram.as_ptr() as usize;
        for frame in frames.flatten() {
            if let Frame::Data(data) = frame
                && data.flow_seq > 0xffff
            {
                // flow_seq u32 and len u16 precede the payload.
                at.push(data.payload.as_ptr() as usize - base - 6);
            }
        }
    }
    for i in at {
        datagram[i..i + 2].fill(0);
    }
}

/// Link id from a selector byte: 0, 1 or 2 in its low two bits, or a u16 read from `r`.
pub fn link_sel(sel: u8, r: &mut Reader<'_>) -> u16 {
    match sel & 0x03 {
        3 => r.u16(),
        l => u16::from(l),
    }
}

/// A peer's next sequence number: usually `*next` (or a little after it, leaving a gap),
/// sometimes a repeat of a recent one. Advances `*next` past what it returns.
fn next_seq(next: &mut u64, sel: u8) -> u64 {
    if sel >= 0xf0 {
        return next.saturating_sub(u64::from(sel & 0x0f) + 1);
    }
    let seq = *next + u64::from(sel % 4);
    *next = seq + 1;
    seq
}

/// A duration from two bytes: a unit (µs, ms, 10 ms, s, h) and a count.
pub fn duration(r: &mut Reader<'_>) -> Duration {
    let unit = r.u8();
    let n = u64::from(r.u8());
    match unit % 5 {
        0 => Duration::from_micros(n),
        1 => Duration::from_millis(n),
        2 => Duration::from_millis(10 * n),
        3 => Duration::from_secs(n),
        _ => Duration::from_secs(3600 * n),
    }
}

fn take_one(set: &mut HashMap<Vec<u8>, u64>, key: &[u8]) -> bool {
    match set.get_mut(key) {
        Some(n) if *n > 0 => {
            *n -= 1;
            true
        }
        _ => false,
    }
}

/// An inner packet read from `r`: raw bytes, or an IPv4/IPv6 packet built from a few
/// choices (so that most pass classification), or a packet around 64 KiB.
///
/// | selector % 4 | packet                                                           |
/// |---|---------------------------------------------------------------------------|
/// | 0 | u16-prefixed raw bytes                                                     |
/// | 1 | IPv4: tos, protocol, ihl, addresses, ports, fragment offset, u8-prefixed payload |
/// | 2 | IPv6: traffic class, up to 3 extension headers, ports, u8-prefixed payload |
/// | 3 | IPv4/UDP of 65 500 + (u16 % 100) bytes (some too large for a DATA frame)   |
pub fn tun_packet(r: &mut Reader<'_>) -> Vec<u8> {
    const PROTOCOLS: [u8; 8] = [17, 6, 1, 132, 136, 47, 58, 0];
    match r.u8() % 4 {
        0 => r.prefixed().to_vec(),
        1 => {
            let tos = r.u8();
            let proto = r.u8();
            let protocol = if proto & 0x80 != 0 {
                proto
            } else {
                PROTOCOLS[usize::from(proto % 8)]
            };
            let shape = r.u8();
            let options = usize::from(shape % 4) * 4;
            let mut p = vec![0u8; 20 + options];
            p[0] = 0x40 | (5 + (shape % 4));
            p[1] = tos;
            p[6] = if shape & 0x10 != 0 { 0x20 } else { 0 }; // MF
            p[7] = if shape & 0x20 != 0 { r.u8() } else { 0 }; // fragment offset
            p[8] = 64;
            p[9] = protocol;
            p[12..16].copy_from_slice(&[10, 0, 0, r.u8() % 4]);
            p[16..20].copy_from_slice(&[10, 0, 1, r.u8() % 4]);
            p.extend_from_slice(&u16::from(r.u8() % 4).to_be_bytes());
            p.extend_from_slice(&u16::from(r.u8() % 4).to_be_bytes());
            p.extend_from_slice(r.short());
            let total = u16::try_from(p.len()).unwrap_or(u16::MAX);
            p[2..4].copy_from_slice(&total.to_be_bytes());
            p
        }
        2 => {
            let tc = r.u8();
            let mut p = vec![0u8; 40];
            p[0] = 0x60 | (tc >> 4);
            p[1] = tc << 4;
            p[7] = 64;
            p[23] = r.u8() % 4;
            p[39] = r.u8() % 4;
            let mut next_at = 6;
            for _ in 0..r.u8() % 4 {
                let kind = [0u8, 43, 60, 44][usize::from(r.u8() % 4)];
                p[next_at] = kind;
                next_at = p.len();
                if kind == 44 {
                    let frag = r.u16();
                    p.extend_from_slice(&[0, 0]);
                    p.extend_from_slice(&frag.to_be_bytes());
                    p.extend_from_slice(&[0; 4]);
                } else {
                    let units = r.u8() % 3;
                    p.extend_from_slice(&[0, units]);
                    p.extend(std::iter::repeat_n(0, 6 + 8 * usize::from(units)));
                }
            }
            p[next_at] = PROTOCOLS[usize::from(r.u8() % 8)];
            p.extend_from_slice(&u16::from(r.u8() % 4).to_be_bytes());
            p.extend_from_slice(&u16::from(r.u8() % 4).to_be_bytes());
            p.extend_from_slice(r.short());
            let payload = u16::try_from(p.len() - 40).unwrap_or(u16::MAX);
            p[4..6].copy_from_slice(&payload.to_be_bytes());
            p
        }
        _ => {
            let len = 65_500 + usize::from(r.u16() % 100);
            let mut p = vec![0u8; len];
            p[0] = 0x45;
            p[9] = 17;
            p[12..16].copy_from_slice(&[10, 0, 0, 9]);
            p[16..20].copy_from_slice(&[10, 0, 1, 9]);
            p
        }
    }
}

/// The `engine_datagrams` target: an engine fed datagrams, timers and a few other inputs.
///
/// | op % 8 | operands                     | action                                   |
/// |---|-----------------------------------|------------------------------------------|
/// | 0 | u16-prefixed bytes                | `handle_datagram(bytes)`                 |
/// | 1 | frame descriptions ([`Driver::framed`]) | `handle_datagram` of a built datagram |
/// | 2 | unit, count ([`duration`])         | advance the clock, `handle_timeout`      |
/// | 3 | n                                  | `run_timers(n % 16 + 1)`                 |
/// | 4 | packet ([`tun_packet`])            | `handle_tun_packet`                      |
/// | 5 | link selector                      | `handle_tx_done`                         |
/// | 6 | link selector (bit 7: up)          | `handle_link_change`                     |
/// | 7 | index                              | feed an earlier datagram again           |
///
/// `Driver::framed` reads a header selector (bits 0-1 link 0/1/2 or a u16; bit 2 a raw
/// session u32; bit 3 a raw packet number u32, else the peer's next one on that link; bit
/// 4 a flags byte), a frame count (% 8), then per frame a type (% 8): PING, ACK (of
/// packets the engine sent), LOSS_REPORT, DATA (peer numbering), LINK_STATUS, PADDING,
/// raw bytes, DATA with raw numbers.
pub fn run_datagrams(data: &[u8]) {
    let mut r = Reader::new(data);
    let mut d = Driver::new(Knobs(r.u8()), false);
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        match r.u8() % 8 {
            0 => {
                let datagram = r.prefixed();
                d.datagram(datagram);
            }
            1 => {
                let datagram = d.framed(&mut r);
                d.datagram(&datagram);
            }
            2 => {
                let dt = duration(&mut r);
                d.advance(dt);
            }
            3 => d.run_timers(u32::from(r.u8() % 16) + 1),
            4 => {
                let p = tun_packet(&mut r);
                d.tun(&p);
            }
            5 => {
                let sel = r.u8();
                let link = link_sel(sel, &mut r);
                d.tx_done(link);
            }
            6 => {
                let sel = r.u8();
                let link = link_sel(sel, &mut r);
                d.link_change(link, sel & 0x80 != 0);
            }
            _ => d.replay(r.u8()),
        }
    }
    d.finish();
}

/// The `engine_tun` target: inner packets (any bytes) into `handle_tun_packet`, with the
/// clock and departures moving, and every emitted datagram checked.
///
/// | op % 6 | operands                 | action                                         |
/// |---|-------------------------------|------------------------------------------------|
/// | 0, 1 | u16-prefixed bytes       | `handle_tun_packet(bytes)`                     |
/// | 2 | packet ([`tun_packet`])       | `handle_tun_packet`                            |
/// | 3 | unit, count ([`duration`])    | advance the clock, `handle_timeout`            |
/// | 4 | link selector                 | `handle_tx_done`                               |
/// | 5 | n                             | `run_timers(n % 8 + 1)`                        |
///
/// A server is configured with links 0 and 1 here, so that it has links to send on.
pub fn run_tun(data: &[u8]) {
    let mut r = Reader::new(data);
    let mut d = Driver::new(Knobs(r.u8()), true);
    for _ in 0..MAX_OPS {
        if r.is_empty() {
            break;
        }
        match r.u8() % 6 {
            0 | 1 => {
                let p = r.prefixed();
                d.tun(p);
            }
            2 => {
                let p = tun_packet(&mut r);
                d.tun(&p);
            }
            3 => {
                let dt = duration(&mut r);
                d.advance(dt);
            }
            4 => {
                let sel = r.u8();
                let link = link_sel(sel, &mut r);
                d.tx_done(link);
            }
            _ => d.run_timers(u32::from(r.u8() % 8) + 1),
        }
    }
    d.finish();
}
