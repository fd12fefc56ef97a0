//! `latebind dispatch-bench`: send-time accuracy of the pre-dispatch sender against the
//! sequential one, measured on the far side of a veth (the paper's table 4 grid).
//!
//! ```text
//!  client ns  c0 198.18.1.1 ──veth── s0 198.18.1.2  server ns
//!             UDP sender                capture (AF_PACKET, kernel timestamps)
//! ```
//!
//! For each load (idle, or busy-loop threads on every CPU), packet size and expected
//! inter-departure time, each sender sends a train of tagged datagrams on the same
//! socket, one after the other:
//!
//! - `sequential` (the paper's RSM): `clock_nanosleep` to the slot, then `send`.
//! - `dispatch` (the paper's OFR): a producer builds each datagram φ before its slot
//!   and submits it; the dispatcher's thread sleeps, spins and sends at the slot
//!   (`latebind_io::dispatch`).
//!
//! The error of a gap is |measured - expected| inter-departure time, from the
//! capture's kernel timestamps; each cell gives mean, p50, p99 and max, the sender's
//! own p99 lateness (what it believes) and its CPU use. Packet pairs: two datagrams
//! due at the same instant, the gap the capture sees between them.

use std::fmt::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use latebind_io::dispatch::{self, DispatchConfig, DispatchStats, Dispatcher};
use serde::Serialize;

use crate::capture::{self, Capture, Tag};
use crate::netns::{Role, Topology};
use crate::stats::nearest_rank;
use crate::sys;

/// UDP port the bench sends to.
pub const BENCH_PORT: u16 = 47_000;

/// Which sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SenderKind {
    /// `clock_nanosleep` to the slot, then `send` (RSM).
    Sequential,
    /// Pre-dispatch: built φ ahead, sent by the dispatcher thread (OFR).
    Dispatch,
}

impl SenderKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Dispatch => "dispatch",
        }
    }
}

/// Competing CPU load during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// Nothing else started by the bench.
    Idle,
    /// One busy-loop thread per CPU.
    Busy,
}

impl Load {
    fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Busy => "busy",
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// IP packet sizes, bytes (36..=1500).
    pub sizes: Vec<usize>,
    /// Expected inter-departure times, µs.
    pub spacings_us: Vec<u64>,
    /// Loads, in order.
    pub loads: Vec<Load>,
    /// Pre-dispatching period φ, µs.
    pub phi_us: u64,
    /// Each train lasts about this long (more packets at short spacings) ...
    pub train_s: f64,
    /// ... with at least this many and at most `max_packets` packets.
    pub min_packets: usize,
    /// See `min_packets`.
    pub max_packets: usize,
    /// Packet pairs per sender and size (0: none), one pair per millisecond.
    pub pairs: usize,
    /// Sizes of the pairs, bytes.
    pub pair_sizes: Vec<usize>,
    /// The dispatcher's configuration (margins, latency request, RT priority).
    pub dispatch: DispatchConfig,
    /// Busy-loop threads under load (default: one per CPU).
    pub busy_threads: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            sizes: vec![40, 200, 500, 1000, 1500],
            spacings_us: vec![10, 100, 1_000, 10_000, 100_000],
            loads: vec![Load::Idle, Load::Busy],
            phi_us: 1_000,
            train_s: 0.3,
            min_packets: 21,
            max_packets: 3_000,
            pairs: 200,
            pair_sizes: vec![40, 1500],
            dispatch: DispatchConfig::default(),
            busy_threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
        }
    }
}

/// One cell of the grid.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Sender.
    pub sender: SenderKind,
    /// Load.
    pub load: Load,
    /// IP packet size, bytes.
    pub size: usize,
    /// Expected inter-departure time, µs.
    pub spacing_us: u64,
    /// Datagrams sent.
    pub sent: u64,
    /// Datagrams captured.
    pub captured: usize,
    /// Gaps measured (consecutive datagrams both captured).
    pub gaps: usize,
    /// |measured - expected| gap: mean, µs.
    pub mean_us: f64,
    /// p50, µs.
    pub p50_us: f64,
    /// p99, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// The sender's own view: p99 of (send call - slot), µs.
    pub sender_late_p99_us: f64,
    /// CPU the sending thread used, % of one CPU over the train.
    pub cpu_pct: f64,
    /// Dispatcher: batches it first saw after their slot (0 for the sequential sender).
    pub taken_late: u64,
    /// Dispatcher: datagrams its producer handed over after their slot.
    pub submitted_late: u64,
    /// Dispatcher: p99 of how late its wake-ups from sleep were, µs (what sets the
    /// spin margin).
    pub wake_late_p99_us: f64,
}

/// Packet-pair gaps of one sender and size.
#[derive(Clone, Debug, Serialize)]
pub struct PairCell {
    /// Sender.
    pub sender: SenderKind,
    /// Load.
    pub load: Load,
    /// IP packet size, bytes.
    pub size: usize,
    /// Pairs with both datagrams captured.
    pub pairs: usize,
    /// Smallest gap, µs.
    pub min_us: f64,
    /// Median gap, µs.
    pub p50_us: f64,
    /// p99 gap, µs.
    pub p99_us: f64,
}

/// Everything a bench run measured.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BenchReport {
    /// Train cells.
    pub cells: Vec<Cell>,
    /// Packet pairs.
    pub pairs: Vec<PairCell>,
    /// Notes (kernel drops, missing latency request, ...).
    pub notes: Vec<String>,
}

/// Runs the bench in a fresh two-namespace topology (needs root).
pub fn run(opts: &BenchOptions, progress: &mut dyn FnMut(&str)) -> Result<BenchReport> {
    let topo = Topology::create_direct(1).context("building the bench's namespaces")?;
    let link = topo.links[0].clone();
    let client_ns = topo.ns(Role::Client);
    let server_ns = topo.ns(Role::Server);
    let socket = connected_socket(&client_ns, link.client, link.server, BENCH_PORT)?;
    // Both senders get the same scheduling: with --rt-priority, this thread (the
    // sequential sender, the dispatcher's producer) and the dispatcher's thread.
    let restore = match opts.dispatch.rt_priority {
        Some(p) => Some(sys::set_realtime(p).with_context(|| format!("SCHED_FIFO priority {p}"))?),
        None => None,
    };
    let mut report = BenchReport::default();
    let mut run_id = 0u32;
    for &load in &opts.loads {
        let burner = match load {
            Load::Idle => None,
            Load::Busy => Some(Burner::start(opts.busy_threads)),
        };
        for &size in &opts.sizes {
            for &spacing in &opts.spacings_us {
                for sender in [SenderKind::Sequential, SenderKind::Dispatch] {
                    run_id += 1;
                    let cell = train(
                        &socket,
                        &server_ns,
                        &link.server_if,
                        opts,
                        (sender, load, size, spacing),
                        run_id,
                        &mut report.notes,
                    )?;
                    progress(&format!(
                        "{:<10} {:<4} {:>4} B {:>6} µs: p99 {:>9.2} µs",
                        sender.as_str(),
                        load.as_str(),
                        size,
                        spacing,
                        cell.p99_us
                    ));
                    report.cells.push(cell);
                }
            }
        }
        if opts.pairs > 0 {
            for &size in &opts.pair_sizes {
                for sender in [SenderKind::Sequential, SenderKind::Dispatch] {
                    run_id += 1;
                    let cell = pairs(
                        &socket,
                        &server_ns,
                        &link.server_if,
                        opts,
                        (sender, load, size),
                        run_id,
                    )?;
                    progress(&format!(
                        "{:<10} {:<4} {:>4} B pairs: min {:.2} µs",
                        sender.as_str(),
                        load.as_str(),
                        size,
                        cell.min_us
                    ));
                    report.pairs.push(cell);
                }
            }
        }
        drop(burner);
    }
    if let Some((policy, priority)) = restore {
        let _ = sys::set_scheduler(policy, priority);
    }
    drop(topo);
    Ok(report)
}

/// A UDP socket in namespace `ns`, bound to `local`, connected to `peer:port`.
pub fn connected_socket(
    ns: &str,
    local: std::net::Ipv4Addr,
    peer: std::net::Ipv4Addr,
    port: u16,
) -> Result<OwnedFd> {
    let fd = sys::in_netns(ns, move || {
        let s = std::net::UdpSocket::bind((local, 0))?;
        s.connect((peer, port))?;
        Ok(OwnedFd::from(s))
    })
    .with_context(|| format!("UDP socket {local} -> {peer}:{port} in {ns}"))?;
    Ok(fd)
}

/// Packets in a train of this spacing.
fn train_len(opts: &BenchOptions, spacing_us: u64) -> usize {
    let n = (opts.train_s * 1e6 / spacing_us as f64) as usize + 1;
    n.clamp(opts.min_packets, opts.max_packets)
}

/// Sends `slots[i]` with payload `payloads[i]` with one sender; returns its stats.
fn send_with(
    socket: &OwnedFd,
    sender: SenderKind,
    opts: &BenchOptions,
    slots: &[u64],
    payloads: Vec<Vec<u8>>,
) -> Result<DispatchStats> {
    send_with_config(socket, sender, &opts.dispatch, opts.phi_us, slots, payloads)
}

/// Sends `payloads[i]` at `slots[i]` on `socket` with `sender` (the dispatcher with
/// `dispatch`, its producer handing each datagram over `phi_us` ahead).
pub(crate) fn send_with_config(
    socket: &OwnedFd,
    sender: SenderKind,
    dispatch: &DispatchConfig,
    phi_us: u64,
    slots: &[u64],
    payloads: Vec<Vec<u8>>,
) -> Result<DispatchStats> {
    match sender {
        SenderKind::Sequential => Ok(dispatch::send_sequential(
            socket.as_fd(),
            slots
                .iter()
                .copied()
                .zip(payloads.iter().map(Vec::as_slice)),
        )),
        SenderKind::Dispatch => {
            let fd = socket.try_clone().context("duplicating the socket")?;
            let d = Dispatcher::start(fd, dispatch.clone()).context("starting the dispatcher")?;
            // The producer: each datagram handed over φ before its slot (OFR).
            // Sleeps only when the next hand-over is more than 20 µs away (a sleep
            // costs more than that), then hands over everything due.
            let phi = phi_us * 1_000;
            for (at, p) in slots.iter().zip(payloads) {
                let due = at.saturating_sub(phi);
                if due > sys::mono_ns() + 20_000 {
                    dispatch::sleep_until(due);
                }
                d.submit(*at, p)?;
            }
            Ok(d.finish())
        }
    }
}

fn train(
    socket: &OwnedFd,
    server_ns: &str,
    ifname: &str,
    opts: &BenchOptions,
    (sender, load, size, spacing_us): (SenderKind, Load, usize, u64),
    run_id: u32,
    notes: &mut Vec<String>,
) -> Result<Cell> {
    let n = train_len(opts, spacing_us);
    let cap = Capture::start(Some(server_ns), ifname, BENCH_PORT)?;
    let base = sys::mono_ns() + 20_000_000;
    let slots: Vec<u64> = (0..n as u64)
        .map(|i| base + i * spacing_us * 1_000)
        .collect();
    let payloads: Vec<Vec<u8>> = (0..n as u32)
        .map(|seq| capture::tagged_payload(Tag { run: run_id, seq }, size))
        .collect();
    let stats = send_with(socket, sender, opts, &slots, payloads)?;
    std::thread::sleep(Duration::from_millis(20));
    let captured = cap.stop()?;
    if captured.kernel_drops > 0 {
        notes.push(format!(
            "run {run_id}: the capture socket dropped {} frames",
            captured.kernel_drops
        ));
    }
    if stats.early > 0 {
        notes.push(format!(
            "run {run_id}: {} datagrams left before their slot",
            stats.early
        ));
    }
    if stats.send_errors > 0 {
        notes.push(format!(
            "run {run_id}: {} send errors ({})",
            stats.send_errors,
            stats.send_error_last.clone().unwrap_or_default()
        ));
    }
    let mine = captured
        .arrivals
        .iter()
        .filter(|a| a.tag.is_some_and(|t| t.run == run_id))
        .count();
    let errors = capture::idt_errors(&captured.arrivals, run_id, &slots);
    let (mean, p50, p99, max) = summary_us(&errors);
    let late: Vec<u64> = stats.lateness_ns.clone();
    Ok(Cell {
        sender,
        load,
        size,
        spacing_us,
        sent: stats.sent,
        captured: mine,
        gaps: errors.len(),
        mean_us: mean,
        p50_us: p50,
        p99_us: p99,
        max_us: max,
        sender_late_p99_us: summary_us(&late).2,
        cpu_pct: 100.0 * stats.cpu_fraction(),
        taken_late: stats.taken_late,
        submitted_late: stats.submitted_late,
        wake_late_p99_us: summary_us(&stats.wake_lateness_ns).2,
    })
}

fn pairs(
    socket: &OwnedFd,
    server_ns: &str,
    ifname: &str,
    opts: &BenchOptions,
    (sender, load, size): (SenderKind, Load, usize),
    run_id: u32,
) -> Result<PairCell> {
    let cap = Capture::start(Some(server_ns), ifname, BENCH_PORT)?;
    let base = sys::mono_ns() + 20_000_000;
    let slots: Vec<u64> = (0..opts.pairs as u64 * 2)
        .map(|i| base + (i / 2) * 1_000_000)
        .collect();
    let payloads: Vec<Vec<u8>> = (0..slots.len() as u32)
        .map(|seq| capture::tagged_payload(Tag { run: run_id, seq }, size))
        .collect();
    send_with(socket, sender, opts, &slots, payloads)?;
    std::thread::sleep(Duration::from_millis(20));
    let captured = cap.stop()?;
    let mut gaps = capture::pair_gaps(&captured.arrivals, run_id);
    gaps.sort_unstable();
    let us = |ns: u64| ns as f64 / 1e3;
    Ok(PairCell {
        sender,
        load,
        size,
        pairs: gaps.len(),
        min_us: gaps.first().map_or(0.0, |&g| us(g)),
        p50_us: pct_us(&gaps, 50.0),
        p99_us: pct_us(&gaps, 99.0),
    })
}

fn pct_us(sorted_ns: &[u64], p: f64) -> f64 {
    let v: Vec<f64> = sorted_ns.iter().map(|&x| x as f64 / 1e3).collect();
    nearest_rank(&v, p)
}

/// Mean, p50, p99 and max of samples in ns, in µs (0s when empty).
pub fn summary_us(samples_ns: &[u64]) -> (f64, f64, f64, f64) {
    if samples_ns.is_empty() {
        return (0.0, 0.0, 0.0, 0.0);
    }
    let mut v: Vec<f64> = samples_ns.iter().map(|&x| x as f64 / 1e3).collect();
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (
        mean,
        nearest_rank(&v, 50.0),
        nearest_rank(&v, 99.0),
        v[v.len() - 1],
    )
}

/// Busy-loop threads, stopped on drop.
struct Burner {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Burner {
    fn start(n: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    // Threads inherit the creator's policy: under --rt-priority the
                    // load must still be ordinary work, not real-time spinners.
                    let _ = sys::set_scheduler(libc::SCHED_OTHER, 0);
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..10_000 {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The grid as markdown: one row per (load, size, spacing), the two senders side by
/// side.
pub fn table(report: &BenchReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| load | size (B) | spacing (µs) | sequential mean / p99 (µs) | dispatch mean / p99 (µs) | p99 ratio | dispatch CPU % | gaps seq / disp |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for seq in report
        .cells
        .iter()
        .filter(|c| c.sender == SenderKind::Sequential)
    {
        let Some(disp) = report.cells.iter().find(|c| {
            c.sender == SenderKind::Dispatch
                && (c.load, c.size, c.spacing_us) == (seq.load, seq.size, seq.spacing_us)
        }) else {
            continue;
        };
        let ratio = if disp.p99_us > 0.0 {
            format!("{:.0}×", seq.p99_us / disp.p99_us)
        } else {
            "—".into()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {ratio} | {:.0} | {} / {} |",
            seq.load.as_str(),
            seq.size,
            seq.spacing_us,
            seq.mean_us,
            seq.p99_us,
            disp.mean_us,
            disp.p99_us,
            disp.cpu_pct,
            seq.gaps,
            disp.gaps
        );
    }
    if !report.pairs.is_empty() {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| load | size (B) | sender | pairs | min gap (µs) | p50 (µs) | p99 (µs) |"
        );
        let _ = writeln!(s, "|---|---:|---|---:|---:|---:|---:|");
        for p in &report.pairs {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                p.load.as_str(),
                p.size,
                p.sender.as_str(),
                p.pairs,
                p.min_us,
                p.p50_us,
                p.p99_us
            );
        }
    }
    for n in &report.notes {
        let _ = writeln!(s, "\nnote: {n}");
    }
    s
}

/// Checks the options (sizes, spacings, counts), naming the offending value.
pub fn validate(opts: &BenchOptions) -> Result<()> {
    for &s in opts.sizes.iter().chain(&opts.pair_sizes) {
        if !(36..=1500).contains(&s) {
            bail!(
                "packet size {s} bytes: expected 36 to 1500 (IPv4 + UDP + an 8-byte tag, within the 1500-byte MTU)"
            );
        }
    }
    for &s in &opts.spacings_us {
        if s == 0 || s > 10_000_000 {
            bail!("spacing {s} µs: expected 1 to 10000000");
        }
    }
    if opts.min_packets < 2 || opts.min_packets > opts.max_packets {
        bail!(
            "packets per train {}..{}: expected 2 <= min <= max",
            opts.min_packets,
            opts.max_packets
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn train_length_follows_the_duration_within_bounds() {
        let o = BenchOptions::default();
        assert_eq!(train_len(&o, 10), 3_000);
        assert_eq!(train_len(&o, 100), 3_000);
        assert_eq!(train_len(&o, 1_000), 301);
        assert_eq!(train_len(&o, 100_000), 21);
    }

    #[test]
    fn summary_of_known_samples() {
        let ns: Vec<u64> = (1..=100).map(|i| i * 1_000).collect();
        let (mean, p50, p99, max) = summary_us(&ns);
        assert_eq!((p50, p99, max), (50.0, 99.0, 100.0));
        assert!((mean - 50.5).abs() < 1e-9);
        assert_eq!(summary_us(&[]), (0.0, 0.0, 0.0, 0.0));
    }

    #[test]
    fn options_out_of_range_are_refused_with_the_value() {
        let mut o = BenchOptions::default();
        assert!(validate(&o).is_ok());
        o.sizes = vec![20];
        let e = validate(&o).unwrap_err().to_string();
        assert!(e.contains("20 bytes") && e.contains("36 to 1500"), "{e}");
        o.sizes = vec![100];
        o.spacings_us = vec![0];
        assert!(validate(&o).unwrap_err().to_string().contains("spacing 0"));
    }
}
