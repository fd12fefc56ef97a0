//! Privileged: the emulator alone, one emulated link between the client's and the
//! server's link addresses (no qdisc, no routing mode), real UDP through it.

mod common;

use std::path::Path;

use latebind_lab::emu::{DirectionSpec, EmuLinkSpec, EmuSpec, EmuStats, RateSpec};
use latebind_lab::netns::{Role, Topology};
use latebind_lab::sys::mono_ns;
use latebind_lab::traffic::{RecvSummary, SendSummary, read_json};

/// A direction at 1 Gbit/s (serialization negligible) with `delay_ms`.
fn fast(delay_ms: u64) -> DirectionSpec {
    DirectionSpec {
        rate: RateSpec::Fixed { bits_per_sec: 1e9 },
        delay_ns: delay_ms * 1_000_000,
        jitter_ns: 0,
        loss: 0.0,
        queue_packets: 100_000,
        outages_ns: vec![],
        drop_in_flight_on_outage: false,
        seed: 7,
    }
}

struct Outcome {
    recv: RecvSummary,
    send: SendSummary,
    emu: EmuStats,
}

/// Sends udp-cbr client -> server through one emulated link whose uplink is `up`:
/// `packet_bytes` IP packets every `interval_us`, from `start_s` to `stop_s`
/// (scenario time).
fn run_link(
    name: &str,
    up: DirectionSpec,
    packet_bytes: usize,
    interval_us: u64,
    start_s: f64,
    stop_s: f64,
) -> Outcome {
    let dir = common::test_dir(name);
    let topo = Topology::create(1).expect("topology");
    let l = &topo.links[0];
    let base = mono_ns() + 500_000_000;
    let end_s = stop_s + 0.5;
    let spec = EmuSpec {
        base_ns: base,
        until_ns: Some(base + ((end_s + 0.4) * 1e9) as u64),
        spin_us: 200,
        links: vec![EmuLinkSpec {
            name: "l0".into(),
            client_if: l.emu_client_if.clone(),
            server_if: l.emu_server_if.clone(),
            up,
            down: fast(0),
        }],
        stats_path: Some(dir.join("emu-stats.json")),
        log_path: Some(dir.join("emu.log")),
        log_frames: false,
        cpu_latency_qos: true,
        rt_priority: Some(50),
        warmup_ns: 0,
        window_ns: Some([base + (start_s * 1e9) as u64, base + (stop_s * 1e9) as u64]),
    };
    let spec_path = dir.join("emu-spec.json");
    std::fs::write(&spec_path, serde_json::to_string(&spec).unwrap()).unwrap();
    let exe = common::exe();
    let mut emu = topo
        .spawn(
            Role::Emu,
            "emulate",
            &exe,
            &["emulate", "--spec", spec_path.to_str().unwrap()],
            &dir.join("emu.out"),
        )
        .expect("emulator");
    let rate_mbps = packet_bytes as f64 * 8.0 / interval_us as f64;
    let times = |out: &Path, until: f64| -> Vec<String> {
        ["--name", "probe", "--kind", "udp-cbr", "--index", "0"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                "--base-ns".into(),
                base.to_string(),
                "--start-s".into(),
                start_s.to_string(),
                "--stop-s".into(),
                stop_s.to_string(),
                "--until-s".into(),
                until.to_string(),
                "--out".into(),
                out.display().to_string(),
            ])
            .collect()
    };
    let to = format!("{}:20000", l.server);
    let mut rargs = vec![
        "traffic".to_owned(),
        "recv".into(),
        "--bind".into(),
        to.clone(),
    ];
    rargs.extend(times(&dir.join("recv.json"), end_s + 0.2));
    let mut sargs = vec![
        "traffic".to_owned(),
        "send".into(),
        "--bind".into(),
        format!("{}:10000", l.client),
        "--to".into(),
        to,
        "--rate-mbps".into(),
        rate_mbps.to_string(),
        "--packet-bytes".into(),
        packet_bytes.to_string(),
        "--rt-priority".into(),
        "40".into(),
    ];
    sargs.extend(times(&dir.join("send.json"), end_s));
    let mut recv = topo
        .spawn(Role::Server, "recv", &exe, &rargs, &dir.join("recv.out"))
        .expect("receiver");
    let mut send = topo
        .spawn(Role::Client, "send", &exe, &sargs, &dir.join("send.out"))
        .expect("sender");
    let deadline = base + ((end_s + 5.0) * 1e9) as u64;
    for h in [&mut send, &mut recv, &mut emu] {
        let st = h
            .wait_until(deadline)
            .expect("wait")
            .unwrap_or_else(|| panic!("{} hung", h.name));
        assert!(st.success(), "{} failed: {}", h.name, h.log_tail());
    }
    let out = Outcome {
        recv: read_json(&dir.join("recv.json")).expect("receiver summary"),
        send: read_json(&dir.join("send.json")).expect("sender summary"),
        emu: latebind_lab::emu::read_stats(&dir.join("emu-stats.json")).expect("emulator stats"),
    };
    drop(topo);
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{name}: sent {} (schedule lateness us {:?}) delivered {} latency ms {:?} gap {:.3} ms; emulator lateness us {:?}, read delay us {:?}",
        out.send.sent,
        out.send.schedule_late_us,
        out.recv.delivered,
        out.recv.latency_ms,
        out.recv.max_gap_ms,
        out.emu.lateness_us,
        out.emu.links[0].up.read_delay_us
    );
    out
}

#[test]
fn emulated_delay_20ms_arrives_within_1ms() {
    if !common::root_or_skip("emulated_delay_20ms_arrives_within_1ms") {
        return;
    }
    let _g = common::serial();
    // 200-byte packets every 1 ms for 8 s: 8000 packets. The p99 bound lets 80 of them
    // be late. The virtual machine stalls even a real-time thread now and then (on an
    // idle machine here, 10-15 sleeps of 1 ms in 30 s overshot by 2-9 ms; the CI run that
    // failed the 1000-packet version had one stall of 13 ms): over 8 s those few stalls
    // stay well under 1 % of the packets, while an emulator late by itself still fails.
    let check = |o: &Outcome| -> Result<(), String> {
        let l = o.recv.latency_ms;
        let up = &o.emu.links[0].up;
        let checks = [
            (o.send.sent == 8000, format!("sent {}", o.send.sent)),
            (
                o.recv.delivered == 8000,
                format!("delivered {}: no loss configured", o.recv.delivered),
            ),
            (
                o.recv.latency_clock == "kernel",
                format!("latency clock {}", o.recv.latency_clock),
            ),
            (
                l.p50 >= 20.0,
                format!("one-way delay below the emulated 20 ms: {l:?}"),
            ),
            (
                l.p99 <= 21.0,
                format!("one-way delay p99 {} ms above 20 + 1 ms", l.p99),
            ),
            (
                up.delivered == 8000,
                format!("emulator delivered {}", up.delivered),
            ),
            (
                o.emu.lateness_us.p99 < 1000.0,
                format!("emulator lateness us {:?}", o.emu.lateness_us),
            ),
        ];
        match checks.into_iter().find(|(ok, _)| !ok) {
            Some((_, what)) => Err(what),
            None => Ok(()),
        }
    };
    let o = run_link("delay", fast(20), 200, 1000, 0.0, 8.0);
    if let Err(e) = check(&o) {
        // A run during which the machine stalled the emulator's own real-time thread
        // for over 10 ms (a CI run: 32 ms, and its lateness p99 2.1 ms) says nothing of
        // the delay it emulates: once more. An emulator late by itself fails both.
        assert!(o.emu.lateness_us.max > 10_000.0, "{e}");
        eprintln!("the first run failed while the machine stalled the emulator ({e}): once more");
        let o = run_link("delay", fast(20), 200, 1000, 0.0, 8.0);
        check(&o).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn emulated_loss_drops_a_tenth() {
    if !common::root_or_skip("emulated_loss_drops_a_tenth") {
        return;
    }
    let _g = common::serial();
    let mut up = fast(1);
    up.loss = 0.1;
    // 100-byte packets every 500 us for 1 s: 2000 packets.
    let o = run_link("loss", up, 100, 500, 0.0, 1.0);
    assert_eq!(o.send.sent, 2000);
    let lost = o.send.sent - o.recv.delivered;
    // Binomial(2000, 0.1): mean 200, sd 13.4; +-50 is 3.7 sd.
    assert!(
        (150..=250).contains(&lost),
        "lost {lost} of 2000 at loss 0.1"
    );
    assert_eq!(
        lost, o.emu.links[0].up.lost_random,
        "every loss is the model's"
    );
    // Over the sending's second, the 1 Gbit/s uplink offered 125 MB and the 1.6 Mbit/s
    // of packets used a 625th of it.
    let w = o.emu.links[0].up.window.expect("the window was passed");
    let offered = w.offered_bytes as f64;
    assert!((offered - 125e6).abs() < 0.03 * 125e6, "{w:?}");
    assert!(w.unused_bytes as f64 > 0.99 * offered, "{w:?}");
}

#[test]
fn emulated_outage_drops_traffic_for_its_interval() {
    if !common::root_or_skip("emulated_outage_drops_traffic_for_its_interval") {
        return;
    }
    let _g = common::serial();
    let mut up = fast(20);
    up.outages_ns = vec![[1_000_000_000, 1_500_000_000]];
    // 200-byte packets every 1 ms from 0.5 s to 2.0 s: 1500 packets, 500 of them sent
    // inside the outage; those sent before it were already on the link and arrive
    // (uplink semantics).
    let check = |o: &Outcome| -> Result<(), String> {
        if o.send.sent != 1500 {
            return Err(format!("sent {}", o.send.sent));
        }
        let lost = o.send.sent - o.recv.delivered;
        if !(497..=503).contains(&lost) {
            return Err(format!(
                "lost {lost}, expected the 500 sent during the outage"
            ));
        }
        let up = &o.emu.links[0].up;
        if up.dropped_outage + up.lost_outage != lost {
            return Err(format!(
                "lost {lost}, the emulator's outage dropped {} and lost {}",
                up.dropped_outage, up.lost_outage
            ));
        }
        // The receiver saw nothing for the outage's length. The loss count above pins
        // the outage's edges to the emulator's clock within 3 ms; the gap is the
        // sender's and the receiver's view, and one stall of the virtual machine next
        // to an edge moves it (a CI run saw 488 ms).
        if (o.recv.max_gap_ms - 500.0).abs() >= 15.0 {
            return Err(format!("gap {} ms", o.recv.max_gap_ms));
        }
        // From 0.5 to 2.0 s the 1 Gbit/s uplink was out for 0.5 s: it offered 125 MB
        // (an outage offers nothing).
        let w = up.window.ok_or("no capacity window")?;
        if (w.offered_bytes as f64 - 125e6).abs() >= 0.03 * 125e6 {
            return Err(format!("offered {w:?}, expected 125 MB"));
        }
        Ok(())
    };
    let o = run_link("outage", up.clone(), 200, 1000, 0.5, 2.0);
    if let Err(e) = check(&o) {
        // A stall of the whole virtual machine next to an outage edge (a CI run: the
        // emulator 11 ms late, 485 lost) holds the sender too: the packets it should have
        // sent inside the outage leave after it, and are rightly delivered. Such a run
        // says nothing of the outage: once more. An emulator that misplaces the outage
        // by itself fails both.
        let stalled = o.emu.lateness_us.max > 10_000.0 || o.send.schedule_late_us.max > 10_000.0;
        assert!(stalled, "{e}");
        eprintln!("the first run failed while the machine stalled ({e}): once more");
        let o = run_link("outage", up, 200, 1000, 0.5, 2.0);
        check(&o).unwrap_or_else(|e| panic!("{e}"));
    }
}
