//! The TUN device.
//!
//! With offloads on (`IFF_VNET_HDR`, the kernel's TSO and checksum offload on the device,
//! as wireguard-go does), the kernel hands the daemon a TCP flow's data in segments of up
//! to 64 KB, and takes a flow's consecutive segments written in one batch as one: a
//! segment costs the kernel's stack one pass per 64 KB instead of one per packet. The
//! engine still sees, queues and binds one MTU-sized packet at a time: [`Tun::recv_each`]
//! splits what it reads, and [`Tun::queue`] / [`Tun::flush`] coalesce what the engine
//! delivers in one round of the event loop (tun-rs's GSO split and GRO table).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use tun_rs::{DeviceBuilder, GROTable, IDEAL_BATCH_SIZE, SyncDevice, VIRTIO_NET_HDR_LEN};

/// Largest packet a read may return: a TUN device's MTU is at most 65535, and an
/// offloaded read adds its virtio header.
const READ_BUF: usize = VIRTIO_NET_HDR_LEN + 65535;

/// Most packets written in one batch. Each buffer has room for a coalesced 64 KB
/// segment, and any may be one: more slots would hold more memory (64 KB each once
/// used so) for batches that one round of the event loop seldom fills.
const WRITE_BATCH: usize = 32;

/// A TUN device in non-blocking mode (no packet information header: each packet is one
/// IP packet).
pub struct Tun {
    dev: SyncDevice,
    name: String,
    offload: bool,
    /// What one read returns (with offloads, a virtio header and up to 64 KB).
    raw: Vec<u8>,
    /// The packets a read was split into, and their sizes: the first takes a whole read
    /// (what offloads do not split), the others a packet of the device's MTU.
    segments: Vec<Vec<u8>>,
    sizes: Vec<usize>,
    /// Packets queued for the next [`Tun::flush`], each after `VIRTIO_NET_HDR_LEN` bytes
    /// of room for its header.
    out: Vec<Vec<u8>>,
    out_len: usize,
    gro: GROTable,
    write_errors: u64,
}

impl Tun {
    /// Creates (or attaches to) the TUN device `name` with `address/prefix` and `mtu`, up;
    /// with the kernel's segmentation and checksum offloads when `offload` is set and the
    /// kernel takes them (otherwise without, which [`Tun::offload`] tells).
    pub fn open(
        name: &str,
        address: Ipv4Addr,
        prefix: u8,
        mtu: u16,
        offload: bool,
    ) -> io::Result<Self> {
        let build = |offload: bool| {
            DeviceBuilder::new()
                .name(name)
                .ipv4(address, prefix, None)
                .mtu(mtu)
                .offload(offload)
                .build_sync()
        };
        let dev = match build(offload) {
            Ok(dev) => dev,
            Err(_) if offload => build(false)?,
            Err(e) => return Err(e),
        };
        dev.set_nonblocking(true)?;
        let offload = dev.tcp_gso();
        let name = dev.name().unwrap_or_else(|_| name.to_owned());
        let batch = if offload { IDEAL_BATCH_SIZE } else { 1 };
        Ok(Self {
            dev,
            name,
            offload,
            raw: vec![0; READ_BUF],
            segments: (0..batch)
                .map(|i| vec![0; if i == 0 { READ_BUF } else { usize::from(mtu) }])
                .collect(),
            sizes: vec![0; batch],
            out: Vec::new(),
            out_len: 0,
            gro: GROTable::default(),
            write_errors: 0,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes the kernel refused (a full device queue, the device gone): the packets
    /// are lost.
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// Whether the device runs with the kernel's offloads.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Sets the device's MTU.
    pub fn set_mtu(&mut self, mtu: u16) -> io::Result<()> {
        self.dev.set_mtu(mtu)?;
        for s in self.segments.iter_mut().skip(1) {
            s.resize(usize::from(mtu), 0);
        }
        Ok(())
    }

    /// Reads what the device holds next (one packet, or with offloads one segment of up
    /// to 64 KB) and calls `f` with each IP packet of it, in order; returns how many.
    /// `WouldBlock` when nothing is waiting; an error without an OS error code is a
    /// segment the kernel handed over that could not be split (it is dropped).
    pub fn recv_each(&mut self, mut f: impl FnMut(&mut [u8])) -> io::Result<usize> {
        // Without offloads this is one read into the first segment.
        let n = self
            .dev
            .recv_multiple(&mut self.raw, &mut self.segments, &mut self.sizes, 0)?;
        for (seg, &len) in self.segments.iter_mut().zip(&self.sizes).take(n) {
            f(&mut seg[..len]);
        }
        Ok(n)
    }

    /// Writes one packet towards the applications: at once without offloads; with them,
    /// at the next [`Tun::flush`] (or when the batch is full), coalesced with the
    /// packets of its flow queued beside it.
    pub fn queue(&mut self, packet: &[u8]) -> io::Result<()> {
        if !self.offload {
            let r = self.dev.send(packet).map(drop);
            self.write_errors += u64::from(r.is_err());
            return r;
        }
        if self.out_len == self.out.len() {
            // Room for a coalesced 64 KB segment: the GRO table does not grow a buffer
            // (pages never written take no memory).
            self.out
                .push(Vec::with_capacity(2 * VIRTIO_NET_HDR_LEN + 65535));
        }
        let b = &mut self.out[self.out_len];
        b.clear();
        b.resize(VIRTIO_NET_HDR_LEN, 0);
        b.extend_from_slice(packet);
        self.out_len += 1;
        if self.out_len == WRITE_BATCH {
            return self.flush();
        }
        Ok(())
    }

    /// Writes the packets [`Tun::queue`] holds. An error is the last write's that failed
    /// (counted once in [`Tun::write_errors`]); the others were written.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.out_len == 0 {
            return Ok(());
        }
        let n = std::mem::take(&mut self.out_len);
        let r = self
            .dev
            .send_multiple(&mut self.gro, &mut self.out[..n], VIRTIO_NET_HDR_LEN);
        self.write_errors += u64::from(r.is_err());
        r.map(drop)
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
