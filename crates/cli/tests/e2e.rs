//! End to end: the real client and server daemons in network namespaces this test
//! creates, joined by two veth pairs (two links), with kernel TCP and UDP through the
//! encrypted tunnel. Needs root: without it the tests print why and pass, except under
//! CI=true where a missing privilege is a failure.
//!
//! Addresses are in 198.18.0.0/15 (benchmarking range) and 10.77.0.0/24 (the tunnel), all
//! inside the namespaces; nothing is sent anywhere else.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};

fn root_or_skip(name: &str) -> bool {
    common::root_or_skip(name, "network namespaces, TUN")
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_latebind")
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Two namespaces, two veth links, keys and configs; torn down on drop.
struct Net {
    id: String,
    client_ns: String,
    server_ns: String,
    dir: PathBuf,
    daemons: Vec<Child>,
    /// The server's `listen` addresses.
    listen: Vec<String>,
    /// Each client link's `server` address.
    servers: [String; 2],
    /// Lines added to the server's main section only.
    server_extra: String,
    /// The server public key the client is given, if not the server's own.
    client_server_key: Option<String>,
}

impl Net {
    fn new() -> Self {
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            SEQ.fetch_add(1, Ordering::SeqCst)
        );
        let (c, s) = (format!("lbt-c{id}"), format!("lbt-s{id}"));
        let dir = std::env::temp_dir().join(format!("latebind-e2e-{id}"));
        std::fs::create_dir_all(&dir).unwrap();
        let net = Self {
            id: id.clone(),
            client_ns: c.clone(),
            server_ns: s.clone(),
            dir,
            daemons: Vec::new(),
            listen: vec!["0.0.0.0:51820".into()],
            servers: ["198.18.10.1:51820".into(), "198.18.11.1:51820".into()],
            server_extra: String::new(),
            client_server_key: None,
        };
        sh(&["ip", "netns", "add", &c]);
        sh(&["ip", "netns", "add", &s]);
        for (ns, _) in [(&c, 0), (&s, 0)] {
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        for i in 0..2 {
            net.make_link(i);
        }
        net
    }

    /// [`Self::new`] with both daemons started (the client's key allowed) and the
    /// session established.
    /// Link b over IPv6 only (`fd77:11::/64`), link a over IPv4; the server listens on
    /// both families; both daemons running and the session up.
    fn with_link_b_over_ipv6() -> Self {
        let mut net = Self::new();
        for (ns, dev, addr, v4) in [
            (&net.server_ns, "s1", "fd77:11::1/64", "198.18.11.1/24"),
            (&net.client_ns, "c1", "fd77:11::2/64", "198.18.11.2/24"),
        ] {
            sh(&["ip", "-n", ns, "addr", "add", addr, "dev", dev, "nodad"]);
            sh(&["ip", "-n", ns, "addr", "del", v4, "dev", dev]);
        }
        net.listen = vec!["0.0.0.0:51820".into(), "[::]:51820".into()];
        net.servers[1] = "[fd77:11::1]:51820".into();
        net.start_and_wait();
        net
    }

    fn running() -> Self {
        let mut net = Self::new();
        net.start_and_wait();
        net
    }

    /// Starts both daemons (a fresh client key, allowed) and waits for the session.
    fn start_and_wait(&mut self) {
        let client_key = Self::key();
        self.start(&client_key, &client_key.1.clone());
        self.wait_established();
    }

    /// Makes link `i`: a veth pair, `c{i}` in the client's namespace (198.18.{10+i}.2/24)
    /// and `s{i}` in the server's (.1), both up.
    fn make_link(&self, i: usize) {
        let id = &self.id;
        let (ci, si) = (format!("c{i}"), format!("s{i}"));
        sh(&[
            "ip",
            "link",
            "add",
            &format!("lbtc{i}{id}"),
            "type",
            "veth",
            "peer",
            "name",
            &format!("lbts{i}{id}"),
        ]);
        sh(&[
            "ip",
            "link",
            "set",
            &format!("lbtc{i}{id}"),
            "netns",
            &self.client_ns,
            "name",
            &ci,
        ]);
        sh(&[
            "ip",
            "link",
            "set",
            &format!("lbts{i}{id}"),
            "netns",
            &self.server_ns,
            "name",
            &si,
        ]);
        sh(&[
            "ip",
            "-n",
            &self.client_ns,
            "addr",
            "add",
            &format!("198.18.{}.2/24", 10 + i),
            "dev",
            &ci,
        ]);
        sh(&[
            "ip",
            "-n",
            &self.server_ns,
            "addr",
            "add",
            &format!("198.18.{}.1/24", 10 + i),
            "dev",
            &si,
        ]);
        sh(&["ip", "-n", &self.client_ns, "link", "set", &ci, "up"]);
        sh(&["ip", "-n", &self.server_ns, "link", "set", &si, "up"]);
    }

    /// Link b's server is `lb-server.test:51820`, which the client namespace's hosts file
    /// (put in place of `/etc/hosts` by `ip netns exec`) says is at `address`.
    fn name_link_b_server(&mut self, address: &str) {
        let etc = Path::new("/etc/netns").join(&self.client_ns);
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("hosts"), format!("{address} lb-server.test\n")).unwrap();
        self.servers[1] = "lb-server.test:51820".into();
    }

    fn key() -> (String, String) {
        let out = Command::new(bin()).arg("genkey").output().unwrap();
        let private = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let mut p = Command::new(bin())
            .arg("pubkey")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin
            .take()
            .unwrap()
            .write_all(private.as_bytes())
            .unwrap();
        let public = String::from_utf8(p.wait_with_output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned();
        (private, public)
    }

    fn start(&mut self, client_key: &(String, String), allowed_client_pub: &str) {
        self.start_with(client_key, allowed_client_pub, "");
    }

    /// [`Self::start`] with `extra` lines in both daemons' main section.
    fn start_with(&mut self, client_key: &(String, String), allowed_client_pub: &str, extra: &str) {
        let server_key = Self::key();
        let server_toml = format!(
            "[server]\nprivate_key = \"{}\"\nlisten = [{}]\ntun = \"lbs0\"\naddress = \"10.77.0.1/24\"\ncontrol_socket = \"{}\"\n{extra}{}[[peers]]\nname = \"c\"\npublic_key = \"{}\"\naddress = \"10.77.0.2\"\n",
            server_key.0,
            self.listen
                .iter()
                .map(|a| format!("\"{a}\""))
                .collect::<Vec<_>>()
                .join(", "),
            self.dir.join("server.sock").display(),
            self.server_extra,
            allowed_client_pub
        );
        let client_toml = format!(
            "[client]\nprivate_key = \"{}\"\nserver_public_key = \"{}\"\ntun = \"lb0\"\naddress = \"10.77.0.2/24\"\ncontrol_socket = \"{}\"\n{extra}[[links]]\nname = \"a\"\ninterface = \"c0\"\nserver = \"{}\"\n[[links]]\nname = \"b\"\ninterface = \"c1\"\nserver = \"{}\"\n",
            client_key.0,
            self.client_server_key.as_ref().unwrap_or(&server_key.1),
            self.dir.join("client.sock").display(),
            self.servers[0],
            self.servers[1],
        );
        std::fs::write(self.dir.join("server.toml"), server_toml).unwrap();
        std::fs::write(self.dir.join("client.toml"), client_toml).unwrap();
        for role in ["server", "client"] {
            let child = self.spawn(role);
            self.daemons.push(child);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts daemon `role` with its config in its namespace; its log goes on in
    /// `{role}.log`.
    fn spawn(&self, role: &str) -> Child {
        let ns = if role == "server" {
            &self.server_ns
        } else {
            &self.client_ns
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{role}.log")))
            .unwrap();
        Command::new("ip")
            .args(["netns", "exec", ns, bin(), role, "--config"])
            .arg(self.dir.join(format!("{role}.toml")))
            .env("LATEBIND_LOG", "debug")
            .stderr(log)
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Stops the server (SIGKILL: it keeps no state to save) and starts it again.
    fn restart_server(&mut self) {
        let server = &mut self.daemons[0];
        let _ = server.kill();
        let _ = server.wait();
        self.daemons[0] = self.spawn("server");
    }

    fn status(&self, role: &str) -> serde_json::Value {
        let out = Command::new(bin())
            .args(["status", "--json", "--socket"])
            .arg(self.dir.join(format!("{role}.sock")))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    fn wait_established(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.status("client")["sessions"][0]["established"] == true {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "no handshake within 10 s; logs in {}: {}",
            self.dir.display(),
            self.logs()
        );
    }

    /// Both daemons' status and logs, for a failure message.
    fn report(&self) -> String {
        format!(
            "client: {}\nserver: {}\nlogs: {}",
            self.status("client"),
            self.status("server"),
            self.logs()
        )
    }

    fn logs(&self) -> String {
        ["client", "server"]
            .iter()
            .map(|r| std::fs::read_to_string(self.dir.join(format!("{r}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n----\n")
    }

    /// Runs `f` on a thread whose network namespace is `ns`.
    fn in_ns<T: Send + 'static>(
        ns: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = Path::new("/run/netns").join(ns);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).unwrap();
            setns(fd.as_fd(), CloneFlags::CLONE_NEWNET).unwrap();
            f()
        })
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            // SIGTERM first: the daemons stop cleanly and remove their control sockets.
            let _ = Command::new("kill").arg(d.id().to_string()).status();
        }
        for d in &mut self.daemons {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && d.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = Command::new("ip")
            .args(["netns", "del", &self.client_ns])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.server_ns])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(&self.client_ns));
    }
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 8)) as u8
}

/// Sends `bytes` over TCP from the client to the server through the tunnel; returns the
/// bytes received, checked byte for byte, and the elapsed time. `during` runs while the
/// transfer is under way.
fn tcp_transfer(net: &Net, bytes: usize, during: impl FnOnce()) -> (usize, Duration) {
    tcp_transfer_towards(net, Towards::Server, bytes, during)
}

/// Which end of the tunnel receives a transfer.
#[derive(Clone, Copy)]
enum Towards {
    Server,
    Client,
}

/// [`tcp_transfer`] towards either end: the receiver listens on its tunnel address, the
/// sender connects from the other end.
fn tcp_transfer_towards(
    net: &Net,
    towards: Towards,
    bytes: usize,
    during: impl FnOnce(),
) -> (usize, Duration) {
    let (rx_ns, tx_ns, addr) = match towards {
        Towards::Server => (&net.server_ns, &net.client_ns, "10.77.0.1:5001"),
        Towards::Client => (&net.client_ns, &net.server_ns, "10.77.0.2:5001"),
    };
    let listener = Net::in_ns(rx_ns, move || {
        let l = TcpListener::bind(addr).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            for (k, b) in buf[..n].iter().enumerate() {
                assert_eq!(*b, pattern(got + k), "byte {} corrupted", got + k);
            }
            got += n;
        }
        got
    });
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    let sender = Net::in_ns(tx_ns, move || {
        let mut s =
            TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5)).unwrap();
        // A transfer that stalls fails instead of blocking the test for TCP's whole
        // retransmission schedule.
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        let chunk: Vec<u8> = (0..bytes).map(pattern).collect();
        for part in chunk.chunks(16384) {
            s.write_all(part).unwrap();
        }
    });
    during();
    if let Err(e) = sender.join() {
        // The sender panicked (a connect that timed out, a write that failed): say what
        // the daemons saw before the namespaces go.
        let what = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("the transfer's sender failed: {what}\n{}", net.report());
    }
    let got = listener.join().unwrap();
    (got, start.elapsed())
}

#[test]
fn tcp_and_udp_through_the_tunnel_over_two_links() {
    if !root_or_skip("tcp_and_udp_through_the_tunnel_over_two_links") {
        return;
    }
    let net = Net::running();

    let (got, took) = tcp_transfer(&net, 8 << 20, || {});
    assert_eq!(got, 8 << 20, "logs: {}", net.logs());
    eprintln!("8 MiB over the tunnel in {took:?}");

    // UDP: 2000 numbered datagrams, all delivered once.
    let rx = Net::in_ns(&net.server_ns, || {
        let s = UdpSocket::bind("10.77.0.1:5002").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(1500)))
            .unwrap();
        let mut seen = vec![false; 2000];
        let mut buf = [0u8; 2048];
        while let Ok(n) = s.recv(&mut buf) {
            assert_eq!(n, 1000);
            let i = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            assert!(!seen[i], "datagram {i} delivered twice");
            seen[i] = true;
        }
        seen.iter().filter(|&&x| x).count()
    });
    std::thread::sleep(Duration::from_millis(100));
    Net::in_ns(&net.client_ns, || {
        let s = UdpSocket::bind("10.77.0.2:0").unwrap();
        for i in 0u32..2000 {
            let mut d = vec![0u8; 1000];
            d[..4].copy_from_slice(&i.to_be_bytes());
            s.send_to(&d, "10.77.0.1:5002").unwrap();
            // About 40 Mbit/s: this checks delivery, not speed (scripts/bench-tunnel.sh does).
            if i % 5 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
    .join()
    .unwrap();
    let received = rx.join().unwrap();
    assert_eq!(
        received,
        2000,
        "client: {}\nserver: {}",
        net.status("client"),
        net.status("server")
    );
    let st = net.status("client");
    let links = st["sessions"][0]["links"].as_array().unwrap().clone();
    assert_eq!(links.len(), 2);
    for l in &links {
        assert_eq!(l["state"], "up", "{st}");
        assert!(l["rtt_measured"] == true, "{st}");
    }
    // The server lists the flow it received, by its 5-tuple, with the links it came over.
    let st = net.status("server");
    let flows = st["sessions"][0]["flows_received"]
        .as_array()
        .unwrap()
        .clone();
    let f = flows
        .iter()
        .find(|f| {
            let name = f["flow"].as_str().unwrap_or("");
            name.starts_with("udp 10.77.0.2:") && name.ends_with(" > 10.77.0.1:5002")
        })
        .unwrap_or_else(|| panic!("the UDP flow in {st}"));
    assert_eq!(f["received"], 2000, "{st}");
    assert!(!f["links"].as_array().unwrap().is_empty(), "{st}");
    // Each of those packets counted once, on the link it came over, by the link's name.
    let by_link = f["received_by_link"].as_object().unwrap();
    assert!(!by_link.is_empty(), "{st}");
    let server_links = st["sessions"][0]["links"].as_array().unwrap();
    let names: Vec<&str> = server_links
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert!(by_link.keys().all(|k| names.contains(&k.as_str())), "{st}");
    let sum: u64 = by_link.values().map(|n| n.as_u64().unwrap()).sum();
    assert_eq!(sum, 2000, "{st}");
}

/// One link over IPv6 only (an IPv6-only cellular network), the other over IPv4: the
/// client's socket on the IPv6 link takes the server address's family, the link counts as
/// usable with an IPv6 address alone, the server listens on both families, and both links
/// carry the tunnel.
#[test]
fn a_link_over_ipv6_beside_one_over_ipv4() {
    if !root_or_skip("a_link_over_ipv6_beside_one_over_ipv4") {
        return;
    }
    let net = Net::with_link_b_over_ipv6();
    let (got, _) = tcp_transfer(&net, 8 << 20, || {});
    assert_eq!(got, 8 << 20, "logs: {}", net.logs());
    // Both ways on each link: the server has measured each one's RTT from the client's
    // acknowledgements (a link the policy leaves idle within a keepalive interval).
    let both_measured = |st: &serde_json::Value| {
        st["sessions"][0]["links"].as_array().is_some_and(|ls| {
            ls.len() == 2
                && ls
                    .iter()
                    .all(|l| l["state"] == "up" && l["rtt_measured"] == true)
        })
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while !both_measured(&net.status("server")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = net.status("server");
    assert!(both_measured(&st), "{st}");
    let links = st["sessions"][0]["links"].as_array().unwrap().clone();
    let at = |id: u64| {
        links
            .iter()
            .find(|l| l["id"] == id)
            .and_then(|l| l["peer_address"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(at(0).starts_with("198.18.10.2:"), "{st}");
    assert!(at(1).starts_with("[fd77:11::2]:"), "{st}");
}

#[test]
fn datagrams_over_an_ipv6_link_fit_its_mtu_unfragmented() {
    if !root_or_skip("datagrams_over_an_ipv6_link_fit_its_mtu_unfragmented") {
        return;
    }
    // An IPv6 path's header is 20 bytes longer than IPv4's: the TUN MTU leaves room for
    // it, and an acknowledgement rides on a full-size data packet only as far as it fits.
    // Else the host fragments the datagram (IPv6 fragments are often dropped on the way).
    let net = Net::with_link_b_over_ipv6();
    let fragments = |ns: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat", "/proc/net/snmp6"])
            .output()
            .expect("spawn");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("Ip6FragCreates"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .expect("Ip6FragCreates in /proc/net/snmp6")
    };
    let before = (fragments(&net.client_ns), fragments(&net.server_ns));
    transfer_over_link_b_alone(&net);
    let st = net.status("client");
    assert!(
        st["sessions"][0]["links"][1]["datagrams_sent"].as_u64() > Some(2000),
        "{st}"
    );
    let after = (fragments(&net.client_ns), fragments(&net.server_ns));
    assert_eq!(after, before, "IPv6 fragments made (client, server)");
}

#[test]
fn tcp_through_the_tunnel_with_the_dispatch_stage_on_at_both_ends() {
    if !root_or_skip("tcp_through_the_tunnel_with_the_dispatch_stage_on_at_both_ends") {
        return;
    }
    let mut net = Net::new();
    let client_key = Net::key();
    net.start_with(
        &client_key,
        &client_key.1.clone(),
        "dispatch = true\ndispatch_horizon_us = 1000.0\n",
    );
    net.wait_established();
    let (got, took) = tcp_transfer(&net, 4 << 20, || {});
    assert_eq!(got, 4 << 20, "logs: {}", net.logs());
    eprintln!("4 MiB over the tunnel with the dispatch stage in {took:?}");
    for role in ["client", "server"] {
        // Every datagram bound ahead is reported back: nothing stays below the binding
        // point once the transfer is over (polled, no deadline on the transfer itself).
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = loop {
            let st = net.status(role);
            let below: u64 = st["sessions"][0]["links"]
                .as_array()
                .map(|ls| ls.iter().filter_map(|l| l["below_binding"].as_u64()).sum())
                .unwrap_or(u64::MAX);
            if below == 0 || Instant::now() > deadline {
                assert_eq!(below, 0, "{role}: {st}");
                break st;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let d = &st["dispatch"];
        let sent = d["sent"].as_u64().unwrap_or(0);
        assert!(sent > 100, "{role}: {st}");
        assert_eq!(d["send_errors"], 0, "{role}: {st}");
        assert_eq!(
            st["sessions"][0]["daemon"]["dispatched"], sent,
            "{role}: {st}"
        );
    }
}

#[test]
fn link_cut_mid_transfer_and_the_transfer_completes() {
    if !root_or_skip("link_cut_mid_transfer_and_the_transfer_completes") {
        return;
    }
    let net = Net::running();
    let ns = net.client_ns.clone();
    let (got, took) = tcp_transfer(&net, 16 << 20, move || {
        std::thread::sleep(Duration::from_millis(150));
        sh(&["ip", "-n", &ns, "link", "set", "c0", "down"]);
    });
    assert_eq!(got, 16 << 20, "logs: {}", net.logs());
    eprintln!("16 MiB with link a cut after 150 ms: {took:?}");
    let st = net.status("client");
    assert_eq!(st["sessions"][0]["links"][0]["state"], "down", "{st}");
}

/// The server restarts (an upgrade, a crash) and forgets the session: the client finds
/// that nothing comes back any more, makes a new session, and the tunnel carries again.
#[test]
fn the_tunnel_carries_again_after_the_server_restarts() {
    if !root_or_skip("the_tunnel_carries_again_after_the_server_restarts") {
        return;
    }
    let mut net = Net::running();
    let (got, _) = tcp_transfer(&net, 1 << 20, || {});
    assert_eq!(got, 1 << 20);
    net.restart_server();
    let restarted = Instant::now();
    let deadline = restarted + Duration::from_secs(30);
    while net.status("server")["sessions"][0]["established"] != true && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (got, took) = tcp_transfer(&net, 4 << 20, || {});
    assert_eq!(got, 4 << 20, "logs: {}", net.logs());
    eprintln!(
        "tunnel back {:?} after the restart; 4 MiB in {took:?}",
        restarted.elapsed() - took
    );
}

/// The server's answers to the session's first handshake are lost (blackhole routes to
/// the client's addresses in the server's namespace): the server accepts the client's
/// initiation, installs its key and uses it at once. The client proposes the same key
/// epoch again each second. Once the way back works, the next retry completes the
/// handshake: before, the server refused it (the epoch was not newer than the key it
/// held) until it dropped the session, 180 s later.
#[test]
fn the_first_handshake_completes_after_its_response_was_lost() {
    if !root_or_skip("the_first_handshake_completes_after_its_response_was_lost") {
        return;
    }
    let mut net = Net::new();
    let blackhole = |op: &str, net: &Net| {
        for client in ["198.18.10.2", "198.18.11.2"] {
            sh(&[
                "ip",
                "-n",
                &net.server_ns,
                "route",
                op,
                "blackhole",
                &format!("{client}/32"),
            ]);
        }
    };
    blackhole("add", &net);
    let client_key = Net::key();
    net.start(&client_key, &client_key.1.clone());
    let deadline = Instant::now() + Duration::from_secs(10);
    while net.logs().matches("handshake accepted").count() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        net.logs().matches("handshake accepted").count() >= 2,
        "the server accepted no retry: {}",
        net.logs()
    );
    assert_ne!(
        net.status("client")["sessions"][0]["established"],
        true,
        "{}",
        net.logs()
    );
    blackhole("del", &net);
    let back = Instant::now();
    net.wait_established();
    eprintln!("established {:?} after the way back worked", back.elapsed());
    let st = net.status("client");
    assert!(
        st["sessions"][0]["handshake_unanswered_s"].is_null(),
        "{st}"
    );
    let (got, _) = tcp_transfer(&net, 1 << 20, || {});
    assert_eq!(got, 1 << 20, "{}", net.report());
}

/// A client that goes away (its host switched off) leaves no session on the server
/// beyond `session_timeout_s`; a live client, idle, keeps its session.
#[test]
fn a_silent_clients_session_times_out_on_the_server() {
    if !root_or_skip("a_silent_clients_session_times_out_on_the_server") {
        return;
    }
    let mut net = Net::new();
    net.server_extra = "session_timeout_s = 2.0\n".into();
    net.start_and_wait();
    let sessions = |net: &Net| {
        net.status("server")["sessions"]
            .as_array()
            .map_or(0, Vec::len)
    };
    // Idle but alive for twice the timeout: its probes keep the session.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(sessions(&net), 1, "{}", net.logs());
    // The client is gone (SIGKILL: it says nothing).
    let client = &mut net.daemons[1];
    let _ = client.kill();
    let _ = client.wait();
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(sessions(&net), 0, "{}", net.status("server"));
    assert!(net.logs().contains("session timed out"));
}

/// A link's server given by name: the client resolves it when it starts (here from the
/// client namespace's own hosts file, which `ip netns exec` puts in place of
/// `/etc/hosts`), and the link carries the tunnel.
#[test]
fn a_links_server_given_by_name_is_resolved() {
    if !root_or_skip("a_links_server_given_by_name_is_resolved") {
        return;
    }
    let mut net = Net::new();
    net.name_link_b_server("198.18.11.1");
    net.start_and_wait();
    let st = net.status("client");
    assert_eq!(
        st["sessions"][0]["links"][1]["peer_address"], "198.18.11.1:51820",
        "{st}"
    );
    let out = Command::new(bin())
        .args(["status", "--socket"])
        .arg(net.dir.join("client.sock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("peer at: a 198.18.10.1:51820, b 198.18.11.1:51820"),
        "{text}"
    );
    transfer_over_link_b_alone(&net);
}

/// The server's name moves to another address (a dynamic DNS name, the server's address
/// changed): nothing comes back at the old one, and the new session the client makes then
/// resolves the name again.
#[test]
fn a_server_name_that_moves_is_resolved_again_for_the_new_session() {
    if !root_or_skip("a_server_name_that_moves_is_resolved_again_for_the_new_session") {
        return;
    }
    let mut net = Net::new();
    net.name_link_b_server("198.18.11.1");
    net.start_and_wait();
    sh(&["ip", "-n", &net.client_ns, "link", "set", "c0", "down"]);
    net.name_link_b_server("198.18.11.3");
    // (Deleting a primary address takes its secondaries with it: delete first.)
    for (verb, addr) in [("del", "198.18.11.1/24"), ("add", "198.18.11.3/24")] {
        sh(&["ip", "-n", &net.server_ns, "addr", verb, addr, "dev", "s1"]);
    }
    let at = |net: &Net| {
        net.status("client")["sessions"][0]["links"][1]["peer_address"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while (at(&net) != "198.18.11.3:51820"
        || net.status("client")["sessions"][0]["established"] != true)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(at(&net), "198.18.11.3:51820", "{}", net.logs());
    transfer_over_link_b_alone(&net);
}

/// The server has several addresses and listens on the wildcard address; link b talks to
/// its second address. The replies must come from that address (the client takes only
/// what comes from where it sends), not from the one the kernel's routes would pick.
#[test]
fn a_server_with_several_addresses_answers_from_the_one_a_link_uses() {
    if !root_or_skip("a_server_with_several_addresses_answers_from_the_one_a_link_uses") {
        return;
    }
    let mut net = Net::new();
    sh(&[
        "ip",
        "-n",
        &net.server_ns,
        "addr",
        "add",
        "198.18.11.3/24",
        "dev",
        "s1",
    ]);
    net.servers[1] = "198.18.11.3:51820".into();
    net.start_and_wait();
    transfer_over_link_b_alone(&net);
}

/// A link's interface is removed and made again (a USB modem unplugged and plugged back
/// in: the same name, another interface index). The client's socket for the link was
/// bound to the old interface; the link must come back all the same: with the other link
/// down, a transfer then goes over it alone.
#[test]
fn a_links_interface_removed_and_made_again_carries_the_tunnel_again() {
    if !root_or_skip("a_links_interface_removed_and_made_again_carries_the_tunnel_again") {
        return;
    }
    let net = Net::running();
    // Deleting one end of a veth pair deletes the other.
    sh(&["ip", "-n", &net.client_ns, "link", "del", "c1"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        net.status("client")["sessions"][0]["links"][1]["state"],
        "down"
    );
    net.make_link(1);
    transfer_over_link_b_alone(&net);
}

/// A link's interface does not exist when the client starts (a USB modem plugged in
/// later): the client starts with the other link and takes the new one when it appears.
#[test]
fn a_links_interface_that_appears_after_the_start_carries_the_tunnel() {
    if !root_or_skip("a_links_interface_that_appears_after_the_start_carries_the_tunnel") {
        return;
    }
    let mut net = Net::new();
    sh(&["ip", "-n", &net.client_ns, "link", "del", "c1"]);
    net.start_and_wait();
    assert_eq!(
        net.status("client")["sessions"][0]["links"][1]["state"],
        "down"
    );
    net.make_link(1);
    transfer_over_link_b_alone(&net);
}

/// A link whose interface appears after the start and then takes a smaller MTU (a
/// cellular modem's 1400 beside a 1500-byte link): the TUN MTU follows it down, so a new
/// TCP connection's segments travel over it whole, and nothing is fragmented; the server
/// learns the link's size, and answers a larger packet "fragmentation needed".
#[test]
fn a_link_that_comes_with_a_smaller_mtu_carries_the_tunnel_unfragmented() {
    if !root_or_skip("a_link_that_comes_with_a_smaller_mtu_carries_the_tunnel_unfragmented") {
        return;
    }
    let mut net = Net::new();
    sh(&["ip", "-n", &net.client_ns, "link", "del", "c1"]);
    net.start_and_wait();
    // 1500 less the tunnel's overhead over IPv4 (100 bytes: outer headers, latebind's
    // header and DATA frame, the AEAD tag, room for an acknowledgement).
    assert_eq!(net.status("client")["mtu"], 1400);
    net.make_link(1);
    sh(&[
        "ip",
        "-n",
        &net.client_ns,
        "link",
        "set",
        "c1",
        "mtu",
        "1400",
    ]);
    let fragments = |ns: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "cat", "/proc/net/snmp"])
            .output()
            .expect("spawn");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap_or(""), ip.next().unwrap_or(""));
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "FragCreates")
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .expect("FragCreates in /proc/net/snmp")
    };
    let before = fragments(&net.client_ns);
    transfer_over_link_b_alone(&net);
    let st = net.status("client");
    assert_eq!(st["mtu"], 1300, "{st}");
    assert_eq!(st["sessions"][0]["engine"]["data_oversized"], 0, "{st}");
    assert!(
        st["sessions"][0]["links"][1]["datagrams_sent"].as_u64() > Some(2000),
        "{st}"
    );
    assert_eq!(fragments(&net.client_ns), before, "IPv4 fragments made");
    // The server, which cannot see the client's interface, learnt it (LINK_MTU): 1400
    // less the outer headers and the tag.
    let server = net.status("server");
    let b = server["sessions"][0]["links"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["id"] == 1))
        .cloned()
        .unwrap_or_default();
    assert_eq!(b["max_datagram"], 1400 - 28 - 16, "{server}");
    // A 1400-byte datagram from the server's side (DF set, as Linux sets it on a UDP
    // socket by default) does not fit link b, the only link up: the server answers it
    // "fragmentation needed", and the server's kernel then holds 1329 bytes (link b's
    // 1356 less latebind's 27) as the path MTU to the client.
    let route = |ns: &str| {
        let out = Command::new("ip")
            .args(["-n", ns, "route", "get", "10.77.0.2"])
            .output()
            .expect("spawn");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(!route(&net.server_ns).contains("mtu 1329"));
    // The socket stays open: its kernel takes the answer only while it exists.
    let _socket = Net::in_ns(&net.server_ns, || {
        let s = UdpSocket::bind("10.77.0.1:0").unwrap();
        s.send_to(&[7u8; 1400 - 28], "10.77.0.2:5009").unwrap();
        s
    })
    .join()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    while !route(&net.server_ns).contains("mtu 1329") {
        assert!(
            Instant::now() < deadline,
            "route: {}\n{}",
            route(&net.server_ns),
            net.report()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let engine = &net.status("server")["sessions"][0]["engine"];
    assert!(engine["too_big_signalled"].as_u64() >= Some(1), "{engine}");
}

/// A link whose path drops datagrams larger than 1400 bytes, with no ICMP (the server's
/// end of the veth takes MTU 1400, the client's keeps 1500: a hop further on with a
/// smaller MTU, as a carrier's tunnel behind a modem that reports 1500). The client's
/// probes find the size, and a TCP upload over that link alone completes: its sender is
/// told "packet too big" once the size is known. Without the probes its full-size
/// datagrams vanish and the upload stalls.
#[test]
fn a_link_whose_path_drops_large_datagrams_is_probed_and_carries_the_tunnel() {
    if !root_or_skip("a_link_whose_path_drops_large_datagrams_is_probed_and_carries_the_tunnel") {
        return;
    }
    let mut net = Net::new();
    sh(&[
        "ip",
        "-n",
        &net.server_ns,
        "link",
        "set",
        "s1",
        "mtu",
        "1400",
    ]);
    net.start_and_wait();
    transfer_over_link_b_alone(&net);
    let st = net.status("client");
    let b = &st["sessions"][0]["links"][1];
    // 1400 less the outer IPv4 and UDP headers and the tag is 1356; the search stops
    // within 16 bytes of it.
    let found = b["max_datagram"].as_u64().unwrap_or(0);
    assert!((1340..=1356).contains(&found), "{st}");
    assert!(
        st["sessions"][0]["engine"]["too_big_signalled"].as_u64() >= Some(1),
        "{st}"
    );
}

/// Takes link a down, waits for link b to be up, and sends 4 MiB through the tunnel:
/// over link b alone.
fn transfer_over_link_b_alone(net: &Net) {
    sh(&["ip", "-n", &net.client_ns, "link", "set", "c0", "down"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while net.status("client")["sessions"][0]["links"][1]["state"] != "up" {
        assert!(
            Instant::now() < deadline,
            "link b not up 10 s after its interface came back\n{}",
            net.report()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (got, took) = tcp_transfer(net, 4 << 20, || {});
    assert_eq!(
        got,
        4 << 20,
        "client: {}\nlogs: {}",
        net.status("client"),
        net.logs()
    );
    eprintln!("4 MiB over link b in {took:?}");
}

/// Packets the TUN device `dev` in namespace `ns` counted in direction `dir` (`rx`: what
/// the daemon wrote to the kernel, `tx`: what the kernel handed the daemon), one per
/// segment the kernel handled, however many packets it held.
fn tun_packets(ns: &str, dev: &str, dir: &str) -> u64 {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "-s", "link", "show", "dev", dev])
        .output()
        .expect("ip");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ip -j");
    v[0]["stats64"][dir]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("{dev} in {ns}: no {dir} packets in {v}"))
}

/// With the TUN offloads (the default), a bulk TCP flow crosses each end's kernel in
/// segments of many packets, both ways: the sender's kernel hands its TUN device TSO
/// segments of up to 64 KB, which the daemon splits into packets for the engine, and the
/// receiver's daemon writes the packets of a flow that one round of its loop delivers as
/// one segment. The bytes arrive intact either way. Without them (`tun_offload = false`),
/// one packet per read and per write.
#[test]
fn a_bulk_transfer_crosses_each_kernel_in_segments_of_many_packets() {
    if !root_or_skip("a_bulk_transfer_crosses_each_kernel_in_segments_of_many_packets") {
        return;
    }
    for offload in [true, false] {
        let mut net = Net::new();
        let client_key = Net::key();
        let extra = if offload { "" } else { "tun_offload = false\n" };
        net.start_with(&client_key, &client_key.1.clone(), extra);
        net.wait_established();
        let st = net.status("client");
        assert_eq!(st["tun_offload"], offload, "{st}");
        assert_eq!(net.status("server")["tun_offload"], offload);
        // The inner TCP's segments: the TUN MTU less 52 bytes of headers (timestamps on).
        let mss = st["mtu"].as_u64().unwrap() - 52;
        let bytes = 8 << 20;
        let segments = bytes as u64 / mss;
        let client = (net.client_ns.as_str(), "lb0");
        let server = (net.server_ns.as_str(), "lbs0");
        for (towards, (tx_ns, tx_dev), (rx_ns, rx_dev)) in [
            (Towards::Server, &client, &server),
            (Towards::Client, &server, &client),
        ] {
            let read0 = tun_packets(tx_ns, tx_dev, "tx");
            let written0 = tun_packets(rx_ns, rx_dev, "rx");
            let (got, took) = tcp_transfer_towards(&net, towards, bytes, || {});
            assert_eq!(got, bytes, "{}", net.report());
            let read = tun_packets(tx_ns, tx_dev, "tx") - read0;
            let written = tun_packets(rx_ns, rx_dev, "rx") - written0;
            eprintln!(
                "offload {offload}: 8 MiB to {rx_dev} in {took:?}, {segments} segments of {mss} B: \
                 the sender's daemon read {read} times, the receiver's wrote {written} times"
            );
            if offload {
                assert!(read < segments / 2, "{tx_dev}: read {read} for {segments}");
                assert!(
                    written < segments / 2,
                    "{rx_dev}: wrote {written} for {segments}"
                );
            } else {
                assert!(read >= segments, "{tx_dev}: read {read} for {segments}");
                assert!(
                    written >= segments,
                    "{rx_dev}: wrote {written} for {segments}"
                );
            }
        }
        let (c, s) = (net.status("client"), net.status("server"));
        assert_eq!(c["tun_write_errors"], 0, "{c}");
        assert_eq!(s["tun_write_errors"], 0, "{s}");
    }
}

#[test]
fn forged_garbage_and_wrong_key_dropped_and_counted_tunnel_keeps_working() {
    if !root_or_skip("forged_garbage_and_wrong_key_dropped_and_counted_tunnel_keeps_working") {
        return;
    }
    let net = Net::running();
    let session = net.status("client")["sessions"][0]["session"]
        .as_u64()
        .unwrap() as u32;
    // From the client's namespace, straight at the server's socket: garbage, a truncated
    // header, a forged datagram with the live session id, and a handshake from a key the
    // server does not know.
    Net::in_ns(&net.client_ns, move || {
        let s = UdpSocket::bind("198.18.10.2:0").unwrap();
        let to = "198.18.10.1:51820";
        s.send_to(&[0xde; 200], to).unwrap();
        s.send_to(&[1, 0, 0], to).unwrap();
        let mut forged = vec![1u8, 0];
        forged.extend_from_slice(&session.to_be_bytes());
        forged.extend_from_slice(&[0, 0, 0, 0, 0, 9]);
        forged.extend_from_slice(&[0x55; 100]);
        s.send_to(&forged, to).unwrap();
        let mut handshake = vec![1u8, 0x81];
        handshake.extend_from_slice(&7u32.to_be_bytes());
        handshake.extend_from_slice(&[0u8; 6]);
        handshake.extend_from_slice(&[0x11; 96]);
        s.send_to(&handshake, to).unwrap();
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let st = net.status("server");
    let auth_failed = st["sessions"][0]["daemon"]["auth_failed"].as_u64().unwrap();
    assert!(auth_failed >= 1, "{st}");
    assert!(st["unknown_session"].as_u64().unwrap() >= 1, "{st}");
    assert!(st["handshakes_rejected"].as_u64().unwrap() >= 1, "{st}");
    // Still works.
    let (got, _) = tcp_transfer(&net, 1 << 20, || {});
    assert_eq!(got, 1 << 20);
}

#[test]
fn unknown_client_key_gets_no_tunnel() {
    if !root_or_skip("unknown_client_key_gets_no_tunnel") {
        return;
    }
    let mut net = Net::new();
    let client_key = Net::key();
    let other = Net::key();
    net.start(&client_key, &other.1);
    // The client warns once its handshake has gone unanswered for 3 s (its fourth
    // attempt); wait for that, at most 10 s.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !net.logs().contains("no answer to the handshake") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(net.status("client")["sessions"][0]["established"], false);
    assert!(
        net.status("server")["handshakes_rejected"]
            .as_u64()
            .unwrap()
            >= 1
    );
    // Both logs say what to fix: the server names the key it refused (once, not at each
    // of the client's retries), the client says nothing answered and gives its key.
    let logs = net.logs();
    let refused = format!("client_key={}", client_key.1);
    assert_eq!(logs.matches("not among the [[peers]]").count(), 1, "{logs}");
    assert!(logs.contains(&refused), "{logs}");
    assert!(logs.contains("no answer to the handshake"), "{logs}");
    let unanswered = net.status("client")["sessions"][0]["handshake_unanswered_s"].as_f64();
    assert!(unanswered >= Some(3.0), "{unanswered:?}");
}

/// A client given another server public key than the server's: the server cannot decrypt
/// its initiations and says which key the client needs.
#[test]
fn a_client_with_another_server_key_is_told_in_the_servers_log() {
    if !root_or_skip("a_client_with_another_server_key_is_told_in_the_servers_log") {
        return;
    }
    let mut net = Net::new();
    net.client_server_key = Some(Net::key().1);
    let client_key = Net::key();
    net.start(&client_key, &client_key.1.clone());
    // Several refusals (the client retries each second), so that "once" is tested: wait
    // for four, at most 10 s, rather than for a fixed time.
    let rejected = || {
        net.status("server")["handshakes_rejected"]
            .as_u64()
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while rejected() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(rejected() >= 4, "{}", net.logs());
    assert_eq!(net.status("client")["sessions"][0]["established"], false);
    let logs = net.logs();
    assert_eq!(
        logs.matches("does not decrypt with this server's key")
            .count(),
        1,
        "{logs}"
    );
}

#[test]
fn bad_config_rejected_with_key_value_and_expectation() {
    let dir = std::env::temp_dir().join(format!("latebind-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.toml");
    std::fs::write(
        &path,
        "[client]\nprivate_key = \"x\"\nserver_public_key = \"y\"\naddress = \"10.77.0.2\"\n[[links]]\nname = \"a\"\ninterface = \"c0\"\nserver = \"198.18.10.1:51820\"\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["client", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("client.private_key"), "{err}");
    std::fs::write(&path, "[client]\naddres = 1\n").unwrap();
    let out = Command::new(bin())
        .args(["client", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("addres"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
