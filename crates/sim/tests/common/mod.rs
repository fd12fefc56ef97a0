//! Helpers shared by the simulator's integration tests.
#![allow(dead_code, reason = "each test file uses a different subset")]

use std::path::PathBuf;

use latebind_sim::Report;
use latebind_sim::Scenario;
use latebind_sim::report::{FlowReport, LinkReport};

/// A scenario of the repository's `scenarios/` folder.
pub(crate) fn scenario(name: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name);
    Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// `s` with dotted-key overrides.
pub(crate) fn with(s: &Scenario, sets: &[&str]) -> Scenario {
    s.with_overrides(sets.iter().copied())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A link of a report by name.
pub(crate) fn link<'a>(r: &'a Report, name: &str) -> &'a LinkReport {
    r.links
        .iter()
        .find(|l| l.name == name)
        .expect("link in report")
}

/// A flow of a report by name.
pub(crate) fn flow<'a>(r: &'a Report, name: &str) -> &'a FlowReport {
    r.flows
        .iter()
        .find(|f| f.name == name)
        .expect("flow in report")
}
