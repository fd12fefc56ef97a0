//! `latebind`: the command-line interface.
//!
//! Subcommands: `sim` (a scenario in the deterministic simulator), `lab` (the same
//! scenario on real kernels in network namespaces: `latebind_lab`), `traffic` (the lab's
//! traffic tool), `client` and `server` (the daemons), `status` (a running daemon's
//! state), `genkey` / `pubkey` (keys); `dispatch-bench` (send-time accuracy of the
//! pre-dispatch sender), `probe` (capacity and available bandwidth of a link),
//! `replay` (a pcap re-sent with its spacing); hidden: `emulate` (the lab's link
//! emulator, which `lab` starts inside its emulator namespace).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use latebind_sim::{Mode, Report, Scenario, compare_table};

use latebind_lab::{out, outln};

/// A late-binding multipath tunnel.
#[derive(Debug, Parser)]
#[command(name = "latebind", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario in the deterministic simulator (virtual time).
    Sim(SimArgs),
    /// Run a scenario on real kernels, in network namespaces (needs root).
    ///
    /// A user-space link emulator applies the simulator's link models between the
    /// client and server namespaces; the stack is the latebind daemons (mode late),
    /// Linux routing (early) or kernel multipath TCP (mptcp, TCP flows only).
    Lab(latebind_lab::cli::LabArgs),
    /// The lab's traffic tool: one end of one flow (UDP probes or TCP records).
    #[command(subcommand)]
    Traffic(latebind_lab::traffic::TrafficCmd),
    /// The lab's link emulator (started by `lab` inside its emulator namespace).
    #[command(hide = true)]
    Emulate(latebind_lab::emu::EmulateArgs),
    /// Send-time accuracy: the pre-dispatch sender against the sequential one, measured
    /// by a capture on the far side of a veth (needs root).
    DispatchBench(latebind_lab::cli::DispatchBenchArgs),
    /// Capacity and available bandwidth of a link: packet pairs and trains to a
    /// `probe --listen` responder, timed by the responder's kernel.
    Probe(latebind_lab::cli::ProbeArgs),
    /// Re-send a capture's packets (pcap) with their original spacing; --eval measures
    /// the timing error on the far side of a veth (needs root).
    Replay(latebind_lab::cli::ReplayArgs),
    /// Run the client daemon (the multi-homed host).
    Client {
        /// Configuration file (see examples/client.toml).
        #[arg(long, env = "LATEBIND_CONFIG")]
        config: PathBuf,
        /// Install the configured routes through the tunnel.
        #[arg(long)]
        routes: bool,
    },
    /// Run the server daemon (the aggregation point).
    Server {
        /// Configuration file (see examples/server.toml).
        #[arg(long, env = "LATEBIND_CONFIG")]
        config: PathBuf,
    },
    /// Show a running daemon's links, queues and counters.
    Status {
        /// The daemon's control socket.
        #[arg(
            long,
            default_value = "/run/latebind/client.sock",
            env = "LATEBIND_CONTROL"
        )]
        socket: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Print a new private key (base64).
    Genkey,
    /// Read a private key on standard input, print its public key.
    Pubkey,
}

#[derive(Debug, clap::Args)]
struct SimArgs {
    /// The scenario file (TOML, the scenario contract v1).
    scenario: PathBuf,
    /// late (latebind) or early (the Linux default it replaces).
    #[arg(long, default_value = "late", value_parser = parse_mode)]
    mode: Mode,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Print the JSON report instead of a table.
    #[arg(long)]
    json: bool,
    /// Override a scenario key: --set late.budget_packets=4 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    sets: Vec<String>,
    /// Run the scenario's [[variants]] (default: late and early) and print them side by side.
    #[arg(long)]
    compare: bool,
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("latebind: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Sim(args) => sim(args),
        // The lab starts `<this binary> emulate|traffic|client|server` in its namespaces.
        Command::Lab(args) => latebind_lab::cli::lab(
            &args,
            &std::env::current_exe().context("locating the latebind binary")?,
        ),
        Command::Traffic(cmd) => latebind_lab::cli::traffic(&cmd),
        Command::Emulate(args) => latebind_lab::cli::emulate(&args),
        Command::DispatchBench(args) => latebind_lab::cli::dispatch_bench(&args),
        Command::Replay(args) => latebind_lab::cli::replay(&args),
        Command::Probe(args) => latebind_lab::cli::probe(
            &args,
            &std::env::current_exe().context("locating the latebind binary")?,
        ),
        Command::Client { config, routes } => {
            init_logging();
            let cfg = latebind_daemon::config::ClientConfig::load(&config)?;
            latebind_daemon::client::run(cfg, latebind_daemon::client::ClientOptions { routes })
        }
        Command::Server { config } => {
            init_logging();
            let cfg = latebind_daemon::config::ServerConfig::load(&config)?;
            latebind_daemon::server::run(cfg)
        }
        Command::Status { socket, json } => {
            let text = latebind_daemon::control::query(&socket)?;
            if json {
                outln!("{text}");
            } else {
                let status: latebind_daemon::status::Status =
                    serde_json::from_str(&text).context("the daemon's answer is not a status")?;
                out!("{}", status.table());
            }
            Ok(())
        }
        Command::Genkey => {
            let mut b = [0u8; 32];
            getrandom::fill(&mut b).context("reading OS randomness")?;
            outln!(
                "{}",
                latebind_crypto::StaticSecret::from_random_bytes(b).to_base64()
            );
            Ok(())
        }
        Command::Pubkey => {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            let key: latebind_crypto::StaticSecret = text
                .trim()
                .parse()
                .map_err(|e| anyhow::anyhow!("standard input: {e}"))?;
            outln!("{}", key.public_key());
            Ok(())
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LATEBIND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file or the journal (the systemd unit) would
    // keep the escape codes, and a search for `key=value` would miss.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn sim(args: SimArgs) -> Result<()> {
    let mut scenario = Scenario::load(&args.scenario)?;
    let mut sets = args.sets.clone();
    if let Some(seed) = args.seed {
        sets.push(format!("scenario.seed={seed}"));
    }
    if !sets.is_empty() {
        scenario = scenario.with_overrides(sets.iter().map(String::as_str))?;
    }
    if !args.compare {
        let report = latebind_sim::run(&scenario, args.mode)?;
        print(&[report], args.json, false)?;
        return Ok(());
    }
    let variants = if scenario.spec.variants.is_empty() {
        vec![
            ("late".to_owned(), Mode::Late, scenario.clone()),
            ("early".to_owned(), Mode::Early, scenario.clone()),
        ]
    } else {
        scenario
            .spec
            .variants
            .iter()
            .map(|v| {
                let mode: Mode = v.mode.parse().map_err(anyhow::Error::msg)?;
                let s = scenario
                    .with_variant(v)
                    .with_context(|| format!("variant {:?}", v.label))?;
                Ok((v.label.clone(), mode, s))
            })
            .collect::<Result<Vec<_>>>()?
    };
    let mut reports = Vec::new();
    for (label, mode, s) in variants {
        let mut r = latebind_sim::run(&s, mode)?;
        r.label = Some(label);
        reports.push(r);
    }
    print(&reports, args.json, true)
}

fn print(reports: &[Report], json: bool, compare: bool) -> Result<()> {
    if json {
        let text = if compare {
            serde_json::to_string_pretty(reports)?
        } else {
            serde_json::to_string_pretty(&reports[0])?
        };
        outln!("{text}");
    } else if compare {
        out!("{}", compare_table(reports));
    } else {
        out!("{}", reports[0].table());
    }
    Ok(())
}
