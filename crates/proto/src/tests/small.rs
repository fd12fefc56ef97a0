//! Small flows past a full window (`FlowQueues::dequeue_small_with`,
//! `LinkView::has_room_small`): under rate control a link's window holds the flows that
//! filled it, not a small flow's next packet.

use core::time::Duration;

use super::harness::{FlowSpec, at_ms};
use crate::link::SMALL_PAST_WINDOW;
use crate::{Config, Endpoint, Instant, LinkConfig, LinkId, Role};

fn endpoint() -> Endpoint {
    let mut config = Config::new(Role::Client);
    config.session(7).budget_packets(2);
    config.rate_control = true;
    let mut e = Endpoint::new(config, Instant::ZERO).unwrap();
    e.add_link(Instant::ZERO, LinkId(0), LinkConfig::default());
    e
}

/// Sends what the engine lets go at `now` (each datagram departs at once); how many
/// carried data.
fn send(e: &mut Endpoint, now: Instant) -> usize {
    let mut buf = Vec::new();
    let mut n = 0;
    while let Some(t) = e.poll_transmit(now, &mut buf) {
        e.handle_tx_done(now, t.link);
        n += usize::from(t.carries_data);
    }
    n
}

/// A bulk flow fills the link's window from 10 ms on, and no acknowledgement comes, up
/// to 80 ms: that time, and how many of its packets went.
fn fill_the_window(e: &mut Endpoint) -> (Instant, usize) {
    let bulk = FlowSpec::bulk(4000, 1200);
    for seq in 0..200 {
        e.handle_tun_packet(at_ms(10), &bulk.packet(seq)).unwrap();
    }
    let mut now = at_ms(10);
    let mut sent = 0;
    while now < at_ms(80) {
        sent += send(e, now);
        now += Duration::from_millis(1);
    }
    (now, sent)
}

#[test]
fn a_small_flows_packet_passes_a_full_window_and_a_bulk_one_waits() {
    let mut e = endpoint();
    // No acknowledgement comes: the window fills and stays full.
    let (mut now, sent) = fill_the_window(&mut e);
    let view = e.link_views(now)[0];
    assert!((11..200).contains(&sent), "{sent}");
    assert!(view.bytes_in_flight + 1500 > view.cwnd, "{view:?}");
    assert!(!view.has_room(now), "{view:?}");
    assert_eq!(e.stats().small_past_window, 0);

    // Another bulk flow's full-size packet waits for the window.
    let other = FlowSpec::bulk(6000, 1200);
    e.handle_tun_packet(now, &other.packet(0)).unwrap();
    assert_eq!(send(&mut e, now), 0);
    // A small flow's waits as long as the window's rate takes to send two full-size
    // packets (while acknowledgements come, the window opens sooner), then goes past it.
    let call = FlowSpec::bulk(5000, 160);
    e.handle_tun_packet(now, &call.packet(0)).unwrap();
    let rate = e.link_views(now)[0].cc_rate;
    let wait = Duration::from_secs_f64(SMALL_PAST_WINDOW as f64 / rate);
    assert!(wait > Duration::from_millis(1), "{wait:?}");
    assert_eq!(send(&mut e, now + wait / 2), 0);
    // No acknowledgement will wake the engine: a timer does.
    let timer = e.poll_timeout().expect("a timer");
    assert!(
        timer > now + wait / 2 && timer <= now + wait + Duration::from_micros(2),
        "{timer:?}, {now:?} + {wait:?}"
    );
    assert_eq!(
        send(&mut e, timer.saturating_sub(Duration::from_micros(2))),
        0
    );
    now = timer;
    assert_eq!(send(&mut e, now), 1);
    assert_eq!(e.stats().small_past_window, 1);
    assert_eq!(send(&mut e, now + wait), 0, "the bulk packet still waits");

    // Small flows go on past the window, but no further than two full-size packets.
    for port in 7000..7100 {
        e.handle_tun_packet(now, &FlowSpec::bulk(port, 160).packet(0))
            .unwrap();
    }
    let mut small = 1;
    for _ in 0..100 {
        now += wait;
        small += send(&mut e, now);
    }
    let view = e.link_views(now)[0];
    assert!((10..100).contains(&small), "{small}");
    assert!(
        view.bytes_in_flight <= view.cwnd + SMALL_PAST_WINDOW,
        "{view:?}"
    );
    assert!(
        view.bytes_in_flight + 300 > view.cwnd + SMALL_PAST_WINDOW,
        "{view:?}"
    );
    assert_eq!(e.stats().small_past_window, small as u64);
}

#[test]
fn the_wait_before_passing_a_window_is_finite_or_none() {
    let e = endpoint();
    let mut v = e.link_views(at_ms(1))[0];
    let since = at_ms(1);
    for rate in [0.0, -1.0, f64::NAN, 1e-300, f64::MIN_POSITIVE] {
        v.cc_rate = rate;
        assert_eq!(v.small_passes_at(since), None, "{rate}");
    }
    v.cc_rate = 3000.0;
    let t = v.small_passes_at(since).unwrap();
    assert!(t > since + Duration::from_secs(1) && t <= since + Duration::from_millis(1001));
}

/// A call's packets pile up while its head waits to pass a full window (as long as the
/// window's rate takes to send two full-size packets): 50 packets a second of 200 bytes
/// are over 576 bytes waiting within 60 ms. The flow is small by its packets' size, so
/// its head still passes; counted by the bytes waiting, it had stopped being small and
/// waited for acknowledgements that did not come.
#[test]
fn a_calls_packets_piled_up_behind_a_full_window_still_pass() {
    let mut e = endpoint();
    let (now, _) = fill_the_window(&mut e);
    assert!(!e.link_views(now)[0].has_room(now));
    let call = FlowSpec::bulk(5000, 160);
    for seq in 0..10 {
        e.handle_tun_packet(now, &call.packet(seq)).unwrap();
    }
    let rate = e.link_views(now)[0].cc_rate;
    let wait = Duration::from_secs_f64(SMALL_PAST_WINDOW as f64 / rate);
    assert_eq!(send(&mut e, now + wait / 2), 0);
    let timer = e.poll_timeout().expect("a timer");
    assert!(timer <= now + wait + Duration::from_micros(2), "{timer:?}");
    // 1880 bytes waiting: counted by the bytes, not a small flow, and none passed. By
    // the packets' size, they pass up to the two full-size packets the window allows
    // past it (no way back measured; 7 measured).
    let passed = send(&mut e, timer);
    assert!((4..=10).contains(&passed), "{passed}");
    assert_eq!(e.stats().small_past_window, passed as u64);
}

/// The link's view at 1 ms with its window of 60 KB full, at 20 KB/s.
fn a_full_window_at_20_kb_per_s() -> (Instant, crate::LinkView) {
    let now = at_ms(1);
    let mut v = endpoint().link_views(now)[0];
    v.cwnd = 60_000;
    v.bytes_in_flight = 60_000;
    v.cc_rate = 20_000.0;
    (now, v)
}

/// Past a full window by two full-size packets, or by the part of the window that
/// covers the acknowledgements' wait on the way back, if more (at most the window).
#[test]
fn a_slow_way_back_lets_small_flows_further_past_the_window() {
    let (now, mut v) = a_full_window_at_20_kb_per_s();
    let waited = Duration::from_secs(1);
    let past = |v: &crate::LinkView, bytes: usize| {
        let mut v = *v;
        v.bytes_in_flight = v.cwnd + bytes - 200;
        v.has_room_small(now, 200, waited)
    };
    assert!(past(&v, SMALL_PAST_WINDOW));
    assert!(!past(&v, SMALL_PAST_WINDOW + 1));
    // The way back holds the acknowledgements 2 s beyond its minimum: 40 KB of the
    // window at its rate.
    v.return_delay = Duration::from_secs(2);
    assert!(past(&v, 40_000));
    assert!(!past(&v, 40_001));
    // Never more than the window itself.
    v.return_delay = Duration::from_secs(10);
    assert!(past(&v, 60_000));
    assert!(!past(&v, 60_001));
    // Under a tenth of a second, two full-size packets are more.
    v.return_delay = Duration::from_millis(100);
    assert!(past(&v, SMALL_PAST_WINDOW));
    assert!(!past(&v, SMALL_PAST_WINDOW + 1));
}

/// A small flow's packet waits, before it passes a full window, as long as the window's
/// rate takes to send two full-size packets (acknowledgements that come steadily open the
/// window within that wait); where the way back holds more of the window than that, it
/// passes at once: what opens the window is the way back.
#[test]
fn a_slow_way_back_lets_small_flows_pass_a_full_window_without_waiting() {
    let (now, mut v) = a_full_window_at_20_kb_per_s();
    let wait = Duration::from_secs_f64(SMALL_PAST_WINDOW as f64 / v.cc_rate);
    let passes = |v: &crate::LinkView, waited: Duration| v.has_room_small(now, 200, waited);
    assert!(!passes(&v, Duration::ZERO));
    assert!(!passes(&v, wait - Duration::from_millis(1)));
    assert!(passes(&v, wait));
    // The way back holds 2 KB of the window at its rate, less than two full-size
    // packets: the same wait.
    v.return_delay = Duration::from_millis(100);
    assert!(!passes(&v, wait - Duration::from_millis(1)));
    assert!(passes(&v, wait));
    assert!(v.small_passes_at(now).is_some_and(|t| t > now + wait));
    // 4 KB: no wait, and so no timer for one.
    v.return_delay = Duration::from_millis(200);
    assert!(passes(&v, Duration::ZERO));
    assert_eq!(v.small_passes_at(now), None);
    // Still no further past the window than the way back covers.
    v.bytes_in_flight = 60_000 + 4_000 - 199;
    assert!(!passes(&v, Duration::ZERO));
    assert!(!passes(&v, Duration::from_secs(10)));
}
