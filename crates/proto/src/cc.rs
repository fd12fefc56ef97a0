//! Per-link rate and delay control: keeps the queue at each link's bottleneck (a modem,
//! a base station, a DSL line: somewhere the sender cannot see) near empty, so that the
//! backlog waits in the per-flow queues above the binding point instead, where fair
//! queueing and CoDel control it.
//!
//! The controller is Copa's (Arun and Balakrishnan, NSDI 2018), on bytes:
//!
//! - From every acknowledgement that came back over the link: `RTTmin`, the least RTT of
//!   the last [`MIN_RTT_WINDOW`]; `RTTstanding`, the least RTT of the last half SRTT (the
//!   delay a packet sent now would see, without the ack-compression noise of one sample);
//!   the queueing delay `dq = RTTstanding - RTTmin`.
//! - The target rate is `1 / (delta * dq)` packets per second; the current rate is
//!   `cwnd / RTTstanding`. Each acknowledged packet moves the window by
//!   `v / (delta * cwnd)` packets, up when the current rate is below the target, down
//!   otherwise. In equilibrium `1 / delta` packets (two, with `delta = 0.5`) wait at the
//!   bottleneck, whatever its rate: the controller follows a link whose capacity changes
//!   every few milliseconds, because a rising queue shows within one round trip.
//! - The velocity `v` doubles each round trip the window keeps moving the same way
//!   (after three), and falls back to 1 when it turns: large changes of capacity are
//!   found in a few round trips.
//! - Packets are paced at `2 * cwnd / RTTstanding`, so that a window leaves as a stream
//!   and not as a burst.
//! - Competing traffic: while the queue is never nearly empty for five round trips
//!   (`dq < 0.1 (RTTmax - RTTmin)`, with `RTTmax` of the last four round trips),
//!   something else fills the bottleneck and a delay target would starve the link. The
//!   controller then switches to competitive mode: `1 / delta` grows by one each round
//!   trip without loss and halves at a loss, as TCP's window would, until the queue
//!   empties again.
//!
//! Startup doubles the window each round trip until the current rate passes the target.
//! A link that comes back from down starts again from there.
//!
//! The windowed minimum and maximum filters are Kathleen Nichols' three-sample estimator
//! (as in Linux's `lib/minmax.c`): constant memory, exact when the extreme is recent.

use core::time::Duration;

use crate::time::Instant;

/// Bytes of one full-size packet: the unit of the controller's `1 / delta` packets.
pub(crate) const MSS: f64 = 1500.0;
/// Smallest window: enough for a packet below the binding point, one in flight and an
/// acknowledgement's worth of slack.
const MIN_CWND: f64 = 4.0 * MSS;
/// Initial window. Larger than a TCP's ten packets: the tunnel carries many flows at
/// once, and the per-flow queues' CoDel would otherwise drop what waits above the binding
/// point while a fresh link is still in startup.
const INITIAL_CWND: f64 = 32.0 * MSS;
/// How long an RTT sample counts as a candidate for the minimum RTT.
const MIN_RTT_WINDOW: Duration = Duration::from_secs(10);
/// `1 / delta` in the default mode: packets the controller keeps at the bottleneck.
const DEFAULT_INV_DELTA: f64 = 2.0;
/// Round trips without a nearly empty queue after which the controller competes.
const COMPETITIVE_AFTER_RTTS: u32 = 10;
/// Round trips between two drains in competitive mode.
const DRAIN_EVERY_RTTS: u32 = 8;

/// A windowed minimum or maximum over time (three-sample estimator).
#[derive(Clone, Copy, Debug)]
struct MinMax {
    /// Best, second best and third best samples of the window, newest last.
    s: [(Instant, Duration); 3],
    max: bool,
    empty: bool,
}

impl MinMax {
    fn new(max: bool) -> Self {
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

    /// Adds a sample; keeps the extreme of the last `window`.
    fn update(&mut self, now: Instant, window: Duration, v: Duration) {
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
    /// Congestion window, bytes.
    cwnd: f64,
    velocity: f64,
    /// Direction of the window over the last round trip, and for how many round trips it
    /// has moved that way.
    rising: bool,
    same_direction: u32,
    round_start: Instant,
    cwnd_at_round_start: f64,
    slow_start: bool,
    min_rtt: MinMax,
    standing: MinMax,
    max_rtt: MinMax,
    has_sample: bool,
    /// Last time the queue was nearly empty.
    last_nearly_empty: Instant,
    inv_delta: f64,
    competitive: bool,
    loss_in_round: bool,
    /// Competitive mode: the next drain, the end of the current one, and the window to
    /// go back to after it.
    next_drain: Instant,
    drain_until: Option<Instant>,
    saved_cwnd: f64,
    /// Latest RTTstanding (the initial RTT before a sample).
    standing_rtt: Duration,
    /// Longest queueing delay the controller aims for at the bottleneck.
    max_queue: Duration,
    /// Bytes acknowledged since the round trip began, and the rate of the last complete
    /// round trip (bytes per second; 0 before one).
    round_acked: f64,
    last_round_rate: f64,
    /// Highest rate of a round trip outside competitive mode.
    peak_rate: f64,
}

impl Controller {
    pub(crate) fn new(now: Instant, initial_rtt: Duration, max_queue: Duration) -> Self {
        Self {
            max_queue,
            cwnd: INITIAL_CWND,
            velocity: 1.0,
            rising: true,
            same_direction: 0,
            round_start: now,
            cwnd_at_round_start: INITIAL_CWND,
            slow_start: true,
            min_rtt: MinMax::new(false),
            standing: MinMax::new(false),
            max_rtt: MinMax::new(true),
            has_sample: false,
            last_nearly_empty: now,
            inv_delta: DEFAULT_INV_DELTA,
            competitive: false,
            loss_in_round: false,
            next_drain: now,
            drain_until: None,
            saved_cwnd: INITIAL_CWND,
            standing_rtt: initial_rtt,
            round_acked: 0.0,
            last_round_rate: 0.0,
            peak_rate: 0.0,
        }
    }

    /// What another link carried when it failed: the rate acknowledged over its last
    /// round trip (bytes per second).
    pub(crate) fn carried_rate(&self) -> f64 {
        self.last_round_rate
    }

    /// Another link failed and its load moves here: `rate` (bytes per second) of new
    /// traffic, and `backlog` bytes it had in flight, reinjected here now. This link's
    /// window was limited by what it was given, not by what it can carry: it opens to
    /// carry both within one of its own round trips and searches again (startup),
    /// instead of growing a packet per round trip while the moved traffic waits. If that
    /// is more than the link can carry, startup ends at the first queue.
    pub(crate) fn take_over(&mut self, now: Instant, rate: f64, backlog: usize) {
        let need = rate * self.standing_rtt.as_secs_f64() + backlog as f64;
        self.cwnd = self.cwnd.max(need);
        self.slow_start = true;
        self.velocity = 1.0;
        self.same_direction = 0;
        // What was measured before the traffic moved here says nothing of the link's
        // capacity: a new round trip begins.
        self.round_start = now;
        self.round_acked = 0.0;
        self.cwnd_at_round_start = self.cwnd;
    }

    /// Starts over (a link back from down may be a different path).
    pub(crate) fn reset(&mut self, now: Instant, initial_rtt: Duration) {
        *self = Self::new(now, initial_rtt, self.max_queue);
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

    /// Queueing delay at the bottleneck: RTTstanding - RTTmin (zero before a sample).
    pub(crate) fn queue_delay(&self) -> Duration {
        if self.has_sample {
            self.standing.get().saturating_sub(self.min_rtt.get())
        } else {
            Duration::ZERO
        }
    }

    /// Whether the controller is in competitive mode.
    pub(crate) fn competitive(&self) -> bool {
        self.competitive
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
        rttvar: Duration,
        in_flight: usize,
    ) {
        if let Some(rtt) = rtt {
            self.min_rtt.update(now, MIN_RTT_WINDOW, rtt);
            self.standing.update(now, srtt / 2, rtt);
            self.max_rtt.update(now, srtt * 4, rtt);
            self.has_sample = true;
            self.standing_rtt = self.standing.get();
        }
        if !self.has_sample || acked == 0 {
            return;
        }
        let min = self.min_rtt.get();
        let dq = self.standing.get().saturating_sub(min);
        let spread = self.max_rtt.get().saturating_sub(min);
        // Nearly empty: a tenth of the recent RTT spread, or twice the packets the
        // controller itself keeps there (a spread of a few packets' serialization is the
        // controller's own queue, not competing traffic).
        let own = 2.0 * MSS * DEFAULT_INV_DELTA / self.rate().max(1.0);
        let spread_part = if self.competitive {
            // Its own window filled the bottleneck: only an empty queue counts.
            0.1 * min.as_secs_f64()
        } else {
            0.1 * spread.as_secs_f64()
        };
        if dq.as_secs_f64() <= spread_part.max(own) {
            self.last_nearly_empty = now;
            if self.competitive {
                // The queue emptied when this link held back: it was its own.
                self.competitive = false;
                self.drain_until = None;
                self.velocity = 1.0;
            }
        }
        // Counted in minimum RTTs: the standing RTT grows with the very queue that is
        // in question, and a link starved by it would wait for it ever longer.
        let persistent = min * COMPETITIVE_AFTER_RTTS;
        if !self.competitive && !self.slow_start && now - self.last_nearly_empty > persistent {
            // Something else keeps the bottleneck's queue from emptying: a delay target
            // would leave the link to it. Start from half of what the link carried at
            // its best before (an even share), not from the window the delay target
            // shrank meanwhile.
            self.competitive = true;
            self.next_drain = now + srtt * DRAIN_EVERY_RTTS;
            let share = 0.5 * self.peak_rate * self.standing.get().as_secs_f64();
            self.cwnd = self.cwnd.max(share);
        }
        if self.competitive {
            self.competitive_ack(now, acked, in_flight, srtt);
            return;
        }
        // The queue to keep: two packets, or as long as the path's RTT varies (up to
        // `max_queue`). A link whose delivery comes in bursts and gaps (a cellular
        // scheduler) needs that much waiting at its bottleneck to use the bursts; a
        // steady one needs two packets.
        let per_packet = MSS / self.rate().max(1.0);
        let hold = rttvar.min(self.max_queue).as_secs_f64();
        self.inv_delta = (hold / per_packet).max(DEFAULT_INV_DELTA);
        let delta = 1.0 / self.inv_delta;
        let dq_s = dq.as_secs_f64();
        let target = if dq_s > 0.0 {
            MSS / (delta * dq_s)
        } else {
            f64::INFINITY
        };
        let current = self.rate();
        // A window that is not used cannot tell whether it is too small: it grows only
        // while it is full (but for two packets). Growing a half-used window let it
        // run to twice what was in flight, and the swing back below the path's
        // bandwidth-delay product made the per-flow queues drop.
        let limited = in_flight as f64 + acked as f64 + 2.0 * MSS >= self.cwnd;
        self.round_acked += acked as f64;
        if self.slow_start {
            if current < target {
                if limited {
                    self.cwnd += acked as f64;
                }
            } else {
                // A queue shows: startup overshot by up to a round trip's growth. The
                // window falls to what the link delivers per minimum RTT (what is in
                // flight, scaled from the standing RTT to the minimum) plus the target
                // queue, rather than walking the overshoot back a packet at a time.
                self.slow_start = false;
                let standing = self.standing.get().as_secs_f64().max(1e-6);
                let bdp = in_flight as f64 * min.as_secs_f64() / standing + MSS / delta;
                self.cwnd = self.cwnd.min(bdp);
            }
        }
        if !self.slow_start {
            let up = current <= target;
            if up != self.rising {
                // The window turns: from here on it moves one packet per round trip at
                // first. (Copa turns the velocity back only at the end of the round trip;
                // the half round trip the feedback already lags would then overshoot by
                // several round trips' worth of the old velocity.)
                self.rising = up;
                self.same_direction = 0;
                self.velocity = 1.0;
                self.cwnd_at_round_start = self.cwnd;
                self.round_start = now;
            }
            let step = self.velocity * MSS * acked as f64 / (delta * self.cwnd);
            if up {
                if limited {
                    self.cwnd += step;
                }
            } else {
                self.cwnd -= step;
            }
        }
        self.cwnd = self.cwnd.max(MIN_CWND);
        if now - self.round_start >= self.standing_rtt {
            self.end_round(now);
        }
    }

    /// Competitive mode: the window gets out of the way of the inner flows' own
    /// congestion control (it doubles each round trip while it limits), so that they
    /// compete for the bottleneck as the other traffic there does. Every few round trips
    /// it drains for one round trip (plus the minimum RTT) to what the link carried per
    /// minimum RTT: if the queue then empties, it was this link's own and the controller
    /// returns to its delay target; if it does not, the competition is still there.
    fn competitive_ack(&mut self, now: Instant, acked: usize, in_flight: usize, srtt: Duration) {
        self.round_acked += acked as f64;
        match self.drain_until {
            Some(until) if now >= until => {
                self.drain_until = None;
                self.cwnd = self.cwnd.max(self.saved_cwnd);
                self.next_drain = now + srtt * DRAIN_EVERY_RTTS;
            }
            Some(_) => {}
            None if now >= self.next_drain => {
                self.saved_cwnd = self.cwnd;
                let rate = self.last_round_rate.max(self.rate() / 2.0);
                let bdp = rate * self.min_rtt.get().as_secs_f64() + MSS * DEFAULT_INV_DELTA;
                self.cwnd = bdp.max(MIN_CWND).min(self.cwnd);
                self.drain_until = Some(now + srtt + self.min_rtt.get());
            }
            None => {
                if in_flight as f64 + acked as f64 >= self.cwnd / 2.0 {
                    self.cwnd += acked as f64;
                }
            }
        }
        if now - self.round_start >= self.standing_rtt {
            self.end_round(now);
        }
    }

    /// Once per round trip: velocity and, in competitive mode, `1 / delta`.
    fn end_round(&mut self, now: Instant) {
        let rising = self.cwnd > self.cwnd_at_round_start;
        if rising == self.rising {
            self.same_direction += 1;
            if self.same_direction >= 3 {
                self.velocity *= 2.0;
            }
        } else {
            self.rising = rising;
            self.same_direction = 0;
            self.velocity = 1.0;
        }
        // The window moves by `v / delta` packets per round trip: at most half of itself.
        let delta = 1.0 / self.inv_delta;
        self.velocity = self
            .velocity
            .min((self.cwnd * delta / (2.0 * MSS)).max(1.0));
        self.loss_in_round = false;
        let elapsed = (now - self.round_start).as_secs_f64();
        if elapsed > 0.0 {
            self.last_round_rate = self.round_acked / elapsed;
            if !self.competitive {
                self.peak_rate = self.peak_rate.max(self.last_round_rate);
            }
        }
        self.round_acked = 0.0;
        self.cwnd_at_round_start = self.cwnd;
        self.round_start = now;
    }

    /// A packet of this link was declared lost. In competitive mode the window backs
    /// off as a TCP's would (once per round trip), so that a tail-dropping bottleneck
    /// shared with other traffic is not overrun by a window that only grows.
    pub(crate) fn on_loss(&mut self) {
        if self.competitive && !self.loss_in_round && self.drain_until.is_none() {
            self.cwnd = (self.cwnd * 0.7).max(MIN_CWND);
        }
        self.loss_in_round = true;
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

    /// A fluid model of one bottleneck of `rate` bytes/s (from `change.0` seconds on,
    /// `change.1`) and base RTT `base`, with the controller as its only sender: returns
    /// the queueing delays seen in the last two seconds and the rate acknowledged then.
    fn run(rate: f64, base: Duration, secs: f64, change: Option<(f64, f64)>) -> (Vec<f64>, f64) {
        use std::collections::VecDeque;
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        let step = Duration::from_micros(500);
        let dt = step.as_secs_f64();
        let mut now = Instant::ZERO;
        // Chunks waiting at the bottleneck: (entered, bytes).
        let mut queue: VecDeque<(Instant, f64)> = VecDeque::new();
        let mut queued = 0.0_f64;
        // Acknowledgements on their way back: (arrives, bytes, rtt sample).
        let mut acks: VecDeque<(Instant, f64, Duration)> = VecDeque::new();
        let mut flight = 0.0_f64;
        let mut rate = rate;
        let mut delays = Vec::new();
        let mut srtt = base;
        let mut acked_late = 0.0;
        let t = |i: Instant| i.as_duration().as_secs_f64();
        while t(now) < secs {
            if let Some((at, r)) = change
                && t(now) >= at
            {
                rate = r;
            }
            let allowed = (c.cwnd() as f64 - flight)
                .min(c.pacing_rate() * dt)
                .max(0.0);
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
                acks.push_back((now + base, out, base + (now - front.0)));
                if front.1 <= 0.0 {
                    queue.pop_front();
                }
            }
            while let Some(&(at, bytes, rtt)) = acks.front() {
                if at > now {
                    break;
                }
                acks.pop_front();
                flight -= bytes;
                srtt = (srtt * 7 + rtt) / 8;
                c.on_ack(
                    now,
                    bytes as usize,
                    Some(rtt),
                    srtt,
                    Duration::ZERO,
                    flight as usize,
                );
                if t(now) > secs - 2.0 {
                    acked_late += bytes;
                }
            }
            if t(now) > secs - 2.0 {
                delays.push(queued / rate);
            }
            now += step;
        }
        (delays, acked_late / 2.0)
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
    fn loss_backs_a_competitive_window_off_once_per_round() {
        let mut c = Controller::new(Instant::ZERO, ms(100), ms(20));
        c.competitive = true;
        c.cwnd = 100.0 * MSS;
        c.on_loss();
        c.on_loss();
        assert_eq!(c.cwnd, 70.0 * MSS);
    }
}
