//! Argument structs for the lab's subcommands, so a binary can embed them:
//!
//! ```text
//! #[derive(clap::Subcommand)]
//! enum Command {
//!     Lab(latebind_lab::cli::LabArgs),
//!     #[command(hide = true)]
//!     Emulate(latebind_lab::emu::EmulateArgs),
//!     #[command(subcommand)]
//!     Traffic(latebind_lab::traffic::TrafficCmd),
//! }
//! // Command::Lab(a) => latebind_lab::cli::lab(&a, &std::env::current_exe()?),
//! // (mode late also starts `<exe> client|server --config FILE`: the binary must
//! //  serve those too, as `latebind` and `lab-dev` do)
//! // Command::Emulate(a) => latebind_lab::cli::emulate(&a),
//! // Command::Traffic(t) => latebind_lab::cli::traffic(&t),
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use latebind_sim::{Mode, Report, Scenario, compare_table};

use crate::emu::EmulateArgs;
use crate::run::{LabMode, LabOptions, run_with};
use crate::traffic::TrafficCmd;

/// `print!` that ends the output quietly when the reader has gone ([`emit`]); for
/// functions that return `anyhow::Result`.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::emit(&format!($($t)*))? };
}

/// `println!` that ends the output quietly when the reader has gone ([`emit`]).
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => { $crate::cli::emit(&format!("{}\n", format_args!($($t)*)))? };
}

/// Writes `text` to standard output. A reader that has gone away (`latebind sim ... |
/// head`) ends the output quietly instead of a panic: the run is over, and nobody reads
/// the rest.
pub fn emit(text: &str) -> Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to standard output"),
    }
}

/// `lab`: run a scenario on real kernels.
#[derive(Clone, Debug, clap::Args)]
pub struct LabArgs {
    /// The scenario file (TOML, the scenario contract v1).
    pub scenario: PathBuf,
    /// late (the latebind daemons), early (Linux default routing) or mptcp (kernel
    /// multipath TCP; TCP flows only).
    #[arg(long, default_value = "late")]
    pub mode: String,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override a scenario key: --set early.driver_packets=5 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print the JSON report instead of a table (an array with --compare or --sim).
    #[arg(long)]
    pub json: bool,
    /// Run the scenario's variants (its `variants` tables; default: late and early, plus
    /// mptcp when every flow is TCP) and print them side by side.
    #[arg(long)]
    pub compare: bool,
    /// Also run the simulator on the same scenario and mode, and print both side by
    /// side (columns "sim MODE" and "lab MODE").
    #[arg(long)]
    pub sim: bool,
    /// Put the run's files (specs, logs, summaries) here and keep them.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// The emulator spins when its next deadline is closer than this (µs).
    #[arg(long, default_value_t = 200)]
    pub spin_us: u64,
    /// TCP congestion control of the TCP senders.
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    /// The TCP endpoints ask for ECN (`net.ipv4.tcp_ecn=1` in the client's and the
    /// server's namespaces), so the tunnel's AQM marks their packets instead of dropping.
    #[arg(long)]
    pub ecn: bool,
    /// Log every frame in the emulator's log.
    #[arg(long)]
    pub log_frames: bool,
    /// Mode late: capture link 0's tunnel datagrams on the emulator's side and compare
    /// their spacing with `[late] pacing_rate_mbps` (a note, and departures.json).
    #[arg(long)]
    pub capture_departures: bool,
}

/// One run of `lab --compare` / `--sim`: a column label, a mode, a scenario.
struct Column {
    label: String,
    mode: LabMode,
    scenario: Scenario,
}

/// The simulator's mode of a lab mode (mptcp has none).
fn sim_mode(mode: LabMode) -> Option<Mode> {
    match mode {
        LabMode::Late => Some(Mode::Late),
        LabMode::Early => Some(Mode::Early),
        LabMode::Mptcp => None,
    }
}

fn columns(args: &LabArgs, scenario: &Scenario) -> Result<Vec<Column>> {
    let mode: LabMode = args.mode.parse().map_err(anyhow::Error::msg)?;
    if !args.compare {
        return Ok(vec![Column {
            label: mode.name().into(),
            mode,
            scenario: scenario.clone(),
        }]);
    }
    if scenario.spec.variants.is_empty() {
        let mut modes = vec![LabMode::Late, LabMode::Early];
        if scenario.spec.flows.iter().all(|f| f.kind == "tcp-bulk") {
            modes.push(LabMode::Mptcp);
        }
        return Ok(modes
            .into_iter()
            .map(|m| Column {
                label: m.name().into(),
                mode: m,
                scenario: scenario.clone(),
            })
            .collect());
    }
    scenario
        .spec
        .variants
        .iter()
        .map(|v| {
            let mode: LabMode = v.mode.parse().map_err(anyhow::Error::msg)?;
            let s = scenario
                .with_variant(v)
                .with_context(|| format!("variant {:?}", v.label))?;
            Ok(Column {
                label: v.label.clone(),
                mode,
                scenario: s,
            })
        })
        .collect()
}

/// Runs `lab`: prints the report (table or JSON) and the run's notes; with `--compare`
/// or `--sim`, one column per run (`latebind_sim::compare_table`).
pub fn lab(args: &LabArgs, exe: &Path) -> Result<()> {
    let mut scenario = Scenario::load(&args.scenario)?;
    let mut sets = args.sets.clone();
    if let Some(seed) = args.seed {
        sets.push(format!("scenario.seed={seed}"));
    }
    if !sets.is_empty() {
        scenario = scenario.with_overrides(sets.iter().map(String::as_str))?;
    }
    let opts = LabOptions {
        work_dir: args.work_dir.clone(),
        keep: args.work_dir.is_some(),
        spin_us: args.spin_us,
        cc: args.cc.clone(),
        ecn: args.ecn,
        log_frames: args.log_frames,
        capture_departures: args.capture_departures,
        ..LabOptions::default()
    };
    let cols = columns(args, &scenario)?;
    // Check every column before the first (long) run.
    for c in &cols {
        if c.mode == LabMode::Mptcp {
            crate::mptcp::check_flows(&c.scenario)
                .with_context(|| format!("column {:?}", c.label))?;
        }
    }
    let side_by_side = args.compare || args.sim;
    let mut reports: Vec<Report> = Vec::new();
    for (k, c) in cols.iter().enumerate() {
        if args.sim {
            match sim_mode(c.mode) {
                Some(m) => {
                    let mut r = latebind_sim::run(&c.scenario, m)?;
                    r.label = Some(format!("sim {}", c.label));
                    reports.push(r);
                }
                None => eprintln!(
                    "note: {}: the simulator has no mode {}: lab column only",
                    c.label,
                    c.mode.name()
                ),
            }
        }
        let mut o = opts.clone();
        if let (Some(w), true) = (&args.work_dir, cols.len() > 1) {
            o.work_dir = Some(w.join(format!("{k}-{}", c.mode.name())));
        }
        if side_by_side {
            eprintln!(
                "running {} in the lab (mode {}) ...",
                c.label,
                c.mode.name()
            );
        }
        let out = run_with(&c.scenario, c.mode, exe, &o)?;
        let mut report = out.report.clone();
        if side_by_side {
            report.label = Some(if args.sim {
                format!("lab {}", c.label)
            } else {
                c.label.clone()
            });
        }
        if !side_by_side && !args.json {
            out!("{}", report.table());
            outln!(
                "emulator lateness us: p50 {} p99 {} max {}",
                out.emulator.lateness_us.p50,
                out.emulator.lateness_us.p99,
                out.emulator.lateness_us.max
            );
            for e in &out.edges {
                outln!(
                    "link {} {} at {:.3} s ({:.0} us late), qdisc backlog {}",
                    e.link,
                    e.what,
                    e.scheduled_s,
                    e.late_us,
                    e.qdisc_backlog
                );
            }
        }
        for n in &out.notes {
            if side_by_side {
                eprintln!("note [{}]: {n}", c.label);
            } else {
                eprintln!("note: {n}");
            }
        }
        if args.work_dir.is_some() {
            eprintln!("run files: {}", out.run_dir.display());
        }
        reports.push(report);
    }
    if args.json {
        let text = if side_by_side {
            serde_json::to_string_pretty(&reports)?
        } else {
            serde_json::to_string_pretty(&reports[0])?
        };
        outln!("{text}");
    } else if side_by_side {
        out!("{}", compare_table(&reports));
    }
    Ok(())
}

/// Runs `emulate` (hidden: started by the runner inside the emu namespace).
pub fn emulate(args: &EmulateArgs) -> Result<()> {
    let stats = crate::emu::emulate_main(args)?;
    if stats.links.is_empty() {
        anyhow::bail!("emulator ran no link");
    }
    Ok(())
}

/// Runs `traffic send|recv`.
pub fn traffic(cmd: &TrafficCmd) -> Result<()> {
    crate::traffic::traffic_main(cmd).context("traffic")
}

/// `dispatch-bench`: send-time accuracy, pre-dispatch sender against sequential.
#[derive(Clone, Debug, clap::Args)]
pub struct DispatchBenchArgs {
    /// IP packet sizes, bytes (36 to 1500), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "40,200,500,1000,1500", value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Expected inter-departure times, µs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000,10000,100000", value_parser = parse_spacing)]
    pub spacings_us: Vec<u64>,
    /// Competing CPU load: idle, busy (one busy-loop thread per CPU), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "idle,busy", value_parser = parse_load)]
    pub load: Vec<crate::dispatch_bench::Load>,
    /// Pre-dispatching period φ, µs: the producer hands each datagram to the
    /// dispatcher this long before its slot.
    #[arg(long, default_value_t = 1000)]
    pub phi_us: u64,
    /// Each train lasts about this long, s (at least 21, at most 3000 packets).
    #[arg(long, default_value_t = 0.3)]
    pub train_s: f64,
    /// Packet pairs per sender and size (0: none).
    #[arg(long, default_value_t = 200)]
    pub pairs: usize,
    /// The dispatcher's smallest spin before a slot, µs.
    #[arg(long, default_value_t = 30)]
    pub margin_min_us: u64,
    /// The dispatcher's largest spin before a slot, µs.
    #[arg(long, default_value_t = 2000)]
    pub margin_max_us: u64,
    /// Do not hold the CPU wake-up latency request in the dispatcher.
    #[arg(long)]
    pub no_latency_qos: bool,
    /// Run both senders in SCHED_FIFO at this priority (the sequential sender's thread,
    /// the dispatcher's thread and its producer).
    #[arg(long)]
    pub rt_priority: Option<i32>,
    /// Print the JSON report instead of tables.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (36..=1500).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s:?}: expected an IP packet size in bytes from 36 to 1500"
        )),
    }
}

fn parse_spacing(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=10_000_000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: expected microseconds from 1 to 10000000")),
    }
}

fn parse_load(s: &str) -> Result<crate::dispatch_bench::Load, String> {
    match s.trim() {
        "idle" => Ok(crate::dispatch_bench::Load::Idle),
        "busy" => Ok(crate::dispatch_bench::Load::Busy),
        _ => Err(format!("{s:?}: expected idle or busy")),
    }
}

/// Runs `dispatch-bench` and prints its tables (or JSON).
pub fn dispatch_bench(args: &DispatchBenchArgs) -> Result<()> {
    use crate::dispatch_bench::{self as bench, BenchOptions};
    use std::time::Duration;
    if !(args.train_s > 0.0 && args.train_s <= 60.0) {
        anyhow::bail!("--train-s {}: expected seconds in (0, 60]", args.train_s);
    }
    if args.margin_min_us > args.margin_max_us {
        anyhow::bail!(
            "--margin-min-us {} is above --margin-max-us {}: expected min <= max",
            args.margin_min_us,
            args.margin_max_us
        );
    }
    let opts = BenchOptions {
        sizes: args.sizes.clone(),
        spacings_us: args.spacings_us.clone(),
        loads: args.load.clone(),
        phi_us: args.phi_us,
        train_s: args.train_s,
        pairs: args.pairs,
        dispatch: latebind_io::dispatch::DispatchConfig {
            margin_min: Duration::from_micros(args.margin_min_us),
            margin_max: Duration::from_micros(args.margin_max_us),
            cpu_latency_qos: !args.no_latency_qos,
            rt_priority: args.rt_priority,
            ..Default::default()
        },
        ..BenchOptions::default()
    };
    bench::validate(&opts)?;
    let report = bench::run(&opts, &mut |line| eprintln!("{line}"))?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", bench::table(&report));
    }
    Ok(())
}

/// `probe`: capacity and available bandwidth of a link.
#[derive(Clone, Debug, clap::Args)]
pub struct ProbeArgs {
    /// The responder (`latebind probe --listen` on the far side), IP:PORT.
    pub peer: Option<std::net::SocketAddr>,
    /// Be the responder: record the kernel receive time of every probe on this
    /// address (IP:PORT) and answer report requests.
    #[arg(long, conflicts_with_all = ["peer", "eval"])]
    pub listen: Option<std::net::SocketAddr>,
    /// Local address to send from (e.g. one link's address), IP or IP:PORT.
    #[arg(long, value_parser = parse_bind)]
    pub bind: Option<std::net::SocketAddr>,
    /// IP packet size of the probes, bytes.
    #[arg(long, default_value_t = 1500)]
    pub size: usize,
    /// Packet pairs.
    #[arg(long, default_value_t = 60)]
    pub pairs: usize,
    /// Datagrams in the back-to-back train.
    #[arg(long, default_value_t = 100)]
    pub train: usize,
    /// Skip the rate trains (no available-bandwidth estimate).
    #[arg(long)]
    pub no_rate_trains: bool,
    /// Evaluate on emulated links of known rate in network namespaces (needs root):
    /// one link per --rates value and per --trace.
    #[arg(long, conflicts_with = "peer")]
    pub eval: bool,
    /// --eval: fixed link rates, Mb/s, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "5,20,100", value_parser = parse_rate_mbps)]
    pub rates: Vec<f64>,
    /// --eval: UDP cross traffic through each fixed-rate link during its probe, as a
    /// fraction of the link's rate (0 to 0.9).
    #[arg(long, default_value_t = 0.0)]
    pub cross: f64,
    /// --eval: a mahimahi trace for one more link (repeatable).
    #[arg(long)]
    pub trace: Vec<PathBuf>,
    /// Run the sending thread in SCHED_FIFO at this priority (--eval: default 50, and
    /// the emulator at 60).
    #[arg(long)]
    pub rt_priority: Option<i32>,
    /// Responder: exit after answering this many report requests.
    #[arg(long, hide = true)]
    pub max_reports: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_bind(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(a) = s.parse() {
        return Ok(a);
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| std::net::SocketAddr::new(ip, 0))
        .map_err(|_| format!("{s:?}: expected an IP address or IP:PORT"))
}

fn parse_rate_mbps(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r > 0.0 && r <= 10_000.0 => Ok(r),
        _ => Err(format!(
            "{s:?}: expected a rate in Mb/s above 0, at most 10000"
        )),
    }
}

/// Runs `probe` (prober, responder or evaluation).
pub fn probe(args: &ProbeArgs, exe: &Path) -> Result<()> {
    use crate::probe::{self as p, ProbeOptions};
    if !(p::MIN_SIZE..=1500).contains(&args.size) {
        anyhow::bail!(
            "--size {}: expected {} to 1500 bytes",
            args.size,
            p::MIN_SIZE
        );
    }
    if args.pairs == 0 && args.train < 2 {
        anyhow::bail!(
            "--pairs 0 and --train {}: expected some pairs or a train of at least 2",
            args.train
        );
    }
    if let Some(addr) = args.listen {
        return p::listen(addr, args.max_reports);
    }
    let mut opts = ProbeOptions {
        size: args.size,
        pairs: args.pairs,
        train: args.train,
        rate_fractions: if args.no_rate_trains {
            Vec::new()
        } else {
            ProbeOptions::default().rate_fractions
        },
        ..ProbeOptions::default()
    };
    opts.dispatch.rt_priority = args.rt_priority;
    if !(0.0..=0.9).contains(&args.cross) {
        anyhow::bail!(
            "--cross {}: expected a fraction of the link rate from 0 to 0.9",
            args.cross
        );
    }
    if args.eval {
        opts.dispatch.rt_priority = Some(args.rt_priority.unwrap_or(50));
        let rows = p::evaluate(
            exe,
            &p::EvalOptions {
                rates_bps: args.rates.iter().map(|r| r * 1e6).collect(),
                traces: args.trace.clone(),
                probe: opts,
                cross_fraction: args.cross,
            },
        )?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            out!("{}", p::eval_table(&rows));
        }
        return Ok(());
    }
    let Some(peer) = args.peer else {
        anyhow::bail!("no peer: give the responder's IP:PORT, or --listen, or --eval");
    };
    let bind = args.bind.unwrap_or_else(|| {
        if peer.is_ipv4() {
            "0.0.0.0:0".parse().expect("literal address")
        } else {
            "[::]:0".parse().expect("literal address")
        }
    });
    let report = p::probe(bind, peer, &opts)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", report.table());
    }
    Ok(())
}

/// `replay`: re-send a capture's packets with their original spacing.
#[derive(Clone, Debug, clap::Args)]
pub struct ReplayArgs {
    /// The capture (classic pcap; Ethernet, raw IP or Linux cooked).
    pub pcap: Option<PathBuf>,
    /// Where to send the datagrams, IP:PORT.
    #[arg(long)]
    pub peer: Option<std::net::SocketAddr>,
    /// Local address to send from, IP or IP:PORT.
    #[arg(long, value_parser = parse_bind)]
    pub bind: Option<std::net::SocketAddr>,
    /// dispatch (pre-dispatch sender) or sequential.
    #[arg(long, default_value = "dispatch", value_parser = parse_sender)]
    pub sender: crate::dispatch_bench::SenderKind,
    /// Pre-dispatching period φ, µs.
    #[arg(long, default_value_t = 1000)]
    pub phi_us: u64,
    /// Replay with both senders over a veth between two namespaces and report the
    /// timing error measured on the far side (needs root).
    #[arg(long)]
    pub eval: bool,
    /// Write a synthetic capture here and exit (Poisson gaps, mixed sizes): --sample-packets
    /// packets, mean gap --sample-gap-us.
    #[arg(long)]
    pub write_sample: Option<PathBuf>,
    /// Packets of the synthetic capture.
    #[arg(long, default_value_t = 3000)]
    pub sample_packets: usize,
    /// Mean gap of the synthetic capture, µs.
    #[arg(long, default_value_t = 1000.0)]
    pub sample_gap_us: f64,
    /// Run the senders in SCHED_FIFO at this priority.
    #[arg(long)]
    pub rt_priority: Option<i32>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_sender(s: &str) -> Result<crate::dispatch_bench::SenderKind, String> {
    match s.trim() {
        "dispatch" => Ok(crate::dispatch_bench::SenderKind::Dispatch),
        "sequential" => Ok(crate::dispatch_bench::SenderKind::Sequential),
        _ => Err(format!("{s:?}: expected dispatch or sequential")),
    }
}

/// Runs `replay`.
pub fn replay(args: &ReplayArgs) -> Result<()> {
    use crate::replay as r;
    if let Some(out) = &args.write_sample {
        if args.sample_packets < 2
            || args.sample_gap_us.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
        {
            anyhow::bail!(
                "--sample-packets {} / --sample-gap-us {}: expected at least 2 packets and a gap above 0",
                args.sample_packets,
                args.sample_gap_us
            );
        }
        let p = r::sample_packets(args.sample_packets, args.sample_gap_us * 1e3, 1);
        std::fs::write(out, r::write_pcap(&p, 64)).with_context(|| format!("{}", out.display()))?;
        return Ok(());
    }
    let Some(path) = &args.pcap else {
        anyhow::bail!("no capture: give FILE.pcap (or --write-sample FILE)");
    };
    let packets = r::read_pcap(path)?;
    if packets.len() < 2 {
        anyhow::bail!(
            "{}: {} packets, expected at least 2",
            path.display(),
            packets.len()
        );
    }
    let dispatch = latebind_io::dispatch::DispatchConfig {
        rt_priority: args.rt_priority,
        ..Default::default()
    };
    if args.eval {
        let rows = r::evaluate(&packets, &dispatch, args.phi_us)?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&rows)?);
        } else {
            out!("{}", r::eval_table(&packets, &rows));
        }
        return Ok(());
    }
    let Some(peer) = args.peer else {
        anyhow::bail!("no peer: give --peer IP:PORT, or --eval");
    };
    let bind = args
        .bind
        .unwrap_or_else(|| "0.0.0.0:0".parse().expect("literal address"));
    let stats = r::replay(&packets, bind, peer, args.sender, &dispatch, args.phi_us)?;
    let (mean, p50, p99, max) = crate::dispatch_bench::summary_us(&stats.lateness_ns);
    outln!(
        "{} datagrams sent ({} errors); lateness of the send calls (the sender's own view) mean {mean:.2} / p50 {p50:.2} / p99 {p99:.2} / max {max:.2} µs; CPU {:.0} %",
        stats.sent,
        stats.send_errors,
        100.0 * stats.cpu_fraction()
    );
    Ok(())
}
