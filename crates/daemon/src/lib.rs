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

use anyhow::{Context, Result, bail};

/// Bytes the tunnel adds to an inner packet: outer IPv4 (20) + UDP (8) + latebind header
/// and DATA frame (27) + AEAD tag (16), rounded up for an ACK piggybacked on the datagram.
pub const OVERHEAD: usize = 20 + 8 + latebind_proto::wire::DATA_OVERHEAD + 16 + 29;

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
