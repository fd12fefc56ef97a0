//! Interface events from rtnetlink: a link going up or down, an IPv4 or IPv6 address
//! appearing or disappearing. The daemon turns them into the engine's link changes at
//! once, instead of waiting for a timeout to notice that an interface is gone.
//!
//! The messages are fixed C layouts (`nlmsghdr`, `ifinfomsg`, `ifaddrmsg`, `rtattr`);
//! parsing checks every length and never panics.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTMGRP_LINK: u32 = 1;
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;
const IFLA_IFNAME: u16 = 3;
const IFF_UP: u32 = 0x1;
const IFF_LOWER_UP: u32 = 0x1_0000;

/// An interface event.
#[derive(Clone, Debug, Eq, PartialEq)]
pub enum NetEvent {
    /// A link's state: `up` is administratively up with carrier.
    Link {
        /// Interface index.
        index: u32,
        /// Interface name, when the message carried it.
        name: Option<String>,
        /// Up with carrier.
        up: bool,
    },
    /// An IPv4 or IPv6 address was added to (or removed from) an interface.
    Addr {
        /// Interface index.
        index: u32,
        /// Added (true) or removed.
        added: bool,
    },
}

/// A non-blocking rtnetlink socket subscribed to link and IPv4 address events.
pub struct NetlinkMonitor {
    fd: OwnedFd,
}

impl NetlinkMonitor {
    /// Opens the socket.
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a freshly created, owned descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR;
        // SAFETY: addr is a valid sockaddr_nl and the length matches it.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Reads every pending message and appends the events.
    pub fn read_events(&self, out: &mut Vec<NetEvent>) -> io::Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::WouldBlock {
                    return Ok(());
                }
                // ENOBUFS: events were lost; the caller re-reads interface state.
                return Err(e);
            }
            parse(&buf[..n as usize], out);
        }
    }
}

impl AsRawFd for NetlinkMonitor {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(i..i + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], i: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?))
}

/// Parses a buffer of netlink messages; malformed ones end the parse.
pub fn parse(mut b: &[u8], out: &mut Vec<NetEvent>) {
    while b.len() >= 16 {
        let Some(len) = u32_at(b, 0).map(|l| l as usize) else {
            return;
        };
        if len < 16 || len > b.len() {
            return;
        }
        let ty = u16_at(b, 4).unwrap_or(0);
        let body = &b[16..len];
        match ty {
            RTM_NEWLINK | RTM_DELLINK if body.len() >= 16 => {
                let index = u32_at(body, 4).unwrap_or(0);
                let flags = u32_at(body, 8).unwrap_or(0);
                let name = attr(&body[16..], IFLA_IFNAME).map(|v| {
                    String::from_utf8_lossy(v.split(|&c| c == 0).next().unwrap_or(&[])).into_owned()
                });
                let up = ty == RTM_NEWLINK && flags & IFF_UP != 0 && flags & IFF_LOWER_UP != 0;
                out.push(NetEvent::Link { index, name, up });
            }
            RTM_NEWADDR | RTM_DELADDR
                if body.len() >= 8
                    && [libc::AF_INET, libc::AF_INET6].contains(&i32::from(body[0])) =>
            {
                let index = u32_at(body, 4).unwrap_or(0);
                out.push(NetEvent::Addr {
                    index,
                    added: ty == RTM_NEWADDR,
                });
            }
            _ => {}
        }
        let next = (len + 3) & !3;
        if next > b.len() {
            return;
        }
        b = &b[next..];
    }
}

fn attr(mut b: &[u8], want: u16) -> Option<&[u8]> {
    while b.len() >= 4 {
        let len = usize::from(u16_at(b, 0)?);
        let ty = u16_at(b, 2)?;
        if len < 4 || len > b.len() {
            return None;
        }
        if ty == want {
            return Some(&b[4..len]);
        }
        let next = (len + 3) & !3;
        if next > b.len() {
            return None;
        }
        b = &b[next..];
    }
    None
}

/// An interface's state, read by [`interface_state`].
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq)]
pub struct InterfaceState {
    /// Interface index.
    pub index: u32,
    /// Administratively up, and its operational state is not down.
    pub up: bool,
    /// It has an IPv4 address.
    pub has_v4: bool,
    /// It has an IPv6 address beyond link-local scope (one that can reach a server).
    pub has_v6: bool,
}

impl InterfaceState {
    /// Whether it has an address of the family a link to `server` needs.
    pub fn has_addr_for(&self, server: std::net::SocketAddr) -> bool {
        if server.is_ipv6() {
            self.has_v6
        } else {
            self.has_v4
        }
    }
}

/// The state of interface `name` now; `None` when it does not exist.
pub fn interface_state(name: &str) -> Option<InterfaceState> {
    let base = format!("/sys/class/net/{name}");
    let index: u32 = std::fs::read_to_string(format!("{base}/ifindex"))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let flags = std::fs::read_to_string(format!("{base}/flags")).ok()?;
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap_or(0);
    let oper = std::fs::read_to_string(format!("{base}/operstate")).unwrap_or_default();
    let up = flags & IFF_UP != 0 && oper.trim() != "down" && oper.trim() != "lowerlayerdown";
    let (mut has_v4, mut has_v6) = (false, false);
    if let Ok(addrs) = nix::ifaddrs::getifaddrs() {
        for a in addrs.filter(|a| a.interface_name == name) {
            let Some(addr) = a.address.as_ref() else {
                continue;
            };
            has_v4 |= addr.as_sockaddr_in().is_some();
            has_v6 |= addr
                .as_sockaddr_in6()
                .is_some_and(|v6| !v6.ip().is_unicast_link_local() && !v6.ip().is_loopback());
        }
    }
    Some(InterfaceState {
        index,
        up,
        has_v4,
        has_v6,
    })
}

impl AsFd for NetlinkMonitor {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self` and outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u16, body: &[u8]) -> Vec<u8> {
        let len = 16 + body.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&ty.to_ne_bytes());
        m.extend_from_slice(&[0u8; 10]);
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    #[test]
    fn newlink_with_name_parsed_as_up_when_carrier() {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&7u32.to_ne_bytes());
        body[8..12].copy_from_slice(&(IFF_UP | IFF_LOWER_UP).to_ne_bytes());
        body.extend_from_slice(&8u16.to_ne_bytes());
        body.extend_from_slice(&IFLA_IFNAME.to_ne_bytes());
        body.extend_from_slice(b"c0\0\0");
        let mut out = Vec::new();
        parse(&msg(RTM_NEWLINK, &body), &mut out);
        assert_eq!(
            out,
            vec![NetEvent::Link {
                index: 7,
                name: Some("c0".into()),
                up: true
            }]
        );
    }

    #[test]
    fn address_events_of_both_families_are_parsed() {
        let mut out = Vec::new();
        for (family, ty) in [(libc::AF_INET, RTM_NEWADDR), (libc::AF_INET6, RTM_DELADDR)] {
            let mut body = vec![0u8; 8];
            body[0] = family as u8;
            body[4..8].copy_from_slice(&5u32.to_ne_bytes());
            parse(&msg(ty, &body), &mut out);
        }
        // Another family (AF_PACKET, 17) is not an address event.
        let mut body = vec![0u8; 8];
        body[0] = 17;
        parse(&msg(RTM_NEWADDR, &body), &mut out);
        assert_eq!(
            out,
            vec![
                NetEvent::Addr {
                    index: 5,
                    added: true
                },
                NetEvent::Addr {
                    index: 5,
                    added: false
                }
            ]
        );
    }

    #[test]
    fn loopback_is_up_with_an_ipv4_address_and_no_ipv6_beyond_its_own() {
        let lo = interface_state("lo").expect("lo exists");
        assert!(lo.index > 0 && lo.up && lo.has_v4, "{lo:?}");
        assert!(!lo.has_v6, "::1 cannot reach a server: {lo:?}");
        assert!(interface_state("no-such-if0").is_none());
    }

    #[test]
    fn dellink_is_down_and_garbage_is_ignored() {
        let mut body = vec![0u8; 16];
        body[4..8].copy_from_slice(&3u32.to_ne_bytes());
        let mut out = Vec::new();
        parse(&msg(RTM_DELLINK, &body), &mut out);
        assert_eq!(
            out,
            vec![NetEvent::Link {
                index: 3,
                name: None,
                up: false
            }]
        );
        out.clear();
        parse(&[0xff; 40], &mut out);
        parse(&[1, 2, 3], &mut out);
        assert!(out.is_empty());
    }
}
