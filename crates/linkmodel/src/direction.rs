//! One direction of a link: queue, serializer, random loss, propagation, outages.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::trace::OPPORTUNITY_BYTES;
use crate::{LinkParams, Rate};

/// Why a packet was refused or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Refused at enqueue: the queue already held `queue_packets` packets.
    QueueFull,
    /// Refused at enqueue during an outage, or lost at an outage start.
    Outage,
    /// Lost by the Bernoulli draw when leaving the serializer.
    RandomLoss,
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::QueueFull => "queue full",
            Self::Outage => "outage",
            Self::RandomLoss => "random loss",
        })
    }
}

/// Something that happened on the link, drained with [`LinkDirection::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent<T> {
    /// The packet finished serialization and left the sender's side (frees a
    /// slot at the sender's interface). Emitted exactly once for every packet
    /// that leaves the serializer, before its `Delivered` or `Lost` event. It
    /// carries no time: it happens at the timeout returned by `poll_timeout`,
    /// so a driver calling `handle_timeout` at each timeout sees it on time.
    TxDone {
        /// The id returned by [`LinkDirection::enqueue`].
        id: u64,
    },
    /// Delivered at the far end at `at`.
    Delivered {
        /// The id returned by [`LinkDirection::enqueue`].
        id: u64,
        /// The payload given to [`LinkDirection::enqueue`].
        payload: T,
        /// Arrival time.
        at: Duration,
    },
    /// Lost on the link after being accepted by enqueue.
    Lost {
        /// The id returned by [`LinkDirection::enqueue`].
        id: u64,
        /// The payload given to [`LinkDirection::enqueue`].
        payload: T,
        /// [`DropReason::RandomLoss`] or [`DropReason::Outage`].
        reason: DropReason,
        /// When it was lost: the serializer departure for random loss, the
        /// outage start for outages.
        at: Duration,
    },
    /// An outage began: the sending host's interface went down.
    OutageStart {
        /// Outage start.
        at: Duration,
    },
    /// An outage ended: the sending host's interface came back up.
    OutageEnd {
        /// Outage end.
        at: Duration,
    },
}

/// Counters of one link direction. Every accepted packet ends in exactly one
/// of `delivered`, `lost_outage`, `lost_random` (once the link has drained).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets accepted by enqueue.
    pub enqueued: u64,
    /// Packets refused by enqueue because the queue was full.
    pub dropped_queue_full: u64,
    /// Packets refused by enqueue because the link was in an outage.
    pub dropped_outage: u64,
    /// Packets that left the serializer (number of `TxDone` events).
    pub transmitted: u64,
    /// Accepted packets later lost at an outage start.
    pub lost_outage: u64,
    /// Packets lost by the random loss draw.
    pub lost_random: u64,
    /// Packets delivered.
    pub delivered: u64,
    /// Bytes (the `len` given to enqueue) of delivered packets.
    pub bytes_delivered: u64,
    /// Largest [`LinkDirection::backlog`] seen.
    pub max_backlog: usize,
    /// Bytes (the `len` given to enqueue) of the packets that left the serializer.
    pub bytes_transmitted: u64,
    /// Capacity that passed unused, bytes, settled so far: a trace's delivery
    /// opportunities that came while nothing waited, and what was left of one when the
    /// queue ran dry in it; at a fixed rate, the serializer's idle time at the link's
    /// rate. An outage offers nothing. [`LinkDirection::unused_bytes`] adds the idle
    /// stretch still running.
    pub unused_bytes: u64,
}

#[derive(Debug)]
struct Packet<T> {
    id: u64,
    len: usize,
    payload: T,
}

/// The packet at the head, owned by the serializer.
#[derive(Debug)]
struct Serving<T> {
    packet: Packet<T>,
    /// Fixed rate: when serialization completes.
    done_at: Duration,
    /// Trace: bytes still to be served by delivery opportunities.
    remaining: usize,
}

#[derive(Debug)]
struct InFlight<T> {
    packet: Packet<T>,
    arrival: Duration,
}

/// Internal steps; the declaration order breaks ties between steps due at the
/// same instant (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Deliver,
    Serialized,
    Outage,
    Opportunity,
}

/// One direction of a link, generic over an opaque payload `T`. See the crate
/// docs for the model and the calling convention.
#[derive(Debug)]
pub struct LinkDirection<T> {
    params: LinkParams,
    /// Trace: the trace's time minus the model's (see [`Self::new`]).
    trace_shift: Duration,
    rng: ChaCha8Rng,
    /// Latest time the model has been advanced to.
    now: Duration,
    next_id: u64,
    serving: Option<Serving<T>>,
    queue: VecDeque<Packet<T>>,
    /// Propagating packets; arrivals are non-decreasing.
    in_flight: VecDeque<InFlight<T>>,
    events: VecDeque<LinkEvent<T>>,
    /// Absolute, sorted, merged outage intervals.
    outages: Vec<(Duration, Duration)>,
    /// First outage whose end has not been processed yet.
    next_outage: usize,
    /// Inside `outages[next_outage]`.
    out: bool,
    /// Trace: number of the next unused delivery opportunity.
    cursor: u64,
    /// Fixed rate: since when the serializer has had nothing to send (outside outages).
    idle_since: Option<Duration>,
    stats: LinkStats,
}

impl<T> LinkDirection<T> {
    /// Creates an idle link. `seed` seeds the ChaCha8 generator used for loss
    /// and jitter; `start` is the origin of the trace and of the outage
    /// offsets in `params`.
    ///
    /// # Panics
    ///
    /// If `params` fails [`LinkParams::validate`].
    pub fn new(params: LinkParams, seed: u64, start: Duration) -> Self {
        if let Err(err) = params.validate() {
            panic!("invalid link parameters: {err}");
        }
        let mut spans: Vec<_> = params
            .outages
            .iter()
            .map(|&(s, e)| (start.saturating_add(s), start.saturating_add(e)))
            .collect();
        spans.sort_unstable();
        let mut outages: Vec<(Duration, Duration)> = Vec::with_capacity(spans.len());
        for (s, e) in spans {
            match outages.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => outages.push((s, e)),
            }
        }
        // A trace runs before `start` too (a warm-up, e.g. the lab's handshake before
        // scenario time 0), as the periods before it: the model's time `t` is the trace's
        // `t + trace_shift`, where `trace_shift` is `start` rounded up to whole periods
        // minus `start`, so scenario time 0 is still the trace's time 0 (mod its period).
        let (trace_shift, cursor) = match &params.rate {
            Rate::Trace(trace) if !start.is_zero() => {
                let period = trace.period().as_nanos();
                let periods = start.as_nanos().div_ceil(period);
                let shift = Duration::from_nanos((periods * period - start.as_nanos()) as u64);
                (shift, trace.first_at_or_after(shift))
            }
            _ => (Duration::ZERO, 0),
        };
        Self {
            params,
            trace_shift,
            rng: ChaCha8Rng::seed_from_u64(seed),
            now: Duration::ZERO,
            next_id: 0,
            serving: None,
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            events: VecDeque::new(),
            outages,
            next_outage: 0,
            out: false,
            cursor,
            idle_since: Some(Duration::ZERO),
            stats: LinkStats::default(),
        }
    }

    /// Offers a packet of `len` bytes at `now`, after first processing
    /// everything due up to `now`. Returns the packet id (monotonic from 0,
    /// counting accepted packets only), or gives the payload back with
    /// [`DropReason::Outage`] (inside an outage) or [`DropReason::QueueFull`]
    /// (the serializer is busy and `queue_len() >= queue_packets`); a refused
    /// packet leaves no trace but a counter.
    ///
    /// An accepted packet may be due at once (an idle serializer, a trace
    /// opportunity at `now`): call [`poll_timeout`](Self::poll_timeout) again
    /// afterwards, it may return `now`.
    pub fn enqueue(
        &mut self,
        now: Duration,
        len: usize,
        payload: T,
    ) -> Result<u64, (DropReason, T)> {
        self.advance(now);
        if self.out {
            self.stats.dropped_outage += 1;
            return Err((DropReason::Outage, payload));
        }
        if self.serving.is_some() && self.queue.len() >= self.params.queue_packets {
            self.stats.dropped_queue_full += 1;
            return Err((DropReason::QueueFull, payload));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.stats.enqueued += 1;
        let packet = Packet { id, len, payload };
        if self.serving.is_none() {
            self.start_serving(packet, self.now);
        } else {
            self.queue.push_back(packet);
        }
        self.stats.max_backlog = self.stats.max_backlog.max(self.backlog());
        Ok(id)
    }

    /// The earliest time at which [`handle_timeout`](Self::handle_timeout)
    /// must be called: the next serialization end, trace opportunity with a
    /// packet waiting, delivery, or outage boundary. `None` when nothing is
    /// pending and no outage boundary remains.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.next_step().map(|(at, _)| at)
    }

    /// Advances the model to `now`, processing everything due at or before
    /// `now` in time order, each at its own time. Spurious calls are harmless;
    /// a `now` earlier than a previous call is treated as that previous time.
    pub fn handle_timeout(&mut self, now: Duration) {
        self.advance(now);
    }

    /// Next event produced so far, in time order (ties: in the order they happened).
    pub fn poll_event(&mut self) -> Option<LinkEvent<T>> {
        self.events.pop_front()
    }

    /// Packets waiting in the queue, excluding the one being serialized.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Packets waiting plus the one being serialized.
    pub fn backlog(&self) -> usize {
        self.queue.len() + usize::from(self.serving.is_some())
    }

    /// Whether `now` falls inside an outage `[start, end)` (a pure query on
    /// the parameters, independent of how far the model has been advanced).
    pub fn is_out(&self, now: Duration) -> bool {
        let i = self.outages.partition_point(|&(_, end)| end <= now);
        self.outages.get(i).is_some_and(|&(start, _)| start <= now)
    }

    /// Counters so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Capacity that passed unused up to `now`, bytes: [`LinkStats::unused_bytes`] plus
    /// the idle stretch still running (a trace's opportunities before `now` since the
    /// last one used, or the fixed rate's idle time). With `bytes_transmitted` it is
    /// what the link offered, so that a driver can tell how much of it went unused and
    /// when. Call it with a `now` the model has been advanced to (or the stretch counts
    /// from where the model stands).
    pub fn unused_bytes(&self, now: Duration) -> u64 {
        if self.out || self.serving.is_some() {
            return self.stats.unused_bytes;
        }
        self.stats.unused_bytes + self.idle_bytes(now)
    }

    /// What the idle link offered from where its accounting stands to `now`.
    fn idle_bytes(&self, now: Duration) -> u64 {
        match &self.params.rate {
            Rate::Fixed { bits_per_sec } => self.idle_since.map_or(0, |since| {
                (now.saturating_sub(since).as_secs_f64() * bits_per_sec / 8.0) as u64
            }),
            Rate::Trace(_) => {
                self.opportunities_passed(now)
                    .map_or(0, |k| k - self.cursor)
                    * OPPORTUNITY_BYTES as u64
            }
        }
    }

    /// Trace: the first opportunity at or after `at`, when some after the cursor came
    /// before `at` (they passed while nothing waited).
    fn opportunities_passed(&self, at: Duration) -> Option<u64> {
        let Rate::Trace(trace) = &self.params.rate else {
            return None;
        };
        if trace
            .offset_of(self.cursor)
            .saturating_sub(self.trace_shift)
            >= at
        {
            return None;
        }
        let k = trace.first_at_or_after(at.saturating_add(self.trace_shift));
        (k > self.cursor).then_some(k)
    }

    /// The link starts serving, or goes out, at `at`: what it offered since it went
    /// idle went unused.
    fn settle_idle(&mut self, at: Duration) {
        let unused = match &self.params.rate {
            Rate::Fixed { .. } => self.idle_bytes(at),
            Rate::Trace(_) => self.skip_opportunities(at) * OPPORTUNITY_BYTES as u64,
        };
        self.stats.unused_bytes += unused;
        self.idle_since = None;
    }

    /// Trace: moves the cursor past the opportunities before `at` (they passed while
    /// nothing waited) and returns how many it skipped.
    fn skip_opportunities(&mut self, at: Duration) -> u64 {
        let Some(k) = self.opportunities_passed(at) else {
            return 0;
        };
        let skipped = k - self.cursor;
        self.cursor = k;
        skipped
    }

    /// The parameters this link was built with.
    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    fn advance(&mut self, now: Duration) {
        let now = now.max(self.now);
        while let Some((at, step)) = self.next_step()
            && at <= now
        {
            self.now = at;
            match step {
                Step::Deliver => self.deliver(at),
                Step::Serialized => self.serialized(at),
                Step::Outage => self.outage_boundary(at),
                Step::Opportunity => self.opportunity(at),
            }
        }
        self.now = now;
    }

    fn next_step(&self) -> Option<(Duration, Step)> {
        let serializer = self.serving.as_ref().map(|s| match &self.params.rate {
            Rate::Fixed { .. } => (s.done_at, Step::Serialized),
            Rate::Trace(trace) => (
                trace
                    .offset_of(self.cursor)
                    .saturating_sub(self.trace_shift),
                Step::Opportunity,
            ),
        });
        let boundary = self
            .outages
            .get(self.next_outage)
            .map(|&(s, e)| (if self.out { e } else { s }, Step::Outage));
        let delivery = self.in_flight.front().map(|f| (f.arrival, Step::Deliver));
        [serializer, boundary, delivery].into_iter().flatten().min()
    }

    /// Hands `packet` to the idle serializer at `at`.
    fn start_serving(&mut self, packet: Packet<T>, at: Duration) {
        self.settle_idle(at);
        let done_at = match &self.params.rate {
            Rate::Fixed { bits_per_sec } => {
                at.saturating_add(serialization_time(packet.len, *bits_per_sec))
            }
            // The opportunities that passed while idle are wasted (`settle_idle`).
            Rate::Trace(_) => at,
        };
        self.serving = Some(Serving {
            remaining: packet.len,
            packet,
            done_at,
        });
    }

    /// Fixed rate: the packet in service completes at `at`.
    fn serialized(&mut self, at: Duration) {
        if let Some(done) = self.serving.take() {
            self.depart(done.packet, at);
        }
        if let Some(next) = self.queue.pop_front() {
            self.start_serving(next, at);
        } else {
            self.idle_since = Some(at);
        }
    }

    /// Trace: one opportunity of [`OPPORTUNITY_BYTES`] at `at`; unused credit is lost.
    fn opportunity(&mut self, at: Duration) {
        self.cursor += 1;
        let mut credit = OPPORTUNITY_BYTES;
        while credit > 0 {
            let Some(serving) = self.serving.as_mut() else {
                break;
            };
            let used = serving.remaining.min(credit);
            serving.remaining -= used;
            credit -= used;
            if serving.remaining > 0 {
                break;
            }
            if let Some(done) = self.serving.take() {
                self.depart(done.packet, at);
            }
            if let Some(next) = self.queue.pop_front() {
                self.start_serving(next, at);
            }
        }
        if self.serving.is_none() {
            self.stats.unused_bytes += credit as u64;
        }
    }

    /// The packet leaves the serializer at `at`: draw its fate (loss, then
    /// jitter, always both) and put it in flight.
    fn depart(&mut self, packet: Packet<T>, at: Duration) {
        self.stats.transmitted += 1;
        self.stats.bytes_transmitted += packet.len as u64;
        self.events.push_back(LinkEvent::TxDone { id: packet.id });
        let loss_draw: f64 = self.rng.random();
        let jitter_draw: f64 = self.rng.random();
        if loss_draw < self.params.loss {
            self.stats.lost_random += 1;
            self.events.push_back(LinkEvent::Lost {
                id: packet.id,
                payload: packet.payload,
                reason: DropReason::RandomLoss,
                at,
            });
            return;
        }
        let propagation = jittered_delay(self.params.delay, self.params.jitter, jitter_draw);
        let mut arrival = at.saturating_add(propagation);
        if let Some(last) = self.in_flight.back() {
            arrival = arrival.max(last.arrival);
        }
        self.in_flight.push_back(InFlight { packet, arrival });
    }

    fn deliver(&mut self, at: Duration) {
        if let Some(InFlight { packet, .. }) = self.in_flight.pop_front() {
            self.stats.delivered += 1;
            self.stats.bytes_delivered += packet.len as u64;
            self.events.push_back(LinkEvent::Delivered {
                id: packet.id,
                payload: packet.payload,
                at,
            });
        }
    }

    fn outage_boundary(&mut self, at: Duration) {
        if self.out {
            self.out = false;
            self.next_outage += 1;
            self.events.push_back(LinkEvent::OutageEnd { at });
            // What the outage took is not unused capacity: the idle stretch starts now.
            self.idle_since = Some(at);
            self.skip_opportunities(at);
            return;
        }
        if self.serving.is_none() {
            self.settle_idle(at);
        }
        self.out = true;
        self.events.push_back(LinkEvent::OutageStart { at });
        // Lost in id order: propagating (downlink only), in service, queued.
        let in_flight = if self.params.drop_in_flight_on_outage {
            self.in_flight.len()
        } else {
            0
        };
        let lost = self
            .in_flight
            .drain(..in_flight)
            .map(|f| f.packet)
            .chain(self.serving.take().map(|s| s.packet))
            .chain(self.queue.drain(..));
        for packet in lost {
            self.stats.lost_outage += 1;
            self.events.push_back(LinkEvent::Lost {
                id: packet.id,
                payload: packet.payload,
                reason: DropReason::Outage,
                at,
            });
        }
    }
}

/// `len` bytes at `bits_per_sec`, rounded to the nanosecond.
fn serialization_time(len: usize, bits_per_sec: f64) -> Duration {
    Duration::from_nanos((len as f64 * 8e9 / bits_per_sec).round() as u64)
}

/// `delay + (2 * draw - 1) * jitter`, clamped at 0; exactly `delay` without jitter.
fn jittered_delay(delay: Duration, jitter: Duration, draw: f64) -> Duration {
    if jitter.is_zero() {
        return delay;
    }
    let offset = ((2.0 * draw - 1.0) * jitter.as_nanos() as f64).round() as i128;
    let total = (delay.as_nanos() as i128 + offset).max(0);
    Duration::from_nanos(u64::try_from(total).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proptest::prelude::*;

    use super::*;
    use crate::Trace;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn fixed(bits_per_sec: f64, delay: Duration) -> LinkParams {
        LinkParams {
            rate: Rate::Fixed { bits_per_sec },
            delay,
            jitter: Duration::ZERO,
            loss: 0.0,
            queue_packets: 1000,
            outages: vec![],
            drop_in_flight_on_outage: false,
        }
    }

    fn trace_params(text: &str) -> LinkParams {
        LinkParams {
            rate: Rate::Trace(Arc::new(Trace::parse(text).unwrap())),
            ..fixed(1.0, Duration::ZERO)
        }
    }

    /// Steps through every timeout up to `until`, tagging each event with the
    /// time of the `handle_timeout` call that produced it.
    fn drive<T>(link: &mut LinkDirection<T>, until: Duration) -> Vec<(Duration, LinkEvent<T>)> {
        let mut out = Vec::new();
        while let Some(at) = link.poll_timeout().filter(|&at| at <= until) {
            link.handle_timeout(at);
            while let Some(event) = link.poll_event() {
                out.push((at, event));
            }
        }
        link.handle_timeout(until);
        while let Some(event) = link.poll_event() {
            out.push((until, event));
        }
        out
    }

    fn tx_done_times<T>(events: &[(Duration, LinkEvent<T>)]) -> Vec<(u64, Duration)> {
        events
            .iter()
            .filter_map(|(at, e)| match e {
                LinkEvent::TxDone { id } => Some((*id, *at)),
                _ => None,
            })
            .collect()
    }

    fn delivered<T>(events: &[(Duration, LinkEvent<T>)]) -> Vec<(u64, Duration)> {
        events
            .iter()
            .filter_map(|(_, e)| match e {
                LinkEvent::Delivered { id, at, .. } => Some((*id, *at)),
                _ => None,
            })
            .collect()
    }

    fn lost<T>(events: &[(Duration, LinkEvent<T>)]) -> Vec<(u64, DropReason, Duration)> {
        events
            .iter()
            .filter_map(|(_, e)| match e {
                LinkEvent::Lost { id, reason, at, .. } => Some((*id, *reason, *at)),
                _ => None,
            })
            .collect()
    }

    fn verizon_down() -> Trace {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/traces/Verizon-LTE-short.down"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
            panic!("this test needs the mahimahi trace {path} (shared/traces next to the repository): {e}")
        });
        Trace::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn fixed_rate_back_to_back_spacing_matches_rate() {
        let mut link = LinkDirection::new(fixed(8e6, ms(10)), 1, Duration::ZERO);
        for i in 0..10 {
            assert_eq!(link.enqueue(Duration::ZERO, 1000, i), Ok(i));
        }
        assert_eq!(link.backlog(), 10);
        assert_eq!(link.queue_len(), 9);
        assert_eq!(link.poll_timeout(), Some(ms(1)));
        let events = drive(&mut link, ms(100));
        let tx: Vec<_> = (0..10).map(|i| (i, ms(i + 1))).collect();
        assert_eq!(tx_done_times(&events), tx);
        let rx: Vec<_> = (0..10).map(|i| (i, ms(i + 1 + 10))).collect();
        assert_eq!(delivered(&events), rx);
        assert_eq!(link.poll_timeout(), None);
        let s = link.stats();
        assert_eq!((s.enqueued, s.transmitted, s.delivered), (10, 10, 10));
        assert_eq!((s.bytes_delivered, s.max_backlog), (10_000, 10));
    }

    /// What a link offered and nobody used: idle time at a fixed rate, a trace's
    /// opportunities while nothing waited and what a small packet left of one; an
    /// outage offers nothing.
    #[test]
    fn unused_capacity_counts_idle_time_and_wasted_opportunities() {
        // 1 Mb/s: 125 bytes per ms. Idle 0-10 ms, busy 10-20 ms, idle 20-30 ms.
        let mut link = LinkDirection::new(fixed(1e6, ms(5)), 1, Duration::ZERO);
        assert_eq!(link.unused_bytes(ms(10)), 1250);
        link.enqueue(ms(10), 1250, ()).unwrap();
        drive(&mut link, ms(30));
        assert_eq!(link.unused_bytes(ms(15)), 1250, "busy: nothing more unused");
        assert_eq!(link.unused_bytes(ms(30)), 2500);
        assert_eq!(link.stats().bytes_transmitted, 1250);
        assert_eq!(
            link.stats().unused_bytes,
            1250,
            "the running stretch is not settled"
        );

        // The same with an outage at 22-27 ms: only 20-22 and 27-30 ms count.
        let mut params = fixed(1e6, ms(5));
        params.outages = vec![(ms(22), ms(27))];
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        link.enqueue(ms(10), 1250, ()).unwrap();
        drive(&mut link, ms(30));
        assert_eq!(link.unused_bytes(ms(25)), 1250 + 250);
        assert_eq!(link.unused_bytes(ms(30)), 1250 + 250 + 375);

        // A trace with an opportunity every ms (1500 bytes each). Opportunities 1 and 2
        // pass idle; a 100-byte packet at 2.5 ms takes opportunity 3 and leaves 1400 of
        // it; 4, 5 and 6 pass idle.
        let text: String = (1..=10).map(|i| format!("{i}\n")).collect();
        let mut link = LinkDirection::new(trace_params(&text), 1, Duration::ZERO);
        link.enqueue(Duration::from_micros(2500), 100, ()).unwrap();
        assert_eq!(link.stats().unused_bytes, 3000);
        drive(&mut link, Duration::from_micros(6500));
        assert_eq!(link.stats().bytes_transmitted, 100);
        assert_eq!(link.stats().unused_bytes, 3000 + 1400);
        assert_eq!(
            link.unused_bytes(Duration::from_micros(6500)),
            3000 + 1400 + 4500
        );
        // What it offered: six opportunities.
        assert_eq!(
            link.unused_bytes(Duration::from_micros(6500)) + link.stats().bytes_transmitted,
            6 * 1500
        );
        // Busy through opportunities 7-9 (a 4000-byte packet at 6.5 ms): 500 of 9 left.
        link.enqueue(Duration::from_micros(6500), 4000, ()).unwrap();
        drive(&mut link, Duration::from_micros(9500));
        assert_eq!(link.unused_bytes(Duration::from_micros(9500)), 8900 + 500);
    }

    #[test]
    fn idle_fixed_serializer_starts_at_enqueue_time() {
        let mut link = LinkDirection::new(fixed(8e6, ms(5)), 1, Duration::ZERO);
        link.enqueue(ms(3), 500, ()).unwrap();
        let events = drive(&mut link, ms(50));
        assert_eq!(
            tx_done_times(&events),
            vec![(0, Duration::from_micros(3500))]
        );
        assert_eq!(delivered(&events), vec![(0, Duration::from_micros(8500))]);
    }

    #[test]
    fn enqueue_processes_pending_events_first() {
        let mut params = fixed(8e6, ms(10));
        params.queue_packets = 1;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        link.enqueue(Duration::ZERO, 1000, 0).unwrap();
        link.enqueue(Duration::ZERO, 1000, 1).unwrap();
        assert_eq!(
            link.enqueue(Duration::ZERO, 1000, 2),
            Err((DropReason::QueueFull, 2))
        );
        // No handle_timeout: enqueue itself catches up to 1.5 ms.
        assert_eq!(link.enqueue(Duration::from_micros(1500), 1000, 3), Ok(2));
        assert_eq!(link.poll_event(), Some(LinkEvent::TxDone { id: 0 }));
        assert_eq!(link.poll_event(), None);
        assert_eq!(link.poll_timeout(), Some(ms(2)));
    }

    #[test]
    fn late_handle_timeout_processes_each_event_at_its_own_time() {
        let mut a = LinkDirection::new(fixed(8e6, ms(10)), 1, Duration::ZERO);
        let mut b = LinkDirection::new(fixed(8e6, ms(10)), 1, Duration::ZERO);
        for i in 0..5 {
            a.enqueue(Duration::ZERO, 1000, i).unwrap();
            b.enqueue(Duration::ZERO, 1000, i).unwrap();
        }
        a.handle_timeout(ms(1000));
        let stepped: Vec<_> = drive(&mut b, ms(1000))
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        let jumped: Vec<_> = std::iter::from_fn(|| a.poll_event()).collect();
        assert_eq!(jumped, stepped);
        assert_eq!(delivered(&drive(&mut a, ms(1000))), vec![]);
    }

    #[test]
    fn queue_full_tail_drops() {
        let mut params = fixed(8e6, ms(1));
        params.queue_packets = 3;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        for i in 0..4 {
            assert_eq!(link.enqueue(Duration::ZERO, 1000, i), Ok(i));
        }
        assert_eq!((link.queue_len(), link.backlog()), (3, 4));
        assert_eq!(
            link.enqueue(Duration::ZERO, 1000, 4),
            Err((DropReason::QueueFull, 4))
        );
        assert_eq!(
            link.enqueue(Duration::ZERO, 1000, 5),
            Err((DropReason::QueueFull, 5))
        );
        // the head leaves at 1 ms and frees one slot
        assert_eq!(link.enqueue(ms(1), 1000, 6), Ok(4));
        assert_eq!(
            link.enqueue(ms(1), 1000, 7),
            Err((DropReason::QueueFull, 7))
        );
        let events = drive(&mut link, ms(100));
        let ids: Vec<_> = delivered(&events).into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        let s = link.stats();
        assert_eq!((s.enqueued, s.dropped_queue_full, s.delivered), (5, 3, 5));
        assert_eq!(s.max_backlog, 4);
    }

    #[test]
    fn zero_queue_accepts_only_into_an_idle_serializer() {
        let mut params = fixed(8e6, ms(1));
        params.queue_packets = 0;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        assert_eq!(link.enqueue(Duration::ZERO, 1000, 0), Ok(0));
        assert_eq!(
            link.enqueue(Duration::ZERO, 1000, 1),
            Err((DropReason::QueueFull, 1))
        );
        assert_eq!(link.enqueue(ms(1), 1000, 2), Ok(1));
    }

    fn lost_fraction(loss: f64, n: u64) -> f64 {
        let mut params = fixed(1e12, ms(1));
        params.loss = loss;
        params.queue_packets = n as usize;
        let mut link = LinkDirection::new(params, 42, Duration::ZERO);
        for i in 0..n {
            link.enqueue(Duration::ZERO, 1000, i).unwrap();
        }
        link.handle_timeout(Duration::from_secs(10));
        let mut lost = 0;
        while let Some(e) = link.poll_event() {
            if let LinkEvent::Lost { reason, .. } = e {
                assert_eq!(reason, DropReason::RandomLoss);
                lost += 1;
            }
        }
        let s = link.stats();
        assert_eq!(s.lost_random, lost);
        assert_eq!(s.delivered + s.lost_random, n);
        lost as f64 / n as f64
    }

    #[test]
    fn random_loss_matches_probability() {
        let f = lost_fraction(0.1, 100_000);
        assert!((f - 0.1).abs() <= 0.01, "lost fraction {f}");
        assert_eq!(lost_fraction(0.0, 100_000), 0.0);
        assert_eq!(lost_fraction(1.0, 1000), 1.0);
    }

    #[test]
    fn random_loss_still_consumes_capacity() {
        let mut params = fixed(8e6, ms(10));
        params.loss = 1.0;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        for i in 0..3 {
            link.enqueue(Duration::ZERO, 1000, i).unwrap();
        }
        let events = drive(&mut link, ms(100));
        assert_eq!(
            tx_done_times(&events),
            vec![(0, ms(1)), (1, ms(2)), (2, ms(3))]
        );
        let expected: Vec<_> = (0..3)
            .map(|i| (i, DropReason::RandomLoss, ms(i + 1)))
            .collect();
        assert_eq!(lost(&events), expected);
    }

    /// 10 packets of 1 ms each at t=0, delay 50 ms, outage [5 ms, 20 ms).
    fn outage_link(drop_in_flight: bool) -> LinkDirection<u64> {
        let mut params = fixed(8e6, ms(50));
        params.outages = vec![(ms(5), ms(20))];
        params.drop_in_flight_on_outage = drop_in_flight;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        for i in 0..10 {
            link.enqueue(Duration::ZERO, 1000, i).unwrap();
        }
        link
    }

    fn check_outage_common(link: &mut LinkDirection<u64>) -> Vec<(Duration, LinkEvent<u64>)> {
        assert!(!link.is_out(Duration::from_micros(4999)));
        assert!(link.is_out(ms(5)));
        assert!(link.is_out(Duration::from_micros(19_999)));
        assert!(!link.is_out(ms(20)));
        let mut events = drive(link, ms(10));
        assert_eq!(
            link.enqueue(ms(10), 1000, 100),
            Err((DropReason::Outage, 100))
        );
        assert_eq!(link.backlog(), 0);
        events.extend(drive(link, ms(20)));
        assert_eq!(link.enqueue(ms(20), 1000, 200), Ok(10));
        events.extend(drive(link, ms(200)));
        assert_eq!(link.poll_timeout(), None);
        let boundaries: Vec<_> = events
            .iter()
            .filter(|(_, e)| {
                matches!(
                    e,
                    LinkEvent::OutageStart { .. } | LinkEvent::OutageEnd { .. }
                )
            })
            .map(|(t, e)| (*t, e.clone()))
            .collect();
        assert_eq!(
            boundaries,
            vec![
                (ms(5), LinkEvent::OutageStart { at: ms(5) }),
                (ms(20), LinkEvent::OutageEnd { at: ms(20) }),
            ]
        );
        // packets 0..=4 left the serializer (4 exactly at the outage start); 5..=9 did not
        let mut tx: Vec<_> = (0..5).map(|i| (i, ms(i + 1))).collect();
        tx.push((10, ms(21)));
        assert_eq!(tx_done_times(&events), tx);
        assert_eq!(link.stats().dropped_outage, 1);
        events
    }

    #[test]
    fn uplink_outage_keeps_in_flight() {
        let mut link = outage_link(false);
        let events = check_outage_common(&mut link);
        let mut rx: Vec<_> = (0..5).map(|i| (i, ms(i + 51))).collect();
        rx.push((10, ms(71)));
        assert_eq!(delivered(&events), rx);
        let lost_expected: Vec<_> = (5..10).map(|i| (i, DropReason::Outage, ms(5))).collect();
        assert_eq!(lost(&events), lost_expected);
        assert_eq!(link.stats().lost_outage, 5);
    }

    #[test]
    fn downlink_outage_drops_in_flight() {
        let mut link = outage_link(true);
        let events = check_outage_common(&mut link);
        assert_eq!(delivered(&events), vec![(10, ms(71))]);
        let lost_expected: Vec<_> = (0..10).map(|i| (i, DropReason::Outage, ms(5))).collect();
        assert_eq!(lost(&events), lost_expected);
        assert_eq!(link.stats().lost_outage, 10);
    }

    #[test]
    fn outage_boundaries_are_timeouts_and_offsets_from_start() {
        let mut params = fixed(8e6, ms(1));
        params.outages = vec![(ms(30), ms(40)), (ms(5), ms(10)), (ms(8), ms(12))];
        let mut link: LinkDirection<()> = LinkDirection::new(params, 1, ms(100));
        assert!(link.is_out(ms(111)) && !link.is_out(ms(112)) && !link.is_out(ms(11)));
        let times: Vec<_> = drive(&mut link, ms(1000))
            .into_iter()
            .map(|(t, e)| (t, matches!(e, LinkEvent::OutageStart { .. })))
            .collect();
        assert_eq!(
            times,
            vec![
                (ms(105), true),
                (ms(112), false),
                (ms(130), true),
                (ms(140), false)
            ]
        );
        assert_eq!(link.poll_timeout(), None);
    }

    #[test]
    fn trace_serves_partial_packets_and_wastes_unused_credit() {
        // opportunities at 1, 1, 3 | 4, 4, 6 | 7, 7, 9 ...
        let mut link = LinkDirection::new(trace_params("1\n1\n3\n"), 1, Duration::ZERO);
        link.enqueue(Duration::ZERO, 1000, 0).unwrap();
        link.enqueue(Duration::ZERO, 1000, 1).unwrap();
        assert_eq!(link.poll_timeout(), Some(ms(1)));
        let mut events = drive(&mut link, ms(1));
        // first opportunity: all of 0, 500 bytes of 1; second: the rest of 1
        assert_eq!(tx_done_times(&events), vec![(0, ms(1)), (1, ms(1))]);
        link.enqueue(ms(1), 2000, 2).unwrap();
        events.extend(drive(&mut link, ms(100)));
        assert_eq!(tx_done_times(&events)[2], (2, ms(4)));
        // idle through many opportunities: no credit accumulates
        // (next opportunities: 102, 103, 103)
        link.enqueue(ms(101), 3000, 3).unwrap();
        let events = drive(&mut link, ms(200));
        assert_eq!(tx_done_times(&events), vec![(3, ms(103))]);
    }

    #[test]
    fn trace_opportunity_at_enqueue_time_counts() {
        let mut link = LinkDirection::new(trace_params("5\n10\n"), 1, ms(1000));
        link.enqueue(ms(1005), 1500, ()).unwrap();
        assert_eq!(link.poll_timeout(), Some(ms(1005)));
        let events = drive(&mut link, ms(1005));
        assert_eq!(tx_done_times(&events), vec![(0, ms(1005))]);
        // the next one waits for the opportunity at 1010 (and the repetition at 1015, 1020 ...)
        link.enqueue(ms(1005), 3000, ()).unwrap();
        let events = drive(&mut link, ms(2000));
        assert_eq!(tx_done_times(&events), vec![(1, ms(1015))]);
    }

    #[test]
    fn trace_opportunities_during_outage_are_wasted() {
        let mut params = trace_params("1\n");
        params.outages = vec![(ms(2), ms(5))];
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        for i in 0..3 {
            link.enqueue(Duration::ZERO, 1500, i).unwrap();
        }
        let mut events = drive(&mut link, ms(5));
        link.enqueue(ms(5), 1500, 3).unwrap();
        events.extend(drive(&mut link, ms(100)));
        assert_eq!(tx_done_times(&events), vec![(0, ms(1)), (3, ms(5))]);
        let expected = vec![
            (1, DropReason::Outage, ms(2)),
            (2, DropReason::Outage, ms(2)),
        ];
        assert_eq!(lost(&events), expected);
    }

    /// Keeps `link` saturated with 1500-byte packets until `horizon`, returns
    /// the bytes delivered before `horizon`.
    fn saturate(link: &mut LinkDirection<()>, horizon: Duration) -> u64 {
        let mut now = Duration::ZERO;
        let mut bytes = 0;
        loop {
            while link.enqueue(now, 1500, ()).is_ok() {}
            while let Some(e) = link.poll_event() {
                if let LinkEvent::Delivered { at, .. } = e
                    && at < horizon
                {
                    bytes += 1500;
                }
            }
            match link.poll_timeout() {
                Some(at) if at < horizon => {
                    now = at;
                    link.handle_timeout(at);
                }
                _ => return bytes,
            }
        }
    }

    #[test]
    fn trace_delivers_mean_rate() {
        let trace = Arc::new(verizon_down());
        let mean = trace.mean_rate_bps();
        assert!(mean > 1e6 && mean < 1e8, "mean rate {mean} bit/s");
        let mut params = trace_params("1\n");
        params.rate = Rate::Trace(trace.clone());
        params.queue_packets = 100;

        // Over 10 s the link carries what the trace's first 10 s offer (this
        // trace's first 10 s run well above its mean, about 6.9 vs 5.0 Mbit/s).
        let ten = Duration::from_secs(10);
        let offered = trace
            .opportunities_ms()
            .iter()
            .filter(|&&t| t < 10_000)
            .count();
        let capacity = (offered * OPPORTUNITY_BYTES) as f64;
        let mut link = LinkDirection::new(params.clone(), 1, Duration::ZERO);
        let got = saturate(&mut link, ten) as f64;
        assert!(
            (got / capacity - 1.0).abs() < 0.02,
            "{got} bytes vs {capacity}"
        );

        // Over whole repetitions it carries mean_rate_bps.
        let horizon = trace.period() * 2;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        let got = saturate(&mut link, horizon) as f64 * 8.0;
        let expected = mean * horizon.as_secs_f64();
        assert!(
            (got / expected - 1.0).abs() < 0.02,
            "{got} bits vs {expected}"
        );
    }

    /// A link started `start` after the model's origin (a warm-up) carries packets
    /// before `start`, and from `start` on delivers at the same instants, relative to
    /// `start`, as a link without warm-up.
    #[test]
    fn trace_runs_during_the_warm_up_and_stays_aligned_after_it() {
        // Period 10 ms, opportunities at 3 and 7 ms (and 10, the period's end).
        let params = trace_params("3\n7\n10\n");
        let deliveries = |start: Duration| {
            let mut link = LinkDirection::new(params.clone(), 1, start);
            let mut times = Vec::new();
            for k in 0..40u64 {
                let t = Duration::from_millis(k);
                link.handle_timeout(t);
                link.enqueue(t, 1500, ()).unwrap();
                while let Some(at) = link.poll_timeout().filter(|&at| at <= t) {
                    link.handle_timeout(at);
                }
                while let Some(e) = link.poll_event() {
                    if let LinkEvent::Delivered { at, .. } = e {
                        times.push(at);
                    }
                }
            }
            times
        };
        let plain = deliveries(Duration::ZERO);
        let start = Duration::from_millis(25);
        let warm = deliveries(start);
        assert!(
            warm.iter().any(|&at| at < start),
            "nothing before start: {warm:?}"
        );
        let after: Vec<_> = warm
            .iter()
            .filter(|&&at| at >= start)
            .map(|&at| (at - start).as_millis() % 10)
            .collect();
        assert!(!after.is_empty());
        let phases: Vec<_> = plain.iter().map(|at| at.as_millis() % 10).collect();
        for p in &after {
            assert!(phases.contains(p), "phase {p} not in {phases:?}");
        }
    }

    #[test]
    fn constant_trace_delivers_mean_rate_over_ten_seconds() {
        // one opportunity per ms: 12 Mbit/s
        let mut params = trace_params("1\n");
        params.queue_packets = 10;
        let mut link = LinkDirection::new(params, 1, Duration::ZERO);
        let got = saturate(&mut link, Duration::from_secs(10)) as f64 * 8.0;
        let expected = 12e6 * 10.0;
        assert!(
            (got / expected - 1.0).abs() < 0.02,
            "{got} bits vs {expected}"
        );
    }

    fn jittery(seed: u64) -> Vec<(Duration, LinkEvent<u64>)> {
        let mut params = fixed(100e6, ms(20));
        params.jitter = ms(15);
        params.loss = 0.2;
        let mut link = LinkDirection::new(params, seed, Duration::ZERO);
        let mut events = Vec::new();
        for i in 0..5000u64 {
            let now = Duration::from_micros(i * 100);
            events.extend(drive(&mut link, now));
            let _ = link.enqueue(now, 200 + (i as usize * 7) % 1300, i);
        }
        events.extend(drive(&mut link, Duration::from_secs(10)));
        events
    }

    #[test]
    fn jitter_never_reorders() {
        let events = jittery(3);
        let rx = delivered(&events);
        assert!(rx.len() > 3000);
        assert!(rx.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        let tx: std::collections::HashMap<_, _> = tx_done_times(&events).into_iter().collect();
        // beyond delay + jitter only when held back behind the previous packet
        assert!(
            rx.windows(2)
                .all(|w| w[1].1 - tx[&w[1].0] <= ms(35) || w[1].1 == w[0].1)
        );
    }

    #[test]
    fn jitter_spreads_sparse_packets_over_the_whole_range() {
        let mut params = fixed(100e6, ms(20));
        params.jitter = ms(15);
        let mut link = LinkDirection::new(params, 5, Duration::ZERO);
        let mut events = Vec::new();
        for i in 0..300u64 {
            // 40 ms apart: more than 2 * jitter, so no packet is held back
            let now = ms(40 * i);
            events.extend(drive(&mut link, now));
            link.enqueue(now, 125, i).unwrap(); // 10 us of serialization
        }
        events.extend(drive(&mut link, Duration::from_secs(100)));
        let delays: Vec<_> = delivered(&events)
            .into_iter()
            .map(|(id, at)| at - ms(40 * id) - Duration::from_micros(10))
            .collect();
        assert_eq!(delays.len(), 300);
        assert!(delays.iter().all(|d| (ms(5)..=ms(35)).contains(d)));
        assert!(delays.iter().min().unwrap() < &ms(7));
        assert!(delays.iter().max().unwrap() > &ms(33));
        let mean = delays.iter().sum::<Duration>() / 300;
        assert!(mean > ms(18) && mean < ms(22), "mean {mean:?}");
    }

    #[test]
    fn same_seed_same_fates() {
        assert_eq!(jittery(7), jittery(7));
        assert_ne!(jittery(7), jittery(8));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Enqueue { dt_us: u64, len: usize },
        Advance { dt_us: u64 },
    }

    fn params_strategy() -> impl Strategy<Value = LinkParams> {
        let rate = prop_oneof![
            (1e5..1e8f64).prop_map(|bits_per_sec| Rate::Fixed { bits_per_sec }),
            prop::collection::vec(0..4u64, 1..12).prop_map(|steps| {
                let text: String = steps
                    .iter()
                    .scan(0, |t, s| {
                        *t += s;
                        Some(format!("{t}\n"))
                    })
                    .collect();
                Rate::Trace(Arc::new(Trace::parse(&text).unwrap()))
            }),
        ];
        let loss = prop_oneof![Just(0.0), Just(1.0), 0.0..1.0f64];
        let outages = prop::collection::vec((0..300u64, 1..60u64), 0..4).prop_map(|v| {
            v.into_iter()
                .map(|(s, l)| (ms(s), ms(s + l)))
                .collect::<Vec<_>>()
        });
        (
            rate,
            0..50_000u64,
            0..20_000u64,
            loss,
            0..6usize,
            outages,
            any::<bool>(),
        )
            .prop_map(
                |(
                    rate,
                    delay_us,
                    jitter_us,
                    loss,
                    queue_packets,
                    outages,
                    drop_in_flight_on_outage,
                )| {
                    LinkParams {
                        rate,
                        delay: Duration::from_micros(delay_us),
                        jitter: Duration::from_micros(jitter_us),
                        loss,
                        queue_packets,
                        outages,
                        drop_in_flight_on_outage,
                    }
                },
            )
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3000u64, 0..4000usize).prop_map(|(dt_us, len)| Op::Enqueue { dt_us, len }),
            1 => (0..20_000u64).prop_map(|dt_us| Op::Advance { dt_us }),
        ]
    }

    /// Runs `ops`; with `step`, also calls handle_timeout at every timeout.
    #[allow(clippy::type_complexity)]
    fn run_ops(
        params: &LinkParams,
        seed: u64,
        ops: &[Op],
        step: bool,
    ) -> (
        Vec<Result<u64, DropReason>>,
        Vec<LinkEvent<usize>>,
        LinkStats,
    ) {
        let mut link = LinkDirection::new(params.clone(), seed, Duration::ZERO);
        let mut now = Duration::ZERO;
        let mut results = Vec::new();
        let mut events = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let dt = match op {
                Op::Enqueue { dt_us, .. } | Op::Advance { dt_us } => Duration::from_micros(*dt_us),
            };
            now += dt;
            if step {
                events.extend(drive(&mut link, now).into_iter().map(|(_, e)| e));
            }
            match op {
                Op::Enqueue { len, .. } => {
                    let r = link.enqueue(now, *len, i).map_err(|(reason, payload)| {
                        assert_eq!(payload, i);
                        reason
                    });
                    results.push(r);
                }
                Op::Advance { .. } => link.handle_timeout(now),
            }
            events.extend(std::iter::from_fn(|| link.poll_event()));
        }
        link.handle_timeout(now + Duration::from_secs(100));
        events.extend(std::iter::from_fn(|| link.poll_event()));
        assert_eq!(link.poll_timeout(), None);
        assert_eq!(link.backlog(), 0);
        (results, events, link.stats().clone())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_accepted_packet_meets_exactly_one_fate(
            params in params_strategy(),
            seed in any::<u64>(),
            ops in prop::collection::vec(op_strategy(), 0..150),
        ) {
            let (results, events, stats) = run_ops(&params, seed, &ops, false);
            let accepted: Vec<u64> = results.iter().filter_map(|r| r.ok()).collect();
            let n = accepted.len();
            prop_assert_eq!(&accepted, &(0..n as u64).collect::<Vec<_>>());

            let mut tx_done = vec![false; n];
            let mut fate = vec![0u32; n];
            let mut last_delivered = None;
            let mut last_at = Duration::ZERO;
            let mut out = false;
            for e in &events {
                match e {
                    LinkEvent::TxDone { id } => {
                        prop_assert!(!tx_done[*id as usize], "double TxDone {}", id);
                        prop_assert_eq!(fate[*id as usize], 0);
                        tx_done[*id as usize] = true;
                    }
                    LinkEvent::Delivered { id, at, .. } => {
                        prop_assert!(tx_done[*id as usize]);
                        prop_assert!(last_delivered < Some(*id));
                        last_delivered = Some(*id);
                        prop_assert!(*at >= last_at);
                        last_at = *at;
                        fate[*id as usize] += 1;
                    }
                    LinkEvent::Lost { id, reason, at, .. } => {
                        match reason {
                            DropReason::RandomLoss => prop_assert!(tx_done[*id as usize]),
                            DropReason::Outage => prop_assert!(
                                params.drop_in_flight_on_outage || !tx_done[*id as usize]
                            ),
                            DropReason::QueueFull => prop_assert!(false, "QueueFull after accept"),
                        }
                        prop_assert!(*at >= last_at);
                        last_at = *at;
                        fate[*id as usize] += 1;
                    }
                    LinkEvent::OutageStart { at } | LinkEvent::OutageEnd { at } => {
                        prop_assert_eq!(matches!(e, LinkEvent::OutageStart { .. }), !out);
                        out = !out;
                        prop_assert!(*at >= last_at);
                        last_at = *at;
                    }
                }
            }
            prop_assert!(!out);
            prop_assert!(fate.iter().all(|&f| f == 1), "fates {:?}", fate);
            prop_assert_eq!(stats.enqueued, n as u64);
            prop_assert_eq!(stats.enqueued, stats.delivered + stats.lost_outage + stats.lost_random);
            prop_assert_eq!(stats.transmitted, tx_done.iter().filter(|&&t| t).count() as u64);
            let refused = results.iter().filter(|r| r.is_err()).count() as u64;
            prop_assert_eq!(refused, stats.dropped_outage + stats.dropped_queue_full);

            // Stepping through every timeout changes nothing.
            let stepped = run_ops(&params, seed, &ops, true);
            prop_assert_eq!(&stepped.0, &results);
            prop_assert_eq!(&stepped.1, &events);
            prop_assert_eq!(&stepped.2, &stats);
        }
    }
}
