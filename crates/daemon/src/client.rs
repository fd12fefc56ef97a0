//! The client daemon: one TUN device, one UDP socket per link bound to its interface,
//! netlink for link changes, the handshake and rekeying, and the engine.
//!
//! Event loop (one thread): wait on epoll (TUN, link sockets, netlink, control, signals)
//! and on a timerfd armed at the engine's next timeout; then, in order: read every
//! waiting TUN packet (so packets wait in the engine's per-flow queues, not in a FIFO in
//! front of it), read every datagram, apply link changes, run the engine's timers, and
//! pump the engine's outputs. With the dispatch stage on, its sender thread (one for
//! every link) sends the datagrams at their slots, and its departures wake the loop
//! through an eventfd.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use latebind_crypto::{Initiator, REKEY_AFTER_TIME};
use latebind_io::clock::{monotonic_ns, unix_now};
use latebind_io::link::LinkSocket;
use latebind_io::netlink::{NetEvent, NetlinkMonitor, interface_state};
use latebind_io::poll::{Poller, Ready, TOKEN_SIGNAL, TOKEN_TIMER};
use latebind_io::tun::Tun;
use latebind_proto::{Config, Endpoint, Instant, LinkChange, LinkConfig, LinkId, Role};

use crate::config::{ClientConfig, LinkSection, ServerAddr};
use crate::control::Control;
use crate::dispatch::DispatchStage;
use crate::packet::clamp_mss;
use crate::session::{LinkIo, Sent, Session, sent};
use crate::status::{SessionStatus, Status};
use crate::{
    flush_tun, max_datagram, open_tun, overhead, random_bytes, random_u32, read_tun, run_ip,
};

const TOKEN_TUN: u64 = 1;
const TOKEN_NETLINK: u64 = 2;
const TOKEN_CONTROL: u64 = 3;
const TOKEN_METRICS: u64 = 4;
const TOKEN_DISPATCH: u64 = 5;
const TOKEN_LINK: u64 = 100;

/// Retry an unanswered handshake initiation after this long.
const HANDSHAKE_RETRY: Duration = Duration::from_secs(1);
/// An unanswered handshake is logged as a warning once it has gone unanswered this long,
/// and again every [`HANDSHAKE_WARN_EVERY`] while it stays so.
const HANDSHAKE_WARN_AFTER: Duration = Duration::from_secs(3);
const HANDSHAKE_WARN_EVERY: Duration = Duration::from_secs(60);
/// Keepalive intervals without an authentic datagram from the server, while a link is
/// usable, after which the session is taken for lost and a new one made. Each usable link
/// is probed every interval and the server answers every probe, so silence this long means
/// the server no longer has the session (it restarted: it would take nothing of the old
/// one, and its new engine's packets would read as replays to the old one here) or no
/// path reaches it; then the new session's handshake is retried until one does.
const SILENT_KEEPALIVES: u32 = 5;

struct ClientLink {
    name: String,
    interface: String,
    index: Option<u32>,
    server: SocketAddr,
    socket: LinkSocket,
    /// The interface index the socket is bound to (`SO_BINDTODEVICE`); `None` before the
    /// interface first exists. Until then the socket sends nothing: unbound, its
    /// datagrams would follow the routing table, perhaps into the tunnel itself.
    bound_index: Option<u32>,
    up: bool,
    has_addr: bool,
    /// The interface's MTU (`None` while it does not exist).
    mtu: Option<usize>,
}

impl ClientLink {
    /// Up, with an address of the server's family, and the socket bound to it.
    fn usable(&self) -> bool {
        self.up && self.has_addr && self.index.is_some() && self.bound_index == self.index
    }

    /// Reads the interface's state again.
    fn refresh(&mut self) {
        let s = interface_state(&self.interface);
        self.index = s.map(|s| s.index);
        self.up = s.is_some_and(|s| s.up);
        self.has_addr = s.is_some_and(|s| s.has_addr_for(self.server));
        self.mtu = interface_mtu(&self.interface);
    }

    /// Binds the socket to the interface's current index if it is not bound to it: the
    /// interface appeared after the daemon started, or was removed and made again (a USB
    /// modem plugged back in has the same name and another index).
    fn bind_to_interface(&mut self) {
        if self.index.is_none() || self.index == self.bound_index {
            return;
        }
        match self.socket.bind_device(&self.interface) {
            Ok(()) => {
                tracing::info!(link = %self.name, interface = %self.interface, index = self.index, "socket bound to the interface");
                self.bound_index = self.index;
            }
            Err(e) => {
                tracing::warn!(link = %self.name, interface = %self.interface, %e, "binding the socket to the interface");
            }
        }
    }
}

/// The client's link sockets, one per link: departures are read from each socket's
/// kernel queue. The dispatch stage, when on, sends on duplicates of them (socket `i`
/// is link `i`'s).
struct ClientIo<'a> {
    links: &'a [ClientLink],
    stage: Option<&'a DispatchStage>,
}

impl LinkIo for ClientIo<'_> {
    fn send(&mut self, link: LinkId, datagram: &[u8]) -> Sent {
        match self.links.get(usize::from(link.0)) {
            Some(l) if l.bound_index.is_some() => sent(l.socket.send_to(datagram, l.server)),
            _ => Sent::Failed,
        }
    }

    fn queued(&self, link: LinkId) -> Option<usize> {
        self.links.get(usize::from(link.0))?.socket.outq().ok()
    }

    fn dispatch(&mut self, link: LinkId, at: Instant, datagram: Vec<u8>) -> bool {
        let i = usize::from(link.0);
        match (self.stage, self.links.get(i)) {
            (Some(stage), Some(l)) if l.bound_index.is_some() => {
                stage.submit(at, i, l.server, datagram, u64::from(link.0))
            }
            _ => false,
        }
    }
}

/// Options from the command line.
#[derive(Clone, Debug, Default)]
pub struct ClientOptions {
    /// Install the configured routes through the tunnel.
    pub routes: bool,
}

fn now() -> Instant {
    Instant::from_nanos(monotonic_ns())
}

/// Runs the client until SIGINT or SIGTERM.
pub fn run(cfg: ClientConfig, opts: ClientOptions) -> Result<()> {
    let c = &cfg.file.client;
    let mut poller = Poller::new().context("epoll")?;
    let started = monotonic_ns();

    let servers = cfg
        .file
        .links
        .iter()
        .zip(&cfg.servers)
        .enumerate()
        .map(|(i, (l, spec))| resolve_server(i, l, spec))
        .collect::<Result<Vec<_>>>()?;
    let link_mtus: Vec<_> = cfg
        .file
        .links
        .iter()
        .map(|l| interface_mtu(&l.interface))
        .collect();
    let mut mtu = c
        .mtu
        .unwrap_or_else(|| tun_mtu(link_mtus.iter().copied().zip(servers.iter().copied())));
    let mut tun = open_tun(&c.tun, cfg.address, mtu, c.tun_offload.unwrap_or(true))?;
    tracing::info!(tun = tun.name(), mtu, offload = tun.offload(), "tun up");
    poller.add(tun.as_fd(), TOKEN_TUN, false)?;
    if opts.routes {
        for (net, prefix) in &cfg.routes {
            run_ip(&[
                "route",
                "replace",
                &format!("{net}/{prefix}"),
                "dev",
                tun.name(),
            ])?;
        }
    }

    let mut links = Vec::new();
    for (i, (l, &server)) in cfg.file.links.iter().zip(&servers).enumerate() {
        // Any local address of the server address's family (an IPv6-only cellular
        // network's link talks to the server's IPv6 address); the config checks that a
        // given `bind` has that family.
        let bind = l.bind.unwrap_or_else(|| {
            let any: std::net::IpAddr = if server.is_ipv6() {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            };
            SocketAddr::new(any, 0)
        });
        // The engine's budget, not the send buffer, bounds what waits in the kernel (its
        // departures are read with SIOCOUTQ). The buffer is a few times larger, so that
        // each departure makes the socket writable and wakes the loop (edge-triggered),
        // and so that a datagram leaving does not have to wait for a whole drain.
        let sndbuf = (c.budget_packets + 2) * 4608;
        let context = || {
            format!(
                "links[{i}] ({}): binding a UDP socket to interface {}",
                l.name, l.interface
            )
        };
        let socket = LinkSocket::bind(bind, Some(sndbuf)).with_context(context)?;
        poller.add_edge(socket.as_fd(), TOKEN_LINK + i as u64)?;
        let mut link = ClientLink {
            name: l.name.clone(),
            interface: l.interface.clone(),
            index: None,
            server,
            socket,
            bound_index: None,
            up: false,
            has_addr: false,
            mtu: None,
        };
        link.refresh();
        match link.index {
            // An interface that exists must take the socket (a bad name, no privilege).
            Some(_) => {
                link.socket
                    .bind_device(&l.interface)
                    .with_context(context)?;
                link.bound_index = link.index;
            }
            None => tracing::warn!(
                link = %l.name,
                interface = %l.interface,
                "no such interface yet: the link is down until it appears"
            ),
        }
        links.push(link);
    }
    let netlink = NetlinkMonitor::open().context("netlink")?;
    poller.add(netlink.as_fd(), TOKEN_NETLINK, false)?;
    let control = Control::bind(&cfg.control_socket, c.metrics_listen)
        .with_context(|| format!("control socket {}", cfg.control_socket.display()))?;
    poller.add(control.unix().as_fd(), TOKEN_CONTROL, false)?;
    if let Some(m) = control.metrics() {
        poller.add(m.as_fd(), TOKEN_METRICS, false)?;
    }

    let mut session = new_session(&cfg, &links, now())?;
    let mut max_mss = mtu.saturating_sub(40);
    let mut stage = match cfg.dispatch {
        Some(d) => {
            let sockets = links
                .iter()
                .map(|l| l.socket.as_fd().try_clone_to_owned())
                .collect::<std::io::Result<Vec<_>>>()
                .context("dispatch stage: duplicating the link sockets")?;
            let stage = DispatchStage::start(sockets, d).context("starting the dispatch stage")?;
            poller.add(stage.fd(), TOKEN_DISPATCH, false)?;
            tracing::info!(
                horizon_us = d.horizon.as_micros() as u64,
                "dispatch stage on"
            );
            Some(stage)
        }
        None => None,
    };

    let mut handshake: Option<(Initiator, Instant)> = None;
    // Since when the handshake has gone unanswered, and when that was last logged.
    let (mut unanswered_since, mut warned_at): (Option<Instant>, Option<Instant>) = (None, None);
    let mut established_at: Option<Instant> = None;
    // When the server was last heard from (an authentic datagram the engine took).
    let mut last_heard = now();
    let silent_after = session.engine.config().keepalive_interval * SILENT_KEEPALIVES;
    let mut ready = Vec::<Ready>::new();
    let mut net_events = Vec::new();
    let mut rxbuf = vec![0u8; 65536];
    tracing::info!(
        session = format!("{:08x}", session.engine.config().session),
        links = links.len(),
        "client started"
    );

    loop {
        let t = now();
        if session.established()
            && t - last_heard >= silent_after
            && links.iter().any(ClientLink::usable)
        {
            tracing::warn!(
                silent_s = (t - last_heard).as_secs_f64(),
                "nothing from the server: a new session"
            );
            // A server given by name may have moved (a dynamic DNS name): ask again.
            for (i, (l, spec)) in cfg.file.links.iter().zip(&cfg.servers).enumerate() {
                if let ServerAddr::Name { .. } = spec {
                    match resolve_server(i, l, spec) {
                        Ok(a) if a.is_ipv6() == links[i].server.is_ipv6() => links[i].server = a,
                        Ok(a) => {
                            tracing::warn!(link = %l.name, %a, "the server's name resolves to the other family now: kept the old address")
                        }
                        Err(e) => {
                            tracing::warn!(link = %l.name, %e, "resolving the server's name again")
                        }
                    }
                }
            }
            session = new_session(&cfg, &links, t)?;
            (handshake, established_at, last_heard) = (None, None, t);
        }
        // Handshake: start, retry, or rekey.
        let rekey_due = established_at.is_some_and(|e| t - e >= REKEY_AFTER_TIME);
        let retry_due = handshake
            .as_ref()
            .is_some_and(|(_, at)| t - *at >= HANDSHAKE_RETRY);
        if (!session.established() && handshake.is_none())
            || retry_due
            || (rekey_due && handshake.is_none())
        {
            let since = *unanswered_since.get_or_insert(t);
            if retry_due
                && t - since >= HANDSHAKE_WARN_AFTER
                && warned_at.is_none_or(|w| t - w >= HANDSHAKE_WARN_EVERY)
            {
                warned_at = Some(t);
                let to: Vec<String> = links
                    .iter()
                    .filter(|l| l.usable())
                    .map(|l| format!("{} -> {}", l.name, l.server))
                    .collect();
                tracing::warn!(
                    unanswered_s = (t - since).as_secs_f64().round(),
                    links = %to.join(", "),
                    client_key = %cfg.private_key.public_key(),
                    "no answer to the handshake: the server is not reachable on these links, or it does not know this client key (its log names the key it refused), or this client's server_public_key is not the server's"
                );
            }
            let first = links.iter().position(ClientLink::usable).unwrap_or(0);
            let (init, datagram) = Initiator::new(
                &cfg.private_key,
                &cfg.server_key,
                session.engine.config().session,
                session.keys.next_epoch(),
                first as u16,
                unix_now(),
                random_bytes()?,
            )
            .map_err(|e| anyhow::anyhow!("handshake: {e}"))?;
            // No link is special: the same initiation goes out on every usable link and
            // the server answers the first copy that reaches it.
            for l in links.iter().filter(|l| l.usable()) {
                let _ = l.socket.send_to(&datagram, l.server);
            }
            handshake = Some((init, t));
            if rekey_due {
                established_at = Some(t);
            }
        }

        let mut io = ClientIo {
            links: &links,
            stage: stage.as_ref(),
        };
        session.pump(t, &mut io, |p| {
            clamp_mss(p, max_mss);
            // A write the device refuses is counted there (`tun_write_errors`).
            let _ = tun.queue(p);
            true
        });
        flush_tun(&mut tun);
        let mut deadline = session.poll_timeout().map(|i| i.as_nanos());
        if let Some((_, at)) = &handshake {
            let retry = (*at + HANDSHAKE_RETRY).as_nanos();
            deadline = Some(deadline.map_or(retry, |d| d.min(retry)));
        }
        if let Some(e) = established_at {
            let rekey = (e + REKEY_AFTER_TIME).as_nanos();
            deadline = Some(deadline.map_or(rekey, |d| d.min(rekey)));
        }
        poller.arm(deadline)?;
        ready.clear();
        poller.wait(&mut ready, 1000)?;
        // Reuse the buffer: the handlers below borrow the rest of the state.
        let batch = std::mem::take(&mut ready);

        // Read again as each datagram or packet is taken, so that an input read late in a
        // long batch (a burst, or the process descheduled mid-way) is not stamped with the
        // batch's start: an acknowledgement stamped early gives an RTT sample under the
        // path's, and the link's minimum keeps it for its window.
        let mut t = now();
        for &r in &batch {
            match r.token {
                TOKEN_SIGNAL => {
                    if let Some(sig) = poller.take_signal() {
                        tracing::info!(?sig, "stopping");
                        return Ok(());
                    }
                }
                TOKEN_TIMER => {}
                TOKEN_DISPATCH => {
                    if let Some(stage) = stage.as_mut() {
                        stage.drain(|d| {
                            let i = d.tag as usize;
                            let queued = links.get(i).and_then(|l| l.socket.outq().ok());
                            session.on_dispatched(t, LinkId(i as u16), d.len, d.sent, queued);
                        });
                    }
                }
                TOKEN_TUN => {
                    t = read_tun(&mut tun, now, |t, p| {
                        clamp_mss(p, max_mss);
                        let _ = session.engine.handle_tun_packet(t, p);
                    })?;
                }
                TOKEN_NETLINK => {
                    net_events.clear();
                    // Events were lost: read every interface's state again.
                    let lost = netlink.read_events(&mut net_events).is_err();
                    // Each interface an event names is read again once, as it is now (an
                    // event may be of one removed since: its name's new index).
                    for l in links.iter_mut() {
                        let named = net_events.iter().any(|ev| match ev {
                            NetEvent::Link { index, name, .. } => {
                                l.index == Some(*index)
                                    || name.as_deref() == Some(l.interface.as_str())
                            }
                            NetEvent::Addr { index, .. } => l.index == Some(*index),
                        });
                        if lost || named {
                            l.refresh();
                        }
                        l.bind_to_interface();
                    }
                    // A link's path carries what its interface's MTU allows (an interface
                    // that appeared, or changed its MTU): the engine binds a packet only
                    // to links that carry it whole, and the TUN MTU follows the smallest
                    // link present, unless the configuration sets it.
                    for (i, l) in links.iter().enumerate() {
                        let max = max_datagram(l.mtu.unwrap_or(1500), l.server);
                        session
                            .engine
                            .set_max_datagram(t, LinkId(i as u16), Some(max));
                    }
                    let wanted = c
                        .mtu
                        .unwrap_or_else(|| tun_mtu(links.iter().map(|l| (l.mtu, l.server))));
                    if wanted != mtu {
                        match tun.set_mtu(wanted) {
                            Ok(()) => {
                                tracing::info!(
                                    tun = tun.name(),
                                    from = mtu,
                                    to = wanted,
                                    "tun mtu follows the links"
                                );
                                mtu = wanted;
                                max_mss = mtu.saturating_sub(40);
                            }
                            Err(e) => {
                                tracing::warn!(tun = tun.name(), mtu = wanted, %e, "setting the tun mtu");
                            }
                        }
                    }
                    for (i, l) in links.iter().enumerate() {
                        let id = LinkId(i as u16);
                        let usable = l.usable();
                        let was_down = session
                            .engine
                            .link_views(t)
                            .get(i)
                            .is_some_and(|v| v.state == latebind_proto::LinkState::Down);
                        if usable == was_down {
                            tracing::info!(link = %l.name, usable, "interface change");
                        }
                        if usable {
                            session.engine.handle_link_change(t, id, LinkChange::Up);
                        } else {
                            // What waited for this interface is gone with it, in the
                            // daemon as in the engine.
                            session.drop_held(id);
                            session.engine.handle_link_change(t, id, LinkChange::Down);
                        }
                    }
                }
                TOKEN_CONTROL | TOKEN_METRICS => {
                    let mut status =
                        client_status(&session, unanswered_since, &links, &tun, mtu, started, t);
                    status.dispatch = stage.as_ref().map(DispatchStage::status);
                    if r.token == TOKEN_CONTROL {
                        control.serve_status(&serde_json::to_string(&status)?);
                    } else {
                        control.serve_metrics(&status.prometheus());
                    }
                }
                tok if tok >= TOKEN_LINK => {
                    let i = (tok - TOKEN_LINK) as usize;
                    let Some(l) = links.get(i) else { continue };
                    if r.writable {
                        // Something of this socket left the kernel: departures, and room
                        // for what a full buffer pushed back.
                        let id = LinkId(i as u16);
                        if let Ok(q) = l.socket.outq() {
                            session.on_queued(t, id, q);
                        }
                        let mut io = ClientIo {
                            links: &links,
                            stage: None,
                        };
                        session.flush_held(t, &mut io, id);
                    }
                    if !r.readable {
                        continue;
                    }
                    let mut errors = 0;
                    loop {
                        match l.socket.recv_from(&mut rxbuf) {
                            Ok((n, from)) => {
                                t = now();
                                let d = &rxbuf[..n];
                                if from != l.server {
                                    continue;
                                }
                                if latebind_crypto::is_handshake(d) {
                                    // A refused response (forged, stale) leaves the attempt
                                    // intact; it is retried on its timer.
                                    if let Some((init, _)) = handshake.as_mut() {
                                        match init.handle_response(d) {
                                            Ok(transport) => {
                                                if session.install(t, transport) {
                                                    established_at = Some(t);
                                                    (unanswered_since, warned_at) = (None, None);
                                                    last_heard = t;
                                                    tracing::info!(link = %l.name, "handshake complete");
                                                }
                                                handshake = None;
                                            }
                                            Err(e) => {
                                                tracing::debug!(%e, "handshake response refused")
                                            }
                                        }
                                    }
                                    continue;
                                }
                                if session.handle_datagram(t, d) {
                                    last_heard = t;
                                }
                            }
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            // A socket error (an ICMP unreachable) is cleared by reading
                            // it; the socket is edge-triggered, so read on.
                            Err(_) => {
                                errors += 1;
                                if errors > 64 {
                                    break;
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        ready = batch;
        session.handle_timeout(t);
    }
}

/// The TUN MTU for links whose interfaces have MTU `mtu` (`None`: not present) towards
/// server address `server`: what the smallest link present carries of an inner packet
/// (its MTU less the tunnel's overhead; an IPv6 path's header is 20 bytes longer), or,
/// with none present, what a 1500-byte path to the servers would.
fn tun_mtu(links: impl Iterator<Item = (Option<usize>, SocketAddr)> + Clone) -> u16 {
    let room = links
        .clone()
        .filter_map(|(m, server)| m.map(|m| m.saturating_sub(overhead(server))))
        .min()
        .or_else(|| links.map(|(_, s)| 1500 - overhead(s)).min())
        .unwrap_or(1400);
    room.clamp(576, 9000) as u16
}

/// The MTU of interface `name`, if it exists.
fn interface_mtu(name: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()
        .and_then(|m| m.trim().parse().ok())
}

/// Link `i`'s server address: `spec` itself, or its name resolved (as WireGuard's
/// endpoints: when the client starts, and again when a new session is made) to an address
/// of the family the link can use: its bind address's, else one its interface has.
fn resolve_server(i: usize, l: &LinkSection, spec: &ServerAddr) -> Result<SocketAddr> {
    let want_v6 = l.bind.map(|b| b.is_ipv6()).or_else(|| {
        interface_state(&l.interface).and_then(|s| match (s.has_v4, s.has_v6) {
            (true, _) => Some(false),
            (false, true) => Some(true),
            _ => None,
        })
    });
    let server = spec
        .resolve(want_v6)
        .with_context(|| format!("links[{i}].server = \"{spec}\": resolving it"))?;
    if let Some(b) = l.bind
        && b.is_ipv6() != server.is_ipv6()
    {
        bail!(
            "links[{i}].server = \"{spec}\": resolves to {server}, expected an address of the \
             family of links[{i}].bind ({b})"
        );
    }
    if spec.to_string() != server.to_string() {
        tracing::info!(link = %l.name, %spec, %server, "server name resolved");
    }
    Ok(server)
}

/// A session with a fresh id and engine, its links as they are now; its handshake is
/// still to be made.
fn new_session(cfg: &ClientConfig, links: &[ClientLink], t: Instant) -> Result<Session> {
    let c = &cfg.file.client;
    let mut config = Config::new(Role::Client);
    config
        .session(random_u32()?.max(1))
        .budget_packets(c.budget_packets);
    (config.reinjection, config.rej_min) = cfg.reinjection;
    (config.rate_control, config.rate_control_max_queue) = cfg.rate_control;
    config.codel_target = cfg.codel_target;
    config.ack_ride_wait = cfg.ack_ride_wait;
    if let Some(on) = c.ack_filter {
        config.ack_filter = on;
    }
    if let Some(on) = c.header_compression {
        config.header_compression = on;
    }
    if let Some(on) = c.tcp_window_clamp {
        config.tcp_window_clamp = on;
    }
    if let Some(on) = c.codel_covers_pause {
        config.codel_covers_pause = on;
    }
    if let Some(on) = c.aggregate_arrival_order {
        config.aggregate_arrival_order = on;
    }
    cfg.policies.apply(&mut config);
    config.hash_seed = u64::from(random_u32()?) << 32 | u64::from(random_u32()?);
    let mut engine = Endpoint::new(config, t).map_err(|e| anyhow::anyhow!("engine: {e}"))?;
    for (i, (l, cl)) in cfg.file.links.iter().zip(links).enumerate() {
        engine.add_link(
            t,
            LinkId(i as u16),
            LinkConfig {
                backup: l.backup,
                pacing_rate: l.pacing_rate_mbps.map(|r| r * 1e6 / 8.0),
                capacity: l.capacity_mbps.map(|r| r * 1e6 / 8.0),
                max_datagram: Some(max_datagram(cl.mtu.unwrap_or(1500), cl.server)),
            },
        );
        if !cl.usable() {
            engine.handle_link_change(t, LinkId(i as u16), LinkChange::Down);
        }
    }
    let mut session = Session::new(engine);
    if let Some(d) = cfg.dispatch {
        session.set_dispatch(Some(d.horizon));
    }
    Ok(session)
}

fn client_status(
    session: &Session,
    unanswered_since: Option<Instant>,
    links: &[ClientLink],
    tun: &Tun,
    mtu: u16,
    started: u64,
    t: Instant,
) -> Status {
    let names = |id: u16| {
        links
            .get(usize::from(id))
            .map_or_else(|| format!("link{id}"), |l| l.name.clone())
    };
    Status {
        role: "client".into(),
        tun: tun.name().into(),
        mtu,
        tun_offload: tun.offload(),
        tun_write_errors: tun.write_errors(),
        uptime_s: (t.as_nanos().saturating_sub(started)) as f64 / 1e9,
        sessions: vec![{
            let mut st = SessionStatus::new("server", session, t, &names);
            st.handshake_unanswered_s = unanswered_since.map(|u| (t - u).as_secs_f64());
            for l in &mut st.links {
                l.peer_address = links.get(usize::from(l.id)).map(|c| c.server.to_string());
            }
            st
        }],
        handshakes_rejected: 0,
        unknown_session: 0,
        no_client_for_destination: 0,
        dispatch: None,
    }
}
