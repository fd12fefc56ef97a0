//! Binding policies in the simulator against issue 5's targets.

mod common;

use common::{flow, inline_scenario, link, scenario, trace_capacity, with};

use latebind_sim::{Mode, run};

/// One TCP flow over two links gets at least 88 % of their sum with the aggregate policy,
/// on the scenario's links and on link mixes it was not written for (issue 5 asks 90 %:
/// measured 89.7-90.4 % with the tunnel's datagrams counted whole on the links, whose
/// framing leaves one TCP flow 91.6 % at most; 92.5-93.5 % before they were); min-rtt
/// keeps it on one link.
#[test]
fn aggregate_gets_the_sum_of_the_links_for_one_tcp_flow() {
    let base = with(&scenario("aggregate.toml"), &["scenario.duration_s=20.0"]);
    for (sets, sum) in [
        (vec![], 20.0),
        (vec!["links.1.delay_ms=50.0"], 20.0),
        (vec!["links.1.rate_mbps=5.0"], 15.0),
        (
            vec![
                "links.0.rate_mbps=20.0",
                "links.1.rate_mbps=5.0",
                "links.1.delay_ms=40.0",
            ],
            25.0,
        ),
    ] {
        let s = with(&base, &sets);
        let r = run(&s, Mode::Late).unwrap();
        let g = flow(&r, "bulk").goodput_mbps;
        assert!(g >= 0.88 * sum, "{sets:?}: {g} Mbit/s of {sum}");
        // min-rtt keeps the flow on the faster link: the other carries next to nothing,
        // and the flow gets no more than that one link.
        let m = run(&with(&s, &["late.policy=\"min-rtt\""]), Mode::Late).unwrap();
        let gm = flow(&m, "bulk").goodput_mbps;
        let fastest = s
            .spec
            .links
            .iter()
            .filter_map(|l| l.rate_mbps)
            .fold(0.0, f64::max);
        let other = m.links.iter().map(|l| l.data_sent).min().unwrap_or(0);
        let all: u64 = m.links.iter().map(|l| l.data_sent).sum();
        assert!(gm < fastest, "{sets:?}: min-rtt got {gm} of {sum}");
        assert!(
            (other as f64) < 0.01 * all as f64,
            "{sets:?}: min-rtt put {other} of {all} on the other link"
        );
    }
}

/// Two links under min-rtt, `near` and `fast` (each Mbit/s and ms one way, 1000-packet
/// FIFOs), a bulk TCP flow and a probe (100 bytes every 20 ms from 1 s) in `direction`.
fn near_and_fast(near: (f64, f64), fast: (f64, f64), direction: &str, secs: f64) -> String {
    let links = [(near.0, near.1, 0.0, 0.0), (fast.0, fast.1, 0.0, 0.0)];
    mix(&links, direction, "min-rtt", secs, 1)
}

/// A bulk flow under min-rtt (the default before `auto`) takes the link where its backlog
/// arrives soonest, not where each of its packets does: beside a slow link a few ms away,
/// a fast one 20 ms away carries it, in both directions, while a small flow's packets
/// still go where they arrive soonest. Judged by each packet alone, a download stayed on
/// the slow link (1.8 of 20 Mbit/s beside a 2 Mbit/s link 2 ms away; 4.5 beside 5 Mbit/s
/// 10 ms away), and an upload did too beside the 5 Mbit/s one (4.9): its time at a
/// bottleneck in the network was not counted, nor the flow's backlog
/// (`docs/RESULTS.md` 8.4).
#[test]
fn min_rtt_puts_a_bulk_flow_where_its_backlog_arrives_soonest() {
    for (near_mbps, near_ms) in [(2.0, 2.0), (5.0, 10.0)] {
        for direction in ["up", "down"] {
            let text = near_and_fast((near_mbps, near_ms), (20.0, 20.0), direction, 10.0);
            let r = run(&inline_scenario(&text), Mode::Late).unwrap();
            let what = format!("{near_mbps} Mbit/s {near_ms} ms, {direction}");
            // 16.4-21.9 Mbit/s over the four.
            let bulk = flow(&r, "bulk").goodput_mbps;
            assert!(bulk >= 15.0, "{what}: bulk {bulk} Mbit/s");
            // The probe on either link, never behind the bulk flow's queue: p50 8-21 ms.
            let probe = flow(&r, "probe").latency_ms.p50;
            assert!(probe <= 25.0, "{what}: probe p50 {probe} ms");
        }
    }
}

/// A link whose rate control is still searching is judged by what its window will let
/// through as the backlog fills it, not by its first window alone: beside 5 Mbit/s 20 ms
/// away, a 50 Mbit/s link 40 ms away starts with 32 packets over 80 ms (4.8 Mbit/s), and
/// under min-rtt a bulk flow never gave it the backlog that would have grown it: 4.5
/// Mbit/s up, 25.8 down. Counted at twice its window's rate (the window doubles each
/// round trip while the backlog fills it), the fast link takes the flow: 43.9 and 46.2
/// (`docs/RESULTS.md` 8.5).
#[test]
fn min_rtt_gives_a_bulk_flow_to_a_fast_link_whose_window_is_still_searching() {
    for direction in ["up", "down"] {
        let text = near_and_fast((5.0, 20.0), (50.0, 40.0), direction, 15.0);
        let r = run(&inline_scenario(&text), Mode::Late).unwrap();
        let bulk = flow(&r, "bulk").goodput_mbps;
        assert!(bulk >= 35.0, "{direction}: bulk {bulk} Mbit/s");
        // The probe's packets still go where they arrive soonest: 22.5 and 31.3 ms.
        let probe = flow(&r, "probe").latency_ms.p50;
        assert!(probe <= 40.0, "{direction}: probe p50 {probe} ms");
    }
}

/// A link with random loss must not drag the bond down (issue 5): one TCP flow over
/// 10 + 10 Mb/s (20 s) where the slower link loses 1 % of its packets got 9.0 Mb/s, under
/// the better link alone (9.4 with min-rtt), and 2.7 with 1 % on both: the inner TCP
/// took each link's random loss for congestion. A packet of an aggregate flow declared
/// lost on a link that works is now sent again on another (11.8 and 11.2 Mb/s), and the
/// receiver waits for it instead of giving its gap up at the links' delay spread (17.1,
/// 13.0 with 5 % on the slower link, 12.9 with 1 % on both). With 10 % the lossy link
/// carries little, its tail losses turn it suspect, and the receiver now waits for the
/// resend then too (9.0 -> 11.9 Mb/s).
///
/// Judged on the mean over four seeds (the random losses' draws): single runs of the
/// same code range over 9.3-17.3 Mbit/s at 10 % loss (`latebind sim
/// scenarios/aggregate.toml --set links.1.loss=0.1 --set scenario.seed=S`, S = 1..12), and
/// any change to what a datagram carries moves the draws.
#[test]
fn a_lossy_link_does_not_drag_an_aggregate_flow_below_the_better_link() {
    let base = with(&scenario("aggregate.toml"), &["scenario.duration_s=20.0"]);
    let alone = run(&with(&base, &["late.policy=\"min-rtt\""]), Mode::Late).unwrap();
    let alone = flow(&alone, "bulk").goodput_mbps;
    for (sets, floor) in [
        (vec!["links.1.loss=0.01"], 1.6 * alone),
        (vec!["links.1.loss=0.05"], 1.3 * alone),
        (vec!["links.1.loss=0.1"], 1.15 * alone),
        (vec!["links.0.loss=0.01", "links.1.loss=0.01"], 1.2 * alone),
    ] {
        let mut goodput = Vec::new();
        for seed in SEEDS {
            let seed = format!("scenario.seed={seed}");
            let r = run(&with(&with(&base, &sets), &[&seed]), Mode::Late).unwrap();
            goodput.push(flow(&r, "bulk").goodput_mbps);
            let e = r.engine.as_ref().expect("engine counters");
            assert!(e.reinjected_lost > 0, "{sets:?} {seed}: {e:?}");
        }
        let mean = goodput.iter().sum::<f64>() / goodput.len() as f64;
        assert!(
            mean >= floor,
            "{sets:?}: {goodput:?} Mbit/s (mean {mean}), the better link alone {alone}"
        );
    }
}

/// A far link's losses cost an aggregate flow little (issue 5): 5 Mbit/s at 10 ms one way
/// beside 20 Mbit/s at 100 ms losing 2 % of its packets, 20 s, the flow down and up. Each
/// loss holds the flow at the receiver until its packet comes again; told over the far
/// link itself, the sender learnt of it a far link's way back later: the flow got 17.6
/// and 19.3 Mbit/s (means over the four seeds) of the 21.2 and 22.0 it gets without the
/// loss. A copy of the far link's ACK now tells it over the near link once the gap is
/// three packets deep (`docs/protocol.md` 4.3): 20.9 and 21.8. Judged on the mean over
/// the seeds, against the same links without loss.
#[test]
fn a_far_lossy_link_holds_an_aggregate_flow_up_little() {
    let base = with(
        &scenario("aggregate.toml"),
        &[
            "scenario.duration_s=20.0",
            "links.0.rate_mbps=5.0",
            "links.1.rate_mbps=20.0",
            "links.1.delay_ms=100.0",
        ],
    );
    for direction in ["\"down\"", "\"up\""] {
        let dir = format!("flows.0.direction={direction}");
        let clean = run(&with(&base, &[&dir]), Mode::Late).unwrap();
        let clean = flow(&clean, "bulk").goodput_mbps;
        let mut goodput = Vec::new();
        for seed in SEEDS {
            let seed = format!("scenario.seed={seed}");
            let r = run(
                &with(&base, &[&dir, "links.1.loss=0.02", &seed]),
                Mode::Late,
            )
            .unwrap();
            goodput.push(flow(&r, "bulk").goodput_mbps);
            let e = r.engine.as_ref().expect("engine counters");
            assert!(e.acks_shortcut > 0, "{direction} {seed}: {e:?}");
        }
        let mean = goodput.iter().sum::<f64>() / goodput.len() as f64;
        assert!(
            mean >= 0.9 * clean,
            "{direction}: {goodput:?} Mbit/s (mean {mean}), without the loss {clean}"
        );
    }
}

/// A near link's losses cost an aggregate flow little too (issue 5), and a resend lost
/// again costs it no inner loss. An aggregate flow's packet found lost on a link that
/// works goes again on the link that brings it soonest, which may be that same link
/// (`docs/protocol.md` 4.4); lost there a second time, it goes on another, and the
/// receiver waits for both tries (5.2). Judged on the mean over the seeds, against the
/// same links without loss:
/// - 10 Mbit/s at 30 ms one way beside 2 Mbit/s at 10 ms losing 2 %, the flow down: each
///   loss went again over the far link, and the flow got 9.27 Mbit/s of the 10.92 it gets
///   without the loss; on the near link again, 10.16.
/// - 50 Mbit/s at 5 ms losing 2 % beside 10 Mbit/s at 5 ms, the flow up: the resends
///   that the 50 Mbit/s link loses again would be found lost after the receiver gave
///   their gaps up, had it waited for one try only: 46.1 Mbit/s of 55.9; 54.3 with both
///   tries waited for.
#[test]
fn a_near_lossy_link_holds_an_aggregate_flow_up_little() {
    let base = with(&scenario("aggregate.toml"), &["scenario.duration_s=20.0"]);
    for (sets, lossy, share) in [
        (
            [
                "links.0.delay_ms=30.0",
                "links.1.rate_mbps=2.0",
                "links.1.delay_ms=10.0",
                "flows.0.direction=\"down\"",
            ],
            "links.1.loss=0.02",
            0.9,
        ),
        (
            [
                "links.0.rate_mbps=50.0",
                "links.0.delay_ms=5.0",
                "links.1.delay_ms=5.0",
                "flows.0.direction=\"up\"",
            ],
            "links.0.loss=0.02",
            0.95,
        ),
    ] {
        let clean = run(&with(&base, &sets), Mode::Late).unwrap();
        let clean = flow(&clean, "bulk").goodput_mbps;
        let mut goodput = Vec::new();
        for seed in SEEDS {
            let seed = format!("scenario.seed={seed}");
            let r = run(&with(&with(&base, &sets), &[lossy, &seed]), Mode::Late).unwrap();
            goodput.push(flow(&r, "bulk").goodput_mbps);
        }
        let mean = goodput.iter().sum::<f64>() / goodput.len() as f64;
        assert!(
            mean >= share * clean,
            "{sets:?} {lossy}: {goodput:?} Mbit/s (mean {mean}), without the loss {clean}"
        );
    }
}

/// The seeds a check over random draws is judged on.
const SEEDS: [u64; 4] = [1, 2, 3, 4];

/// A VoIP-like EF flow, redundant by rule, over two links with 1 % loss and a 10 s remote
/// cut: no packet lost (the bound is 0.05 %), and no gap longer than the packet
/// spacing plus the links' one-way delay difference (a switch to the slower link's copy).
#[test]
fn redundant_voip_loses_nothing_through_loss_and_a_cut() {
    let s = scenario("redundant.toml");
    let r = run(&s, Mode::Late).unwrap();
    let v = flow(&r, "voip");
    assert!((v.lost as f64) < 0.0005 * v.sent as f64, "{v:?}");
    let spacing = 20.0;
    let delay_spread = 25.0 - 10.0;
    assert!(v.max_gap_ms <= spacing + delay_spread + 1.0, "{v:?}");
    // Without the rule the same flow loses packets to the 1 % loss.
    let m = run(&with(&s, &["late.rules=[]"]), Mode::Late).unwrap();
    assert!(flow(&m, "voip").lost > v.lost, "{:?}", flow(&m, "voip"));
    // With delays closer than the packet spacing allows, the 30 ms holds.
    let close = run(&with(&s, &["links.1.delay_ms=18.0"]), Mode::Late).unwrap();
    let c = flow(&close, "voip");
    assert!(c.max_gap_ms <= 30.0 && c.lost == 0, "{c:?}");
}

/// The same flow with playout alignment at the receiver: each first copy waits for the
/// copies on the slower link, so neither a lost copy nor the cut leaves a gap longer than
/// a quarter over the spacing (the 30 ms), at the cost of the delay difference.
/// Checked on delay mixes and cut patterns the scenario was not written for: the slower
/// link cut instead, a faster flow, the cut link the slower one. A packet whose copy on
/// the other link is lost while the cut is not yet detected is lost, and leaves its gap.
#[test]
fn aligned_redundant_voip_has_no_gap_over_a_quarter_of_its_spacing() {
    let s = with(&scenario("redundant.toml"), &["late.redundant_align=true"]);
    // Beyond the scenario, the second link loses nothing at random: with 1 % on each a
    // packet in 10,000 loses both copies and comes late by reinjection (a gap alignment
    // cannot help; about one run in four of 3000 packets has one).
    let one_lossy = "links.1.loss=0.0";
    for (sets, spacing, slow, fast) in [
        (vec![], 20.0, 25.0, 10.0),
        (vec!["links.1.delay_ms=40.0", one_lossy], 20.0, 40.0, 10.0),
        (vec!["flows.0.rate_mbps=0.16", one_lossy], 10.0, 25.0, 10.0),
        (
            vec!["links.0.delay_ms=30.0", "scenario.seed=3", one_lossy],
            20.0,
            30.0,
            25.0,
        ),
    ] {
        let r = run(&with(&s, &sets), Mode::Late).unwrap();
        let v = flow(&r, "voip");
        // A packet lost on both links (the one cut, the other's random loss) is a gap
        // of its own.
        assert!((v.lost as f64) < 0.0005 * v.sent as f64, "{sets:?}: {v:?}");
        let bound = 1.25 * spacing * (v.lost + 1) as f64 + 0.5;
        assert!(v.max_gap_ms <= bound, "{sets:?}: {v:?}");
        // The price: the slower link's delay, not more.
        assert!(
            v.latency_ms.p50 > slow - 0.5 && v.latency_ms.p99 < slow + 1.0,
            "{sets:?}: {v:?}"
        );
        let plain = run(
            &with(&with(&s, &sets), &["late.redundant_align=false"]),
            Mode::Late,
        )
        .unwrap();
        let p = flow(&plain, "voip");
        assert!(p.latency_ms.p50 < fast + 1.0, "{sets:?}: {p:?}");
    }
    // The slower link cut: the gaps are the packets the fast link lost meanwhile.
    let r = run(
        &with(
            &s,
            &["links.0.outages=[]", "links.1.outages=[[20.0, 30.0]]"],
        ),
        Mode::Late,
    )
    .unwrap();
    let v = flow(&r, "voip");
    assert!((v.lost as f64) < 0.0005 * v.sent as f64, "{v:?}");
    assert!(v.max_gap_ms <= 25.0 * (v.lost + 1) as f64 + 0.5, "{v:?}");
}

/// Two copies over two links lose a packet to two random losses about once in 10,000
/// (1 % each): its gap is then twice the spacing, or a reinjection's round trip (with two
/// copies, seeds 3, 4 and 6 below have gaps of 30-60 ms). A third copy goes on the best
/// link again, and the gap bound holds through the random loss and the cut. A packet
/// whose copies died with the cut link while the other link lost its copy is still lost:
/// 1 cut of 100 (seeds 1-100, `docs/RESULTS.md` 8.2); the next test has four copies.
#[test]
fn three_copies_over_two_links_leave_no_gap_to_double_losses() {
    let s = with(
        &scenario("redundant.toml"),
        &["late.redundant_align=true", "late.redundant_links=3"],
    );
    for seed in 1..=8 {
        let r = run(&with(&s, &[&format!("scenario.seed={seed}")]), Mode::Late).unwrap();
        let v = flow(&r, "voip");
        assert_eq!(v.lost, 0, "seed {seed}: {v:?}");
        assert!(v.max_gap_ms <= 25.5, "seed {seed}: {v:?}");
        let e = r.engine.as_ref().expect("engine counters");
        assert_eq!(e.reorder_gaps_skipped, 0, "seed {seed}");
    }
}

/// Four copies over two links go two on each (copies beyond the links spread over them
/// again, round by round), so whichever link dies, the packets sent before its death was
/// noticed still have two copies on the other: the cut and the random loss together lose
/// nothing and leave no gap. With three copies (two on the fast link) seed 96 loses a
/// packet at the cut, a 60 ms gap. Checked on two other mixes: the slower link cut, and
/// a slow link of 40 ms.
#[test]
fn four_copies_over_two_links_leave_no_gap_when_a_cut_meets_a_loss() {
    let s = with(
        &scenario("redundant.toml"),
        &["late.redundant_align=true", "late.redundant_links=4"],
    );
    let three = with(&s, &["late.redundant_links=3", "scenario.seed=96"]);
    let r = run(&three, Mode::Late).unwrap();
    assert!(flow(&r, "voip").max_gap_ms > 30.0, "three copies, seed 96");
    let mixes: [(&[&str], std::ops::RangeInclusive<u64>); 3] = [
        (&[], 89..=96),
        (
            &["links.0.outages=[]", "links.1.outages=[[20.0, 30.0]]"],
            1..=4,
        ),
        (&["links.1.delay_ms=40.0"], 1..=4),
    ];
    for (mix, seeds) in mixes {
        for seed in seeds {
            let seed_set = format!("scenario.seed={seed}");
            let mut sets = mix.to_vec();
            sets.push(&seed_set);
            let r = run(&with(&s, &sets), Mode::Late).unwrap();
            let v = flow(&r, "voip");
            assert_eq!(v.lost, 0, "{sets:?}: {v:?}");
            assert!(v.max_gap_ms <= 25.5, "{sets:?}: {v:?}");
            let data: u64 = r.links.iter().map(|l| l.data_sent).sum();
            for l in &r.links {
                // Two copies of each packet on each link while both are up.
                assert!(
                    l.data_sent as f64 > 0.3 * data as f64,
                    "{sets:?}: {} carried {} of {data}",
                    l.name,
                    l.data_sent
                );
            }
        }
    }
}

/// The bonding slides' overflow over links whose bottlenecks the sender cannot see (the
/// downlinks): rate control keeps the primary's queue short, so the primary never loses
/// anything itself; its overflow shows as the overflow flows' packets that waited too
/// long above the binding point, and that must move the secondary's weight as loss
/// would. Without that the secondary stayed unused and 5.8 % of the packets were lost.
#[test]
fn overflow_spills_onto_the_secondary_when_rate_control_keeps_the_primary_short() {
    let s = with(
        &scenario("overflow.toml"),
        &["late.overflow.k=0.5", "late.overflow.t_dwd_ms=250.0"],
    );
    let r = run(&s, Mode::Late).unwrap();
    let sent: u64 = r.flows.iter().map(|f| f.sent).sum();
    let lost: u64 = r.flows.iter().map(|f| f.lost).sum();
    let data: u64 = r.links.iter().map(|l| l.data_sent).sum();
    let lte_share = r.links[1].data_sent as f64 / data as f64;
    // The peak (40 Mb/s for 10 s on top of 40) is 10 % of the bytes above the primary.
    assert!(lte_share > 0.05 && lte_share < 0.2, "LTE share {lte_share}");
    assert!((lost as f64) < 0.01 * sent as f64, "lost {lost} of {sent}");
    assert!(flow(&r, "base").lost < flow(&r, "peak").lost + 10);
}

/// The slides' TCP cross-traffic case: a plain TCP download shares the primary with the
/// tunnel's overflow flow. Rate control sees the primary's queue grow and gives the TCP
/// flow the larger part of the line (with only the loss-driven weights it got the spare
/// capacity: 16-21 of 64 Mb/s); the tunnel's flow moves to the secondary without
/// losing more than 1 %, and comes back to the primary once the TCP flow is gone, so it
/// is not shifted for good whatever T_dwd. Checked on a second link mix as well.
#[test]
fn overflow_yields_the_primary_to_tcp_cross_traffic_and_takes_it_back() {
    let base = scenario("overflow-tcp.toml");
    let mixes: [(&[&str], f64); 2] = [
        (&[], 64.0),
        (
            &[
                "links.0.rate_mbps=30",
                "flows.0.rate_mbps=20",
                "links.1.delay_ms=30",
            ],
            30.0,
        ),
    ];
    for (mix, primary_mbps) in mixes {
        for t_dwd in ["50.0", "1000.0"] {
            // The flows over three seeds: the UDP flow's loss is judged on all its
            // packets (single runs range over 0.05-1.1 %), the TCP flow's goodput on its
            // mean (single runs range over 17-52 Mbit/s on the 64 Mbit/s mix, under 35 in
            // 15 of 96 when the simulated TCP sits out retransmission timeouts: `latebind
            // sim scenarios/overflow-tcp.toml --set late.overflow.t_dwd_ms=T --set
            // scenario.seed=S`, docs/RESULTS.md 11), the shares on each run.
            let seeds = &SEEDS[..3];
            let (mut udp_sent, mut udp_lost, mut tcp_goodput) = (0, 0, 0.0);
            for seed in seeds {
                let mut sets = mix.to_vec();
                let t = format!("late.overflow.t_dwd_ms={t_dwd}");
                let seed = format!("scenario.seed={seed}");
                sets.push(&t);
                sets.push(&seed);
                let r = run(&with(&base, &sets), Mode::Late).unwrap();
                let (udp, tcp) = (flow(&r, "udp"), flow(&r, "tcp"));
                let what = format!("{sets:?}: udp {udp:?}, tcp {tcp:?}");
                tcp_goodput += tcp.goodput_mbps / seeds.len() as f64;
                udp_sent += udp.sent;
                udp_lost += udp.lost;
                for l in &r.links {
                    assert_eq!(l.data_sent_per_s.len(), 31, "30 s and the drain");
                    assert_eq!(l.data_sent_per_s.iter().sum::<u64>(), l.data_sent);
                }
                // The share of the tunnel's packets on the secondary, seconds [from, to).
                let share = |from: usize, to: usize| {
                    let on = |l: usize| r.links[l].data_sent_per_s[from..to].iter().sum::<u64>();
                    on(1) as f64 / (on(0) + on(1)).max(1) as f64
                };
                assert!(
                    share(1, 5) < 0.05,
                    "{what}: before the TCP flow: {}",
                    share(1, 5)
                );
                // Most of the tunnel's packets on the secondary while the TCP flow runs:
                // 0.50-0.96 over these runs (the lowest where the TCP flow sat out
                // retransmission timeouts and left the primary part of the time).
                assert!(
                    share(10, 24) > 0.45,
                    "{what}: beside the TCP flow: {}",
                    share(10, 24)
                );
                assert!(
                    share(27, 30) < 0.05,
                    "{what}: after the TCP flow: {}",
                    share(27, 30)
                );
            }
            assert!(
                (udp_lost as f64) < 0.01 * udp_sent as f64,
                "{mix:?} t_dwd {t_dwd}: UDP lost {udp_lost} of {udp_sent}"
            );
            assert!(
                tcp_goodput > 0.5 * primary_mbps,
                "{mix:?} t_dwd {t_dwd}: TCP got {tcp_goodput} Mbit/s on average"
            );
        }
    }
}

/// One TCP upload over three unequal links, the third a cellular trace (aggregate-3.toml:
/// 10 Mb/s and 5 Mb/s fixed, the Verizon LTE uplink), and the same with the TMobile LTE
/// trace it was not written for: at least 83 % of the links' sum, and no gap of the
/// download given up (issue 5 asks 90 %; measured 85.3 % and 84.6 % with the tunnel's
/// datagrams counted whole on the links, 87.6 % and 89.8 % before). Three things kept it at
/// 70 % and 72 %: gaps given up while the LTE link, in a slow second, still carried their
/// packet (84 % and 83 %, with 4 and 10 gaps given up); the aggregate policy
/// judged the idle trace link by an interface rate measured from keepalives that waited
/// for its next delivery opportunity (0.03 Mb/s), so it carried nothing for the first
/// 10 s; and every pause of the trace expired its reinjection timer and moved its window
/// onto the fixed links as duplicates (4390 of them, a tenth of the capacity).
#[test]
fn aggregate_gets_most_of_three_links_one_a_cellular_trace() {
    let s = scenario("aggregate-3.toml");
    for trace in ["Verizon-LTE-short", "TMobile-LTE-short"] {
        let up = format!("links.2.trace_up=\"../../shared/traces/{trace}.up\"");
        let down = format!("links.2.trace_down=\"../../shared/traces/{trace}.down\"");
        let r = run(&with(&s, &[up.as_str(), down.as_str()]), Mode::Late).unwrap();
        let sum = 15.0 + trace_capacity(&format!("{trace}.up"), 30.0) * 8e-6;
        let g = flow(&r, "bulk").goodput_mbps;
        assert!(g >= 0.83 * sum, "{trace}: {g} Mbit/s of {sum:.2}");
        let e = r.engine.as_ref().expect("engine counters");
        assert!(e.duplicate_data < 1000, "{trace}: {e:?}");
        assert_eq!(e.reorder_gaps_skipped, 0, "{trace}: {e:?}");
        // The fixed links are kept full (what each delivered towards the server, against
        // its rate over the 30 s; 0.94-0.998); the rest of the target is the trace
        // link's share.
        for (name, mbps) in [("a", 10.0), ("b", 5.0)] {
            let used = link(&r, name).bytes_delivered[0] as f64 * 8e-6 / 30.0 / mbps;
            assert!(
                (0.92..=1.0).contains(&used),
                "{trace}: link {name} used {used:.3}"
            );
        }
    }
}

/// One TCP download over two links whose bottlenecks are in the network (the server
/// sees neither; rate control measures each), at delays of the slower link the scenario
/// was not written for: at least 85 % of the links' sum and no stall of a second. CoDel
/// used to drop twice within one of the download's round trips when the queue above the
/// binding point was long (a slow start's overshoot), and the simulator's TCP (no SACK)
/// repairs a second loss in a window only by its 1 s timeout: 15.3 Mb/s at 30 ms, its
/// longest gap 1021 ms. CoDel now waits out a TCP flow's answer to a drop.
#[test]
fn aggregate_download_through_hidden_bottlenecks_does_not_stall() {
    let base = with(
        &scenario("aggregate.toml"),
        &[
            "flows.0.direction=\"down\"",
            "links.0.uplink_bottleneck=\"network\"",
            "links.1.uplink_bottleneck=\"network\"",
        ],
    );
    for delay in ["25.0", "30.0", "50.0"] {
        let d = format!("links.1.delay_ms={delay}");
        let r = run(&with(&base, &[d.as_str()]), Mode::Late).unwrap();
        let bulk = flow(&r, "bulk");
        assert!(bulk.goodput_mbps >= 0.85 * 20.0, "{delay} ms: {bulk:?}");
        assert!(bulk.max_gap_ms < 600.0, "{delay} ms: {bulk:?}");
    }
}

/// Under `min-rtt` (the default before `auto`), a download over a DSL line that loses 0.5 % of
/// its packets (asymmetric.toml, the LTE link beside it idle): the tunnel re-sends the
/// TCP flow's losses on the other link, so the flow does not take them for congestion,
/// and the call that shares the line's uplink does not wait at the receiver for a link
/// its packets did not take. Three seeds. Measured: 11.2-11.6 Mb/s, the call's p99
/// 27-30 ms; before, 4.2-5.4 Mb/s and 26-237 ms.
#[test]
fn a_min_rtt_download_over_a_lossy_link_keeps_its_rate_and_the_call_its_latency() {
    let base = with(&scenario("asymmetric.toml"), &["late.policy=\"min-rtt\""]);
    let (mut download, mut call) = (0.0, 0.0);
    for seed in ["scenario.seed=1", "scenario.seed=2", "scenario.seed=3"] {
        let r = run(&with(&base, &[seed]), Mode::Late).unwrap();
        download += flow(&r, "download").goodput_mbps / 3.0;
        call += flow(&r, "voice").latency_ms.p99 / 3.0;
        let e = r.engine.as_ref().expect("engine counters");
        assert!(e.reinjected_lost > 100, "{seed}: {e:?}");
    }
    assert!(download > 10.0, "{download} Mb/s");
    assert!(call < 50.0, "{call} ms");
}

/// One link losing 1 % at random (`lossy-link.toml`, 20 Mb/s, 10 and 40 ms one way):
/// alone, it is sent its own losses again, so the download does not take them for
/// congestion; and after a handoff leaves the same kind of link alone
/// (`handoff-lossy.toml`). Measured (docs/RESULTS.md 22): 10.96 and 5.26 Mb/s over the
/// lone link, 3.12 and 1.46 before (the plain path 3.45 and 1.04); 7.29 Mb/s through the
/// handoff, 5.48 before. The probe beside the download stays within 10 ms of its path's
/// one-way delay at p99 (19.0 and 50.9 ms).
#[test]
fn a_lone_lossy_link_keeps_a_download_from_taking_its_losses_for_congestion() {
    let base = scenario("lossy-link.toml");
    for delay in ["10.0", "40.0"] {
        let s = with(&base, &[&format!("links.0.delay_ms={delay}")]);
        let late = run(&s, Mode::Late).unwrap();
        let plain = run(&s, Mode::Early).unwrap();
        let (bulk, plain_bulk) = (flow(&late, "bulk"), flow(&plain, "bulk"));
        assert!(
            bulk.goodput_mbps > 2.5 * plain_bulk.goodput_mbps,
            "{delay} ms: {bulk:?} against the plain path's {plain_bulk:?}"
        );
        let e = late.engine.as_ref().expect("engine counters");
        assert!(e.reinjected_lost > 50, "{delay} ms: {e:?}");
        let d: f64 = delay.parse().unwrap();
        let probe = flow(&late, "probe");
        assert!(probe.latency_ms.p99 < d + 12.0, "{delay} ms: {probe:?}");
    }
    let r = run(&scenario("handoff-lossy.toml"), Mode::Late).unwrap();
    let bulk = flow(&r, "bulk");
    assert!(bulk.goodput_mbps > 6.5, "{bulk:?}");
}

/// An upload over a fast link far away beside a slow one near, with a probe whose
/// packets wait for the slow link's next slot (`slow-near-upload.toml`): the flow
/// scheduler passes over the waiting probe, so the upload keeps the fast link busy.
/// Measured (docs/RESULTS.md 23): 17.14 Mb/s with `aggregate`, 14.73 with `min-rtt`;
/// 7.49 and 7.14 before, when the probe's wait held up every flow. The fast link alone:
/// 15.1.
#[test]
fn a_flow_waiting_for_a_slow_link_does_not_hold_up_an_upload_on_a_fast_one() {
    let base = scenario("slow-near-upload.toml");
    for (policy, least) in [("aggregate", 15.0), ("min-rtt", 12.0)] {
        let r = run(
            &with(&base, &[&format!("late.policy=\"{policy}\"")]),
            Mode::Late,
        )
        .unwrap();
        let bulk = flow(&r, "bulk");
        assert!(bulk.goodput_mbps > least, "{policy}: {bulk:?}");
    }
}

/// A bulk TCP flow and a probe (100 bytes every 20 ms from 1 s) in `direction` over
/// `links` (Mbit/s, ms one way, random loss, jitter ms; 1000-packet FIFOs), under
/// `policy`, for `secs` at seed `seed`.
fn mix(
    links: &[(f64, f64, f64, f64)],
    direction: &str,
    policy: &str,
    secs: f64,
    seed: u64,
) -> String {
    let mut s = format!("[scenario]\nname = \"mix\"\nduration_s = {secs:?}\nseed = {seed}\n");
    for (i, (rate, delay, loss, jitter)) in links.iter().enumerate() {
        s += &format!(
            "[[links]]\nname = \"l{i}\"\nrate_mbps = {rate:?}\ndelay_ms = {delay:?}\n\
             queue_packets = 1000\nloss = {loss:?}\njitter_ms = {jitter:?}\n"
        );
    }
    s += &format!(
        "[[flows]]\nname = \"bulk\"\nkind = \"tcp-bulk\"\ndirection = \"{direction}\"\n\
         [[flows]]\nname = \"probe\"\nkind = \"udp-cbr\"\ndirection = \"{direction}\"\n\
         rate_mbps = 0.04\npacket_bytes = 100\nstart_s = 1.0\n[late]\npolicy = \"{policy}\"\n"
    );
    s
}

/// `auto` binds a TCP transfer as `aggregate` while two links can share it, and the probe
/// (a datagram flow) as `min-rtt`: on link mixes where min-rtt keeps the transfer on the
/// link that delivers soonest, the transfer gets much more, and the probe waits no
/// longer. On one link `auto` is `min-rtt`. (`scripts/policy-sweep.py random --policy
/// auto` against `--policy min-rtt`, `docs/RESULTS.md` 8.6: the bulk flow's geometric
/// mean 1.43 and 1.39 times min-rtt's over two draws of 40 mixes.)
#[test]
fn auto_spreads_a_tcp_transfer_and_leaves_a_datagram_flow_where_it_arrives_soonest() {
    for (links, direction) in [
        (
            &[(53.35, 34.7, 0.0, 1.0), (9.99, 4.7, 0.0, 0.0)][..],
            "down",
        ),
        (
            &[(15.05, 1.8, 0.0, 0.0), (21.92, 18.0, 0.0, 0.0)][..],
            "down",
        ),
        (
            &[(38.47, 11.5, 0.0, 0.0), (55.82, 19.5, 0.01, 0.0)][..],
            "up",
        ),
        (&[(21.7, 1.6, 0.0, 0.0), (8.55, 37.3, 0.0, 0.0)][..], "up"),
    ] {
        let r = |policy| {
            let s = inline_scenario(&mix(links, direction, policy, 15.0, 1));
            run(&s, Mode::Late).unwrap()
        };
        let (auto, min_rtt) = (r("auto"), r("min-rtt"));
        let what = format!("{links:?} {direction}");
        let (ga, gm) = (
            flow(&auto, "bulk").goodput_mbps,
            flow(&min_rtt, "bulk").goodput_mbps,
        );
        assert!(ga >= 1.3 * gm, "{what}: auto {ga} Mbit/s, min-rtt {gm}");
        let (pa, pm) = (
            &flow(&auto, "probe").latency_ms,
            &flow(&min_rtt, "probe").latency_ms,
        );
        assert!(
            pa.p50 <= pm.p50 + 2.0,
            "{what}: probe p50 {} against {}",
            pa.p50,
            pm.p50
        );
    }
    // One link: the same run as min-rtt's.
    let one = &[(20.0, 20.0, 0.001, 1.0)][..];
    let r = |policy| {
        run(
            &inline_scenario(&mix(one, "down", policy, 10.0, 1)),
            Mode::Late,
        )
        .unwrap()
    };
    let (auto, min_rtt) = (r("auto"), r("min-rtt"));
    for name in ["bulk", "probe"] {
        assert_eq!(
            flow(&auto, name).delivered,
            flow(&min_rtt, name).delivered,
            "{name}"
        );
        assert_eq!(
            flow(&auto, name).latency_ms.p99,
            flow(&min_rtt, name).latency_ms.p99,
            "{name}"
        );
    }
}

/// `auto` is the default: a scenario (or a daemon's configuration) that names no policy
/// spreads a TCP download over a slow link 2 ms away and a fast one 20 ms away, where
/// `min-rtt` (the default before, `docs/RESULTS.md` 24) kept it on the slow link: 12.7 of
/// the links' 28 Mbit/s. The probe beside it still goes where it arrives soonest.
#[test]
fn the_default_policy_spreads_a_transfer_where_min_rtt_keeps_it_on_a_slow_near_link() {
    let links = &[(8.0, 2.0, 0.0, 0.0), (20.0, 20.0, 0.0, 0.0)][..];
    let text = mix(links, "down", "auto", 10.0, 1);
    let unnamed = text.replace("policy = \"auto\"\n", "");
    assert!(!unnamed.contains("policy"), "{unnamed}");
    let (default, auto, min_rtt) = (
        run(&inline_scenario(&unnamed), Mode::Late).unwrap(),
        run(&inline_scenario(&text), Mode::Late).unwrap(),
        run(
            &inline_scenario(&mix(links, "down", "min-rtt", 10.0, 1)),
            Mode::Late,
        )
        .unwrap(),
    );
    for name in ["bulk", "probe"] {
        assert_eq!(
            flow(&default, name).delivered,
            flow(&auto, name).delivered,
            "{name}: the default is auto"
        );
    }
    let (g, gm) = (
        flow(&default, "bulk").goodput_mbps,
        flow(&min_rtt, "bulk").goodput_mbps,
    );
    assert!(
        g >= 0.8 * 28.0,
        "the default: {g} Mbit/s of 28 (min-rtt {gm})"
    );
    assert!(g >= 1.5 * gm, "the default {g} Mbit/s, min-rtt {gm}");
    let (p, pm) = (
        flow(&default, "probe").latency_ms.p99,
        flow(&min_rtt, "probe").latency_ms.p99,
    );
    assert!(p <= pm + 5.0, "probe p99 {p} ms, min-rtt {pm}");
}

/// `auto` spreads a QUIC transfer as it does a TCP one: the simulator's stand-in for QUIC
/// (`quic-bulk`, a reliable congestion-controlled transfer in UDP datagrams to port 443,
/// which the tunnel classifies as QUIC) gets the links' sum where `min-rtt` kept it on a
/// slow near link. Measured: 25.2 against 11.5 Mbit/s beside 8 Mbit/s 2 ms away; 50.5
/// against 42.5 beside 1.54 Mbit/s 2.2 ms away, where `min-rtt` spills onto the far
/// lossy link and re-sends its losses as a TCP flow's (2.8 before it did,
/// `docs/RESULTS.md` 25, 27): there `auto` need only be ahead.
#[test]
fn auto_spreads_a_quic_transfer_as_it_does_a_tcp_one() {
    for (links, floor, over_min_rtt) in [
        (
            &[(8.0, 2.0, 0.0, 0.0), (20.0, 20.0, 0.0, 0.0)][..],
            0.8 * 28.0,
            1.5,
        ),
        (
            &[(1.54, 2.2, 0.0, 0.0), (58.39, 17.6, 0.01, 0.0)][..],
            0.7 * 58.39,
            1.0,
        ),
    ] {
        let r = |policy| {
            let text = mix(links, "down", policy, 10.0, 1)
                .replace("kind = \"tcp-bulk\"", "kind = \"quic-bulk\"");
            assert!(text.contains("quic-bulk"));
            run(&inline_scenario(&text), Mode::Late).unwrap()
        };
        let (auto, min_rtt) = (r("auto"), r("min-rtt"));
        let (g, gm) = (
            flow(&auto, "bulk").goodput_mbps,
            flow(&min_rtt, "bulk").goodput_mbps,
        );
        assert!(g >= floor, "{links:?}: auto {g} Mbit/s (min-rtt {gm})");
        assert!(
            g > over_min_rtt * gm,
            "{links:?}: auto {g} Mbit/s, min-rtt {gm}"
        );
    }
}

/// A call beside a transfer spread over a slow lossy link: its own losses (0.1 % on the
/// fast link it uses) are given up as soon as the fast link delivers past them, not
/// after the hold time the slow link's lag sets (`docs/protocol.md` 5.2). Before, each
/// loss held the call's next packets for up to 300 ms: p99 77.8 and 65.7 ms at seeds 3
/// and 6, 11.2 and 11.1 since. Every seed of 1-8 at which the call lost a packet counts
/// (at least two must: which seeds those are moves with anything that changes a run).
#[test]
fn a_call_beside_a_spread_transfer_is_not_held_at_its_own_losses() {
    let links = &[(0.83, 71.8, 0.01, 0.0), (5.37, 5.9, 0.001, 1.0)][..];
    let mut tested = 0;
    for seed in 1..=8 {
        let r = run(
            &inline_scenario(&mix(links, "up", "auto", 15.0, seed)),
            Mode::Late,
        )
        .unwrap();
        let probe = flow(&r, "probe");
        if probe.lost == 0 {
            continue;
        }
        tested += 1;
        assert!(
            probe.latency_ms.p99 < 20.0,
            "seed {seed}: probe p99 {} ms",
            probe.latency_ms.p99
        );
        assert!(
            r.engine.as_ref().unwrap().reorder_gaps_lost >= 1,
            "seed {seed}"
        );
    }
    assert!(tested >= 2, "the call lost a packet at {tested} seeds of 8");
}

/// With `aggregate_arrival_order`, a link far slower and farther than the other (0.75
/// Mbit/s at 80 ms beside 57 at 11 ms) does not drag a spread transfer below the fast
/// link alone: the slow link is sent the packets that arrive in order there
/// (earliest-arrival scheduling), not the head of the flow, which would hold every
/// packet of the fast link for its lag at the receiver (without it: 45.2 Mbit/s against
/// min-rtt's 52.1; `docs/RESULTS.md` 8.7).
#[test]
fn in_arrival_order_a_slow_far_link_does_not_drag_a_spread_transfer_below_the_fast_link() {
    let links = &[(0.75, 79.9, 0.0, 1.0), (57.03, 11.1, 0.0, 0.0)][..];
    let goodput = |policy, in_order: bool| {
        let text = mix(links, "down", policy, 15.0, 1)
            + &format!("aggregate_arrival_order = {in_order}\n");
        let r = run(&inline_scenario(&text), Mode::Late).unwrap();
        flow(&r, "bulk").goodput_mbps
    };
    let alone = goodput("min-rtt", false);
    let (head, in_order) = (goodput("auto", false), goodput("auto", true));
    assert!(
        in_order >= 0.98 * alone,
        "auto in arrival order {in_order:.2} Mbit/s, min-rtt {alone:.2}"
    );
    assert!(
        head < 0.95 * alone,
        "auto from the head {head:.2} Mbit/s, min-rtt {alone:.2}: the test shows nothing"
    );
}

/// With `aggregate_arrival_order`, a download over 10 Mbit/s beside a cellular trace
/// (TMobile LTE, `bufferbloat-2links.toml`) gets as much as from the head around the
/// delays where the trace's slumps used to stall it (`docs/RESULTS.md` 8.7), and at those
/// delays it does not stall. Two things did: the packets of the trace link that its timer sent again went on the fixed link ahead
/// of the packets they come after in the flow (at 40 ms: 15.5 against 19.4 Mbit/s), and
/// the trace link, which had taken packets from behind the head, was later given the
/// head, so that packets ahead in the flow went behind them on the same link, bound
/// after them, and the receiver gave up waiting for them (at 20 ms: 18.1 against 20.2;
/// the simulator's TCP then waits out its 1 s timeout).
#[test]
fn in_arrival_order_a_trace_links_slumps_do_not_stall_a_spread_download() {
    let s = with(
        &scenario("bufferbloat-2links.toml"),
        &[
            "links.1.trace_down=\"../../shared/traces/TMobile-LTE-short.down\"",
            "links.1.trace_up=\"../../shared/traces/TMobile-LTE-short.up\"",
        ],
    );
    // Around each delay, five runs 2 ms apart: a single run's goodput moves by a few
    // per cent either way with the delay (which of the trace's slumps meet which of the
    // flow's packets), a stall by a tenth.
    for delays in [[16, 18, 20, 22, 24], [36, 38, 40, 42, 44]] {
        let goodput = |delay: u32, in_order: &str| {
            let r = run(
                &with(
                    &s,
                    &[
                        format!("links.1.delay_ms={delay}").as_str(),
                        format!("late.aggregate_arrival_order={in_order}").as_str(),
                    ],
                ),
                Mode::Late,
            )
            .unwrap();
            (flow(&r, "bulk").goodput_mbps, flow(&r, "bulk").max_gap_ms)
        };
        let (mut on_sum, mut off_sum) = (0.0, 0.0);
        for delay in delays {
            let (on, off) = (goodput(delay, "true"), goodput(delay, "false"));
            // At the delays where it stalled (elsewhere the simulator's TCP meets a 1 s
            // timeout now and then, in either order: at 36 ms from the head, at 44 in
            // arrival order).
            assert!(
                on.1 < 500.0 || delay % 20 != 0,
                "{delay} ms: in arrival order {on:?} (Mbit/s, longest gap ms)"
            );
            on_sum += on.0;
            off_sum += off.0;
        }
        assert!(
            on_sum >= 0.97 * off_sum,
            "{delays:?} ms: in arrival order {on_sum:.2} Mbit/s (sum), from the head {off_sum:.2}"
        );
    }
}
