//! `latebind replay FILE.pcap`: re-sends a capture's packets with their original
//! spacing and sizes, as UDP datagrams on a link, and measures how well the spacing
//! survived.
//!
//! ```text
//!  1. read the pcap (classic format, µs or ns timestamps, either byte order; link
//!     types Ethernet, raw IP, Linux cooked v1/v2): per packet, time and IP length
//!  2. slot i = start + (t_i - t_0); datagram i = IP length i, tagged (run, i)
//!  3. send with the pre-dispatch sender (built φ ahead) or the sequential one
//!  4. --eval: both senders in turn over a veth between two namespaces, each timed
//!     by a capture on the far side; error of gap i = |measured - original|, and
//!     relative to the original gap
//! ```

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::capture::{self, Capture, Tag};
use crate::dispatch_bench::{BENCH_PORT, SenderKind, summary_us};
use crate::sys;

/// A packet of a capture: when, and how long its IP packet was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PcapPacket {
    /// Timestamp, ns since the epoch (as recorded).
    pub ts_ns: u64,
    /// IP packet length (original length minus the link header).
    pub ip_len: usize,
}

/// pcap link types this reader understands, with their link-header length.
fn link_header_len(linktype: u32) -> Option<usize> {
    match linktype {
        1 => Some(14),        // Ethernet
        101 | 228 => Some(0), // raw IP, raw IPv4
        113 => Some(16),      // Linux cooked v1
        276 => Some(20),      // Linux cooked v2
        _ => None,
    }
}

/// Parses a classic pcap file.
pub fn parse_pcap(bytes: &[u8]) -> Result<Vec<PcapPacket>> {
    if bytes.len() < 24 {
        bail!("{} bytes: too short for a pcap header (24)", bytes.len());
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let (little, nanos) = match magic {
        0xa1b2_c3d4 => (true, false),
        0xa1b2_3c4d => (true, true),
        0xd4c3_b2a1 => (false, false),
        0x4d3c_b2a1 => (false, true),
        _ => bail!("magic {magic:#010x}: not a classic pcap file (pcapng is not supported)"),
    };
    let rd = |b: &[u8]| {
        let a: [u8; 4] = b.try_into().expect("4 bytes");
        if little {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    let linktype = rd(&bytes[20..24]) & 0x0fff_ffff;
    let Some(hdr) = link_header_len(linktype) else {
        bail!(
            "link type {linktype}: expected Ethernet (1), raw IP (101, 228) or Linux cooked (113, 276)"
        );
    };
    let mut out = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let Some(rec) = bytes.get(at..at + 16) else {
            bail!("record {} at byte {at}: truncated header", out.len());
        };
        let (sec, frac, incl, orig) = (
            rd(&rec[0..4]),
            rd(&rec[4..8]),
            rd(&rec[8..12]),
            rd(&rec[12..16]),
        );
        let incl = incl as usize;
        if bytes.len() < at + 16 + incl {
            bail!(
                "record {} at byte {at}: {incl} bytes announced, file ends first",
                out.len()
            );
        }
        let frac_ns = if nanos {
            u64::from(frac)
        } else {
            u64::from(frac) * 1_000
        };
        out.push(PcapPacket {
            ts_ns: u64::from(sec) * 1_000_000_000 + frac_ns,
            ip_len: (orig as usize).saturating_sub(hdr),
        });
        at += 16 + incl;
    }
    Ok(out)
}

/// Writes a classic pcap (little-endian, ns timestamps, raw IPv4 link type) of
/// `packets`, each recorded as an IPv4 header of its length plus zeros, capped to
/// `snaplen` bytes.
pub fn write_pcap(packets: &[PcapPacket], snaplen: usize) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&0i32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&(snaplen as u32).to_le_bytes());
    b.extend_from_slice(&228u32.to_le_bytes());
    for p in packets {
        let incl = p.ip_len.min(snaplen);
        b.extend_from_slice(&((p.ts_ns / 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&((p.ts_ns % 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(incl as u32).to_le_bytes());
        b.extend_from_slice(&(p.ip_len as u32).to_le_bytes());
        let mut pkt = vec![0u8; incl];
        if incl >= 20 {
            pkt[0] = 0x45;
            pkt[2..4].copy_from_slice(&(p.ip_len as u16).to_be_bytes());
            pkt[8] = 64;
            pkt[9] = 17;
        }
        b.extend_from_slice(&pkt);
    }
    b
}

/// A synthetic capture for trying replay: `n` packets, gaps drawn from an exponential
/// distribution of mean `mean_gap_ns` (a Poisson process), sizes cycling through a
/// small-packet / full-packet mix; `seed` makes it reproducible.
pub fn sample_packets(n: usize, mean_gap_ns: f64, seed: u64) -> Vec<PcapPacket> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = || {
        // xorshift64*: uniform in (0, 1).
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        ((state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let sizes = [60usize, 1500, 1500, 576, 40, 1500, 1200, 100];
    let mut t = 1_700_000_000_000_000_000u64;
    (0..n)
        .map(|i| {
            let p = PcapPacket {
                ts_ns: t,
                ip_len: sizes[i % sizes.len()],
            };
            t += (-next().ln() * mean_gap_ns) as u64;
            p
        })
        .collect()
}

/// Slots (ns of `CLOCK_MONOTONIC`) replaying `packets` from `start_ns`.
pub fn slots(packets: &[PcapPacket], start_ns: u64) -> Vec<u64> {
    let t0 = packets.first().map_or(0, |p| p.ts_ns);
    packets
        .iter()
        .map(|p| start_ns + p.ts_ns.saturating_sub(t0))
        .collect()
}

/// One sender's replay, measured on the far side.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayRow {
    /// Sender.
    pub sender: SenderKind,
    /// Datagrams sent / captured.
    pub sent: u64,
    /// See `sent`.
    pub captured: usize,
    /// |measured - original| gap: mean, p50, p99 (µs).
    pub mean_us: f64,
    /// See `mean_us`.
    pub p50_us: f64,
    /// See `mean_us`.
    pub p99_us: f64,
    /// Mean of |measured - original| / original over the gaps, %.
    pub mean_rel_pct: f64,
    /// The same, median, %.
    pub p50_rel_pct: f64,
}

/// Mean and median of |measured - original| / original (%), from per-gap absolute
/// errors and the original gaps (zero-length originals skipped).
pub fn relative_errors(errors_ns: &[u64], original_ns: &[u64]) -> (f64, f64) {
    let mut rel: Vec<f64> = errors_ns
        .iter()
        .zip(original_ns)
        .filter(|(_, o)| **o > 0)
        .map(|(e, o)| 100.0 * *e as f64 / *o as f64)
        .collect();
    if rel.is_empty() {
        return (0.0, 0.0);
    }
    rel.sort_by(f64::total_cmp);
    let mean = rel.iter().sum::<f64>() / rel.len() as f64;
    (mean, crate::stats::nearest_rank(&rel, 50.0))
}

/// Replays `packets` on the connected `socket` with `sender`; `run` tags the datagrams.
fn send(
    socket: &OwnedFd,
    sender: SenderKind,
    packets: &[PcapPacket],
    run: u32,
    dispatch: &latebind_io::dispatch::DispatchConfig,
    phi_us: u64,
) -> Result<(Vec<u64>, latebind_io::dispatch::DispatchStats)> {
    let start = sys::mono_ns() + 50_000_000;
    let at = slots(packets, start);
    let payloads: Vec<Vec<u8>> = packets
        .iter()
        .enumerate()
        .map(|(i, p)| capture::tagged_payload(Tag { run, seq: i as u32 }, p.ip_len.min(1500)))
        .collect();
    let stats =
        crate::dispatch_bench::send_with_config(socket, sender, dispatch, phi_us, &at, payloads)?;
    Ok((at, stats))
}

/// Replays to `peer` from `bind` with one sender; returns the sender's own stats.
pub fn replay(
    packets: &[PcapPacket],
    bind: SocketAddr,
    peer: SocketAddr,
    sender: SenderKind,
    dispatch: &latebind_io::dispatch::DispatchConfig,
    phi_us: u64,
) -> Result<latebind_io::dispatch::DispatchStats> {
    let s = std::net::UdpSocket::bind(bind).with_context(|| format!("binding {bind}"))?;
    s.connect(peer)
        .with_context(|| format!("connecting to {peer}"))?;
    let fd = OwnedFd::from(s);
    Ok(send(&fd, sender, packets, 1, dispatch, phi_us)?.1)
}

/// Both senders in turn over a veth between two fresh namespaces, timed by a capture
/// on the far side (needs root).
pub fn evaluate(
    packets: &[PcapPacket],
    dispatch: &latebind_io::dispatch::DispatchConfig,
    phi_us: u64,
) -> Result<Vec<ReplayRow>> {
    use crate::netns::{Role, Topology};
    if packets.len() < 2 {
        bail!("{} packets: a replay needs at least 2", packets.len());
    }
    let topo = Topology::create_direct(1).context("building the replay's namespaces")?;
    let link = topo.links[0].clone();
    let socket = crate::dispatch_bench::connected_socket(
        &topo.ns(Role::Client),
        link.client,
        link.server,
        BENCH_PORT,
    )?;
    let original: Vec<u64> = packets
        .windows(2)
        .map(|w| w[1].ts_ns.saturating_sub(w[0].ts_ns))
        .collect();
    let mut rows = Vec::new();
    for (run, sender) in [(1u32, SenderKind::Sequential), (2, SenderKind::Dispatch)] {
        let cap = Capture::start(Some(&topo.ns(Role::Server)), &link.server_if, BENCH_PORT)?;
        let (at, stats) = send(&socket, sender, packets, run, dispatch, phi_us)?;
        std::thread::sleep(std::time::Duration::from_millis(30));
        let got = cap.stop()?;
        let captured = got
            .arrivals
            .iter()
            .filter(|a| a.tag.is_some_and(|t| t.run == run))
            .count();
        // Per gap i (packets i, i+1), only where both were captured in order.
        let mut errs = Vec::new();
        let mut orig = Vec::new();
        let mine: Vec<(u32, u64)> = got
            .arrivals
            .iter()
            .filter_map(|a| a.tag.filter(|t| t.run == run).map(|t| (t.seq, a.ts_ns)))
            .collect();
        for w in mine.windows(2) {
            let ((s0, t0), (s1, t1)) = (w[0], w[1]);
            if s1 == s0 + 1 && t1 >= t0 {
                let expected = at[s1 as usize] - at[s0 as usize];
                errs.push((t1 - t0).abs_diff(expected));
                orig.push(original[s0 as usize]);
            }
        }
        let (mean, p50, p99, _) = summary_us(&errs);
        let (mean_rel, p50_rel) = relative_errors(&errs, &orig);
        rows.push(ReplayRow {
            sender,
            sent: stats.sent,
            captured,
            mean_us: mean,
            p50_us: p50,
            p99_us: p99,
            mean_rel_pct: mean_rel,
            p50_rel_pct: p50_rel,
        });
    }
    Ok(rows)
}

/// Reads a pcap file.
pub fn read_pcap(path: &Path) -> Result<Vec<PcapPacket>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
    parse_pcap(&bytes).with_context(|| format!("{}", path.display()))
}

/// The evaluation as a markdown table.
pub fn eval_table(packets: &[PcapPacket], rows: &[ReplayRow]) -> String {
    let mut s = String::new();
    let span = packets
        .last()
        .zip(packets.first())
        .map_or(0.0, |(l, f)| (l.ts_ns - f.ts_ns) as f64 / 1e9);
    let _ = writeln!(s, "{} packets over {span:.3} s", packets.len());
    let _ = writeln!(
        s,
        "| sender | sent / captured | gap error mean / p50 / p99 (µs) | relative error mean / median |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} / {} | {:.2} / {:.2} / {:.2} | {:.1} % / {:.1} % |",
            match r.sender {
                SenderKind::Sequential => "sequential",
                SenderKind::Dispatch => "dispatch",
            },
            r.sent,
            r.captured,
            r.mean_us,
            r.p50_us,
            r.p99_us,
            r.mean_rel_pct,
            r.p50_rel_pct
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_written_then_parsed_gives_the_packets_back() {
        let packets = sample_packets(50, 1e6, 7);
        let bytes = write_pcap(&packets, 64);
        assert_eq!(parse_pcap(&bytes).unwrap(), packets);
    }

    #[test]
    fn pcap_microsecond_big_endian_ethernet_is_read() {
        // Hand-built: big-endian µs magic, Ethernet, one 60-byte frame (46 of IP) at
        // 1.000002 s, then one at 2.5 s.
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_c3d4u32.to_be_bytes());
        b.extend_from_slice(&[0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        b.extend_from_slice(&1u32.to_be_bytes());
        for (sec, usec) in [(1u32, 2u32), (2, 500_000)] {
            b.extend_from_slice(&sec.to_be_bytes());
            b.extend_from_slice(&usec.to_be_bytes());
            b.extend_from_slice(&60u32.to_be_bytes());
            b.extend_from_slice(&60u32.to_be_bytes());
            b.extend_from_slice(&[0u8; 60]);
        }
        let p = parse_pcap(&b).unwrap();
        assert_eq!(
            p,
            [
                PcapPacket {
                    ts_ns: 1_000_002_000,
                    ip_len: 46
                },
                PcapPacket {
                    ts_ns: 2_500_000_000,
                    ip_len: 46
                }
            ]
        );
    }

    #[test]
    fn pcap_truncated_or_foreign_is_an_error_naming_the_problem() {
        let bytes = write_pcap(&sample_packets(3, 1e6, 1), 64);
        let e = parse_pcap(&bytes[..bytes.len() - 5])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("record 2") && e.contains("file ends first"),
            "{e}"
        );
        let e = parse_pcap(b"\x0a\x0d\x0d\x0a pcapng section header")
            .unwrap_err()
            .to_string();
        assert!(e.contains("pcapng"), "{e}");
        let mut other = bytes.clone();
        other[20..24].copy_from_slice(&147u32.to_le_bytes());
        assert!(
            parse_pcap(&other)
                .unwrap_err()
                .to_string()
                .contains("link type 147")
        );
    }

    #[test]
    fn sample_is_reproducible_with_the_mean_gap() {
        let a = sample_packets(4000, 1e6, 3);
        assert_eq!(a, sample_packets(4000, 1e6, 3));
        assert_ne!(a, sample_packets(4000, 1e6, 4));
        let mean = (a[3999].ts_ns - a[0].ts_ns) as f64 / 3999.0;
        assert!((mean / 1e6 - 1.0).abs() < 0.1, "{mean}");
    }

    #[test]
    fn slots_keep_the_original_spacing_from_the_start() {
        let p = [
            PcapPacket {
                ts_ns: 5_000,
                ip_len: 100,
            },
            PcapPacket {
                ts_ns: 5_300,
                ip_len: 100,
            },
            PcapPacket {
                ts_ns: 9_000,
                ip_len: 100,
            },
        ];
        assert_eq!(slots(&p, 1_000_000), [1_000_000, 1_000_300, 1_004_000]);
    }

    #[test]
    fn relative_errors_skip_zero_gaps() {
        let (mean, p50) = relative_errors(&[10, 50, 7], &[100, 100, 0]);
        assert!((mean - 30.0).abs() < 1e-9);
        assert_eq!(p50, 10.0);
    }
}
