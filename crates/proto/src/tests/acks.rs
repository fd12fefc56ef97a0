//! ACK frames stay small on a lossy link: a receiver reports only the ranges above what
//! the peer is known to have (RFC 9000 13.2.4), not the 32 it keeps for duplicate
//! detection (`docs/protocol.md` 4.3).

use super::harness::{FlowSpec, LinkSpec, PairBuilder, Side, at_ms, ms};
use crate::wire;
use core::time::Duration;
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

/// What the client's datagrams carried from `from` on, with the server sending 1200-byte
/// packets every 500 µs over a 20 Mb/s link (10 ms each way) and the client, if
/// `reverse_from` is given, a 100-byte packet every millisecond from then, 300 µs out of
/// step with the server's pairs (as an inner TCP's acknowledgement follows the segments
/// it acknowledges): datagrams with data and an ACK frame, datagrams without data (the
/// ACK alone), RX_TIME frames, and the ACK frames' `ack_delay_us`.
struct ClientAcks {
    riding: usize,
    alone: usize,
    rx_times: usize,
    delays_us: Vec<u32>,
}

fn client_acks(ride_wait: Duration, reverse_from: Option<u64>, from: u64) -> ClientAcks {
    let mut p = PairBuilder::new()
        .link(LinkSpec::new(ms(10)).rate_bps(20e6))
        .config(move |c| {
            c.rate_control = false;
            c.ack_ride_wait = ride_wait;
        })
        .build();
    p.send_stream(
        Side::Server,
        &FlowSpec::bulk(5000, 1200),
        4000,
        at_ms(0),
        Duration::from_micros(500),
    );
    if let Some(start) = reverse_from {
        p.send_stream(
            Side::Client,
            &FlowSpec::bulk(6000, 100),
            2000 - start as u32,
            at_ms(10 + start) + Duration::from_micros(300),
            ms(1),
        );
    }
    p.drive_until(at_ms(2100));
    let mut out = ClientAcks {
        riding: 0,
        alone: 0,
        rx_times: 0,
        delays_us: Vec::new(),
    };
    for t in p.transmits.iter() {
        if t.from != Side::Client || t.time < at_ms(from) || t.time > at_ms(2000) {
            continue;
        }
        let Ok((_, frames)) = wire::parse(&t.bytes) else {
            continue;
        };
        let mut ack = false;
        for f in frames.flatten() {
            match f {
                wire::Frame::Ack(a) => {
                    ack = true;
                    out.delays_us.push(a.ack_delay_us);
                }
                wire::Frame::RxTime { .. } => out.rx_times += 1,
                _ => {}
            }
        }
        match (ack, t.carries_data) {
            (true, true) => out.riding += 1,
            (true, false) => out.alone += 1,
            _ => {}
        }
    }
    out
}

#[test]
fn an_acknowledgement_due_waits_for_a_packet_going_the_other_way_to_ride_on() {
    let at_once = client_acks(Duration::ZERO, Some(0), 100);
    let waiting = client_acks(ms(1), Some(0), 100);
    // The server's 3800 datagrams after the first 100 ms are acknowledged in pairs: with
    // no wait, each pair's ACK goes alone just before the client's packet that could
    // have carried it.
    assert!(at_once.alone > 1500, "{} alone", at_once.alone);
    // Waiting up to 1 ms for that packet, nearly every ACK rides on it.
    assert!(waiting.alone < 100, "{} alone", waiting.alone);
    assert!(waiting.riding > 1500, "{} riding", waiting.riding);
    // With its RX_TIME frame: the server's rate control has as many one-way delay
    // samples as before.
    assert!(
        waiting.rx_times * 10 >= at_once.rx_times * 9,
        "{} RX_TIME frames, {} without the wait",
        waiting.rx_times,
        at_once.rx_times
    );
    // And the wait is within the acknowledgement's reported delay.
    assert!(
        waiting.delays_us.iter().all(|&d| d <= 1_100),
        "{:?}",
        waiting.delays_us
    );
}

#[test]
fn an_acknowledgement_waits_only_while_packets_going_the_other_way_come_to_carry_it() {
    // Nothing goes the other way: after the first few waits that nothing ended, the
    // acknowledgements go at once again.
    let alone = client_acks(ms(1), None, 200);
    let late = alone.delays_us.iter().filter(|&&d| d > 200).count();
    assert!(alone.alone > 1500, "{} alone", alone.alone);
    assert!(
        late * 50 <= alone.delays_us.len(),
        "{late} of {} waited",
        alone.delays_us.len()
    );
    // Packets that start going the other way half a second in are noticed, and the
    // acknowledgements ride on them again.
    let back = client_acks(ms(1), Some(500), 700);
    assert!(back.alone < 100, "{} alone", back.alone);
    assert!(back.riding > 1000, "{} riding", back.riding);
}
