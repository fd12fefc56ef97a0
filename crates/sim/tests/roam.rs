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
