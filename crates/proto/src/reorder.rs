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
}

#[derive(Debug)]
struct Held {
    data: Vec<u8>,
    arrived: Instant,
    deadline: Instant,
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
    /// Links (a bit per link index) the flow's packets came over since `links_since`,
    /// and in the [`LINK_MEMORY`] before it.
    links: u64,
    links_prev: u64,
    links_since: Instant,
    /// The hold given to the flow's latest out-of-order packet.
    hold: Option<Duration>,
    /// The flow's 5-tuple, from its first packet that parses.
    key: Option<FlowKey>,
    counts: FlowCounts,
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
    /// Its counters.
    pub counts: FlowCounts,
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

    /// The flow sequence number `flow` expects next (0 for a flow not seen yet).
    pub(crate) fn expected(&self, flow: FlowId) -> u64 {
        self.flows.get(&flow).map_or(0, |f| f.next)
    }

    /// Packets held, all flows.
    pub(crate) fn held(&self) -> usize {
        self.flows.values().map(|f| f.held.len()).sum()
    }

    fn flow(flows: &mut FlowMap, now: Instant, flow: FlowId) -> &mut RxFlow {
        flows.entry(flow).or_insert_with(|| RxFlow {
            next: 0,
            held: BTreeMap::new(),
            due: None,
            last_active: now,
            skipped_at: None,
            links: 0,
            links_prev: 0,
            links_since: now,
            hold: None,
            key: None,
            counts: FlowCounts::default(),
        })
    }

    /// Notes that a packet of `flow` (new or a duplicate) came over link `link` (an index
    /// below 64; others are not recorded), for [`Self::flow_views`].
    pub(crate) fn note_link(&mut self, now: Instant, flow: FlowId, link: usize) {
        Self::note(Self::flow(&mut self.flows, now, flow), now, link);
    }

    fn note(f: &mut RxFlow, now: Instant, link: usize) {
        let since = now - f.links_since;
        if since >= LINK_MEMORY {
            f.links_prev = if since >= LINK_MEMORY * 2 { 0 } else { f.links };
            f.links = 0;
            f.links_since = now;
        }
        f.links |= 1u64.checked_shl(link as u32).unwrap_or(0);
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
                    .filter(|i| (f.links | f.links_prev) & (1 << i) != 0)
                    .map(&link_id)
                    .collect(),
                hold: f.hold,
                counts: f.counts,
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
        self.insert_via(now, hold, flow, None, seq, data);
    }

    /// Accepts a packet that passed duplicate suppression, which came over link `link`
    /// (noted as [`Self::note_link`] does, in the same lookup).
    pub(crate) fn insert_via(
        &mut self,
        now: Instant,
        hold: Duration,
        flow: FlowId,
        link: Option<usize>,
        seq: u64,
        data: Vec<u8>,
    ) {
        let extra = self.extra_hold(now);
        let f = Self::flow(&mut self.flows, now, flow);
        if let Some(l) = link {
            Self::note(f, now, l);
        }
        f.last_active = now;
        f.counts.received += 1;
        if f.key.is_none() {
            f.key = crate::classify::classify(&data).ok().map(|i| i.key);
        }
        if seq < f.next {
            f.counts.late_delivered += 1;
            self.stats.late_delivered += 1;
            if let Some(t) = f.skipped_at {
                // The hold in force then was short by `now - t`.
                self.late_by = ((now - t) + extra).min(self.max_extra);
                self.late_at = now;
            }
            self.out.push_back(data);
            return;
        }
        if seq == f.next {
            f.next += 1;
            self.out.push_back(data);
            self.stats.delivered += 1;
            Self::drain_in_order(f, now, &mut self.out, &mut self.stats);
        } else {
            if f.held.contains_key(&seq) {
                // Cannot happen after dedup; ignore rather than overwrite.
                return;
            }
            f.held.insert(
                seq,
                Held {
                    data,
                    arrived: now,
                    deadline: now + hold,
                },
            );
            self.stats.held += 1;
            f.counts.held += 1;
            f.hold = Some(hold);
            if f.held.len() > self.limit {
                // Give up the oldest gap now.
                let first = *f.held.keys().next().expect("non-empty");
                self.stats.overflow_released += 1;
                Self::skip_to(f, first, now, &mut self.out, &mut self.stats);
            }
        }
        Self::reschedule(&mut self.due, flow, f);
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
            Self::release(h, now, out, stats);
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
            Self::release(h, now, out, stats);
            f.next += 1;
        }
    }

    fn release(h: Held, now: Instant, out: &mut VecDeque<Vec<u8>>, stats: &mut ReorderStats) {
        let waited = (now - h.arrived).as_nanos() as u64;
        stats.max_hold_ns = stats.max_hold_ns.max(waited);
        stats.delivered += 1;
        out.push_back(h.data);
    }

    fn reschedule(due: &mut BTreeSet<(Instant, FlowId)>, id: FlowId, f: &mut RxFlow) {
        let earliest = f.held.values().map(|h| h.deadline).min();
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
            let last_due = f
                .held
                .iter()
                .filter(|(_, h)| h.deadline <= now)
                .map(|(s, _)| *s)
                .max();
            if let Some(seq) = last_due {
                Self::skip_to(f, seq, now, &mut self.out, &mut self.stats);
            }
            Self::reschedule(&mut self.due, id, f);
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// Forgets flows idle for `timeout` with nothing held.
    pub(crate) fn expire_idle(&mut self, now: Instant, timeout: Duration) {
        self.flows
            .retain(|_, f| !f.held.is_empty() || now - f.last_active < timeout);
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
