//! `latebind`: the command-line interface.
//!
//! Subcommands built so far: `sim` (run a scenario in the deterministic simulator). The
//! daemon (`client`, `server`), `lab`, `status`, `probe` and `replay` come with later work.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use latebind_sim::{Mode, Report, Scenario, compare_table};

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
    }
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
        println!("{text}");
    } else if compare {
        print!("{}", compare_table(reports));
    } else {
        print!("{}", reports[0].table());
    }
    Ok(())
}
