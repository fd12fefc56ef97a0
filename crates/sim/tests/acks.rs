//! The tunnel's acknowledgements on an asymmetric link (DSL-like: a fast downlink, a
//! narrow uplink): a download's ACK frames ride the narrow uplink, so they must stay
//! small however many losses the link has had (`docs/protocol.md` 4.3: an ACK reports
//! only the ranges above what the peer is known to have). Before that rule every ACK of
//! a link with 31 losses in its life carried 32 ranges (268 bytes), and on
//! `scenarios/asymmetric.toml` the uplink was full (0.95 of its 1 Mbit/s), the download
//! got 12.7-13.1 Mbit/s of 21 and the voice flow's p99 was 125 ms. (Those figures, and
//! the 0.72 of the uplink after the rule, counted each datagram without its outer
//! headers and AEAD tag. Counted whole, as the links count since, the uplink carries
//! 0.96 of its 1 Mbit/s after the rule: 44 bytes on each small datagram of the inner
//! TCP's acknowledgements. The voice flow keeps its p99 under 60 ms, the download 15.0
//! Mbit/s.)

mod common;

use common::{flow, scenario, with};

use latebind_sim::{Mode, Report, run};

/// A mix the scenario was not written for: 8 / 0.5 Mbit/s with 1 % loss, beside 10 Mbit/s
/// at 40 ms.
const NARROW: [&str; 5] = [
    "links.0.rate_down_mbps=8.0",
    "links.0.rate_up_mbps=0.5",
    "links.0.loss=0.01",
    "links.1.rate_mbps=10.0",
    "links.1.delay_ms=40.0",
];

/// The uplink's and the downlink's bytes on link 0.
fn link0_bytes(r: &Report) -> (f64, f64) {
    let [up, down] = r.links[0].bytes_delivered;
    (up as f64, down as f64)
}

#[test]
fn a_download_over_an_asymmetric_lossy_link_leaves_its_uplink_room() {
    let base = scenario("asymmetric.toml");
    // The scenario's mix (16 / 1 Mbit/s with 0.5 % loss, beside 5 Mbit/s), and one it was
    // not written for (8 / 0.5 Mbit/s with 1 % loss, beside 10 Mbit/s at 40 ms).
    for (sets, downlinks) in [(vec![], 16.0 + 5.0), (NARROW.to_vec(), 8.0 + 10.0)] {
        let r = run(&with(&base, &sets), Mode::Late).unwrap();
        let d = flow(&r, "download");
        assert!(d.goodput_mbps >= 0.7 * downlinks, "{sets:?}: {d:?}");
        if sets.is_empty() {
            let v = flow(&r, "voice");
            assert!(v.latency_ms.p99 < 60.0, "{v:?}");
            let (up, down) = link0_bytes(&r);
            assert!(up / down < 0.08, "uplink {up} B for {down} B down");
        }
    }
    // One link's worth of download under min-rtt, 24 / 2 Mbit/s with 0.2 % loss: the
    // uplink is not the limit, and what it carries per byte down is the cost of the
    // acknowledgements, the inner TCP's and the tunnel's (11.6 % before the rule, counting
    // the datagrams without their outer headers and tag; 5.3 % after, and 8.3 % with
    // them, as the bounds here count since).
    let r = run(
        &with(
            &base,
            &[
                "late.policy=\"min-rtt\"",
                "links.0.rate_down_mbps=24.0",
                "links.0.rate_up_mbps=2.0",
                "links.0.loss=0.002",
            ],
        ),
        Mode::Late,
    )
    .unwrap();
    let (up, down) = link0_bytes(&r);
    assert!(up / down < 0.09, "uplink {up} B for {down} B down");
}

/// The inner TCP's acknowledgements that wait for the narrow uplink above the binding
/// point leave as one datagram per run (`ack_filter`, on by default): the uplink carries
/// less per byte down, and the voice flow that shares it waits less. On the scenario's
/// mix and on the other one above, each over three seeds (the voice flow's p99 is its
/// twelfth worst packet of 1160, and moves by 20 ms from one seed to another). (The
/// download itself gains on the first, 15.1 -> 16.1 Mbit/s, and loses on the second,
/// 14.3 -> 13.6: smoltcp grows its window by at most one segment per acknowledgement,
/// where Linux counts the bytes acknowledged; in the lab, with kernel TCP, both gained
/// or held, docs/RESULTS.md 14.)
#[test]
fn acknowledgements_waiting_for_a_narrow_uplink_leave_as_one() {
    let base = scenario("asymmetric.toml");
    for sets in [vec![], NARROW.to_vec()] {
        // Per filter setting, means over the seeds: uplink bytes per byte down, and the
        // voice flow's p99.
        let mut means = Vec::new();
        for knob in ["late.ack_filter=false", "late.ack_filter=true"] {
            let (mut ratio, mut voice) = (0.0, 0.0);
            for seed in ["scenario.seed=1", "scenario.seed=2", "scenario.seed=3"] {
                let mut s = sets.clone();
                s.extend([knob, seed]);
                let r = run(&with(&base, &s), Mode::Late).unwrap();
                let filtered = r.engine.as_ref().expect("engine counters").ack_filtered;
                if knob.ends_with("true") {
                    assert!(filtered > 1000, "{s:?}: {filtered} filtered");
                } else {
                    assert_eq!(filtered, 0);
                }
                assert_eq!(flow(&r, "voice").lost, 0);
                let (up, down) = link0_bytes(&r);
                ratio += up / down / 3.0;
                voice += flow(&r, "voice").latency_ms.p99 / 3.0;
            }
            means.push((ratio, voice));
        }
        let [(ratio_off, voice_off), (ratio_on, voice_on)] = means[..] else {
            unreachable!()
        };
        // Filter off -> on: 0.061 -> 0.055 on the scenario's mix; 0.065 -> 0.060 on the
        // other, where the tunnel's own acknowledgements of the second link and of the
        // lossy first one weigh more (with `ack_ride_wait` at 1 ms: 0.071 -> 0.053 and
        // 0.067 -> 0.062, measured before 21.3). On the scenario's mix it was 0.061 ->
        // 0.050 while the aggregate policy aimed the slower link's packets late whatever
        // the rates (docs/RESULTS.md 21.3): the receiver held 36,118 packets a run
        // instead of about 26,400, and released them in runs whose acknowledgements the
        // filter merged.
        let most = if sets.is_empty() { 0.95 } else { 0.97 };
        assert!(
            ratio_on < most * ratio_off,
            "{sets:?}: uplink per byte down {ratio_on} with the filter, {ratio_off} without"
        );
        // Voice p99, filter off -> on, means of seeds 1-3: 42 -> 26 ms on the scenario's
        // mix, and 42 -> 40 ms on the other since the flow scheduler passes over a flow
        // whose link has no room (docs/RESULTS.md 23: 70 -> 46 before, when the voice
        // waited behind the download's head, which waited for the narrow uplink's slot;
        // 75 -> 50 and 80 -> 54 before 21.3's aim; 87 -> 60 before the search read the
        // queue on full-size datagrams, docs/RESULTS.md 18).
        let (better, bound) = if sets.is_empty() {
            (0.8, 30.0)
        } else {
            (1.0, 45.0)
        };
        assert!(
            voice_on < better * voice_off && voice_on < bound,
            "{sets:?}: voice p99 {voice_on} ms with the filter, {voice_off} without"
        );
    }
}
