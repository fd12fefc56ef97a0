//! Privileged: mode mptcp (kernel multipath TCP, one subflow per link) in the lab.

mod common;

use latebind_lab::run::{LabMode, LabOptions, run_with};
use latebind_sim::Scenario;

/// handoff.toml trimmed to 5 s with the cut at 2.5 s, over MPTCP: the TCP flow runs
/// over both subflows and gets data through; the stall at the cut is printed.
#[test]
fn handoff_mptcp_reports_a_tcp_flow_with_goodput() {
    if !common::root_or_skip("handoff_mptcp_reports_a_tcp_flow_with_goodput") {
        return;
    }
    let _g = common::serial();
    let (cut, dur) = (2.5, 5.0);
    let scenario = Scenario::load(&common::scenario("handoff.toml"))
        .and_then(|s| {
            s.with_overrides([
                format!("scenario.duration_s={dur}").as_str(),
                format!("links.0.outages=[[{cut}, 1000.0]]").as_str(),
                format!("flows.0.stop_s={dur}").as_str(),
            ])
        })
        .expect("scenario");
    let opts = LabOptions {
        work_dir: Some(common::test_dir("mptcp-handoff")),
        ..LabOptions::default()
    };
    let out = run_with(&scenario, LabMode::Mptcp, &common::exe(), &opts).expect("lab run");
    eprintln!("lab:\n{}", out.report.table());
    eprintln!("edges {:?}; notes {:?}", out.edges, out.notes);
    let _ = std::fs::remove_dir_all(&out.run_dir);
    let f = &out.report.flows[0];
    let r = &out.receivers[0];
    let tcp = out.senders[0]
        .as_ref()
        .and_then(|s| s.tcp.clone())
        .expect("the sender's TCP counters");
    eprintln!(
        "handoff (mptcp): goodput {:.2} Mbit/s, max gap {:.1} ms, subflows at the end {}, \
         after the cut {:.2} Mbit/s; {:?}",
        f.goodput_mbps,
        f.max_gap_ms,
        tcp.subflows,
        r.bytes_between(cut, dur) as f64 * 8.0 / (dur - cut) / 1e6,
        out.report.cuts
    );
    assert_eq!(out.report.mode, "mptcp");
    assert_eq!(f.kind, "tcp-bulk");
    assert!(f.goodput_mbps > 0.0, "{f:?}");
    assert!(f.delivered > 0, "{f:?}");
    assert!(tcp.subflows >= 1, "{tcp:?}");
}
