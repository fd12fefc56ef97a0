//! The server daemon: one TUN device, one or more UDP sockets shared by every client and
//! link, and one engine per client session.
//!
//! A datagram's session id picks the session; only a datagram that authenticates under
//! the session's keys updates where that session's link is reached (roaming: a link whose
//! address or NAT mapping changes keeps working, and a forged datagram cannot move it).
//! Clients are isolated: a packet from the TUN goes to the session owning its destination
//! address, and a client's packet reaches the TUN only if its source is that client's
//! address. With the dispatch stage on, one sender thread sends every session's
//! datagrams at their slots on duplicates of the listening sockets.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{Context, Result};
use latebind_crypto::{CryptoError, PublicKey, Responder};
use latebind_io::clock::monotonic_ns;
use latebind_io::link::LinkSocket;
use latebind_io::poll::{Poller, Ready, TOKEN_SIGNAL, TOKEN_TIMER};
use latebind_io::tun::Tun;
use latebind_proto::{Config, Endpoint, Instant, LinkId, Role};

use crate::config::ServerConfig;
use crate::control::Control;
use crate::dispatch::DispatchStage;
use crate::packet::{clamp_mss, ipv4_addrs};
use crate::session::{LinkIo, Sent, Session, sent};
use crate::status::{SessionStatus, Status};
use crate::{
    SERVER_PATH_MTU, flush_tun, max_datagram, open_tun, outer_headers, random_bytes, random_u32,
    read_tun,
};

const TOKEN_TUN: u64 = 1;
const TOKEN_CONTROL: u64 = 3;
const TOKEN_METRICS: u64 = 4;
const TOKEN_DISPATCH: u64 = 5;
const TOKEN_SOCKET: u64 = 100;

/// Where a client's link is reached: socket index, the client's address, and the local
/// address it sent to when the socket is a wildcard one (replies leave from it).
type Path = (usize, SocketAddr, Option<IpAddr>);

struct Client {
    name: String,
    address: Ipv4Addr,
    session: Session,
    /// Where each of its links was last reached from: socket index, peer address, and
    /// the local address the peer sent to (a wildcard socket's).
    paths: HashMap<u16, Path>,
    /// When it was last heard from: its handshake, or a datagram the engine took.
    last_heard: Instant,
}

fn now() -> Instant {
    Instant::from_nanos(monotonic_ns())
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(cfg: ServerConfig) -> Result<()> {
    let s = &cfg.file.server;
    let mut poller = Poller::new().context("epoll")?;
    let started = monotonic_ns();
    let mtu = s.mtu.unwrap_or(1400);
    let mut tun = open_tun(&s.tun, cfg.address, mtu, s.tun_offload.unwrap_or(true))?;
    poller.add(tun.as_fd(), TOKEN_TUN, false)?;
    let mut sockets = Vec::new();
    for (i, addr) in s.listen.iter().enumerate() {
        let sock = LinkSocket::bind(*addr, None)
            .with_context(|| format!("server.listen[{i}]: binding {addr}"))?;
        // A wildcard socket answers each link from the address the client sent to.
        if addr.ip().is_unspecified() {
            sock.enable_pktinfo()
                .with_context(|| format!("server.listen[{i}]: IP_PKTINFO on {addr}"))?;
        }
        poller.add(sock.as_fd(), TOKEN_SOCKET + i as u64, false)?;
        sockets.push(sock);
    }
    let mut stage = match cfg.dispatch {
        Some(d) => {
            let dups = sockets
                .iter()
                .map(|s: &LinkSocket| s.as_fd().try_clone_to_owned())
                .collect::<std::io::Result<Vec<_>>>()
                .context("dispatch stage: duplicating the sockets")?;
            let stage = DispatchStage::start(dups, d).context("starting the dispatch stage")?;
            poller.add(stage.fd(), TOKEN_DISPATCH, false)?;
            tracing::info!(
                horizon_us = d.horizon.as_micros() as u64,
                "dispatch stage on"
            );
            Some(stage)
        }
        None => None,
    };
    let control = Control::bind(&cfg.control_socket, s.metrics_listen)
        .with_context(|| format!("control socket {}", cfg.control_socket.display()))?;
    poller.add(control.unix().as_fd(), TOKEN_CONTROL, false)?;
    if let Some(m) = control.metrics() {
        poller.add(m.as_fd(), TOKEN_METRICS, false)?;
    }
    let mut responder = Responder::new(
        cfg.private_key.clone(),
        cfg.peers.iter().map(|p| p.0).collect(),
    );
    let peers: HashMap<PublicKey, (Ipv4Addr, String)> = cfg
        .peers
        .iter()
        .map(|(k, a, n)| (*k, (*a, n.clone())))
        .collect();
    let mut clients: HashMap<u32, Client> = HashMap::new();
    let mut by_address: HashMap<Ipv4Addr, u32> = HashMap::new();
    let mut drops = Drops::default();
    let mut handshake_budget = HandshakeBudget::new(HANDSHAKES_PER_SECOND);
    let mut refusals = Refusals::default();
    let max_mss = mtu.saturating_sub(40);
    let hash_seed = u64::from(random_u32()?) << 32 | u64::from(random_u32()?);
    let reinjection = cfg.reinjection;
    let rate_control = cfg.rate_control;
    let codel_target = cfg.codel_target;
    let ack_ride_wait = cfg.ack_ride_wait;
    let ack_filter = s.ack_filter;
    let header_compression = s.header_compression;
    let tcp_window_clamp = s.tcp_window_clamp;
    let codel_covers_pause = s.codel_covers_pause;
    let aggregate_arrival_order = s.aggregate_arrival_order;
    let session_timeout = cfg.session_timeout;
    let policies = cfg.policies.clone();
    let mut ready = Vec::<Ready>::new();
    let mut rxbuf = vec![0u8; 65536];
    tracing::info!(
        tun = tun.name(),
        mtu,
        offload = tun.offload(),
        peers = peers.len(),
        "server started"
    );

    loop {
        let t = now();
        // Session ids in a stable order, so that no output depends on hash-map order.
        let mut ids: Vec<u32> = clients.keys().copied().collect();
        ids.sort_unstable();
        for id in &ids {
            let c = clients.get_mut(id).expect("listed");
            let (paths, address) = (&c.paths, c.address);
            c.session
                .set_dispatch(stage.as_ref().map(DispatchStage::horizon));
            c.session.pump(
                t,
                &mut ServerIo {
                    paths,
                    sockets: &sockets,
                    session: *id,
                    stage: stage.as_ref(),
                },
                |p| {
                    // Isolation: a client may only send from its own address.
                    if ipv4_addrs(p).is_none_or(|(src, _)| src != address) {
                        return false;
                    }
                    clamp_mss(p, max_mss);
                    // A write the device refuses is counted there (`tun_write_errors`).
                    let _ = tun.queue(p);
                    true
                },
            );
        }
        flush_tun(&mut tun);
        let deadline = clients
            .values()
            .filter_map(|c| c.session.poll_timeout())
            .min()
            .map(|i| i.as_nanos());
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
                            let (session, link) = ((d.tag >> 16) as u32, d.tag as u16);
                            if let Some(c) = clients.get_mut(&session) {
                                c.session
                                    .on_dispatched(t, LinkId(link), d.len, d.sent, None);
                            }
                        });
                    }
                }
                TOKEN_TUN => {
                    t = read_tun(&mut tun, now, |t, p| {
                        let Some((_, dst)) = ipv4_addrs(p) else {
                            // Clients have IPv4 virtual addresses only.
                            drops.no_client_for_destination += 1;
                            return;
                        };
                        match by_address.get(&dst).and_then(|id| clients.get_mut(id)) {
                            Some(c) => {
                                clamp_mss(p, max_mss);
                                let _ = c.session.engine.handle_tun_packet(t, p);
                            }
                            None => drops.no_client_for_destination += 1,
                        }
                    })?;
                }
                TOKEN_CONTROL | TOKEN_METRICS => {
                    let mut status = server_status(&clients, &tun, mtu, started, t, drops);
                    status.dispatch = stage.as_ref().map(DispatchStage::status);
                    if r.token == TOKEN_CONTROL {
                        control.serve_status(&serde_json::to_string(&status)?);
                    } else {
                        control.serve_metrics(&status.prometheus());
                    }
                }
                tok if tok >= TOKEN_SOCKET => {
                    let si = (tok - TOKEN_SOCKET) as usize;
                    let Some(sock) = sockets.get(si) else {
                        continue;
                    };
                    // Until WouldBlock (or any error): drain the socket.
                    while let Ok((n, from, local)) = sock.recv_from_to(&mut rxbuf) {
                        t = now();
                        let d = &rxbuf[..n];
                        if latebind_crypto::is_handshake(d) {
                            // No DoS cookie yet: bound the X25519 work an attacker can cause.
                            if !handshake_budget.take(t) {
                                drops.handshakes_rejected += 1;
                                continue;
                            }
                            match responder.handle_initiation(d, random_bytes()?) {
                                Ok(acc) => {
                                    let Some((address, name)) = peers.get(&acc.peer).cloned()
                                    else {
                                        drops.handshakes_rejected += 1;
                                        continue;
                                    };
                                    // A client that restarted has a new session: drop its old one.
                                    if let Some(old) = by_address.get(&address).copied()
                                        && old != acc.session
                                    {
                                        clients.remove(&old);
                                    }
                                    let c = clients.entry(acc.session).or_insert_with(|| {
                                        let mut config = Config::new(Role::Server);
                                        config
                                            .session(acc.session)
                                            .budget_packets(s.budget_packets);
                                        config.hash_seed = hash_seed;
                                        (config.reinjection, config.rej_min) = reinjection;
                                        (config.rate_control, config.rate_control_max_queue) =
                                            rate_control;
                                        config.codel_target = codel_target;
                                        config.ack_ride_wait = ack_ride_wait;
                                        if let Some(on) = ack_filter {
                                            config.ack_filter = on;
                                        }
                                        if let Some(on) = header_compression {
                                            config.header_compression = on;
                                        }
                                        if let Some(on) = tcp_window_clamp {
                                            config.tcp_window_clamp = on;
                                        }
                                        if let Some(on) = codel_covers_pause {
                                            config.codel_covers_pause = on;
                                        }
                                        if let Some(on) = aggregate_arrival_order {
                                            config.aggregate_arrival_order = on;
                                        }
                                        policies.apply(&mut config);
                                        let engine = Endpoint::new(config, t)
                                            .expect("server engine config is validated");
                                        Client {
                                            name: name.clone(),
                                            address,
                                            session: Session::new(engine),
                                            paths: HashMap::new(),
                                            last_heard: t,
                                        }
                                    });
                                    if c.address != address {
                                        // Session id collision with another peer: refuse.
                                        drops.handshakes_rejected += 1;
                                        continue;
                                    }
                                    if !c.session.install(t, acc.transport) {
                                        drops.handshakes_rejected += 1;
                                        continue;
                                    }
                                    // The response goes back where the initiation came
                                    // from, but that is no path for the link its header
                                    // names: the client sends the same initiation on every
                                    // link, and the first copy in, the one answered, may
                                    // have come over another. Taken as the named link's
                                    // path, it sent that link's datagrams over the other
                                    // link until the client's own came, and the link's
                                    // RTT and one-way delay kept a minimum that its path
                                    // cannot reach: rate control then read a standing
                                    // queue of the difference and held the link nearly
                                    // idle for its minimum's window (10 s). The client
                                    // sends on each of its links at once (link status);
                                    // each link is learnt from its first authentic
                                    // datagram.
                                    c.last_heard = t;
                                    by_address.insert(address, acc.session);
                                    let _ = sock.send_from_to(&acc.response, from, local);
                                    tracing::info!(peer = %name, session = format!("{:08x}", acc.session), "handshake accepted");
                                }
                                Err(e) => {
                                    drops.handshakes_rejected += 1;
                                    tracing::debug!(%e, %from, "handshake rejected");
                                    refusals.note(t, &e, from, responder.public_key());
                                }
                            }
                            continue;
                        }
                        let Some(id) = latebind_crypto::session_of(d) else {
                            drops.unknown_session += 1;
                            continue;
                        };
                        let Some(c) = clients.get_mut(&id) else {
                            drops.unknown_session += 1;
                            continue;
                        };
                        if c.session.handle_datagram(t, d) {
                            c.last_heard = t;
                            // Authentic and new (a replay may come from anywhere): this is
                            // where that link is reached now. Another address than before
                            // (not only another port: a NAT's rebinding keeps the path)
                            // may be another path.
                            let link = u16::from_be_bytes([d[6], d[7]]);
                            let old = c.paths.insert(link, (si, from, local));
                            if let Some((old_si, old, old_local)) = old
                                && (old_si != si || old.ip() != from.ip() || old_local != local)
                            {
                                tracing::info!(link, %old, new = %from, "link path changed");
                                c.session.engine.handle_path_change(t, LinkId(link));
                            }
                            if old
                                .is_none_or(|(_, old, _)| outer_headers(old) != outer_headers(from))
                            {
                                // The path's family sets how much of it the outer headers
                                // take.
                                c.session.engine.set_max_datagram(
                                    t,
                                    LinkId(link),
                                    Some(max_datagram(SERVER_PATH_MTU, from)),
                                );
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        ready = batch;
        // Each session's timers; a client that went away: its session and keys go after
        // `session_timeout`.
        clients.retain(|id, c| {
            c.session.handle_timeout(t);
            let keep = t - c.last_heard < session_timeout;
            if !keep {
                tracing::info!(peer = %c.name, session = format!("{id:08x}"), "session timed out");
                if by_address.get(&c.address) == Some(id) {
                    by_address.remove(&c.address);
                }
            }
            keep
        });
    }
}

/// The server's sockets, shared by every client and link: the kernel's acceptance is the
/// departure (its queue cannot be told apart per link).
struct ServerIo<'a> {
    paths: &'a HashMap<u16, Path>,
    sockets: &'a [LinkSocket],
    /// The session's id: with the link, the tag of a dispatched datagram.
    session: u32,
    stage: Option<&'a DispatchStage>,
}

impl LinkIo for ServerIo<'_> {
    fn send(&mut self, link: LinkId, datagram: &[u8]) -> Sent {
        match self.paths.get(&link.0) {
            Some((si, to, from)) => sent(self.sockets[*si].send_from_to(datagram, *to, *from)),
            None => Sent::Failed,
        }
    }

    fn queued(&self, _link: LinkId) -> Option<usize> {
        None
    }

    fn dispatch(&mut self, link: LinkId, at: Instant, datagram: Vec<u8>) -> bool {
        match (self.stage, self.paths.get(&link.0)) {
            // (The stage sends from the socket's own address: with a wildcard socket on a
            // host with several addresses, leave it off or list each address.)
            (Some(stage), Some((si, to, _))) => {
                let tag = u64::from(self.session) << 16 | u64::from(link.0);
                stage.submit(at, *si, *to, datagram, tag)
            }
            _ => false,
        }
    }
}

/// Datagrams and packets the server drops outside any session, by reason.
#[derive(Clone, Copy, Debug, Default)]
struct Drops {
    handshakes_rejected: u64,
    unknown_session: u64,
    no_client_for_destination: u64,
}

/// Handshake initiations the server processes per second at most, all clients together.
const HANDSHAKES_PER_SECOND: f64 = 200.0;

/// A token bucket over handshake initiations.
struct HandshakeBudget {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl HandshakeBudget {
    fn new(rate: f64) -> Self {
        Self {
            rate,
            tokens: rate,
            last: Instant::ZERO,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let dt = (now - self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The period over which refusals are logged as warnings at most once each.
const REFUSAL_WARN_EVERY: Duration = Duration::from_secs(60);
/// Unknown client keys warned of per [`REFUSAL_WARN_EVERY`] at most: a flood of made-up
/// keys (a key pair is cheap) logs no more than this many lines a minute.
const REFUSAL_KEYS: usize = 64;

/// Warnings for the handshakes a user can fix in a config file: an authentic client
/// whose key is not among the peers, and initiations made for another server key. Each
/// is logged once per [`REFUSAL_WARN_EVERY`] (per client key for the first, up to
/// [`REFUSAL_KEYS`] keys), so that a client retrying every second, or a flood, does not
/// fill the log; every refusal is still counted (`handshakes_rejected`) and logged at
/// debug level.
#[derive(Default)]
struct Refusals {
    /// The keys warned of since `since`.
    unknown: std::collections::HashSet<PublicKey>,
    since: Option<Instant>,
    undecryptable: Option<Instant>,
}

impl Refusals {
    fn note(&mut self, now: Instant, e: &CryptoError, from: SocketAddr, server_key: PublicKey) {
        let due = |last: Option<Instant>| last.is_none_or(|l| now - l >= REFUSAL_WARN_EVERY);
        match e {
            CryptoError::UnknownClientKey(key) => {
                if due(self.since) {
                    self.unknown.clear();
                    self.since = Some(now);
                }
                if self.unknown.len() >= REFUSAL_KEYS || !self.unknown.insert(*key) {
                    return;
                }
                tracing::warn!(
                    client_key = %key,
                    %from,
                    "handshake refused: this client key is not among the [[peers]]; add a peer with this public_key to let it in"
                );
            }
            CryptoError::AuthenticationFailed => {
                if !due(self.undecryptable) {
                    return;
                }
                self.undecryptable = Some(now);
                tracing::warn!(
                    %from,
                    %server_key,
                    "handshake refused: an initiation that does not decrypt with this server's key (a client given another server_public_key than this server_key, or not a latebind client)"
                );
            }
            _ => {}
        }
    }
}

fn server_status(
    clients: &HashMap<u32, Client>,
    tun: &Tun,
    mtu: u16,
    started: u64,
    t: Instant,
    drops: Drops,
) -> Status {
    let mut ids: Vec<&u32> = clients.keys().collect();
    ids.sort_unstable();
    Status {
        role: "server".into(),
        tun: tun.name().into(),
        mtu,
        tun_offload: tun.offload(),
        tun_write_errors: tun.write_errors(),
        uptime_s: (t.as_nanos().saturating_sub(started)) as f64 / 1e9,
        sessions: ids
            .into_iter()
            .map(|id| {
                let c = &clients[id];
                let mut st = SessionStatus::new(&c.name, &c.session, t, &|l| format!("link{l}"));
                for l in &mut st.links {
                    l.peer_address = c.paths.get(&l.id).map(|(_, a, _)| a.to_string());
                }
                st
            })
            .collect(),
        handshakes_rejected: drops.handshakes_rejected,
        unknown_session: drops.unknown_session,
        no_client_for_destination: drops.no_client_for_destination,
        dispatch: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> PublicKey {
        PublicKey::from_bytes([b; 32])
    }

    #[test]
    fn refusals_warn_once_a_minute_per_key_and_for_at_most_64_keys() {
        let from: SocketAddr = "198.18.10.2:4000".parse().unwrap();
        let mut r = Refusals::default();
        let s = |secs: u64| Instant::from_nanos(secs * 1_000_000_000);
        // The same key each second: its first refusal only.
        for i in 0..30 {
            r.note(s(i), &CryptoError::UnknownClientKey(key(1)), from, key(0));
        }
        assert_eq!(r.unknown.len(), 1);
        // A flood of other keys in the same minute: 63 more, then nothing.
        for b in 2..=200 {
            r.note(s(40), &CryptoError::UnknownClientKey(key(b)), from, key(0));
        }
        assert_eq!(r.unknown.len(), REFUSAL_KEYS);
        assert!(!r.unknown.contains(&key(200)));
        // A minute on, the count starts over.
        r.note(
            s(61),
            &CryptoError::UnknownClientKey(key(200)),
            from,
            key(0),
        );
        assert_eq!(r.unknown.len(), 1);
        assert!(r.unknown.contains(&key(200)));
    }
}
