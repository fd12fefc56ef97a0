//! Writes the checked-in seed corpus, `seeds/<target>/*`, from a short real exchange
//! between a client and a server engine plus a few hand-built inputs.
//!
//! Run from anywhere (deterministic; rewrites the files it owns):
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds
//! ```

use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use latebind_crypto::{Responder, StaticSecret};
use latebind_fuzz::crypto::{self, LINK, SESSION as CRYPTO_SESSION, T0};
use latebind_fuzz::engine::{Knobs, SESSION, START};
use latebind_fuzz::input::Writer;
use latebind_proto::wire::{self, LossEntry};
use latebind_proto::{Config, Endpoint, Instant, LinkConfig, LinkId, Role};

/// A datagram received by one side of the exchange, with its arrival time.
struct Received {
    at: Instant,
    bytes: Vec<u8>,
}

/// What the exchange recorded.
struct Exchange {
    /// TUN packets handed to the client, with their times.
    client_tun: Vec<(Instant, Vec<u8>)>,
    server_rx: Vec<Received>,
    client_rx: Vec<Received>,
}

fn ipv4_udp(tos: u8, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[1] = tos;
    p[2..4].copy_from_slice(&u16::try_from(28 + payload.len()).unwrap().to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 1, 1]);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

fn ipv4_tcp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[1] = 0x02; // ECT(0)
    p[2..4].copy_from_slice(&u16::try_from(40 + payload.len()).unwrap().to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 1, 2]);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[32] = 0x50;
    p.extend_from_slice(payload);
    p
}

fn ipv6_udp(tc: u8, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 48];
    p[0] = 0x60 | (tc >> 4);
    p[1] = tc << 4;
    p[4..6].copy_from_slice(&u16::try_from(8 + payload.len()).unwrap().to_be_bytes());
    p[6] = 17;
    p[7] = 64;
    p[8] = 0xfd;
    p[23] = 1;
    p[24] = 0xfd;
    p[39] = 2;
    p[40..42].copy_from_slice(&5353u16.to_be_bytes());
    p[42..44].copy_from_slice(&5353u16.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// Inner packets of the exchange: two UDP flows, a TCP flow (ECN-capable), an EF flow
/// and IPv6.
fn inner_packets() -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    for i in 0..4u8 {
        v.push(ipv4_udp(0, 4000, 53, &[i; 24]));
        v.push(ipv4_tcp(40000, 443, &[0x16, 3, 1, i]));
    }
    v.push(ipv4_udp(46 << 2, 5004, 5004, b"voice frame"));
    v.push(ipv6_udp(0, b"v6 payload"));
    v.push(ipv4_udp(0, 4001, 53, &[7; 100]));
    v
}

/// Runs a client with links 0 (10 ms one way) and 1 (25 ms) against a server for 400 ms.
fn exchange() -> Exchange {
    let mut cc = Config::new(Role::Client);
    cc.session(SESSION);
    let mut sc = Config::new(Role::Server);
    sc.session(SESSION);
    let mut client = Endpoint::new(cc, START).unwrap();
    let mut server = Endpoint::new(sc, START).unwrap();
    client.add_link(START, LinkId(0), LinkConfig::default());
    client.add_link(START, LinkId(1), LinkConfig::default());

    let mut tun: VecDeque<(Instant, Vec<u8>)> = inner_packets()
        .into_iter()
        .enumerate()
        .map(|(i, p)| (START + Duration::from_millis(20 + 7 * i as u64), p))
        .collect();
    let mut ex = Exchange {
        client_tun: tun.iter().cloned().collect(),
        server_rx: Vec::new(),
        client_rx: Vec::new(),
    };
    // (arrival, to the server?, bytes)
    let mut wire_q: Vec<(Instant, bool, Vec<u8>)> = Vec::new();
    let mut buf = Vec::new();
    let delay = |link: LinkId| Duration::from_millis(if link.0 == 0 { 10 } else { 25 });
    let mut now = START;
    while now < START + Duration::from_millis(400) {
        wire_q.sort_by_key(|(t, _, _)| *t);
        let due: Vec<_> = wire_q
            .iter()
            .filter(|(t, _, _)| *t <= now)
            .cloned()
            .collect();
        wire_q.retain(|(t, _, _)| *t > now);
        for (_, to_server, d) in due {
            let rec = Received {
                at: now,
                bytes: d.clone(),
            };
            if to_server {
                server.handle_datagram(now, &d);
                ex.server_rx.push(rec);
            } else {
                client.handle_datagram(now, &d);
                ex.client_rx.push(rec);
            }
        }
        while tun.front().is_some_and(|(t, _)| *t <= now) {
            let (_, p) = tun.pop_front().unwrap();
            client.handle_tun_packet(now, &p).unwrap();
        }
        for (ep, to_server) in [(&mut client, true), (&mut server, false)] {
            if ep.poll_timeout().is_some_and(|t| t <= now) {
                ep.handle_timeout(now);
            }
            while let Some(t) = ep.poll_transmit(now, &mut buf) {
                ep.handle_tx_done(now, t.link);
                wire_q.push((now + delay(t.link), to_server, buf.clone()));
            }
            while ep.poll_deliver().is_some() {}
            while ep.poll_event().is_some() {}
        }
        now += Duration::from_millis(1);
    }
    assert!(
        server.stats().reorder.delivered > 0,
        "the exchange delivered nothing"
    );
    ex
}

/// Writes seed files into one target's directory, replacing what was there.
struct SeedDir {
    dir: PathBuf,
    n: usize,
}

impl SeedDir {
    fn new(root: &Path, target: &str) -> Self {
        let dir = root.join(target);
        if dir.exists() {
            fs::remove_dir_all(&dir).unwrap();
        }
        fs::create_dir_all(&dir).unwrap();
        Self { dir, n: 0 }
    }

    fn put(&mut self, name: &str, bytes: &[u8]) {
        let path = self.dir.join(format!("{:02}-{name}", self.n));
        fs::write(&path, bytes).unwrap();
        self.n += 1;
    }
}

/// Ops of the `engine_datagrams` input format (see `engine::run_datagrams`).
mod op {
    pub const RAW: u8 = 0;
    pub const FRAMED: u8 = 1;
    pub const ADVANCE: u8 = 2;
    pub const TIMERS: u8 = 3;
    pub const TUN: u8 = 4;
    pub const TX_DONE: u8 = 5;
    pub const LINK_CHANGE: u8 = 6;
    pub const REPLAY: u8 = 7;
}

/// Appends advance ops that move the clock from `*clock` to `to` (ms resolution).
fn advance_to(w: &mut Writer, clock: &mut Instant, to: Instant) {
    let mut ms = (to - *clock).as_millis();
    while ms > 0 {
        let step = ms.min(255);
        w.u8(op::ADVANCE).u8(1).u8(step as u8);
        ms -= step;
    }
    *clock = to;
}

fn datagram(build: impl FnOnce(&mut Vec<u8>), link: u16, pn: u32) -> Vec<u8> {
    let mut d = Vec::new();
    wire::Header {
        session: SESSION,
        link,
        pn,
    }
    .emit(&mut d);
    build(&mut d);
    d
}

fn wire_seeds(root: &Path, ex: &Exchange) {
    let mut s = SeedDir::new(root, "wire_parse");
    for (i, r) in ex.server_rx.iter().take(10).enumerate() {
        s.put(&format!("to-server-{i}"), &r.bytes);
    }
    for (i, r) in ex.client_rx.iter().take(10).enumerate() {
        s.put(&format!("to-client-{i}"), &r.bytes);
    }
    s.put(
        "all-frames",
        &datagram(
            |d| {
                wire::emit_ping(d);
                wire::emit_ack(d, 1, 250, &[90..=100, 80..=85, 10..=20, 0..=3]);
                wire::emit_loss_report(
                    d,
                    &[
                        LossEntry {
                            link: 0,
                            received: 1000,
                            lost: 3,
                        },
                        LossEntry {
                            link: 1,
                            received: u64::MAX,
                            lost: 0,
                        },
                    ],
                );
                wire::emit_data(d, 7, 2, 3, b"inner packet", false).unwrap();
                wire::emit_link_status(d, 1, wire::LinkState::Down);
                wire::emit_padding(d, 9);
            },
            7,
            42,
        ),
    );
    let many: Vec<_> = (0..300u64)
        .rev()
        .map(|i| (i * 4 + 1)..=(i * 4 + 2))
        .collect();
    s.put(
        "ack-255-ranges",
        &datagram(
            |d| {
                wire::emit_ack(d, 0, 0, &many);
            },
            0,
            1,
        ),
    );
    s.put(
        "ack-huge-numbers",
        &datagram(
            |d| {
                wire::emit_ack(d, 2, u32::MAX, &[(u64::MAX - 5)..=u64::MAX, 0..=0]);
            },
            2,
            u32::MAX,
        ),
    );
    s.put(
        "empty-loss-report",
        &datagram(|d| d.extend_from_slice(&[0x03, 0x00, 0x01]), 0, 3),
    );
    s.put(
        "link-status-bad-state",
        &datagram(|d| d.extend_from_slice(&[0x05, 0, 1, 2]), 0, 4),
    );
    s.put(
        "ack-underflow",
        &datagram(
            |d| {
                d.push(0x02);
                d.extend_from_slice(&0u16.to_be_bytes());
                d.extend_from_slice(&5u64.to_be_bytes());
                d.extend_from_slice(&0u32.to_be_bytes());
                d.extend_from_slice(&2u32.to_be_bytes());
                d.push(1);
                d.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
            },
            0,
            5,
        ),
    );
    s.put(
        "unknown-frame",
        &datagram(|d| d.extend_from_slice(&[0x01, 0x06, 0x01]), 0, 6),
    );
    s.put(
        "truncated-data",
        &datagram(
            |d| {
                wire::emit_data(d, 1, 1, 1, &[5; 40], false).unwrap();
                d.truncate(d.len() - 3);
            },
            1,
            7,
        ),
    );
    s.put("version-2", &[2, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1]);
    s.put("header-only", &datagram(|_| {}, 0, 8));
}

fn engine_datagram_seeds(root: &Path, ex: &Exchange) {
    let mut s = SeedDir::new(root, "engine_datagrams");

    // The server's side of the exchange: everything it received, at the same times.
    let mut w = Writer::default();
    w.u8(Knobs::SERVER);
    let mut clock = START;
    for r in &ex.server_rx {
        advance_to(&mut w, &mut clock, r.at);
        w.u8(op::RAW).prefixed(&r.bytes);
    }
    w.u8(op::TIMERS).u8(15);
    s.put("server-exchange", &w.out);

    // The first few datagrams only, with a replay and a run of timers.
    let mut w = Writer::default();
    w.u8(Knobs::SERVER | Knobs::FIXED_HOLD);
    let mut clock = START;
    for r in ex.server_rx.iter().take(12) {
        advance_to(&mut w, &mut clock, r.at);
        w.u8(op::RAW).prefixed(&r.bytes);
    }
    w.u8(op::REPLAY).u8(3).u8(op::TIMERS).u8(4);
    s.put("server-exchange-short", &w.out);

    // The client's side: its TUN packets and what it received, in time order.
    let mut w = Writer::default();
    w.u8(0);
    let mut clock = START;
    let mut events: Vec<(Instant, bool, &[u8])> = ex
        .client_tun
        .iter()
        .map(|(t, p)| (*t, true, &p[..]))
        .chain(ex.client_rx.iter().map(|r| (r.at, false, &r.bytes[..])))
        .collect();
    events.sort_by_key(|(t, tun, _)| (*t, !*tun));
    for (t, tun, bytes) in events {
        advance_to(&mut w, &mut clock, t);
        if tun {
            w.u8(op::TUN).u8(0).prefixed(bytes);
        } else {
            w.u8(op::RAW).prefixed(bytes);
        }
    }
    w.u8(op::TIMERS).u8(15);
    s.put("client-exchange", &w.out);

    // Built datagrams: a server learning link 0 from a PING, then DATA in two flows with
    // a gap, a LINK_STATUS down and up, an ACK of its own packets and a loss report.
    let mut w = Writer::default();
    w.u8(Knobs::SERVER);
    w.u8(op::FRAMED).u8(0x00).u8(1).u8(0); // link 0, next pn; PING
    w.u8(op::FRAMED).u8(0x00).u8(2); // link 0, two frames:
    w.u8(3)
        .u8(0)
        .u8(0)
        .u8(0)
        .short(b"E\x00first packet of flow 0"); // DATA flow 0
    w.u8(3)
        .u8(1)
        .u8(0)
        .u8(0)
        .short(b"E\x00first packet of flow 1"); // DATA flow 1
    w.u8(op::FRAMED).u8(0x01).u8(1); // link 1
    w.u8(3).u8(0).u8(1).u8(1).short(b"E\x00after a gap"); // DATA, gseq and fseq skip one
    w.u8(op::ADVANCE).u8(1).u8(5);
    w.u8(op::FRAMED).u8(0x00).u8(1); // link 0
    w.u8(1).u8(0x00).u8(0).u16(100).u8(0).u8(0); // ACK link 0, its latest packet
    w.u8(op::FRAMED).u8(0x01).u8(2); // link 1
    w.u8(2).u8(2).u8(0).u32(10).u32(1).u8(1).u32(5).u32(0); // LOSS_REPORT, 2 entries
    w.u8(4).u8(0x00).u8(1); // LINK_STATUS link 0 down
    w.u8(op::FRAMED).u8(0x01).u8(1).u8(4).u8(0x00).u8(0); // LINK_STATUS link 0 up
    w.u8(op::ADVANCE).u8(2).u8(10);
    w.u8(op::TIMERS).u8(15);
    s.put("server-framed", &w.out);

    // A client: TUN packets go out, the peer acknowledges some, a link goes down and
    // comes back, time passes until links are suspected.
    let mut w = Writer::default();
    w.u8(0);
    for p in inner_packets().iter().take(6) {
        w.u8(op::TUN).u8(0).prefixed(p);
    }
    w.u8(op::ADVANCE).u8(1).u8(20);
    w.u8(op::FRAMED).u8(0x00).u8(2); // link 0
    w.u8(1).u8(0x00).u8(0).u16(50).u8(1).u8(0); // ACK link 0
    w.u8(1).u8(0x01).u8(0).u16(50).u8(0).u8(0); // ACK link 1
    w.u8(op::LINK_CHANGE).u8(0x01); // link 1 down
    w.u8(op::TUN)
        .u8(1)
        .u8(0)
        .u8(0)
        .u8(0)
        .u8(1)
        .u8(2)
        .u8(1)
        .u8(1)
        .short(b"udp");
    w.u8(op::ADVANCE).u8(1).u8(200);
    w.u8(op::LINK_CHANGE).u8(0x81); // link 1 up
    w.u8(op::TIMERS).u8(15);
    s.put("client-framed", &w.out);

    // A client whose driver reports departures late.
    let mut w = Writer::default();
    w.u8(Knobs::MANUAL_TX_DONE);
    for p in inner_packets().iter().take(5) {
        w.u8(op::TUN).u8(0).prefixed(p);
    }
    w.u8(op::ADVANCE).u8(0).u8(100);
    w.u8(op::TX_DONE).u8(0).u8(op::TX_DONE).u8(1);
    w.u8(op::TIMERS).u8(3);
    s.put("client-manual-tx-done", &w.out);

    // A client with a paced link 1 (departures at once).
    let mut w = Writer::default();
    w.u8(Knobs::PACED);
    for p in inner_packets() {
        w.u8(op::TUN).u8(0).prefixed(&p);
    }
    w.u8(op::ADVANCE).u8(1).u8(2);
    w.u8(op::TIMERS).u8(15);
    s.put("client-paced", &w.out);
}

fn engine_tun_seeds(root: &Path) {
    let mut s = SeedDir::new(root, "engine_tun");
    let packets = inner_packets();
    for (name, knobs) in [("client", 0), ("server", Knobs::SERVER)] {
        let mut w = Writer::default();
        w.u8(knobs);
        for p in &packets {
            w.u8(0).prefixed(p);
        }
        w.u8(3).u8(1).u8(30).u8(5).u8(4);
        s.put(&format!("{name}-packets"), &w.out);
    }
    let mut w = Writer::default();
    w.u8(0x10);
    w.u8(2)
        .u8(1)
        .u8(0xb8)
        .u8(0)
        .u8(0)
        .u8(1)
        .u8(1)
        .u8(1)
        .u8(1)
        .short(b"ef");
    // IPv6, ECT(0), one fragment header (offset 1: not the first fragment), UDP.
    w.u8(2)
        .u8(2)
        .u8(0x02)
        .u8(1)
        .u8(1)
        .u8(1)
        .u8(3)
        .u16(8)
        .u8(0)
        .u8(0)
        .u8(0);
    w.short(b"v6");
    w.u8(2).u8(3).u16(40); // 65 540 bytes: too large
    w.u8(2).u8(3).u16(0); // 65 500 bytes: fits
    w.u8(1).u16(3).bytes(&[0x45, 0, 0]); // truncated IPv4
    w.u8(1).u16(1).bytes(&[0x70]); // not IP
    w.u8(5).u8(7);
    s.put("templates", &w.out);
}

fn crypto_seeds(root: &Path) {
    let mut s = SeedDir::new(root, "crypto_open");
    let client = crypto::client_secret();
    let stranger = StaticSecret::from_random_bytes([0x33; 32]);
    // A responder of its own, so these handshakes leave the fixture alone. Every datagram
    // below is genuine for some key or handshake the fixture does not have (or, for the
    // initiation, older than the newest the fixture's responder accepted): the target
    // must refuse them all.
    let mut responder = Responder::new(
        crypto::server_secret(),
        vec![client.public_key(), stranger.public_key()],
    );
    let (mut c, _, old_initiation, other_response) =
        crypto::handshake(&mut responder, &client, 0, T0 - Duration::from_secs(1), 9);
    let (_, _, stranger_initiation, _) = crypto::handshake(&mut responder, &stranger, 0, T0, 10);
    let with_mode = |mode: u8, d: &[u8]| [&[mode][..], d].concat();
    s.put("replayed-initiation", &with_mode(0, &old_initiation));
    s.put(
        "unknown-key-initiation",
        &with_mode(0, &stranger_initiation),
    );
    s.put("other-response", &with_mode(0, &other_response));
    let mut sealed = crypto::plain(CRYPTO_SESSION, LINK, 5, b"\x01\x00 frames");
    c.seal(&mut sealed).unwrap();
    s.put("foreign-key-data", &with_mode(0, &sealed));
    let mut phase1 = sealed.clone();
    phase1[1] |= 1;
    s.put("foreign-key-data-phase-1", &with_mode(0, &phase1));
    s.put("short", &with_mode(0, &[1, 0, 0x5e, 0x55]));
    s.put("framed-initiation", &with_mode(1, &[0x81, 0xaa, 0xbb]));
    s.put("framed-response", &with_mode(1, &[0x82, 0xcc]));
    s.put("framed-data", &with_mode(1, &[0x00; 40]));
    s.put("framed-data-phase-1", &with_mode(1, &[0x01; 40]));
    // Modes 2 and 3 read `arbitrary` structures: any bytes do.
    s.put("tamper", &with_mode(2, &(0u8..64).collect::<Vec<_>>()));
    s.put("tamper-unchanged", &with_mode(2, &[0u8; 24]));
    s.put(
        "handshake-tamper",
        &with_mode(3, &(0u8..48).rev().collect::<Vec<_>>()),
    );
    s.put("handshake-unchanged", &with_mode(3, &[5u8, 0, 0, 3]));
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let ex = exchange();
    wire_seeds(&root, &ex);
    engine_datagram_seeds(&root, &ex);
    engine_tun_seeds(&root);
    crypto_seeds(&root);
    for target in [
        "wire_parse",
        "engine_datagrams",
        "engine_tun",
        "crypto_open",
    ] {
        let n = fs::read_dir(root.join(target)).unwrap().count();
        println!("seeds/{target}: {n} files");
    }
}
