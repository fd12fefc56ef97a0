//! One UDP socket per link.
//!
//! On the client each link's socket is bound to its interface (`SO_BINDTODEVICE`), so the
//! tunnel's own datagrams always leave through that interface and never loop into the TUN
//! device, whatever the routing table says. Its send buffer is the kernel's minimum: a
//! send that would queue more than a couple of datagrams below the socket fails with
//! `WouldBlock`, and the daemon keeps the datagram and retries when the socket is writable.
//! That is the late-binding paper's small driver buffer, in user space.

use std::io;
use std::net::SocketAddr;
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
