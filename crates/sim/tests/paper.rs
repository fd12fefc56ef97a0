//! The late-binding paper's two experiments, in the simulator, against the targets.

mod common;

use std::path::PathBuf;

use common::{flow, link, scenario, with};

use latebind_sim::{Mode, Scenario, run};

#[test]
fn same_scenario_and_seed_give_identical_json() {
    for name in ["handoff.toml", "urgent.toml"] {
        let s = scenario(name);
        for mode in [Mode::Late, Mode::Early] {
            let report = run(&s, mode).unwrap();
            assert!(
                report.simulator.stalls <= 10,
                "{name} {mode:?}: {:?}",
                report.simulator
            );
            let a = serde_json::to_string(&report).unwrap();
            let b = serde_json::to_string(&run(&s, mode).unwrap()).unwrap();
            assert_eq!(a, b, "{name} {mode:?}");
        }
    }
}

#[test]
fn different_seeds_differ_when_the_scenario_is_random() {
    let s = with(
        &scenario("handoff.toml"),
        &["links.1.loss=0.01", "links.0.jitter_ms=2.0"],
    );
    let a = serde_json::to_string(&run(&s, Mode::Late).unwrap()).unwrap();
    let b =
        serde_json::to_string(&run(&with(&s, &["scenario.seed=2"]), Mode::Late).unwrap()).unwrap();
    assert_ne!(a, b);
}

/// Paper figure 4: packets lost when link 1 goes away, at cut times spread over several
/// TCP sawtooth phases (no single favourable instant).
#[test]
fn handoff_late_loses_at_most_two_where_early_driver_50_loses_at_least_20() {
    let base = scenario("handoff.toml");
    let mut early50 = Vec::new();
    let mut early5 = Vec::new();
    for cut in ["5.1", "5.7", "6.0", "6.4", "6.9", "7.3"] {
        let s = with(&base, &[&format!("links.0.outages=[[{cut}, 1000.0]]")]);
        let late = run(&s, Mode::Late).unwrap();
        let lost = link(&late, "wifi1").lost_at_outage_up;
        assert!(lost <= 2, "late lost {lost} at cut {cut}");
        assert!(link(&late, "wifi1").max_queue_below_binding <= 3);
        let e50 = run(
            &with(&s, &["early.qdisc_packets=0", "early.driver_packets=50"]),
            Mode::Early,
        )
        .unwrap();
        early50.push(link(&e50, "wifi1").lost_at_outage_up);
        let e5 = run(
            &with(&s, &["early.qdisc_packets=0", "early.driver_packets=5"]),
            Mode::Early,
        )
        .unwrap();
        early5.push(link(&e5, "wifi1").lost_at_outage_up);
        // After the cut the flow keeps going on link 2.
        assert!(
            flow(&late, "bulk").goodput_mbps > 2.5,
            "{:?}",
            flow(&late, "bulk")
        );
    }
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len() as f64;
    assert!(mean(&early50) >= 20.0, "early, driver 50: {early50:?}");
    assert!(
        mean(&early5) <= 8.0 && mean(&early5) >= 2.0,
        "early, driver 5: {early5:?}"
    );
}

/// Paper figure 7: an urgent packet after a 1000-packet burst on one 10 Mb/s link.
#[test]
fn urgent_packet_late_within_three_transmissions_early_qdisc_over_one_second() {
    let s = scenario("urgent.toml");
    let delay_ms = s.spec.links[0].delay_ms;
    let tx_ms = 1400.0 * 8.0 / 10e6 * 1e3;
    let late = run(&s, Mode::Late).unwrap();
    let u = flow(&late, "urgent");
    assert_eq!(u.delivered, 1);
    assert!(
        u.latency_ms.max <= delay_ms + 3.0 * tx_ms,
        "late: urgent {} ms, limit {} ms",
        u.latency_ms.max,
        delay_ms + 3.0 * tx_ms
    );
    let early = run(&s, Mode::Early).unwrap();
    let u = flow(&early, "urgent");
    assert_eq!(u.delivered, 1);
    assert!(
        u.latency_ms.max > 1000.0,
        "early, qdisc 1000: urgent {} ms",
        u.latency_ms.max
    );
    let no_qdisc = run(
        &with(&s, &["early.qdisc_packets=0", "early.driver_packets=50"]),
        Mode::Early,
    )
    .unwrap();
    let u = flow(&no_qdisc, "urgent");
    assert!(
        u.latency_ms.max > 50.0 && u.latency_ms.max < 80.0,
        "early, driver 50: {} ms",
        u.latency_ms.max
    );
}

#[test]
fn every_scenario_in_the_repository_loads_and_runs_both_modes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{e}"));
            // Keep the test short: the first two simulated seconds, or the whole scenario
            // when a flow starts later than that.
            let s = s.with_overrides(["scenario.duration_s=2.0"]).unwrap_or(s);
            for mode in [Mode::Late, Mode::Early] {
                run(&s, mode).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
            n += 1;
        }
    }
    assert!(n >= 2);
}
