//! One UDP socket per link.
//!
//! On the client each link's socket is bound to its interface (`SO_BINDTODEVICE`), so the
//! tunnel's own datagrams always leave through that interface and never loop into the TUN
//! device, whatever the routing table says. Its send buffer is the kernel's minimum: a
//! send that would queue more than a couple of datagrams below the socket fails with
//! `WouldBlock`, and the daemon keeps the datagram and retries when the socket is writable.
//! That is the late-binding paper's small driver buffer, in user space.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// A non-blocking UDP socket of one link (client) or of the server.
pub struct LinkSocket {
    socket: Socket,
}

impl LinkSocket {
    /// Binds a socket to `local` with a send buffer of `sndbuf` bytes (the kernel rounds
    /// small values up to its minimum); [`Self::bind_device`] binds it to an interface.
    pub fn bind(local: SocketAddr, sndbuf: Option<usize>) -> io::Result<Self> {
        let domain = if local.is_ipv4() {
            Domain::IPV4
        } else {
            Domain::IPV6
        };
        let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
        if let Some(size) = sndbuf {
            socket.set_send_buffer_size(size)?;
        }
        socket.set_recv_buffer_size(4 << 20).ok();
        socket.set_reuse_address(true)?;
        socket.bind(&SockAddr::from(local))?;
        socket.set_nonblocking(true)?;
        Ok(Self { socket })
    }

    /// Binds the socket to interface `ifname` (`SO_BINDTODEVICE`), again if it was bound
    /// before: an interface removed and made again (a USB modem plugged back in) has the
    /// same name and another index, and a socket stays bound to the old index.
    pub fn bind_device(&self, ifname: &str) -> io::Result<()> {
        self.socket.bind_device(Some(ifname.as_bytes()))
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket
            .local_addr()?
            .as_socket()
            .ok_or_else(|| io::Error::other("not an inet socket"))
    }

    /// Sends one datagram; `WouldBlock` when the send buffer is full.
    pub fn send_to(&self, buf: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(buf, &SockAddr::from(to))
    }

    /// Receives one datagram; `WouldBlock` when none is waiting.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        // SAFETY: `recv_from` only writes initialised bytes into the buffer it is given;
        // viewing our initialised `[u8]` as `[MaybeUninit<u8>]` is sound.
        let uninit = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
        let (n, from) = self.socket.recv_from(uninit)?;
        let from = from
            .as_socket()
            .ok_or_else(|| io::Error::other("datagram from a non-inet address"))?;
        Ok((n, from))
    }

    /// Asks the kernel to tell, with each datagram received, the local address it was
    /// sent to (`IP_PKTINFO`, `IPV6_RECVPKTINFO`): a socket bound to a wildcard address
    /// on a host with several addresses then answers from the one the peer used
    /// ([`Self::recv_from_to`], [`Self::send_from_to`]). Without it the kernel picks the
    /// source of a reply by its routes, and a peer that checks where replies come from
    /// drops them.
    pub fn enable_pktinfo(&self) -> io::Result<()> {
        use nix::sys::socket::{setsockopt, sockopt};
        let v6 = self.local_addr()?.is_ipv6();
        if v6 {
            setsockopt(self, sockopt::Ipv6RecvPacketInfo, &true)?;
        }
        // A dual-stack IPv6 socket reports its IPv4 datagrams' addresses this way.
        match setsockopt(self, sockopt::Ipv4PacketInfo, &true) {
            Err(e) if !v6 => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// [`Self::recv_from`], and the local address the datagram was sent to when
    /// [`Self::enable_pktinfo`] asked for it (an IPv4 one on a dual-stack socket as an
    /// IPv4 address).
    pub fn recv_from_to(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<IpAddr>)> {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg};
        // Room for one pktinfo message of either family, aligned for `cmsghdr`, on the
        // stack: this runs for every datagram the server receives.
        #[repr(C, align(8))]
        struct Space([u8; 64]);
        const _: () = assert!(
            nix::sys::socket::cmsg_space::<libc::in6_pktinfo>() <= 64
                && nix::sys::socket::cmsg_space::<libc::in_pktinfo>() <= 64
        );
        let mut space = Space([0; 64]);
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = recvmsg::<SockaddrStorage>(
            self.as_raw_fd(),
            &mut iov,
            Some(&mut space.0),
            MsgFlags::MSG_DONTWAIT,
        )?;
        let from = msg
            .address
            .and_then(|a| {
                a.as_sockaddr_in()
                    .map(|v4| SocketAddr::from(std::net::SocketAddrV4::from(*v4)))
                    .or_else(|| {
                        a.as_sockaddr_in6()
                            .map(|v6| SocketAddr::from(std::net::SocketAddrV6::from(*v6)))
                    })
            })
            .ok_or_else(|| io::Error::other("datagram from a non-inet address"))?;
        let mut local = None;
        for c in msg.cmsgs()? {
            match c {
                ControlMessageOwned::Ipv4PacketInfo(pi) => {
                    local = Some(IpAddr::from(pi.ipi_addr.s_addr.to_ne_bytes()));
                }
                ControlMessageOwned::Ipv6PacketInfo(pi) => {
                    let a = std::net::Ipv6Addr::from(pi.ipi6_addr.s6_addr);
                    local = Some(a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4));
                }
                _ => {}
            }
        }
        Ok((msg.bytes, from, local))
    }

    /// [`Self::send_to`] from local address `from` if one is given (the address a
    /// datagram from `to` came in on, [`Self::recv_from_to`]).
    pub fn send_from_to(
        &self,
        buf: &[u8],
        to: SocketAddr,
        from: Option<IpAddr>,
    ) -> io::Result<usize> {
        use nix::sys::socket::{ControlMessage, MsgFlags, SockaddrStorage, sendmsg};
        let Some(from) = from else {
            return self.send_to(buf, to);
        };
        let dest = SockaddrStorage::from(to);
        let iov = [io::IoSlice::new(buf)];
        let (pi4, pi6);
        let cmsg = match from {
            IpAddr::V4(a) => {
                pi4 = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.octets()),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                ControlMessage::Ipv4PacketInfo(&pi4)
            }
            IpAddr::V6(a) => {
                pi6 = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: a.octets(),
                    },
                    ipi6_ifindex: 0,
                };
                ControlMessage::Ipv6PacketInfo(&pi6)
            }
        };
        Ok(sendmsg(
            self.as_raw_fd(),
            &iov,
            &[cmsg],
            MsgFlags::MSG_DONTWAIT,
            Some(&dest),
        )?)
    }

    /// Bytes the kernel still holds for this socket below it (`SIOCOUTQ`).
    pub fn outq(&self) -> io::Result<usize> {
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ writes one c_int through the pointer, which is valid.
        let r = unsafe { libc::ioctl(self.socket.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n.max(0) as usize)
    }
}

impl AsRawFd for LinkSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl AsFd for LinkSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self` and outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::{Duration, Instant};

    use super::LinkSocket;

    fn recv(s: &LinkSocket, buf: &mut [u8]) -> (usize, SocketAddr, Option<IpAddr>) {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match s.recv_from_to(buf) {
                Ok(r) => return r,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A wildcard socket learns the address each datagram was sent to and answers from
    /// it: 127.0.0.2 here, where the kernel's routes would pick 127.0.0.1.
    #[test]
    fn a_wildcard_socket_answers_from_the_address_it_was_sent_to() {
        let server = LinkSocket::bind("0.0.0.0:0".parse().unwrap(), None).unwrap();
        server.enable_pktinfo().unwrap();
        let port = server.local_addr().unwrap().port();
        let client = LinkSocket::bind("127.0.0.1:0".parse().unwrap(), None).unwrap();
        let to = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port));
        client.send_to(b"ping", to).unwrap();
        let mut buf = [0u8; 64];
        let (n, from, local) = recv(&server, &mut buf);
        assert_eq!(&buf[..n], b"ping");
        assert_eq!(from, client.local_addr().unwrap());
        assert_eq!(local, Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))));
        server.send_from_to(b"pong", from, local).unwrap();
        let (n, from, _) = recv(&client, &mut buf);
        assert_eq!(&buf[..n], b"pong");
        assert_eq!(
            from, to,
            "the answer comes from the address the ping went to"
        );
        // Without a source, the routes pick it.
        server
            .send_from_to(b"pong", client.local_addr().unwrap(), None)
            .unwrap();
        let (_, from, _) = recv(&client, &mut buf);
        assert_eq!(from.ip(), IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
}
