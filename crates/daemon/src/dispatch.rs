//! The dispatch stage: datagrams bound ahead of their pacing slot, sent at it.
//!
//! ```text
//!  1. the event loop's pump asks the engine with a horizon φ (poll_transmit_ahead):
//!     a packet whose slot is within φ is bound now, framed, and sealed at once
//!  2. the sealed datagram goes to the sender thread (latebind_io::dispatch) with its
//!     slot, its link's socket and destination; the engine counts it below the binding
//!     point meanwhile
//!  3. the thread sleeps to slot - margin, spins to the slot, and sendmmsg's every
//!     datagram of that slot on its socket (one thread for every link of the daemon)
//!  4. each datagram's departure comes back through an eventfd the event loop watches;
//!     the loop hands it to the session (Session::on_dispatched), which reports it to
//!     the engine as the socket path does: when it has left the kernel's queue where
//!     the link has its own socket (SIOCOUTQ), at the kernel's acceptance elsewhere
//! ```
//!
//! One sender thread serves every link: a pre-dispatch sender spins before each slot,
//! and on a host with a few CPUs one spinning thread per link would compete with each
//! other and with the event loop; slots of different links that coincide leave from
//! one thread a few µs apart.

use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, OwnedFd};

use latebind_io::clock::monotonic_ns;
use latebind_io::dispatch::{Departure, DepartureFeed, DispatchConfig, Dispatcher};
use latebind_proto::Instant;
use serde::{Deserialize, Serialize};

use crate::config::Dispatch;

/// A datagram sent this much after its slot counts as late.
pub const LATE_AFTER_NS: u64 = 50_000;

/// Upper bounds of the lateness histogram's buckets, µs (the last bucket is above
/// the last bound).
const BOUNDS_US: [u64; 13] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000];

/// What `latebind status` shows of the dispatch stage.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct DispatchStatus {
    /// The binding horizon φ, µs.
    pub horizon_us: f64,
    /// Datagrams the kernel took from the sender thread.
    pub sent: u64,
    /// Datagrams the kernel refused (dropped).
    pub send_errors: u64,
    /// Datagrams sent more than 50 µs after their slot.
    pub late: u64,
    /// Datagrams whose slot had passed when the sender thread received them (the event
    /// loop bound them too late: φ too short, or the loop was busy).
    pub submitted_late: u64,
    /// Lateness of the send call after the slot, as the sender thread saw it, µs: the
    /// median and the 99th percentile as histogram bucket bounds (1, 2, 5, 10, 20, ...),
    /// the largest exactly.
    pub lateness_p50_us: f64,
    /// See `lateness_p50_us`.
    pub lateness_p99_us: f64,
    /// See `lateness_p50_us`.
    pub lateness_max_us: f64,
    /// CPU time of the sender thread, s.
    pub cpu_s: f64,
    /// That CPU time as a share of one CPU since the stage started, %.
    pub cpu_percent: f64,
}

/// The stage: the sender thread, its departures, and its counters.
#[derive(Debug)]
pub struct DispatchStage {
    dispatcher: Dispatcher,
    feed: DepartureFeed,
    horizon: core::time::Duration,
    started_ns: u64,
    sent: u64,
    send_errors: u64,
    late: u64,
    submitted_late: u64,
    max_ns: u64,
    histogram: [u64; BOUNDS_US.len() + 1],
    scratch: Vec<Departure>,
}

impl DispatchStage {
    /// Starts the sender thread on `sockets` (duplicates of the daemon's, by index).
    pub fn start(sockets: Vec<OwnedFd>, settings: Dispatch) -> std::io::Result<Self> {
        let config = DispatchConfig {
            rt_priority: settings.rt_priority,
            record_samples: false,
            ..DispatchConfig::default()
        };
        let (dispatcher, feed) = Dispatcher::start_reporting(sockets, config)?;
        Ok(Self {
            dispatcher,
            feed,
            horizon: settings.horizon,
            started_ns: monotonic_ns(),
            sent: 0,
            send_errors: 0,
            late: 0,
            submitted_late: 0,
            max_ns: 0,
            histogram: [0; BOUNDS_US.len() + 1],
            scratch: Vec::new(),
        })
    }

    /// The binding horizon φ.
    pub fn horizon(&self) -> core::time::Duration {
        self.horizon
    }

    /// The eventfd that is readable when departures wait.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.feed.fd()
    }

    /// Hands a sealed datagram over, to leave at `at` on socket `socket` to `to`;
    /// `tag` comes back with its departure. False if the thread is gone (then the
    /// caller sends it itself).
    pub fn submit(
        &self,
        at: Instant,
        socket: usize,
        to: SocketAddr,
        datagram: Vec<u8>,
        tag: u64,
    ) -> bool {
        self.dispatcher
            .submit_to(at.as_nanos(), socket, Some(to), datagram, tag)
            .is_ok()
    }

    /// Takes the departures reported so far, counts them, and gives each to `f`.
    pub fn drain(&mut self, mut f: impl FnMut(&Departure)) {
        let mut deps = std::mem::take(&mut self.scratch);
        deps.clear();
        self.feed.drain(&mut deps);
        for d in &deps {
            self.count(d);
            f(d);
        }
        self.scratch = deps;
    }

    fn count(&mut self, d: &Departure) {
        self.submitted_late += u64::from(d.submitted_late);
        if !d.sent {
            self.send_errors += 1;
            return;
        }
        self.sent += 1;
        self.late += u64::from(d.late_ns > LATE_AFTER_NS);
        self.max_ns = self.max_ns.max(d.late_ns);
        let us = d.late_ns.div_ceil(1000);
        let i = BOUNDS_US
            .iter()
            .position(|&b| us <= b)
            .unwrap_or(BOUNDS_US.len());
        self.histogram[i] += 1;
    }

    /// The bucket bound below which a share `q` of the lateness samples lie, µs (the
    /// largest sample for the last bucket).
    fn quantile_us(&self, q: f64) -> f64 {
        let n: u64 = self.histogram.iter().sum();
        if n == 0 {
            return 0.0;
        }
        let want = (q * n as f64).ceil() as u64;
        let mut seen = 0;
        for (i, c) in self.histogram.iter().enumerate() {
            seen += c;
            if seen >= want {
                return match BOUNDS_US.get(i) {
                    Some(&b) => (b as f64).min(self.max_ns as f64 / 1e3),
                    None => self.max_ns as f64 / 1e3,
                };
            }
        }
        self.max_ns as f64 / 1e3
    }

    /// The counters, for `latebind status`.
    pub fn status(&self) -> DispatchStatus {
        let cpu_ns = self.feed.cpu_ns();
        let wall_ns = monotonic_ns().saturating_sub(self.started_ns).max(1);
        DispatchStatus {
            horizon_us: self.horizon.as_secs_f64() * 1e6,
            sent: self.sent,
            send_errors: self.send_errors,
            late: self.late,
            submitted_late: self.submitted_late,
            lateness_p50_us: self.quantile_us(0.5),
            lateness_p99_us: self.quantile_us(0.99),
            lateness_max_us: self.max_ns as f64 / 1e3,
            cpu_s: cpu_ns as f64 / 1e9,
            cpu_percent: 100.0 * cpu_ns as f64 / wall_ns as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Duration;

    use super::*;

    #[test]
    fn stage_sends_at_the_slots_and_counts_departures_and_lateness() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = OwnedFd::from(UdpSocket::bind("127.0.0.1:0").unwrap());
        let mut stage = DispatchStage::start(
            vec![tx],
            Dispatch {
                horizon: Duration::from_millis(1),
                rt_priority: None,
            },
        )
        .unwrap();
        // Slots 50 ms ahead: a loaded machine (the test suite's other tests on two CPUs)
        // took over 1 ms between reading the clock and submitting, and the slot then
        // counted as submitted late.
        let base = monotonic_ns() + 50_000_000;
        for i in 0..3u64 {
            let at = Instant::from_nanos(base + i * 200_000);
            assert!(stage.submit(at, 0, rx.local_addr().unwrap(), vec![i as u8; 16], i));
        }
        // One slot already past: sent at once, counted as submitted late.
        assert!(stage.submit(Instant::ZERO, 0, rx.local_addr().unwrap(), vec![9; 8], 9));
        let mut buf = [0u8; 32];
        for _ in 0..4 {
            rx.recv(&mut buf).unwrap();
        }
        let mut tags = Vec::new();
        while tags.len() < 4 {
            stage.drain(|d| tags.push((d.tag, d.sent)));
            std::thread::sleep(Duration::from_millis(1));
        }
        tags.sort_unstable();
        assert_eq!(tags, [(0, true), (1, true), (2, true), (9, true)]);
        let s = stage.status();
        assert_eq!((s.sent, s.send_errors, s.submitted_late), (4, 0, 1));
        assert!(s.late >= 1, "the past slot is late");
        assert!(s.lateness_p50_us <= s.lateness_p99_us);
        assert!(s.lateness_p99_us <= s.lateness_max_us);
        assert_eq!(s.horizon_us, 1000.0);
    }
}
