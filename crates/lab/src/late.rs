//! Mode `late`: the real latebind daemons between the client and server namespaces.
//!
//! ```text
//!  client ns                                             server ns
//!  app 10.77.0.2 ── lb0 (TUN) ── latebind client         latebind server ── lbs0 (TUN) ── app 10.77.0.1
//!                                 one UDP socket per link  one UDP socket, 0.0.0.0:51820
//!                                 bound to c{i} ── emulator ── s{i}
//! ```
//!
//! - Keys are made in-process (`latebind_crypto`), configs are written to the run's
//!   folder (`server.toml`, `client.toml`, control sockets `server.sock`,
//!   `client.sock`), and the daemons start as `<exe> server --config ...` then
//!   `<exe> client --config ...` through the topology's `spawn`, so they die with the
//!   run on every exit path. The runner waits until the client's status (its control
//!   socket) says `established: true` before it starts any traffic.
//! - The applications use the tunnel's addresses: the client's traffic tool binds
//!   10.77.0.2 (on `lb0`), the server's 10.77.0.1 (on `lbs0`). No route between the
//!   scenario's application addresses is installed: the only path between the two
//!   application ends is the tunnel.
//! - The client's link `i` is `c{i}` with the server at `198.18.{i+1}.2:51820`; the
//!   daemon counts its datagrams below the binding point until they leave the qdisc,
//!   and `budget_packets` is the scenario's `[late] budget_packets`.
//! - `[late]`'s `rate_control`, `dispatch`, `dispatch_horizon_us`,
//!   `dispatch_rt_priority` and `pacing_rate_mbps` go into the client's file (the
//!   dispatch stage runs on the client only; the server gets `rate_control`).
//!   `tun_offload`, `ack_filter`, `header_compression`, `ack_ride_wait_ms`,
//!   `tcp_window_clamp`, `codel_covers_pause` and `aggregate_arrival_order` go into both
//!   files.
//!   `seed_capacity` gives each client link `capacity_mbps`, its uplink's rate or trace
//!   mean; the server's links are not seeded (its file has no per-link section).
//! - The daemons run in `SCHED_FIFO` at the traffic tools' priority (set by the runner
//!   on their pid), so the lab's own real-time helpers do not starve them.
//! - Before stopping them, the runner reads both daemons' status: the engine counters
//!   go into the report's `engine`, the links' `held_dropped` (bound datagrams the
//!   client daemon held, not yet given to the kernel, when an interface went down) into
//!   `lost_at_outage_up`.

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use latebind_crypto::StaticSecret;
use latebind_daemon::status::{SessionStatus, Status};
use latebind_sim::Scenario;
use latebind_sim::report::EngineReport;

use crate::netns::{Helper, LinkAddrs, Role, Topology};
use crate::sys;

/// The client's tunnel address (its applications' address in mode late).
pub const CLIENT_TUN: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The server's tunnel address.
pub const SERVER_TUN: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The server's UDP port.
pub const PORT: u16 = 51820;

/// The two running daemons and their control sockets.
#[derive(Debug)]
pub struct Daemons {
    /// `latebind server`.
    pub server: Helper,
    /// `latebind client`.
    pub client: Helper,
    /// The server's control socket.
    pub server_sock: PathBuf,
    /// The client's control socket.
    pub client_sock: PathBuf,
}

/// The configuration files of both daemons: `(server.toml, client.toml)`.
pub fn configs(scenario: &Scenario, links: &[LinkAddrs], dir: &Path) -> Result<(String, String)> {
    let spec = &scenario.spec;
    let key = || -> Result<StaticSecret> {
        Ok(StaticSecret::from_random_bytes(
            latebind_daemon::random_bytes()?,
        ))
    };
    let (server_key, client_key) = (key()?, key()?);
    // The engine's settings, the same at both ends.
    let mut engine = String::new();
    writeln!(engine, "budget_packets = {}", spec.late.budget_packets)?;
    writeln!(engine, "reinjection = {:?}", spec.late.reinjection)?;
    writeln!(engine, "rej_min_ms = {:?}", spec.late.rej_min_ms)?;
    writeln!(engine, "policy = \"{}\"", spec.late.default_policy().name())?;
    writeln!(engine, "redundant_links = {}", spec.late.redundant_links)?;
    writeln!(engine, "redundant_align = {}", spec.late.redundant_align)?;
    writeln!(engine, "rate_control = {}", spec.late.rate_control)?;
    writeln!(
        engine,
        "rate_control_max_queue_ms = {:?}",
        spec.late.rate_control_max_queue_ms
    )?;
    writeln!(engine, "codel_target_ms = {:?}", spec.late.codel_target_ms)?;
    writeln!(engine, "tun_offload = {}", spec.late.tun_offload)?;
    writeln!(engine, "ack_filter = {}", spec.late.ack_filter)?;
    writeln!(
        engine,
        "header_compression = {}",
        spec.late.header_compression
    )?;
    writeln!(
        engine,
        "ack_ride_wait_ms = {:?}",
        spec.late.ack_ride_wait_ms
    )?;
    writeln!(engine, "tcp_window_clamp = {}", spec.late.tcp_window_clamp)?;
    writeln!(
        engine,
        "codel_covers_pause = {}",
        spec.late.codel_covers_pause
    )?;
    writeln!(
        engine,
        "aggregate_arrival_order = {}",
        spec.late.aggregate_arrival_order
    )?;
    let mut server = String::new();
    writeln!(server, "# written by latebind lab (mode late)")?;
    writeln!(server, "[server]")?;
    writeln!(server, "private_key = \"{}\"", server_key.to_base64())?;
    writeln!(server, "listen = [\"0.0.0.0:{PORT}\"]")?;
    writeln!(server, "tun = \"lbs0\"")?;
    writeln!(server, "address = \"{SERVER_TUN}/24\"")?;
    writeln!(
        server,
        "control_socket = \"{}\"",
        dir.join("server.sock").display()
    )?;
    server.push_str(&engine);
    writeln!(server, "\n[[peers]]\nname = \"client\"")?;
    writeln!(server, "public_key = \"{}\"", client_key.public_key())?;
    writeln!(server, "address = \"{CLIENT_TUN}\"")?;

    let mut client = String::new();
    writeln!(client, "# written by latebind lab (mode late)")?;
    writeln!(client, "[client]")?;
    writeln!(client, "private_key = \"{}\"", client_key.to_base64())?;
    writeln!(
        client,
        "server_public_key = \"{}\"",
        server_key.public_key()
    )?;
    writeln!(client, "tun = \"lb0\"")?;
    writeln!(client, "address = \"{CLIENT_TUN}/24\"")?;
    writeln!(
        client,
        "control_socket = \"{}\"",
        dir.join("client.sock").display()
    )?;
    client.push_str(&engine);
    writeln!(client, "dispatch = {}", spec.late.dispatch)?;
    writeln!(
        client,
        "dispatch_horizon_us = {:?}",
        spec.late.dispatch_horizon_us
    )?;
    if let Some(p) = spec.late.dispatch_rt_priority {
        writeln!(client, "dispatch_rt_priority = {p}")?;
    }
    for l in links {
        let name = &spec.links[l.index].name;
        let unique = spec.links.iter().filter(|o| &o.name == name).count() == 1;
        let name = if unique && !name.is_empty() {
            name.clone()
        } else {
            format!("link{}", l.index)
        };
        writeln!(client, "\n[[links]]")?;
        writeln!(client, "name = {}", toml_string(&name))?;
        writeln!(client, "interface = \"{}\"", l.client_if)?;
        writeln!(client, "server = \"{}:{PORT}\"", l.server)?;
        if let Some(r) = spec.late.pacing_rate_mbps {
            writeln!(client, "pacing_rate_mbps = {r:?}")?;
        }
        if spec.late.seed_capacity {
            writeln!(
                client,
                "capacity_mbps = {:?}",
                crate::run::rates(scenario, l.index)
                    .0
                    .load()?
                    .mean_bits_per_sec()
                    / 1e6
            )?;
        }
    }
    // The same binding policies at both ends; a rule naming a flow matches its ports.
    let mut policies = String::new();
    for r in spec.late.engine_rules(&spec.flows) {
        writeln!(policies, "\n[[rules]]")?;
        if let Some(d) = r.dscp {
            writeln!(policies, "dscp = {d}")?;
        }
        if let Some(p) = r.protocol {
            writeln!(policies, "protocol = {p}")?;
        }
        if let Some((lo, hi)) = r.ports {
            writeln!(policies, "ports = [{lo}, {hi}]")?;
        }
        if let Some((net, len)) = r.prefix {
            let a = std::net::Ipv6Addr::from(net);
            match a.to_ipv4_mapped() {
                Some(v4) if len >= 96 => writeln!(policies, "prefix = \"{v4}/{}\"", len - 96)?,
                _ => writeln!(policies, "prefix = \"{a}/{len}\"")?,
            }
        }
        writeln!(policies, "policy = \"{}\"", r.policy.name())?;
    }
    let o = &spec.late.overflow;
    writeln!(policies, "\n[overflow]")?;
    writeln!(policies, "k = {:?}", o.k)?;
    writeln!(policies, "t_dwd_ms = {:?}", o.t_dwd_ms)?;
    writeln!(policies, "w_fixed = {}", o.w_fixed)?;
    writeln!(policies, "w_max = {}", o.w_max)?;
    server.push_str(&policies);
    client.push_str(&policies);
    Ok((server, client))
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Puts process `pid` in `SCHED_FIFO` at `priority`.
fn set_realtime_pid(pid: i32, priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: plain syscall on another process; the parameter is a local.
    if unsafe { libc::sched_setscheduler(pid, libc::SCHED_FIFO, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Writes the configs, starts the server then the client, and waits (until
/// `deadline_ns` of `CLOCK_MONOTONIC`) for the client's session to be established.
pub fn start(
    topo: &Topology,
    exe: &Path,
    scenario: &Scenario,
    dir: &Path,
    rt_priority: Option<i32>,
    deadline_ns: u64,
    notes: &mut Vec<String>,
) -> Result<Daemons> {
    let (server_toml, client_toml) = configs(scenario, &topo.links, dir)?;
    let server_cfg = dir.join("server.toml");
    let client_cfg = dir.join("client.toml");
    std::fs::write(&server_cfg, server_toml)?;
    std::fs::write(&client_cfg, client_toml)?;
    let server_sock = dir.join("server.sock");
    let client_sock = dir.join("client.sock");
    for s in [&server_sock, &client_sock] {
        let _ = std::fs::remove_file(s);
    }
    let mut server = topo.spawn(
        Role::Server,
        "latebind server",
        exe,
        &[
            "server".as_ref(),
            "--config".as_ref(),
            server_cfg.as_os_str(),
        ],
        &dir.join("server.log"),
    )?;
    if let Some(p) = rt_priority
        && let Err(e) = set_realtime_pid(server.pid(), p)
    {
        notes.push(format!("latebind server: SCHED_FIFO {p}: {e}"));
    }
    // The server answers on its control socket once its UDP socket is bound: only then
    // start the client, whose first initiation would otherwise wait for its 1 s retry.
    while status(&server_sock).is_err() {
        if let Some(s) = server.try_wait()? {
            bail!("latebind server exited ({s}):\n{}", server.log_tail());
        }
        if sys::mono_ns() >= deadline_ns {
            bail!(
                "latebind server did not start in time:\n{}",
                server.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let client = topo.spawn(
        Role::Client,
        "latebind client",
        exe,
        &[
            "client".as_ref(),
            "--config".as_ref(),
            client_cfg.as_os_str(),
        ],
        &dir.join("client.log"),
    )?;
    if let Some(p) = rt_priority
        && let Err(e) = set_realtime_pid(client.pid(), p)
    {
        notes.push(format!("latebind client: SCHED_FIFO {p}: {e}"));
    }
    let mut d = Daemons {
        server,
        client,
        server_sock,
        client_sock,
    };
    loop {
        for h in [&mut d.server, &mut d.client] {
            if let Some(s) = h.try_wait()? {
                bail!(
                    "{} exited ({s}) before the tunnel was up:\n{}",
                    h.name,
                    h.log_tail()
                );
            }
        }
        if let Ok(st) = status(&d.client_sock)
            && st.sessions.first().is_some_and(|s| s.established)
        {
            return Ok(d);
        }
        if sys::mono_ns() >= deadline_ns {
            bail!(
                "the daemons' handshake did not complete in time\nclient log:\n{}\nserver log:\n{}",
                d.client.log_tail(),
                d.server.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A daemon's status, through its control socket.
pub fn status(socket: &Path) -> Result<Status> {
    let text = latebind_daemon::control::query(socket)
        .with_context(|| format!("control socket {}", socket.display()))?;
    serde_json::from_str(&text).context("the daemon's answer is not a status")
}

/// The report's engine counters from both daemons' sessions (client + server).
pub fn engine_report(
    client: Option<&SessionStatus>,
    server: Option<&SessionStatus>,
) -> EngineReport {
    let sum = |f: &dyn Fn(&SessionStatus) -> u64| client.map_or(0, f) + server.map_or(0, f);
    // A counter of each end, [client, server].
    let each = |f: &dyn Fn(&SessionStatus) -> u64| [client.map_or(0, f), server.map_or(0, f)];
    EngineReport {
        aqm_dropped: sum(&|s| s.engine.aqm_dropped),
        aqm_marked: sum(&|s| s.engine.aqm_marked),
        overflow_dropped: sum(&|s| s.engine.overflow_dropped),
        ack_filtered: sum(&|s| s.engine.ack_filtered),
        window_clamped: sum(&|s| s.engine.window_clamped),
        small_past_window: sum(&|s| s.engine.small_past_window),
        acks_sent: each(&|s| s.engine.acks_sent),
        acks_ridden: each(&|s| s.engine.acks_ridden),
        rx_times_sent: each(&|s| s.engine.rx_times_sent),
        compact_sent: each(&|s| s.engine.compact_sent),
        templates_sent: each(&|s| s.engine.templates_sent),
        compact_saved_bytes: each(&|s| s.engine.compact_saved_bytes),
        compact_undecodable: sum(&|s| s.engine.compact_undecodable),
        reorder_held: sum(&|s| s.engine.reorder_held),
        reorder_gaps_skipped: sum(&|s| s.engine.reorder_gaps_skipped),
        late_delivered: sum(&|s| s.engine.late_delivered),
        reorder_waited_for_links: sum(&|s| s.engine.reorder_waited_for_links),
        reorder_gaps_lost: sum(&|s| s.engine.reorder_gaps_lost),
        reorder_acks_passed: sum(&|s| s.engine.reorder_acks_passed),
        reinjected_timer: sum(&|s| s.engine.reinjected_timer),
        reinjected_link_down: sum(&|s| s.engine.reinjected_link_down),
        reinjected_lost: sum(&|s| s.engine.reinjected_lost),
        reinjected_idle: sum(&|s| s.engine.reinjected_idle),
        reinjections_cancelled: sum(&|s| s.engine.reinjections_cancelled),
        reinjections_returned: sum(&|s| s.engine.reinjections_returned),
        reinjections_expired: sum(&|s| s.engine.reinjections_expired),
        suspected: sum(&|s| s.links.iter().map(|l| l.suspected).sum()),
        longest_suspect_ms: [client, server]
            .iter()
            .flatten()
            .flat_map(|s| s.links.iter().map(|l| l.longest_suspect_ms))
            .fold(0.0, f64::max),
        probes_unheard: sum(&|s| s.links.iter().map(|l| l.probes_unheard).sum()),
        acks_around: sum(&|s| s.links.iter().map(|l| l.acks_around).sum()),
        acks_shortcut: sum(&|s| s.links.iter().map(|l| l.acks_shortcut).sum()),
        reinject_after_max_ms: client
            .map_or(0.0, |s| s.reinject_after_max_ms)
            .max(server.map_or(0.0, |s| s.reinject_after_max_ms)),
        duplicate_data: sum(&|s| s.engine.duplicate_data),
        malformed: sum(&|s| s.engine.malformed),
        hold_ms: [
            client.map_or(0.0, |s| s.hold_ms),
            server.map_or(0.0, |s| s.hold_ms),
        ],
        // Sampled by the simulator's event loop only.
        short_backlog_pct: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_parse_as_the_daemons_read_them() {
        let scenario = Scenario::from_str(
            "[scenario]\nname='t'\nduration_s=1.0\n[[links]]\nname='wi\"fi'\nrate_mbps=1.0\n\
             [[links]]\nname='lte'\nrate_mbps=1.0\n[late]\nbudget_packets=3\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let links: Vec<LinkAddrs> = (0..2)
            .map(|i| crate::netns::link_addrs(i).unwrap())
            .collect();
        let dir = Path::new("/tmp/lab-run");
        let (s, c) = configs(&scenario, &links, dir).unwrap();
        let s = latebind_daemon::config::ServerConfig::parse(Path::new("server.toml"), &s).unwrap();
        let c = latebind_daemon::config::ClientConfig::parse(Path::new("client.toml"), &c).unwrap();
        assert_eq!(s.address, (SERVER_TUN, 24));
        assert_eq!(s.peers[0].1, CLIENT_TUN);
        assert_eq!(s.peers[0].0, c.private_key.public_key());
        assert_eq!(c.server_key, s.private_key.public_key());
        assert_eq!(c.address, (CLIENT_TUN, 24));
        assert_eq!(c.file.client.budget_packets, 3);
        assert_eq!(c.reinjection.0.name(), "srtt+rttvar-delta");
        assert_eq!(c.control_socket, dir.join("client.sock"));
        assert_eq!(c.file.links.len(), 2);
        assert_eq!(c.file.links[0].name, "wi\"fi");
        assert_eq!(c.file.links[1].interface, "c1");
        assert_eq!(c.file.links[1].server, "198.18.2.2:51820");
        assert_eq!(c.file.links[1].capacity_mbps, None);
        // The scenario's rate control and CoDel targets reach both daemons.
        let tuned = scenario
            .with_overrides([
                "late.codel_target_ms=50.0",
                "late.rate_control_max_queue_ms=40.0",
            ])
            .unwrap();
        let (s, c) = configs(&tuned, &links, dir).unwrap();
        let s = latebind_daemon::config::ServerConfig::parse(Path::new("server.toml"), &s).unwrap();
        let c = latebind_daemon::config::ClientConfig::parse(Path::new("client.toml"), &c).unwrap();
        for (target, max_queue) in [
            (s.codel_target, s.rate_control.1),
            (c.codel_target, c.rate_control.1),
        ] {
            assert_eq!(target, Duration::from_millis(50));
            assert_eq!(max_queue, Duration::from_millis(40));
        }
        // `seed_capacity`: each client link gets its uplink's rate.
        let seeded = scenario
            .with_overrides(["late.seed_capacity=true"])
            .unwrap();
        let (_, c) = configs(&seeded, &links, dir).unwrap();
        let c = latebind_daemon::config::ClientConfig::parse(Path::new("client.toml"), &c).unwrap();
        assert_eq!(c.file.links[1].capacity_mbps, Some(1.0));
    }
}
