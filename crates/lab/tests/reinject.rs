//! Privileged: fast reinjection with the real daemons. The fast path of reinject.toml dies
//! in the network (no interface goes down, no end is told): only the reinjection timer
//! can find it. Trimmed to 8 s with one cut at 4 s.

mod common;

use latebind_lab::run::{LabMode, LabOptions, run_with};
use latebind_sim::{Mode, Scenario};

fn scenario() -> Scenario {
    Scenario::load(&common::scenario("reinject.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=8.0", "links.0.outages=[[4.0, 6.0]]"]))
        .expect("scenario")
}

/// The targets in the lab: no UDP packet lost at the cut, and the stall at most
/// the surviving path's RTT (40 ms) + REJ (about 27 ms here, see the simulator's test) +
/// 10 ms; the simulator's figures beside it.
#[test]
fn remote_cut_loses_no_udp_packet_and_stalls_about_one_round_trip() {
    if !common::root_or_skip("remote_cut_loses_no_udp_packet_and_stalls_about_one_round_trip") {
        return;
    }
    let _g = common::serial();
    let s = scenario();
    let sim = latebind_sim::run(&s, Mode::Late).expect("sim run");
    let opts = LabOptions {
        work_dir: Some(common::test_dir("reinject-late")),
        ..LabOptions::default()
    };
    let out = run_with(&s, LabMode::Late, &common::exe(), &opts).expect("lab run");
    let _ = std::fs::remove_dir_all(&out.run_dir);
    let r = &out.report;
    eprintln!("sim:\n{}\nlab:\n{}", sim.table(), r.table());
    eprintln!("engine {:?}", r.engine);
    let bound = 40.0 + 27.0 + 10.0;
    for name in ["cbr", "tcp"] {
        let (f, fs) = (common::flow(r, name), common::flow(&sim, name));
        eprintln!(
            "{name}: max gap lab {:.1} ms, sim {:.1} ms; lost lab {}, sim {}",
            f.max_gap_ms, fs.max_gap_ms, f.lost, fs.lost
        );
        assert!(
            f.max_gap_ms <= bound,
            "{name} stalled {:.1} ms (bound {bound} ms)",
            f.max_gap_ms
        );
    }
    let cbr = common::flow(r, "cbr");
    assert_eq!(cbr.lost, 0, "{cbr:?}");
    let e = r.engine.as_ref().expect("engine counters");
    assert!(e.reinjected_timer > 0, "{e:?}");
    assert!(r.totals.reinjected > 0, "{:?}", r.totals);
}
