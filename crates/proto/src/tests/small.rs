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

#[test]
fn a_small_flows_packet_passes_a_full_window_and_a_bulk_one_waits() {
    let mut e = endpoint();
    let bulk = FlowSpec::bulk(4000, 1200);
    for seq in 0..200 {
        e.handle_tun_packet(at_ms(10), &bulk.packet(seq)).unwrap();
    }
    // No acknowledgement comes: the window fills and stays full.
    let mut now = at_ms(10);
    let mut sent = 0;
    while now < at_ms(80) {
        sent += send(&mut e, now);
        now += Duration::from_millis(1);
    }
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
