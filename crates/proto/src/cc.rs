//! Per-link rate and delay control: keeps the queue at each link's bottleneck (a modem,
//! a base station, a DSL line: somewhere the sender cannot see) short, so that the
//! backlog waits in the per-flow queues above the binding point instead, where fair
//! queueing and CoDel control it and the binding point can still move it.
//!
//! The controller sets each link's window from what the link delivers and how long its
//! bottleneck queue is, both measured by the sender:
//!
//! - The queueing delay `dq`: the forward one-way delay over its minimum. The peer
//!   reports when it received the packet each acknowledgement is about (RX_TIME,
//!   `docs/protocol.md` 3.6); send and receive clocks differ by a constant that the
//!   minimum takes out. Only this direction's queue counts: a queue on the way back (the
//!   peer's own traffic) does not make the link slow down. The standing value is the
//!   least of the last half SRTT (the delay a packet sent now would see). Without
//!   one-way samples, RTTstanding - RTTmin stands in (as Copa, Arun and Balakrishnan,
//!   NSDI 2018).
//! - `R`, the delivery rate: bytes acknowledged over the last `RTTmin` (at least
//!   [`RATE_WINDOW_MIN`]), so that a link whose capacity changes every few milliseconds
//!   is followed within a round trip, and a cellular scheduler's bursts are averaged.
//! - The target queue `hold`: two packets at `R`, or as long as the link lately
//!   delivered nothing while packets waited (the longest gap between acknowledgements
//!   of [`GAP_WINDOW`], counted only as far as the packet acknowledged after it waited
//!   beyond the path's minimum, the peer's ack delay taken out), up to `max_queue`. A link
//!   whose delivery comes in bursts and pauses (a cellular scheduler) needs that much
//!   waiting at its bottleneck to use the bursts; a steady link needs two packets.
//! - The window that keeps `hold` at the bottleneck is `R * (RTTmin + hold)`, at the
//!   rate the link delivered while the window limited it if that is higher. When the
//!   queue is longer than `hold`, the window falls to it at once, but within a round trip
//!   no further than the queue asks: the round's first window times
//!   `(RTTmin + hold) / (RTTmin + dq)`. The delivery rate over a minimum RTT swings with
//!   a cellular scheduler's bursts and pauses, and with a share another sender takes;
//!   the queue says how much the window is too large. When the queue has
//!   stayed under half of `hold` for a round trip and the window limits the link, the
//!   link may carry more (this test reads the queue on full-size datagrams, over the
//!   least delay they take more than small ones, at most one packet's time: the minimum
//!   comes from the smallest datagrams, and a full-size one's own serialization and its
//!   pacer-pair partner's, about the two-packet target, would otherwise read as a queue
//!   on a link the window does not fill): the window grows to `R * (RTTmin + 2 * hold)`, a search
//!   whose overshoot, if the link carries nothing more, is one more `hold` of queue for
//!   a round trip, however large the bandwidth-delay product (a multiplicative search,
//!   1.25 times, put a quarter of it in the queue: 10 ms on a 10 Mb/s, 40 ms path, the
//!   probe's p99 beside a download). In between, or while the link has less to send
//!   than its window, it holds. A link whose capacity grows is followed up by one
//!   `hold` per round trip (startup, doubling while the window limits the link, runs
//!   only on a fresh link or a failover; the window also counts as limiting while
//!   packets wait above the binding point that only the pacer holds back, since the
//!   pacer's rate is the window's and what it holds is not in flight yet;
//!   it ends at the first queue longer than `hold`, with the window cut to the rate's
//!   fit, or while the window limits the link no further than the later cuts go: the
//!   delivery rate is then what the flows above sent a round trip before, an inner
//!   TCP's own slow start; it also ends, cut to the rate's fit, at a round trip that
//!   loses 2 % of its packets and at least 8: a buffer shallower than the overshoot
//!   overflows before its queue shows as delay).
//! - Packets are paced at twice `window / RTTstanding`, so that a window leaves as a
//!   stream and not as a burst.
//! - Competing traffic: while the queue is never nearly empty for ten minimum RTTs,
//!   something else keeps the bottleneck full and a delay target would leave the link
//!   to it (a pause of the link, during which packets wait and come back late by it,
//!   does not count as time with a queue: a cellular scheduler's pause of a second is
//!   no other sender; the two packets of the target count here at most `max_queue`,
//!   unless they take longer at the highest rate of the last seconds: this link's own
//!   rate falls with the share the other traffic takes; and before the window has ever
//!   limited the link, at most `max_queue`). The controller then competes: its window
//!   starts from what it was when the queue was last nearly empty, gets out of the way
//!   of the inner flows' own congestion control and backs off by 0.7 at a loss. It
//!   drains to the capacity it measured before, per minimum RTT, when a round trip
//!   carries most of that capacity, or else every 8 round trips and half as often after
//!   each drain that found the other traffic still there: if the queue then empties, it
//!   was the link's own and the delay target returns.
//! - A queue the cuts do not shorten: the only link up competes sooner. A queue of its
//!   own loses at least half when the window halves (the window is
//!   `R * (RTTmin + dq)`); when, two standing RTTs and the link's recent longest pause
//!   after the window fell to half of what it was when the queue first passed `hold`,
//!   the queue has not lost even a quarter, it is another sender's
//!   (one that fills the FIFO slowly, as a TCP that leaves slow start early does, keeps
//!   the queue near the competing test's bound while the window shrinks, and the flows
//!   above the binding point meet CoDel meanwhile). It then competes from the window it
//!   had before those cuts, and ends that only when the queue comes within twice the
//!   target it had then (at most two packets at the best rate): the target of now grows
//!   with the gaps that the other sender's packets make between this link's. With
//!   another link up the flows move there as this window falls, and only the test of ten
//!   minimum RTTs applies.
//!
//! The windowed minimum and maximum filters are Kathleen Nichols' three-sample estimator
//! (as in Linux's `lib/minmax.c`): constant memory, exact when the extreme is recent.

use core::time::Duration;
use std::collections::VecDeque;

use crate::time::Instant;

/// Bytes of one full-size packet.
const MSS: f64 = 1500.0;
/// Smallest window: enough for a packet below the binding point, one in flight and an
/// acknowledgement's worth of slack.
const MIN_CWND: f64 = 4.0 * MSS;
/// Initial window. Larger than a TCP's ten packets: the tunnel carries many flows at
/// once, and the per-flow queues' CoDel would otherwise drop what waits above the binding
/// point while a fresh link is still searching.
const INITIAL_CWND: f64 = 32.0 * MSS;
/// How long an RTT sample counts as a candidate for the minimum RTT.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// Shortest window over which the delivery rate is measured.
const RATE_WINDOW_MIN: Duration = Duration::from_millis(10);
/// How long the longest gap between acknowledgements counts.
pub(crate) const GAP_WINDOW: Duration = Duration::from_secs(2);
/// Added to one-way delay samples (nanoseconds) so that they fit a `Duration` whatever the
/// offset between the two ends' clocks (up to 73 years either way).
const OWD_BIAS: i128 = 1 << 61;
/// Packets the controller keeps at a steady bottleneck.
const HOLD_PACKETS: f64 = 2.0;
/// Minimum RTTs without a nearly empty queue after which the controller competes.
const COMPETITIVE_AFTER_RTTS: u32 = 10;
/// Startup ends when a round trip loses at least this many packets and
/// [`STARTUP_LOSS_SHARE`] of what it sent (delivered and lost): the bottleneck's buffer
/// overflowed. BBR v2's startup exit, with the values of its Linux implementation
/// (`tcp_bbr2.c`: `bbr_full_loss_cnt` 8, `bbr_loss_thresh` 2 %): a random loss of 1 %
/// seldom passes both in one round trip.
const STARTUP_LOSS_EVENTS: u32 = 8;
/// The share of a round trip's packets lost that ends startup, with
/// [`STARTUP_LOSS_EVENTS`].
const STARTUP_LOSS_SHARE: f64 = 0.02;
/// Round trips between two drains in competitive mode.
const DRAIN_EVERY_RTTS: u32 = 8;
/// The longest spacing of the periodic drains, in round trips: each drain that finds the
/// other traffic still there doubles the spacing up to this.
const DRAIN_EVERY_RTTS_MAX: u32 = 64;
/// Competitive mode drains at once when a round trip carried this share of the
/// bottleneck's capacity: the other traffic has (nearly) gone.
const DRAIN_AT_CAPACITY_SHARE: f64 = 0.8;

/// A windowed minimum or maximum over time (three-sample estimator).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MinMax {
    /// Best, second best and third best samples of the window, newest last.
    s: [(Instant, Duration); 3],
    max: bool,
    empty: bool,
}

impl MinMax {
    pub(crate) fn new(max: bool) -> Self {
        Self {
            s: [(Instant::ZERO, Duration::ZERO); 3],
            max,
            empty: true,
        }
    }

    fn get(&self) -> Duration {
        self.s[0].1
    }

    fn better(&self, a: Duration, b: Duration) -> bool {
        if self.max { a >= b } else { a <= b }
    }

    fn reset(&mut self, now: Instant, v: Duration) {
        self.s = [(now, v); 3];
        self.empty = false;
    }

    /// The extreme, if a sample came within the last `window` (the estimator ages only
    /// as samples come).
    pub(crate) fn recent(&self, now: Instant, window: Duration) -> Option<Duration> {
        (!self.empty && now - self.s[2].0 <= window).then(|| self.get())
    }

    /// Adds a sample to a path's base (minimum) delay, over [`MIN_RTT_WINDOW`]. While
    /// `frozen` (competitive mode: another sender's queue hides the path's own delay)
    /// the base is kept and only a lower sample replaces it, or that queue would become
    /// the base and the controller would defend it as empty.
    fn update_base(&mut self, now: Instant, v: Duration, frozen: bool) {
        if !frozen {
            self.update(now, MIN_RTT_WINDOW, v);
        } else if v < self.get() {
            self.reset(now, v);
        }
    }

    /// Adds a sample; keeps the extreme of the last `window`.
    pub(crate) fn update(&mut self, now: Instant, window: Duration, v: Duration) {
        if self.empty || self.better(v, self.s[0].1) || now - self.s[2].0 > window {
            self.reset(now, v);
            return;
        }
        if self.better(v, self.s[1].1) {
            self.s[1] = (now, v);
            self.s[2] = (now, v);
        } else if self.better(v, self.s[2].1) {
            self.s[2] = (now, v);
        }
        // Age the window's best out as it expires (minmax_subwin_update).
        let dt = now - self.s[0].0;
        if dt > window {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (now, v);
            if now - self.s[0].0 > window {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (now, v);
            }
        } else if self.s[1].0 == self.s[0].0 && dt > window / 4 {
            self.s[1] = (now, v);
            self.s[2] = (now, v);
        } else if self.s[2].0 == self.s[1].0 && dt > window / 2 {
            self.s[2] = (now, v);
        }
    }
}

/// One link's controller.
#[derive(Clone, Debug)]
pub(crate) struct Controller {
    /// Window, bytes.
    cwnd: f64,
    min_rtt: MinMax,
    standing: MinMax,
    max_rtt: MinMax,
    has_sample: bool,
    /// The same three filters over the forward one-way delay (RX_TIME), biased by
    /// [`OWD_BIAS`] (the clocks' offset makes a raw sample any sign): the queue on this
    /// link's own direction, which a queue on the way back (the peer's traffic) does
    /// not inflate.
    owd_min: MinMax,
    owd_standing: MinMax,
    owd_max: MinMax,
    has_owd: bool,
    /// The way back of the same packets: the RTT sample less the one-way delay (biased
    /// as that), its minimum and its standing value. A queue or a pause on the way back
    /// (the peer's traffic on a slow reverse direction, a cellular uplink's scheduler)
    /// holds the acknowledgements, and the window must cover it or the link idles while
    /// its own direction is empty.
    rev_min: MinMax,
    rev_standing: MinMax,
    /// The minimum and the standing value over full-size datagrams only (at least half
    /// the largest of [`MIN_RTT_WINDOW`]): a reading of the queue that the datagrams'
    /// own serialization does not inflate, for the search test (see `search_queue`).
    owd_min_full: MinMax,
    owd_standing_full: MinMax,
    /// The largest datagram sampled and when.
    largest: (usize, Instant),
    /// Latest RTTstanding (the initial RTT before a sample).
    standing_rtt: Duration,
    /// Longest queueing delay the controller aims for at the bottleneck.
    max_queue: Duration,
    /// Bytes acknowledged so far, and (time, bytes acknowledged by then) samples over the
    /// last rate window, oldest first.
    delivered: f64,
    deliveries: VecDeque<(Instant, f64)>,
    /// Delivery rate over the last rate window, bytes per second (0 before a window).
    rate: f64,
    /// Smoothed delivery rate while the window limited the link, bytes per second.
    limited_rate: f64,
    /// A packet's time at the highest of those rates over [`MIN_RTT_WINDOW`] outside
    /// competitive mode: the bottleneck's own packet time as far as this link has seen
    /// it (kept as it was while competing).
    capacity_packet_time: MinMax,
    /// Last time an acknowledgement left nothing in flight.
    idle_at: Instant,
    /// Last time another link's load moved here.
    taken_over_at: Instant,
    /// Until then the delivery rate does not lower the window: another link's traffic
    /// has just moved here and its acknowledgements have not come back yet.
    hold_down_until: Instant,
    /// Last time the queue was nearly empty.
    last_nearly_empty: Instant,
    /// Since when the queue has been under half the target, if it is.
    short_since: Option<Instant>,
    /// Startup: no queue seen yet since the link started or took another's load.
    startup: bool,
    /// Last time the window limited the link with a queue at its bottleneck of at least
    /// half the target: the link was full.
    full_at: Option<Instant>,
    /// The link's capacity as configured (bytes per second), if known: during startup
    /// the window is at least what carries it over the measured RTT.
    seed: Option<f64>,
    /// The longest gap between two acknowledgements of the last [`GAP_WINDOW`], counted
    /// only as far as the packet acknowledged after it waited beyond the path's minimum:
    /// how long the link can deliver nothing while packets wait (a cellular scheduler's
    /// pause), and so how much must wait at its bottleneck to use what it delivers
    /// after.
    gaps: MinMax,
    last_ack_at: Instant,
    /// Whether packets were still in flight after the last acknowledgement, and the
    /// RTT sample it gave: see `pause`.
    waiting_at_last_ack: bool,
    last_ack_rtt: Duration,
    competitive: bool,
    /// Packets declared lost in the current round trip.
    round_lost: u32,
    round_start: Instant,
    /// Bytes delivered when the current round trip started, and what the last whole
    /// round trip delivered per second.
    round_delivered: f64,
    round_rate: f64,
    /// The window when the current round trip started.
    round_cwnd: f64,
    /// Competitive mode: round trips from one periodic drain to the next, when the last
    /// drain ended, and the round trip's rate above which a drain comes at once.
    drain_every: u32,
    drained_at: Instant,
    drain_above: f64,
    /// Competitive mode: the next drain, the end of the current one, and the window to
    /// go back to after it.
    next_drain: Instant,
    drain_until: Option<Instant>,
    saved_cwnd: f64,
    /// The window when the queue was last nearly empty: competitive mode starts from it,
    /// undoing what the delay target took off meanwhile for a queue that was not this
    /// link's own.
    empty_cwnd: f64,
    /// A queue over the target that the window's cuts have not answered yet.
    unanswered: Option<Unanswered>,
    /// Competitive mode entered on an unanswered queue: the link's own target then, at
    /// most two packets at its best rate (seconds); the mode ends only when the queue
    /// comes within twice that (not the target of now, which another sender's packets
    /// between this link's lengthen).
    competing_own: f64,
    /// No other link is up to take the flows: only then does an unanswered queue make
    /// the link compete at once. With another link up, the flows move there as this
    /// link's window falls (the bonding slides' case of TCP cross-traffic on the
    /// primary link), and only the test of ten minimum RTTs makes it compete.
    alone: bool,
    /// Packets wait above the binding point that only this link's pacer holds back
    /// (set by the engine before each acknowledgement, [`Self::set_paced_back`]).
    paced_back: bool,
}

/// A queue over the target: the window before the cuts it asked for (`cwnd`), when the
/// window had fallen to half of that and the queue then (`halved`, seconds), and the
/// link's own target queue when it began (`own`: before another sender's packets between
/// this link's could lengthen the gaps between its acknowledgements, which it follows).
#[derive(Clone, Copy, Debug)]
struct Unanswered {
    cwnd: f64,
    halved: Option<(Instant, f64)>,
    own: f64,
}

/// The rate (bytes per second) at which a full-size packet takes `packet_time`.
fn packet_rate(packet_time: Duration) -> f64 {
    MSS / packet_time.as_secs_f64().max(1e-9)
}

impl Controller {
    pub(crate) fn new(now: Instant, initial_rtt: Duration, max_queue: Duration) -> Self {
        Self {
            cwnd: INITIAL_CWND,
            min_rtt: MinMax::new(false),
            standing: MinMax::new(false),
            max_rtt: MinMax::new(true),
            has_sample: false,
            owd_min: MinMax::new(false),
            owd_standing: MinMax::new(false),
            owd_max: MinMax::new(true),
            has_owd: false,
            rev_min: MinMax::new(false),
            rev_standing: MinMax::new(false),
            owd_min_full: MinMax::new(false),
            owd_standing_full: MinMax::new(false),
            largest: (0, now),
            standing_rtt: initial_rtt,
            max_queue,
            delivered: 0.0,
            deliveries: VecDeque::new(),
            rate: 0.0,
            limited_rate: 0.0,
            capacity_packet_time: MinMax::new(false),
            idle_at: now,
            taken_over_at: now,
            hold_down_until: now,
            last_nearly_empty: now,
            short_since: None,
            startup: true,
            full_at: None,
            seed: None,
            gaps: MinMax::new(true),
            last_ack_at: now,
            waiting_at_last_ack: false,
            last_ack_rtt: Duration::ZERO,
            competitive: false,
            round_lost: 0,
            round_start: now,
            round_delivered: 0.0,
            round_rate: 0.0,
            round_cwnd: INITIAL_CWND,
            drain_every: DRAIN_EVERY_RTTS,
            drained_at: now,
            drain_above: 0.0,
            next_drain: now,
            drain_until: None,
            saved_cwnd: INITIAL_CWND,
            empty_cwnd: INITIAL_CWND,
            unanswered: None,
            competing_own: f64::INFINITY,
            alone: true,
            paced_back: false,
        }
    }

    /// Starts over (a link back from down may be a different path).
    pub(crate) fn reset(&mut self, now: Instant, initial_rtt: Duration) {
        let seed = self.seed;
        *self = Self::new(now, initial_rtt, self.max_queue);
        if let Some(rate) = seed {
            self.seed(rate);
        }
    }

    /// Starts from a known capacity, bytes per second (from a probe of the link): the
    /// window opens to carry it over the RTT at once, and through startup it stays at
    /// least that (as the RTT becomes known) instead of doubling up to it from the initial
    /// window. The rate the window limited the link at starts there too, so the first
    /// cuts fit the window to it; acknowledgements then replace it with what the link
    /// delivers. A seed above the capacity shows as a queue at the first round trip and
    /// ends startup like any other.
    pub(crate) fn seed(&mut self, rate: f64) {
        if !(rate.is_finite() && rate > 0.0) {
            return;
        }
        self.seed = Some(rate);
        self.limited_rate = rate;
        self.cwnd = self.cwnd.max(rate * self.standing_rtt.as_secs_f64());
    }

    /// What this link carried lately, bytes per second: its delivery rate.
    pub(crate) fn carried_rate(&self) -> f64 {
        self.rate
    }

    /// Tests: the window limited the link at `rate` bytes per second at `now`.
    #[cfg(test)]
    pub(crate) fn limited_at(&mut self, now: Instant, rate: f64) {
        self.capacity_packet_time
            .update(now, MIN_RTT_WINDOW, Duration::from_secs_f64(MSS / rate));
    }

    /// The bottleneck's capacity, bytes per second, if the window has ever limited the
    /// link on this path: the highest smoothed delivery rate of the last
    /// [`MIN_RTT_WINDOW`] in which it did.
    pub(crate) fn known_capacity(&self) -> Option<f64> {
        (!self.capacity_packet_time.empty).then(|| packet_rate(self.capacity_packet_time.get()))
    }

    /// Another link failed and its load moves here: `rate` (bytes per second) of new
    /// traffic, and `backlog` bytes it had in flight, reinjected here now. This link's
    /// window was limited by what it was given, not by what it can carry: it opens to
    /// carry both within one of its own round trips, and the delivery rate, which still
    /// shows the old load, does not lower it until the moved traffic has been
    /// acknowledged. If that is more than the link can carry, the queue then shows it.
    pub(crate) fn take_over(&mut self, now: Instant, rate: f64, backlog: usize) {
        if self.full_at.is_some_and(|t| now - t <= self.standing_rtt) {
            // Full already, with its own queue: there is no room to open for the moved
            // load, and a larger window would only queue it at the bottleneck, in front
            // of every flow on the link. The moved load waits above the binding point.
            return;
        }
        let mut need = rate * self.standing_rtt.as_secs_f64() + backlog as f64;
        let known = self
            .capacity_packet_time
            .recent(now, MIN_RTT_WINDOW)
            .map(packet_rate);
        if let Some(capacity) = known {
            // Its window limited it lately, so it knows what its bottleneck carries: it
            // opens that far and no further. It was underused only because its flows
            // sent less (an inner TCP waiting for acknowledgements), and the moved load
            // beyond its capacity would queue at its bottleneck, in front of every flow
            // on it; that waits above the binding point instead.
            need = need.min(capacity * self.standing_rtt.as_secs_f64());
            if need <= self.cwnd {
                return;
            }
        }
        self.taken_over_at = now;
        self.cwnd = self.cwnd.max(need);
        self.hold_down_until = now + self.standing_rtt + self.min_rtt();
        // Without a capacity measured, the link finds it by starting up again.
        self.startup = known.is_none();
    }

    /// Whether this is the only link up; see `alone`.
    pub(crate) fn set_alone(&mut self, alone: bool) {
        self.alone = alone;
    }

    /// Whether packets wait above the binding point that only this link's pacer holds
    /// back now. In startup the window then counts as limiting the link: the pacer's
    /// rate is the window's (twice it per RTT), and the packets it holds are not in
    /// flight yet. On a fast link the pacer releases what each acknowledgement frees
    /// over a few hundred microseconds, so an acknowledgement seldom finds the window
    /// itself full: at 100 Mb/s only 1-19 of a round's 16-69 did, and the window grew
    /// 6-35 % per round trip instead of doubling, while an inner TCP's slow start ran
    /// ahead of it into the per-flow queues' CoDel (docs/RESULTS.md 10.1).
    pub(crate) fn set_paced_back(&mut self, paced_back: bool) {
        self.paced_back = paced_back;
    }

    /// The window, bytes.
    pub(crate) fn cwnd(&self) -> usize {
        self.cwnd as usize
    }

    /// The rate the window allows, bytes per second: `cwnd / RTTstanding`.
    pub(crate) fn rate(&self) -> f64 {
        self.cwnd / self.standing_rtt.as_secs_f64().max(1e-6)
    }

    /// The pacing rate, bytes per second.
    pub(crate) fn pacing_rate(&self) -> f64 {
        2.0 * self.rate()
    }

    /// Queueing delay at the bottleneck: the standing forward one-way delay over its
    /// minimum, or without one-way samples RTTstanding - RTTmin (zero before a sample).
    pub(crate) fn queue_delay(&self) -> Duration {
        if self.has_owd {
            self.owd_standing.get().saturating_sub(self.owd_min.get())
        } else if self.has_sample {
            self.standing.get().saturating_sub(self.min_rtt.get())
        } else {
            Duration::ZERO
        }
    }

    /// The least one-way delay of the link's direction of the last 10 s, nanoseconds up to
    /// the clocks' offset (a datagram sent at `t` on this end's clock arrives, without a
    /// queue, at `t` plus this on the peer's), if one-way samples came.
    pub(crate) fn owd_floor_ns(&self) -> Option<i128> {
        if !self.has_owd || self.owd_min.empty {
            return None;
        }
        i128::try_from(self.owd_min.get().as_nanos())
            .ok()
            .map(|v| v - OWD_BIAS)
    }

    /// How long the way back holds the acknowledgements beyond its minimum (standing, so
    /// over half an RTT): zero without samples.
    pub(crate) fn return_delay(&self) -> Duration {
        if self.rev_standing.empty {
            Duration::ZERO
        } else {
            self.rev_standing.get().saturating_sub(self.rev_min.get())
        }
    }

    /// Spread of the recent delays (max - min), one-way if measured.
    fn delay_spread(&self) -> Duration {
        if self.has_owd {
            self.owd_max.get().saturating_sub(self.owd_min.get())
        } else {
            self.max_rtt.get().saturating_sub(self.min_rtt.get())
        }
    }

    /// A forward one-way delay sample, nanoseconds up to the clocks' offset (RX_TIME).
    /// `size` is the sampled datagram's, bytes; `rtt` the RTT sample its acknowledgement
    /// gave (without the peer's ack delay), if it gave one.
    pub(crate) fn on_owd(
        &mut self,
        now: Instant,
        owd_ns: i128,
        srtt: Duration,
        size: usize,
        rtt: Option<Duration>,
    ) {
        let biased = owd_ns + OWD_BIAS;
        let Ok(ns) = u64::try_from(biased) else {
            return;
        };
        let v = Duration::from_nanos(ns);
        if let Some(back) = rtt
            .and_then(|rtt| i128::try_from(rtt.as_nanos()).ok())
            .and_then(|rtt| u64::try_from(rtt - owd_ns + OWD_BIAS).ok())
        {
            let back = Duration::from_nanos(back);
            self.rev_min.update(now, MIN_RTT_WINDOW, back);
            self.rev_standing.update(now, srtt / 2, back);
        }
        self.owd_min
            .update_base(now, v, self.competitive && self.has_owd);
        self.owd_standing.update(now, srtt / 2, v);
        self.owd_max.update(now, srtt * 4, v);
        if size > 2 * self.largest.0 {
            // Far larger than anything before (the first full-size datagram after
            // keepalives): the readings so far were of small datagrams.
            self.owd_min_full = MinMax::new(false);
            self.owd_standing_full = MinMax::new(false);
        }
        if size >= self.largest.0 || now - self.largest.1 > MIN_RTT_WINDOW {
            self.largest = (size, now);
        }
        if 2 * size >= self.largest.0 {
            let frozen = self.competitive && !self.owd_min_full.empty;
            self.owd_min_full.update_base(now, v, frozen);
            self.owd_standing_full.update(now, srtt / 2, v);
        }
        self.has_owd = true;
    }

    /// The queue as the search test reads it: the standing value over full-size
    /// datagrams, over the minimum of all datagrams plus the least a full-size one takes
    /// more (its own serialization at the bottleneck), at most one packet's time at the
    /// link's best rate. The minimum one-way delay comes from the smallest datagrams (a
    /// keepalive, a call's packets) while the standing value is mostly set by full-size
    /// ones, whose own serialization (and their pacer-pair partner's) then reads as a
    /// queue of about the two-packet target on a link the window does not even fill, and
    /// the window would never search. The bound keeps a full-size minimum that aged into
    /// a standing queue (another sender's, while this link holds back) from hiding it.
    /// The cuts still read the queue over every datagram (`queue_delay`): on a slow link
    /// that floor is part of what the target keeps.
    fn search_queue(&self, now: Instant, srtt: Duration, packet_time: f64) -> Duration {
        let (Some(standing), Some(min_full)) = (
            self.owd_standing_full.recent(now, srtt),
            self.owd_min_full.recent(now, MIN_RTT_WINDOW),
        ) else {
            return self.queue_delay();
        };
        let min = self.owd_min.get();
        let own = min_full
            .saturating_sub(min)
            .min(Duration::from_secs_f64(packet_time.max(0.0)));
        standing.saturating_sub(min + own).min(self.queue_delay())
    }

    /// How long the link delivered nothing before this acknowledgement (its RTT sample
    /// `rtt`) while packets waited on it, beyond `max_queue`. The gap since the last
    /// acknowledgement counts only as far as this packet waited longer than that one's:
    /// packets that queued through a pause come back late by it, but behind another
    /// sender's queue, where this link's share spaces its acknowledgements out, each
    /// waits about as long as the one before (and a gap after which nothing was in
    /// flight was this end sending nothing). `max_queue` is left out of each gap: the
    /// spacing of a small share, or of a queue that grows.
    fn pause(&self, now: Instant, rtt: Duration) -> Duration {
        if !self.waiting_at_last_ack {
            return Duration::ZERO;
        }
        (now - self.last_ack_at)
            .min(rtt.saturating_sub(self.last_ack_rtt))
            .saturating_sub(self.max_queue)
    }

    /// The longest pause of the last [`GAP_WINDOW`]: how long the link lately delivered
    /// nothing while packets waited (a cellular scheduler's pause).
    pub(crate) fn recent_pause(&self) -> Duration {
        if self.gaps.empty {
            Duration::ZERO
        } else {
            self.gaps.get()
        }
    }

    /// Whether the controller is in competitive mode.
    pub(crate) fn competitive(&self) -> bool {
        self.competitive
    }

    /// Whether the window is still in its startup: no queue has shown, and the link's
    /// capacity is not known.
    pub(crate) fn searching(&self) -> bool {
        self.startup
    }

    fn min_rtt(&self) -> Duration {
        if self.has_sample {
            self.min_rtt.get()
        } else {
            self.standing_rtt
        }
    }

    /// Bytes acknowledged over the last rate window: the delivery rate.
    fn measure_rate(&mut self, now: Instant, acked: usize) {
        self.delivered += acked as f64;
        let window = self.min_rtt().max(RATE_WINDOW_MIN);
        // One sample per 1/32 of the window is enough.
        if self
            .deliveries
            .back()
            .is_none_or(|&(t, _)| now - t >= window / 32)
        {
            self.deliveries.push_back((now, self.delivered));
        }
        while self.deliveries.len() > 1 && now - self.deliveries[1].0 >= window {
            self.deliveries.pop_front();
        }
        if let Some(&(t, d)) = self.deliveries.front()
            && now - t >= window
        {
            // After another link's load moved here (`take_over`) on a link left idle
            // for longer than the window, the oldest sample is from before: the link
            // would read as slow for a window, and the first cut after the hold-down
            // would set its window under the moved load. Then the acknowledgements
            // since count alone, once they span half a window.
            let (t, d) = match self.deliveries.get(1) {
                Some(&(t1, d1))
                    if now - t >= window * 2
                        && self.idle_at >= t
                        && self.taken_over_at > t
                        && now - t1 >= window / 2 =>
                {
                    (t1, d1)
                }
                _ => (t, d),
            };
            self.rate = (self.delivered - d) / (now - t).as_secs_f64();
        }
    }

    /// `acked` bytes were newly acknowledged; `rtt` is the sample the acknowledgement gave,
    /// if it gave one that measures this link's path (it came back over the link), with
    /// the peer's ack delay taken out; `srtt` and `rttvar` are the link's smoothed RTT and
    /// its variation; `in_flight` the bytes still in flight.
    pub(crate) fn on_ack(
        &mut self,
        now: Instant,
        acked: usize,
        rtt: Option<Duration>,
        srtt: Duration,
        _rttvar: Duration,
        in_flight: usize,
    ) {
        if let Some(rtt) = rtt {
            self.min_rtt.update_base(now, rtt, self.competitive);
            self.standing.update(now, srtt / 2, rtt);
            self.max_rtt.update(now, srtt * 4, rtt);
            self.has_sample = true;
            self.standing_rtt = self.standing.get();
        }
        self.measure_rate(now, acked);
        if in_flight == 0 {
            self.idle_at = now;
        }
        if acked > 0 {
            // The link held everything for as long as no acknowledgement came, but only
            // as far as the packet now acknowledged waited beyond the path's minimum:
            // a gap after which a packet arrives with no more delay than usual was this
            // end sending nothing.
            if let Some(rtt) = rtt
                && self.has_sample
            {
                let waited = rtt.saturating_sub(self.min_rtt.get());
                let gap = (now - self.last_ack_at).min(waited);
                self.gaps.update(now, GAP_WINDOW, gap);
                // A pause of the link is no sign of another sender: the test of ten
                // minimum RTTs counts only the time the link delivered.
                let paused = self.pause(now, rtt);
                self.last_nearly_empty = (self.last_nearly_empty + paused).min(now);
                self.last_ack_rtt = rtt;
            }
            self.last_ack_at = now;
            self.waiting_at_last_ack = in_flight > 0;
        }
        if self.startup
            && self.has_sample
            && let Some(rate) = self.seed
        {
            // The known capacity over the path's RTT as soon as there is one, before the
            // delivery rate has a window's worth of acknowledgements.
            let bdp = rate * self.min_rtt.get().as_secs_f64() + HOLD_PACKETS * MSS;
            self.cwnd = self.cwnd.max(bdp);
        }
        if !self.has_sample || acked == 0 || self.rate <= 0.0 {
            return;
        }
        // A window that is not used cannot tell whether it is too small.
        let limited = in_flight as f64 + acked as f64 + 2.0 * MSS >= self.cwnd;
        if limited {
            self.limited_rate = if self.limited_rate == 0.0 {
                self.rate
            } else {
                0.9 * self.limited_rate + 0.1 * self.rate
            };
            if !self.competitive
                && let Ok(t) = Duration::try_from_secs_f64(MSS / self.limited_rate)
            {
                self.capacity_packet_time.update(now, MIN_RTT_WINDOW, t);
            }
        }
        let min = self.min_rtt.get();
        let dq = self.queue_delay().as_secs_f64();
        let spread = self.delay_spread().as_secs_f64();
        let packet_time = MSS / self.rate.max(self.limited_rate);
        // (The RTT sample has the peer's ack delay taken out already, so a gap the
        // acknowledgement policy made is not counted as the link's.)
        let gaps = self.gaps.get().as_secs_f64();
        let max_queue = self.max_queue.as_secs_f64();
        let target = |packet_time: f64| {
            (gaps - HOLD_PACKETS * packet_time)
                .min(max_queue)
                .max(HOLD_PACKETS * packet_time)
        };
        let hold = target(packet_time);
        if limited && dq >= hold / 2.0 {
            self.full_at = Some(now);
        }
        // Nearly empty: within the controller's own target, or a tenth of the recent RTT
        // spread. In competitive mode only the own target counts (its own window filled
        // the bottleneck, and that spread is its own too). The own target's two packets
        // count here at most `max_queue`, unless they take longer at the bottleneck's
        // rate of the last seconds: when other traffic takes the bottleneck, this link's
        // rate falls with its share, and two packets at that rate would be a target as
        // long as the other traffic's queue (at 0.1 Mb/s, 240 ms), which would then pass
        // for this link's own: the controller would never compete. A link whose capacity
        // fell keeps its two packets up to `max_queue`. A link whose window has never
        // limited it knows nothing of its capacity (keepalives, an inner TCP's first
        // windows): its own queue counts at most `max_queue`, or a link whose flow
        // starts after another sender filled the bottleneck would take that sender's
        // queue for its own, until its base delay expired into it.
        // One packet at the highest rate the link showed lately.
        let best_packet_time = if self.capacity_packet_time.empty {
            packet_time
        } else {
            packet_time.min(self.capacity_packet_time.get().as_secs_f64())
        };
        let own = if self.capacity_packet_time.empty {
            hold.min(max_queue)
        } else {
            hold.min(target(best_packet_time).max(max_queue))
        };
        let nearly_empty = if self.competitive {
            dq <= 2.0 * own.min(self.competing_own)
        } else {
            dq <= (2.0 * own).max(0.1 * spread)
        };
        if nearly_empty {
            self.last_nearly_empty = now;
            self.empty_cwnd = self.cwnd;
            if self.competitive {
                // The queue emptied when this link held back: it was its own.
                self.competitive = false;
                self.drain_until = None;
            }
        }
        // A queue this link's own cuts do not shorten is another sender's. Halving the
        // window takes at least half off a queue of the link's own (the window is
        // `R * (RTTmin + dq)`) once the packets sent after it have come back: within two
        // standing RTTs (the standing queue is the least of the last half RTT, and the
        // window may wait for packets in flight to leave before it sends again), plus a
        // pause as long as the link's recent ones. A queue that has not lost even a
        // quarter by then is not its own. A capacity that fell shows as a queue the cuts
        // do shorten, only later.
        let mut unanswered = None;
        let (alone, wait) = (self.alone, self.standing_rtt * 2 + self.recent_pause());
        if self.competitive || self.startup {
            self.unanswered = None;
        } else {
            match &mut self.unanswered {
                None if limited && dq > hold => {
                    self.unanswered = Some(Unanswered {
                        cwnd: self.cwnd,
                        halved: None,
                        own: target(best_packet_time),
                    });
                }
                Some(u) if dq <= u.own => self.unanswered = None,
                Some(u) => match u.halved {
                    None if self.cwnd <= 0.5 * u.cwnd => u.halved = Some((now, dq)),
                    Some((at, then)) if alone && dq >= 0.75 * then && now - at >= wait => {
                        unanswered = Some(*u);
                    }
                    _ => {}
                },
                None => {}
            }
        }
        // Counted in minimum RTTs: the standing RTT grows with the very queue that is in
        // question, and a link starved by it would wait for it ever longer.
        if !self.competitive
            && (unanswered.is_some() || now - self.last_nearly_empty > min * COMPETITIVE_AFTER_RTTS)
        {
            // Something else keeps the bottleneck's queue from emptying: a delay target
            // would leave the link to it. Start from what the link carried while its
            // window limited it, or the window it had when the queue was last nearly
            // empty, not from the window the delay target shrank meanwhile.
            self.competitive = true;
            self.drain_every = DRAIN_EVERY_RTTS;
            self.next_drain = now + srtt * self.drain_every;
            // Only a capacity measured while the window limited the link outside this
            // mode says when the other traffic seems gone; without one (the link never
            // had the bottleneck to itself) only the periodic drains look.
            self.drain_above = if self.capacity_packet_time.empty {
                0.0
            } else {
                DRAIN_AT_CAPACITY_SHARE * self.capacity()
            };
            self.cwnd = self
                .cwnd
                .max(0.5 * self.limited_rate * srtt.as_secs_f64())
                .max(self.empty_cwnd)
                .max(unanswered.map_or(0.0, |u| u.cwnd));
            self.competing_own = unanswered.map_or(f64::INFINITY, |u| {
                u.own.min(HOLD_PACKETS * best_packet_time)
            });
        }
        if self.competitive {
            self.competitive_ack(now, acked, in_flight, srtt);
        } else {
            let fit = self.fit(min, hold);
            if self.search_queue(now, srtt, best_packet_time).as_secs_f64() < hold / 2.0 {
                self.short_since.get_or_insert(now);
            } else {
                self.short_since = None;
            }
            // Searching only after a round trip of a short queue: a queue that only
            // dipped (the flows above paused) is no sign of unused capacity.
            let searching = self
                .short_since
                .is_some_and(|t| now - t >= self.standing_rtt);
            if self.startup {
                // Startup: the window doubles each round trip while it limits the link,
                // until a queue shows; then it falls to what the link delivers. While
                // another link's moved load is unacknowledged (`take_over`) the
                // delivery rate understates it and the window is not cut, but a queue
                // that shows stops the growth all the same.
                if dq > hold {
                    if now >= self.hold_down_until {
                        // While the window limits the link, the delivery rate is what
                        // the flows above sent a round trip before (an inner TCP still in
                        // its own slow start), not what the link carries: the bounded cut
                        // every later queue gets. While they send less than the window,
                        // what they send is the fit.
                        self.startup = false;
                        let cut = if limited {
                            let ratio = (min.as_secs_f64() + hold) / (min.as_secs_f64() + dq);
                            fit.max(self.round_cwnd * ratio)
                        } else {
                            fit
                        };
                        self.cwnd = self.cwnd.min(cut);
                    }
                } else if limited || self.paced_back {
                    self.cwnd += acked as f64;
                }
            } else if dq > hold && now >= self.hold_down_until {
                // Down to the rate's fit, but within a round trip no further than the
                // queue asks: the window that held `dq` of queue, scaled to hold `hold`.
                let ratio = (min.as_secs_f64() + hold) / (min.as_secs_f64() + dq);
                self.cwnd = self.cwnd.min(fit.max(self.round_cwnd * ratio));
            } else if searching && limited {
                // One more target queue's worth: for a round trip the bottleneck may hold
                // up to twice the target, and no more, if the link carries nothing more.
                let rate = self.rate.max(self.limited_rate);
                self.cwnd = self.cwnd.max(fit + rate * hold);
            }
        }
        self.cwnd = self.cwnd.max(MIN_CWND);
        if now - self.round_start >= self.standing_rtt {
            let lost = f64::from(self.round_lost) * MSS;
            let delivered = self.delivered - self.round_delivered;
            if self.startup
                && self.round_lost >= STARTUP_LOSS_EVENTS
                && lost >= STARTUP_LOSS_SHARE * (lost + delivered)
            {
                // A bottleneck buffer shallower than the window's overshoot overflows
                // before its queue shows as delay: startup ends as at a queue, the window
                // cut to what the link delivered.
                self.startup = false;
                self.cwnd = self.cwnd.min(self.fit(min, hold)).max(MIN_CWND);
            }
            self.round_lost = 0;
            self.round_rate =
                (self.delivered - self.round_delivered) / (now - self.round_start).as_secs_f64();
            self.round_delivered = self.delivered;
            self.round_start = now;
            self.round_cwnd = self.cwnd;
        }
    }

    /// The window that holds `hold` (seconds) at the bottleneck: the rate the link
    /// delivered (at least what it delivered while the window limited it: a dip of the
    /// delivery rate while the flows above had less to send says nothing of the link) over
    /// the minimum RTT, the target queue and the acknowledgements' wait on the way back
    /// beyond its minimum (a window of the rate over the minimum RTT leaves the link idle
    /// while they wait there).
    fn fit(&self, min: Duration, hold: f64) -> f64 {
        let back = self.return_delay().as_secs_f64();
        self.rate.max(self.limited_rate) * (min.as_secs_f64() + back + hold)
    }

    /// The bottleneck's capacity as far as this link has seen it (bytes per second): the
    /// highest smoothed delivery rate of [`MIN_RTT_WINDOW`] while the window limited it,
    /// outside competitive mode.
    fn capacity(&self) -> f64 {
        if self.capacity_packet_time.empty {
            return self.limited_rate;
        }
        packet_rate(self.capacity_packet_time.get())
    }

    /// Competitive mode: the window gets out of the way of the inner flows' own
    /// congestion control (it doubles each round trip while it limits), so that they
    /// compete for the bottleneck as the other traffic there does. To find out whether
    /// the other traffic is still there, it drains for one round trip (plus the minimum
    /// RTT) to what the bottleneck carries per minimum RTT: if the queue then empties, it
    /// was this link's own and the controller returns to its delay target; if it does
    /// not, the competition is still there. A drain gives the other traffic the link for
    /// a round trip, so it comes:
    ///
    /// - when a round trip carried most of the capacity the link had before it competed
    ///   (the other traffic seems gone); after a drain found the other traffic still
    ///   there, only at a quarter more than the round trip before that drain carried
    ///   (the capacity was underestimated: this link never had the bottleneck alone);
    /// - or else periodically: every 8 round trips at first, half as often after each
    ///   drain that found the other traffic still there, up to every 64.
    fn competitive_ack(&mut self, now: Instant, acked: usize, in_flight: usize, srtt: Duration) {
        match self.drain_until {
            Some(until) if now >= until => {
                // Still competitive: the other traffic is still there.
                self.drain_until = None;
                self.cwnd = self.cwnd.max(self.saved_cwnd);
                self.drain_every = (self.drain_every * 2).min(DRAIN_EVERY_RTTS_MAX);
                self.next_drain = now + srtt * self.drain_every;
                self.drained_at = now;
            }
            Some(_) => {}
            None if now >= self.next_drain
                || (now - self.drained_at >= srtt * 2
                    && self.drain_above > 0.0
                    && self.round_rate >= self.drain_above) =>
            {
                if self.drain_above > 0.0 {
                    self.drain_above = self
                        .drain_above
                        .max(self.round_rate / DRAIN_AT_CAPACITY_SHARE);
                }
                self.saved_cwnd = self.cwnd;
                let bdp = self.capacity() * self.min_rtt.get().as_secs_f64() + HOLD_PACKETS * MSS;
                self.cwnd = bdp.max(MIN_CWND).min(self.cwnd);
                self.drain_until = Some(now + srtt + self.min_rtt.get());
            }
            None => {
                if in_flight as f64 + acked as f64 >= self.cwnd / 2.0 {
                    self.cwnd += acked as f64;
                }
            }
        }
    }

    /// A packet of this link was declared lost. In competitive mode the window backs
    /// off as a TCP's would (once per round trip), so that a tail-dropping bottleneck
    /// shared with other traffic is not overrun by a window that only grows.
    pub(crate) fn on_loss(&mut self) {
        if self.competitive && self.round_lost == 0 && self.drain_until.is_none() {
            self.cwnd = (self.cwnd * 0.7).max(MIN_CWND);
        }
        self.round_lost = self.round_lost.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn minmax_keeps_the_window_extreme_and_forgets_old_ones() {
        let mut m = MinMax::new(false);
        m.update(t(0), ms(100), ms(30));
        m.update(t(10), ms(100), ms(40));
        m.update(t(20), ms(100), ms(35));
        assert_eq!(m.get(), ms(30));
        // 30 expires; the best of the rest is next.
        m.update(t(130), ms(100), ms(50));
        assert!(m.get() >= ms(35), "{:?}", m.get());
        let mut x = MinMax::new(true);
        x.update(t(0), ms(100), ms(30));
        x.update(t(10), ms(100), ms(40));
        assert_eq!(x.get(), ms(40));
    }

    /// A link whose window is under the path's product, where the one-way minimum came
    /// from a small datagram and every later sample is a full-size one that waited for
    /// its own serialization and its pacer-pair partner's (2.4 ms at 10 Mb/s, about the
    /// two-packet target): the window still searches, since that floor is the
    /// datagrams' own. The fixed-rate setup held such a window at 68 % of the
    /// product for 0.7 s (docs/RESULTS.md 18).
    #[test]
    fn a_window_under_the_product_searches_past_its_own_datagrams_serialization() {
        let (min_rtt, link) = (ms(40), 1_250_000.0);
        let serialization = Duration::from_micros(2400);
        let grown = |c: &mut Controller| {
            c.startup = false;
            c.cwnd = 33_900.0;
            let start = c.cwnd;
            // One small datagram (a keepalive) sets the one-way minimum.
            c.on_owd(t(0), 0, min_rtt, 100, None);
            let mut now = Duration::ZERO;
            while now < Duration::from_secs(1) {
                now += Duration::from_micros(1200);
                let at = Instant::ZERO + now;
                // The window is the limit: it delivers `cwnd` per RTT, up to the link's
                // 10 Mb/s (a full-size packet per 1.2 ms).
                let packet = MSS.min(c.cwnd / min_rtt.as_secs_f64() * 0.0012);
                let rtt = min_rtt + serialization;
                c.on_ack(at, packet as usize, Some(rtt), rtt, ms(0), c.cwnd() - 1000);
                c.on_owd(at, serialization.as_nanos() as i128, rtt, 1500, None);
            }
            c.cwnd / start
        };
        let mut c = Controller::new(Instant::ZERO, min_rtt, ms(20));
        let growth = grown(&mut c);
        let product = link * min_rtt.as_secs_f64();
        assert!(
            growth > 1.3 && c.cwnd >= 0.95 * product,
            "window {:.0} B ({growth:.2} times) against the product {product:.0} B",
            c.cwnd
        );
    }

    /// Startup ends at the first queue. While the window limits the link, the delivery
    /// rate is what the flows above sent a round trip before (an inner TCP still in its
    /// own slow start), and the window falls only as far as the queue asks; while they
    /// send less than the window, it falls to what they send.
    #[test]
    fn startup_ends_with_a_bounded_cut_while_the_window_limits_the_link() {
        let min_rtt = ms(40);
        let end = |limits: bool| {
            let mut c = Controller::new(Instant::ZERO, min_rtt, ms(20));
            c.cwnd = 48_000.0;
            c.round_cwnd = 48_000.0;
            c.on_owd(t(0), 0, min_rtt, 1500, None);
            // 3.8 Mb/s delivered with no queue, then with 15 ms of it.
            let q = ms(15);
            let mut i = 0;
            while c.startup && i < 400 {
                i += 1;
                let queue = if i > 160 { q } else { ms(0) };
                let at = Instant::ZERO + Duration::from_micros(1250 * i);
                let in_flight = if limits { c.cwnd() - 1000 } else { 20_000 };
                c.on_owd(at, queue.as_nanos() as i128, min_rtt, 1500, None);
                c.on_ack(at, 594, Some(min_rtt + queue), min_rtt, ms(0), in_flight);
            }
            assert!(!c.startup, "startup did not end");
            c.cwnd
        };
        let limited = end(true);
        let sending_less = end(false);
        // About (40 + 6) / (40 + 15) of the round's window, against 3.8 Mb/s over 46 ms.
        assert!(limited > 40_000.0, "{limited:.0}");
        assert!(sending_less < 25_000.0, "{sending_less:.0}");
    }

    /// Startup on a path whose bottleneck buffer is shallower than the window's
    /// overshoot: the buffer overflows before a queue shows as delay. A round trip that
    /// loses a tenth of its packets ends startup, the window cut to what the link
    /// delivered; a random loss of 1 % does not (too few packets in a round trip).
    #[test]
    fn startup_ends_at_a_round_trip_that_overflows_the_buffer() {
        let min_rtt = ms(100);
        // One packet of 1500 bytes a millisecond (12 Mb/s), 100 a round trip, no queue,
        // the window full; every `lose_every`-th is lost, the others acknowledged.
        let run = |lose_every: u32| {
            let mut c = Controller::new(Instant::ZERO, min_rtt, ms(20));
            c.on_owd(t(0), 0, min_rtt, 1500, None);
            let mut now = Duration::ZERO;
            for n in 1..=600u32 {
                now += Duration::from_millis(1);
                let at = Instant::ZERO + now;
                if n % lose_every == 0 {
                    c.on_loss();
                    continue;
                }
                c.on_owd(at, 0, min_rtt, 1500, None);
                let in_flight = c.cwnd() - 1500;
                c.on_ack(at, 1500, Some(min_rtt), min_rtt, ms(0), in_flight);
                if !c.startup {
                    return (false, c.cwnd);
                }
            }
            (c.startup, c.cwnd)
        };
        let (searching, cwnd) = run(10);
        assert!(
            !searching,
            "startup went on through a tenth of each round lost"
        );
        // What the link delivered (10.8 Mb/s) over the RTT and the target queue: about
        // 140 KB, where the window had doubled on past it.
        assert!(cwnd < 200_000.0, "window {cwnd:.0} after the overflow");
        let (searching, _) = run(100);
        assert!(searching, "a random loss of 1 % ended startup");
    }

    /// Startup on a fast link whose pacer holds back what each acknowledgement frees:
    /// every acknowledgement finds the window short of full by more than the two packets
    /// the window test allows, yet packets wait above the binding point for the pacer.
    /// Counted as the window limiting the link, the window doubles each round trip as
    /// designed; without that it grows only by what the few acknowledgements that find
    /// it full acknowledge (at 100 Mb/s in the lab: 6-35 % per round trip).
    #[test]
    fn startup_doubles_while_the_pacer_holds_back_waiting_packets() {
        let min_rtt = ms(40);
        let rounds = |paced_back: bool| {
            let mut c = Controller::new(Instant::ZERO, min_rtt, ms(20));
            c.on_owd(t(0), 0, min_rtt, 1500, None);
            c.set_paced_back(paced_back);
            let start = c.cwnd;
            // Five round trips, each acknowledging the window of the round before in
            // 40 acknowledgements, with eight packets held by the pacer at each one.
            let mut now = Duration::ZERO;
            for _ in 0..5 {
                let each = c.cwnd / 40.0;
                for _ in 0..40 {
                    now += Duration::from_millis(1);
                    let in_flight = (c.cwnd - each - 8.0 * MSS).max(0.0);
                    c.on_ack(
                        Instant::ZERO + now,
                        each as usize,
                        Some(min_rtt),
                        min_rtt,
                        ms(0),
                        in_flight as usize,
                    );
                }
                assert!(c.startup, "startup ended without a queue");
            }
            c.cwnd / start
        };
        let held = rounds(true);
        let not_held = rounds(false);
        // The first round trip measures the delivery rate; doubling in each of the
        // other four: 16 times.
        assert!(
            held > 14.0,
            "grew {held:.1} times with the pacer holding packets back"
        );
        assert!(
            not_held < 2.0,
            "grew {not_held:.1} times with nothing waiting (the window never full)"
        );
    }

    /// A fluid model's acknowledgement: arrival, bytes, RTT sample, and the forward
    /// one-way delay with whether the RTT sample goes with it (RX_TIME), if fed.
    type Ack = (Instant, f64, Duration, Option<(Duration, bool)>);

    /// The fluid models' acknowledgements: those due by `now` leave flight and reach the
    /// controller (with their one-way delays, if fed), with `srtt` smoothed as a link's
    /// would be. Returns the bytes acknowledged.
    fn deliver_acks(
        c: &mut Controller,
        acks: &mut VecDeque<Ack>,
        now: Instant,
        flight: &mut f64,
        srtt: &mut Duration,
    ) -> f64 {
        let mut acked = 0.0;
        while let Some(&(at, bytes, rtt, owd)) = acks.front() {
            if at > now {
                break;
            }
            acks.pop_front();
            *flight -= bytes;
            *srtt = (*srtt * 7 + rtt) / 8;
            c.on_ack(
                now,
                bytes as usize,
                Some(rtt),
                *srtt,
                Duration::ZERO,
                flight.max(0.0) as usize,
            );
            if let Some((forward, paired)) = owd {
                // The clocks' offset: any, the same for every sample.
                let owd = forward.as_nanos() as i128 - 7_000_000_000;
                c.on_owd(now, owd, *srtt, 1500, paired.then_some(rtt));
            }
            acked += bytes;
        }
        acked
    }

    /// A fluid model of one bottleneck of `rate` bytes/s (from `change.0` seconds on,
    /// `change.1`) and base RTT `base`, with the controller as its only sender: returns
    /// the queueing delays seen in the last two seconds and the rate acknowledged then.
    fn run(rate: f64, base: Duration, secs: f64, change: Option<(f64, f64)>) -> (Vec<f64>, f64) {
        run_with(rate, base, secs, change, None, None)
    }

    /// [`run`], and at `take.0` seconds another link's load of `take.1` bytes/s moves
    /// here (`take_over`): the delays returned are those of the second after it. With
    /// `offered`, the sender has only that many bytes/s to send (the moved load comes on
    /// top of it).
    fn run_with(
        rate: f64,
        base: Duration,
        secs: f64,
        change: Option<(f64, f64)>,
        take: Option<(f64, f64)>,
        offered: Option<f64>,
    ) -> (Vec<f64>, f64) {
        let rate_at = |x: f64| match change {
            Some((at, r)) if x >= at => r,
            _ => rate,
        };
        let m = run_model(&rate_at, base, secs, take, offered, None);
        (m.delays, m.got)
    }

    /// What [`run_model`] saw: the queueing delays and the rate acknowledged over its
    /// window, and whether the controller ever competed.
    struct Model {
        delays: Vec<f64>,
        got: f64,
        competed: bool,
    }

    /// [`run_with`] over a bottleneck that drains `rate_at(t)` bytes/s at `t` seconds.
    /// With `back` (`from`, `extra`, `paired`): the forward one-way delays are fed too
    /// (half of `base` plus the queue), and from `from` seconds on the acknowledgements
    /// are held `extra` longer on the way back (a slow, loaded reverse direction); with
    /// `paired`, each one-way delay goes with its packet's RTT sample, as a link gives
    /// them (RX_TIME).
    fn run_model(
        rate_at: &dyn Fn(f64) -> f64,
        base: Duration,
        secs: f64,
        take: Option<(f64, f64)>,
        offered: Option<f64>,
        back: Option<(f64, Duration, bool)>,
    ) -> Model {
        let mut credit = 0.0_f64;
        let mut competed = false;
        let mut taken = false;
        let window = |x: f64| match take {
            Some((at, _)) => x >= at && x < at + 1.0,
            None => x > secs - 2.0,
        };
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        let step = Duration::from_micros(500);
        let dt = step.as_secs_f64();
        let mut now = Instant::ZERO;
        // Chunks waiting at the bottleneck: (entered, bytes).
        let mut queue: VecDeque<(Instant, f64)> = VecDeque::new();
        let mut queued = 0.0_f64;
        // Acknowledgements on their way back (`Ack`).
        let mut acks: VecDeque<Ack> = VecDeque::new();
        let mut flight = 0.0_f64;
        let mut delays = Vec::new();
        let mut srtt = base;
        let mut acked_late = 0.0;
        let t = |i: Instant| i.as_duration().as_secs_f64();
        while t(now) < secs {
            let rate = rate_at(t(now));
            if let Some((at, moved)) = take
                && t(now) >= at
                && !taken
            {
                taken = true;
                c.take_over(now, moved, 0);
            }
            let mut allowed = (c.cwnd() as f64 - flight)
                .min(c.pacing_rate() * dt)
                .max(0.0);
            if let Some(o) = offered {
                let o = o + if taken {
                    take.map_or(0.0, |t| t.1)
                } else {
                    0.0
                };
                credit += o * dt;
                allowed = allowed.min(credit);
                credit -= allowed;
            }
            if allowed > 0.0 {
                queue.push_back((now, allowed));
                queued += allowed;
                flight += allowed;
            }
            // The bottleneck drains `rate * dt`; what leaves is acknowledged `base` later.
            let mut budget = rate * dt;
            while budget > 0.0 {
                let Some(front) = queue.front_mut() else {
                    break;
                };
                let out = front.1.min(budget);
                front.1 -= out;
                budget -= out;
                queued -= out;
                let extra = match back {
                    Some((from, extra, _)) if t(now) >= from => extra,
                    _ => Duration::ZERO,
                };
                let owd = back.map(|(_, _, paired)| (base / 2 + (now - front.0), paired));
                acks.push_back((now + base + extra, out, base + (now - front.0) + extra, owd));
                if front.1 <= 0.0 {
                    queue.pop_front();
                }
            }
            let acked = deliver_acks(&mut c, &mut acks, now, &mut flight, &mut srtt);
            competed |= c.competitive();
            if window(t(now)) {
                acked_late += acked;
            }
            if window(t(now)) && rate > 0.0 {
                delays.push(queued / rate);
            }
            now += step;
        }
        let span = if take.is_some() { 1.0 } else { 2.0 };
        Model {
            delays,
            got: acked_late / span,
            competed,
        }
    }

    #[test]
    fn fills_a_fixed_link_with_a_queue_of_a_few_packets() {
        let rate = 10e6 / 8.0;
        let (delays, got) = run(rate, ms(40), 10.0, None);
        let max = delays.iter().copied().fold(0.0, f64::max);
        assert!(got > 0.85 * rate, "rate {got} of {rate}");
        // A few packets: 1.2 ms each at 10 Mb/s.
        assert!(max < 0.012, "queueing delay up to {max} s");
    }

    /// Acknowledgements held on the way back (for less than the minimum RTT's window,
    /// so the minimum does not take them in) are no queue of this link's: its window
    /// covers them and the link stays full, with its own queue still short. Without the
    /// way back measured (the one-way delay alone), the window fits the minimum RTT and
    /// the link idles for most of each round trip.
    #[test]
    fn a_window_covers_acknowledgements_held_on_the_way_back() {
        let rate = 10e6 / 8.0;
        for back in [ms(50), ms(150), ms(400)] {
            let paired = run_model(&|_| rate, ms(40), 9.0, None, None, Some((3.0, back, true)));
            let (got, queue) = (
                paired.got,
                paired.delays.iter().copied().fold(0.0, f64::max),
            );
            assert!(got > 0.95 * rate, "{back:?} back: rate {got:.0} of {rate}");
            // At most `max_queue` (20 ms) and a packet.
            assert!(
                queue < 0.022,
                "{back:?} back: queueing delay up to {queue} s"
            );
            let unpaired =
                run_model(&|_| rate, ms(40), 9.0, None, None, Some((3.0, back, false))).got;
            assert!(
                unpaired < got - 0.05 * rate,
                "{back:?} back, the one-way delay alone: rate {unpaired:.0}, paired {got:.0}"
            );
        }
    }

    /// A link whose delivery pauses for longer than ten minimum RTTs (a cellular
    /// scheduler on a driving trace): packets wait through each pause, so the queue is
    /// never nearly empty for that long, but nothing else shares the bottleneck and
    /// the controller must not compete (its window would double into the link's queue:
    /// the TMobile UMTS upload's probe p95 of 1.4-1.6 s in the simulator). Only the time
    /// the link delivers counts.
    #[test]
    fn pauses_longer_than_ten_round_trips_are_not_another_sender() {
        for (mbps, base_ms, pause) in [(4.0, 40, 0.6), (10.0, 20, 0.3), (1.0, 60, 1.5)] {
            let rate = mbps * 1e6 / 8.0;
            // From 2 s on, the link delivers nothing for `pause` seconds of every 3.
            let rate_at = |x: f64| {
                if x >= 2.0 && (x - 2.0) % 3.0 < pause {
                    0.0
                } else {
                    rate
                }
            };
            let m = run_model(&rate_at, ms(base_ms), 20.0, None, None, None);
            let what = format!("{mbps} Mb/s, {base_ms} ms, pauses of {pause} s");
            assert!(!m.competed, "{what}: competed");
            // Between pauses the queue stays short. The last 2 s (18-20 s) come after the
            // pause at 17 s; the longest pause's end (18.5 s) leaves what the window held
            // when it began, about RTTmin plus the target (0.08 s; 0.02 s in the others).
            let max = m.delays.iter().copied().fold(0.0, f64::max);
            assert!(max < 0.1, "{what}: queueing delay up to {max} s");
        }
    }

    #[test]
    fn follows_a_drop_in_capacity_within_a_few_round_trips() {
        let rate = 20e6 / 8.0;
        let (delays, got) = run(rate, ms(40), 12.0, Some((8.0, rate / 4.0)));
        let max = delays.iter().copied().fold(0.0, f64::max);
        assert!(got > 0.8 * rate / 4.0, "rate {got}");
        assert!(
            max < 0.015,
            "queueing delay up to {max} s after the drop settled"
        );
    }

    #[test]
    fn a_takeover_on_a_full_link_leaves_its_queue_short() {
        // A full 10 Mb/s link (40 ms) is handed a failed link's 5 Mb/s it cannot carry:
        // its window stays (it was 83 ms of queue when the window started up again).
        let rate = 10e6 / 8.0;
        let (delays, _) = run_with(rate, ms(40), 6.0, None, Some((5.0, rate / 2.0)), None);
        let max = delays.iter().copied().fold(0.0, f64::max);
        assert!(
            max < 0.012,
            "queueing delay up to {max} s after the takeover"
        );
    }

    #[test]
    fn a_takeover_beyond_an_underused_links_capacity_fills_it_with_a_bounded_queue() {
        // A 10 Mb/s link (40 ms) carrying 3 Mb/s is handed 12 Mb/s more: it opens and
        // starts up, carries its whole rate within the second, and its queue stays under
        // 50 ms (38 ms here; 40 ms when startup also grew through the hold-down).
        let rate = 10e6 / 8.0;
        let (delays, got) = run_with(
            rate,
            ms(40),
            6.0,
            None,
            Some((5.0, 1.2 * rate)),
            Some(0.3 * rate),
        );
        let max = delays.iter().copied().fold(0.0, f64::max);
        assert!(
            max < 0.05,
            "queueing delay up to {max} s after the takeover"
        );
        assert!(got > 0.8 * rate, "rate {got} of {rate}");
    }

    #[test]
    fn a_takeover_after_an_idle_spell_measures_only_the_moved_load() {
        // 40 ms path; a keepalive acknowledged at 1 s, then nothing until 3 s, when
        // acknowledgements come at 10 Mb/s (1250 bytes per ms) for 30 ms.
        let run = |in_flight_in_silence: usize, take_over: bool| {
            let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
            for i in 0..40u64 {
                c.on_ack(t(960 + i), 100, Some(ms(40)), ms(40), ms(0), 0);
            }
            c.on_ack(
                t(1000),
                100,
                Some(ms(40)),
                ms(40),
                ms(0),
                in_flight_in_silence,
            );
            if take_over {
                c.take_over(t(2960), 1.25e6, 0);
            }
            for i in 0..=30u64 {
                c.on_ack(t(3000 + i), 1250, Some(ms(40)), ms(40), ms(0), 50_000);
            }
            c.rate
        };
        let moved = run(0, true);
        assert!(moved > 0.8 * 1.25e6, "after a takeover, {moved} B/s");
        // Without a takeover the rate is what the link carried over the whole span,
        // as it is after a pause with packets waiting (the link delivered nothing).
        for (in_flight, take) in [(0, false), (50_000, true)] {
            let r = run(in_flight, take);
            assert!(
                r < 0.1 * 1.25e6,
                "{in_flight} in flight, takeover {take}: {r} B/s"
            );
        }
    }

    #[test]
    fn a_link_full_lately_opens_for_a_takeover_only_as_far_as_its_capacity() {
        // A 10 Mb/s link (40 ms) whose window limited it, then underused for 200 ms (its
        // inner TCP waited), is handed a failed link's 40 Mb/s and 200 KB in flight. It
        // opens to what it carries, not to the moved load: a 10 Mb/s link opened to
        // 410 KB held 330 ms of queue in front of every flow on it.
        let base = ms(40);
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        for i in 1..=400u64 {
            // The window beyond the path's 50 KB waits at the bottleneck.
            let cwnd = c.cwnd();
            let rtt = base + Duration::from_micros(cwnd.saturating_sub(50_000) as u64 * 4 / 5);
            c.on_ack(t(40 + i), 1250, Some(rtt), rtt, ms(0), cwnd);
        }
        for i in 1..=200u64 {
            c.on_ack(t(440 + i), 1250, Some(base), base, ms(0), 0);
        }
        c.startup = false;
        let before = c.cwnd();
        c.take_over(t(641), 5_000_000.0, 200_000);
        let bdp = 1250.0 * c.standing_rtt.as_secs_f64() * 1000.0;
        assert!(
            (c.cwnd() as f64) <= 1.2 * bdp.max(before as f64),
            "window {} after the takeover, {before} before, {bdp:.0} B per RTT",
            c.cwnd()
        );
        assert!(!c.startup);
    }

    #[test]
    fn a_full_link_takes_over_nothing_an_underused_one_opens() {
        // Acknowledgements of a link whose window limits it with a standing queue of
        // half the target or more (2 packets at 10 Mb/s: 2.4 ms) vs one that is idle.
        let (rtt, base) = (ms(42), ms(40));
        let mut full = Controller::new(Instant::ZERO, ms(100), ms(20));
        let mut idle = Controller::new(Instant::ZERO, ms(100), ms(20));
        for i in 1..=200u64 {
            let now = t(40 + i);
            // Warm both up on the path's base RTT, then only `full` sees a queue.
            let sample = if i > 100 { rtt } else { base };
            let cwnd = full.cwnd();
            full.on_ack(now, 1250, Some(sample), sample, ms(0), cwnd);
            idle.on_ack(now, 1250, Some(base), base, ms(0), 0);
        }
        full.startup = false;
        idle.startup = false;
        let (before_full, before_idle) = (full.cwnd(), idle.cwnd());
        full.take_over(t(241), 1_000_000.0, 50_000);
        idle.take_over(t(241), 1_000_000.0, 50_000);
        assert_eq!(full.cwnd(), before_full);
        assert!(!full.startup);
        assert!(idle.cwnd() > before_idle);
        assert!(idle.startup);
    }

    #[test]
    fn a_seeded_link_starts_at_its_capacity_over_the_measured_rtt() {
        // 10 Mb/s known beforehand, a 250 ms path (the initial RTT guess is 100 ms).
        let rate = 10e6 / 8.0;
        let mut seeded = Controller::new(Instant::ZERO, ms(100), ms(20));
        seeded.seed(rate);
        let mut plain = Controller::new(Instant::ZERO, ms(100), ms(20));
        assert!(seeded.cwnd() as f64 >= rate * 0.1, "{}", seeded.cwnd());
        assert_eq!(plain.cwnd() as f64, INITIAL_CWND);
        // The first acknowledgements measure the path, with no queue on it.
        for i in 1..=20u64 {
            for c in [&mut seeded, &mut plain] {
                c.on_ack(t(250 + i), 1500, Some(ms(250)), ms(250), ms(0), 0);
            }
        }
        assert!(seeded.startup);
        assert!(seeded.cwnd() as f64 >= rate * 0.25, "{}", seeded.cwnd());
        assert!(
            (plain.cwnd() as f64) < rate * 0.25 / 2.0,
            "{}",
            plain.cwnd()
        );
        // A seed is ignored unless it is a rate.
        let mut bad = Controller::new(Instant::ZERO, ms(100), ms(20));
        bad.seed(f64::NAN);
        bad.seed(-1.0);
        assert_eq!(bad.cwnd() as f64, INITIAL_CWND);
        assert_eq!(bad.seed, None);
    }

    /// A bottleneck with a tail-drop FIFO of `fifo` seconds, and from `foreign_at`
    /// seconds another sender that offers it as much as it carries (it keeps the FIFO
    /// full, as a loss-based TCP in a deep buffer does): returns when this link's
    /// controller turned competitive, if it did, and its share of what the bottleneck
    /// delivered over the second half of the run.
    fn compete(
        rate: f64,
        base: Duration,
        fifo: f64,
        foreign_at: f64,
        secs: f64,
    ) -> (Option<f64>, f64) {
        let run = compete_ramp(rate, base, fifo, foreign_at, 0.0, secs, true);
        (run.competitive_at, run.share)
    }

    /// What [`compete_ramp`] saw.
    struct CompeteRun {
        /// When the controller turned competitive, if it did.
        competitive_at: Option<f64>,
        /// Its share of what the bottleneck delivered over the second half.
        share: f64,
        /// Its window just before the other sender started, and when it turned
        /// competitive.
        cwnd_before: f64,
        cwnd_at: f64,
    }

    /// [`compete`] with another sender whose rate grows from nothing to the bottleneck's
    /// over `ramp` seconds (a TCP that leaves slow start early and then fills the FIFO
    /// slowly) instead of starting at once; `alone`: no other link is up.
    fn compete_ramp(
        rate: f64,
        base: Duration,
        fifo: f64,
        foreign_at: f64,
        ramp: f64,
        secs: f64,
        alone: bool,
    ) -> CompeteRun {
        let mut cwnd_before = 0.0;
        let mut cwnd_at = 0.0;
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        c.set_alone(alone);
        let step = Duration::from_micros(500);
        let dt = step.as_secs_f64();
        let t = |i: Instant| i.as_duration().as_secs_f64();
        let mut now = Instant::ZERO;
        // The FIFO: (entered, bytes, ours).
        let mut queue: VecDeque<(Instant, f64, bool)> = VecDeque::new();
        let mut queued = 0.0_f64;
        let limit = fifo * rate;
        let mut acks: VecDeque<Ack> = VecDeque::new();
        let (mut flight, mut srtt) = (0.0_f64, base);
        let (mut competitive_at, mut ours, mut all) = (None, 0.0, 0.0);
        while t(now) < secs {
            let allowed = (c.cwnd() as f64 - flight)
                .min(c.pacing_rate() * dt)
                .max(0.0);
            // Both arrive together; when the FIFO has less room than that, its tail drops
            // the same fraction of each.
            let foreign = if t(now) < foreign_at {
                cwnd_before = c.cwnd() as f64;
                0.0
            } else if ramp > 0.0 {
                rate * dt * ((t(now) - foreign_at) / ramp).min(1.0)
            } else {
                rate * dt
            };
            let fits = ((limit - queued) / (foreign + allowed)).clamp(0.0, 1.0);
            if foreign * fits > 0.0 {
                queue.push_back((now, foreign * fits, false));
                queued += foreign * fits;
            }
            if allowed * fits > 0.0 {
                queue.push_back((now, allowed * fits, true));
                queued += allowed * fits;
                flight += allowed * fits;
            }
            if allowed > 0.0 && fits < 1.0 {
                // Dropped at the tail: found lost at once, for simplicity.
                c.on_loss();
            }
            let mut budget = rate * dt;
            while budget > 0.0 {
                let Some(front) = queue.front_mut() else {
                    break;
                };
                let out = front.1.min(budget);
                front.1 -= out;
                budget -= out;
                queued -= out;
                if t(now) >= secs / 2.0 {
                    all += out;
                }
                if front.2 {
                    acks.push_back((now + base, out, base + (now - front.0), None));
                    if t(now) >= secs / 2.0 {
                        ours += out;
                    }
                }
                if front.1 <= 0.0 {
                    queue.pop_front();
                }
            }
            deliver_acks(&mut c, &mut acks, now, &mut flight, &mut srtt);
            if c.competitive() && competitive_at.is_none() {
                competitive_at = Some(t(now));
                cwnd_at = c.cwnd() as f64;
            }
            now += step;
        }
        CompeteRun {
            competitive_at,
            share: ours / all.max(1.0),
            cwnd_before,
            cwnd_at,
        }
    }

    /// Another sender that fills the FIFO slowly: the queue grows while the delay target
    /// halves the window, and the cuts do not shorten it. The controller competes within
    /// a few round trips of that, from the window it had before the cuts, instead of
    /// waiting for the queue to pass its longer test while the window shrinks (which it
    /// still does when another link is up to take the flows).
    #[test]
    fn competes_soon_when_its_cuts_do_not_shorten_the_queue() {
        for (mbps, base_ms, fifo, ramp) in [
            (10.0, 40, 1.2, 2.0),
            (30.0, 20, 0.4, 1.0),
            (4.0, 60, 2.0, 3.0),
        ] {
            let rate = mbps * 1e6 / 8.0;
            let other = compete_ramp(rate, ms(base_ms), fifo, 2.0, ramp, 20.0, false);
            let r = compete_ramp(rate, ms(base_ms), fifo, 2.0, ramp, 20.0, true);
            let what = format!(
                "{mbps} Mb/s, {base_ms} ms, ramp {ramp} s: competed at {:?}, window {} before, {} then, share {}",
                r.competitive_at, r.cwnd_before, r.cwnd_at, r.share
            );
            let at = r
                .competitive_at
                .unwrap_or_else(|| panic!("{what}: never competed"));
            // Before the other sender has even reached the bottleneck's rate.
            assert!(at - 2.0 < ramp, "{what}");
            assert!(r.cwnd_at >= 0.8 * r.cwnd_before, "{what}");
            assert!(r.share > 1.0 / 3.0, "{what}");
            let later = other.competitive_at.unwrap_or(f64::INFINITY);
            assert!(later - 2.0 >= ramp, "with another link up: {what}");
        }
    }

    /// Another sender fills the bottleneck's deep FIFO: the delay target shrinks this
    /// link's window and with it its share, until two packets at that share take as
    /// long as the other sender's queue. The controller must still see that the queue
    /// is not its own, compete within a few seconds and hold a share. (With the target
    /// counted in packets at the link's current rate only, it never competed in any of
    /// these and kept 1-3 % of the bottleneck.)
    #[test]
    fn competes_when_another_sender_fills_a_deep_fifo() {
        for (mbps, base_ms, fifo) in [(10.0, 40, 1.2), (30.0, 20, 0.4), (4.0, 60, 2.0)] {
            let rate = mbps * 1e6 / 8.0;
            let (at, share) = compete(rate, ms(base_ms), fifo, 2.0, 30.0);
            let what = format!("{mbps} Mb/s, {base_ms} ms, {fifo} s FIFO: share {share}");
            let at = at.unwrap_or_else(|| panic!("{what}: never competed"));
            assert!(at < 5.0, "{what}: competed only at {at} s");
            assert!(share > 1.0 / 3.0, "{what}");
        }
    }

    /// A link that competes without ever having had the bottleneck to itself (its flow
    /// started after another sender filled the FIFO) knows no capacity that would tell
    /// it when the other traffic has gone: its own share growing (an inner TCP's
    /// startup) is no sign of that. Each drain it took for one (every two round trips
    /// after its first periodic drain) held the inner flow back for a round trip. It
    /// drains only periodically.
    #[test]
    fn without_a_measured_capacity_a_competing_link_drains_only_periodically() {
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        let (min, queue) = (ms(40), ms(1000));
        let srtt = min + queue;
        // The path's minimum, then keepalives behind the other sender's 1 s queue.
        c.on_ack(t(0), 60, Some(min), min, Duration::ZERO, 0);
        let mut now = 0;
        while !c.competitive() {
            now += 500;
            assert!(now < 5_000, "never competed");
            c.on_ack(t(now), 60, Some(srtt), srtt, Duration::ZERO, 0);
        }
        assert!(c.capacity_packet_time.empty);
        // A flow whose window limits the link, at a steady rate or doubling each round
        // trip up to 10 Mb/s; returns how often the window fell to under a quarter.
        let mut run = |now: &mut u64, until: u64, rate: &mut f64, grow: bool| {
            let (mut prev, mut falls) = (c.cwnd, 0);
            let round = *now;
            while *now < until {
                *now += 10;
                if grow && (*now - round).is_multiple_of(1_040) {
                    *rate = (*rate * 2.0).min(1.25e6);
                }
                let acked = (*rate * 0.01) as usize;
                let flight = c.cwnd().saturating_sub(acked);
                c.on_ack(t(*now), acked, Some(srtt), srtt, Duration::ZERO, flight);
                falls += usize::from(c.cwnd < prev / 4.0);
                prev = c.cwnd;
            }
            falls
        };
        // The periodic drain, 8 round trips after competing began.
        let mut rate = 20_000.0;
        assert_eq!(
            run(&mut now, 10_000, &mut rate, false),
            1,
            "one periodic drain"
        );
        // The flow's startup: no drain until the next periodic one, 16 round trips on.
        let falls = run(&mut now, 25_000, &mut rate, true);
        assert_eq!(falls, 0, "drained for the link's own growth");
        assert_eq!(rate, 1.25e6);
    }

    #[test]
    fn loss_backs_a_competitive_window_off_once_per_round() {
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        c.competitive = true;
        c.cwnd = 100.0 * MSS;
        c.on_loss();
        c.on_loss();
        assert_eq!(c.cwnd, 70.0 * MSS);
    }
}
