//! The receive path after decryption: duplicate suppression by global sequence, then
//! in-order release per flow with a bounded hold time.
//!
//! Reordering is per flow (keyed by the sender's flow id and flow sequence), not across
//! the whole tunnel: a gap in one flow never holds back another flow's packets, so an
//! urgent packet is never stuck behind a missing bulk packet (see docs/protocol.md 5.2).
//! A gap is waited for at most the hold time, counted from the arrival of the first
//! packet behind it; then the gap is given up. A packet that arrives after its gap was
//! given up (a reinjection, a slow path) is delivered at once, out of order: the
//! duplicate filter has already made sure it is new, and a late packet is worth more to
//! the application (or the inner TCP, which would otherwise retransmit it) than a drop.
//!
//! Playout alignment (optional, [`Reorder::align`]): a flow that arrives as copies over
//! several links (a redundant flow) has each packet's first copy held back by how much
//! later the copies on its other links have lately come, so the flow is delivered at the
//! pace of its slowest link and losing a copy, or a whole link, leaves no gap
//! (docs/protocol.md 5.3).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use core::time::Duration;

use crate::classify::FlowKey;
use crate::ids::{FlowId, LinkId};
use crate::time::Instant;

/// Window of global sequence numbers remembered for duplicate suppression.
pub(crate) const DEDUP_WINDOW: u64 = 1 << 16;

/// Sliding-window duplicate filter over 64-bit sequence numbers (RFC 6479 style).
#[derive(Debug)]
pub(crate) struct Dedup {
    highest: Option<u64>,
    bits: Vec<u64>,
}

/// Verdict of the duplicate filter.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub(crate) enum Seen {
    New,
    Duplicate,
    TooOld,
}

impl Dedup {
    pub(crate) fn new() -> Self {
        Self {
            highest: None,
            bits: vec![0; (DEDUP_WINDOW / 64) as usize],
        }
    }

    /// The value the next sequence number is expected near (for expanding truncated ones).
    pub(crate) fn expected(&self) -> u64 {
        self.highest.map_or(0, |h| h + 1)
    }

    fn bit(&mut self, seq: u64) -> (&mut u64, u64) {
        let idx = (seq % DEDUP_WINDOW) as usize;
        (&mut self.bits[idx / 64], 1 << (idx % 64))
    }

    pub(crate) fn check_and_insert(&mut self, seq: u64) -> Seen {
        match self.highest {
            Some(h) if seq <= h => {
                if h - seq >= DEDUP_WINDOW {
                    return Seen::TooOld;
                }
                let (word, mask) = self.bit(seq);
                if *word & mask != 0 {
                    return Seen::Duplicate;
                }
                *word |= mask;
                Seen::New
            }
            _ => {
                let from = self.highest.map_or(0, |h| h + 1);
                // Clear the bits of the sequence numbers skipped over (they become "not seen").
                if seq - from >= DEDUP_WINDOW {
                    self.bits.iter_mut().for_each(|w| *w = 0);
                } else {
                    for s in from..seq {
                        let (word, mask) = self.bit(s);
                        *word &= !mask;
                    }
                }
                let (word, mask) = self.bit(seq);
                *word |= mask;
                self.highest = Some(seq);
                Seen::New
            }
        }
    }
}

/// Whether a packet of a flow bound before global sequence `gseq` may still be on its
/// way: a link the flow's packets came over lately (`flow_links`, a bit per link index)
/// that delivered data within the last [`LINK_MEMORY`] (`links`: per link, the highest
/// global sequence it delivered and when it last delivered) has not yet delivered
/// anything bound at or after `gseq`. Packets are bound in global sequence order and each
/// link delivers in the order it sends, so once every such link has passed `gseq` a
/// packet missing before it was lost (or is a reinjection, which comes later anyway). A
/// link the flow has not used is not waited for: another flow's traffic on it (a
/// download's resends on a second link) says nothing of this flow's gap, and a flow on
/// one link (a call) would wait for it up to the longest hold at each loss.
fn behind(links: &[(u64, Instant)], flow_links: u64, gseq: u64, now: Instant) -> bool {
    links.iter().enumerate().any(|(i, &(highest, at))| {
        flow_links & 1u64.checked_shl(i as u32).unwrap_or(0) != 0
            && highest < gseq
            && at > Instant::ZERO
            && now - at < LINK_MEMORY
    })
}

/// Whether a link the flow's packets came over lately that this endpoint does not have up
/// (`links_not_up`: suspect or down here) delivered data within the last [`LINK_MEMORY`]
/// and nothing since `since`, the arrival of the first packet held behind a gap. Such a
/// link is in an outage, maybe with packets on it, which its sender moves to the other
/// links once it finds the link down too. [`behind`] does not see that where the flow's
/// packets were not bound in its order: a packet taken from behind the head for a slower
/// link (4.2 of `docs/protocol.md`) is bound before the packets ahead of it, so a faster
/// link may have delivered past its global sequence while the packets ahead of it were
/// still planned for that link, lost in its outage or not yet sent. A link that is quiet
/// but up (the flow slowed down, its sender's policy left the link) is no sign that
/// anything is on its way.
fn quiet(links: &[(u64, Instant)], links_not_up: u64, since: Instant, now: Instant) -> bool {
    links.iter().enumerate().any(|(i, &(_, at))| {
        links_not_up & 1u64.checked_shl(i as u32).unwrap_or(0) != 0
            && at > Instant::ZERO
            && at < since
            && now - at < LINK_MEMORY
    })
}

/// Whether the first packet held behind a flow's gap (global sequence `gseq`, arrived at
/// `arrived`) is worth waiting for past its hold time: a link is [`behind`] it, or one
/// that is not up here has been [`quiet`] since it came (`not_up`: the links not up).
fn may_still_come(
    links: &[(u64, Instant)],
    flow_links: u64,
    not_up: u64,
    gseq: u64,
    arrived: Instant,
    now: Instant,
) -> bool {
    behind(links, flow_links, gseq, now) || quiet(links, flow_links & not_up, arrived, now)
}

/// Counters of the receive path.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct ReorderStats {
    /// Packets released to the TUN side.
    pub delivered: u64,
    /// Packets that had to wait for an earlier one.
    pub held: u64,
    /// Missing packets given up after the hold time (gaps skipped).
    pub gaps_skipped: u64,
    /// Packets that arrived after their gap had been given up (delivered out of order).
    pub late_delivered: u64,
    /// Packets released early because a flow's reorder buffer was full.
    pub overflow_released: u64,
    /// Longest time a packet was held, nanoseconds.
    pub max_hold_ns: u64,
    /// Packets of redundant flows held back to arrive with their slower copies.
    pub aligned: u64,
    /// Gaps held past their hold time because a link that could still carry the
    /// missing packet was behind them.
    pub waited_for_links: u64,
    /// Gaps of flows whose sender does not re-send their losses given up before their
    /// hold time: every link the flow's packets came over lately had delivered packets
    /// bound after the missing one, and every link up had delivered data lately, so it
    /// was lost ([`Reorder::skip_lost`]).
    pub gaps_lost: u64,
    /// TCP acknowledgements (no data, no SYN, FIN or RST) delivered past a gap before
    /// them instead of waiting for it.
    pub acks_passed: u64,
}

#[derive(Debug)]
struct Held {
    data: Vec<u8>,
    arrived: Instant,
    deadline: Instant,
    /// Not delivered before this (playout alignment; `arrived` otherwise).
    play_at: Instant,
    /// Its global sequence number, when known.
    gseq: Option<u64>,
    /// The global sequence a link must have delivered past for a gap before it to be
    /// taken for lost ([`behind`]): its own, or for a flow whose sender re-sends its
    /// losses the newest of the flow's packets received when it came
    /// ([`Reorder::insert_via`]).
    bound_by: Option<u64>,
    /// The deadline its hold time gave, while `deadline` waits for a link that is
    /// behind (see [`Reorder::handle_timeout`]).
    held_until: Option<Instant>,
    /// Already delivered past its gap (a TCP acknowledgement): it only keeps its place,
    /// with no data.
    passed: bool,
}

/// First copies of a flow remembered to pair with their second copies.
const PLAYOUT_FIRSTS: usize = 32;

/// A lag sample counts for one to two of these (counted in samples' time: without new
/// samples, as while one of the links is down, the last ones stay in force).
const LAG_WINDOW: Duration = Duration::from_secs(2);

/// How much later the copies on link `second` come than their first copies on link
/// `first`: the least lag of each [`LAG_WINDOW`] of samples, and how many samples each
/// window had. The least, because a copy can also leave late (it waited for its link's
/// pacer, or for the link to come back) and arrive seconds after its first copy; the
/// copies that left together show the links' delay difference. A copy that queues longer
/// than that arrives after its playout time by the extra wait, no later than without
/// alignment. Of the two orders of a pair of links only the one seen more often counts:
/// the other's samples are copies on the faster link that came late.
#[derive(Debug)]
struct Lag {
    first: usize,
    second: usize,
    cur: Duration,
    prev: Duration,
    n: u32,
    n_prev: u32,
    since: Instant,
}

/// Samples a lag needs (in its two windows) before it holds a first copy back, and a
/// window before it ends: a window of fewer samples (as when a link went down just after
/// it began) goes on with the next samples, however much later they come.
const LAG_MIN_SAMPLES: u32 = 4;

/// Playout alignment of one flow (only with [`Reorder::align`]).
#[derive(Debug)]
struct Playout {
    /// The latest first copies: global sequence, arrival, link.
    firsts: VecDeque<(u64, Instant, usize)>,
    lags: Vec<Lag>,
    /// Whether the flow is aligned: on once it arrives as copies
    /// ([`RxFlow::arrives_as_copies`]); off only after two of the flow's windows of
    /// packets over two links had no copy (the sender stopped copying), not while one
    /// link is down, nor when it comes back.
    on: bool,
    quiet: u8,
    /// Packets the reorder stage released, waiting for their playout time, in order.
    queue: VecDeque<(Instant, Vec<u8>)>,
    /// The hold given to the latest first copy on each link, and when the flow's latest
    /// first copy came: a hold grows by at most a quarter of the time between first
    /// copies, so that turning alignment on (or a slower link) stretches no gap by more.
    given: Vec<(usize, Duration)>,
    last_first: Instant,
    last_hold: Duration,
}

impl Playout {
    fn new(now: Instant) -> Self {
        Self {
            firsts: VecDeque::with_capacity(PLAYOUT_FIRSTS),
            lags: Vec::new(),
            on: false,
            quiet: 0,
            queue: VecDeque::new(),
            given: Vec::new(),
            last_first: now,
            last_hold: Duration::ZERO,
        }
    }

    /// One of the flow's windows ended with `firsts` first copies and `copies` other
    /// copies over the `links` (a bit per link).
    fn window_ended(&mut self, firsts: u32, copies: u32, links: u64) {
        if firsts >= 8 && copies == 0 && links.count_ones() >= 2 {
            self.quiet += 1;
            if self.quiet >= 2 {
                self.on = false;
            }
        } else {
            self.quiet = 0;
        }
    }

    fn first_copy(&mut self, now: Instant, gseq: u64, link: usize) {
        if self.firsts.len() == PLAYOUT_FIRSTS {
            self.firsts.pop_front();
        }
        self.firsts.push_back((gseq, now, link));
    }

    /// A second copy of `gseq` came over `link`; `copies`: whether the flow arrives as
    /// copies.
    fn second_copy(&mut self, now: Instant, gseq: u64, link: usize, copies: bool) {
        self.on |= copies;
        let Some(&(_, at, first)) = self.firsts.iter().find(|(g, ..)| *g == gseq) else {
            return;
        };
        if first == link {
            // Both copies on one link (the only one up): no lag between links.
            return;
        }
        let sample = now - at;
        match self
            .lags
            .iter_mut()
            .find(|l| l.first == first && l.second == link)
        {
            Some(l) if now - l.since >= LAG_WINDOW && l.n >= LAG_MIN_SAMPLES => {
                l.prev = l.cur;
                l.n_prev = l.n;
                l.cur = sample;
                l.n = 1;
                l.since = now;
            }
            Some(l) => {
                l.cur = l.cur.min(sample);
                l.n += 1;
            }
            None => self.lags.push(Lag {
                first,
                second: link,
                cur: sample,
                prev: sample,
                n: 1,
                n_prev: 0,
                since: now,
            }),
        }
    }

    /// How long the first copy that just came over `link` waits for its slower copies:
    /// [`Self::target`], reached in steps.
    fn hold(&mut self, now: Instant, link: usize, max: Duration) -> Duration {
        let target = self.target(link).min(max);
        let step = (now - self.last_first) / 4;
        self.last_first = now;
        let hold = match self.given.iter_mut().find(|(l, _)| *l == link) {
            Some((_, given)) => {
                *given = target.min(*given + step);
                *given
            }
            None => {
                let given = target.min(step);
                self.given.push((link, given));
                given
            }
        };
        self.last_hold = hold;
        hold
    }

    /// How long a first copy that came over `link` should wait for its slower copies.
    fn target(&self, link: usize) -> Duration {
        if !self.on {
            return Duration::ZERO;
        }
        let samples = |first: usize, second: usize| {
            self.lags
                .iter()
                .find(|l| l.first == first && l.second == second)
                .map_or(0, |l| l.n + l.n_prev)
        };
        self.lags
            .iter()
            .filter(|l| {
                let n = l.n + l.n_prev;
                l.first == link && n >= LAG_MIN_SAMPLES && n > samples(l.second, l.first)
            })
            .map(|l| {
                // A window counts once it has its samples (the first window's `prev` is
                // a placeholder, with none).
                let prev = (l.n_prev >= LAG_MIN_SAMPLES).then_some(l.prev);
                let cur = (l.n >= LAG_MIN_SAMPLES).then_some(l.cur);
                prev.max(cur).unwrap_or(l.cur)
            })
            .max()
            .unwrap_or_default()
    }
}

#[derive(Debug)]
struct RxFlow {
    next: u64,
    held: BTreeMap<u64, Held>,
    /// Deadline registered in `Reorder::due` for this flow.
    due: Option<Instant>,
    last_active: Instant,
    /// When a gap of this flow was last given up.
    skipped_at: Option<Instant>,
    /// What the flow's packets did since `window_since`, and in the [`LINK_MEMORY`]
    /// before it.
    window: [RxWindow; 2],
    window_since: Instant,
    /// The hold given to the flow's latest out-of-order packet.
    hold: Option<Duration>,
    /// The flow's 5-tuple, from its first packet that parses.
    key: Option<FlowKey>,
    /// That packet's [`crate::classify::PacketInfo::reliable`]: TCP or QUIC.
    reliable: bool,
    counts: FlowCounts,
    /// Per link index: first copies received over it, and the flow's packet it delivered
    /// last ([`FlowLinkRx`]).
    by_link: Vec<FlowLinkRx>,
    play: Option<Box<Playout>>,
    /// The flow's sender re-sends its losses (its latest packet came as DATA_RECOVERED).
    repaired: bool,
    /// The highest global sequence of the flow's packets received.
    newest_gseq: u64,
}

/// What one link delivered of one flow.
#[derive(Clone, Copy, Debug, Default)]
struct FlowLinkRx {
    /// First copies received over the link.
    received: u64,
    /// One past the highest flow sequence it delivered (0: none), and when it last
    /// delivered one of the flow's packets.
    past: u64,
    at: Instant,
}

/// One [`LINK_MEMORY`] of a flow's packets.
#[derive(Clone, Copy, Debug, Default)]
struct RxWindow {
    /// Links (a bit per link index) its packets came over.
    links: u64,
    /// First copies, and second (third, ...) copies.
    firsts: u32,
    copies: u32,
}

impl RxFlow {
    /// The links (a bit per link index) its packets came over in the last one to two
    /// [`LINK_MEMORY`]s.
    fn links(&self) -> u64 {
        self.window[0].links | self.window[1].links
    }

    /// Whether a gap of the flow is worth waiting for past its hold time while a link is
    /// behind it: a TCP or QUIC flow (its first packet's `reliable`) would take the gap
    /// for a loss (a retransmission and a smaller window), and a repaired flow's missing
    /// packet is coming. Not a flow of other datagrams (a call, a game): a packet later
    /// than its hold is as good as lost to it, and waiting delays every packet behind the
    /// gap. Not a flow that arrives as copies (a redundant flow): its copies on the other
    /// links were its protection, and a link that died with a copy on it would otherwise
    /// stall the flow for the longest hold.
    fn waits_for_links(&self) -> bool {
        (self.reliable || self.repaired) && !self.arrives_as_copies()
    }

    /// Whether a link that was carrying the flow when `first`, the first packet held
    /// behind its gap, came (it delivered one of the flow's packets within the hold
    /// before) has delivered none past the gap since, in a flow whose sender re-sends its
    /// losses. Such a sender takes an aggregate flow's packets from behind the head for a
    /// slower link, aimed to arrive about when the faster links have delivered the
    /// packets ahead of them (4.2 of `docs/protocol.md`); those are bound after it, so no
    /// global sequence marks them ([`Held::bound_by`] is the newest received). A faster
    /// link that pauses (a cellular uplink's scheduling gap) delivers them late, and
    /// giving the gap up then makes the inner TCP re-send a window. Each link delivers
    /// the flow's packets in the order it sends them, mostly in flow order, so a link
    /// that delivered one past the gap has passed it (a packet lost on it is re-sent,
    /// which the hold of such a flow, a resend's wait, covers).
    fn link_behind_gap(&self, first: &Held, now: Instant) -> bool {
        if !self.repaired {
            return false;
        }
        let hold = first.held_until.unwrap_or(first.deadline) - first.arrived;
        let since = first.arrived.saturating_sub(hold);
        self.by_link
            .iter()
            .any(|l| l.past > 0 && l.past <= self.next && l.at >= since && now - l.at < LINK_MEMORY)
    }

    /// Whether the flow's packets lately came as copies (its sender sends each on several
    /// links): at least one copy for every two packets of the last one to two seconds.
    fn arrives_as_copies(&self) -> bool {
        let [cur, prev] = self.window;
        let firsts = cur.firsts.saturating_add(prev.firsts);
        let copies = cur.copies.saturating_add(prev.copies);
        firsts >= 4 && copies.saturating_mul(2) >= firsts
    }
}

/// Per-flow counters of the receive path (see [`ReorderStats`] for their meaning).
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct FlowCounts {
    /// Packets received, in order or not (duplicates not counted).
    pub received: u64,
    /// Packets that had to wait for an earlier one.
    pub held: u64,
    /// Missing packets given up after the hold time.
    pub gaps_skipped: u64,
    /// Packets that arrived after their gap had been given up.
    pub late_delivered: u64,
}

/// One flow's reordering, for status displays.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowReorderView {
    /// The sender's flow id.
    pub flow: FlowId,
    /// The flow's 5-tuple, when its packets are IP packets that parse.
    pub key: Option<FlowKey>,
    /// The links the flow's packets came over lately.
    pub links: Vec<LinkId>,
    /// The hold its latest out-of-order packet got (none yet: it has needed none).
    pub hold: Option<Duration>,
    /// While the flow is aligned (it arrives as copies, with `redundant_align`): how
    /// long its latest first copy waited for its slower copies.
    pub align: Option<Duration>,
    /// Its counters.
    pub counts: FlowCounts,
    /// Of `counts.received`, how many came over each link (first copies; links that
    /// carried none of them are left out).
    pub received_by_link: Vec<(LinkId, u64)>,
}

/// How long a flow's view remembers a link it received over: one to two of these.
pub(crate) const LINK_MEMORY: Duration = Duration::from_secs(1);

type FlowMap = HashMap<FlowId, RxFlow, foldhash::fast::FixedState>;

/// Per-flow reorder buffers.
#[derive(Debug)]
pub(crate) struct Reorder {
    flows: FlowMap,
    due: BTreeSet<(Instant, FlowId)>,
    out: VecDeque<Vec<u8>>,
    limit: usize,
    /// How much longer than the hold time in force the latest late packet would have
    /// needed ([`Self::extra_hold`]), and when it came.
    late_by: Duration,
    late_at: Instant,
    /// Most that [`Self::extra_hold`] learns (the endpoint's longest hold).
    pub(crate) max_extra: Duration,
    /// Per link index: the highest global sequence it delivered, and when it last
    /// delivered one ([`behind`]).
    rx_links: Vec<(u64, Instant)>,
    /// Flows whose first gap waits for a link that is behind it.
    waiting: Vec<FlowId>,
    /// The links (a bit per link index) that may carry data now (not down), set by the
    /// endpoint: one of them that delivered nothing lately may bring a flow's first
    /// packet over it ([`Self::skip_lost`]).
    pub(crate) live: u64,
    /// The links (a bit per link index) this endpoint does not have up (suspect or down),
    /// set by the endpoint ([`quiet`]).
    pub(crate) not_up: u64,
    /// Whether gaps no link can fill are given up at once ([`Self::skip_lost`]); not
    /// with a configured hold time.
    pub(crate) release_lost: bool,
    /// Playout alignment of redundant flows (`Config::redundant_align`).
    pub(crate) align: bool,
    /// Longest a first copy waits for its slower copies.
    pub(crate) max_align: Duration,
    pub(crate) stats: ReorderStats,
}

/// The extra hold learnt from a late packet halves every this long without another.
const LATE_HALF_LIFE: Duration = Duration::from_secs(10);

impl Reorder {
    pub(crate) fn new(limit: usize, hash_seed: u64) -> Self {
        Self {
            flows: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(hash_seed)),
            due: BTreeSet::new(),
            out: VecDeque::new(),
            limit,
            late_by: Duration::ZERO,
            late_at: Instant::ZERO,
            max_extra: Duration::MAX,
            rx_links: Vec::new(),
            waiting: Vec::new(),
            live: u64::MAX,
            not_up: 0,
            release_lost: true,
            align: false,
            max_align: Duration::MAX,
            stats: ReorderStats::default(),
        }
    }

    /// What to add to the hold time computed from the links' delays: as late as the
    /// latest packet that arrived after its gap had been given up, halving every
    /// [`LATE_HALF_LIFE`] since. A gap given up too early is a packet the inner flow
    /// takes for lost (a TCP retransmits, a TCP without SACK or RACK may wait for its
    /// RTO); the delay estimate missed a queue that once held that packet, and the next
    /// may be held as long (as RACK widens its reordering window on a spurious
    /// retransmission, RFC 8985 6.2).
    pub(crate) fn extra_hold(&self, now: Instant) -> Duration {
        let halvings = ((now - self.late_at).as_nanos() / LATE_HALF_LIFE.as_nanos()).min(31);
        self.late_by / (1u32 << halvings)
    }

    fn note_rx(&mut self, now: Instant, link: usize, gseq: u64) {
        if link >= 64 {
            return;
        }
        if self.rx_links.len() <= link {
            self.rx_links.resize(link + 1, (0, Instant::ZERO));
        }
        let l = &mut self.rx_links[link];
        l.0 = l.0.max(gseq);
        l.1 = now;
        // A flow waiting for a link that is behind its gap or quiet: once no link is, its
        // hold time is in force again.
        let mut i = 0;
        while i < self.waiting.len() {
            let id = self.waiting[i];
            if self.unwait(now, id) {
                self.waiting.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Whether the first packet held in `f` is worth waiting for past its hold time: a
    /// link that was carrying the flow has not passed its gap
    /// ([`RxFlow::link_behind_gap`]), or the gap [`may_still_come`] by the global sequence.
    fn first_may_still_come(
        f: &RxFlow,
        links: &[(u64, Instant)],
        not_up: u64,
        now: Instant,
    ) -> bool {
        f.held.values().next().is_some_and(|h| {
            f.link_behind_gap(h, now)
                || h.bound_by
                    .is_some_and(|g| may_still_come(links, f.links(), not_up, g, h.arrived, now))
        })
    }

    /// For flow `id`, waiting past its hold time (`waiting`): whether that is over (the
    /// flow is gone, or its first held packet no longer [`Self::first_may_still_come`]),
    /// and if so the hold time is back in force. The caller takes `id` off `waiting`.
    fn unwait(&mut self, now: Instant, id: FlowId) -> bool {
        let Some(f) = self.flows.get_mut(&id) else {
            return true;
        };
        if Self::first_may_still_come(f, &self.rx_links, self.not_up, now) {
            return false;
        }
        for h in f.held.values_mut() {
            if let Some(t) = h.held_until.take() {
                h.deadline = t;
            }
        }
        Self::reschedule(&mut self.due, id, f);
        true
    }

    /// The flow sequence number `flow` expects next (0 for a flow not seen yet).
    pub(crate) fn expected(&self, flow: FlowId) -> u64 {
        self.flows.get(&flow).map_or(0, |f| f.next)
    }

    /// Packets held, all flows (waiting for a gap or for their playout time).
    pub(crate) fn held(&self) -> usize {
        self.flows
            .values()
            .map(|f| {
                f.held.values().filter(|h| !h.passed).count()
                    + f.play.as_ref().map_or(0, |p| p.queue.len())
            })
            .sum()
    }

    fn flow(flows: &mut FlowMap, now: Instant, flow: FlowId) -> &mut RxFlow {
        flows.entry(flow).or_insert_with(|| RxFlow {
            next: 0,
            held: BTreeMap::new(),
            due: None,
            last_active: now,
            skipped_at: None,
            window: [RxWindow::default(); 2],
            window_since: now,
            hold: None,
            key: None,
            reliable: false,
            counts: FlowCounts::default(),
            by_link: Vec::new(),
            play: None,
            repaired: false,
            newest_gseq: 0,
        })
    }

    /// Notes a duplicate of global sequence `gseq` of `flow` that came over `link`: the
    /// link is noted as [`Self::note_link`] does, and with alignment on, the copy's lag
    /// behind the first copy is learnt.
    pub(crate) fn note_copy(&mut self, now: Instant, flow: FlowId, gseq: u64, link: usize) {
        self.note_rx(now, link, gseq);
        let f = Self::flow(&mut self.flows, now, flow);
        Self::note(f, now, link);
        f.window[0].copies = f.window[0].copies.saturating_add(1);
        let copies = f.arrives_as_copies();
        if let Some(p) = f.play.as_mut() {
            p.second_copy(now, gseq, link, copies);
        }
    }

    /// Notes that a packet of `flow` (new or a duplicate) came over link `link` (an index
    /// below 64; others are not recorded), for [`Self::flow_views`].
    pub(crate) fn note_link(&mut self, now: Instant, flow: FlowId, link: usize) {
        Self::note(Self::flow(&mut self.flows, now, flow), now, link);
    }

    fn note(f: &mut RxFlow, now: Instant, link: usize) {
        let since = now - f.window_since;
        if since >= LINK_MEMORY {
            let ended = f.window[0];
            if let Some(p) = f.play.as_mut() {
                p.window_ended(ended.firsts, ended.copies, ended.links);
            }
            let keep = since < LINK_MEMORY * 2;
            f.window = [
                RxWindow::default(),
                if keep { ended } else { RxWindow::default() },
            ];
            f.window_since = now;
        }
        f.window[0].links |= 1u64.checked_shl(link as u32).unwrap_or(0);
    }

    /// The `limit` busiest flows' reordering (most packets received first); `link_id`
    /// names the link of an index. Only those are built: a status request must not
    /// allocate for every one of thousands of flows.
    pub(crate) fn flow_views(
        &self,
        limit: usize,
        link_id: impl Fn(usize) -> LinkId,
    ) -> Vec<FlowReorderView> {
        let mut busiest: Vec<(&FlowId, &RxFlow)> = self.flows.iter().collect();
        let order = |a: &(&FlowId, &RxFlow), b: &(&FlowId, &RxFlow)| {
            (b.1.counts.received, a.0.0).cmp(&(a.1.counts.received, b.0.0))
        };
        if busiest.len() > limit && limit > 0 {
            busiest.select_nth_unstable_by(limit - 1, order);
        }
        busiest.truncate(limit);
        busiest.sort_unstable_by(order);
        busiest
            .into_iter()
            .map(|(id, f)| FlowReorderView {
                flow: *id,
                key: f.key,
                links: (0..64)
                    .filter(|i| (f.window[0].links | f.window[1].links) & (1 << i) != 0)
                    .map(&link_id)
                    .collect(),
                hold: f.hold,
                align: f.play.as_ref().filter(|p| p.on).map(|p| p.last_hold),
                counts: f.counts,
                received_by_link: f
                    .by_link
                    .iter()
                    .enumerate()
                    .filter(|&(_, by)| by.received > 0)
                    .map(|(i, by)| (link_id(i), by.received))
                    .collect(),
            })
            .collect()
    }

    /// Accepts a packet that passed duplicate suppression (no link noted).
    #[cfg(test)]
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        hold: Duration,
        flow: FlowId,
        seq: u64,
        data: Vec<u8>,
    ) {
        self.insert_via(now, hold, flow, None, None, seq, data, false);
    }

    /// Accepts the first copy of global sequence `gseq`, flow sequence `seq`, which came
    /// over link `link`: [`Self::insert_via`] with the copy remembered for alignment.
    /// `repaired`: the packet came as DATA_RECOVERED (its sender re-sends the flow's
    /// losses).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn insert_copy(
        &mut self,
        now: Instant,
        hold: Duration,
        flow: FlowId,
        link: usize,
        gseq: u64,
        seq: u64,
        data: Vec<u8>,
        repaired: bool,
    ) {
        self.note_rx(now, link, gseq);
        self.insert_via(now, hold, flow, Some(link), Some(gseq), seq, data, repaired);
    }

    /// Accepts a packet that passed duplicate suppression, which came over link `link`
    /// (noted as [`Self::note_link`] does, in the same lookup), global sequence `gseq`
    /// (with alignment on, remembered as a first copy).
    #[allow(clippy::too_many_arguments)]
    fn insert_via(
        &mut self,
        now: Instant,
        hold: Duration,
        flow: FlowId,
        link: Option<usize>,
        gseq: Option<u64>,
        seq: u64,
        data: Vec<u8>,
        repaired: bool,
    ) {
        let extra = self.extra_hold(now);
        let f = Self::flow(&mut self.flows, now, flow);
        f.repaired = repaired;
        if let Some(l) = link {
            Self::note(f, now, l);
            f.window[0].firsts = f.window[0].firsts.saturating_add(1);
            if f.by_link.len() <= l {
                f.by_link.resize(l + 1, FlowLinkRx::default());
            }
            let by = &mut f.by_link[l];
            by.received += 1;
            by.past = by.past.max(seq.saturating_add(1));
            by.at = now;
        }
        if self.align
            && let (Some(l), Some(g)) = (link, gseq)
        {
            f.play
                .get_or_insert_with(|| Box::new(Playout::new(now)))
                .first_copy(now, g, l);
        }
        let align = match (f.play.as_mut(), link) {
            (Some(p), Some(l)) => p.hold(now, l, self.max_align),
            _ => Duration::ZERO,
        };
        let play_at = now + align;
        if align > Duration::ZERO {
            self.stats.aligned += 1;
        }
        f.last_active = now;
        f.counts.received += 1;
        if f.key.is_none()
            && let Ok(info) = crate::classify::classify(&data)
        {
            f.key = Some(info.key);
            f.reliable = info.reliable;
        }
        if seq < f.next {
            f.counts.late_delivered += 1;
            self.stats.late_delivered += 1;
            if let Some(t) = f.skipped_at {
                // The hold in force then was short by `now - t`.
                self.late_by = ((now - t) + extra).min(self.max_extra);
                self.late_at = now;
            }
            Self::emit(f, now, play_at, data, &mut self.out);
            Self::reschedule(&mut self.due, flow, f);
            return;
        }
        if let Some(g) = gseq {
            f.newest_gseq = f.newest_gseq.max(g);
        }
        if seq == f.next {
            f.next += 1;
            Self::emit(f, now, play_at, data, &mut self.out);
            self.stats.delivered += 1;
            Self::drain_in_order(f, now, &mut self.out, &mut self.stats);
        } else {
            if f.held.contains_key(&seq) {
                // Cannot happen after dedup; ignore rather than overwrite.
                return;
            }
            // A TCP acknowledgement goes on at once: what it says does not depend on
            // the segments before it (`acknowledges_only`), and held, it would stop its
            // connection's sender until the gap fills or is given up, which then sends
            // a burst (after a cut, a window's worth at once). Its place is kept, so
            // the gap is waited for and given up as before.
            let passed = play_at <= now && crate::classify::acknowledges_only(&data);
            let data = if passed {
                self.out.push_back(data);
                self.stats.delivered += 1;
                self.stats.acks_passed += 1;
                Vec::new()
            } else {
                data
            };
            f.held.insert(
                seq,
                Held {
                    data,
                    arrived: now,
                    deadline: now + hold,
                    play_at,
                    gseq,
                    // The packets missing before a repaired flow's packet may have been
                    // bound after it: its sender takes an aggregate flow's packets from
                    // behind the head for a slower link (4.2 of `docs/protocol.md`), and
                    // binds the packets ahead of it later, for the links ahead, which
                    // may have delivered past it meanwhile. Packets bound in the flow's
                    // order were bound before it, and the newest one received is as
                    // good a mark for them once the links' lag has passed, which the
                    // hold of such a flow, a resend's wait, covers.
                    bound_by: if repaired {
                        gseq.map(|g| g.max(f.newest_gseq))
                    } else {
                        gseq
                    },
                    held_until: None,
                    passed,
                },
            );
            if !passed {
                self.stats.held += 1;
                f.counts.held += 1;
                f.hold = Some(hold);
            }
            if f.held.len() > self.limit {
                // Give up the oldest gap now.
                let first = *f.held.keys().next().expect("non-empty");
                self.stats.overflow_released += 1;
                Self::skip_to(f, first, now, &mut self.out, &mut self.stats);
            }
        }
        if self.release_lost && !f.repaired && !f.held.is_empty() {
            let live = self.live;
            Self::skip_lost(f, &self.rx_links, live, now, &mut self.out, &mut self.stats);
        }
        Self::reschedule(&mut self.due, flow, f);
        // This packet may have been the one its link needed to pass the flow's gap
        // ([`RxFlow::link_behind_gap`]), after `note_rx` looked.
        if let Some(i) = self.waiting.iter().position(|&id| id == flow)
            && self.unwait(now, flow)
        {
            self.waiting.swap_remove(i);
        }
    }

    /// Gives up, at once, the gaps of a flow whose sender does not re-send its losses
    /// (not DATA_RECOVERED) that no link can fill any more: every link the flow's packets
    /// came over lately has delivered a packet bound after the first one held behind the
    /// gap (`behind`), and every link that may carry data (`live`) delivered something
    /// lately. One that did not may be bringing the flow's first packet over it (the
    /// overflow policy's secondary link as it starts, the one packet a min-rtt flow sends
    /// on an idle slow link), or be in an outage with the packet on it. Each link
    /// delivers in the order it sends and packets are bound in global order, so the
    /// missing packet was lost (one sent again after its link failed comes over a link
    /// still behind it). The hold time is what the links' delay spread lets a packet be
    /// late by; a flow on one link (a call beside a download spread over a slow link)
    /// would otherwise wait that long at each of its losses.
    ///
    /// A packet that comes after all (the flow moved to a busy link it had not used) is
    /// delivered late, and does not lengthen every flow's hold as a gap that its hold
    /// time gave up too early does ([`Self::extra_hold`]).
    fn skip_lost(
        f: &mut RxFlow,
        links: &[(u64, Instant)],
        live: u64,
        now: Instant,
        out: &mut VecDeque<Vec<u8>>,
        stats: &mut ReorderStats,
    ) {
        let idle = |i: usize| {
            links
                .get(i)
                .is_none_or(|&(_, at)| at == Instant::ZERO || now - at >= LINK_MEMORY)
        };
        let mut rest = live;
        while rest != 0 {
            let i = rest.trailing_zeros() as usize;
            if idle(i) {
                return;
            }
            rest &= rest - 1;
        }
        let flow_links = f.links();
        while let Some((&seq, h)) = f.held.first_key_value() {
            match h.gseq {
                Some(g) if !behind(links, flow_links, g, now) => {
                    stats.gaps_lost += 1;
                    Self::skip_to(f, seq, now, out, stats);
                    f.skipped_at = None;
                }
                _ => break,
            }
        }
    }

    fn skip_to(
        f: &mut RxFlow,
        seq: u64,
        now: Instant,
        out: &mut VecDeque<Vec<u8>>,
        stats: &mut ReorderStats,
    ) {
        if seq > f.next {
            // Missing sequence numbers that are not held are given up. Count them without
            // walking the gap: a peer may jump the flow sequence by 2^31 (the held packets
            // in the range are few, bounded by the reorder limit).
            let held = f.held.range(f.next..seq).count() as u64;
            let missing = (seq - f.next) - held;
            stats.gaps_skipped += missing;
            f.counts.gaps_skipped += missing;
            if missing > 0 {
                f.skipped_at = Some(now);
            }
        }
        // Release everything held up to `seq`, in order.
        while let Some((&s, _)) = f.held.first_key_value() {
            if s > seq {
                break;
            }
            let (s, h) = f.held.pop_first().expect("checked");
            Self::release(f, h, now, out, stats);
            f.next = s + 1;
        }
        f.next = f.next.max(seq + 1);
        Self::drain_in_order(f, now, out, stats);
    }

    fn drain_in_order(
        f: &mut RxFlow,
        now: Instant,
        out: &mut VecDeque<Vec<u8>>,
        stats: &mut ReorderStats,
    ) {
        while let Some(h) = f.held.remove(&f.next) {
            Self::release(f, h, now, out, stats);
            f.next += 1;
        }
    }

    fn release(
        f: &mut RxFlow,
        h: Held,
        now: Instant,
        out: &mut VecDeque<Vec<u8>>,
        stats: &mut ReorderStats,
    ) {
        if h.passed {
            return;
        }
        let waited = (now - h.arrived).as_nanos() as u64;
        stats.max_hold_ns = stats.max_hold_ns.max(waited);
        stats.delivered += 1;
        Self::emit(f, now, h.play_at, h.data, out);
    }

    /// Hands a packet the reorder stage released to the TUN side, or to the flow's
    /// playout queue while it is early or others wait there before it.
    fn emit(
        f: &mut RxFlow,
        now: Instant,
        play_at: Instant,
        data: Vec<u8>,
        out: &mut VecDeque<Vec<u8>>,
    ) {
        match f.play.as_mut() {
            Some(p) if play_at > now || !p.queue.is_empty() => p.queue.push_back((play_at, data)),
            _ => out.push_back(data),
        }
    }

    /// Delivers the flow's playout queue up to the first packet still early.
    fn play_due(f: &mut RxFlow, now: Instant, out: &mut VecDeque<Vec<u8>>) {
        if let Some(p) = f.play.as_mut() {
            while p.queue.front().is_some_and(|(t, _)| *t <= now) {
                out.push_back(p.queue.pop_front().expect("checked").1);
            }
        }
    }

    fn reschedule(due: &mut BTreeSet<(Instant, FlowId)>, id: FlowId, f: &mut RxFlow) {
        let playout = f
            .play
            .as_ref()
            .and_then(|p| p.queue.front().map(|(t, _)| *t));
        let earliest = f.held.values().map(|h| h.deadline).chain(playout).min();
        if earliest != f.due {
            if let Some(d) = f.due {
                due.remove(&(d, id));
            }
            if let Some(d) = earliest {
                due.insert((d, id));
            }
            f.due = earliest;
        }
    }

    /// Earliest hold deadline.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.due.first().map(|(t, _)| *t)
    }

    /// Releases every held packet whose deadline has passed, skipping the gaps before it.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.due.first() {
            if deadline > now {
                break;
            }
            self.due.pop_first();
            let Some(f) = self.flows.get_mut(&id) else {
                continue;
            };
            f.due = None;
            // The first gap's packet may still be on a link that is behind it or quiet
            // (`first_may_still_come`): its hold time waits until that link passes the gap or
            // delivers again (`note_rx`), at most the longest hold from the first packet
            // held, in a flow for which waiting is worth it (`RxFlow::waits_for_links`).
            let first = f.held.values().next().filter(|_| f.waits_for_links());
            let until = first.and_then(|h| {
                let until = h.arrived + self.max_extra;
                (now < until && Self::first_may_still_come(f, &self.rx_links, self.not_up, now))
                    .then_some(until)
            });
            if let Some(until) = until {
                for h in f.held.values_mut().filter(|h| h.deadline <= now) {
                    h.held_until.get_or_insert(h.deadline);
                    h.deadline = until;
                }
                if !self.waiting.contains(&id) {
                    self.waiting.push(id);
                    self.stats.waited_for_links += 1;
                }
            }
            let last_due = f
                .held
                .iter()
                .filter(|(_, h)| h.deadline <= now)
                .map(|(s, _)| *s)
                .max();
            if let Some(seq) = last_due {
                Self::skip_to(f, seq, now, &mut self.out, &mut self.stats);
            }
            Self::play_due(f, now, &mut self.out);
            Self::reschedule(&mut self.due, id, f);
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// Forgets flows idle for `timeout` with nothing held.
    pub(crate) fn expire_idle(&mut self, now: Instant, timeout: Duration) {
        self.flows.retain(|_, f| {
            !f.held.is_empty()
                || f.play.as_ref().is_some_and(|p| !p.queue.is_empty())
                || now - f.last_active < timeout
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    const HOLD: Duration = Duration::from_millis(50);

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn drain(r: &mut Reorder) -> Vec<u8> {
        let mut v = Vec::new();
        while let Some(p) = r.pop() {
            v.push(p[0]);
        }
        v
    }

    #[test]
    fn dedup_new_then_duplicate_then_too_old() {
        let mut d = Dedup::new();
        assert_eq!(d.check_and_insert(5), Seen::New);
        assert_eq!(d.check_and_insert(5), Seen::Duplicate);
        assert_eq!(d.check_and_insert(3), Seen::New);
        assert_eq!(d.check_and_insert(5 + DEDUP_WINDOW), Seen::New);
        assert_eq!(d.check_and_insert(5), Seen::TooOld);
        assert_eq!(
            d.check_and_insert(6),
            Seen::New,
            "skipped-over numbers are not seen"
        );
    }

    #[test]
    fn in_order_packets_pass_straight_through() {
        let mut r = Reorder::new(100, 0);
        for s in 0..3 {
            r.insert(t(0), HOLD, FlowId(1), s, vec![s as u8]);
        }
        assert_eq!(drain(&mut r), vec![0, 1, 2]);
        assert_eq!(r.stats.held, 0);
    }

    #[test]
    fn gap_filled_before_deadline_releases_in_order() {
        let mut r = Reorder::new(100, 0);
        r.insert(t(0), HOLD, FlowId(1), 0, vec![0]);
        r.insert(t(1), HOLD, FlowId(1), 2, vec![2]);
        assert_eq!(drain(&mut r), vec![0]);
        r.insert(t(10), HOLD, FlowId(1), 1, vec![1]);
        assert_eq!(drain(&mut r), vec![1, 2]);
        assert_eq!(r.next_deadline(), None);
    }

    #[test]
    fn gap_not_filled_by_deadline_is_skipped_and_late_packet_delivered_out_of_order() {
        let mut r = Reorder::new(100, 0);
        r.insert(t(0), HOLD, FlowId(1), 1, vec![1]);
        assert_eq!(r.next_deadline(), Some(t(50)));
        r.handle_timeout(t(49));
        assert!(drain(&mut r).is_empty());
        r.handle_timeout(t(50));
        assert_eq!(drain(&mut r), vec![1]);
        assert_eq!(r.stats.gaps_skipped, 1);
        r.insert(t(60), HOLD, FlowId(1), 0, vec![0]);
        assert_eq!(drain(&mut r), vec![0]);
        assert_eq!(r.stats.late_delivered, 1);
        // In order again after it.
        r.insert(t(61), HOLD, FlowId(1), 2, vec![2]);
        assert_eq!(drain(&mut r), vec![2]);
    }

    #[test]
    fn a_late_packet_lengthens_the_hold_by_its_lateness_then_it_decays() {
        let mut r = Reorder::new(100, 0);
        r.max_extra = Duration::from_millis(500);
        assert_eq!(r.extra_hold(t(0)), Duration::ZERO);
        r.insert(t(0), HOLD, FlowId(1), 1, vec![1]);
        r.handle_timeout(t(50));
        // Packet 0 comes 12 ms after its gap was given up: the hold was 12 ms short.
        r.insert(t(62), HOLD, FlowId(1), 0, vec![0]);
        assert_eq!(r.extra_hold(t(62)), Duration::from_millis(12));
        // Halved after the half-life without another late packet, and so on.
        let later = t(62) + LATE_HALF_LIFE;
        assert_eq!(r.extra_hold(later), Duration::from_millis(6));
        assert_eq!(
            r.extra_hold(later + LATE_HALF_LIFE),
            Duration::from_millis(3)
        );
        // A packet arriving in order teaches nothing.
        r.insert(later, HOLD, FlowId(1), 2, vec![2]);
        assert_eq!(r.extra_hold(later), Duration::from_millis(6));
        // Nor does a reordered one that arrives within the hold.
        r.insert(later, HOLD, FlowId(2), 1, vec![1]);
        r.insert(later, HOLD, FlowId(2), 0, vec![0]);
        assert_eq!(r.extra_hold(later), Duration::from_millis(6));
        assert_eq!(r.stats.late_delivered, 1);
    }

    #[test]
    fn a_flow_remembers_its_links_for_one_to_two_memories() {
        let mut r = Reorder::new(100, 0);
        let f = FlowId(1);
        let links = |r: &Reorder| r.flow_views(1, |i| LinkId(i as u16))[0].links.clone();
        let m = LINK_MEMORY.as_millis() as u64;
        r.note_link(t(0), f, 0);
        r.note_link(t(500), f, 2);
        r.note_link(t(m), f, 0);
        assert_eq!(links(&r), [LinkId(0), LinkId(2)]);
        // Link 2 was last seen at 500 ms: remembered until the memory after it ends.
        r.note_link(t(2 * m - 1), f, 0);
        assert_eq!(links(&r), [LinkId(0), LinkId(2)]);
        r.note_link(t(2 * m), f, 0);
        assert_eq!(links(&r), [LinkId(0)]);
        // A silence of two memories forgets everything but the link of the packet.
        r.note_link(t(4 * m), f, 3);
        assert_eq!(links(&r), [LinkId(3)]);
        // An index beyond the mask is not recorded (no panic).
        r.note_link(t(4 * m), f, 64);
        assert_eq!(links(&r), [LinkId(3)]);
    }

    #[test]
    fn flows_report_their_links_hold_and_counts_busiest_first() {
        let mut r = Reorder::new(100, 0);
        r.note_link(t(0), FlowId(1), 1);
        r.insert(t(0), HOLD, FlowId(1), 0, vec![1]);
        for s in [2, 3] {
            r.note_link(t(1), FlowId(2), 0);
            r.insert(t(1), HOLD, FlowId(2), s, vec![9]);
        }
        r.handle_timeout(t(51));
        let v = r.flow_views(8, |i| LinkId(10 + i as u16));
        assert_eq!(v.len(), 2);
        // The busiest alone when asked for one.
        let one = r.flow_views(1, |i| LinkId(i as u16));
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].flow, FlowId(2));
        assert_eq!(v[0].flow, FlowId(2));
        assert_eq!(v[0].links, [LinkId(10)]);
        assert_eq!(v[0].hold, Some(HOLD));
        let c = v[0].counts;
        assert_eq!(
            (c.received, c.held, c.gaps_skipped, c.late_delivered),
            (2, 2, 2, 0)
        );
        assert_eq!(v[1].links, [LinkId(11)]);
        assert_eq!(v[1].hold, None, "never out of order");
        // Not an IP packet: no 5-tuple.
        assert_eq!(v[1].key, None);
    }

    /// How the binding point spread a flow: its first copies counted per link, a
    /// duplicate (a redundant flow's second copy) not.
    #[test]
    fn a_flow_counts_what_each_link_delivered_of_it() {
        let mut r = Reorder::new(100, 0);
        let f = FlowId(1);
        for (seq, link) in [(0, 2), (1, 0), (2, 2), (3, 2)] {
            r.insert_copy(t(seq), HOLD, f, link, seq, seq, vec![0], false);
        }
        r.note_copy(t(4), f, 3, 0);
        let v = r.flow_views(1, |i| LinkId(10 + i as u16));
        assert_eq!(v[0].counts.received, 4);
        assert_eq!(v[0].received_by_link, [(LinkId(10), 1), (LinkId(12), 3)]);
        // Packets accepted without a link are counted as received only.
        r.insert(t(5), HOLD, f, 4, vec![0]);
        let v = r.flow_views(1, |i| LinkId(10 + i as u16));
        assert_eq!(v[0].counts.received, 5);
        assert_eq!(v[0].received_by_link, [(LinkId(10), 1), (LinkId(12), 3)]);
    }

    #[test]
    fn gap_in_one_flow_does_not_hold_another() {
        let mut r = Reorder::new(100, 0);
        r.insert(t(0), HOLD, FlowId(1), 1, vec![1]);
        r.insert(t(0), HOLD, FlowId(2), 0, vec![9]);
        assert_eq!(drain(&mut r), vec![9]);
    }

    #[test]
    fn huge_flow_seq_jump_skipped_without_walking_the_gap() {
        // A single forged packet far ahead of its flow: giving up the gap must not walk
        // 2^31 sequence numbers (found by the engine_datagrams fuzz target).
        let mut r = Reorder::new(100, 0);
        r.insert(t(0), HOLD, FlowId(1), 0x7fff_ffff, vec![1]);
        r.handle_timeout(t(50));
        assert_eq!(drain(&mut r), vec![1]);
        assert_eq!(r.stats.gaps_skipped, 0x7fff_ffff);
    }

    #[test]
    fn full_reorder_buffer_releases_oldest_gap() {
        let mut r = Reorder::new(3, 0);
        for s in 1..=4 {
            r.insert(t(0), HOLD, FlowId(1), s, vec![s as u8]);
        }
        assert_eq!(drain(&mut r), vec![1, 2, 3, 4]);
        assert_eq!(r.stats.overflow_released, 1);
    }

    /// A copy of packet `seq` arriving at `at` over `link`.
    #[derive(Clone, Copy)]
    struct Copy {
        at: Instant,
        link: usize,
        seq: u64,
    }

    /// Feeds the copies (global sequence = flow sequence, one flow) in time order through
    /// a duplicate filter and an aligning reorder stage, firing its timers; returns when
    /// each packet was delivered.
    fn play(align: bool, mut copies: Vec<Copy>) -> Vec<(u64, Instant)> {
        copies.sort_by_key(|c| c.at);
        let mut r = Reorder::new(100, 0);
        r.align = align;
        r.max_align = Duration::from_millis(500);
        let mut d = Dedup::new();
        let mut out = Vec::new();
        let mut drain_at = |r: &mut Reorder, now: Instant| {
            while let Some(p) = r.pop() {
                out.push((u64::from_be_bytes(p[..8].try_into().unwrap()), now));
            }
        };
        for c in copies {
            while let Some(due) = r.next_deadline().filter(|due| *due <= c.at) {
                r.handle_timeout(due);
                drain_at(&mut r, due);
            }
            match d.check_and_insert(c.seq) {
                Seen::New => r.insert_copy(
                    c.at,
                    HOLD,
                    FlowId(1),
                    c.link,
                    c.seq,
                    c.seq,
                    c.seq.to_be_bytes().to_vec(),
                    true,
                ),
                _ => r.note_copy(c.at, FlowId(1), c.seq, c.link),
            }
            drain_at(&mut r, c.at);
        }
        while let Some(due) = r.next_deadline() {
            r.handle_timeout(due);
            drain_at(&mut r, due);
        }
        out
    }

    fn max_gap(delivered: &[(u64, Instant)]) -> Duration {
        delivered
            .windows(2)
            .map(|w| w[1].1 - w[0].1)
            .max()
            .unwrap_or_default()
    }

    /// Packets every 20 ms from t = 0, a copy over link 0 after 10 ms and over link 1
    /// after 25 ms, except those `lost` drops.
    fn two_links(n: u64, lost: impl Fn(usize, u64) -> bool) -> Vec<Copy> {
        let mut v = Vec::new();
        for seq in 0..n {
            for (link, delay) in [(0, 10), (1, 25)] {
                if !lost(link, seq) {
                    let at = t(seq * 20 + delay);
                    v.push(Copy { at, link, seq });
                }
            }
        }
        v
    }

    #[test]
    fn a_redundant_flow_is_delivered_at_the_pace_of_its_slower_copies() {
        // The fast link loses a copy now and then and dies from packet 300 to 400.
        let lost =
            |link: usize, seq: u64| link == 0 && (seq % 37 == 20 || (300..400).contains(&seq));
        let plain = play(false, two_links(600, lost));
        let aligned = play(true, two_links(600, lost));
        assert_eq!(plain.len(), 600);
        assert_eq!(aligned.len(), 600);
        assert!(aligned.windows(2).all(|w| w[0].0 < w[1].0), "in order");
        // Without alignment a lost fast copy leaves a gap of the spacing plus the delay
        // difference, 35 ms.
        assert_eq!(max_gap(&plain), ms(35));
        // Aligned: the first packets are delivered at once, then the hold grows by a
        // quarter of the spacing per packet to the links' 15 ms difference.
        assert!(max_gap(&aligned) <= ms(25), "{:?}", max_gap(&aligned));
        let latency = |seq: u64| {
            let at = aligned.iter().find(|(s, _)| *s == seq).unwrap().1;
            at - t(seq * 20)
        };
        assert_eq!(latency(0), ms(10));
        for seq in [50, 299, 300, 350, 400, 450, 599] {
            assert_eq!(latency(seq), ms(25), "packet {seq}");
        }
        assert!(
            aligned
                .windows(2)
                .skip(10)
                .all(|w| w[1].1 - w[0].1 == ms(20))
        );
    }

    #[test]
    fn copies_that_left_late_do_not_hold_the_flow_back() {
        let mut copies = two_links(300, |link, seq| link == 0 && (100..150).contains(&seq));
        // Link 0 comes back and sends the copies it held, half a second late, then a
        // lone late copy on the slow link just before a long pause of link 0's.
        for seq in 140..150 {
            copies.push(Copy {
                at: t(seq * 20 + 500),
                link: 0,
                seq,
            });
        }
        copies.retain(|c| !(c.link == 1 && c.seq == 200));
        copies.push(Copy {
            at: t(200 * 20 + 600),
            link: 1,
            seq: 200,
        });
        copies.retain(|c| !(c.link == 0 && (201..260).contains(&c.seq)));
        let aligned = play(true, copies);
        let latency = |seq: u64| {
            let at = aligned.iter().find(|(s, _)| *s == seq).unwrap().1;
            at - t(seq * 20)
        };
        for seq in [99, 100, 149, 150, 200, 201, 259, 260, 299] {
            assert_eq!(latency(seq), ms(25), "packet {seq}");
        }
        let gaps: Vec<_> = aligned[10..]
            .windows(2)
            .filter(|w| w[1].1 - w[0].1 != ms(20))
            .collect();
        assert!(max_gap(&aligned[10..]) <= ms(20), "{gaps:?}");
    }

    #[test]
    fn a_flow_with_few_duplicates_is_not_held() {
        // A bulk flow over two links, 1 ms apart, alternating; one packet in ten arrives
        // twice (a spurious reinjection on the other link, 30 ms later).
        let mut copies = Vec::new();
        for seq in 0..1000u64 {
            let link = (seq % 2) as usize;
            copies.push(Copy {
                at: t(seq),
                link,
                seq,
            });
            if seq % 10 == 0 {
                copies.push(Copy {
                    at: t(seq + 30),
                    link: 1 - link,
                    seq,
                });
            }
        }
        let aligned = play(true, copies);
        assert_eq!(aligned.len(), 1000);
        assert!(aligned.iter().all(|(seq, at)| *at == t(*seq)));
    }

    /// Delivers what is out at `now`, after firing the timers due by then.
    fn at(r: &mut Reorder, now: Instant) -> Vec<u8> {
        while let Some(due) = r.next_deadline().filter(|d| *d <= now) {
            r.handle_timeout(due);
        }
        drain(r)
    }

    /// A reorder stage with the longest hold `max`, and flow 1's packets 0 (at 0 ms, over
    /// link 0) and 1 (at 1 ms, over link 1) delivered. Packet `s` of flow 1 has global
    /// sequence `2 s`, so another flow's packets can be bound between two of its own.
    fn flow1_on_two_links(max: Duration) -> Reorder {
        let mut r = Reorder::new(100, 0);
        r.max_extra = max;
        r.insert_copy(t(0), HOLD, FlowId(1), 0, 0, 0, vec![0], true);
        r.insert_copy(t(1), HOLD, FlowId(1), 1, 2, 1, vec![1], true);
        assert_eq!(drain(&mut r), vec![0, 1]);
        r
    }

    /// Flow 1's packet `s` at `ms` over `link`.
    fn flow1(r: &mut Reorder, ms: u64, link: usize, s: u64) {
        r.insert_copy(t(ms), HOLD, FlowId(1), link, 2 * s, s, vec![s as u8], true);
    }

    #[test]
    fn alignment_stops_when_the_sender_stops_copying() {
        // Copies over both links for 2 s, then each packet over one link only, the two
        // links in turn: after two windows of packets over two links without a copy the
        // flow is no longer held for the slower link.
        let copies = (0..300u64)
            .flat_map(|seq| {
                let links: &[(usize, u64)] = if seq < 100 {
                    &[(0, 10), (1, 25)]
                } else if seq % 2 == 0 {
                    &[(0, 10)]
                } else {
                    &[(1, 25)]
                };
                links.iter().map(move |&(link, delay)| Copy {
                    at: t(seq * 20 + delay),
                    link,
                    seq,
                })
            })
            .collect();
        let aligned = play(true, copies);
        let latency = |seq: u64| {
            let at = aligned.iter().find(|(s, _)| *s == seq).unwrap().1;
            at - t(seq * 20)
        };
        assert_eq!(latency(98), ms(25), "aligned while copied");
        assert_eq!(
            latency(102),
            ms(25),
            "a window without copies is not enough"
        );
        for seq in [250, 298] {
            assert_eq!(latency(seq), ms(10), "packet {seq}");
        }
    }

    #[test]
    fn a_gap_waits_past_its_hold_while_a_link_is_behind_it() {
        // 2 goes on the slow link (1), 3..6 on the fast one (0).
        let mut r = flow1_on_two_links(ms(500));
        for s in 3..6 {
            flow1(&mut r, s, 0, s);
        }
        // Link 1 keeps delivering, another flow's packet bound between 1 and 2, past the
        // hold time of 3: the gap waits.
        r.insert_copy(t(40), HOLD, FlowId(2), 1, 3, 0, vec![9], true);
        assert_eq!(drain(&mut r), vec![9]);
        assert_eq!(
            at(&mut r, t(80)),
            Vec::<u8>::new(),
            "held past 3's hold time (53 ms)"
        );
        assert_eq!(r.stats.waited_for_links, 1);
        flow1(&mut r, 90, 1, 2);
        assert_eq!(drain(&mut r), vec![2, 3, 4, 5]);
        assert_eq!(r.stats.gaps_skipped, 0);
    }

    #[test]
    fn a_gap_of_a_flow_whose_losses_nobody_repairs_is_given_up_at_its_hold_time() {
        // As above, but flow 1 is neither TCP nor re-sent by its sender (a call): a packet
        // later than its hold is as good as lost to it, so the gap is not held for link 1.
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        let flow1 = |r: &mut Reorder, ms: u64, link: usize, s: u64| {
            r.insert_copy(t(ms), HOLD, FlowId(1), link, 2 * s, s, vec![s as u8], false)
        };
        flow1(&mut r, 0, 0, 0);
        flow1(&mut r, 1, 1, 1);
        assert_eq!(drain(&mut r), vec![0, 1]);
        for s in 3..6 {
            flow1(&mut r, s, 0, s);
        }
        r.insert_copy(t(40), HOLD, FlowId(2), 1, 3, 0, vec![9], true);
        assert_eq!(drain(&mut r), vec![9]);
        assert_eq!(at(&mut r, t(53)), vec![3, 4, 5], "at 3's hold time");
        assert_eq!(r.stats.waited_for_links, 0);
        assert_eq!(r.stats.gaps_skipped, 1);
    }

    /// A QUIC packet (UDP from port 443) whose first payload byte is `first`, ending with
    /// the byte `id`.
    fn quic(first: u8, id: u8) -> Vec<u8> {
        let mut p = vec![0u8; 30];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&30u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 77, 0, 1]);
        p[16..20].copy_from_slice(&[10, 77, 0, 2]);
        p[20..22].copy_from_slice(&443u16.to_be_bytes());
        p[22..24].copy_from_slice(&10_000u16.to_be_bytes());
        p[24..26].copy_from_slice(&10u16.to_be_bytes());
        p[28] = first;
        p[29] = id;
        p
    }

    #[test]
    fn a_quic_flows_gap_waits_for_a_link_behind_it_as_a_tcp_flows_does() {
        // As above, but flow 1 is QUIC, bound as min-rtt (not repaired): its sender
        // re-sends its losses and would take a gap given up for one. Its first packet has
        // QUIC's fixed bit; the later ones are greased (RFC 9287), which does not change
        // what the flow is.
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        let flow1 = |r: &mut Reorder, ms: u64, link: usize, s: u64| {
            let first = if s == 0 { 0x40 } else { 0x00 };
            r.insert_copy(
                t(ms),
                HOLD,
                FlowId(1),
                link,
                2 * s,
                s,
                quic(first, s as u8),
                false,
            )
        };
        let ids = |r: &mut Reorder, now| -> Vec<u8> {
            while let Some(due) = r.next_deadline().filter(|d| *d <= now) {
                r.handle_timeout(due);
            }
            std::iter::from_fn(|| r.pop())
                .map(|p| p.get(29).copied().unwrap_or(p[0]))
                .collect()
        };
        flow1(&mut r, 0, 0, 0);
        flow1(&mut r, 1, 1, 1);
        assert_eq!(ids(&mut r, t(1)), vec![0, 1]);
        for s in 3..6 {
            flow1(&mut r, s, 0, s);
        }
        r.insert_copy(t(40), HOLD, FlowId(2), 1, 3, 0, vec![9], true);
        assert_eq!(
            ids(&mut r, t(80)),
            vec![9],
            "held past 3's hold time (53 ms)"
        );
        assert_eq!(r.stats.waited_for_links, 1);
        flow1(&mut r, 90, 1, 2);
        assert_eq!(ids(&mut r, t(90)), vec![2, 3, 4, 5]);
        assert_eq!(r.stats.gaps_skipped, 0);
    }

    #[test]
    fn a_gap_does_not_wait_for_a_link_its_flow_has_not_used() {
        // Flow 1 (re-sent by its sender) comes over link 0 only and loses 2; link 1
        // carries another flow, and has not passed 2: it cannot hold flow 1's packet.
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        r.insert_copy(t(0), HOLD, FlowId(2), 1, 1, 0, vec![9], true);
        for s in [0, 1, 3, 4, 5] {
            flow1(&mut r, s, 0, s);
        }
        assert_eq!(drain(&mut r), vec![9, 0, 1]);
        r.insert_copy(t(40), HOLD, FlowId(2), 1, 5, 1, vec![9], true);
        assert_eq!(at(&mut r, t(53)), vec![9, 3, 4, 5], "at 3's hold time");
        assert_eq!(r.stats.waited_for_links, 0);
        assert_eq!(r.stats.gaps_skipped, 1);
    }

    #[test]
    fn a_gap_every_link_has_passed_is_given_up_at_its_hold_time() {
        // 2 is lost; the slow link then delivers 4, bound after it.
        let mut r = flow1_on_two_links(ms(500));
        flow1(&mut r, 3, 0, 3);
        flow1(&mut r, 20, 1, 4);
        assert_eq!(at(&mut r, t(52)), Vec::<u8>::new());
        assert_eq!(at(&mut r, t(53)), vec![3, 4], "at 3's hold time");
        assert_eq!(r.stats.gaps_skipped, 1);
        assert_eq!(r.stats.waited_for_links, 0);
    }

    /// Flow 1, whose sender does not re-send its losses (a call), over link 0: its
    /// packet `s` has global sequence `2 s` and comes at `s` ms; link 1 carries flow 2,
    /// whose packet bound between flow 1's 0 and 1 comes at 1 ms. `live`: the links that
    /// may carry data.
    fn call_on_link_0(live: u64, repaired: bool) -> Reorder {
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        r.live = live;
        r.insert_copy(t(1), HOLD, FlowId(2), 1, 1, 0, vec![9], true);
        for s in [0, 1] {
            r.insert_copy(t(s), HOLD, FlowId(1), 0, 2 * s, s, vec![s as u8], repaired);
        }
        assert_eq!(drain(&mut r), vec![9, 0, 1]);
        r
    }

    #[test]
    fn a_lost_packet_of_a_flow_nobody_repairs_is_given_up_once_no_link_can_bring_it() {
        // 2 is lost on link 0; 3 comes over link 0, bound after it: link 0 has passed 2,
        // and link 1, which delivers (flow 2), carries nothing of flow 1. Released at
        // once, not at 3's hold time (50 ms).
        let mut r = call_on_link_0(0b11, false);
        r.insert_copy(t(3), HOLD, FlowId(1), 0, 6, 3, vec![3], false);
        assert_eq!(drain(&mut r), vec![3], "released on arrival");
        assert_eq!((r.stats.gaps_lost, r.stats.gaps_skipped), (1, 1));
        // 2 comes after all (flow 1 had moved to link 1 for it): delivered late, and the
        // other flows' hold is not lengthened for it.
        r.insert_copy(t(30), HOLD, FlowId(1), 1, 4, 2, vec![2], false);
        assert_eq!(drain(&mut r), vec![2]);
        assert_eq!(r.stats.late_delivered, 1);
        assert_eq!(r.extra_hold(t(30)), Duration::ZERO);
    }

    #[test]
    fn a_lost_packet_waits_its_hold_while_an_idle_link_may_bring_it() {
        // As above, but link 2 is up and has delivered nothing lately: flow 1's packet 2
        // may be the first one over it (a flow that just moved there). Held to 3's hold.
        let mut r = call_on_link_0(0b111, false);
        r.insert_copy(t(3), HOLD, FlowId(1), 0, 6, 3, vec![3], false);
        assert_eq!(at(&mut r, t(52)), Vec::<u8>::new());
        assert_eq!(at(&mut r, t(53)), vec![3], "at 3's hold time");
        assert_eq!((r.stats.gaps_lost, r.stats.gaps_skipped), (0, 1));
    }

    #[test]
    fn a_lost_packet_of_a_repaired_flow_waits_for_its_resend() {
        // As in the first case, but the sender re-sends the flow's losses
        // (DATA_RECOVERED): 2 is coming again, so 3 waits.
        let mut r = call_on_link_0(0b11, true);
        r.insert_copy(t(3), HOLD, FlowId(1), 0, 6, 3, vec![3], true);
        assert_eq!(drain(&mut r), Vec::<u8>::new());
        r.insert_copy(t(40), HOLD, FlowId(1), 1, 4, 2, vec![2], true);
        assert_eq!(drain(&mut r), vec![2, 3]);
        assert_eq!((r.stats.gaps_lost, r.stats.gaps_skipped), (0, 0));
    }

    #[test]
    fn a_tcp_acknowledgement_passes_a_gap_that_data_waits_for() {
        use crate::classify::test_tcp;
        // A connection's segments as flow 1 of a repaired flow: 0 arrives, 1 is lost and
        // re-sent, 2 (an ACK with a SACK block, as Linux sends while data is missing the
        // other way), 3 (data) and 4 (a FIN) arrive before it.
        let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let seg = [
            test_tcp(1, 10, 0x10, &[], 0),
            test_tcp(1, 11, 0x10, &[], 0),
            test_tcp(1, 12, 0x10, &sack, 0),
            test_tcp(1, 12, 0x18, &[], 100),
            test_tcp(1, 12, 0x11, &[], 0),
        ];
        let out = |r: &mut Reorder| std::iter::from_fn(|| r.pop()).collect::<Vec<_>>();
        let mut r = Reorder::new(100, 0);
        for (at, s) in [(0, 0), (1, 2), (2, 3), (3, 4)] {
            r.insert_copy(
                t(at),
                HOLD,
                FlowId(1),
                0,
                s,
                s,
                seg[s as usize].clone(),
                true,
            );
        }
        assert_eq!(
            out(&mut r),
            [seg[0].clone(), seg[2].clone()],
            "the ACK went on"
        );
        assert_eq!(r.held(), 2, "the data and the FIN wait");
        assert_eq!((r.stats.acks_passed, r.stats.held), (1, 2));
        // The gap is still waited for: the resend fills it, and the ACK is not sent twice.
        r.insert_copy(t(30), HOLD, FlowId(1), 0, 5, 1, seg[1].clone(), true);
        assert_eq!(out(&mut r), [&seg[1], &seg[3], &seg[4]].map(|s| s.clone()));
        assert_eq!(
            (r.held(), r.stats.delivered, r.stats.gaps_skipped),
            (0, 5, 0)
        );
        assert_eq!(r.next_deadline(), None);
        // A gap before an ACK alone is still given up at the ACK's hold time (a packet
        // that comes after it is late), and the ACK is not delivered again then.
        r.insert_copy(t(40), HOLD, FlowId(1), 0, 7, 6, seg[1].clone(), true);
        assert_eq!(out(&mut r).len(), 1);
        r.handle_timeout(t(90));
        assert!(out(&mut r).is_empty());
        assert_eq!((r.stats.gaps_skipped, r.expected(FlowId(1))), (1, 7));
    }

    #[test]
    fn a_gap_waits_for_a_link_that_went_silent_no_longer_than_the_longest_hold() {
        // 2 went on link 1, which dies; link 0 goes on.
        let mut r = flow1_on_two_links(ms(200));
        for s in 3..20 {
            flow1(&mut r, s * 10, 0, s);
        }
        assert_eq!(at(&mut r, t(229)), Vec::<u8>::new());
        let out = at(&mut r, t(230));
        assert_eq!(out.first(), Some(&3), "given up 200 ms after 3 came");
        assert_eq!(r.stats.gaps_skipped, 1);
    }

    /// Flow 1 bound out of order over two links (a packet taken from behind the head for
    /// the slower link 1): 0..=4 come over link 0 (global sequence 10 + s, at s ms);
    /// 8, bound for link 1 before 2..=4 were for link 0 (global sequence 11), comes at
    /// 20 ms. 5..=7 were planned for link 0, which delivers nothing after 4; they come
    /// again over link 1 at 100 ms. `up`: whether link 0 is up here; `delivers`: whether
    /// it goes on delivering another flow's packets meanwhile; `hold`: 8's hold time.
    fn taken_from_behind_then_link_0_quiet(
        up: bool,
        delivers: bool,
        hold: Duration,
    ) -> (Reorder, Vec<u8>) {
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        for s in 0..5 {
            r.insert_copy(t(s), HOLD, FlowId(1), 0, 10 + s, s, vec![s as u8], true);
        }
        r.not_up = if up { 0 } else { 0b01 };
        r.insert_copy(t(20), hold, FlowId(1), 1, 11, 8, vec![8], true);
        // Link 1 goes on past flow 1's newest packet (4: another flow's), so that it
        // is not behind the gap either.
        r.insert_copy(t(25), HOLD, FlowId(3), 1, 15, 0, vec![9], true);
        let mut out = drain(&mut r);
        for (i, now) in [30, 60, 90].into_iter().enumerate() {
            if delivers {
                let g = 30 + i as u64;
                r.insert_copy(t(now), HOLD, FlowId(2), 0, g, i as u64, vec![9], true);
            }
            out.extend(at(&mut r, t(now)));
        }
        out.extend(at(&mut r, t(99)));
        for s in 5..8 {
            r.insert_copy(t(100), HOLD, FlowId(1), 1, 200 + s, s, vec![s as u8], true);
        }
        out.extend(drain(&mut r));
        out.retain(|&b| b != 9);
        (r, out)
    }

    #[test]
    fn a_gap_waits_while_a_link_not_up_is_quiet_though_it_passed_the_gap() {
        // Link 0 has delivered past 8's global sequence, so it is not behind the gap.
        // 8's hold is 10 ms, and flow 1's last packet over link 0 came 16 ms before 8,
        // so the flow is not taken to be still on it (`RxFlow::link_behind_gap`). But
        // link 0 is down here and has delivered nothing since 8 came, and the sender
        // moves what it planned for it (5..=7) to link 1 once it finds it down: the gap
        // waits.
        let (r, out) = taken_from_behind_then_link_0_quiet(false, false, ms(10));
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.stats.gaps_skipped, 0);
        assert_eq!(r.stats.waited_for_links, 1);
        // A link that goes on delivering is not quiet, and a quiet one that is up here
        // (its sender sent it nothing more) is no sign of packets on the way: the gap
        // is given up at 8's hold time (30 ms), and 5..=7 come late.
        for (up, delivers) in [(false, true), (true, false)] {
            let (r, out) = taken_from_behind_then_link_0_quiet(up, delivers, ms(10));
            assert_eq!(
                out,
                vec![0, 1, 2, 3, 4, 8, 5, 6, 7],
                "up {up}, delivers {delivers}"
            );
            assert_eq!(r.stats.gaps_skipped, 3);
            assert_eq!(r.stats.late_delivered, 3);
            assert_eq!(r.stats.waited_for_links, 0);
        }
    }

    #[test]
    fn a_repaired_flows_gap_waits_for_a_link_that_carried_it_until_the_gap_came() {
        // As above with a 50 ms hold for 8: link 0 delivered flow 1's 4 16 ms before 8
        // came, within 8's hold, and nothing of flow 1 past the gap (5) since. Whether
        // link 0 is up here or not, quiet or delivering another flow's packets, the gap
        // waits until 5..=7 come (at 100 ms, 30 ms past 8's hold), in order.
        for (up, delivers) in [(false, false), (false, true), (true, false), (true, true)] {
            let (r, out) = taken_from_behind_then_link_0_quiet(up, delivers, HOLD);
            let case = format!("up {up}, delivers {delivers}");
            assert_eq!(out, vec![0, 1, 2, 3, 4, 5, 6, 7, 8], "{case}");
            assert_eq!(r.stats.gaps_skipped, 0, "{case}");
            assert_eq!(r.stats.waited_for_links, 1, "{case}");
        }
    }

    /// A repaired flow 1: 0..=4 over link 0 (global sequence 10 + s, at s ms), and 8,
    /// taken from behind the head, over link 1 at 20 ms (global sequence 15, hold 50 ms).
    fn eight_from_behind_after_0_to_4() -> Reorder {
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        for s in 0..5 {
            r.insert_copy(t(s), HOLD, FlowId(1), 0, 10 + s, s, vec![s as u8], true);
        }
        r.insert_copy(t(20), HOLD, FlowId(1), 1, 15, 8, vec![8], true);
        r
    }

    #[test]
    fn a_repaired_flows_gap_is_given_up_once_the_link_that_carried_it_passes_it() {
        // Flow 1's 0..=4 over link 0; 8, taken from behind the head, over link 1 at
        // 20 ms (hold 50 ms); link 0 then delivers 6 at 25 ms: 5 was lost on it, and
        // link 0 has passed the gap. Link 1 goes on past 6's global sequence (16) with
        // another flow's packet, so that no link is behind the gap by that either. The
        // hold is in force: at 69 ms nothing more, at 70 ms (8's deadline) 5 and 7 are
        // given up.
        let mut r = eight_from_behind_after_0_to_4();
        r.insert_copy(t(25), HOLD, FlowId(1), 0, 16, 6, vec![6], true);
        r.insert_copy(t(26), HOLD, FlowId(2), 1, 17, 0, vec![9], true);
        let mut out = drain(&mut r);
        assert_eq!(at(&mut r, t(69)), Vec::<u8>::new());
        out.extend(at(&mut r, t(70)));
        out.retain(|&b| b != 9);
        assert_eq!(out, vec![0, 1, 2, 3, 4, 6, 8]);
        assert_eq!(r.stats.gaps_skipped, 2);
        assert_eq!(r.stats.waited_for_links, 0);
        // Had link 0 delivered another flow's packet instead, it would not have passed
        // flow 1's gap, and the gap waits: the rule, not the timing, made the difference.
        let mut r = eight_from_behind_after_0_to_4();
        r.insert_copy(t(25), HOLD, FlowId(2), 0, 16, 0, vec![9], true);
        assert_eq!(drain(&mut r), vec![0, 1, 2, 3, 4, 9]);
        assert_eq!(at(&mut r, t(70)), Vec::<u8>::new());
        assert_eq!(r.stats.waited_for_links, 1);
        // ... no longer than the longest hold from 8's arrival.
        assert_eq!(at(&mut r, t(519)), Vec::<u8>::new());
        assert_eq!(at(&mut r, t(520)), vec![8]);
    }

    #[test]
    fn a_repaired_flows_gap_waits_for_a_link_behind_its_newest_packet() {
        // Flow 1 (its sender re-sends its losses) has used links 0, 1 and 2. Its 8 comes
        // over link 1, taken from behind the head (global sequence 11) before 5..=7,
        // which go later over link 2 (14..=16). Link 2 has delivered 12 (flow 2's): it is
        // past 8 but not past 4 (13), the newest of flow 1 when 8 came. The gap waits
        // for it.
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        r.insert_copy(t(0), HOLD, FlowId(1), 2, 5, 0, vec![0], true);
        for s in 1..5 {
            r.insert_copy(t(s), HOLD, FlowId(1), 0, 9 + s, s, vec![s as u8], true);
        }
        r.insert_copy(t(6), HOLD, FlowId(2), 2, 12, 0, vec![9], true);
        r.insert_copy(t(20), HOLD, FlowId(1), 1, 11, 8, vec![8], true);
        let mut out = drain(&mut r);
        out.extend(at(&mut r, t(99)));
        for s in 5..8 {
            r.insert_copy(t(100), HOLD, FlowId(1), 2, 9 + s, s, vec![s as u8], true);
        }
        out.extend(drain(&mut r));
        out.retain(|&b| b != 9);
        assert_eq!(out, vec![0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(r.stats.gaps_skipped, 0);
        assert_eq!(r.stats.waited_for_links, 1);
    }

    #[test]
    fn a_flow_of_copies_does_not_wait_for_a_link_that_died_behind_its_gap() {
        // Every packet of flow 1 comes first over link 0, then its copy over link 1,
        // 15 ms later, every 20 ms. Link 0 dies after packet 9; both copies of 10 are
        // lost; 11 comes over link 1 alone. Link 0 delivered lately and has not passed
        // 11, but the flow's copies were its protection: the gap is given up at 11's
        // hold time, not after the longest hold.
        let mut r = Reorder::new(100, 0);
        r.max_extra = ms(500);
        for s in 0..10 {
            r.insert_copy(t(20 * s), HOLD, FlowId(1), 0, s, s, vec![s as u8], true);
            r.note_copy(t(20 * s + 15), FlowId(1), s, 1);
        }
        assert_eq!(drain(&mut r).len(), 10);
        r.insert_copy(t(235), HOLD, FlowId(1), 1, 11, 11, vec![11], true);
        assert_eq!(at(&mut r, t(284)), Vec::<u8>::new());
        assert_eq!(at(&mut r, t(285)), vec![11], "given up at 11's hold time");
        assert_eq!(r.stats.gaps_skipped, 1);
        assert_eq!(r.stats.waited_for_links, 0);
    }

    proptest! {
        /// Every packet is released at most once, in flow order, and none is held past its
        /// deadline.
        #[test]
        fn released_once_in_order_never_past_deadline(
            arrivals in proptest::collection::vec((0u64..40, 0u64..3, 0u64..20), 1..200)
        ) {
            let mut r = Reorder::new(16, 0);
            let mut d = Dedup::new();
            let mut now = t(0);
            let mut released: HashMap<u8, Vec<u64>> = HashMap::new();
            let mut deadline_of: HashMap<(u8, u64), Instant> = HashMap::new();
            let mut late = 0u64;
            for (i, (seq, flow, dt)) in arrivals.into_iter().enumerate() {
                now += Duration::from_millis(dt);
                r.handle_timeout(now);
                // Everything whose deadline passed must be out by now.
                for ((f, s), dl) in &deadline_of {
                    if *dl <= now {
                        prop_assert!(r.expected(FlowId(u32::from(*f))) > *s);
                    }
                }
                let gseq = seq * 4 + flow;
                if d.check_and_insert(gseq) != Seen::New {
                    continue;
                }
                while let Some(p) = r.pop() {
                    released.entry(p[0]).or_default().push(u64::from(p[1]));
                }
                if seq < r.expected(FlowId(flow as u32)) {
                    // Its gap was given up: it goes out at once, out of order.
                    r.insert(now, HOLD, FlowId(flow as u32), seq, vec![flow as u8, seq as u8, i as u8]);
                    let p = r.pop();
                    prop_assert_eq!(p.as_ref().map(|p| p[1]), Some(seq as u8));
                    prop_assert!(r.pop().is_none());
                    late += 1;
                    continue;
                }
                deadline_of.insert((flow as u8, seq), now + HOLD);
                r.insert(now, HOLD, FlowId(flow as u32), seq, vec![flow as u8, seq as u8, i as u8]);
                while let Some(p) = r.pop() {
                    released.entry(p[0]).or_default().push(u64::from(p[1]));
                }
            }
            for seqs in released.values() {
                for w in seqs.windows(2) {
                    prop_assert!(w[0] < w[1], "out of order or twice: {:?}", seqs);
                }
            }
            prop_assert_eq!(r.stats.late_delivered, late);
        }
    }
}
