//! Mode `mptcp`: kernel multipath TCP over the same emulated links, one subflow per
//! link, for the scenario's TCP flows.
//!
//! - `net.mptcp.enabled = 1` in the client and server namespaces; the in-kernel path
//!   manager with `ip mptcp limits set subflows N add_addr_accepted N` on both ends
//!   (N = links - 1, at most 8, the kernel's limit) and one client endpoint per extra
//!   link, `ip mptcp endpoint add 198.18.{i+1}.1 dev c{i} subflow` for i > 0.
//! - The client's end of a flow binds link 0's address (`198.18.1.1`; the first link
//!   not out at the flow's start if link 0 is), so the initial subflow uses that link,
//!   and every further subflow leaves from its own link's address. Policy routing by
//!   source keeps each subflow on its own interface: table `100 + i` holds
//!   `198.19.0.1 via 198.18.{i+1}.2 dev c{i}`, rule `from 198.18.{i+1}.1 lookup 100+i`;
//!   the main table reaches 198.19.0.1 over link 0, 1, ... (metric 10, 20, ...). The
//!   server's end is its application address 198.19.0.1 and answers each subflow over
//!   the link it came on (the links' connected /24s); it needs no route.
//! - Both ends create their TCP sockets with `IPPROTO_MPTCP` (262): the traffic tool's
//!   `--mptcp`. The client opens every connection (MPTCP subflows are opened by the
//!   connection's initiator): in a downlink flow the server's sender listens
//!   (`--listen`) and the client's receiver connects (`--connect`).
//! - Shaping as in mode early: `htb` + `pfifo` of `[early] qdisc_packets +
//!   driver_packets` at `c{i}` (the kernel's stack binds early); outages as in mode
//!   late: `c{i}` goes down in the client namespace (the kernel removes its routes) and
//!   the emulator drops what the model loses; the server's side is not touched. At an
//!   outage's end the runner puts `c{i}` up and its routes back. A remote outage
//!   (`outage_local = false`) touches nothing: only the emulator drops.

use std::net::Ipv4Addr;

use anyhow::{Result, bail};
use latebind_sim::Scenario;

use crate::netns::{LinkAddrs, SERVER_APP};

/// Most extra subflows the in-kernel path manager allows (`MPTCP_PM_ADDR_MAX`).
pub const MAX_SUBFLOWS: usize = 8;

/// Routing table of link `i`.
pub fn table(i: usize) -> u32 {
    100 + i as u32
}

/// Fails, naming the flow, unless every flow is TCP.
pub fn check_flows(scenario: &Scenario) -> Result<()> {
    for (i, f) in scenario.spec.flows.iter().enumerate() {
        if f.kind != "tcp-bulk" {
            bail!(
                "mode mptcp runs TCP flows only: flows[{i}] ({:?}) is {}",
                f.name,
                f.kind
            );
        }
    }
    if scenario.spec.links.len() > MAX_SUBFLOWS + 1 {
        bail!(
            "mode mptcp: {} links, but the kernel's path manager allows at most {} subflows \
             per connection",
            scenario.spec.links.len(),
            MAX_SUBFLOWS + 1
        );
    }
    Ok(())
}

/// The client's routes over link `l` (main table and the link's own table): restored
/// at an outage's end, after the kernel removed them with the interface.
pub fn client_routes(l: &LinkAddrs) -> Vec<String> {
    let metric = 10 * (l.index + 1);
    vec![
        format!(
            "route replace {SERVER_APP}/32 via {} dev {} metric {metric} src {}",
            l.server, l.client_if, l.client
        ),
        format!(
            "route replace {SERVER_APP}/32 via {} dev {} src {} table {}",
            l.server,
            l.client_if,
            l.client,
            table(l.index)
        ),
    ]
}

/// `ip -batch` lines for the client and the server namespaces.
pub fn setup(links: &[LinkAddrs]) -> (Vec<String>, Vec<String>) {
    let extra = links.len().saturating_sub(1).min(MAX_SUBFLOWS);
    let limits = format!("mptcp limits set subflows {extra} add_addr_accepted {extra}");
    let mut client = vec!["mptcp endpoint flush".to_owned(), limits.clone()];
    for l in links {
        client.extend(client_routes(l));
        client.push(format!(
            "rule add from {} lookup {} pref {}",
            l.client,
            table(l.index),
            1000 + l.index
        ));
        if l.index > 0 {
            client.push(format!(
                "mptcp endpoint add {} dev {} id {} subflow",
                l.client,
                l.client_if,
                l.index + 1
            ));
        }
    }
    let server = vec!["mptcp endpoint flush".to_owned(), limits];
    (client, server)
}

/// The link whose address a flow starting at `start_s` binds: the first one whose
/// interface is not down (a remote outage leaves the interface up: the client cannot
/// know the path is dead).
pub fn initial_link(scenario: &Scenario, start_s: f64) -> usize {
    scenario
        .spec
        .links
        .iter()
        .position(|l| {
            !l.outage_local || !l.outages.iter().any(|[a, b]| *a <= start_s && start_s < *b)
        })
        .unwrap_or(0)
}

/// The client's address on link `i`.
pub fn client_addr(links: &[LinkAddrs], i: usize) -> Ipv4Addr {
    links[i].client
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn scenario(extra: &str) -> Scenario {
        Scenario::from_str(
            &format!(
                "[scenario]\nname='t'\nduration_s=5.0\n[[links]]\nname='a'\nrate_mbps=1.0\n\
                 outages=[[0.0, 1.0]]\n[[links]]\nname='b'\nrate_mbps=1.0\n{extra}"
            ),
            Path::new("t.toml"),
        )
        .unwrap()
    }

    #[test]
    fn udp_flows_are_refused_by_name() {
        let s = scenario(
            "[[flows]]\nname='bulk'\nkind='tcp-bulk'\n[[flows]]\nname='voice'\nkind='udp-cbr'\nrate_mbps=0.1\n",
        );
        let e = check_flows(&s).unwrap_err().to_string();
        assert!(
            e.contains("flows[1]") && e.contains("voice") && e.contains("udp-cbr"),
            "{e}"
        );
        let s = scenario("[[flows]]\nname='bulk'\nkind='tcp-bulk'\n");
        check_flows(&s).unwrap();
    }

    #[test]
    fn one_endpoint_and_table_per_extra_link() {
        let links: Vec<LinkAddrs> = (0..3)
            .map(|i| crate::netns::link_addrs(i).unwrap())
            .collect();
        let (c, s) = setup(&links);
        assert!(c.contains(&"mptcp limits set subflows 2 add_addr_accepted 2".to_owned()));
        assert!(s.contains(&"mptcp limits set subflows 2 add_addr_accepted 2".to_owned()));
        let endpoints: Vec<&String> = c.iter().filter(|l| l.contains("endpoint add")).collect();
        assert_eq!(endpoints.len(), 2);
        assert!(endpoints[0].contains("198.18.2.1 dev c1"), "{endpoints:?}");
        assert!(c.contains(&"rule add from 198.18.3.1 lookup 102 pref 1002".to_owned()));
        assert!(
            c.iter()
                .any(|l| l.contains("via 198.18.1.2 dev c0") && l.contains("table 100"))
        );
    }

    #[test]
    fn initial_link_skips_a_link_that_is_out() {
        let s = scenario("");
        assert_eq!(initial_link(&s, 0.5), 1);
        assert_eq!(initial_link(&s, 1.0), 0);
        // A remote outage: the interface is up, the client binds it.
        let s = s.with_overrides(["links.0.outage_local=false"]).unwrap();
        assert_eq!(initial_link(&s, 0.5), 0);
    }
}
