//! One tunnel session as the daemon drives it: the engine, the session's keys, and the
//! datagrams a link's socket pushed back.
//!
//! Pipeline per call to [`Session::pump`] (sequential, one thread):
//!  1. `poll_transmit`: the engine binds a packet to a link and writes the datagram;
//!  2. seal it at once (the binding instant) with the current key;
//!  3. send it on that link; the kernel's acceptance is the departure (`handle_tx_done`).
//!     A full send buffer keeps the datagram here, in order, until the socket is writable;
//!     the engine's budget stays used meanwhile, so it binds nothing more to that link;
//!  4. `poll_deliver`: in-order inner packets go to the TUN side.

use std::collections::VecDeque;
use std::io;

use latebind_crypto::KeyRing;
use latebind_proto::{Endpoint, Instant, LinkId};
use serde::{Deserialize, Serialize};

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
    held: Vec<VecDeque<Vec<u8>>>,
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
            held: Vec::new(),
            buf: Vec::with_capacity(2048),
            open_buf: Vec::with_capacity(2048),
        }
    }

    fn held_mut(&mut self, link: LinkId) -> &mut VecDeque<Vec<u8>> {
        let i = usize::from(link.0);
        if self.held.len() <= i {
            self.held.resize_with(i + 1, VecDeque::new);
        }
        &mut self.held[i]
    }

    /// Drops the datagrams held for `link` (its interface went down).
    pub fn drop_held(&mut self, link: LinkId) {
        let dropped = std::mem::take(self.held_mut(link)).len();
        self.counters.send_errors += dropped as u64;
    }

    /// Whether `link` has datagrams waiting for its socket.
    pub fn has_held(&self, link: LinkId) -> bool {
        self.held
            .get(usize::from(link.0))
            .is_some_and(|h| !h.is_empty())
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

    /// Retries the datagrams held for `link`, in order.
    pub fn flush_held(
        &mut self,
        now: Instant,
        link: LinkId,
        mut send: impl FnMut(LinkId, &[u8]) -> Sent,
    ) {
        while let Some(d) = self.held_mut(link).pop_front() {
            match send(link, &d) {
                Sent::Ok => {
                    self.counters.sent += 1;
                    self.engine.handle_tx_done(now, link);
                }
                Sent::WouldBlock => {
                    self.held_mut(link).push_front(d);
                    return;
                }
                Sent::Failed => {
                    self.counters.send_errors += 1;
                    self.engine.handle_tx_done(now, link);
                }
            }
        }
    }

    /// Drives the engine's outputs: datagrams to `send`, inner packets to `deliver`.
    pub fn pump(
        &mut self,
        now: Instant,
        mut send: impl FnMut(LinkId, &[u8]) -> Sent,
        mut deliver: impl FnMut(&mut [u8]) -> bool,
    ) {
        if self.established() {
            while let Some(t) = self.engine.poll_transmit(now, &mut self.buf) {
                self.buf.truncate(t.len);
                if self.keys.seal(&mut self.buf).is_err() {
                    self.counters.send_errors += 1;
                    self.engine.handle_tx_done(now, t.link);
                    continue;
                }
                if self.has_held(t.link) {
                    // Keep the link's order: behind what is already waiting.
                    let d = self.buf.clone();
                    self.held_mut(t.link).push_back(d);
                    continue;
                }
                match send(t.link, &self.buf) {
                    Sent::Ok => {
                        self.counters.sent += 1;
                        self.engine.handle_tx_done(now, t.link);
                    }
                    Sent::WouldBlock => {
                        self.counters.held_send_buffer_full += 1;
                        let d = self.buf.clone();
                        self.held_mut(t.link).push_back(d);
                    }
                    Sent::Failed => {
                        self.counters.send_errors += 1;
                        self.engine.handle_tx_done(now, t.link);
                    }
                }
            }
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
