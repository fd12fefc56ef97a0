//! "Packet too big" for an inner packet larger than the tunnel carries whole: an ICMP
//! destination unreachable, fragmentation needed (RFC 792, RFC 1191) for IPv4 with DF
//! set, an ICMPv6 packet too big (RFC 4443 3.2) for IPv6, addressed to the packet's
//! source, as a router on the path sends it. The sender's path MTU discovery then sends
//! smaller packets, which every link carries (docs/protocol.md 4.2).

use etherparse::{Icmpv4Type, Icmpv6Type, IpNumber, PacketBuilder, icmpv4::DestUnreachableHeader};

/// Largest ICMPv4 error (RFC 1812 4.3.2.3: as much of the packet as fits in 576 bytes).
const V4_REPLY_MAX: usize = 576;
/// Largest ICMPv6 error (RFC 4443 2.4 (c): within the minimum IPv6 MTU).
const V6_REPLY_MAX: usize = 1280;
/// IPv6's minimum link MTU: a smaller one cannot be signalled (RFC 8200 5).
const V6_MIN_MTU: usize = 1280;
const HOP_LIMIT: u8 = 64;

/// The "packet too big" answer to `packet` (an IPv4 or IPv6 packet, as the TUN side
/// gives it) for a path of `mtu` bytes, or `None` when none may be sent: the packet fits,
/// it may be fragmented (IPv4 without DF), it is itself an ICMP error, its source is not
/// a unicast address, or `mtu` is below what the version can signal.
pub fn too_big_reply(packet: &[u8], mtu: usize) -> Option<Vec<u8>> {
    if packet.len() <= mtu {
        return None;
    }
    match packet.first()? >> 4 {
        4 => v4(packet, mtu),
        6 => v6(packet, mtu),
        _ => None,
    }
}

fn v4(packet: &[u8], mtu: usize) -> Option<Vec<u8>> {
    let ihl = usize::from(packet.first()? & 0x0f) * 4;
    if packet.len() < ihl.max(20) || mtu < 68 {
        return None;
    }
    let dont_fragment = packet[6] & 0x40 != 0;
    let first_fragment = u16::from_be_bytes([packet[6] & 0x1f, packet[7]]) == 0;
    let src: [u8; 4] = packet[12..16].try_into().ok()?;
    let dst: [u8; 4] = packet[16..20].try_into().ok()?;
    // Never about an ICMP error (RFC 1122 3.2.2), a later fragment, or to a source
    // that is not one host.
    let icmp_error = packet[9] == 1 && matches!(packet.get(ihl), Some(3 | 4 | 5 | 11 | 12));
    if !dont_fragment
        || !first_fragment
        || icmp_error
        || src[0] == 0
        || src[0] >= 224
        || src[0] == 127
    {
        return None;
    }
    let next_hop_mtu = u16::try_from(mtu).unwrap_or(u16::MAX);
    let builder =
        PacketBuilder::ipv4(dst, src, HOP_LIMIT).icmpv4(Icmpv4Type::DestinationUnreachable(
            DestUnreachableHeader::FragmentationNeeded { next_hop_mtu },
        ));
    let quoted = &packet[..packet.len().min(V4_REPLY_MAX - 20 - 8)];
    let mut out = Vec::with_capacity(builder.size(quoted.len()));
    builder.write(&mut out, quoted).ok()?;
    Some(out)
}

fn v6(packet: &[u8], mtu: usize) -> Option<Vec<u8>> {
    if packet.len() < 40 || mtu < V6_MIN_MTU {
        return None;
    }
    let src: [u8; 16] = packet[8..24].try_into().ok()?;
    let dst: [u8; 16] = packet[24..40].try_into().ok()?;
    // Never about an ICMPv6 error (types below 128), or to the unspecified or a
    // multicast source.
    let icmp_error = packet[6] == IpNumber::IPV6_ICMP.0 && packet.get(40).is_some_and(|&t| t < 128);
    if icmp_error || src == [0; 16] || src[0] == 0xff {
        return None;
    }
    let builder = PacketBuilder::ipv6(dst, src, HOP_LIMIT).icmpv6(Icmpv6Type::PacketTooBig {
        mtu: u32::try_from(mtu).unwrap_or(u32::MAX),
    });
    let quoted = &packet[..packet.len().min(V6_REPLY_MAX - 40 - 8)];
    let mut out = Vec::with_capacity(builder.size(quoted.len()));
    builder.write(&mut out, quoted).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};

    fn v4_packet(len: usize, df: bool, protocol: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[6] = if df { 0x40 } else { 0 };
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&[198, 51, 100, 7]);
        p[16..20].copy_from_slice(&[10, 77, 0, 2]);
        p
    }

    fn v6_packet(len: usize, next: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = next;
        p[7] = 64;
        p[8] = 0x20;
        p[23] = 7;
        p[24] = 0xfd;
        p[39] = 2;
        p
    }

    #[test]
    fn an_ipv4_packet_with_df_gets_fragmentation_needed_from_its_destination() {
        let p = v4_packet(1400, true, 6);
        let r = too_big_reply(&p, 1329).expect("a reply");
        assert!(r.len() <= V4_REPLY_MAX);
        let s = SlicedPacket::from_ip(&r).unwrap();
        let Some(NetSlice::Ipv4(ip)) = &s.net else {
            panic!("not IPv4")
        };
        assert_eq!(ip.header().source(), [10, 77, 0, 2]);
        assert_eq!(ip.header().destination(), [198, 51, 100, 7]);
        let Some(TransportSlice::Icmpv4(icmp)) = &s.transport else {
            panic!("not ICMP")
        };
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
                next_hop_mtu: 1329
            })
        );
        // The checksum covers the message; the quote starts with the packet's header.
        assert_eq!(
            icmp.checksum(),
            icmp.icmp_type().calc_checksum(icmp.payload())
        );
        assert_eq!(&icmp.payload()[..20], &p[..20]);
    }

    #[test]
    fn an_ipv6_packet_gets_packet_too_big() {
        let p = v6_packet(1400, 6);
        let r = too_big_reply(&p, 1329).expect("a reply");
        assert!(r.len() <= V6_REPLY_MAX);
        let s = SlicedPacket::from_ip(&r).unwrap();
        let Some(NetSlice::Ipv6(ip)) = &s.net else {
            panic!("not IPv6")
        };
        assert_eq!(
            ip.header().source(),
            <[u8; 16]>::try_from(&p[24..40]).unwrap()
        );
        assert_eq!(
            ip.header().destination(),
            <[u8; 16]>::try_from(&p[8..24]).unwrap()
        );
        let Some(TransportSlice::Icmpv6(icmp)) = &s.transport else {
            panic!("not ICMPv6")
        };
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1329 });
        let expected = icmp
            .icmp_type()
            .calc_checksum(
                ip.header().source(),
                ip.header().destination(),
                icmp.payload(),
            )
            .unwrap();
        assert_eq!(icmp.checksum(), expected);
    }

    #[test]
    fn no_reply_where_none_may_be_sent() {
        // It fits; IPv4 without DF (the kernel below fragments it); an ICMP error;
        // a multicast source; an IPv6 path below 1280.
        assert!(too_big_reply(&v4_packet(1300, true, 6), 1329).is_none());
        assert!(too_big_reply(&v4_packet(1400, false, 17), 1329).is_none());
        let mut error = v4_packet(1400, true, 1);
        error[20] = 3;
        assert!(too_big_reply(&error, 1329).is_none());
        let mut echo = v4_packet(1400, true, 1);
        echo[20] = 8;
        assert!(too_big_reply(&echo, 1329).is_some());
        let mut multicast = v4_packet(1400, true, 17);
        multicast[12] = 239;
        assert!(too_big_reply(&multicast, 1329).is_none());
        assert!(too_big_reply(&v6_packet(1400, 6), 1279).is_none());
        let mut error6 = v6_packet(1400, 58);
        error6[40] = 1;
        assert!(too_big_reply(&error6, 1329).is_none());
        // Garbage gets nothing, and no panic.
        assert!(too_big_reply(&[0x45; 30], 20).is_none());
        assert!(too_big_reply(&[0x60; 39], 1280).is_none());
        assert!(too_big_reply(&[], 0).is_none());
    }
}
