//! Privileged: the topology comes up as documented and leaves nothing behind.

mod common;

use std::process::Command;

use latebind_lab::netns::{self, Role, Topology};

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn netns_list() -> String {
    ip(&["netns", "list"])
}

#[test]
fn topology_up_down_leaves_nothing_behind() {
    if !common::root_or_skip("topology_up_down_leaves_nothing_behind") {
        return;
    }
    let _g = common::serial();
    let mut topo = Topology::create(2).expect("topology");
    let names: Vec<String> = Role::ALL.iter().map(|&r| topo.ns(r)).collect();
    let list = netns_list();
    for n in &names {
        assert!(list.contains(n.as_str()), "{n} missing from:\n{list}");
    }
    // Addresses, interfaces and routes as documented.
    let client = topo.ns(Role::Client);
    let server = topo.ns(Role::Server);
    let emu = topo.ns(Role::Emu);
    let addrs = ip(&["-n", &client, "-4", "-o", "addr", "show"]);
    for want in ["198.18.0.2/32", "198.18.1.1/24", "198.18.2.1/24"] {
        assert!(addrs.contains(want), "client lacks {want}:\n{addrs}");
    }
    let addrs = ip(&["-n", &server, "-4", "-o", "addr", "show"]);
    for want in ["198.19.0.1/32", "198.18.1.2/24", "198.18.2.2/24"] {
        assert!(addrs.contains(want), "server lacks {want}:\n{addrs}");
    }
    let links = ip(&["-n", &emu, "-o", "link", "show"]);
    for want in ["ec0", "es0", "ec1", "es1"] {
        assert!(links.contains(want), "emu lacks {want}:\n{links}");
    }
    for ns in [&client, &emu, &server] {
        let routes = ip(&["-n", ns, "-4", "route", "show"]);
        assert!(
            !routes.contains("default"),
            "{ns} has a default route:\n{routes}"
        );
        for line in routes.lines() {
            assert!(
                line.starts_with("198.18."),
                "{ns}: route out of the lab: {line}"
            );
        }
    }
    for (ns, ifname) in [(&client, "c0"), (&emu, "ec1"), (&server, "s1")] {
        let on = netns::offloads_on(ns, ifname).expect("ethtool ioctls");
        assert!(on.is_empty(), "{ns} {ifname}: offloads still on: {on:?}");
    }
    assert!(
        topo.offload_warnings.is_empty(),
        "{:?}",
        topo.offload_warnings
    );
    // A helper inside a namespace dies with the topology.
    let helper = topo
        .spawn(
            Role::Emu,
            "sleep",
            std::path::Path::new("/bin/sleep"),
            &["30"],
            &std::env::temp_dir().join("latebind-lab-test-sleep.log"),
        )
        .expect("spawn");
    let pid = helper.pid();
    std::mem::forget(helper); // leave it running: the teardown must kill it
    topo.teardown().expect("teardown");
    let list = netns_list();
    for n in &names {
        assert!(!list.contains(n.as_str()), "{n} left behind:\n{list}");
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z"),
        "helper {pid} survived the teardown: {stat}"
    );
    drop(topo);
}

#[test]
fn topology_removed_after_panic_in_scope() {
    if !common::root_or_skip("topology_removed_after_panic_in_scope") {
        return;
    }
    let _g = common::serial();
    let before = netns::lab_namespaces();
    let id = std::panic::catch_unwind(|| {
        let topo = Topology::create(1).expect("topology");
        let id = topo.id.clone();
        assert!(netns_list().contains(&id));
        panic!("boom inside the guard's scope: {id}");
    })
    .expect_err("the closure panics");
    let msg = id.downcast_ref::<String>().cloned().unwrap_or_default();
    let id = msg.rsplit(' ').next().unwrap_or_default().to_owned();
    assert!(id.starts_with(netns::NS_PREFIX), "{msg}");
    assert!(
        !netns_list().contains(&id),
        "{id} left behind after a panic"
    );
    assert_eq!(netns::lab_namespaces(), before);
}

#[test]
fn cleanup_stale_removes_namespaces_of_dead_processes_only() {
    if !common::root_or_skip("cleanup_stale_removes_namespaces_of_dead_processes_only") {
        return;
    }
    let _g = common::serial();
    // A pid that cannot exist (above pid_max's hard limit of 2^22).
    let stale = format!("{}{}-0-emu", netns::NS_PREFIX, 4_194_305);
    let mine = format!("{}{}-999-client", netns::NS_PREFIX, std::process::id());
    for n in [&stale, &mine] {
        let st = Command::new("ip")
            .args(["netns", "add", n])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let removed = netns::cleanup_stale().expect("cleanup");
    assert!(removed.contains(&stale), "{removed:?}");
    assert!(
        !removed.contains(&mine),
        "removed a live process's namespace"
    );
    let list = netns_list();
    assert!(!list.contains(&stale));
    assert!(list.contains(&mine));
    Command::new("ip")
        .args(["netns", "del", &mine])
        .status()
        .unwrap();
}

#[test]
fn direct_topology_joins_client_and_server_and_leaves_nothing_behind() {
    if !common::root_or_skip("direct_topology_joins_client_and_server_and_leaves_nothing_behind") {
        return;
    }
    let _g = common::serial();
    let topo = Topology::create_direct(1).expect("direct topology");
    let (client, server, emu) = (
        topo.ns(Role::Client),
        topo.ns(Role::Server),
        topo.ns(Role::Emu),
    );
    let list = netns_list();
    assert!(
        list.contains(client.as_str()) && list.contains(server.as_str()),
        "{list}"
    );
    assert!(
        !list.contains(emu.as_str()),
        "no emulator namespace: {list}"
    );
    let addrs = ip(&["-n", &client, "-4", "-o", "addr", "show", "dev", "c0"]);
    assert!(addrs.contains("198.18.1.1/24"), "{addrs}");
    let addrs = ip(&["-n", &server, "-4", "-o", "addr", "show", "dev", "s0"]);
    assert!(addrs.contains("198.18.1.2/24"), "{addrs}");
    // c0's peer is s0, in the server namespace: a datagram crosses.
    let rx = latebind_lab::sys::in_netns(&server, || std::net::UdpSocket::bind("198.18.1.2:47999"))
        .expect("socket in the server namespace");
    rx.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let tx = latebind_lab::sys::in_netns(&client, || std::net::UdpSocket::bind("198.18.1.1:0"))
        .expect("socket in the client namespace");
    tx.send_to(b"direct", "198.18.1.2:47999").expect("send");
    let mut buf = [0u8; 16];
    let (n, from) = rx
        .recv_from(&mut buf)
        .expect("the datagram crosses the veth");
    assert_eq!(&buf[..n], b"direct");
    assert_eq!(from.ip().to_string(), "198.18.1.1");
    assert!(
        netns::offloads_on(&server, "s0")
            .expect("ethtool ioctls")
            .is_empty()
    );
    drop(topo);
    let list = netns_list();
    assert!(
        !list.contains(client.as_str()) && !list.contains(server.as_str()),
        "{list}"
    );
}
