//! The latebind simulator: link models, traffic and two protocol engines in virtual time.
//!
//! Module map:
//! - [`scenario`]: the scenario contract (TOML keys, defaults, validation, overrides).
//! - [`world`]: the deterministic event loop, mode `late` (latebind engines) and mode
//!   `early` (the Linux default it replaces).
//! - [`report`]: the JSON report and the readable tables.
//! - [`cuts`]: what each flow saw around each outage start (shared with the lab).
//!
//! A run is a pure function of (scenario, seed): the same inputs give byte-identical JSON.

#![warn(missing_docs)]

pub mod cuts;
pub mod report;
pub mod scenario;
pub mod world;

pub use report::{Report, compare_table, run};
pub use scenario::{Scenario, ScenarioError};
pub use world::{BacklogTally, Mode, Outcome, World};
