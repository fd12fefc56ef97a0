//! Interface events from rtnetlink: a link going up or down, an IPv4 address appearing or
//! disappearing. The daemon turns them into the engine's link changes at once, instead of
//! waiting for a timeout to notice that an interface is gone.
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
    /// An IPv4 address was added to (or removed from) an interface.
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
        addr.nl_groups = RTMGRP_LINK | RTMGRP_IPV4_IFADDR;
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
            RTM_NEWADDR | RTM_DELADDR if body.len() >= 8 && i32::from(body[0]) == libc::AF_INET => {
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

/// The state of interface `name` now: its index, whether it is up with carrier, and
/// whether it has an IPv4 address. `None` when it does not exist.
pub fn interface_state(name: &str) -> Option<(u32, bool, bool)> {
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
    let has_v4 = nix::ifaddrs::getifaddrs()
        .map(|addrs| {
            addrs.filter(|a| a.interface_name == name).any(|a| {
                a.address
                    .as_ref()
                    .and_then(|s| s.as_sockaddr_in())
                    .is_some()
            })
        })
        .unwrap_or(false);
    Some((index, up, has_v4))
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

    #[test]
    fn loopback_exists_and_is_up() {
        let (index, up, has_v4) = interface_state("lo").expect("lo exists");
        assert!(index > 0 && up && has_v4);
        assert!(interface_state("no-such-if0").is_none());
    }
}
