//! The Noise IK handshake (`Noise_IK_25519_ChaChaPoly_BLAKE2s`) carried in v1 datagrams.
//!
//! ```text
//! client (Initiator)                                   server (Responder)
//!   new(): e, es, s, ss, {timestamp, epoch}  ──initiation──►  handle_initiation():
//!                                                             key allowed? timestamp newer?
//!   handle_response()  ◄──response──  e, ee, se, {}           → Accepted { transport, response }
//!   → Transport                                               (sent back on the same link)
//! ```
//!
//! Both datagrams are a 12-byte v1 header with flags `0x80 | kind` and packet number 0,
//! followed by the Noise message. The initiation's header is the Noise prologue (after a
//! fixed label), so it is bound to the handshake transcript; the response's header is
//! fully determined by the initiation's and must match it byte for byte. The README's
//! "Construction" section explains why that authenticates both headers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use snow::params::{CipherChoice, DHChoice, HashChoice, NoiseParams};
use snow::resolvers::{CryptoResolver, DefaultResolver};
use snow::types::{Cipher, Dh, Hash, Random};
use snow::{Builder, HandshakeState};
use zeroize::Zeroize;

use crate::header::{HEADER_LEN, Header, KIND_INITIATION, KIND_RESPONSE};
use crate::key::{KEY_LEN, PublicKey, StaticSecret};
use crate::transport::Transport;
use crate::{CryptoError, TAG_LEN};

/// The Noise protocol name.
pub const NOISE_PARAMS: &str = "Noise_IK_25519_ChaChaPoly_BLAKE2s";

/// Mixed into the handshake hash before the initiation header: separates latebind
/// handshakes from any other use of the same static keys with Noise IK.
const PROLOGUE_LABEL: &[u8] = b"latebind v1";

/// Initiation payload: timestamp (u64 seconds + u32 nanoseconds since the Unix epoch)
/// then the proposed key epoch (u64), all big-endian.
const INITIATION_PAYLOAD_LEN: usize = 12 + 8;

/// Length of an initiation datagram: header, ephemeral key, encrypted static key,
/// encrypted payload.
pub const INITIATION_LEN: usize =
    HEADER_LEN + KEY_LEN + (KEY_LEN + TAG_LEN) + (INITIATION_PAYLOAD_LEN + TAG_LEN);

/// Length of a response datagram: header, ephemeral key, encrypted empty payload.
pub const RESPONSE_LEN: usize = HEADER_LEN + KEY_LEN + TAG_LEN;

/// The client side of one handshake attempt.
///
/// Keep only the newest attempt: a retry is a new `Initiator` (with a later `now_unix`),
/// and a response to an abandoned attempt simply fails to authenticate.
pub struct Initiator {
    state: HandshakeState,
    /// The exact header a matching response carries.
    response_header: [u8; HEADER_LEN],
    session: u32,
    epoch: u64,
    now_unix: Duration,
    finished: bool,
}

impl Initiator {
    /// Starts a handshake with `server` for `session` and returns the initiation datagram,
    /// to be sent on `link`.
    ///
    /// - `session`: the client's session id, nonzero; the same for every rekey of the
    ///   session.
    /// - `epoch`: the key epoch the handshake establishes, [`KeyRing::next_epoch`] of the
    ///   client's key ring (0 for the first handshake). The server learns it from the
    ///   initiation, so both ends agree on the key-phase bit even when a response is lost.
    /// - `now_unix`: wall-clock time since the Unix epoch; the server refuses an initiation
    ///   whose timestamp is not greater than the last one it accepted from this client.
    /// - `seed`: 32 random bytes from which the ephemeral key is drawn.
    ///
    /// [`KeyRing::next_epoch`]: crate::KeyRing::next_epoch
    pub fn new(
        local: &StaticSecret,
        server: &PublicKey,
        session: u32,
        epoch: u64,
        link: u16,
        now_unix: Duration,
        seed: [u8; 32],
    ) -> Result<(Self, Vec<u8>), CryptoError> {
        if session == 0 {
            return Err(CryptoError::ZeroSession);
        }
        let header = Header::handshake(KIND_INITIATION, session, link).to_bytes();
        let mut state = builder(seed, &prologue(&header))?
            .local_private_key(local.as_bytes())
            .and_then(|b| b.remote_public_key(server.as_bytes()))
            .and_then(Builder::build_initiator)
            .map_err(|_| CryptoError::Internal)?;

        let mut payload = [0; INITIATION_PAYLOAD_LEN];
        payload[..12].copy_from_slice(&Timestamp::from(now_unix).to_bytes());
        payload[12..].copy_from_slice(&epoch.to_be_bytes());
        let mut datagram = vec![0; INITIATION_LEN];
        datagram[..HEADER_LEN].copy_from_slice(&header);
        let written = state
            .write_message(&payload, &mut datagram[HEADER_LEN..])
            .map_err(|_| CryptoError::Internal)?;
        if HEADER_LEN + written != INITIATION_LEN {
            return Err(CryptoError::Internal);
        }

        let initiator = Self {
            state,
            response_header: Header::handshake(KIND_RESPONSE, session, link).to_bytes(),
            session,
            epoch,
            now_unix,
            finished: false,
        };
        Ok((initiator, datagram))
    }

    /// Completes the handshake with the server's response and returns the transport for
    /// epoch `epoch`, to be installed in the client's key ring at once.
    ///
    /// A datagram that is not the matching, authentic response is refused and leaves the
    /// attempt intact, so a forged response cannot abort a handshake.
    pub fn handle_response(&mut self, datagram: &[u8]) -> Result<Transport, CryptoError> {
        if self.finished {
            return Err(CryptoError::HandshakeFinished);
        }
        check_handshake_header(datagram, KIND_RESPONSE)?;
        if datagram.get(..HEADER_LEN) != Some(&self.response_header[..]) {
            return Err(CryptoError::ResponseMismatch);
        }
        if datagram.len() != RESPONSE_LEN {
            return Err(CryptoError::MalformedHandshake);
        }
        let mut payload = [0; TAG_LEN];
        let read = self
            .state
            .read_message(&datagram[HEADER_LEN..], &mut payload)
            .map_err(handshake_read_error)?;
        if read != 0 {
            return Err(CryptoError::MalformedHandshake);
        }
        self.finished = true;
        let (mut to_responder, mut to_initiator) = self.state.dangerously_get_raw_split();
        let transport = Transport::new(
            &to_responder,
            &to_initiator,
            self.session,
            self.epoch,
            true,
            self.now_unix,
        );
        to_responder.zeroize();
        to_initiator.zeroize();
        Ok(transport)
    }

    /// The session id this handshake is for.
    pub fn session(&self) -> u32 {
        self.session
    }

    /// The key epoch this handshake establishes.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

impl fmt::Debug for Initiator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Initiator")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

/// The server side: its static key, the client keys it accepts, and the newest
/// initiation timestamp accepted from each of them.
pub struct Responder {
    local: StaticSecret,
    public: PublicKey,
    allowed: BTreeSet<PublicKey>,
    /// Greatest accepted timestamp per client key (only allowed keys ever get here).
    latest: BTreeMap<PublicKey, Timestamp>,
}

/// A verified initiation: who, which session, the new transport, and the response to send
/// back on the link the initiation came in on.
///
/// The daemon must check that `peer` owns `session` (session ids are chosen by clients, so
/// one client could name another's) before installing `transport`.
#[derive(Debug)]
pub struct Accepted {
    /// The client's static key, one of the allowed keys.
    pub peer: PublicKey,
    /// The session id from the initiation header.
    pub session: u32,
    /// The responder's transport for the epoch the client proposed.
    pub transport: Transport,
    /// The response datagram ([`RESPONSE_LEN`] bytes).
    pub response: Vec<u8>,
}

impl Responder {
    /// A responder with static key `local` that accepts the clients in `allowed`.
    pub fn new(local: StaticSecret, allowed: Vec<PublicKey>) -> Self {
        Self {
            public: local.public_key(),
            local,
            allowed: allowed.into_iter().collect(),
            latest: BTreeMap::new(),
        }
    }

    /// Accepts one more client key.
    pub fn allow(&mut self, key: PublicKey) {
        self.allowed.insert(key);
    }

    /// The server's public key, which clients must be configured with.
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// Verifies an initiation; on success returns the client's key, the session id, the
    /// transport and the response datagram to send back on the same link.
    ///
    /// `seed` is 32 random bytes for the responder's ephemeral key. The client's
    /// timestamp is recorded only when everything else succeeded, so a refused
    /// initiation never blocks a later genuine one.
    pub fn handle_initiation(
        &mut self,
        datagram: &[u8],
        seed: [u8; 32],
    ) -> Result<Accepted, CryptoError> {
        // The flags are exactly 0x81 once the kind matched.
        let header = check_handshake_header(datagram, KIND_INITIATION)?;
        if header.pn != 0 || header.session == 0 || datagram.len() != INITIATION_LEN {
            return Err(CryptoError::MalformedHandshake);
        }
        let mut state = builder(seed, &prologue(&header.to_bytes()))?
            .local_private_key(self.local.as_bytes())
            .and_then(Builder::build_responder)
            .map_err(|_| CryptoError::Internal)?;

        let mut payload = [0; INITIATION_PAYLOAD_LEN + TAG_LEN];
        let read = state
            .read_message(&datagram[HEADER_LEN..], &mut payload)
            .map_err(handshake_read_error)?;
        if read != INITIATION_PAYLOAD_LEN {
            return Err(CryptoError::MalformedHandshake);
        }
        let peer = state
            .get_remote_static()
            .and_then(|key| <[u8; KEY_LEN]>::try_from(key).ok())
            .map(PublicKey::from_bytes)
            .ok_or(CryptoError::Internal)?;
        if !self.allowed.contains(&peer) {
            return Err(CryptoError::UnknownClientKey(peer));
        }
        let timestamp = Timestamp::from_bytes(&payload[..12])?;
        if self
            .latest
            .get(&peer)
            .is_some_and(|last| timestamp <= *last)
        {
            return Err(CryptoError::ReplayedInitiation);
        }
        let mut epoch = [0; 8];
        epoch.copy_from_slice(&payload[12..INITIATION_PAYLOAD_LEN]);
        let epoch = u64::from_be_bytes(epoch);

        let mut response = vec![0; RESPONSE_LEN];
        response[..HEADER_LEN].copy_from_slice(
            &Header::handshake(KIND_RESPONSE, header.session, header.link).to_bytes(),
        );
        let written = state
            .write_message(&[], &mut response[HEADER_LEN..])
            .map_err(|_| CryptoError::Internal)?;
        if HEADER_LEN + written != RESPONSE_LEN {
            return Err(CryptoError::Internal);
        }
        let (mut to_responder, mut to_initiator) = state.dangerously_get_raw_split();
        let transport = Transport::new(
            &to_initiator,
            &to_responder,
            header.session,
            epoch,
            false,
            timestamp.into(),
        );
        to_responder.zeroize();
        to_initiator.zeroize();

        self.latest.insert(peer, timestamp);
        Ok(Accepted {
            peer,
            session: header.session,
            transport,
            response,
        })
    }
}

impl fmt::Debug for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Responder")
            .field("public_key", &self.public_key())
            .field("allowed", &self.allowed.len())
            .finish_non_exhaustive()
    }
}

/// Whether `datagram` is a v1 handshake datagram (version 1, flags bit 0x80): what the
/// daemon checks to route a datagram to the handshake instead of the key ring.
pub fn is_handshake(datagram: &[u8]) -> bool {
    Header::parse(datagram).is_ok_and(Header::is_handshake)
}

/// The session id of a v1 datagram (handshake or data), read from its clear header.
/// Unauthenticated: use it only to find the key that will authenticate the datagram.
pub fn session_of(datagram: &[u8]) -> Option<u32> {
    Header::parse(datagram).ok().map(|h| h.session)
}

/// Checks version, the handshake flag and the kind; returns the header.
fn check_handshake_header(datagram: &[u8], kind: u8) -> Result<Header, CryptoError> {
    let header = Header::parse(datagram)?;
    if !header.is_handshake() {
        return Err(CryptoError::NotHandshake);
    }
    if header.flags & !crate::header::FLAG_HANDSHAKE != kind {
        return Err(CryptoError::WrongHandshakeKind);
    }
    Ok(header)
}

/// The Noise prologue: a fixed label, then the initiation header.
fn prologue(header: &[u8; HEADER_LEN]) -> [u8; PROLOGUE_LABEL.len() + HEADER_LEN] {
    let mut p = [0; PROLOGUE_LABEL.len() + HEADER_LEN];
    p[..PROLOGUE_LABEL.len()].copy_from_slice(PROLOGUE_LABEL);
    p[PROLOGUE_LABEL.len()..].copy_from_slice(header);
    p
}

/// A snow builder for our protocol, with `prologue`, whose only randomness is `seed`.
fn builder<'a>(seed: [u8; 32], prologue: &'a [u8]) -> Result<Builder<'a>, CryptoError> {
    let params: NoiseParams = NOISE_PARAMS.parse().map_err(|_| CryptoError::Internal)?;
    Builder::with_resolver(params, Box::new(SeededResolver { seed }))
        .prologue(prologue)
        .map_err(|_| CryptoError::Internal)
}

/// A decrypt failure is an authentication failure; any other refusal from snow on a
/// datagram of the right length is malformed input.
fn handshake_read_error(e: snow::Error) -> CryptoError {
    match e {
        snow::Error::Decrypt => CryptoError::AuthenticationFailed,
        _ => CryptoError::MalformedHandshake,
    }
}

/// snow's default primitives, with randomness from a ChaCha20 RNG seeded by the caller.
///
/// snow is built without its `use-getrandom` feature, so this is the only source of
/// randomness it has: a handshake is a pure function of keys, timestamp and seed.
struct SeededResolver {
    seed: [u8; 32],
}

impl CryptoResolver for SeededResolver {
    fn resolve_rng(&self) -> Option<Box<dyn Random>> {
        Some(Box::new(SeededRandom(ChaCha20Rng::from_seed(self.seed))))
    }

    fn resolve_dh(&self, choice: &DHChoice) -> Option<Box<dyn Dh>> {
        DefaultResolver.resolve_dh(choice)
    }

    fn resolve_hash(&self, choice: &HashChoice) -> Option<Box<dyn Hash>> {
        DefaultResolver.resolve_hash(choice)
    }

    fn resolve_cipher(&self, choice: &CipherChoice) -> Option<Box<dyn Cipher>> {
        DefaultResolver.resolve_cipher(choice)
    }
}

impl Drop for SeededResolver {
    fn drop(&mut self) {
        self.seed.zeroize();
    }
}

struct SeededRandom(ChaCha20Rng);

impl Random for SeededRandom {
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), snow::Error> {
        self.0.fill_bytes(dest);
        Ok(())
    }
}

/// Initiation timestamp, TAI64N-like: seconds and nanoseconds since the Unix epoch
/// (no TAI offset), compared as a pair.
#[derive(Clone, Copy, Debug, Eq, Ord, PartialEq, PartialOrd)]
struct Timestamp {
    secs: u64,
    nanos: u32,
}

impl Timestamp {
    fn to_bytes(self) -> [u8; 12] {
        let mut b = [0; 12];
        b[..8].copy_from_slice(&self.secs.to_be_bytes());
        b[8..].copy_from_slice(&self.nanos.to_be_bytes());
        b
    }

    /// Parses 12 bytes; nanoseconds of a second or more are malformed.
    fn from_bytes(b: &[u8]) -> Result<Self, CryptoError> {
        let (secs, nanos) = b
            .split_first_chunk::<8>()
            .and_then(|(s, rest)| Some((*s, *rest.first_chunk::<4>()?)))
            .ok_or(CryptoError::MalformedHandshake)?;
        let t = Self {
            secs: u64::from_be_bytes(secs),
            nanos: u32::from_be_bytes(nanos),
        };
        if t.nanos >= 1_000_000_000 {
            return Err(CryptoError::MalformedHandshake);
        }
        Ok(t)
    }
}

impl From<Duration> for Timestamp {
    fn from(d: Duration) -> Self {
        Self {
            secs: d.as_secs(),
            nanos: d.subsec_nanos(),
        }
    }
}

impl From<Timestamp> for Duration {
    fn from(t: Timestamp) -> Self {
        Self::new(t.secs, t.nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagram_lengths_are_fixed() {
        assert_eq!(INITIATION_LEN, 128);
        assert_eq!(RESPONSE_LEN, 60);
    }

    #[test]
    fn timestamp_round_trips_and_orders() {
        let t = Timestamp::from(Duration::new(1_700_000_000, 999_999_999));
        assert_eq!(Timestamp::from_bytes(&t.to_bytes()), Ok(t));
        assert!(Timestamp::from(Duration::new(5, 1)) > Timestamp::from(Duration::new(4, 999)));
        let mut bad = t.to_bytes();
        bad[8..].copy_from_slice(&1_000_000_000u32.to_be_bytes());
        assert_eq!(
            Timestamp::from_bytes(&bad),
            Err(CryptoError::MalformedHandshake)
        );
    }
}
