//! One tunnel session as the daemon drives it: the engine, the session's keys, and the
//! datagrams a link's socket pushed back.
//!
//! Pipeline per call to [`Session::pump`] (sequential, one thread):
//!  1. `poll_transmit`: the engine binds a packet to a link and writes the datagram;
//!  2. seal it at once (the binding instant) with the current key;
//!  3. send it on that link. Where the link has its own socket, the departure
//!     (`handle_tx_done`) is when the datagram has left the kernel's queue, read with
//!     `SIOCOUTQ` ([`crate::departures`]), so the engine's budget below the binding point
//!     counts the qdisc and driver; on a shared socket it is the kernel's acceptance.
//!     A full send buffer keeps the datagram here, in order, until the socket is writable;
//!     the engine's budget stays used meanwhile, so it binds nothing more to that link;
//!  4. `poll_deliver`: in-order inner packets go to the TUN side.
//!
//! With the dispatch stage ([`crate::dispatch`]), step 1 binds up to the horizon φ
//! before the packet's pacing slot (`poll_transmit_ahead`), and step 3 hands the sealed
//! datagram to the sender thread with its slot ([`LinkIo::dispatch`]); its departure
//! comes back later ([`Session::on_dispatched`]) and is reported to the engine as in
//! step 3.

use std::collections::VecDeque;
use std::io;

use core::time::Duration;

use latebind_crypto::KeyRing;
use latebind_proto::{Endpoint, Instant, LinkId};
use serde::{Deserialize, Serialize};

use crate::departures::Departures;

/// Counters of the daemon's part of a session.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize)]
pub struct SessionCounters {
    /// Datagrams sealed and handed to a socket.
    pub sent: u64,
    /// Datagrams a socket refused for now (held, retried when writable).
    pub held_send_buffer_full: u64,
    /// Datagrams dropped: the socket failed (interface down, no route).
    pub send_errors: u64,
    /// Datagrams dropped: authentication failed (forged, corrupted, wrong key).
    pub auth_failed: u64,
    /// Datagrams opened and given to the engine.
    pub opened: u64,
    /// Inner packets dropped because their source was not the peer's address.
    pub spoofed: u64,
    /// Inner packets written to the TUN device.
    pub delivered: u64,
    /// Datagrams dropped: the engine had data before the keys were ready.
    pub no_keys: u64,
    /// Datagrams handed to the dispatch stage (sealed, to leave at their slot).
    #[serde(default)]
    pub dispatched: u64,
}

/// How long the previous key keeps opening datagrams after a new one is installed.
pub const RETIRE_AFTER: Duration = Duration::from_secs(10);

/// The result of trying to send a datagram on a link.
pub enum Sent {
    /// The kernel took it.
    Ok,
    /// The send buffer is full: keep it and retry when writable.
    WouldBlock,
    /// It cannot be sent (dropped).
    Failed,
}

/// What the daemon keeps per link of a session.
#[derive(Debug, Default)]
struct LinkQueues {
    /// Sealed datagrams the socket pushed back, in order.
    held: VecDeque<Vec<u8>>,
    /// Datagrams in the kernel's queue, not yet seen leaving.
    departures: Departures,
    /// Held datagrams dropped because the interface went down.
    held_dropped: u64,
    /// Datagrams handed to the dispatch stage, not yet reported back.
    dispatching: u64,
    /// Of those, the ones that were below the binding point when the interface went
    /// down: the engine forgot them then, so their reports are no departures for it.
    dispatch_stale: u64,
}

/// Engine + keys + held datagrams.
pub struct Session {
    /// The engine.
    pub engine: Endpoint,
    /// Keys: empty until the handshake completes.
    pub keys: KeyRing,
    /// When the previous key may be retired (a few seconds after a new key).
    pub retire_at: Option<Instant>,
    /// Counters.
    pub counters: SessionCounters,
    /// Per link, indexed by link id.
    links: Vec<LinkQueues>,
    buf: Vec<u8>,
    open_buf: Vec<u8>,
    /// The dispatch stage's binding horizon, when the stage is on.
    horizon: Option<Duration>,
}

impl Session {
    /// A session around an engine.
    pub fn new(engine: Endpoint) -> Self {
        Self {
            engine,
            keys: KeyRing::new(),
            retire_at: None,
            counters: SessionCounters::default(),
            links: Vec::new(),
            buf: Vec::with_capacity(2048),
            open_buf: Vec::with_capacity(2048),
            horizon: None,
        }
    }

    /// Turns the dispatch stage on with binding horizon `horizon` (None: off). Datagrams
    /// then go to [`LinkIo::dispatch`] with their slot.
    pub fn set_dispatch(&mut self, horizon: Option<Duration>) {
        self.horizon = horizon;
    }

    fn link_mut(&mut self, link: LinkId) -> &mut LinkQueues {
        let i = usize::from(link.0);
        if self.links.len() <= i {
            self.links.resize_with(i + 1, LinkQueues::default);
        }
        &mut self.links[i]
    }

    fn link(&self, link: LinkId) -> Option<&LinkQueues> {
        self.links.get(usize::from(link.0))
    }

    /// `link`'s interface went down: the datagrams held for it are dropped, and those in
    /// the kernel's queue are gone with the interface.
    pub fn drop_held(&mut self, link: LinkId) {
        let l = self.link_mut(link);
        let dropped = std::mem::take(&mut l.held).len() as u64;
        l.held_dropped += dropped;
        l.departures.clear();
        // Those still with the sender thread were below the binding point too.
        l.held_dropped += l.dispatching - l.dispatch_stale;
        l.dispatch_stale = l.dispatching;
        self.counters.send_errors += dropped;
    }

    /// Sealed datagrams the daemon held for `link` (never given to the kernel) and
    /// dropped when its interface went down.
    pub fn held_dropped(&self, link: LinkId) -> u64 {
        self.link(link).map_or(0, |l| l.held_dropped)
    }

    /// Whether `link` has datagrams waiting for its socket.
    pub fn has_held(&self, link: LinkId) -> bool {
        self.link(link).is_some_and(|l| !l.held.is_empty())
    }

    /// Whether a key is installed.
    pub fn established(&self) -> bool {
        self.keys.current().is_some()
    }

    /// Installs a new key from a completed handshake; the previous key keeps opening
    /// datagrams in flight for [`RETIRE_AFTER`].
    pub fn install(&mut self, now: Instant, transport: latebind_crypto::Transport) -> bool {
        match self.keys.install(transport) {
            Ok(()) => {
                self.retire_at = Some(now + RETIRE_AFTER);
                true
            }
            Err(e) => {
                tracing::warn!(%e, "key not installed");
                false
            }
        }
    }

    /// Retires the previous key when its time has come.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.retire_at.is_some_and(|t| t <= now) {
            self.keys.retire_previous();
            self.retire_at = None;
        }
        if self.engine.poll_timeout().is_some_and(|d| d <= now) {
            self.engine.handle_timeout(now);
        }
    }

    /// The next time [`Session::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.engine.poll_timeout(), self.retire_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Opens a datagram from the network and gives it to the engine. Returns whether it
    /// was authentic and the engine took it (not a replay): only such a datagram shows
    /// where its link is reached now.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) -> bool {
        if !self.established() {
            self.counters.no_keys += 1;
            return false;
        }
        if self.keys.open(datagram, &mut self.open_buf).is_err() {
            self.counters.auth_failed += 1;
            return false;
        }
        self.counters.opened += 1;
        self.engine.handle_datagram(now, &self.open_buf)
    }

    /// The kernel now holds `queued` bytes of `link`'s datagrams: reports to the engine
    /// those that left since the last reading.
    pub fn on_queued(&mut self, now: Instant, link: LinkId, queued: usize) {
        let left = self.link_mut(link).departures.on_queued(queued);
        self.departed(now, link, left);
    }

    /// The dispatch stage reports a datagram of `link` of `len` bytes: the kernel took
    /// it (`sent`) or refused it. `queued` is the link socket's `SIOCOUTQ` reading just
    /// now, when the socket is the link's own.
    pub fn on_dispatched(
        &mut self,
        now: Instant,
        link: LinkId,
        len: usize,
        sent: bool,
        queued: Option<usize>,
    ) {
        let l = self.link_mut(link);
        l.dispatching = l.dispatching.saturating_sub(1);
        if l.dispatch_stale > 0 {
            l.dispatch_stale -= 1;
            return;
        }
        if !sent {
            self.counters.send_errors += 1;
            self.departed(now, link, 1);
            return;
        }
        // The sender thread read no queue around its send: the datagram's size in the
        // kernel is the estimate, and the reading tells what has left since.
        let left = match queued {
            Some(q) => l.departures.on_sent(len, q, q),
            None => 1,
        };
        self.counters.sent += 1;
        self.departed(now, link, left);
    }

    fn departed(&mut self, now: Instant, link: LinkId, n: usize) {
        for _ in 0..n {
            self.engine.handle_tx_done(now, link);
        }
    }

    /// Hands one sealed datagram to `link`'s socket. `Err` gives it back when the send
    /// buffer is full.
    fn send_one<L: LinkIo>(
        &mut self,
        now: Instant,
        io: &mut L,
        link: LinkId,
        datagram: &[u8],
    ) -> Result<(), ()> {
        let before = match io.queued(link) {
            // Nothing of ours waits in the kernel: no need to ask.
            Some(_) if self.link_mut(link).departures.is_empty() => Some(0),
            Some(q) => {
                self.on_queued(now, link, q);
                Some(q)
            }
            None => None,
        };
        match io.send(link, datagram) {
            Sent::Ok => {
                self.counters.sent += 1;
                let left = match (before, io.queued(link)) {
                    (Some(before), Some(after)) => {
                        self.link_mut(link)
                            .departures
                            .on_sent(datagram.len(), before, after)
                    }
                    // No reading: the kernel's acceptance is the departure.
                    _ => 1,
                };
                self.departed(now, link, left);
                Ok(())
            }
            Sent::WouldBlock => Err(()),
            Sent::Failed => {
                self.counters.send_errors += 1;
                self.departed(now, link, 1);
                Ok(())
            }
        }
    }

    /// Retries the datagrams held for `link`, in order.
    pub fn flush_held<L: LinkIo>(&mut self, now: Instant, io: &mut L, link: LinkId) {
        while let Some(d) = self.link_mut(link).held.pop_front() {
            if self.send_one(now, io, link, &d).is_err() {
                self.link_mut(link).held.push_front(d);
                return;
            }
        }
    }

    /// Drives the engine's outputs: datagrams to `io`, inner packets to `deliver`.
    pub fn pump<L: LinkIo>(
        &mut self,
        now: Instant,
        io: &mut L,
        mut deliver: impl FnMut(&mut [u8]) -> bool,
    ) {
        // What a full send buffer pushed back goes first, in order.
        for i in 0..self.links.len() {
            if !self.links[i].held.is_empty() {
                self.flush_held(now, io, LinkId(i as u16));
            }
        }
        if self.established() {
            let mut buf = std::mem::take(&mut self.buf);
            loop {
                let t = match self.horizon {
                    Some(h) => self.engine.poll_transmit_ahead(now, h, &mut buf),
                    None => self.engine.poll_transmit(now, &mut buf),
                };
                let Some(t) = t else { break };
                buf.truncate(t.len);
                if self.keys.seal(&mut buf).is_err() {
                    self.counters.send_errors += 1;
                    self.engine.handle_tx_done(now, t.link);
                    continue;
                }
                if self.horizon.is_some() && io.dispatch(t.link, t.send_at, buf.clone()) {
                    self.link_mut(t.link).dispatching += 1;
                    self.counters.dispatched += 1;
                    continue;
                }
                // Keep the link's order: behind what is already waiting.
                let hold = if self.has_held(t.link) {
                    true
                } else if self.send_one(now, io, t.link, &buf).is_err() {
                    self.counters.held_send_buffer_full += 1;
                    true
                } else {
                    false
                };
                if hold {
                    self.link_mut(t.link).held.push_back(buf.clone());
                }
            }
            self.buf = buf;
        }
        while let Some(mut p) = self.engine.poll_deliver() {
            if deliver(&mut p) {
                self.counters.delivered += 1;
            } else {
                self.counters.spoofed += 1;
            }
            self.engine.recycle(p);
        }
        while let Some(ev) = self.engine.poll_event() {
            tracing::info!(?ev, "engine event");
        }
    }
}

/// The sockets a session sends on.
pub trait LinkIo {
    /// Sends one datagram on `link`.
    fn send(&mut self, link: LinkId, datagram: &[u8]) -> Sent;
    /// Bytes of `link`'s datagrams the kernel still holds (`SIOCOUTQ`), when the socket
    /// is the link's own; `None` when the kernel's acceptance is taken as the departure
    /// (a socket shared by many links, as on the server).
    fn queued(&self, link: LinkId) -> Option<usize>;
    /// Hands a sealed datagram of `link` to the dispatch stage, to leave at `at`; false
    /// when there is no stage (the session then sends it at once).
    fn dispatch(&mut self, link: LinkId, at: Instant, datagram: Vec<u8>) -> bool {
        let _ = (link, at, datagram);
        false
    }
}

/// Maps a socket result to [`Sent`].
pub fn sent(r: io::Result<usize>) -> Sent {
    match r {
        Ok(_) => Sent::Ok,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Sent::WouldBlock,
        Err(e) => {
            tracing::debug!(%e, "send failed");
            Sent::Failed
        }
    }
}

#[cfg(test)]
mod tests {
    use latebind_crypto::{Initiator, Responder, StaticSecret};
    use latebind_proto::{Config, LinkChange, LinkConfig, Role};

    use super::*;

    const SESSION: u32 = 0x5e55_1011;

    /// Records what the session hands over; every datagram goes to the stage.
    #[derive(Default)]
    struct FakeIo {
        dispatched: Vec<(LinkId, Instant, usize)>,
        sent_now: usize,
    }

    impl LinkIo for FakeIo {
        fn send(&mut self, _link: LinkId, _datagram: &[u8]) -> Sent {
            self.sent_now += 1;
            Sent::Ok
        }

        fn queued(&self, _link: LinkId) -> Option<usize> {
            None
        }

        fn dispatch(&mut self, link: LinkId, at: Instant, datagram: Vec<u8>) -> bool {
            self.dispatched.push((link, at, datagram.len()));
            true
        }
    }

    /// A client session with one link paced at 1 MB/s, keys installed, and `n` inner
    /// packets queued.
    fn session(n: u32) -> Session {
        let mut config = Config::new(Role::Client);
        config.session(SESSION).budget_packets(4);
        config.rate_control = false;
        let mut e = Endpoint::new(config, Instant::ZERO).unwrap();
        e.add_link(
            Instant::ZERO,
            LinkId(0),
            LinkConfig {
                pacing_rate: Some(1e6),
                ..LinkConfig::default()
            },
        );
        let mut s = Session::new(e);
        let (client, server) = (
            StaticSecret::from_random_bytes([1; 32]),
            StaticSecret::from_random_bytes([2; 32]),
        );
        let mut responder = Responder::new(server.clone(), vec![client.public_key()]);
        let (mut init, initiation) = Initiator::new(
            &client,
            &server.public_key(),
            SESSION,
            0,
            0,
            Duration::from_secs(1_700_000_000),
            [3; 32],
        )
        .unwrap();
        let accepted = responder.handle_initiation(&initiation, [4; 32]).unwrap();
        assert!(s.install(
            Instant::ZERO,
            init.handle_response(&accepted.response).unwrap()
        ));
        for seq in 0..n {
            s.engine
                .handle_tun_packet(Instant::ZERO, &udp(seq))
                .unwrap();
        }
        s
    }

    /// A minimal IPv4/UDP packet 10.0.0.1:4000 -> 10.0.0.2:9 of 500 bytes.
    fn udp(seq: u32) -> Vec<u8> {
        let mut p = vec![0u8; 500];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&500u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&4000u16.to_be_bytes());
        p[22..24].copy_from_slice(&9u16.to_be_bytes());
        p[24..26].copy_from_slice(&480u16.to_be_bytes());
        p[28..32].copy_from_slice(&seq.to_be_bytes());
        p
    }

    fn below(s: &Session, now: Instant) -> usize {
        s.engine.link_views(now)[0].below_binding
    }

    #[test]
    fn dispatched_datagrams_stay_below_the_binding_point_until_reported() {
        let mut s = session(10);
        s.set_dispatch(Some(Duration::from_millis(5)));
        let now = Instant::from_nanos(1_000_000);
        let mut io = FakeIo::default();
        s.pump(now, &mut io, |_| true);
        let n = io.dispatched.len();
        assert_eq!(n, 4, "the budget bounds what is bound ahead");
        assert_eq!(io.sent_now, 0);
        assert!(io.dispatched.windows(2).all(|w| w[0].1 <= w[1].1));
        assert_eq!(below(&s, now), n);
        assert_eq!(s.counters.dispatched, n as u64);
        for (i, &(link, at, len)) in io.dispatched.iter().enumerate() {
            s.on_dispatched(at, link, len, i != 0, None);
            assert_eq!(below(&s, at), n - i - 1);
        }
        assert_eq!((s.counters.sent, s.counters.send_errors), (3, 1));
    }

    #[test]
    fn reports_of_datagrams_dropped_with_their_interface_are_no_departures() {
        let mut s = session(10);
        s.set_dispatch(Some(Duration::from_millis(5)));
        let now = Instant::from_nanos(1_000_000);
        let mut io = FakeIo::default();
        s.pump(now, &mut io, |_| true);
        let stale = io.dispatched.len();
        // The interface goes down and comes back before the sender thread reports.
        s.drop_held(LinkId(0));
        s.engine
            .handle_link_change(now, LinkId(0), LinkChange::Down);
        assert_eq!(s.held_dropped(LinkId(0)), stale as u64);
        s.engine.handle_link_change(now, LinkId(0), LinkChange::Up);
        let later = Instant::from_nanos(20_000_000);
        let mut io2 = FakeIo::default();
        s.pump(later, &mut io2, |_| true);
        let fresh = io2.dispatched.len();
        assert!(fresh > 0);
        assert_eq!(below(&s, later), fresh);
        // The old reports arrive: the new datagrams are still below the binding point.
        for &(link, at, len) in &io.dispatched {
            s.on_dispatched(later.max(at), link, len, true, None);
        }
        assert_eq!(below(&s, later), fresh);
        for &(link, at, len) in &io2.dispatched {
            s.on_dispatched(at, link, len, true, None);
        }
        assert_eq!(below(&s, later), 0);
    }
}
