//! The lab's topology: three network namespaces joined by veth pairs, one pair on
//! each side of the emulator per scenario link, and a guard that removes everything.
//!
//! ```text
//!  client ns                 emu ns                       server ns
//!  lo: 198.18.0.2/32         (no addresses; the emulator  lo: 198.19.0.1/32
//!                             bridges ec{i} <-> es{i}
//!                             at layer 2)
//!  c{i} 198.18.{i+1}.1/24 ── ec{i}          es{i} ── s{i} 198.18.{i+1}.2/24
//! ```
//!
//! # Addressing (all inside 198.18.0.0/15, the benchmarking range)
//!
//! - Application addresses, one per end, on `lo`: the client's **198.18.0.2** and the
//!   server's **198.19.0.1**, the addresses the simulator's traffic uses, so reports
//!   and captures read the same in both. A mode routes between them.
//! - Link `i` (0 ≤ i < 64) is one /24, **198.18.{i+1}.0/24**: the client's `c{i}` is
//!   `.1`, the server's `s{i}` is `.2`. Both ends share the subnet because the emulator
//!   forwards Ethernet frames between `ec{i}` and `es{i}` (an L2 bridge); `ec{i}` and
//!   `es{i}` carry no address. 198.18.0.0/24 holds only the client's application
//!   address, and 198.19.0.0/16 only the server's (room for a mode's tunnel
//!   addresses).
//! - MACs are fixed, locally administered: `02:6c:62:00:{i}:01` on `c{i}`,
//!   `02:6c:62:00:{i}:02` on `s{i}`; both ends get a permanent neighbour entry for the
//!   other, so no ARP is needed (a burst must not wait in an unresolved neighbour's
//!   small queue) and the emulator only forwards ARP if something still asks.
//!
//! No namespace has a default route or any route out of the lab: only the connected
//! /24s until a mode installs routes between the application addresses. IPv6 is
//! disabled in all three namespaces (no router solicitations or MLD on the links),
//! reverse-path filtering is off (a mode may move the return path), and offloads
//! (checksum, scatter-gather, TSO, GSO, GRO) are off on every veth, so every frame is
//! one MTU-sized packet with a complete checksum, which per-packet timing and the
//! packet counts of a FIFO need.
//!
//! # Names and cleanup
//!
//! Namespaces are `lblab-{pid}-{n}-client|emu|server`: the pid of the process that made
//! them and a per-process counter, so parallel and back-to-back runs never collide.
//! [`Topology`] deletes them on drop (after killing every process inside), a SIGINT
//! or SIGTERM handler does the same for every live topology before the process dies,
//! and [`cleanup_stale`] removes those of processes that no longer exist (a run killed
//! with SIGKILL). Helpers are started with `PR_SET_PDEATHSIG = SIGKILL`, so they die with
//! the thread that started them.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::netlink::Netlink;
use crate::sys;

/// Prefix of every namespace the lab creates.
pub const NS_PREFIX: &str = "lblab-";
/// Most links a topology can have (the scenario contract's limit).
pub const MAX_LINKS: usize = 64;
/// The client's application address (on its `lo`).
pub const CLIENT_APP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// The server's application address (on its `lo`).
pub const SERVER_APP: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Prefix length of a link's subnet.
pub const LINK_PREFIX_LEN: u8 = 24;

/// One of the three namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The multi-homed host.
    Client,
    /// The link emulator.
    Emu,
    /// The aggregation server.
    Server,
}

impl Role {
    /// All roles, in creation order.
    pub const ALL: [Self; 3] = [Self::Client, Self::Emu, Self::Server];

    /// The suffix of the namespace's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Emu => "emu",
            Self::Server => "server",
        }
    }
}

/// Names and addresses of one link (see the module docs for the scheme).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkAddrs {
    /// Link index in the scenario.
    pub index: usize,
    /// The client's interface, `c{i}`.
    pub client_if: String,
    /// The emulator's interface facing the client, `ec{i}`.
    pub emu_client_if: String,
    /// The emulator's interface facing the server, `es{i}`.
    pub emu_server_if: String,
    /// The server's interface, `s{i}`.
    pub server_if: String,
    /// `198.18.{i+1}.1`.
    pub client: Ipv4Addr,
    /// `198.18.{i+1}.2`.
    pub server: Ipv4Addr,
    /// MAC of `c{i}`.
    pub client_mac: [u8; 6],
    /// MAC of `s{i}`.
    pub server_mac: [u8; 6],
}

/// The addressing of link `index`; `None` beyond [`MAX_LINKS`].
pub fn link_addrs(index: usize) -> Option<LinkAddrs> {
    if index >= MAX_LINKS {
        return None;
    }
    let third = u8::try_from(index + 1).ok()?;
    let i = index as u8;
    Some(LinkAddrs {
        index,
        client_if: format!("c{index}"),
        emu_client_if: format!("ec{index}"),
        emu_server_if: format!("es{index}"),
        server_if: format!("s{index}"),
        client: Ipv4Addr::new(198, 18, third, 1),
        server: Ipv4Addr::new(198, 18, third, 2),
        client_mac: [0x02, 0x6c, 0x62, 0x00, i, 0x01],
        server_mac: [0x02, 0x6c, 0x62, 0x00, i, 0x02],
    })
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_string(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `(pid, counter, role)` of a lab namespace name.
pub fn parse_ns_name(name: &str) -> Option<(i32, u64, Role)> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let n = parts.next()?.parse().ok()?;
    let role = match parts.next()? {
        "client" => Role::Client,
        "emu" => Role::Emu,
        "server" => Role::Server,
        _ => return None,
    };
    Some((pid, n, role))
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Live topologies (key -> namespace names), for the signal handler.
static LIVE: Mutex<BTreeMap<u64, Vec<String>>> = Mutex::new(BTreeMap::new());

/// Runs a command, failing with its stderr.
fn run_cmd(program: &str, args: &[&str], stdin: Option<&str>) -> Result<()> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {program} (is iproute2 installed?)"))?;
    if let Some(text) = stdin
        && let Some(mut w) = child.stdin.take()
    {
        w.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim(),
            stdin.map(|s| format!("\ninput:\n{s}")).unwrap_or_default()
        );
    }
    Ok(())
}

/// Lists the pids of the processes inside namespace `ns` (`ip netns pids`).
fn netns_pids(ns: &str) -> Vec<i32> {
    let Ok(out) = Command::new("ip")
        .args(["netns", "pids", ns])
        .stderr(Stdio::null())
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Kills every process inside `ns` (TERM, then KILL after `grace`) and deletes it.
fn destroy_namespace(ns: &str, grace: Duration) -> Result<()> {
    let me = std::process::id() as i32;
    let pids: Vec<i32> = netns_pids(ns).into_iter().filter(|&p| p != me).collect();
    for &p in &pids {
        sys::kill(p, libc::SIGTERM);
    }
    let deadline = sys::mono_ns() + grace.as_nanos() as u64;
    while pids.iter().any(|&p| sys::pid_alive(p)) && sys::mono_ns() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for &p in &pids {
        sys::kill(p, libc::SIGKILL);
    }
    if !Path::new(&sys::netns_path(ns)).exists() {
        return Ok(());
    }
    run_cmd("ip", &["netns", "del", ns], None)
}

/// Names of the lab's namespaces that exist now.
pub fn lab_namespaces() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return Vec::new();
    };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| n.starts_with(NS_PREFIX))
        .collect();
    v.sort();
    v
}

/// Removes the namespaces (and any process still inside) left by lab runs whose
/// process is gone; returns their names. Namespaces of live processes are kept.
pub fn cleanup_stale() -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for ns in lab_namespaces() {
        let Some((pid, _, _)) = parse_ns_name(&ns) else {
            continue;
        };
        if sys::pid_alive(pid) {
            continue;
        }
        destroy_namespace(&ns, Duration::from_millis(50))?;
        removed.push(ns);
    }
    Ok(removed)
}

static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(Ordering::SeqCst);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from a local.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// Installs (once per process) SIGINT/SIGTERM handlers that tear down every live
/// topology, then let the signal end the process as it would have.
fn install_signal_cleanup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for two descriptors.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return;
        }
        SIGNAL_PIPE.store(fds[1], Ordering::SeqCst);
        let read_fd = fds[0];
        std::thread::Builder::new()
            .name("lab-signal-cleanup".into())
            .spawn(move || {
                let mut b = 0u8;
                // SAFETY: reads one byte into a local.
                let n = unsafe { libc::read(read_fd, (&mut b as *mut u8).cast(), 1) };
                if n != 1 {
                    return;
                }
                let live: Vec<String> = match LIVE.lock() {
                    Ok(g) => g.values().flatten().cloned().collect(),
                    Err(p) => p.into_inner().values().flatten().cloned().collect(),
                };
                for ns in &live {
                    let _ = destroy_namespace(ns, Duration::from_millis(100));
                }
                eprintln!(
                    "latebind lab: signal {b}: removed {} namespace(s), exiting",
                    live.len()
                );
                // SAFETY: restore the default action and re-raise, so the process ends
                // the way the signal asks (exit status 128 + signal).
                unsafe {
                    libc::signal(libc::c_int::from(b), libc::SIG_DFL);
                    libc::raise(libc::c_int::from(b));
                }
            })
            .ok();
        // SAFETY: the handler only writes one byte to a pipe (async-signal-safe).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_RESTART;
            libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
            libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut());
        }
    });
}

/// A helper process started inside a namespace (`ip netns exec NS <exe> ...`).
/// Dropping it kills it (SIGKILL) if it still runs.
#[derive(Debug)]
pub struct Helper {
    /// A name for messages (`emulate`, `recv bulk`, ...).
    pub name: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    child: Child,
    status: Option<ExitStatus>,
}

impl Helper {
    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The exit status, if it has exited.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Waits until it exits or the monotonic time reaches `deadline_ns`.
    pub fn wait_until(&mut self, deadline_ns: u64) -> io::Result<Option<ExitStatus>> {
        loop {
            if let Some(s) = self.try_wait()? {
                return Ok(Some(s));
            }
            if sys::mono_ns() >= deadline_ns {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL; returns the exit status.
    pub fn terminate(&mut self, grace: Duration) -> io::Result<ExitStatus> {
        if let Some(s) = self.try_wait()? {
            return Ok(s);
        }
        sys::kill(self.pid(), libc::SIGTERM);
        if let Some(s) = self.wait_until(sys::mono_ns() + grace.as_nanos() as u64)? {
            return Ok(s);
        }
        let _ = self.child.kill();
        let s = self.child.wait()?;
        self.status = Some(s);
        Ok(s)
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if matches!(self.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Three namespaces and the veth pairs of `n` links, removed on drop. See the module
/// docs for the layout and addressing.
#[derive(Debug)]
pub struct Topology {
    /// `lblab-{pid}-{n}`.
    pub id: String,
    /// The links' names and addresses.
    pub links: Vec<LinkAddrs>,
    /// Every `ip`/`tc` command run to build it, in order (for the run's log).
    pub commands: Vec<String>,
    /// Offloads that could not be turned off (interface and feature), if any.
    pub offload_warnings: Vec<String>,
    key: u64,
    torn_down: bool,
}

/// Legacy ethtool commands (linux/ethtool.h) that set one offload on or off.
const ETHTOOL_OFFLOADS: [(&str, u32, u32); 5] = [
    // (name, set command, get command)
    ("generic-receive-offload", 0x2c, 0x2b),
    ("generic-segmentation-offload", 0x24, 0x23),
    ("tcp-segmentation-offload", 0x1f, 0x1e),
    ("scatter-gather", 0x19, 0x18),
    ("tx-checksumming", 0x17, 0x16),
];

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [u8; 16],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

fn ethtool(fd: i32, ifname: &str, cmd: u32, data: u32) -> io::Result<u32> {
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfreqData {
        name: [0; 16],
        data: &mut value,
        _pad: [0; 16],
    };
    let n = ifname.len().min(15);
    req.name[..n].copy_from_slice(&ifname.as_bytes()[..n]);
    // SAFETY: SIOCETHTOOL reads the name and the ethtool_value the pointer refers to,
    // both alive for the call.
    sys::cvt(unsafe { libc::ioctl(fd, libc::SIOCETHTOOL, &mut req) })?;
    Ok(value.data)
}

/// Turns off GRO, GSO, TSO, scatter-gather and TX checksumming on `ifname` (through
/// the socket `fd` of its namespace); returns the features that stayed on.
fn offloads_off(fd: i32, ifname: &str) -> Vec<String> {
    let mut left = Vec::new();
    for (name, set, get) in ETHTOOL_OFFLOADS {
        let _ = ethtool(fd, ifname, set, 0);
        match ethtool(fd, ifname, get, 0) {
            Ok(0) => {}
            Ok(_) => left.push(format!("{ifname}: {name} still on")),
            Err(e) => left.push(format!("{ifname}: {name}: {e}")),
        }
    }
    left
}

/// The offloads still on for an interface of namespace `ns` (empty when all are off).
pub fn offloads_on(ns: &str, ifname: &str) -> Result<Vec<String>> {
    let nl = Netlink::open_in(ns)?;
    let mut on = Vec::new();
    for (name, _, get) in ETHTOOL_OFFLOADS {
        if ethtool(nl.ioctl_fd(), ifname, get, 0)? != 0 {
            on.push(name.to_owned());
        }
    }
    Ok(on)
}

/// Writes a sysctl inside namespace `ns` (the thread that opens the file has joined
/// the namespace, and /proc/sys/net follows the opener's namespace).
fn sysctls(ns: &str, settings: &[(&str, &str)]) -> Result<()> {
    let settings: Vec<(String, String)> = settings
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    sys::in_netns(ns, move || {
        for (k, v) in &settings {
            let path = format!("/proc/sys/{}", k.replace('.', "/"));
            std::fs::write(&path, v)
                .map_err(|e| io::Error::new(e.kind(), format!("{path} = {v}: {e}")))?;
        }
        Ok(())
    })
    .with_context(|| format!("sysctls in {ns}"))
}

/// The `ip` commands that give link `l` its addresses, bring its two ends up and pin
/// their neighbour entries: the client's end into `client`, the server's into `server`.
fn link_ends(l: &LinkAddrs, client: &mut Vec<String>, server: &mut Vec<String>) {
    for (cmds, (addr, ifname), (peer, peer_mac)) in [
        (client, (l.client, &l.client_if), (l.server, l.server_mac)),
        (server, (l.server, &l.server_if), (l.client, l.client_mac)),
    ] {
        cmds.push(format!("addr add {addr}/{LINK_PREFIX_LEN} dev {ifname}"));
        cmds.push(format!("link set {ifname} up"));
        cmds.push(format!(
            "neigh replace {peer} lladdr {} dev {ifname} nud permanent",
            mac_string(peer_mac)
        ));
    }
}

impl Topology {
    /// Builds the namespaces and `n_links` links (removing stale lab namespaces of dead
    /// processes first). Everything built so far is removed if a step fails.
    pub fn create(n_links: usize) -> Result<Self> {
        Self::create_with(n_links, Self::build)
    }

    /// Client and server namespaces only, link `i` one veth pair `c{i}` <-> `s{i}`
    /// joining them directly (no emulator: an unshaped link, or one shaped by `tc` on
    /// its ends); addresses and MACs as in the module docs. Removed on drop.
    pub fn create_direct(n_links: usize) -> Result<Self> {
        Self::create_with(n_links, Self::build_direct)
    }

    /// A topology of `n_links` links that `build` makes; everything built so far is
    /// removed if it fails.
    fn create_with(n_links: usize, build: fn(&mut Self) -> Result<()>) -> Result<Self> {
        if n_links == 0 || n_links > MAX_LINKS {
            bail!("{n_links} links: expected 1 to {MAX_LINKS}");
        }
        cleanup_stale().context("removing stale lab namespaces")?;
        install_signal_cleanup();
        let key = NEXT_ID.fetch_add(1, Ordering::SeqCst);
        let id = format!("{NS_PREFIX}{}-{key}", std::process::id());
        let links: Vec<LinkAddrs> = (0..n_links)
            .map(|i| link_addrs(i).expect("checked against MAX_LINKS above"))
            .collect();
        let mut topo = Self {
            id,
            links,
            commands: Vec::new(),
            offload_warnings: Vec::new(),
            key,
            torn_down: false,
        };
        // Registered before the first namespace exists, so a signal during the build
        // removes whatever was made.
        lock_live().insert(key, Role::ALL.iter().map(|&r| topo.ns(r)).collect());
        if let Err(e) = build(&mut topo) {
            let _ = topo.teardown();
            return Err(e);
        }
        Ok(topo)
    }

    fn build_direct(&mut self) -> Result<()> {
        for role in [Role::Client, Role::Server] {
            let ns = self.ns(role);
            self.ip(&["netns", "add", &ns])?;
            sysctls(
                &ns,
                &[
                    ("net.ipv6.conf.all.disable_ipv6", "1"),
                    ("net.ipv6.conf.default.disable_ipv6", "1"),
                ],
            )?;
        }
        let (server_ns, links) = (self.ns(Role::Server), self.links.clone());
        let mut client = vec!["link set lo up".to_owned()];
        for l in &links {
            client.push(format!(
                "link add {} address {} type veth peer name {} address {} netns {server_ns}",
                l.client_if,
                mac_string(l.client_mac),
                l.server_if,
                mac_string(l.server_mac),
            ));
        }
        self.batch("ip", Role::Client, &client)?;
        let mut client = Vec::new();
        let mut server = vec!["link set lo up".to_owned()];
        for l in &links {
            link_ends(l, &mut client, &mut server);
        }
        self.batch("ip", Role::Client, &client)?;
        self.batch("ip", Role::Server, &server)?;
        for role in [Role::Client, Role::Server] {
            let names: Vec<&str> = links
                .iter()
                .map(|l| match role {
                    Role::Client => l.client_if.as_str(),
                    _ => l.server_if.as_str(),
                })
                .collect();
            self.offloads_off(role, &names)?;
        }
        Ok(())
    }

    /// The namespace name of `role`.
    pub fn ns(&self, role: Role) -> String {
        format!("{}-{}", self.id, role.as_str())
    }

    fn ip(&mut self, args: &[&str]) -> Result<()> {
        self.commands.push(format!("ip {}", args.join(" ")));
        run_cmd("ip", args, None)
    }

    /// Runs `lines` through `ip -n NS -batch -` (or `tc`).
    fn batch(&mut self, program: &str, role: Role, lines: &[String]) -> Result<()> {
        let ns = self.ns(role);
        for l in lines {
            self.commands.push(format!("{program} -n {ns} {l}"));
        }
        let text = lines.join("\n") + "\n";
        run_cmd(program, &["-n", &ns, "-batch", "-"], Some(&text))
    }

    fn build(&mut self) -> Result<()> {
        for role in Role::ALL {
            let ns = self.ns(role);
            self.ip(&["netns", "add", &ns])?;
            sysctls(
                &ns,
                &[
                    ("net.ipv6.conf.all.disable_ipv6", "1"),
                    ("net.ipv6.conf.default.disable_ipv6", "1"),
                    ("net.ipv4.conf.all.rp_filter", "0"),
                    ("net.ipv4.conf.default.rp_filter", "0"),
                    ("net.ipv4.ip_forward", "0"),
                ],
            )?;
        }
        let (emu, links) = (self.ns(Role::Emu), self.links.clone());
        let mut client = vec!["link set lo up".to_owned()];
        let mut server = vec!["link set lo up".to_owned()];
        for l in &links {
            client.push(format!(
                "link add {} address {} type veth peer name {} netns {emu}",
                l.client_if,
                mac_string(l.client_mac),
                l.emu_client_if
            ));
            server.push(format!(
                "link add {} address {} type veth peer name {} netns {emu}",
                l.server_if,
                mac_string(l.server_mac),
                l.emu_server_if
            ));
        }
        self.batch("ip", Role::Client, &client)?;
        self.batch("ip", Role::Server, &server)?;
        let mut client = vec![format!("addr add {CLIENT_APP}/32 dev lo")];
        let mut server = vec![format!("addr add {SERVER_APP}/32 dev lo")];
        let mut emu_cmds = vec!["link set lo up".to_owned()];
        for l in &links {
            link_ends(l, &mut client, &mut server);
            emu_cmds.push(format!("link set {} up", l.emu_client_if));
            emu_cmds.push(format!("link set {} up", l.emu_server_if));
        }
        self.batch("ip", Role::Client, &client)?;
        self.batch("ip", Role::Server, &server)?;
        self.batch("ip", Role::Emu, &emu_cmds)?;
        for role in Role::ALL {
            let names: Vec<&str> = links
                .iter()
                .flat_map(|l| match role {
                    Role::Client => vec![l.client_if.as_str()],
                    Role::Emu => vec![l.emu_client_if.as_str(), l.emu_server_if.as_str()],
                    Role::Server => vec![l.server_if.as_str()],
                })
                .collect();
            self.offloads_off(role, &names)?;
        }
        Ok(())
    }

    /// Turns offloads off on interfaces `names` of namespace `role` (what cannot be
    /// turned off goes to the warnings), and logs it.
    fn offloads_off(&mut self, role: Role, names: &[&str]) -> Result<()> {
        let nl = Netlink::open_in(&self.ns(role))?;
        for name in names {
            let left = offloads_off(nl.ioctl_fd(), name);
            self.offload_warnings.extend(left);
            self.commands.push(format!(
                "# {}: {name}: gro gso tso sg tx-checksumming off (ethtool ioctls)",
                role.as_str()
            ));
        }
        Ok(())
    }

    /// Runs `tc` commands in namespace `role` (`tc -n NS -batch -`).
    pub fn tc(&mut self, role: Role, lines: &[String]) -> Result<()> {
        self.batch("tc", role, lines)
    }

    /// Runs `ip` commands in namespace `role` (`ip -n NS -batch -`).
    pub fn ip_batch(&mut self, role: Role, lines: &[String]) -> Result<()> {
        self.batch("ip", role, lines)
    }

    /// Writes a sysctl in namespace `role` (`net.mptcp.enabled`, ...).
    pub fn sysctl(&mut self, role: Role, key: &str, value: &str) -> Result<()> {
        let ns = self.ns(role);
        self.commands
            .push(format!("ip netns exec {ns} sysctl -w {key}={value}"));
        sysctls(&ns, &[(key, value)])
    }

    /// Starts `<exe> args...` inside namespace `role` (`ip netns exec`), its output
    /// appended to `log`. The helper gets SIGKILL if the calling thread ends.
    pub fn spawn<S: AsRef<OsStr>>(
        &self,
        role: Role,
        name: &str,
        exe: &Path,
        args: &[S],
        log: &Path,
    ) -> Result<Helper> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("{}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = Command::new("ip");
        cmd.arg("netns")
            .arg("exec")
            .arg(self.ns(role))
            .arg(exe)
            .args(args)
            // Plain log files (the daemons' tracing output has no colours then).
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {name} in {}", self.ns(role)))?;
        Ok(Helper {
            name: name.to_owned(),
            log: log.to_owned(),
            child,
            status: None,
        })
    }

    /// Kills every process in the namespaces and deletes them. Idempotent.
    pub fn teardown(&mut self) -> Result<()> {
        if self.torn_down {
            return Ok(());
        }
        self.torn_down = true;
        let mut first_err = None;
        for role in Role::ALL.iter().rev() {
            if let Err(e) = destroy_namespace(&self.ns(*role), Duration::from_millis(200)) {
                first_err.get_or_insert(e);
            }
        }
        lock_live().remove(&self.key);
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("latebind lab: teardown of {}: {e:#}", self.id);
        }
    }
}

fn lock_live() -> std::sync::MutexGuard<'static, BTreeMap<u64, Vec<String>>> {
    // A panic while holding the lock leaves the map intact; keep using it.
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_addresses_follow_the_scheme() {
        let l = link_addrs(0).unwrap();
        assert_eq!(l.client, Ipv4Addr::new(198, 18, 1, 1));
        assert_eq!(l.server, Ipv4Addr::new(198, 18, 1, 2));
        assert_eq!(
            (
                &*l.client_if,
                &*l.emu_client_if,
                &*l.emu_server_if,
                &*l.server_if
            ),
            ("c0", "ec0", "es0", "s0")
        );
        let l = link_addrs(63).unwrap();
        assert_eq!(l.client, Ipv4Addr::new(198, 18, 64, 1));
        assert_eq!(mac_string(l.server_mac), "02:6c:62:00:3f:02");
        assert!(link_addrs(MAX_LINKS).is_none());
    }

    #[test]
    fn link_subnets_are_distinct_and_avoid_application_addresses() {
        let mut nets = std::collections::BTreeSet::new();
        for i in 0..MAX_LINKS {
            let l = link_addrs(i).unwrap();
            let [a, b, c, _] = l.client.octets();
            assert_eq!(l.server.octets()[..3], [a, b, c], "one /24 per link");
            assert!(nets.insert((a, b, c)), "subnet of link {i} reused");
            // Inside 198.18.0.0/15, outside the application addresses' /24s.
            assert!(a == 198 && (b & 0xfe) == 18);
            assert_ne!((a, b, c), (198, 18, 0));
            assert_ne!((a, b), (198, 19));
        }
    }

    #[test]
    fn namespace_names_round_trip() {
        assert_eq!(
            parse_ns_name("lblab-1234-7-client"),
            Some((1234, 7, Role::Client))
        );
        assert_eq!(parse_ns_name("lblab-1-0-emu"), Some((1, 0, Role::Emu)));
        assert_eq!(parse_ns_name("lblab-1-0-router"), None);
        assert_eq!(parse_ns_name("other-1-0-emu"), None);
        assert_eq!(parse_ns_name("lblab-x-0-emu"), None);
    }
}
