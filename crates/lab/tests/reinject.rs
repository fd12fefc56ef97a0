//! Privileged: fast reinjection with the real daemons. The fast path of reinject.toml dies
//! in the network (no interface goes down, no end is told): only the reinjection timer
//! can find it. Trimmed to 8 s with one cut at 4 s.

mod common;

use latebind_lab::run::{LabMode, LabOptions, LabOutcome, run_with};
use latebind_sim::{Mode, Report, Scenario};

fn scenario() -> Scenario {
    Scenario::load(&common::scenario("reinject.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=8.0", "links.0.outages=[[4.0, 6.0]]"]))
        .expect("scenario")
}

/// The stall bound: the surviving path's RTT (40 ms) + REJ (about 27 ms here, see the
/// simulator's test) + 10 ms.
const BOUND_MS: f64 = 40.0 + 27.0 + 10.0;

/// The targets on one lab run: what failed, if anything.
fn check(r: &Report, sim: &Report) -> Result<(), String> {
    for name in ["cbr", "tcp"] {
        let (f, fs) = (common::flow(r, name), common::flow(sim, name));
        eprintln!(
            "{name}: max gap lab {:.1} ms, sim {:.1} ms; lost lab {}, sim {}",
            f.max_gap_ms, fs.max_gap_ms, f.lost, fs.lost
        );
        if f.max_gap_ms > BOUND_MS {
            return Err(format!(
                "{name} stalled {:.1} ms (bound {BOUND_MS} ms)",
                f.max_gap_ms
            ));
        }
    }
    let cbr = common::flow(r, "cbr");
    if cbr.lost != 0 {
        return Err(format!("cbr lost {}: {cbr:?}", cbr.lost));
    }
    let e = r.engine.as_ref().ok_or("no engine counters")?;
    if e.reinjected_timer == 0 {
        return Err(format!("no reinjection by the timer: {e:?}"));
    }
    if r.totals.reinjected == 0 {
        return Err(format!("nothing reinjected: {:?}", r.totals));
    }
    Ok(())
}

/// The longest the machine held the emulator's real-time thread or a flow's sender
/// (UDP: how late a send was against its schedule), µs.
fn longest_stall_us(out: &LabOutcome) -> f64 {
    out.senders
        .iter()
        .flatten()
        .map(|s| s.schedule_late_us.max)
        .fold(out.emulator.lateness_us.max, f64::max)
}

fn run_once(s: &Scenario, sim: &Report) -> (Result<(), String>, f64) {
    let opts = LabOptions {
        work_dir: Some(common::test_dir("reinject-late")),
        ..LabOptions::default()
    };
    let out = run_with(s, LabMode::Late, &common::exe(), &opts).expect("lab run");
    let _ = std::fs::remove_dir_all(&out.run_dir);
    let r = &out.report;
    let stall = longest_stall_us(&out);
    eprintln!("sim:\n{}\nlab:\n{}", sim.table(), r.table());
    eprintln!(
        "engine {:?}\nemulator lateness us {:?}; longest stall of the emulator or a sender {stall:.0} us",
        r.engine, out.emulator.lateness_us
    );
    (check(r, sim), stall)
}

/// The targets in the lab: no UDP packet lost at the cut, and the stall at most
/// the surviving path's RTT + REJ + 10 ms; the simulator's figures beside it.
#[test]
fn remote_cut_loses_no_udp_packet_and_stalls_about_one_round_trip() {
    if !common::root_or_skip("remote_cut_loses_no_udp_packet_and_stalls_about_one_round_trip") {
        return;
    }
    let _g = common::serial();
    let s = scenario();
    let sim = latebind_sim::run(&s, Mode::Late).expect("sim run");
    let (first, stall) = run_once(&s, &sim);
    if let Err(e) = first {
        // A run during which the machine held the emulator or a sender for over 10 ms
        // (they run in SCHED_FIFO; in 30 runs here, late by 1-2 ms at most but once by
        // 11 ms, in a run that suspected the surviving link as well) may have held the
        // daemons too, and the flows' packets waited above the binding point meanwhile.
        // A CI run failed so, its stall not recorded: two UDP packets lost to three AQM
        // drops, the flows' p99 97-106 ms against 20-22 ms in other runs. Such a run
        // says nothing of reinjection: once more. A run that fails without a stall fails
        // the test.
        assert!(
            stall > 10_000.0,
            "{e} (no stall of the machine over 10 ms: {stall:.0} us)"
        );
        eprintln!("the first run failed while the machine stalled ({e}): once more");
        let (second, _) = run_once(&s, &sim);
        second.unwrap_or_else(|e| panic!("{e}"));
    }
}
