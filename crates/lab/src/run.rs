//! The runner: one scenario, one mode, on real kernels.
//!
//! ```text
//!  1. build the topology (netns.rs) and the mode's routing and qdiscs
//!  2. pick the base time (scenario time 0) a little in the future, so that every
//!     helper is up before it (mode late: one more second for the daemons)
//!  3. start the emulator; mode late: the server and client daemons, then wait for
//!     their handshake; then the receivers, then the senders (each sleeps until its
//!     flow's start); all of them get absolute times, so none waits for the runner
//!  4. the runner sleeps (then spins) to each outage edge and changes interfaces and
//!     routes through rtnetlink, sampling the client's qdiscs every millisecond
//!  5. after duration + drain every helper has written its JSON and exited: build the
//!     simulator's report from the receivers, senders, emulator and qdisc counters (its
//!     `cuts` from what the traffic tools measured around the cut instants they were
//!     given, with the simulator's `latebind_sim::cuts`)
//! ```
//!
//! # Mode `early` (Linux default routing)
//!
//! - Routes between the application addresses: the client reaches 198.19.0.1 via
//!   link 0 (metric 10), link 1 (metric 20), ...; the server reaches 198.18.0.2 the
//!   same way. Linux moves the route when an interface goes down.
//! - The uplink bottleneck is the client's interface, as in baselines.md: `htb rate
//!   <rate_mbps>` with a `pfifo limit <qdisc_packets + driver_packets>` child on
//!   `c{i}`. The emulator's uplink model then only adds delay, jitter, loss and
//!   outages (its rate is 100 Gbit/s and its queue unbounded). A link whose uplink
//!   follows a mahimahi trace cannot be shaped by htb: its uplink is shaped by the
//!   emulator's model with a queue of `qdisc_packets + driver_packets` instead
//!   (invisible to the client's TCP: no push-back), and a note says so.
//! - The downlink is shaped by the emulator (rate or trace, `queue_packets`), which the
//!   server cannot see, as in the simulator.
//! - Outage `[start, end)`: at `start` the runner reads the qdisc's backlog, sets `c{i}`
//!   down (Linux drops everything queued there: the packets lost at the outage,
//!   uplink) and withdraws the server's route through `s{i}`, so the server fails over
//!   at once like the simulator's optimistic baseline; at `end` it sets `c{i}` up and
//!   puts the routes (and the permanent neighbour entries Linux removed) back. The
//!   server's `s{i}` stays up, so uplink packets already propagating still arrive
//!   (the simulator's uplink semantics); the emulator's models drop what the outage
//!   takes on the link itself.
//! - A remote outage (the link's `outage_local = false`, every mode): the runner touches
//!   no interface and no route; only the emulator's models drop, in both directions, so
//!   the client's qdisc keeps sending into the dead link at its rate. What the
//!   emulator's uplink refuses meanwhile left the client: it counts as lost at the
//!   outage, uplink (as in the simulator), not as refused.
//!
//! # Mode `late` (the latebind daemons; details in [`crate::late`])
//!
//! - The applications talk over the tunnel (10.77.0.2 <-> 10.77.0.1); the daemons'
//!   link sockets use the links' connected /24s, so no route is installed.
//! - Shaping as in mode early, but the `pfifo` under `htb` holds the link's
//!   `queue_packets`: the daemon counts its datagrams below the binding point until they
//!   leave the qdisc (`SIOCOUTQ`), so the qdisc holds at most its budget; it keeps it
//!   nearly empty, and what waits goes into the daemon's per-flow queues.
//! - Outage: `c{i}` goes down in the client namespace (the daemon sees the netlink
//!   event) and the emulator drops what the model loses; the server's side is not
//!   touched: it learns of the cut through the protocol. Lost at the outage, uplink:
//!   the qdisc's backlog at the cut plus the bound datagrams the client daemon still
//!   held for that link (its status's `held_dropped`).
//! - The report's `engine` is both daemons' counters, read just before they stop.
//! - With `capture_departures`, a capture on `ec0` (the emulator's side of link 0,
//!   kernel timestamps) compares the spacing of the tunnel's data datagrams with
//!   `[late] pacing_rate_mbps` (`departures.json`, and a note): the dispatch stage's
//!   departure accuracy (docs/RESULTS.md 9.7).
//!
//! # Mode `mptcp` (kernel multipath TCP; details in [`crate::mptcp`])
//!
//! - TCP flows only (a UDP flow is refused by name); one subflow per link, policy
//!   routing by source address, the FIFO of mode early at each `c{i}`, outages as in
//!   mode late.

use std::fmt::Write as _;
use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use latebind_sim::Scenario;
use latebind_sim::cuts::{self, FlowCuts, cut_reports};
use latebind_sim::report::{LinkReport, Report, SimReport, Totals, UnusedReport};
use serde::{Deserialize, Serialize};

use latebind_daemon::status::Status;

use crate::emu::{self, DirectionSpec, EmuLinkSpec, EmuSpec, EmuStats, RateSpec};
use crate::netlink::{Netlink, QdiscStats, Route};
use crate::netns::{CLIENT_APP, Helper, LINK_PREFIX_LEN, LinkAddrs, Role, SERVER_APP, Topology};
use crate::traffic::{self, Kind, RecvSummary, SendSummary};
use crate::{late, mptcp, sys};

/// Which stack the lab runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabMode {
    /// Linux default routing (early binding).
    Early,
    /// The latebind daemons (see [`crate::late`]).
    Late,
    /// Kernel multipath TCP, TCP flows only (see [`crate::mptcp`]).
    Mptcp,
}

impl LabMode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Early => "early",
            Self::Late => "late",
            Self::Mptcp => "mptcp",
        }
    }
}

impl std::str::FromStr for LabMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "early" => Ok(Self::Early),
            "late" => Ok(Self::Late),
            "mptcp" => Ok(Self::Mptcp),
            other => Err(format!("mode {other:?}: expected early, late or mptcp")),
        }
    }
}

/// Knobs of a lab run (defaults in [`LabOptions::default`]).
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Folder for the run's files (specs, logs, JSON summaries); default: a new folder
    /// under the system's temp dir.
    pub work_dir: Option<PathBuf>,
    /// Keep the run's folder after a successful run (it is always kept on failure).
    pub keep: bool,
    /// The emulator spins instead of sleeping when its next deadline is closer (µs).
    pub spin_us: u64,
    /// TCP congestion control of every TCP sender (the simulator's TCP is Cubic).
    pub cc: String,
    /// The TCP endpoints ask for ECN (`net.ipv4.tcp_ecn=1`); otherwise they only accept it
    /// (the kernel's default, 2).
    pub ecn: bool,
    /// Time between starting the helpers and scenario time 0.
    pub lead: Duration,
    /// How often the client's qdiscs are sampled for their backlog.
    pub sample_every: Duration,
    /// The emulator logs one line per frame.
    pub log_frames: bool,
    /// The emulator holds a CPU wake-up latency request of 0 while it runs (see
    /// [`EmuSpec::cpu_latency_qos`](crate::emu::EmuSpec::cpu_latency_qos)).
    pub cpu_latency_qos: bool,
    /// Real-time (`SCHED_FIFO`) priority of the traffic tools, the daemons (mode late)
    /// and the runner's timeline thread; the emulator gets 10 more. None: the default
    /// scheduler everywhere.
    pub rt_priority: Option<i32>,
    /// Mode late: time added before scenario time 0 for the daemons to start and
    /// complete their handshake (on top of `lead`, half of which is left for the
    /// traffic tools to start).
    pub daemon_warmup: Duration,
    /// Mode late: capture the tunnel's datagrams on the emulator's side of link 0
    /// (`ec0`, kernel timestamps) and compare their spacing with `[late]
    /// pacing_rate_mbps` over the first flow's time ([`LabOutcome::departures`]).
    pub capture_departures: bool,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            work_dir: None,
            keep: false,
            spin_us: 200,
            cc: "cubic".into(),
            ecn: false,
            lead: Duration::from_millis(1000),
            sample_every: Duration::from_millis(1),
            log_frames: false,
            cpu_latency_qos: true,
            rt_priority: Some(40),
            daemon_warmup: Duration::from_millis(1000),
            capture_departures: false,
        }
    }
}

/// An interface change the runner made at an outage edge.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct OutageEdge {
    /// Link index.
    pub link: usize,
    /// `down` or `up`.
    pub what: String,
    /// Scheduled scenario time, s.
    pub scheduled_s: f64,
    /// How late the interface change was made, µs.
    pub late_us: f64,
    /// `down`: packets in the client's qdisc just before (what Linux drops).
    pub qdisc_backlog: u32,
    /// `down`: of those, packets that left before the interface went down.
    pub dequeued_meanwhile: u64,
}

/// Everything a run produced.
#[derive(Clone, Debug)]
pub struct LabOutcome {
    /// The report, in the simulator's shape.
    pub report: Report,
    /// The emulator's counters and timing.
    pub emulator: EmuStats,
    /// Senders' summaries, per flow (None if a sender wrote none).
    pub senders: Vec<Option<SendSummary>>,
    /// Receivers' summaries, per flow.
    pub receivers: Vec<RecvSummary>,
    /// Interface changes at outage edges.
    pub edges: Vec<OutageEdge>,
    /// Caveats of this run (what differs from the simulator, what could not be done).
    pub notes: Vec<String>,
    /// The run's folder (deleted after the run unless kept).
    pub run_dir: PathBuf,
    /// Mode late with `capture_departures`: the spacing of link 0's tunnel datagrams.
    pub departures: Option<crate::capture::PacedDepartures>,
}

/// Runs `scenario` in `mode` on real kernels. `exe` is a binary that understands
/// `emulate` and `traffic` (the CLI passes `std::env::current_exe()`).
pub fn run(scenario: &Scenario, mode: LabMode, exe: &Path) -> Result<Report> {
    run_with(scenario, mode, exe, &LabOptions::default()).map(|o| o.report)
}

/// [`run`] with options, returning everything the run measured.
pub fn run_with(
    scenario: &Scenario,
    mode: LabMode,
    exe: &Path,
    opts: &LabOptions,
) -> Result<LabOutcome> {
    if mode == LabMode::Mptcp {
        mptcp::check_flows(scenario)?;
    }
    check_new_addresses(scenario, mode)?;
    check_kinds(scenario)?;
    require_root()?;
    if !exe.exists() {
        bail!("helper binary {} does not exist", exe.display());
    }
    let run_dir = match &opts.work_dir {
        Some(d) => d.clone(),
        None => {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            std::env::temp_dir().join(format!(
                "latebind-lab-{}-{}-{}",
                scenario.spec.scenario.name,
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ))
        }
    };
    std::fs::create_dir_all(&run_dir).with_context(|| format!("{}", run_dir.display()))?;
    let result = run_mode(scenario, mode, exe, opts, &run_dir);
    match result {
        Ok(outcome) => {
            if !opts.keep && opts.work_dir.is_none() {
                let _ = std::fs::remove_dir_all(&run_dir);
            }
            Ok(outcome)
        }
        Err(e) => Err(e.context(format!("lab run files kept in {}", run_dir.display()))),
    }
}

/// Fails for a flow kind the lab has no traffic for, and for a second `quic-bulk` flow
/// (each is a QUIC server on the server's UDP port 443), naming the flow before anything
/// is set up.
fn check_kinds(scenario: &Scenario) -> Result<()> {
    let mut quic = None;
    for (i, f) in scenario.spec.flows.iter().enumerate() {
        match Kind::parse(&f.kind) {
            None => {
                let runs = Kind::ALL.map(Kind::as_str).join(", ");
                bail!(
                    "flows[{i}].kind = {:?} (flow {:?}): expected a kind the lab runs: \
                     {runs}",
                    f.kind,
                    f.name
                );
            }
            Some(Kind::QuicBulk) => {
                if let Some(first) = quic {
                    bail!(
                        "flows[{i}].kind = \"quic-bulk\" (flow {:?}): the lab runs one \
                         quic-bulk flow, on the server's UDP port {QUIC_PORT}, and flows[{first}] \
                         is one",
                        f.name
                    );
                }
                quic = Some(i);
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The server's UDP port of a `quic-bulk` flow: the tunnel takes a flow to or from it
/// for QUIC (`docs/protocol.md` 4.2).
const QUIC_PORT: u16 = 443;

/// Fails unless the process may create network namespaces.
pub fn require_root() -> Result<()> {
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the lab needs root (it creates network namespaces, veths and qdiscs)");
    }
    Ok(())
}

/// The simulator's per-direction seed (splitmix64 of seed, link, direction), so the
/// emulator's loss and jitter draws follow the simulator's for the same packets.
pub fn seed_for(seed: u64, link: usize, dir: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(link as u64 * 2 + dir + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn secs_ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9).round() as u64
}

/// Sorted, merged outage intervals in ns (the link model merges them the same way).
pub fn merged_outages(outages: &[[f64; 2]]) -> Vec<[u64; 2]> {
    let mut spans: Vec<[u64; 2]> = outages
        .iter()
        .map(|[a, b]| [secs_ns(*a), secs_ns(*b)])
        .collect();
    spans.sort_unstable();
    let mut out: Vec<[u64; 2]> = Vec::new();
    for [s, e] in spans {
        match out.last_mut() {
            Some(last) if s <= last[1] => last[1] = last[1].max(e),
            _ => out.push([s, e]),
        }
    }
    out
}

/// A link's up and down rates: fixed or a trace (the simulator's precedence: a trace
/// wins over `rate_up_mbps` / `rate_down_mbps`, which win over `rate_mbps`).
pub(crate) fn rates(scenario: &Scenario, i: usize) -> (RateSpec, RateSpec) {
    let l = &scenario.spec.links[i];
    let pick = |t: Option<&PathBuf>, up: bool| match (t.or(l.trace.as_ref()), l.fixed_rate_mbps(up))
    {
        (Some(p), _) => RateSpec::Trace {
            path: std::path::absolute(scenario.resolve(p)).unwrap_or_else(|_| scenario.resolve(p)),
        },
        (None, Some(r)) => RateSpec::Fixed {
            bits_per_sec: r * 1e6,
        },
        // Validated by the scenario: a rate or a trace.
        (None, None) => RateSpec::Fixed { bits_per_sec: 1e9 },
    };
    (
        pick(l.trace_up.as_ref(), true),
        pick(l.trace_down.as_ref(), false),
    )
}

/// The uplink rate htb can shape (a fixed rate), if any.
fn htb_rate(up: &RateSpec) -> Option<f64> {
    match up {
        RateSpec::Fixed { bits_per_sec } => Some(*bits_per_sec),
        RateSpec::Trace { .. } => None,
    }
}

/// The client's and the server's route over link `l` (metric 10, 20, ...).
fn routes(l: &LinkAddrs, client_oif: i32, server_oif: i32) -> (Route, Route) {
    let metric = 10 * (l.index as u32 + 1);
    (
        Route {
            dst: SERVER_APP,
            gateway: l.server,
            oif: client_oif,
            metric,
            src: Some(CLIENT_APP),
        },
        Route {
            dst: CLIENT_APP,
            gateway: l.client,
            oif: server_oif,
            metric,
            src: Some(SERVER_APP),
        },
    )
}

/// The client's address on a link after its `k`-th move (`outage_new_address`, `k` from
/// 1): host `10 + k` of the link's /24, `.11` to `.250` and round again (the original is
/// `.1`, the server `.2`).
fn moved_address(original: Ipv4Addr, k: u32) -> Ipv4Addr {
    let [a, b, c, _] = original.octets();
    Ipv4Addr::new(a, b, c, 11 + (k.saturating_sub(1) % 240) as u8)
}

/// What `outage_new_address` needs of a lab run: mode late or early (kernel MPTCP's
/// endpoints are the links' first addresses), and no flow outside the tunnel on the link
/// (it is bound to the link's first address).
fn check_new_addresses(scenario: &Scenario, mode: LabMode) -> Result<()> {
    for (i, l) in scenario.spec.links.iter().enumerate() {
        if !l.outage_new_address {
            continue;
        }
        if mode == LabMode::Mptcp {
            bail!(
                "links[{i}].outage_new_address = true: not run in mode mptcp (its subflows' \
                 endpoints are the links' first addresses); expected mode late or early"
            );
        }
        if let Some((j, _)) = scenario
            .spec
            .flows
            .iter()
            .enumerate()
            .find(|(_, f)| f.via_link == Some(i))
        {
            bail!(
                "links[{i}].outage_new_address = true with flows[{j}].via_link = {i}: a flow \
                 outside the tunnel is bound to the link's first address; expected no \
                 via_link flow on a link that moves"
            );
        }
    }
    Ok(())
}

/// One flow's helper processes and files.
struct FlowRun {
    recv_out: PathBuf,
    send_out: PathBuf,
}

#[derive(Clone, Copy)]
enum Edge {
    Down(usize),
    Up(usize),
}

/// The client's and the server's application addresses of a mode (a flow's ports are
/// added per flow): early, the scenario's; late, the tunnel's; mptcp, the initial
/// link's address and the server's.
fn app_addresses(
    mode: LabMode,
    scenario: &Scenario,
    links: &[LinkAddrs],
    start_s: f64,
) -> (Ipv4Addr, Ipv4Addr) {
    match mode {
        LabMode::Early => (CLIENT_APP, SERVER_APP),
        LabMode::Late => (late::CLIENT_TUN, late::SERVER_TUN),
        LabMode::Mptcp => (
            mptcp::client_addr(links, mptcp::initial_link(scenario, start_s)),
            SERVER_APP,
        ),
    }
}

fn run_mode(
    scenario: &Scenario,
    mode: LabMode,
    exe: &Path,
    opts: &LabOptions,
    dir: &Path,
) -> Result<LabOutcome> {
    let spec = &scenario.spec;
    let n = spec.links.len();
    let seed = spec.scenario.seed;
    let early_fifo = spec.early.qdisc_packets + spec.early.driver_packets;
    // The FIFO at the client's side of each link: the kernel's qdisc + driver in modes
    // early and mptcp; the link's bottleneck buffer in mode late, where the daemon's
    // socket keeps it nearly empty.
    let fifo: Vec<usize> = spec
        .links
        .iter()
        .map(|l| match mode {
            _ if l.uplink_bottleneck == "network" => l.queue_packets.max(1),
            LabMode::Late => l.queue_packets.max(1),
            LabMode::Early | LabMode::Mptcp => early_fifo,
        })
        .collect();
    let mut notes = Vec::new();
    let mut log = std::fs::File::create(dir.join("lab.log"))?;
    writeln!(log, "# tool: latebind lab")?;
    writeln!(log, "# version: {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(
        log,
        "# command line: {}",
        std::env::args().collect::<Vec<_>>().join(" ")
    )?;
    writeln!(
        log,
        "# scenario: {} ({}), mode {}, seed {seed}",
        spec.scenario.name,
        scenario.path.display(),
        mode.name()
    )?;

    let mut topo = Topology::create(n)?;
    writeln!(log, "# topology {}:", topo.id)?;
    for c in &topo.commands {
        writeln!(log, "{c}")?;
    }
    for w in &topo.offload_warnings {
        notes.push(format!("offload not turned off: {w}"));
    }
    let mut links = topo.links.clone();
    let rates: Vec<(RateSpec, RateSpec)> = (0..n).map(|i| rates(scenario, i)).collect();
    let n_setup = topo.commands.len();
    if opts.ecn {
        for role in [Role::Client, Role::Server] {
            topo.sysctl(role, "net.ipv4.tcp_ecn", "1")?;
        }
    }

    // Routing.
    match mode {
        LabMode::Early => {
            let mut client_cmds = Vec::new();
            let mut server_cmds = Vec::new();
            for l in &links {
                let metric = 10 * (l.index + 1);
                client_cmds.push(format!(
                    "route replace {SERVER_APP}/32 via {} dev {} metric {metric} src {CLIENT_APP}",
                    l.server, l.client_if
                ));
                server_cmds.push(format!(
                    "route replace {CLIENT_APP}/32 via {} dev {} metric {metric} src {SERVER_APP}",
                    l.client, l.server_if
                ));
            }
            topo.ip_batch(Role::Client, &client_cmds)?;
            topo.ip_batch(Role::Server, &server_cmds)?;
        }
        LabMode::Late => {}
        LabMode::Mptcp => {
            for role in [Role::Client, Role::Server] {
                topo.sysctl(role, "net.mptcp.enabled", "1")?;
            }
            let (client_cmds, server_cmds) = mptcp::setup(&links);
            topo.ip_batch(Role::Client, &client_cmds)?;
            topo.ip_batch(Role::Server, &server_cmds)?;
        }
    }
    // The client's FIFOs.
    let mut tc = Vec::new();
    for (l, (up, _)) in links.iter().zip(&rates) {
        if spec.links[l.index].uplink_bottleneck == "network" {
            notes.push(format!(
                "link {}: the uplink's bottleneck is in the network: the emulator's uplink \
                 model holds its {}-packet FIFO, and the client's interface is not shaped",
                spec.links[l.index].name, fifo[l.index]
            ));
            continue;
        }
        let Some(bps) = htb_rate(up) else {
            notes.push(format!(
                "link {}: uplink follows a trace; htb cannot shape it, so the emulator's \
                 uplink model holds the {}-packet FIFO (no push-back to the client's \
                 sockets, losses at outages counted by the model)",
                spec.links[l.index].name, fifo[l.index]
            ));
            continue;
        };
        let bps = bps.round() as u64;
        tc.push(format!(
            "qdisc replace dev {} root handle 1: htb default 1",
            l.client_if
        ));
        tc.push(format!(
            "class add dev {} parent 1: classid 1:1 htb rate {bps}bit ceil {bps}bit \
             burst 1600b cburst 1600b",
            l.client_if
        ));
        tc.push(format!(
            "qdisc add dev {} parent 1:1 handle 10: pfifo limit {}",
            l.client_if, fifo[l.index]
        ));
    }
    if !tc.is_empty() {
        topo.tc(Role::Client, &tc)?;
        notes.push(
            "htb counts the 14-byte Ethernet header: a 1400-byte IP packet takes 1 % longer \
             to serialize than in the simulator"
                .into(),
        );
    }
    for c in &topo.commands[n_setup..] {
        writeln!(log, "{c}")?;
    }

    // Netlink in the client and server namespaces, for the timed changes.
    let mut nl_client = Netlink::open_in(&topo.ns(Role::Client))?;
    let mut nl_server = Netlink::open_in(&topo.ns(Role::Server))?;
    let c_idx: Vec<i32> = links
        .iter()
        .map(|l| nl_client.ifindex(&l.client_if))
        .collect::<std::io::Result<_>>()?;
    let s_idx: Vec<i32> = links
        .iter()
        .map(|l| nl_server.ifindex(&l.server_if))
        .collect::<std::io::Result<_>>()?;
    let shaped: Vec<bool> = rates
        .iter()
        .zip(&spec.links)
        .map(|((up, _), l)| htb_rate(up).is_some() && l.uplink_bottleneck != "network")
        .collect();

    // Times. Mode late starts the daemons and lets them handshake before time 0.
    let duration_s = spec.scenario.duration_s;
    let max_delay_ms = spec
        .links
        .iter()
        .map(|l| l.delay_ms + l.jitter_ms)
        .fold(0.0, f64::max);
    let drain_s = 1.0 + 2.0 * max_delay_ms / 1e3;
    let end_s = duration_s + drain_s;
    let warmup = match mode {
        LabMode::Late => opts.daemon_warmup,
        LabMode::Early | LabMode::Mptcp => Duration::ZERO,
    };
    let warmup_ns = warmup.as_nanos() as u64;
    let base = sys::mono_ns() + opts.lead.as_nanos() as u64 + warmup_ns;
    writeln!(
        log,
        "# base time: {base} ns of CLOCK_MONOTONIC (scenario time 0); end {end_s:.3} s"
    )?;

    // The emulator.
    let emu_links: Vec<EmuLinkSpec> = links
        .iter()
        .zip(&rates)
        .map(|(l, (up, down))| {
            let s = &spec.links[l.index];
            let outages = merged_outages(&s.outages);
            let d = |rate: RateSpec, queue: usize, drop: bool, dir: u64| DirectionSpec {
                rate,
                delay_ns: secs_ns(s.delay_ms / 1e3),
                jitter_ns: secs_ns(s.jitter_ms / 1e3),
                loss: s.loss,
                queue_packets: queue,
                outages_ns: outages.clone(),
                drop_in_flight_on_outage: drop,
                seed: seed_for(seed, l.index, dir),
            };
            let up = if shaped[l.index] {
                d(RateSpec::Fixed { bits_per_sec: 1e11 }, 1 << 20, false, 0)
            } else {
                d(up.clone(), fifo[l.index], false, 0)
            };
            EmuLinkSpec {
                name: s.name.clone(),
                client_if: l.emu_client_if.clone(),
                server_if: l.emu_server_if.clone(),
                up,
                down: d(down.clone(), s.queue_packets, true, 1),
            }
        })
        .collect();
    let emu_stats_path = dir.join("emu-stats.json");
    let emu_spec = EmuSpec {
        base_ns: base,
        until_ns: Some(base + secs_ns(end_s + 0.5)),
        window_ns: Some([base, base + secs_ns(duration_s)]),
        spin_us: opts.spin_us,
        links: emu_links,
        stats_path: Some(emu_stats_path.clone()),
        log_path: Some(dir.join("emu.log")),
        log_frames: opts.log_frames,
        cpu_latency_qos: opts.cpu_latency_qos,
        rt_priority: opts.rt_priority.map(|p| p.saturating_add(10).min(99)),
        // Mode late: the models' clock starts now, so the daemons' handshake crosses
        // the links with their delays before time 0.
        warmup_ns: if warmup_ns > 0 {
            warmup_ns + opts.lead.as_nanos() as u64
        } else {
            0
        },
    };
    let spec_path = dir.join("emu-spec.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&emu_spec)?)?;
    let mut emulator = topo.spawn(
        Role::Emu,
        "emulate",
        exe,
        &["emulate".as_ref(), "--spec".as_ref(), spec_path.as_os_str()],
        &dir.join("emu.out"),
    )?;

    // Mode late: the daemons, up and handshaken before the traffic starts.
    let mut daemons = match mode {
        LabMode::Late => {
            // Leave the traffic tools half the lead to start before time 0.
            let deadline = base.saturating_sub(opts.lead.as_nanos() as u64 / 2);
            let d = late::start(
                &topo,
                exe,
                scenario,
                dir,
                opts.rt_priority,
                deadline,
                &mut notes,
            )?;
            writeln!(
                log,
                "# daemons: server pid {}, client pid {}; tunnel up {:.3} s before time 0",
                d.server.pid(),
                d.client.pid(),
                base.saturating_sub(sys::mono_ns()) as f64 / 1e9
            )?;
            Some(d)
        }
        LabMode::Early | LabMode::Mptcp => None,
    };
    let capture = match (mode, opts.capture_departures) {
        (LabMode::Late, true) => Some(crate::capture::Capture::start(
            Some(&topo.ns(Role::Emu)),
            &links[0].emu_client_if,
            late::PORT,
        )?),
        _ => None,
    };

    // Receivers, then senders. Both measure around the cuts (ns after the base).
    let cut_list = cuts::cuts(scenario);
    let cut_ns = cuts::instants(&cut_list)
        .iter()
        .map(|d| d.as_nanos().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut receivers: Vec<Helper> = Vec::new();
    let mut senders: Vec<Helper> = Vec::new();
    let mut flows = Vec::new();
    for (i, f) in spec.flows.iter().enumerate() {
        let kind = Kind::parse(&f.kind).context("validated flow kind")?;
        let index = i as u16;
        let up = f.direction != "down";
        // A flow outside the tunnel (`via_link`) goes straight between the link's own
        // addresses, on-link through the emulator, sharing its bottleneck with the
        // tunnel's datagrams as another host's traffic would; in every mode, as plain
        // TCP or UDP.
        let via = f.via_link.map(|k| &links[k]);
        let (client_ip, server_ip) = match via {
            Some(l) => (l.client, l.server),
            None => app_addresses(mode, scenario, &links, f.start_s),
        };
        let mptcp = mode == LabMode::Mptcp && via.is_none();
        let client = SocketAddrV4::new(client_ip, 10_000 + index);
        let server_port = if kind == Kind::QuicBulk {
            QUIC_PORT
        } else {
            20_000 + index
        };
        let server = SocketAddrV4::new(server_ip, server_port);
        let (from, to, send_role, recv_role) = if up {
            (client, server, Role::Client, Role::Server)
        } else {
            (server, client, Role::Server, Role::Client)
        };
        let stop_s = f.stop_s.unwrap_or(duration_s).min(duration_s);
        let recv_out = dir.join(format!("flow{i}-recv.json"));
        let send_out = dir.join(format!("flow{i}-send.json"));
        let common = |out: &Path, until: f64| -> Vec<String> {
            let mut v = vec![
                "--name".into(),
                f.name.clone(),
                "--kind".into(),
                kind.as_str().into(),
                "--index".into(),
                index.to_string(),
                "--base-ns".into(),
                base.to_string(),
                "--start-s".into(),
                f.start_s.to_string(),
                "--stop-s".into(),
                stop_s.to_string(),
                "--until-s".into(),
                until.to_string(),
                "--out".into(),
                out.display().to_string(),
            ];
            if !cut_ns.is_empty() {
                v.extend(["--cuts-ns".into(), cut_ns.clone()]);
            }
            v
        };
        let mut rargs = vec!["traffic".to_owned(), "recv".into()];
        rargs.extend(common(&recv_out, end_s + 0.3));
        let mut sargs = vec!["traffic".to_owned(), "send".into()];
        sargs.extend(common(&send_out, end_s));
        if (mptcp || kind == Kind::QuicBulk) && !up {
            // The client opens the connection: its receiver connects to the server's
            // listening sender (a QUIC server, on its port 443).
            rargs.extend([
                "--bind".into(),
                client.to_string(),
                "--connect".into(),
                server.to_string(),
            ]);
            sargs.extend(["--bind".into(), server.to_string(), "--listen".into()]);
        } else {
            rargs.extend(["--bind".into(), to.to_string()]);
            sargs.extend([
                "--bind".into(),
                from.to_string(),
                "--to".into(),
                to.to_string(),
            ]);
        }
        if mptcp {
            rargs.push("--mptcp".into());
            sargs.push("--mptcp".into());
        }
        if let Some(p) = f.packet_bytes {
            rargs.extend(["--packet-bytes".into(), p.to_string()]);
            sargs.extend(["--packet-bytes".into(), p.to_string()]);
        }
        if let Some(r) = f.rate_mbps {
            sargs.extend(["--rate-mbps".into(), r.to_string()]);
        }
        if let Some(c) = f.count {
            sargs.extend(["--count".into(), c.to_string()]);
        }
        if let Some(d) = f.dscp {
            sargs.extend(["--dscp".into(), d.to_string()]);
        }
        if kind.is_stream() {
            sargs.extend(["--cc".into(), opts.cc.clone()]);
        }
        if let Some(p) = opts.rt_priority {
            sargs.extend(["--rt-priority".into(), p.to_string()]);
            rargs.extend(["--rt-priority".into(), p.to_string()]);
        }
        writeln!(log, "# flow {i} receiver: {}", rargs.join(" "))?;
        writeln!(log, "# flow {i} sender: {}", sargs.join(" "))?;
        receivers.push(topo.spawn(
            recv_role,
            &format!("recv {}", f.name),
            exe,
            &rargs,
            &dir.join(format!("flow{i}-recv.out")),
        )?);
        senders.push(topo.spawn(
            send_role,
            &format!("send {}", f.name),
            exe,
            &sargs,
            &dir.join(format!("flow{i}-send.out")),
        )?);
        flows.push(FlowRun { recv_out, send_out });
    }
    if sys::mono_ns() + 100_000_000 > base {
        notes.push("helpers started less than 100 ms before scenario time 0".into());
    }

    // The timeline: outage edges (local outages only: a remote one is the emulator's
    // alone), qdisc samples.
    let mut edges_todo: Vec<(u64, Edge)> = Vec::new();
    for (i, l) in spec.links.iter().enumerate() {
        if !l.outage_local && !l.outages.is_empty() {
            notes.push(format!(
                "link {}: remote outages (outage_local = false): no interface or route \
                 changes, the emulator's models drop everything",
                l.name
            ));
            continue;
        }
        for [a, b] in merged_outages(&l.outages) {
            edges_todo.push((base + a, Edge::Down(i)));
            if b < secs_ns(end_s) {
                edges_todo.push((base + b, Edge::Up(i)));
            }
        }
    }
    edges_todo.sort_by_key(|(t, e)| (*t, matches!(e, Edge::Up(_))));
    let shaped_idx: Vec<i32> = c_idx
        .iter()
        .zip(&shaped)
        .filter(|(_, s)| **s)
        .map(|(i, _)| *i)
        .collect();
    let mut max_qlen = vec![0u32; n];
    let mut purged = vec![0u64; n];
    // Times each link came back with a new address (`outage_new_address`).
    let mut moves = vec![0u32; n];
    let mut edges = Vec::new();
    let end_ns = base + secs_ns(end_s);
    let sample_ns = opts.sample_every.as_nanos().max(100_000) as u64;
    let mut next_sample = base;
    let mut todo = edges_todo.into_iter().peekable();
    let rt_guard = opts.rt_priority.and_then(RealtimeGuard::enter);
    let sample = |nl: &mut Netlink, max_qlen: &mut [u32]| -> Result<()> {
        if shaped_idx.is_empty() {
            return Ok(());
        }
        let stats = nl.root_qdiscs(&c_idx)?;
        for (m, s) in max_qlen.iter_mut().zip(stats) {
            if let Some(s) = s {
                *m = (*m).max(s.qlen);
            }
        }
        Ok(())
    };
    loop {
        if helper_failed(&mut emulator)? {
            bail!("the emulator exited early:\n{}", emulator.log_tail());
        }
        if let Some(d) = daemons.as_mut() {
            for h in [&mut d.server, &mut d.client] {
                if let Some(s) = h.try_wait()? {
                    bail!("{} exited ({s}) during the run:\n{}", h.name, h.log_tail());
                }
            }
        }
        let next_edge = todo.peek().map(|(t, _)| *t);
        if next_edge.is_some_and(|t| t <= next_sample) {
            let (t, edge) = todo.next().expect("peeked");
            sys::sleep_until(t, 300_000);
            let late_us = sys::mono_ns().saturating_sub(t) as f64 / 1e3;
            let scheduled_s = t.saturating_sub(base) as f64 / 1e9;
            match edge {
                Edge::Down(i) => {
                    let before = nl_client.root_qdiscs(&[c_idx[i]])?[0];
                    nl_client.set_link(c_idx[i], false)?;
                    let after = nl_client.root_qdiscs(&[c_idx[i]])?[0];
                    // The kernel removes the client's routes through a down interface
                    // itself. Mode early withdraws the server's too (its optimistic
                    // baseline); late and mptcp leave the server alone: it learns of
                    // the cut through its protocol.
                    if mode == LabMode::Early {
                        let (_, r_server) = routes(&links[i], c_idx[i], s_idx[i]);
                        nl_server.route_del(&r_server)?;
                    }
                    let (backlog, meanwhile) = match (before, after) {
                        (Some(b), Some(a)) => (b.qlen, a.packets.saturating_sub(b.packets)),
                        (Some(b), None) => (b.qlen, 0),
                        _ => (0, 0),
                    };
                    if shaped[i] {
                        purged[i] += u64::from(backlog).saturating_sub(meanwhile);
                    }
                    writeln!(
                        log,
                        "{:.3} link {i} down ({late_us:.0} us late): qdisc backlog {backlog}, \
                         {meanwhile} left meanwhile",
                        scheduled_s * 1e3
                    )?;
                    edges.push(OutageEdge {
                        link: i,
                        what: "down".into(),
                        scheduled_s,
                        late_us,
                        qdisc_backlog: backlog,
                        dequeued_meanwhile: meanwhile,
                    });
                }
                Edge::Up(i) => {
                    if spec.links[i].outage_new_address {
                        // Another network: the interface comes up with the next address
                        // of its /24, which the server's side can reach at once.
                        moves[i] += 1;
                        let old = links[i].client;
                        let new = moved_address(old, moves[i]);
                        let c_if = &links[i].client_if;
                        topo.ip_batch(
                            Role::Client,
                            &[
                                format!("addr del {old}/{LINK_PREFIX_LEN} dev {c_if}"),
                                format!("addr add {new}/{LINK_PREFIX_LEN} dev {c_if}"),
                            ],
                        )?;
                        nl_server.neigh_replace(s_idx[i], new, links[i].client_mac)?;
                        links[i].client = new;
                        writeln!(log, "link {i}: address {old} -> {new}")?;
                    }
                    let l = &links[i];
                    nl_client.set_link(c_idx[i], true)?;
                    nl_client.neigh_replace(c_idx[i], l.server, l.server_mac)?;
                    match mode {
                        LabMode::Early => {
                            let (r_client, r_server) = routes(l, c_idx[i], s_idx[i]);
                            nl_client.route_replace(&r_client)?;
                            nl_server.route_replace(&r_server)?;
                        }
                        LabMode::Late => {}
                        LabMode::Mptcp => {
                            topo.ip_batch(Role::Client, &mptcp::client_routes(l))?;
                        }
                    }
                    writeln!(
                        log,
                        "{:.3} link {i} up ({late_us:.0} us late)",
                        scheduled_s * 1e3
                    )?;
                    edges.push(OutageEdge {
                        link: i,
                        what: "up".into(),
                        scheduled_s,
                        late_us,
                        qdisc_backlog: 0,
                        dequeued_meanwhile: 0,
                    });
                }
            }
            continue;
        }
        if next_sample >= end_ns {
            break;
        }
        sys::sleep_until(next_sample, 0);
        sample(&mut nl_client, &mut max_qlen)?;
        next_sample = next_sample.max(sys::mono_ns()) + sample_ns;
        next_sample = next_sample.min(end_ns);
        if sys::mono_ns() >= end_ns {
            break;
        }
    }
    drop(rt_guard);
    // What `max_queue_below_binding` is, per kind of link.
    let sampled = (!shaped_idx.is_empty()).then(|| {
        format!(
            "the client's qdisc backlog sampled every {:.1} ms (peaks between samples \
             are missed)",
            sample_ns as f64 / 1e6
        )
    });
    let emulated = (shaped_idx.len() < n).then(|| {
        "the emulator's uplink FIFO, its largest backlog, where htb does not shape the link"
            .to_string()
    });
    let kinds: Vec<String> = sampled.into_iter().chain(emulated).collect();
    notes.push(format!("max_queue_below_binding: {}", kinds.join("; ")));
    let final_qdisc: Vec<Option<QdiscStats>> = nl_client.root_qdiscs(&c_idx)?;
    let departures = match capture {
        Some(c) => {
            let got = c.stop()?;
            // The first flow's time, less its first half second (the backlog builds).
            let f = &spec.flows[0];
            let off = sys::realtime_offset_ns();
            let at = |s: f64| (i128::from(base + secs_ns(s)) + off).max(0) as u64;
            let rate = spec.late.pacing_rate_mbps.unwrap_or(0.0) * 1e6;
            let d = crate::capture::paced_departures(
                &got.arrivals,
                rate,
                crate::capture::IP_UDP_HEADERS + 16,
                500,
                at(f.start_s + 0.5),
                at(f.stop_s.unwrap_or(duration_s).min(duration_s)),
            );
            std::fs::write(
                dir.join("departures.json"),
                serde_json::to_string_pretty(&d)? + "\n",
            )?;
            notes.push(format!(
                "departures on link 0 (captured at {}, {} kernel drops): {} pairs, gap \
                 expected {:.1} µs measured {:.1} µs, |error| mean {:.1} p50 {:.1} p99 {:.1} \
                 max {:.1} µs",
                links[0].emu_client_if,
                got.kernel_drops,
                d.pairs,
                d.expected_gap_us,
                d.measured_gap_us,
                d.error_mean_us,
                d.error_us.p50,
                d.error_us.p99,
                d.error_us.max
            ));
            Some(d)
        }
        None => None,
    };

    // Collect.
    let deadline = base + secs_ns(end_s + 5.0);
    for h in senders.iter_mut().chain(receivers.iter_mut()) {
        if h.wait_until(deadline)?.is_none() {
            notes.push(format!("{} did not exit in time: terminated", h.name));
            h.terminate(Duration::from_millis(500))?;
        }
    }
    // Mode late: the daemons' counters, read just before they stop.
    let mut daemon_status: Option<(Status, Status)> = None;
    if let Some(d) = daemons.as_mut() {
        let c = late::status(&d.client_sock);
        let s = late::status(&d.server_sock);
        match (c, s) {
            (Ok(c), Ok(s)) => {
                std::fs::write(
                    dir.join("client-status.json"),
                    serde_json::to_string_pretty(&c)? + "\n",
                )?;
                std::fs::write(
                    dir.join("server-status.json"),
                    serde_json::to_string_pretty(&s)? + "\n",
                )?;
                daemon_status = Some((c, s));
            }
            (c, s) => notes.push(format!(
                "the daemons' status could not be read (client: {}, server: {}): engine \
                 counters missing",
                c.err().map_or("ok".into(), |e| format!("{e:#}")),
                s.err().map_or("ok".into(), |e| format!("{e:#}"))
            )),
        }
        for h in [&mut d.client, &mut d.server] {
            let st = h.terminate(Duration::from_secs(2))?;
            if !st.success() {
                notes.push(format!("{} exited with {st} when stopped", h.name));
            }
        }
    }
    if emulator.wait_until(deadline + 1_000_000_000)?.is_none() {
        emulator.terminate(Duration::from_millis(500))?;
    }
    let emu_stats = emu::read_stats(&emu_stats_path)
        .with_context(|| format!("emulator output:\n{}", emulator.log_tail()))?;
    let mut send_sums = Vec::new();
    let mut recv_sums = Vec::new();
    for (i, (f, h)) in flows.iter().zip(&receivers).enumerate() {
        let r: RecvSummary = traffic::read_json(&f.recv_out)
            .with_context(|| format!("flow {i} receiver output:\n{}", h.log_tail()))?;
        recv_sums.push(r);
        send_sums.push(traffic::read_json::<SendSummary>(&f.send_out).ok());
    }
    for (i, s) in send_sums.iter().enumerate() {
        match s {
            None => notes.push(format!(
                "flow {}: the sender wrote no summary (sent counted by the receiver)",
                spec.flows[i].name
            )),
            Some(s) if !s.errors.is_empty() => notes.push(format!(
                "flow {}: send errors {:?}",
                spec.flows[i].name, s.errors
            )),
            Some(_) => {}
        }
    }
    if mode == LabMode::Mptcp {
        notes.push(
            "a TCP flow's sent/lost are sums over the MPTCP subflows alive at the end \
             (TCP_INFO of each); data the MPTCP layer re-sent on another subflow counts as \
             sent there, not as lost"
                .into(),
        );
    }
    if mode == LabMode::Late {
        notes.push(format!(
            "applications on the tunnel addresses {} (client) and {} (server); the \
             daemons started {:.1} s before time 0",
            late::CLIENT_TUN,
            late::SERVER_TUN,
            warmup.as_secs_f64() + opts.lead.as_secs_f64()
        ));
    }
    if opts.rt_priority.is_some() && !emu_stats.realtime {
        notes.push("the emulator could not switch to SCHED_FIFO".into());
    }
    if !emu_stats.cpu_latency_qos {
        notes.push(
            "the emulator could not hold a CPU wake-up latency request \
             (/dev/cpu_dma_latency): expect millisecond wake-ups on a VM"
                .into(),
        );
    }
    if emu_stats.socket_drops > 0 {
        notes.push(format!(
            "the emulator's packet sockets dropped {} frames (buffer full)",
            emu_stats.socket_drops
        ));
    }
    drop(emulator);
    drop(senders);
    drop(receivers);
    drop(daemons);
    topo.teardown()?;

    let client_session = daemon_status.as_ref().and_then(|(c, _)| c.sessions.first());
    let server_session = daemon_status
        .as_ref()
        .and_then(|(_, s)| s.sessions.iter().find(|x| x.peer == "client"));
    let flows_report: Vec<_> = recv_sums
        .iter()
        .zip(&send_sums)
        .map(|(r, s)| traffic::merge(s.as_ref(), r))
        .collect();
    let links_report: Vec<LinkReport> = (0..n)
        .map(|i| {
            let e = &emu_stats.links[i];
            let (up_accepted, up_fifo_full, lost_up, max_below) = if shaped[i] {
                let q = final_qdisc[i].unwrap_or_default();
                (
                    q.packets + purged[i] + u64::from(q.qlen),
                    u64::from(q.drops),
                    purged[i] + e.up.lost_outage,
                    max_qlen[i] as usize,
                )
            } else {
                (
                    e.up.enqueued,
                    e.up.dropped_queue_full,
                    e.up.lost_outage,
                    e.up.max_backlog,
                )
            };
            // Mode late: bound datagrams the client daemon still held for the interface
            // (never given to the kernel) when it went down are lost with it, below the
            // binding point; what the kernel held is in the qdisc's count.
            let held_lost = client_session
                .and_then(|s| s.links.iter().find(|l| usize::from(l.id) == i))
                .map_or(0, |l| l.held_dropped);
            let reinjected = [client_session, server_session]
                .iter()
                .flatten()
                .filter_map(|s| s.links.iter().find(|l| usize::from(l.id) == i))
                .map(|l| l.reinjected)
                .sum();
            let data_sent = [client_session, server_session]
                .iter()
                .flatten()
                .filter_map(|s| s.links.iter().find(|l| usize::from(l.id) == i))
                .map(|l| l.data_sent)
                .sum();
            // A remote outage leaves the client's interface up: what the emulator's uplink
            // refused during it left the client and was lost on the link.
            let remote_up = if spec.links[i].outage_local {
                0
            } else {
                e.up.dropped_outage
            };
            let up_accepted = up_accepted + if shaped[i] { 0 } else { remote_up };
            let lost_up = lost_up + held_lost + remote_up;
            LinkReport {
                name: spec.links[i].name.clone(),
                packets_sent: up_accepted + e.down.enqueued,
                lost_on_link: lost_up + e.down.lost_outage + e.up.lost_random + e.down.lost_random,
                lost_at_outage_up: lost_up,
                lost_at_outage_down: e.down.lost_outage,
                dropped_queue_full: up_fifo_full + e.down.dropped_queue_full,
                dropped_outage: e.up.dropped_outage - remote_up + e.down.dropped_outage,
                max_queue_below_binding: max_below,
                bytes_delivered: [e.up.bytes_delivered, e.down.bytes_delivered],
                reinjected_from: reinjected,
                data_sent,
                // Sampled in the simulator only; the daemons show these live in
                // `latebind status`.
                data_sent_per_s: Vec::new(),
                rate_control: None,
                // Not measured: a fixed-rate uplink queues in the client's htb qdisc,
                // which the emulator does not see; the flows' latency is the measure.
                network_delay_ms: None,
                // What the emulator's models left unused over the scenario's run; not
                // why (the engines' state is not sampled), and not the uplink of a link
                // shaped at the client (htb), which the emulator does not see.
                unused_capacity: Some([
                    e.up.window
                        .filter(|_| !shaped[i])
                        .map(|w| UnusedReport::share(w.offered_bytes, w.unused_bytes)),
                    e.down
                        .window
                        .map(|w| UnusedReport::share(w.offered_bytes, w.unused_bytes)),
                ]),
            }
        })
        .collect();
    let engine = daemon_status
        .as_ref()
        .map(|_| late::engine_report(client_session, server_session));
    let flow_stats: Vec<_> = recv_sums
        .iter()
        .zip(&send_sums)
        .map(|(r, s)| traffic::cut_stats(s.as_ref(), r))
        .collect();
    let flow_cuts: Vec<FlowCuts<'_>> = spec
        .flows
        .iter()
        .zip(&flow_stats)
        .map(|(f, (stats, counts_loss))| FlowCuts {
            name: &f.name,
            counts_loss: *counts_loss,
            stats,
        })
        .collect();
    let link_names: Vec<String> = spec.links.iter().map(|l| l.name.clone()).collect();
    let cuts = cut_reports(&cut_list, &link_names, &flow_cuts);
    let report = Report {
        scenario: spec.scenario.name.clone(),
        mode: mode.name().into(),
        seed,
        label: None,
        totals: Totals {
            lost: flows_report.iter().map(|f| f.lost).sum(),
            reinjected: [client_session, server_session]
                .iter()
                .flatten()
                .map(|s| s.engine.reinjections_sent)
                .sum(),
            spurious_reinjections: [client_session, server_session]
                .iter()
                .flatten()
                .map(|s| s.engine.reinjections_spurious)
                .sum(),
        },
        flows: flows_report,
        links: links_report,
        cuts,
        engine,
        simulator: SimReport {
            steps: 0,
            stalls: 0,
        },
    };
    let mut summary = String::new();
    let _ = writeln!(
        summary,
        "# emulator lateness us: p50 {} p99 {} max {}",
        emu_stats.lateness_us.p50, emu_stats.lateness_us.p99, emu_stats.lateness_us.max
    );
    for note in &notes {
        let _ = writeln!(summary, "# note: {note}");
    }
    write!(log, "{summary}")?;
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    Ok(LabOutcome {
        report,
        emulator: emu_stats,
        senders: send_sums,
        receivers: recv_sums,
        departures,
        edges,
        notes,
        run_dir: dir.to_owned(),
    })
}

/// Keeps the calling thread in `SCHED_FIFO` until dropped.
struct RealtimeGuard {
    old: (i32, i32),
}

impl RealtimeGuard {
    fn enter(priority: i32) -> Option<Self> {
        sys::set_realtime(priority).ok().map(|old| Self { old })
    }
}

impl Drop for RealtimeGuard {
    fn drop(&mut self) {
        let _ = sys::set_scheduler(self.old.0, self.old.1);
    }
}

/// Whether a helper that should still run has exited with a failure.
fn helper_failed(h: &mut Helper) -> Result<bool> {
    Ok(matches!(h.try_wait()?, Some(s) if !s.success()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second quic-bulk flow (the server's UDP port 443 is the first's) is refused by
    /// name before anything is set up (no root needed to see it); one is run.
    #[test]
    fn a_second_quic_flow_is_refused_by_name() {
        let s = Scenario::from_str(
            "[scenario]\nname='t'\nduration_s=5.0\n[[links]]\nname='a'\nrate_mbps=1.0\n\
             [[flows]]\nname='web'\nkind='quic-bulk'\n\
             [[flows]]\nname='video'\nkind='quic-bulk'\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let e = run(&s, LabMode::Late, Path::new("/nonexistent")).unwrap_err();
        let e = format!("{e:#}");
        assert!(
            e.contains("flows[1].kind") && e.contains("video") && e.contains("flows[0]"),
            "{e}"
        );
        let mut one = s.clone();
        one.spec.flows[1].kind = "tcp-bulk".into();
        assert!(check_kinds(&one).is_ok());
    }

    #[test]
    fn a_moved_link_address_stays_a_host_of_its_24() {
        let o = Ipv4Addr::new(198, 18, 1, 1);
        assert_eq!(moved_address(o, 1), Ipv4Addr::new(198, 18, 1, 11));
        assert_eq!(moved_address(o, 240), Ipv4Addr::new(198, 18, 1, 250));
        assert_eq!(moved_address(o, 241), Ipv4Addr::new(198, 18, 1, 11));
    }

    #[test]
    fn outages_merge_like_the_link_model() {
        assert_eq!(
            merged_outages(&[[3.0, 4.0], [1.0, 2.0], [1.5, 2.5], [2.5, 2.75]]),
            vec![
                [1_000_000_000, 2_750_000_000],
                [3_000_000_000, 4_000_000_000]
            ]
        );
        assert!(merged_outages(&[]).is_empty());
    }

    #[test]
    fn seeds_are_independent_per_link_direction() {
        let s: Vec<u64> = (0..4).map(|i| seed_for(1, i / 2, i as u64 % 2)).collect();
        for a in 0..4 {
            for b in a + 1..4 {
                assert_ne!(s[a], s[b]);
            }
        }
        assert_eq!(seed_for(1, 0, 0), seed_for(1, 0, 0));
    }

    #[test]
    fn modes_parse_and_mptcp_refuses_udp_flows() {
        assert_eq!("early".parse::<LabMode>(), Ok(LabMode::Early));
        assert_eq!("late".parse::<LabMode>(), Ok(LabMode::Late));
        assert_eq!("mptcp".parse::<LabMode>(), Ok(LabMode::Mptcp));
        assert!("fast".parse::<LabMode>().is_err());
        let scenario = Scenario::from_str(
            "[scenario]\nname='t'\nduration_s=1.0\n[[links]]\nname='a'\nrate_mbps=1.0\n\
             [[flows]]\nname='voice'\nkind='udp-cbr'\nrate_mbps=0.1\n",
            Path::new("t.toml"),
        )
        .unwrap();
        // Refused before anything needs root.
        let e = run(&scenario, LabMode::Mptcp, Path::new("/nonexistent")).unwrap_err();
        assert!(e.to_string().contains("voice"), "{e}");
    }

    #[test]
    fn routes_use_link_metrics_and_application_addresses() {
        let l = crate::netns::link_addrs(1).unwrap();
        let (c, s) = routes(&l, 5, 7);
        assert_eq!(
            (c.dst, c.gateway, c.oif, c.metric),
            (SERVER_APP, l.server, 5, 20)
        );
        assert_eq!(
            (s.dst, s.gateway, s.oif, s.metric),
            (CLIENT_APP, l.client, 7, 20)
        );
    }
}
