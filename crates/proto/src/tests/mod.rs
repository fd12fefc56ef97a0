//! Scenario tests on a two-engine harness (see harness.rs).
