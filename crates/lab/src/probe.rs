//! `latebind probe`: capacity and available bandwidth of a link, from packet pairs and
//! trains sent by the precise sender and timed by the far end's kernel.
//!
//! ```text
//!  prober (one UDP socket, connected)          responder (`probe --listen`)
//!  1. pairs: two datagrams due at the same      records (train, seq, kernel receive
//!     instant (one sendmmsg), `pair_gap` apart   timestamp SO_TIMESTAMPNS) per session
//!  2. one back-to-back train (sendmmsg, 64 a call)
//!  3. rate trains at fractions of the capacity
//!     found in 1-2, spaced by the dispatcher
//!  4. report request (retried) ------------->  records back, 64 per datagram
//!  5. estimates: capacity = size / median pair dispersion; the back-to-back train's
//!     dispersion rate; available bandwidth from the rate trains that fell behind
//!     (output < 95 % of input), inverting FIFO sharing (TOPP): A = C - r_in (C / r_out
//!     - 1), median over those trains
//! ```
//!
//! Only receive-side gaps are used, so the two clocks need not agree. Sizes are IP
//! packet lengths: the rates are IP-layer rates.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use latebind_io::dispatch::{DispatchConfig, Dispatcher};
use serde::Serialize;

use crate::capture::IP_UDP_HEADERS;
use crate::sys;

const MAGIC_PROBE: [u8; 4] = *b"LBPB";
const MAGIC_QUERY: [u8; 4] = *b"LBPQ";
const MAGIC_REPORT: [u8; 4] = *b"LBPR";
/// Bytes of a probe datagram's header (magic, session, train, seq).
const PROBE_HEADER: usize = 16;
/// Records per report datagram.
const RECORDS_PER_REPORT: usize = 64;
/// Bytes of one record (train u32, seq u32, timestamp u64).
const RECORD_LEN: usize = 16;
/// Smallest probe, bytes of IP packet.
pub const MIN_SIZE: usize = IP_UDP_HEADERS + PROBE_HEADER;

/// Train number of the packet pairs.
pub const TRAIN_PAIRS: u32 = 0;
/// Train number of the back-to-back train.
pub const TRAIN_BURST: u32 = 1;
/// Rate trains are numbered from here.
pub const TRAIN_RATES: u32 = 2;

/// One received probe, as the responder saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Train number.
    pub train: u32,
    /// Sequence number in the train.
    pub seq: u32,
    /// Kernel receive timestamp, ns (`CLOCK_REALTIME` of the responder).
    pub ts_ns: u64,
}

/// A probe datagram's payload: header then zeros, `size` bytes of IP packet.
pub fn probe_payload(session: u32, train: u32, seq: u32, size: usize) -> Vec<u8> {
    let mut p = vec![0u8; size.max(MIN_SIZE) - IP_UDP_HEADERS];
    p[..4].copy_from_slice(&MAGIC_PROBE);
    p[4..8].copy_from_slice(&session.to_be_bytes());
    p[8..12].copy_from_slice(&train.to_be_bytes());
    p[12..16].copy_from_slice(&seq.to_be_bytes());
    p
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// `(session, train, seq)` of a probe payload.
pub fn parse_probe(p: &[u8]) -> Option<(u32, u32, u32)> {
    if p.get(..4)? != MAGIC_PROBE {
        return None;
    }
    Some((be32(p, 4)?, be32(p, 8)?, be32(p, 12)?))
}

/// Report datagrams for `records` of `session`: magic, session, offset, total, count,
/// then the records.
pub fn encode_reports(session: u32, records: &[Record]) -> Vec<Vec<u8>> {
    let total = records.len() as u32;
    let chunks: Vec<&[Record]> = if records.is_empty() {
        vec![&[]]
    } else {
        records.chunks(RECORDS_PER_REPORT).collect()
    };
    let mut offset = 0u32;
    chunks
        .into_iter()
        .map(|chunk| {
            let mut d = Vec::with_capacity(18 + chunk.len() * RECORD_LEN);
            d.extend_from_slice(&MAGIC_REPORT);
            d.extend_from_slice(&session.to_be_bytes());
            d.extend_from_slice(&offset.to_be_bytes());
            d.extend_from_slice(&total.to_be_bytes());
            d.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            for r in chunk {
                d.extend_from_slice(&r.train.to_be_bytes());
                d.extend_from_slice(&r.seq.to_be_bytes());
                d.extend_from_slice(&r.ts_ns.to_be_bytes());
            }
            offset += chunk.len() as u32;
            d
        })
        .collect()
}

/// `(session, offset, total, records)` of a report datagram.
pub fn decode_report(d: &[u8]) -> Option<(u32, u32, u32, Vec<Record>)> {
    if d.get(..4)? != MAGIC_REPORT {
        return None;
    }
    let (session, offset, total) = (be32(d, 4)?, be32(d, 8)?, be32(d, 12)?);
    let count = usize::from(u16::from_be_bytes(d.get(16..18)?.try_into().ok()?));
    let body = d.get(18..18 + count * RECORD_LEN)?;
    let records = body
        .chunks_exact(RECORD_LEN)
        .map(|r| Record {
            train: u32::from_be_bytes(r[0..4].try_into().expect("16-byte chunk")),
            seq: u32::from_be_bytes(r[4..8].try_into().expect("16-byte chunk")),
            ts_ns: u64::from_be_bytes(r[8..16].try_into().expect("16-byte chunk")),
        })
        .collect();
    Some((session, offset, total, records))
}

/// Capacity (bit/s) from packet pairs: `size` bytes over the median dispersion of the
/// pairs of [`TRAIN_PAIRS`] received whole (pair `k` is seq `2k`, `2k + 1`).
pub fn capacity_from_pairs(records: &[Record], size: usize) -> Option<f64> {
    let disp = pair_dispersions(records);
    if disp.is_empty() {
        return None;
    }
    let median = crate::stats::nearest_rank(&disp, 50.0);
    Some(size as f64 * 8.0 / (median / 1e9))
}

/// Dispersions (ns, ascending) of the pairs of [`TRAIN_PAIRS`] received whole.
pub fn pair_dispersions(records: &[Record]) -> Vec<f64> {
    let mut firsts = BTreeMap::new();
    let mut disp = Vec::new();
    for r in records.iter().filter(|r| r.train == TRAIN_PAIRS) {
        if r.seq % 2 == 0 {
            firsts.insert(r.seq / 2, r.ts_ns);
        }
    }
    for r in records.iter().filter(|r| r.train == TRAIN_PAIRS) {
        if r.seq % 2 == 1
            && let Some(&t0) = firsts.get(&(r.seq / 2))
            && r.ts_ns > t0
        {
            disp.push((r.ts_ns - t0) as f64);
        }
    }
    disp.sort_by(f64::total_cmp);
    disp
}

/// Output rate (bit/s) of one train: the datagrams received after the first, over the
/// time from the first to the last reception. None with fewer than 2 received.
pub fn train_rate(records: &[Record], train: u32, size: usize) -> Option<f64> {
    let ts: Vec<u64> = records
        .iter()
        .filter(|r| r.train == train)
        .map(|r| r.ts_ns)
        .collect();
    let (first, last) = (*ts.iter().min()?, *ts.iter().max()?);
    if ts.len() < 2 || last <= first {
        return None;
    }
    Some((ts.len() - 1) as f64 * size as f64 * 8.0 / ((last - first) as f64 / 1e9))
}

/// Available bandwidth from rate trains `(input rate, output rate)` through a FIFO of
/// capacity `capacity` (TOPP). A train faster than the available bandwidth A shares the
/// link with the cross traffic X = C - A in proportion to the rates, so
/// r_out = C r_in / (r_in + X), that is A = C - r_in (C / r_out - 1). The estimate is
/// the median of that over the trains that fell behind (output below `keep_up` of the
/// input), clamped to [0, C]. If none fell behind, it is the fastest train (a lower
/// bound). None without a usable train.
pub fn available_bandwidth(
    trains: &[(f64, Option<f64>)],
    capacity: f64,
    keep_up: f64,
) -> Option<f64> {
    let measured: Vec<(f64, f64)> = trains
        .iter()
        .filter_map(|&(r_in, r_out)| r_out.filter(|o| *o > 0.0).map(|o| (r_in, o)))
        .collect();
    let mut behind: Vec<f64> = measured
        .iter()
        .filter(|(r_in, r_out)| *r_out < keep_up * r_in)
        .map(|(r_in, r_out)| (capacity - r_in * (capacity / r_out - 1.0)).clamp(0.0, capacity))
        .collect();
    if behind.is_empty() {
        return measured
            .iter()
            .map(|(r_in, _)| *r_in)
            .max_by(f64::total_cmp);
    }
    behind.sort_by(f64::total_cmp);
    Some(crate::stats::nearest_rank(&behind, 50.0))
}

/// What to send.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// IP packet size, bytes.
    pub size: usize,
    /// Packet pairs.
    pub pairs: usize,
    /// Time between pairs.
    pub pair_gap: Duration,
    /// Datagrams in the back-to-back train.
    pub train: usize,
    /// Rate trains, as fractions of the capacity estimate (empty: none).
    pub rate_fractions: Vec<f64>,
    /// Datagrams per rate train.
    pub rate_train: usize,
    /// The dispatcher's configuration.
    pub dispatch: DispatchConfig,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            size: 1500,
            pairs: 60,
            pair_gap: Duration::from_millis(10),
            train: 100,
            rate_fractions: vec![0.3, 0.5, 0.7, 0.8, 0.9, 1.0, 1.1, 1.25],
            rate_train: 50,
            dispatch: DispatchConfig::default(),
        }
    }
}

/// What `probe` found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProbeReport {
    /// The responder.
    pub peer: String,
    /// IP packet size, bytes.
    pub size: usize,
    /// Pairs sent / received whole.
    pub pairs_sent: usize,
    /// Capacity from the pairs, bit/s.
    pub capacity_pairs_bps: Option<f64>,
    /// Pair dispersions, µs: 10th, 50th and 90th percentiles.
    pub pair_dispersion_us: [f64; 3],
    /// Output rate of the back-to-back train, bit/s.
    pub capacity_train_bps: Option<f64>,
    /// Rate trains: input rate and output rate, bit/s.
    pub rate_trains: Vec<(f64, Option<f64>)>,
    /// Available bandwidth, bit/s.
    pub available_bps: Option<f64>,
    /// Datagrams sent / reported received.
    pub sent: usize,
    /// See `sent`.
    pub received: usize,
}

/// Probes the responder at `peer` from a socket bound to `bind` (port 0 is any).
pub fn probe(bind: SocketAddr, peer: SocketAddr, opts: &ProbeOptions) -> Result<ProbeReport> {
    if opts.size < MIN_SIZE || opts.size > 1500 {
        bail!("--size {}: expected {MIN_SIZE} to 1500 bytes", opts.size);
    }
    let sock = UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
    sock.connect(peer)
        .with_context(|| format!("connecting to {peer}"))?;
    let session = (sys::mono_ns() as u32) ^ std::process::id().rotate_left(16);
    let mut report = ProbeReport {
        peer: peer.to_string(),
        size: opts.size,
        pairs_sent: opts.pairs,
        ..ProbeReport::default()
    };
    let d = Dispatcher::start(OwnedFd::from(sock.try_clone()?), opts.dispatch.clone())?;
    // 1-2: pairs, then the back-to-back train.
    let mut at = sys::mono_ns() + 5_000_000;
    for k in 0..opts.pairs as u32 {
        for s in [2 * k, 2 * k + 1] {
            d.submit(at, probe_payload(session, TRAIN_PAIRS, s, opts.size))?;
        }
        at += opts.pair_gap.as_nanos() as u64;
    }
    for s in 0..opts.train as u32 {
        d.submit(at, probe_payload(session, TRAIN_BURST, s, opts.size))?;
    }
    let stats = d.finish();
    report.sent = stats.sent as usize;
    let records = fetch_report(&sock, session, report.sent)?;
    report.capacity_pairs_bps = capacity_from_pairs(&records, opts.size);
    let disp = pair_dispersions(&records);
    report.pair_dispersion_us =
        [10.0, 50.0, 90.0].map(|p| crate::stats::nearest_rank(&disp, p) / 1e3);
    report.capacity_train_bps = train_rate(&records, TRAIN_BURST, opts.size);
    let mut all = records;
    // 3: rate trains around the capacity (a new session: its own report).
    let capacity = report.capacity_pairs_bps.or(report.capacity_train_bps);
    if let (Some(c), false) = (capacity, opts.rate_fractions.is_empty()) {
        let session2 = session.wrapping_add(1);
        let d = Dispatcher::start(OwnedFd::from(sock.try_clone()?), opts.dispatch.clone())?;
        let mut at = sys::mono_ns() + 5_000_000;
        let mut rates = Vec::new();
        for (i, f) in opts.rate_fractions.iter().enumerate() {
            let rate = c * f;
            let spacing = (opts.size as f64 * 8.0 / rate * 1e9) as u64;
            for s in 0..opts.rate_train as u32 {
                let train = TRAIN_RATES + i as u32;
                d.submit(at, probe_payload(session2, train, s, opts.size))?;
                at += spacing;
            }
            rates.push(rate);
            // Let the queue drain before the next train: as long as the train took.
            at += spacing * opts.rate_train as u64 + 5_000_000;
        }
        let sent = d.finish().sent as usize;
        report.sent += sent;
        let records = fetch_report(&sock, session2, sent)?;
        report.rate_trains = rates
            .iter()
            .enumerate()
            .map(|(i, &r)| (r, train_rate(&records, TRAIN_RATES + i as u32, opts.size)))
            .collect();
        report.available_bps = available_bandwidth(&report.rate_trains, c, 0.95);
        all.extend(records);
    }
    report.received = all.len();
    Ok(report)
}

/// Asks for the records of `session` until all arrived (up to 5 tries, 300 ms each).
fn fetch_report(sock: &UdpSocket, session: u32, _sent: usize) -> Result<Vec<Record>> {
    // Let the last probes cross the link first.
    std::thread::sleep(Duration::from_millis(200));
    sock.set_read_timeout(Some(Duration::from_millis(300)))?;
    let mut query = MAGIC_QUERY.to_vec();
    query.extend_from_slice(&session.to_be_bytes());
    let mut buf = vec![0u8; 65_536];
    for _ in 0..5 {
        sock.send(&query).context("sending the report request")?;
        let mut got: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
        let mut total = None;
        loop {
            let n = match sock.recv(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(e).context("receiving the report"),
            };
            let Some((s, offset, t, records)) = decode_report(&buf[..n]) else {
                continue;
            };
            if s != session {
                continue;
            }
            total = Some(t);
            got.insert(offset, records);
            let have: usize = got.values().map(Vec::len).sum();
            if have as u32 >= t {
                return Ok(got.into_values().flatten().collect());
            }
        }
        if total == Some(0) {
            return Ok(Vec::new());
        }
    }
    bail!(
        "no complete report from the responder for session {session} (is `latebind probe --listen` running there?)"
    )
}

/// The responder: records every probe's kernel receive time, per session, and answers
/// report requests. Runs until SIGINT/SIGTERM, or after answering `max_reports`.
pub fn listen(addr: SocketAddr, max_reports: Option<usize>) -> Result<()> {
    let sock = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
    let fd = sock.as_raw_fd();
    sys::setsockopt(fd, libc::SOL_SOCKET, sys::SO_TIMESTAMPNS, &1i32)?;
    let big: i32 = 8 << 20;
    if sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &big).is_err() {
        let _ = sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &big);
    }
    sys::install_stop_flag();
    eprintln!("latebind probe: listening on {}", sock.local_addr()?);
    let mut sessions: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
    let mut answered = 0;
    let mut buf = vec![0u8; 2048];
    while !sys::stop_requested() {
        if !sys::poll_in(fd, 200)? {
            continue;
        }
        let Some((n, Some(from), ts)) = sys::recv_stamped(fd, &mut buf)? else {
            continue;
        };
        let from = SocketAddr::V4(from);
        let d = &buf[..n];
        if let Some((session, train, seq)) = parse_probe(d) {
            if !sessions.contains_key(&session) && sessions.len() >= 64 {
                // Keep memory bounded: forget the oldest-numbered session.
                sessions.pop_first();
            }
            sessions.entry(session).or_default().push(Record {
                train,
                seq,
                ts_ns: ts,
            });
        } else if d.len() >= 8 && d[..4] == MAGIC_QUERY {
            let session = be32(d, 4).expect("length checked");
            let records = sessions.get(&session).map_or(&[][..], Vec::as_slice);
            for r in encode_reports(session, records) {
                sock.send_to(&r, from)?;
            }
            answered += 1;
            if max_reports.is_some_and(|m| answered >= m) {
                break;
            }
        }
    }
    Ok(())
}

/// Mb/s with two decimals, or `—`.
fn mbps(b: Option<f64>) -> String {
    b.map_or("—".into(), |b| format!("{:.2}", b / 1e6))
}

impl ProbeReport {
    /// A short human-readable summary.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "peer {}  size {} B", self.peer, self.size);
        let _ = writeln!(
            s,
            "capacity (pairs, median dispersion)  {} Mb/s",
            mbps(self.capacity_pairs_bps)
        );
        let _ = writeln!(
            s,
            "capacity (back-to-back train)        {} Mb/s",
            mbps(self.capacity_train_bps)
        );
        for (r_in, r_out) in &self.rate_trains {
            let _ = writeln!(
                s,
                "  train at {:>8.2} Mb/s -> {:>8} Mb/s",
                r_in / 1e6,
                mbps(*r_out)
            );
        }
        let _ = writeln!(
            s,
            "available bandwidth                  {} Mb/s",
            mbps(self.available_bps)
        );
        let _ = writeln!(
            s,
            "datagrams sent {} / received {}",
            self.sent, self.received
        );
        s
    }
}

/// One link of the probe evaluation: what the emulator was told, what the probe found.
#[derive(Clone, Debug, Serialize)]
pub struct EvalRow {
    /// `5 Mb/s`, or the trace file's name.
    pub link: String,
    /// The true rate: the fixed rate, or the trace's mean rate (bit/s).
    pub true_bps: f64,
    /// Trace only: its mean rate over the probe's time window (bit/s).
    pub window_bps: Option<f64>,
    /// Cross traffic sent through the link during the probe (bit/s, IP layer).
    pub cross_bps: f64,
    /// What the probe reported.
    pub report: ProbeReport,
}

/// What the evaluation measures.
#[derive(Clone, Debug)]
pub struct EvalOptions {
    /// Fixed rates, bit/s.
    pub rates_bps: Vec<f64>,
    /// Mahimahi traces (each one link, applied to the probe's direction).
    pub traces: Vec<std::path::PathBuf>,
    /// The probe's options.
    pub probe: ProbeOptions,
    /// Fixed-rate links: UDP cross traffic through the link during the probe, as a
    /// fraction of its rate (0: none). The available bandwidth is then the rest.
    pub cross_fraction: f64,
}

/// The evaluation: one lab link per rate and per trace (the lab's emulator shapes the
/// client -> server direction, 1000-packet FIFO, no delay), a responder in the server
/// namespace (`<exe> probe --listen`), the prober in the client namespace. Needs root.
pub fn evaluate(exe: &std::path::Path, opts: &EvalOptions) -> Result<Vec<EvalRow>> {
    use crate::emu::{DirectionSpec, EmuLinkSpec, EmuSpec, RateSpec};
    use crate::netns::{Role, Topology};
    let n = opts.rates_bps.len() + opts.traces.len();
    if n == 0 {
        bail!("nothing to evaluate: give --rates or --trace");
    }
    let mut topo = Topology::create(n).context("building the probe evaluation's namespaces")?;
    let dir = std::env::temp_dir().join(format!("latebind-probe-eval-{}", topo.id));
    std::fs::create_dir_all(&dir)?;
    let _remove_dir = RemoveDir(dir.clone());
    let dirspec = |rate: RateSpec| DirectionSpec {
        rate,
        delay_ns: 0,
        jitter_ns: 0,
        loss: 0.0,
        queue_packets: 1000,
        outages_ns: Vec::new(),
        drop_in_flight_on_outage: false,
        seed: 1,
    };
    let mut truths = Vec::new();
    let mut links = Vec::new();
    for (i, l) in topo.links.iter().enumerate() {
        let (name, rate, truth, trace) = if i < opts.rates_bps.len() {
            let r = opts.rates_bps[i];
            (
                format!("{} Mb/s", r / 1e6),
                RateSpec::Fixed { bits_per_sec: r },
                r,
                None,
            )
        } else {
            let path = std::fs::canonicalize(&opts.traces[i - opts.rates_bps.len()]).with_context(
                || format!("trace {}", opts.traces[i - opts.rates_bps.len()].display()),
            )?;
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("trace {}", path.display()))?;
            let t = latebind_linkmodel::Trace::parse(&text)
                .with_context(|| format!("trace {}", path.display()))?;
            let name = path
                .file_name()
                .map_or("trace".into(), |n| n.to_string_lossy().into_owned());
            (name, RateSpec::Trace { path }, t.mean_rate_bps(), Some(t))
        };
        truths.push((name.clone(), truth, trace));
        links.push(EmuLinkSpec {
            name,
            client_if: l.emu_client_if.clone(),
            server_if: l.emu_server_if.clone(),
            up: dirspec(rate),
            down: dirspec(RateSpec::Fixed { bits_per_sec: 1e10 }),
        });
    }
    let base = sys::mono_ns() + 300_000_000;
    let spec = EmuSpec {
        base_ns: base,
        until_ns: None,
        spin_us: 200,
        links,
        stats_path: Some(dir.join("emu-stats.json")),
        log_path: Some(dir.join("emu.log")),
        log_frames: false,
        cpu_latency_qos: true,
        // The emulator is the link: keep CPU-bound work on the machine from delaying
        // its deliveries (as the lab runner does with --rt-priority).
        rt_priority: Some(60),
        warmup_ns: 0,
        window_ns: None,
    };
    let spec_path = dir.join("emu-spec.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&spec)?)?;
    let mut emu = topo.spawn(
        Role::Emu,
        "emulate",
        exe,
        &["emulate".as_ref(), "--spec".as_ref(), spec_path.as_os_str()],
        &dir.join("emu.out"),
    )?;
    let port = 47_001u16;
    let mut responder = topo.spawn(
        Role::Server,
        "probe responder",
        exe,
        &["probe", "--listen", &format!("0.0.0.0:{port}")],
        &dir.join("responder.out"),
    )?;
    // Both up and listening (the models start at `base`).
    std::thread::sleep(
        Duration::from_nanos(base.saturating_sub(sys::mono_ns())) + Duration::from_millis(100),
    );
    let mut rows = Vec::new();
    for (l, (name, truth, trace)) in topo.links.iter().zip(truths) {
        let bind = SocketAddr::from((l.client, 0));
        let peer = SocketAddr::from((l.server, port));
        let popts = opts.probe.clone();
        let cross_bps = if trace.is_none() {
            opts.cross_fraction * truth
        } else {
            0.0
        };
        let _cross = if cross_bps > 0.0 {
            let c = CrossTraffic::start(
                &topo.ns(Role::Client),
                SocketAddr::from((l.client, 0)),
                SocketAddr::from((l.server, port + 1)),
                cross_bps,
            )?;
            // Let the link settle into the cross traffic first.
            std::thread::sleep(Duration::from_millis(200));
            Some(c)
        } else {
            None
        };
        let start = sys::mono_ns();
        let report = sys::in_netns(&topo.ns(Role::Client), move || {
            probe(bind, peer, &popts).map_err(|e| io::Error::other(format!("{e:#}")))
        })
        .with_context(|| format!("probing {name}: responder log: {}", responder.log_tail()))?;
        let end = sys::mono_ns();
        let window_bps = trace
            .map(|t| trace_window_bps(&t, start.saturating_sub(base), end.saturating_sub(base)));
        rows.push(EvalRow {
            link: name,
            true_bps: truth,
            window_bps,
            cross_bps,
            report,
        });
    }
    let _ = responder.terminate(Duration::from_millis(300));
    let _ = emu.terminate(Duration::from_millis(500));
    topo.teardown()?;
    Ok(rows)
}

/// 1500-byte UDP datagrams at a fixed rate from a namespace (sequentially paced, so
/// with the jitter of an ordinary sender; SCHED_FIFO 55), until dropped.
struct CrossTraffic {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl CrossTraffic {
    fn start(ns: &str, bind: SocketAddr, to: SocketAddr, bps: f64) -> Result<Self> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (ns, stop2) = (ns.to_owned(), stop.clone());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let sock = sys::enter_netns(&ns).and_then(|()| UdpSocket::bind(bind));
            let sock = match sock {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            // Real time too, between the prober (50) and the emulator (60): an ordinary
            // thread would not run while those two spin on the 2 CPUs, and the cross
            // traffic would pause exactly during the probe's trains.
            let _ = sys::set_realtime(55);
            let payload = vec![0u8; 1500 - IP_UDP_HEADERS];
            let spacing = (1500.0 * 8.0 / bps * 1e9) as u64;
            let mut at = sys::mono_ns();
            while !stop2.load(Ordering::Relaxed) {
                at += spacing;
                latebind_io::dispatch::sleep_until(at);
                // Unconnected: ICMP port-unreachable answers are not reported here.
                if let Err(e) = sock.send_to(&payload, to) {
                    eprintln!("cross traffic: {e}");
                    break;
                }
            }
        });
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e).context("cross traffic socket"),
            Err(_) => bail!("the cross traffic thread died"),
        }
    }
}

impl Drop for CrossTraffic {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Removes a work directory on drop (every exit path of [`evaluate`]).
struct RemoveDir(std::path::PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Mean rate (bit/s) of a trace over `[from_ns, to_ns)` of trace time (the trace
/// repeats with its period), 1500 bytes per opportunity.
pub fn trace_window_bps(trace: &latebind_linkmodel::Trace, from_ns: u64, to_ns: u64) -> f64 {
    if to_ns <= from_ns {
        return 0.0;
    }
    let period = trace.period().as_millis().max(1) as u64;
    let (from_ms, to_ms) = (from_ns / 1_000_000, to_ns.div_ceil(1_000_000));
    let count: usize = (from_ms..to_ms)
        .map(|ms| {
            let m = ms % period;
            let ops = trace.opportunities_ms();
            ops.partition_point(|&o| o <= m) - ops.partition_point(|&o| o < m)
        })
        .sum();
    count as f64 * 1500.0 * 8.0 / ((to_ms - from_ms) as f64 / 1e3)
}

/// The evaluation as a markdown table: estimates and their error against the truth.
pub fn eval_table(rows: &[EvalRow]) -> String {
    let err = |est: Option<f64>, truth: f64| {
        est.map_or("—".into(), |e| {
            format!("{:+.1} %", 100.0 * (e - truth) / truth)
        })
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| link | true (Mb/s) | pairs (Mb/s) | error | train (Mb/s) | error | available (Mb/s) | true | error | received / sent |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let truth = match r.window_bps {
            Some(w) => format!("{:.2} (window {:.2})", r.true_bps / 1e6, w / 1e6),
            None => format!("{:.2}", r.true_bps / 1e6),
        };
        let t = r.window_bps.unwrap_or(r.true_bps);
        let avail = t - r.cross_bps;
        let _ = writeln!(
            s,
            "| {} | {truth} | {} | {} | {} | {} | {} | {:.2} | {} | {} / {} |",
            r.link,
            mbps(r.report.capacity_pairs_bps),
            err(r.report.capacity_pairs_bps, t),
            mbps(r.report.capacity_train_bps),
            err(r.report.capacity_train_bps, t),
            mbps(r.report.available_bps),
            avail / 1e6,
            err(r.report.available_bps, avail),
            r.report.received,
            r.report.sent
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(train: u32, seq: u32, ts_ns: u64) -> Record {
        Record { train, seq, ts_ns }
    }

    #[test]
    fn probe_payload_round_trips_and_has_the_size() {
        let p = probe_payload(9, 2, 77, 1500);
        assert_eq!(p.len(), 1500 - IP_UDP_HEADERS);
        assert_eq!(parse_probe(&p), Some((9, 2, 77)));
        assert_eq!(probe_payload(1, 1, 1, 10).len(), MIN_SIZE - IP_UDP_HEADERS);
        assert_eq!(parse_probe(b"LBPQ\0\0\0\0\0\0\0\0\0\0\0\0"), None);
    }

    #[test]
    fn reports_split_and_decode_back() {
        let records: Vec<Record> = (0..150).map(|i| rec(i % 3, i, u64::from(i) * 7)).collect();
        let ds = encode_reports(5, &records);
        assert_eq!(ds.len(), 3);
        let mut back = Vec::new();
        for d in &ds {
            let (s, offset, total, r) = decode_report(d).unwrap();
            assert_eq!((s, total), (5, 150));
            assert_eq!(offset as usize, back.len());
            back.extend(r);
        }
        assert_eq!(back, records);
        // An empty session still answers (total 0), and truncation is refused.
        let empty = encode_reports(6, &[]);
        assert_eq!(decode_report(&empty[0]).unwrap().2, 0);
        assert_eq!(decode_report(&ds[0][..40]), None);
    }

    #[test]
    fn pairs_give_size_over_median_dispersion() {
        // 1500 B at 20 Mb/s: 600 µs dispersion; one pair squeezed, one stretched.
        let mut r = Vec::new();
        for (k, d) in [600_000u64, 600_000, 100_000, 600_000, 2_000_000]
            .iter()
            .enumerate()
        {
            let t0 = k as u64 * 10_000_000;
            r.push(rec(TRAIN_PAIRS, 2 * k as u32, t0));
            r.push(rec(TRAIN_PAIRS, 2 * k as u32 + 1, t0 + d));
        }
        // A lone first member and another train's packets do not count.
        r.push(rec(TRAIN_PAIRS, 20, 99));
        r.push(rec(TRAIN_BURST, 1, 5));
        let c = capacity_from_pairs(&r, 1500).unwrap();
        assert!((c - 20e6).abs() < 1.0, "{c}");
        assert_eq!(capacity_from_pairs(&[rec(TRAIN_PAIRS, 0, 1)], 1500), None);
    }

    #[test]
    fn train_rate_counts_received_datagrams_over_their_span() {
        // 11 datagrams of 1000 B, 80 µs apart: 100 Mb/s; order does not matter.
        let mut r: Vec<Record> = (0..11)
            .map(|i| rec(3, i, 1_000 + u64::from(i) * 80_000))
            .collect();
        r.swap(0, 5);
        let rate = train_rate(&r, 3, 1000).unwrap();
        assert!((rate - 100e6).abs() < 1.0, "{rate}");
        assert_eq!(train_rate(&r[..1], 3, 1000), None);
        assert_eq!(train_rate(&r, 4, 1000), None);
    }

    #[test]
    fn available_bandwidth_inverts_fifo_sharing_with_cross_traffic() {
        // A 100 Mb/s FIFO carrying 40 Mb/s of cross traffic: trains up to 60 Mb/s keep
        // up; faster ones get C r / (r + 40).
        let fifo = |r: f64| if r <= 60e6 { r } else { 100e6 * r / (r + 40e6) };
        let trains: Vec<(f64, Option<f64>)> = [30e6, 50e6, 70e6, 90e6, 110e6]
            .iter()
            .map(|&r| (r, Some(fifo(r))))
            .collect();
        let a = available_bandwidth(&trains, 100e6, 0.95).unwrap();
        assert!((a - 60e6).abs() < 1.0, "{a}");
        // Nothing fell behind: the fastest train is the answer (a lower bound).
        let idle = [(30e6, Some(30e6)), (50e6, Some(49.9e6)), (40e6, None)];
        assert_eq!(available_bandwidth(&idle, 100e6, 0.95), Some(50e6));
        // A train that lost everything says nothing; a nonsense output is clamped.
        assert_eq!(available_bandwidth(&[(10e6, None)], 100e6, 0.95), None);
        assert_eq!(
            available_bandwidth(&[(90e6, Some(1e6))], 100e6, 0.95),
            Some(0.0)
        );
    }
}
