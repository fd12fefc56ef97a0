//! The engine: one state machine per tunnel endpoint, the same for client and server.
//!
//! Send path (numbered stages, all sequential under `&mut self`):
//!  1. `handle_tun_packet`: classify -> per-flow queue (above the binding point; nothing
//!     is bound to a link yet).
//!  2. `poll_transmit`: control first (acknowledgements, link status, probes, loss
//!     reports), then the binding point: the flow scheduler offers its head packet, the
//!     policy picks a link that has room in its budget below the binding point and whose
//!     pacer allows; only then are the link's packet number, the global and flow sequence
//!     numbers and the header applied (docs/protocol.md 4).
//!  3. `handle_tx_done`: the driver reports a departure; the link's budget frees a slot.
//!
//! Receive path: `handle_datagram` -> header, session and packet-number checks -> frames
//! validated as a whole, then applied: ACK (RTT, loss detection, delivery rate),
//! LOSS_REPORT, LINK_STATUS, DATA (duplicate filter by global sequence, per-flow reorder
//! with hold time) -> `poll_deliver`.
//!
//! Drivers call, after feeding inputs: `poll_transmit` until `None`, `poll_deliver` until
//! `None`, `poll_event` until `None`, then arm one timer at `poll_timeout` and call
//! `handle_timeout` when it fires. `now` must never go backwards. `handle_timeout` is
//! safe to call spuriously.

use std::collections::{BTreeMap, VecDeque};

use core::time::Duration;

use thiserror::Error;

use crate::classify::{ClassifyError, classify};
use crate::compact::TxForm;
use crate::config::{Config, ConfigError, LinkConfig, ReinjectTimer, Role};
use crate::fq::{Decision, FlowQueues, QueueStats};
use crate::ids::LinkId;
use crate::link::{Link, LinkState, LinkStats, LinkView, SentData, SentPacket, link_bit};
use crate::policy::{
    Aggregate, BindPolicy, Binding, MinRtt, Overflow, OverflowParams, PacketMeta, PolicyKind,
    policy_for,
};
use crate::reorder::{Dedup, Reorder, ReorderStats, Seen};
use crate::time::Instant;
use crate::wire;

/// Size of the probes of a suspect link (QUIC's path-validation size: it fits every
/// path that carries the tunnel's full-size datagrams).
const PROBE_BYTES: usize = 1200;

/// Links a server accepts from one client before it ignores new link ids.
const MAX_LINKS: usize = 64;

/// The least backlog the receive-window clamp allows a TCP sender above the binding point,
/// bytes (4.1): sixteen full-size packets, so its acknowledgements' clock keeps the
/// links fed when their rate estimates are small.
const CLAMP_MIN_ALLOWANCE: f64 = 16.0 * 1500.0;

/// A datagram for the driver to send.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
#[must_use]
pub struct Transmit {
    /// The link to send it on.
    pub link: LinkId,
    /// Its length in the caller's buffer.
    pub len: usize,
    /// Whether it carries an inner packet (a DATA frame).
    pub carries_data: bool,
    /// When it is to leave: its pacing slot. `now` from [`Endpoint::poll_transmit`];
    /// up to the horizon after `now` from [`Endpoint::poll_transmit_ahead`]. The link's
    /// datagrams have non-decreasing slots in packet-number order.
    pub send_at: Instant,
}

/// A change of a local link reported by the driver (netlink, or the simulator's model).
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum LinkChange {
    /// The interface is up and has an address.
    Up,
    /// The interface went down or lost its address: whatever waits below the binding
    /// point on it is gone.
    Down,
}

/// Something that happened inside the engine, for logs and tests.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Event {
    /// A link changed state.
    LinkStateChanged {
        /// The link.
        link: LinkId,
        /// State before.
        from: LinkState,
        /// State after.
        to: LinkState,
    },
    /// The server learnt a link id from a client's datagram.
    LinkLearnt {
        /// The link.
        link: LinkId,
    },
    /// A link's unacknowledged inner packets were taken for reinjection on other links.
    Reinjected {
        /// The link they were sent on.
        link: LinkId,
        /// Why.
        cause: ReinjectCause,
        /// How many.
        packets: usize,
        /// Time since the link's last acknowledgement.
        after_ack: Duration,
    },
}

/// Why packets were reinjected.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum ReinjectCause {
    /// The link's reinjection timer expired.
    Timer,
    /// The link went down (local interface, or the peer announced it).
    LinkDown,
}

/// An inner packet waiting to be sent again on another link: a reinjection, or the copies
/// of a redundant flow's packet.
#[derive(Debug)]
struct Pending {
    data: SentData,
    since: Instant,
    /// Copies still to send (1 for a reinjection).
    remaining: usize,
    /// A redundant flow's copies: the links that carry one in the current round. Copies
    /// beyond the usable links start another round, so that they spread over the links
    /// again (with two links, four copies go two on each, not three on the best one).
    round: u64,
}

/// The two queues of packets sent again.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Again {
    /// A dead link's packets.
    Reinject,
    /// A redundant flow's copies.
    Copy,
}

/// Why a packet from the TUN side was refused.
#[derive(Clone, Copy, Debug, Eq, Error, PartialEq)]
pub enum TunError {
    /// Not a well-formed IP packet.
    #[error("invalid packet from tun: {0}")]
    Invalid(#[from] ClassifyError),
    /// Larger than a DATA frame can carry.
    #[error("packet of {0} bytes is too large for the tunnel")]
    TooLarge(usize),
    /// Larger than the smallest link up carries whole, and not to be fragmented: its
    /// sender is sent "packet too big" ([`Endpoint::poll_deliver`]).
    #[error("packet of {len} bytes is larger than the links carry ({mtu}): its sender is told")]
    TooBig {
        /// The packet's length.
        len: usize,
        /// The largest inner packet every link up carries.
        mtu: usize,
    },
}

/// The smallest largest-datagram a LINK_MTU frame can set (3.8): 576 bytes of IPv4
/// datagram less its IPv4 and UDP headers and the AEAD tag.
const MIN_PEER_DATAGRAM: usize = 576 - 28 - 16;

/// A reinjection whose original is still unresolved.
#[derive(Clone, Copy, Debug)]
struct Resend {
    /// It was sent (not only queued).
    sent: bool,
    /// It went into idle capacity because its original was late (`poll_late`), not
    /// because its link's timer expired: its original's coming after all says nothing of
    /// the timer.
    idle: bool,
}

/// A token bucket for "packet too big" answers (RFC 1812 4.3.2.8: rate-limited).
#[derive(Debug)]
struct TooBigBudget {
    tokens: f64,
    at: Instant,
}

impl TooBigBudget {
    /// Answers per second, and the most at once.
    const RATE: f64 = 100.0;
    const BURST: f64 = 20.0;

    fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * Self::RATE).min(Self::BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Counters of one endpoint. Every drop is counted under a reason.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EndpointStats {
    /// Packets accepted from the TUN side.
    pub tun_packets: u64,
    /// Bytes accepted from the TUN side.
    pub tun_bytes: u64,
    /// Packets from the TUN side that were not IP (dropped).
    pub tun_invalid: u64,
    /// Packets from the TUN side too large for a DATA frame (dropped).
    pub tun_too_large: u64,
    /// Queue counters above the binding point.
    pub queues: QueueStats,
    /// Segments from the peer whose TCP window was lowered by the receive-window clamp
    /// (`Config::tcp_window_clamp`).
    pub window_clamped: u64,
    /// Inner packets bound to a link.
    pub data_bound: u64,
    /// Of those, small flows' packets sent past a full window (`LinkView::has_room_small`).
    pub small_past_window: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Datagrams dropped: unparseable header or frames.
    pub malformed: u64,
    /// Datagrams dropped: another session id.
    pub wrong_session: u64,
    /// Datagrams dropped: a link id this end does not know.
    pub unknown_link: u64,
    /// Datagrams dropped: packet number already received or too old.
    pub duplicate_packets: u64,
    /// DATA frames received.
    pub data_received: u64,
    /// DATA frames dropped as duplicates (global sequence seen before).
    pub duplicate_data: u64,
    /// DATA frames dropped: global sequence older than the duplicate window.
    pub too_old_data: u64,
    /// Reorder counters.
    pub reorder: ReorderStats,
    /// ACK frames sent.
    pub acks_sent: u64,
    /// ACK frames of those that rode on a data packet of their link (the rest took a
    /// datagram of their own, or of another link's control datagram).
    pub acks_ridden: u64,
    /// RX_TIME frames sent (one-way delay samples for the peer's rate control).
    pub rx_times_sent: u64,
    /// Acknowledgements that did not fit on the data packet they were due to ride on
    /// (the link's `max_datagram`) and went alone.
    pub acks_too_big_to_ride: u64,
    /// Inner packets sent in a datagram larger than their link's `max_datagram`: no link
    /// up carried them whole, and they left to be fragmented below.
    pub data_oversized: u64,
    /// Packets from the TUN side larger than every link up carries whole and not to be
    /// fragmented: dropped, their senders told "packet too big" (at most 100 a second).
    pub too_big_dropped: u64,
    /// "Packet too big" answers sent to the TUN side.
    pub too_big_signalled: u64,
    /// Copies of redundant packets not sent: no link left for them carried them whole.
    pub redundant_copies_too_big: u64,
    /// Path MTU probes sent (4.2).
    pub pmtu_probes_sent: u64,
    /// LOSS_REPORT frames sent.
    pub loss_reports_sent: u64,
    /// LINK_STATUS frames sent.
    pub link_status_sent: u64,
    /// Datagrams carrying LINK_STATUS declared lost (every link's state told again).
    pub link_status_lost: u64,
    /// Packets the sender's loss detection declared lost, all links.
    pub lost: u64,
    /// Inner packets taken for reinjection because a link's reinjection timer expired.
    pub reinjected_timer: u64,
    /// Inner packets of aggregate flows late on one link (unacknowledged after twice its
    /// minimum RTT, `max_ack_delay` and `rate_control_max_queue`) sent again on a link
    /// that had nothing else to send (4.4).
    pub reinjected_idle: u64,
    /// Inner packets taken for reinjection because a link went down.
    pub reinjected_link_down: u64,
    /// Inner packets of aggregate flows declared lost on a working link and sent again
    /// on another.
    pub reinjected_lost: u64,
    /// Reinjected packets sent on another link.
    pub reinjections_sent: u64,
    /// Reinjections cancelled before they were sent: the original was acknowledged.
    pub reinjections_cancelled: u64,
    /// Reinjections sent although the original arrived too (acknowledged later).
    pub reinjections_spurious: u64,
    /// Reinjections given back to their link before they were sent: the link answered
    /// again after its timer expired, and the packet was most likely still on its way
    /// there.
    pub reinjections_returned: u64,
    /// Reinjections given up: no other link could take them within `reinject_max_age`.
    pub reinjections_expired: u64,
    /// Longest time from a link's last acknowledgement to its reinjection.
    pub reinject_after_max: Duration,
    /// Copies of redundant flows' packets sent on a second (third, ...) link.
    pub redundant_copies_sent: u64,
    /// Copies given up: no other link could take them within a round trip.
    pub redundant_copies_expired: u64,
    /// Header compression (`docs/protocol.md` 3.9), sending: DATA_TEMPLATE frames sent.
    pub templates_sent: u64,
    /// DATA_COMPACT frames sent.
    pub compact_sent: u64,
    /// Bytes the DATA_COMPACT frames sent saved against DATA frames.
    pub compact_saved_bytes: u64,
    /// Receiving: DATA_TEMPLATE frames received.
    pub templates_received: u64,
    /// DATA_COMPACT frames dropped: no template of their generation in their slot, or a
    /// body that does not fit its template.
    pub compact_undecodable: u64,
}

/// A tunnel endpoint.
#[derive(Debug)]
pub struct Endpoint {
    /// Tests: every ACK reports every range kept ([`Self::report_all_ack_ranges`]).
    #[cfg(test)]
    report_all_ranges: bool,
    config: Config,
    links: Vec<Link>,
    queues: FlowQueues,
    policy: Box<dyn BindPolicy>,
    next_global_seq: u64,
    dedup: Dedup,
    reorder: Reorder,
    events: VecDeque<Event>,
    stats: EndpointStats,
    /// Header compression: this end's template slots (sending) and the peer's (receiving).
    compressor: crate::compact::Compressor,
    decompressor: crate::compact::Decompressor,
    clamp: crate::clamp::WindowClamp,
    next_loss_report: Instant,
    loss_report_due: bool,
    next_housekeeping: Instant,
    pool: Vec<Vec<u8>>,
    /// What the policy sees: one view per link, in the order of `links`. A link's entry is
    /// refreshed as soon as it sends or a datagram of it departs; every other change
    /// (acknowledgements, timers, link events, new links) marks all entries stale, to be
    /// rebuilt at the next binding. `pacer_next`, which depends on `now`, is filled in at
    /// each binding.
    views: Vec<LinkView>,
    views_stale: bool,
    /// Whether any link is paced; if none is, every view's `pacer_next` is `now`.
    any_paced: bool,
    /// No control datagram is due before this instant unless an input changes a link
    /// (cleared to `Instant::ZERO`, "scan the links", by every such input).
    control_idle_until: Instant,
    /// Time of the latest `poll_transmit`: a pacer deadline at or before it has passed
    /// and no longer holds anything back (what holds a packet then is something else,
    /// which an input will change), so it is no timer.
    last_poll: Instant,
    lost_scratch: Vec<SentPacket>,
    /// CoDel interval in force, refreshed when RTTs or link states change.
    codel_interval: Duration,
    /// Inner packets waiting to be re-sent on another link, oldest first. They go ahead
    /// of new data at the binding point.
    reinject: VecDeque<Pending>,
    /// Reinjected packets whose original is still unresolved on its link, by global
    /// sequence.
    reinject_state: BTreeMap<u64, Resend>,
    reinject_scratch: Vec<SentData>,
    /// Scratch for `poll_late`: (oldest late send, link index).
    late_order: Vec<(Instant, usize)>,
    reinject_views: Vec<LinkView>,
    /// Scratch for the links that carry a packet whole (`policy::links_that_carry`).
    fit_views: Vec<LinkView>,
    /// Scratch for the views a small flow's packet is bound against (`poll_queues`).
    small_views: Vec<LinkView>,
    /// When the oldest small flow's packet, held by full windows, will have waited long
    /// enough to pass one (`LinkView::has_room_small`): a timer, since no acknowledgement
    /// may come to wake the engine.
    small_wake: Option<Instant>,
    /// Last time an aggregate flow's packet waited while a link had room: the policy
    /// left that link out by its estimate (see `probe_interval`).
    aggregate_left_out: Option<Instant>,
    /// "Packet too big" answers for the TUN side ([`Self::poll_deliver`]).
    local_out: VecDeque<Vec<u8>>,
    too_big_budget: TooBigBudget,
    /// Copies of redundant flows' packets waiting for their next link (ahead of
    /// everything else).
    copies: VecDeque<Pending>,
    aggregate: Aggregate,
    overflow: Overflow,
    /// Binding horizon φ of the latest `poll_transmit_ahead` (zero: `poll_transmit`).
    horizon: Duration,
}

impl Endpoint {
    /// A new endpoint with the default binding policy.
    pub fn new(config: Config, now: Instant) -> Result<Self, ConfigError> {
        Self::with_policy(config, Box::new(MinRtt), now)
    }

    /// A new endpoint with a chosen binding policy.
    pub fn with_policy(
        config: Config,
        policy: Box<dyn BindPolicy>,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let overflow = Overflow::new(OverflowParams {
            t_report: config.loss_report_interval,
            ..config.overflow
        });
        let aggregate = Aggregate {
            arrival_order: config.aggregate_arrival_order,
        };
        let mut reorder = Reorder::new(config.reorder_limit_packets, config.hash_seed);
        reorder.max_extra = config.reorder_hold_max;
        reorder.align = config.redundant_align;
        reorder.max_align = config.reorder_hold_max;
        // A configured hold is kept as configured (5.2).
        reorder.release_lost = config.reorder_hold.is_none();
        Ok(Self {
            #[cfg(test)]
            report_all_ranges: false,
            queues: FlowQueues::new(&config),
            reorder,
            codel_interval: config.codel_interval,
            next_loss_report: now + config.loss_report_interval,
            next_housekeeping: now + Duration::from_secs(1),
            config,
            links: Vec::new(),
            policy,
            next_global_seq: 0,
            dedup: Dedup::new(),
            events: VecDeque::new(),
            stats: EndpointStats::default(),
            loss_report_due: false,
            pool: Vec::new(),
            views: Vec::new(),
            views_stale: true,
            any_paced: false,
            control_idle_until: Instant::ZERO,
            last_poll: Instant::ZERO,
            lost_scratch: Vec::new(),
            reinject: VecDeque::new(),
            reinject_state: BTreeMap::new(),
            reinject_scratch: Vec::new(),
            late_order: Vec::new(),
            reinject_views: Vec::new(),
            compressor: Default::default(),
            decompressor: Default::default(),
            clamp: Default::default(),
            fit_views: Vec::new(),
            small_views: Vec::new(),
            small_wake: None,
            aggregate_left_out: None,
            local_out: VecDeque::new(),
            too_big_budget: TooBigBudget {
                tokens: TooBigBudget::BURST,
                at: now,
            },
            copies: VecDeque::new(),
            aggregate,
            overflow,
            horizon: Duration::ZERO,
        })
    }

    // ---- getters ----

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Endpoint counters.
    pub fn stats(&self) -> EndpointStats {
        let mut s = self.stats;
        s.queues = self.queues.stats;
        s.reorder = self.reorder.stats;
        s.window_clamped = self.clamp.clamped;
        s
    }

    /// Counters of one link.
    pub fn link_stats(&self, link: LinkId) -> Option<LinkStats> {
        self.link(link).map(|l| l.stats)
    }

    /// Counters of every link, in id order.
    pub fn all_link_stats(&self) -> impl Iterator<Item = (LinkId, LinkStats)> + '_ {
        self.links.iter().map(|l| (l.id, l.stats))
    }

    /// Live state of every link, in id order.
    pub fn link_views(&self, now: Instant) -> Vec<LinkView> {
        self.links
            .iter()
            .map(|l| l.view(now, self.config.budget_packets))
            .collect()
    }

    /// Packets waiting above the binding point.
    pub fn queued_packets(&self) -> usize {
        self.queues.packets()
    }

    /// Bytes waiting above the binding point.
    pub fn queued_bytes(&self) -> usize {
        self.queues.bytes()
    }

    /// Flows tracked above the binding point.
    pub fn flow_count(&self) -> usize {
        self.queues.flow_count()
    }

    /// Inner packets waiting to be reinjected on another link.
    pub fn reinject_pending(&self) -> usize {
        self.reinject.len()
    }

    /// Reinjections whose original an acknowledgement may still cancel (tests: the
    /// record must not outlive the packet).
    #[cfg(test)]
    pub(crate) fn reinjections_tracked(&self) -> usize {
        self.reinject_state.len()
    }

    /// When link `i`'s timer last expired spuriously (its reinjections' originals came).
    #[cfg(test)]
    pub(crate) fn last_spurious(&self, i: usize) -> Option<Instant> {
        self.links[i].last_spurious
    }

    /// Packets held in reorder buffers.
    pub fn reorder_held(&self) -> usize {
        self.reorder.held()
    }

    /// The reorder hold time in force (as of the last call to `poll_transmit`).
    pub fn hold_time(&self) -> Duration {
        self.hold_time_at(self.last_poll)
    }

    /// The `limit` busiest flows' reordering as the receiver sees it (the links each
    /// came over lately, the hold its latest out-of-order packet got, its counters),
    /// busiest first.
    pub fn reorder_flows(&self, limit: usize) -> Vec<crate::reorder::FlowReorderView> {
        self.reorder.flow_views(limit, |i| self.links[i].id)
    }

    /// The reorder hold time in force at `now`: the links' delay spread and variation,
    /// plus what a late packet showed they missed ([`Reorder::extra_hold`]).
    fn hold_time_at(&self, now: Instant) -> Duration {
        if let Some(h) = self.config.reorder_hold {
            return h;
        }
        let measured = self
            .links
            .iter()
            .filter(|l| l.rtt.has_sample && l.state != LinkState::Down)
            .map(|l| (l.rtt.srtt / 2 + l.rtt.rttvar * 2, l.rtt.min / 2));
        if measured.clone().next().is_none() {
            return self.config.initial_rtt.min(self.config.reorder_hold_max);
        }
        let spread = reorder_spread(measured);
        (spread + self.config.max_ack_delay + self.reorder.extra_hold(now))
            .clamp(self.config.reorder_hold_min, self.config.reorder_hold_max)
    }

    /// How long a gap in a flow whose sender re-sends its losses (DATA_RECOVERED) is worth
    /// waiting for, from the arrival of the first packet behind it: the sender finds the
    /// missing packet lost at most 9/8 of its link's RTT after sending it (the time
    /// threshold, 4.3; the packet threshold is sooner on a busy link), or, when nothing
    /// sent after it on that link is acknowledged, when the link's reinjection timer
    /// expires (SRTT + 4 RTTVAR), and sends it again ahead of backlogged flows on the link
    /// where it arrives soonest, which may be the link it was lost on (4.4). Lost there
    /// again, it is found lost again and goes on another link. With each link's RTT
    /// variation twice, and the peer's acknowledgement delay: twice the longest such wait
    /// over the links the packet may have been lost on, plus the shortest one-way trip
    /// and the second shortest (the second resend's link is not the first's). Without the
    /// second try, a resend lost again on a 50 Mbit/s link losing 2 % beside a 10 Mbit/s
    /// one, both at 5 ms, left its gap to the inner TCP (9 times in one 20 s run), and the
    /// flow fell from 54.75 to 46.07 Mbit/s over four seeds (`docs/RESULTS.md` 8.9). A
    /// link not measured yet counts with the initial RTT and variation (a TCP's first
    /// window, whose losses a TCP without SACK recovers worst, comes before every link
    /// is). Suspect links count: a
    /// link that lost the last packets it was given turns suspect when its timer expires,
    /// and that is when the sender re-sends them on another. With one link up or
    /// suspect, one try on it: the sender sends such a packet as DATA_RECOVERED only
    /// while its lone link's rate control has the queue to itself
    /// ([`Self::repairs_on`]), and re-sends a loss there once. `None` with no link.
    fn recovery_wait(&self) -> Option<Duration> {
        let alive = || self.links.iter().filter(|l| l.state != LinkState::Down);
        let found = alive()
            .map(|l| crate::link::found_lost_by(l.rtt.srtt, l.rtt.rttvar))
            .max()?
            + self.config.max_ack_delay;
        let (first, second) = alive().map(|l| l.rtt.srtt / 2 + l.rtt.rttvar * 2).fold(
            (Duration::MAX, Duration::MAX),
            |(a, b), t| {
                if t < a { (t, a) } else { (a, b.min(t)) }
            },
        );
        if second == Duration::MAX {
            // One link: one try.
            return Some(found + first);
        }
        Some(found * 2 + first + second)
    }

    /// The CoDel interval in force: the configured floor, or `codel_rtt_factor` times the
    /// largest smoothed RTT of the links that are up, whichever is larger.
    pub fn codel_interval(&self) -> Duration {
        self.codel_interval
    }

    fn refresh_codel_interval(&mut self, now: Instant) {
        let max_srtt = self
            .links
            .iter()
            .filter(|l| l.state == LinkState::Up && l.rtt.has_sample)
            .map(|l| l.rtt.srtt)
            .max()
            .unwrap_or_default();
        self.codel_interval = self
            .config
            .codel_interval
            .max(max_srtt.mul_f64(self.config.codel_rtt_factor));
        self.queues.set_interval(self.codel_interval);
        // One-way delay spread of the links that are up or suspect (RTT/2 as one-way
        // delay), and their longest recent pause (a cellular scheduler's). A suspect link
        // is in a pause: the time since its last acknowledgement counts as one, so that
        // while it lasts the flows it carried do not meet drops for the queue it leaves
        // to the other links, under the same limit as the others' pauses (below)
        // (`docs/RESULTS.md` 10.3). It grows as the other links' acknowledgements come,
        // each of which refreshes this; with no link answering, nothing is sent for the
        // queue to be dropped from anyway.
        let in_play = || {
            self.links.iter().filter(|l| {
                matches!(l.state, LinkState::Up | LinkState::Suspect)
                    && l.rtt.has_sample
                    && !l.config.backup
            })
        };
        // A link whose packets lag the fastest path's by more than the receiver waits
        // for a gap (`reorder_hold_max`) is left out: what it delivers that late is given
        // up, and a flow's backlog kept long enough to justify it would only send it
        // packets that come too late (a link with pauses of seconds). The fastest path is
        // a link up's, if one is.
        let lo = in_play()
            .filter(|l| l.state == LinkState::Up)
            .map(|l| l.rtt.min)
            .min()
            .or_else(|| in_play().map(|l| l.rtt.min).min())
            .unwrap_or_default();
        // A link's lag behind the fastest path, and its recent pause.
        let lag_pause = |l: &Link| {
            let mut paused = l.cc.as_ref().map(|c| c.recent_pause()).unwrap_or_default();
            if l.state == LinkState::Suspect {
                paused = paused.max(now - l.last_ack_time);
            }
            (l.rtt.srtt.saturating_sub(lo) / 2, paused)
        };
        let (mut spread, mut pause, mut sharing) = (Duration::ZERO, Duration::ZERO, 0);
        for l in in_play() {
            let (lag, paused) = lag_pause(l);
            if lag + paused <= self.config.reorder_hold_max {
                spread = spread.max(lag);
                pause = pause.max(paused);
                sharing += 1;
            }
        }
        // An `auto` TCP flow is an aggregate one while at least two links can share it.
        self.queues.set_aggregate_extra(spread, pause, sharing >= 2);
        if !self.config.codel_covers_pause {
            return;
        }
        // Each link's own pause, for the flows bound to it, under the same limit.
        let pauses = self.links.iter().map(|l| {
            let (lag, paused) = lag_pause(l);
            if l.state == LinkState::Up && lag + paused <= self.config.reorder_hold_max {
                paused
            } else {
                Duration::ZERO
            }
        });
        self.queues.set_link_pauses(pauses);
    }

    fn link(&self, id: LinkId) -> Option<&Link> {
        self.link_index(id).map(|i| &self.links[i])
    }

    fn link_index(&self, id: LinkId) -> Option<usize> {
        // `links` is sorted by id, and ids are usually 0, 1, 2, ...: try the id as the
        // index first.
        let guess = usize::from(id.0);
        if self.links.get(guess).is_some_and(|l| l.id == id) {
            return Some(guess);
        }
        self.links.binary_search_by_key(&id, |l| l.id).ok()
    }

    /// Notes that links changed in ways the cached views and the control deadline do not
    /// follow. Called by every input that can change a link other than by sending or by a
    /// departure.
    fn links_changed(&mut self) {
        self.views_stale = true;
        self.control_idle_until = Instant::ZERO;
    }

    /// Refreshes the cached view of link `i` after it sent or a datagram of it departed.
    fn refresh_view(&mut self, i: usize) {
        if let Some(v) = self.views.get_mut(i) {
            self.links[i].update_view(v);
        }
    }

    // ---- inputs ----

    /// Adds a link (client: one per local interface; server: learnt or configured).
    /// Adding an existing id resets nothing and returns false.
    pub fn add_link(&mut self, now: Instant, id: LinkId, config: LinkConfig) -> bool {
        if self.link(id).is_some() {
            return false;
        }
        self.links_changed();
        self.any_paced |= config.pacing_rate.is_some() || self.config.rate_control;
        let link = Link::new(
            id,
            config,
            self.config.initial_rtt,
            self.config
                .rate_control
                .then_some(self.config.rate_control_max_queue),
            now,
        );
        #[cfg(test)]
        let link = {
            let mut link = link;
            link.rx.report_all = self.report_all_ranges;
            link
        };
        let pos = self.links.partition_point(|l| l.id < id);
        self.links.insert(pos, link);
        true
    }

    /// Sets the largest datagram the engine writes for `link` ([`LinkConfig::max_datagram`]):
    /// the server learns a link's path, and so its address family, from its datagrams.
    pub fn set_max_datagram(&mut self, now: Instant, link: LinkId, max: Option<usize>) {
        if let Some(i) = self.link_index(link) {
            let l = &mut self.links[i];
            if l.config.max_datagram == max {
                return;
            }
            l.config.max_datagram = max;
            l.pmtu_restart();
            if l.state != LinkState::Down {
                // The peer learns it from the link's next PING (LINK_MTU): that is now.
                l.ping_due = Some(now);
            }
            self.links_changed();
        }
    }

    /// Tests: every ACK reports every range its receiver keeps, as before the floor
    /// (`RxState::ranges`), on the links known now and on those learnt later.
    #[cfg(test)]
    pub(crate) fn report_all_ack_ranges(&mut self) {
        self.report_all_ranges = true;
        for l in &mut self.links {
            l.rx.report_all = true;
        }
    }

    /// A packet from the TUN side. It is queued above the binding point.
    pub fn handle_tun_packet(&mut self, now: Instant, packet: &[u8]) -> Result<(), TunError> {
        if packet.len() > usize::from(u16::MAX) {
            self.stats.tun_too_large += 1;
            return Err(TunError::TooLarge(packet.len()));
        }
        // Borrowed, not moved out: a copy right after `classify` wrote it would have to wait
        // for its many narrow stores to complete.
        let classified = classify(packet);
        let info = match &classified {
            Ok(info) => info,
            Err(e) => {
                self.stats.tun_invalid += 1;
                return Err((*e).into());
            }
        };
        if let Some(mtu) = self.tunnel_mtu()
            && packet.len() > mtu
            && let Some(reply) = crate::pmtu::too_big_reply(packet, mtu)
        {
            // Larger than a link up carries whole, and its sender can send smaller: it
            // is told so, as a router on the path would tell it (4.2).
            self.stats.too_big_dropped += 1;
            if self.too_big_budget.take(now) {
                self.stats.too_big_signalled += 1;
                self.local_out.push_back(reply);
            }
            return Err(TunError::TooBig {
                len: packet.len(),
                mtu,
            });
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(packet);
        self.stats.tun_packets += 1;
        self.stats.tun_bytes += packet.len() as u64;
        let policy = if self.config.rules.is_empty() {
            self.config.default_policy
        } else {
            policy_for(&self.config.rules, self.config.default_policy, info)
        };
        let clamp = self.config.tcp_window_clamp && info.key.protocol == crate::classify::PROTO_TCP;
        if clamp {
            self.clamp.on_local(&buf);
        }
        self.queues.enqueue(now, info, policy, buf);
        if clamp {
            // The backlog CoDel aims at (the flow's target, with an aggregate flow's
            // spread, at what the links up carry), held by the sender's window instead
            // of by drops.
            let rate: f64 = self
                .links
                .iter()
                .filter(|l| l.state == LinkState::Up)
                .filter_map(|l| l.cc.as_ref().map(|c| c.rate()))
                .sum();
            let clamp = &mut self.clamp;
            self.queues.clamp_flow(&info.key, |time| {
                let bytes = (rate * time.as_secs_f64())
                    .clamp(CLAMP_MIN_ALLOWANCE, f64::from(u32::MAX >> 2))
                    as u32;
                // As far as its sender may send (with its packets' headers, and two
                // packets on their way), CoDel leaves the flow to its window.
                let may = clamp.set_allowance(&info.key, bytes)? as usize;
                Some(may + may / 16 + 2 * 1514)
            });
        }
        Ok(())
    }

    /// A local link changed (interface up or down).
    pub fn handle_link_change(&mut self, now: Instant, link: LinkId, change: LinkChange) {
        let Some(i) = self.link_index(link) else {
            return;
        };
        self.links_changed();
        let local_down = change == LinkChange::Down;
        if local_down {
            // What the driver held for this interface is lost with it, and what is in
            // flight on it will not be acknowledged: re-send all of it elsewhere now.
            self.reinject_from(now, i, ReinjectCause::LinkDown, None);
            self.links[i].drop_below_binding();
        }
        let l = &mut self.links[i];
        if l.local_down != local_down {
            l.announce = true;
        }
        let peer_down = l.peer_down;
        if let Some(from) = l.set_down_flags(local_down, peer_down) {
            let to = l.state;
            self.on_state_change(now, i, from, to);
        }
    }

    /// The driver now reaches `link`'s peer at another address (the peer roamed, or a
    /// NAT gave it another address): the link may run over another path (RFC 9000 9.4).
    /// Its RTT estimate and its rate control start over, so that a path longer than the
    /// last one is not read as a standing queue of the difference (rate control would
    /// hold the link nearly idle for its minimum's window, 10 s), and it is measured again
    /// at once. Its packets in flight stay: their acknowledgements may still come.
    pub fn handle_path_change(&mut self, now: Instant, link: LinkId) {
        let Some(i) = self.link_index(link) else {
            return;
        };
        self.links_changed();
        let initial = self.config.initial_rtt;
        let l = &mut self.links[i];
        l.reset_path(now, initial);
        if l.state != LinkState::Down {
            l.ping_due = Some(now);
        }
        self.refresh_codel_interval(now);
    }

    /// The driver reports that the oldest datagram it was given for `link` has left (the
    /// interface took it). This frees a slot of the link's budget below the binding point.
    pub fn handle_tx_done(&mut self, now: Instant, link: LinkId) {
        if let Some(i) = self.link_index(link) {
            self.links[i].on_tx_done(now);
            self.refresh_view(i);
        }
    }

    /// A datagram from the network. Returns whether the engine took it: false when it
    /// is malformed, of another session, of a link the engine cannot add, or a replay
    /// (its packet number already received on its link, or too old to tell). Only a
    /// datagram taken shows where its link is reached now: a replay may come from
    /// anywhere.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> bool {
        self.links_changed();
        self.stats.datagrams_received += 1;
        let Ok((header, frames)) = wire::parse(datagram) else {
            self.stats.malformed += 1;
            return false;
        };
        if header.session != self.config.session {
            self.stats.wrong_session += 1;
            return false;
        }
        // Validate every frame before acting on any (a malformed datagram changes nothing).
        let mut eliciting = false;
        let mut ping = false;
        let mut probe = None;
        for frame in frames.clone() {
            match frame {
                Ok(f) => {
                    eliciting |= f.is_ack_eliciting();
                    ping |= matches!(f, wire::Frame::Ping | wire::Frame::Probe { .. });
                    if let wire::Frame::Probe { unacked, due_us } = f {
                        probe = Some((unacked, due_us));
                    }
                }
                Err(_) => {
                    self.stats.malformed += 1;
                    return false;
                }
            }
        }
        let link_id = LinkId(header.link);
        let li = match self.link_index(link_id) {
            Some(i) => i,
            None if self.config.role == Role::Server && self.links.len() < MAX_LINKS => {
                self.add_link(now, link_id, LinkConfig::default());
                self.events.push_back(Event::LinkLearnt { link: link_id });
                self.link_index(link_id).expect("just added")
            }
            None => {
                self.stats.unknown_link += 1;
                return false;
            }
        };
        let link = &mut self.links[li];
        let pn = wire::expand(header.pn, link.rx.expected());
        let expected = link.rx.expected();
        let heard_before = link.rx.received > 0;
        let last_heard = link.rx.largest_time;
        if !link.rx.insert(pn, now) {
            link.stats.duplicate_packets += 1;
            self.stats.duplicate_packets += 1;
            return false;
        }
        link.stats.datagrams_received += 1;
        if link.state == LinkState::Suspect
            && heard_before
            && now - last_heard
                >= link.suspect_timeout(self.config.max_ack_delay, self.config.suspect_min)
        {
            // The peer's direction of a suspect link delivers again after a silence as
            // long as a suspect timeout: the link is likely back both ways. It is probed
            // at once, its backoff restarted, instead of at the next probe, which the
            // backoff may put hundreds of ms away when the last probe before the end of
            // the cut was lost (6).
            link.ping_due = Some(now);
            link.probe_backoff = 0;
        }
        link.rx.note_gap(pn, expected);
        if eliciting {
            // Out-of-order arrivals and probes are acknowledged at once: the first so the
            // sender learns of the gap, the second so probe RTT samples carry no ack delay.
            let at_once = pn != expected || ping;
            link.rx.on_eliciting(
                now,
                self.config.ack_every,
                self.config.max_ack_delay,
                self.config.ack_ride_wait,
                at_once,
            );
        }
        if let Some((unacked, due_us)) = probe
            && self.ack_detour(li).is_some()
        {
            // The peer has heard nothing back on this link for its suspect timeout. If
            // this end reported what it has not heard of long enough before the probe
            // left (two of this link's RTTs as this end knows them, and whatever held the
            // probe on its way: how late it came against `due_us`, the peer's least
            // one-way delay), this end's direction of the link pauses (a cellular
            // uplink's scheduler) or has failed while the peer's delivers: this end's
            // acknowledgements of the link go on another link until what it sends on the
            // link from now on (a PING now, or a suspect link's next probe) is answered
            // (`poll_control`, `docs/protocol.md` 3.12). A probe that waited out a pause
            // or a queue of the peer's own direction, behind what the peer sent before
            // it, is not taken for that: this end acknowledged that just now. The second
            // RTT leaves out what a queue of this end's own direction holds (its own data
            // ahead of the acknowledgements at a slow link's bottleneck): going around
            // on a farther link would not bring them sooner.
            let now_us = now.as_nanos() / 1000;
            let late = if due_us == 0 {
                Duration::ZERO
            } else {
                Duration::from_micros(now_us.saturating_sub(due_us))
            };
            let l = &mut self.links[li];
            let due = l.rtt.srtt * 2 + l.rtt.rttvar * 2 + late;
            if l.acks_around.is_none()
                && l.rx.first_reported(unacked).is_some_and(|t| now - t > due)
            {
                l.acks_around = Some(now);
                if l.state == LinkState::Up {
                    // Something to be answered (a suspect link's own probes are, and
                    // one more would only back them off).
                    l.ping_due = Some(now);
                }
                l.stats.probes_unheard += 1;
            }
        }
        for frame in frames.flatten() {
            self.apply_frame(now, li, frame);
        }
        true
    }

    fn apply_frame(&mut self, now: Instant, arrived_on: usize, frame: wire::Frame<'_>) {
        match frame {
            wire::Frame::Padding | wire::Frame::Ping | wire::Frame::Probe { .. } => {}
            wire::Frame::Ack(ack) => {
                let Some(i) = self.link_index(LinkId(ack.link)) else {
                    return;
                };
                let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
                let same_path = i == arrived_on;
                let alone = !self
                    .links
                    .iter()
                    .enumerate()
                    .any(|(j, l)| j != i && l.state == LinkState::Up && !l.config.backup);
                let waiting = self.data_waiting();
                let l = &mut self.links[i];
                // Data waits and the link's pacer holds its next full-size packet back
                // (`Controller::set_paced_back`).
                let paced_back = waiting && l.pace_next(now) > now;
                if let Some(c) = &mut l.cc {
                    c.set_alone(alone);
                    c.set_paced_back(paced_back);
                }
                let out = self.links[i].on_ack(
                    now,
                    ack.largest,
                    delay,
                    ack.ranges(),
                    same_path,
                    &mut self.pool,
                );
                if i == arrived_on && self.links[i].state == LinkState::Up {
                    // Any acknowledgement that came back over the link itself, duplicate
                    // ones included, shows the link is alive: it re-arms the timer.
                    self.links[i].last_ack_time = now;
                }
                for &(slot, generation) in &out.templates_acked {
                    self.compressor.on_template_acked(slot, generation);
                }
                let mut spurious = false;
                for g in &out.reinjected_acked {
                    spurious |= self.on_original_acked(*g);
                }
                if spurious {
                    // Its timer expired in a pause: what it moved to the other links
                    // went twice.
                    self.links[i].last_spurious = Some(now);
                }
                if out.newly_acked > 0 {
                    self.refresh_codel_interval(now);
                }
                if out
                    .newest_sent
                    .zip(self.links[i].acks_around)
                    .is_some_and(|(sent, since)| sent >= since)
                {
                    // The peer answered what this end sent on the link since it was
                    // probed: this end's direction delivers again.
                    self.links[i].acks_around = None;
                }
                if out.newly_acked > 0 && self.links[i].state == LinkState::Suspect {
                    self.links[i].state = LinkState::Up;
                    self.links[i].probe_backoff = 0;
                    self.on_state_change(now, i, LinkState::Suspect, LinkState::Up);
                }
                let mut out = out;
                self.on_lost(now, std::mem::take(&mut out.lost));
            }
            wire::Frame::LossReport(report) => {
                for e in report.entries() {
                    if let Some(i) = self.link_index(LinkId(e.link)) {
                        let s = &mut self.links[i].stats;
                        s.peer_reported_lost = s.peer_reported_lost.max(e.lost);
                        s.peer_reported_received = s.peer_reported_received.max(e.received);
                        let (id, r, l) = (
                            LinkId(e.link),
                            s.peer_reported_received,
                            s.peer_reported_lost,
                        );
                        self.overflow.on_loss_report(id, r, l);
                        self.policy.on_loss_report(id, r, l);
                    }
                }
            }
            wire::Frame::LinkStatus { link, state } => {
                let Some(i) = self.link_index(LinkId(link)) else {
                    return;
                };
                let peer_down = state == wire::LinkState::Down;
                if peer_down && !self.links[i].peer_down {
                    // The peer cannot use this link: what is in flight on it is lost.
                    self.reinject_from(now, i, ReinjectCause::LinkDown, None);
                }
                let l = &mut self.links[i];
                let local = l.local_down;
                if let Some(from) = l.set_down_flags(local, peer_down) {
                    let to = l.state;
                    self.on_state_change(now, i, from, to);
                }
            }
            wire::Frame::LinkMtu { link, max_datagram } => {
                if let Some(i) = self.link_index(LinkId(link)) {
                    // Every IPv4 host takes 576-byte datagrams (RFC 791): a smaller
                    // figure is the peer's mistake, and would only shrink every packet.
                    let max = Some(usize::from(max_datagram).max(MIN_PEER_DATAGRAM));
                    if self.links[i].peer_max_datagram != max {
                        self.links[i].peer_max_datagram = max;
                        self.links[i].pmtu_restart();
                        self.links_changed();
                    }
                }
            }
            wire::Frame::Data(data) => self.on_data(now, arrived_on, data),
            wire::Frame::RxTime {
                link,
                pn,
                received_us,
            } => {
                if let Some(i) = self.link_index(LinkId(link)) {
                    self.links[i].on_rx_time(now, pn, received_us);
                }
            }
        }
    }

    fn on_data(&mut self, now: Instant, arrived_on: usize, data: wire::DataFrame<'_>) {
        self.stats.data_received += 1;
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        let flow_id = match data.form {
            wire::DataForm::Full => {
                buf.extend_from_slice(data.payload);
                data.flow_id
            }
            wire::DataForm::Template {
                slot,
                generation,
                hlen,
                ipv4_checksum,
            } => {
                // Kept even from a duplicate: the sender counts on it once any copy is
                // acknowledged (3.9).
                self.stats.templates_received += 1;
                let template = &data.payload[..usize::from(hlen)];
                self.decompressor
                    .store(slot, generation, data.flow_id, template, ipv4_checksum);
                buf.extend_from_slice(data.payload);
                data.flow_id
            }
            wire::DataForm::Compact { slot, generation } => {
                match self
                    .decompressor
                    .expand(slot, generation, data.payload, &mut buf)
                {
                    Ok(flow_id) => flow_id,
                    Err(_) => {
                        self.stats.compact_undecodable += 1;
                        self.recycle(buf);
                        return;
                    }
                }
            }
        };
        let flow = crate::ids::FlowId(flow_id);
        let gseq = wire::expand(data.global_seq, self.dedup.expected());
        match self.dedup.check_and_insert(gseq) {
            Seen::New => {}
            seen => {
                self.recycle(buf);
                if seen == Seen::Duplicate {
                    self.stats.duplicate_data += 1;
                } else {
                    self.stats.too_old_data += 1;
                }
                // A duplicate came over a link the flow uses all the same (a redundant
                // flow's second copies).
                if seen == Seen::Duplicate {
                    self.reorder.note_copy(now, flow, gseq, arrived_on);
                } else {
                    self.reorder.note_link(now, flow, arrived_on);
                }
                return;
            }
        }
        if data.recovered {
            self.links[arrived_on].rx.recovered_at = Some(now);
        }
        let fseq = wire::expand(data.flow_seq, self.reorder.expected(flow));
        let mut hold = self.hold_time_at(now);
        if data.recovered
            && self.config.reorder_hold.is_none()
            && let Some(wait) = self.recovery_wait()
        {
            hold = hold.max(wait.min(self.config.reorder_hold_max));
        }
        // The links that may still bring a flow's missing packet (`Reorder::skip_lost`),
        // and those not up here (`reorder.rs` `quiet`).
        let (mut live, mut not_up) = (0u64, 0u64);
        for (i, l) in self.links.iter().enumerate().take(64) {
            live |= u64::from(l.state != LinkState::Down) << i;
            not_up |= u64::from(l.state != LinkState::Up) << i;
        }
        (self.reorder.live, self.reorder.not_up) = (live, not_up);
        self.reorder
            .insert_copy(now, hold, flow, arrived_on, gseq, fseq, buf, data.recovered);
    }

    fn on_lost(&mut self, now: Instant, mut lost: Vec<SentPacket>) {
        self.forget_lost(now, &mut lost);
    }

    /// Packets declared lost: counted, their payloads recycled; a packet whose payload was
    /// reinjected is resolved (nothing left to cancel or count). A packet of a flow whose
    /// losses are sent again ([`SentData::recover`]) is sent again if a link it may take
    /// is up ([`Self::may_send_again`]); its original is gone from the link's records, so
    /// there is nothing to cancel it by.
    fn forget_lost(&mut self, now: Instant, lost: &mut Vec<SentPacket>) {
        self.stats.lost += lost.len() as u64;
        if lost.iter().any(|p| p.status) {
            // A LINK_STATUS may not have reached the peer: every link's state is told
            // again (the same frame twice changes nothing there).
            for l in &mut self.links {
                l.announce = true;
            }
            self.stats.link_status_lost += 1;
            self.links_changed();
        }
        for p in lost.drain(..) {
            if let Some(d) = p.data {
                if let TxForm::Template {
                    slot, generation, ..
                } = d.form
                {
                    self.compressor.on_template_lost(slot, generation);
                }
                if d.taken {
                    self.reinject_state.remove(&d.global_seq);
                } else if d.recover
                    && self.config.reinjection != ReinjectTimer::Off
                    && self.may_send_again(&d)
                {
                    self.stats.reinjected_lost += 1;
                    self.queue_reinjection(now, d, false, false);
                } else {
                    self.recycle(d.payload);
                }
            }
        }
    }

    /// Whether a link that a packet declared lost may take is up (4.4): one it was not
    /// sent on, which includes the link it was first found lost on
    /// ([`SentData::lost_on`]) for an aggregate flow's packet, and for a `min-rtt` TCP
    /// segment when no other link is up (its resend goes on another link if one is).
    fn may_send_again(&self, d: &SentData) -> bool {
        let up = || self.links.iter().filter(|l| l.state == LinkState::Up);
        let alone = up().nth(1).is_none();
        up().any(|l| {
            d.sent_on & link_bit(l.id) == 0 && (d.spread || alone || d.lost_on != Some(l.id))
        })
    }

    /// Whether a loss of a packet bound to link `li` now may be sent again (4.4): with
    /// another link up, always; alone, only while its rate control has its queue to
    /// itself (not competing): a loss is then the path's, while a FIFO shared with
    /// another sender, overflowing, would most likely drop the resend too, and the
    /// receiver's wait for it would hold the inner TCP's answer to the congestion back
    /// (a download starting second behind another's full FIFO: 0.80 -> 0.50 Mbit/s in
    /// `crates/sim/tests/ratecontrol.rs`). A link without rate control cannot tell.
    /// The packet goes as DATA_RECOVERED only if so (5.2).
    fn repairs_on(&self, li: usize) -> bool {
        let l = &self.links[li];
        l.cc.as_ref().is_some_and(|c| !c.competitive())
            || self
                .links
                .iter()
                .any(|o| o.id != l.id && o.state == LinkState::Up)
    }

    /// The original of a reinjected packet was acknowledged: cancel the reinjection if it
    /// still waits, else count it as spurious. Returns whether it was a spurious expiry of
    /// the original's link's timer (not a resend into idle capacity).
    fn on_original_acked(&mut self, gseq: u64) -> bool {
        match self.reinject_state.remove(&gseq) {
            Some(Resend { sent: false, .. }) => {
                if let Some(pos) = self.reinject.iter().position(|p| p.data.global_seq == gseq) {
                    let p = self.reinject.remove(pos).expect("found");
                    self.recycle(p.data.payload);
                    self.stats.reinjections_cancelled += 1;
                }
                false
            }
            Some(Resend { sent: true, idle }) => {
                self.stats.reinjections_spurious += 1;
                !idle
            }
            None => false,
        }
    }

    /// Takes link `i`'s unacknowledged inner packets for reinjection on other links.
    fn reinject_from(
        &mut self,
        now: Instant,
        i: usize,
        cause: ReinjectCause,
        left_by: Option<(Instant, Instant)>,
    ) {
        if self.config.reinjection == ReinjectTimer::Off {
            return;
        }
        let mut taken = std::mem::take(&mut self.reinject_scratch);
        let n = match left_by {
            Some((t, before)) => self.links[i].take_unacked_data_left_by(t, before, &mut taken),
            None => self.links[i].take_unacked_data(&mut taken),
        };
        let after_ack = now - self.links[i].last_ack_time;
        if n > 0 {
            // Its load moves to the other links: their windows must not hold it back.
            if let Some(rate) = self.links[i].cc.as_ref().map(|c| c.carried_rate()) {
                let backlog = taken.iter().map(|d| d.payload.len()).sum();
                for (j, l) in self.links.iter_mut().enumerate() {
                    if j != i && l.state == LinkState::Up {
                        l.take_over(now, rate, backlog);
                    }
                }
            }
            self.links[i].stats.last_reinject_after = after_ack;
            self.stats.reinject_after_max = self.stats.reinject_after_max.max(after_ack);
            match cause {
                ReinjectCause::Timer => self.stats.reinjected_timer += n as u64,
                ReinjectCause::LinkDown => self.stats.reinjected_link_down += n as u64,
            }
            self.events.push_back(Event::Reinjected {
                link: self.links[i].id,
                cause,
                packets: n,
                after_ack,
            });
        }
        for data in taken.drain(..) {
            self.queue_reinjection(now, data, true, false);
        }
        self.reinject_scratch = taken;
        self.links_changed();
    }

    /// Queues an inner packet to be sent again on a link it was not sent on; with
    /// `cancellable`, an acknowledgement of the original cancels it (or counts it as
    /// spurious once sent). `idle`: see [`Resend::idle`].
    fn queue_reinjection(&mut self, now: Instant, data: SentData, cancellable: bool, idle: bool) {
        if cancellable {
            self.reinject_state
                .insert(data.global_seq, Resend { sent: false, idle });
        }
        // Keep the queue in global order (packets from several links interleave).
        let pos = self
            .reinject
            .partition_point(|p| p.data.global_seq < data.global_seq);
        self.reinject.insert(
            pos,
            Pending {
                data,
                since: now,
                remaining: 1,
                round: 0,
            },
        );
    }

    fn on_state_change(&mut self, now: Instant, i: usize, from: LinkState, to: LinkState) {
        self.links_changed();
        let l = &mut self.links[i];
        match to {
            LinkState::Suspect => {
                l.stats.suspected += 1;
                l.suspect_since = now;
                l.ping_due = Some(now);
            }
            LinkState::Down => {
                l.rej_aging = None;
                l.stats.went_down += 1;
            }
            LinkState::Up => {
                l.rej_aging = None;
                if from == LinkState::Suspect {
                    let d = now - l.suspect_since;
                    l.stats.longest_suspect = l.stats.longest_suspect.max(d);
                }
                if from == LinkState::Down {
                    // It may be another path now (another cell, another access point):
                    // measured again from the start, as after a change of address.
                    l.reset_path(now, self.config.initial_rtt);
                }
                // Measure it again at once.
                l.ping_due = Some(now);
                l.last_ack_time = now;
            }
        }
        self.events.push_back(Event::LinkStateChanged {
            link: l.id,
            from,
            to,
        });
    }

    /// Timers: loss detection, suspicion, probes, keepalives, loss reports, reorder holds,
    /// housekeeping. Safe to call at any time.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.links_changed();
        let mut lost = std::mem::take(&mut self.lost_scratch);
        for i in 0..self.links.len() {
            let l = &mut self.links[i];
            if l.loss_time().is_some_and(|t| t <= now) {
                l.detect_lost(now, &mut lost);
            }
            // What the timer's last expiry left behind, as it ages, while the link stays
            // suspect (4.4).
            if let Some((wait, before)) = l.rej_aging {
                match l.aging_deadline() {
                    None => l.rej_aging = None,
                    Some(t) if t <= now => {
                        let left_by = now.saturating_sub(wait).min(before);
                        self.reinject_from(now, i, ReinjectCause::Timer, Some((left_by, before)));
                    }
                    Some(_) => {}
                }
            }
            let l = &mut self.links[i];
            match l.state {
                LinkState::Up => {
                    if let Some((_, wait)) = l
                        .rej_deadline_and_wait(&self.config)
                        .filter(|&(t, _)| t <= now)
                    {
                        // A link that lately paused is likely in another pause: its
                        // packets go as each reaches the age the oldest had, so that
                        // what the pause's end finds younger is not sent twice. Any
                        // other is likely cut: all at once (4.4).
                        let left_by = l
                            .paused_lately(now)
                            .then(|| (now.saturating_sub(wait), now));
                        l.rej_aging = left_by.map(|_| (wait, now));
                        l.state = LinkState::Suspect;
                        l.probe_backoff = 0;
                        l.stats.rej_expired += 1;
                        self.reinject_from(now, i, ReinjectCause::Timer, left_by);
                        self.on_state_change(now, i, LinkState::Up, LinkState::Suspect);
                    }
                }
                LinkState::Suspect | LinkState::Down => {
                    // Give up on packets that a silent or dead link has held for several
                    // timeouts.
                    l.expire_in_flight(
                        now,
                        self.config.max_ack_delay,
                        self.config.suspect_min,
                        &mut lost,
                    );
                }
            }
            let l = &mut self.links[i];
            if l.state != LinkState::Down
                && l.ping_due.is_none()
                && now - l.last_eliciting_sent >= self.probe_interval(i)
            {
                self.links[i].ping_due = Some(now);
            }
        }
        self.forget_lost(now, &mut lost);
        self.lost_scratch = lost;
        if now >= self.next_loss_report {
            self.loss_report_due = self.links.iter().any(|l| l.rx.received > 0);
            self.next_loss_report = now + self.config.loss_report_interval;
        }
        self.expire_reinjections(now);
        self.expire_copies(now);
        self.reorder.handle_timeout(now);
        if now >= self.next_housekeeping {
            self.queues.expire_idle(now);
            self.reorder
                .expire_idle(now, self.config.flow_idle_timeout * 2);
            self.next_housekeeping = now + Duration::from_secs(1);
        }
    }

    /// How long a link may go without an ack-eliciting datagram before it gets a PING:
    /// the keepalive interval when up, the suspect timeout with exponential backoff (up
    /// to one keepalive interval) when suspect. An up link judged by a stale smoothed RTT
    /// ([`Link::rtt_stale`]) is probed every smoothed RTT instead while an aggregate flow
    /// waited with a link free since its last probe: the policy then judges it by its
    /// samples of the last two seconds, and a link it leaves out is sampled by nothing
    /// else.
    fn probe_interval(&self, i: usize) -> Duration {
        let l = &self.links[i];
        match l.state {
            LinkState::Suspect => {
                let base = l.suspect_timeout(self.config.max_ack_delay, self.config.suspect_min);
                (base * (1 << l.probe_backoff.min(10))).min(self.config.keepalive_interval)
            }
            LinkState::Up
                if l.rtt_stale(l.last_eliciting_sent)
                    && self
                        .aggregate_left_out
                        .is_some_and(|t| t >= l.last_eliciting_sent) =>
            {
                l.rtt.srtt.min(self.config.keepalive_interval)
            }
            _ => self.config.keepalive_interval,
        }
    }

    // ---- outputs ----

    /// The next datagram to send, written into `buf` (cleared first). Call until `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.poll_transmit_ahead(now, Duration::ZERO, buf)
    }

    /// [`Self::poll_transmit`] with a binding horizon φ (the precise-dispatch stage,
    /// DESIGN.md 2): a packet is bound to a link whose pacer allows it within `horizon`
    /// of `now`, and [`Transmit::send_at`] is its slot, which the driver keeps (a sender
    /// thread emits it then). It counts below the binding point from now until the
    /// driver reports its departure (`handle_tx_done`), so the budget bounds how many
    /// packets are bound ahead; it is recorded as sent at its slot (RTT, pacing, the
    /// interface rate). Control datagrams are not paced: they go at `now`, or behind the
    /// link's latest slot, so a link's datagrams leave in packet-number order. A zero
    /// horizon is `poll_transmit`. Keep `horizon` the same from call to call: the
    /// pacing timer of [`Self::poll_timeout`] comes `horizon` early.
    pub fn poll_transmit_ahead(
        &mut self,
        now: Instant,
        horizon: Duration,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        self.horizon = horizon;
        buf.clear();
        self.last_poll = now;
        for l in &mut self.links {
            if let Some(due) = l.pacer_due.take() {
                l.pacer.catch_up(now, due);
            }
        }
        if let Some(t) = self.poll_control(now, buf) {
            return Some(t);
        }
        let t = self.poll_data(now, buf);
        if t.is_none() {
            self.note_pacer_dues(now, horizon);
        }
        t
    }

    /// Whether data waits above the binding point: new packets, a dead link's packets to
    /// send again, or copies of urgent ones.
    fn data_waiting(&self) -> bool {
        !self.queues.is_empty() || !self.reinject.is_empty() || !self.copies.is_empty()
    }

    /// The end of a round of sending (`poll_transmit` has nothing more now): each link's
    /// pacer drops what it was owed and did not use, and notes when it is to release the
    /// next packet if one waits for it and only the pacer holds it back (not the window,
    /// not the budget below the binding point, not the policy), beyond the binding
    /// horizon. When the driver comes back later than that, the link is owed the
    /// difference ([`crate::link::Pacer::catch_up`]).
    fn note_pacer_dues(&mut self, now: Instant, horizon: Duration) {
        let waiting = self.data_waiting();
        let budget = self.config.budget_packets;
        for l in &mut self.links {
            l.pacer.settle();
            let room = l.state == LinkState::Up
                && l.below_len() < budget
                && l.cc
                    .as_ref()
                    .is_none_or(|c| l.bytes_in_flight + 1500 <= c.cwnd());
            // The pacer holds the link only if its next release is beyond what the round
            // could bind (a link the policy passed over with tokens to spare is not owed
            // anything for it).
            let due = l.pacer.next_send(now, 1500);
            l.pacer_due = (waiting && room && l.paced() && due > now + horizon).then_some(due);
        }
    }

    /// The link control datagrams go on when their own link cannot carry them: the up link
    /// with the lowest RTT.
    fn control_link(&self, avoid: Option<usize>) -> Option<usize> {
        (0..self.links.len())
            .filter(|&i| {
                Some(i) != avoid
                    && self.links[i].state != LinkState::Down
                    && !self.links[i].local_down
            })
            .min_by_key(|&i| (self.links[i].state != LinkState::Up, self.links[i].rtt.srtt))
    }

    /// The link that carries link `i`'s acknowledgements while this end's own direction of
    /// `i` goes unanswered (the peer probed it, 3.12): the up link with the lowest RTT,
    /// not a backup one (those carry nothing while another link is up). None when there
    /// is no such link: then they stay on `i`.
    fn ack_detour(&self, i: usize) -> Option<usize> {
        (0..self.links.len())
            .filter(|&j| {
                j != i
                    && self.links[j].state == LinkState::Up
                    && !self.links[j].local_down
                    && !self.links[j].config.backup
            })
            .min_by_key(|&j| self.links[j].rtt.srtt)
    }

    /// Where a copy of link `i`'s ACK that tells the peer of a loss goes (an ACK may go
    /// on any link, 3.2): the up link of least smoothed RTT, if that is less than link
    /// `i`'s least. The peer sends the lost packet again that much sooner, and the
    /// receiver's reorder buffer holds the flow behind it that much less.
    fn ack_shortcut(&self, i: usize) -> Option<usize> {
        self.ack_detour(i).filter(|&j| {
            self.links[i].rtt.has_sample && self.links[j].rtt.srtt < self.links[i].rtt.min
        })
    }

    /// Whether link `i`'s acknowledgement waits for a data packet to carry it: the link's
    /// budget below the binding point is full and data waits above it, so an
    /// acknowledgement alone would only queue behind that data. The next packet bound to
    /// the link when a slot frees carries it (or it goes alone then). The departure that
    /// frees the slot is an input, so no timer is needed meanwhile.
    fn ack_deferred(&self, i: usize) -> bool {
        !self.links[i].rx.ack_rides_not
            && self.links[i].below_len() >= self.config.budget_packets
            && self.data_waiting()
    }

    fn poll_control(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if now < self.control_idle_until {
            return None;
        }
        for i in 0..self.links.len() {
            // A path MTU probe (4.2): PADDING to the size probed, not ack-eliciting (its
            // loss must not make the link suspect); a PING right after it brings the ACK
            // that tells whether it came.
            if let Some(size) = self.links[i].pmtu_probe_due(now) {
                self.write_header(i, buf);
                wire::emit_padding(buf, size.saturating_sub(buf.len()));
                let t = self.finish(now, i, buf, false, None, false);
                let l = &mut self.links[i];
                l.pmtu_probe_sent(now, size);
                l.ping_due = Some(now);
                self.stats.pmtu_probes_sent += 1;
                return Some(t);
            }
        }
        for i in 0..self.links.len() {
            if !std::mem::take(&mut self.links[i].rx.cross_due) {
                continue;
            }
            // A gap on link i just became deep enough for the peer to take its packets
            // for lost: a copy of the link's ACK goes at once on the link whose way back
            // is shortest, so the peer sends them again sooner (4.3). The ACK itself
            // still goes on link i as it falls due: the copy may be lost, or that link
            // broken without this end knowing yet. Only for a link that carried a packet
            // of a flow whose losses the peer sends again within `reorder_hold_max` (the
            // longest the receiver holds a gap): the peer sends nothing else again, and
            // a sender whose window frees sooner only fills a full queue sooner.
            let repaired = self.links[i]
                .rx
                .recovered_at
                .is_some_and(|t| now - t <= self.config.reorder_hold_max);
            let Some(j) = self.ack_shortcut(i).filter(|_| repaired) else {
                continue;
            };
            self.write_header(j, buf);
            if !self.write_ack_copy(now, i, buf) {
                // A datagram carries at least one frame (2.3).
                buf.clear();
                continue;
            }
            self.links[i].stats.acks_shortcut += 1;
            return Some(self.finish(now, j, buf, false, None, false));
        }
        let announce = self.links.iter().any(|l| l.announce);
        for i in 0..self.links.len() {
            let ack_due = self.links[i].rx.ack_deadline.is_some_and(|d| d <= now);
            let ping_due = self.links[i].ping_due.is_some_and(|d| d <= now);
            if !(ack_due || ping_due || announce && self.links[i].state != LinkState::Down) {
                continue;
            }
            if !ping_due && !announce && !self.loss_report_due && self.ack_deferred(i) {
                continue;
            }
            // Where this datagram goes: on link i itself if it can carry anything, else on
            // another link (acks name the link they acknowledge).
            let usable = !self.links[i].local_down && self.links[i].state != LinkState::Down;
            // The peer probed link i as silent (PROBE) and this end's own direction of it
            // has not been answered since: its acknowledgements go on an up link instead,
            // so the peer's data on link i (a cellular uplink's scheduler pauses while its
            // downlink delivers) is not taken for lost meanwhile. A PING due on link i
            // still goes there, alone, first.
            let around = (usable && self.links[i].acks_around.is_some())
                .then(|| self.ack_detour(i))
                .flatten();
            let ack_due = ack_due && !(around.is_some() && ping_due);
            let via = if let Some(j) = around.filter(|_| !ping_due) {
                Some(j)
            } else if usable {
                Some(i)
            } else {
                self.control_link(Some(i))
            };
            let Some(via) = via else {
                // Nowhere to send: acks are cumulative and pings will be due again.
                self.links[i].rx.ack_deadline = None;
                self.links[i].ping_due = None;
                continue;
            };
            self.write_header(via, buf);
            let mut eliciting = false;
            if ack_due {
                self.write_ack(now, i, buf, true, None);
                if around.is_some() {
                    self.links[i].stats.acks_around += 1;
                }
                if via != i {
                    // Not this link's datagram: its record cannot confirm the ACK.
                    self.links[i].rx.written = None;
                }
            }
            if via != i && self.links[via].rx.ack_deadline.is_some() {
                self.write_ack(now, via, buf, true, None);
            }
            let announced = announce && self.write_link_status(buf);
            eliciting |= announced;
            if self.loss_report_due {
                self.write_loss_report(buf);
            }
            let mut told_mtu = false;
            if ping_due && via == i {
                if self.links[i].state == LinkState::Suspect {
                    // It may be only this end that hears nothing (3.12).
                    let l = &self.links[i];
                    let unacked = l.largest_heard.map_or(0, |l| l + 1);
                    let due_us = l.unqueued_arrival_us(now);
                    wire::emit_probe(buf, unacked, due_us);
                } else {
                    wire::emit_ping(buf);
                }
                if let Some(max) = self.links[i].config.max_datagram {
                    // What this end takes whole on the link, on every probe of it (a
                    // lost one is probed again at once, 3.8).
                    let max = u16::try_from(max).unwrap_or(u16::MAX);
                    wire::emit_link_mtu(buf, self.links[i].id.0, max);
                    told_mtu = true;
                }
                self.links[i].ping_due = None;
                self.links[i].stats.pings_sent += 1;
                if self.links[i].state == LinkState::Suspect {
                    self.links[i].probe_backoff += 1;
                    // A probe of a suspect link is padded: its answer then shows the link
                    // carries full-size datagrams again, and a middlebox that keeps state
                    // (carrier NAT) sees real traffic.
                    wire::emit_padding(buf, PROBE_BYTES.saturating_sub(buf.len()));
                }
                eliciting = true;
            } else if ping_due {
                // A probe of a link that cannot carry it is not sent elsewhere.
                self.links[i].ping_due = None;
            }
            if buf.len() == wire::HEADER_LEN {
                // Nothing was owed after all: a datagram carries at least one frame (2.3).
                buf.clear();
                continue;
            }
            let t = self.finish(now, via, buf, eliciting, None, false);
            if announced || told_mtu {
                self.links[via].mark_last_sent(announced, told_mtu);
            }
            return Some(t);
        }
        if self.loss_report_due
            && let Some(via) = self.control_link(None)
        {
            self.write_header(via, buf);
            self.write_loss_report(buf);
            return Some(self.finish(now, via, buf, false, None, false));
        }
        // Nothing is due now. What could become due by itself is an acknowledgement or a
        // probe at its deadline; anything else needs an input, which clears this.
        self.control_idle_until = self
            .links
            .iter()
            .flat_map(|l| [l.rx.ack_deadline, l.ping_due])
            .flatten()
            .min()
            .unwrap_or(Instant::MAX);
        None
    }

    /// Brings the policy's link views up to date for a binding at `now`.
    fn refresh_views(&mut self, now: Instant) {
        let budget = self.config.budget_packets;
        let views = &mut self.views;
        if self.views_stale {
            views.clear();
            views.extend(self.links.iter().map(|l| l.view(now, budget)));
            if !views.iter().any(|v| v.state == LinkState::Up) {
                // No link is up: a suspect link may only be slow (a cellular link's
                // scheduler can hold everything for a second), and there is nowhere
                // better to send. The link suspected last (the others have been silent
                // longer) is offered to the policies as usable; probing goes on, and
                // reinjection still avoids the links a packet was sent on.
                let freshest = self
                    .links
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| l.state == LinkState::Suspect)
                    .max_by_key(|(_, l)| l.suspect_since)
                    .map(|(i, _)| i);
                if let Some(i) = freshest {
                    views[i].state = LinkState::Up;
                }
            }
            self.views_stale = false;
        } else if self.any_paced {
            for (v, l) in views.iter_mut().zip(&self.links) {
                (v.pacer_next, v.pace_next) = l.pacer_times(now);
            }
        } else {
            for v in views.iter_mut() {
                v.pacer_next = now;
                v.pace_next = now;
            }
        }
    }

    /// With a binding horizon, a link whose pacer allows a packet within it has room now:
    /// the views' `pacer_next` move the horizon earlier (until the next refresh, which
    /// recomputes them).
    fn views_ahead(&mut self) {
        if self.horizon.is_zero() {
            return;
        }
        for v in &mut self.views {
            v.pacer_next = v.pacer_next.saturating_sub(self.horizon);
            v.pace_next = v.pace_next.saturating_sub(self.horizon);
        }
    }

    /// Gives the reinjections at the head of the queue back to their link while it has
    /// answered since they were taken (`Link::give_back`): a link whose timer expired in
    /// a pause delivers what it holds once the pause ends, and a copy sent then would go
    /// twice. Only those its timer took and not yet sent (not the packets declared lost,
    /// nor those late ones sent into idle capacity), and only of flows whose losses are
    /// sent again ([`SentData::recover`]): the link may still lose one at its
    /// bottleneck, and then its loss detection sends it again; a call's packet would be
    /// lost for good.
    fn give_back_answered(&mut self) {
        while let Some(front) = self.reinject.front() {
            let gseq = front.data.global_seq;
            let sent_on = front.data.sent_on;
            // Queued by a timer or a link going down (cancellable), not into idle capacity.
            let queued_by_timer = matches!(
                self.reinject_state.get(&gseq),
                Some(Resend { idle: false, .. })
            );
            if !(front.data.recover && queued_by_timer) {
                return;
            }
            let mut p = self.reinject.pop_front().expect("checked");
            let back = self
                .links
                .iter_mut()
                .filter(|l| sent_on & link_bit(l.id) != 0)
                .any(|l| l.give_back(&mut p.data));
            if !back {
                self.reinject.push_front(p);
                return;
            }
            self.reinject_state.remove(&gseq);
            self.stats.reinjections_returned += 1;
        }
    }

    /// Gives up reinjections that no link could take within `reinject_max_age`.
    fn expire_reinjections(&mut self, now: Instant) {
        let max_age = self.config.reinject_max_age;
        // The queue is in global-sequence order, not in order of age (links fail at
        // different times): look at every entry.
        if !self.reinject.iter().any(|p| p.since + max_age <= now) {
            return;
        }
        let mut kept = VecDeque::with_capacity(self.reinject.len());
        for p in std::mem::take(&mut self.reinject) {
            if p.since + max_age <= now {
                self.reinject_state.remove(&p.data.global_seq);
                self.stats.reinjections_expired += 1;
                self.recycle(p.data.payload);
            } else {
                kept.push_back(p);
            }
        }
        self.reinject = kept;
    }

    fn copy_max_age(&self) -> Duration {
        self.links
            .iter()
            .filter(|l| l.state == LinkState::Up)
            .map(|l| l.rtt.srtt)
            .max()
            .unwrap_or(self.config.initial_rtt)
            .max(self.config.rej_min)
    }

    /// Gives up copies that no other link could take within a round trip (the largest
    /// SRTT of the links that are up, at least `rej_min`): by then the original has
    /// arrived or been lost, and a late copy only adds load.
    fn expire_copies(&mut self, now: Instant) {
        let max_age = self.copy_max_age();
        while self
            .copies
            .front()
            .is_some_and(|p| p.since + max_age <= now)
        {
            let p = self.copies.pop_front().expect("checked");
            self.stats.redundant_copies_expired += p.remaining as u64;
            self.recycle(p.data.payload);
        }
    }

    /// The binding point for packets sent again (reinjections, redundant copies): the
    /// oldest waiting packet goes on the link MinRtt prefers among those it was never sent
    /// on (and of the links `only`, bits), if that link has room now.
    fn poll_again(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        which: Again,
        only: u64,
    ) -> Option<Transmit> {
        let queue = match which {
            Again::Reinject => {
                self.expire_reinjections(now);
                self.give_back_answered();
                &self.reinject
            }
            Again::Copy => {
                self.expire_copies(now);
                &self.copies
            }
        };
        let front = queue.front()?;
        // A reinjection never goes twice on one link; a copy not twice in one round.
        let taken = match which {
            Again::Reinject => front.data.sent_on,
            Again::Copy => front.round,
        };
        let (lost_on, spread) = (front.data.lost_on, front.data.spread);
        let meta = PacketMeta {
            flow: front.data.flow,
            len: wire::DATA_OVERHEAD + front.data.payload.len(),
            latency_sensitive: which == Again::Copy,
            backlog: 0,
        };
        self.refresh_views(now);
        self.views_ahead();
        let mut views = std::mem::take(&mut self.reinject_views);
        views.clear();
        views.extend(self.views.iter().map(|v| {
            let mut v = *v;
            if taken & link_bit(v.id) != 0 || only & link_bit(v.id) == 0 {
                // Not twice on one link (in one round of copies), and only on the links
                // asked for: hide it from the policy.
                v.state = LinkState::Down;
            }
            v
        }));
        // A copy on a suspect link does not count against `redundant_links`.
        let mut extra = false;
        let mut new_round = false;
        if which == Again::Copy && crate::policy::usable(&views).next().is_none() {
            // Every usable link already carries this packet (one link left). A suspect
            // link that does not gets a copy first: a single loss makes a link suspect
            // for a round trip, and a copy there is the one that survives if the usable
            // link dies meanwhile. Then a new round of copies starts over every link,
            // so that one loss there does not lose the packet.
            // (Not a backup link: those carry nothing while another link is up.)
            let spare = |v: &LinkView| v.state == LinkState::Suspect && !v.backup;
            extra = views.iter().any(spare);
            if extra {
                for v in views.iter_mut() {
                    v.state = if spare(v) {
                        LinkState::Up
                    } else {
                        LinkState::Down
                    };
                }
            } else {
                views.clear();
                views.extend_from_slice(&self.views);
                new_round = true;
            }
        }
        if which == Again::Reinject {
            if spread {
                hide_lossy_again(now, lost_on, meta.len, &mut views);
            } else {
                hide_unless_alone(lost_on, &mut views);
            }
        }
        let fits = crate::policy::hide_links_too_small(&mut views, meta.len);
        if !fits && which == Again::Copy && views.iter().any(|v| v.state != LinkState::Down) {
            // No link left for this copy carries it whole: a copy is not worth sending
            // to be fragmented (a reinjection is: it is the packet's only chance).
            self.reinject_views = views;
            self.copies.pop_front();
            self.stats.redundant_copies_too_big += 1;
            return None;
        }
        let chosen = MinRtt
            .bind(now, &meta, &views)
            .link()
            .and_then(|id| views.iter().position(|v| v.id == id))
            .filter(|&i| views[i].has_room(now));
        self.reinject_views = views;
        let li = chosen?;
        let queue = match which {
            Again::Reinject => &mut self.reinject,
            Again::Copy => &mut self.copies,
        };
        let Pending {
            mut data,
            since,
            remaining,
            round,
        } = queue.pop_front().expect("checked");
        self.note_oversized(li, data.payload.len());
        // The form it was first sent in, as far as it still holds: its template is still
        // in its slot, a template fits this link.
        data.form = match data.form {
            TxForm::Compact { slot, generation }
                if !self.compressor.prepare(slot, generation, &data.payload) =>
            {
                TxForm::Full
            }
            TxForm::Template { .. } if !self.template_fits(li, data.payload.len()) => TxForm::Full,
            form => form,
        };
        self.write_data_datagram(now, li, buf, &data);
        data.sent_on |= link_bit(self.links[li].id);
        match which {
            Again::Reinject => {
                if let Some(r) = self.reinject_state.get_mut(&data.global_seq) {
                    r.sent = true;
                }
                self.stats.reinjections_sent += 1;
            }
            Again::Copy => {
                self.stats.redundant_copies_sent += 1;
                let left = if extra { remaining } else { remaining - 1 };
                if left > 0 {
                    // The next copy goes on yet another link.
                    self.copies.push_front(Pending {
                        data: SentData {
                            payload: data.payload.clone(),
                            ..data
                        },
                        since,
                        remaining: left,
                        round: if new_round { 0 } else { round } | link_bit(self.links[li].id),
                    });
                }
            }
        }
        self.links[li].stats.data_sent += 1;
        Some(self.finish(now, li, buf, true, Some(data), false))
    }

    fn poll_data(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        // Copies of latency-critical packets first, then new data of sparse and
        // latency-sensitive flows (a dead link's load must not delay them: it may be a
        // whole window), then a dead link's packets, then the backlogged flows.
        if !self.copies.is_empty()
            && let Some(t) = self.poll_again(now, buf, Again::Copy, u64::MAX)
        {
            return Some(t);
        }
        if !self.reinject.is_empty() {
            if let Some(t) = self.poll_queues(now, buf, true) {
                return Some(t);
            }
            // A packet that was taken from behind its flow's head, sent again, waits for
            // the packets that were ahead of it and are still queued: sent first, it
            // would hold them up, and the receiver everything behind them.
            if self
                .reinject
                .front()
                .is_some_and(|p| self.queues.numbered_ahead_of(p.data.flow, p.data.flow_seq))
                && let Some(t) = self.poll_queues(now, buf, false)
            {
                return Some(t);
            }
            if let Some(t) = self.poll_again(now, buf, Again::Reinject, u64::MAX) {
                return Some(t);
            }
        }
        let t = self.poll_queues(now, buf, false);
        if t.is_some()
            || self.data_waiting()
            || !self.config.rate_control
            || self.config.reinjection == ReinjectTimer::Off
        {
            return t;
        }
        self.poll_late(now, buf)
    }

    /// Idle capacity: nothing waits above the binding point and a link has room. An
    /// aggregate flow's packet late on another link goes again on one of the links with
    /// room (4.4): the receiver holds the flow's later packets behind it, and the flow's
    /// transport waits for them, so the capacity would otherwise go unused until the
    /// slow link delivers (MPTCP's opportunistic retransmission). Late: unacknowledged
    /// after twice its link's minimum RTT plus `max_ack_delay` and the longest queue
    /// rate control aims for (`rate_control_max_queue`), what a packet takes at most
    /// while the link delivers as its window expects; later than that it waits out a
    /// pause of the link or a fall of its rate. Oldest first, one per call.
    fn poll_late(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let slack = self.config.max_ack_delay + self.config.rate_control_max_queue;
        let late_before = |l: &Link| now.saturating_sub(l.rtt.min * 2 + slack);
        let mut order = std::mem::take(&mut self.late_order);
        order.clear();
        order.extend(self.links.iter().enumerate().filter_map(|(j, l)| {
            (l.in_flight > 0)
                .then(|| l.oldest_unacked())
                .flatten()
                .filter(|&t| t < late_before(l))
                .map(|t| (t, j))
        }));
        // Only then the links' views (most calls end here: nothing is late).
        let room = if order.is_empty() {
            0
        } else {
            self.refresh_views(now);
            self.views
                .iter()
                .filter(|v| v.has_room(now) && !v.backup)
                .fold(0u64, |m, v| m | link_bit(v.id))
        };
        order.retain(|&(_, j)| room & !link_bit(self.links[j].id) != 0);
        order.sort_unstable();
        let mut taken = None;
        for &(_, j) in &order {
            let before = late_before(&self.links[j]);
            let to = room & !link_bit(self.links[j].id);
            if let Some(data) = self.links[j].take_late_data(before, to) {
                taken = Some(data);
                break;
            }
        }
        self.late_order = order;
        let data = taken?;
        self.stats.reinjected_idle += 1;
        self.queue_reinjection(now, data, true, true);
        self.poll_again(now, buf, Again::Reinject, room)
    }

    /// The binding point for new data: the flow scheduler's next packet (of a sparse or
    /// latency-sensitive flow only, with `sparse_only`) goes on the link its policy
    /// chooses, if that link has room now.
    fn poll_queues(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        sparse_only: bool,
    ) -> Option<Transmit> {
        if self.queues.is_empty() {
            return None;
        }
        self.refresh_views(now);
        self.views_ahead();
        let views = std::mem::take(&mut self.views);
        self.overflow
            .on_local_congestion(self.queues.overflow_congestion());
        let (policy, aggregate, overflow) =
            (&mut self.policy, &mut self.aggregate, &mut self.overflow);
        let spreads = self.queues.spreads();
        let smallest = crate::policy::smallest_datagram(&views);
        let mut fit_views = std::mem::take(&mut self.fit_views);
        let mut small_views = std::mem::take(&mut self.small_views);
        let mut small_wake: Option<Instant> = None;
        let mut left_out = false;
        // `small`: the head of a small flow (`FlowQueues::dequeue_small_with`), which
        // may go past a link's full window: the policy sees such a link as ready when
        // its pacer is.
        let mut bind = |flow: &crate::fq::Flow, head: &crate::fq::Queued, small: bool| {
            let meta = PacketMeta {
                flow: flow.id,
                len: wire::DATA_OVERHEAD + head.data.len(),
                latency_sensitive: flow.latency_sensitive,
                backlog: flow.bytes,
            };
            let mut offered =
                crate::policy::links_that_carry(&views, meta.len, smallest, &mut fit_views);
            if small {
                small_views.clear();
                small_views.extend(offered.iter().map(|v| {
                    let mut v = *v;
                    if v.has_room_small(now, meta.len, now - head.enqueued) {
                        v.pacer_next = v.pacer_next.min(v.pace_next);
                    } else if let Some(t) = v.small_passes_at(head.enqueued)
                        && t > now
                    {
                        small_wake = Some(small_wake.map_or(t, |w| w.min(t)));
                    }
                    v
                }));
                offered = &small_views;
            }
            let kind = flow.policy.resolve(flow.reliable, spreads);
            // Whether its sender re-sends what is lost (TCP or QUIC), as the flow's first
            // packet said; the shared overflow queue mixes connections, so there each
            // packet says for itself (a QUIC packet whose fixed bit is greased, RFC 9287,
            // is taken for another datagram there).
            let reliable = if flow.shared {
                classify(&head.data).is_ok_and(|i| i.reliable)
            } else {
                flow.reliable
            };
            let binding = match kind {
                PolicyKind::MinRtt | PolicyKind::Redundant | PolicyKind::Auto => {
                    policy.bind(now, &meta, offered)
                }
                PolicyKind::Aggregate => aggregate.bind(now, &meta, offered),
                PolicyKind::Overflow => overflow.bind(now, &meta, offered),
            };
            if kind == PolicyKind::Aggregate
                && binding == Binding::Wait
                && offered.iter().any(|v| v.has_room(now))
            {
                left_out = true;
            }
            // Only a packet taken in the round robin may come from behind its flow's head
            // (a small flow has about one packet waiting).
            let binding = match binding {
                Binding::Behind(id, _) if small => Binding::Link(id),
                b => b,
            };
            // A packet that waits while a link has room: the next flows may take it. (Not
            // under the overflow policy: its round robin over the links waits only when
            // none of its links has room, and the flows share those links in turn.)
            let wait = || {
                if kind != PolicyKind::Overflow && offered.iter().any(|v| v.has_room(now)) {
                    Decision::Pass
                } else {
                    Decision::Wait
                }
            };
            match binding {
                Binding::Link(id) => match views.iter().position(|v| v.id == id) {
                    Some(i) if views[i].has_room(now) => Decision::Take((i, kind, false, reliable)),
                    Some(i)
                        if small && views[i].has_room_small(now, meta.len, now - head.enqueued) =>
                    {
                        Decision::Take((i, kind, true, reliable))
                    }
                    _ => wait(),
                },
                Binding::Behind(id, bytes) => match views.iter().position(|v| v.id == id) {
                    Some(i) if views[i].has_room(now) => {
                        Decision::TakeBehind((i, kind, false, reliable), bytes, usize::from(id.0))
                    }
                    _ => wait(),
                },
                Binding::Wait => wait(),
            }
        };
        let mut taken = if sparse_only {
            self.queues
                .dequeue_sparse_with(now, |f, h| bind(f, h, false))
        } else {
            self.queues.dequeue_with(now, |f, h| bind(f, h, false))
        };
        // Only a link held by its window (not its pacer) can take a small packet that
        // the round robin could not bind.
        let window_holds = || views.iter().any(|v| v.pacer_next > v.pace_next);
        if taken.is_none() && !sparse_only && self.queues.has_small() && window_holds() {
            taken = self.queues.dequeue_small_with(|f, h| bind(f, h, true));
            self.small_wake = if taken.is_none() { small_wake } else { None };
        }
        self.views = views;
        self.fit_views = fit_views;
        self.small_views = small_views;
        if left_out {
            self.aggregate_left_out = Some(now);
        }
        let (queued, flow, flow_seq, (li, kind, past_window, reliable)) = taken?;
        self.queues.bound_to(li);
        if past_window {
            self.stats.small_past_window += 1;
        }
        self.note_oversized(li, queued.data.len());
        if self.config.tcp_window_clamp {
            self.clamp.on_bound(&queued.data);
        }
        // The binding point: only now does the packet get its link, numbers and header.
        let gseq = self.next_global_seq;
        self.next_global_seq += 1;
        // A min-rtt flow's losses are sent again if its sender re-sends them anyway (TCP
        // or QUIC, `reliable` above): the inner transport would take each for congestion.
        let recover = (kind == PolicyKind::Aggregate || kind == PolicyKind::MinRtt && reliable)
            && self.repairs_on(li);
        let form = if self.config.header_compression {
            let fits = self.template_fits(li, queued.data.len());
            self.compressor.form(now, flow, &queued.data, fits)
        } else {
            TxForm::Full
        };
        let data = SentData {
            payload: queued.data,
            global_seq: gseq,
            flow,
            flow_seq,
            sent_on: link_bit(self.links[li].id),
            taken: false,
            recover,
            lost_on: None,
            spread: kind == PolicyKind::Aggregate,
            form,
        };
        self.write_data_datagram(now, li, buf, &data);
        self.stats.data_bound += 1;
        self.links[li].stats.data_sent += 1;
        if kind == PolicyKind::Redundant {
            let links = match self.config.redundant_links {
                0 => self.links.len(),
                n => n,
            };
            if links > 1 {
                self.copies.push_back(Pending {
                    data: SentData {
                        payload: data.payload.clone(),
                        ..data
                    },
                    since: now,
                    remaining: links - 1,
                    round: data.sent_on,
                });
            }
        }
        Some(self.finish(now, li, buf, true, Some(data), past_window))
    }

    /// Counts a packet of `payload` bytes bound to link `li` although its datagram is
    /// larger than the link carries whole: no link that was not down carried it
    /// (4.2).
    fn note_oversized(&mut self, li: usize, payload: usize) {
        let max = self.links[li].max_datagram().unwrap_or(usize::MAX);
        if wire::DATA_OVERHEAD + payload > max {
            self.stats.data_oversized += 1;
        }
    }

    fn write_header(&mut self, li: usize, buf: &mut Vec<u8>) {
        let l = &self.links[li];
        wire::Header {
            session: self.config.session,
            link: l.id.0,
            pn: l.next_pn as u32,
        }
        .emit(buf);
    }

    /// Writes the datagram that carries `data` on link `li`: the header, the link's
    /// acknowledgement if it fits beside the data frame, and the data frame in `data`'s
    /// form (a compact one prepared by the compressor for this packet).
    fn write_data_datagram(&mut self, now: Instant, li: usize, buf: &mut Vec<u8>, data: &SentData) {
        self.write_header(li, buf);
        let frame_len = self.data_frame_len(data.form, &data.payload);
        self.ride_ack(now, li, buf, frame_len);
        self.emit_data_frame(buf, data);
    }

    /// Whether link `li` carries a `len`-byte packet whole as DATA_TEMPLATE, the largest
    /// of the data frames.
    fn template_fits(&self, li: usize, len: usize) -> bool {
        self.links[li]
            .max_datagram()
            .is_none_or(|max| wire::HEADER_LEN + wire::DATA_TEMPLATE_HEADER_LEN + len <= max)
    }

    /// The length of the data frame that carries `packet` as `form`.
    fn data_frame_len(&self, form: TxForm, packet: &[u8]) -> usize {
        match form {
            TxForm::Full => wire::data_frame_len(packet.len()),
            TxForm::Template { .. } => wire::DATA_TEMPLATE_HEADER_LEN + packet.len(),
            // (Prepared by `Compressor::form` or `prepare` for this packet.)
            TxForm::Compact { .. } => {
                wire::DATA_COMPACT_HEADER_LEN + self.compressor.body_len(packet.len())
            }
        }
    }

    /// Appends the data frame of `data` in its form (3.4, 3.9, 3.10).
    fn emit_data_frame(&mut self, buf: &mut Vec<u8>, data: &SentData) {
        let n = wire::DataNumbers {
            global_seq: data.global_seq as u32,
            flow_id: data.flow.0,
            flow_seq: data.flow_seq as u32,
            recovered: data.recover,
        };
        let packet = &data.payload;
        let result = match data.form {
            TxForm::Full => wire::emit_data(
                buf,
                n.global_seq,
                n.flow_id,
                n.flow_seq,
                packet,
                n.recovered,
            ),
            TxForm::Template {
                slot,
                generation,
                hlen,
                ipv4_checksum,
            } => {
                self.stats.templates_sent += 1;
                wire::emit_data_template(buf, n, slot, generation, hlen, ipv4_checksum, packet)
            }
            TxForm::Compact { slot, generation } => {
                let before = buf.len();
                // The body `Compressor::form` or `prepare` made for this packet; of the
                // generation, the wire keeps the low bits.
                let compressor = &self.compressor;
                let sent = wire::emit_data_compact(buf, n, slot, generation as u8, |out| {
                    compressor.write_body(packet, out)
                });
                self.stats.compact_sent += 1;
                self.stats.compact_saved_bytes +=
                    wire::data_frame_len(packet.len()).saturating_sub(buf.len() - before) as u64;
                sent
            }
        };
        result.expect("tun packets are checked against the DATA frame limit");
    }

    /// The link's acknowledgement, if one is pending, on the data packet being written
    /// (its header in `buf`, a data frame of `frame_len` bytes to follow), as far as it fits the
    /// link's largest datagram: the newest ranges that fit, older ones left out (an ACK
    /// only under-reports then; the ones before it reported them). If not even the newest
    /// range fits, it goes alone, as a control datagram, and is not deferred for data.
    /// An acknowledgement that would have gone alone (`ack_wanted`: it waits for a data
    /// packet only `ack_ride_wait`) brings its RX_TIME frame along where that fits too:
    /// the peer's rate control then has the same one-way delay samples as if it had gone
    /// alone, for 19 bytes on this datagram instead of a datagram of its own.
    fn ride_ack(&mut self, now: Instant, li: usize, buf: &mut Vec<u8>, frame_len: usize) {
        let l = &mut self.links[li];
        l.rx.on_data_sent(now, self.config.ack_ride_wait);
        if l.rx.ack_deadline.is_none() {
            return;
        }
        let room = l
            .max_datagram()
            .map(|max| max.saturating_sub(buf.len() + frame_len));
        if room.is_some_and(|r| r < wire::ack_frame_len(1)) {
            if !l.rx.ack_rides_not {
                l.rx.ack_rides_not = true;
                self.stats.acks_too_big_to_ride += 1;
            }
            return;
        }
        let with_time = l.rx.ack_wanted
            && room.is_none_or(|r| r >= wire::ack_frame_len(1) + wire::RX_TIME_FRAME_LEN);
        let time_len = if with_time {
            wire::RX_TIME_FRAME_LEN
        } else {
            0
        };
        let room = room.map(|r| r - time_len);
        self.stats.acks_ridden += 1;
        self.write_ack(now, li, buf, with_time, room);
    }

    /// A copy of link `li`'s ACK (`ack_shortcut`): it reports the ranges an ACK of the
    /// link would and changes nothing of what link `li` owes (its own ACK still falls due
    /// as before). Whether it wrote one (not without a range to report).
    fn write_ack_copy(&mut self, now: Instant, li: usize, buf: &mut Vec<u8>) -> bool {
        let l = &self.links[li];
        let ranges: Vec<_> = l.rx.ranges().cloned().collect();
        let written = wire::emit_ack(buf, l.id.0, l.rx.ack_delay_us(now), &ranges) > 0;
        self.stats.acks_sent += u64::from(written);
        written
    }

    /// Writes link `li`'s ACK frame, with as many ranges, newest first, as fit `room`
    /// bytes (all without a limit), and with `with_time` an RX_TIME frame for its largest
    /// packet (one-way delay for the peer's rate control).
    fn write_ack(
        &mut self,
        now: Instant,
        li: usize,
        buf: &mut Vec<u8>,
        with_time: bool,
        room: Option<usize>,
    ) {
        let l = &mut self.links[li];
        let Some(largest) = l.rx.largest() else {
            return;
        };
        let delay = l.rx.ack_delay_us(now);
        let mut ranges: Vec<_> = l.rx.ranges().cloned().collect();
        let all = ranges.len();
        if let Some(room) = room {
            while ranges.len() > 1 && wire::ack_frame_len(ranges.len()) > room {
                ranges.pop();
            }
        }
        let n = wire::emit_ack(buf, l.id.0, delay, &ranges);
        l.rx.note_reported(now, largest);
        // What this ACK tells the peer: everything from its oldest range up, and from the
        // floor up if it left out no range above the floor.
        if let Some(oldest) = n.checked_sub(1).and_then(|k| ranges.get(k)) {
            let from = if n == all {
                l.rx.floor().min(*oldest.start())
            } else {
                *oldest.start()
            };
            l.rx.written = Some((from, largest));
        }
        if with_time {
            wire::emit_rx_time(buf, l.id.0, largest, l.rx.largest_time.as_nanos() / 1000);
            self.stats.rx_times_sent += 1;
        }
        l.rx.on_ack_sent();
        self.stats.acks_sent += 1;
    }

    fn write_link_status(&mut self, buf: &mut Vec<u8>) -> bool {
        let mut any = false;
        for l in &mut self.links {
            if l.announce {
                let state = if l.local_down {
                    wire::LinkState::Down
                } else {
                    wire::LinkState::Up
                };
                wire::emit_link_status(buf, l.id.0, state);
                l.announce = false;
                self.stats.link_status_sent += 1;
                any = true;
            }
        }
        any
    }

    fn write_loss_report(&mut self, buf: &mut Vec<u8>) {
        let entries: Vec<wire::LossEntry> = self
            .links
            .iter()
            .filter(|l| l.rx.received > 0)
            .map(|l| wire::LossEntry {
                link: l.id.0,
                received: l.rx.received,
                lost: l.rx.lost,
            })
            .collect();
        wire::emit_loss_report(buf, &entries);
        self.loss_report_due = false;
        self.stats.loss_reports_sent += 1;
    }

    /// Records a datagram written into `buf` as sent on link `li`. One that carries a
    /// small flow's packet past a full window (`past_window`) gets its slot from the pacer
    /// alone.
    // Inlined, as `Link::on_sent` is into it, so that the `SentData` that `poll_data` has
    // just assembled goes into the link's record without a round trip through memory
    // (reading it back at once with wide loads would wait for its narrow stores).
    #[inline(always)]
    fn finish(
        &mut self,
        now: Instant,
        li: usize,
        buf: &[u8],
        eliciting: bool,
        data: Option<SentData>,
        past_window: bool,
    ) -> Transmit {
        let carries_data = data.is_some();
        let l = &mut self.links[li];
        let send_at = if self.horizon.is_zero() {
            now
        } else {
            l.slot(now, carries_data, past_window)
        };
        l.on_sent(send_at, buf.len(), eliciting, data);
        let link = l.id;
        self.refresh_view(li);
        Transmit {
            link,
            len: buf.len(),
            carries_data,
            send_at,
        }
    }

    /// The next inner packet for the TUN side, in order within its flow; or a "packet
    /// too big" this end answered one of the TUN side's packets with.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        if let Some(p) = self.local_out.pop_front() {
            return Some(p);
        }
        let mut p = self.reorder.pop()?;
        if self.config.tcp_window_clamp && crate::classify::is_tcp(&p) {
            self.clamp.on_remote(&mut p);
        }
        Some(p)
    }

    /// The largest inner packet every link that is not down carries whole (`None`:
    /// no such link has a known limit). A link whose path MTU search is under way does
    /// not count until it is over.
    fn tunnel_mtu(&self) -> Option<usize> {
        self.links
            .iter()
            .filter(|l| l.state != LinkState::Down && l.pmtu_settled())
            .filter_map(Link::max_datagram)
            .min()
            .map(|m| m.saturating_sub(wire::DATA_OVERHEAD))
    }

    /// Gives a buffer back for reuse (optional; saves an allocation per packet).
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < 4096 {
            self.pool.push(buf);
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When `handle_timeout` should next be called. `None`: nothing is scheduled (inputs
    /// will wake the engine). May be in the past: call `poll_transmit` first.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = Some(self.next_housekeeping);
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        let any_received = self.links.iter().any(|l| l.rx.received > 0);
        let waiting = self.data_waiting();
        if any_received {
            consider(Some(self.next_loss_report));
        }
        consider(self.reorder.next_deadline());
        consider(
            self.reinject
                .iter()
                .map(|p| p.since)
                .min()
                .map(|t| t + self.config.reinject_max_age),
        );
        if let Some(p) = self.copies.front() {
            consider(Some(p.since + self.copy_max_age()));
        }
        for (i, l) in self.links.iter().enumerate() {
            if !self.ack_deferred(i) {
                consider(l.rx.ack_deadline);
            }
            consider(l.ping_due);
            consider(l.loss_time());
            consider(l.rej_deadline(&self.config));
            consider(l.aging_deadline());
            if l.state != LinkState::Down && l.ping_due.is_none() {
                consider(Some(l.last_eliciting_sent + self.probe_interval(i)));
            }
            if l.state != LinkState::Up && l.in_flight > 0 {
                consider(l.next_expiry(self.config.max_ack_delay, self.config.suspect_min));
            }
            if waiting && l.state == LinkState::Up && l.paced() {
                // (A small flow's wait for passing a full window: `small_wake` below.)
                // With a binding horizon the packet is bound that much before its slot.
                consider(
                    l.pacer
                        .blocked_until(1500)
                        .map(|t| t.saturating_sub(self.horizon))
                        .filter(|&t| t > self.last_poll),
                );
            }
        }
        if self.queues.has_small() {
            consider(self.small_wake.filter(|&t| t > self.last_poll));
        }
        next
    }
}

/// A packet found lost on a link that works may go on that link again (4.4), where it
/// arrives soonest counting that the link may lose it again: with the link's loss rate
/// `p`, it is then found lost (by the link's reinjection timer at the latest,
/// [`crate::link::found_lost_by`]) and sent on the soonest other link. The link is hidden
/// from the policy when that expected arrival is no sooner than the other links' (the
/// aggregate policy weighs a link's losses the same way for every packet). With no other
/// link up, it is the only way.
fn hide_lossy_again(now: Instant, lost_on: Option<LinkId>, len: usize, views: &mut [LinkView]) {
    let Some(id) = lost_on else {
        return;
    };
    let Some(i) = views
        .iter()
        .position(|v| v.id == id && v.state != LinkState::Down)
    else {
        return;
    };
    let Some(elsewhere) = crate::policy::usable(views)
        .filter(|v| v.id != id)
        .map(|v| MinRtt::expected_delivery_ns(now, len, v))
        .min()
    else {
        return;
    };
    let v = &views[i];
    let here = MinRtt::expected_delivery_ns(now, len, v);
    let found = crate::link::found_lost_by(v.srtt, v.rttvar).as_secs_f64() * 1e9;
    if crate::policy::arrival_counting_loss_ns(here, v.loss_rate, found, elsewhere) >= elsewhere {
        views[i].state = LinkState::Down;
    }
}

/// A `min-rtt` TCP segment found lost on a link goes on another link if one is usable
/// (4.4): that flow keeps to its link, and resends there add to the jitter of a call
/// sharing it. With no other link usable, the link it was lost on is the only way.
fn hide_unless_alone(lost_on: Option<LinkId>, views: &mut [LinkView]) {
    let Some(id) = lost_on else {
        return;
    };
    if crate::policy::usable(views).any(|v| v.id != id) {
        for v in views.iter_mut().filter(|v| v.id == id) {
            v.state = LinkState::Down;
        }
    }
}

/// How much later than the packets bound after it a packet may arrive, from each link's
/// latest and earliest one-way delay (`(srtt / 2 + 2 rttvar, min_rtt / 2)`): the most
/// by which one link's latest exceeds *another* link's earliest. A link does not
/// reorder its own packets (a FIFO: a queue that grows delays every packet behind it as
/// much), so one link alone gives nothing, however deep its queue: holding each gap for
/// that queue's depth would only hide a loss from the inner flow (its fast retransmit
/// waits) while nothing can fill the gap.
fn reorder_spread(links: impl Iterator<Item = (Duration, Duration)> + Clone) -> Duration {
    // The two smallest earliest delays (and whose the smallest is): another link's
    // earliest is the smallest, or the second smallest for the link that has it.
    let mut first: Option<(usize, Duration)> = None;
    let mut second: Option<Duration> = None;
    for (i, (_, earliest)) in links.clone().enumerate() {
        match first {
            Some((_, e)) if earliest >= e => {
                second = Some(second.map_or(earliest, |s| s.min(earliest)));
            }
            _ => {
                second = first.map(|(_, e)| e);
                first = Some((i, earliest));
            }
        }
    }
    let Some((smallest_at, smallest)) = first else {
        return Duration::ZERO;
    };
    links
        .enumerate()
        .filter_map(|(i, (latest, _))| {
            let other = if i == smallest_at { second? } else { smallest };
            Some(latest.saturating_sub(other))
        })
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An idle link `srtt_ms` away, losing `loss_rate` of its packets.
    fn idle_view(id: u16, srtt_ms: u64, loss_rate: f64) -> LinkView {
        LinkView {
            rttvar: Duration::from_millis(1),
            loss_rate,
            ..LinkView::idle(id, srtt_ms)
        }
    }

    /// A packet found lost on a near link (20 ms RTT, beside one of 60 ms) goes there
    /// again while it arrives there sooner counting that link's losses: lost there
    /// again, it is found lost 24.5 ms after it left and arrives 30 ms after that by the
    /// far link, 44.5 ms after it would have by the near one. At a 10 % loss rate it is
    /// expected after 10 + 0.1 * 44.5 = 14.5 ms, against 30 by the far link; at 50 %,
    /// 32.3 ms, and the near link is hidden. Not with no other link up, and not for a
    /// packet found lost nowhere (a timer's or a cut's reinjection).
    #[test]
    fn a_packet_lost_on_a_link_goes_there_again_only_if_it_arrives_sooner_counting_losses() {
        let now = Instant::ZERO;
        let hidden = |lost_on: Option<u16>, views: &[LinkView]| -> Vec<bool> {
            let mut views = views.to_vec();
            hide_lossy_again(now, lost_on.map(LinkId), 1200, &mut views);
            views.iter().map(|v| v.state == LinkState::Down).collect()
        };
        let far = idle_view(1, 60, 0.0);
        assert_eq!(
            hidden(Some(0), &[idle_view(0, 20, 0.0), far]),
            [false, false]
        );
        assert_eq!(
            hidden(Some(0), &[idle_view(0, 20, 0.1), far]),
            [false, false]
        );
        assert_eq!(
            hidden(Some(0), &[idle_view(0, 20, 0.5), far]),
            [true, false]
        );
        assert_eq!(hidden(None, &[idle_view(0, 20, 0.5), far]), [false, false]);
        let mut down = far;
        down.state = LinkState::Down;
        assert_eq!(
            hidden(Some(0), &[idle_view(0, 20, 0.5), down]),
            [false, true]
        );
        // A far link lost on, beside a near one: the near one is sooner anyway.
        assert_eq!(
            hidden(Some(1), &[idle_view(0, 20, 0.0), idle_view(1, 60, 0.0)]),
            [false, true]
        );
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn a_peers_link_mtu_is_taken_down_to_what_a_576_byte_path_carries() {
        let now = Instant::ZERO;
        let mut ep = Endpoint::new(Config::new(Role::Server), now).unwrap();
        let own = LinkConfig {
            max_datagram: Some(1456),
            ..LinkConfig::default()
        };
        assert!(ep.add_link(now, LinkId(1), own));
        let seen = |ep: &Endpoint| ep.link_views(now)[0].max_datagram;
        let told = |ep: &mut Endpoint, max_datagram| {
            ep.apply_frame(
                now,
                0,
                wire::Frame::LinkMtu {
                    link: 1,
                    max_datagram,
                },
            );
        };
        told(&mut ep, 1356);
        assert_eq!(seen(&ep), 1356);
        // Larger than this end's own limit: its own stands.
        told(&mut ep, 9000);
        assert_eq!(seen(&ep), 1456);
        // Smaller than any IPv4 path: raised to what 576 bytes carry.
        told(&mut ep, 100);
        assert_eq!(seen(&ep), 576 - 28 - 16);
        assert_eq!(ep.tunnel_mtu(), Some(576 - 28 - 16 - wire::DATA_OVERHEAD));
    }

    /// A link a flow used, its smoothed RTT still 200 ms from the queue the flow made,
    /// its keepalives now back in 60 ms: once an aggregate flow has waited with it free,
    /// it is probed every smoothed RTT, not every second, so that its estimate follows
    /// the path (`Aggregate` judges it by these samples). Not a link no flow has used,
    /// nor one whose samples show no such lag.
    #[test]
    fn a_link_left_out_by_a_stale_rtt_is_probed_every_rtt() {
        let at = |v: u64| Instant::ZERO + ms(v);
        let mut ep = Endpoint::new(Config::new(Role::Client), Instant::ZERO).unwrap();
        assert!(ep.add_link(Instant::ZERO, LinkId(0), LinkConfig::default()));
        let l = &mut ep.links[0];
        for k in 0..16 {
            l.rtt.update(at(17_000 + 10 * k), ms(200), Duration::ZERO);
        }
        l.rtt.update(at(19_500), ms(60), Duration::ZERO);
        l.last_eliciting_sent = at(19_600);
        let keepalive = ep.config.keepalive_interval;
        assert_eq!(ep.probe_interval(0), keepalive, "no flow left it out");
        ep.aggregate_left_out = Some(at(19_900));
        assert_eq!(ep.probe_interval(0), keepalive, "no flow has used it");
        let srtt = ep.links[0].rtt.srtt;
        ep.links[0]
            .cc
            .as_mut()
            .expect("rate control")
            .limited_at(at(5_000), 900_000.0);
        assert_eq!(ep.probe_interval(0), srtt);
        assert!(srtt > ms(150) && srtt < keepalive, "{srtt:?}");
        // A sample of the last two seconds as long as the estimate: no lag to follow.
        ep.links[0].rtt.update(at(19_550), ms(250), Duration::ZERO);
        assert_eq!(ep.probe_interval(0), keepalive);
    }

    #[test]
    fn one_link_reorders_nothing_however_deep_its_queue() {
        // A one-second standing queue over a 20 ms path: the gap behind a lost packet
        // has nothing to wait for.
        assert_eq!(
            reorder_spread([(ms(520), ms(10))].into_iter()),
            Duration::ZERO
        );
        assert_eq!(reorder_spread(std::iter::empty()), Duration::ZERO);
    }

    #[test]
    fn two_links_reorder_by_one_links_latest_over_the_others_earliest() {
        // A 25 ms link with 5 ms of variation beside a 10 ms one: 25 + 2 * 5 - 10.
        let slow = (ms(25) + ms(10), ms(25));
        let fast = (ms(10) + ms(2), ms(10));
        assert_eq!(reorder_spread([slow, fast].into_iter()), ms(25));
        assert_eq!(reorder_spread([fast, slow].into_iter()), ms(25));
        // The fast link's own deep queue counts against the other link's earliest
        // only: 510 - 25.
        let queued = (ms(510), ms(10));
        assert_eq!(reorder_spread([queued, slow].into_iter()), ms(485));
        // Three links: the deep queue counts against the next smallest earliest.
        assert_eq!(reorder_spread([queued, slow, fast].into_iter()), ms(500));
        assert_eq!(reorder_spread([fast, queued, slow].into_iter()), ms(500));
    }
}
