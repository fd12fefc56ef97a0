//! A minimal rtnetlink client for the operations the runner times precisely: setting
//! a link up or down, replacing or deleting a route, pinning a neighbour, and reading
//! a root qdisc's counters (packets sent, drops, backlog).
//!
//! Setup uses the `ip` and `tc` commands (readable, logged); these calls are for the
//! moments that must land within microseconds of a scenario time, where forking `ip`
//! (~3 ms) would blur the result. A socket opened with [`Netlink::open_in`] acts in that
//! namespace for its whole life, whichever thread uses it.

use std::io;
use std::mem;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};

use crate::sys::{self, cvt, cvt_size};

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const NLM_F_DUMP: u16 = 0x300;

const RTM_NEWLINK: u16 = 16;
const RTM_NEWROUTE: u16 = 24;
const RTM_DELROUTE: u16 = 25;
const RTM_NEWNEIGH: u16 = 28;
const RTM_GETQDISC: u16 = 38;

const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTA_PRIORITY: u16 = 6;
const RTA_PREFSRC: u16 = 7;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const TCA_KIND: u16 = 1;
const TCA_STATS2: u16 = 7;
const TCA_STATS_BASIC: u16 = 1;
const TCA_STATS_QUEUE: u16 = 3;
const TC_H_ROOT: u32 = 0xffff_ffff;
const NUD_PERMANENT: u16 = 0x80;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RT_SCOPE_NOWHERE: u8 = 255;
const RTN_UNICAST: u8 = 1;

/// Counters of a root qdisc (`tc -s qdisc`), read through rtnetlink.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// The qdisc's kind (`htb`, `pfifo`, `noqueue`, ...), up to 15 bytes.
    pub kind: [u8; 16],
    /// Packets dequeued towards the device.
    pub packets: u64,
    /// Bytes dequeued towards the device.
    pub bytes: u64,
    /// Packets dropped (a full FIFO).
    pub drops: u32,
    /// Packets waiting now.
    pub qlen: u32,
    /// Bytes waiting now.
    pub backlog: u32,
}

impl QdiscStats {
    /// The kind as text.
    pub fn kind(&self) -> &str {
        let end = self.kind.iter().position(|&b| b == 0).unwrap_or(16);
        std::str::from_utf8(&self.kind[..end]).unwrap_or("?")
    }
}

/// A host route to `dst/32` through `gateway` on interface `oif`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Destination host.
    pub dst: Ipv4Addr,
    /// Next hop (on the interface's subnet).
    pub gateway: Ipv4Addr,
    /// Outgoing interface index.
    pub oif: i32,
    /// Metric: lower wins.
    pub metric: u32,
    /// Preferred source address.
    pub src: Option<Ipv4Addr>,
}

/// An rtnetlink socket in one network namespace, plus a datagram socket there for
/// interface ioctls.
#[derive(Debug)]
pub struct Netlink {
    fd: OwnedFd,
    ioctl: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

fn push_attr(msg: &mut Vec<u8>, ty: u16, data: &[u8]) {
    let len = 4 + data.len();
    msg.extend_from_slice(&(len as u16).to_ne_bytes());
    msg.extend_from_slice(&ty.to_ne_bytes());
    msg.extend_from_slice(data);
    while !msg.len().is_multiple_of(4) {
        msg.push(0);
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Iterates the `(type, payload)` of the rtattrs in `b`.
fn attrs(mut b: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let len = usize::from(u16_at(b, 0)?);
        let ty = u16_at(b, 2)? & 0x3fff;
        if len < 4 || len > b.len() {
            return None;
        }
        let data = &b[4..len];
        let next = len.next_multiple_of(4).min(b.len());
        b = &b[next..];
        Some((ty, data))
    })
}

/// Parses one RTM_NEWQDISC message body (after the 16-byte header): ifindex, parent
/// and counters.
fn parse_qdisc(body: &[u8]) -> Option<(i32, u32, QdiscStats)> {
    let ifindex = u32_at(body, 4)? as i32;
    let parent = u32_at(body, 12)?;
    let mut s = QdiscStats::default();
    for (ty, data) in attrs(body.get(20..)?) {
        match ty {
            TCA_KIND => {
                let n = data.len().min(15);
                s.kind[..n].copy_from_slice(&data[..n]);
            }
            TCA_STATS2 => {
                for (ty2, d) in attrs(data) {
                    match ty2 {
                        TCA_STATS_BASIC => {
                            s.bytes = u64_at(d, 0).unwrap_or(0);
                            s.packets = u64::from(u32_at(d, 8).unwrap_or(0));
                        }
                        TCA_STATS_QUEUE => {
                            s.qlen = u32_at(d, 0).unwrap_or(0);
                            s.backlog = u32_at(d, 4).unwrap_or(0);
                            s.drops = u32_at(d, 8).unwrap_or(0);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    Some((ifindex, parent, s))
}

impl Netlink {
    /// Opens the sockets inside the named namespace (`ip netns` name).
    pub fn open_in(ns: &str) -> io::Result<Self> {
        let (fd, ioctl) = sys::in_netns(ns, || {
            let fd = sys::socket(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)?;
            let ioctl = sys::socket(libc::AF_INET, libc::SOCK_DGRAM, 0)?;
            Ok((fd, ioctl))
        })?;
        // SAFETY: sockaddr_nl is POD; zeroed = let the kernel pick the port id.
        let mut sa: libc::sockaddr_nl = unsafe { mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: valid sockaddr of the given length.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        })?;
        Ok(Self {
            fd,
            ioctl,
            seq: 1,
            buf: vec![0; 64 * 1024],
        })
    }

    /// The index of interface `name` in this namespace.
    pub fn ifindex(&self, name: &str) -> io::Result<i32> {
        // SAFETY: ifreq is POD.
        let mut req: libc::ifreq = unsafe { mem::zeroed() };
        let bytes = name.as_bytes();
        if bytes.len() >= req.ifr_name.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("interface name {name:?} too long"),
            ));
        }
        for (d, s) in req.ifr_name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: SIOCGIFINDEX reads the name and writes ifru_ifindex.
        cvt(unsafe { libc::ioctl(self.ioctl.as_raw_fd(), libc::SIOCGIFINDEX, &mut req) })
            .map_err(|e| io::Error::new(e.kind(), format!("interface {name}: {e}")))?;
        // SAFETY: the kernel filled the ifindex member of the union.
        Ok(unsafe { req.ifr_ifru.ifru_ifindex })
    }

    /// The raw datagram socket of this namespace (for ethtool ioctls).
    pub(crate) fn ioctl_fd(&self) -> i32 {
        self.ioctl.as_raw_fd()
    }

    fn header(&mut self, msg: &mut Vec<u8>, ty: u16, flags: u16) {
        self.seq = self.seq.wrapping_add(1);
        msg.extend_from_slice(&0u32.to_ne_bytes()); // length, patched in send
        msg.extend_from_slice(&ty.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&self.seq.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
    }

    fn send(&self, msg: &mut [u8]) -> io::Result<()> {
        let len = msg.len() as u32;
        msg[..4].copy_from_slice(&len.to_ne_bytes());
        // SAFETY: sends `msg.len()` bytes from a valid buffer to the kernel (the socket
        // is unconnected: default destination is the kernel).
        let n = cvt_size(unsafe {
            libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), 0)
        })?;
        if n != msg.len() {
            return Err(io::Error::other("short netlink send"));
        }
        Ok(())
    }

    /// Reads replies to the last request until its ACK (or error) or, for dumps, until
    /// NLMSG_DONE; calls `each` with (type, body) of every other message.
    fn read_replies(&mut self, mut each: impl FnMut(u16, &[u8])) -> io::Result<()> {
        loop {
            // SAFETY: receives into our buffer of the given length.
            let n = cvt_size(unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    0,
                )
            })?;
            let mut b = &self.buf[..n];
            while b.len() >= 16 {
                let len = u32_at(b, 0).unwrap_or(0) as usize;
                let ty = u16_at(b, 4).unwrap_or(0);
                let seq = u32_at(b, 8).unwrap_or(0);
                if len < 16 || len > b.len() {
                    return Err(io::Error::other("malformed netlink reply"));
                }
                let body = &b[16..len];
                if seq == self.seq {
                    match ty {
                        NLMSG_DONE => return Ok(()),
                        NLMSG_ERROR => {
                            let err = u32_at(body, 0).unwrap_or(0) as i32;
                            return if err == 0 {
                                Ok(())
                            } else {
                                Err(io::Error::from_raw_os_error(-err))
                            };
                        }
                        _ => each(ty, body),
                    }
                }
                b = &b[len.next_multiple_of(4).min(b.len())..];
            }
        }
    }

    fn request(&mut self, mut msg: Vec<u8>) -> io::Result<()> {
        self.send(&mut msg)?;
        self.read_replies(|_, _| {})
    }

    /// Sets interface `ifindex` administratively up or down (`ip link set ... up|down`).
    pub fn set_link(&mut self, ifindex: i32, up: bool) -> io::Result<()> {
        let mut msg = Vec::with_capacity(64);
        self.header(&mut msg, RTM_NEWLINK, NLM_F_REQUEST | NLM_F_ACK);
        let flags = if up { libc::IFF_UP as u32 } else { 0 };
        msg.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
        msg.extend_from_slice(&ifindex.to_ne_bytes());
        msg.extend_from_slice(&flags.to_ne_bytes());
        msg.extend_from_slice(&(libc::IFF_UP as u32).to_ne_bytes());
        self.request(msg)
    }

    fn route_msg(&mut self, ty: u16, flags: u16, r: &Route) -> Vec<u8> {
        let mut msg = Vec::with_capacity(96);
        self.header(&mut msg, ty, flags);
        let (protocol, scope, rtype) = if ty == RTM_DELROUTE {
            (0, RT_SCOPE_NOWHERE, 0)
        } else {
            (RTPROT_STATIC, RT_SCOPE_UNIVERSE, RTN_UNICAST)
        };
        msg.extend_from_slice(&[
            libc::AF_INET as u8,
            32,
            0,
            0,
            RT_TABLE_MAIN,
            protocol,
            scope,
            rtype,
        ]);
        msg.extend_from_slice(&0u32.to_ne_bytes());
        push_attr(&mut msg, RTA_DST, &r.dst.octets());
        push_attr(&mut msg, RTA_GATEWAY, &r.gateway.octets());
        push_attr(&mut msg, RTA_OIF, &(r.oif as u32).to_ne_bytes());
        push_attr(&mut msg, RTA_PRIORITY, &r.metric.to_ne_bytes());
        if let Some(src) = r.src
            && ty != RTM_DELROUTE
        {
            push_attr(&mut msg, RTA_PREFSRC, &src.octets());
        }
        msg
    }

    /// `ip route replace dst/32 via gateway dev oif metric m [src s]`.
    pub fn route_replace(&mut self, r: &Route) -> io::Result<()> {
        let msg = self.route_msg(
            RTM_NEWROUTE,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
            r,
        );
        self.request(msg)
    }

    /// `ip route del dst/32 via gateway dev oif metric m`; a route already gone (the
    /// kernel removes routes of an interface set down) is not an error.
    pub fn route_del(&mut self, r: &Route) -> io::Result<()> {
        let msg = self.route_msg(RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, r);
        match self.request(msg) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            other => other,
        }
    }

    /// `ip neigh replace ip lladdr mac dev ifindex nud permanent`.
    pub fn neigh_replace(&mut self, ifindex: i32, ip: Ipv4Addr, mac: [u8; 6]) -> io::Result<()> {
        let mut msg = Vec::with_capacity(64);
        self.header(
            &mut msg,
            RTM_NEWNEIGH,
            NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE,
        );
        msg.extend_from_slice(&[libc::AF_INET as u8, 0, 0, 0]);
        msg.extend_from_slice(&ifindex.to_ne_bytes());
        msg.extend_from_slice(&NUD_PERMANENT.to_ne_bytes());
        msg.extend_from_slice(&[0, 0]);
        push_attr(&mut msg, NDA_DST, &ip.octets());
        push_attr(&mut msg, NDA_LLADDR, &mac);
        self.request(msg)
    }

    /// Counters of the root qdisc of every interface in `ifindexes` (in that order;
    /// `None` for an interface without one).
    pub fn root_qdiscs(&mut self, ifindexes: &[i32]) -> io::Result<Vec<Option<QdiscStats>>> {
        let mut msg = Vec::with_capacity(40);
        self.header(&mut msg, RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP);
        msg.extend_from_slice(&[0u8; 20]);
        self.send(&mut msg)?;
        let mut out = vec![None; ifindexes.len()];
        self.read_replies(|ty, body| {
            if ty != 36 {
                return; // RTM_NEWQDISC only
            }
            if let Some((ifindex, parent, stats)) = parse_qdisc(body)
                && parent == TC_H_ROOT
                && let Some(i) = ifindexes.iter().position(|&x| x == ifindex)
            {
                out[i] = Some(stats);
            }
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_walk_padded_attributes() {
        let mut b = Vec::new();
        push_attr(&mut b, 1, b"htb\0");
        push_attr(&mut b, 5, &[1, 2, 3]);
        push_attr(&mut b, 9, &7u32.to_ne_bytes());
        let got: Vec<(u16, Vec<u8>)> = attrs(&b).map(|(t, d)| (t, d.to_vec())).collect();
        assert_eq!(
            got,
            vec![
                (1, b"htb\0".to_vec()),
                (5, vec![1, 2, 3]),
                (9, 7u32.to_ne_bytes().to_vec())
            ]
        );
        // A truncated attribute ends the walk instead of panicking.
        assert_eq!(attrs(&b[..3]).count(), 0);
    }

    #[test]
    fn qdisc_message_parses_kind_and_counters() {
        let mut body = Vec::new();
        body.extend_from_slice(&[0, 0, 0, 0]);
        body.extend_from_slice(&7i32.to_ne_bytes());
        body.extend_from_slice(&0x1_0000u32.to_ne_bytes());
        body.extend_from_slice(&TC_H_ROOT.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes());
        push_attr(&mut body, TCA_KIND, b"htb\0");
        let mut stats2 = Vec::new();
        let mut basic = Vec::new();
        basic.extend_from_slice(&123_456u64.to_ne_bytes());
        basic.extend_from_slice(&99u32.to_ne_bytes());
        basic.extend_from_slice(&[0; 4]);
        push_attr(&mut stats2, TCA_STATS_BASIC, &basic);
        let q: Vec<u8> = [5u32, 7000, 3, 0, 11]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        push_attr(&mut stats2, TCA_STATS_QUEUE, &q);
        push_attr(&mut body, TCA_STATS2, &stats2);
        let (ifindex, parent, s) = parse_qdisc(&body).unwrap();
        assert_eq!((ifindex, parent), (7, TC_H_ROOT));
        assert_eq!(s.kind(), "htb");
        assert_eq!((s.packets, s.bytes), (99, 123_456));
        assert_eq!((s.qlen, s.backlog, s.drops), (5, 7000, 3));
    }
}
