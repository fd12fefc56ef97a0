//! Precise dispatch: datagrams built ahead of time and sent at their slot.
//!
//! A sending thread that calls `clock_nanosleep` and then `sendto` (the sequential
//! model, [`send_sequential`]) leaves whenever the kernel wakes it: on this kind of VM
//! tens of µs late typically and up to ~1 ms at p99. The pre-dispatch model moves
//! everything but the send itself ahead of the slot:
//!
//! ```text
//!  1. a producer builds (frames, encrypts) a datagram φ before its slot and hands it
//!     over with Dispatcher::submit(slot, bytes); any thread, any order
//!  2. the sender thread keeps what it holds ordered by slot (ties: submission order)
//!  3. earliest slot more than `margin` away: sleep on the channel (a futex wait with
//!     a timeout, timer slack 1 ns) until slot - margin, or until a new submission
//!  4. then spin on CLOCK_MONOTONIC until the slot, take every datagram whose slot is
//!     within `coalesce` of it (at most BATCH) and send them with one sendmmsg
//!  5. the margin follows the wake-ups: it is 1.5 times the largest recent lateness
//!     of a wake-up (decaying), within [margin_min, margin_max] (SpinMargin)
//! ```
//!
//! One thread owns the sockets and the queue; producers only touch the channel. Every
//! datagram's lateness (send call - slot, as the sender sees it) and the thread's CPU
//! time are in [`DispatchStats`]: the accuracy is paid for in spinning, and the stats
//! say how much. Measuring the departures without trusting these figures is the
//! capture's job (`latebind-lab`'s `capture`).
//!
//! A long-running owner (the daemon's dispatch stage) starts it with
//! [`Dispatcher::start_reporting`]: several sockets (datagrams of equal slots on one
//! socket share a `sendmmsg`), a destination per datagram for unconnected sockets, and
//! a [`Departure`] back for every datagram, through a channel whose eventfd an epoll
//! loop watches ([`DepartureFeed`]), so that the owner learns when each one left.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use socket2::SockAddr;

use crate::clock::{SpinBudget, monotonic_ns};

/// Most datagrams one `sendmmsg` carries.
pub const BATCH: usize = 64;

/// How the sender thread waits and batches.
#[derive(Clone, Debug)]
pub struct DispatchConfig {
    /// Smallest spin before a slot (the margin never goes below it).
    pub margin_min: Duration,
    /// Largest spin before a slot: a wake-up later than this makes the datagram late.
    pub margin_max: Duration,
    /// Datagrams whose slots are within this of the first due one leave in the same
    /// `sendmmsg` (0: only equal slots).
    pub coalesce: Duration,
    /// Hold a CPU wake-up latency request of 0 µs (`/dev/cpu_dma_latency`) while the
    /// thread runs: idle CPUs poll instead of halting, so wake-ups are tens of µs late
    /// instead of up to a millisecond (needs root; ignored when it cannot be opened).
    pub cpu_latency_qos: bool,
    /// Run the thread in `SCHED_FIFO` at this priority (needs root or CAP_SYS_NICE;
    /// an error from `start` otherwise). Without it, on a machine with CPU-bound work,
    /// the spinning thread uses up its fair share and loses the CPU for whole time
    /// slices: milliseconds late, worse than a sequential sender (docs/RESULTS.md 9.1).
    pub rt_priority: Option<i32>,
    /// Keep every datagram's lateness and every wake-up's in [`DispatchStats`] (a
    /// bench's run); off for a sender that runs for ever (their memory would grow).
    pub record_samples: bool,
}

impl Default for DispatchConfig {
    /// Tuned on a 2-vCPU VM (docs/RESULTS.md section 9): wake-ups with the latency
    /// request held are mostly under 50 µs late.
    fn default() -> Self {
        Self {
            margin_min: Duration::from_micros(30),
            margin_max: Duration::from_millis(2),
            coalesce: Duration::ZERO,
            cpu_latency_qos: true,
            rt_priority: None,
            record_samples: true,
        }
    }
}

/// What a sender did, as it saw it.
#[derive(Clone, Debug, Default)]
pub struct DispatchStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// `sendmmsg` (or `send`) calls.
    pub calls: u64,
    /// Datagrams the kernel refused (`send_error_last` holds the last error).
    pub send_errors: u64,
    /// The last send error.
    pub send_error_last: Option<String>,
    /// Per datagram sent, in send order: the send call's time minus the slot, ns
    /// (negative never happens; a datagram submitted late counts its whole delay).
    pub lateness_ns: Vec<u64>,
    /// Datagrams whose slot had already passed when the thread received them (the
    /// producer handed them over too late).
    pub submitted_late: u64,
    /// Batches whose slot had already passed when the thread first looked at them
    /// (submitted too late, or the thread was busy or descheduled).
    pub taken_late: u64,
    /// Datagrams sent before their slot minus the coalescing window (a bug if not 0).
    pub early: u64,
    /// Slots the thread slept up to instead of spinning towards them, its spin budget
    /// for the window spent ([`crate::clock::SpinBudget`]).
    pub spin_budget_sleeps: u64,
    /// Wake-ups from a sleep, and how late they were, ns.
    pub wake_lateness_ns: Vec<u64>,
    /// CPU time of the sending thread, ns.
    pub cpu_ns: u64,
    /// From the thread's start to its end, ns.
    pub wall_ns: u64,
    /// Whether the CPU latency request was held.
    pub cpu_latency_qos: bool,
}

impl DispatchStats {
    /// Fraction of one CPU the sending thread used.
    pub fn cpu_fraction(&self) -> f64 {
        if self.wall_ns == 0 {
            return 0.0;
        }
        self.cpu_ns as f64 / self.wall_ns as f64
    }
}

/// The spin margin, following the lateness of recent wake-ups.
#[derive(Clone, Debug)]
pub struct SpinMargin {
    min_ns: u64,
    max_ns: u64,
    /// Largest recent wake-up lateness, decaying by [`Self::DECAY`] per wake-up.
    peak_ns: f64,
}

impl SpinMargin {
    /// Per wake-up, the remembered peak shrinks by this factor (a late wake-up is
    /// forgotten after a few hundred wake-ups).
    pub const DECAY: f64 = 0.99;

    /// A margin starting at `max_ns` (nothing is known about wake-ups yet).
    pub fn new(min_ns: u64, max_ns: u64) -> Self {
        let max_ns = max_ns.max(min_ns);
        Self {
            min_ns,
            max_ns,
            peak_ns: max_ns as f64 / 1.5,
        }
    }

    /// How long before a slot the thread must be awake.
    pub fn margin_ns(&self) -> u64 {
        ((self.peak_ns * 1.5) as u64).clamp(self.min_ns, self.max_ns)
    }

    /// A wake-up came `late_ns` after the time asked for.
    pub fn on_wake(&mut self, late_ns: u64) {
        self.peak_ns = (self.peak_ns * Self::DECAY).max(late_ns as f64);
    }

    /// A batch left without a sleep before it (datagrams came closer to their slot
    /// than the margin): decay all the same, or a margin larger than the lead the
    /// producers give would never sleep again, never measure a wake-up, and spin for
    /// ever.
    pub fn on_send_without_sleep(&mut self) {
        self.peak_ns *= Self::DECAY;
    }
}

/// Datagrams waiting for their slot, ordered by (slot, submission order).
#[derive(Debug)]
pub struct SlotQueue<T = Vec<u8>> {
    slots: BTreeMap<(u64, u64), T>,
    next: u64,
}

impl<T> Default for SlotQueue<T> {
    fn default() -> Self {
        Self {
            slots: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<T> SlotQueue<T> {
    /// Adds a datagram for slot `at_ns`.
    pub fn push(&mut self, at_ns: u64, datagram: T) {
        self.slots.insert((at_ns, self.next), datagram);
        self.next += 1;
    }

    /// The earliest slot.
    pub fn first(&self) -> Option<u64> {
        self.slots.keys().next().map(|&(at, _)| at)
    }

    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Removes and returns the next batch: the earliest datagram and those whose slot
    /// is at most `coalesce_ns` after it, up to `max` of them, in order.
    pub fn take_batch(&mut self, coalesce_ns: u64, max: usize, out: &mut Vec<(u64, T)>) {
        out.clear();
        let Some(first) = self.first() else {
            return;
        };
        while out.len() < max {
            let Some(entry) = self.slots.first_entry() else {
                break;
            };
            let at = entry.key().0;
            if at > first.saturating_add(coalesce_ns) {
                break;
            }
            out.push((at, entry.remove()));
        }
    }
}

/// A datagram on its way out: its bytes, which of the sender's sockets, where to (None:
/// the socket is connected), and the owner's tag for its [`Departure`].
#[derive(Debug)]
struct Item {
    bytes: Vec<u8>,
    socket: usize,
    to: Option<SocketAddr>,
    tag: u64,
}

/// A datagram and its slot, on the way to the sender thread.
type Msg = (u64, Item);

/// What became of one datagram handed to [`Dispatcher::submit_to`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Departure {
    /// The tag it was submitted with.
    pub tag: u64,
    /// Its length.
    pub len: usize,
    /// Whether the kernel took it (false: the send failed; it is gone).
    pub sent: bool,
    /// The send call's time minus its slot, ns (0 when not late).
    pub late_ns: u64,
    /// Whether its slot had passed when the thread received it.
    pub submitted_late: bool,
}

/// The owner's end of the departures: a channel and an eventfd that becomes readable
/// when departures wait (register [`DepartureFeed::fd`] with epoll, then
/// [`DepartureFeed::drain`]).
#[derive(Debug)]
pub struct DepartureFeed {
    rx: Receiver<Departure>,
    event: Arc<OwnedFd>,
    cpu_ns: Arc<AtomicU64>,
}

impl DepartureFeed {
    /// The eventfd to watch for readability.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.event.as_fd()
    }

    /// Appends every departure reported so far to `out`, and resets the eventfd.
    pub fn drain(&self, out: &mut Vec<Departure>) {
        let mut count = [0u8; 8];
        // SAFETY: reads the 8-byte counter into a valid 8-byte buffer (non-blocking).
        let _ = unsafe { libc::read(self.event.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
        out.extend(self.rx.try_iter());
    }

    /// CPU time the sender thread has used so far, ns (updated after each batch).
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_ns.load(Ordering::Relaxed)
    }
}

/// Where the sender thread reports departures.
struct Reporter {
    tx: Sender<Departure>,
    event: Arc<OwnedFd>,
    cpu_ns: Arc<AtomicU64>,
}

impl Reporter {
    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to an eventfd (non-blocking; a
        // full counter only means the owner is already woken).
        let _ = unsafe { libc::write(self.event.as_raw_fd(), one.as_ptr().cast(), 8) };
    }
}

/// The dispatcher: a sender thread owning one or more sockets.
#[derive(Debug)]
pub struct Dispatcher {
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<DispatchStats>>,
}

impl Dispatcher {
    /// Starts the sender thread on `socket` (connected: datagrams go to its peer).
    pub fn start(socket: OwnedFd, config: DispatchConfig) -> io::Result<Self> {
        Self::spawn(vec![socket], config, None)
    }

    /// Starts the sender thread on `sockets` (by index in [`Self::submit_to`]),
    /// reporting every datagram's departure to the returned feed.
    pub fn start_reporting(
        sockets: Vec<OwnedFd>,
        config: DispatchConfig,
    ) -> io::Result<(Self, DepartureFeed)> {
        // SAFETY: plain syscall; the descriptor is checked and then owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let event = Arc::new(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) });
        let (tx, rx) = mpsc::channel();
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let reporter = Reporter {
            tx,
            event: event.clone(),
            cpu_ns: cpu_ns.clone(),
        };
        let d = Self::spawn(sockets, config, Some(reporter))?;
        Ok((d, DepartureFeed { rx, event, cpu_ns }))
    }

    fn spawn(
        sockets: Vec<OwnedFd>,
        config: DispatchConfig,
        reporter: Option<Reporter>,
    ) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("dispatch".into())
            .spawn(move || {
                let setup = prepare_thread(config.rt_priority);
                let failed = setup.is_err();
                let _ = ready_tx.send(setup);
                if failed {
                    return DispatchStats::default();
                }
                run(&sockets, &config, &rx, reporter.as_ref())
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx: Some(tx),
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(io::Error::other("dispatch thread died while starting")),
        }
    }

    /// Hands over a datagram to send at `at_ns` (`CLOCK_MONOTONIC`). A slot already
    /// past is sent at once. Fails only if the thread is gone.
    pub fn submit(&self, at_ns: u64, datagram: Vec<u8>) -> io::Result<()> {
        self.submit_to(at_ns, 0, None, datagram, 0)
    }

    /// Hands over a datagram to send at `at_ns` on socket `socket` (an index into the
    /// sockets given at the start) to `to` (None: the socket is connected); `tag`
    /// comes back in its [`Departure`]. A slot already past is sent at once. Fails
    /// only if the thread is gone.
    pub fn submit_to(
        &self,
        at_ns: u64,
        socket: usize,
        to: Option<SocketAddr>,
        datagram: Vec<u8>,
        tag: u64,
    ) -> io::Result<()> {
        let item = Item {
            bytes: datagram,
            socket,
            to,
            tag,
        };
        self.tx
            .as_ref()
            .and_then(|tx| tx.send((at_ns, item)).ok())
            .ok_or_else(|| io::Error::other("dispatch thread is gone"))
    }

    /// Sends everything submitted, each at its slot, then stops the thread.
    pub fn finish(mut self) -> DispatchStats {
        self.stop()
    }

    fn stop(&mut self) -> DispatchStats {
        self.tx.take();
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Timer slack 1 ns, and `SCHED_FIFO` if asked.
fn prepare_thread(rt_priority: Option<i32>) -> io::Result<()> {
    set_timer_slack(1);
    if let Some(p) = rt_priority {
        let param = libc::sched_param { sched_priority: p };
        // SAFETY: plain syscall on the calling thread (0 = self).
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("SCHED_FIFO priority {p}: {e}"),
            ));
        }
    }
    Ok(())
}

fn run(
    sockets: &[OwnedFd],
    config: &DispatchConfig,
    rx: &Receiver<Msg>,
    reporter: Option<&Reporter>,
) -> DispatchStats {
    let qos = if config.cpu_latency_qos {
        CpuLatencyRequest::hold().ok()
    } else {
        None
    };
    let start_wall = monotonic_ns();
    let start_cpu = thread_cpu_ns();
    let mut stats = DispatchStats {
        cpu_latency_qos: qos.is_some(),
        ..DispatchStats::default()
    };
    let mut margin = SpinMargin::new(
        config.margin_min.as_nanos() as u64,
        config.margin_max.as_nanos() as u64,
    );
    let coalesce = config.coalesce.as_nanos() as u64;
    let mut queue = SlotQueue::default();
    let mut batch = Vec::with_capacity(BATCH);
    let mut open = true;
    let mut slept = false;
    let mut budget = SpinBudget::new(start_wall);
    loop {
        // Take whatever was submitted meanwhile.
        while let Ok((at, d)) = rx.try_recv() {
            accept(&mut queue, &mut stats, at, d);
        }
        let Some(first) = queue.first() else {
            if !open {
                break;
            }
            let from = monotonic_ns();
            match rx.recv() {
                Ok((at, d)) => accept(&mut queue, &mut stats, at, d),
                Err(_) => open = false,
            }
            budget.slept(from, monotonic_ns());
            continue;
        };
        let now = monotonic_ns();
        // Out of spin budget, sleep up to the slot itself (see SpinBudget; only a
        // real-time thread can be throttled).
        let spin = if config.rt_priority.is_none() || budget.may_spin(now) {
            margin.margin_ns()
        } else {
            stats.spin_budget_sleeps += 1;
            0
        };
        let wake = first.saturating_sub(spin);
        if now < wake {
            let timeout = Duration::from_nanos(wake - now);
            let got = if open {
                rx.recv_timeout(timeout)
            } else {
                sleep_until(wake);
                Err(RecvTimeoutError::Timeout)
            };
            match got {
                Ok((at, d)) => accept(&mut queue, &mut stats, at, d),
                Err(RecvTimeoutError::Timeout) => {
                    let late = monotonic_ns().saturating_sub(wake);
                    margin.on_wake(late);
                    if config.record_samples {
                        stats.wake_lateness_ns.push(late);
                    }
                    slept = true;
                }
                Err(RecvTimeoutError::Disconnected) => open = false,
            }
            budget.slept(now, monotonic_ns());
            continue;
        }
        while monotonic_ns() < first {
            std::hint::spin_loop();
        }
        while let Ok((at, d)) = rx.try_recv() {
            accept(&mut queue, &mut stats, at, d);
        }
        if !std::mem::take(&mut slept) {
            margin.on_send_without_sleep();
        }
        if now > first {
            stats.taken_late += 1;
        }
        queue.take_batch(coalesce, BATCH, &mut batch);
        // One sendmmsg per run of datagrams on the same socket.
        let mut start = 0;
        while start < batch.len() {
            let socket = batch[start].1.socket;
            let end = batch[start..]
                .iter()
                .position(|(_, item)| item.socket != socket)
                .map_or(batch.len(), |n| start + n);
            match sockets.get(socket) {
                Some(fd) => send_batch(
                    fd.as_fd(),
                    &batch[start..end],
                    coalesce,
                    config.record_samples,
                    &mut stats,
                    reporter,
                ),
                None => {
                    stats.send_errors += (end - start) as u64;
                    stats.send_error_last = Some(format!("no socket {socket}"));
                    if let Some(r) = reporter {
                        for (_, item) in &batch[start..end] {
                            let _ = r.tx.send(failed(item));
                        }
                    }
                }
            }
            start = end;
        }
        if let Some(r) = reporter {
            r.cpu_ns
                .store(thread_cpu_ns().saturating_sub(start_cpu), Ordering::Relaxed);
            r.wake();
        }
    }
    drop(qos);
    stats.cpu_ns = thread_cpu_ns().saturating_sub(start_cpu);
    stats.wall_ns = monotonic_ns().saturating_sub(start_wall);
    stats
}

/// Queues a submitted datagram, counting it if its slot has already passed (the tag's
/// top bit then records it for the departure report).
fn accept(queue: &mut SlotQueue<Item>, stats: &mut DispatchStats, at: u64, mut d: Item) {
    if monotonic_ns() > at {
        stats.submitted_late += 1;
        d.tag |= SUBMITTED_LATE;
    }
    queue.push(at, d);
}

/// Marks an item whose slot had passed when the thread received it (tags are the
/// owner's; it gets them back without this bit).
const SUBMITTED_LATE: u64 = 1 << 63;

fn failed(item: &Item) -> Departure {
    Departure {
        tag: item.tag & !SUBMITTED_LATE,
        len: item.bytes.len(),
        sent: false,
        late_ns: 0,
        submitted_late: item.tag & SUBMITTED_LATE != 0,
    }
}

/// Sends `batch` (all on `fd`) with `sendmmsg` (the rest again after a partial send),
/// recording each datagram's lateness and reporting its departure.
fn send_batch(
    fd: BorrowedFd<'_>,
    batch: &[(u64, Item)],
    coalesce_ns: u64,
    record: bool,
    stats: &mut DispatchStats,
    reporter: Option<&Reporter>,
) {
    let mut iov: Vec<libc::iovec> = batch
        .iter()
        .map(|(_, d)| libc::iovec {
            iov_base: d.bytes.as_ptr() as *mut libc::c_void,
            iov_len: d.bytes.len(),
        })
        .collect();
    let names: Vec<Option<SockAddr>> = batch
        .iter()
        .map(|(_, d)| d.to.map(SockAddr::from))
        .collect();
    // SAFETY: mmsghdr is POD; zeroed is a valid empty header.
    let mut msgs: Vec<libc::mmsghdr> = (0..batch.len())
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    for ((m, v), name) in msgs.iter_mut().zip(iov.iter_mut()).zip(&names) {
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
        if let Some(name) = name {
            m.msg_hdr.msg_name = name.as_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_namelen = name.len();
        }
    }
    let mut done = 0;
    while done < batch.len() {
        let now = monotonic_ns();
        // SAFETY: every header points at an iovec of a datagram and at an address, both
        // alive for the call.
        let n = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                msgs[done..].as_mut_ptr(),
                (batch.len() - done) as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        stats.calls += 1;
        if n <= 0 {
            // The first datagram of the rest was refused: count it and go on.
            let e = io::Error::last_os_error();
            stats.send_errors += 1;
            stats.send_error_last = Some(e.to_string());
            if let Some(r) = reporter {
                let _ = r.tx.send(failed(&batch[done].1));
            }
            done += 1;
            continue;
        }
        for (at, item) in &batch[done..done + n as usize] {
            if now < at.saturating_sub(coalesce_ns) {
                stats.early += 1;
            }
            let late = now.saturating_sub(*at);
            if record {
                stats.lateness_ns.push(late);
            }
            if let Some(r) = reporter {
                let _ = r.tx.send(Departure {
                    sent: true,
                    late_ns: late,
                    ..failed(item)
                });
            }
        }
        stats.sent += n as u64;
        done += n as usize;
    }
}

/// The sequential sender (the paper's RSM): for each datagram in order,
/// `clock_nanosleep` (absolute, timer slack 1 ns) to its slot if it is still ahead,
/// then `send` on the
/// connected `socket`. Runs on the calling thread; sets its timer slack to 1 ns.
pub fn send_sequential<'a, I>(socket: BorrowedFd<'_>, datagrams: I) -> DispatchStats
where
    I: IntoIterator<Item = (u64, &'a [u8])>,
{
    set_timer_slack(1);
    let start_wall = monotonic_ns();
    let start_cpu = thread_cpu_ns();
    let mut stats = DispatchStats::default();
    for (at, d) in datagrams {
        // Sleep only for a slot still ahead (the second of a pair goes at once).
        if monotonic_ns() < at {
            sleep_until(at);
        }
        let now = monotonic_ns();
        // SAFETY: sends `d.len()` bytes from a valid buffer.
        let n = unsafe {
            libc::send(
                socket.as_raw_fd(),
                d.as_ptr().cast(),
                d.len(),
                libc::MSG_DONTWAIT,
            )
        };
        stats.calls += 1;
        if n < 0 {
            stats.send_errors += 1;
            stats.send_error_last = Some(io::Error::last_os_error().to_string());
            continue;
        }
        stats.sent += 1;
        stats.lateness_ns.push(now.saturating_sub(at));
    }
    stats.cpu_ns = thread_cpu_ns().saturating_sub(start_cpu);
    stats.wall_ns = monotonic_ns().saturating_sub(start_wall);
    stats
}

/// `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)` until `deadline_ns` (again after
/// a signal).
pub fn sleep_until(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: valid timespec; absolute sleeps do not use the remainder.
        let r = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut(),
            )
        };
        if r != libc::EINTR {
            return;
        }
    }
}

/// Sets the calling thread's timer slack (default 50 µs): its timers fire within
/// `ns` of their deadline instead of being merged with others.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long; no pointers.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// CPU time of the calling thread, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec; the clock always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A PM QoS request for 0 µs CPU wake-up latency, held while alive
/// (`/dev/cpu_dma_latency`; released when the file closes).
#[derive(Debug)]
pub struct CpuLatencyRequest {
    _file: std::fs::File,
}

impl CpuLatencyRequest {
    /// Asks every CPU not to enter a halt state (needs root).
    pub fn hold() -> io::Result<Self> {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")?;
        f.write_all(&0i32.to_ne_bytes())?;
        Ok(Self { _file: f })
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;

    #[test]
    fn queue_out_of_order_submissions_leave_in_slot_order() {
        let mut q = SlotQueue::default();
        q.push(300, vec![3]);
        q.push(100, vec![1]);
        q.push(200, vec![2]);
        let mut out = Vec::new();
        let mut order = Vec::new();
        while !q.is_empty() {
            q.take_batch(0, BATCH, &mut out);
            assert_eq!(out.len(), 1);
            order.push(out[0].1[0]);
        }
        assert_eq!(order, [1, 2, 3]);
        q.take_batch(0, BATCH, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn queue_equal_slots_batch_together_in_submission_order() {
        let mut q = SlotQueue::default();
        q.push(100, vec![1]);
        q.push(100, vec![2]);
        q.push(101, vec![3]);
        let mut out = Vec::new();
        q.take_batch(0, BATCH, &mut out);
        assert_eq!(out, [(100, vec![1]), (100, vec![2])]);
        q.take_batch(0, BATCH, &mut out);
        assert_eq!(out, [(101, vec![3])]);
    }

    #[test]
    fn queue_coalesce_window_is_inclusive_and_bounded_by_max() {
        let mut q = SlotQueue::default();
        for (i, at) in [100u64, 105, 110, 111].iter().enumerate() {
            q.push(*at, vec![i as u8]);
        }
        let mut out = Vec::new();
        q.take_batch(10, BATCH, &mut out);
        assert_eq!(
            out.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
            [100, 105, 110]
        );
        assert_eq!(q.len(), 1);
        let mut q = SlotQueue::default();
        for i in 0..5u8 {
            q.push(7, vec![i]);
        }
        q.take_batch(0, 2, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(q.len(), 3);
        assert_eq!(q.first(), Some(7));
    }

    #[test]
    fn margin_starts_at_max_then_follows_wakeups_within_bounds() {
        let mut m = SpinMargin::new(30_000, 2_000_000);
        assert_eq!(m.margin_ns(), 2_000_000);
        // Prompt wake-ups: the peak decays towards the floor.
        for _ in 0..2000 {
            m.on_wake(1_000);
        }
        assert_eq!(m.margin_ns(), 30_000);
        // One 100 µs wake-up: 1.5 times it, at once.
        m.on_wake(100_000);
        assert_eq!(m.margin_ns(), 150_000);
        // A huge one is capped.
        m.on_wake(50_000_000);
        assert_eq!(m.margin_ns(), 2_000_000);
        // And forgotten again after enough prompt ones.
        for _ in 0..1000 {
            m.on_wake(0);
        }
        assert!(m.margin_ns() < 2_000_000);
    }

    #[test]
    fn margin_above_the_producers_lead_decays_without_wakeups() {
        let mut m = SpinMargin::new(30_000, 2_000_000);
        for _ in 0..1000 {
            m.on_send_without_sleep();
        }
        assert!(m.margin_ns() < 100_000, "{}", m.margin_ns());
    }

    #[test]
    fn margin_min_above_max_is_min() {
        let m = SpinMargin::new(50, 10);
        assert_eq!(m.margin_ns(), 50);
    }

    fn pair() -> (UdpSocket, UdpSocket) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (tx, rx)
    }

    #[test]
    fn dispatcher_out_of_order_submissions_leave_in_slot_order_never_early() {
        let (tx, rx) = pair();
        let d = Dispatcher::start(
            OwnedFd::from(tx),
            DispatchConfig {
                cpu_latency_qos: false,
                ..DispatchConfig::default()
            },
        )
        .unwrap();
        let base = monotonic_ns() + 20_000_000;
        // Submitted in reverse: the queue must reorder them; two share a slot.
        let slots = [base, base + 1_000_000, base + 1_000_000, base + 3_000_000];
        for (i, at) in slots.iter().enumerate().rev() {
            d.submit(*at, vec![i as u8; 8]).unwrap();
        }
        let stats = d.finish();
        assert_eq!(stats.sent, 4);
        assert_eq!(stats.send_errors, 0);
        // Three sends: the shared slot is one sendmmsg.
        assert_eq!(stats.calls, 3);
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        for _ in 0..4 {
            let n = rx.recv(&mut buf).unwrap();
            got.push(buf[..n][0]);
        }
        // Slot order; the shared slot in submission order (2 was submitted before 1).
        assert_eq!(got, [0, 2, 1, 3]);
        // None left before its slot (the clock is read just before each send call).
        assert_eq!(stats.early, 0);
        assert!(monotonic_ns() >= base + 3_000_000);
        assert_eq!(stats.lateness_ns.len(), 4);
    }

    #[test]
    fn reporting_dispatcher_sends_to_each_address_and_reports_every_departure() {
        let (rx_a, rx_b) = (pair().1, pair().1);
        let tx = (0..2)
            .map(|_| OwnedFd::from(UdpSocket::bind("127.0.0.1:0").unwrap()))
            .collect();
        let (d, feed) = Dispatcher::start_reporting(
            tx,
            DispatchConfig {
                cpu_latency_qos: false,
                record_samples: false,
                ..DispatchConfig::default()
            },
        )
        .unwrap();
        // Far enough ahead that a loaded runner does not make them late; whether it did
        // is checked against the thread's own count below, not assumed.
        let base = monotonic_ns() + 20_000_000;
        let (a, b) = (rx_a.local_addr().unwrap(), rx_b.local_addr().unwrap());
        // A slot already passed: it must be reported as submitted late, and still sent.
        d.submit_to(1, 1, Some(b), vec![5; 50], 15).unwrap();
        // Two on socket 0 and one on socket 1 share a slot; one goes to a socket that
        // does not exist.
        d.submit_to(base, 0, Some(a), vec![1; 10], 11).unwrap();
        d.submit_to(base, 1, Some(b), vec![2; 20], 12).unwrap();
        d.submit_to(base, 0, Some(a), vec![3; 30], 13).unwrap();
        d.submit_to(base + 1_000_000, 5, Some(a), vec![4; 40], 14)
            .unwrap();
        let stats = d.finish();
        let mut got = Vec::new();
        feed.drain(&mut got);
        got.sort_by_key(|g| g.tag);
        let sent: Vec<(u64, usize, bool)> = got.iter().map(|g| (g.tag, g.len, g.sent)).collect();
        assert_eq!(
            sent,
            [
                (11, 10, true),
                (12, 20, true),
                (13, 30, true),
                (14, 40, false),
                (15, 50, true)
            ]
        );
        assert!(got[4].submitted_late, "a passed slot is reported late");
        let late = got.iter().filter(|g| g.submitted_late).count() as u64;
        assert_eq!(late, stats.submitted_late, "report and count agree");
        assert_eq!((stats.sent, stats.send_errors), (4, 1));
        assert!(stats.lateness_ns.is_empty(), "samples not recorded");
        let mut buf = [0u8; 64];
        assert_eq!(rx_a.recv(&mut buf).unwrap(), 10);
        assert_eq!(rx_a.recv(&mut buf).unwrap(), 30);
        assert_eq!(rx_b.recv(&mut buf).unwrap(), 50);
        assert_eq!(rx_b.recv(&mut buf).unwrap(), 20);
    }

    #[test]
    fn sequential_sender_sends_in_order_and_counts_errors() {
        let (tx, rx) = pair();
        let base = monotonic_ns() + 1_000_000;
        let data: Vec<(u64, Vec<u8>)> = (0..3u8)
            .map(|i| (base + u64::from(i) * 500_000, vec![i; 4]))
            .collect();
        let stats = send_sequential(tx.as_fd(), data.iter().map(|(at, d)| (*at, d.as_slice())));
        assert_eq!((stats.sent, stats.send_errors), (3, 0));
        let mut buf = [0u8; 8];
        for i in 0..3u8 {
            rx.recv(&mut buf).unwrap();
            assert_eq!(buf[0], i);
        }
        assert!(monotonic_ns() >= base + 1_000_000);
    }
}
