//! Issue 7 in the simulator: per-link rate control keeps the queue at a bottleneck that
//! neither end can see near empty, so a probe beside a bulk download sees near-idle
//! latency while the download keeps the link full.

mod common;

use common::{flow, link, scenario, trace_capacity, with};

use latebind_sim::{Mode, Report, Scenario, run};

/// One-way delay of the path (20 ms) plus a 100-byte probe's serialization at 10 Mb/s
/// and its framing: the probe's latency on the idle path.
const IDLE_MS: f64 = 20.2;

/// `s` in late mode with the trace `t` (`../shared/traces/t.up` and `.down`) as its
/// link 0, `delay` ms one way, and `sets` on top.
fn run_on_trace(s: &Scenario, t: &str, delay: &str, sets: &[&str]) -> Report {
    let down = format!("links.0.trace_down=\"../../shared/traces/{t}.down\"");
    let up = format!("links.0.trace_up=\"../../shared/traces/{t}.up\"");
    let d = format!("links.0.delay_ms={delay}");
    let mut all = vec![down.as_str(), up.as_str(), d.as_str()];
    all.extend_from_slice(sets);
    run(&with(s, &all), Mode::Late).unwrap()
}

/// Means over `delays` of `s` on the trace `t` (as [`run_on_trace`], with `sets`): the
/// bulk flow's goodput as a share of `capacity` (bytes per second), and the probe's p95.
fn trace_means(s: &Scenario, t: &str, capacity: f64, delays: &[&str], sets: &[&str]) -> (f64, f64) {
    let (mut share, mut p95) = (0.0, 0.0);
    for &delay in delays {
        let r = run_on_trace(s, t, delay, sets);
        let (bulk, probe) = (flow(&r, "bulk"), flow(&r, "probe"));
        share += bulk.goodput_mbps * 1e6 / 8.0 / capacity / delays.len() as f64;
        p95 += probe.latency_ms.p95 / delays.len() as f64;
    }
    (share, p95)
}

/// The flows of `bufferbloat-trace.toml` turned into uploads.
const UP: [&str; 2] = ["flows.0.direction=\"up\"", "flows.1.direction=\"up\""];

#[test]
fn probe_stays_near_idle_beside_a_saturating_download() {
    let s = scenario("bufferbloat.toml");
    let r = run(&s, Mode::Late).unwrap();
    let probe = flow(&r, "probe");
    let bulk = flow(&r, "bulk");
    assert_eq!(probe.lost, 0, "{probe:?}");
    assert!(probe.latency_ms.p99 <= IDLE_MS + 10.0, "{probe:?}");
    // The issue asks 90 %: measured 89.2 % with the tunnel's datagrams counted whole on
    // the link (outer headers and tag, `WIRE_EXTRA`), whose framing leaves the download
    // 91.6 % at most (docs/RESULTS.md 10.1).
    assert!(bulk.goodput_mbps >= 0.88 * 10.0, "{bulk:?}");
    // Without rate control the download fills the network's FIFO, as the plain path
    // does: the same test measures the feature, not the scenario.
    let off = run(&with(&s, &["late.rate_control=false"]), Mode::Late).unwrap();
    assert!(flow(&off, "probe").latency_ms.p99 > 500.0);
    let plain = run(&s, Mode::Early).unwrap();
    assert!(flow(&plain, "probe").latency_ms.p99 > 500.0);
    // The queue in the network's FIFO, as the packets that crossed it met it (the report's
    // `network_delay_ms`, server -> client): a few packets under rate control, the whole
    // FIFO on the plain path. The uplink carries the acknowledgements, unqueued.
    let down = |r: &Report| link(r, "path").network_delay_ms.clone().expect("simulator");
    let [up, late] = down(&r);
    assert!(late.p99 <= IDLE_MS + 10.0 && late.p50 >= 20.0, "{late:?}");
    assert!(up.max <= 20.5, "{up:?}");
    let [_, early] = down(&plain);
    assert!(early.p50 > 500.0, "{early:?}");
}

/// The same with the bottleneck on the client's side of the uplink hidden in the network
/// too (an upload through a modem's buffer), and another rate and delay: the controller
/// follows what it measures, not the scenario's numbers.
///
/// Over three delays: one TCP flow's goodput moves by a few per cent from one delay to
/// the next (when CoDel's first drops fall in the flow's startup), and a test of one delay
/// would measure that.
#[test]
fn upload_through_a_hidden_bottleneck_on_another_path() {
    let mut goodput = 0.0;
    for delay in [25.0, 35.0, 45.0] {
        let s = with(
            &scenario("bufferbloat.toml"),
            &[
                "flows.0.direction=\"up\"",
                "flows.1.direction=\"up\"",
                "links.0.rate_mbps=25.0",
                &format!("links.0.delay_ms={delay}"),
            ],
        );
        let r = run(&s, Mode::Late).unwrap();
        let probe = flow(&r, "probe");
        // Measured: 1.6-2.0 ms over idle at p95.
        assert!(
            probe.latency_ms.p95 <= delay + 0.1 + 10.0,
            "{delay} ms: {probe:?}"
        );
        if delay == 35.0 {
            // 2.5 ms over idle at p99 (16 at 45 ms, where the first drops leave a
            // longer queue).
            assert!(probe.latency_ms.p99 <= delay + 0.1 + 10.0, "{probe:?}");
            // The plain path: the modem's FIFO fills.
            let plain = run(&s, Mode::Early).unwrap();
            assert!(flow(&plain, "probe").latency_ms.p95 > 200.0);
        }
        goodput += flow(&r, "bulk").goodput_mbps / 3.0;
    }
    // Measured: 85 % of the link over the three (21.75, 21.08, 20.99 Mb/s), with the
    // datagrams counted whole (docs/RESULTS.md 13). With `ack_ride_wait` at 1 ms: 82 %
    // (21.68, 18.85, 21.14).
    assert!(goodput >= 0.80 * 25.0, "{goodput} Mb/s");
}

/// The report carries each link's rate-control counters (issue 7's third item): the
/// minimum RTT, the queue at the bottleneck, the standing queue below the binding point,
/// in the JSON and in the text table.
#[test]
fn the_report_shows_each_links_rate_control_counters() {
    let r = run(&scenario("bufferbloat.toml"), Mode::Late).unwrap();
    let [up, down] = link(&r, "path").rate_control.clone().expect("rate control");
    // The path's 20 ms each way, and the server's download keeps a queue of a few
    // packets there (1.8 ms mean measured), the client's acknowledgements none.
    for c in [&up, &down] {
        assert!((40.0..41.0).contains(&c.min_rtt_ms), "{c:?}");
    }
    assert!(
        down.mean_queue_ms > 0.5 && down.mean_queue_ms < 10.0,
        "{down:?}"
    );
    assert!(up.mean_queue_ms < 0.5, "{up:?}");
    // The downlink's bottleneck is in the network: nothing waits below the server's
    // binding point (its datagrams leave its host at once).
    assert!(down.mean_below_binding < 0.5, "{down:?}");
    let table = r.table();
    let row = table
        .lines()
        .find(|l| l.starts_with("path") && l.contains("server"))
        .expect("a rate-control row for the server's side");
    assert!(row.contains("40.1"), "{row}");
    // A link without rate control has no such row.
    let off = run(
        &with(&scenario("bufferbloat.toml"), &["late.rate_control=false"]),
        Mode::Late,
    )
    .unwrap();
    assert!(!off.table().contains("rate control"), "{}", off.table());
}

/// The setup at other rates (`scripts/delay-sweep.py rates`, docs/RESULTS.md
/// 10.1): the controller's queue follows the link's packet time, not the 10 Mb/s of the
/// scenario. On a slow link one full-size packet alone takes longer than the issue's
/// 10 ms, so the bound there is in packets: the probe waits behind the few that the
/// target keeps queued and the one being sent.
#[test]
fn the_queue_follows_the_link_rate_from_slow_to_fast() {
    let s = scenario("bufferbloat.toml");
    for rate in [2.0_f64, 50.0] {
        let rate_set = format!("links.0.rate_mbps={rate}");
        let at = |stop: bool| {
            let mut sets = vec![rate_set.as_str()];
            if stop {
                sets.push("flows.0.stop_s=0.0");
            }
            run(&with(&s, &sets), Mode::Late).unwrap()
        };
        let (r, idle) = (at(false), at(true));
        let (probe, bulk) = (flow(&r, "probe"), flow(&r, "bulk"));
        let over = probe.latency_ms.p99 - flow(&idle, "probe").latency_ms.p99;
        let packet_ms = 1500.0 * 8.0 / (rate * 1e3);
        // Measured: +28.8 ms (4.8 packets) at 2 Mb/s, +4.1 ms at 50 Mb/s.
        assert!(
            over <= (6.0 * packet_ms).max(10.0),
            "{rate} Mb/s: {probe:?}"
        );
        assert_eq!(probe.lost, 0, "{rate} Mb/s: {probe:?}");
        // Measured: 89.5 and 90.9 %.
        assert!(bulk.goodput_mbps >= 0.86 * rate, "{rate} Mb/s: {bulk:?}");
    }
}

/// A link whose capacity is known beforehand (`[late] seed_capacity`, a daemon's
/// `capacity_mbps` from `latebind probe`) starts there: on 250 ms paths a 10 Mb/s UDP
/// stream loses packets to CoDel while an unseeded window doubles up from 32 packets,
/// and none when it starts at the capacity.
#[test]
fn a_known_capacity_saves_the_startup_on_a_long_path() {
    let s = scenario("reinject-wan.toml");
    let plain = run(&s, Mode::Late).unwrap();
    assert!(flow(&plain, "cbr").lost > 0, "{:?}", flow(&plain, "cbr"));
    let seeded = run(&with(&s, &["late.seed_capacity=true"]), Mode::Late).unwrap();
    assert_eq!(flow(&seeded, "cbr").lost, 0, "{:?}", flow(&seeded, "cbr"));
    assert_eq!(flow(&seeded, "tcp").lost, 0, "{:?}", flow(&seeded, "tcp"));
}

/// Two long paths with shallow bottleneck buffers (`long-shallow.toml`: 24.2 Mb/s at 124
/// ms one way behind 50 packets, a tenth of its bandwidth-delay product, beside 10.9 Mb/s
/// at 133 ms): the buffer overflows long before its queue shows as delay. Startup went on
/// while the FIFO dropped hundreds of datagrams a second, the timer suspected the link
/// tens of times with its window in flight, and the download under min-rtt got 3.1-3.9
/// Mb/s over seeds 1-4. A round trip that loses 2 % of its packets (and at least 8) now
/// ends startup: 8.5-11.2 Mb/s (`docs/RESULTS.md` 10.8).
#[test]
fn a_round_trip_that_overflows_a_shallow_buffer_ends_startup() {
    let s = scenario("long-shallow.toml");
    for seed in [1, 2] {
        let seed = format!("scenario.seed={seed}");
        let r = run(&with(&s, &[seed.as_str()]), Mode::Late).unwrap();
        let bulk = flow(&r, "bulk").goodput_mbps;
        assert!(bulk >= 7.0, "{seed}: bulk {bulk} Mbit/s");
    }
}

/// Two links, the second a cellular trace whose pauses trip its reinjection timer (tens
/// of spurious suspicions a run): the probe on min-rtt stays within the trace
/// bound (p95 within 50 ms of idle) with the scenario's Verizon LTE trace and with the
/// TMobile one it was not written for. Each suspicion used to move the trace link's load
/// onto the full faster link, put reinjections before the probe and, at times, send the
/// probe to the trace link into its next pause (p95 70 and 136 ms then; 35 and 51 now).
#[test]
fn probe_keeps_its_bound_when_a_trace_link_is_suspected_at_its_pauses() {
    let s = scenario("bufferbloat-2links.toml");
    let tmobile = [
        "links.1.trace_down=\"../../shared/traces/TMobile-LTE-short.down\"",
        "links.1.trace_up=\"../../shared/traces/TMobile-LTE-short.up\"",
    ];
    for (name, sets) in [("Verizon", &[][..]), ("TMobile", &tmobile[..])] {
        let r = run(&with(&s, sets), Mode::Late).unwrap();
        let probe = flow(&r, "probe");
        assert_eq!(probe.lost, 0, "{name}: {probe:?}");
        assert!(probe.latency_ms.p95 <= IDLE_MS + 50.0, "{name}: {probe:?}");
        let e = r.engine.as_ref().expect("engine counters");
        assert!(
            e.suspected > 5,
            "{name}: the trace's pauses are suspected: {e:?}"
        );
    }
}

/// One download over two links, a 10 Mb/s one and a cellular trace (issue 7: at least
/// 80 % of the links' capacity). The receiver holds the flow's packets behind one that
/// waits out the trace's pauses, its acknowledgements stall meanwhile, and the fixed link
/// sent only from what the flow kept above the binding point: CoDel's target for an
/// aggregate flow now also covers the links' recent pause (79 % and 73 % of the capacity
/// before; 83 % and 77 % then, 80 % and 70 % with the datagrams counted whole on the
/// links). The TMobile trace is one the scenario was not written for.
#[test]
fn a_download_over_a_fixed_link_and_a_trace_gets_most_of_both() {
    let s = scenario("bufferbloat-2links.toml");
    for (t, floor) in [("Verizon-LTE-short", 0.77), ("TMobile-LTE-short", 0.68)] {
        let down = format!("links.1.trace_down=\"../../shared/traces/{t}.down\"");
        let up = format!("links.1.trace_up=\"../../shared/traces/{t}.up\"");
        let r = run(&with(&s, &[down.as_str(), up.as_str()]), Mode::Late).unwrap();
        let (bulk, probe) = (flow(&r, "bulk"), flow(&r, "probe"));
        let capacity = 10e6 / 8.0 + trace_capacity(&format!("{t}.down"), 30.0);
        let share = bulk.goodput_mbps * 1e6 / 8.0 / capacity;
        assert!(
            share >= floor,
            "{t}: {:.1} % of the capacity",
            share * 100.0
        );
        assert!(probe.latency_ms.p95 <= IDLE_MS + 50.0, "{t}: {probe:?}");
    }
}

/// The ATT LTE trace's uplink pauses for seconds (1.0, 2.2, 0.9, 1.3 and 4.1 s in its
/// first 25 s) while its downlink delivers. In a download over it and a 10 Mb/s link, the
/// client's acknowledgements of the LTE link go on the fixed link while the server's
/// probes show them unheard (`docs/protocol.md` 3.12), and the report counts both. Before
/// the acknowledgements went around, the server took the link for silent at each pause
/// and the download got 9.38 Mb/s here (10.48 now).
#[test]
fn the_report_counts_acknowledgements_sent_around_a_paused_uplink() {
    let t = "ATT-LTE-driving-2016";
    let down = format!("links.1.trace_down=\"../../shared/traces/{t}.down\"");
    let up = format!("links.1.trace_up=\"../../shared/traces/{t}.up\"");
    let s = with(
        &scenario("bufferbloat-2links.toml"),
        &[down.as_str(), up.as_str(), "links.1.delay_ms=30.0"],
    );
    let r = run(&s, Mode::Late).unwrap();
    let e = r.engine.as_ref().expect("engine counters");
    assert!(e.probes_unheard > 0 && e.acks_around > 0, "{e:?}");
    let bulk = flow(&r, "bulk");
    assert!(bulk.goodput_mbps >= 10.0, "{bulk:?}");
}

/// Uploads over cellular traces whose delivery comes in bursts and pauses: the delivery
/// rate measured over a minimum RTT swings with them, and a window cut to it at every
/// queue gave up a third of the capacity or more (TMobile-LTE 59 %, TMobile-UMTS 47 %).
/// Within a round trip the window now falls no further than the queue asks (the window
/// that held `dq` of queue, scaled to hold the target).
#[test]
fn an_upload_over_a_bursty_trace_keeps_most_of_its_capacity() {
    let s = scenario("bufferbloat-trace.toml");
    for t in [
        "TMobile-LTE-short",
        "TMobile-UMTS-driving",
        "Verizon-LTE-short",
    ] {
        let capacity = trace_capacity(&format!("{t}.up"), 30.0);
        // Means over seven path delays: a single run swings with the delay (which of the
        // trace's bursts and pauses the flows meet), TMobile-UMTS's p95 over 0.5-1.6 s
        // and Verizon-LTE's share over 58-75 %, so one run says little of the
        // controller.
        let delays = ["14", "17", "20", "23", "26", "29", "32"];
        let (share, p95) = trace_means(&s, t, capacity, &delays, &UP);
        // 65-70 % of the capacity on these traces.
        assert!(share > 0.6, "{t}: {:.0} % of the capacity", share * 100.0);
        // Far from the plain path's seconds (2.4-4.2 s at p50 on these traces). The
        // highest is TMobile-UMTS's: 510 ms; 620 ms while the probe's packets waited
        // above the binding point for the window the upload filled, as long as the
        // link's acknowledgements took to open it (TMobile-LTE 143 ms, Verizon-LTE 106,
        // now 105 and 96; docs/RESULTS.md 10.2); 855 ms while its pauses of seconds
        // counted toward the competing test's ten round trips and made the link compete,
        // its window doubling into a queue of a second; 915 ms before the search read
        // the queue on full-size datagrams (18). 661 ms since the window covers the
        // acknowledgements' way back (10.7): at 14 ms, one delay of the seven, the link
        // competes through the trace's collapse at 22-29 s, as it did before, but its
        // window doubles to 370 KB there, not 50 KB (p95 1559 ms); the other six delays
        // 453-581 ms, 448-566 before. TMobile-LTE 117 ms, Verizon-LTE 97.
        let bound = if t.contains("UMTS") { 700.0 } else { 120.0 };
        assert!(p95 < bound, "{t}: the probe's p95 {p95:.0} ms");
    }
}

/// An upload over a link whose way back is far slower and pauses (Verizon EVDO: 0.86
/// Mb/s up, 0.12 Mb/s down with gaps of 0.2-1.5 s): the acknowledgements wait on the way
/// back, and a window fitted to the minimum RTT left the link idle for most of each round
/// trip while the probe's packets waited above the binding point for it to open (the
/// probe's p50 270-470 ms, p95 1.6-4 s, up to 99 of its packets lost to CoDel at delays
/// 15-35 ms). The window now covers the way back's standing delay beyond its minimum,
/// measured per packet as its RTT less its one-way delay (RX_TIME), and the link's own
/// queue is still what the target holds.
///
/// That window is full over an empty bottleneck whenever the way back pauses, and the
/// probe passes it as a small flow: by its packets' size (counted by the bytes waiting, it
/// stopped being small after five or six packets, before its head had waited its turn to
/// pass), and up to the part of the window that covers the way back (two full-size
/// packets past it lasted 0.6 s of the probe's, and the way back pauses for longer). Before
/// those two, the probe's p95 was 126-1422 ms over these thirteen delays (mean 528, seven
/// over 500): the probe waited for the next acknowledgements in every run where the bulk
/// flow filled the window. Then 125-256 ms, mean 182 (docs/RESULTS.md 10.7.1).
///
/// The probe's packets then still waited, at each full window, as long as the window's
/// rate (about 20 KB/s, over a way back of seconds) takes to send two full-size packets:
/// 150-180 ms, for acknowledgements that come once every 0.6 s. Where the way back holds
/// more of the window than those two packets, they now pass without that wait: the
/// probe's p50 57 -> 41 ms and p95 182 -> 159 ms at the mean of the thirteen delays
/// (10.7.2).
///
/// The probe stops a second before the run ends: its packets still on their way at the
/// end would count as lost.
#[test]
fn an_upload_whose_acknowledgements_wait_on_the_way_back_keeps_its_probe_near_idle() {
    let s = scenario("bufferbloat-trace.toml");
    let delays = [
        "10", "12.5", "15", "17.5", "20", "22.5", "25", "27.5", "30", "32.5", "35", "37.5", "40",
    ];
    let (mut p50s, mut p95s) = (Vec::new(), Vec::new());
    let sets = [UP[0], UP[1], "flows.1.stop_s=29.0"];
    for delay in delays {
        let r = run_on_trace(&s, "Verizon-EVDO-driving", delay, &sets);
        let probe = flow(&r, "probe");
        // Idle (the bulk flow started at 29.99 s): p50 30 ms, p95 96 ms.
        assert_eq!(probe.lost, 0, "{delay} ms: {probe:?}");
        assert!(probe.latency_ms.p50 < 150.0, "{delay} ms: {probe:?}");
        assert!(probe.latency_ms.p95 < 400.0, "{delay} ms: {probe:?}");
        p50s.push(probe.latency_ms.p50);
        p95s.push(probe.latency_ms.p95);
        // What the window covers, as the report shows it (the client's view of its
        // link): the way back holds the acknowledgements 1.1-1.3 s on average, its own
        // direction's queue 3-6 ms.
        let [up, _] = link(&r, "cell")
            .rate_control
            .clone()
            .expect("rate control on");
        assert!(
            up.mean_return_ms > 500.0 && up.mean_queue_ms < 50.0,
            "{delay} ms: {up:?}"
        );
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(mean(&p50s) < 50.0, "the probe's p50 {p50s:?}");
    assert!(mean(&p95s) < 200.0, "the probe's p95 {p95s:?}");
}

/// Competing traffic in the other order: a plain TCP download outside the tunnel fills
/// the bottleneck's 1000-packet FIFO first, and the tunnel's download starts 5 s later.
/// The tunnel must compete as a plain TCP that starts second does (the simulator's smoltcp
/// late-comer gets 0.9 Mb/s of 10 here), on the scenario's path and on one with twice the
/// delay. Two things kept it at a third of that:
///
/// - Until its flow has filled its window, a link knows nothing of its capacity, and two
///   packets at what it delivered (keepalives, an inner TCP's first windows) are as long
///   as the other flow's queue: the queue passed for the link's own, the controller
///   never competed, and its base delay expired into that queue 10 s on.
/// - When the other flow's queue multiplied the path's RTT at once, the suspect link gave
///   up every probe (at three timeouts of its old RTT) before the answer came, and stayed
///   suspect for 27 s of the 60.
#[test]
fn a_download_that_starts_after_another_filled_the_fifo_competes() {
    let s = with(
        &scenario("bufferbloat-compete.toml"),
        &[
            "flows.1.start_s=0.0",
            "flows.0.start_s=5.0",
            "scenario.duration_s=60.0",
        ],
    );
    for delay in ["20.0", "40.0"] {
        let s = with(&s, &[&format!("links.0.delay_ms={delay}")]);
        let r = run(&s, Mode::Late).unwrap();
        let plain = run(&s, Mode::Early).unwrap();
        let (tunnel, late_comer) = (flow(&r, "tunnel"), flow(&plain, "tunnel"));
        assert!(
            tunnel.goodput_mbps >= 0.75 * late_comer.goodput_mbps,
            "{delay} ms: {tunnel:?} against the plain path's {late_comer:?}"
        );
        let e = r.engine.as_ref().expect("engine counters");
        assert!(e.longest_suspect_ms < 2000.0, "{delay} ms: {e:?}");
    }
}

/// A download over a 10 Mb/s link and a link whose delivery pauses for seconds (the
/// Verizon EVDO driving trace, 0.12 Mb/s on average) gets what the fixed link alone
/// gives. The slow link's lag behind the fixed one (half its RTT over the fixed link's,
/// plus its recent pause) is longer than the receiver waits for a gap, so it does not
/// lengthen the aggregate flow's CoDel target: that target had let the flow's backlog
/// grow until sending on the slow link seemed sooner than draining it through the fixed
/// one, and each packet sent there held the flow up at the receiver (7.75 and 7.30 Mb/s
/// before, against 9.18 alone). The delays of the slow link are different runs: the
/// trace's timing against the flow's changes with it. One of the five, at 30 ms, puts
/// five packets on the slow link just before one of its pauses, and the inner TCP (no
/// SACK) waits out its 1 s timeout: 8.30 Mb/s with or without header compression, the
/// other four 8.97 (9.16 with it) against 8.91 (9.09) alone. So each run must keep 90 %
/// of the fixed link alone, and their mean 95 % (0.80-0.84 and 0.82 before).
#[test]
fn a_link_with_pauses_of_seconds_does_not_drag_a_download_below_the_fixed_link_alone() {
    let s = with(
        &scenario("bufferbloat-2links.toml"),
        &[
            "links.1.trace_down=\"../../shared/traces/Verizon-EVDO-driving.down\"",
            "links.1.trace_up=\"../../shared/traces/Verizon-EVDO-driving.up\"",
        ],
    );
    let alone = run(&with(&s, &["late.policy=\"min-rtt\""]), Mode::Late).unwrap();
    let alone = flow(&alone, "bulk").goodput_mbps;
    let delays = ["20.0", "25.0", "30.0", "35.0", "40.0"];
    let mut sum = 0.0;
    for delay in delays {
        let d = format!("links.1.delay_ms={delay}");
        let r = run(&with(&s, &[d.as_str()]), Mode::Late).unwrap();
        let bulk = flow(&r, "bulk");
        assert!(
            bulk.goodput_mbps >= 0.9 * alone,
            "{delay} ms: {bulk:?} against {alone} Mb/s on the fixed link alone"
        );
        sum += bulk.goodput_mbps;
    }
    let mean = sum / delays.len() as f64;
    assert!(
        mean >= 0.95 * alone,
        "mean {mean} Mb/s against {alone} Mb/s on the fixed link alone"
    );
}

/// The receive-window clamp (`tcp_window_clamp`, `docs/protocol.md` 4.1): the download's
/// sender is held by the windows of its acknowledgements instead of CoDel's drops, so it
/// never loses a packet and never has to regrow its congestion window after a cellular
/// link's swing. Over three delays of the TMobile LTE downlink, with and without it.
#[test]
fn the_window_clamp_slows_a_download_without_a_drop() {
    let s = scenario("bufferbloat-trace.toml");
    let t = "TMobile-LTE-short";
    let capacity = trace_capacity(&format!("{t}.down"), 30.0);
    let (mut on, mut off) = (0.0, 0.0);
    for delay in ["15", "25", "35"] {
        let r = run_on_trace(&s, t, delay, &[]);
        let e = r.engine.as_ref().expect("late mode");
        assert_eq!(e.window_clamped, 0);
        assert!(
            e.aqm_dropped > 0,
            "{delay} ms: CoDel drops without the clamp"
        );
        off += flow(&r, "bulk").goodput_mbps * 1e6 / 8.0 / capacity / 3.0;
        let r = run_on_trace(&s, t, delay, &["late.tcp_window_clamp=true"]);
        let e = r.engine.as_ref().expect("late mode");
        let bulk = flow(&r, "bulk");
        assert!(e.window_clamped > 1000, "{delay} ms: {e:?}");
        assert_eq!(e.aqm_dropped, 0, "{delay} ms");
        assert_eq!(bulk.retransmitted, 0, "{delay} ms: {bulk:?}");
        on += bulk.goodput_mbps * 1e6 / 8.0 / capacity / 3.0;
    }
    // Measured: 78 % of the capacity against 68 % (docs/RESULTS.md 10.6).
    assert!(
        on > off + 0.05,
        "{:.0} % against {:.0} %",
        on * 100.0,
        off * 100.0
    );
    assert!(on > 0.75, "{:.0} % of the capacity", on * 100.0);
}

/// The fixed-rate setup with the clamp: the probe's bound holds, and the download
/// keeps the link without a drop.
#[test]
fn the_window_clamp_keeps_the_fixed_rate_setup_within_its_bounds() {
    let s = with(
        &scenario("bufferbloat.toml"),
        &["late.tcp_window_clamp=true"],
    );
    let r = run(&s, Mode::Late).unwrap();
    let (probe, bulk) = (flow(&r, "probe"), flow(&r, "bulk"));
    assert!(probe.latency_ms.p99 <= IDLE_MS + 10.0, "{probe:?}");
    assert!(bulk.goodput_mbps >= 0.88 * 10.0, "{bulk:?}");
    assert_eq!(bulk.retransmitted, 0, "{bulk:?}");
    assert_eq!(r.engine.as_ref().expect("late mode").aqm_dropped, 0);
}

/// With `codel_covers_pause` a download's CoDel target covers half its trace link's
/// recent pause, and the inner TCP meets no drop for the queue a pause builds: over seven
/// delays of each LTE trace it gets more of the link (TMobile 66.2 -> 73.3 %, Verizon
/// 66.8 -> 70.3 %; docs/RESULTS.md 19), the probe beside it a little later. (Over four
/// delays, 15-30 ms, Verizon's gain was 4.3 points, then 2.7 once a call's packets piled
/// up behind a window passed it as a small flow, which moved single runs either way by a
/// point or two: single runs swing with the delay, and seven delays say more.)
#[test]
fn codel_covering_the_links_pause_gives_a_download_more_of_a_cellular_link() {
    let s = scenario("bufferbloat-trace.toml");
    for t in ["TMobile-LTE-short", "Verizon-LTE-short"] {
        let capacity = trace_capacity(&format!("{t}.down"), 30.0);
        let delays = ["10", "15", "20", "25", "30", "35", "40"];
        let (off, _) = trace_means(&s, t, capacity, &delays, &[]);
        let (on, p95) = trace_means(&s, t, capacity, &delays, &["late.codel_covers_pause=true"]);
        assert!(
            on >= off + 0.025,
            "{t}: {:.1} % -> {:.1} % of the capacity",
            off * 100.0,
            on * 100.0
        );
        assert!(p95 < 250.0, "{t}: the probe's p95 {p95:.0} ms");
    }
}
