//! Behaviour tests across handshake, transport and key ring: two endpoints passing byte
//! vectors, with seeded keys, seeds and timestamps.

use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use proptest::prelude::*;

use crate::{
    CryptoError, HEADER_LEN, INITIATION_LEN, Initiator, KeyRing, PublicKey, REJECT_AFTER_PACKETS,
    REKEY_AFTER_PACKETS, REKEY_AFTER_TIME, RESPONSE_LEN, Responder, StaticSecret, TAG_LEN,
    Transport, is_handshake, session_of,
};

const SESSION: u32 = 0x5e55_1011;
const LINK: u16 = 3;
/// Some wall-clock time, 2023-11-14.
const T0: Duration = Duration::from_secs(1_700_000_000);

fn client_secret() -> StaticSecret {
    StaticSecret::from_random_bytes([1; 32])
}

fn server_secret() -> StaticSecret {
    StaticSecret::from_random_bytes([2; 32])
}

fn responder() -> Responder {
    Responder::new(server_secret(), vec![client_secret().public_key()])
}

/// A plaintext data datagram as the engine emits it: header with flags 0, then frames
/// (here a PING and some padding-like bytes).
fn plain(link: u16, pn: u32, frames: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(HEADER_LEN + frames.len() + TAG_LEN);
    d.push(1);
    d.push(0);
    d.extend_from_slice(&SESSION.to_be_bytes());
    d.extend_from_slice(&link.to_be_bytes());
    d.extend_from_slice(&pn.to_be_bytes());
    d.extend_from_slice(frames);
    d
}

const FRAMES: &[u8] = b"\x01\x00frames of an inner packet";

/// Runs one handshake for `epoch` at time `now` and returns both transports plus the
/// two datagrams.
fn handshake(
    responder: &mut Responder,
    epoch: u64,
    now: Duration,
    seed: u8,
) -> (Transport, Transport, Vec<u8>, Vec<u8>) {
    let server = responder.public_key();
    let (mut initiator, initiation) = Initiator::new(
        &client_secret(),
        &server,
        SESSION,
        epoch,
        LINK,
        now,
        [seed; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [seed.wrapping_add(100); 32])
        .expect("initiation accepted");
    let client = initiator
        .handle_response(&accepted.response)
        .expect("response accepted");
    (client, accepted.transport, initiation, accepted.response)
}

/// A client and a server ring after the first handshake.
fn established() -> (KeyRing, KeyRing, Responder) {
    let mut responder = responder();
    let (client, server, _, _) = handshake(&mut responder, 0, T0, 1);
    let mut client_ring = KeyRing::new();
    let mut server_ring = KeyRing::new();
    client_ring.install(client).expect("client install");
    server_ring.install(server).expect("server install");
    (client_ring, server_ring, responder)
}

fn sealed(ring: &mut KeyRing, pn: u32) -> Vec<u8> {
    let mut d = plain(LINK, pn, FRAMES);
    ring.seal(&mut d).expect("seal");
    d
}

fn opens(ring: &mut KeyRing, datagram: &[u8]) -> Result<Vec<u8>, CryptoError> {
    let mut out = Vec::new();
    ring.open(datagram, &mut out).map(|()| out)
}

/// The plaintext with the key-phase bit the sealing epoch set.
fn with_phase(mut d: Vec<u8>, epoch: u64) -> Vec<u8> {
    d[1] |= u8::from(epoch % 2 == 1);
    d
}

#[test]
fn handshake_completes_and_both_directions_open() {
    let mut responder = responder();
    let server_key = responder.public_key();
    let (mut initiator, initiation) =
        Initiator::new(&client_secret(), &server_key, SESSION, 0, LINK, T0, [1; 32])
            .expect("initiation");
    assert_eq!(initiation.len(), INITIATION_LEN);
    assert!(is_handshake(&initiation));
    assert_eq!(session_of(&initiation), Some(SESSION));
    assert_eq!(
        &initiation[..2],
        &[1, 0x81],
        "version 1, handshake initiation"
    );

    let accepted = responder
        .handle_initiation(&initiation, [2; 32])
        .expect("accepted");
    assert_eq!(accepted.peer, client_secret().public_key());
    assert_eq!(accepted.session, SESSION);
    assert_eq!(accepted.response.len(), RESPONSE_LEN);
    assert_eq!(
        &accepted.response[..HEADER_LEN],
        &[1, 0x82, 0x5e, 0x55, 0x10, 0x11, 0, 3, 0, 0, 0, 0],
        "response header: kind 2, same session and link, packet number 0"
    );
    let mut client = initiator
        .handle_response(&accepted.response)
        .expect("response");
    let mut server = accepted.transport;
    assert_eq!((client.epoch(), server.epoch()), (0, 0));

    let mut up = plain(LINK, 0, FRAMES);
    client.seal(&mut up).expect("seal up");
    assert_eq!(up.len(), HEADER_LEN + FRAMES.len() + TAG_LEN);
    assert_eq!(
        &up[..HEADER_LEN],
        &plain(LINK, 0, &[])[..],
        "header in clear"
    );
    assert!(!is_handshake(&up));
    assert_ne!(&up[HEADER_LEN..HEADER_LEN + FRAMES.len()], FRAMES);
    let mut out = Vec::new();
    server.open(&up, &mut out).expect("open up");
    assert_eq!(out, plain(LINK, 0, FRAMES));

    let mut down = plain(LINK, 0, FRAMES);
    server.seal(&mut down).expect("seal down");
    assert_ne!(down, up, "each direction has its own key");
    client.open(&down, &mut out).expect("open down");
    assert_eq!(out, plain(LINK, 0, FRAMES));

    // A key only opens the other direction's datagrams.
    assert_eq!(
        client.open(&up, &mut out),
        Err(CryptoError::AuthenticationFailed)
    );
    assert!(out.is_empty(), "nothing unauthenticated is handed out");
}

#[test]
fn wrong_server_key_fails_handshake() {
    let mut responder = responder();
    let impostor_key = StaticSecret::from_random_bytes([3; 32]).public_key();
    let (_, initiation) = Initiator::new(
        &client_secret(),
        &impostor_key,
        SESSION,
        0,
        LINK,
        T0,
        [1; 32],
    )
    .expect("initiation");
    assert_eq!(
        responder.handle_initiation(&initiation, [2; 32]).err(),
        Some(CryptoError::AuthenticationFailed)
    );

    // And a server with another key cannot answer an initiation meant for ours.
    let (_, initiation) = Initiator::new(
        &client_secret(),
        &responder.public_key(),
        SESSION,
        0,
        LINK,
        T0,
        [1; 32],
    )
    .expect("initiation");
    let mut other = Responder::new(
        StaticSecret::from_random_bytes([3; 32]),
        vec![client_secret().public_key()],
    );
    assert_eq!(
        other.handle_initiation(&initiation, [2; 32]).err(),
        Some(CryptoError::AuthenticationFailed)
    );
}

#[test]
fn unknown_client_key_rejected() {
    let mut responder = Responder::new(server_secret(), vec![]);
    let (_, initiation) = Initiator::new(
        &client_secret(),
        &responder.public_key(),
        SESSION,
        0,
        LINK,
        T0,
        [1; 32],
    )
    .expect("initiation");
    assert_eq!(
        responder.handle_initiation(&initiation, [2; 32]).err(),
        Some(CryptoError::UnknownClientKey(client_secret().public_key()))
    );
    responder.allow(client_secret().public_key());
    assert!(responder.handle_initiation(&initiation, [2; 32]).is_ok());
}

#[test]
fn replayed_initiation_rejected() {
    let mut responder = responder();
    let server = responder.public_key();
    let initiation_at = |now: Duration, seed: u8| {
        Initiator::new(&client_secret(), &server, SESSION, 0, LINK, now, [seed; 32])
            .expect("initiation")
            .1
    };
    let first = initiation_at(T0, 1);
    assert!(responder.handle_initiation(&first, [9; 32]).is_ok());

    // The same datagram again.
    assert_eq!(
        responder.handle_initiation(&first, [9; 32]).err(),
        Some(CryptoError::ReplayedInitiation)
    );
    // A fresh initiation with the same timestamp, or an older one.
    for (now, seed) in [(T0, 2), (T0 - Duration::from_nanos(1), 3)] {
        assert_eq!(
            responder
                .handle_initiation(&initiation_at(now, seed), [9; 32])
                .err(),
            Some(CryptoError::ReplayedInitiation),
            "{now:?}"
        );
    }
    // One nanosecond later is new.
    let later = initiation_at(T0 + Duration::from_nanos(1), 4);
    assert!(responder.handle_initiation(&later, [9; 32]).is_ok());
    assert_eq!(
        responder.handle_initiation(&first, [9; 32]).err(),
        Some(CryptoError::ReplayedInitiation)
    );
}

#[test]
fn refused_initiation_does_not_advance_the_timestamp() {
    let mut responder = responder();
    let server = responder.public_key();
    let (_, late) = Initiator::new(
        &client_secret(),
        &server,
        SESSION,
        0,
        LINK,
        T0 + Duration::from_secs(10),
        [1; 32],
    )
    .expect("initiation");
    let mut forged = late.clone();
    forged[HEADER_LEN + 40] ^= 1;
    assert_eq!(
        responder.handle_initiation(&forged, [2; 32]).err(),
        Some(CryptoError::AuthenticationFailed)
    );
    let (_, early) = Initiator::new(&client_secret(), &server, SESSION, 0, LINK, T0, [1; 32])
        .expect("initiation");
    assert!(responder.handle_initiation(&early, [2; 32]).is_ok());
}

#[test]
fn tampered_header_fails_authentication() {
    let (mut client, mut server, _) = established();
    let d = sealed(&mut client, 7);

    // Link and packet number are the nonce and the associated data; the other flag bits
    // are associated data.
    let mut cases: Vec<(usize, u8)> = (6..HEADER_LEN).map(|i| (i, 0x01)).collect();
    cases.extend([0x02, 0x04, 0x08, 0x10, 0x20, 0x40].map(|bit| (1, bit)));
    for (i, bit) in cases {
        let mut t = d.clone();
        t[i] ^= bit;
        assert_eq!(
            opens(&mut server, &t),
            Err(CryptoError::AuthenticationFailed),
            "byte {i} bit {bit:#x}"
        );
    }
    // The rest of the header is checked before the AEAD, with its own reasons.
    let cases = [
        (0, 0x03, CryptoError::UnsupportedVersion),
        (1, 0x80, CryptoError::UnexpectedHandshake),
        (1, 0x01, CryptoError::NoKeyForPhase),
        (2, 0x01, CryptoError::SessionMismatch),
        (5, 0x01, CryptoError::SessionMismatch),
    ];
    for (i, bit, reason) in cases {
        let mut t = d.clone();
        t[i] ^= bit;
        assert_eq!(opens(&mut server, &t), Err(reason), "byte {i} bit {bit:#x}");
    }
    assert_eq!(opens(&mut server, &d), Ok(plain(LINK, 7, FRAMES)));
}

#[test]
fn tampered_handshake_headers_rejected() {
    let mut responder = responder();
    let server = responder.public_key();
    let (mut initiator, initiation) =
        Initiator::new(&client_secret(), &server, SESSION, 0, LINK, T0, [1; 32])
            .expect("initiation");
    // The initiation header is the Noise prologue: changing its link or session breaks
    // the handshake's authentication.
    for i in [2, 5, 6, 7] {
        let mut t = initiation.clone();
        t[i] ^= 0x01;
        assert_eq!(
            responder.handle_initiation(&t, [2; 32]).err(),
            Some(CryptoError::AuthenticationFailed),
            "byte {i}"
        );
    }
    // Flags and packet number must be exactly the initiation's.
    for (i, bit) in [(1, 0x40), (1, 0x04), (8, 0x01), (11, 0x80)] {
        let mut t = initiation.clone();
        t[i] ^= bit;
        assert!(
            responder.handle_initiation(&t, [2; 32]).is_err(),
            "byte {i} bit {bit:#x}"
        );
    }
    let accepted = responder
        .handle_initiation(&initiation, [2; 32])
        .expect("accepted");
    // The response header is fully determined by the initiation's.
    for i in 1..HEADER_LEN {
        let mut t = accepted.response.clone();
        t[i] ^= 0x01;
        assert!(initiator.handle_response(&t).is_err(), "byte {i}");
    }
    assert!(initiator.handle_response(&accepted.response).is_ok());
}

#[test]
fn tampered_ciphertext_fails() {
    let (mut client, mut server, _) = established();
    let d = sealed(&mut client, 1);
    for i in HEADER_LEN..d.len() {
        let mut t = d.clone();
        t[i] ^= 0x20;
        let mut out = vec![0xAA; 4];
        assert_eq!(
            server.open(&t, &mut out),
            Err(CryptoError::AuthenticationFailed),
            "byte {i}"
        );
        assert!(out.is_empty(), "byte {i}: out cleared");
    }
    // Appended or removed bytes shift the tag.
    let mut longer = d.clone();
    longer.push(0);
    assert_eq!(
        opens(&mut server, &longer),
        Err(CryptoError::AuthenticationFailed)
    );
}

#[test]
fn truncated_datagrams_rejected_not_panicking() {
    let mut responder = responder();
    let (client, server, initiation, response) = handshake(&mut responder, 0, T0, 1);
    let mut client_ring = KeyRing::new();
    client_ring.install(client).expect("install");
    let data = sealed(&mut client_ring, 1);
    let mut out = Vec::new();
    for len in 0..data.len() {
        let cut = &data[..len];
        assert!(server.open(cut, &mut out).is_err(), "data cut at {len}");
        let expected = if len < HEADER_LEN + TAG_LEN {
            CryptoError::TooShort
        } else {
            CryptoError::AuthenticationFailed
        };
        assert_eq!(
            server.open(cut, &mut out),
            Err(expected),
            "data cut at {len}"
        );
    }
    // Header + tag and nothing else is a valid empty datagram, but not this one.
    let empty = {
        let mut d = plain(LINK, 9, &[]);
        client_ring.seal(&mut d).expect("seal empty");
        d
    };
    assert_eq!(server.open(&empty, &mut out), Ok(()));
    assert_eq!(out, plain(LINK, 9, &[]));

    let mut fresh = self::responder();
    for len in 0..initiation.len() {
        assert!(
            fresh
                .handle_initiation(&initiation[..len], [2; 32])
                .is_err(),
            "initiation cut at {len}"
        );
    }
    let (mut initiator, _) = Initiator::new(
        &client_secret(),
        &responder.public_key(),
        SESSION,
        0,
        LINK,
        T0,
        [1; 32],
    )
    .expect("initiation");
    for len in 0..response.len() {
        assert!(
            initiator.handle_response(&response[..len]).is_err(),
            "response cut at {len}"
        );
    }
    assert_eq!(
        initiator.handle_response(&[1]).err(),
        Some(CryptoError::TooShort)
    );
}

#[test]
fn key_phase_selects_previous_key_after_rekey() {
    let (mut client, mut server, mut responder) = established();
    let old_up = sealed(&mut client, 10);
    let old_down = sealed(&mut server, 20);

    let epoch = client.next_epoch();
    assert_eq!(epoch, 1);
    let (c1, s1, _, _) = handshake(&mut responder, epoch, T0 + REKEY_AFTER_TIME, 2);
    client.install(c1).expect("client rekey");
    server.install(s1).expect("server rekey");
    assert_eq!(client.current().map(Transport::epoch), Some(1));
    assert_eq!(
        server.current().map(Transport::epoch),
        Some(0),
        "the server waits for the client to use the new key"
    );

    let new_up = sealed(&mut client, 11);
    assert_eq!(new_up[1] & 0x01, 1, "epoch 1 sets the key-phase bit");
    assert_eq!(
        opens(&mut server, &new_up),
        Ok(with_phase(plain(LINK, 11, FRAMES), 1))
    );
    assert_eq!(server.current().map(Transport::epoch), Some(1), "confirmed");
    let new_down = sealed(&mut server, 21);

    // Datagrams sealed before the rekey still open, by their key-phase bit.
    assert_eq!(opens(&mut server, &old_up), Ok(plain(LINK, 10, FRAMES)));
    assert_eq!(opens(&mut client, &old_down), Ok(plain(LINK, 20, FRAMES)));
    assert_eq!(
        opens(&mut client, &new_down),
        Ok(with_phase(plain(LINK, 21, FRAMES), 1))
    );
    assert_eq!(client.current().map(Transport::epoch), Some(1));
}

#[test]
fn retired_key_no_longer_opens() {
    let (mut client, mut server, mut responder) = established();
    let old_up = sealed(&mut client, 10);
    let (c1, s1, _, _) = handshake(&mut responder, 1, T0 + REKEY_AFTER_TIME, 2);
    client.install(c1).expect("client rekey");
    server.install(s1).expect("server rekey");

    // Before confirmation the server's "previous" is its sending key: nothing to retire.
    server.retire_previous();
    assert_eq!(opens(&mut server, &old_up), Ok(plain(LINK, 10, FRAMES)));

    let new_up = sealed(&mut client, 11);
    assert!(opens(&mut server, &new_up).is_ok());
    server.retire_previous();
    assert_eq!(opens(&mut server, &old_up), Err(CryptoError::NoKeyForPhase));
    assert!(opens(&mut server, &new_up).is_ok(), "current key kept");

    client.retire_previous();
    let old_down_pn = 5;
    let mut d = plain(LINK, old_down_pn, FRAMES);
    d[1] = 0; // as if sealed under epoch 0
    assert_eq!(opens(&mut client, &d), Err(CryptoError::NoKeyForPhase));
}

#[test]
fn nonce_differs_for_resent_inner_packet() {
    let (mut client, _, _) = established();
    let first = sealed(&mut client, 100);
    let resent = sealed(&mut client, 101);
    assert_ne!(
        first[HEADER_LEN..],
        resent[HEADER_LEN..],
        "same frames, new packet number: new ciphertext and tag"
    );
    let mut other_link = plain(LINK + 1, 100, FRAMES);
    client.seal(&mut other_link).expect("seal");
    assert_ne!(
        first[HEADER_LEN..],
        other_link[HEADER_LEN..],
        "same packet number on another link: another nonce"
    );
}

#[test]
fn same_seeds_give_same_handshake_bytes() {
    let run = |seed| {
        let mut responder = responder();
        let (mut client, mut server, initiation, response) = handshake(&mut responder, 0, T0, seed);
        let mut up = plain(LINK, 0, FRAMES);
        client.seal(&mut up).expect("seal");
        let mut down = plain(LINK, 0, FRAMES);
        server.seal(&mut down).expect("seal");
        (initiation, response, up, down)
    };
    assert_eq!(run(1), run(1));
    let (a, b) = (run(1), run(2));
    assert_ne!(a.0, b.0, "the seed is the ephemeral key");
    assert_ne!(a.1, b.1);
    assert_ne!(a.2, b.2, "so are the transport keys");
}

#[test]
fn lost_response_retry_keeps_key_phases_in_step() {
    let (mut client, mut server, mut responder) = established();
    let server_key = responder.public_key();
    let t1 = T0 + REKEY_AFTER_TIME;

    // Attempt 1: the server accepts, the response is lost.
    let epoch = client.next_epoch();
    let (_lost_initiator, initiation) = Initiator::new(
        &client_secret(),
        &server_key,
        SESSION,
        epoch,
        LINK,
        t1,
        [5; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [6; 32])
        .expect("accepted");
    server.install(accepted.transport).expect("pending");
    // The server keeps sending under epoch 0, which the client can open.
    let down = sealed(&mut server, 30);
    assert_eq!(opens(&mut client, &down), Ok(plain(LINK, 30, FRAMES)));

    // Attempt 2, same epoch since the client installed nothing.
    assert_eq!(client.next_epoch(), epoch);
    let (mut initiator, initiation) = Initiator::new(
        &client_secret(),
        &server_key,
        SESSION,
        epoch,
        LINK,
        t1 + Duration::from_secs(1),
        [7; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [8; 32])
        .expect("accepted");
    server
        .install(accepted.transport)
        .expect("replaces pending");
    client
        .install(
            initiator
                .handle_response(&accepted.response)
                .expect("response"),
        )
        .expect("install");

    let up = sealed(&mut client, 31);
    assert_eq!(
        opens(&mut server, &up),
        Ok(with_phase(plain(LINK, 31, FRAMES), 1))
    );
    let down = sealed(&mut server, 32);
    assert_eq!(
        opens(&mut client, &down),
        Ok(with_phase(plain(LINK, 32, FRAMES), 1))
    );
}

#[test]
fn lost_first_response_retry_replaces_the_servers_unconfirmed_key() {
    let mut responder = responder();
    let (mut client, mut server) = (KeyRing::new(), KeyRing::new());
    // Attempt 1: the server accepts and, with no other key, uses the new one at once;
    // the response is lost.
    let (_, s0, _, _) = handshake(&mut responder, 0, T0, 1);
    server.install(s0).expect("install");
    assert_eq!(server.current().map(Transport::epoch), Some(0));
    // Attempt 2, the same epoch: the client installed nothing.
    assert_eq!(client.next_epoch(), 0);
    let (c0, s0, _, _) = handshake(&mut responder, 0, T0 + Duration::from_secs(1), 2);
    server.install(s0).expect("replaces the unconfirmed key");
    client.install(c0).expect("install");
    let up = sealed(&mut client, 50);
    assert_eq!(opens(&mut server, &up), Ok(plain(LINK, 50, FRAMES)));
    let down = sealed(&mut server, 51);
    assert_eq!(opens(&mut client, &down), Ok(plain(LINK, 51, FRAMES)));
    // Confirmed by the client's datagram, the key is no longer replaced by one of its
    // epoch.
    let (_, again, _, _) = handshake(&mut responder, 0, T0 + Duration::from_secs(2), 3);
    assert_eq!(server.install(again), Err(CryptoError::StaleEpoch));
    let down = sealed(&mut server, 52);
    assert_eq!(opens(&mut client, &down), Ok(plain(LINK, 52, FRAMES)));
}

#[test]
fn initiation_for_next_epoch_confirms_pending_key() {
    let (mut client, mut server, mut responder) = established();
    // Epoch 1 completes, but no client datagram under it reaches the server.
    let (c1, s1, _, _) = handshake(&mut responder, 1, T0 + REKEY_AFTER_TIME, 2);
    client.install(c1).expect("install 1");
    server.install(s1).expect("pending 1");
    assert_eq!(server.current().map(Transport::epoch), Some(0));
    // The client rekeys again: proposing epoch 2 proves it holds epoch 1.
    let (c2, s2, _, _) = handshake(&mut responder, 2, T0 + 2 * REKEY_AFTER_TIME, 3);
    client.install(c2).expect("install 2");
    server.install(s2).expect("pending 2");
    assert_eq!(server.current().map(Transport::epoch), Some(1));
    let up = sealed(&mut client, 40);
    assert!(opens(&mut server, &up).is_ok());
    assert_eq!(server.current().map(Transport::epoch), Some(2));
    let down = sealed(&mut server, 41);
    assert!(opens(&mut client, &down).is_ok());
}

#[test]
fn install_refuses_stale_epoch_and_other_session() {
    let (mut client, _, mut responder) = established();
    let (c0, _, _, _) = handshake(&mut responder, 0, T0 + Duration::from_secs(1), 2);
    assert_eq!(client.install(c0), Err(CryptoError::StaleEpoch));

    let server_key = responder.public_key();
    let (mut initiator, initiation) = Initiator::new(
        &client_secret(),
        &server_key,
        SESSION + 1,
        1,
        LINK,
        T0 + Duration::from_secs(2),
        [3; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [4; 32])
        .expect("accepted");
    let other = initiator
        .handle_response(&accepted.response)
        .expect("response");
    assert_eq!(client.install(other), Err(CryptoError::SessionMismatch));
}

#[test]
fn forged_response_does_not_abort_handshake() {
    let mut responder = responder();
    let (mut initiator, initiation) = Initiator::new(
        &client_secret(),
        &responder.public_key(),
        SESSION,
        0,
        LINK,
        T0,
        [1; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [2; 32])
        .expect("accepted");
    let mut forged = accepted.response.clone();
    forged[HEADER_LEN..].fill(0x42);
    assert_eq!(
        initiator.handle_response(&forged).err(),
        Some(CryptoError::AuthenticationFailed)
    );
    assert_eq!(
        initiator.handle_response(&initiation).err(),
        Some(CryptoError::WrongHandshakeKind)
    );
    assert!(initiator.handle_response(&accepted.response).is_ok());
    assert_eq!(
        initiator.handle_response(&accepted.response).err(),
        Some(CryptoError::HandshakeFinished)
    );
}

#[test]
fn seal_refuses_handshake_foreign_session_and_exhausted_key() {
    let mut responder = responder();
    let (mut client, _, initiation, _) = handshake(&mut responder, 0, T0, 1);
    let mut d = initiation.clone();
    assert_eq!(client.seal(&mut d), Err(CryptoError::UnexpectedHandshake));
    assert_eq!(d, initiation, "unchanged on error");

    let mut d = plain(LINK, 0, FRAMES);
    d[2] ^= 1;
    assert_eq!(client.seal(&mut d), Err(CryptoError::SessionMismatch));

    let mut d = plain(LINK, 0, &vec![0; usize::from(u16::MAX)]);
    assert_eq!(client.seal(&mut d), Err(CryptoError::TooLong));

    client.sealed = REJECT_AFTER_PACKETS - 1;
    let mut d = plain(LINK, 0, FRAMES);
    assert_eq!(client.seal(&mut d), Ok(()));
    let mut d = plain(LINK, 1, FRAMES);
    assert_eq!(client.seal(&mut d), Err(CryptoError::KeyExhausted));
    assert_eq!(d, plain(LINK, 1, FRAMES), "unchanged on error");

    assert_eq!(
        Initiator::new(
            &client_secret(),
            &responder.public_key(),
            0,
            0,
            LINK,
            T0,
            [1; 32]
        )
        .err()
        .map(|e| e.to_string()),
        Some("session id must be nonzero".to_owned())
    );
}

#[test]
fn needs_rekey_after_time_boundary() {
    let mut responder = responder();
    let (client, _, _, _) = handshake(&mut responder, 0, T0, 1);
    assert!(!client.needs_rekey(T0));
    assert!(!client.needs_rekey(T0 + REKEY_AFTER_TIME - Duration::from_nanos(1)));
    assert!(client.needs_rekey(T0 + REKEY_AFTER_TIME));
    assert!(
        !client.needs_rekey(T0 - Duration::from_secs(5)),
        "a clock stepped back is not a reason"
    );
}

#[test]
fn needs_rekey_after_packets_boundary() {
    let mut responder = responder();
    let (mut client, _, _, _) = handshake(&mut responder, 0, T0, 1);
    client.sealed = REKEY_AFTER_PACKETS - 1;
    assert!(!client.needs_rekey(T0));
    let mut d = plain(LINK, 0, FRAMES);
    client.seal(&mut d).expect("seal");
    assert!(client.needs_rekey(T0));
}

#[test]
fn ring_without_keys_refuses() {
    let mut ring = KeyRing::new();
    assert_eq!(ring.next_epoch(), 0);
    let mut d = plain(LINK, 0, FRAMES);
    assert_eq!(ring.seal(&mut d), Err(CryptoError::NoSendingKey));
    assert_eq!(opens(&mut ring, &d), Err(CryptoError::NoKeyForPhase));
    assert_eq!(opens(&mut ring, &[]), Err(CryptoError::TooShort));
    ring.retire_previous();
}

#[test]
fn header_helpers_read_clear_fields() {
    assert!(!is_handshake(&[]));
    assert!(!is_handshake(&[1, 0x80]), "shorter than a header");
    assert!(!is_handshake(&[2, 0x81, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
    assert!(is_handshake(&[1, 0x81, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
    assert_eq!(session_of(&plain(LINK, 5, FRAMES)), Some(SESSION));
    assert_eq!(session_of(&[1; 11]), None);
    assert_eq!(session_of(&[2; 12]), None);
    let _ = PublicKey::from_bytes([0; 32]);
}

/// A random tail behind a plausible header, so fuzzed inputs reach past the header checks.
fn with_header(flags: u8, mut tail: Vec<u8>) -> Vec<u8> {
    let mut d = plain(LINK, 0, &[]);
    d[1] = flags;
    d.append(&mut tail);
    d
}

/// Keys and handshake state shared by all property-test cases: a handshake costs
/// milliseconds in a debug build, a case should not.
struct Fixture {
    client: KeyRing,
    server: KeyRing,
    responder: Responder,
    initiator: Initiator,
}

fn fixture() -> MutexGuard<'static, Fixture> {
    static FIXTURE: LazyLock<Mutex<Fixture>> = LazyLock::new(|| {
        let (client, server, responder) = established();
        let (initiator, _) = Initiator::new(
            &client_secret(),
            &responder.public_key(),
            SESSION,
            1,
            LINK,
            T0 + REKEY_AFTER_TIME,
            [9; 32],
        )
        .expect("initiation");
        Mutex::new(Fixture {
            client,
            server,
            responder,
            initiator,
        })
    });
    FIXTURE.lock().unwrap_or_else(PoisonError::into_inner)
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        flags in prop_oneof![Just(0x00u8), Just(0x01), Just(0x81), Just(0x82), any::<u8>()],
    ) {
        let f = &mut *fixture();
        let framed = with_header(flags, bytes.clone());
        for input in [&bytes, &framed] {
            let mut out = Vec::new();
            prop_assert!(f.server.open(input, &mut out).is_err());
            prop_assert!(out.is_empty());
            prop_assert!(f.client.open(input, &mut out).is_err());
            prop_assert!(f.responder.handle_initiation(input, [1; 32]).is_err());
            prop_assert!(f.initiator.handle_response(input).is_err());
            let _ = is_handshake(input);
            let _ = session_of(input);
        }
        // Handshake datagrams of exactly the right length, random contents.
        let mut initiation = with_header(0x81, bytes.clone());
        initiation.resize(INITIATION_LEN, 0);
        prop_assert!(f.responder.handle_initiation(&initiation, [1; 32]).is_err());
        let mut response = with_header(0x82, bytes);
        response.resize(RESPONSE_LEN, 0);
        prop_assert!(f.initiator.handle_response(&response).is_err());
    }

    #[test]
    fn any_single_bit_flip_is_refused(
        pn in any::<u32>(),
        link in any::<u16>(),
        bit in 0usize..8,
        pos in any::<prop::sample::Index>(),
    ) {
        let f = &mut *fixture();
        let mut d = plain(link, pn, FRAMES);
        f.client.seal(&mut d).expect("seal");
        let i = pos.index(d.len());
        d[i] ^= 1 << bit;
        prop_assert!(opens(&mut f.server, &d).is_err());
    }
}
