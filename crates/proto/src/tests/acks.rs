//! ACK frames stay small on a lossy link: a receiver reports only the ranges above what
//! the peer is known to have (RFC 9000 13.2.4), not the 32 it keeps for duplicate
//! detection (`docs/protocol.md` 4.3).

use super::harness::{FlowSpec, LinkSpec, PairBuilder, Side, at_ms, ms};
use crate::wire;
use std::cell::Cell;
use std::rc::Rc;

/// A download with one in five of the server's datagrams lost, and an upload of small
/// packets that the client's ACKs ride on: the client's ACK frames after the first second,
/// as ranges per ACK, and how many of the server's datagrams its loss detection declared
/// lost against how many were dropped.
fn run() -> (Vec<usize>, u64, u64) {
    let dropped = Rc::new(Cell::new(0u64));
    let count = dropped.clone();
    let mut p = PairBuilder::new()
        .link(LinkSpec::new(ms(10)).rate_bps(20e6))
        .config(|c| c.rate_control = false)
        .drop_fn(Box::new(move |d| {
            let drop = d.from == Side::Server && d.index % 5 == 2;
            count.set(count.get() + u64::from(drop));
            drop
        }))
        .build();
    p.send_stream(
        Side::Server,
        &FlowSpec::bulk(5000, 1200),
        3000,
        at_ms(0),
        ms(1),
    );
    p.send_stream(
        Side::Client,
        &FlowSpec::bulk(6000, 100),
        3000,
        at_ms(0),
        ms(1),
    );
    p.drive_until(at_ms(4000));
    let mut ranges = Vec::new();
    for t in p.transmits.iter() {
        if t.from != Side::Client || t.time < at_ms(1000) {
            continue;
        }
        let Ok((_, frames)) = wire::parse(&t.bytes) else {
            continue;
        };
        for f in frames {
            if let Ok(wire::Frame::Ack(a)) = f {
                ranges.push(a.ranges().count());
            }
        }
    }
    (ranges, p.server.stats().lost, dropped.get())
}

#[test]
fn acks_of_a_lossy_link_report_only_what_the_peer_may_not_have() {
    let (ranges, lost, dropped) = run();
    assert!(ranges.len() > 500, "{} ACKs", ranges.len());
    // Every fifth datagram lost: a receiver that reported all it keeps would send 32
    // ranges in each ACK from the first tenth of a second on.
    let mean = ranges.iter().sum::<usize>() as f64 / ranges.len() as f64;
    assert!(mean < 6.0, "{mean} ranges per ACK");
    // And nothing is lost to the peer for it: what the server's loss detection declares
    // lost is what was dropped, not packets whose acknowledgement was left out.
    assert!(
        lost <= dropped + 5,
        "{lost} declared lost, {dropped} dropped"
    );
    assert!(
        lost + 30 >= dropped,
        "{lost} declared lost, {dropped} dropped"
    );
}
