//! Inner-packet helpers the daemons need: addresses, and TCP MSS clamping on SYNs so that
//! TCP segments fit the tunnel's MTU without fragmentation.

use std::net::Ipv4Addr;

use latebind_proto::classify::checksum_adjust;

/// Source and destination of an IPv4 packet.
pub fn ipv4_addrs(p: &[u8]) -> Option<(Ipv4Addr, Ipv4Addr)> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let src = Ipv4Addr::new(p[12], p[13], p[14], p[15]);
    let dst = Ipv4Addr::new(p[16], p[17], p[18], p[19]);
    Some((src, dst))
}

/// Lowers the MSS option of an IPv4 TCP SYN to at most `max_mss`, fixing the TCP
/// checksum (RFC 1624). Returns whether the packet changed. Never panics.
pub fn clamp_mss(p: &mut [u8], max_mss: u16) -> bool {
    if p.len() < 20 || p[0] >> 4 != 4 || p[9] != 6 {
        return false;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let frag = u16::from_be_bytes([p[6], p[7]]) & 0x1fff;
    if frag != 0 || p.len() < ihl + 20 {
        return false;
    }
    let tcp = ihl;
    if p[tcp + 13] & 0x02 == 0 {
        return false; // not a SYN
    }
    let data_off = usize::from(p[tcp + 12] >> 4) * 4;
    if data_off < 20 || p.len() < tcp + data_off {
        return false;
    }
    let mut i = tcp + 20;
    let end = tcp + data_off;
    while i < end {
        match p[i] {
            0 => return false,
            1 => i += 1,
            kind => {
                let Some(&len) = p.get(i + 1) else {
                    return false;
                };
                let len = usize::from(len);
                if len < 2 || i + len > end {
                    return false;
                }
                if kind == 2 && len == 4 {
                    let old = u16::from_be_bytes([p[i + 2], p[i + 3]]);
                    if old <= max_mss {
                        return false;
                    }
                    p[i + 2..i + 4].copy_from_slice(&max_mss.to_be_bytes());
                    let hc = u16::from_be_bytes([p[tcp + 16], p[tcp + 17]]);
                    let hc = checksum_adjust(hc, old, max_mss);
                    p[tcp + 16..tcp + 18].copy_from_slice(&hc.to_be_bytes());
                    return true;
                }
                i += len;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csum(data: &[u8]) -> u16 {
        let mut sum = 0u32;
        for c in data.chunks(2) {
            let w = if c.len() == 2 {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from(c[0]) << 8
            };
            sum += u32::from(w);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn tcp_checksum_ok(p: &[u8]) -> bool {
        let ihl = usize::from(p[0] & 0x0f) * 4;
        let tcp = &p[ihl..];
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&(tcp.len() as u16).to_be_bytes());
        pseudo.extend_from_slice(tcp);
        csum(&pseudo) == 0
    }

    fn syn_with_mss(mss: u16) -> Vec<u8> {
        let mut p = vec![0u8; 20 + 24];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&44u16.to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 77, 0, 2]);
        p[16..20].copy_from_slice(&[10, 77, 0, 1]);
        let t = 20;
        p[t + 12] = 6 << 4;
        p[t + 13] = 0x02;
        p[t + 20..t + 24].copy_from_slice(&[2, 4, (mss >> 8) as u8, mss as u8]);
        let ihl = 20;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&p[12..20]);
        pseudo.extend_from_slice(&[0, 6]);
        pseudo.extend_from_slice(&24u16.to_be_bytes());
        pseudo.extend_from_slice(&p[ihl..]);
        let c = csum(&pseudo);
        p[t + 16..t + 18].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn syn_mss_above_limit_clamped_with_valid_checksum() {
        let mut p = syn_with_mss(1460);
        assert!(tcp_checksum_ok(&p));
        assert!(clamp_mss(&mut p, 1360));
        assert_eq!(u16::from_be_bytes([p[42], p[43]]), 1360);
        assert!(tcp_checksum_ok(&p));
    }

    #[test]
    fn syn_mss_below_limit_untouched() {
        let mut p = syn_with_mss(1200);
        assert!(!clamp_mss(&mut p, 1360));
    }

    #[test]
    fn garbage_never_panics() {
        for n in 0..64 {
            let mut b = vec![0x46u8; n];
            if n > 9 {
                b[9] = 6;
            }
            let _ = clamp_mss(&mut b, 1000);
        }
    }
}
