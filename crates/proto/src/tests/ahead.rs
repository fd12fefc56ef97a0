//! Binding ahead of the pacing slot (`poll_transmit_ahead`, the precise-dispatch stage):
//! slots in pacing order, counted below the binding point until they depart, and a
//! zero horizon that is `poll_transmit` exactly.

use core::time::Duration;

use super::harness::{FlowSpec, at_ms};
use crate::{Config, Endpoint, Instant, LinkConfig, LinkId, Role, Transmit};

/// Bytes per second of the test link's pacer: 1 byte per µs.
const RATE: f64 = 1e6;

fn endpoint(rate_control: bool, budget: usize) -> Endpoint {
    endpoint_paced(rate_control, budget, (!rate_control).then_some(RATE))
}

/// One link, paced at `pacing_rate` bytes per second (if any).
fn endpoint_paced(rate_control: bool, budget: usize, pacing_rate: Option<f64>) -> Endpoint {
    let mut config = Config::new(Role::Client);
    config.session(7).budget_packets(budget);
    config.rate_control = rate_control;
    let mut e = Endpoint::new(config, Instant::ZERO).unwrap();
    e.add_link(
        Instant::ZERO,
        LinkId(0),
        LinkConfig {
            pacing_rate,
            ..LinkConfig::default()
        },
    );
    e
}

fn enqueue(e: &mut Endpoint, now: Instant, n: u32) {
    let flow = FlowSpec::bulk(4000, 960);
    for seq in 0..n {
        e.handle_tun_packet(now, &flow.packet(seq)).unwrap();
    }
}

fn below(e: &Endpoint, now: Instant) -> usize {
    e.link_views(now)[0].below_binding
}

#[test]
fn ahead_binding_returns_slots_in_pacing_order_below_the_binding_point() {
    let mut e = endpoint(false, 16);
    let now = at_ms(10);
    enqueue(&mut e, now, 20);
    let horizon = Duration::from_millis(5);
    let mut buf = Vec::new();
    let mut sent: Vec<Transmit> = Vec::new();
    while let Some(t) = e.poll_transmit_ahead(now, horizon, &mut buf) {
        sent.push(t);
    }
    let data: Vec<&Transmit> = sent.iter().filter(|t| t.carries_data).collect();
    // The pacer, not the budget, stopped the binding: every slot within the horizon,
    // and more than the bucket's burst bound ahead.
    assert!(sent.len() < 16, "{}", sent.len());
    assert!(data.len() > 3, "{}", data.len());
    assert!(
        sent.iter()
            .all(|t| t.send_at >= now && t.send_at <= now + horizon)
    );
    assert!(sent.last().unwrap().send_at > now);
    // Slots in packet order, spaced by the pacer: once the bucket is empty, each data
    // packet waits for the previous one's bytes at 1 byte per µs (a 1500-byte margin
    // is what the pacer asks for, so the gap is the previous packet's length).
    assert!(sent.windows(2).all(|w| w[0].send_at <= w[1].send_at));
    for w in data.windows(2).filter(|w| w[0].send_at > now) {
        let gap = w[1].send_at - w[0].send_at;
        let expected = Duration::from_secs_f64(w[0].len as f64 / RATE);
        assert!(gap.abs_diff(expected) < Duration::from_micros(2), "{gap:?}");
    }
    // All of them below the binding point until their departures are reported.
    assert_eq!(below(&e, now), sent.len());
    assert!(e.poll_transmit_ahead(now, horizon, &mut buf).is_none());
    for (i, t) in sent.iter().enumerate() {
        e.handle_tx_done(t.send_at, t.link);
        assert_eq!(below(&e, t.send_at), sent.len() - i - 1);
    }
    // The pacing timer comes the horizon before the next slot, not at it.
    let next_slot = sent.last().unwrap().send_at
        + Duration::from_secs_f64(sent.last().unwrap().len as f64 / RATE);
    let timeout = e.poll_timeout().unwrap();
    assert!(timeout <= next_slot.saturating_sub(horizon) + Duration::from_micros(2));
    assert!(timeout > now);
}

#[test]
fn ahead_binding_is_bounded_by_the_budget() {
    let mut e = endpoint(false, 2);
    let now = at_ms(10);
    enqueue(&mut e, now, 20);
    let mut buf = Vec::new();
    let mut n = 0;
    while e
        .poll_transmit_ahead(now, Duration::from_millis(50), &mut buf)
        .is_some()
    {
        n += 1;
    }
    assert_eq!(n, 2);
    assert_eq!(below(&e, now), 2);
}

#[test]
fn zero_horizon_is_poll_transmit() {
    for rate_control in [false, true] {
        let (mut a, mut b) = (endpoint(rate_control, 2), endpoint(rate_control, 2));
        let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
        let mut count = 0;
        for step in 0..400u64 {
            let now = Instant::from_nanos(step * 97_000);
            if step % 10 == 0 {
                enqueue(&mut a, now, 5);
                enqueue(&mut b, now, 5);
            }
            if a.poll_timeout().is_some_and(|t| t <= now) {
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            loop {
                let ta = a.poll_transmit(now, &mut buf_a);
                let tb = b.poll_transmit_ahead(now, Duration::ZERO, &mut buf_b);
                assert_eq!(ta, tb);
                assert_eq!(buf_a, buf_b);
                let Some(t) = ta else { break };
                assert_eq!(t.send_at, now);
                count += 1;
                // Half of them depart at once, the rest at the next step.
                if count % 2 == 0 {
                    a.handle_tx_done(now, t.link);
                    b.handle_tx_done(now, t.link);
                }
            }
            while below(&a, now) > 0 && step % 3 == 0 {
                a.handle_tx_done(now, LinkId(0));
                b.handle_tx_done(now, LinkId(0));
            }
            assert_eq!(a.poll_timeout(), b.poll_timeout());
        }
        assert!(count > 20, "{count}");
    }
}

/// Sends what the engine gives at `now` (each datagram departs at once) and returns the
/// data bytes sent.
fn send_round(e: &mut Endpoint, now: Instant) -> usize {
    let mut buf = Vec::new();
    let mut bytes = 0;
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        if t.carries_data {
            bytes += t.len;
        }
        e.handle_tx_done(now, t.link);
    }
    bytes
}

#[test]
fn a_driver_that_comes_back_late_is_owed_what_the_pacer_allowed_meanwhile() {
    let mut e = endpoint(false, 64);
    let start = at_ms(10);
    enqueue(&mut e, start, 60);
    let first = send_round(&mut e, start);
    // The bucket's two packets, then the pacer holds the rest back.
    assert!(first <= 3000, "{first}");
    let due = e.poll_timeout().unwrap();
    assert!(
        due > start && due <= start + Duration::from_millis(2),
        "{due:?}"
    );
    // The driver comes back 20 ms after the pacer's deadline (a loaded host's timer, or
    // a long batch of input): what the schedule allowed meanwhile goes now, not two
    // packets.
    let late = Duration::from_millis(20);
    let sent = send_round(&mut e, due + late);
    let owed = 1500.0 + RATE * late.as_secs_f64();
    assert!(
        (sent as f64 - owed).abs() <= 1500.0,
        "sent {sent} B, owed {owed} B"
    );
    // Owed tokens are not banked: on time from here on, the pacer spaces packets again.
    let next = e.poll_timeout().unwrap();
    let on_time = send_round(&mut e, next);
    assert!(on_time <= 3000, "{on_time}");
}

#[test]
fn nothing_is_owed_for_a_pause_with_nothing_waiting_or_the_budget_full() {
    // Nothing waited: the flow sent what it had and came back 20 ms later with more.
    let mut e = endpoint(false, 64);
    let start = at_ms(10);
    enqueue(&mut e, start, 4);
    send_round(&mut e, start);
    let mut t = start;
    while let Some(d) = e
        .poll_timeout()
        .filter(|&d| d < start + Duration::from_millis(5))
    {
        t = d;
        send_round(&mut e, t);
    }
    let back = t + Duration::from_millis(20);
    enqueue(&mut e, back, 40);
    assert!(send_round(&mut e, back) <= 3000);

    // The budget below the binding point held the link as well as the pacer (the link's
    // first datagram is control, then two data packets empty the bucket and fill the
    // budget): the packets that waited were the interface's to pace, and nothing is owed
    // when it frees.
    let mut e = endpoint(false, 3);
    enqueue(&mut e, start, 40);
    let mut buf = Vec::new();
    let mut sent = Vec::new();
    while let Some(tx) = e.poll_transmit(start, &mut buf) {
        sent.push(tx);
    }
    assert_eq!(below(&e, start), 3);
    assert!(e.poll_timeout().is_some_and(|t| t > start));
    let later = start + Duration::from_millis(20);
    for tx in &sent {
        e.handle_tx_done(later, tx.link);
    }
    let mut bytes = 0;
    while let Some(tx) = e.poll_transmit(later, &mut buf) {
        bytes += tx.len;
        e.handle_tx_done(later, tx.link);
    }
    assert!(bytes <= 3000, "{bytes}");
}

#[test]
fn a_driver_woken_only_by_the_pacing_timer_sends_the_backlog_at_the_pacing_rate() {
    // Rates whose release times are not whole nanoseconds: the engine's timer alone
    // (no other input) releases every packet the pacer holds, on schedule.
    for rate in [1e6, 1_234_567.0, 3_333_333.3, 7_654_321.0] {
        let mut e = endpoint_paced(false, 64, Some(rate));
        let start = at_ms(10);
        enqueue(&mut e, start, 200);
        let mut now = start;
        let mut bytes = send_round(&mut e, now);
        let mut rounds = 0;
        while e.link_views(now)[0].below_binding == 0 && bytes < 190 * 960 {
            let next = e.poll_timeout().unwrap();
            assert!(next >= now);
            now = next;
            e.handle_timeout(now);
            bytes += send_round(&mut e, now);
            rounds += 1;
            assert!(rounds < 10_000);
        }
        let expected = Duration::from_secs_f64(bytes as f64 / rate);
        assert!(
            now - start <= expected + Duration::from_millis(1),
            "rate {rate}: {bytes} B took {:?}, the pacer allows them in {expected:?}",
            now - start
        );
    }
}
