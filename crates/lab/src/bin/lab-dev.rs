//! `lab-dev`: the lab's subcommands as a stand-alone binary, for developing and testing
//! the lab before the `latebind` CLI embeds them.
//!
//! ```text
//! lab-dev lab scenarios/urgent.toml --mode early
//! lab-dev traffic recv --kind udp-cbr --bind 127.0.0.1:9000 --until-s 3
//! lab-dev emulate --spec spec.json          (started by `lab` inside the emu namespace)
//! lab-dev cleanup                           (remove namespaces of crashed runs)
//! ```

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "lab-dev", version, about = "latebind lab (development binary)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario on real kernels in network namespaces.
    Lab(latebind_lab::cli::LabArgs),
    /// The link emulator (started by `lab` inside the emu namespace).
    #[command(hide = true)]
    Emulate(latebind_lab::emu::EmulateArgs),
    /// The traffic tool.
    #[command(subcommand)]
    Traffic(latebind_lab::traffic::TrafficCmd),
    /// Remove the namespaces of lab runs whose process is gone.
    Cleanup,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lab-dev: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Lab(args) => latebind_lab::cli::lab(&args, &std::env::current_exe()?),
        Command::Emulate(args) => latebind_lab::cli::emulate(&args),
        Command::Traffic(cmd) => latebind_lab::cli::traffic(&cmd),
        Command::Cleanup => {
            for ns in latebind_lab::cleanup_stale()? {
                println!("removed {ns}");
            }
            Ok(())
        }
    }
}
