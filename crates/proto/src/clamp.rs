//! The receive-window clamp (`docs/protocol.md` 4.1): backpressure on a local TCP sender
//! without a loss.
//!
//! The engine sees both halves of a tunnelled TCP connection: the local end's segments
//! enter its flow queue above the binding point, and the remote end's acknowledgements
//! come out of the tunnel towards the local end. When a remote acknowledgement leaves
//! the engine, its window is lowered (never raised) so that its right edge is at most
//! `allowance` bytes past the highest sequence number of the connection's segments that
//! have left the flow queue for a link. The local sender then keeps at most `allowance`
//! bytes waiting above the binding point, whatever its congestion window: the links'
//! rate control, which takes those bytes as fast as the links carry them, paces it
//! through the acknowledgements, and it meets no drop from the queue's AQM, whose drops
//! cost a TCP flow seconds of regrowth (Cubic) after every swing of a cellular link.
//!
//! The window is scaled (RFC 7323) only when both SYNs carried the option, so only
//! connections whose handshake the engine saw are clamped. The right edge the local
//! end was told never moves left (RFC 9293 3.8.6: a receiver should not shrink its
//! window), and a window is only ever lowered, so the remote receiver's own flow control
//! stands.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use crate::classify::{FlowKey, PROTO_TCP, checksum_adjust};

/// Connections tracked at most; past it the half used longest ago is forgotten at once
/// (a scan of the table per half of it, not per new connection).
const MAX_CONNECTIONS: usize = 4096;

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;
const ACK: u8 = 0x10;

/// The flow key of the other direction of a connection.
fn reversed(k: FlowKey) -> FlowKey {
    FlowKey {
        protocol: k.protocol,
        src: k.dst,
        dst: k.src,
        src_port: k.dst_port,
        dst_port: k.src_port,
    }
}

#[derive(Debug)]
struct Conn {
    /// The window scale option of the local end's SYN (`Some(None)`: its SYN had none).
    local_ws: Option<Option<u8>>,
    /// The same for the remote end's SYN.
    remote_ws: Option<Option<u8>>,
    /// One past the highest sequence number the local end sent that left the flow queue.
    sent_edge: Option<u32>,
    /// The right edge of the window last passed to the local end.
    told_edge: Option<u32>,
    /// The backlog the local end may keep above the binding point, bytes (`None` until
    /// the engine sets it: its windows pass as they are).
    allowance: Option<u32>,
    /// When it was last used ([`WindowClamp::tick`]).
    last: u64,
}

/// A TCP segment's fields the clamp reads, with where its TCP header starts.
struct Segment {
    /// The flow key of its direction, as `classify` makes it.
    key: FlowKey,
    tcp: usize,
    flags: u8,
    seq: u32,
    ack: u32,
    window: u16,
    /// Sequence space the segment takes (payload, plus one for SYN and for FIN).
    len: u32,
    /// The window scale option's shift, if it has one.
    ws: Option<u8>,
}

/// A sequence number after `b` (RFC 9293's modular comparison).
fn after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

fn parse(p: &[u8], with_options: bool) -> Option<Segment> {
    let (src, dst, tcp, end) = match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            let fragmented = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]) & 0x3fff != 0;
            if ihl < 20 || *p.get(9)? != PROTO_TCP || fragmented || total > p.len() {
                return None;
            }
            // ::ffff:a.b.c.d, as the flow keys have it (`classify`).
            let mut src = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0];
            let mut dst = src;
            src[12..].copy_from_slice(p.get(12..16)?);
            dst[12..].copy_from_slice(p.get(16..20)?);
            (src, dst, ihl, total)
        }
        6 => {
            let payload = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            if *p.get(6)? != PROTO_TCP || 40 + payload > p.len() {
                return None;
            }
            (
                p.get(8..24)?.try_into().ok()?,
                p.get(24..40)?.try_into().ok()?,
                40,
                40 + payload,
            )
        }
        _ => return None,
    };
    let t = p.get(tcp..end)?;
    let header = usize::from(*t.get(12)? >> 4) * 4;
    if header < 20 || t.len() < header {
        return None;
    }
    let flags = t[13];
    let payload = (t.len() - header) as u32;
    let len = payload + u32::from(flags & SYN != 0) + u32::from(flags & FIN != 0);
    let mut ws = None;
    // Only a SYN's window scale option is read.
    if with_options && flags & SYN != 0 {
        let mut o = &t[20..header];
        while let Some(&kind) = o.first() {
            match kind {
                0 => break,
                1 => o = &o[1..],
                _ => {
                    let l = usize::from(*o.get(1)?);
                    if l < 2 || l > o.len() {
                        break;
                    }
                    if kind == 3 && l == 3 {
                        ws = Some(o[2].min(14));
                    }
                    o = &o[l..];
                }
            }
        }
    }
    Some(Segment {
        key: FlowKey {
            protocol: PROTO_TCP,
            src,
            dst,
            src_port: u16::from_be_bytes([t[0], t[1]]),
            dst_port: u16::from_be_bytes([t[2], t[3]]),
        },
        tcp,
        flags,
        seq: u32::from_be_bytes(t[4..8].try_into().ok()?),
        ack: u32::from_be_bytes(t[8..12].try_into().ok()?),
        window: u16::from_be_bytes([t[14], t[15]]),
        len,
        ws,
    })
}

/// The connections' state (module docs).
#[derive(Debug, Default)]
pub(crate) struct WindowClamp {
    conns: HashMap<FlowKey, Conn, foldhash::fast::FixedState>,
    /// Counts the packets seen, to tell which connection was used last.
    tick: u64,
    /// Segments whose window was lowered.
    pub(crate) clamped: u64,
}

impl WindowClamp {
    fn entry(&mut self, key: FlowKey) -> &mut Conn {
        self.tick += 1;
        let now = self.tick;
        if !self.conns.contains_key(&key) && self.conns.len() >= MAX_CONNECTIONS {
            let mut used: Vec<u64> = self.conns.values().map(|c| c.last).collect();
            let (_, &mut cutoff, _) = used.select_nth_unstable(MAX_CONNECTIONS / 2);
            self.conns.retain(|_, c| c.last > cutoff);
        }
        match self.conns.entry(key) {
            Entry::Occupied(e) => {
                let c = e.into_mut();
                c.last = now;
                c
            }
            Entry::Vacant(e) => e.insert(Conn {
                local_ws: None,
                remote_ws: None,
                sent_edge: None,
                told_edge: None,
                allowance: None,
                last: now,
            }),
        }
    }

    /// A packet from the local end, as it enters its flow queue.
    pub(crate) fn on_local(&mut self, packet: &[u8]) {
        let Some(s) = parse(packet, true) else {
            return;
        };
        if s.flags & RST != 0 {
            self.conns.remove(&s.key);
        } else if s.flags & SYN != 0 {
            if s.flags & ACK == 0 {
                // A new connection: whatever was known of an older one on these ports
                // goes.
                self.conns.remove(&s.key);
            }
            let c = self.entry(s.key);
            c.local_ws = Some(s.ws);
        }
    }

    /// A packet from the local end, as it leaves its flow queue for a link.
    pub(crate) fn on_bound(&mut self, packet: &[u8]) {
        if self.conns.is_empty() {
            return;
        }
        let Some(s) = parse(packet, false) else {
            return;
        };
        if let Some(c) = self.conns.get_mut(&s.key) {
            let end = s.seq.wrapping_add(s.len);
            if c.sent_edge.is_none_or(|e| after(end, e)) {
                c.sent_edge = Some(end);
            }
        }
    }

    /// A packet from the remote end, as it leaves the engine for the local end: its
    /// window is lowered to end at most the connection's allowance past what the local
    /// end's flow queue let go. Returns whether it was.
    pub(crate) fn on_remote(&mut self, packet: &mut [u8]) -> bool {
        let Some(s) = parse(packet, true) else {
            return false;
        };
        let key = reversed(s.key);
        if s.flags & RST != 0 {
            self.conns.remove(&key);
            return false;
        }
        if s.flags & SYN != 0 {
            if s.flags & ACK == 0 {
                self.conns.remove(&key);
            }
            let c = self.entry(key);
            c.remote_ws = Some(s.ws);
            // A SYN's window is never scaled, nor clamped.
            return false;
        }
        if s.flags & ACK == 0 {
            return false;
        }
        self.tick += 1;
        let Some(c) = self.conns.get_mut(&key) else {
            return false;
        };
        c.last = self.tick;
        let (Some(local), Some(remote), Some(sent)) = (c.local_ws, c.remote_ws, c.sent_edge) else {
            return false;
        };
        let shift = match (local, remote) {
            (Some(_), Some(r)) => r,
            _ => 0,
        };
        let offered = s.ack.wrapping_add(u32::from(s.window) << shift);
        let Some(allowance) = c.allowance else {
            c.told_edge = Some(offered);
            return false;
        };
        let mut edge = sent.wrapping_add(allowance);
        if let Some(told) = c.told_edge
            && after(told, edge)
        {
            edge = told;
        }
        if !after(offered, edge) || !after(edge, s.ack) {
            c.told_edge = Some(offered);
            return false;
        }
        let step = (1u32 << shift) - 1;
        let window = (edge.wrapping_sub(s.ack).saturating_add(step) >> shift).min(0xffff) as u16;
        if window >= s.window {
            c.told_edge = Some(offered);
            return false;
        }
        c.told_edge = Some(s.ack.wrapping_add(u32::from(window) << shift));
        let at = s.tcp + 14;
        packet[at..at + 2].copy_from_slice(&window.to_be_bytes());
        let ck = s.tcp + 16;
        let hc = u16::from_be_bytes([packet[ck], packet[ck + 1]]);
        packet[ck..ck + 2].copy_from_slice(&checksum_adjust(hc, s.window, window).to_be_bytes());
        self.clamped += 1;
        true
    }

    /// Sets the backlog the local end's connection of this flow key may keep above the
    /// binding point, if its windows can be clamped (its handshake seen, a segment of it
    /// bound to a link). Returns then how many bytes past what left the queue its sender
    /// may have sent: the allowance, or more if a window told before (at a larger
    /// allowance, or before the first) reaches further.
    pub(crate) fn set_allowance(&mut self, key: &FlowKey, bytes: u32) -> Option<u32> {
        let c = self.conns.get_mut(key)?;
        let sent = c.sent_edge?;
        if c.local_ws.is_none() || c.remote_ws.is_none() {
            return None;
        }
        c.allowance = Some(bytes);
        let told = c
            .told_edge
            .filter(|&t| after(t, sent))
            .map_or(0, |t| t.wrapping_sub(sent));
        Some(bytes.max(told))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;

    const LOCAL: [u8; 4] = [10, 0, 0, 1];
    const REMOTE: [u8; 4] = [10, 0, 0, 2];

    /// An IPv4 TCP segment with a valid checksum.
    fn seg(
        from_local: bool,
        flags: u8,
        seq: u32,
        ack: u32,
        window: u16,
        opts: &[u8],
        payload: usize,
    ) -> Vec<u8> {
        let (src, dst, sport, dport) = if from_local {
            (LOCAL, REMOTE, 40000u16, 80u16)
        } else {
            (REMOTE, LOCAL, 80, 40000)
        };
        let olen = opts.len().div_ceil(4) * 4;
        let tcp_len = 20 + olen + payload;
        let mut p = vec![0u8; 20 + tcp_len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
        p[8] = 64;
        p[9] = PROTO_TCP;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        let t = &mut p[20..];
        t[0..2].copy_from_slice(&sport.to_be_bytes());
        t[2..4].copy_from_slice(&dport.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[8..12].copy_from_slice(&ack.to_be_bytes());
        t[12] = (((20 + olen) / 4) as u8) << 4;
        t[13] = flags;
        t[14..16].copy_from_slice(&window.to_be_bytes());
        t[20..20 + opts.len()].copy_from_slice(opts);
        for (i, b) in t[20 + olen..].iter_mut().enumerate() {
            *b = i as u8;
        }
        let ck = tcp_checksum(&p);
        p[36..38].copy_from_slice(&ck.to_be_bytes());
        p
    }

    /// The TCP checksum of an IPv4 packet, its checksum field taken as zero.
    fn tcp_checksum(p: &[u8]) -> u16 {
        let t = &p[20..];
        let mut sum: u32 = 0;
        let mut add = |b: &[u8]| {
            for c in b.chunks(2) {
                sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
            }
        };
        add(&p[12..20]);
        add(&[0, PROTO_TCP]);
        add(&(t.len() as u16).to_be_bytes());
        add(&t[..16]);
        add(&t[18..]);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn window(p: &[u8]) -> u16 {
        u16::from_be_bytes([p[34], p[35]])
    }

    const WS7: [u8; 4] = [1, 3, 3, 7];

    /// A clamp that saw both SYNs (window scale 7 each way, unless told) and the local
    /// end's first `sent` bytes of data leave the queue; the local ISN is 1000.
    fn connected(local_ws: &[u8], remote_ws: &[u8], sent: u32, allowance: u32) -> WindowClamp {
        let mut c = WindowClamp::default();
        c.on_local(&seg(true, SYN, 1000, 0, 65535, local_ws, 0));
        let mut synack = seg(false, SYN | ACK, 5000, 1001, 65535, remote_ws, 0);
        assert!(!c.on_remote(&mut synack));
        let mut off = 0;
        while off < sent {
            let n = (sent - off).min(1400);
            c.on_bound(&seg(true, ACK, 1001 + off, 5001, 512, &[], n as usize));
            off += n;
        }
        let key = classify(&seg(true, ACK, 1001, 5001, 512, &[], 0))
            .unwrap()
            .key;
        assert_eq!(c.set_allowance(&key, allowance).is_some(), sent > 0);
        c
    }

    #[test]
    fn a_window_ends_the_allowance_past_what_left_the_queue() {
        // 14 000 bytes left the queue, 10 000 of them acknowledged; the remote end offers
        // 1 MB (8192 << 7). The local end may have 20 000 bytes past what left.
        let mut c = connected(&WS7, &WS7, 14_000, 20_000);
        let mut ack = seg(false, ACK, 5001, 11_001, 8192, &[], 0);
        assert!(c.on_remote(&mut ack));
        let edge = 11_001 + (u32::from(window(&ack)) << 7);
        assert!(edge >= 1001 + 14_000 + 20_000, "edge {edge}");
        assert!(edge < 1001 + 14_000 + 20_000 + 128, "edge {edge}");
        assert_eq!(u16::from_be_bytes([ack[36], ack[37]]), tcp_checksum(&ack));
        assert_eq!(c.clamped, 1);
    }

    #[test]
    fn a_window_is_only_ever_lowered() {
        let mut c = connected(&WS7, &WS7, 14_000, 20_000);
        // 100 << 7 = 12 800 bytes past the acknowledgement: less than allowed.
        let mut ack = seg(false, ACK, 5001, 11_001, 100, &[], 0);
        let before = ack.clone();
        assert!(!c.on_remote(&mut ack));
        assert_eq!(ack, before);
    }

    #[test]
    fn the_right_edge_told_never_moves_left() {
        let mut c = connected(&WS7, &WS7, 14_000, 20_000);
        let mut ack = seg(false, ACK, 5001, 11_001, 8192, &[], 0);
        assert!(c.on_remote(&mut ack));
        let told = 11_001 + (u32::from(window(&ack)) << 7);
        // The allowance falls to 2 000 bytes: the next acknowledgement still ends where
        // the last one did.
        let key = classify(&seg(true, ACK, 1001, 5001, 512, &[], 0))
            .unwrap()
            .key;
        // The sender may still have as much past what left the queue as it was told.
        assert_eq!(c.set_allowance(&key, 2_000), Some(told - 15_001));
        let mut ack = seg(false, ACK, 5001, 12_001, 8192, &[], 0);
        assert!(c.on_remote(&mut ack));
        let edge = 12_001 + (u32::from(window(&ack)) << 7);
        // (A scaled window rounds up to its unit.)
        assert!(edge >= told && edge < told + 128, "{edge} against {told}");
    }

    #[test]
    fn windows_pass_until_the_first_allowance_and_are_held_from_them() {
        let mut c = WindowClamp::default();
        c.on_local(&seg(true, SYN, 1000, 0, 65535, &WS7, 0));
        let mut synack = seg(false, SYN | ACK, 5000, 1001, 65535, &WS7, 0);
        c.on_remote(&mut synack);
        c.on_bound(&seg(true, ACK, 1001, 5001, 512, &[], 1400));
        let mut ack = seg(false, ACK, 5001, 2401, 8192, &[], 0);
        let before = ack.clone();
        assert!(!c.on_remote(&mut ack));
        assert_eq!(ack, before);
        // Held from the first allowance on: the 1 MB the sender was told stays its edge
        // (the window does not shrink), and the whole of it may be waiting.
        let key = classify(&seg(true, ACK, 1001, 5001, 512, &[], 0))
            .unwrap()
            .key;
        let told = 2401 + (8192 << 7);
        assert_eq!(c.set_allowance(&key, 20_000), Some(told - 2401));
        // A second segment leaves, and its acknowledgement offers 1 MB past it: it is
        // held to the edge.
        c.on_bound(&seg(true, ACK, 2401, 5001, 512, &[], 1400));
        let mut ack = seg(false, ACK, 5001, 3801, 8192, &[], 0);
        assert!(c.on_remote(&mut ack));
        let edge = 3801 + (u32::from(window(&ack)) << 7);
        assert!(edge >= told && edge < told + 128, "{edge} against {told}");
    }

    #[test]
    fn without_scaling_on_both_syns_the_window_is_in_bytes() {
        // The local SYN had no window scale: the remote end's windows are not scaled.
        let mut c = connected(&[], &WS7, 14_000, 20_000);
        let mut ack = seg(false, ACK, 5001, 11_001, 65_535, &[], 0);
        assert!(c.on_remote(&mut ack));
        assert_eq!(11_001 + u32::from(window(&ack)), 1001 + 14_000 + 20_000);
        assert_eq!(u16::from_be_bytes([ack[36], ack[37]]), tcp_checksum(&ack));
    }

    #[test]
    fn a_connection_whose_handshake_was_not_seen_is_left_alone() {
        let mut c = WindowClamp::default();
        c.on_bound(&seg(true, ACK, 1001, 5001, 512, &[], 1400));
        let key = classify(&seg(true, ACK, 1001, 5001, 512, &[], 0))
            .unwrap()
            .key;
        assert_eq!(c.set_allowance(&key, 2_000), None);
        let mut ack = seg(false, ACK, 5001, 2401, 8192, &[], 0);
        let before = ack.clone();
        assert!(!c.on_remote(&mut ack));
        assert_eq!(ack, before);
        // Nor after a reset: the connection is forgotten.
        let mut c = connected(&WS7, &WS7, 14_000, 20_000);
        c.on_local(&seg(true, RST | ACK, 15_001, 5001, 0, &[], 0));
        let mut ack = seg(false, ACK, 5001, 11_001, 8192, &[], 0);
        assert!(!c.on_remote(&mut ack));
    }

    #[test]
    fn the_window_never_closes_below_the_acknowledgement() {
        // Nothing past the acknowledgement left the queue, and the allowance is the least:
        // the window still opens that far.
        let mut c = connected(&WS7, &WS7, 1_400, 1);
        let mut ack = seg(false, ACK, 5001, 2401, 8192, &[], 0);
        assert!(c.on_remote(&mut ack));
        assert!(window(&ack) > 0);
    }

    #[test]
    fn the_table_is_bounded_and_keeps_the_connections_used_last() {
        let mut c = connected(&WS7, &WS7, 14_000, 20_000);
        for i in 0..2 * MAX_CONNECTIONS as u32 {
            let mut syn = seg(true, SYN, 1000, 0, 65535, &WS7, 0);
            syn[12..16].copy_from_slice(&(0x0a01_0000 + i).to_be_bytes());
            c.on_local(&syn);
            if i % 64 == 0 {
                // The first connection stays in use.
                let mut ack = seg(false, ACK, 5001, 11_001, 8192, &[], 0);
                assert!(c.on_remote(&mut ack), "forgotten after {i} others");
            }
            assert!(c.conns.len() <= MAX_CONNECTIONS);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_are_read_without_a_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..100),
        ) {
            let mut c = connected(&WS7, &WS7, 14_000, 20_000);
            c.on_local(&bytes);
            c.on_bound(&bytes);
            let mut b = bytes.clone();
            c.on_remote(&mut b);
            proptest::prop_assert_eq!(b.len(), bytes.len());
        }
    }
}
