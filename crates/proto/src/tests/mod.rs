//! Scenario tests on a two-engine harness (see harness.rs).

mod ahead;
mod harness;
mod mtu;
mod props;
mod scenarios;
