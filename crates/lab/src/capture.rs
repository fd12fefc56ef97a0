//! Departure times that do not trust the sender: an `AF_PACKET` socket on the
//! receiving end of a veth, in the other namespace, with kernel receive timestamps
//! (`SO_TIMESTAMPNS`).
//!
//! A veth's transmit hands the frame straight to its peer's receive path, which stamps
//! it (`netif_rx`) in the sender's context: on an unshaped veth the receive stamp is
//! the departure time plus a near-constant path cost, so inter-arrival times are
//! inter-departure times. The capture keeps only IPv4 UDP frames to one port and, from
//! their payload, the tag senders put first ([`Tag`]: run and sequence number), so gaps
//! are computed between consecutive sequence numbers and losses cannot pair the wrong
//! packets.
//!
//! ```text
//!  1. Capture::start(ns, ifname, port): a thread joins `ns`, binds a packet socket to
//!     `ifname` (and a UDP socket to `port`, so the kernel answers no ICMP unreachable)
//!  2. it reads frames (every 10 ms, in bursts) until stop() and nothing is pending; each frame:
//!     kernel timestamp, IPv4 UDP to `port`? keep (timestamp, IP length, tag)
//!  3. stop() returns the arrivals in arrival order; idt_errors() compares them
//!     with the slots the sender was given
//! ```

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use anyhow::{Context as _, Result, anyhow};

use crate::sys;

/// Ethernet header length (no VLAN tags on the lab's veths).
const ETH_HLEN: usize = 14;
/// Bytes of IPv4 + UDP headers without options.
pub const IP_UDP_HEADERS: usize = 28;
/// Bytes of the tag at the start of a payload.
pub const TAG_LEN: usize = 8;

/// What a sender puts first in each payload: the run (to tell runs apart on one
/// port) and the datagram's sequence number in it, both big-endian u32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tag {
    /// Run identifier.
    pub run: u32,
    /// Sequence number within the run.
    pub seq: u32,
}

impl Tag {
    /// Writes the tag at the start of `payload` (at least [`TAG_LEN`] bytes).
    pub fn write(self, payload: &mut [u8]) {
        payload[..4].copy_from_slice(&self.run.to_be_bytes());
        payload[4..8].copy_from_slice(&self.seq.to_be_bytes());
    }

    /// The tag at the start of `payload`, if it is long enough.
    pub fn read(payload: &[u8]) -> Option<Self> {
        let run = u32::from_be_bytes(payload.get(..4)?.try_into().ok()?);
        let seq = u32::from_be_bytes(payload.get(4..8)?.try_into().ok()?);
        Some(Self { run, seq })
    }
}

/// A payload of `ip_len` bytes of IP packet (IPv4 + UDP headers included) starting
/// with `tag`, the rest zero. `ip_len` below 36 is raised to 36 (the tag must fit).
pub fn tagged_payload(tag: Tag, ip_len: usize) -> Vec<u8> {
    let mut p = vec![0u8; ip_len.max(IP_UDP_HEADERS + TAG_LEN) - IP_UDP_HEADERS];
    tag.write(&mut p);
    p
}

/// One captured datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arrival {
    /// Kernel receive timestamp, ns of `CLOCK_REALTIME`.
    pub ts_ns: u64,
    /// IPv4 total length.
    pub ip_len: u16,
    /// The payload's tag (None: payload shorter than a tag).
    pub tag: Option<Tag>,
}

/// The parts of an Ethernet frame carrying IPv4 UDP that the capture uses.
#[derive(Debug, PartialEq, Eq)]
pub struct Udp4<'a> {
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 total length.
    pub ip_len: u16,
    /// The UDP payload (as much of it as the frame holds).
    pub payload: &'a [u8],
}

/// Parses an Ethernet frame as IPv4 UDP (first fragment or unfragmented); None for
/// anything else or anything truncated before the UDP header.
pub fn parse_udp4(frame: &[u8]) -> Option<Udp4<'_>> {
    if frame.len() < ETH_HLEN + 20 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    let ip = &frame[ETH_HLEN..];
    if ip[0] >> 4 != 4 || ip[9] != 17 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let frag_offset = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff;
    if ihl < 20 || frag_offset != 0 || ip.len() < ihl + 8 {
        return None;
    }
    let ip_len = u16::from_be_bytes([ip[2], ip[3]]);
    let udp = &ip[ihl..];
    let end = (usize::from(ip_len).saturating_sub(ihl)).min(udp.len());
    if end < 8 {
        return None;
    }
    Some(Udp4 {
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        ip_len,
        payload: &udp[8..end],
    })
}

/// A capture running on its own thread in a namespace.
#[derive(Debug)]
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<CaptureResult>>>,
}

/// What a capture saw.
#[derive(Clone, Debug, Default)]
pub struct CaptureResult {
    /// Tagged-or-not UDP datagrams to the port, in arrival order.
    pub arrivals: Vec<Arrival>,
    /// Frames the kernel dropped on the packet socket (its buffer was full).
    pub kernel_drops: u64,
    /// Frames without a kernel timestamp (not kept).
    pub unstamped: u64,
}

impl Capture {
    /// Starts capturing IPv4 UDP to `port` arriving on `ifname` in namespace `ns`
    /// (None: the caller's namespace). Returns once the socket is bound.
    pub fn start(ns: Option<&str>, ifname: &str, port: u16) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (ns_owned, ifname_owned, stop2) =
            (ns.map(str::to_owned), ifname.to_owned(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                // Threads inherit their creator's policy: the capture is not to run
                // in real time beside a real-time sender.
                let _ = sys::set_scheduler(libc::SCHED_OTHER, 0);
                let opened = (|| -> io::Result<(OwnedFd, OwnedFd)> {
                    if let Some(ns) = &ns_owned {
                        sys::enter_netns(ns)?;
                    }
                    Ok((open_packet_socket(&ifname_owned)?, open_sink(port)?))
                })();
                let (fd, sink) = match opened {
                    Ok(v) => {
                        let _ = ready_tx.send(Ok(()));
                        v
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                        return Err(e);
                    }
                };
                read_loop(&fd, &sink, port, &stop2)
            })
            .context("starting the capture thread")?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                stop,
                thread: Some(thread),
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(anyhow!("capture on {ifname}: {e}"))
            }
            Err(_) => Err(anyhow!("capture on {ifname}: the thread died")),
        }
    }

    /// Stops after reading what is pending; returns everything captured.
    pub fn stop(mut self) -> Result<CaptureResult> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("only stop() and drop take the thread, and stop consumes self")
            .join()
            .map_err(|_| anyhow!("the capture thread panicked"))?
            .context("capture")
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn open_packet_socket(ifname: &str) -> io::Result<OwnedFd> {
    sys::packet_socket(ifname, 32 << 20)
        .map(|(fd, _)| fd)
        .map_err(|e| io::Error::new(e.kind(), format!("packet socket on {ifname}: {e}")))
}

/// A UDP socket bound to `port` that nobody reads much: datagrams to the port are
/// absorbed instead of drawing ICMP port-unreachable errors back to the sender.
fn open_sink(port: u16) -> io::Result<OwnedFd> {
    let s = std::net::UdpSocket::bind(("0.0.0.0", port))
        .map_err(|e| io::Error::new(e.kind(), format!("UDP sink on port {port}: {e}")))?;
    s.set_nonblocking(true)?;
    Ok(OwnedFd::from(s))
}

fn read_loop(
    fd: &OwnedFd,
    sink: &OwnedFd,
    port: u16,
    stop: &AtomicBool,
) -> io::Result<CaptureResult> {
    let mut out = CaptureResult::default();
    let mut buf = vec![0u8; 2048];
    let mut scratch = [0u8; 2048];
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let mut got = false;
        while let Some((n, _, ts)) = sys::recv_stamped(fd.as_raw_fd(), &mut buf)? {
            got = true;
            let Some(u) = parse_udp4(&buf[..n]) else {
                continue;
            };
            if u.dst_port != port {
                continue;
            }
            if ts == 0 {
                out.unstamped += 1;
                continue;
            }
            out.arrivals.push(Arrival {
                ts_ns: ts,
                ip_len: u.ip_len,
                tag: Tag::read(u.payload),
            });
        }
        // Empty the sink so that its buffer never matters.
        // SAFETY: receives into a local buffer.
        while unsafe {
            libc::recv(
                sink.as_raw_fd(),
                scratch.as_mut_ptr().cast(),
                scratch.len(),
                libc::MSG_DONTWAIT,
            )
        } > 0
        {}
        if stopping && !got {
            break;
        }
        // Read in bursts every 10 ms rather than waking per frame: the capture must
        // not compete for the CPUs with the sender it measures (the timestamps are the
        // kernel's, taken when the frames arrive; the socket buffer holds the burst).
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    out.kernel_drops = drops(fd.as_raw_fd());
    Ok(out)
}

fn drops(fd: RawFd) -> u64 {
    // SAFETY: tpacket_stats is POD.
    let mut st: libc::tpacket_stats = unsafe { mem::zeroed() };
    match sys::getsockopt(fd, libc::SOL_PACKET, libc::PACKET_STATISTICS, &mut st) {
        Ok(_) => u64::from(st.tp_drops),
        Err(_) => 0,
    }
}

/// Inter-departure errors of one run: for each pair of arrivals with consecutive
/// sequence numbers of run `run` (`seq`, `seq + 1`), |measured gap - expected gap| in
/// ns, where the expected gap is `slots[seq + 1] - slots[seq]` (the sender's slots,
/// indexed by sequence number). Pairs broken by a loss or reordering are skipped.
pub fn idt_errors(arrivals: &[Arrival], run: u32, slots: &[u64]) -> Vec<u64> {
    let mine: Vec<(u32, u64)> = arrivals
        .iter()
        .filter_map(|a| match a.tag {
            Some(t) if t.run == run => Some((t.seq, a.ts_ns)),
            _ => None,
        })
        .collect();
    mine.windows(2)
        .filter_map(|w| {
            let ((s0, t0), (s1, t1)) = (w[0], w[1]);
            if s1 != s0.wrapping_add(1) || t1 < t0 {
                return None;
            }
            let expected = slots
                .get(s1 as usize)?
                .checked_sub(*slots.get(s0 as usize)?)?;
            Some((t1 - t0).abs_diff(expected))
        })
        .collect()
}

/// How well a paced link's datagrams kept their spacing, from a capture of the tunnel's
/// (encrypted, untagged) datagrams: see [`paced_departures`].
#[derive(Clone, Debug, Default, serde::Deserialize, serde::Serialize)]
pub struct PacedDepartures {
    /// The pacing rate the spacing is compared with, bit/s of engine datagrams.
    pub rate_bps: f64,
    /// Pairs of consecutive data datagrams compared.
    pub pairs: usize,
    /// Mean expected gap, µs.
    pub expected_gap_us: f64,
    /// Mean measured gap, µs.
    pub measured_gap_us: f64,
    /// Mean |measured - expected| gap, µs.
    pub error_mean_us: f64,
    /// Percentiles of |measured - expected|, µs.
    pub error_us: crate::stats::Percentiles,
}

/// Inter-departure errors of a link paced at `rate_bps` with a standing backlog: for
/// each two consecutive captured datagrams of at least `min_ip_len` bytes (data; an
/// acknowledgement between them breaks the pair) arriving in `[from_ns, to_ns)`
/// (`CLOCK_REALTIME`), |gap - expected|, where the pacer's expected gap is the first
/// one's engine datagram (IP length less `overhead` bytes of IP, UDP and the
/// authentication tag) at the rate.
pub fn paced_departures(
    arrivals: &[Arrival],
    rate_bps: f64,
    overhead: usize,
    min_ip_len: u16,
    from_ns: u64,
    to_ns: u64,
) -> PacedDepartures {
    let inside: Vec<&Arrival> = arrivals
        .iter()
        .filter(|a| a.ts_ns >= from_ns && a.ts_ns < to_ns)
        .collect();
    let mut errors = Vec::new();
    let (mut expected_sum, mut measured_sum) = (0.0, 0.0);
    for w in inside.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.ip_len < min_ip_len || b.ip_len < min_ip_len || b.ts_ns < a.ts_ns {
            continue;
        }
        let bytes = usize::from(a.ip_len).saturating_sub(overhead);
        let expected = bytes as f64 * 8.0 / rate_bps * 1e9;
        let measured = (b.ts_ns - a.ts_ns) as f64;
        expected_sum += expected;
        measured_sum += measured;
        errors.push((measured - expected).abs() / 1e3);
    }
    let n = errors.len();
    let mean = |x: f64| if n == 0 { 0.0 } else { x / n as f64 };
    PacedDepartures {
        rate_bps,
        pairs: n,
        expected_gap_us: mean(expected_sum) / 1e3,
        measured_gap_us: mean(measured_sum) / 1e3,
        error_mean_us: mean(errors.iter().sum()),
        error_us: crate::stats::Percentiles::of(&errors),
    }
}

/// Gaps (ns) between the two datagrams of each packet pair: pair `k` is sequence
/// numbers `2k` and `2k + 1` of run `run`, both captured.
pub fn pair_gaps(arrivals: &[Arrival], run: u32) -> Vec<u64> {
    let mut first: Option<(u32, u64)> = None;
    let mut gaps = Vec::new();
    for a in arrivals {
        let Some(t) = a.tag.filter(|t| t.run == run) else {
            continue;
        };
        if t.seq % 2 == 0 {
            first = Some((t.seq, a.ts_ns));
        } else if let Some((s0, t0)) = first.take()
            && s0 + 1 == t.seq
        {
            gaps.push(a.ts_ns.saturating_sub(t0));
        }
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; ETH_HLEN];
        f[12] = 0x08;
        let ip_len = (20 + 8 + payload.len()) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 1, 1, 198, 18, 1, 2,
        ];
        ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&4000u16.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn udp4_frame_parses_ports_length_and_tag() {
        let tag = Tag { run: 7, seq: 42 };
        let p = tagged_payload(tag, 40);
        assert_eq!(p.len(), 12);
        let f = frame(9000, &p);
        let u = parse_udp4(&f).unwrap();
        assert_eq!((u.src_port, u.dst_port, u.ip_len), (4000, 9000, 40));
        assert_eq!(Tag::read(u.payload), Some(tag));
        // Ethernet padding after the IP packet is not payload.
        let mut padded = f.clone();
        padded.extend_from_slice(&[0xee; 6]);
        assert_eq!(parse_udp4(&padded).unwrap().payload, &p[..]);
    }

    #[test]
    fn udp4_rejects_other_protocols_fragments_and_truncation() {
        let f = frame(9000, &[1, 2, 3, 4, 5, 6, 7, 8]);
        let mut arp = f.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(parse_udp4(&arp), None);
        let mut tcp = f.clone();
        tcp[ETH_HLEN + 9] = 6;
        assert_eq!(parse_udp4(&tcp), None);
        let mut frag = f.clone();
        frag[ETH_HLEN + 7] = 0x10;
        assert_eq!(parse_udp4(&frag), None);
        assert_eq!(parse_udp4(&f[..ETH_HLEN + 24]), None);
        assert_eq!(Tag::read(&[0; 7]), None);
    }

    fn arrival(run: u32, seq: u32, ts_ns: u64) -> Arrival {
        Arrival {
            ts_ns,
            ip_len: 100,
            tag: Some(Tag { run, seq }),
        }
    }

    #[test]
    fn idt_errors_pair_consecutive_sequence_numbers_only() {
        let slots = [0, 100, 200, 300, 400];
        let a = [
            arrival(1, 0, 1_000),
            arrival(1, 1, 1_103),
            arrival(9, 2, 1_150), // another run: ignored
            // seq 2 lost: (1, 3) is not a pair
            arrival(1, 3, 1_300),
            arrival(1, 4, 1_390),
        ];
        assert_eq!(idt_errors(&a, 1, &slots), [3, 10]);
        // Reordered arrivals give no pair.
        let b = [arrival(1, 1, 1_000), arrival(1, 0, 1_050)];
        assert!(idt_errors(&b, 1, &slots).is_empty());
    }

    #[test]
    fn pair_gaps_need_both_members_of_a_pair() {
        let a = [
            arrival(2, 0, 1_000),
            arrival(2, 1, 1_012),
            arrival(2, 2, 2_000), // its second is lost
            arrival(2, 4, 3_000),
            arrival(2, 5, 3_020),
            arrival(2, 7, 4_000), // its first is lost
        ];
        assert_eq!(pair_gaps(&a, 2), [12, 20]);
    }
}
