//! The real-time link emulator: `<exe> emulate --spec <json>` inside the emu namespace.
//!
//! For each link it forwards Ethernet frames between `ec{i}` (client side) and `es{i}`
//! (server side) through the same [`LinkDirection`] models the simulator uses: frames
//! read on `ec{i}` go through the link's uplink model and leave on `es{i}` when the
//! model delivers them; frames read on `es{i}` go through the downlink model the other
//! way.
//!
//! ```text
//!  1. epoll wakes (a packet socket is readable, the timerfd fired, or a signal)
//!  2. read every pending frame, non-blocking; each one's arrival time is the kernel's
//!     receive timestamp (so the emulator's own wake-up delay does not count as link
//!     delay); ARP and IPv6 ND go straight to the other side, frames over the egress
//!     MTU are dropped and counted, the rest are enqueued in their direction's model
//!  3. advance every model to now; send each delivered frame at once and record how
//!     late it left compared with the model's schedule
//!  4. next deadline = the earliest poll_timeout of all models: if it is more than
//!     `spin_us` away, arm the timerfd at (deadline - spin_us) and sleep in epoll;
//!     otherwise spin (epoll with a zero timeout) until it comes
//! ```
//!
//! One thread owns everything; nothing is shared. Time is `CLOCK_MONOTONIC - base_ns`,
//! the scenario clock the runner also uses, so outages line up with the runner's
//! interface changes. With `warmup_ns` the models start that long before time 0 (their
//! outages and traces still count from time 0), so frames sent before it (the daemons'
//! handshake in mode late) cross the links with their delays. At exit (`until_ns`,
//! SIGINT or SIGTERM) it writes the [`EmuStats`] JSON.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use latebind_linkmodel::{LinkDirection, LinkEvent, LinkParams, Rate, Trace};
use serde::{Deserialize, Serialize};

use crate::stats::Percentiles;
use crate::sys::{self, Epoll, SignalFd, TimerFd};

/// How one direction's serializer runs.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RateSpec {
    /// A fixed rate in bit/s.
    Fixed {
        /// Bits per second.
        bits_per_sec: f64,
    },
    /// A mahimahi trace file (absolute path, or relative to the emulator's cwd).
    Trace {
        /// The trace file.
        path: PathBuf,
    },
}

/// One link direction's model parameters, as JSON (`LinkParams` plus the seed).
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct DirectionSpec {
    /// Serializer rate.
    pub rate: RateSpec,
    /// One-way propagation delay, ns.
    pub delay_ns: u64,
    /// Jitter (uniform within +/-), ns.
    pub jitter_ns: u64,
    /// Random loss probability.
    pub loss: f64,
    /// Bottleneck queue, packets.
    pub queue_packets: usize,
    /// Outages `[start, end)` in ns of scenario time.
    pub outages_ns: Vec<[u64; 2]>,
    /// Lose what is propagating at an outage start (downlink) or deliver it (uplink).
    pub drop_in_flight_on_outage: bool,
    /// Seed of the model's loss and jitter draws.
    pub seed: u64,
}

impl RateSpec {
    /// The model's rate (loads a trace file).
    pub fn load(&self) -> Result<Rate> {
        Ok(match self {
            Self::Fixed { bits_per_sec } => Rate::Fixed {
                bits_per_sec: *bits_per_sec,
            },
            Self::Trace { path } => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("trace {}", path.display()))?;
                Rate::Trace(Arc::new(
                    Trace::parse(&text).with_context(|| format!("trace {}", path.display()))?,
                ))
            }
        })
    }
}

impl DirectionSpec {
    /// The model parameters (loads a trace file).
    pub fn params(&self) -> Result<LinkParams> {
        let params = LinkParams {
            rate: self.rate.load()?,
            delay: Duration::from_nanos(self.delay_ns),
            jitter: Duration::from_nanos(self.jitter_ns),
            loss: self.loss,
            queue_packets: self.queue_packets,
            outages: self
                .outages_ns
                .iter()
                .map(|[a, b]| (Duration::from_nanos(*a), Duration::from_nanos(*b)))
                .collect(),
            drop_in_flight_on_outage: self.drop_in_flight_on_outage,
        };
        params.validate()?;
        Ok(params)
    }
}

/// One emulated link: its two interfaces and two directions.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct EmuLinkSpec {
    /// Name used in stats and logs.
    pub name: String,
    /// Interface facing the client (`ec{i}`): uplink frames come in here.
    pub client_if: String,
    /// Interface facing the server (`es{i}`): downlink frames come in here.
    pub server_if: String,
    /// Client -> server.
    pub up: DirectionSpec,
    /// Server -> client.
    pub down: DirectionSpec,
}

/// Everything the emulator needs, passed as a JSON file (or inline JSON).
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct EmuSpec {
    /// `CLOCK_MONOTONIC` (ns) of scenario time 0.
    pub base_ns: u64,
    /// Exit at this monotonic time (ns); `None`: run until SIGINT/SIGTERM.
    pub until_ns: Option<u64>,
    /// Spin instead of sleeping when the next deadline is closer than this (µs).
    pub spin_us: u64,
    /// The links.
    pub links: Vec<EmuLinkSpec>,
    /// Where to write the [`EmuStats`] JSON at exit.
    pub stats_path: Option<PathBuf>,
    /// Where to write the event log (header + one line per outage edge).
    pub log_path: Option<PathBuf>,
    /// Also log one line per frame (delivered or lost).
    #[serde(default)]
    pub log_frames: bool,
    /// Hold a CPU wake-up latency request of 0 (`/dev/cpu_dma_latency`) while running:
    /// idle CPUs poll instead of halting, which on this kind of VM cuts the p99 timer
    /// wake-up delay from milliseconds to tens of microseconds.
    #[serde(default = "yes")]
    pub cpu_latency_qos: bool,
    /// Run in `SCHED_FIFO` at this priority (None: the default scheduler), so that
    /// CPU-bound processes on the machine do not delay deliveries.
    #[serde(default)]
    pub rt_priority: Option<i32>,
    /// The models start this long before `base_ns` (ns): frames sent before scenario
    /// time 0 (the daemons' handshake in mode late) go through the links with their
    /// delay instead of waiting for time 0. Outages and trace times stay relative to
    /// `base_ns` (each model's origin is `warmup_ns`).
    #[serde(default)]
    pub warmup_ns: u64,
    /// `CLOCK_MONOTONIC` (ns) of the start and the end of the window over which each
    /// direction's offered and unused capacity is counted ([`DirectionStats::window`]):
    /// the scenario's run, without the warmup before it and the drain after it.
    #[serde(default)]
    pub window_ns: Option<[u64; 2]>,
}

fn yes() -> bool {
    true
}

/// Holds a PM QoS CPU latency request while alive (released when the file closes).
#[derive(Debug)]
pub struct CpuLatencyGuard {
    _file: std::fs::File,
}

impl CpuLatencyGuard {
    /// Asks every CPU to wake within `us` microseconds (0: never enter a halt state).
    pub fn hold(us: i32) -> io::Result<Self> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")?;
        f.write_all(&us.to_ne_bytes())?;
        Ok(Self { _file: f })
    }
}

/// Counters of one direction.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct DirectionStats {
    /// Frames read from the ingress interface.
    pub frames_in: u64,
    /// ARP / IPv6 ND frames forwarded without the model.
    pub control_forwarded: u64,
    /// Frames dropped because the IP packet exceeded the egress MTU.
    pub too_big: u64,
    /// Frames accepted by the model.
    pub enqueued: u64,
    /// Refused by the model: queue full.
    pub dropped_queue_full: u64,
    /// Refused by the model: outage.
    pub dropped_outage: u64,
    /// Lost by the model's random draw.
    pub lost_random: u64,
    /// Lost at an outage start (queued, serializing, or propagating on a downlink).
    pub lost_outage: u64,
    /// Delivered by the model and sent on the egress interface.
    pub delivered: u64,
    /// Bytes (IP packet lengths) delivered.
    pub bytes_delivered: u64,
    /// Sends that failed (`send_error_last` holds the last error).
    pub send_errors: u64,
    /// The last send error, if any.
    pub send_error_last: Option<String>,
    /// Largest backlog (queued + serializing) the model had.
    pub max_backlog: usize,
    /// How late frames left compared with the model's delivery time, µs.
    pub lateness_us: Percentiles,
    /// Frames whose departure was more than 1 ms late.
    pub late_over_1ms: u64,
    /// From the kernel's receive timestamp to the emulator reading the frame, µs
    /// (compensated: the model sees the kernel's time).
    pub read_delay_us: Percentiles,
    /// Over the spec's `window_ns`: what the model offered and what of it went unused
    /// (`LinkDirection::unused_bytes`), when the emulator ran through the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<CapacityWindow>,
}

/// A direction's capacity over a window of time, bytes.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct CapacityWindow {
    /// What the model offered: what it transmitted plus what passed unused.
    pub offered_bytes: u64,
    /// What passed unused: idle time at a fixed rate, a trace's opportunities while
    /// nothing waited.
    pub unused_bytes: u64,
}

/// Counters of one link.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct LinkEmuStats {
    /// The link's name.
    pub name: String,
    /// Client -> server.
    pub up: DirectionStats,
    /// Server -> client.
    pub down: DirectionStats,
}

/// What the emulator writes at exit (`--stats`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Serialize)]
pub struct EmuStats {
    /// `latebind emulate`.
    pub tool: String,
    /// Crate version.
    pub version: String,
    /// Base time (ns of `CLOCK_MONOTONIC`).
    pub base_ns: u64,
    /// Scenario time at exit, s.
    pub ran_until_s: f64,
    /// Spin threshold, µs.
    pub spin_us: u64,
    /// Frames dropped by the kernel because a packet socket's buffer was full.
    pub socket_drops: u64,
    /// Whether the CPU wake-up latency request was held (see [`EmuSpec`]).
    pub cpu_latency_qos: bool,
    /// Whether the emulator ran in `SCHED_FIFO`.
    pub realtime: bool,
    /// Lateness over all directions, µs.
    pub lateness_us: Percentiles,
    /// Per link.
    pub links: Vec<LinkEmuStats>,
}

/// `<exe> emulate` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct EmulateArgs {
    /// The spec: a JSON file, or the JSON itself when it starts with `{`.
    #[arg(long)]
    pub spec: String,
    /// Write the stats JSON here (overrides the spec's `stats_path`).
    #[arg(long)]
    pub stats: Option<PathBuf>,
}

/// Runs the emulator in the current network namespace until the spec's `until_ns` or
/// a signal; writes its stats and returns them.
pub fn emulate_main(args: &EmulateArgs) -> Result<EmuStats> {
    let text = if args.spec.trim_start().starts_with('{') {
        args.spec.clone()
    } else {
        std::fs::read_to_string(&args.spec).with_context(|| format!("spec {}", args.spec))?
    };
    let mut spec: EmuSpec = serde_json::from_str(&text).context("emulator spec JSON")?;
    if let Some(p) = &args.stats {
        spec.stats_path = Some(p.clone());
    }
    let cmdline: Vec<String> = std::env::args().collect();
    let stats = run(&spec, &cmdline.join(" "))?;
    if let Some(p) = &spec.stats_path {
        let json = serde_json::to_string_pretty(&stats)?;
        std::fs::write(p, json + "\n").with_context(|| format!("{}", p.display()))?;
    }
    Ok(stats)
}

/// A frame waiting in a model (the whole Ethernet frame).
struct Frame {
    bytes: Vec<u8>,
}

/// A bound `AF_PACKET` socket on one interface.
struct PacketSocket {
    fd: OwnedFd,
    ifname: String,
    mtu: usize,
}

const ETH_HLEN: usize = 14;

impl PacketSocket {
    fn open(ifname: &str) -> Result<Self> {
        let ctx = || format!("packet socket on {ifname}");
        let (fd, ifindex) = sys::packet_socket(ifname, 16 << 20).with_context(ctx)?;
        let raw = fd.as_raw_fd();
        let mtu = mtu_of(raw, ifname).with_context(ctx)?;
        let _ = sys::setsockopt(raw, libc::SOL_PACKET, sys::PACKET_QDISC_BYPASS, &1i32);
        let big: i32 = 16 << 20;
        if sys::setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &big).is_err() {
            sys::setsockopt(raw, libc::SOL_SOCKET, libc::SO_SNDBUF, &big).with_context(ctx)?;
        }
        // Promiscuous, so frames for the far end's MAC are seen whatever the driver.
        // SAFETY: packet_mreq is POD.
        let mut mreq: libc::packet_mreq = unsafe { mem::zeroed() };
        mreq.mr_ifindex = ifindex;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        let _ = sys::setsockopt(raw, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq);
        // Drop whatever arrived between socket() and bind().
        let mut scratch = [0u8; 2048];
        // SAFETY: receives into a local buffer.
        while unsafe { libc::recv(raw, scratch.as_mut_ptr().cast(), scratch.len(), 0) } > 0 {}
        Ok(Self {
            fd,
            ifname: ifname.to_owned(),
            mtu,
        })
    }

    /// Reads one frame; `Ok(None)` when nothing is pending. Returns the frame length,
    /// the kernel's receive timestamp (ns of `CLOCK_REALTIME`, 0 if absent) and
    /// whether the frame is one this host sent (skipped).
    fn recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, u64, bool)>> {
        // SAFETY: msghdr/sockaddr_ll are POD; all pointers refer to locals alive for
        // the call.
        unsafe {
            let mut sll: libc::sockaddr_ll = mem::zeroed();
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr().cast(),
                iov_len: buf.len(),
            };
            let mut cmsg = [0u64; 16];
            let mut msg: libc::msghdr = mem::zeroed();
            msg.msg_name = (&mut sll as *mut libc::sockaddr_ll).cast();
            msg.msg_namelen = size_of::<libc::sockaddr_ll>() as u32;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = cmsg.as_mut_ptr().cast();
            msg.msg_controllen = size_of_val(&cmsg);
            let n = libc::recvmsg(self.fd.as_raw_fd(), &mut msg, libc::MSG_TRUNC);
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                    _ => Err(e),
                };
            }
            let mut ts = 0u64;
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == sys::SO_TIMESTAMPNS {
                    let t: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                    ts = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
            let outgoing = sll.sll_pkttype == libc::PACKET_OUTGOING;
            Ok(Some((n as usize, ts, outgoing)))
        }
    }

    fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: sends `frame.len()` bytes from a valid buffer on a bound socket.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        sys::cvt_size(n).map(drop)
    }

    /// Frames the kernel dropped on this socket since the last call.
    fn drops(&self) -> u64 {
        // SAFETY: tpacket_stats is POD.
        let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
        match sys::getsockopt(
            self.fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st,
        ) {
            Ok(_) => u64::from(st.tp_drops),
            Err(_) => 0,
        }
    }
}

fn mtu_of(fd: RawFd, name: &str) -> io::Result<usize> {
    let mut req = sys::ifreq_for(name)?;
    // SAFETY: SIOCGIFMTU reads the name and fills the MTU.
    sys::cvt(unsafe { libc::ioctl(fd, libc::SIOCGIFMTU, &mut req) })?;
    // SAFETY: filled by the kernel.
    Ok(unsafe { req.ifr_ifru.ifru_mtu } as usize)
}

/// Whether a frame is ARP or IPv6 neighbour discovery (forwarded without the model).
pub fn is_control_frame(frame: &[u8]) -> bool {
    let Some(ethertype) = frame.get(12..14) else {
        return false;
    };
    match u16::from_be_bytes([ethertype[0], ethertype[1]]) {
        0x0806 => true,
        // IPv6, next header ICMPv6 (58), type 133..=137 (RS, RA, NS, NA, redirect).
        0x86dd => {
            frame.get(ETH_HLEN + 6) == Some(&58)
                && frame
                    .get(ETH_HLEN + 40)
                    .is_some_and(|t| (133..=137).contains(t))
        }
        _ => false,
    }
}

/// One direction: a model between an ingress and an egress socket.
struct Dir {
    link: usize,
    up: bool,
    model: LinkDirection<Frame>,
    ingress: usize,
    egress: usize,
    stats: DirectionStats,
    lateness_ns: Vec<u64>,
    read_delay_ns: Vec<u64>,
    /// The model's unused and transmitted bytes at the start and the end of the spec's
    /// `window_ns`, once the emulator has passed them.
    window: [Option<(u64, u64)>; 2],
}

struct Log {
    file: Option<io::BufWriter<std::fs::File>>,
    frames: bool,
    /// The models' clock minus this is scenario time (the spec's `warmup_ns`).
    warmup: Duration,
}

impl Log {
    fn line(&mut self, args: std::fmt::Arguments<'_>) {
        if let Some(f) = &mut self.file {
            let _ = f.write_fmt(args);
            let _ = f.write_all(b"\n");
        }
    }
}

fn scn(now_ns: u64, base_ns: u64) -> Duration {
    Duration::from_nanos(now_ns.saturating_sub(base_ns))
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

/// Scenario time (ms, negative before time 0) of an instant on the models' clock.
fn scn_ms(at: Duration, warmup: Duration) -> f64 {
    ms(at) - ms(warmup)
}

/// The emulator loop (see the module docs). `cmdline` goes into the log header.
pub fn run(spec: &EmuSpec, cmdline: &str) -> Result<EmuStats> {
    if spec.links.is_empty() {
        bail!("emulator spec has no links");
    }
    sys::set_timer_slack(1);
    let qos = if spec.cpu_latency_qos {
        CpuLatencyGuard::hold(0).map_err(|e| e.to_string())
    } else {
        Err("not asked".into())
    };
    let rt = match spec.rt_priority {
        Some(p) => sys::set_realtime(p).map(|_| p).map_err(|e| e.to_string()),
        None => Err("not asked".into()),
    };
    let signals = SignalFd::new().context("signalfd")?;
    let mut sockets = Vec::new();
    let mut dirs = Vec::new();
    for (i, l) in spec.links.iter().enumerate() {
        let c = sockets.len();
        sockets.push(PacketSocket::open(&l.client_if)?);
        sockets.push(PacketSocket::open(&l.server_if)?);
        for (up, d) in [(true, &l.up), (false, &l.down)] {
            let params = d
                .params()
                .with_context(|| format!("link {} {}", l.name, if up { "up" } else { "down" }))?;
            dirs.push(Dir {
                link: i,
                up,
                model: LinkDirection::new(params, d.seed, Duration::from_nanos(spec.warmup_ns)),
                ingress: if up { c } else { c + 1 },
                egress: if up { c + 1 } else { c },
                stats: DirectionStats::default(),
                lateness_ns: Vec::new(),
                read_delay_ns: Vec::new(),
                window: [None; 2],
            });
        }
    }
    let mut log = Log {
        file: match &spec.log_path {
            Some(p) => Some(io::BufWriter::new(
                std::fs::File::create(p).with_context(|| format!("{}", p.display()))?,
            )),
            None => None,
        },
        frames: spec.log_frames,
        warmup: Duration::from_nanos(spec.warmup_ns),
    };
    write_header(&mut log, spec, cmdline);
    log.line(format_args!(
        "# scheduler: {}",
        match &rt {
            Ok(p) => format!("SCHED_FIFO priority {p}"),
            Err(e) => format!("default ({e})"),
        }
    ));
    log.line(format_args!(
        "# cpu wake-up latency request: {}",
        match &qos {
            Ok(_) => "0 us (held while running)".to_owned(),
            Err(e) => format!("none ({e})"),
        }
    ));

    let epoll = Epoll::new()?;
    let timer = TimerFd::new()?;
    const TIMER: u64 = u64::MAX;
    const SIGNAL: u64 = u64::MAX - 1;
    for (i, s) in sockets.iter().enumerate() {
        epoll.add(s.fd.as_raw_fd(), i as u64)?;
    }
    epoll.add(timer.raw(), TIMER)?;
    epoll.add(signals.raw(), SIGNAL)?;
    let spin_ns = spec.spin_us * 1000;
    // The models' clock: 0 at `base_ns - warmup_ns` (scenario time 0 is `warmup` on it).
    let base = spec.base_ns.saturating_sub(spec.warmup_ns);
    // Tokens to serve: at first every socket, then what epoll reports.
    let mut ready: Vec<u64> = (0..sockets.len() as u64).collect();
    let mut buf = vec![0u8; 65536];
    let mut stop = false;
    // Ingress socket -> direction index.
    let dir_of_socket: Vec<usize> = (0..sockets.len())
        .map(|s| {
            dirs.iter()
                .position(|d| d.ingress == s)
                .expect("every socket is the ingress of one direction")
        })
        .collect();
    let mut armed_at = 0u64;
    // Spinning under SCHED_FIFO without a break reaches the kernel's real-time
    // throttling: the emulator would stop for 50 ms once a second, and every link with it.
    let mut budget = latebind_io::clock::SpinBudget::new(sys::mono_ns());
    loop {
        // 2. Read what is pending on the sockets epoll reported.
        for &token in &ready {
            if let Ok(s) = usize::try_from(token)
                && s < sockets.len()
            {
                read_socket(
                    &sockets,
                    s,
                    &mut dirs[dir_of_socket[s]],
                    &mut buf,
                    base,
                    &mut log,
                );
            }
        }
        if ready.contains(&SIGNAL) && signals.take() {
            stop = true;
        }
        if ready.contains(&TIMER) {
            timer.clear();
            armed_at = 0;
        }
        // 3. Advance the models and send what is due.
        let now = sys::mono_ns();
        for d in &mut dirs {
            drive(d, &sockets, now, base, &mut log, &spec.links[d.link].name);
        }
        if let Some(edges) = spec.window_ns {
            for (i, edge) in edges.into_iter().enumerate() {
                if now < edge {
                    continue;
                }
                for d in &mut dirs {
                    d.window[i].get_or_insert_with(|| {
                        let m = &d.model;
                        (m.unused_bytes(scn(now, base)), m.stats().bytes_transmitted)
                    });
                }
            }
        }
        if stop || spec.until_ns.is_some_and(|u| now >= u) {
            break;
        }
        // 4. Sleep or spin until the next deadline.
        let next = dirs
            .iter()
            .filter_map(|d| d.model.poll_timeout())
            .min()
            .map(|t| base.saturating_add(t.as_nanos() as u64));
        let now = sys::mono_ns();
        let spin = budget.may_spin(now);
        let timeout = match next {
            Some(n) if n <= now || (spin && n <= now.saturating_add(spin_ns)) => 0,
            _ => {
                // Out of spin budget: sleep until the deadline itself.
                let early = if spin { spin_ns } else { 0 };
                let mut wake = next.map_or(u64::MAX, |n| n - early);
                if let Some(u) = spec.until_ns {
                    wake = wake.min(u);
                }
                // The window's edges are taken on time even on idle links.
                if let Some(edge) = spec.window_ns.into_iter().flatten().find(|&e| e > now) {
                    wake = wake.min(edge);
                }
                if wake != u64::MAX && wake != armed_at {
                    timer.arm_at(wake)?;
                    armed_at = wake;
                }
                -1
            }
        };
        epoll.wait(&mut ready, timeout)?;
        if timeout != 0 {
            budget.slept(now, sys::mono_ns());
        }
    }
    let end = scn(sys::mono_ns(), spec.base_ns);
    log.line(format_args!("{:.3} exit", ms(end)));
    if let Some(f) = &mut log.file {
        let _ = f.flush();
    }
    let socket_drops = sockets.iter().map(PacketSocket::drops).sum();
    let mut stats = collect_stats(spec, dirs, end, socket_drops);
    stats.cpu_latency_qos = qos.is_ok();
    stats.realtime = rt.is_ok();
    Ok(stats)
}

fn write_header(log: &mut Log, spec: &EmuSpec, cmdline: &str) {
    log.line(format_args!("# tool: latebind emulate"));
    log.line(format_args!("# version: {}", env!("CARGO_PKG_VERSION")));
    log.line(format_args!("# command line: {cmdline}"));
    log.line(format_args!(
        "# base time: {} ns of CLOCK_MONOTONIC (scenario time 0)",
        spec.base_ns
    ));
    log.line(format_args!(
        "# now: {} ns of CLOCK_MONOTONIC; spin threshold {} us",
        sys::mono_ns(),
        spec.spin_us
    ));
    if spec.warmup_ns > 0 {
        log.line(format_args!(
            "# the models start {:.3} s before time 0 (warmup); times below are scenario time",
            spec.warmup_ns as f64 / 1e9
        ));
    }
    for l in &spec.links {
        log.line(format_args!(
            "# link {}: {} (client side) <-> {} (server side); up {}; down {}",
            l.name,
            l.client_if,
            l.server_if,
            describe(&l.up),
            describe(&l.down)
        ));
    }
    log.line(format_args!(
        "# columns: scenario_ms link direction event [bytes scheduled_ms late_us]"
    ));
}

fn describe(d: &DirectionSpec) -> String {
    let mut s = match &d.rate {
        RateSpec::Fixed { bits_per_sec } => format!("rate {:.3} Mbit/s", bits_per_sec / 1e6),
        RateSpec::Trace { path } => format!("trace {}", path.display()),
    };
    let _ = write!(
        s,
        ", delay {:.3} ms, jitter {:.3} ms, loss {}, queue {} packets, outages {:?} ns, seed {}",
        d.delay_ns as f64 / 1e6,
        d.jitter_ns as f64 / 1e6,
        d.loss,
        d.queue_packets,
        d.outages_ns,
        d.seed
    );
    s
}

fn read_socket(
    sockets: &[PacketSocket],
    s: usize,
    d: &mut Dir,
    buf: &mut [u8],
    base: u64,
    log: &mut Log,
) {
    let sock = &sockets[s];
    let egress = &sockets[d.egress];
    loop {
        let (n, ts_rt, outgoing) = match sock.recv(buf) {
            Ok(Some(x)) => x,
            Ok(None) => break,
            Err(e) => {
                log.line(format_args!("# recv on {}: {e}", sock.ifname));
                break;
            }
        };
        if outgoing {
            continue;
        }
        let now = sys::mono_ns();
        d.stats.frames_in += 1;
        if n > buf.len() {
            // Truncated: larger than any MTU we forward.
            d.stats.too_big += 1;
            continue;
        }
        let frame = &buf[..n];
        if is_control_frame(frame) {
            d.stats.control_forwarded += 1;
            if let Err(e) = egress.send(frame) {
                d.stats.send_errors += 1;
                d.stats.send_error_last = Some(e.to_string());
            }
            continue;
        }
        if n.saturating_sub(ETH_HLEN) > egress.mtu {
            d.stats.too_big += 1;
            continue;
        }
        // The kernel's receive time, on the monotonic clock (never after now).
        let arrival = if ts_rt > 0 {
            let off = sys::realtime_offset_ns();
            let a = (i128::from(ts_rt) - off).clamp(0, i128::from(now)) as u64;
            d.read_delay_ns.push(now - a);
            a
        } else {
            now
        };
        let len = n - ETH_HLEN;
        let at = scn(arrival, base);
        match d.model.enqueue(
            at,
            len,
            Frame {
                bytes: frame.to_vec(),
            },
        ) {
            Ok(_) => {}
            Err((reason, _)) => {
                if log.frames {
                    log.line(format_args!(
                        "{:.3} {} {} refused {} {reason}",
                        scn_ms(at, log.warmup),
                        d.link,
                        if d.up { "up" } else { "down" },
                        len
                    ));
                }
            }
        }
    }
}

fn drive(d: &mut Dir, sockets: &[PacketSocket], now: u64, base: u64, log: &mut Log, name: &str) {
    let t = scn(now, base);
    if d.model.poll_timeout().is_some_and(|x| x <= t) {
        d.model.handle_timeout(t);
    }
    let dir = if d.up { "up" } else { "down" };
    while let Some(ev) = d.model.poll_event() {
        match ev {
            LinkEvent::Delivered { payload, at, .. } => {
                let sent = sys::mono_ns();
                let late = sent.saturating_sub(base + at.as_nanos() as u64);
                d.lateness_ns.push(late);
                if late > 1_000_000 {
                    d.stats.late_over_1ms += 1;
                }
                let len = payload.bytes.len() - ETH_HLEN;
                match sockets[d.egress].send(&payload.bytes) {
                    Ok(()) => {
                        d.stats.delivered += 1;
                        d.stats.bytes_delivered += len as u64;
                    }
                    Err(e) => {
                        d.stats.send_errors += 1;
                        d.stats.send_error_last = Some(e.to_string());
                    }
                }
                if log.frames {
                    log.line(format_args!(
                        "{:.3} {name} {dir} delivered {len} {:.3} {}",
                        scn_ms(scn(sent, base), log.warmup),
                        scn_ms(at, log.warmup),
                        late / 1000
                    ));
                }
            }
            LinkEvent::Lost {
                payload,
                reason,
                at,
                ..
            } => {
                if log.frames {
                    log.line(format_args!(
                        "{:.3} {name} {dir} lost {} {reason}",
                        scn_ms(at, log.warmup),
                        payload.bytes.len() - ETH_HLEN
                    ));
                }
            }
            LinkEvent::OutageStart { at } => {
                let t = scn_ms(at, log.warmup);
                log.line(format_args!("{t:.3} {name} {dir} outage-start"));
            }
            LinkEvent::OutageEnd { at } => {
                let t = scn_ms(at, log.warmup);
                log.line(format_args!("{t:.3} {name} {dir} outage-end"));
            }
            LinkEvent::TxDone { .. } => {}
        }
    }
}

fn us(samples: &[u64]) -> Percentiles {
    let v: Vec<f64> = samples.iter().map(|&n| n as f64 / 1e3).collect();
    Percentiles::of(&v).rounded()
}

fn collect_stats(spec: &EmuSpec, dirs: Vec<Dir>, end: Duration, socket_drops: u64) -> EmuStats {
    let mut links: Vec<LinkEmuStats> = spec
        .links
        .iter()
        .map(|l| LinkEmuStats {
            name: l.name.clone(),
            ..LinkEmuStats::default()
        })
        .collect();
    let mut all = Vec::new();
    for mut d in dirs {
        let m = d.model.stats();
        d.stats.enqueued = m.enqueued;
        d.stats.dropped_queue_full = m.dropped_queue_full;
        d.stats.dropped_outage = m.dropped_outage;
        d.stats.lost_random = m.lost_random;
        d.stats.lost_outage = m.lost_outage;
        d.stats.max_backlog = m.max_backlog;
        d.stats.lateness_us = us(&d.lateness_ns);
        d.stats.read_delay_us = us(&d.read_delay_ns);
        if let [Some((u0, t0)), Some((u1, t1))] = d.window {
            d.stats.window = Some(CapacityWindow {
                offered_bytes: (u1 + t1).saturating_sub(u0 + t0),
                unused_bytes: u1.saturating_sub(u0),
            });
        }
        all.extend_from_slice(&d.lateness_ns);
        let l = &mut links[d.link];
        if d.up {
            l.up = d.stats;
        } else {
            l.down = d.stats;
        }
    }
    EmuStats {
        tool: "latebind emulate".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        base_ns: spec.base_ns,
        ran_until_s: end.as_secs_f64(),
        spin_us: spec.spin_us,
        socket_drops,
        cpu_latency_qos: false,
        realtime: false,
        lateness_us: us(&all),
        links,
    }
}

/// Reads an emulator stats file.
pub fn read_stats(path: &Path) -> Result<EmuStats> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> DirectionSpec {
        DirectionSpec {
            rate: RateSpec::Fixed { bits_per_sec: 1e7 },
            delay_ns: 20_000_000,
            jitter_ns: 0,
            loss: 0.1,
            queue_packets: 1000,
            outages_ns: vec![[1_000_000_000, 1_500_000_000]],
            drop_in_flight_on_outage: true,
            seed: 42,
        }
    }

    #[test]
    fn spec_json_round_trips() {
        let spec = EmuSpec {
            base_ns: 123,
            until_ns: Some(456),
            spin_us: 200,
            links: vec![EmuLinkSpec {
                name: "wifi".into(),
                client_if: "ec0".into(),
                server_if: "es0".into(),
                up: dir(),
                down: DirectionSpec {
                    rate: RateSpec::Trace {
                        path: "/x/y.trace".into(),
                    },
                    ..dir()
                },
            }],
            stats_path: Some("/tmp/s.json".into()),
            log_path: None,
            log_frames: false,
            cpu_latency_qos: true,
            rt_priority: Some(50),
            warmup_ns: 0,
            window_ns: Some([1, 2]),
        };
        let json = serde_json::to_string(&spec).unwrap();
        let back: EmuSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, spec);
        assert!(
            json.contains(r#""rate":{"fixed":{"bits_per_sec":10000000.0}}"#),
            "{json}"
        );
    }

    #[test]
    fn direction_spec_becomes_link_params() {
        let p = dir().params().unwrap();
        assert_eq!(p.delay, Duration::from_millis(20));
        assert_eq!(
            p.outages,
            vec![(Duration::from_secs(1), Duration::from_millis(1500))]
        );
        assert_eq!(p.rate, Rate::fixed_mbps(10.0));
        let mut bad = dir();
        bad.loss = 2.0;
        assert!(bad.params().is_err());
        let mut missing = dir();
        missing.rate = RateSpec::Trace {
            path: "/nonexistent/trace".into(),
        };
        assert!(
            missing
                .params()
                .unwrap_err()
                .to_string()
                .contains("/nonexistent/trace")
        );
    }

    #[test]
    fn control_frames_are_arp_and_neighbour_discovery() {
        let mut arp = vec![0u8; 42];
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(is_control_frame(&arp));
        let mut ip4 = vec![0u8; 60];
        ip4[12] = 0x08;
        assert!(!is_control_frame(&ip4));
        let mut ns = vec![0u8; 14 + 40 + 24];
        ns[12] = 0x86;
        ns[13] = 0xdd;
        ns[14 + 6] = 58;
        ns[14 + 40] = 135;
        assert!(is_control_frame(&ns));
        ns[14 + 40] = 128; // echo request
        assert!(!is_control_frame(&ns));
        assert!(!is_control_frame(&[0u8; 10]));
    }
}
