//! Header compression (`compact.rs`, docs/protocol.md §3.9, §3.10) through a client and a
//! server engine: templates, compact frames, their losses and reinjections, and what
//! comes out on the TUN side.
//!
//! Names read `<state>_<event>_<outcome>`. The harness turns compression off by default
//! (its `data_in` reads packets from one datagram alone); every pair here turns it on,
//! except the guard that checks it off. The harness's `data_in`, `drop_packet` and
//! `delivered_inner` read UDP packets whole and would choke on a compact body: the
//! helpers below read the frames themselves and tell packets apart by a tag, the last four
//! bytes of each packet (a compact body ends with the packet's bytes after its template).

use std::collections::{BTreeMap, BTreeSet};

use core::time::Duration;

use super::harness::{FlowSpec, LinkSpec, Pair, PairBuilder, Side, TxRecord, at_ms, blackhole, ms};
use crate::wire::{self, DataForm};
use crate::{Config, Event, Instant, LinkChange, LinkConfig, LinkId, ReinjectCause, Role};

// ---- inner packets ----

const TCP_ACK: u8 = 0x10;
const TCP_PSH_ACK: u8 = 0x18;
const TCP_SYN: u8 = 0x02;
const TCP_FIN_ACK: u8 = 0x11;

/// IP and TCP headers of [`Conn`]'s IPv4 packets: 20 + 32 (timestamps option).
const HDR4: usize = 52;
/// The same for IPv6: 40 + 32.
const HDR6: usize = 72;

/// The ones' complement sum of `data` (odd length padded with zero), folded.
fn sum16(data: &[u8], mut sum: u32) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// Whether `p` starts with an IPv4 header whose checksum is right.
fn ipv4_checksum_ok(p: &[u8]) -> bool {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    p[0] >> 4 == 4 && sum16(&p[..ihl], 0) == 0xffff
}

/// One inner TCP connection (10.1.0.1 -> 10.1.0.2, or fd00::1 -> fd00::2, port
/// `sport` -> 443) whose numbers move as a bulk sender's do: sequence, identification,
/// acknowledgement, window, timestamps and checksums change from packet to packet.
/// Packet `i` ends with its tag (`id << 24 | i`).
#[derive(Clone, Copy, Debug)]
struct Conn {
    id: u8,
    sport: u16,
    v6: bool,
}

impl Conn {
    const fn v4(id: u8, sport: u16) -> Self {
        Self {
            id,
            sport,
            v6: false,
        }
    }

    const fn v6(id: u8, sport: u16) -> Self {
        Self {
            id,
            sport,
            v6: true,
        }
    }

    const fn hdr(&self) -> usize {
        if self.v6 { HDR6 } else { HDR4 }
    }

    fn tag(&self, i: u32) -> u32 {
        (u32::from(self.id) << 24) | i
    }

    /// Data segment `i` (PSH, ACK), `len` bytes in all.
    fn segment(&self, i: u32, len: usize) -> Vec<u8> {
        self.packet(i, len, TCP_PSH_ACK)
    }

    /// Packet `i` with TCP `flags`, `len` bytes in all (at least the headers and the tag).
    fn packet(&self, i: u32, len: usize, flags: u8) -> Vec<u8> {
        let hdr = self.hdr();
        assert!(len >= hdr + 4, "room for the tag");
        let ip = hdr - 32;
        let mut p = vec![0u8; len];
        if self.v6 {
            p[0] = 0x60;
            p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            p[6] = 6;
            p[7] = 64;
            p[8] = 0xfd;
            p[23] = 1;
            p[24] = 0xfd;
            p[39] = 2;
        } else {
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            p[4..6].copy_from_slice(&(0x4000u16.wrapping_add(i as u16)).to_be_bytes());
            p[6] = 0x40; // DF
            p[8] = 64;
            p[9] = 6;
            p[12..16].copy_from_slice(&[10, 1, 0, 1]);
            p[16..20].copy_from_slice(&[10, 1, 0, 2]);
        }
        let t = &mut p[ip..];
        t[0..2].copy_from_slice(&self.sport.to_be_bytes());
        t[2..4].copy_from_slice(&443u16.to_be_bytes());
        let seq = 0x1234_5678u32.wrapping_add(i.wrapping_mul(1448));
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        let ack = 0x7700_0000u32 + (i / 4) * 100;
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = 8 << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&(0x0200 + (i % 3) as u16).to_be_bytes());
        // Options: NOP, NOP, timestamps.
        t[20..22].copy_from_slice(&[1, 1]);
        t[22..24].copy_from_slice(&[8, 10]);
        t[24..28].copy_from_slice(&(1_000_000 + i / 2).to_be_bytes());
        t[28..32].copy_from_slice(&(5_000 + i / 8).to_be_bytes());
        for (k, b) in p[hdr..len - 4].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(k as u8);
        }
        p[len - 4..].copy_from_slice(&self.tag(i).to_be_bytes());
        // The TCP checksum, over the pseudo-header.
        let tcp_len = len - ip;
        let pseudo = if self.v6 {
            let s = sum16(&p[8..40], 0);
            sum16(&(tcp_len as u32).to_be_bytes(), s + 6)
        } else {
            sum16(&p[12..20], 0) + 6 + tcp_len as u32
        };
        let c = !(sum16(&p[ip..], pseudo) as u16);
        p[ip + 16..ip + 18].copy_from_slice(&c.to_be_bytes());
        if !self.v6 {
            let c = !(sum16(&p[..20], 0) as u16);
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        p
    }
}

/// A packet's tag: its last four bytes.
fn tag(packet: &[u8]) -> u32 {
    let n = packet.len();
    u32::from_be_bytes(packet[n - 4..].try_into().expect("four bytes"))
}

/// Schedules `packets` from `side`, one every `every` from `start`; returns them.
fn send_all(
    pair: &mut Pair,
    side: Side,
    packets: Vec<Vec<u8>>,
    start: Instant,
    every: Duration,
) -> Vec<Vec<u8>> {
    for (k, p) in packets.iter().enumerate() {
        pair.send_at(start + every * k as u32, side, p.clone());
    }
    packets
}

/// Segments `0..count` of `conn`, `len` bytes each.
fn segments(conn: Conn, count: u32, len: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| conn.segment(i, len)).collect()
}

// ---- what the wire carried ----

/// The data frame of a datagram, as the wire carries it.
#[derive(Clone, Debug)]
struct Seen {
    time: Instant,
    from: Side,
    link: LinkId,
    datagram_len: usize,
    form: DataForm,
    recovered: bool,
    /// The frame's length, type byte included.
    frame_len: usize,
    /// Its payload: the packet, or the compact body.
    payload: Vec<u8>,
    /// The packet's tag (a compact body ends with the packet's last bytes too).
    tag: u32,
}

impl Seen {
    fn is_compact(&self) -> bool {
        matches!(self.form, DataForm::Compact { .. })
    }

    fn is_template(&self) -> bool {
        matches!(self.form, DataForm::Template { .. })
    }

    fn is_full(&self) -> bool {
        self.form == DataForm::Full
    }
}

/// The data frames of `records` (at most one per datagram), in order.
fn seen(records: &[TxRecord]) -> Vec<Seen> {
    let mut out = Vec::new();
    for r in records {
        let (_, frames) = wire::parse(&r.bytes).expect("the engines write valid datagrams");
        let data: Vec<_> = frames
            .map(|f| f.expect("valid frames"))
            .filter_map(|f| match f {
                wire::Frame::Data(d) => Some(d),
                _ => None,
            })
            .collect();
        assert!(data.len() <= 1, "one data frame per datagram");
        assert_eq!(
            r.carries_data,
            data.len() == 1,
            "carries_data tells the truth"
        );
        let Some(d) = data.first() else {
            continue;
        };
        let header = match d.form {
            DataForm::Full => wire::DATA_FRAME_HEADER_LEN,
            DataForm::Template { .. } => wire::DATA_TEMPLATE_HEADER_LEN,
            DataForm::Compact { .. } => wire::DATA_COMPACT_HEADER_LEN,
        };
        out.push(Seen {
            time: r.time,
            from: r.from,
            link: r.link,
            datagram_len: r.bytes.len(),
            form: d.form,
            recovered: d.recovered,
            frame_len: header + d.payload.len(),
            payload: d.payload.to_vec(),
            tag: tag(d.payload),
        });
    }
    out
}

/// The data frames `from` handed to its driver.
fn sent_by(pair: &Pair, from: Side) -> Vec<Seen> {
    seen(&pair.transmits)
        .into_iter()
        .filter(|s| s.from == from)
        .collect()
}

/// The data frames of `from` that were lost on the way.
fn dropped_by(pair: &Pair, from: Side) -> Vec<Seen> {
    seen(&pair.dropped)
        .into_iter()
        .filter(|s| s.from == from)
        .collect()
}

/// Checks that `side` delivered exactly `sent` (by tag group: each connection's packets
/// in order), byte for byte, each once, and nothing else.
fn assert_delivered_exactly(pair: &Pair, side: Side, sent: &[Vec<u8>]) {
    let group = |p: &[u8]| tag(p) >> 24;
    let mut want: BTreeMap<u32, Vec<&[u8]>> = BTreeMap::new();
    for p in sent {
        want.entry(group(p)).or_default().push(p);
    }
    let mut got: BTreeMap<u32, Vec<&[u8]>> = BTreeMap::new();
    for d in &pair.delivered[side.idx()] {
        got.entry(group(&d.bytes)).or_default().push(&d.bytes);
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{side:?}: the connections delivered"
    );
    for (g, want) in &want {
        let got = &got[g];
        let tags = |v: &[&[u8]]| v.iter().map(|p| tag(p) & 0xff_ffff).collect::<Vec<_>>();
        assert_eq!(
            tags(got),
            tags(want),
            "{side:?}, connection {g}: packets delivered (each once, in order)"
        );
        for (k, (a, b)) in got.iter().zip(want).enumerate() {
            assert_eq!(
                a, b,
                "{side:?}, connection {g}: packet {k} changed on the way"
            );
        }
    }
}

/// The client's and the server's compression counters, as one tuple each.
fn counters(pair: &Pair, side: Side) -> (u64, u64, u64, u64, u64) {
    let s = pair.endpoint_ref(side).stats();
    (
        s.templates_sent,
        s.compact_sent,
        s.compact_saved_bytes,
        s.templates_received,
        s.compact_undecodable,
    )
}

/// Two links, 10 ms and 15 ms one way, 20 Mbit/s each; compression on at both ends.
fn compressing_pair() -> PairBuilder {
    PairBuilder::new()
        .link(LinkSpec::new(ms(10)).rate_bps(20e6))
        .link(LinkSpec::new(ms(15)).rate_bps(20e6))
        .config(|c| c.header_compression = true)
}

// ---- 1. A stream goes compact after its first round trip ----

const STREAM_START: Instant = at_ms(100);
const STREAM_PACKETS: u32 = 400;
const STREAM_LEN: usize = 1000;

/// 400 segments of 1000 bytes, one a millisecond (8 Mbit/s), from 100 ms, through
/// `builder`'s pair; returns the pair and the packets.
fn tcp_stream(builder: PairBuilder) -> (Pair, Vec<Vec<u8>>) {
    let mut pair = builder.build();
    let sent = send_all(
        &mut pair,
        Side::Client,
        segments(Conn::v4(1, 40000), STREAM_PACKETS, STREAM_LEN),
        STREAM_START,
        ms(1),
    );
    pair.drive_bounded();
    (pair, sent)
}

#[test]
fn compressing_pair_tcp_stream_goes_compact_after_its_first_round_trip_and_arrives_exact() {
    let (pair, sent) = tcp_stream(compressing_pair());
    assert_delivered_exactly(&pair, Side::Server, &sent);

    let frames = sent_by(&pair, Side::Client);
    let templates: Vec<&Seen> = frames.iter().filter(|s| s.is_template()).collect();
    assert!(!templates.is_empty(), "a template was sent");
    let first = templates[0];
    assert_eq!(
        first.tag,
        tag(&sent[0]),
        "the first segment is the template"
    );
    let DataForm::Template {
        hlen,
        ipv4_checksum,
        ..
    } = first.form
    else {
        unreachable!()
    };
    assert_eq!(
        usize::from(hlen),
        HDR4,
        "IP and TCP headers, options included"
    );
    assert!(ipv4_checksum, "the segments' IPv4 checksums are right");
    // The template waits for its acknowledgement (one 20 ms round trip at least); every
    // segment bound two round trips after it goes compact.
    let compact: Vec<&Seen> = frames.iter().filter(|s| s.is_compact()).collect();
    let first_compact = compact.first().expect("compact frames were sent").time;
    assert!(
        first_compact >= first.time + ms(20),
        "compact at {first_compact:?}, before the template {:?} could be acknowledged",
        first.time
    );
    let late: Vec<&Seen> = frames
        .iter()
        .filter(|s| s.time >= first.time + ms(50))
        .collect();
    assert!(
        late.len() >= 300,
        "{} frames late in the stream",
        late.len()
    );
    let whole: Vec<u32> = late
        .iter()
        .filter(|s| !s.is_compact())
        .map(|s| s.tag)
        .collect();
    assert!(
        whole.is_empty(),
        "sent whole after the first round trips: {whole:?}"
    );

    // A TCP flow under min-rtt is re-sent if a working link loses it: its frames say so,
    // the compact ones too (DATA_COMPACT_RECOVERED), so that the receiver waits for a gap.
    assert!(frames.iter().all(|s| s.recovered), "every frame recovered");
    let (templates_sent, compact_sent, saved, _, _) = counters(&pair, Side::Client);
    assert_eq!(templates_sent, templates.len() as u64);
    assert_eq!(compact_sent, compact.len() as u64);
    assert!(
        compact_sent >= 350,
        "{compact_sent} compact of {STREAM_PACKETS}"
    );
    // Each compact frame is shorter than the DATA frame of its packet (the packet's length
    // is the tag's segment's); the savings add up to the counter.
    let by_tag: BTreeMap<u32, &Vec<u8>> = sent.iter().map(|p| (tag(p), p)).collect();
    let mut want_saved = 0;
    for s in &compact {
        let packet = by_tag[&s.tag];
        let full = wire::data_frame_len(packet.len());
        assert!(
            s.frame_len + 20 < full,
            "packet {:#x}: compact frame {} bytes, DATA {full}",
            s.tag,
            s.frame_len
        );
        want_saved += (full - s.frame_len) as u64;
    }
    assert_eq!(saved, want_saved, "compact_saved_bytes");
    let (_, _, _, templates_received, undecodable) = counters(&pair, Side::Server);
    assert!(templates_received >= 1);
    assert_eq!(undecodable, 0, "compact_undecodable");
    // The server sent no data: it compressed nothing.
    assert_eq!(counters(&pair, Side::Server).0, 0);
    assert_eq!(counters(&pair, Side::Client).3, 0);

    // The same stream with compression off: each compact packet's datagram was shorter
    // than its DATA datagram there.
    let (off, off_sent) = tcp_stream(
        PairBuilder::new()
            .link(LinkSpec::new(ms(10)).rate_bps(20e6))
            .link(LinkSpec::new(ms(15)).rate_bps(20e6)),
    );
    assert_delivered_exactly(&off, Side::Server, &off_sent);
    let mut off_len: BTreeMap<u32, usize> = BTreeMap::new();
    for s in sent_by(&off, Side::Client) {
        assert!(s.is_full());
        off_len.entry(s.tag).or_insert(s.datagram_len);
    }
    let mut on_total = 0;
    let mut off_total = 0;
    for s in &compact {
        let o = off_len[&s.tag];
        assert!(
            s.datagram_len < o,
            "packet {:#x}: {} bytes compact, {o} as DATA",
            s.tag,
            s.datagram_len
        );
        on_total += s.datagram_len;
        off_total += o;
    }
    assert!(
        off_total - on_total >= 30 * compact.len(),
        "{} bytes saved over {} packets",
        off_total - on_total,
        compact.len()
    );
}

// ---- 2. A lost template ----

/// Drops the first datagram the client sends that carries a DATA_TEMPLATE frame.
fn drop_first_template() -> super::harness::DropFn {
    let mut done = false;
    Box::new(move |d| {
        if done || d.from != Side::Client {
            return false;
        }
        let lost = seen(&[TxRecord {
            time: d.time,
            from: d.from,
            link: d.link,
            carries_data: d.data_index.is_some(),
            bytes: d.bytes.to_vec(),
        }])
        .iter()
        .any(Seen::is_template);
        done = lost;
        lost
    })
}

#[test]
fn template_datagram_lost_flow_goes_whole_until_a_new_generation_is_acknowledged() {
    let min_rtt = compressing_pair().config(|c| c.default_policy = crate::PolicyKind::MinRtt);
    let (pair, sent) = tcp_stream(min_rtt.drop_fn(drop_first_template()));
    assert_delivered_exactly(&pair, Side::Server, &sent);

    let lost = dropped_by(&pair, Side::Client);
    assert_eq!(lost.len(), 1, "{lost:?}");
    let DataForm::Template {
        slot,
        generation: g1,
        ..
    } = lost[0].form
    else {
        panic!("the template was dropped: {:?}", lost[0]);
    };
    let frames = sent_by(&pair, Side::Client);
    // A later packet of the flow carries the next generation (the lost packet itself may
    // come again as its own generation's template: a re-sent copy keeps both).
    let renewed: Vec<&Seen> = frames
        .iter()
        .filter(|s| s.tag != lost[0].tag)
        .filter(|s| matches!(s.form, DataForm::Template { .. }))
        .collect();
    assert!(!renewed.is_empty(), "no new template");
    let DataForm::Template {
        slot: slot2,
        generation: g2,
        ..
    } = renewed[0].form
    else {
        unreachable!()
    };
    assert_eq!(slot2, slot, "the flow keeps its slot");
    assert_eq!(g2, g1.wrapping_add(1), "the next generation");
    assert!(renewed[0].time > lost[0].time);
    // Until then, and until it was acknowledged, the flow went whole.
    let compact: Vec<&Seen> = frames.iter().filter(|s| s.is_compact()).collect();
    let first_compact = compact.first().expect("the flow went compact in the end");
    assert!(
        first_compact.time >= renewed[0].time + ms(20),
        "compact at {:?}, the new template sent at {:?}",
        first_compact.time,
        renewed[0].time
    );
    let whole_meanwhile = frames
        .iter()
        .filter(|s| s.time > lost[0].time && s.time < first_compact.time)
        .filter(|s| s.is_full())
        .count();
    assert!(
        whole_meanwhile >= 10,
        "{whole_meanwhile} packets went whole"
    );
    // Every compact frame is against the new generation, none against the lost one.
    for s in &compact {
        assert_eq!(
            s.form,
            DataForm::Compact {
                slot,
                generation: g2 as u8 & 0x3f
            },
            "packet {:#x}",
            s.tag
        );
    }
    assert!(compact.len() >= 300, "{} compact", compact.len());
    // The lost packet came again (TCP under min-rtt: re-sent on the other link).
    assert!(
        frames
            .iter()
            .filter(|s| s.tag == lost[0].tag)
            .any(|s| s.link != lost[0].link),
        "the lost segment was re-sent on link 1"
    );
    let (templates_sent, ..) = counters(&pair, Side::Client);
    assert!(templates_sent >= 2, "{templates_sent}");
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

// ---- 3. Compact packets in flight on a link that dies ----

const DIE_AT: Instant = at_ms(400);

/// Tags of the compact frames the client sent on link 0 during `[t0, t1)`.
fn compact_on_link0(frames: &[Seen], t0: Instant, t1: Instant) -> BTreeSet<u32> {
    frames
        .iter()
        .filter(|s| s.link == LinkId(0) && s.time >= t0 && s.time < t1 && s.is_compact())
        .map(|s| s.tag)
        .collect()
}

/// Link 0 (10 ms) and link 1 (20 ms), no rate limit, compression on; a stream on link 0.
fn dying_link_pair(drop: super::harness::DropFn) -> (Pair, Vec<Vec<u8>>) {
    let mut pair = PairBuilder::new()
        .link(LinkSpec::new(ms(10)))
        .link(LinkSpec::new(ms(20)))
        .config(|c| c.header_compression = true)
        .drop_fn(drop)
        .build();
    let sent = send_all(
        &mut pair,
        Side::Client,
        segments(Conn::v4(2, 40100), 600, STREAM_LEN),
        STREAM_START,
        ms(1),
    );
    (pair, sent)
}

/// Link 0 goes silent 10 ms before it goes down: what left in the 5 ms before that is
/// lost, what left in the 5 ms before the silence is on the wire and still arrives.
#[test]
fn compact_packets_in_flight_on_a_link_that_goes_down_are_reinjected_and_delivered_once() {
    let silent_from = DIE_AT.saturating_sub(ms(5));
    let (mut pair, sent) = dying_link_pair(blackhole(0, silent_from, Instant::MAX));
    pair.drive_until(DIE_AT);
    pair.link_change(0, LinkChange::Down);
    let reinjected: Vec<usize> = pair
        .events(Side::Client)
        .iter()
        .filter_map(|(_, e)| match e {
            Event::Reinjected {
                link: LinkId(0),
                cause: ReinjectCause::LinkDown,
                packets,
                ..
            } => Some(*packets),
            _ => None,
        })
        .collect();
    assert_eq!(reinjected.len(), 1, "{reinjected:?}");
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);

    let frames = sent_by(&pair, Side::Client);
    let lost = compact_on_link0(&frames, silent_from, DIE_AT);
    let on_wire = compact_on_link0(&frames, DIE_AT.saturating_sub(ms(10)), silent_from);
    assert!(lost.len() >= 3, "compact packets lost: {lost:?}");
    assert!(
        on_wire.len() >= 3,
        "compact packets still arriving: {on_wire:?}"
    );
    assert!(reinjected[0] >= lost.len() + on_wire.len());
    let again: Vec<&Seen> = frames
        .iter()
        .filter(|s| s.time >= DIE_AT && s.link == LinkId(1))
        .filter(|s| lost.contains(&s.tag) || on_wire.contains(&s.tag))
        .collect();
    let again_tags: BTreeSet<u32> = again.iter().map(|s| s.tag).collect();
    assert_eq!(
        again_tags,
        lost.union(&on_wire).copied().collect(),
        "each re-sent on link 1"
    );
    assert_eq!(again.len(), again_tags.len(), "each re-sent once");
    // Their template is still in its slot: they went compact again.
    assert!(again.iter().all(|s| s.is_compact()), "{again:?}");
    // The copies of what was on the wire arrived twice: dropped as duplicates.
    assert!(pair.server.stats().duplicate_data >= on_wire.len() as u64);
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

/// Link 0 goes silent both ways during [400 ms, 900 ms): its reinjection timer fires.
#[test]
fn compact_packets_on_a_silent_link_are_reinjected_at_its_timer_and_delivered_once() {
    let (mut pair, sent) = dying_link_pair(blackhole(0, DIE_AT, at_ms(900)));
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let timer: Vec<(Instant, usize)> = pair
        .events(Side::Client)
        .iter()
        .filter_map(|(t, e)| match e {
            Event::Reinjected {
                link: LinkId(0),
                cause: ReinjectCause::Timer,
                packets,
                ..
            } => Some((*t, *packets)),
            _ => None,
        })
        .collect();
    assert!(!timer.is_empty(), "the reinjection timer fired");
    let fired = timer[0].0;
    assert!(
        fired > DIE_AT && fired < DIE_AT + ms(100),
        "fired at {fired:?}"
    );
    let frames = sent_by(&pair, Side::Client);
    let lost: BTreeSet<u32> = dropped_by(&pair, Side::Client)
        .iter()
        .filter(|s| s.is_compact() && s.time < fired)
        .map(|s| s.tag)
        .collect();
    assert!(lost.len() >= 3, "compact packets lost: {lost:?}");
    for t in &lost {
        let resent: Vec<&Seen> = frames
            .iter()
            .filter(|s| s.tag == *t && s.time >= fired)
            .collect();
        assert_eq!(resent.len(), 1, "packet {t:#x} re-sent once: {resent:?}");
        assert_eq!(resent[0].link, LinkId(1));
    }
    let st = pair.client.stats();
    assert!(st.reinjected_timer >= lost.len() as u64);
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

/// The template itself is in flight on link 0 when it goes down: its copy on link 1
/// keeps its slot and generation, and its acknowledgement makes the flow compact; no
/// new generation is needed.
#[test]
fn template_in_flight_on_a_link_that_goes_down_is_resent_as_itself_and_confirms() {
    let mut pair = PairBuilder::new()
        .link(LinkSpec::new(ms(10)))
        .link(LinkSpec::new(ms(20)))
        .config(|c| c.header_compression = true)
        .drop_fn(blackhole(0, STREAM_START, Instant::MAX))
        .build();
    let sent = send_all(
        &mut pair,
        Side::Client,
        segments(Conn::v4(3, 40200), 100, STREAM_LEN),
        STREAM_START,
        ms(2),
    );
    pair.drive_until(STREAM_START + ms(1));
    let first = sent_by(&pair, Side::Client);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].link, LinkId(0));
    let DataForm::Template {
        slot, generation, ..
    } = first[0].form
    else {
        panic!("the first segment is the template: {:?}", first[0]);
    };
    pair.link_change(0, LinkChange::Down);
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    let copy: Vec<&Seen> = frames
        .iter()
        .filter(|s| s.tag == first[0].tag && s.link == LinkId(1))
        .collect();
    assert_eq!(copy.len(), 1);
    assert_eq!(copy[0].form, first[0].form, "same slot and generation");
    let templates = frames.iter().filter(|s| s.is_template()).count();
    assert_eq!(templates, 2, "the original and its copy, nothing more");
    let compact: Vec<&Seen> = frames.iter().filter(|s| s.is_compact()).collect();
    assert!(compact.len() >= 70, "{} compact", compact.len());
    assert!(compact.iter().all(|s| s.form
        == DataForm::Compact {
            slot,
            generation: generation as u8
        }));
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

// ---- 4. Compression off ----

#[test]
fn compression_off_pair_sends_no_template_or_compact_frame_and_counts_nothing() {
    assert!(
        Config::new(Role::Client).header_compression
            && Config::new(Role::Server).header_compression,
        "on by default"
    );
    let mut pair = compressing_pair()
        .config(|c| c.header_compression = false)
        .build();
    let up = send_all(
        &mut pair,
        Side::Client,
        segments(Conn::v4(4, 40300), 200, STREAM_LEN),
        STREAM_START,
        ms(1),
    );
    let down = send_all(
        &mut pair,
        Side::Server,
        segments(Conn::v4(5, 443), 200, 600),
        STREAM_START,
        ms(1),
    );
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &up);
    assert_delivered_exactly(&pair, Side::Client, &down);
    let frames = seen(&pair.transmits);
    assert!(frames.len() >= 400);
    let other: Vec<&Seen> = frames.iter().filter(|s| !s.is_full()).collect();
    assert!(other.is_empty(), "{other:?}");
    for side in [Side::Client, Side::Server] {
        assert_eq!(counters(&pair, side), (0, 0, 0, 0, 0), "{side:?}");
    }
}

// ---- More ----

/// The IPv4 header checksum is left out of the compact bodies and the receiver writes
/// it; a segment whose checksum is wrong goes whole and comes out as it went in.
#[test]
fn ipv4_template_leaves_the_checksum_to_the_receiver_and_a_bad_one_goes_whole() {
    let mut pair = compressing_pair().build();
    let conn = Conn::v4(6, 40400);
    let bad_at = 200;
    let packets: Vec<Vec<u8>> = (0..300)
        .map(|i| {
            let mut p = conn.segment(i, STREAM_LEN);
            if i == bad_at {
                p[10] ^= 0x5a;
            }
            p
        })
        .collect();
    let sent = send_all(&mut pair, Side::Client, packets, STREAM_START, ms(1));
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    for d in &pair.delivered[Side::Server.idx()] {
        assert_eq!(
            ipv4_checksum_ok(&d.bytes),
            tag(&d.bytes) & 0xff_ffff != bad_at,
            "packet {:#x}",
            tag(&d.bytes)
        );
    }
    let frames = sent_by(&pair, Side::Client);
    let compact: Vec<&Seen> = frames.iter().filter(|s| s.is_compact()).collect();
    assert!(compact.len() >= 200);
    for s in &compact {
        // Bitmap bits of bytes 10 and 11: bits 5 and 4 of the second byte.
        assert_eq!(
            s.payload[1] & 0x30,
            0,
            "packet {:#x}: its checksum bytes were sent",
            s.tag
        );
        // (The checksum changes with the identification in every packet: were it sent,
        // its bits would be set.)
    }
    let bad: Vec<&Seen> = frames
        .iter()
        .filter(|s| s.tag == conn.tag(bad_at))
        .collect();
    assert_eq!(bad.len(), 1);
    assert!(bad[0].is_full(), "{:?}", bad[0].form);
    assert!(
        frames
            .iter()
            .any(|s| s.tag == conn.tag(bad_at + 1) && s.is_compact()),
        "the next one goes compact again"
    );
    assert_eq!(counters(&pair, Side::Server).4, 0);
}

/// Both directions compress at once, each against its own templates (the server's
/// slots are not the client's), and a download and an upload arrive exact.
#[test]
fn bidirectional_streams_each_direction_compresses_and_arrives_exact() {
    let mut pair = compressing_pair().build();
    let up = send_all(
        &mut pair,
        Side::Client,
        segments(Conn::v4(7, 40500), 300, 700),
        STREAM_START,
        ms(1),
    );
    let down = send_all(
        &mut pair,
        Side::Server,
        segments(Conn::v6(8, 443), 300, 1200),
        STREAM_START + Duration::from_micros(500),
        ms(1),
    );
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &up);
    assert_delivered_exactly(&pair, Side::Client, &down);
    for (side, peer) in [(Side::Client, Side::Server), (Side::Server, Side::Client)] {
        let (t, c, saved, _, _) = counters(&pair, side);
        assert!(t >= 1 && c >= 250 && saved > 0, "{side:?}: {t} {c} {saved}");
        let (_, _, _, received, undecodable) = counters(&pair, peer);
        assert!(received >= 1, "{peer:?}");
        assert_eq!(undecodable, 0, "{peer:?}");
    }
    // The server's IPv6 template: 40 + 32 bytes, no IPv4 checksum.
    let server_templates: Vec<DataForm> = sent_by(&pair, Side::Server)
        .iter()
        .filter(|s| s.is_template())
        .map(|s| s.form)
        .collect();
    assert!(
        matches!(
            server_templates[0],
            DataForm::Template {
                hlen: 72,
                ipv4_checksum: false,
                ..
            }
        ),
        "{server_templates:?}"
    );
}

/// Three flows interleaved (two TCP connections, one UDP flow): each its own slot and
/// template, each delivered exact.
#[test]
fn interleaved_flows_get_their_own_slots_and_each_arrives_exact() {
    let mut pair = compressing_pair().build();
    let a = Conn::v4(9, 40600);
    let b = Conn::v4(10, 40601);
    let udp = FlowSpec::bulk(5555, 600);
    let mut sent = Vec::new();
    for i in 0..200u32 {
        let t = STREAM_START + Duration::from_micros(1500 * u64::from(i));
        for (k, p) in [a.segment(i, 900), b.segment(i, 500)]
            .into_iter()
            .enumerate()
        {
            pair.send_at(
                t + Duration::from_micros(500 * k as u64),
                Side::Client,
                p.clone(),
            );
            sent.push(p);
        }
        // The harness's UDP packet, tagged at its end like the others (group 11).
        let mut u = udp.packet(i);
        let n = u.len();
        u[n - 4..].copy_from_slice(&((11 << 24) | i).to_be_bytes());
        pair.send_at(t + ms(1), Side::Client, u.clone());
        sent.push(u);
    }
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    let mut slots: BTreeMap<u32, BTreeSet<u16>> = BTreeMap::new();
    for s in &frames {
        let slot = match s.form {
            DataForm::Template { slot, .. } | DataForm::Compact { slot, .. } => slot,
            DataForm::Full => continue,
        };
        slots.entry(s.tag >> 24).or_default().insert(slot);
    }
    assert_eq!(slots.len(), 3, "{slots:?}");
    let all: BTreeSet<u16> = slots.values().flatten().copied().collect();
    assert_eq!(all.len(), 3, "one slot per flow: {slots:?}");
    for (g, s) in &slots {
        assert_eq!(s.len(), 1, "flow {g} kept its slot: {s:?}");
        let compact = frames
            .iter()
            .filter(|f| f.tag >> 24 == *g && f.is_compact())
            .count();
        assert!(compact >= 150, "flow {g}: {compact} compact");
    }
    // A UDP flow is left to its transport: not recovered, compact or not.
    assert!(
        frames
            .iter()
            .filter(|s| s.tag >> 24 == 11)
            .all(|s| !s.recovered)
    );
    assert!(
        frames
            .iter()
            .filter(|s| s.tag >> 24 != 11)
            .all(|s| s.recovered)
    );
    // The UDP template: IPv4 and UDP headers.
    assert!(
        frames
            .iter()
            .any(|s| s.tag >> 24 == 11 && matches!(s.form, DataForm::Template { hlen: 28, .. }))
    );
    assert_eq!(counters(&pair, Side::Server).4, 0);
}

/// A connection's SYN is no template; its first data segment is. Segments of every size
/// (shorter than the template, a byte of data, full) and its FIN all come out exact.
#[test]
fn new_connection_syn_goes_whole_and_segments_of_any_size_arrive_exact() {
    let mut pair = compressing_pair().build();
    let conn = Conn::v4(12, 40700);
    let mut packets = vec![conn.packet(0, HDR4 + 4, TCP_SYN)];
    let sizes = [1400, 60, HDR4 + 5, 1000, 300, 1400, 1400, 90];
    for i in 1..240u32 {
        packets.push(conn.segment(i, sizes[i as usize % sizes.len()]));
    }
    // Shorter than the template: no TCP options (a 40-byte header, and the tag).
    let mut short = conn.packet(240, HDR4 + 4, TCP_ACK);
    short.drain(40..HDR4);
    let n = short.len() as u16;
    short[2..4].copy_from_slice(&n.to_be_bytes());
    short[32] = 5 << 4;
    short[10..12].fill(0);
    let c = !(sum16(&short[..20], 0) as u16);
    short[10..12].copy_from_slice(&c.to_be_bytes());
    packets.push(short);
    packets.push(conn.packet(241, 200, TCP_FIN_ACK));
    let sent = send_all(&mut pair, Side::Client, packets, STREAM_START, ms(1));
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    assert!(frames[0].is_full(), "the SYN: {:?}", frames[0].form);
    assert!(
        frames[1].is_template(),
        "the first data segment: {:?}",
        frames[1].form
    );
    let short = frames
        .iter()
        .find(|s| s.tag == conn.tag(240))
        .expect("sent");
    assert!(short.is_full(), "shorter than its template: whole");
    let compact_sizes: BTreeSet<usize> = frames
        .iter()
        .filter(|s| s.is_compact())
        .map(|s| sent.iter().find(|p| tag(p) == s.tag).expect("sent").len())
        .collect();
    assert!(
        compact_sizes.len() >= 6,
        "segments of many sizes went compact: {compact_sizes:?}"
    );
    assert!(
        frames
            .iter()
            .any(|s| s.tag == conn.tag(241) && s.is_compact()),
        "the FIN, once there is a template"
    );
    assert_eq!(counters(&pair, Side::Server).4, 0);
}

/// With the links' datagrams bounded, a segment of the tunnel's MTU fits a DATA frame but
/// not the 6 bytes longer DATA_TEMPLATE: a stream of only such segments is never
/// compressed (its template waits for a smaller packet, §3.9); one smaller segment
/// becomes the template and the full-size segments after it go compact.
#[test]
fn tunnel_mtu_stream_waits_for_a_smaller_segment_to_be_its_template() {
    let max = 1400;
    let link = |one_way| {
        let mut l = LinkSpec::new(one_way).rate_bps(20e6);
        l.config = LinkConfig {
            max_datagram: Some(max),
            ..LinkConfig::default()
        };
        l
    };
    let mut pair = PairBuilder::new()
        .link(link(ms(10)))
        .link(link(ms(15)))
        .config(|c| c.header_compression = true)
        .build();
    let mtu = max - wire::DATA_OVERHEAD;
    let conn = Conn::v4(13, 40800);
    let small_at = 150;
    let packets: Vec<Vec<u8>> = (0..300)
        .map(|i| conn.segment(i, if i == small_at { 500 } else { mtu }))
        .collect();
    let sent = send_all(&mut pair, Side::Client, packets, STREAM_START, ms(1));
    pair.drive_bounded();
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    assert!(
        frames.iter().all(|s| s.datagram_len <= max),
        "nothing too big"
    );
    let templates: Vec<&Seen> = frames.iter().filter(|s| s.is_template()).collect();
    assert_eq!(templates.len(), 1, "{templates:?}");
    assert_eq!(templates[0].tag, conn.tag(small_at));
    let before = frames
        .iter()
        .filter(|s| s.tag & 0xff_ffff < small_at)
        .filter(|s| !s.is_full())
        .count();
    assert_eq!(before, 0, "nothing compressed before the smaller segment");
    let compact = frames.iter().filter(|s| s.is_compact()).count();
    assert!(compact >= 100, "{compact} compact after it");
    assert_eq!(counters(&pair, Side::Server).4, 0);
}

/// More flows than template slots (1024): the flows beyond them go whole, every packet
/// arrives exact.
#[test]
fn more_flows_than_slots_extra_flows_go_whole_and_all_arrive_exact() {
    let mut pair = compressing_pair().build();
    let flows = wire::MAX_TEMPLATE_SLOTS as u32 + 16;
    let mut sent = Vec::new();
    // Each flow: three packets, 200 ms apart (its template acknowledged meanwhile).
    for round in 0..3u32 {
        for f in 0..flows {
            let conn = Conn::v4(20 + (f / 256) as u8, 20000 + f as u16);
            let i = (round << 8) | (f % 256);
            let p = conn.segment(i, 120);
            let t = STREAM_START + ms(200) * round + Duration::from_micros(20 * u64::from(f));
            pair.send_at(t, Side::Client, p.clone());
            sent.push(p);
        }
    }
    pair.drive_bounded();
    assert_delivered_exactly_by_port(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    let templates = frames.iter().filter(|s| s.is_template()).count();
    assert_eq!(templates, wire::MAX_TEMPLATE_SLOTS, "one per slot");
    let slots: BTreeSet<u16> = frames
        .iter()
        .filter_map(|s| match s.form {
            DataForm::Template { slot, .. } | DataForm::Compact { slot, .. } => Some(slot),
            DataForm::Full => None,
        })
        .collect();
    assert_eq!(slots.len(), wire::MAX_TEMPLATE_SLOTS);
    assert!(frames.iter().filter(|s| s.is_compact()).count() >= 1000);
    assert_eq!(counters(&pair, Side::Server).4, 0);
}

/// As [`assert_delivered_exactly`], flows told apart by their source port (the tags of
/// [`more_flows_than_slots_extra_flows_go_whole_and_all_arrive_exact`] repeat per group).
fn assert_delivered_exactly_by_port(pair: &Pair, side: Side, sent: &[Vec<u8>]) {
    let port = |p: &[u8]| u16::from_be_bytes([p[20], p[21]]);
    let mut want: BTreeMap<u16, Vec<&[u8]>> = BTreeMap::new();
    for p in sent {
        want.entry(port(p)).or_default().push(p);
    }
    let mut got: BTreeMap<u16, Vec<&[u8]>> = BTreeMap::new();
    for d in &pair.delivered[side.idx()] {
        got.entry(port(&d.bytes)).or_default().push(&d.bytes);
    }
    assert_eq!(got.len(), want.len(), "flows delivered");
    for (p, w) in &want {
        assert_eq!(got.get(p), Some(w), "flow from port {p}");
    }
}

/// A TCP flow whose datagrams link 0 loses now and then (every tenth): its lost compact
/// packets come again on link 1 (4.4), compact, and every packet arrives exact.
#[test]
fn compact_packets_lost_on_a_working_link_come_again_by_the_other_and_arrive_exact() {
    let min_rtt = compressing_pair().config(|c| c.default_policy = crate::PolicyKind::MinRtt);
    let (pair, sent) = tcp_stream(min_rtt.drop_fn(Box::new(|d| {
        d.from == Side::Client && d.link == LinkId(0) && d.data_index.is_some_and(|k| k % 10 == 3)
    })));
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let lost: Vec<Seen> = dropped_by(&pair, Side::Client)
        .into_iter()
        .filter(Seen::is_compact)
        .collect();
    assert!(lost.len() >= 15, "{} compact packets lost", lost.len());
    let frames = sent_by(&pair, Side::Client);
    for l in &lost {
        let again: Vec<&Seen> = frames
            .iter()
            .filter(|s| s.tag == l.tag && s.time > l.time)
            .collect();
        assert_eq!(
            again.len(),
            1,
            "packet {:#x} re-sent once: {again:?}",
            l.tag
        );
        assert_eq!(again[0].link, LinkId(1));
        assert_eq!(again[0].form, l.form, "compact against the same template");
        assert!(again[0].recovered);
    }
    assert!(pair.client.stats().reinjected_lost >= lost.len() as u64);
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

/// A redundant flow: each packet goes on both links, its template too (one generation),
/// then compact on both; the receiver keeps the first copy of each.
#[test]
fn redundant_flow_copies_go_compact_on_both_links_and_arrive_once() {
    let (pair, sent) =
        tcp_stream(compressing_pair().config(|c| c.default_policy = crate::PolicyKind::Redundant));
    assert_delivered_exactly(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    let templates: BTreeSet<(u32, LinkId)> = frames
        .iter()
        .filter(|s| s.is_template())
        .map(|s| (s.tag, s.link))
        .collect();
    assert_eq!(
        templates,
        [(tag(&sent[0]), LinkId(0)), (tag(&sent[0]), LinkId(1))].into(),
        "the template, on both links"
    );
    let mut compact_links: BTreeMap<u32, BTreeSet<LinkId>> = BTreeMap::new();
    for s in frames.iter().filter(|s| s.is_compact()) {
        compact_links.entry(s.tag).or_default().insert(s.link);
    }
    let both = compact_links.values().filter(|l| l.len() == 2).count();
    assert!(both >= 300, "{both} packets compact on both links");
    assert!(pair.server.stats().duplicate_data >= 300);
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}

/// Every slot taken by a flow that then falls silent; 31 s later a new flow is given an
/// idle slot under its next generation, the receiver replaces the old flow's template,
/// and the new flow's compact packets come out as the new flow's. An old flow that comes
/// back finds its slot gone and takes another idle one.
#[test]
fn all_slots_idle_a_new_flow_takes_one_with_a_new_generation_and_arrives_exact() {
    let mut pair = compressing_pair().build();
    let slots = wire::MAX_TEMPLATE_SLOTS as u32;
    let old = |f: u32| Conn::v4(40 + (f / 256) as u8, 10000 + f as u16);
    let mut sent = Vec::new();
    for f in 0..slots {
        let p = old(f).segment(f % 256, 100);
        pair.send_at(
            STREAM_START + Duration::from_micros(20 * u64::from(f)),
            Side::Client,
            p.clone(),
        );
        sent.push(p);
    }
    pair.drive_bounded();
    let firsts = sent_by(&pair, Side::Client);
    assert_eq!(
        firsts.iter().filter(|s| s.is_template()).count(),
        slots as usize
    );
    let late = STREAM_START + Duration::from_secs(31);
    let new = Conn::v4(50, 30000);
    sent.extend(send_all(
        &mut pair,
        Side::Client,
        segments(new, 100, 400),
        late,
        ms(1),
    ));
    // Flow 0 (slot 0's) comes back after the new flow took its slot.
    let back = late + ms(150);
    let again: Vec<Vec<u8>> = (1..101).map(|i| old(0).segment(i << 8, 300)).collect();
    sent.extend(send_all(&mut pair, Side::Client, again, back, ms(1)));
    pair.drive_bounded();
    assert_delivered_exactly_by_port(&pair, Side::Server, &sent);
    let frames = sent_by(&pair, Side::Client);
    let form_of = |tag: u32| {
        frames
            .iter()
            .find(|s| s.tag == tag)
            .map(|s| s.form)
            .expect("sent")
    };
    let slot0 = match form_of(old(0).tag(0)) {
        DataForm::Template {
            slot, generation, ..
        } => (slot, generation),
        f => panic!("{f:?}"),
    };
    let DataForm::Template {
        slot, generation, ..
    } = form_of(new.tag(0))
    else {
        panic!("the new flow's first packet is a template");
    };
    assert_eq!(slot, slot0.0, "the first idle slot");
    assert_eq!(
        generation,
        slot0.1.wrapping_add(1),
        "the slot's next generation"
    );
    let compact = |conn: Conn| {
        frames
            .iter()
            .filter(|s| s.tag >> 24 == u32::from(conn.id) && s.is_compact())
            .count()
    };
    assert!(
        compact(new) >= 60,
        "the new flow went compact: {}",
        compact(new)
    );
    let DataForm::Template {
        slot: back_slot, ..
    } = form_of(old(0).tag(1 << 8))
    else {
        panic!(
            "flow 0 is given a slot again: {:?}",
            form_of(old(0).tag(1 << 8))
        );
    };
    assert_ne!(back_slot, slot0.0);
    assert_eq!(counters(&pair, Side::Server).4, 0, "compact_undecodable");
}
