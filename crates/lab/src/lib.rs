//! latebind's lab: a scenario (the same TOML the simulator runs) on real Linux kernels,
//! in network namespaces, with a user-space link emulator between client and server.
//!
//! Module map:
//! - [`netns`]: the topology (client, emu and server namespaces, veth pairs per link,
//!   the addressing scheme), its teardown guard, and stale-run cleanup.
//! - [`emu`]: the real-time emulator (`<exe> emulate`): AF_PACKET bridging per link
//!   through the simulator's `LinkDirection` models, epoll + timerfd + a short spin.
//! - [`traffic`]: the traffic tool (`<exe> traffic send|recv`): UDP probes and TCP
//!   records with `CLOCK_MONOTONIC` timestamps, JSON summaries.
//! - [`run`](mod@run): the runner: one scenario in one mode (`early`, `late`, `mptcp`),
//!   the report in the simulator's shape.
//! - [`late`]: mode late's daemons (keys, configs, start, status); [`mptcp`]: mode
//!   mptcp's path manager and policy routing.
//! - [`cli`]: clap argument structs for the `lab`, `emulate` and `traffic` subcommands,
//!   ready to be embedded in a binary.
//! - [`capture`]: departure times that do not trust the sender: `AF_PACKET` with
//!   kernel receive timestamps on the far end of a veth, inter-departure errors.
//! - [`dispatch_bench`]: `dispatch-bench`, the pre-dispatch sender against the
//!   sequential one (the send-time accuracy paper's table 4 grid, packet pairs).
//! - [`probe`]: `probe`: packet pairs and trains to a responder that keeps kernel
//!   receive times; capacity and available bandwidth; their evaluation on emulated
//!   links of known rate.
//! - [`replay`]: `replay`: a pcap's packets re-sent with their original spacing, and
//!   the timing error measured on the far side of a veth.
//! - [`netlink`], [`stats`], [`sys`]: rtnetlink for timed interface and route changes,
//!   percentiles, system-call wrappers.
//!
//! Helper processes are started as `<exe> emulate ...` and `<exe> traffic ...` inside
//! the namespaces (`ip netns exec`), where `<exe>` is the binary path the caller passes
//! (the CLI passes `std::env::current_exe()`); that binary must dispatch those
//! subcommands to [`cli::emulate`] and [`cli::traffic`]. Everything needs root.

#![warn(missing_docs)]

pub mod capture;
pub mod cli;
pub mod dispatch_bench;
pub mod emu;
pub mod late;
pub mod mptcp;
pub mod netlink;
pub mod netns;
pub mod probe;
pub mod replay;
pub mod run;
pub mod stats;
pub mod sys;
pub mod traffic;

pub use netns::{Topology, cleanup_stale};
pub use run::{LabMode, LabOptions, LabOutcome, run, run_with};
