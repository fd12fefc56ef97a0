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
//! // Command::Emulate(a) => latebind_lab::cli::emulate(&a),
//! // Command::Traffic(t) => latebind_lab::cli::traffic(&t),
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use latebind_sim::Scenario;

use crate::emu::EmulateArgs;
use crate::run::{LabMode, LabOptions, run_with};
use crate::traffic::TrafficCmd;

/// `lab`: run a scenario on real kernels.
#[derive(Clone, Debug, clap::Args)]
pub struct LabArgs {
    /// The scenario file (TOML, the scenario contract v1).
    pub scenario: PathBuf,
    /// early (Linux default routing); late and mptcp are not built yet.
    #[arg(long, default_value = "early")]
    pub mode: String,
    /// Override the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Override a scenario key: --set early.driver_packets=5 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Print the JSON report instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Put the run's files (specs, logs, summaries) here and keep them.
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// The emulator spins when its next deadline is closer than this (µs).
    #[arg(long, default_value_t = 200)]
    pub spin_us: u64,
    /// TCP congestion control of the TCP senders.
    #[arg(long, default_value = "cubic")]
    pub cc: String,
    /// Log every frame in the emulator's log.
    #[arg(long)]
    pub log_frames: bool,
}

/// Runs `lab`: prints the report (table or JSON) and the run's notes.
pub fn lab(args: &LabArgs, exe: &Path) -> Result<()> {
    let mut scenario = Scenario::load(&args.scenario)?;
    let mut sets = args.sets.clone();
    if let Some(seed) = args.seed {
        sets.push(format!("scenario.seed={seed}"));
    }
    if !sets.is_empty() {
        scenario = scenario.with_overrides(sets.iter().map(String::as_str))?;
    }
    let mode: LabMode = args.mode.parse().map_err(anyhow::Error::msg)?;
    let opts = LabOptions {
        work_dir: args.work_dir.clone(),
        keep: args.work_dir.is_some(),
        spin_us: args.spin_us,
        cc: args.cc.clone(),
        log_frames: args.log_frames,
        ..LabOptions::default()
    };
    let out = run_with(&scenario, mode, exe, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&out.report)?);
    } else {
        print!("{}", out.report.table());
        println!(
            "emulator lateness us: p50 {} p99 {} max {}",
            out.emulator.lateness_us.p50,
            out.emulator.lateness_us.p99,
            out.emulator.lateness_us.max
        );
        for e in &out.edges {
            println!(
                "link {} {} at {:.3} s ({:.0} us late), qdisc backlog {}",
                e.link, e.what, e.scheduled_s, e.late_us, e.qdisc_backlog
            );
        }
    }
    for n in &out.notes {
        eprintln!("note: {n}");
    }
    if args.work_dir.is_some() {
        eprintln!("run files: {}", out.run_dir.display());
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
