//! The lab's traffic tool: `<exe> traffic send|recv ...`, real sockets, one process per
//! flow end.
//!
//! - **UDP** (`udp-cbr`, `udp-burst`, `urgent`): each datagram carries the simulator's
//!   24-byte probe payload (`LBT1`, flow index, sequence number, `CLOCK_MONOTONIC` send
//!   time in ns) padded to `packet_bytes` of IP packet. `CLOCK_MONOTONIC` is shared by
//!   all network namespaces, so the receiver's one-way delay is its arrival time minus
//!   the payload's send time. The arrival time is the kernel's receive timestamp
//!   (`SO_TIMESTAMPNS`, converted to the monotonic clock), so the receiver's own
//!   wake-up delay is not counted; user-space time is used if the kernel gives none.
//!   The sender sets the DSCP with `IP_TOS` (urgent flows default to EF, 46) and
//!   `IP_RECVERR`, so a full qdisc shows up as `ENOBUFS` on `sendto` (counted as a
//!   sender-side drop; without `IP_RECVERR` Linux hides it), and a send buffer large
//!   enough that only the qdisc limits a burst.
//! - **TCP** (`tcp-bulk`): the sender writes 1400-byte records whose first 8 bytes are
//!   the `CLOCK_MONOTONIC` time (ns, big endian) at which the record's first byte was
//!   handed to the kernel, with `TCP_NOTSENT_LOWAT` small so records do not wait in the
//!   socket buffer, and `TCP_CONGESTION` set per socket (a namespace inherits the
//!   host's default and cannot change it). With `--rate-mbps` the application is the
//!   limit, as in the simulator: record `k` is offered at `start + k * 1400 * 8 / rate`
//!   (payload bits) and written as soon as the socket takes it. The receiver measures
//!   each record's latency when its last byte is read, and the longest time without new
//!   data.
//!
//! - **QUIC** (`quic-bulk`): the same records on one stream of a real QUIC connection
//!   (quinn), to or from the server's UDP port 443 ([`quic`]).
//!
//! - **MPTCP** (`--mptcp`, both ends): the TCP flow over sockets of protocol
//!   `IPPROTO_MPTCP`; the TCP counters are summed over the subflows (`MPTCP_TCPINFO`).
//!   The end that opens the connection is the client's: a sender can `--listen` on
//!   `--bind` and a receiver `--connect` to it (a downlink flow in mode mptcp).
//!
//! Each end writes a JSON summary at exit ([`SendSummary`], [`RecvSummary`]); the
//! receiver's has the simulator's per-flow fields plus the bytes received per 10 ms, and
//! [`merge`] combines both into a report row. With `--cuts-ns` both ends also measure
//! what the flow saw around each cut with the simulator's own
//! [`CutTracker`](latebind_sim::cuts::CutTracker) (the receiver: stalls, data again,
//! deliveries by send time; the UDP sender: datagrams sent per loss window), and
//! [`cut_stats`] combines them for `latebind_sim::cuts::cut_reports`. Times on the command line are seconds relative to `--base-ns` (default:
//! when the tool starts), the scenario clock of a lab run.

use std::collections::BTreeMap;
use std::io;
use std::mem;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use latebind_sim::cuts::{CutStats, CutTracker};
use latebind_sim::report::{FlowReport, LatencyReport};
use serde::{Deserialize, Serialize};

use crate::stats::{Percentiles, round3};
use crate::sys;

mod quic;

/// Magic at the start of every UDP probe payload (the simulator's format).
pub const PROBE_MAGIC: &[u8; 4] = b"LBT1";
/// Probe payload: magic (4), flow index (2), reserved (2), seq (8), send time ns (8).
pub const PROBE_LEN: usize = 24;
/// IPv4 + UDP header bytes.
pub const UDP_OVERHEAD: usize = 28;
/// Smallest UDP packet the tool sends (headers + probe).
pub const MIN_UDP_PACKET: usize = UDP_OVERHEAD + PROBE_LEN;
/// Size of one TCP record.
pub const RECORD_BYTES: usize = 1400;
/// `TCP_NOTSENT_LOWAT` of the TCP sender: a few records.
pub const NOTSENT_LOWAT: i32 = 4 * RECORD_BYTES as i32;

/// One probe's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Flow index.
    pub index: u16,
    /// Sequence number from 0.
    pub seq: u64,
    /// `CLOCK_MONOTONIC` at send, ns.
    pub send_ns: u64,
}

impl Probe {
    /// Writes the probe at the start of `payload` (at least [`PROBE_LEN`] bytes).
    pub fn encode(&self, payload: &mut [u8]) {
        let p = &mut payload[..PROBE_LEN];
        p[0..4].copy_from_slice(PROBE_MAGIC);
        p[4..6].copy_from_slice(&self.index.to_be_bytes());
        p[6..8].copy_from_slice(&[0, 0]);
        p[8..16].copy_from_slice(&self.seq.to_be_bytes());
        p[16..24].copy_from_slice(&self.send_ns.to_be_bytes());
    }

    /// Reads a probe from the start of a UDP payload.
    pub fn decode(payload: &[u8]) -> Option<Self> {
        let p = payload.get(..PROBE_LEN)?;
        if &p[0..4] != PROBE_MAGIC {
            return None;
        }
        Some(Self {
            index: u16::from_be_bytes([p[4], p[5]]),
            seq: u64::from_be_bytes(p[8..16].try_into().ok()?),
            send_ns: u64::from_be_bytes(p[16..24].try_into().ok()?),
        })
    }
}

/// Splits a TCP byte stream into [`RECORD_BYTES`] records and yields each record's
/// timestamp when its last byte has arrived.
#[derive(Clone, Debug, Default)]
pub struct RecordParser {
    /// Bytes of the current record seen so far.
    pos: usize,
    ts: [u8; 8],
    /// Records completed.
    pub records: u64,
    /// Timestamp of the first record (known once its first 8 bytes arrived).
    pub first_ts: Option<u64>,
}

impl RecordParser {
    /// Feeds bytes in stream order; calls `done(ts)` for each completed record.
    pub fn feed(&mut self, mut data: &[u8], mut done: impl FnMut(u64)) {
        while !data.is_empty() {
            if self.pos < 8 {
                let take = (8 - self.pos).min(data.len());
                self.ts[self.pos..self.pos + take].copy_from_slice(&data[..take]);
                self.pos += take;
                data = &data[take..];
                if self.pos == 8 && self.first_ts.is_none() {
                    self.first_ts = Some(u64::from_be_bytes(self.ts));
                }
                continue;
            }
            let take = (RECORD_BYTES - self.pos).min(data.len());
            self.pos += take;
            data = &data[take..];
            if self.pos == RECORD_BYTES {
                self.pos = 0;
                self.records += 1;
                done(u64::from_be_bytes(self.ts));
            }
        }
    }
}

/// A flow kind the tool sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// UDP at a constant bit rate.
    UdpCbr,
    /// `count` UDP packets back to back at the start.
    UdpBurst,
    /// `count` small UDP packets at the start (DSCP EF by default).
    Urgent,
    /// A TCP connection sending as fast as TCP allows.
    TcpBulk,
    /// A QUIC connection (quinn) to or from UDP port 443 sending on one stream as fast
    /// as its congestion control allows ([`quic`]).
    QuicBulk,
}

impl Kind {
    /// The scenario's name of the kind.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UdpCbr => "udp-cbr",
            Self::UdpBurst => "udp-burst",
            Self::Urgent => "urgent",
            Self::TcpBulk => "tcp-bulk",
            Self::QuicBulk => "quic-bulk",
        }
    }

    /// Every kind the lab runs.
    pub const ALL: [Self; 5] = [
        Self::UdpCbr,
        Self::UdpBurst,
        Self::Urgent,
        Self::TcpBulk,
        Self::QuicBulk,
    ];

    /// Parses a scenario kind name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// A stream of records (TCP or QUIC) rather than datagrams of their own.
    pub fn is_stream(self) -> bool {
        matches!(self, Self::TcpBulk | Self::QuicBulk)
    }

    /// Whether a summary's kind name is [`Self::is_stream`]'s.
    fn names_stream(name: &str) -> bool {
        Self::parse(name).is_some_and(Self::is_stream)
    }
}

/// Options both ends share.
#[derive(Clone, Debug, clap::Args)]
pub struct FlowArgs {
    /// Flow name (copied into the summary).
    #[arg(long, default_value = "flow")]
    pub name: String,
    /// Flow kind.
    #[arg(long, value_enum)]
    pub kind: Kind,
    /// Flow index (carried in UDP probes; the receiver ignores other indexes).
    #[arg(long, default_value_t = 0)]
    pub index: u16,
    /// `CLOCK_MONOTONIC` ns of time 0 (default: when the tool starts).
    #[arg(long)]
    pub base_ns: Option<u64>,
    /// When the flow starts, s after the base.
    #[arg(long, default_value_t = 0.0)]
    pub start_s: f64,
    /// When the flow stops sending, s after the base (udp-cbr, tcp-bulk).
    #[arg(long)]
    pub stop_s: Option<f64>,
    /// When the tool exits and writes its summary, s after the base (default: stop + 2 s,
    /// or start + 5 s).
    #[arg(long)]
    pub until_s: Option<f64>,
    /// Write the JSON summary here (default: stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run in `SCHED_FIFO` at this priority (1-99), so CPU-bound processes on the
    /// machine do not stretch a burst, delay a scheduled send or a TCP read.
    #[arg(long)]
    pub rt_priority: Option<i32>,
    /// TCP: multipath TCP (sockets of protocol `IPPROTO_MPTCP`, 262); the summary's TCP
    /// counters are the sums over the connection's subflows.
    #[arg(long)]
    pub mptcp: bool,
    /// The scenario's cuts (outage starts of every link), ns after the base, comma
    /// separated: the summaries report what the flow saw around each one in its active
    /// period (`latebind_sim::cuts`).
    #[arg(long, value_delimiter = ',')]
    pub cuts_ns: Vec<u64>,
}

/// `traffic send`.
#[derive(Clone, Debug, clap::Args)]
pub struct SendArgs {
    #[command(flatten)]
    /// Shared options.
    pub flow: FlowArgs,
    /// Local address and port to send from (e.g. the application address).
    #[arg(long)]
    pub bind: Option<SocketAddrV4>,
    /// Destination address and port (not with `--listen`).
    #[arg(long, required_unless_present = "listen")]
    pub to: Option<SocketAddrV4>,
    /// TCP: listen on `--bind` and send on the first connection accepted, instead of
    /// connecting to `--to` (the receiver connects with `--connect`).
    #[arg(long, requires = "bind", conflicts_with = "to")]
    pub listen: bool,
    /// udp-cbr: rate, Mbit/s of whole IP packets. tcp-bulk: the application's write
    /// rate, Mbit/s of payload (default: as fast as TCP takes it).
    #[arg(long)]
    pub rate_mbps: Option<f64>,
    /// UDP: IP packet size (default 1400, urgent 100); TCP: IP MTU (MSS = this - 40).
    #[arg(long)]
    pub packet_bytes: Option<usize>,
    /// udp-burst / urgent: packets (default 1000 / 1).
    #[arg(long)]
    pub count: Option<u64>,
    /// DSCP (default 0, urgent 46).
    #[arg(long)]
    pub dscp: Option<u8>,
    /// TCP congestion control (`TCP_CONGESTION`, e.g. cubic, bbr).
    #[arg(long)]
    pub cc: Option<String>,
    /// Spin this long (µs) before each scheduled send instead of sleeping to it.
    #[arg(long, default_value_t = 0)]
    pub spin_us: u64,
}

/// `traffic recv`.
#[derive(Clone, Debug, clap::Args)]
pub struct RecvArgs {
    #[command(flatten)]
    /// Shared options.
    pub flow: FlowArgs,
    /// Address and port to listen on.
    #[arg(long)]
    pub bind: SocketAddrV4,
    /// TCP: IP MTU of the listener (MSS = this - 40).
    #[arg(long)]
    pub packet_bytes: Option<usize>,
    /// TCP: connect from `--bind` to this sender (started with `--listen`) at the
    /// flow's start, instead of listening.
    #[arg(long)]
    pub connect: Option<SocketAddrV4>,
}

/// `<exe> traffic ...`.
#[derive(Clone, Debug, clap::Subcommand)]
pub enum TrafficCmd {
    /// Send one flow.
    Send(SendArgs),
    /// Receive one flow and summarise it.
    Recv(RecvArgs),
}

/// TCP counters of the sending socket (`TCP_INFO`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct TcpSendInfo {
    /// Congestion control in use.
    pub cc: String,
    /// Data segments sent, retransmissions included (`tcpi_data_segs_out`).
    pub data_segs_out: u64,
    /// Segments retransmitted (`tcpi_total_retrans`).
    pub total_retrans: u64,
    /// Bytes retransmitted (`tcpi_bytes_retrans`).
    pub bytes_retrans: u64,
    /// Segments the receiver reported as duplicates (`tcpi_dsack_dups`).
    pub dsack_dups: u64,
    /// Bytes acknowledged (`tcpi_bytes_acked`).
    pub bytes_acked: u64,
    /// Smoothed RTT at the end, ms (MPTCP: of the first subflow).
    pub srtt_ms: f64,
    /// MPTCP: subflows at the end (the counters above are their sums); 0 for TCP.
    #[serde(default)]
    pub subflows: u32,
}

/// The sender's summary.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct SendSummary {
    /// Flow name.
    pub name: String,
    /// Flow kind.
    pub kind: String,
    /// UDP: datagrams the application tried to send (enqueue drops included).
    /// TCP: records written.
    pub sent: u64,
    /// UDP: datagrams refused by a full qdisc (`ENOBUFS`): sender-side drops.
    pub enobufs: u64,
    /// Other send errors, by error name.
    pub errors: BTreeMap<String, u64>,
    /// Application bytes handed to the kernel.
    pub bytes: u64,
    /// `CLOCK_MONOTONIC` of the first and last send, ns.
    pub first_send_ns: u64,
    /// See `first_send_ns`.
    pub last_send_ns: u64,
    /// How late sends were against their schedule (udp-cbr), µs.
    pub schedule_late_us: Percentiles,
    /// TCP socket counters.
    pub tcp: Option<TcpSendInfo>,
    /// UDP: datagrams sent (tried) in each cut's loss window, in the order of the
    /// receiver's [`RecvSummary::cuts`].
    #[serde(default)]
    pub cut_sent: Vec<u64>,
}

/// The receiver's summary: the simulator's per-flow fields (computed as the simulator
/// computes them) plus what only the receiver knows.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct RecvSummary {
    /// Flow name.
    pub name: String,
    /// Flow kind.
    pub kind: String,
    /// UDP: highest sequence number seen + 1 (a lower bound: the sender's summary has
    /// the real count). TCP: data segments received.
    pub sent: u64,
    /// UDP: unique datagrams. TCP: data segments received (`tcpi_data_segs_in`).
    pub delivered: u64,
    /// `sent - delivered` (TCP: 0; retransmissions are the sender's figure).
    pub lost: u64,
    /// UDP: datagrams whose sequence number had been seen.
    pub duplicates: u64,
    /// One-way latency (UDP: per datagram; TCP: per record, write to read), ms.
    pub latency_ms: Percentiles,
    /// Longest time without new data while the flow was active, ms.
    pub max_gap_ms: f64,
    /// Goodput, Mbit/s (UDP: IP bytes; TCP: application bytes by `stop`).
    pub goodput_mbps: f64,
    /// Application bytes received (UDP: UDP payload of unique datagrams).
    pub bytes_delivered: u64,
    /// `kernel` (receive timestamps) or `user` (clock after the read).
    pub latency_clock: String,
    /// TCP: records completed.
    pub records: u64,
    /// First and last arrival, s after the base (0 if none).
    pub first_arrival_s: f64,
    /// See `first_arrival_s`.
    pub last_arrival_s: f64,
    /// Application bytes received per 10 ms of scenario time (entry k covers
    /// `[0.01 k, 0.01 (k + 1))` s after the base; UDP: payload of unique datagrams), so
    /// a stall and the recovery after it can be read off.
    #[serde(default)]
    pub bytes_per_10ms: Vec<u64>,
    /// What the application saw around each cut of `--cuts-ns` in the flow's active
    /// period, in time order.
    #[serde(default)]
    pub cuts: Vec<CutSummary>,
}

/// A receiver's [`CutStats`] in its JSON summary (ns, so the runner gets them back
/// exactly).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct CutSummary {
    /// The cut, ns after the base.
    pub at_ns: u64,
    /// [`CutStats::stall`], ns.
    pub stall_ns: u64,
    /// [`CutStats::data_again`], ns.
    pub data_again_ns: Option<u64>,
    /// UDP: datagrams sent in the cut's loss window that arrived.
    pub delivered: u64,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn cut_summaries(t: &CutTracker) -> Vec<CutSummary> {
    t.stats()
        .iter()
        .map(|c| CutSummary {
            at_ns: ns(c.at),
            stall_ns: ns(c.stall),
            data_again_ns: c.data_again.map(ns),
            delivered: c.delivered,
        })
        .collect()
}

/// Both ends' figures around the cuts: one [`CutStats`] per receiver cut, and whether
/// the loss per cut is known (a UDP flow whose sender counted its sends per window).
pub fn cut_stats(send: Option<&SendSummary>, recv: &RecvSummary) -> (Vec<CutStats>, bool) {
    let is_udp = !Kind::names_stream(&recv.kind);
    let sent = send
        .map(|s| s.cut_sent.as_slice())
        .filter(|s| is_udp && s.len() == recv.cuts.len());
    let d = std::time::Duration::from_nanos;
    let stats = recv
        .cuts
        .iter()
        .enumerate()
        .map(|(k, c)| CutStats {
            at: d(c.at_ns),
            stall: d(c.stall_ns),
            data_again: c.data_again_ns.map(d),
            sent: sent.map_or(0, |s| s[k]),
            delivered: c.delivered,
        })
        .collect();
    (stats, sent.is_some())
}

/// Width of a [`RecvSummary::bytes_per_10ms`] bin, ns.
pub const BIN_NS: u64 = 10_000_000;

/// Adds `bytes` received at `at` (ns of `CLOCK_MONOTONIC`) to the 10 ms bins.
fn add_to_bins(bins: &mut Vec<u64>, times: &Times, at: u64, bytes: u64) {
    let k = (at.saturating_sub(times.base) / BIN_NS) as usize;
    if k > 1_000_000 {
        return;
    }
    if bins.len() <= k {
        bins.resize(k + 1, 0);
    }
    bins[k] += bytes;
}

impl RecvSummary {
    /// Application bytes received in `[from_s, to_s)` of scenario time (10 ms bins:
    /// those that start in the interval).
    pub fn bytes_between(&self, from_s: f64, to_s: f64) -> u64 {
        let bin_s = BIN_NS as f64 / 1e9;
        self.bytes_per_10ms
            .iter()
            .enumerate()
            .filter(|(k, _)| {
                let t = *k as f64 * bin_s;
                t + 1e-9 >= from_s && t + 1e-9 < to_s
            })
            .map(|(_, b)| b)
            .sum()
    }
}

/// Combines both ends' summaries into the simulator's report row.
pub fn merge(send: Option<&SendSummary>, recv: &RecvSummary) -> FlowReport {
    let is_tcp = Kind::names_stream(&recv.kind);
    let lat = recv.latency_ms.rounded();
    let latency_ms = LatencyReport {
        p50: lat.p50,
        p95: lat.p95,
        p99: lat.p99,
        max: lat.max,
    };
    let (sent, lost, duplicates, retransmitted) = match (send, is_tcp) {
        (Some(s), true) => {
            let t = s.tcp.clone().unwrap_or_default();
            (
                t.data_segs_out,
                t.total_retrans,
                t.dsack_dups,
                t.total_retrans,
            )
        }
        (Some(s), false) => (
            s.sent,
            s.sent.saturating_sub(recv.delivered),
            recv.duplicates,
            0,
        ),
        (None, _) => (recv.sent, recv.lost, recv.duplicates, 0),
    };
    FlowReport {
        name: recv.name.clone(),
        kind: recv.kind.clone(),
        sent,
        delivered: recv.delivered,
        lost,
        duplicates,
        latency_ms,
        max_gap_ms: round3(recv.max_gap_ms),
        goodput_mbps: round3(recv.goodput_mbps),
        retransmitted,
        bytes_delivered: recv.bytes_delivered,
    }
}

/// Runs `traffic send` or `traffic recv`.
pub fn traffic_main(cmd: &TrafficCmd) -> Result<()> {
    sys::install_stop_flag();
    sys::set_timer_slack(1);
    let flow = match cmd {
        TrafficCmd::Send(a) => &a.flow,
        TrafficCmd::Recv(a) => &a.flow,
    };
    if let Some(p) = flow.rt_priority {
        sys::set_realtime(p).with_context(|| format!("SCHED_FIFO priority {p}"))?;
    }
    let (json, out) = match cmd {
        TrafficCmd::Send(a) => (serde_json::to_string_pretty(&send(a)?)?, a.flow.out.clone()),
        TrafficCmd::Recv(a) => (serde_json::to_string_pretty(&recv(a)?)?, a.flow.out.clone()),
    };
    match out {
        Some(p) => std::fs::write(&p, json + "\n").with_context(|| format!("{}", p.display())),
        None => {
            println!("{json}");
            Ok(())
        }
    }
}

/// Absolute times of a flow, ns of `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug)]
struct Times {
    base: u64,
    start: u64,
    stop: u64,
    until: u64,
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9).round() as u64
}

impl Times {
    fn of(f: &FlowArgs) -> Self {
        let base = f.base_ns.unwrap_or_else(sys::mono_ns);
        let start = base + secs_ns(f.start_s);
        let stop = f.stop_s.map_or(u64::MAX, |s| base + secs_ns(s)).max(start);
        let until = match (f.until_s, f.stop_s) {
            (Some(u), _) => base + secs_ns(u),
            (None, Some(s)) => base + secs_ns(s + 2.0),
            (None, None) => start + 5_000_000_000,
        };
        Self {
            base,
            start,
            stop,
            until,
        }
    }

    fn rel_s(&self, t: u64) -> f64 {
        t.saturating_sub(self.base) as f64 / 1e9
    }

    /// `t` (ns of `CLOCK_MONOTONIC`) in scenario time.
    fn rel(&self, t: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(t.saturating_sub(self.base))
    }

    /// A tracker of the flow's cuts (`--cuts-ns`) over its active period.
    fn cut_tracker(&self, f: &FlowArgs) -> CutTracker {
        let cuts: Vec<_> = f
            .cuts_ns
            .iter()
            .map(|&c| std::time::Duration::from_nanos(c))
            .collect();
        CutTracker::new(latebind_sim::cuts::windows(
            &cuts,
            self.rel(self.start),
            self.rel(self.stop.min(self.until)),
        ))
    }
}

fn errno_name(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOBUFS) => "ENOBUFS".into(),
        Some(libc::ENETUNREACH) => "ENETUNREACH".into(),
        Some(libc::ENETDOWN) => "ENETDOWN".into(),
        Some(libc::EHOSTUNREACH) => "EHOSTUNREACH".into(),
        Some(libc::ECONNREFUSED) => "ECONNREFUSED".into(),
        Some(libc::EPERM) => "EPERM".into(),
        Some(libc::EMSGSIZE) => "EMSGSIZE".into(),
        Some(n) => format!("errno {n}"),
        None => e.to_string(),
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is POD.
    let mut sa: libc::sockaddr_in = unsafe { mem::zeroed() };
    sa.sin_family = libc::AF_INET as u16;
    sa.sin_port = a.port().to_be();
    sa.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    sa
}

fn bind(fd: RawFd, a: SocketAddrV4) -> Result<()> {
    let sa = sockaddr(a);
    sys::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, &1i32)?;
    // SAFETY: valid sockaddr_in of its size.
    sys::cvt(unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as u32,
        )
    })
    .with_context(|| format!("bind {a}"))?;
    Ok(())
}

fn connect(fd: RawFd, a: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr(a);
    // SAFETY: valid sockaddr_in of its size.
    sys::cvt(unsafe {
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            size_of::<libc::sockaddr_in>() as u32,
        )
    })
    .map(drop)
}

fn set_buffer(fd: RawFd, force: libc::c_int, plain: libc::c_int, bytes: i32) -> Result<()> {
    if sys::setsockopt(fd, libc::SOL_SOCKET, force, &bytes).is_err() {
        sys::setsockopt(fd, libc::SOL_SOCKET, plain, &bytes)?;
    }
    Ok(())
}

fn default_packet_bytes(kind: Kind) -> usize {
    if kind == Kind::Urgent { 100 } else { 1400 }
}

/// `traffic send`.
pub fn send(a: &SendArgs) -> Result<SendSummary> {
    let times = Times::of(&a.flow);
    let kind = a.flow.kind;
    let mut summary = SendSummary {
        name: a.flow.name.clone(),
        kind: kind.as_str().into(),
        ..SendSummary::default()
    };
    match kind {
        Kind::TcpBulk => send_tcp(a, times, &mut summary)?,
        Kind::QuicBulk => quic::send(a, times, &mut summary)?,
        Kind::UdpCbr | Kind::UdpBurst | Kind::Urgent => send_udp(a, times, &mut summary)?,
    }
    Ok(summary)
}

fn send_udp(a: &SendArgs, times: Times, s: &mut SendSummary) -> Result<()> {
    let kind = a.flow.kind;
    let packet_bytes = a
        .packet_bytes
        .unwrap_or(default_packet_bytes(kind))
        .clamp(MIN_UDP_PACKET, 65_535);
    let dscp = a.dscp.unwrap_or(if kind == Kind::Urgent { 46 } else { 0 });
    let sock = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
    let fd = sock.as_raw_fd();
    if let Some(b) = a.bind {
        bind(fd, b)?;
    }
    sys::setsockopt(fd, libc::IPPROTO_IP, libc::IP_TOS, &(i32::from(dscp) << 2))?;
    sys::setsockopt(fd, libc::IPPROTO_IP, libc::IP_RECVERR, &1i32)?;
    // Only the qdisc may limit a burst: a send buffer holding it all.
    set_buffer(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, 64 << 20)?;
    // Connected: the route is looked up once, not per datagram (a burst enters the
    // qdisc faster); Linux re-resolves it when the routing table changes.
    let to = a.to.context("UDP senders need --to")?;
    connect(fd, to).with_context(|| format!("connect {to}"))?;
    let mut payload = vec![0u8; packet_bytes - UDP_OVERHEAD];
    let mut seq = 0u64;
    let mut late_us = Vec::new();
    let mut cuts = times.cut_tracker(&a.flow);
    let mut send_one = |s: &mut SendSummary, seq: u64| {
        let now = sys::mono_ns();
        cuts.on_sent(times.rel(now));
        Probe {
            index: a.flow.index,
            seq,
            send_ns: now,
        }
        .encode(&mut payload);
        // SAFETY: sends from a valid buffer on a connected socket.
        let r = unsafe { libc::send(fd, payload.as_ptr().cast(), payload.len(), 0) };
        if s.sent == 0 {
            s.first_send_ns = now;
        }
        s.last_send_ns = now;
        s.sent += 1;
        match sys::cvt_size(r) {
            Ok(n) => s.bytes += n as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => s.enobufs += 1,
            Err(e) => {
                *s.errors.entry(errno_name(&e)).or_default() += 1;
                drain_errqueue(fd);
            }
        }
    };
    match kind {
        Kind::UdpCbr => {
            let rate = a.rate_mbps.context("udp-cbr needs --rate-mbps")? * 1e6;
            let interval = packet_bytes as f64 * 8.0 / rate * 1e9;
            if !(interval.is_finite() && interval >= 1.0) {
                bail!("--rate-mbps {}: expected a rate above 0", rate / 1e6);
            }
            let interval = interval.round() as u64;
            let spin = a.spin_us * 1000;
            loop {
                let due = times.start + seq * interval;
                if due >= times.stop || due >= times.until || sys::stop_requested() {
                    break;
                }
                sys::sleep_until(due, spin);
                if sys::stop_requested() {
                    break;
                }
                late_us.push(sys::mono_ns().saturating_sub(due) as f64 / 1e3);
                send_one(s, seq);
                seq += 1;
            }
        }
        Kind::UdpBurst | Kind::Urgent => {
            let default = if kind == Kind::Urgent { 1 } else { 1000 };
            let count = a.count.unwrap_or(default).max(1);
            sys::sleep_until(times.start, a.spin_us * 1000);
            send_burst(fd, a.flow.index, packet_bytes, count, s, &mut |now| {
                cuts.on_sent(times.rel(now));
            });
        }
        Kind::TcpBulk | Kind::QuicBulk => unreachable!("checked by the caller"),
    }
    s.schedule_late_us = Percentiles::of(&late_us).rounded();
    s.cut_sent = cuts.stats().iter().map(|c| c.sent).collect();
    drain_errqueue(fd);
    Ok(())
}

/// Datagrams per `sendmmsg` call of a burst.
const BURST_BATCH: usize = 64;

/// Sends `count` probes back to back with `sendmmsg`, so that a burst enters the
/// qdisc within about a microsecond per packet (the simulator enqueues it at one
/// instant). Each batch is stamped with the time just before its call. Every datagram
/// is tried once: `sendmmsg` stops at the first failure and returns how many went
/// out without saying why the next one failed; that one is counted as a full qdisc
/// (`ENOBUFS`, the only failure expected mid-burst on this socket) and the burst goes
/// on after it. `on_sent(send time)` is called for every datagram tried.
fn send_burst(
    fd: RawFd,
    index: u16,
    packet_bytes: usize,
    count: u64,
    s: &mut SendSummary,
    on_sent: &mut dyn FnMut(u64),
) {
    let len = packet_bytes - UDP_OVERHEAD;
    let mut bufs = vec![0u8; len * BURST_BATCH];
    let mut seq = 0u64;
    while seq < count && !sys::stop_requested() {
        let n = (count - seq).min(BURST_BATCH as u64) as usize;
        let now = sys::mono_ns();
        for _ in 0..n {
            on_sent(now);
        }
        for (i, chunk) in bufs.chunks_mut(len).take(n).enumerate() {
            Probe {
                index,
                seq: seq + i as u64,
                send_ns: now,
            }
            .encode(chunk);
        }
        let mut iovs: Vec<libc::iovec> = bufs
            .chunks_mut(len)
            .take(n)
            .map(|c| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: c.len(),
            })
            .collect();
        // SAFETY: mmsghdr is POD; every pointer refers to `iovs` or `bufs`, both
        // alive across the call (the socket is connected: no address).
        let mut msgs: Vec<libc::mmsghdr> = iovs
            .iter_mut()
            .map(|iov| {
                let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
                m.msg_hdr.msg_iov = iov;
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        let mut done = 0usize;
        while done < n {
            // SAFETY: `msgs[done..]` are valid mmsghdrs (see above).
            let r = unsafe { libc::sendmmsg(fd, msgs[done..].as_mut_ptr(), (n - done) as u32, 0) };
            if s.sent == 0 {
                s.first_send_ns = now;
            }
            s.last_send_ns = sys::mono_ns();
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                if e.raw_os_error() == Some(libc::ENOBUFS) {
                    s.enobufs += 1;
                } else {
                    *s.errors.entry(errno_name(&e)).or_default() += 1;
                }
                s.sent += 1;
                done += 1;
                continue;
            }
            let k = r as usize;
            s.sent += k as u64;
            s.bytes += (k * len) as u64;
            done += k;
            if done < n {
                // Stopped at a failure it does not report: see the function's docs.
                s.enobufs += 1;
                s.sent += 1;
                done += 1;
            }
        }
        seq += n as u64;
    }
}

/// Reads and discards `IP_RECVERR` error-queue entries (ICMP errors).
fn drain_errqueue(fd: RawFd) {
    let mut buf = [0u8; 256];
    let mut ctrl = [0u64; 64];
    loop {
        // SAFETY: msghdr over local buffers.
        let n = unsafe {
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let mut msg: libc::msghdr = mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = ctrl.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&ctrl);
            libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT)
        };
        if n < 0 {
            break;
        }
    }
}

fn tcp_info(fd: RawFd) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is POD.
    let mut info: libc::tcp_info = unsafe { mem::zeroed() };
    sys::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, &mut info).ok()?;
    Some(info)
}

/// `IPPROTO_MPTCP`: the protocol of a multipath TCP socket.
pub const IPPROTO_MPTCP: libc::c_int = 262;
/// `SOL_MPTCP`.
const SOL_MPTCP: libc::c_int = 284;
/// `MPTCP_TCPINFO`: the `tcp_info` of every subflow (linux/mptcp.h).
const MPTCP_TCPINFO: libc::c_int = 2;

/// The protocol argument of `socket()` for a TCP flow.
fn tcp_protocol(mptcp: bool) -> libc::c_int {
    if mptcp { IPPROTO_MPTCP } else { 0 }
}

/// The `tcp_info` of every current subflow of an MPTCP socket (`MPTCP_TCPINFO`: a
/// `struct mptcp_subflow_data` header of 16 bytes, then one record per subflow of the
/// size both sides agree on).
fn mptcp_subflow_infos(fd: RawFd) -> io::Result<Vec<libc::tcp_info>> {
    const MAX: usize = 16;
    const HDR: usize = 16;
    let elem = size_of::<libc::tcp_info>();
    let mut buf = vec![0u64; (HDR + elem * MAX).div_ceil(8)];
    let header: [u32; 4] = [HDR as u32, 0, 0, elem as u32];
    // SAFETY: the buffer has room for the 16-byte header; both are POD.
    unsafe {
        std::ptr::copy_nonoverlapping(header.as_ptr().cast::<u8>(), buf.as_mut_ptr().cast(), HDR)
    };
    let mut len = (buf.len() * 8) as libc::socklen_t;
    // SAFETY: `buf` has `len` writable bytes.
    sys::cvt(unsafe {
        libc::getsockopt(
            fd,
            SOL_MPTCP,
            MPTCP_TCPINFO,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    })?;
    // SAFETY: u64s viewed as bytes.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), buf.len() * 8) };
    let word = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let (num, size_user) = (word(4) as usize, word(12) as usize);
    if size_user == 0 {
        return Ok(Vec::new());
    }
    let copied = (len as usize).saturating_sub(HDR) / size_user;
    let n = num.min(MAX).min(copied);
    let take = size_user.min(elem);
    Ok((0..n)
        .map(|k| {
            // SAFETY: tcp_info is POD; `take` bytes of a record fit in it.
            let mut info: libc::tcp_info = unsafe { mem::zeroed() };
            let at = HDR + k * size_user;
            // SAFETY: copies `take` bytes inside both buffers.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes[at..at + take].as_ptr(),
                    (&mut info as *mut libc::tcp_info).cast::<u8>(),
                    take,
                )
            };
            info
        })
        .collect())
}

/// The `tcp_info` records of a connection: one, or one per subflow with MPTCP.
fn tcp_infos(fd: RawFd, mptcp: bool) -> Vec<libc::tcp_info> {
    if mptcp {
        match mptcp_subflow_infos(fd) {
            Ok(v) if !v.is_empty() => return v,
            // A connection that fell back to TCP, or an old kernel: the socket's own.
            _ => {}
        }
    }
    tcp_info(fd).into_iter().collect()
}

fn tcp_cc(fd: RawFd) -> String {
    let mut name = [0u8; 16];
    match sys::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, &mut name) {
        Ok(_) => {
            let end = name.iter().position(|&b| b == 0).unwrap_or(16);
            String::from_utf8_lossy(&name[..end]).into_owned()
        }
        Err(_) => String::new(),
    }
}

/// `TCP_MAXSEG` from the IP MTU; an MPTCP socket that refuses it keeps the default
/// (the tunnel's and the veths' MTUs bound it anyway).
fn set_mss(fd: RawFd, packet_bytes: Option<usize>, mptcp: bool) -> Result<()> {
    if let Some(p) = packet_bytes {
        let mss = i32::try_from(p.saturating_sub(40).max(88)).unwrap_or(1460);
        match sys::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, &mss) {
            Err(_) if mptcp => {}
            r => r.context("TCP_MAXSEG")?,
        }
    }
    Ok(())
}

/// The sender's socket options: congestion control and a small not-sent low-water mark.
fn sender_options(fd: RawFd, a: &SendArgs) -> Result<()> {
    if let Some(cc) = &a.cc {
        sys::setsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_bytes())
            .with_context(|| format!("TCP_CONGESTION {cc}"))?;
    }
    match sys::setsockopt(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        &NOTSENT_LOWAT,
    ) {
        Err(_) if a.flow.mptcp => {}
        r => r.context("TCP_NOTSENT_LOWAT")?,
    }
    Ok(())
}

fn send_tcp(a: &SendArgs, times: Times, s: &mut SendSummary) -> Result<()> {
    // The listener stays open as long as the connection: MPTCP's further subflows
    // (MP_JOIN) arrive on it.
    let mut _listener = None;
    let sock = if a.listen {
        let bind_to = a.bind.context("--listen needs --bind")?;
        let listener = listen_tcp(bind_to, a.packet_bytes, a.flow.mptcp)?;
        let Some(sock) = accept_one(listener.as_raw_fd(), times)? else {
            bail!("listening on {bind_to}: no connection before the flow's end");
        };
        _listener = Some(listener);
        sender_options(sock.as_raw_fd(), a)?;
        sys::sleep_until(times.start, 0);
        sock
    } else {
        sys::sleep_until(times.start, 0);
        let to = a.to.context("TCP senders need --to or --listen")?;
        connect_tcp(a.bind, to, times, a.flow.mptcp, &|fd| {
            sender_options(fd, a)?;
            set_mss(fd, a.packet_bytes, a.flow.mptcp)
        })?
    };
    let fd = sock.as_raw_fd();
    // With a rate, record k is offered at start + k * interval; one held back by a full
    // socket goes out as soon as the socket takes it (a blocking writer fed at the rate).
    let interval_ns = record_interval_ns(a.rate_mbps)?;
    let offered_at = |k: u64| interval_ns.map(|iv| times.start + (k as f64 * iv).round() as u64);
    let end = times.stop.min(times.until);
    let mut rec = [0u8; RECORD_BYTES];
    let mut pos = 0usize;
    while sys::mono_ns() < end && !sys::stop_requested() {
        if pos == 0
            && let Some(t) = offered_at(s.sent)
            && t > sys::mono_ns()
        {
            sys::sleep_until(t.min(end), a.spin_us * 1000);
            continue;
        }
        if !sys::poll_out(fd, sys::ms_until(end))? {
            continue;
        }
        loop {
            if pos == 0 {
                let now = sys::mono_ns();
                if now >= times.stop || offered_at(s.sent).is_some_and(|t| t > now) {
                    break;
                }
                rec[..8].copy_from_slice(&now.to_be_bytes());
                if s.sent == 0 {
                    s.first_send_ns = now;
                }
                s.last_send_ns = now;
            }
            // SAFETY: sends from a valid buffer.
            let r = unsafe {
                libc::send(
                    fd,
                    rec[pos..].as_ptr().cast(),
                    RECORD_BYTES - pos,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            match sys::cvt_size(r) {
                Ok(n) => {
                    s.bytes += n as u64;
                    pos += n;
                    if pos == RECORD_BYTES {
                        pos = 0;
                        s.sent += 1;
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => break,
                Err(e) => {
                    *s.errors.entry(errno_name(&e)).or_default() += 1;
                    return finish_tcp(fd, s, sock, a.flow.mptcp);
                }
            }
        }
    }
    // Stop writing (no FIN, as in the simulator); wait for what is queued to be
    // acknowledged, then read the counters.
    while sys::mono_ns() < times.until && !sys::stop_requested() {
        let mut outq: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one int.
        unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut outq) };
        if outq == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    finish_tcp(fd, s, sock, a.flow.mptcp)
}

/// With an application rate (`--rate-mbps`, payload), the time between two records, ns.
fn record_interval_ns(rate_mbps: Option<f64>) -> Result<Option<f64>> {
    let Some(r) = rate_mbps else {
        return Ok(None);
    };
    let iv = RECORD_BYTES as f64 * 8.0 / (r * 1e6) * 1e9;
    if !(iv.is_finite() && iv >= 1.0) {
        bail!("--rate-mbps {r}: expected a rate above 0");
    }
    Ok(Some(iv))
}

/// A listening TCP (or MPTCP) socket on `at` with the MSS of `packet_bytes`.
fn listen_tcp(at: SocketAddrV4, packet_bytes: Option<usize>, mptcp: bool) -> Result<OwnedFd> {
    let listener = sys::socket(libc::AF_INET, libc::SOCK_STREAM, tcp_protocol(mptcp))
        .context(if mptcp { "MPTCP socket" } else { "TCP socket" })?;
    let lfd = listener.as_raw_fd();
    bind(lfd, at)?;
    set_mss(lfd, packet_bytes, mptcp)?;
    // SAFETY: plain syscall.
    sys::cvt(unsafe { libc::listen(lfd, 4) }).context("listen")?;
    Ok(listener)
}

/// Accepts one connection (non-blocking) before `times.until`.
fn accept_one(lfd: RawFd, times: Times) -> Result<Option<OwnedFd>> {
    while sys::mono_ns() < times.until && !sys::stop_requested() {
        if sys::poll_in(lfd, sys::ms_until(times.until).min(100))? {
            // SAFETY: accept without peer address.
            let fd = unsafe {
                libc::accept4(
                    lfd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if fd >= 0 {
                // SAFETY: accept4 returned a fresh fd we own.
                return Ok(Some(unsafe {
                    <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
                }));
            }
        }
    }
    Ok(None)
}

/// A connected, non-blocking TCP (or MPTCP) socket, `setup` applied before connecting.
/// Connecting does not block past `until` (a path may be down at the start); a refused
/// connection (the peer not listening yet) is tried again every 10 ms.
fn connect_tcp(
    from: Option<SocketAddrV4>,
    to: SocketAddrV4,
    times: Times,
    mptcp: bool,
    setup: &dyn Fn(RawFd) -> Result<()>,
) -> Result<OwnedFd> {
    loop {
        let sock = sys::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK,
            tcp_protocol(mptcp),
        )
        .context(if mptcp { "MPTCP socket" } else { "TCP socket" })?;
        let fd = sock.as_raw_fd();
        if let Some(b) = from {
            bind(fd, b)?;
        }
        setup(fd)?;
        let err = match connect(fd, to) {
            Ok(()) => 0,
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {
                while !sys::poll_out(fd, sys::ms_until(times.until).min(100))? {
                    if sys::mono_ns() >= times.until || sys::stop_requested() {
                        bail!("connect {to}: no answer before the flow's end");
                    }
                }
                let mut err: libc::c_int = 0;
                sys::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, &mut err)?;
                err
            }
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        };
        match err {
            0 => return Ok(sock),
            libc::ECONNREFUSED if sys::mono_ns() < times.until && !sys::stop_requested() => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            e => bail!("connect {to}: {}", io::Error::from_raw_os_error(e)),
        }
    }
}

fn finish_tcp(fd: RawFd, s: &mut SendSummary, sock: OwnedFd, mptcp: bool) -> Result<()> {
    let infos = tcp_infos(fd, mptcp);
    if let Some(first) = infos.first() {
        let sum = |f: &dyn Fn(&libc::tcp_info) -> u64| infos.iter().map(f).sum::<u64>();
        s.tcp = Some(TcpSendInfo {
            cc: tcp_cc(fd),
            data_segs_out: sum(&|i| u64::from(i.tcpi_data_segs_out)),
            total_retrans: sum(&|i| u64::from(i.tcpi_total_retrans)),
            bytes_retrans: sum(&|i| i.tcpi_bytes_retrans),
            dsack_dups: sum(&|i| u64::from(i.tcpi_dsack_dups)),
            bytes_acked: sum(&|i| i.tcpi_bytes_acked),
            srtt_ms: f64::from(first.tcpi_rtt) / 1e3,
            subflows: if mptcp { infos.len() as u32 } else { 0 },
        });
    }
    drop(sock);
    Ok(())
}

/// `traffic recv`.
pub fn recv(a: &RecvArgs) -> Result<RecvSummary> {
    let times = Times::of(&a.flow);
    match a.flow.kind {
        Kind::TcpBulk => recv_tcp(a, times),
        Kind::QuicBulk => quic::recv(a, times),
        Kind::UdpCbr | Kind::UdpBurst | Kind::Urgent => recv_udp(a, times),
    }
}

/// The simulator's gap and goodput rules for UDP sinks.
#[derive(Debug, Default)]
struct UdpSink {
    seen: Vec<u64>,
    delivered: u64,
    duplicates: u64,
    max_seq: Option<u64>,
    latencies_ms: Vec<f64>,
    ip_bytes: u64,
    payload_bytes: u64,
    first_arrival: Option<u64>,
    last_arrival: Option<u64>,
    max_gap: u64,
    bins: Vec<u64>,
    cuts: CutTracker,
}

impl UdpSink {
    /// Marks `seq` seen; whether it was new.
    fn insert(&mut self, seq: u64) -> bool {
        let word = usize::try_from(seq / 64).unwrap_or(usize::MAX);
        if word > 1 << 24 {
            return false; // absurd sequence number: ignore
        }
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        let bit = 1u64 << (seq % 64);
        let new = self.seen[word] & bit == 0;
        self.seen[word] |= bit;
        new
    }

    /// One datagram arrived at `at` (ns) with `payload_len` bytes of UDP payload.
    fn on_datagram(&mut self, probe: Probe, at: u64, payload_len: usize, cbr: bool, times: &Times) {
        self.max_seq = Some(self.max_seq.map_or(probe.seq, |m| m.max(probe.seq)));
        if !self.insert(probe.seq) {
            self.duplicates += 1;
            return;
        }
        self.delivered += 1;
        self.cuts.on_delivery(times.rel(at));
        self.cuts.on_delivered_packet(times.rel(probe.send_ns));
        self.latencies_ms
            .push(at.saturating_sub(probe.send_ns) as f64 / 1e6);
        self.ip_bytes += (payload_len + UDP_OVERHEAD) as u64;
        self.payload_bytes += payload_len as u64;
        add_to_bins(&mut self.bins, times, at, payload_len as u64);
        self.first_arrival.get_or_insert(at);
        // Gaps as in the simulator: CBR counts the active period (arrivals clipped to
        // stop) and the wait for the first packet from the start; bursts count
        // inter-arrival gaps only.
        let t = if cbr { at.min(times.stop) } else { at };
        let from = match self.last_arrival {
            Some(l) => Some(l),
            None if cbr => Some(times.start),
            None => None,
        };
        if let Some(from) = from {
            self.max_gap = self.max_gap.max(t.saturating_sub(from));
        }
        self.last_arrival = Some(t);
    }

    fn summary(&self, a: &RecvArgs, times: &Times, cbr: bool, clock: &str) -> RecvSummary {
        let active_end = times.stop.min(times.until);
        let mut max_gap = self.max_gap;
        let over = if cbr {
            let from = self.last_arrival.unwrap_or(times.start);
            max_gap = max_gap.max(active_end.saturating_sub(from));
            active_end.saturating_sub(times.start)
        } else {
            self.last_arrival
                .map_or(0, |l| l.saturating_sub(times.start))
        };
        let sent = self.max_seq.map_or(0, |m| m + 1);
        RecvSummary {
            name: a.flow.name.clone(),
            kind: a.flow.kind.as_str().into(),
            sent,
            delivered: self.delivered,
            lost: sent.saturating_sub(self.delivered),
            duplicates: self.duplicates,
            latency_ms: Percentiles::of(&self.latencies_ms),
            max_gap_ms: max_gap as f64 / 1e6,
            goodput_mbps: mbps(self.ip_bytes, over),
            bytes_delivered: self.payload_bytes,
            bytes_per_10ms: self.bins.clone(),
            cuts: cut_summaries(&self.cuts),
            latency_clock: clock.into(),
            records: 0,
            first_arrival_s: self.first_arrival.map_or(0.0, |t| times.rel_s(t)),
            last_arrival_s: self.last_arrival.map_or(0.0, |t| times.rel_s(t)),
        }
    }
}

fn mbps(bytes: u64, over_ns: u64) -> f64 {
    if over_ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (over_ns as f64 / 1e9) / 1e6
    }
}

fn recv_udp(a: &RecvArgs, times: Times) -> Result<RecvSummary> {
    let sock = sys::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0)?;
    let fd = sock.as_raw_fd();
    bind(fd, a.bind)?;
    set_buffer(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, 32 << 20)?;
    let kernel_ts = sys::setsockopt(fd, libc::SOL_SOCKET, sys::SO_TIMESTAMPNS, &1i32).is_ok();
    let cbr = a.flow.kind == Kind::UdpCbr;
    let mut sink = UdpSink {
        cuts: times.cut_tracker(&a.flow),
        ..UdpSink::default()
    };
    let mut buf = vec![0u8; 65_536];
    let mut used_user_clock = !kernel_ts;
    while sys::mono_ns() < times.until && !sys::stop_requested() {
        if !sys::poll_in(fd, sys::ms_until(times.until).min(100))? {
            continue;
        }
        while let Some((n, _, ts_rt)) = sys::recv_stamped(fd, &mut buf)? {
            let now = sys::mono_ns();
            let at = if ts_rt > 0 {
                (i128::from(ts_rt) - sys::realtime_offset_ns()).clamp(0, i128::from(now)) as u64
            } else {
                used_user_clock = true;
                now
            };
            let Some(probe) = Probe::decode(&buf[..n]) else {
                continue;
            };
            if probe.index != a.flow.index {
                continue;
            }
            sink.on_datagram(probe, at, n, cbr, &times);
        }
    }
    let clock = if used_user_clock { "user" } else { "kernel" };
    Ok(sink.summary(a, &times, cbr, clock))
}

/// A stream receiver's summary before any data (every cut's stall running to its
/// window's end, as with no connection), and its cut tracker.
fn stream_summary(a: &RecvArgs, times: Times) -> (RecvSummary, CutTracker) {
    let cuts = times.cut_tracker(&a.flow);
    let summary = RecvSummary {
        name: a.flow.name.clone(),
        kind: a.flow.kind.as_str().into(),
        latency_clock: "user".into(),
        cuts: cut_summaries(&cuts),
        ..RecvSummary::default()
    };
    (summary, cuts)
}

fn recv_tcp(a: &RecvArgs, times: Times) -> Result<RecvSummary> {
    let mptcp = a.flow.mptcp;
    let (mut summary, cuts) = stream_summary(a, times);
    // The listener stays open as long as the connection: MPTCP's further subflows
    // (MP_JOIN) arrive on it.
    let mut _listener = None;
    let conn = match a.connect {
        Some(to) => {
            sys::sleep_until(times.start, 0);
            Some(connect_tcp(Some(a.bind), to, times, mptcp, &|fd| {
                set_mss(fd, a.packet_bytes, mptcp)
            })?)
        }
        None => {
            let listener = listen_tcp(a.bind, a.packet_bytes, mptcp)?;
            let conn = accept_one(listener.as_raw_fd(), times)?;
            _listener = Some(listener);
            conn
        }
    };
    let Some(conn) = conn else {
        return Ok(summary);
    };
    let fd = conn.as_raw_fd();
    let mut sink = StreamSink::new(times, cuts);
    let mut buf = vec![0u8; 256 * 1024];
    'outer: while sys::mono_ns() < times.until && !sys::stop_requested() {
        if !sys::poll_in(fd, sys::ms_until(times.until).min(100))? {
            continue;
        }
        loop {
            // SAFETY: reads into a valid buffer.
            let r = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            let n = match sys::cvt_size(r) {
                Ok(0) => break 'outer,
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => break,
                Err(e) => return Err(e).context("recv"),
            };
            sink.on_read(&buf[..n]);
        }
    }
    let segs_in = tcp_infos(fd, mptcp)
        .iter()
        .map(|i| u64::from(i.tcpi_data_segs_in))
        .sum();
    summary.sent = segs_in;
    summary.delivered = segs_in;
    sink.finish(&mut summary);
    Ok(summary)
}

/// What the receiver of a stream of records (`tcp-bulk`, `quic-bulk`) measures as the
/// application reads it.
struct StreamSink {
    times: Times,
    parser: RecordParser,
    latencies_ms: Vec<f64>,
    app_bytes: u64,
    app_bytes_by_stop: u64,
    bins: Vec<u64>,
    /// The last read that brought new bytes (clipped to stop), and the longest time
    /// without one.
    last: Option<u64>,
    max_gap: u64,
    first_arrival: Option<u64>,
    cuts: CutTracker,
}

impl StreamSink {
    fn new(times: Times, cuts: CutTracker) -> Self {
        Self {
            times,
            parser: RecordParser::default(),
            latencies_ms: Vec::new(),
            app_bytes: 0,
            app_bytes_by_stop: 0,
            bins: Vec::new(),
            last: None,
            max_gap: 0,
            first_arrival: None,
            cuts,
        }
    }

    /// `data`, the stream's next bytes, read now.
    fn on_read(&mut self, data: &[u8]) {
        let now = sys::mono_ns();
        let times = self.times;
        let n = data.len() as u64;
        self.first_arrival.get_or_insert(now);
        let lat = &mut self.latencies_ms;
        self.parser.feed(data, |ts| {
            lat.push(now.saturating_sub(ts) as f64 / 1e6);
        });
        self.app_bytes += n;
        add_to_bins(&mut self.bins, &times, now, n);
        self.cuts.on_delivery(times.rel(now));
        if now <= times.stop {
            self.app_bytes_by_stop += n;
        }
        // Gaps as in the simulator: from the first data transmission, between reads
        // that brought new bytes (clipped to stop), and the tail to the end.
        let t = now.min(times.stop);
        if let Some(from) = self.last.or(self.parser.first_ts) {
            self.max_gap = self.max_gap.max(t.saturating_sub(from));
        }
        self.last = Some(t);
    }

    /// Fills the summary's measurements.
    fn finish(mut self, summary: &mut RecvSummary) {
        let times = self.times;
        let active_end = times.stop.min(times.until);
        if let Some(from) = self.last.or(Some(times.start)) {
            self.max_gap = self.max_gap.max(active_end.saturating_sub(from));
        }
        summary.latency_ms = Percentiles::of(&self.latencies_ms);
        summary.max_gap_ms = self.max_gap as f64 / 1e6;
        summary.goodput_mbps = mbps(
            self.app_bytes_by_stop,
            active_end.saturating_sub(times.start),
        );
        summary.bytes_delivered = self.app_bytes;
        summary.bytes_per_10ms = self.bins;
        summary.cuts = cut_summaries(&self.cuts);
        summary.records = self.parser.records;
        summary.first_arrival_s = self.first_arrival.map_or(0.0, |t| times.rel_s(t));
        summary.last_arrival_s = self.last.map_or(0.0, |t| times.rel_s(t));
    }
}

/// Reads a summary file written by the tool.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_round_trips_in_simulator_layout() {
        let p = Probe {
            index: 3,
            seq: 0x0102_0304_0506_0708,
            send_ns: 987_654_321,
        };
        let mut buf = [0u8; 40];
        p.encode(&mut buf);
        assert_eq!(&buf[..4], b"LBT1");
        assert_eq!(&buf[4..6], &[0, 3]);
        assert_eq!(&buf[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Probe::decode(&buf), Some(p));
        assert_eq!(Probe::decode(&buf[..23]), None);
        buf[0] = b'X';
        assert_eq!(Probe::decode(&buf), None);
    }

    #[test]
    fn records_split_across_reads_yield_their_timestamps() {
        let mut stream = Vec::new();
        for ts in [11u64, 22, 33] {
            let mut r = [0u8; RECORD_BYTES];
            r[..8].copy_from_slice(&ts.to_be_bytes());
            r[8] = 0xff;
            stream.extend_from_slice(&r);
        }
        // Odd chunk sizes, including splits inside the timestamp.
        let mut p = RecordParser::default();
        let mut got = Vec::new();
        for chunk in stream.chunks(3).take(2).chain(stream[6..].chunks(977)) {
            p.feed(chunk, |ts| got.push(ts));
        }
        assert_eq!(got, vec![11, 22, 33]);
        assert_eq!((p.records, p.first_ts), (3, Some(11)));
        p.feed(&[0; 5], |_| panic!("no record yet"));
    }

    fn times() -> Times {
        Times {
            base: 0,
            start: 100,
            stop: 1_000,
            until: 2_000,
        }
    }

    #[test]
    fn udp_sink_counts_duplicates_gaps_and_goodput_like_the_simulator() {
        let t = times();
        let mut s = UdpSink::default();
        let p = |seq| Probe {
            index: 0,
            seq,
            send_ns: 100 + seq * 10,
        };
        // CBR: 0 at 150, 1 at 160, 1 again (duplicate), 3 at 400 (2 lost).
        s.on_datagram(p(0), 150, 72, true, &t);
        s.on_datagram(p(1), 160, 72, true, &t);
        s.on_datagram(p(1), 170, 72, true, &t);
        s.on_datagram(p(3), 400, 72, true, &t);
        let args = RecvArgs {
            flow: FlowArgs {
                name: "f".into(),
                kind: Kind::UdpCbr,
                index: 0,
                base_ns: Some(0),
                start_s: 0.0,
                stop_s: None,
                until_s: None,
                out: None,
                rt_priority: None,
                mptcp: false,
                cuts_ns: Vec::new(),
            },
            bind: "127.0.0.1:1".parse().unwrap(),
            packet_bytes: None,
            connect: None,
        };
        let r = s.summary(&args, &t, true, "kernel");
        assert_eq!((r.sent, r.delivered, r.lost, r.duplicates), (4, 3, 1, 1));
        // Gaps: start 100 -> 150 (50), 160 -> 400 (240), tail 400 -> stop 1000 (600).
        assert_eq!(r.max_gap_ms, 600.0 / 1e6);
        // Latencies 50, 50, 270 ns.
        assert_eq!(r.latency_ms.p50, 50.0 / 1e6);
        assert_eq!(r.latency_ms.max, 270.0 / 1e6);
        let expect = mbps(3 * 100, 900);
        assert_eq!(r.goodput_mbps, expect);
        assert_eq!(r.bytes_delivered, 3 * 72);
        // Base 0: every arrival falls in the first 10 ms bin.
        assert_eq!(r.bytes_per_10ms, vec![3 * 72]);
        assert_eq!(r.bytes_between(0.0, 0.01), 3 * 72);
        assert_eq!(r.bytes_between(0.01, 1.0), 0);
    }

    #[test]
    fn merge_takes_sent_from_the_sender_and_rounds() {
        let recv = RecvSummary {
            name: "burst".into(),
            kind: "udp-burst".into(),
            sent: 900,
            delivered: 51,
            lost: 849,
            latency_ms: Percentiles {
                p50: 1.23456,
                p95: 1.5,
                p99: 2.0,
                max: 3.0,
            },
            ..RecvSummary::default()
        };
        let send = SendSummary {
            sent: 1000,
            enobufs: 949,
            ..SendSummary::default()
        };
        let f = merge(Some(&send), &recv);
        assert_eq!((f.sent, f.delivered, f.lost), (1000, 51, 949));
        assert_eq!(f.latency_ms.p50, 1.235);
        let tcp = RecvSummary {
            kind: "tcp-bulk".into(),
            delivered: 500,
            ..RecvSummary::default()
        };
        let send = SendSummary {
            tcp: Some(TcpSendInfo {
                data_segs_out: 510,
                total_retrans: 10,
                dsack_dups: 2,
                ..TcpSendInfo::default()
            }),
            ..SendSummary::default()
        };
        let f = merge(Some(&send), &tcp);
        assert_eq!(
            (f.sent, f.delivered, f.lost, f.duplicates, f.retransmitted),
            (510, 500, 10, 2, 10)
        );
    }

    /// A free TCP port on the loopback address.
    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    }

    fn flow_args(kind: Kind, base_ns: u64, stop_s: f64, until_s: f64) -> FlowArgs {
        FlowArgs {
            name: "f".into(),
            kind,
            index: 0,
            base_ns: Some(base_ns),
            start_s: 0.0,
            stop_s: Some(stop_s),
            until_s: Some(until_s),
            out: None,
            rt_priority: None,
            mptcp: false,
            cuts_ns: Vec::new(),
        }
    }

    #[test]
    fn tcp_sender_with_a_rate_writes_at_that_rate() {
        // Over loopback TCP alone would go at Gbit/s; the application holds it to 8. The
        // segments are those of a real path (packet_bytes 1400): with loopback's 64 KB
        // MSS, Nagle would hold each record until the previous one is acknowledged, and a
        // busy machine's delayed acknowledgements would show up as 40 ms latencies.
        let at: SocketAddrV4 = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let base = sys::mono_ns() + 200_000_000;
        let (stop_s, rate) = (2.0, 8.0);
        let recv_args = RecvArgs {
            flow: flow_args(Kind::TcpBulk, base, stop_s, stop_s + 0.5),
            bind: at,
            packet_bytes: None,
            connect: None,
        };
        let receiver = std::thread::spawn(move || recv(&recv_args));
        let send_args = SendArgs {
            flow: flow_args(Kind::TcpBulk, base, stop_s, stop_s + 0.3),
            bind: None,
            to: Some(at),
            listen: false,
            rate_mbps: Some(rate),
            packet_bytes: Some(1400),
            count: None,
            dscp: None,
            cc: None,
            spin_us: 0,
        };
        let sent = send(&send_args).expect("sender");
        let r = receiver.join().unwrap().expect("receiver");
        let records = (stop_s * rate * 1e6 / 8.0 / RECORD_BYTES as f64).ceil() as u64;
        // Never ahead of the rate; behind by the few records a busy machine leaves in
        // the socket (TCP_NOTSENT_LOWAT) when the flow stops.
        assert!(
            sent.sent <= records && sent.sent >= records * 99 / 100,
            "{sent:?}"
        );
        assert!((r.goodput_mbps - rate).abs() < 0.05 * rate, "{r:?}");
        assert!(r.latency_ms.p50 < 5.0, "{r:?}");
    }

    #[test]
    fn udp_ends_measure_around_a_cut_as_the_simulator_does() {
        // No outage on loopback: the cut costs nothing, and the sender's count of the
        // loss window matches the receiver's deliveries.
        let at: SocketAddrV4 = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let base = sys::mono_ns() + 200_000_000;
        let stop_s = 2.0;
        let args = |until_s: f64| FlowArgs {
            cuts_ns: vec![1_000_000_000, 5_000_000_000],
            ..flow_args(Kind::UdpCbr, base, stop_s, until_s)
        };
        let recv_args = RecvArgs {
            flow: args(stop_s + 0.5),
            bind: at,
            packet_bytes: None,
            connect: None,
        };
        let receiver = std::thread::spawn(move || recv(&recv_args));
        let send_args = SendArgs {
            flow: args(stop_s + 0.3),
            bind: None,
            to: Some(at),
            listen: false,
            rate_mbps: Some(1.12),
            packet_bytes: None,
            count: None,
            dscp: None,
            cc: None,
            spin_us: 0,
        };
        let sent = send(&send_args).expect("sender");
        let r = receiver.join().unwrap().expect("receiver");
        // 1400-byte packets at 1.12 Mbit/s: one every 10 ms; the loss window of the
        // cut at 1 s is [0 s, 3 s), and the flow sends in [0 s, 2 s): 200 packets. The
        // cut at 5 s is after the flow.
        assert_eq!(sent.cut_sent, vec![200]);
        let (stats, counts_loss) = cut_stats(Some(&sent), &r);
        assert!(counts_loss);
        let c = stats[0];
        assert_eq!(
            (c.at, c.sent, c.lost()),
            (std::time::Duration::from_secs(1), 200, 0)
        );
        assert!(c.stall < std::time::Duration::from_millis(50), "{c:?}");
        assert!(c.data_again.is_some(), "{c:?}");
        // Without the sender's counts the loss is unknown; TCP never has one.
        assert!(!cut_stats(None, &r).1);
        let tcp = RecvSummary {
            kind: "tcp-bulk".into(),
            ..r.clone()
        };
        assert!(!cut_stats(Some(&sent), &tcp).1);
    }

    #[test]
    fn kinds_parse_scenario_names() {
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(k));
        }
        assert_eq!(Kind::parse("tcp"), None);
    }
}
