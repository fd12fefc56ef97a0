//! `lab-dev`: the lab's subcommands as a stand-alone binary, for developing and testing
//! the lab before the `latebind` CLI embeds them.
//!
//! ```text
//! lab-dev lab scenarios/urgent.toml --mode early
//! lab-dev traffic recv --kind udp-cbr --bind 127.0.0.1:9000 --until-s 3
//! lab-dev emulate --spec spec.json          (started by `lab` inside the emu namespace)
//! lab-dev cleanup                           (remove namespaces of crashed runs)
//! lab-dev client|server --config FILE        (the daemons, started by `lab --mode late`)
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
    /// The client daemon (started by `lab --mode late` inside the client namespace).
    #[command(hide = true)]
    Client {
        /// Configuration file.
        #[arg(long)]
        config: std::path::PathBuf,
    },
    /// The server daemon (started by `lab --mode late` inside the server namespace).
    #[command(hide = true)]
    Server {
        /// Configuration file.
        #[arg(long)]
        config: std::path::PathBuf,
    },
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
        Command::Client { config } => {
            init_logging();
            let cfg = latebind_daemon::config::ClientConfig::load(&config)?;
            latebind_daemon::client::run(cfg, latebind_daemon::client::ClientOptions::default())
        }
        Command::Server { config } => {
            init_logging();
            let cfg = latebind_daemon::config::ServerConfig::load(&config)?;
            latebind_daemon::server::run(cfg)
        }
        Command::Cleanup => {
            for ns in latebind_lab::cleanup_stale()? {
                println!("removed {ns}");
            }
            Ok(())
        }
    }
}

/// The daemons' log on stderr, as `latebind client|server` writes it (`LATEBIND_LOG`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LATEBIND_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
