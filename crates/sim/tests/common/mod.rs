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

/// A scenario written in a test (traces resolve against `scenarios/`).
pub(crate) fn inline_scenario(text: &str) -> Scenario {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/inline.toml");
    Scenario::from_str(text, &path).unwrap_or_else(|e| panic!("{e}"))
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

/// A trace's mean capacity over the first `secs` seconds, bytes per second (the traces
/// here are longer than that).
pub(crate) fn trace_capacity(name: &str, secs: f64) -> f64 {
    use latebind_linkmodel::{OPPORTUNITY_BYTES, Trace};
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/traces")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let trace = Trace::parse(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let opportunities = trace
        .opportunities_ms()
        .iter()
        .filter(|&&ms| ms as f64 <= secs * 1e3)
        .count();
    (opportunities * OPPORTUNITY_BYTES) as f64 / secs
}
