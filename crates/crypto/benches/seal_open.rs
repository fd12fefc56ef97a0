//! Per-datagram cost of the encryption layer: seal and open of a 1400-byte datagram
//! (12-byte header + 1388 bytes of frames), as the daemon does once per datagram on each
//! side, with caller-owned buffers reused across datagrams (no allocation).
//!
//! Beside it, in the same run, the baseline: a bare encrypt+decrypt of the same bytes with
//! the portable RustCrypto `chacha20poly1305` crate (what this crate used before it moved
//! to ring's assembly implementation).
//!
//! Run: `cargo bench -p latebind-crypto --bench seal_open`

use std::hint::black_box;
use std::time::Duration;

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use latebind_crypto::{HEADER_LEN, Initiator, Responder, StaticSecret, TAG_LEN, Transport};

const DATAGRAM: usize = 1400;
const SESSION: u32 = 7;
const LINK: u16 = 1;

fn transports() -> (Transport, Transport) {
    let client = StaticSecret::from_random_bytes([1; 32]);
    let server = StaticSecret::from_random_bytes([2; 32]);
    let mut responder = Responder::new(server, vec![client.public_key()]);
    let (mut initiator, initiation) = Initiator::new(
        &client,
        &responder.public_key(),
        SESSION,
        0,
        LINK,
        Duration::from_secs(1_700_000_000),
        [3; 32],
    )
    .expect("initiation");
    let accepted = responder
        .handle_initiation(&initiation, [4; 32])
        .expect("accepted");
    let sender = initiator
        .handle_response(&accepted.response)
        .expect("response");
    (sender, accepted.transport)
}

/// Writes the plaintext datagram with packet number `pn` into `buf`.
fn fill(buf: &mut Vec<u8>, frames: &[u8], pn: u32) {
    buf.clear();
    buf.extend_from_slice(&[1, 0]);
    buf.extend_from_slice(&SESSION.to_be_bytes());
    buf.extend_from_slice(&LINK.to_be_bytes());
    buf.extend_from_slice(&pn.to_be_bytes());
    buf.extend_from_slice(frames);
}

fn seal_open(c: &mut Criterion) {
    let (mut sender, receiver) = transports();
    let frames: Vec<u8> = (0..DATAGRAM - HEADER_LEN).map(|i| i as u8).collect();
    let mut buf = Vec::with_capacity(DATAGRAM + TAG_LEN);
    let mut out = Vec::with_capacity(DATAGRAM + TAG_LEN);
    let mut pn = 0u32;

    let mut group = c.benchmark_group("crypto");
    group.throughput(Throughput::Bytes(DATAGRAM as u64));
    group.bench_function("seal+open 1400 B", |b| {
        b.iter(|| {
            pn = pn.wrapping_add(1);
            fill(&mut buf, &frames, pn);
            sender.seal(&mut buf).expect("seal");
            receiver.open(black_box(&buf), &mut out).expect("open");
            black_box(&out);
        });
    });
    group.bench_function("seal 1400 B", |b| {
        b.iter(|| {
            pn = pn.wrapping_add(1);
            fill(&mut buf, &frames, pn);
            sender.seal(&mut buf).expect("seal");
            black_box(&buf);
        });
    });
    fill(&mut buf, &frames, 0);
    sender.seal(&mut buf).expect("seal");
    group.bench_function("open 1400 B", |b| {
        b.iter(|| {
            receiver.open(black_box(&buf), &mut out).expect("open");
            black_box(&out);
        });
    });
    let aead = ChaCha20Poly1305::new(&[5; 32].into());
    let mut body = frames.clone();
    group.bench_function(
        "baseline: RustCrypto chacha20poly1305 encrypt+decrypt 1400 B",
        |b| {
            b.iter(|| {
                pn = pn.wrapping_add(1);
                let mut nonce = [0; 12];
                nonce[4..].copy_from_slice(&u64::from(pn).to_le_bytes());
                let nonce = Nonce::from(nonce);
                let tag = aead
                    .encrypt_in_place_detached(&nonce, &buf[..HEADER_LEN], &mut body)
                    .expect("encrypt");
                aead.decrypt_in_place_detached(&nonce, &buf[..HEADER_LEN], &mut body, &tag)
                    .expect("decrypt");
                black_box(&body);
            });
        },
    );
    group.finish();
}

criterion_group!(benches, seal_open);
criterion_main!(benches);
