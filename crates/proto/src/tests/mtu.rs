//! A link's largest datagram (`LinkConfig::max_datagram`): an acknowledgement rides on a
//! full-size data packet only as far as it fits, so that no datagram outgrows the path
//! (an IPv6 path's header is 20 bytes longer than the IPv4 one the TUN MTU may have been
//! set for; a lossy link's ACK carries up to 32 ranges, 268 bytes).

use super::harness::{FlowSpec, LinkSpec, PairBuilder, Side, acks_in, at_ms, ms};
use core::time::Duration;

use crate::LinkConfig;

/// The client's largest datagram: a 1500-byte path over IPv4, less the UDP header and the
/// AEAD tag the daemon adds.
const MAX: usize = 1500 - 28 - 16;
/// UDP payload of a full-size inner packet: 1400 bytes with its IPv4 and UDP headers,
/// which leaves the room `latebind_daemon::overhead` keeps for an ACK (29 bytes).
const FULL: usize = 1400 - 28;

/// A client uploading full-size packets while the server's datagrams to it are lost one
/// in three: the client's acknowledgements of that link carry many ranges.
fn run(max_datagram: Option<usize>) -> (usize, usize, usize, u64, u64) {
    let link = LinkSpec {
        config: LinkConfig {
            max_datagram,
            ..LinkConfig::default()
        },
        ..LinkSpec::new(ms(10)).rate_bps(20e6)
    };
    let mut p = PairBuilder::new()
        .link(link)
        .config(|c| c.rate_control = false)
        .drop_fn(Box::new(|d| d.from == Side::Server && d.index % 3 == 1))
        .build();
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(5000, FULL),
        1500,
        at_ms(0),
        ms(1),
    );
    p.send_stream(
        Side::Server,
        &FlowSpec::bulk(6000, 200),
        1500,
        at_ms(0),
        ms(1),
    );
    p.drive_until(at_ms(2500));
    let client: Vec<_> = p.data_transmits(Side::Client).collect();
    let largest = client.iter().map(|t| t.bytes.len()).max().unwrap_or(0);
    let with_ack = client
        .iter()
        .filter(|t| !acks_in(&t.bytes).is_empty())
        .count();
    let delivered = p
        .delivered_inner(Side::Server)
        .iter()
        .filter(|i| i.src_port == 5000)
        .count();
    // What the server's loss detection declared lost: its drops (one in three), not
    // packets whose acknowledgement never came.
    let server_lost = p.server.stats().lost;
    (
        largest,
        with_ack,
        delivered,
        p.client.stats().acks_too_big_to_ride,
        server_lost,
    )
}

#[test]
fn an_ack_rides_on_a_full_size_data_packet_only_as_far_as_the_link_allows() {
    // Without a limit the ACK rides whole, and the datagram outgrows the path.
    let (largest, with_ack, _, _, _) = run(None);
    assert!(largest > MAX, "{largest}");
    assert!(with_ack > 100, "{with_ack}");
    // With it, no datagram does; ACKs still ride (with their newest ranges), and every
    // packet of the upload arrives.
    let (largest, with_ack, delivered, too_big, lost) = run(Some(MAX));
    assert!(largest <= MAX, "{largest}");
    assert!(with_ack > 100, "{with_ack}");
    assert_eq!(delivered, 1500);
    assert_eq!(too_big, 0);
    assert!(lost < 600, "{lost}");
}

#[test]
fn an_ack_that_cannot_ride_goes_alone() {
    // A limit that a full data packet fits exactly, without room for the smallest ACK:
    // the ACKs go in their own datagrams, and the server's data is still acknowledged
    // (nothing waits for them).
    let (_, _, _, _, lost_riding) = run(Some(MAX));
    let (largest, with_ack, delivered, too_big, lost) = run(Some(MAX - 29));
    assert!(largest <= MAX - 29, "{largest}");
    assert!(too_big > 100, "{too_big}");
    assert!(with_ack < 1500, "{with_ack}");
    assert_eq!(delivered, 1500);
    assert!(lost <= lost_riding + 20, "{lost} against {lost_riding}");
}

/// Link 1's path carries 100 bytes less than link 0's full-size datagrams.
const SMALL: usize = MAX - 100;

/// Two 10 Mb/s links, 10 ms each way, the client's link 0 carrying `MAX` and link 1
/// [`SMALL`]; rate control off, `policy` the default.
fn two_sizes(policy: crate::PolicyKind) -> PairBuilder {
    let spec = |max| LinkSpec {
        config: LinkConfig {
            max_datagram: Some(max),
            ..LinkConfig::default()
        },
        ..LinkSpec::new(ms(10)).rate_bps(10e6)
    };
    PairBuilder::new()
        .link(spec(MAX))
        .link(spec(SMALL))
        .config(move |c| {
            c.rate_control = false;
            c.default_policy = policy;
        })
}

/// A link whose path carries smaller datagrams than the others (a cellular or PPPoE
/// path beside a 1500-byte one): two 10 Mb/s links, link 0 carries `MAX`, link 1
/// [`SMALL`]. Under `policy` the client sends 1000 full-size packets of one flow (7.6 Mb/s;
/// DF clear: with DF set, the engine would answer them "packet too big")
/// and `count` of 200 bytes of another, one every `every` (at 200 µs, 10 Mb/s: the two
/// then ask more than one link takes).
fn two_paths(
    policy: crate::PolicyKind,
    link0_up: bool,
    (count, every): (u32, Duration),
) -> (Vec<(u16, usize, bool)>, usize, usize, u64) {
    let mut p = two_sizes(policy).build();
    if !link0_up {
        p.link_change(0, crate::LinkChange::Down);
    }
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(5000, FULL).fragmentable(),
        1000,
        at_ms(0),
        Duration::from_micros(1500),
    );
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(6000, 200),
        count,
        at_ms(0),
        every,
    );
    p.drive_until(at_ms(3000));
    let sent = p
        .data_transmits(Side::Client)
        .map(|t| (t.link.0, t.bytes.len(), t.bytes.len() > FULL))
        .collect();
    let delivered = |port| {
        p.delivered_inner(Side::Server)
            .iter()
            .filter(|i| i.src_port == port)
            .count()
    };
    (
        sent,
        delivered(5000),
        delivered(6000),
        p.client.stats().data_oversized,
    )
}

#[test]
fn a_packet_goes_only_on_links_that_carry_it_whole() {
    // Link 1's path is 100 bytes smaller: the full-size packets do not fit it.
    for policy in [
        crate::PolicyKind::MinRtt,
        crate::PolicyKind::Aggregate,
        crate::PolicyKind::Overflow,
        crate::PolicyKind::Redundant,
    ] {
        // A redundant flow sends each packet on both links: at the other policies' load,
        // link 0 would have to carry 17.6 Mb/s.
        let small_flow = match policy {
            crate::PolicyKind::Redundant => (2500, Duration::from_millis(1)),
            _ => (5000, Duration::from_micros(200)),
        };
        let (sent, big, little, oversized) = two_paths(policy, true, small_flow);
        let on = |link: u16, full: bool| {
            sent.iter()
                .filter(|&&(l, _, f)| l == link && f == full)
                .count()
        };
        let too_big = sent
            .iter()
            .filter(|&&(l, len, _)| l == 1 && len > SMALL)
            .count();
        assert_eq!(too_big, 0, "{policy:?}: {} full on link 1", on(1, true));
        assert_eq!(oversized, 0, "{policy:?}");
        // Every full-size packet went on link 0 and arrived; the overflow policy's
        // weighted round robin overfills its primary, whose queue drops a few (its
        // congestion signal).
        assert_eq!(on(0, true), big, "{policy:?}");
        assert!(
            big >= 950 && little as u32 >= small_flow.0 * 95 / 100,
            "{policy:?}: {big} {little}"
        );
        // The small link still carries what fits it.
        assert!(on(1, false) > 500, "{policy:?}: {}", on(1, false));
    }
}

#[test]
fn a_packet_no_link_carries_whole_still_leaves_and_is_counted() {
    // Only the small link is up: the full-size packets go on it (the kernel fragments
    // them), counted, rather than waiting for a link that may never come. (The two flows
    // ask more than the link takes: its queues drop some of both.)
    let (sent, big, little, oversized) = two_paths(
        crate::PolicyKind::MinRtt,
        false,
        (5000, Duration::from_micros(200)),
    );
    assert!(sent.iter().all(|&(l, _, _)| l == 1));
    assert!(big > 800 && little > 4000, "{big} {little}");
    assert_eq!(oversized, big as u64);
}

#[test]
fn the_peer_learns_what_a_link_carries_and_sends_it_only_what_fits() {
    // The client's link 1 takes 100 bytes less than a full-size datagram (its interface's
    // MTU); the server, which cannot see it, learns it from the client's LINK_MTU frames
    // and sends its full-size packets on link 0 only. The server has no limit of its own.
    let mut p = two_sizes(crate::PolicyKind::Aggregate).build();
    // The server learns its links from the client's first datagrams.
    p.drive_until(at_ms(100));
    p.send_stream(
        Side::Server,
        &FlowSpec::bulk(5000, FULL).fragmentable(),
        1000,
        at_ms(100),
        Duration::from_micros(1500),
    );
    p.send_stream(
        Side::Server,
        &FlowSpec::bulk(6000, 200),
        5000,
        at_ms(100),
        Duration::from_micros(200),
    );
    p.drive_until(at_ms(3000));
    let on_1: Vec<usize> = p
        .data_transmits(Side::Server)
        .filter(|t| t.link.0 == 1)
        .map(|t| t.bytes.len())
        .collect();
    assert!(
        on_1.iter().all(|&len| len <= SMALL),
        "{:?}",
        on_1.iter().max()
    );
    // Link 1 still carries what fits it. (How much: the server's interfaces are
    // unlimited in this harness, and the two links' equal delays leave the choice to
    // their RTT samples; 208-550 of the 5000 small packets.)
    assert!(on_1.len() > 100, "{}", on_1.len());
    assert_eq!(p.view(Side::Server, 1).max_datagram, SMALL);
    assert_eq!(p.server.stats().data_oversized, 0);
    let delivered = p.delivered_inner(Side::Client);
    assert!(delivered.iter().filter(|i| i.src_port == 5000).count() >= 950);
}

#[test]
fn a_lost_link_mtu_is_told_again_on_a_busy_link() {
    // The client's first LINK_MTU of link 1 is lost, and the link then carries the
    // client's upload without a pause (no keepalive PING would come): the loss of that
    // PING makes the link probed again at once.
    let mut dropped = false;
    let mut p = two_sizes(crate::PolicyKind::Aggregate)
        .drop_fn(Box::new(move |d| {
            let mtu = crate::wire::parse(d.bytes).is_ok_and(|(_, frames)| {
                frames
                    .flatten()
                    .any(|f| matches!(f, crate::wire::Frame::LinkMtu { link: 1, .. }))
            });
            if d.from == Side::Client && mtu && !dropped {
                dropped = true;
                return true;
            }
            false
        }))
        .build();
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(6000, 200),
        15000,
        at_ms(0),
        Duration::from_micros(200),
    );
    p.drive_until(at_ms(300));
    assert_eq!(p.view(Side::Server, 1).max_datagram, SMALL);
}

#[test]
fn a_packet_larger_than_a_link_carries_gets_packet_too_big_from_the_tunnel() {
    // The client's link 1 takes 100 bytes less than a full-size datagram. Full-size
    // packets with DF set, from either end, are dropped and answered with "fragmentation
    // needed" for what every link carries, at most 100 a second; smaller ones go through.
    let mut p = two_sizes(crate::PolicyKind::MinRtt).build();
    p.drive_until(at_ms(100));
    for side in [Side::Client, Side::Server] {
        let flow = FlowSpec::bulk(5000, FULL);
        let fits = FlowSpec::bulk(6000, SMALL - crate::wire::DATA_OVERHEAD - 28);
        for seq in 0..300 {
            let now = p.now;
            let too_big = p.endpoint(side).handle_tun_packet(now, &flow.packet(seq));
            assert!(
                matches!(too_big, Err(crate::TunError::TooBig { len: 1400, .. })),
                "{too_big:?}"
            );
            p.send_now(side, &fits.packet(seq));
        }
        let st = p.endpoint_ref(side).stats();
        assert_eq!(st.too_big_dropped, 300, "{side:?}");
        // The burst's worth, all at one instant.
        assert_eq!(st.too_big_signalled, 20, "{side:?}");
    }
    p.drive_until(at_ms(1000));
    for side in [Side::Client, Side::Server] {
        let (icmp, udp): (Vec<_>, Vec<_>) = p.delivered[side.idx()]
            .iter()
            .map(|d| &d.bytes)
            .partition(|b| b[9] == 1);
        assert_eq!(icmp.len(), 20, "{side:?}");
        let reply = icmp[0];
        // From the packet's destination to its source: type 3 code 4, next-hop MTU.
        assert_eq!(
            (&reply[12..16], &reply[16..20]),
            (&[10, 0, 0, 2][..], &[10, 0, 0, 1][..])
        );
        assert_eq!((reply[20], reply[21]), (3, 4));
        let mtu = u16::from_be_bytes([reply[26], reply[27]]);
        assert_eq!(usize::from(mtu), SMALL - crate::wire::DATA_OVERHEAD);
        // What fits went through (a burst of 300 at one instant: CoDel may take one).
        assert!(udp.len() >= 295, "{side:?}: {}", udp.len());
    }
}

#[test]
fn a_copy_on_the_one_link_left_is_not_taken_for_too_big() {
    // A redundant flow whose second link is down: its copies go on the one link left
    // again (one loss there does not lose the packet), and none counts as too big.
    let mut p = PairBuilder::new()
        .link(LinkSpec::new(ms(10)))
        .link(LinkSpec::new(ms(20)))
        .config(|c| c.default_policy = crate::PolicyKind::Redundant)
        .build();
    p.link_change(1, crate::LinkChange::Down);
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(7000, 200),
        50,
        at_ms(0),
        ms(20),
    );
    p.drive_until(at_ms(1500));
    let st = p.client.stats();
    assert_eq!(st.redundant_copies_too_big, 0);
    assert!(
        st.redundant_copies_sent >= 50,
        "{}",
        st.redundant_copies_sent
    );
    assert_eq!(p.delivered_inner(Side::Server).len(), 50);
}

/// Two links whose interfaces both carry `MAX`; link 1's path drops the client's
/// datagrams over `hole` bytes (a hop further on with a smaller MTU, and no ICMP).
fn black_hole(hole: usize) -> crate::tests::harness::Pair {
    let spec = LinkSpec {
        config: LinkConfig {
            max_datagram: Some(MAX),
            ..LinkConfig::default()
        },
        ..LinkSpec::new(ms(10)).rate_bps(10e6)
    };
    PairBuilder::new()
        .link(spec.clone())
        .link(spec)
        .config(|c| {
            c.rate_control = false;
            c.default_policy = crate::PolicyKind::Aggregate;
        })
        .drop_fn(Box::new(move |d| {
            d.from == Side::Client && d.link.0 == 1 && d.bytes.len() > hole
        }))
        .build()
}

#[test]
fn a_path_that_drops_large_datagrams_is_found_by_probing() {
    // Idle links: the probes alone find link 1's size, to within 16 bytes, in a few
    // keepalive rounds; link 0 keeps its full size.
    for hole in [1400, 1300, 1230] {
        let mut p = black_hole(hole);
        // When the size is found (printed with --nocapture; docs/RESULTS.md 12 gives it).
        let within = |f: usize| f <= hole && f + 16 >= hole;
        let mut t = 0;
        while t < 15_000 && !within(p.view(Side::Client, 1).max_datagram) {
            t += 50;
            p.drive_until(at_ms(t));
        }
        let probes = p.client.stats().pmtu_probes_sent;
        eprintln!("path of {hole} B: found within {t} ms, {probes} probes");
        p.drive_until(at_ms(15_000));
        let found = p.view(Side::Client, 1).max_datagram;
        assert!(found <= hole && found + 16 >= hole, "{hole}: {found}");
        assert_eq!(p.view(Side::Client, 0).max_datagram, MAX);
        // The search ends: a handful of probes, not one per keepalive.
        let probes = p.client.stats().pmtu_probes_sent;
        assert!(probes <= 20, "{hole}: {probes}");
    }
}

#[test]
fn a_busy_link_whose_path_drops_large_datagrams_stops_getting_them() {
    // The upload's full-size packets (DF clear) are lost on link 1 until the probes show
    // its size; from then on they go on link 0 only, and link 1 carries what fits.
    let mut p = black_hole(1400);
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(5000, FULL).fragmentable(),
        2000,
        at_ms(0),
        Duration::from_micros(1500),
    );
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(6000, 200),
        10000,
        at_ms(0),
        Duration::from_micros(200),
    );
    // And full-size packets with DF set, which get "packet too big" once link 1's size
    // is settled, never with a size the search had not finished with.
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(7000, FULL),
        80,
        at_ms(0),
        ms(50),
    );
    p.drive_until(at_ms(4000));
    let found = p.view(Side::Client, 1).max_datagram;
    assert!((1384..=1400).contains(&found), "{found}");
    let told: Vec<usize> = p.delivered[Side::Client.idx()]
        .iter()
        .filter(|d| d.bytes[9] == 1)
        .map(|d| usize::from(u16::from_be_bytes([d.bytes[26], d.bytes[27]])))
        .collect();
    assert!(!told.is_empty());
    assert!(
        told.iter()
            .all(|&m| m == found - crate::wire::DATA_OVERHEAD),
        "{told:?} against {found}"
    );
    let late_big = p
        .data_transmits(Side::Client)
        .filter(|t| t.link.0 == 1 && t.time >= at_ms(1000) && t.bytes.len() > 1400)
        .count();
    assert_eq!(late_big, 0);
    let small_on_1 = p
        .data_transmits(Side::Client)
        .filter(|t| t.link.0 == 1 && t.bytes.len() < 300)
        .count();
    assert!(small_on_1 > 1000, "{small_on_1}");
}

#[test]
fn a_path_that_grows_again_is_found_ten_minutes_after_the_search() {
    // Link 1's path drops the client's datagrams over 1300 bytes for its first 10 s
    // only. The search caps the link; ten minutes after it ended, the size that failed is
    // tried again, passes, and the link takes its whole limit again.
    let spec = LinkSpec {
        config: LinkConfig {
            max_datagram: Some(MAX),
            ..LinkConfig::default()
        },
        ..LinkSpec::new(ms(10)).rate_bps(10e6)
    };
    let mut p = PairBuilder::new()
        .link(spec.clone())
        .link(spec)
        .config(|c| c.rate_control = false)
        .drop_fn(Box::new(|d| {
            d.from == Side::Client
                && d.link.0 == 1
                && d.bytes.len() > 1300
                && d.time < at_ms(10_000)
        }))
        .build();
    p.drive_until(at_ms(300_000));
    let capped = p.view(Side::Client, 1).max_datagram;
    assert!((1284..=1300).contains(&capped), "{capped}");
    p.drive_until(at_ms(640_000));
    assert_eq!(p.view(Side::Client, 1).max_datagram, MAX);
}
