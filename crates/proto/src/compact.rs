//! Inner header compression (`docs/protocol.md` §3.9, §3.10).
//!
//! A full-size inner TCP packet carries 40-60 bytes of IP and TCP headers, most of which
//! are the same in every packet of its flow (addresses, ports, protocol, options' layout).
//! On a link of 1500 bytes those headers, with the tunnel's own framing, are what keeps
//! the tunnel's goodput under the link's rate: a sender here writes each packet as a
//! difference from a *template*, the headers of an earlier packet of its flow, that the
//! receiver holds.
//!
//! - The sender gives a flow a template slot (at most [`wire::MAX_TEMPLATE_SLOTS`] per
//!   direction) and sends one of its packets as DATA_TEMPLATE: the packet whole, and its
//!   first `hlen` bytes (its IP and transport headers) become the slot's template, under a
//!   new generation. The receiver keeps, per slot, the template of the newest generation
//!   it has seen (serial-number order: a late older one never replaces a newer one).
//! - Only once the datagram that carried the template is acknowledged does the sender
//!   write the flow's packets as DATA_COMPACT, against that generation: the receiver has
//!   it then, whatever the links reordered. While it waits, the flow's packets go whole;
//!   a template declared lost, or unanswered for [`TEMPLATE_RETRY`], is sent again, from
//!   the next packet, as a new generation.
//! - A compact body is a bitmap of the template's bytes that differ, those bytes, and the
//!   rest of the packet after the template's length. It is a byte-wise difference: it
//!   assumes nothing of the protocol, and a packet unlike its template (another
//!   connection sharing a flow id, a SYN) still comes out exact, only less compact. A
//!   packet whose compact form would not be shorter goes whole.
//! - A slot whose flow has sent nothing for [`SLOT_IDLE`] may be given to another flow,
//!   with a new generation. A compact packet of the old flow could not be in flight so long;
//!   should one come, its generation byte no longer matches and it is dropped, counted,
//!   rather than written out with another flow's headers.
//!
//! Nothing here reads a clock: `now` comes from the endpoint.

use core::time::Duration;
use std::collections::HashMap;

use crate::ids::FlowId;
use crate::time::Instant;
use crate::wire;

/// A template unacknowledged this long is sent again under a new generation (its
/// datagram may have left the sender's records without an acknowledgement or a loss:
/// a reinjection given up).
pub(crate) const TEMPLATE_RETRY: Duration = Duration::from_secs(2);

/// A slot whose flow sent nothing for this long may be given to another flow.
pub(crate) const SLOT_IDLE: Duration = Duration::from_secs(30);

/// How often the sender looks for an idle slot again after finding none.
const FULL_RESCAN: Duration = Duration::from_secs(1);

/// The template length for `packet`: its IP header and, for TCP and UDP, the transport
/// header, at most [`wire::MAX_TEMPLATE_LEN`]. `None` for what is not a well-formed IP
/// packet or is a TCP packet with SYN, FIN or RST (a connection's first and last packets
/// are shaped unlike the rest: the template comes from a later one).
pub(crate) fn template_len(packet: &[u8]) -> Option<usize> {
    let (ip_len, proto) = match packet.first()? >> 4 {
        4 => {
            let ihl = usize::from(packet[0] & 0x0f) * 4;
            let frag = u16::from_be_bytes([*packet.get(6)?, *packet.get(7)?]) & 0x3fff;
            if ihl < 20 || frag != 0 {
                return None;
            }
            (ihl, *packet.get(9)?)
        }
        6 => (40, *packet.get(6)?),
        _ => return None,
    };
    let len = match proto {
        6 => {
            let doff = usize::from(packet.get(ip_len + 12)? >> 4) * 4;
            let flags = *packet.get(ip_len + 13)?;
            if doff < 20 || flags & 0x07 != 0 {
                // SYN, FIN or RST.
                return None;
            }
            ip_len + doff
        }
        17 => ip_len + 8,
        _ => ip_len,
    };
    (len <= packet.len()).then_some(len.min(wire::MAX_TEMPLATE_LEN))
}

/// Bytes of the bitmap for a template of `hlen` bytes.
const fn bitmap_len(hlen: usize) -> usize {
    hlen.div_ceil(8)
}

/// Where an IPv4 header keeps its checksum.
const IPV4_CHECKSUM: core::ops::Range<usize> = 10..12;

/// A template's bytes, kept inline (a slot's state and its template in one place: a
/// sender with a thousand flows touches one slot per packet, not two allocations).
#[derive(Clone, Copy, Debug)]
struct Bytes {
    bytes: [u8; wire::MAX_TEMPLATE_LEN],
    len: u8,
}

impl Bytes {
    const EMPTY: Self = Self {
        bytes: [0; wire::MAX_TEMPLATE_LEN],
        len: 0,
    };

    /// `src` (at most [`wire::MAX_TEMPLATE_LEN`] bytes), its IPv4 checksum zeroed if
    /// `ipv4_checksum`.
    fn new(src: &[u8], ipv4_checksum: bool) -> Self {
        let mut b = Self::EMPTY;
        let n = src.len().min(wire::MAX_TEMPLATE_LEN);
        b.bytes[..n].copy_from_slice(&src[..n]);
        b.len = n as u8;
        if ipv4_checksum && n >= IPV4_CHECKSUM.end {
            b.bytes[IPV4_CHECKSUM].fill(0);
        }
        b
    }

    fn get(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The IPv4 header checksum of `header` (RFC 791): with the checksum field zeroed, the
/// value to write there; with it filled in, 0 if it is right.
fn ipv4_header_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c.get(1).copied().unwrap_or(0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether `packet` is IPv4 with a header whose checksum is right: its template may then
/// leave the checksum to the receiver (§3.9).
fn ipv4_checksum_ok(packet: &[u8]) -> bool {
    let ihl = usize::from(packet.first().map_or(0, |b| b & 0x0f)) * 4;
    packet.first().is_some_and(|b| b >> 4 == 4)
        && ihl >= 20
        && packet.len() >= ihl
        && ipv4_header_checksum(&packet[..ihl]) == 0
}

/// Writes into `head` (cleared first) the head of `packet`'s compact body against
/// `template` (§3.10): the bitmap of the bytes that differ (bit 7 of the first byte is
/// byte 0), then those bytes in order; the body is the head and then the packet's bytes
/// after the template's length. With `ipv4_checksum` the packet's checksum field counts as
/// zero, as it is in the template. False, and `head` empty, if the packet is shorter than
/// the template.
pub(crate) fn encode_head(
    template: &[u8],
    packet: &[u8],
    ipv4_checksum: bool,
    head: &mut Vec<u8>,
) -> bool {
    head.clear();
    let h = template.len();
    let Some(p) = packet.get(..h) else {
        return false;
    };
    let mut cur = [0u8; wire::MAX_TEMPLATE_LEN];
    let cur = &mut cur[..h];
    cur.copy_from_slice(p);
    if ipv4_checksum && h >= IPV4_CHECKSUM.end {
        cur[IPV4_CHECKSUM].fill(0);
    }
    let mut bitmap = [0u8; wire::MAX_TEMPLATE_LEN / 8];
    let mut diffs = [0u8; wire::MAX_TEMPLATE_LEN];
    let mut n = 0;
    // Eight bytes at a time: most of a header's words are the template's.
    for (k, (a, t)) in cur.chunks(8).zip(template.chunks(8)).enumerate() {
        if a == t {
            continue;
        }
        for (j, (x, y)) in a.iter().zip(t).enumerate() {
            if x != y {
                bitmap[k] |= 0x80 >> j;
                diffs[n] = *x;
                n += 1;
            }
        }
    }
    head.extend_from_slice(&bitmap[..bitmap_len(h)]);
    head.extend_from_slice(&diffs[..n]);
    true
}

/// Why a compact body could not be expanded. The receiver drops the packet and counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpandError {
    /// No template in the slot, or one of another generation.
    NoTemplate,
    /// The body is shorter than its bitmap says, sets bits past the template, or (a
    /// template that leaves the IPv4 checksum to the receiver) is no IPv4 packet.
    Malformed,
}

/// Writes the packet that `body` encodes against `template` into `out` (cleared first);
/// with `ipv4_checksum`, computes its IPv4 header checksum.
pub(crate) fn decode(
    template: &[u8],
    body: &[u8],
    ipv4_checksum: bool,
    out: &mut Vec<u8>,
) -> Result<(), ExpandError> {
    let h = template.len();
    let bm = bitmap_len(h);
    let bitmap = body.get(..bm).ok_or(ExpandError::Malformed)?;
    if !h.is_multiple_of(8) && bitmap[bm - 1] & (0xff >> (h % 8)) != 0 {
        return Err(ExpandError::Malformed);
    }
    let differ: usize = bitmap.iter().map(|b| b.count_ones() as usize).sum();
    let diffs = body.get(bm..bm + differ).ok_or(ExpandError::Malformed)?;
    out.clear();
    out.reserve(h + body.len() - bm - differ);
    let mut next = diffs.iter();
    for (bits, t) in bitmap.iter().zip(template.chunks(8)) {
        if *bits == 0 {
            out.extend_from_slice(t);
            continue;
        }
        for (j, t) in t.iter().enumerate() {
            if bits & (0x80 >> j) != 0 {
                out.push(*next.next().expect("one byte per bit, counted above"));
            } else {
                out.push(*t);
            }
        }
    }
    out.extend_from_slice(&body[bm + differ..]);
    if ipv4_checksum {
        let ihl = usize::from(out[0] & 0x0f) * 4;
        if out[0] >> 4 != 4 || ihl < 20 || out.len() < ihl {
            return Err(ExpandError::Malformed);
        }
        out[IPV4_CHECKSUM].fill(0);
        let c = ipv4_header_checksum(&out[..ihl]);
        out[IPV4_CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }
    Ok(())
}

/// Whether generation `a` is newer than `b` (serial-number arithmetic over 16 bits).
fn newer(a: u16, b: u16) -> bool {
    (a.wrapping_sub(b) as i16) > 0
}

/// What the sender knows of one slot's template at the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxState {
    /// The next packet of the flow that can be a template becomes one.
    NeedTemplate,
    /// A template of this generation is on its way.
    Pending { since: Instant },
    /// The receiver has the template of this generation.
    Confirmed,
}

#[derive(Clone, Debug)]
struct TxSlot {
    flow: FlowId,
    generation: u16,
    /// The template, its IPv4 checksum zeroed if `ipv4_checksum`.
    template: Bytes,
    ipv4_checksum: bool,
    state: TxState,
    last_used: Instant,
}

/// How a packet is to be sent: the form for its DATA frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxForm {
    /// Whole, as DATA.
    Full,
    /// Whole, and its first `hlen` bytes the template of `slot`, generation `generation`
    /// (with its IPv4 checksum left to the receiver if `ipv4_checksum`).
    Template {
        slot: u16,
        generation: u16,
        hlen: u8,
        ipv4_checksum: bool,
    },
    /// As a difference from the template of `slot`, generation `generation`.
    Compact { slot: u16, generation: u16 },
}

/// The sending side: slots, their flows and templates.
#[derive(Debug, Default)]
pub(crate) struct Compressor {
    slots: Vec<TxSlot>,
    by_flow: HashMap<FlowId, u16, foldhash::fast::FixedState>,
    /// Where the search for an idle slot resumes.
    cursor: usize,
    /// No idle slot was found; none is looked for again before this.
    full_until: Option<Instant>,
    /// The head of the compact body last prepared ([`encode_head`]), and the length of
    /// its template: the packet's bytes from there on follow it.
    head: Vec<u8>,
    head_skip: usize,
}

impl Compressor {
    /// The form for a packet of `flow`, bound now. `template_fits`: the chosen link
    /// carries the packet whole as DATA_TEMPLATE. A compact form's body is prepared
    /// ([`Self::body_len`], [`Self::write_body`]).
    pub(crate) fn form(
        &mut self,
        now: Instant,
        flow: FlowId,
        packet: &[u8],
        template_fits: bool,
    ) -> TxForm {
        let Some(i) = self.slot_of(now, flow) else {
            return TxForm::Full;
        };
        let s = &mut self.slots[i];
        s.last_used = now;
        if let TxState::Pending { since } = s.state
            && now - since >= TEMPLATE_RETRY
        {
            s.state = TxState::NeedTemplate;
        }
        match s.state {
            TxState::Confirmed => {
                if s.ipv4_checksum && !ipv4_checksum_ok(packet) {
                    return TxForm::Full;
                }
                if !encode_head(s.template.get(), packet, s.ipv4_checksum, &mut self.head) {
                    return TxForm::Full;
                }
                self.head_skip = usize::from(s.template.len);
                let body = self.head.len() + packet.len() - self.head_skip;
                if wire::DATA_COMPACT_HEADER_LEN + body < wire::data_frame_len(packet.len()) {
                    TxForm::Compact {
                        slot: i as u16,
                        generation: s.generation,
                    }
                } else {
                    TxForm::Full
                }
            }
            TxState::Pending { .. } => TxForm::Full,
            TxState::NeedTemplate => {
                let Some(hlen) = template_len(packet).filter(|_| template_fits) else {
                    return TxForm::Full;
                };
                s.generation = s.generation.wrapping_add(1);
                s.ipv4_checksum = ipv4_checksum_ok(packet);
                s.template = Bytes::new(&packet[..hlen], s.ipv4_checksum);
                s.state = TxState::Pending { since: now };
                TxForm::Template {
                    slot: i as u16,
                    generation: s.generation,
                    hlen: hlen as u8,
                    ipv4_checksum: s.ipv4_checksum,
                }
            }
        }
    }

    /// Prepares the compact body of `packet` against the template `generation` of
    /// `slot` (a packet sent compact before, sent again): false if the slot no longer
    /// holds that template (it is given to another flow only after [`SLOT_IDLE`]).
    pub(crate) fn prepare(&mut self, slot: u16, generation: u16, packet: &[u8]) -> bool {
        let Some(s) = self
            .slots
            .get(usize::from(slot))
            .filter(|s| s.generation == generation)
        else {
            return false;
        };
        self.head_skip = usize::from(s.template.len);
        encode_head(s.template.get(), packet, s.ipv4_checksum, &mut self.head)
    }

    /// The length of the prepared compact body of a `packet_len`-byte packet.
    pub(crate) fn body_len(&self, packet_len: usize) -> usize {
        self.head.len() + packet_len - self.head_skip
    }

    /// Appends the prepared compact body of `packet`.
    pub(crate) fn write_body(&self, packet: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&packet[self.head_skip..]);
    }

    /// The datagram that carried the template `generation` of `slot` was acknowledged.
    pub(crate) fn on_template_acked(&mut self, slot: u16, generation: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(slot))
            && s.generation == generation
            && matches!(s.state, TxState::Pending { .. })
        {
            s.state = TxState::Confirmed;
        }
    }

    /// The datagram that carried the template `generation` of `slot` was declared lost.
    pub(crate) fn on_template_lost(&mut self, slot: u16, generation: u16) {
        if let Some(s) = self.slots.get_mut(usize::from(slot))
            && s.generation == generation
            && matches!(s.state, TxState::Pending { .. })
        {
            s.state = TxState::NeedTemplate;
        }
    }

    /// The slot of `flow`, given one now if it has none and one is free or idle.
    fn slot_of(&mut self, now: Instant, flow: FlowId) -> Option<usize> {
        if let Some(&i) = self.by_flow.get(&flow) {
            return Some(usize::from(i));
        }
        if self.full_until.is_some_and(|t| now < t) {
            return None;
        }
        let fresh = |flow| TxSlot {
            flow,
            generation: 0,
            template: Bytes::EMPTY,
            ipv4_checksum: false,
            state: TxState::NeedTemplate,
            last_used: now,
        };
        let i = if self.slots.len() < wire::MAX_TEMPLATE_SLOTS {
            self.slots.push(fresh(flow));
            self.slots.len() - 1
        } else {
            let n = self.slots.len();
            let Some(i) = (0..n)
                .map(|k| (self.cursor + k) % n)
                .find(|&i| now - self.slots[i].last_used >= SLOT_IDLE)
            else {
                self.full_until = Some(now + FULL_RESCAN);
                return None;
            };
            self.cursor = (i + 1) % n;
            let old = &mut self.slots[i];
            self.by_flow.remove(&old.flow);
            // The new flow's template takes the next generation, so that a stray compact
            // packet of the old flow cannot be expanded with it.
            let generation = old.generation;
            *old = fresh(flow);
            old.generation = generation;
            i
        };
        self.full_until = None;
        self.by_flow.insert(flow, i as u16);
        Some(i)
    }
}

/// One slot's template at the receiver.
#[derive(Clone, Debug)]
struct RxSlot {
    generation: u16,
    flow_id: u32,
    /// Its IPv4 checksum zeroed if `ipv4_checksum`.
    template: Bytes,
    ipv4_checksum: bool,
}

/// The receiving side: the newest template of each slot.
#[derive(Debug, Default)]
pub(crate) struct Decompressor {
    slots: Vec<Option<RxSlot>>,
}

impl Decompressor {
    /// A DATA_TEMPLATE frame of flow `flow_id` came: keeps its template (the first `hlen`
    /// bytes of `packet`) unless the slot has a newer one.
    pub(crate) fn store(
        &mut self,
        slot: u16,
        generation: u16,
        flow_id: u32,
        template: &[u8],
        ipv4_checksum: bool,
    ) {
        let i = usize::from(slot);
        if i >= self.slots.len() {
            // (The wire decoder bounds `slot` by MAX_TEMPLATE_SLOTS.)
            self.slots.resize(i + 1, None);
        }
        if self.slots[i]
            .as_ref()
            .is_some_and(|s| !newer(generation, s.generation))
        {
            return;
        }
        let ipv4_checksum = ipv4_checksum && template.len() >= IPV4_CHECKSUM.end;
        self.slots[i] = Some(RxSlot {
            generation,
            flow_id,
            template: Bytes::new(template, ipv4_checksum),
            ipv4_checksum,
        });
    }

    /// Expands a DATA_COMPACT body into `out`; returns the template's flow id.
    pub(crate) fn expand(
        &self,
        slot: u16,
        generation: u8,
        body: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<u32, ExpandError> {
        let mask = (1u16 << wire::COMPACT_GENERATION_BITS) - 1;
        match self.slots.get(usize::from(slot)) {
            Some(Some(s)) if s.generation & mask == u16::from(generation) => {
                decode(s.template.get(), body, s.ipv4_checksum, out).map(|()| s.flow_id)
            }
            _ => Err(ExpandError::NoTemplate),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An IPv4 TCP packet with timestamps: 20 + 32 bytes of headers, then `payload`.
    fn tcp4(seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let total = 52 + payload.len();
        let mut p = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            6,
            0,
            0,
            10,
            0,
            0,
            1,
            10,
            0,
            0,
            2,
        ];
        p.extend_from_slice(&[0x1f, 0x90, 0xc3, 0x50]);
        p.extend_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(&ack.to_be_bytes());
        p.extend_from_slice(&[0x80, flags, 0x01, 0xf5, 0xab, 0xcd, 0, 0]);
        p.extend_from_slice(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
        p.extend_from_slice(payload);
        p
    }

    const ACK: u8 = 0x10;

    /// The compact body of `packet` against `template`, if it is as long.
    fn body(template: &[u8], packet: &[u8], ipv4_checksum: bool) -> Option<Vec<u8>> {
        let mut b = Vec::new();
        encode_head(template, packet, ipv4_checksum, &mut b).then(|| {
            b.extend_from_slice(&packet[template.len()..]);
            b
        })
    }
    const SYN: u8 = 0x02;

    #[test]
    fn template_len_covers_ip_and_tcp_headers_but_not_a_syn() {
        assert_eq!(template_len(&tcp4(1, 2, ACK, b"data")), Some(52));
        assert_eq!(template_len(&tcp4(1, 2, SYN, b"")), None);
        let mut udp = tcp4(1, 2, ACK, b"data");
        udp[9] = 17;
        assert_eq!(template_len(&udp), Some(28));
        let mut frag = tcp4(1, 2, ACK, b"data");
        frag[6] = 0x20; // more fragments
        assert_eq!(template_len(&frag), None);
        assert_eq!(template_len(&[0x45, 0, 0]), None);
        assert_eq!(template_len(&[]), None);
    }

    #[test]
    fn a_later_segment_compacts_to_its_changed_bytes() {
        let t = tcp4(1000, 77, ACK, &[1; 100]);
        let p = tcp4(2448, 77, ACK, &[2; 1348]);
        let h = template_len(&t).expect("a data segment");
        let body = body(&t[..h], &p, false).expect("longer than the template");
        // Length (2), sequence (2 of 4 bytes), the payload; 7 bytes of bitmap.
        assert_eq!(body.len(), 7 + 4 + 1348);
        let mut out = Vec::new();
        decode(&t[..h], &body, false, &mut out).expect("well formed");
        assert_eq!(out, p);
    }

    #[test]
    fn a_body_that_sets_bits_past_the_template_or_ends_early_is_malformed() {
        let t = [1u8; 12];
        let mut out = Vec::new();
        // 12 bytes: two bitmap bytes, the last four bits of the second must be 0.
        assert_eq!(
            decode(&t, &[0, 0x08], false, &mut out),
            Err(ExpandError::Malformed)
        );
        assert_eq!(
            decode(&t, &[0x80], false, &mut out),
            Err(ExpandError::Malformed)
        );
        assert_eq!(
            decode(&t, &[0xc0, 0, 5], false, &mut out),
            Err(ExpandError::Malformed)
        );
        assert_eq!(decode(&t, &[0xc0, 0, 5, 6, 7], false, &mut out), Ok(()));
        assert_eq!(out, [5, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7]);
        // Leaving the IPv4 checksum to the receiver, it must expand to an IPv4 header.
        assert_eq!(
            decode(&t, &[0, 0, 7], true, &mut out),
            Err(ExpandError::Malformed)
        );
    }

    proptest! {
        #[test]
        fn decode_inverts_encode(
            template in prop::collection::vec(any::<u8>(), 1..=wire::MAX_TEMPLATE_LEN),
            packet in prop::collection::vec(any::<u8>(), 0..300),
            flips in prop::collection::vec(any::<bool>(), 0..64),
        ) {
            // (The IPv4 checksum's case: `checksums_are_left_to_the_receiver`.)
            // A packet that shares some of the template's bytes.
            let mut p = packet.clone();
            for (i, f) in flips.iter().enumerate() {
                if *f && i < p.len() && i < template.len() {
                    p[i] = template[i];
                }
            }
            match body(&template, &p, false) {
                None => prop_assert!(p.len() < template.len()),
                Some(body) => {
                    let differ = template.iter().zip(&p).filter(|(a, b)| a != b).count();
                    prop_assert_eq!(
                        body.len(),
                        template.len().div_ceil(8) + differ + p.len() - template.len()
                    );
                    let mut out = Vec::new();
                    prop_assert!(decode(&template, &body, false, &mut out).is_ok());
                    prop_assert_eq!(out, p);
                }
            }
        }

        #[test]
        fn decode_never_panics(
            template in prop::collection::vec(any::<u8>(), 1..=wire::MAX_TEMPLATE_LEN),
            body in prop::collection::vec(any::<u8>(), 0..200),
            ipv4_checksum in any::<bool>(),
        ) {
            let mut out = Vec::new();
            let _ = decode(&template, &body, ipv4_checksum, &mut out);
        }
    }

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    #[test]
    fn a_flow_goes_compact_only_once_its_template_is_acknowledged() {
        let mut c = Compressor::default();
        let f = FlowId(7);
        let p = tcp4(1, 2, ACK, &[0; 1000]);
        // A SYN is no template.
        assert_eq!(c.form(at(0), f, &tcp4(0, 0, SYN, b""), true), TxForm::Full);
        let TxForm::Template {
            slot,
            generation,
            hlen,
            ipv4_checksum,
        } = c.form(at(1), f, &p, true)
        else {
            panic!("the first data segment is the template");
        };
        assert_eq!(hlen, 52);
        assert!(!ipv4_checksum, "the helper's packets have no checksum");
        assert_eq!(c.form(at(2), f, &p, true), TxForm::Full, "pending");
        c.on_template_acked(slot, generation);
        assert_eq!(
            c.form(at(3), f, &p, true),
            TxForm::Compact { slot, generation }
        );
        let mut written = Vec::new();
        c.write_body(&p, &mut written);
        assert_eq!(written, body(&p[..52], &p, false).expect("as long"));
        assert_eq!(c.body_len(p.len()), written.len());
    }

    #[test]
    fn a_lost_template_is_sent_again_as_a_new_generation() {
        let mut c = Compressor::default();
        let f = FlowId(7);
        let p = tcp4(1, 2, ACK, &[0; 1000]);
        let TxForm::Template {
            slot, generation, ..
        } = c.form(at(0), f, &p, true)
        else {
            panic!("template");
        };
        c.on_template_lost(slot, generation);
        let TxForm::Template {
            generation: gen2, ..
        } = c.form(at(1), f, &p, true)
        else {
            panic!("template again");
        };
        assert!(newer(gen2, generation));
        // A late acknowledgement of the old generation confirms nothing.
        c.on_template_acked(slot, generation);
        assert_eq!(c.form(at(2), f, &p, true), TxForm::Full);
        c.on_template_acked(slot, gen2);
        assert_eq!(
            c.form(at(3), f, &p, true),
            TxForm::Compact {
                slot,
                generation: gen2
            }
        );
    }

    #[test]
    fn an_unanswered_template_is_retried_after_template_retry_and_not_before() {
        let mut c = Compressor::default();
        let f = FlowId(1);
        let p = tcp4(1, 2, ACK, &[0; 100]);
        assert!(matches!(
            c.form(at(0), f, &p, true),
            TxForm::Template { .. }
        ));
        let retry = TEMPLATE_RETRY.as_millis() as u64;
        assert_eq!(c.form(at(retry - 1), f, &p, true), TxForm::Full);
        assert!(matches!(
            c.form(at(retry), f, &p, true),
            TxForm::Template { generation: 2, .. }
        ));
    }

    #[test]
    fn a_template_that_would_not_fit_the_link_waits() {
        let mut c = Compressor::default();
        let p = tcp4(1, 2, ACK, &[0; 100]);
        assert_eq!(c.form(at(0), FlowId(1), &p, false), TxForm::Full);
        assert!(matches!(
            c.form(at(1), FlowId(1), &p, true),
            TxForm::Template { generation: 1, .. }
        ));
    }

    #[test]
    fn a_packet_unlike_its_template_goes_whole_when_compact_is_no_shorter() {
        let mut c = Compressor::default();
        let f = FlowId(1);
        let p = tcp4(1, 2, ACK, &[0; 100]);
        let TxForm::Template {
            slot, generation, ..
        } = c.form(at(0), f, &p, true)
        else {
            panic!("template");
        };
        c.on_template_acked(slot, generation);
        let other: Vec<u8> = p.iter().map(|b| !b).collect();
        assert_eq!(c.form(at(1), f, &other, true), TxForm::Full);
        // Shorter than the template.
        assert_eq!(c.form(at(2), f, &p[..40], true), TxForm::Full);
    }

    #[test]
    fn slots_run_out_then_an_idle_one_goes_to_a_new_flow_with_a_new_generation() {
        let mut c = Compressor::default();
        let p = tcp4(1, 2, ACK, &[0; 100]);
        for i in 0..wire::MAX_TEMPLATE_SLOTS as u32 {
            assert!(matches!(
                c.form(at(0), FlowId(i), &p, true),
                TxForm::Template { .. }
            ));
        }
        let late = FlowId(5000);
        assert_eq!(c.form(at(1), late, &p, true), TxForm::Full);
        // Flow 3 keeps its slot busy; the others fall idle.
        let idle = SLOT_IDLE.as_millis() as u64;
        assert!(matches!(
            c.form(at(idle - 1), FlowId(3), &p, true),
            TxForm::Template { .. }
        ));
        assert_eq!(
            c.form(at(idle - 1), late, &p, true),
            TxForm::Full,
            "none idle yet"
        );
        let TxForm::Template {
            slot, generation, ..
        } = c.form(at(idle + 1000), late, &p, true)
        else {
            panic!("an idle slot is given to the late flow");
        };
        assert_ne!(slot, 3);
        assert_eq!(generation, 2, "the slot's next generation");
        // Its old flow has no slot any more: it is given another idle one, like a new
        // flow.
        assert_eq!(slot, 0);
        assert!(matches!(
            c.form(at(idle + 1001), FlowId(0), &p, true),
            TxForm::Template {
                slot: 1,
                generation: 2,
                ..
            }
        ));
    }

    #[test]
    fn the_receiver_keeps_the_newest_generation_and_checks_it() {
        let mut d = Decompressor::default();
        let t1 = tcp4(1, 2, ACK, b"");
        let t2 = tcp4(9, 9, ACK, b"");
        d.store(3, 5, 77, &t1[..52], false);
        d.store(3, 4, 78, &t2[..52], false); // older: ignored
        let p = tcp4(100, 2, ACK, b"xyz");
        let body = body(&t1[..52], &p, false).expect("as long");
        let mut out = Vec::new();
        assert_eq!(d.expand(3, 5, &body, &mut out), Ok(77));
        assert_eq!(out, p);
        assert_eq!(
            d.expand(3, 4, &body, &mut out),
            Err(ExpandError::NoTemplate)
        );
        assert_eq!(
            d.expand(2, 5, &body, &mut out),
            Err(ExpandError::NoTemplate)
        );
        d.store(3, 6, 79, &t2[..52], false);
        assert_eq!(
            d.expand(3, 5, &body, &mut out),
            Err(ExpandError::NoTemplate)
        );
        // A compact frame carries the generation's low 6 bits.
        d.store(5, 64 + 5, 80, &t1[..52], false);
        assert_eq!(d.expand(5, 5, &body, &mut out), Ok(80));
        // Generations wrap.
        d.store(4, u16::MAX, 81, &t2[..52], false);
        d.store(4, 0, 82, &t1[..52], false);
        assert_eq!(d.expand(4, 0, &body, &mut out), Ok(82));
        d.store(4, u16::MAX, 81, &t2[..52], false);
        assert_eq!(
            d.expand(4, 0, &body, &mut out),
            Ok(82),
            "an older one does not replace it"
        );
    }

    /// `tcp4` with its IPv4 header checksum right.
    fn tcp4_checked(seq: u32, id: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = tcp4(seq, 2, ACK, payload);
        p[4..6].copy_from_slice(&id.to_be_bytes());
        let c = ipv4_header_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn checksums_are_left_to_the_receiver() {
        let mut c = Compressor::default();
        let f = FlowId(1);
        let t = tcp4_checked(1, 100, &[0; 100]);
        assert!(ipv4_checksum_ok(&t));
        let TxForm::Template {
            slot,
            generation,
            hlen,
            ipv4_checksum: true,
        } = c.form(at(0), f, &t, true)
        else {
            panic!("a template that leaves the checksum to the receiver");
        };
        c.on_template_acked(slot, generation);
        let mut d = Decompressor::default();
        d.store(slot, generation, 1, &t[..usize::from(hlen)], true);
        let p = tcp4_checked(1449, 101, &[3; 1000]);
        assert_eq!(
            c.form(at(1), f, &p, true),
            TxForm::Compact { slot, generation }
        );
        let mut body = Vec::new();
        c.write_body(&p, &mut body);
        assert_eq!(body.len(), c.body_len(p.len()));
        // The length (2 bytes), the identification (1) and the sequence number (2)
        // differ; not the checksum.
        assert_eq!(body.len(), 7 + 5 + 1000);
        let mut out = Vec::new();
        assert_eq!(d.expand(slot, generation as u8, &body, &mut out), Ok(1));
        assert_eq!(out, p);
        // A packet whose checksum is wrong goes whole: it would come out right.
        let mut bad = p.clone();
        bad[10] ^= 1;
        assert_eq!(c.form(at(2), f, &bad, true), TxForm::Full);
    }
}
