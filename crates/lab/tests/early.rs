//! Privileged: mode early in the lab against the simulator's mode early.

mod common;

use latebind_lab::run::{LabMode, LabOptions, run_with};
use latebind_sim::{Mode, Scenario};

fn lab(scenario: &Scenario, name: &str) -> latebind_lab::LabOutcome {
    let opts = LabOptions {
        work_dir: Some(common::test_dir(name)),
        ..LabOptions::default()
    };
    let out = run_with(scenario, LabMode::Early, &common::exe(), &opts).expect("lab run");
    eprintln!("lab:\n{}", out.report.table());
    eprintln!(
        "emulator lateness us {:?}; edges {:?}; notes {:?}",
        out.emulator.lateness_us, out.edges, out.notes
    );
    let _ = std::fs::remove_dir_all(&out.run_dir);
    out
}

fn sim(scenario: &Scenario) -> latebind_sim::Report {
    let r = latebind_sim::run(scenario, Mode::Early).expect("sim run");
    eprintln!("sim:\n{}", r.table());
    r
}

#[test]
fn urgent_latency_matches_simulator() {
    if !common::root_or_skip("urgent_latency_matches_simulator") {
        return;
    }
    let _g = common::serial();
    // The urgent packet 20 ms after the burst, not 2: the lab's burst is a real process
    // writing 1000 datagrams into the qdisc, and a 2-vCPU machine can preempt it for
    // several milliseconds (the emulator's own lateness reaches 12 ms at times); the
    // urgent packet then went in ahead of the burst's last few hundred (745 and 787
    // ms against the simulator's 1123, in two runs of eight). 20 ms is a margin of the
    // same order as the longest stall seen, and the simulator drains the same 18 more
    // slots.
    let scenario = Scenario::load(&common::scenario("urgent.toml"))
        .and_then(|s| s.with_overrides(["flows.1.start_s=0.52"]))
        .expect("scenario");
    let s = sim(&scenario);
    let l = lab(&scenario, "urgent").report;
    let flow = |r: &latebind_sim::Report| common::flow(r, "urgent").clone();
    let (fs, fl) = (flow(&s), flow(&l));
    assert_eq!(fl.delivered, 1, "{fl:?}");
    let (a, b) = (fs.latency_ms.p50, fl.latency_ms.p50);
    eprintln!("urgent latency: sim {a:.2} ms, lab {b:.2} ms");
    assert!(
        (a - b).abs() <= (0.2 * a).max(3.0),
        "urgent latency: lab {b:.2} ms vs simulator {a:.2} ms (more than 20 % or 3 ms apart)"
    );
    // The burst fits the 1050-packet FIFO in both.
    assert_eq!(l.flows[0].lost, s.flows[0].lost);
}

/// The FIFO-full case of the handoff: a UDP sender above the link's rate keeps the
/// 50-packet FIFO full, so the outage takes the whole FIFO in both.
#[test]
fn handoff_udp_outage_loss_matches_simulator() {
    if !common::root_or_skip("handoff_udp_outage_loss_matches_simulator") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("handoff.toml"))
        .and_then(|s| {
            s.with_overrides([
                "scenario.duration_s=8.0",
                "flows.0.kind=\"udp-cbr\"",
                "flows.0.rate_mbps=6.0",
                "flows.0.stop_s=8.0",
            ])
        })
        .expect("scenario");
    let s = sim(&scenario);
    let a = s.links[0].lost_at_outage_up;
    // The lab's loss at the cut, and what its qdisc held just before.
    let run = || {
        let out = lab(&scenario, "handoff-udp");
        let held = out
            .edges
            .iter()
            .find(|e| e.link == 0 && e.what == "down")
            .map_or(0, |e| u64::from(e.qdisc_backlog));
        let b = out.report.links[0].lost_at_outage_up;
        eprintln!("handoff (udp-cbr 6 Mb/s): lost at the outage, uplink: sim {a}, lab {b}");
        (b, held)
    };
    let (b, held) = run();
    if a.abs_diff(b) > 2 {
        // A run whose FIFO was not full at the cut (a CI run: 47 held of 50, the emulator
        // stalled 11 ms just before) had its sender stalled by the machine, and says
        // nothing of the qdisc: once more. A lab that loses otherwise fails at once.
        assert!(
            held + 2 < a,
            "lab {b} vs simulator {a}; the qdisc held {held}"
        );
        eprintln!("the qdisc held {held} at the cut, not full: once more");
        let (b, held) = run();
        assert!(
            a.abs_diff(b) <= 2,
            "lab {b} vs simulator {a}; the qdisc held {held}"
        );
    }
}

/// The scenario as written: one TCP Cubic flow. Linux's TCP Small Queues keep a
/// single flow's share of the qdisc to about two packets (or 1 ms of its rate), so
/// the 50-packet FIFO never fills and the cut loses a couple of packets, where the
/// simulator's TCP (no TSQ) fills the FIFO and loses 51. This test pins what the
/// lab measures and its consistency with the qdisc; it does not expect the
/// simulator's figure.
#[test]
fn handoff_tcp_outage_loses_what_the_qdisc_held() {
    if !common::root_or_skip("handoff_tcp_outage_loses_what_the_qdisc_held") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("handoff.toml")).expect("scenario");
    let s = sim(&scenario);
    let out = lab(&scenario, "handoff-tcp");
    let l = &out.report;
    let (a, b) = (s.links[0].lost_at_outage_up, l.links[0].lost_at_outage_up);
    eprintln!("handoff (tcp-bulk): lost at the outage, uplink: sim {a}, lab {b}");
    let down = out
        .edges
        .iter()
        .find(|e| e.what == "down")
        .expect("outage edge");
    assert_eq!(
        b,
        u64::from(down.qdisc_backlog).saturating_sub(down.dequeued_meanwhile),
        "the lab's loss is what the qdisc held when c0 went down"
    );
    assert!(
        b <= a,
        "Linux (TSQ) holds less in the FIFO than the simulator's TCP"
    );
    assert!(l.flows[0].delivered > 1000, "{:?}", l.flows[0]);
    assert!(l.flows[0].goodput_mbps > 3.0, "{:?}", l.flows[0]);
}
