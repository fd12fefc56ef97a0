//! Scenario tests on a two-engine harness (see harness.rs).

mod acks;
mod ahead;
mod compact;
mod harness;
mod mtu;
mod props;
mod scenarios;
mod small;
