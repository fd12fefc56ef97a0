//! Per-flow queues above the binding point.
//!
//! Pipeline (all under `&mut self`, single-threaded):
//!  1. `enqueue`: classify result -> flow (created on first packet) -> tail of its FIFO
//!     (a pure TCP acknowledgement replaces an older one of its connection waiting at the
//!     tail: `Config::ack_filter`); over the packet or byte limit, packets are dropped
//!     from the head of the fattest flow.
//!  2. `dequeue_with`: deficit round robin over three lists, in order: latency-sensitive
//!     flows (DSCP EF/CS6/CS7), new (sparse) flows, old flows, as fq_codel does; CoDel runs
//!     on the chosen flow's head (drop, or CE-mark an ECN-capable packet); the caller sees
//!     the head and decides whether it can be bound to a link *now*. If not, it stays.
//!
//!  3. `dequeue_small_with`: the flows whose waiting packets are all small
//!     ([`SMALL_PACKET`]), oldest first, outside the round robin: what the binding point
//!     may send past a link's full window (`LinkView::has_room_small`).
//!
//! Queues here are link-independent: nothing is bound to a link until the binding point.
//! A flow that exhausts its quantum while on the priority or new list moves to the old
//! list, so a heavy EF flow cannot starve others: priority holds for one quantum per
//! busy period, like fq_codel's sparse-flow boost.

use std::collections::VecDeque;
use std::hash::BuildHasher;

use core::time::Duration;

use crate::classify::{FlowKey, PROTO_TCP, PacketInfo, mark_ce, pure_ack};
use crate::config::Config;
use crate::ids::FlowId;
use crate::policy::PolicyKind;
use crate::time::Instant;

/// A packet waiting above the binding point.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) data: Vec<u8>,
    pub(crate) enqueued: Instant,
}

/// How many flows one call of the scheduler passes over whose heads wait for a link
/// without room while another has room ([`Decision::Pass`]): each costs a policy
/// decision, and more waiting flows than links seldom wait for different links.
const MAX_PASSED: usize = 8;

/// A packet of at most this many bytes is small, and so is a flow whose waiting packets
/// all are: its packets may pass a link's full window (`dequeue_small_with`). RFC 791's
/// 576 bytes, the datagram every host takes whole: a call's, a game's, a DNS query's
/// packets and pure TCP acknowledgements fit; a bulk flow's full-size segments do not.
/// By the packets' size, not the bytes waiting: a call's packets pile up while its head
/// waits to pass a window that acknowledgements no longer open (as long as two
/// full-size packets take at the window's rate: 150 ms at 0.16 Mbit/s), and a flow
/// counted small only up to 576 bytes waiting (five or six of them) stopped being small
/// before its head could pass.
pub(crate) const SMALL_PACKET: usize = 576;

/// "No node" / "no slot" in the `u32` links of the packet store and the flow index.
const NIL: u32 = u32::MAX;

/// The CoDel target in force is at least the interval in force over this.
const TARGET_PER_INTERVAL: u32 = 10;

/// An entry of the packet store: a queued packet and the next one of its flow, or, while
/// free, the next free entry.
#[derive(Debug)]
struct Node {
    packet: Queued,
    next: u32,
}

/// A flow's FIFO: a singly linked list through the packet store.
#[derive(Clone, Copy, Debug)]
struct Fifo {
    head: u32,
    tail: u32,
}

impl Fifo {
    const EMPTY: Self = Self {
        head: NIL,
        tail: NIL,
    };

    fn is_empty(self) -> bool {
        self.head == NIL
    }
}

/// Storage of every queued packet, all flows together. Entries are reused most recently
/// freed first, so the one a new packet gets is usually still in cache.
#[derive(Debug)]
struct Packets {
    nodes: Vec<Node>,
    free: u32,
}

impl Packets {
    fn new() -> Self {
        Self {
            nodes: Vec::new(),
            free: NIL,
        }
    }

    fn push_back(&mut self, fifo: &mut Fifo, packet: Queued) {
        let i = if self.free == NIL {
            let i = u32::try_from(self.nodes.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("fewer than 2^32 - 1 packets queued");
            self.nodes.push(Node { packet, next: NIL });
            i
        } else {
            let i = self.free;
            let node = &mut self.nodes[i as usize];
            self.free = node.next;
            node.packet = packet;
            node.next = NIL;
            i
        };
        if fifo.tail == NIL {
            fifo.head = i;
        } else {
            self.nodes[fifo.tail as usize].next = i;
        }
        fifo.tail = i;
    }

    fn pop_front(&mut self, fifo: &mut Fifo) -> Option<Queued> {
        if fifo.head == NIL {
            return None;
        }
        let i = fifo.head;
        fifo.head = self.nodes[i as usize].next;
        if fifo.head == NIL {
            fifo.tail = NIL;
        }
        Some(self.release(i))
    }

    /// Takes the packet out of node `i`, already unlinked from its FIFO, and frees the node.
    fn release(&mut self, i: u32) -> Queued {
        let node = &mut self.nodes[i as usize];
        let packet = Queued {
            data: std::mem::take(&mut node.packet.data),
            enqueued: node.packet.enqueued,
        };
        node.next = self.free;
        self.free = i;
        packet
    }

    /// How many packets of `fifo` from its head on fit within `bytes`, each counted as
    /// `per_packet` plus its length, at most all but its last: the place of the packet
    /// that the most bytes are ahead of without exceeding `bytes`, or of the last one.
    fn count_within(&self, fifo: Fifo, bytes: usize, per_packet: usize) -> usize {
        let (mut i, mut ahead, mut n) = (fifo.head, 0usize, 0usize);
        while i != NIL {
            let node = &self.nodes[i as usize];
            let behind = ahead + per_packet + node.packet.data.len();
            if node.next == NIL || behind > bytes {
                break;
            }
            (i, ahead, n) = (node.next, behind, n + 1);
        }
        n
    }

    /// Unlinks the packet with `n` packets ahead of it in `fifo`, if there is one: the
    /// packet and `n`.
    fn remove_nth(&mut self, fifo: &mut Fifo, n: usize) -> Option<(Queued, usize)> {
        if n == 0 {
            return self.pop_front(fifo).map(|q| (q, 0));
        }
        let mut prev = fifo.head;
        for _ in 1..n {
            if prev == NIL {
                return None;
            }
            prev = self.nodes[prev as usize].next;
        }
        if prev == NIL {
            return None;
        }
        let i = self.nodes[prev as usize].next;
        if i == NIL {
            return None;
        }
        let next = self.nodes[i as usize].next;
        self.nodes[prev as usize].next = next;
        if next == NIL {
            fifo.tail = prev;
        }
        Some((self.release(i), n))
    }

    fn back_mut(&mut self, fifo: Fifo) -> Option<&mut Queued> {
        (fifo.tail != NIL).then(|| &mut self.nodes[fifo.tail as usize].packet)
    }

    fn front(&self, fifo: Fifo) -> Option<&Queued> {
        (fifo.head != NIL).then(|| &self.nodes[fifo.head as usize].packet)
    }

    fn front_mut(&mut self, fifo: Fifo) -> Option<&mut Queued> {
        (fifo.head != NIL).then(|| &mut self.nodes[fifo.head as usize].packet)
    }
}

/// The flow table's index, flow key -> slot: open addressing with linear probing over
/// `u64` entries, each the upper 32 bits of the key's keyed hash (its tag, which also
/// chooses its home position) and the slot, or `EMPTY`. Keys are compared in the flows
/// themselves, which the caller needs next anyway, so a lookup usually touches one entry
/// and one flow. Kept at most half full.
#[derive(Debug)]
struct FlowIndex {
    hasher: foldhash::fast::FixedState,
    table: Vec<u64>,
    len: usize,
}

impl FlowIndex {
    const EMPTY: u64 = u64::MAX;

    fn new(seed: u64) -> Self {
        Self {
            hasher: foldhash::fast::FixedState::with_seed(seed),
            table: Vec::new(),
            len: 0,
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The tag of a key: the upper half of its keyed hash.
    fn tag(&self, key: &FlowKey) -> u32 {
        (self.hasher.hash_one(key) >> 32) as u32
    }

    fn home(&self, tag: u32) -> usize {
        tag as usize & (self.table.len() - 1)
    }

    /// The slot under `tag` for which `is_key` holds (it compares the flow's key).
    fn get(&self, tag: u32, is_key: impl Fn(usize) -> bool) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        let mask = self.table.len() - 1;
        let mut i = self.home(tag);
        loop {
            let e = self.table[i];
            if e == Self::EMPTY {
                return None;
            }
            if (e >> 32) as u32 == tag && is_key(e as u32 as usize) {
                return Some(e as u32 as usize);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `slot` under `tag` (the key is not in the index).
    fn insert(&mut self, tag: u32, slot: usize) {
        let slot = u32::try_from(slot)
            .ok()
            .filter(|&s| s != NIL)
            .expect("fewer than 2^32 - 1 flows");
        if (self.len + 1) * 2 > self.table.len() {
            self.grow();
        }
        self.place(u64::from(tag) << 32 | u64::from(slot));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mask = self.table.len() - 1;
        let mut i = self.home((entry >> 32) as u32);
        while self.table[i] != Self::EMPTY {
            i = (i + 1) & mask;
        }
        self.table[i] = entry;
    }

    fn grow(&mut self) {
        let cap = (self.table.len() * 2).max(16);
        let old = std::mem::replace(&mut self.table, vec![Self::EMPTY; cap]);
        for e in old {
            if e != Self::EMPTY {
                self.place(e);
            }
        }
    }

    /// Removes `slot`, which is in the index under `tag`.
    fn remove(&mut self, tag: u32, slot: usize) {
        let mask = self.table.len() - 1;
        let entry = u64::from(tag) << 32 | slot as u64;
        let mut i = self.home(tag);
        while self.table[i] != entry {
            debug_assert_ne!(self.table[i], Self::EMPTY, "removing a slot not indexed");
            i = (i + 1) & mask;
        }
        // Backward-shift deletion: move later entries of the probe run into the hole
        // when their home position allows it, so that no probe run is broken.
        self.table[i] = Self::EMPTY;
        let mut j = i;
        loop {
            j = (j + 1) & mask;
            let e = self.table[j];
            if e == Self::EMPTY {
                break;
            }
            let home = self.home((e >> 32) as u32);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(i) & mask) {
                self.table[i] = e;
                self.table[j] = Self::EMPTY;
                i = j;
            }
        }
        self.len -= 1;
    }
}

#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum List {
    None,
    Priority,
    New,
    Old,
}

/// CoDel state of one flow (RFC 8289).
#[derive(Debug, Default)]
struct Codel {
    first_above_time: Option<Instant>,
    drop_next: Instant,
    count: u32,
    last_count: u32,
    dropping: bool,
}

#[derive(Debug)]
pub(crate) struct Flow {
    pub(crate) key: FlowKey,
    pub(crate) id: FlowId,
    pub(crate) latency_sensitive: bool,
    /// Its binding policy (set from the rules when the flow is created).
    pub(crate) policy: PolicyKind,
    /// Its first packet's [`PacketInfo::reliable`]: TCP or QUIC.
    pub(crate) reliable: bool,
    /// The shared overflow queue (the flow table was full when it came): it mixes
    /// connections, so its first packet says nothing of the others.
    pub(crate) shared: bool,
    queue: Fifo,
    /// Bytes queued.
    pub(crate) bytes: usize,
    /// Packets queued of more than [`SMALL_PACKET`] bytes: with none, the flow is small.
    large: usize,
    deficit: i64,
    list: List,
    codel: Codel,
    /// Next flow sequence number to put on the wire.
    pub(crate) next_seq: u64,
    /// When a packet was last taken from behind its head: its head then waits, by
    /// design, for the links that deliver sooner (CoDel's target, [`FlowQueues::target_of`]).
    taken_behind_at: Option<Instant>,
    last_active: Instant,
    /// The backlog its sender is held to by the receive-window clamp (4.1), 0 if none:
    /// CoDel leaves a queue within it alone.
    allowance: usize,
    /// The link (the engine's index) its last packet was bound to: with
    /// `codel_covers_pause`, CoDel's target of a min-rtt or redundant flow covers half of
    /// that link's recent pause.
    link: Option<usize>,
}

/// Counters of the queues above the binding point.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct QueueStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets dropped by CoDel.
    pub aqm_dropped: u64,
    /// Packets CE-marked by CoDel instead of dropped.
    pub aqm_marked: u64,
    /// Packets dropped from the fattest flow because a limit was reached.
    pub overflow_dropped: u64,
    /// Flows created.
    pub flows_created: u64,
    /// Packets that went to the shared overflow flow because the flow table was full.
    pub flow_table_full: u64,
    /// Pure TCP acknowledgements replaced in their queue by a later one of their
    /// connection (`Config::ack_filter`).
    pub ack_filtered: u64,
}

/// What `dequeue_with`'s caller decided for the head packet.
pub(crate) enum Decision<T> {
    /// Take the packet; the caller binds it with `T`.
    Take(T),
    /// Take instead the flow's packet that about this many bytes of its queue are ahead
    /// of, each packet counted as its datagram (`wire::DATA_OVERHEAD` more than its
    /// payload): the last one whose bytes ahead do not exceed it, or the last packet
    /// ([`crate::policy::Binding::Behind`]). It gets the flow sequence number of its
    /// place in the flow, so the receiver releases it in the flow's order. The last field
    /// names the link (any key the caller keeps for it): a link is never given a packet
    /// of the flow ahead of one it took from behind that is still numbered ahead of the
    /// head ([`FlowQueues::take_behind`]).
    TakeBehind(T, usize, usize),
    /// Leave it at the head; nothing can take it now.
    Wait,
    /// Leave it at the head, and offer the next flows: it waits for a link without room
    /// while another link has room that their packets may take ([`MAX_PASSED`]).
    Pass,
}

/// A flow with numbers given to packets taken from behind its head still ahead of its
/// `next_seq` ([`FlowQueues::take_behind`], [`FlowQueues::numbered_ahead_of`]).
#[derive(Debug)]
struct NumberedBehind {
    id: FlowId,
    slot: usize,
    /// Those numbers, ascending: the packets ahead of them get the numbers in between as
    /// they leave. Never empty (the entry goes when the head passes them all).
    taken: Vec<u64>,
    /// Per link that took them (the key of [`Decision::TakeBehind`]), the highest
    /// number it took, while that is ahead of `next_seq`.
    by_link: Vec<(usize, u64)>,
}

/// The flow table and the scheduler.
#[derive(Debug)]
pub(crate) struct FlowQueues {
    flows: Vec<Option<Flow>>,
    free: Vec<usize>,
    index: FlowIndex,
    /// Every queued packet; the flows' FIFOs are linked lists through it.
    store: Packets,
    priority: VecDeque<usize>,
    new: VecDeque<usize>,
    old: VecDeque<usize>,
    packets: usize,
    bytes: usize,
    next_flow_id: u32,
    overflow_slot: Option<usize>,
    quantum: i64,
    /// CoDel target in force ([`Self::set_interval`]).
    target: Duration,
    /// The configured CoDel target, the least in force.
    configured_target: Duration,
    /// Extra target of aggregate flows ([`Self::set_aggregate_extra`]), and the links'
    /// delay spread alone.
    aggregate_extra: Duration,
    aggregate_spread: Duration,
    /// Whether an `auto` TCP flow is an aggregate one now ([`PolicyKind::resolve`]).
    spreads: bool,
    /// Each link's recent longest pause, by the engine's link index
    /// ([`Self::set_link_pauses`]).
    link_pauses: Vec<Duration>,
    /// The flow of the packet last taken by a dequeue, for [`Self::bound_to`].
    last_taken: Option<usize>,
    /// `Config::codel_covers_pause`.
    covers_pause: bool,
    /// CoDel drops and marks of overflow-policy flows, cumulative
    /// ([`Self::overflow_congestion`]).
    overflow_congestion: u64,
    interval: Duration,
    ecn: bool,
    /// A pure TCP acknowledgement replaces the one it supersedes at its flow's tail.
    ack_filter: bool,
    limit_packets: usize,
    limit_bytes: usize,
    max_flows: usize,
    idle_timeout: Duration,
    /// Slots of flows whose waiting packets were all small when a packet came, oldest
    /// first (checked again when read: a flow may have taken a packet over
    /// [`SMALL_PACKET`] since, left, or given its slot to another), and which slots are in
    /// it.
    small: VecDeque<usize>,
    small_listed: Vec<bool>,
    /// The flows that have numbers given to packets taken from behind their head still
    /// ahead of `next_seq`: a few at most, kept beside the flow table rather than in
    /// every flow.
    numbered_behind: Vec<NumberedBehind>,
    /// The flows a call of the scheduler passed over, their heads waiting for a link
    /// without room (scratch, kept for its allocation).
    passed: Vec<(List, usize)>,
    pub(crate) stats: QueueStats,
}

impl FlowQueues {
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            numbered_behind: Vec::new(),
            passed: Vec::new(),
            flows: Vec::new(),
            free: Vec::new(),
            index: FlowIndex::new(config.hash_seed),
            store: Packets::new(),
            priority: VecDeque::new(),
            new: VecDeque::new(),
            old: VecDeque::new(),
            packets: 0,
            bytes: 0,
            next_flow_id: 1,
            overflow_slot: None,
            quantum: config.quantum_bytes as i64,
            target: config
                .codel_target
                .max(config.codel_interval / TARGET_PER_INTERVAL),
            configured_target: config.codel_target,
            aggregate_extra: Duration::ZERO,
            aggregate_spread: Duration::ZERO,
            spreads: false,
            link_pauses: Vec::new(),
            last_taken: None,
            covers_pause: config.codel_covers_pause,
            overflow_congestion: 0,
            interval: config.codel_interval,
            ecn: config.ecn,
            ack_filter: config.ack_filter,
            limit_packets: config.limit_packets,
            limit_bytes: config.limit_bytes,
            max_flows: config.max_flows,
            idle_timeout: config.flow_idle_timeout,
            small: VecDeque::new(),
            small_listed: Vec::new(),
            stats: QueueStats::default(),
        }
    }

    /// Sets the CoDel interval in force (derived from the links' RTT by the endpoint),
    /// and with it the target: the configured one, or a tenth of the interval if that is
    /// longer (RFC 8289 4.4 sets the target at 5-10 % of the interval). Under fair
    /// queueing each flow's queue is a single flow's bottleneck, and a single TCP flow
    /// leaves its link idle after each back-off unless its queue holds a good part of its
    /// round trip: at the 5 % end, one download behind rate control got 88 % of a
    /// 10 Mb/s, 40 ms path, at 10 %, 90 %. The longer queue delays only that flow.
    pub(crate) fn set_interval(&mut self, interval: Duration) {
        self.interval = interval;
        self.target = self.configured_target.max(interval / TARGET_PER_INTERVAL);
    }

    /// Sets the extra CoDel target of aggregate flows: the one-way delay spread of the
    /// links they use, plus the longest time those links lately delivered nothing while
    /// packets waited (a cellular scheduler's pause). A flow spread over a fast and a
    /// slow link needs that much standing queue above the binding point, or the slow link
    /// never delivers before the fast one would have; and while the receiver holds the
    /// flow's packets behind one that waits out a pause, the flow's acknowledgements
    /// stall, and the other links keep sending only from that queue. That queue is the
    /// price of aggregation, not a bad queue.
    /// `spreads`: at least two links can share an aggregate flow, so that an `auto` TCP
    /// flow is one ([`PolicyKind::resolve`]).
    pub(crate) fn set_aggregate_extra(&mut self, spread: Duration, pause: Duration, spreads: bool) {
        self.aggregate_extra = spread + pause;
        self.aggregate_spread = spread;
        self.spreads = spreads;
    }

    /// Whether at least two links can share an aggregate flow, so that an `auto` TCP flow
    /// is one ([`Self::set_aggregate_extra`]).
    pub(crate) fn spreads(&self) -> bool {
        self.spreads
    }

    /// The policy flow `f` is bound by now ([`PolicyKind::resolve`]).
    fn policy_of(&self, f: &Flow) -> PolicyKind {
        f.policy.resolve(f.reliable, self.spreads)
    }

    /// Sets each link's recent longest pause (how long it lately delivered nothing while
    /// packets waited: a cellular scheduler's), by the engine's link index; zero for a
    /// link whose pauses a flow's backlog should not cover (see the endpoint).
    pub(crate) fn set_link_pauses(&mut self, pauses: impl Iterator<Item = Duration>) {
        self.link_pauses.clear();
        self.link_pauses.extend(pauses);
    }

    /// The packet the last dequeue returned was bound to `link` (the engine's index):
    /// its flow's CoDel target follows that link's pauses from now on (only with
    /// `codel_covers_pause`; otherwise nothing is kept).
    pub(crate) fn bound_to(&mut self, link: usize) {
        if !self.covers_pause {
            return;
        }
        if let Some(slot) = self.last_taken.take()
            && let Some(f) = self.flows.get_mut(slot).and_then(Option::as_mut)
        {
            f.link = Some(link);
        }
    }

    /// CoDel drops and marks of overflow-policy flows so far: their packets waited too
    /// long for the primary link. Under late binding and rate control the primary's
    /// bottleneck never overflows; this is where its overflow shows.
    pub(crate) fn overflow_congestion(&self) -> u64 {
        self.overflow_congestion
    }

    /// CoDel's target for the flow in `slot`. An aggregate flow's covers the links'
    /// delay spread and their pauses ([`Self::set_aggregate_extra`]). With
    /// `codel_covers_pause`, a min-rtt or redundant flow's covers half the recent longest
    /// pause of the link it was last bound to: while the link delivers nothing, what the
    /// flow sent meanwhile waits here, and a packet that comes during a pause waits on
    /// average half of it. That queue drains when the link delivers again; dropping for
    /// it cut the inner TCP's window to what the link carries between its pauses
    /// (`docs/RESULTS.md` 19).
    fn target_of(&self, slot: usize, now: Instant) -> Duration {
        match self.flows[slot].as_ref() {
            Some(f) if self.policy_of(f) == PolicyKind::Aggregate => {
                let behind = f.taken_behind_at.is_some_and(|t| now - t < self.interval);
                self.target
                    + self.aggregate_extra
                    + if behind {
                        self.aggregate_spread
                    } else {
                        Duration::ZERO
                    }
            }
            // The overflow policy takes CoDel's drops as its congestion signal, measured
            // against the primary link's own queue (the bonding slides' evaluation).
            Some(f) if f.policy == PolicyKind::Overflow || !self.covers_pause => self.target,
            Some(f) => {
                let pause = f
                    .link
                    .and_then(|l| self.link_pauses.get(l))
                    .copied()
                    .unwrap_or_default();
                self.target + pause / 2
            }
            None => self.target,
        }
    }

    /// Packets waiting, all flows.
    pub(crate) fn packets(&self) -> usize {
        self.packets
    }

    /// Bytes waiting, all flows.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Flows currently tracked.
    pub(crate) fn flow_count(&self) -> usize {
        self.index.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.packets == 0
    }

    /// Adds a packet to its flow's queue. Returns the number of packets dropped to make room.
    pub(crate) fn enqueue(
        &mut self,
        now: Instant,
        info: &PacketInfo,
        policy: PolicyKind,
        data: Vec<u8>,
    ) -> usize {
        let slot = self.slot_for(now, info, policy);
        let len = data.len();
        let flow = self.flows[slot]
            .as_mut()
            .expect("slot_for returns a live slot");
        // A flow's queue holds its connection's packets only; the shared overflow queue
        // (the flow table full) mixes connections and is left alone.
        if self.ack_filter
            && info.key.protocol == PROTO_TCP
            && self.overflow_slot != Some(slot)
            && let Some(tail) = self.store.back_mut(flow.queue)
            && let Some(new) = pure_ack(&data)
            && pure_ack(&tail.data).is_some_and(|old| new.supersedes(old))
        {
            // The connection's newer acknowledgement takes the older one's place (and
            // its time in the queue): the sender learns no less, sooner, and a narrow
            // uplink carries one datagram for the two.
            let old = std::mem::replace(&mut tail.data, data);
            flow.bytes = flow.bytes - old.len() + len;
            flow.large = flow.large - usize::from(old.len() > SMALL_PACKET)
                + usize::from(len > SMALL_PACKET);
            flow.last_active = now;
            self.bytes = self.bytes - old.len() + len;
            self.stats.enqueued += 1;
            self.stats.ack_filtered += 1;
            return 0;
        }
        self.store.push_back(
            &mut flow.queue,
            Queued {
                data,
                enqueued: now,
            },
        );
        flow.bytes += len;
        flow.large += usize::from(len > SMALL_PACKET);
        flow.last_active = now;
        if flow.is_small() {
            if self.small_listed.len() <= slot {
                self.small_listed.resize(slot + 1, false);
            }
            if !self.small_listed[slot] {
                self.small_listed[slot] = true;
                self.small.push_back(slot);
            }
        }
        let list = flow.list;
        if list == List::None {
            flow.deficit = self.quantum;
            if flow.latency_sensitive {
                flow.list = List::Priority;
                self.priority.push_back(slot);
            } else {
                flow.list = List::New;
                self.new.push_back(slot);
            }
        }
        self.packets += 1;
        self.bytes += len;
        self.stats.enqueued += 1;
        let mut dropped = 0;
        while self.packets > self.limit_packets || self.bytes > self.limit_bytes {
            if !self.drop_from_fattest() {
                break;
            }
            dropped += 1;
        }
        dropped
    }

    fn slot_for(&mut self, now: Instant, info: &PacketInfo, policy: PolicyKind) -> usize {
        let tag = self.index.tag(&info.key);
        let flows = &self.flows;
        let is_key = |slot: usize| flows[slot].as_ref().is_some_and(|f| f.key == info.key);
        if let Some(slot) = self.index.get(tag, is_key) {
            return slot;
        }
        if self.index.len() >= self.max_flows {
            self.stats.flow_table_full += 1;
            if let Some(slot) = self.overflow_slot {
                return slot;
            }
        }
        let flow = Flow {
            key: info.key,
            id: FlowId(self.next_flow_id),
            latency_sensitive: info.is_latency_sensitive(),
            policy,
            reliable: info.reliable,
            shared: false,
            queue: Fifo::EMPTY,
            bytes: 0,
            large: 0,
            deficit: 0,
            list: List::None,
            codel: Codel::default(),
            next_seq: 0,
            taken_behind_at: None,
            last_active: now,
            allowance: 0,
            link: None,
        };
        self.next_flow_id = self.next_flow_id.wrapping_add(1).max(1);
        self.stats.flows_created += 1;
        let slot = match self.free.pop() {
            Some(s) => {
                self.flows[s] = Some(flow);
                s
            }
            None => {
                self.flows.push(Some(flow));
                self.flows.len() - 1
            }
        };
        self.index.insert(tag, slot);
        if self.index.len() > self.max_flows {
            // The table was full: this flow becomes the shared overflow queue.
            self.overflow_slot = Some(slot);
            flow_mut(&mut self.flows, slot).shared = true;
        }
        slot
    }

    /// The receive-window clamp's hold on the flow of `key` (4.1): `allow` gets how long
    /// the clamp lets the flow keep a backlog, and returns the backlog its sender may
    /// have, if the clamp holds it; CoDel then leaves a queue within that alone. The time
    /// is CoDel's target, and for an aggregate flow the links' delay spread too (what the
    /// slower links need to deliver before the faster one would have). Not the links'
    /// recent pause, which CoDel's target of an aggregate flow has: CoDel must not drop
    /// while the flow's acknowledgements stall behind a paused link, but a clamped
    /// sender is not dropped, and a backlog that long stands all the time, where
    /// CoDel's target is only the least the queue must keep to be dropped from.
    pub(crate) fn clamp_flow(
        &mut self,
        key: &FlowKey,
        allow: impl FnOnce(Duration) -> Option<usize>,
    ) {
        let tag = self.index.tag(key);
        let flows = &self.flows;
        let is_key = |slot: usize| flows[slot].as_ref().is_some_and(|f| f.key == *key);
        let Some(slot) = self.index.get(tag, is_key) else {
            return;
        };
        if self.overflow_slot == Some(slot) {
            return;
        }
        let (target, spread, spreads) = (self.target, self.aggregate_spread, self.spreads);
        let f = flow_mut(&mut self.flows, slot);
        let time = match f.policy.resolve(f.reliable, spreads) {
            PolicyKind::Aggregate => target + spread,
            _ => target,
        };
        f.allowance = allow(time).unwrap_or(0);
    }

    /// Drops the head packet of the flow holding the most bytes.
    fn drop_from_fattest(&mut self) -> bool {
        let fattest = self
            .flows
            .iter()
            .enumerate()
            .filter_map(|(i, f)| f.as_ref().map(|f| (f.bytes, i)))
            .max();
        let Some((bytes, slot)) = fattest else {
            return false;
        };
        if bytes == 0 {
            return false;
        }
        let flow = self.flows[slot].as_mut().expect("enumerated as live");
        let Some(q) = self.store.pop_front(&mut flow.queue) else {
            return false;
        };
        flow.unqueued(q.data.len());
        self.packets -= 1;
        self.bytes -= q.data.len();
        self.stats.overflow_dropped += 1;
        true
    }

    /// Runs the scheduler: finds the next packet by DRR, applies CoDel, and offers the head
    /// packet to `decide`. `decide` sees the flow and the packet and either takes it (it is
    /// removed and returned with the flow's id and sequence number) or leaves it.
    pub(crate) fn dequeue_with<T>(
        &mut self,
        now: Instant,
        decide: impl FnMut(&Flow, &Queued) -> Decision<T>,
    ) -> Option<(Queued, FlowId, u64, T)> {
        self.dequeue_lists(now, false, decide)
    }

    /// [`Self::dequeue_with`] over the priority and new (sparse) flows only: `None` when
    /// the scheduler's next flow is an old (backlogged) one. What is sent again
    /// (reinjections) goes after these and before the backlogged flows, so that a sparse
    /// flow does not wait behind a dead link's load.
    pub(crate) fn dequeue_sparse_with<T>(
        &mut self,
        now: Instant,
        decide: impl FnMut(&Flow, &Queued) -> Decision<T>,
    ) -> Option<(Queued, FlowId, u64, T)> {
        if self.priority.is_empty() && self.new.is_empty() {
            return None;
        }
        self.dequeue_lists(now, true, decide)
    }

    /// The scheduler's round: the first flow in DRR order whose head `decide` takes. A
    /// flow whose head waits for a link without room while another link has room
    /// ([`Decision::Pass`]) is passed over, up to [`MAX_PASSED`] of them, and keeps its
    /// place and deficit: a packet waiting for one link must not hold up the flows that
    /// another link could carry now (a probe's packet waiting 15-20 ms for a slow link's
    /// next slot stopped an upload on a fast link beside it for as long, each time: 7.5
    /// Mbit/s of the fast link's 15.1, `docs/RESULTS.md` 23).
    fn dequeue_lists<T>(
        &mut self,
        now: Instant,
        sparse_only: bool,
        decide: impl FnMut(&Flow, &Queued) -> Decision<T>,
    ) -> Option<(Queued, FlowId, u64, T)> {
        let mut passed = std::mem::take(&mut self.passed);
        passed.clear();
        let out = self.dequeue_passing(now, sparse_only, decide, &mut passed);
        // Back at the front of their lists, in their order.
        for &(list, slot) in passed.iter().rev() {
            self.push_front_list(list, slot);
        }
        self.passed = passed;
        out
    }

    fn dequeue_passing<T>(
        &mut self,
        now: Instant,
        sparse_only: bool,
        mut decide: impl FnMut(&Flow, &Queued) -> Decision<T>,
        passed: &mut Vec<(List, usize)>,
    ) -> Option<(Queued, FlowId, u64, T)> {
        // Bounded: every iteration either returns, removes a flow from a list, or moves
        // a flow from one list to the back of `old` after refilling its deficit.
        let mut guard = 3 * (self.priority.len() + self.new.len() + self.old.len()) + 4;
        while guard > 0 {
            guard -= 1;
            let (list, slot) = if let Some(&s) = self.priority.front() {
                (List::Priority, s)
            } else if let Some(&s) = self.new.front() {
                (List::New, s)
            } else if let Some(&s) = self.old.front()
                && !sparse_only
            {
                (List::Old, s)
            } else {
                return None;
            };
            let flow = self.flows[slot].as_mut().expect("listed flows are live");
            if flow.deficit <= 0 {
                flow.deficit += self.quantum;
                self.pop_list(list);
                flow_mut(&mut self.flows, slot).list = List::Old;
                self.old.push_back(slot);
                continue;
            }
            if !self.codel_head(now, slot) {
                // Empty: a new or priority flow goes to the old list once so that it cannot
                // regain priority by emptying instantly (fq_codel's anti-starvation rule);
                // an old flow leaves the lists.
                self.pop_list(list);
                let flow = flow_mut(&mut self.flows, slot);
                if list != List::Old && !self.old.is_empty() {
                    flow.list = List::Old;
                    self.old.push_back(slot);
                } else {
                    flow.list = List::None;
                }
                continue;
            }
            let flow = self.flows[slot].as_ref().expect("listed flows are live");
            let head = self
                .store
                .front(flow.queue)
                .expect("codel_head saw a packet");
            return match decide(flow, head) {
                Decision::Pass if passed.len() < MAX_PASSED => {
                    self.pop_list(list);
                    passed.push((list, slot));
                    continue;
                }
                Decision::Wait | Decision::Pass => None,
                Decision::Take(t) => {
                    let (q, id, seq) = self.take_head(slot);
                    Some((q, id, seq, t))
                }
                Decision::TakeBehind(t, bytes, link) => {
                    let (q, id, seq) = self.take_behind(now, slot, bytes, link)?;
                    Some((q, id, seq, t))
                }
            };
        }
        None
    }

    /// Offers the head packet of the oldest small flow (its waiting packets all of at
    /// most [`SMALL_PACKET`] bytes) to `decide`, outside the round robin: for a link
    /// whose window is full, where one more small packet adds little to its bottleneck's
    /// queue and would otherwise wait for the window, behind the flows that filled it.
    /// CoDel does not run here (in the round robin it judges such a flow as any other,
    /// and leaves alone a backlog of one MTU or less). The flow keeps its place in the
    /// round robin, charged for what it sent.
    pub(crate) fn dequeue_small_with<T>(
        &mut self,
        mut decide: impl FnMut(&Flow, &Queued) -> Decision<T>,
    ) -> Option<(Queued, FlowId, u64, T)> {
        while let Some(&slot) = self.small.front() {
            let head = self.flows[slot]
                .as_ref()
                .filter(|f| f.is_small())
                .and_then(|f| self.store.front(f.queue).map(|h| (f, h)));
            let Some((flow, head)) = head else {
                self.small.pop_front();
                self.small_listed[slot] = false;
                continue;
            };
            return match decide(flow, head) {
                Decision::Wait | Decision::Pass => None,
                // Only a small flow's head goes this way, never a packet behind it.
                Decision::Take(t) | Decision::TakeBehind(t, ..) => {
                    self.small.pop_front();
                    self.small_listed[slot] = false;
                    let (q, id, seq) = self.take_head(slot);
                    if self.flows[slot]
                        .as_ref()
                        .is_some_and(|f| f.bytes > 0 && f.is_small())
                    {
                        // More of it waits, still small: behind the other small flows.
                        self.small_listed[slot] = true;
                        self.small.push_back(slot);
                    }
                    Some((q, id, seq, t))
                }
            };
        }
        None
    }

    /// Takes the head packet of the flow in `slot` (which has one): its id and sequence
    /// number; the round robin charges the flow for it.
    fn take_head(&mut self, slot: usize) -> (Queued, FlowId, u64) {
        let flow = flow_mut(&mut self.flows, slot);
        let q = self.store.pop_front(&mut flow.queue).expect("head exists");
        self.took_head_number(slot, q)
    }

    /// Takes the packet of the flow in `slot` (which has one) that about `bytes` of its
    /// queue are ahead of ([`Decision::TakeBehind`]), numbered as it would have been at
    /// the head: the packets ahead of it take the numbers below it as they leave. A
    /// packet ahead of it that CoDel drops instead leaves its number to the next one
    /// taken, which may then be a packet behind it: the flow never has a hole in its
    /// numbers, at worst two packets swapped.
    ///
    /// `link` is never given a packet ahead of one it took from behind before that is
    /// still numbered ahead of the head: sent after it on the same link, that packet
    /// would arrive after it, and the receiver would hold it and all behind it for the
    /// link's queue; and it would be bound after a packet that it comes before in the
    /// flow, on the link that delivered that one, which the receiver takes for a sign
    /// that a missing packet is lost (`reorder.rs` `behind`). It takes the first packet
    /// past that one instead, or, if none waits yet, nothing (`None`).
    fn take_behind(
        &mut self,
        now: Instant,
        slot: usize,
        bytes: usize,
        link: usize,
    ) -> Option<(Queued, FlowId, u64)> {
        let flow = flow_mut(&mut self.flows, slot);
        let entry = self.numbered_behind.iter().position(|n| n.slot == slot);
        let mut place = self
            .store
            .count_within(flow.queue, bytes, crate::wire::DATA_OVERHEAD);
        if let Some(n) = entry.map(|e| &self.numbered_behind[e])
            && let Some(&(_, max)) = n.by_link.iter().find(|&&(l, _)| l == link)
        {
            // Past the packets ahead of the first one numbered past `max`: the numbers
            // from `next_seq` to `max` that no packet taken from behind carries.
            let reserved = n.taken.iter().filter(|&&t| t <= max).count();
            place = place.max((max + 1 - flow.next_seq) as usize - reserved);
        }
        let (q, ahead) = self.store.remove_nth(&mut flow.queue, place)?;
        if ahead == 0 {
            // The head after all (its flow had no more waiting).
            return Some(self.took_head_number(slot, q));
        }
        flow.taken_behind_at = Some(now);
        // The `ahead`-th number from `next_seq` on that no packet carries yet.
        let mut seq = flow.next_seq + ahead as u64;
        match entry.map(|e| &mut self.numbered_behind[e]) {
            Some(n) => {
                let mut at = 0;
                while let Some(&taken) = n.taken.get(at)
                    && taken <= seq
                {
                    seq += 1;
                    at += 1;
                }
                n.taken.insert(at, seq);
                match n.by_link.iter_mut().find(|(l, _)| *l == link) {
                    Some(entry) => entry.1 = entry.1.max(seq),
                    None => n.by_link.push((link, seq)),
                }
            }
            None => self.numbered_behind.push(NumberedBehind {
                id: flow.id,
                slot,
                taken: vec![seq],
                by_link: vec![(link, seq)],
            }),
        }
        Some(self.took(slot, q, seq))
    }

    /// Numbers packet `q`, just taken from the flow in `slot`, with its next sequence
    /// number, past which come the numbers that packets taken from behind the head
    /// already carry.
    fn took_head_number(&mut self, slot: usize, q: Queued) -> (Queued, FlowId, u64) {
        let flow = flow_mut(&mut self.flows, slot);
        let seq = flow.next_seq;
        flow.next_seq += 1;
        if let Some(e) = self.numbered_behind.iter().position(|n| n.slot == slot) {
            let n = &mut self.numbered_behind[e];
            let passed = n
                .taken
                .iter()
                .zip(flow.next_seq..)
                .take_while(|(taken, next)| **taken == *next)
                .count();
            flow.next_seq += passed as u64;
            if passed == n.taken.len() {
                self.numbered_behind.swap_remove(e);
            } else if passed > 0 {
                n.taken.drain(..passed);
                let next = flow.next_seq;
                n.by_link.retain(|&(_, max)| max >= next);
            }
        }
        self.took(slot, q, seq)
    }

    /// Accounts for packet `q` of the flow in `slot`, numbered `seq`, leaving the queues:
    /// the round robin charges the flow for it.
    fn took(&mut self, slot: usize, q: Queued, seq: u64) -> (Queued, FlowId, u64) {
        if self.covers_pause {
            self.last_taken = Some(slot);
        }
        let flow = flow_mut(&mut self.flows, slot);
        flow.unqueued(q.data.len());
        flow.deficit -= q.data.len() as i64;
        let id = flow.id;
        self.packets -= 1;
        self.bytes -= q.data.len();
        (q, id, seq)
    }

    /// Whether flow `flow` has packets still to take that get numbers below `seq`: packets
    /// that were ahead of its packet `seq` when that was taken from behind the head
    /// ([`Decision::TakeBehind`]). Sent again (its link failed), `seq` should not go
    /// before them: the receiver holds it, and everything behind it, until they come.
    pub(crate) fn numbered_ahead_of(&self, flow: FlowId, seq: u64) -> bool {
        self.numbered_behind
            .iter()
            .find(|n| n.id == flow)
            .and_then(|n| self.flows[n.slot].as_ref())
            .is_some_and(|f| f.id == flow && f.next_seq < seq)
    }

    /// Whether a small flow may be waiting (see [`Self::dequeue_small_with`]).
    pub(crate) fn has_small(&self) -> bool {
        !self.small.is_empty()
    }

    fn pop_list(&mut self, list: List) {
        match list {
            List::Priority => self.priority.pop_front(),
            List::New => self.new.pop_front(),
            List::Old => self.old.pop_front(),
            List::None => None,
        };
    }

    /// Puts `slot` back at the front of `list`, where [`Self::pop_list`] took it from.
    fn push_front_list(&mut self, list: List, slot: usize) {
        match list {
            List::Priority => self.priority.push_front(slot),
            List::New => self.new.push_front(slot),
            List::Old => self.old.push_front(slot),
            List::None => {}
        }
    }

    /// CoDel at the head of a flow: drops (or marks) as RFC 8289 says, and returns whether
    /// a packet is left at the head.
    fn codel_head(&mut self, now: Instant, slot: usize) -> bool {
        // The common cases, as `codel_head_slow` handles them: an empty queue, and a queue
        // that is fine outside a dropping state (it keeps its head).
        let target = self.target_of(slot, now);
        let flow = flow_mut(&mut self.flows, slot);
        let Some(head) = self.store.front(flow.queue) else {
            flow.codel.first_above_time = None;
            flow.codel.dropping = false;
            return false;
        };
        if !flow.codel.dropping && queue_fine(now - head.enqueued, target, flow.over_allowance()) {
            flow.codel.first_above_time = None;
            return true;
        }
        self.codel_head_slow(now, slot, target)
    }

    #[inline(never)]
    fn codel_head_slow(&mut self, now: Instant, slot: usize, target: Duration) -> bool {
        let (interval, ecn) = (self.interval, self.ecn);
        loop {
            let flow = flow_mut(&mut self.flows, slot);
            let Some(head) = self.store.front(flow.queue) else {
                flow.codel.first_above_time = None;
                flow.codel.dropping = false;
                return false;
            };
            let sojourn = now - head.enqueued;
            // A TCP or QUIC sender ([`Flow::reliable`]) answers a drop a round trip
            // after it, and the packets it sent meanwhile still wait their sojourn here:
            // a second drop before then finds the flow not slowing yet and only takes a
            // second packet of the same window (which a TCP without selective
            // acknowledgements repairs by its retransmission timeout, and which a QUIC
            // sender, slowing once per round trip, takes for no more congestion). The
            // interval covers the links' RTT; a queue that has grown longer than that (a
            // slow start's overshoot) adds its own delay to the flow's round trip, so
            // the next drop waits at least that long.
            // Other flows keep RFC 8289's schedule: an unresponsive one must meet drops
            // that come faster and faster, and the overflow policy takes them as its
            // congestion signal.
            let answer = if flow.reliable {
                sojourn
            } else {
                Duration::ZERO
            };
            let backlog = flow.over_allowance();
            let act = codel_act(
                &mut flow.codel,
                now,
                sojourn,
                target,
                interval,
                backlog,
                answer,
            );
            if !act {
                return true;
            }
            if flow.policy == PolicyKind::Overflow {
                self.overflow_congestion += 1;
            }
            // Mark an ECN-capable head instead of dropping it; then it is sent.
            if ecn {
                let head = self.store.front_mut(flow.queue).expect("checked above");
                if mark_ce(&mut head.data) {
                    self.stats.aqm_marked += 1;
                    return true;
                }
            }
            let q = self
                .store
                .pop_front(&mut flow.queue)
                .expect("checked above");
            flow.unqueued(q.data.len());
            self.packets -= 1;
            self.bytes -= q.data.len();
            self.stats.aqm_dropped += 1;
        }
    }

    /// Forgets flows that have been empty and idle for the idle timeout.
    pub(crate) fn expire_idle(&mut self, now: Instant) {
        let timeout = self.idle_timeout;
        for slot in 0..self.flows.len() {
            let expired = match &self.flows[slot] {
                Some(f) => {
                    f.queue.is_empty() && f.list == List::None && now - f.last_active >= timeout
                }
                None => false,
            };
            if expired {
                let f = self.flows[slot].take().expect("checked live");
                self.index.remove(self.index.tag(&f.key), slot);
                self.numbered_behind.retain(|n| n.slot != slot);
                self.free.push(slot);
                if self.overflow_slot == Some(slot) {
                    self.overflow_slot = None;
                }
            }
        }
    }
}

impl Flow {
    /// Whether every packet waiting is small ([`SMALL_PACKET`]).
    fn is_small(&self) -> bool {
        self.large == 0
    }

    /// Accounts for a packet of `len` bytes leaving its queue.
    fn unqueued(&mut self, len: usize) {
        self.bytes -= len;
        self.large -= usize::from(len > SMALL_PACKET);
    }

    /// Its backlog beyond what the receive-window clamp holds its sender to: CoDel judges
    /// only that (a clamped sender slows when its window says so, without a drop).
    fn over_allowance(&self) -> usize {
        self.bytes.saturating_sub(self.allowance)
    }
}

fn flow_mut(flows: &mut [Option<Flow>], slot: usize) -> &mut Flow {
    flows[slot].as_mut().expect("slot is live")
}

/// Below target, or with at most one MTU queued, the queue is fine (RFC 8289 5.3).
fn queue_fine(sojourn: Duration, target: Duration, backlog_bytes: usize) -> bool {
    sojourn < target || backlog_bytes <= 1514
}

/// One step of CoDel's state machine for the head packet: whether to drop (or mark) it.
/// The next drop comes on RFC 8289's schedule (`interval / sqrt(count)` after the last),
/// but no sooner than `answer` after this one: how long the flow needs to answer a drop.
fn codel_act(
    c: &mut Codel,
    now: Instant,
    sojourn: Duration,
    target: Duration,
    interval: Duration,
    backlog_bytes: usize,
    answer: Duration,
) -> bool {
    let ok_to_drop = codel_ok_to_drop(c, now, sojourn, target, interval, backlog_bytes);
    if c.dropping {
        if !ok_to_drop {
            c.dropping = false;
            false
        } else if now >= c.drop_next {
            c.count += 1;
            c.drop_next = control_law(c.drop_next, interval, c.count).max(now + answer);
            true
        } else {
            false
        }
    } else if ok_to_drop {
        c.dropping = true;
        let delta = c.count.saturating_sub(c.last_count);
        c.count = if delta > 1 && now - c.drop_next < interval * 16 {
            delta
        } else {
            1
        };
        c.last_count = c.count;
        c.drop_next = control_law(now, interval, c.count).max(now + answer);
        true
    } else {
        false
    }
}

fn codel_ok_to_drop(
    c: &mut Codel,
    now: Instant,
    sojourn: Duration,
    target: Duration,
    interval: Duration,
    backlog_bytes: usize,
) -> bool {
    if queue_fine(sojourn, target, backlog_bytes) {
        c.first_above_time = None;
        return false;
    }
    match c.first_above_time {
        None => {
            c.first_above_time = Some(now + interval);
            false
        }
        Some(t) => now >= t,
    }
}

fn control_law(t: Instant, interval: Duration, count: u32) -> Instant {
    t + interval.div_f64(f64::from(count.max(1)).sqrt())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::classify::classify;

    fn pkt(sport: u16, dscp: u8, len: usize, ecn: u8) -> Vec<u8> {
        let mut p = vec![0u8; len.max(28)];
        p[0] = 0x45;
        p[1] = (dscp << 2) | ecn;
        p[9] = 17;
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p
    }

    /// The source port of a packet made by `pkt`.
    fn port(p: &Queued) -> u16 {
        u16::from_be_bytes([p.data[20], p.data[21]])
    }

    fn take_all(q: &mut FlowQueues, now: Instant) -> Vec<(u16, FlowId)> {
        let mut out = Vec::new();
        while let Some((p, id, _, ())) = q.dequeue_with(now, |_, _| Decision::Take(())) {
            out.push((port(&p), id));
        }
        out
    }

    fn enq(q: &mut FlowQueues, now: Instant, p: Vec<u8>) {
        let info = classify(&p).unwrap();
        q.enqueue(now, &info, PolicyKind::MinRtt, p);
    }

    #[test]
    fn two_backlogged_flows_alternate_by_quantum() {
        let mut q = FlowQueues::new(&Config::default());
        let t = Instant::ZERO;
        for _ in 0..4 {
            enq(&mut q, t, pkt(1, 0, 1400, 0));
        }
        for _ in 0..4 {
            enq(&mut q, t, pkt(2, 0, 1400, 0));
        }
        let order: Vec<u16> = take_all(&mut q, t).into_iter().map(|(p, _)| p).collect();
        // Each flow sends about one quantum (1514 B = two 1400 B packets, the second
        // overdrawing) per round.
        assert_eq!(order.len(), 8);
        assert_ne!(
            order[..4].iter().filter(|&&p| p == 1).count(),
            4,
            "{order:?}"
        );
    }

    #[test]
    fn ef_packet_behind_burst_goes_first() {
        let mut q = FlowQueues::new(&Config::default());
        let t = Instant::ZERO;
        for _ in 0..100 {
            enq(&mut q, t, pkt(1, 0, 1400, 0));
        }
        enq(&mut q, t, pkt(9, 46, 100, 0));
        let first = take_all(&mut q, t)[0].0;
        assert_eq!(first, 9);
    }

    /// A flow is small while every packet it has waiting is (a call whose packets pile
    /// up behind a full window stays small), and not while one of them is larger
    /// (a bulk flow's segment), whichever way that packet leaves.
    #[test]
    fn a_flow_is_small_while_every_packet_it_has_waiting_is() {
        let mut q = FlowQueues::new(&Config::default());
        let t = Instant::ZERO;
        let small = |q: &mut FlowQueues| {
            q.dequeue_small_with(|_, _| Decision::Take(()))
                .map(|(p, ..)| port(&p))
        };
        // Twenty 200-byte packets: 4000 bytes waiting, each small.
        for _ in 0..20 {
            enq(&mut q, t, pkt(5, 0, 200, 0));
        }
        assert!(q.has_small());
        for _ in 0..20 {
            assert_eq!(small(&mut q), Some(5));
        }
        assert_eq!(small(&mut q), None, "nothing left");
        // One full-size packet among them: not small until it has left, taken...
        enq(&mut q, t, pkt(6, 0, 200, 0));
        enq(&mut q, t, pkt(6, 0, 1400, 0));
        enq(&mut q, t, pkt(6, 0, 200, 0));
        assert_eq!(small(&mut q), None);
        let (p, ..) = q.dequeue_with(t, |_, _| Decision::Take(())).unwrap();
        assert_eq!((port(&p), p.data.len()), (6, 200));
        assert_eq!(small(&mut q), None);
        let (p, ..) = q.dequeue_with(t, |_, _| Decision::Take(())).unwrap();
        assert_eq!((port(&p), p.data.len()), (6, 1400));
        // ...then the packet behind it is a small flow's again, once listed (a packet
        // coming lists its flow).
        enq(&mut q, t, pkt(6, 0, 200, 0));
        assert_eq!(small(&mut q), Some(6));
        assert_eq!(small(&mut q), Some(6));
        assert_eq!(small(&mut q), None);
        // ...or dropped from the fattest flow at the queues' limit.
        let c = Config {
            limit_packets: 3,
            ..Default::default()
        };
        let mut q = FlowQueues::new(&c);
        enq(&mut q, t, pkt(7, 0, 1400, 0));
        enq(&mut q, t, pkt(7, 0, 200, 0));
        enq(&mut q, t, pkt(7, 0, 200, 0));
        assert_eq!(small(&mut q), None);
        enq(&mut q, t, pkt(7, 0, 200, 0));
        assert_eq!(q.stats.overflow_dropped, 1);
        enq(&mut q, t, pkt(7, 0, 200, 0));
        assert_eq!(q.stats.overflow_dropped, 2);
        assert_eq!(small(&mut q), Some(7));
    }

    #[test]
    fn sparse_only_dequeue_serves_new_and_priority_flows_never_old_ones() {
        let mut q = FlowQueues::new(&Config::default());
        let t = Instant::ZERO;
        let sparse = |q: &mut FlowQueues| {
            q.dequeue_sparse_with(t, |_, _| Decision::Take(()))
                .map(|(p, ..)| port(&p))
        };
        assert_eq!(sparse(&mut q), None, "empty");
        for _ in 0..100 {
            enq(&mut q, t, pkt(1, 0, 1400, 0));
        }
        // A new flow's first quantum counts as sparse; after it the flow is old.
        assert_eq!(sparse(&mut q), Some(1));
        assert_eq!(sparse(&mut q), Some(1));
        assert_eq!(sparse(&mut q), None);
        enq(&mut q, t, pkt(7, 0, 200, 0));
        enq(&mut q, t, pkt(9, 46, 100, 0));
        assert_eq!(sparse(&mut q), Some(9), "priority first");
        assert_eq!(sparse(&mut q), Some(7));
        assert_eq!(sparse(&mut q), None, "only the backlogged flow is left");
        let next = q.dequeue_with(t, |_, _| Decision::Take(())).unwrap().0;
        assert_eq!(port(&next), 1);
    }

    #[test]
    fn sparse_flow_overtakes_backlogged_flow() {
        let mut q = FlowQueues::new(&Config::default());
        let t = Instant::ZERO;
        for _ in 0..100 {
            enq(&mut q, t, pkt(1, 0, 1400, 0));
        }
        // Let the bulk flow become old.
        for _ in 0..3 {
            q.dequeue_with(t, |_, _| Decision::Take(())).unwrap();
        }
        enq(&mut q, t, pkt(7, 0, 200, 0));
        let next = q.dequeue_with(t, |_, _| Decision::Take(())).unwrap().0;
        assert_eq!(u16::from_be_bytes([next.data[20], next.data[21]]), 7);
    }

    #[test]
    fn wait_leaves_packet_at_head() {
        let mut q = FlowQueues::new(&Config::default());
        enq(&mut q, Instant::ZERO, pkt(1, 0, 500, 0));
        assert!(
            q.dequeue_with::<()>(Instant::ZERO, |_, _| Decision::Wait)
                .is_none()
        );
        assert_eq!(q.packets(), 1);
        assert!(
            q.dequeue_with(Instant::ZERO, |_, _| Decision::Take(()))
                .is_some()
        );
        assert!(q.is_empty());
    }

    #[test]
    fn standing_queue_codel_drops_after_interval() {
        let mut q = FlowQueues::new(&Config::default());
        let mut t = Instant::ZERO;
        // A flow that keeps 50 packets queued, served once every 10 ms: sojourn far
        // above 5 ms for far longer than 100 ms.
        for _ in 0..50 {
            enq(&mut q, t, pkt(1, 0, 1400, 0));
        }
        for _ in 0..100 {
            t += Duration::from_millis(10);
            enq(&mut q, t, pkt(1, 0, 1400, 0));
            let _ = q.dequeue_with(t, |_, _| Decision::Take(()));
        }
        assert!(q.stats.aqm_dropped > 0, "{:?}", q.stats);
        assert_eq!(q.stats.aqm_marked, 0);
    }

    #[test]
    fn a_flow_within_its_clamped_allowance_meets_no_codel() {
        // The standing queue above, of a flow whose sender the receive-window clamp
        // holds to 80 packets: CoDel leaves it alone; past the allowance it drops again.
        let run = |allowance: usize| {
            let mut q = FlowQueues::new(&Config::default());
            let mut t = Instant::ZERO;
            let key = classify(&pkt(1, 0, 1400, 0)).unwrap().key;
            for _ in 0..50 {
                enq(&mut q, t, pkt(1, 0, 1400, 0));
            }
            q.clamp_flow(&key, |_| Some(allowance));
            for _ in 0..100 {
                t += Duration::from_millis(10);
                enq(&mut q, t, pkt(1, 0, 1400, 0));
                let _ = q.dequeue_with(t, |_, _| Decision::Take(()));
            }
            q.stats.aqm_dropped
        };
        assert_eq!(run(80 * 1400), 0);
        assert!(run(20 * 1400) > 0);
    }

    #[test]
    fn an_aggregate_flows_clamp_target_has_the_links_spread_not_their_pause() {
        let mut q = FlowQueues::new(&Config::default());
        q.set_aggregate_extra(Duration::from_millis(25), Duration::from_millis(300), true);
        let t = Instant::ZERO;
        let (agg, other) = (pkt(1, 0, 1400, 0), pkt(2, 0, 1400, 0));
        let (ka, ko) = (classify(&agg).unwrap(), classify(&other).unwrap());
        q.enqueue(t, &ka, PolicyKind::Aggregate, agg);
        q.enqueue(t, &ko, PolicyKind::MinRtt, other);
        let target = q.target;
        let time = |q: &mut FlowQueues, key| {
            let mut seen = None;
            q.clamp_flow(key, |t| {
                seen = Some(t);
                None
            });
            seen
        };
        assert_eq!(
            time(&mut q, &ka.key),
            Some(target + Duration::from_millis(25))
        );
        assert_eq!(time(&mut q, &ko.key), Some(target));
        // CoDel's target of the aggregate flow has both.
        let slot = (0..q.flows.len())
            .find(|&s| q.flows[s].as_ref().is_some_and(|f| f.key == ka.key))
            .unwrap();
        assert_eq!(
            q.target_of(slot, Instant::ZERO),
            target + Duration::from_millis(325)
        );
        // Once it sent a packet from behind its head, its head waits for the links that
        // deliver sooner by design: the spread once more, for an interval.
        q.enqueue(t, &ka, PolicyKind::Aggregate, pkt(1, 0, 1400, 0));
        let taken = q.dequeue_with(t, |f, _| {
            if f.key == ka.key {
                Decision::TakeBehind((), 2000, 0)
            } else {
                Decision::Take(())
            }
        });
        assert!(taken.is_some());
        let behind = target + Duration::from_millis(350);
        assert_eq!(q.target_of(slot, t), behind);
        assert_eq!(
            q.target_of(slot, t + (q.interval - Duration::from_nanos(1))),
            behind
        );
        assert_eq!(
            q.target_of(slot, t + q.interval),
            target + Duration::from_millis(325)
        );
    }

    #[test]
    fn codel_covers_half_the_pause_of_the_link_a_flow_is_bound_to_when_asked() {
        // A flow that keeps 10 packets queued, served one every 10 ms: a sojourn of
        // 100 ms, far over the target. Link 0 lately paused for 300 ms, link 1 not.
        let run = |covers: bool, policy: PolicyKind, link: usize| {
            let config = Config {
                codel_covers_pause: covers,
                ..Config::default()
            };
            let mut q = FlowQueues::new(&config);
            q.set_link_pauses([Duration::from_millis(300), Duration::ZERO].into_iter());
            let mut t = Instant::ZERO;
            let p = || pkt(1, 0, 1400, 0);
            let info = classify(&p()).unwrap();
            for _ in 0..10 {
                q.enqueue(t, &info, policy, p());
            }
            for _ in 0..300 {
                t += Duration::from_millis(10);
                q.enqueue(t, &info, policy, p());
                if q.dequeue_with(t, |_, _| Decision::Take(())).is_some() {
                    q.bound_to(link);
                }
            }
            q.stats.aqm_dropped
        };
        // The target then covers 150 ms more: a queue of 100 ms is left alone.
        assert_eq!(run(true, PolicyKind::MinRtt, 0), 0);
        assert_eq!(run(true, PolicyKind::Redundant, 0), 0);
        // Not without the setting, not on a link without pauses, and not for the
        // overflow policy, whose congestion signal the drops are.
        assert!(run(false, PolicyKind::MinRtt, 0) > 0);
        assert!(run(true, PolicyKind::MinRtt, 1) > 0);
        assert!(run(true, PolicyKind::Overflow, 0) > 0);
    }

    /// Times of CoDel's drops on one flow that keeps `backlog` packets queued, served
    /// one every 10 ms for 3 s (a sojourn of `backlog` times 10 ms).
    fn codel_drop_times(protocol: u8, backlog: usize) -> Vec<Duration> {
        let mut q = FlowQueues::new(&Config::default());
        let p = || {
            let mut p = pkt(1, 0, 1400, 0);
            p[9] = protocol;
            p
        };
        let mut t = Instant::ZERO;
        for _ in 0..backlog {
            enq(&mut q, t, p());
        }
        let mut drops = Vec::new();
        for _ in 0..300 {
            t += Duration::from_millis(10);
            enq(&mut q, t, p());
            let before = q.stats.aqm_dropped;
            let _ = q.dequeue_with(t, |_, _| Decision::Take(()));
            drops.extend((before..q.stats.aqm_dropped).map(|_| t - Instant::ZERO));
        }
        drops
    }

    #[test]
    fn codel_drops_a_tcp_flow_again_only_after_it_could_answer() {
        // A standing queue of 300 ms (a slow start's overshoot): a TCP flow's next drop
        // waits for the sojourn, the time its answer to the last one takes to show.
        // (The first drop comes at 110 ms, when the head had waited that long; each
        // drop takes 10 ms off the queue.)
        let tcp = codel_drop_times(6, 30);
        assert!(tcp.len() >= 3, "{tcp:?}");
        assert!(tcp[1] - tcp[0] >= Duration::from_millis(110), "{tcp:?}");
        for w in tcp[1..].windows(2) {
            assert!(w[1] - w[0] >= Duration::from_millis(150), "{tcp:?}");
        }
        // Other flows keep RFC 8289's schedule, faster and faster: an unresponsive flow
        // must not keep its queue.
        let udp = codel_drop_times(17, 30);
        assert!(udp.len() > tcp.len(), "{udp:?} against {tcp:?}");
        assert!(
            udp.windows(2)
                .any(|w| w[1] - w[0] < Duration::from_millis(100)),
            "{udp:?}"
        );
        // A queue near the target: the interval's schedule, the same for both.
        assert_eq!(codel_drop_times(6, 3), codel_drop_times(17, 3));
    }

    #[test]
    fn standing_queue_ect_packets_marked_not_dropped() {
        let mut q = FlowQueues::new(&Config::default());
        let mut t = Instant::ZERO;
        for _ in 0..50 {
            enq(&mut q, t, pkt(1, 0, 1400, 2));
        }
        for _ in 0..100 {
            t += Duration::from_millis(10);
            enq(&mut q, t, pkt(1, 0, 1400, 2));
            let _ = q.dequeue_with(t, |_, _| Decision::Take(()));
        }
        assert_eq!(q.stats.aqm_dropped, 0);
        assert!(q.stats.aqm_marked > 0);
    }

    #[test]
    fn packet_limit_drops_from_fattest_flow() {
        let c = Config {
            limit_packets: 10,
            ..Config::default()
        };
        let mut q = FlowQueues::new(&c);
        for _ in 0..10 {
            enq(&mut q, Instant::ZERO, pkt(1, 0, 1400, 0));
        }
        enq(&mut q, Instant::ZERO, pkt(2, 0, 100, 0));
        assert_eq!(q.packets(), 10);
        assert_eq!(q.stats.overflow_dropped, 1);
        let sent = take_all(&mut q, Instant::ZERO);
        assert_eq!(sent.iter().filter(|(p, _)| *p == 2).count(), 1);
    }

    #[test]
    fn flow_seq_counts_per_flow() {
        let mut q = FlowQueues::new(&Config::default());
        for _ in 0..3 {
            enq(&mut q, Instant::ZERO, pkt(1, 0, 100, 0));
            enq(&mut q, Instant::ZERO, pkt(2, 0, 100, 0));
        }
        let mut seqs: HashMap<FlowId, Vec<u64>> = HashMap::new();
        while let Some((_, id, seq, ())) = q.dequeue_with(Instant::ZERO, |_, _| Decision::Take(()))
        {
            seqs.entry(id).or_default().push(seq);
        }
        for v in seqs.values() {
            assert_eq!(v, &vec![0, 1, 2]);
        }
    }

    /// Packets of one flow, each marked with its place in the flow (byte 27).
    fn numbered_flow(q: &mut FlowQueues, n: u8) {
        for i in 0..n {
            let mut p = pkt(1, 0, 100, 0);
            p[27] = i;
            enq(q, Instant::ZERO, p);
        }
    }

    #[test]
    fn a_packet_taken_from_behind_the_head_keeps_its_place_in_the_flows_numbers() {
        // Taken at random from the head or from behind it, every packet gets the number
        // of its place in the flow, as if all had left from the head in order.
        let datagram = crate::wire::DATA_OVERHEAD + 100;
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..50 {
            let mut q = FlowQueues::new(&Config::default());
            numbered_flow(&mut q, 40);
            let mut seen = Vec::new();
            loop {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let behind = rng
                    .is_multiple_of(3)
                    .then(|| (rng >> 8) as usize % (12 * datagram));
                // Each take from behind by a link of its own: the places alone.
                let link = seen.len();
                let Some((p, _, seq, ())) = q.dequeue_with(Instant::ZERO, |_, _| match behind {
                    Some(bytes) => Decision::TakeBehind((), bytes, link),
                    None => Decision::Take(()),
                }) else {
                    break;
                };
                assert_eq!(
                    seq,
                    u64::from(p.data[27]),
                    "packet {} numbered {seq}",
                    p.data[27]
                );
                seen.push(seq);
            }
            seen.sort_unstable();
            assert_eq!(seen, (0..40).collect::<Vec<_>>());
            assert_eq!((q.packets(), q.bytes()), (0, 0));
        }
    }

    #[test]
    fn taking_from_behind_picks_the_packet_the_bytes_ahead_reach() {
        let datagram = crate::wire::DATA_OVERHEAD + 100;
        let mut q = FlowQueues::new(&Config::default());
        numbered_flow(&mut q, 6);
        // Each by a link of its own (see the next test for one link's takes).
        let mut link = 0;
        let mut take = |bytes| {
            link += 1;
            q.dequeue_with(Instant::ZERO, |_, _| Decision::TakeBehind((), bytes, link))
                .map(|(p, _, seq, ())| (p.data[27], seq))
        };
        // Three packets ahead fit in 3.5 datagrams, four do not.
        assert_eq!(take(3 * datagram + datagram / 2), Some((3, 3)));
        // Less than one datagram: the head.
        assert_eq!(take(datagram - 1), Some((0, 0)));
        // More than the whole queue (1, 2, 4, 5): the last packet.
        assert_eq!(take(100 * datagram), Some((5, 5)));
        assert_eq!(take(0), Some((1, 1)));
        assert_eq!(take(datagram), Some((4, 4)));
        assert_eq!(take(datagram), Some((2, 2)));
        assert_eq!(take(0), None);
    }

    #[test]
    fn a_flow_waiting_for_a_link_is_passed_over_and_keeps_its_place() {
        // Flow 1 (sparse, first in line) waits for a link without room while another
        // link has room: flow 2's packet goes, and flow 1 is still first the next time.
        // A flow that waits with no link free (Wait) holds the round as before.
        let t = Instant::ZERO;
        let mut q = FlowQueues::new(&Config::default());
        enq(&mut q, t, pkt(1, 0, 100, 0));
        for _ in 0..3 {
            enq(&mut q, t, pkt(2, 0, 1400, 0));
        }
        let mut offered = Vec::new();
        let got = q.dequeue_with(t, |_, h| {
            offered.push(port(h));
            if port(h) == 1 {
                Decision::Pass
            } else {
                Decision::Take(())
            }
        });
        assert_eq!(got.map(|(p, ..)| port(&p)), Some(2));
        assert_eq!(offered, [1, 2]);
        let got = q.dequeue_with(t, |_, h| {
            if port(h) == 1 {
                Decision::Wait
            } else {
                Decision::Take(())
            }
        });
        assert!(
            got.is_none(),
            "a flow that waits with no link free holds the round"
        );
        let got = q.dequeue_with(t, |_, _| Decision::Take(()));
        assert_eq!(got.map(|(p, ..)| port(&p)), Some(1));
        // No more than MAX_PASSED flows passed over in one round.
        let mut q = FlowQueues::new(&Config::default());
        for f in 0..(MAX_PASSED as u16 + 2) {
            enq(&mut q, t, pkt(10 + f, 0, 100, 0));
        }
        let mut n = 0;
        let got = q.dequeue_with(t, |_, _| {
            n += 1;
            Decision::<()>::Pass
        });
        assert!(got.is_none());
        assert_eq!(n, MAX_PASSED + 1);
    }

    #[test]
    fn a_link_is_not_given_a_packet_ahead_of_one_it_took_from_behind() {
        let datagram = crate::wire::DATA_OVERHEAD + 100;
        let mut q = FlowQueues::new(&Config::default());
        numbered_flow(&mut q, 8);
        let mut take = |d: Decision<()>| {
            q.dequeue_with(Instant::ZERO, |_, _| match &d {
                Decision::Take(()) => Decision::Take(()),
                Decision::TakeBehind((), bytes, link) => Decision::TakeBehind((), *bytes, *link),
                Decision::Wait => Decision::Wait,
                Decision::Pass => Decision::Pass,
            })
            .map(|(p, _, seq, ())| (p.data[27], seq))
        };
        // Link 1 takes 3 from behind; asked for the head (or for 1, ahead of 3), it gets
        // the packet past 3. Link 2 and the head are not held to that.
        assert_eq!(
            take(Decision::TakeBehind((), 3 * datagram, 1)),
            Some((3, 3))
        );
        assert_eq!(take(Decision::TakeBehind((), 0, 1)), Some((4, 4)));
        assert_eq!(take(Decision::TakeBehind((), datagram, 1)), Some((5, 5)));
        assert_eq!(take(Decision::TakeBehind((), 0, 2)), Some((0, 0)));
        assert_eq!(take(Decision::Take(())), Some((1, 1)));
        // Past what link 1 took, packets 6 and 7 wait; 2 is ahead of them.
        assert_eq!(take(Decision::TakeBehind((), 0, 1)), Some((6, 6)));
        assert_eq!(take(Decision::Take(())), Some((2, 2)));
        // The head has passed all link 1 took: it may take the head again.
        assert_eq!(take(Decision::TakeBehind((), 0, 1)), Some((7, 7)));
        let mut q = FlowQueues::new(&Config::default());
        numbered_flow(&mut q, 3);
        let mut take = |bytes, link| {
            q.dequeue_with(Instant::ZERO, |_, _| Decision::TakeBehind((), bytes, link))
                .map(|(p, _, seq, ())| (p.data[27], seq))
        };
        // Nothing past what it took: link 1 takes nothing; the head passes; then it may.
        assert_eq!(take(2 * datagram, 1), Some((2, 2)));
        assert_eq!(take(0, 1), None);
        assert_eq!(take(0, 2), Some((0, 0)));
        assert_eq!(take(0, 1), None);
        assert_eq!(take(0, 2), Some((1, 1)));
        assert_eq!(take(0, 1), None, "the flow is empty");
    }

    #[test]
    fn a_flow_with_packets_ahead_of_one_taken_from_behind_says_so_until_they_leave() {
        // What the engine asks before sending such a packet again (its link failed):
        // its flow's packets ahead of it go first.
        let datagram = crate::wire::DATA_OVERHEAD + 100;
        let mut q = FlowQueues::new(&Config::default());
        numbered_flow(&mut q, 6);
        let (_, id, seq, ()) = q
            .dequeue_with(Instant::ZERO, |_, _| {
                Decision::TakeBehind((), 2 * datagram, 1)
            })
            .unwrap();
        assert_eq!(seq, 2);
        assert!(q.numbered_ahead_of(id, 2));
        assert!(!q.numbered_ahead_of(id, 0), "nothing is ahead of the head");
        assert!(!q.numbered_ahead_of(FlowId(id.0 + 1), 2), "another flow");
        let (_, _, seq, ()) = q
            .dequeue_with(Instant::ZERO, |_, _| Decision::Take(()))
            .unwrap();
        assert_eq!(seq, 0);
        assert!(q.numbered_ahead_of(id, 2), "1 is still ahead of 2");
        q.dequeue_with(Instant::ZERO, |_, _| Decision::Take(()))
            .unwrap();
        assert!(!q.numbered_ahead_of(id, 2));
    }

    #[test]
    fn a_packet_dropped_ahead_of_one_taken_from_behind_leaves_no_hole_in_the_numbers() {
        // CoDel drops at the head: the packets left take the numbers in order, and the
        // receiver never waits for a number no packet carries.
        let datagram = crate::wire::DATA_OVERHEAD + 100;
        let mut q = FlowQueues::new(&Config::default());
        numbered_flow(&mut q, 8);
        let (_, _, seq, ()) = q
            .dequeue_with(Instant::ZERO, |_, _| {
                Decision::TakeBehind((), 4 * datagram, 0)
            })
            .unwrap();
        assert_eq!(seq, 4);
        // Two packets ahead of it are lost above the binding point.
        assert!(q.drop_from_fattest() && q.drop_from_fattest());
        let mut seqs = vec![seq];
        while let Some((_, _, seq, ())) = q.dequeue_with(Instant::ZERO, |_, _| Decision::Take(())) {
            seqs.push(seq);
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (0..6).collect::<Vec<_>>());
    }

    #[test]
    fn flow_index_matches_a_map_under_collisions_and_removals() {
        // Tags from a tiny range: long probe runs, equal tags, wrap-around at the table's
        // end, and backward-shift deletion inside runs.
        let mut index = FlowIndex::new(0);
        let mut model: HashMap<usize, u32> = HashMap::new();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for step in 0..20_000 {
            let slot = (next() % 300) as usize;
            match model.get(&slot) {
                Some(&tag) if next() % 2 == 0 => {
                    index.remove(tag, slot);
                    model.remove(&slot);
                }
                Some(_) => {}
                None => {
                    let tag = (next() % 12) as u32 | ((next() % 3) as u32) << 29;
                    index.insert(tag, slot);
                    model.insert(slot, tag);
                }
            }
            assert_eq!(index.len(), model.len());
            if step % 97 == 0 {
                for probe in 0..300 {
                    let tag = model.get(&probe).copied().unwrap_or(5);
                    let found = index.get(tag, |s| s == probe);
                    assert_eq!(found, model.contains_key(&probe).then_some(probe));
                }
            }
        }
    }

    #[test]
    fn idle_flow_expires_after_timeout() {
        let mut q = FlowQueues::new(&Config::default());
        enq(&mut q, Instant::ZERO, pkt(1, 0, 100, 0));
        take_all(&mut q, Instant::ZERO);
        q.expire_idle(Instant::ZERO + Duration::from_secs(29));
        assert_eq!(q.flow_count(), 1);
        q.expire_idle(Instant::ZERO + Duration::from_secs(31));
        assert_eq!(q.flow_count(), 0);
    }

    /// Dequeues every packet (TCP segments of `test_tcp`); returns each one's
    /// acknowledgement number and when it was enqueued.
    fn drain(q: &mut FlowQueues, now: Instant) -> Vec<(u32, Instant)> {
        let mut out = Vec::new();
        while let Some((p, _, _, ())) = q.dequeue_with(now, |_, _| Decision::Take(())) {
            let ack = u32::from_be_bytes([p.data[28], p.data[29], p.data[30], p.data[31]]);
            out.push((ack, p.enqueued));
        }
        out
    }

    #[test]
    fn a_later_pure_ack_replaces_the_one_waiting_at_its_flows_tail() {
        use crate::classify::test_tcp;
        const ACK: u8 = 0x10;
        let mut q = FlowQueues::new(&Config::default());
        let t0 = Instant::ZERO;
        let at = |ms| t0 + Duration::from_millis(ms);
        // Three acknowledgements of one connection waiting: one leaves, with the first's
        // place in the queue and the last's number.
        enq(&mut q, at(0), test_tcp(1, 100, ACK, &[], 0));
        enq(&mut q, at(1), test_tcp(1, 200, ACK, &[], 0));
        enq(&mut q, at(2), test_tcp(1, 300, ACK, &[], 0));
        assert_eq!(q.packets(), 1);
        assert_eq!(q.bytes(), 40);
        assert_eq!(q.stats.ack_filtered, 2);
        assert_eq!(q.stats.enqueued, 3);
        assert_eq!(drain(&mut q, at(3)), vec![(300, at(0))]);
        // A duplicate acknowledgement, a data segment, an acknowledgement with SACK
        // blocks, another connection's: each kept.
        let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        for p in [
            test_tcp(1, 400, ACK, &[], 0),
            test_tcp(1, 400, ACK, &[], 0),
            test_tcp(1, 500, ACK, &[], 100),
            test_tcp(1, 600, ACK, &[], 0),
            test_tcp(1, 700, ACK, &sack, 0),
            test_tcp(1, 800, ACK, &[], 0),
            test_tcp(2, 900, ACK, &[], 0),
        ] {
            enq(&mut q, at(4), p);
        }
        let acks: Vec<u32> = drain(&mut q, at(5)).into_iter().map(|(a, _)| a).collect();
        assert_eq!(acks, vec![400, 400, 500, 600, 700, 800, 900]);
        assert_eq!(q.stats.ack_filtered, 2);
        // Off: every acknowledgement is kept.
        let mut off = FlowQueues::new(&Config {
            ack_filter: false,
            ..Config::default()
        });
        for ack in [100, 200, 300] {
            enq(&mut off, at(0), test_tcp(1, ack, ACK, &[], 0));
        }
        assert_eq!(off.packets(), 3);
        assert_eq!(off.stats.ack_filtered, 0);
    }

    #[test]
    fn the_shared_overflow_queue_keeps_every_acknowledgement() {
        use crate::classify::test_tcp;
        // One flow tracked: the second connection's flow becomes the shared overflow
        // queue, and the third connection's packets join it there.
        let mut q = FlowQueues::new(&Config {
            max_flows: 1,
            ..Config::default()
        });
        let t = Instant::ZERO;
        enq(&mut q, t, test_tcp(1, 100, 0x10, &[], 0));
        enq(&mut q, t, test_tcp(2, 200, 0x10, &[], 0));
        enq(&mut q, t, test_tcp(3, 300, 0x10, &[], 0));
        enq(&mut q, t, test_tcp(3, 400, 0x10, &[], 0));
        assert_eq!(q.stats.flow_table_full, 3);
        assert_eq!(q.packets(), 4);
        assert_eq!(q.stats.ack_filtered, 0);
    }
}
