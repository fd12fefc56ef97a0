//! A link's largest datagram (`LinkConfig::max_datagram`): an acknowledgement rides on a
//! full-size data packet only as far as it fits, so that no datagram outgrows the path
//! (an IPv6 path's header is 20 bytes longer than the IPv4 one the TUN MTU may have been
//! set for; a lossy link's ACK carries up to 32 ranges, 268 bytes).

use super::harness::{FlowSpec, LinkSpec, PairBuilder, Side, acks_in, at_ms, ms};
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
    // A limit below a full data packet plus the smallest ACK: the ACKs go in their own
    // datagrams, and the server's data is still acknowledged (nothing waits for them).
    let (_, _, _, _, lost_riding) = run(Some(MAX));
    let (largest, with_ack, delivered, too_big, lost) = run(Some(MAX - 30));
    assert!(largest <= MAX, "{largest}");
    assert!(too_big > 100, "{too_big}");
    assert!(with_ack < 1500, "{with_ack}");
    assert_eq!(delivered, 1500);
    assert!(lost <= lost_riding + 20, "{lost} against {lost_riding}");
}
