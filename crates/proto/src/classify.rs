//! Flow classification of inner IP packets, and ECN marking.
//!
//! A flow is the IPv4 or IPv6 5-tuple for TCP, UDP, UDP-Lite and SCTP; other protocols
//! (ICMP, GRE, ...) and non-first fragments are keyed by protocol and addresses only.
//! Nothing here panics on any input: a packet that is not a well-formed IP header is an
//! error the engine counts and drops.

use thiserror::Error;

/// DSCP Expedited Forwarding (RFC 3246).
pub const DSCP_EF: u8 = 46;
/// DSCP class selector 6 (network control).
pub const DSCP_CS6: u8 = 48;
/// DSCP class selector 7.
pub const DSCP_CS7: u8 = 56;

/// Why a packet from the TUN side could not be classified.
#[derive(Clone, Copy, Debug, Eq, Error, PartialEq)]
pub enum ClassifyError {
    /// Shorter than its IP header says, or than an IP header.
    #[error("truncated ip packet")]
    Truncated,
    /// Neither IPv4 nor IPv6.
    #[error("not an ip packet (version {0})")]
    NotIp(u8),
}

/// The key of a flow: protocol, addresses (IPv4 mapped into IPv6 space) and ports.
#[derive(Clone, Copy, Debug, Eq, Hash, Ord, PartialEq, PartialOrd)]
pub struct FlowKey {
    /// IP protocol / IPv6 next header of the transport.
    pub protocol: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port, 0 when the protocol has none.
    pub src_port: u16,
    /// Destination port, 0 when the protocol has none.
    pub dst_port: u16,
}

/// What the engine needs to know about an inner packet.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct PacketInfo {
    /// The flow it belongs to.
    pub key: FlowKey,
    /// DiffServ code point.
    pub dscp: u8,
    /// ECN field (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE).
    pub ecn: u8,
    /// Whether its transport re-sends its losses and delivers in order, so that waiting
    /// at the receiver for a packet of a slower link, or for a resend, costs it nothing
    /// it would not wait for anyway: TCP, or QUIC ([`is_quic`]).
    pub reliable: bool,
}

impl PacketInfo {
    /// Whether the DSCP asks for low latency (EF, CS6, CS7): such flows are served first.
    pub fn is_latency_sensitive(&self) -> bool {
        matches!(self.dscp, DSCP_EF | DSCP_CS6 | DSCP_CS7)
    }
}

/// IP protocol number of TCP.
pub(crate) const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
const PROTO_UDP: u8 = 17;
/// The UDP port of QUIC (HTTP/3, RFC 9114 3.1).
const QUIC_PORT: u16 = 443;

/// QUIC versions 1 (RFC 9000) and 2 (RFC 9369), as a long header names them.
const QUIC_VERSIONS: [[u8; 4]; 2] = [[0, 0, 0, 1], [0x6b, 0x33, 0x43, 0xcf]];

/// Whether a UDP datagram's `transport` (its UDP header and payload) looks like QUIC:
/// to or from port 443, and the first byte of its payload has QUIC's fixed bit (0x40,
/// RFC 9000 17.2 and 17.3), or it is a long header (the form bit, 0x80) naming QUIC
/// version 1 or 2. An endpoint whose peer allows it greases the fixed bit (RFC 9287;
/// quinn does, in about half its packets): a server does from its first packet, having
/// the client's transport parameters, and its first packets are long headers (Initial,
/// Handshake), which name the version. An RTP packet (version 2: 0b10xxxxxx, with the
/// fixed bit clear and a sequence number and timestamp where a long header's version
/// is), DTLS (content types 20-25) and STUN (0b00xxxxxx) are not taken for QUIC; a
/// greased short header (a connection that was under way when its flow came) is not
/// either.
pub fn is_quic(transport: &[u8]) -> bool {
    let (src, dst) = ports(transport);
    if src != QUIC_PORT && dst != QUIC_PORT {
        return false;
    }
    let long_header = |first: u8| {
        first & 0x80 != 0
            && transport
                .get(9..13)
                .is_some_and(|v| QUIC_VERSIONS.iter().any(|q| q == v))
    };
    transport
        .get(8)
        .is_some_and(|&b| b & 0x40 != 0 || long_header(b))
}

/// [`PacketInfo::reliable`] of a packet of `protocol` whose transport header starts
/// `transport` (empty when a later fragment).
fn reliable(protocol: u8, transport: &[u8]) -> bool {
    protocol == PROTO_TCP || (protocol == PROTO_UDP && is_quic(transport))
}

fn has_ports(protocol: u8) -> bool {
    // TCP, UDP, SCTP, UDP-Lite: ports are the first four bytes of the transport header.
    matches!(protocol, PROTO_TCP | 17 | 132 | 136)
}

fn ports(transport: &[u8]) -> (u16, u16) {
    match transport {
        [a, b, c, d, ..] => (u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d])),
        _ => (0, 0),
    }
}

/// Classifies an IP packet.
pub fn classify(packet: &[u8]) -> Result<PacketInfo, ClassifyError> {
    let first = *packet.first().ok_or(ClassifyError::Truncated)?;
    match first >> 4 {
        4 => classify_v4(packet),
        6 => classify_v6(packet),
        v => Err(ClassifyError::NotIp(v)),
    }
}

fn classify_v4(p: &[u8]) -> Result<PacketInfo, ClassifyError> {
    if p.len() < 20 {
        return Err(ClassifyError::Truncated);
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || p.len() < ihl {
        return Err(ClassifyError::Truncated);
    }
    let protocol = p[9];
    let fragment_offset = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
    let transport = if fragment_offset == 0 {
        &p[ihl..]
    } else {
        &[][..]
    };
    let (src_port, dst_port) = if has_ports(protocol) {
        ports(transport)
    } else {
        (0, 0)
    };
    // ::ffff:a.b.c.d, made as one integer: the key is then written with a few wide stores,
    // which the flow lookup reading it right after need not wait on byte by byte.
    let mapped = |a: [u8; 4]| (0xffff_u128 << 32 | u128::from(u32::from_be_bytes(a))).to_be_bytes();
    Ok(PacketInfo {
        key: FlowKey {
            protocol,
            src: mapped([p[12], p[13], p[14], p[15]]),
            dst: mapped([p[16], p[17], p[18], p[19]]),
            src_port,
            dst_port,
        },
        dscp: p[1] >> 2,
        ecn: p[1] & 0x03,
        reliable: reliable(protocol, transport),
    })
}

fn classify_v6(p: &[u8]) -> Result<PacketInfo, ClassifyError> {
    if p.len() < 40 {
        return Err(ClassifyError::Truncated);
    }
    let traffic_class = (p[0] << 4) | (p[1] >> 4);
    let mut key = FlowKey {
        protocol: p[6],
        src: [0; 16],
        dst: [0; 16],
        src_port: 0,
        dst_port: 0,
    };
    key.src.copy_from_slice(&p[8..24]);
    key.dst.copy_from_slice(&p[24..40]);
    // Walk the common extension headers (hop-by-hop, routing, destination options,
    // fragment) to find the transport; give up after a few.
    let mut next = p[6];
    let mut offset = 40usize;
    let mut first_fragment = true;
    for _ in 0..8 {
        match next {
            0 | 43 | 60 => {
                let Some(hdr) = p.get(offset..offset + 2) else {
                    break;
                };
                next = hdr[0];
                offset += (usize::from(hdr[1]) + 1) * 8;
            }
            44 => {
                let Some(hdr) = p.get(offset..offset + 8) else {
                    break;
                };
                next = hdr[0];
                first_fragment = u16::from_be_bytes([hdr[2], hdr[3]]) >> 3 == 0;
                offset += 8;
            }
            _ => break,
        }
    }
    key.protocol = next;
    let transport = if first_fragment {
        p.get(offset..).unwrap_or(&[])
    } else {
        &[][..]
    };
    if has_ports(next) {
        (key.src_port, key.dst_port) = ports(transport);
    }
    Ok(PacketInfo {
        key,
        dscp: traffic_class >> 2,
        ecn: traffic_class & 0x03,
        reliable: reliable(next, transport),
    })
}

/// An Internet checksum (IPv4 header, TCP, UDP) after one of the 16-bit words it covers
/// changed from `old` to `new`: RFC 1624's incremental update, `HC' = ~(~HC + ~m + m')`.
pub fn checksum_adjust(checksum: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!checksum) + u32::from(!old) + u32::from(new);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Marks an ECN-capable packet Congestion Experienced, fixing the IPv4 header checksum.
/// Returns false (and leaves the packet alone) when it is not ECN-capable.
pub fn mark_ce(packet: &mut [u8]) -> bool {
    let Some(first) = packet.first() else {
        return false;
    };
    match first >> 4 {
        4 if packet.len() >= 20 => {
            let ecn = packet[1] & 0x03;
            if ecn == 0 {
                return false;
            }
            if ecn == 3 {
                return true;
            }
            let old = u16::from_be_bytes([packet[0], packet[1]]);
            packet[1] |= 0x03;
            let new = u16::from_be_bytes([packet[0], packet[1]]);
            let hc = u16::from_be_bytes([packet[10], packet[11]]);
            packet[10..12].copy_from_slice(&checksum_adjust(hc, old, new).to_be_bytes());
            true
        }
        6 if packet.len() >= 40 => {
            let ecn = (packet[1] >> 4) & 0x03;
            if ecn == 0 {
                return false;
            }
            packet[1] |= 0x30;
            true
        }
        _ => false,
    }
}

/// A TCP segment that only acknowledges (RFC 9293 3.1): no data, no SYN, FIN, RST or URG,
/// no ECN flag (ECE, CWR), and no option but NOP, end of list and timestamps, so a later
/// one of its connection says everything it says (no selective acknowledgement to keep,
/// no window scale or MSS to carry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PureAck {
    /// The acknowledgement number.
    pub(crate) ack: u32,
}

impl PureAck {
    /// Whether `self`, sent after `older` on the same connection, acknowledges more.
    /// A duplicate acknowledgement (the same number) does not: the sender counts them
    /// to find a loss (RFC 5681 3.2).
    pub(crate) fn supersedes(self, older: Self) -> bool {
        let ahead = self.ack.wrapping_sub(older.ack);
        ahead != 0 && ahead < 1 << 31
    }
}

/// Whether the packet is a TCP segment (IPv4, or IPv6 without an extension header).
pub(crate) fn is_tcp(p: &[u8]) -> bool {
    match p.first().map(|b| b >> 4) {
        Some(4) => p.get(9) == Some(&PROTO_TCP),
        Some(6) => p.get(6) == Some(&PROTO_TCP),
        _ => false,
    }
}

/// An unfragmented IPv4 or IPv6 (no extension header) TCP segment: its TCP header and
/// data (as far as the packet holds them), the length the IP header gives them, and
/// whether the packet carries CE.
fn tcp_segment(p: &[u8]) -> Option<(&[u8], usize, bool)> {
    match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p.first()? & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([*p.get(2)?, *p.get(3)?]));
            let fragmented = u16::from_be_bytes([*p.get(6)?, *p.get(7)?]) & 0x3fff != 0;
            if ihl < 20 || *p.get(9)? != PROTO_TCP || fragmented {
                return None;
            }
            let tcp = p.get(ihl..total.min(p.len()))?;
            Some((tcp, total.checked_sub(ihl)?, p[1] & 0x03 == 3))
        }
        6 => {
            let payload = usize::from(u16::from_be_bytes([*p.get(4)?, *p.get(5)?]));
            if *p.get(6)? != PROTO_TCP {
                return None;
            }
            let tcp = p.get(40..(40 + payload).min(p.len()))?;
            Some((tcp, payload, (p[1] >> 4) & 0x03 == 3))
        }
        _ => None,
    }
}

/// The TCP header of a segment from [`tcp_segment`] and its flags, if the header is
/// whole and the segment carries no data.
fn dataless(tcp: &[u8], len: usize) -> Option<(&[u8], u8)> {
    let header = usize::from(*tcp.get(12)? >> 4) * 4;
    if header < 20 || len != header || tcp.len() < header {
        return None;
    }
    Some((&tcp[..header], tcp[13]))
}

/// The packet as a [`PureAck`], if it is an unfragmented IPv4 or IPv6 (no extension
/// header) TCP segment that only acknowledges and does not carry CE.
pub(crate) fn pure_ack(p: &[u8]) -> Option<PureAck> {
    let (tcp, len, ce) = tcp_segment(p)?;
    let (header, flags) = dataless(tcp, len)?;
    // ACK alone, or with PSH; anything else (SYN, FIN, RST, URG, ECE, CWR, and the
    // accurate-ECN and reserved bits beside the data offset) is kept.
    if ce || header[12] & 0x0f != 0 || flags & !0x08 != 0x10 {
        return None;
    }
    let mut options = &header[20..];
    while let Some(&kind) = options.first() {
        match kind {
            0 => break,
            1 => options = &options[1..],
            8 if options.get(1) == Some(&10) && options.len() >= 10 => options = &options[10..],
            _ => return None,
        }
    }
    Some(PureAck {
        ack: u32::from_be_bytes(header.get(8..12)?.try_into().ok()?),
    })
}

/// Whether the packet is an unfragmented IPv4 or IPv6 (no extension header) TCP segment
/// that carries no data and neither opens, closes nor resets its connection (no SYN, FIN
/// or RST): an acknowledgement, whatever its options (selective acknowledgements,
/// timestamps) and ECN flags. Such a segment takes no sequence space: its receiver
/// takes what it says (the acknowledgement number, the window, its SACK blocks) from any
/// order of arrival, and drops one older than what it already has (RFC 9293 3.10.7.4;
/// Linux's "old ACK"), so it need not wait for a segment lost before it.
pub(crate) fn acknowledges_only(p: &[u8]) -> bool {
    tcp_segment(p)
        .and_then(|(tcp, len, _)| dataless(tcp, len))
        .is_some_and(|(_, flags)| flags & 0x10 != 0 && flags & 0x07 == 0)
}

/// An IPv4 TCP segment from port `sport` to 80 with acknowledgement number `ack`, TCP
/// `flags`, `options` (padded to four bytes) and `payload` bytes of data.
#[cfg(test)]
pub(crate) fn test_tcp(sport: u16, ack: u32, flags: u8, options: &[u8], payload: usize) -> Vec<u8> {
    let opt = options.len().div_ceil(4) * 4;
    let total = 20 + 20 + opt + payload;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[6] = 0x40; // DF
    p[8] = 64;
    p[9] = PROTO_TCP;
    p[12..16].copy_from_slice(&[10, 77, 0, 2]);
    p[16..20].copy_from_slice(&[10, 77, 0, 1]);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&80u16.to_be_bytes());
    p[28..32].copy_from_slice(&ack.to_be_bytes());
    p[32] = ((20 + opt) / 4) as u8 * 16;
    p[33] = flags;
    p[40..40 + options.len()].copy_from_slice(options);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_segments_are_told_from_other_packets() {
        assert!(is_tcp(&test_tcp(5000, 1, 0x18, &[], 100)));
        assert!(!is_tcp(&ipv4_udp(0, 5000, 9)));
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[6] = PROTO_TCP;
        assert!(is_tcp(&v6));
        v6[6] = 17;
        assert!(!is_tcp(&v6));
        assert!(!is_tcp(&[]));
        assert!(!is_tcp(&[0x45]));
    }

    fn ipv4_udp(tos: u8, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[1] = tos;
        p[2..4].copy_from_slice(&28u16.to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&[198, 18, 0, 2]);
        p[16..20].copy_from_slice(&[198, 19, 0, 1]);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        let c = checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    fn checksum(h: &[u8]) -> u16 {
        let mut sum = 0u32;
        for c in h.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn ipv4_udp_keys_by_five_tuple() {
        let a = classify(&ipv4_udp(0, 1000, 2000)).unwrap();
        let b = classify(&ipv4_udp(0, 1001, 2000)).unwrap();
        assert_eq!(a.key.protocol, 17);
        assert_eq!((a.key.src_port, a.key.dst_port), (1000, 2000));
        assert_ne!(a.key, b.key);
    }

    /// TCP and QUIC re-send their losses and deliver in order; a call (RTP), DTLS and
    /// STUN on port 443 do not, nor a QUIC-like first byte on another port (DNS, a game).
    #[test]
    fn tcp_and_quic_are_reliable_other_datagrams_are_not() {
        assert!(
            classify(&test_tcp(5000, 1, 0x18, &[], 100))
                .unwrap()
                .reliable
        );
        let udp = |sport: u16, dport: u16, first: u8| {
            let mut p = ipv4_udp(0, sport, dport);
            p.extend_from_slice(&[first, 0, 0, 0]);
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            classify(&p).unwrap().reliable
        };
        // QUIC: a long header (Initial 0xc3), a short header (0x41..0x7f), either way.
        assert!(udp(50000, 443, 0xc3));
        assert!(udp(443, 50000, 0x4b));
        // RTP version 2 (0x80, 0x90), DTLS (22), STUN (0x00) on port 443: datagrams.
        for first in [0x80, 0x90, 22, 0x00] {
            assert!(!udp(50000, 443, first), "{first:#x}");
        }
        // A server's Initial or Handshake with the fixed bit greased (RFC 9287: 0x83,
        // 0xa0): QUIC by the version it names (1 or 2); RTP whose sequence number and
        // timestamp stand there is not, nor a greased short header (0x0b).
        let long = |first: u8, version: [u8; 4]| {
            let mut p = ipv4_udp(0, 443, 50000);
            p.push(first);
            p.extend_from_slice(&version);
            p.extend_from_slice(&[8, 0, 0, 0]);
            let len = p.len() as u16;
            p[2..4].copy_from_slice(&len.to_be_bytes());
            classify(&p).unwrap().reliable
        };
        assert!(long(0x83, [0, 0, 0, 1]));
        assert!(long(0xa0, [0x6b, 0x33, 0x43, 0xcf]));
        assert!(!long(0x80, [0x12, 0x34, 0x56, 0x78]));
        assert!(!long(0x0b, [0, 0, 0, 1]));
        // Too short to name a version.
        let mut short = ipv4_udp(0, 443, 50000);
        short.extend_from_slice(&[0x83, 0, 0, 0]);
        let len = short.len() as u16;
        short[2..4].copy_from_slice(&len.to_be_bytes());
        assert!(!classify(&short).unwrap().reliable);
        // QUIC's first byte, but not port 443; and port 443 with no payload.
        assert!(!udp(50000, 4433, 0x41));
        assert!(!udp(50000, 53, 0x41));
        assert!(!classify(&ipv4_udp(0, 50000, 443)).unwrap().reliable);
        // A later fragment: no transport header to read.
        let mut frag = ipv4_udp(0, 50000, 443);
        frag.extend_from_slice(&[0x41, 0, 0, 0]);
        frag[6..8].copy_from_slice(&0x0010u16.to_be_bytes());
        assert!(!classify(&frag).unwrap().reliable);
        // IPv6: UDP to 443 with a short header.
        let mut v6 = vec![0u8; 40 + 8 + 4];
        v6[0] = 0x60;
        v6[6] = 17;
        v6[42..44].copy_from_slice(&443u16.to_be_bytes());
        v6[48] = 0x41;
        assert!(classify(&v6).unwrap().reliable);
        v6[48] = 0x80;
        assert!(!classify(&v6).unwrap().reliable);
    }

    #[test]
    fn ef_dscp_is_latency_sensitive() {
        let p = classify(&ipv4_udp(46 << 2, 1, 2)).unwrap();
        assert_eq!(p.dscp, 46);
        assert!(p.is_latency_sensitive());
        assert!(!classify(&ipv4_udp(0, 1, 2)).unwrap().is_latency_sensitive());
    }

    #[test]
    fn ipv6_tcp_skips_extension_headers() {
        let mut p = vec![0u8; 40 + 8 + 20];
        p[0] = 0x60 | (46 >> 2);
        p[1] = (46 & 0x03) << 6;
        p[6] = 0; // hop-by-hop
        p[40] = 6; // next: TCP
        p[41] = 0; // 8 bytes
        p[48..50].copy_from_slice(&443u16.to_be_bytes());
        p[50..52].copy_from_slice(&5555u16.to_be_bytes());
        let info = classify(&p).unwrap();
        assert_eq!(info.key.protocol, 6);
        assert_eq!((info.key.src_port, info.key.dst_port), (443, 5555));
        assert_eq!(info.dscp, 46);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(classify(&[]), Err(ClassifyError::Truncated));
        assert_eq!(classify(&[0x45, 0, 0]), Err(ClassifyError::Truncated));
        assert_eq!(classify(&[0x10; 40]), Err(ClassifyError::NotIp(1)));
        assert_eq!(classify(&[0x4f; 30]), Err(ClassifyError::Truncated));
    }

    #[test]
    fn mark_ce_keeps_ipv4_checksum_valid() {
        let mut p = ipv4_udp(0x02, 1, 2); // ECT(0)
        assert!(mark_ce(&mut p));
        assert_eq!(p[1] & 3, 3);
        assert_eq!(checksum(&p[..20]), 0);
        let mut not_ect = ipv4_udp(0, 1, 2);
        assert!(!mark_ce(&mut not_ect));
    }

    proptest::proptest! {
        #[test]
        fn classify_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let _ = classify(&bytes);
            let _ = pure_ack(&bytes);
            let _ = acknowledges_only(&bytes);
            let mut b = bytes.clone();
            let _ = mark_ce(&mut b);
        }
    }

    /// Timestamps option with two NOPs before it, as Linux sends it.
    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    const ACK: u8 = 0x10;

    #[test]
    fn pure_acks_are_recognised_and_everything_else_kept() {
        assert_eq!(
            pure_ack(&test_tcp(1, 7, ACK, &[], 0)),
            Some(PureAck { ack: 7 })
        );
        assert_eq!(
            pure_ack(&test_tcp(1, 7, ACK | 0x08, &TS, 0)),
            Some(PureAck { ack: 7 })
        );
        // Data, SYN, FIN, RST, ECE, CWR: not pure acknowledgements.
        assert_eq!(pure_ack(&test_tcp(1, 7, ACK, &TS, 1)), None);
        for flag in [0x02, 0x01, 0x04, 0x20, 0x40, 0x80] {
            assert_eq!(
                pure_ack(&test_tcp(1, 7, ACK | flag, &[], 0)),
                None,
                "{flag:#x}"
            );
        }
        // Selective acknowledgement blocks, window scale: kept.
        let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        assert_eq!(pure_ack(&test_tcp(1, 7, ACK, &sack, 0)), None);
        assert_eq!(pure_ack(&test_tcp(1, 7, ACK, &[3, 3, 7], 0)), None);
        // CE-marked, a fragment, UDP, truncated: kept.
        let mut ce = test_tcp(1, 7, ACK, &[], 0);
        ce[1] = 3;
        assert_eq!(pure_ack(&ce), None);
        let mut frag = test_tcp(1, 7, ACK, &[], 0);
        frag[6] = 0x20;
        assert_eq!(pure_ack(&frag), None);
        assert_eq!(pure_ack(&ipv4_udp(0, 1, 2)), None);
        let whole = test_tcp(1, 7, ACK, &TS, 0);
        for n in 0..whole.len() {
            assert_eq!(pure_ack(&whole[..n]), None, "{n} bytes");
        }
    }

    #[test]
    fn acknowledgements_are_told_from_segments_that_take_sequence_space() {
        let sack = [1, 1, 5, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        // Any options, PSH, ECE, CWR, CE: an acknowledgement still.
        for p in [
            test_tcp(1, 7, ACK, &[], 0),
            test_tcp(1, 7, ACK | 0x08, &TS, 0),
            test_tcp(1, 7, ACK, &sack, 0),
            test_tcp(1, 7, ACK | 0x40 | 0x80, &[], 0),
        ] {
            assert!(acknowledges_only(&p), "{:?}", &p[32..34]);
        }
        let mut ce = test_tcp(1, 7, ACK, &[], 0);
        ce[1] = 3;
        assert!(acknowledges_only(&ce));
        // Data, SYN, FIN, RST, no ACK flag, a fragment, UDP, truncated: not.
        assert!(!acknowledges_only(&test_tcp(1, 7, ACK, &[], 1)));
        for flags in [ACK | 0x02, ACK | 0x01, ACK | 0x04, 0x04, 0] {
            assert!(
                !acknowledges_only(&test_tcp(1, 7, flags, &[], 0)),
                "{flags:#x}"
            );
        }
        let mut frag = test_tcp(1, 7, ACK, &[], 0);
        frag[6] = 0x20;
        assert!(!acknowledges_only(&frag));
        assert!(!acknowledges_only(&ipv4_udp(0, 1, 2)));
        let whole = test_tcp(1, 7, ACK, &sack, 0);
        for n in 0..whole.len() {
            assert!(!acknowledges_only(&whole[..n]), "{n} bytes");
        }
    }

    #[test]
    fn ipv6_pure_acks_are_recognised() {
        let v4 = test_tcp(1, 9, ACK, &TS, 0);
        let mut p = vec![0u8; 40];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&32u16.to_be_bytes());
        p[6] = PROTO_TCP;
        p.extend_from_slice(&v4[20..]);
        assert_eq!(pure_ack(&p), Some(PureAck { ack: 9 }));
        p[6] = 0; // a hop-by-hop header first: not looked into
        assert_eq!(pure_ack(&p), None);
    }

    #[test]
    fn only_a_later_acknowledgement_supersedes() {
        let a = |ack| PureAck { ack };
        assert!(a(2).supersedes(a(1)));
        assert!(a(5).supersedes(a(u32::MAX - 5)), "across the wrap");
        assert!(!a(1).supersedes(a(1)), "a duplicate acknowledgement");
        assert!(!a(1).supersedes(a(2)));
    }
}
