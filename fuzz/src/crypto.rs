//! The `crypto_open` target: untrusted bytes into `Transport::open`, `KeyRing::open`,
//! `Responder::handle_initiation` and `Initiator::handle_response`, with keys from fixed
//! handshakes done once with fixed seeds.
//!
//! The first input byte picks a mode (% 4):
//!
//! 0. raw: the rest of the input as it is;
//! 1. framed: the rest behind a plausible v1 header of the fixture's session (the first
//!    byte of the rest is the flags byte); handshake flags get the rest padded or cut to
//!    the exact initiation or response length, so the input reaches the AEAD and Noise;
//! 2. tamper ([`Tamper`], via `arbitrary`): a datagram sealed by the client, edited, then
//!    opened by the server: it must open, to exactly the plaintext, if and only if the
//!    edits left it unchanged;
//! 3. handshake tamper ([`HandshakeTamper`], via `arbitrary`): a fresh handshake whose
//!    initiation and response are edited on the way: each must be accepted if and only
//!    if unchanged, a refused one must leave the handshake able to complete with the
//!    genuine datagram, and the resulting keys must work in both directions.
//!
//! In modes 0 and 1 every call must fail: none of the fixture's handshakes or keys is
//! ever shown to the fuzzer, so success would mean a forgery (or a replay accepted).

use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use latebind_crypto::{
    HEADER_LEN, INITIATION_LEN, Initiator, KeyRing, PublicKey, RESPONSE_LEN, Responder,
    StaticSecret, Transport, is_handshake, session_of,
};

/// Session id of the fixture's handshakes.
pub const SESSION: u32 = 0x5e55_1011;
/// Link the fixture's handshakes run on.
pub const LINK: u16 = 3;
/// Wall-clock time of the fixture's first handshake (2023-11-14).
pub const T0: Duration = Duration::from_secs(1_700_000_000);

/// The client's static secret.
pub fn client_secret() -> StaticSecret {
    StaticSecret::from_random_bytes([1; 32])
}

/// The server's static secret.
pub fn server_secret() -> StaticSecret {
    StaticSecret::from_random_bytes([2; 32])
}

/// The server's public key.
pub fn server_public() -> PublicKey {
    server_secret().public_key()
}

/// A v1 data datagram of `session` as the engine emits it (flags 0).
pub fn plain(session: u32, link: u16, pn: u32, frames: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(HEADER_LEN + frames.len() + 16);
    d.extend_from_slice(&[1, 0]);
    d.extend_from_slice(&session.to_be_bytes());
    d.extend_from_slice(&link.to_be_bytes());
    d.extend_from_slice(&pn.to_be_bytes());
    d.extend_from_slice(frames);
    d
}

/// One full handshake at `now` with ephemeral seed `seed`; returns the client's and the
/// server's transport, the initiation and the response.
pub fn handshake(
    responder: &mut Responder,
    client: &StaticSecret,
    epoch: u64,
    now: Duration,
    seed: u8,
) -> (Transport, Transport, Vec<u8>, Vec<u8>) {
    let (mut initiator, initiation) = Initiator::new(
        client,
        &responder.public_key(),
        SESSION,
        epoch,
        LINK,
        now,
        [seed; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [seed ^ 0x5a; 32])
        .expect("initiation accepted");
    let transport = initiator
        .handle_response(&accepted.response)
        .expect("response accepted");
    (transport, accepted.transport, initiation, accepted.response)
}

/// Keys and handshake state shared by all runs (a handshake costs far more than a run).
struct Fixture {
    /// Transports of the first handshake (epoch 0, at `T0`).
    client: Transport,
    server: Transport,
    /// Key rings holding the second handshake's keys (epoch 1, at `T0 + 1 s`).
    client_ring: KeyRing,
    server_ring: KeyRing,
    /// Accepted both handshakes; the newest timestamp it holds is `T0 + 1 s`.
    responder: Responder,
    /// An attempt whose initiation was never answered, so no valid response exists.
    initiator: Initiator,
}

static FIXTURE: LazyLock<Mutex<Fixture>> = LazyLock::new(|| {
    let client = client_secret();
    let mut responder = Responder::new(server_secret(), vec![client.public_key()]);
    let (c0, s0, _, _) = handshake(&mut responder, &client, 0, T0, 1);
    let (c1, s1, _, _) = handshake(&mut responder, &client, 1, T0 + Duration::from_secs(1), 2);
    let mut client_ring = KeyRing::new();
    let mut server_ring = KeyRing::new();
    client_ring.install(c1).expect("client ring install");
    server_ring.install(s1).expect("server ring install");
    let (initiator, _) = Initiator::new(
        &client,
        &responder.public_key(),
        SESSION,
        2,
        LINK,
        T0 + Duration::from_secs(2),
        [3; 32],
    )
    .expect("initiation");
    Mutex::new(Fixture {
        client: c0,
        server: s0,
        client_ring,
        server_ring,
        responder,
        initiator,
    })
});

/// An edit of a datagram on the way.
#[derive(Arbitrary, Debug)]
pub enum Edit {
    /// XOR one byte (position modulo the length).
    Xor {
        /// Position.
        pos: u16,
        /// Mask.
        mask: u8,
    },
    /// Cut the datagram to this length (modulo its length plus one).
    Truncate(u16),
    /// Append bytes.
    Append(Vec<u8>),
    /// Swap two bytes.
    Swap(u16, u16),
}

/// Mode 2: seal, edit, open.
#[derive(Arbitrary, Debug)]
pub struct Tamper {
    /// Link in the header.
    pub link: u16,
    /// Packet number in the header.
    pub pn: u32,
    /// Flags of the plaintext (the handshake bit is cleared).
    pub flags: u8,
    /// Frames (any bytes, at most 2048 used).
    pub body: Vec<u8>,
    /// Edits in order.
    pub edits: Vec<Edit>,
    /// Use the key rings (epoch 1) instead of the bare transports (epoch 0).
    pub ring: bool,
    /// Server to client instead of client to server.
    pub downlink: bool,
}

/// Mode 3: a fresh handshake with edited datagrams.
#[derive(Arbitrary, Debug)]
pub struct HandshakeTamper {
    /// Ephemeral seeds.
    pub seed: u8,
    /// Proposed key epoch.
    pub epoch: u8,
    /// Link of the handshake.
    pub link: u16,
    /// Edits of the initiation.
    pub initiation: Vec<Edit>,
    /// Edits of the response.
    pub response: Vec<Edit>,
}

fn apply(d: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits.iter().take(16) {
        match edit {
            Edit::Xor { pos, mask } => {
                if !d.is_empty() {
                    let i = usize::from(*pos) % d.len();
                    d[i] ^= mask;
                }
            }
            Edit::Truncate(n) => d.truncate(usize::from(*n) % (d.len() + 1)),
            Edit::Append(b) => d.extend(b.iter().take(64)),
            Edit::Swap(a, b) => {
                if !d.is_empty() {
                    let n = d.len();
                    d.swap(usize::from(*a) % n, usize::from(*b) % n);
                }
            }
        }
    }
}

/// Runs the target on one input.
pub fn run(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode % 4 {
        0 => refuse_all(rest),
        1 => refuse_all(&framed(rest)),
        2 => {
            if let Ok(t) = Tamper::arbitrary_take_rest(Unstructured::new(rest)) {
                tamper(&t);
            }
        }
        _ => {
            if let Ok(t) = HandshakeTamper::arbitrary_take_rest(Unstructured::new(rest)) {
                handshake_tamper(&t);
            }
        }
    }
}

/// `rest` behind a header of the fixture's session; the first byte is the flags byte.
fn framed(rest: &[u8]) -> Vec<u8> {
    let (flags, tail) = rest.split_first().map_or((0, rest), |(f, t)| (*f, t));
    let mut d = plain(SESSION, LINK, 0, tail);
    d[1] = flags;
    match flags {
        0x81 => d.resize(INITIATION_LEN, 0),
        0x82 => d.resize(RESPONSE_LEN, 0),
        _ => {}
    }
    d
}

/// Every entry point must refuse `input` and leave no byte in the output buffer.
fn refuse_all(input: &[u8]) {
    let mut f = FIXTURE.lock().unwrap_or_else(PoisonError::into_inner);
    let f = &mut *f;
    let _ = is_handshake(input);
    let _ = session_of(input);
    for t in [&f.client, &f.server] {
        let mut out = vec![0xee; 4];
        let res = t.open(input, &mut out);
        assert!(
            res.is_err(),
            "Transport::open accepted a forgery: {input:02x?}"
        );
        assert!(out.is_empty(), "Transport::open left unauthenticated bytes");
    }
    for ring in [&mut f.client_ring, &mut f.server_ring] {
        let mut out = vec![0xee; 4];
        let res = ring.open(input, &mut out);
        assert!(
            res.is_err(),
            "KeyRing::open accepted a forgery: {input:02x?}"
        );
        assert!(out.is_empty(), "KeyRing::open left unauthenticated bytes");
    }
    let res = f.responder.handle_initiation(input, [7; 32]);
    assert!(
        res.is_err(),
        "handle_initiation accepted a forgery: {input:02x?}"
    );
    let res = f.initiator.handle_response(input);
    assert!(
        res.is_err(),
        "handle_response accepted a forgery: {input:02x?}"
    );
}

fn tamper(t: &Tamper) {
    let mut f = FIXTURE.lock().unwrap_or_else(PoisonError::into_inner);
    let f = &mut *f;
    let body = &t.body[..t.body.len().min(2048)];
    let mut plaintext = plain(SESSION, t.link, t.pn, body);
    plaintext[1] = t.flags & !0x80;
    let mut sealed = plaintext.clone();
    let phase = u8::from(t.ring); // epoch 1 in the rings, 0 in the transports
    let res = match (t.ring, t.downlink) {
        (false, false) => f.client.seal(&mut sealed),
        (false, true) => f.server.seal(&mut sealed),
        (true, false) => f.client_ring.seal(&mut sealed),
        (true, true) => f.server_ring.seal(&mut sealed),
    };
    res.expect("sealing a data datagram of the session");
    assert_eq!(sealed.len(), plaintext.len() + 16);
    assert_eq!(sealed[1], (plaintext[1] & !1) | phase, "key-phase bit");
    assert_eq!(
        sealed[2..HEADER_LEN],
        plaintext[2..HEADER_LEN],
        "header changed"
    );

    let mut wire = sealed.clone();
    apply(&mut wire, &t.edits);
    let mut out = vec![0xee; 4];
    let res = match (t.ring, t.downlink) {
        (false, false) => f.server.open(&wire, &mut out),
        (false, true) => f.client.open(&wire, &mut out),
        (true, false) => f.server_ring.open(&wire, &mut out),
        (true, true) => f.client_ring.open(&wire, &mut out),
    };
    if wire == sealed {
        res.expect("an unmodified sealed datagram opens");
        let mut expected = plaintext;
        expected[1] = sealed[1];
        assert_eq!(out, expected, "opened plaintext differs");
    } else {
        assert!(res.is_err(), "a modified datagram opened: {t:?}");
        assert!(out.is_empty());
    }
}

fn handshake_tamper(t: &HandshakeTamper) {
    let client = client_secret();
    let mut responder = Responder::new(server_secret(), vec![client.public_key()]);
    let epoch = u64::from(t.epoch);
    let (mut initiator, initiation) = Initiator::new(
        &client,
        &server_public(),
        SESSION,
        epoch,
        t.link,
        T0,
        [t.seed; 32],
    )
    .expect("initiation");
    assert_eq!(initiation.len(), INITIATION_LEN);

    let mut edited = initiation.clone();
    apply(&mut edited, &t.initiation);
    let responder_seed = [t.seed ^ 0xa5; 32];
    let accepted = match responder.handle_initiation(&edited, responder_seed) {
        Ok(a) => {
            assert_eq!(
                edited, initiation,
                "a modified initiation was accepted: {t:?}"
            );
            a
        }
        Err(_) => {
            assert_ne!(edited, initiation, "the genuine initiation was refused");
            // A refused initiation must not block the genuine one.
            responder
                .handle_initiation(&initiation, responder_seed)
                .expect("genuine initiation after a refused one")
        }
    };
    assert_eq!(accepted.session, SESSION);
    assert_eq!(accepted.peer, client.public_key());
    assert_eq!(accepted.response.len(), RESPONSE_LEN);

    let mut edited = accepted.response.clone();
    apply(&mut edited, &t.response);
    let transport = match initiator.handle_response(&edited) {
        Ok(tr) => {
            assert_eq!(
                edited, accepted.response,
                "a modified response was accepted"
            );
            tr
        }
        Err(_) => {
            assert_ne!(
                edited, accepted.response,
                "the genuine response was refused"
            );
            // A refused response must leave the attempt intact.
            initiator
                .handle_response(&accepted.response)
                .expect("genuine response after a refused one")
        }
    };
    assert!(initiator.handle_response(&accepted.response).is_err());

    // The keys agree in both directions.
    let mut client_t = transport;
    let mut server_t = accepted.transport;
    assert_eq!(client_t.epoch(), epoch);
    assert_eq!(server_t.epoch(), epoch);
    round_trip(&mut client_t, &server_t, t.link);
    round_trip(&mut server_t, &client_t, t.link);
}

/// Seals a datagram with `from` and checks that `to` opens it to the same frames.
fn round_trip(from: &mut Transport, to: &Transport, link: u16) {
    let pt = plain(SESSION, link, 7, b"\x01inner");
    let mut d = pt.clone();
    from.seal(&mut d).expect("seal");
    let mut out = Vec::new();
    to.open(&d, &mut out)
        .expect("keys from one handshake interoperate");
    assert_eq!(out[2..], pt[2..]);
}
