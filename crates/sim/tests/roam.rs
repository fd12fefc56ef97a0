//! Roaming (`scenarios/roam.toml`): a link comes back from its outages with another
//! client address, and the server's engine starts that link's RTT and rate control over
//! at the first datagram from there (`Endpoint::handle_path_change`, what the server's
//! daemon calls). The lab test `a_link_back_with_another_address_carries_the_download_again`
//! runs the real daemons through real address changes.

mod common;

use common::{flow, scenario, with};
use latebind_sim::{Mode, run};

#[test]
fn a_link_back_with_another_address_loses_no_more_than_with_the_same_one() {
    let s = scenario("roam.toml");
    let moved = run(&s, Mode::Late).unwrap();
    let same = run(&with(&s, &["links.0.outage_new_address=false"]), Mode::Late).unwrap();
    let early = run(&s, Mode::Early).unwrap();
    for r in [&moved, &same] {
        let call = flow(r, "call");
        assert_eq!(call.lost, 0, "{call:?}");
        // Each cut: the call's next packet within a couple of its 20 ms spacings plus
        // the LTE link's longer path.
        for c in r.cuts.iter().filter(|c| c.flow == "call") {
            assert!(c.stall_ms < 100.0, "{c:?}");
        }
    }
    let (m, s) = (flow(&moved, "download"), flow(&same, "download"));
    assert!(m.goodput_mbps >= 0.97 * s.goodput_mbps, "{m:?}\n{s:?}");
    // Both links again after each return: well above Linux's one route.
    let e = flow(&early, "download");
    assert!(m.goodput_mbps > 1.1 * e.goodput_mbps, "{m:?}\n{e:?}");
}

/// With `aggregate_arrival_order` the slower LTE link carries packets from behind the
/// download's head, bound before the packets ahead of them that the WiFi link was to
/// carry. At a cut those wait above the binding point or die on WiFi, and reach the
/// client over LTE only once the server finds WiFi down. The client, which saw its WiFi
/// interface go down at once, waits for them (`reorder.rs` `quiet`) instead of giving up
/// the gaps after its LTE-only hold time: without that, 28-32 gaps were given up at each
/// first cut tried, and the simulator's TCP stalled for its 1 s retransmission timeout
/// (`docs/RESULTS.md` 8.7).
#[test]
fn in_arrival_order_a_cut_stalls_the_download_no_longer_than_from_the_head() {
    let s = with(
        &scenario("roam.toml"),
        &["late.aggregate_arrival_order=true"],
    );
    for cut in ["[[4.0, 5.0], [10.0, 11.0]]", "[[5.2, 6.2], [10.0, 11.0]]"] {
        let set = format!("links.0.outages={cut}");
        let on = run(&with(&s, &[set.as_str()]), Mode::Late).unwrap();
        let off = run(
            &with(&s, &[set.as_str(), "late.aggregate_arrival_order=false"]),
            Mode::Late,
        )
        .unwrap();
        let stalls = |r: &latebind_sim::Report| -> Vec<f64> {
            let d = r.cuts.iter().filter(|c| c.flow == "download");
            d.map(|c| c.stall_ms).collect()
        };
        let (a, b) = (stalls(&on), stalls(&off));
        assert_eq!(a.len(), 2, "{cut}");
        for (on_ms, off_ms) in a.iter().zip(&b) {
            assert!(*on_ms < off_ms + 60.0, "{cut}: stalls {a:?} against {b:?}");
        }
        let (d_on, d_off) = (flow(&on, "download"), flow(&off, "download"));
        assert!(
            d_on.lost <= 2 * d_off.lost + 5,
            "{cut}: {d_on:?}\n{d_off:?}"
        );
    }
}
