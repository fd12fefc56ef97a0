//! Scenario-level checks of the link models through the whole simulator.

mod common;

use common::{inline_scenario as load, scenario};
use latebind_sim::{Mode, Scenario, run};

/// One UDP CBR flow of `rate_mbps` (uplink) over one 10 Mb/s link with 20 ms of delay.
fn cbr_over_10_mbps(rate_mbps: f64, duration_s: f64) -> Scenario {
    load(&format!(
        r#"
[scenario]
name = "cbr"
duration_s = {duration_s}
[[links]]
name = "a"
rate_mbps = 10.0
delay_ms = 20.0
[[flows]]
name = "cbr"
kind = "udp-cbr"
rate_mbps = {rate_mbps}
"#
    ))
}

#[test]
fn udp_cbr_below_link_rate_arrives_whole_after_propagation_delay() {
    let s = cbr_over_10_mbps(4.0, 3.0);
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

/// Two links, a UDP flow on the first; the first link is out from 1 s to 3 s, locally
/// (the client's interface goes down) or remotely (`outage_local = false`).
fn cut_scenario(local: bool) -> Scenario {
    load(&format!(
        r#"
[scenario]
name = "remote"
duration_s = 4.0
[[links]]
name = "a"
rate_mbps = 10.0
delay_ms = 20.0
outages = [[1.0, 3.0]]
outage_local = {local}
[[links]]
name = "b"
rate_mbps = 10.0
delay_ms = 30.0
[[flows]]
name = "cbr"
kind = "udp-cbr"
rate_mbps = 2.0
"#
    ))
}

#[test]
fn remote_outage_keeps_the_early_route_and_loses_what_leaves_the_interface() {
    let local = run(&cut_scenario(true), Mode::Early).unwrap();
    assert!(local.flows[0].lost <= 1, "{:?}", local.flows[0]);
    let remote = run(&cut_scenario(false), Mode::Early).unwrap();
    let (f, a) = (&remote.flows[0], &remote.links[0]);
    // 1400-byte packets at 2 Mbit/s: one every 5.6 ms, so 357 or 358 leave in the 2 s
    // outage. The route stays on the dead link: each of them leaves the client's
    // interface (none is refused) and is lost in the network; the flow resumes on the
    // same link at 3 s.
    let period_s: f64 = 1400.0 * 8.0 / 2e6;
    let in_outage = (2.0 / period_s).floor() as u64;
    assert!((in_outage..=in_outage + 1).contains(&f.lost), "{f:?}");
    assert_eq!(a.lost_at_outage_up, f.lost, "{a:?}");
    assert_eq!(a.dropped_outage, 0, "{a:?}");
    assert_eq!(remote.links[1].packets_sent, 0, "{:?}", remote.links[1]);
    assert!(f.max_gap_ms > 2000.0 && f.max_gap_ms < 2000.0 + 2.0 * period_s * 1e3);
}

#[test]
fn remote_outage_is_not_told_to_the_late_engine() {
    // Told at once, the engine binds nothing more to the link; not told, it keeps the
    // link until it notices, and what it sent there meanwhile is lost.
    let local = run(&cut_scenario(true), Mode::Late).unwrap();
    let remote = run(&cut_scenario(false), Mode::Late).unwrap();
    assert_eq!(local.links[0].lost_at_outage_up, 0, "{:?}", local.links[0]);
    assert!(
        remote.links[0].lost_at_outage_up > 0,
        "{:?}",
        remote.links[0]
    );
}

#[test]
fn a_random_loss_inside_a_remote_outage_leaves_the_rest_of_it_lost() {
    // Random loss on the dying link too: a packet that leaves the client's side in the
    // outage may be lost at random while those that left before it still propagate.
    // Every other one must still be lost, in this outage and in the next.
    let s = cut_scenario(false)
        .with_overrides([
            "scenario.duration_s=6.0",
            "links.0.loss=0.05",
            "links.0.outages=[[1.0, 3.0], [4.0, 5.0]]",
        ])
        .unwrap();
    let r = run(&s, Mode::Early).unwrap();
    let (f, a) = (&r.flows[0], &r.links[0]);
    // 3 s out of 6 s: one packet every 5.6 ms, so 535 or 536 leave in the outages.
    let period_s: f64 = 1400.0 * 8.0 / 2e6;
    let in_outages = (3.0 / period_s).floor() as u64;
    assert!(
        a.lost_at_outage_up >= in_outages * 9 / 10,
        "{} of {in_outages} lost at the outages: {a:?}",
        a.lost_at_outage_up
    );
    assert!(f.max_gap_ms > 2000.0, "{f:?}");
}

#[test]
fn cuts_report_the_stall_data_again_and_loss_around_each_cut() {
    // The route stays on the dead link: nothing arrives from shortly after the cut to
    // shortly after the link returns at 3 s, and every packet that left during the
    // outage is lost (the loss window [0 s, 3 s) holds them all).
    let remote = run(&cut_scenario(false), Mode::Early).unwrap();
    assert_eq!(remote.cuts.len(), 1, "{:?}", remote.cuts);
    let c = &remote.cuts[0];
    assert_eq!(
        (c.link.as_str(), c.at_s, c.flow.as_str()),
        ("a", 1.0, "cbr")
    );
    assert_eq!(c.lost, Some(remote.flows[0].lost));
    // From the last arrival of a packet that left before the cut to the first of one
    // that left after 3 s: the outage, give or take a packet period (5.6 ms).
    assert!((c.stall_ms - 2000.0).abs() < 5.6, "{c:?}");
    assert_eq!(c.stall_ms, remote.flows[0].max_gap_ms);
    let again = c.data_again_ms.expect("data after the outage");
    // That packet arrives 20 ms (+ serialization, + the phase) after 3 s.
    assert!(again > 2020.0 && again < 2030.0, "{c:?}");
    // Told at once, the route moves: no stall beyond the packet period and the second
    // link's extra 10 ms, nothing lost.
    let local = run(&cut_scenario(true), Mode::Early).unwrap();
    let c = &local.cuts[0];
    assert!(c.stall_ms < 20.0, "{c:?}");
    assert_eq!(c.lost, Some(0));
}

#[test]
fn a_tcp_flow_reports_its_stall_at_the_cut_and_no_loss_figure() {
    let s = scenario("handoff.toml");
    for mode in [Mode::Late, Mode::Early] {
        let r = run(&s, mode).unwrap();
        assert_eq!(r.cuts.len(), 1, "{mode:?}: {:?}", r.cuts);
        let (c, f) = (&r.cuts[0], &r.flows[0]);
        assert_eq!((c.link.as_str(), c.at_s, c.lost), ("wifi1", 6.0, None));
        assert!(
            c.stall_ms > 0.0 && c.stall_ms <= f.max_gap_ms,
            "{mode:?}: {c:?} {f:?}"
        );
        assert!(c.data_again_ms.is_some_and(|t| t >= c.stall_ms), "{c:?}");
        if mode == Mode::Early {
            // The FIFO lost at the cut costs smoltcp's TCP its retransmission timeout:
            // the run's longest gap.
            assert_eq!(c.stall_ms, f.max_gap_ms, "{c:?} {f:?}");
            assert!(c.stall_ms > 1000.0, "{c:?}");
        }
    }
}

/// The report says how much of each link direction went unused and, in mode late, what
/// the sending engine was doing meanwhile: a source below the link's rate leaves the
/// rest with nothing waiting; one above it leaves almost nothing, and what it leaves
/// has packets waiting.
#[test]
fn unused_capacity_is_measured_and_attributed_to_the_sender() {
    for mode in [Mode::Late, Mode::Early] {
        let r = run(&cbr_over_10_mbps(4.0, 5.0), mode).unwrap();
        let [Some(up), Some(down)] = r.links[0].unused_capacity.clone().expect("simulator") else {
            panic!("both directions");
        };
        // 4 Mb/s of payload and its headers on a 10 Mb/s link.
        assert!(up.pct > 50.0 && up.pct <= 60.5, "{mode:?}: {up:?}");
        assert!(down.pct > 95.0, "{mode:?}: {down:?}");
        match mode {
            Mode::Late => {
                let nothing = up.nothing_waiting_pct.expect("late");
                assert!(nothing > 95.0, "{up:?}");
            }
            _ => assert!(up.nothing_waiting_pct.is_none(), "{up:?}"),
        }
    }
    let r = run(&cbr_over_10_mbps(20.0, 5.0), Mode::Late).unwrap();
    let [Some(up), _] = r.links[0].unused_capacity.clone().expect("simulator") else {
        panic!("the uplink");
    };
    assert!(up.pct < 5.0, "{up:?}");
    let waiting = 100.0 - up.nothing_waiting_pct.unwrap();
    assert!(waiting > 50.0, "{up:?}");
}
