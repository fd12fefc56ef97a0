//! The fast-reinjection paper's experiments in the simulator, against issue 4's targets:
//! a path that dies in the network costs about one round trip, not an RTO; jitter and
//! loss do not cause spurious reinjections; thin traffic is not reinjected without loss.

mod common;

use common::{flow, scenario, with};

use latebind_sim::{Mode, Report, run};

/// reinject.toml trimmed to two cuts (20 s), with the given overrides.
fn on_off(sets: &[&str]) -> Report {
    let s = with(
        &scenario("reinject.toml"),
        &[
            "scenario.duration_s=20.0",
            "links.0.outages=[[5.0, 10.0], [15.0, 18.0]]",
        ],
    );
    run(&with(&s, sets), Mode::Late).unwrap()
}

/// The stall bound of the issue: the surviving path's RTT (40 ms) + REJ + 10 ms. REJ on
/// the fast path (constant 20 ms RTT, so RTTVAR ~0) is at most SRTT + max_ack_delay +
/// the 2 ms between the oldest unacknowledged packet and its delayed ack: 27 ms.
const STALL_BOUND_MS: f64 = 40.0 + 27.0 + 10.0;

#[test]
fn remote_cut_loses_no_udp_packet_and_stalls_about_one_round_trip() {
    for timer in ["srtt+rttvar-delta", "srtt+rttvar", "minrtt+rttvar"] {
        let r = on_off(&[&format!("late.reinjection=\"{timer}\"")]);
        let cbr = flow(&r, "cbr");
        let tcp = flow(&r, "tcp");
        assert_eq!(cbr.lost, 0, "{timer}: {cbr:?}");
        assert_eq!(cbr.delivered, cbr.sent, "{timer}: {cbr:?}");
        for f in [cbr, tcp] {
            assert!(
                f.max_gap_ms <= STALL_BOUND_MS,
                "{timer}: {} stalled {} ms (bound {STALL_BOUND_MS} ms)",
                f.name,
                f.max_gap_ms
            );
        }
        let e = r.engine.as_ref().expect("engine counters");
        assert!(e.reinjected_timer > 0, "{timer}: {e:?}");
        assert_eq!(r.totals.spurious_reinjections, 0, "{timer}");
    }
}

/// The same cut without reinjection: the test above would fail (UDP lost, TCP waits for
/// its retransmission timeout), so it measures the feature, not the scenario.
#[test]
fn remote_cut_without_reinjection_loses_packets_and_stalls_for_an_rto() {
    let r = on_off(&["late.reinjection=\"off\""]);
    assert!(flow(&r, "cbr").lost > 0);
    assert!(flow(&r, "tcp").max_gap_ms > 4.0 * STALL_BOUND_MS);
    assert_eq!(r.totals.reinjected, 0);
}

/// A local cut (the client's interface goes down) reinjects at once, with no timer.
#[test]
fn local_cut_reinjects_at_once() {
    let r = on_off(&["links.0.outage_local=true"]);
    let cbr = flow(&r, "cbr");
    assert_eq!(cbr.lost, 0, "{cbr:?}");
    let e = r.engine.as_ref().expect("engine counters");
    assert!(e.reinjected_link_down > 0, "{e:?}");
    // The client's stall: the surviving path's one-way delay and a little.
    assert!(cbr.max_gap_ms <= 40.0, "{cbr:?}");
}

/// Jitter (5 and 8 ms each way) and 0.01 % loss with no cut: the reinjection rate stays
/// under the 0.15 % over several seeds, and a suspicion ends with the first
/// probe (within one round trip of the slower path, 40 ms plus jitter).
#[test]
fn jitter_and_loss_cause_few_spurious_reinjections() {
    let s = with(
        &scenario("reinject-jitter.toml"),
        &["scenario.duration_s=10.0"],
    );
    let mut rates = Vec::new();
    for seed in 1..=5 {
        let r = run(&with(&s, &[&format!("scenario.seed={seed}")]), Mode::Late).unwrap();
        let app: u64 = r.flows.iter().map(|f| f.sent).sum();
        rates.push(r.totals.reinjected as f64 / app as f64);
        let e = r.engine.as_ref().expect("engine counters");
        assert!(e.longest_suspect_ms <= 60.0, "seed {seed}: {e:?}");
    }
    rates.sort_by(f64::total_cmp);
    assert!(rates[2] <= 0.0015, "median reinjection rate {rates:?}");
}

/// Thin traffic, 2 packets per second: reinjections only at the cuts (one packet in
/// flight each time), none spurious, and the packet caught by a cut still arrives.
#[test]
fn thin_traffic_is_reinjected_only_after_a_real_loss() {
    let r = run(&scenario("reinject-thin.toml"), Mode::Late).unwrap();
    let thin = flow(&r, "thin");
    assert_eq!(thin.lost, 0, "{thin:?}");
    assert_eq!(r.totals.spurious_reinjections, 0);
    let e = r.engine.as_ref().expect("engine counters");
    // Three cuts; each may catch the one packet in flight, and nothing else.
    assert!(r.totals.reinjected <= 3, "{:?} {e:?}", r.totals);
    let no_cut = run(
        &with(&scenario("reinject-thin.toml"), &["links.0.outages=[]"]),
        Mode::Late,
    )
    .unwrap();
    assert_eq!(no_cut.totals.reinjected, 0, "{:?}", no_cut.engine);
    assert_eq!(no_cut.engine.as_ref().map(|e| e.suspected), Some(0));
}

/// No link is special: when the preferred path is the second link (not the first one,
/// which carries nothing special in the simulator either), losing it is recovered the
/// same way, within the same bound.
#[test]
fn losing_the_second_link_recovers_the_same_way() {
    let r = on_off(&[
        "links.0.outages=[]",
        "links.1.delay_ms=5.0",
        "links.1.outages=[[5.0, 10.0], [15.0, 18.0]]",
        "links.1.outage_local=false",
    ]);
    let cbr = flow(&r, "cbr");
    assert_eq!(cbr.lost, 0, "{cbr:?}");
    // The surviving path is now the first one (RTT 20 ms, under the 40 ms of the bound).
    for f in [cbr, flow(&r, "tcp")] {
        assert!(f.max_gap_ms <= STALL_BOUND_MS, "{f:?}");
    }
    assert!(r.links[1].reinjected_from > 0, "{:?}", r.links);
    assert_eq!(r.links[0].reinjected_from, 0, "{:?}", r.links);
}
