//! The TUN device.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use tun_rs::{DeviceBuilder, SyncDevice};

/// A TUN device in non-blocking mode (no packet information header: each read is one IP
/// packet).
pub struct Tun {
    dev: SyncDevice,
    name: String,
}

impl Tun {
    /// Creates (or attaches to) the TUN device `name` with `address/prefix` and `mtu`, up.
    pub fn open(name: &str, address: Ipv4Addr, prefix: u8, mtu: u16) -> io::Result<Self> {
        let dev = DeviceBuilder::new()
            .name(name)
            .ipv4(address, prefix, None)
            .mtu(mtu)
            .build_sync()?;
        dev.set_nonblocking(true)?;
        let name = dev.name().unwrap_or_else(|_| name.to_owned());
        Ok(Self { dev, name })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the device's MTU.
    pub fn set_mtu(&self, mtu: u16) -> io::Result<()> {
        self.dev.set_mtu(mtu)
    }

    /// Reads one packet; `WouldBlock` when none is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.dev.recv(buf)
    }

    /// Writes one packet towards the applications.
    pub fn send(&self, packet: &[u8]) -> io::Result<usize> {
        self.dev.send(packet)
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.dev.as_raw_fd()
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is owned by `self` and outlives the borrow.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }
    }
}
