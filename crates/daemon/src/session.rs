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

use std::collections::VecDeque;
use std::io;

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
}

/// How long the previous key keeps opening datagrams after a new one is installed.
pub const RETIRE_AFTER: core::time::Duration = core::time::Duration::from_secs(10);

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
        }
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

    /// Opens a datagram from the network and gives it to the engine.
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
        self.engine.handle_datagram(now, &self.open_buf);
        true
    }

    /// The kernel now holds `queued` bytes of `link`'s datagrams: reports to the engine
    /// those that left since the last reading.
    pub fn on_queued(&mut self, now: Instant, link: LinkId, queued: usize) {
        let left = self.link_mut(link).departures.on_queued(queued);
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
            while let Some(t) = self.engine.poll_transmit(now, &mut buf) {
                buf.truncate(t.len);
                if self.keys.seal(&mut buf).is_err() {
                    self.counters.send_errors += 1;
                    self.engine.handle_tx_done(now, t.link);
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
