//! The latebind daemons: `latebind client` and `latebind server`.
//!
//! Module map:
//! - [`config`]: TOML configuration, validated with errors naming key, value, expectation.
//! - [`departures`]: when a datagram has left the kernel's queue (`SIOCOUTQ`), the
//!   departure the engine's budget below the binding point counts.
//! - [`dispatch`]: the dispatch stage: datagrams bound φ ahead of their slot, sent at it
//!   by a sender thread.
//! - [`session`]: engine + keys + datagrams a socket pushed back; the per-session pump.
//! - [`client`], [`server`]: the event loops.
//! - [`status`], [`control`]: `latebind status` and the Prometheus endpoint.
//! - [`packet`]: inner-packet helpers (addresses, MSS clamping).

#![warn(missing_docs)]

pub mod client;
pub mod config;
pub mod control;
pub mod departures;
pub mod dispatch;
pub mod packet;
pub mod server;
pub mod session;
pub mod status;

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, Result, bail};
use latebind_crypto::TAG_LEN;
use latebind_io::tun::Tun;
use latebind_proto::Instant;

/// Opens the daemon's TUN device `name` with `address` and `mtu`: with the kernel's
/// offloads unless `offload` is false, and a warning when the kernel refuses them.
fn open_tun(name: &str, address: (Ipv4Addr, u8), mtu: u16, offload: bool) -> Result<Tun> {
    let tun = Tun::open(name, address.0, address.1, mtu, offload)
        .with_context(|| format!("creating TUN device {name}"))?;
    if offload && !tun.offload() {
        tracing::warn!(
            tun = tun.name(),
            "the kernel refused the TUN offloads: running without"
        );
    }
    Ok(tun)
}

/// Reads every packet the TUN device holds and calls `f` with each and the time its read
/// began; returns the time of the last read. A segment the device handed over that could
/// not be split is dropped; any other error of the device ends the daemon.
fn read_tun(
    tun: &mut Tun,
    now: fn() -> Instant,
    mut f: impl FnMut(Instant, &mut [u8]),
) -> Result<Instant> {
    loop {
        let t = now();
        match tun.recv_each(|p| f(t, p)) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(t),
            Err(e) if e.raw_os_error().is_none() => {
                tracing::debug!(%e, "dropped a segment the tun device handed over");
            }
            Err(e) => bail!("reading {}: {e}", tun.name()),
        }
    }
}

/// Writes what [`Tun::queue`] holds (a refused write is counted by the device).
fn flush_tun(tun: &mut Tun) {
    if let Err(e) = tun.flush() {
        tracing::debug!(%e, "writing to the tun device");
    }
}

/// Bytes of the outer IP (IPv4 20, IPv6 40) and UDP (8) headers of a datagram to `peer`
/// (an IPv4-mapped address on a dual-stack socket travels as IPv4).
pub fn outer_headers(peer: SocketAddr) -> usize {
    if peer.ip().to_canonical().is_ipv6() {
        40 + 8
    } else {
        20 + 8
    }
}

/// Room left on a full-size data packet for the acknowledgement that rides on it: an ACK
/// frame with its newest range and one more (the engine leaves older ranges out, or
/// sends the ACK alone, to stay within [`max_datagram`]).
const ACK_ROOM: usize = 29;

/// Bytes the tunnel adds to an inner packet on a link to `peer`: the outer headers, the
/// latebind header and DATA frame (27), the AEAD tag (16) and room for an ACK riding on
/// the datagram.
pub fn overhead(peer: SocketAddr) -> usize {
    outer_headers(peer) + latebind_proto::wire::DATA_OVERHEAD + TAG_LEN + ACK_ROOM
}

/// The largest datagram the engine may write for a link to `peer` over a path whose MTU
/// is `mtu`, bytes before the AEAD tag ([`latebind_proto::LinkConfig::max_datagram`]).
pub fn max_datagram(mtu: usize, peer: SocketAddr) -> usize {
    mtu.saturating_sub(outer_headers(peer) + TAG_LEN)
}

/// The path MTU the server assumes towards its clients' links (it cannot read theirs).
pub const SERVER_PATH_MTU: usize = 1500;

/// 32 random bytes from the OS (seeds of handshakes).
pub fn random_bytes() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("reading OS randomness: {e}"))?;
    Ok(b)
}

/// A random u32 from the OS.
pub fn random_u32() -> Result<u32> {
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("reading OS randomness: {e}"))?;
    Ok(u32::from_ne_bytes(b))
}

/// Runs `ip ARGS` and fails with its output if it fails.
pub fn run_ip(args: &[&str]) -> Result<()> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{max_datagram, overhead};

    #[test]
    fn an_ipv6_path_leaves_twenty_bytes_less_and_a_mapped_ipv4_one_does_not() {
        let v4 = "198.18.0.1:51820".parse().unwrap();
        let v6 = "[fd77::1]:51820".parse().unwrap();
        let mapped = "[::ffff:198.18.0.1]:51820".parse().unwrap();
        assert_eq!(max_datagram(1500, v4), 1500 - 28 - 16);
        assert_eq!(max_datagram(1500, v6), 1500 - 48 - 16);
        assert_eq!(max_datagram(1500, mapped), max_datagram(1500, v4));
        // The default TUN MTU over a 1500-byte link: 1400 over IPv4, 1380 over IPv6.
        assert_eq!(1500 - overhead(v4), 1400);
        assert_eq!(1500 - overhead(v6), 1380);
    }
}
