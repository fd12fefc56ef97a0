//! The dispatch stage's binding horizon φ in the simulator: packets bound ahead of their
//! pacing slot wait for it at the client.

mod common;

use common::{flow, link, scenario, with};

use latebind_sim::{Mode, run};

/// φ = 0 is binding at the slot: the same run, number for number.
#[test]
fn zero_horizon_is_binding_at_the_slot() {
    for name in ["urgent.toml", "handoff.toml"] {
        let base = scenario(name);
        let off = run(&base, Mode::Late).unwrap();
        let zero = run(
            &with(
                &base,
                &["late.dispatch=true", "late.dispatch_horizon_us=0.0"],
            ),
            Mode::Late,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&off).unwrap(),
            serde_json::to_string(&zero).unwrap(),
            "{name}"
        );
    }
}

/// With a horizon, the urgent packet still passes the burst, and the budget bounds what
/// a cut takes with the interface.
#[test]
fn horizon_keeps_late_binding_within_the_budget() {
    for phi in ["1000.0", "5000.0"] {
        let sets = [
            "late.dispatch=true".to_owned(),
            format!("late.dispatch_horizon_us={phi}"),
        ];
        let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
        let r = run(&with(&scenario("urgent.toml"), &sets), Mode::Late).unwrap();
        let u = flow(&r, "urgent");
        assert_eq!(u.delivered, 1, "φ {phi}");
        assert!(u.latency_ms.p50 < 20.0, "φ {phi}: {}", u.latency_ms.p50);
        let h = run(&with(&scenario("handoff.toml"), &sets), Mode::Late).unwrap();
        let wifi1 = link(&h, "wifi1");
        assert!(wifi1.lost_at_outage_up <= 4, "φ {phi}: {wifi1:?}");
    }
}
