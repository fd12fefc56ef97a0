//! Per-datagram AEAD after the handshake, and the key ring that carries a session across
//! rekeys.
//!
//! Send path, per datagram, at the binding instant (after the engine assigned link and
//! packet number):
//! 1. check header (version 1, not a handshake, this session);
//! 2. set the key-phase bit of the flags to the epoch's parity;
//! 3. nonce = (link << 32) | packet number, both from the header;
//! 4. encrypt the frames in place with the header as associated data; append the tag.
//!
//! Receive path: the key ring picks the key by the key-phase bit, the transport checks the
//! header the same way, copies header and ciphertext into the caller's buffer and decrypts
//! there. Nothing is allocated once the caller's buffers have grown to the MTU.

use std::fmt;
use std::time::Duration;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::CryptoError;
use crate::header::{FLAG_KEY_PHASE, HEADER_LEN, Header};

/// Length of the AEAD tag `seal` appends: the whole per-datagram overhead of encryption.
pub const TAG_LEN: usize = 16;

/// The client starts a new handshake once its current key has sealed this many datagrams
/// (half the 32-bit packet-number space, so the hard limit below is never reached).
pub const REKEY_AFTER_PACKETS: u64 = 1 << 31;

/// The client starts a new handshake once its current key is this old (WireGuard's value).
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);

/// A key refuses to seal more datagrams than this. The nonce uses the low 32 bits of a
/// link's packet number; with fewer than 2^32 datagrams sealed under one key, no link can
/// have wrapped its 32 bits under it, so no (link, packet number) nonce repeats.
pub const REJECT_AFTER_PACKETS: u64 = 1 << 32;

/// Largest datagram `seal` produces: a UDP payload's length limit.
const MAX_DATAGRAM_LEN: usize = u16::MAX as usize;

/// The two directional ChaCha20-Poly1305 keys of one session and one key epoch.
///
/// Made by [`Initiator::handle_response`] or [`Responder::handle_initiation`]; keys are
/// zeroed on drop.
///
/// [`Initiator::handle_response`]: crate::Initiator::handle_response
/// [`Responder::handle_initiation`]: crate::Responder::handle_initiation
pub struct Transport {
    send: LessSafeKey,
    recv: LessSafeKey,
    session: u32,
    epoch: u64,
    initiator: bool,
    /// When the handshake started, on the initiator's wall clock.
    born: Duration,
    /// Datagrams sealed so far.
    pub(crate) sealed: u64,
}

impl Transport {
    pub(crate) fn new(
        send: &[u8; 32],
        recv: &[u8; 32],
        session: u32,
        epoch: u64,
        initiator: bool,
        born: Duration,
    ) -> Self {
        Self {
            send: aead_key(send),
            recv: aead_key(recv),
            session,
            epoch,
            initiator,
            born,
            sealed: 0,
        }
    }

    /// Encrypts in place: `datagram` holds header+plaintext frames; on return it holds
    /// header (key-phase bit set) + ciphertext + tag.
    ///
    /// Give `datagram` [`TAG_LEN`] bytes of spare capacity to keep this allocation-free.
    /// On error `datagram` is unchanged.
    pub fn seal(&mut self, datagram: &mut Vec<u8>) -> Result<(), CryptoError> {
        let header = self.check(datagram)?;
        if datagram.len() + TAG_LEN > MAX_DATAGRAM_LEN {
            return Err(CryptoError::TooLong);
        }
        if self.sealed >= REJECT_AFTER_PACKETS {
            return Err(CryptoError::KeyExhausted);
        }
        let flags = (header.flags & !FLAG_KEY_PHASE) | self.phase();
        let (head, body) = datagram.split_at_mut(HEADER_LEN);
        let old_flags = std::mem::replace(&mut head[1], flags);
        let Ok(tag) = self
            .send
            .seal_in_place_separate_tag(nonce(header), Aad::from(&*head), body)
        else {
            // Unreachable: the only failure is a body longer than 2^38 bytes.
            head[1] = old_flags;
            return Err(CryptoError::TooLong);
        };
        datagram.extend_from_slice(tag.as_ref());
        self.sealed += 1;
        Ok(())
    }

    /// Verifies and decrypts: `datagram` is what came off the wire; `out` receives header +
    /// plaintext frames (cleared first). Never panics on any input.
    ///
    /// On error `out` is left empty: no unauthenticated byte reaches the caller. Replayed
    /// datagrams are not detected here; the engine drops packet numbers it has already
    /// received (docs/protocol.md §5.1).
    pub fn open(&self, datagram: &[u8], out: &mut Vec<u8>) -> Result<(), CryptoError> {
        out.clear();
        let header = self.check(datagram)?;
        if header.flags & FLAG_KEY_PHASE != self.phase() {
            return Err(CryptoError::KeyPhaseMismatch);
        }
        let Some((sealed, tag)) = datagram.split_last_chunk::<TAG_LEN>() else {
            return Err(CryptoError::TooShort);
        };
        if sealed.len() < HEADER_LEN {
            return Err(CryptoError::TooShort);
        }
        out.extend_from_slice(sealed);
        let (head, body) = out.split_at_mut(HEADER_LEN);
        let opened = self.recv.open_in_place_separate_tag(
            nonce(header),
            Aad::from(&*head),
            Tag::from(*tag),
            body,
            0..,
        );
        if opened.is_err() {
            out.clear();
            return Err(CryptoError::AuthenticationFailed);
        }
        Ok(())
    }

    /// The key epoch: 0 for a session's first handshake, one more for each rekey. Its
    /// parity is the key-phase bit.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The session this key belongs to.
    pub fn session(&self) -> u32 {
        self.session
    }

    /// Whether the initiator (client) should start a rekey: this key has sealed
    /// [`REKEY_AFTER_PACKETS`] datagrams, or [`REKEY_AFTER_TIME`] has passed since the
    /// handshake started. `now` is the wall clock passed as `now_unix` to
    /// [`Initiator::new`]; on a responder's transport the age counts from the client's
    /// timestamp, so it is only a hint there (only clients start handshakes).
    ///
    /// The count is of all datagrams this key sealed, on every link together, which bounds
    /// the count of any one link from above.
    ///
    /// [`Initiator::new`]: crate::Initiator::new
    pub fn needs_rekey(&self, now: Duration) -> bool {
        self.sealed >= REKEY_AFTER_PACKETS || now.saturating_sub(self.born) >= REKEY_AFTER_TIME
    }

    /// The key-phase bit of this epoch.
    fn phase(&self) -> u8 {
        u8::from(self.epoch % 2 == 1)
    }

    /// The checks shared by seal and open: a v1 data datagram of this session.
    fn check(&self, datagram: &[u8]) -> Result<Header, CryptoError> {
        let header = Header::parse(datagram)?;
        if header.is_handshake() {
            return Err(CryptoError::UnexpectedHandshake);
        }
        if header.session != self.session {
            return Err(CryptoError::SessionMismatch);
        }
        Ok(header)
    }
}

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transport")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .field("initiator", &self.initiator)
            .field("sealed", &self.sealed)
            .finish_non_exhaustive()
    }
}

/// The AEAD nonce of a datagram: Noise's ChaChaPoly nonce layout (32 zero bits, then a
/// 64-bit little-endian counter) with the counter `(link << 32) | packet number`.
fn nonce(header: Header) -> Nonce {
    let n = (u64::from(header.link) << 32) | u64::from(header.pn);
    let mut bytes = [0; 12];
    bytes[4..].copy_from_slice(&n.to_le_bytes());
    // Unique per key: the engine never reuses a (link, packet number) pair under one key,
    // and a key seals at most 2^32 datagrams (module doc).
    Nonce::assume_unique_for_key(bytes)
}

/// A ChaCha20-Poly1305 key from ring (assembly implementations with AVX2/AVX-512).
fn aead_key(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(
        UnboundKey::new(&CHACHA20_POLY1305, key).expect("ChaCha20-Poly1305 takes 32-byte keys"),
    )
}

/// The keys of one session: at most one per key phase.
///
/// ```text
///                 install(epoch e)                      open() under e succeeds
///  (responder) ───────────────────► pending e ─────────────────────────────────► sending e
///  (initiator) ─────────────────────────────────────────────────────────────────► sending e
///  sending e ── install(e + 1) and the new key becomes sending ──► previous e
///  previous e ── retire_previous() or install(e + 2) ──► dropped
/// ```
///
/// `seal` uses the sending key; `open` uses the key whose epoch parity matches the
/// datagram's key-phase bit, so datagrams sealed just before a rekey still open.
///
/// The client's new key is the sending key at once: it has the server's response, so the
/// server has the key too. The server's new key waits until a datagram from the client
/// opens under it (key confirmation, as in WireGuard): if the response was lost, the
/// client never got the key, and the server keeps sending under the old one. A server
/// with no other key uses the new one at once. When the client's initiation for epoch
/// `e + 1` arrives, the server promotes a pending `e`, since the client can only propose
/// `e + 1` after it has installed `e`.
///
/// A server key that no datagram from the client has opened yet is replaced by a newer
/// handshake of the same epoch: the client proposes the same epoch again when the
/// response was lost (it installed nothing). Refused, the session's first handshake
/// could never complete after a lost response (the server, with no other key, uses its
/// new one at once): the client retried every second and the server refused each,
/// until it dropped the session (`session_timeout_s`). A replayed initiation does not
/// get this far (the responder refuses a timestamp it has seen), and a fresh one takes
/// the client's static key.
#[derive(Debug, Default)]
pub struct KeyRing {
    /// Indexed by epoch parity.
    slots: [Option<Transport>; 2],
    /// Index of the sending key in `slots`.
    sending: Option<usize>,
    /// Indexed as `slots`: whether a datagram has opened under the key.
    opened: [bool; 2],
}

impl KeyRing {
    /// An empty ring.
    pub fn new() -> Self {
        Self::default()
    }

    /// The epoch a client's next handshake establishes: one past the newest key held, 0
    /// for an empty ring. Pass it to [`Initiator::new`].
    ///
    /// [`Initiator::new`]: crate::Initiator::new
    pub fn next_epoch(&self) -> u64 {
        self.slots
            .iter()
            .flatten()
            .map(|t| t.epoch.saturating_add(1))
            .max()
            .unwrap_or(0)
    }

    /// Installs the transport of a completed handshake. An initiator's transport becomes
    /// the sending key at once, a responder's once confirmed (see above); the key it
    /// replaces stays as the previous key until [`KeyRing::retire_previous`].
    ///
    /// Refused if the transport belongs to another session than the keys held, or if its
    /// epoch is not newer than the sending key's.
    pub fn install(&mut self, transport: Transport) -> Result<(), CryptoError> {
        if self
            .slots
            .iter()
            .flatten()
            .any(|t| t.session != transport.session)
        {
            return Err(CryptoError::SessionMismatch);
        }
        if let Some(current) = self.current()
            && transport.epoch <= current.epoch
        {
            let unconfirmed_retry = transport.epoch == current.epoch
                && !transport.initiator
                && !current.initiator
                && !self.sending.is_some_and(|i| self.opened[i]);
            if !unconfirmed_retry {
                return Err(CryptoError::StaleEpoch);
            }
        }
        let slot = parity(transport.epoch);
        let other = 1 - slot;
        if let Some(prior) = &self.slots[other]
            && transport.epoch.checked_sub(1) == Some(prior.epoch)
        {
            // The client proposes e + 1 only after installing e: e is confirmed.
            self.sending = Some(other);
        }
        if self.sending == Some(slot) {
            self.sending = None;
        }
        let initiator = transport.initiator;
        self.slots[slot] = Some(transport);
        self.opened[slot] = false;
        if initiator || self.sending.is_none() {
            self.sending = Some(slot);
        }
        Ok(())
    }

    /// The key `seal` uses, if any.
    pub fn current(&self) -> Option<&Transport> {
        self.sending.and_then(|i| self.slots[i].as_ref())
    }

    /// Seals with the sending key (see [`Transport::seal`]).
    pub fn seal(&mut self, datagram: &mut Vec<u8>) -> Result<(), CryptoError> {
        let transport = self
            .sending
            .and_then(|i| self.slots[i].as_mut())
            .ok_or(CryptoError::NoSendingKey)?;
        transport.seal(datagram)
    }

    /// Opens with the key the datagram's key-phase bit selects (see [`Transport::open`]).
    /// A pending key that opens a datagram becomes the sending key.
    pub fn open(&mut self, datagram: &[u8], out: &mut Vec<u8>) -> Result<(), CryptoError> {
        out.clear();
        let header = Header::parse(datagram)?;
        let slot = usize::from(header.flags & FLAG_KEY_PHASE);
        let transport = self.slots[slot]
            .as_ref()
            .ok_or(CryptoError::NoKeyForPhase)?;
        transport.open(datagram, out)?;
        self.opened[slot] = true;
        if self
            .current()
            .is_none_or(|current| current.epoch < transport.epoch)
        {
            self.sending = Some(slot);
        }
        Ok(())
    }

    /// Drops the key older than the sending key, once datagrams sealed under it can no
    /// longer be in flight (the caller's grace period, e.g. a few seconds after a rekey).
    /// A pending newer key is kept.
    pub fn retire_previous(&mut self) {
        let Some(sending) = self.sending else {
            return;
        };
        let other = 1 - sending;
        let current_epoch = self.slots[sending].as_ref().map(|t| t.epoch);
        if self.slots[other]
            .as_ref()
            .is_some_and(|t| Some(t.epoch) < current_epoch)
        {
            self.slots[other] = None;
        }
    }
}

fn parity(epoch: u64) -> usize {
    usize::from(epoch % 2 == 1)
}
