//! Scenario-level checks of the link models through the whole simulator.

use std::path::Path;

use latebind_sim::{Mode, Scenario, run};

fn load(text: &str) -> Scenario {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/inline.toml");
    Scenario::from_str(text, &dir).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn udp_cbr_below_link_rate_arrives_whole_after_propagation_delay() {
    let s = load(
        r#"
[scenario]
name = "cbr"
duration_s = 3.0
[[links]]
name = "a"
rate_mbps = 10.0
delay_ms = 20.0
[[flows]]
name = "cbr"
kind = "udp-cbr"
rate_mbps = 4.0
"#,
    );
    for mode in [Mode::Late, Mode::Early] {
        let r = run(&s, mode).unwrap();
        let f = &r.flows[0];
        assert_eq!(f.lost, 0, "{mode:?}");
        assert_eq!(f.delivered, f.sent);
        // 20 ms propagation + 1.1-1.2 ms serialization (plus the tunnel header in late).
        assert!(
            f.latency_ms.p50 > 21.0 && f.latency_ms.p50 < 22.5,
            "{mode:?}: {:?}",
            f.latency_ms
        );
    }
}

#[test]
fn mahimahi_trace_link_carries_a_tcp_flow() {
    let s = load(
        r#"
[scenario]
name = "trace"
duration_s = 10.0
[[links]]
name = "lte"
trace_up = "../../shared/traces/Verizon-LTE-short.up"
trace_down = "../../shared/traces/Verizon-LTE-short.down"
delay_ms = 20.0
[[flows]]
name = "bulk"
kind = "tcp-bulk"
"#,
    );
    let r = run(&s, Mode::Late).unwrap();
    assert!(r.flows[0].goodput_mbps > 0.5, "{:?}", r.flows[0]);
}

#[test]
fn missing_trace_file_is_reported_with_key_and_path() {
    let s = load(
        r#"
[scenario]
name = "trace"
duration_s = 1.0
[[links]]
name = "lte"
trace = "no-such-trace.down"
"#,
    );
    let e = run(&s, Mode::Late).expect_err("missing trace").to_string();
    assert!(
        e.contains("links[0].trace") && e.contains("no-such-trace.down"),
        "{e}"
    );
}

#[test]
fn random_loss_is_seen_by_udp_in_both_modes() {
    let s = load(
        r#"
[scenario]
name = "loss"
duration_s = 5.0
[[links]]
name = "a"
rate_mbps = 10.0
delay_ms = 10.0
loss = 0.02
[[flows]]
name = "cbr"
kind = "udp-cbr"
rate_mbps = 2.0
"#,
    );
    for mode in [Mode::Late, Mode::Early] {
        let f = run(&s, mode).unwrap().flows[0].clone();
        let frac = f.lost as f64 / f.sent as f64;
        assert!(
            frac > 0.01 && frac < 0.035,
            "{mode:?}: lost {} of {}",
            f.lost,
            f.sent
        );
    }
}
