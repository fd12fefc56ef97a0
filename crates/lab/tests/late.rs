//! Privileged: mode late in the lab (the real latebind daemons) against the simulator's
//! mode late, and back-to-back runs that leave nothing behind. Scenarios are trimmed
//! with overrides to keep the test time short.

mod common;

use latebind_lab::run::{LabMode, LabOptions, run_with};
use latebind_sim::{Mode, Scenario};

fn lab(scenario: &Scenario, mode: LabMode, name: &str) -> latebind_lab::LabOutcome {
    lab_with(scenario, mode, name, LabOptions::default())
}

fn lab_with(
    scenario: &Scenario,
    mode: LabMode,
    name: &str,
    opts: LabOptions,
) -> latebind_lab::LabOutcome {
    lab_inspect(scenario, mode, name, opts, |_| {})
}

/// [`lab_with`], and `inspect` reads the run's folder (daemon logs, last statuses)
/// before it is removed.
fn lab_inspect(
    scenario: &Scenario,
    mode: LabMode,
    name: &str,
    opts: LabOptions,
    inspect: impl FnOnce(&std::path::Path),
) -> latebind_lab::LabOutcome {
    let opts = LabOptions {
        work_dir: Some(common::test_dir(name)),
        ..opts
    };
    let out = run_with(scenario, mode, &common::exe(), &opts).expect("lab run");
    eprintln!("lab:\n{}", out.report.table());
    eprintln!(
        "engine {:?}\nemulator lateness us {:?}; edges {:?}; notes {:?}",
        out.report.engine, out.emulator.lateness_us, out.edges, out.notes
    );
    // Shown only when the test fails: what the daemons logged and what each end's
    // engine received per flow (the run's folder is removed next).
    for file in [
        "client.log",
        "server.log",
        "client-status.json",
        "server-status.json",
    ] {
        let text = std::fs::read_to_string(out.run_dir.join(file)).unwrap_or_default();
        let mut from = text.len().saturating_sub(4000);
        while !text.is_char_boundary(from) {
            from += 1;
        }
        eprintln!("{file}:\n{}", &text[from..]);
    }
    inspect(&out.run_dir);
    let _ = std::fs::remove_dir_all(&out.run_dir);
    out
}

fn sim(scenario: &Scenario) -> latebind_sim::Report {
    let r = latebind_sim::run(scenario, Mode::Late).expect("sim run");
    eprintln!("sim:\n{}", r.table());
    r
}

/// urgent.toml, 2 s (the burst has drained by 1.7 s).
fn urgent() -> Scenario {
    Scenario::load(&common::scenario("urgent.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=2.0"]))
        .expect("scenario")
}

/// The lab's run is taken again, once, when the host visibly held it up: the burst then
/// delivers far fewer packets than the simulator's (751 of 1000 in one CI run, where
/// every undisturbed run delivers 966-967, the simulator's count), and the urgent
/// packet's latency measures the host, not the engine. An engine that loses the burst
/// fails both runs.
fn urgent_latencies() -> (f64, f64, latebind_lab::LabOutcome) {
    let scenario = urgent();
    let s = sim(&scenario);
    let delivered = |r: &latebind_sim::Report| common::flow(r, "burst").delivered as f64;
    let mut out = lab(&scenario, LabMode::Late, "late-urgent");
    if delivered(&out.report) < 0.95 * delivered(&s) {
        eprintln!(
            "the burst delivered {} packets against the simulator's {} (emulator lateness \
             max {} us): the host held the run up; running it again",
            delivered(&out.report),
            delivered(&s),
            out.emulator.lateness_us.max
        );
        out = lab(&scenario, LabMode::Late, "late-urgent");
    }
    let flow = |r: &latebind_sim::Report| common::flow(r, "urgent").clone();
    let (fs, fl) = (flow(&s), flow(&out.report));
    assert_eq!(fl.delivered, 1, "{fl:?}");
    let (a, b) = (fs.latency_ms.p50, fl.latency_ms.p50);
    eprintln!("urgent latency (late): sim {a:.2} ms, lab {b:.2} ms");
    (a, b, out)
}

/// The brief's criterion: the urgent packet's latency within 20 % or 3 ms of the
/// simulator's. The daemon counts a datagram below the binding point until it has left
/// the client's qdisc, so at most `budget_packets` full packets wait ahead of the urgent
/// one, as in the simulator.
#[test]
fn urgent_latency_late_matches_simulator() {
    if !common::root_or_skip("urgent_latency_late_matches_simulator") {
        return;
    }
    let _g = common::serial();
    let (a, b, _) = urgent_latencies();
    assert!(
        (a - b).abs() <= (0.2 * a).max(3.0),
        "urgent latency: lab {b:.2} ms vs simulator {a:.2} ms (more than 20 % or 3 ms apart)"
    );
}

/// The urgent packet overtakes the whole burst (mode early: ~1.1 s) and waits behind no
/// more than what sits below the binding point, the daemon's budget (with a slot of
/// slack for the packet being serialized when the budget frees).
#[test]
fn urgent_packet_overtakes_the_burst_in_late_mode() {
    if !common::root_or_skip("urgent_packet_overtakes_the_burst_in_late_mode") {
        return;
    }
    let _g = common::serial();
    let (a, b, out) = urgent_latencies();
    let scenario = urgent();
    let budget = scenario.spec.late.budget_packets as f64;
    // One tunnelled 1400-byte packet on the 10 Mb/s link: 1500 bytes + Ethernet.
    let slot_ms = 1514.0 * 8.0 / 10e6 * 1e3;
    let bound = a + 3.0 + (budget + 1.0) * slot_ms;
    assert!(
        b >= 5.0 && b <= bound,
        "urgent latency: lab {b:.2} ms, expected 5 ms (the link's delay) to {bound:.2} ms \
         (simulator {a:.2} ms + 3 ms + {budget} + 1 packets)"
    );
    let engine = out.report.engine.expect("engine counters in mode late");
    assert_eq!(engine.malformed, 0, "{engine:?}");
    assert_eq!(out.report.mode, "late");
}

/// handoff.toml trimmed to 5 s with the cut at 2.5 s.
fn handoff() -> (Scenario, f64, f64) {
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
    (scenario, cut, dur)
}

/// Runs the trimmed handoff in both; returns (sim's loss, lab's loss, the lab run).
fn handoff_losses() -> (u64, u64, latebind_lab::LabOutcome) {
    let (scenario, cut, dur) = handoff();
    let s = sim(&scenario);
    let out = lab(&scenario, LabMode::Late, "late-handoff");
    let l = &out.report;
    let (a, b) = (s.links[0].lost_at_outage_up, l.links[0].lost_at_outage_up);
    let r = &out.receivers[0];
    let after = r.bytes_between(cut, dur);
    let last_s = r.bytes_between(dur - 1.0, dur);
    eprintln!(
        "handoff (late): lost at the outage, uplink: sim {a}, lab {b}; bulk after the cut: \
         {:.2} Mbit/s (last second {:.2} Mbit/s), max gap lab {:.1} ms, sim {:.1} ms",
        after as f64 * 8.0 / (dur - cut) / 1e6,
        last_s as f64 * 8.0 / 1e6,
        l.flows[0].max_gap_ms,
        s.flows[0].max_gap_ms
    );
    eprintln!("cuts: {:?}", out.report.cuts);
    eprintln!("edges: {:?}", out.edges);
    // The TCP flow goes on over the other link after the cut.
    assert!(after > 0, "no data after the cut: {:?}", r.bytes_per_10ms);
    assert!(
        last_s > 0,
        "the transfer stalled for good after the cut: {:?}",
        r.bytes_per_10ms
    );
    assert!(
        l.flows[0].max_gap_ms < (dur - cut) * 1e3,
        "{:?}",
        l.flows[0]
    );
    (a, b, out)
}

/// The brief's criterion: the packets lost at the outage (uplink) equal the
/// simulator's within 2.
#[test]
fn handoff_late_outage_loss_matches_simulator() {
    if !common::root_or_skip("handoff_late_outage_loss_matches_simulator") {
        return;
    }
    let _g = common::serial();
    let (a, b, _) = handoff_losses();
    assert!(
        a.abs_diff(b) <= 2,
        "lost at the outage: lab {b} vs simulator {a}"
    );
}

/// The cut loses only what sat below the binding point (the client's qdisc at the cut
/// plus the datagrams the daemon held for the link), at most the budget, and the TCP
/// flow goes on over the other link.
#[test]
fn handoff_late_loses_only_what_was_below_the_binding_point_and_tcp_goes_on() {
    if !common::root_or_skip("handoff_late_loses_only_what_was_below_the_binding_point") {
        return;
    }
    let _g = common::serial();
    let (a, b, out) = handoff_losses();
    let (scenario, _, _) = handoff();
    let budget = scenario.spec.late.budget_packets as u64;
    let down = out
        .edges
        .iter()
        .find(|e| e.what == "down")
        .expect("outage edge");
    let qdisc = u64::from(down.qdisc_backlog).saturating_sub(down.dequeued_meanwhile);
    assert!(
        b >= qdisc && b <= qdisc + budget,
        "lab {b}: expected the qdisc's {qdisc} plus at most the daemon's {budget} held"
    );
    assert!(
        qdisc <= budget,
        "the qdisc held {qdisc} at the cut: more than the budget ({budget}) below the binding point"
    );
    assert!(
        b <= budget,
        "lab {b} (simulator {a}): more than the budget ({budget}) lost below the binding point"
    );
}

/// Two lab runs back to back leave no namespace and no process behind.
#[test]
fn back_to_back_runs_leave_nothing_behind() {
    if !common::root_or_skip("back_to_back_runs_leave_nothing_behind") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("urgent.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=0.8", "flows.0.count=100"]))
        .expect("scenario");
    let prefix = format!("lblab-{}-", std::process::id());
    for (k, mode) in [LabMode::Late, LabMode::Late].into_iter().enumerate() {
        let opts = LabOptions::default();
        let out = run_with(&scenario, mode, &common::exe(), &opts).expect("lab run");
        assert_eq!(
            out.report.flows[1].delivered, 1,
            "run {k}: {:?}",
            out.report
        );
        assert!(
            !out.run_dir.exists(),
            "run {k}: {} kept",
            out.run_dir.display()
        );
        let left: Vec<String> = latebind_lab::netns::lab_namespaces()
            .into_iter()
            .filter(|n| n.starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "run {k}: namespaces left: {left:?}");
        let procs = common::helper_processes();
        assert!(
            procs.is_empty(),
            "run {k}: helper processes left: {procs:?}"
        );
    }
}

/// A flow outside the tunnel (`via_link`) shares the link's bottleneck but not the
/// daemons: bufferbloat-compete.toml's two downloads as 2 Mb/s UDP flows for 3 s. Both
/// arrive; the daemons carry the tunnel's datagrams only.
#[test]
fn a_flow_outside_the_tunnel_shares_the_link_but_not_the_daemons() {
    if !common::root_or_skip("a_flow_outside_the_tunnel_shares_the_link_but_not_the_daemons") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("bufferbloat-compete.toml"))
        .and_then(|s| {
            s.with_overrides([
                "scenario.duration_s=3.0",
                "flows.0.kind=\"udp-cbr\"",
                "flows.0.rate_mbps=2.0",
                "flows.1.kind=\"udp-cbr\"",
                "flows.1.rate_mbps=2.0",
                "flows.1.start_s=0.0",
            ])
        })
        .expect("scenario");
    let out = lab(&scenario, LabMode::Late, "late-via-link");
    let flow = |name: &str| common::flow(&out.report, name).clone();
    let (tunnel, outside) = (flow("tunnel"), flow("outside"));
    for f in [&tunnel, &outside] {
        assert!(f.sent > 400, "{f:?}");
        assert!(f.delivered as f64 >= 0.99 * f.sent as f64, "{f:?}");
    }
    let carried = out.report.links[0].data_sent;
    assert!(
        carried >= tunnel.delivered && carried < tunnel.sent + outside.sent / 2,
        "the daemons sent {carried} data datagrams for {} of the tunnel's and {} outside",
        tunnel.sent,
        outside.sent
    );
}

/// The tunnel's AQM marks an ECN-capable TCP flow instead of dropping its packets, end
/// to end with kernel TCP: bufferbloat.toml (10 Mb/s, 1000-packet FIFO in the network)
/// for 8 s with both TCP ends asking for ECN. The download's slow start overshoots the
/// link's window, so CoDel acts on it (5 drops in a run without ECN, 8 marks with it).
#[test]
fn the_aqm_marks_an_ecn_tcp_flow_instead_of_dropping_it() {
    if !common::root_or_skip("the_aqm_marks_an_ecn_tcp_flow_instead_of_dropping_it") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("bufferbloat.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=8.0"]))
        .expect("scenario");
    let opts = LabOptions {
        ecn: true,
        ..LabOptions::default()
    };
    let out = lab_with(&scenario, LabMode::Late, "late-ecn", opts);
    let e = out.report.engine.as_ref().expect("engine counters");
    assert!(e.aqm_marked > 0, "no packet marked: {e:?}");
    assert_eq!(e.aqm_dropped, 0, "ECN-capable packets dropped: {e:?}");
    let bulk = common::flow(&out.report, "bulk");
    assert!(bulk.goodput_mbps > 8.0, "{bulk:?}");
}

/// The receive-window clamp end to end with kernel TCP (window scaling, SACK, the TUN
/// offloads): bufferbloat.toml for 8 s with `tcp_window_clamp` at both ends. The server
/// lowers the windows of the acknowledgements it hands the sender, the sender keeps to
/// them, and CoDel, which drops during the download's slow start without the clamp (5
/// drops in 8 s), has nothing to drop. A wrong checksum would have the kernel discard
/// the acknowledgements and stall the download.
#[test]
fn the_window_clamp_holds_a_kernel_tcp_sender_without_a_drop() {
    if !common::root_or_skip("the_window_clamp_holds_a_kernel_tcp_sender_without_a_drop") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("bufferbloat.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=8.0", "late.tcp_window_clamp=true"]))
        .expect("scenario");
    let out = lab(&scenario, LabMode::Late, "late-clamp");
    let e = out.report.engine.as_ref().expect("engine counters");
    assert!(e.window_clamped > 1000, "{e:?}");
    assert_eq!(e.aqm_dropped, 0, "{e:?}");
    let bulk = common::flow(&out.report, "bulk");
    assert!(bulk.goodput_mbps > 8.0, "{bulk:?}");
    assert_eq!(bulk.lost, 0, "{bulk:?}");
}

/// A lossy link does not drag an aggregate flow down, end to end with kernel TCP:
/// aggregate.toml (10 + 10 Mb/s, RTT 20 and 60 ms) for 10 s with 5 % random loss on the
/// slower link. The tunnel sends the flow's lost packets again and the receiver waits for
/// them, so the download gets more than either link could carry alone (16.7-17.1 Mb/s in
/// 20 s runs; 8.6 before the tunnel re-sent anything, under the better link alone). The
/// client tells the slower link's losses over the faster one (copies of the slower
/// link's ACKs, `docs/protocol.md` 4.3).
#[test]
fn an_aggregate_download_gets_more_than_one_link_through_a_lossy_one() {
    if !common::root_or_skip("an_aggregate_download_gets_more_than_one_link_through_a_lossy_one") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("aggregate.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=10.0", "links.1.loss=0.05"]))
        .expect("scenario");
    let out = lab(&scenario, LabMode::Late, "late-lossy");
    let bulk = common::flow(&out.report, "bulk");
    assert!(bulk.goodput_mbps > 12.0, "{bulk:?}");
    let e = out.report.engine.as_ref().expect("engine counters");
    assert!(e.reinjected_lost > 0, "{e:?}");
    assert!(e.acks_shortcut > 0, "{e:?}");
    // Packets re-sent on the other link keep their compact form: each comes out whole.
    assert!(e.compact_sent[0] + e.compact_sent[1] > 1000, "{e:?}");
    assert_eq!(e.compact_undecodable, 0, "{e:?}");
}

/// A real QUIC download (quinn, UDP from the server's port 443) under the default
/// policy is spread over both links as a TCP one is: quic-download.toml (8 Mb/s at 2 ms
/// beside 20 Mb/s at 20 ms) for 10 s. quinn greases QUIC's fixed bit (RFC 9287), from
/// the server's first packet: the tunnel takes the flow for QUIC by that packet's long
/// header and version too, and while it binds it as min-rtt it still re-sends its
/// losses and the receiver waits for them. Before, one run in two was a datagram flow:
/// the receiver gave 41-60 gaps up that then came, quinn took them for losses, and the
/// download got 12-16 Mb/s in 20 s runs (25.3 since; `docs/RESULTS.md` 27).
#[test]
fn a_quic_download_is_spread_over_both_links() {
    if !common::root_or_skip("a_quic_download_is_spread_over_both_links") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("quic-download.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=10.0"]))
        .expect("scenario");
    let mut gaps = None;
    let out = lab_inspect(
        &scenario,
        LabMode::Late,
        "late-quic",
        LabOptions::default(),
        |dir| {
            let text = std::fs::read_to_string(dir.join("client-status.json")).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            gaps = v["sessions"][0]["flows_received"]
                .as_array()
                .and_then(|f| {
                    f.iter()
                        .find(|f| f["flow"].as_str().is_some_and(|n| n.contains(":443 ")))
                })
                .and_then(|f| f["gaps_skipped"].as_u64());
        },
    );
    let web = common::flow(&out.report, "web");
    assert_eq!(web.kind, "quic-bulk");
    // More than the far link alone could carry, near the links' 28 Mb/s.
    assert!(web.goodput_mbps > 22.0, "{web:?}");
    assert_eq!(gaps, Some(0), "gaps given up in the QUIC flow");
}

/// Header compression end to end with kernel TCP (timestamps, SACK, the TUN offloads):
/// bufferbloat.toml for 8 s. After its first round trip the download goes as
/// DATA_COMPACT, each datagram over 30 bytes shorter than DATA's, and every packet
/// expands (a wrong byte would fail the inner TCP's checksum and stall the download).
/// The report also carries the emulator's count of each direction's unused capacity.
#[test]
fn a_download_goes_compact_and_every_packet_comes_out_whole() {
    if !common::root_or_skip("a_download_goes_compact_and_every_packet_comes_out_whole") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("bufferbloat.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=8.0"]))
        .expect("scenario");
    let out = lab(&scenario, LabMode::Late, "late-compact");
    let e = out.report.engine.as_ref().expect("engine counters");
    let bulk = common::flow(&out.report, "bulk");
    assert!(bulk.goodput_mbps > 8.0, "{bulk:?}");
    // The server's data: nearly every packet compact, a template or two.
    let packets = bulk.goodput_mbps * 1e6 / 8.0 * 7.0 / 1400.0;
    assert!(e.compact_sent[1] as f64 > 0.9 * packets, "{e:?} {packets}");
    assert!(e.templates_sent[1] <= 4, "{e:?}");
    assert!(
        e.compact_saved_bytes[1] as f64 > 30.0 * e.compact_sent[1] as f64,
        "{e:?}"
    );
    // The client's acknowledgements too.
    assert!(e.compact_sent[0] > 0, "{e:?}");
    assert_eq!(e.compact_undecodable, 0, "{e:?}");
    assert_eq!(e.malformed, 0, "{e:?}");
    // The emulator's count of the capacity left unused over the run: the download
    // fills the downlink but for its first round trips; the uplink carries only
    // acknowledgements.
    let link = &out.report.links[0];
    let [Some(up), Some(down)] = link.unused_capacity.clone().expect("the lab's share") else {
        panic!("both directions: {:?}", link.unused_capacity);
    };
    assert!(down.pct < 20.0, "{down:?}");
    assert!(up.pct > 80.0, "{up:?}");
    assert!(
        down.nothing_waiting_pct.is_none(),
        "the lab gives no causes: {down:?}"
    );
}

/// The client sends its handshake initiation on every link, all copies naming its first
/// link, and the server answers the first copy in. Here the first link is the far one
/// (aggregate.toml's links with their delays swapped: 10 Mb/s at 30 ms first, 10 Mb/s at
/// 10 ms second), so that copy comes over the near link. The server took its source as
/// the first link's path: the first link's datagrams went over the near link until the
/// client's own came, its minimum RTT and one-way delay latched 20 ms under what its path
/// can give, and rate control read a standing queue of 20 ms and held the link at about
/// 1 Mb/s for 8 s (a 20 s download got 13.6-14.0 Mb/s of a 20 + 5 Mb/s pair, 5.4 Mb/s in
/// each of its first 8 s). The download, 6 s, gets both links from its first second.
#[test]
fn a_session_whose_first_link_is_the_far_one_uses_it_from_the_start() {
    if !common::root_or_skip("a_session_whose_first_link_is_the_far_one_uses_it_from_the_start") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("aggregate.toml"))
        .and_then(|s| {
            s.with_overrides([
                "scenario.duration_s=6.0",
                "links.0.delay_ms=30.0",
                "links.1.delay_ms=10.0",
                "flows.0.direction=\"down\"",
            ])
        })
        .expect("scenario");
    let mut status = String::new();
    let out = lab_inspect(
        &scenario,
        LabMode::Late,
        "late-far-first",
        LabOptions::default(),
        |dir| {
            status = std::fs::read_to_string(dir.join("server-status.json"))
                .expect("the server's last status");
        },
    );
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let links = status["sessions"][0]["links"].as_array().expect("links");
    let link0 = links.iter().find(|l| l["id"] == 0).expect("link 0");
    let min_rtt = link0["min_rtt_ms"].as_f64().expect("min_rtt_ms");
    assert!(
        min_rtt >= 59.0,
        "the far link's minimum RTT is {min_rtt} ms, under its path's 60 ms"
    );
    let bulk = common::flow(&out.report, "bulk");
    assert!(bulk.goodput_mbps > 14.0, "{bulk:?}");
}

/// Roaming (`scenarios/roam.toml`): the WiFi link goes down and comes back with another
/// client address. The server learns the link's new address from its first datagram
/// there (no configuration, no handshake), so the download uses the link again at once;
/// had it kept sending to the old address, the link's downlink would stay dead and the
/// download would get the LTE link's 10 Mb/s at most.
#[test]
fn a_link_back_with_another_address_carries_the_download_again() {
    if !common::root_or_skip("a_link_back_with_another_address_carries_the_download_again") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("roam.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=9.0", "links.0.outages=[[3.0, 4.0]]"]))
        .expect("scenario");
    let mut status = String::new();
    let mut log = String::new();
    let out = lab_inspect(
        &scenario,
        LabMode::Late,
        "late-roam",
        LabOptions::default(),
        |dir| {
            status = std::fs::read_to_string(dir.join("server-status.json"))
                .expect("the server's last status");
            log = std::fs::read_to_string(dir.join("server.log")).expect("the server's log");
            let recv = std::fs::read_to_string(dir.join("flow0-recv.json")).expect("receiver");
            let recv: serde_json::Value = serde_json::from_str(&recv).expect("receiver JSON");
            // From 1.5 s after the link came back: 5.5 to 8.5 s (10 ms bins from 0).
            let bins: Vec<f64> = recv["bytes_per_10ms"]
                .as_array()
                .expect("bytes_per_10ms")
                .iter()
                .map(|b| b.as_f64().unwrap_or(0.0))
                .collect();
            let after: f64 = bins.iter().skip(550).take(300).sum();
            let mbps = after * 8.0 / 3.0 / 1e6;
            eprintln!("download 5.5-8.5 s: {mbps:.2} Mb/s");
            assert!(
                mbps > 14.0,
                "the download got {mbps:.2} Mb/s after the WiFi came back: it is not using it"
            );
        },
    );
    assert!(
        log.contains("link path changed link=0") && log.contains("new=198.18.1.11:"),
        "the server never moved link 0 to its new address:\n{log}"
    );
    let status: serde_json::Value = serde_json::from_str(&status).expect("status JSON");
    let links = status["sessions"][0]["links"].as_array().expect("links");
    let link0 = links.iter().find(|l| l["id"] == 0).expect("link 0");
    let at = link0["peer_address"].as_str().unwrap_or_default();
    assert!(at.starts_with("198.18.1.11:"), "link 0 is at {at:?}");
    let call = common::flow(&out.report, "call");
    assert_eq!(call.lost, 0, "{call:?}");
}

/// A DSL-like link (16 Mbit/s down, 1 up, 0.5 % loss) beside a 5 Mbit/s one
/// (asymmetric.toml, 10 s): the lab shapes each direction at its own rate, and the
/// download's acknowledgements leave the narrow uplink room. Before ACKs stopped reporting
/// ranges the peer was known to have (`docs/protocol.md` 4.3), every ACK of the lossy link
/// carried 32 ranges: the uplink was full (0.94 Mbit/s), the download got 12.7-13.6 Mbit/s
/// and the voice flow beside it a p99 of 143-149 ms; now 15.9-16.7 Mbit/s and 37-51 ms.
#[test]
fn a_download_over_an_asymmetric_lossy_link_leaves_its_uplink_room() {
    if !common::root_or_skip("a_download_over_an_asymmetric_lossy_link_leaves_its_uplink_room") {
        return;
    }
    let _g = common::serial();
    let scenario = Scenario::load(&common::scenario("asymmetric.toml"))
        .and_then(|s| s.with_overrides(["scenario.duration_s=10.0"]))
        .expect("scenario");
    let out = lab(&scenario, LabMode::Late, "late-asymmetric");
    let [up, _] = out.report.links[0].bytes_delivered;
    // The uplink is shaped at 1 Mbit/s (a burst of htb's bucket on top at most).
    assert!((up as f64) * 8.0 / 10.0 < 1.05e6, "uplink {up} B in 10 s");
    let d = common::flow(&out.report, "download");
    assert!(d.goodput_mbps > 0.7 * 21.0, "{d:?}");
    let v = common::flow(&out.report, "voice");
    assert!(v.latency_ms.p99 < 100.0, "{v:?}");
    // The client's kernel acknowledges faster than the uplink carries: later pure
    // acknowledgements replace those still waiting (`ack_filter`; 762-1080 in 30 s).
    let e = out.report.engine.as_ref().expect("engine counters");
    assert!(e.ack_filtered > 0, "{e:?}");
}
