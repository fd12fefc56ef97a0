//! IPv4 / UDP packet building and the minimal parsing the flows need.
//!
//! Only what the traffic generators use: 20-byte IPv4 headers (no options are
//! emitted; options are tolerated when parsing), UDP with checksum 0, the
//! `LBT1` probe payload, and a read-only view of TCP segment headers for the
//! accounting of tcp-bulk flows.

use std::net::Ipv4Addr;

/// Address of the client end of every flow.
pub(crate) const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Address of the server end of every flow.
pub(crate) const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);

/// IPv4 protocol number of TCP.
pub(crate) const PROTO_TCP: u8 = 6;
/// IPv4 protocol number of UDP.
pub(crate) const PROTO_UDP: u8 = 17;

/// Length of the IPv4 header we emit.
pub(crate) const IPV4_HEADER_LEN: usize = 20;
/// Length of the UDP header.
pub(crate) const UDP_HEADER_LEN: usize = 8;
/// Magic at the start of every probe payload.
pub(crate) const PROBE_MAGIC: &[u8; 4] = b"LBT1";
/// Probe payload: magic (4), flow index (2), reserved (2), seq (8), send time ns (8).
pub(crate) const PROBE_LEN: usize = 24;
/// Smallest UDP probe packet: IPv4 + UDP headers + probe payload.
pub(crate) const MIN_PROBE_PACKET: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN + PROBE_LEN;

/// The Internet checksum (RFC 1071) of `data`.
pub(crate) fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Whether `packet` starts with an IPv4 header whose checksum is valid.
#[cfg(test)]
pub(crate) fn ipv4_checksum_ok(packet: &[u8]) -> bool {
    match header_len(packet) {
        Some(ihl) => internet_checksum(&packet[..ihl]) == 0,
        None => false,
    }
}

/// Header length of the IPv4 packet, if it looks like one.
fn header_len(packet: &[u8]) -> Option<usize> {
    let first = *packet.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    (ihl >= IPV4_HEADER_LEN && packet.len() >= ihl).then_some(ihl)
}

/// Writes the DSCP into the TOS byte of an IPv4 packet (keeping the ECN bits)
/// and recomputes the header checksum.
pub(crate) fn set_dscp(packet: &mut [u8], dscp: u8) {
    let Some(ihl) = header_len(packet) else {
        return;
    };
    packet[1] = (dscp << 2) | (packet[1] & 0x03);
    packet[10] = 0;
    packet[11] = 0;
    let sum = internet_checksum(&packet[..ihl]);
    packet[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// Writes a 20-byte IPv4 header (DF set, TTL 64, valid checksum) into `buf[..20]`.
fn write_ipv4_header(
    buf: &mut [u8],
    total_len: u16,
    dscp: u8,
    ident: u16,
    proto: u8,
    src: Ipv4Addr,
    dst: Ipv4Addr,
) {
    let h = &mut buf[..IPV4_HEADER_LEN];
    h[0] = 0x45;
    h[1] = dscp << 2;
    h[2..4].copy_from_slice(&total_len.to_be_bytes());
    h[4..6].copy_from_slice(&ident.to_be_bytes());
    h[6..8].copy_from_slice(&0x4000u16.to_be_bytes()); // DF, fragment offset 0
    h[8] = 64;
    h[9] = proto;
    h[10] = 0;
    h[11] = 0;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = internet_checksum(h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// The first byte of a `quic-bulk` datagram's payload: a QUIC short header's (the fixed
/// bit 0x40 set, RFC 9000 17.3), which the tunnel's classifier reads on port 443.
pub(crate) const QUIC_FIRST_BYTE: u8 = 0x40;
/// Bytes a `quic-bulk` datagram adds to the TCP segment it carries: UDP's header and
/// the first byte.
pub(crate) const QUIC_OVERHEAD: usize = UDP_HEADER_LEN + 1;

/// An IPv4/TCP packet's segment carried as `quic-bulk` does: in a UDP datagram from
/// `src_port` to `dst_port` (the same addresses and TOS), its payload
/// [`QUIC_FIRST_BYTE`] and the segment. `None` if `packet` is not IPv4.
pub(crate) fn wrap_in_udp(packet: &[u8], src_port: u16, dst_port: u16) -> Option<Vec<u8>> {
    let segment = &packet[header_len(packet)?..];
    let udp_len = u16::try_from(QUIC_OVERHEAD + segment.len()).ok()?;
    let mut udp = [0u8; QUIC_OVERHEAD];
    udp[0..2].copy_from_slice(&src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    // udp[6..8]: checksum 0 = none.
    udp[UDP_HEADER_LEN] = QUIC_FIRST_BYTE;
    reheader(packet, PROTO_UDP, &[&udp, segment])
}

/// The IPv4/TCP packet a [`wrap_in_udp`] datagram carries (its TOS, ECN included, as
/// the datagram arrived). `None` if `packet` is not such a datagram.
pub(crate) fn unwrap_from_udp(packet: &[u8]) -> Option<Vec<u8>> {
    let ihl = header_len(packet)?;
    if packet[9] != PROTO_UDP || packet.get(ihl + UDP_HEADER_LEN) != Some(&QUIC_FIRST_BYTE) {
        return None;
    }
    reheader(packet, PROTO_TCP, &[&packet[ihl + QUIC_OVERHEAD..]])
}

/// `body` behind a new 20-byte IPv4 header of `proto` with `packet`'s addresses,
/// identification and whole TOS byte (DSCP and ECN). `None` if over 65535 bytes.
fn reheader(packet: &[u8], proto: u8, body: &[&[u8]]) -> Option<Vec<u8>> {
    let total = IPV4_HEADER_LEN + body.iter().map(|b| b.len()).sum::<usize>();
    let mut buf = vec![0u8; IPV4_HEADER_LEN];
    write_ipv4_header(
        &mut buf,
        u16::try_from(total).ok()?,
        0,
        u16::from_be_bytes([packet[4], packet[5]]),
        proto,
        Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]),
        Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]),
    );
    buf[1] = packet[1];
    buf[10..12].fill(0);
    let sum = internet_checksum(&buf);
    buf[10..12].copy_from_slice(&sum.to_be_bytes());
    for b in body {
        buf.extend_from_slice(b);
    }
    Some(buf)
}

/// The fields of one UDP probe packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    /// Flow index carried in the payload.
    pub(crate) index: u16,
    /// Per-flow sequence number, from 0.
    pub(crate) seq: u64,
    /// Send time in nanoseconds since the simulation origin.
    pub(crate) send_ns: u64,
}

/// The 4-tuple (and DSCP) of a UDP probe packet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UdpAddressing {
    pub(crate) src: Ipv4Addr,
    pub(crate) dst: Ipv4Addr,
    pub(crate) src_port: u16,
    pub(crate) dst_port: u16,
    pub(crate) dscp: u8,
}

/// Builds a whole IPv4/UDP probe packet of `total_len` bytes
/// (at least [`MIN_PROBE_PACKET`], at most 65535).
pub(crate) fn build_probe(addr: &UdpAddressing, total_len: usize, probe: Probe) -> Vec<u8> {
    let total_len = total_len.clamp(MIN_PROBE_PACKET, usize::from(u16::MAX));
    let mut buf = vec![0u8; total_len];
    write_ipv4_header(
        &mut buf,
        total_len as u16,
        addr.dscp,
        probe.seq as u16,
        PROTO_UDP,
        addr.src,
        addr.dst,
    );
    let udp = &mut buf[IPV4_HEADER_LEN..];
    udp[0..2].copy_from_slice(&addr.src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&addr.dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&((total_len - IPV4_HEADER_LEN) as u16).to_be_bytes());
    // udp[6..8]: checksum 0 = none.
    let p = &mut udp[UDP_HEADER_LEN..UDP_HEADER_LEN + PROBE_LEN];
    p[0..4].copy_from_slice(PROBE_MAGIC);
    p[4..6].copy_from_slice(&probe.index.to_be_bytes());
    // p[6..8]: reserved.
    p[8..16].copy_from_slice(&probe.seq.to_be_bytes());
    p[16..24].copy_from_slice(&probe.send_ns.to_be_bytes());
    buf
}

/// Parses a UDP probe packet; `None` if it is not an IPv4/UDP packet carrying
/// an `LBT1` payload.
pub(crate) fn parse_probe(packet: &[u8]) -> Option<Probe> {
    let ihl = header_len(packet)?;
    if packet[9] != PROTO_UDP {
        return None;
    }
    let p = packet.get(ihl + UDP_HEADER_LEN..ihl + UDP_HEADER_LEN + PROBE_LEN)?;
    if &p[0..4] != PROBE_MAGIC {
        return None;
    }
    Some(Probe {
        index: u16::from_be_bytes([p[4], p[5]]),
        seq: u64::from_be_bytes(p[8..16].try_into().ok()?),
        send_ns: u64::from_be_bytes(p[16..24].try_into().ok()?),
    })
}

/// What the accounting needs from one TCP segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpSegment {
    /// Sequence number of the first byte (of the SYN for a SYN segment).
    pub(crate) seq: u32,
    /// Number of payload bytes.
    pub(crate) payload_len: u32,
    /// SYN flag.
    pub(crate) syn: bool,
    /// ACK flag.
    pub(crate) ack: bool,
}

/// Parses the TCP header of an IPv4/TCP packet.
pub(crate) fn parse_tcp(packet: &[u8]) -> Option<TcpSegment> {
    let ihl = header_len(packet)?;
    if packet[9] != PROTO_TCP {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([packet[2], packet[3]])).min(packet.len());
    let tcp = packet.get(ihl..total)?;
    if tcp.len() < 20 {
        return None;
    }
    let doff = usize::from(tcp[12] >> 4) * 4;
    if doff < 20 || doff > tcp.len() {
        return None;
    }
    let flags = tcp[13];
    Some(TcpSegment {
        seq: u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]),
        payload_len: (tcp.len() - doff) as u32,
        syn: flags & 0x02 != 0,
        ack: flags & 0x10 != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addressing() -> UdpAddressing {
        UdpAddressing {
            src: CLIENT_ADDR,
            dst: SERVER_ADDR,
            src_port: 10_003,
            dst_port: 20_003,
            dscp: 46,
        }
    }

    #[test]
    fn ip_checksum_valid() {
        let probe = Probe {
            index: 3,
            seq: 77,
            send_ns: 123_456_789,
        };
        let pkt = build_probe(&addressing(), 200, probe);
        assert_eq!(pkt.len(), 200);
        assert!(ipv4_checksum_ok(&pkt));
        assert_eq!(pkt[1] >> 2, 46);
        assert_eq!(pkt[9], PROTO_UDP);
        assert_eq!(&pkt[12..16], &CLIENT_ADDR.octets());
        assert_eq!(&pkt[16..20], &SERVER_ADDR.octets());
        assert_eq!(u16::from_be_bytes([pkt[20], pkt[21]]), 10_003);
        assert_eq!(u16::from_be_bytes([pkt[22], pkt[23]]), 20_003);
        assert_eq!(u16::from_be_bytes([pkt[24], pkt[25]]), 180);
        assert_eq!(parse_probe(&pkt), Some(probe));
    }

    #[test]
    fn checksum_detects_corruption_and_set_dscp_fixes_it() {
        let mut pkt = build_probe(
            &addressing(),
            60,
            Probe {
                index: 1,
                seq: 2,
                send_ns: 3,
            },
        );
        pkt[8] = 63;
        assert!(!ipv4_checksum_ok(&pkt));
        set_dscp(&mut pkt, 10);
        assert!(ipv4_checksum_ok(&pkt));
        assert_eq!(pkt[1] >> 2, 10);
    }

    #[test]
    fn probe_packets_have_a_minimum_size() {
        let pkt = build_probe(
            &addressing(),
            10,
            Probe {
                index: 0,
                seq: 0,
                send_ns: 0,
            },
        );
        assert_eq!(pkt.len(), MIN_PROBE_PACKET);
        assert!(parse_probe(&pkt).is_some());
        assert!(parse_probe(&pkt[..pkt.len() - 1]).is_none());
    }

    #[test]
    fn checksum_of_odd_length() {
        // RFC 1071 example bytes, padded with an odd trailing byte.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x01];
        let sum = internet_checksum(&data);
        let mut with = data.to_vec();
        with.push(0);
        assert_eq!(sum, internet_checksum(&with));
    }

    proptest::proptest! {
        #[test]
        fn probe_roundtrip(index: u16, seq: u64, send_ns: u64, len in 0usize..2000, dscp in 0u8..64) {
            let a = UdpAddressing { dscp, ..addressing() };
            let p = Probe { index, seq, send_ns };
            let pkt = build_probe(&a, len, p);
            proptest::prop_assert!(ipv4_checksum_ok(&pkt));
            proptest::prop_assert_eq!(pkt.len(), len.max(MIN_PROBE_PACKET));
            proptest::prop_assert_eq!(parse_probe(&pkt), Some(p));
        }
    }
}
