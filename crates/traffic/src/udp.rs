//! UDP kinds: `udp-cbr`, `udp-burst` and `urgent`.
//!
//! The source end emits probe packets (see [`crate::ip::build_probe`]) stamped with
//! the `now` of the [`poll_transmit`](UdpFlow::poll_transmit) call that emits them;
//! the sink end counts unique packets, duplicates, one-way latency and gaps.

use std::time::Duration;

use crate::cuts::CutTracker;
use crate::ip::{self, Probe, UdpAddressing};
use crate::report::{self, Latency};
use crate::{FlowKind, FlowReport, FlowSpec, Side};

/// When the packets of a flow are due.
#[derive(Debug, Clone, Copy)]
enum Schedule {
    /// Packet `seq` at `start + seq * interval_ns` while that is before `stop`.
    Cbr { interval_ns: u64 },
    /// `count` packets, all at `start`.
    Burst { count: u64 },
    /// Nothing (e.g. a CBR flow with a rate of 0).
    Never,
}

/// Sink-side state.
#[derive(Debug, Default)]
struct Sink {
    /// Bitset of the sequence numbers received.
    seen: Vec<u64>,
    delivered: u64,
    duplicates: u64,
    latencies_ms: Vec<f64>,
    /// Whole IP bytes of unique packets.
    ip_bytes: u64,
    /// UDP payload bytes of unique packets.
    payload_bytes: u64,
    /// Time of the last unique arrival (clipped to `stop` for CBR).
    last_arrival: Option<Duration>,
    max_gap: Duration,
}

impl Sink {
    /// Marks `seq` as seen; returns whether it was new.
    fn insert(&mut self, seq: u64) -> bool {
        let word = (seq / 64) as usize;
        let bit = 1u64 << (seq % 64);
        if self.seen.len() <= word {
            self.seen.resize(word + 1, 0);
        }
        let new = self.seen[word] & bit == 0;
        self.seen[word] |= bit;
        new
    }
}

/// A UDP flow: a source on the sending end and a sink on the other.
#[derive(Debug)]
pub(crate) struct UdpFlow {
    spec: FlowSpec,
    sender: Side,
    addressing: UdpAddressing,
    packet_len: usize,
    schedule: Schedule,
    /// Sequence number of the next packet to send (= packets sent so far).
    next_seq: u64,
    /// When packet 0 was emitted.
    first_send: Option<Duration>,
    sink: Sink,
    cuts: CutTracker,
}

impl UdpFlow {
    pub(crate) fn new(spec: FlowSpec) -> Self {
        let sender = spec.direction.sender();
        let receiver = sender.peer();
        let addr_of = |side| match side {
            Side::Client => ip::CLIENT_ADDR,
            Side::Server => ip::SERVER_ADDR,
        };
        let addressing = UdpAddressing {
            src: addr_of(sender),
            dst: addr_of(receiver),
            src_port: spec.port(sender),
            dst_port: spec.port(receiver),
            dscp: spec.dscp & 0x3f,
        };
        let packet_len = spec
            .packet_bytes
            .clamp(ip::MIN_PROBE_PACKET, usize::from(u16::MAX));
        let schedule = match spec.kind {
            FlowKind::UdpCbr => {
                let interval = packet_len as f64 * 8.0 / spec.rate_bps * 1e9;
                if interval.is_finite() && interval > 0.0 {
                    Schedule::Cbr {
                        interval_ns: (interval.round() as u64).max(1),
                    }
                } else {
                    Schedule::Never
                }
            }
            FlowKind::UdpBurst => Schedule::Burst { count: spec.count },
            // An urgent flow always sends at least one packet.
            FlowKind::Urgent => Schedule::Burst {
                count: spec.count.max(1),
            },
            FlowKind::TcpBulk | FlowKind::QuicBulk => unreachable!("not a UDP probe flow"),
        };
        let cuts = CutTracker::new(spec.cuts.clone());
        Self {
            spec,
            sender,
            addressing,
            packet_len,
            schedule,
            next_seq: 0,
            first_send: None,
            sink: Sink::default(),
            cuts,
        }
    }

    pub(crate) fn spec(&self) -> &FlowSpec {
        &self.spec
    }

    fn is_cbr(&self) -> bool {
        matches!(self.spec.kind, FlowKind::UdpCbr)
    }

    /// When packet `seq` is due, if it is ever sent.
    fn due(&self, seq: u64) -> Option<Duration> {
        match self.schedule {
            Schedule::Cbr { interval_ns } => {
                let offset = u128::from(seq) * u128::from(interval_ns);
                let t = self.spec.start.as_nanos().checked_add(offset)?;
                let t = Duration::from_nanos(u64::try_from(t).ok()?);
                (t < self.spec.stop).then_some(t)
            }
            Schedule::Burst { count } => (seq < count).then_some(self.spec.start),
            Schedule::Never => None,
        }
    }

    pub(crate) fn poll_transmit(&mut self, now: Duration, side: Side) -> Option<Vec<u8>> {
        if side != self.sender || self.due(self.next_seq)? > now {
            return None;
        }
        let probe = Probe {
            index: self.spec.index,
            seq: self.next_seq,
            send_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
        };
        self.next_seq += 1;
        self.first_send.get_or_insert(now);
        self.cuts.on_sent(now);
        Some(ip::build_probe(&self.addressing, self.packet_len, probe))
    }

    pub(crate) fn handle_packet(&mut self, now: Duration, side: Side, packet: &[u8]) {
        if side == self.sender {
            return;
        }
        let Some(probe) = ip::parse_probe(packet) else {
            return;
        };
        if probe.index != self.spec.index || probe.seq >= self.next_seq {
            return; // not one of ours
        }
        if !self.sink.insert(probe.seq) {
            self.sink.duplicates += 1;
            return;
        }
        let sink = &mut self.sink;
        sink.delivered += 1;
        let sent_at = Duration::from_nanos(probe.send_ns);
        self.cuts.on_delivery(now);
        self.cuts.on_delivered_packet(sent_at);
        sink.latencies_ms
            .push(report::ms(now.saturating_sub(sent_at)));
        sink.ip_bytes += packet.len() as u64;
        sink.payload_bytes += packet
            .len()
            .saturating_sub(ip::IPV4_HEADER_LEN + ip::UDP_HEADER_LEN)
            as u64;
        // Gaps: CBR counts only the active period (up to `stop`) and the wait for
        // the first packet; bursts count inter-arrival gaps only.
        let cbr = matches!(self.schedule, Schedule::Cbr { .. });
        let t = if cbr { now.min(self.spec.stop) } else { now };
        let from = match sink.last_arrival {
            Some(last) => Some(last),
            None if cbr => self.first_send,
            None => None,
        };
        if let Some(from) = from {
            sink.max_gap = sink.max_gap.max(t.saturating_sub(from));
        }
        sink.last_arrival = Some(t);
    }

    pub(crate) fn poll_timeout(&self) -> Option<Duration> {
        self.due(self.next_seq)
    }

    pub(crate) fn report(&self, end: Duration) -> FlowReport {
        let sink = &self.sink;
        let active_end = self.spec.stop.min(end);
        let mut max_gap = sink.max_gap;
        let goodput_over = if self.is_cbr() {
            // The tail: from the last arrival (or the first send, if nothing
            // arrived) to the end of the active period.
            if let Some(from) = sink.last_arrival.or(self.first_send) {
                max_gap = max_gap.max(active_end.saturating_sub(from));
            }
            active_end.saturating_sub(self.spec.start)
        } else {
            sink.last_arrival
                .map_or(Duration::ZERO, |l| l.saturating_sub(self.spec.start))
        };
        FlowReport {
            name: self.spec.name.clone(),
            kind: self.spec.kind,
            sent: self.next_seq,
            delivered: sink.delivered,
            lost: self.next_seq.saturating_sub(sink.delivered),
            duplicates: sink.duplicates,
            latency_ms: Latency::from_samples(&sink.latencies_ms),
            max_gap_ms: report::ms(max_gap),
            goodput_mbps: report::mbps(sink.ip_bytes, goodput_over),
            retransmitted: 0,
            bytes_delivered: sink.payload_bytes,
            cuts: self.cuts.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::testpipe::Pipe;
    use crate::{Direction, Flow, FlowKind, FlowSpec, Side, ip};

    fn spec(kind: FlowKind) -> FlowSpec {
        FlowSpec {
            name: "f".into(),
            kind,
            direction: Direction::Up,
            start: Duration::from_millis(100),
            stop: Duration::from_millis(1100),
            rate_bps: 1_000_000.0,
            packet_bytes: 1250,
            count: 5,
            dscp: 0,
            index: 2,
            cuts: Vec::new(),
        }
    }

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn cbr_spacing_matches_rate() {
        // 1250 B at 1 Mb/s: one packet every 10 ms, 100 packets in [100 ms, 1100 ms).
        let mut f = Flow::new(spec(FlowKind::UdpCbr));
        assert_eq!(f.poll_timeout(), Some(ms(100)));
        assert_eq!(f.poll_transmit(ms(99), Side::Client), None);
        let mut times = Vec::new();
        while let Some(t) = f.poll_timeout() {
            assert_eq!(f.poll_transmit(t, Side::Server), None);
            let pkt = f.poll_transmit(t, Side::Client).expect("due packet");
            assert_eq!(pkt.len(), 1250);
            assert!(ip::ipv4_checksum_ok(&pkt));
            assert_eq!(f.poll_transmit(t, Side::Client), None);
            times.push(t);
        }
        assert_eq!(times.len(), 100);
        for (i, t) in times.iter().enumerate() {
            assert_eq!(*t, ms(100 + 10 * i as u64));
        }
    }

    #[test]
    fn cbr_schedule_does_not_drift() {
        // 1000 B at 3 Mb/s: 2666666.67 ns -> 2666667 ns per packet, times are seq * interval.
        let mut s = spec(FlowKind::UdpCbr);
        s.packet_bytes = 1000;
        s.rate_bps = 3e6;
        s.start = Duration::ZERO;
        s.stop = Duration::from_secs(10);
        let mut f = Flow::new(s);
        let mut n = 0u64;
        while let Some(t) = f.poll_timeout() {
            assert_eq!(t, Duration::from_nanos(n * 2_666_667));
            f.poll_transmit(t, Side::Client).expect("due");
            n += 1;
        }
        assert_eq!(n, 3750);
    }

    #[test]
    fn burst_emits_count_at_start() {
        for kind in [FlowKind::UdpBurst, FlowKind::Urgent] {
            let mut s = spec(kind);
            s.direction = Direction::Down;
            s.packet_bytes = 100;
            s.dscp = 46;
            let mut f = Flow::new(s);
            assert_eq!(f.poll_timeout(), Some(ms(100)));
            assert_eq!(f.poll_transmit(ms(50), Side::Server), None);
            assert_eq!(f.poll_transmit(ms(100), Side::Client), None);
            for seq in 0..5 {
                let pkt = f.poll_transmit(ms(100), Side::Server).expect("burst");
                assert_eq!(pkt.len(), 100);
                assert_eq!(pkt[1] >> 2, 46);
                assert_eq!(&pkt[12..16], &ip::SERVER_ADDR.octets());
                assert_eq!(&pkt[16..20], &ip::CLIENT_ADDR.octets());
                let p = ip::parse_probe(&pkt).expect("probe");
                assert_eq!((p.index, p.seq, p.send_ns), (2, seq, 100_000_000));
            }
            assert_eq!(f.poll_transmit(ms(100), Side::Server), None);
            assert_eq!(f.poll_timeout(), None);
        }
    }

    #[test]
    fn udp_counts_latencies_and_gaps_exact_on_fixed_delay() {
        let mut f = Flow::new(spec(FlowKind::UdpCbr));
        Pipe::new(ms(25), None).run(&mut f, Duration::from_secs(2));
        let r = f.report(Duration::from_secs(2));
        assert_eq!(
            (r.sent, r.delivered, r.lost, r.duplicates),
            (100, 100, 0, 0)
        );
        assert_eq!(r.latency_ms.p50, 25.0);
        assert_eq!(r.latency_ms.p99, 25.0);
        assert_eq!(r.latency_ms.max, 25.0);
        // First send 100 -> first arrival 125 (25 ms), then 10 ms spacing; the last
        // arrival is at 1115 > stop, so no tail.
        assert_eq!(r.max_gap_ms, 25.0);
        assert!((r.goodput_mbps - 1.0).abs() < 1e-9, "{}", r.goodput_mbps);
        assert_eq!(r.bytes_delivered, 100 * (1250 - 28));
        assert_eq!(r.retransmitted, 0);

        let mut s = spec(FlowKind::UdpBurst);
        s.count = 10;
        let mut f = Flow::new(s);
        // 1250 B at 1 Mb/s = 10 ms serialization each, then 5 ms propagation.
        Pipe::new(ms(5), Some(1e6)).run(&mut f, Duration::from_secs(2));
        let r = f.report(Duration::from_secs(2));
        assert_eq!((r.sent, r.delivered, r.lost, r.duplicates), (10, 10, 0, 0));
        // Latencies 15, 25, ..., 105 ms.
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(r.latency_ms.p50, 55.0), "{:?}", r.latency_ms);
        assert!(close(r.latency_ms.p99, 105.0), "{:?}", r.latency_ms);
        assert!(close(r.latency_ms.max, 105.0), "{:?}", r.latency_ms);
        assert!((r.max_gap_ms - 10.0).abs() < 1e-9, "{}", r.max_gap_ms);
        // 10 * 1250 B over (last arrival 205 ms - start 100 ms).
        let expect = 10.0 * 1250.0 * 8.0 / 0.105 / 1e6;
        assert!((r.goodput_mbps - expect).abs() < 1e-6, "{}", r.goodput_mbps);
    }

    #[test]
    fn urgent_single_packet_exact() {
        let mut s = spec(FlowKind::Urgent);
        s.count = 0; // an urgent flow sends at least one packet
        s.packet_bytes = 100;
        let mut f = Flow::new(s);
        Pipe::new(ms(25), None).run(&mut f, Duration::from_secs(2));
        let r = f.report(Duration::from_secs(2));
        assert_eq!((r.sent, r.delivered, r.lost, r.duplicates), (1, 1, 0, 0));
        assert_eq!(r.latency_ms.p50, 25.0);
        assert_eq!(r.latency_ms.max, 25.0);
        assert_eq!(r.max_gap_ms, 0.0);
        assert_eq!(r.bytes_delivered, 72);
        assert!((r.goodput_mbps - 0.032).abs() < 1e-12, "{}", r.goodput_mbps);
    }

    #[test]
    fn sink_counts_duplicates_and_loss() {
        let mut s = spec(FlowKind::UdpBurst);
        s.count = 6;
        let mut f = Flow::new(s);
        let pkts: Vec<_> = std::iter::from_fn(|| f.poll_transmit(ms(100), Side::Client)).collect();
        assert_eq!(pkts.len(), 6);
        // Deliver 0, 2, 2, 5, 0 (dup), drop 1, 3, 4.
        let arrivals = [(0, 110), (2, 130), (2, 131), (5, 160), (0, 170)];
        for (seq, t) in arrivals {
            f.handle_packet(ms(t), Side::Server, &pkts[seq]);
        }
        // The sending end ignores probes; garbage is ignored.
        f.handle_packet(ms(200), Side::Client, &pkts[1]);
        f.handle_packet(ms(200), Side::Server, &[0x45, 0, 0]);
        let r = f.report(ms(1000));
        assert_eq!((r.sent, r.delivered, r.lost, r.duplicates), (6, 3, 3, 2));
        assert_eq!(r.latency_ms.p50, 30.0);
        assert_eq!(r.latency_ms.max, 60.0);
        assert_eq!(r.max_gap_ms, 30.0);
    }

    #[test]
    fn cbr_gap_includes_outage_and_tail() {
        let mut s = spec(FlowKind::UdpCbr);
        s.stop = Duration::from_secs(10);
        let mut f = Flow::new(s);
        // Drop packets sent in [300 ms, 500 ms) -> seq 20..40, and everything from 900 ms on.
        let mut pipe = Pipe::new(ms(10), None).with_drop(Box::new(|side, n, _| {
            assert_eq!(side, Side::Client);
            (20..40).contains(&n) || n >= 80
        }));
        pipe.run(&mut f, Duration::from_secs(1));
        let r = f.report(Duration::from_secs(1));
        // Packets at 100, 110, ..., 1000 ms (the pipe runs events at `end` too).
        assert_eq!(r.sent, 91);
        assert_eq!(r.delivered, 60);
        assert_eq!(r.lost, 31);
        // Gaps: arrivals at 300 (seq 19) and 510 (seq 40) = 210 ms; tail from the
        // last arrival 900 (seq 79) to 1000 = 100 ms.
        assert!((r.max_gap_ms - 210.0).abs() < 1e-9, "{}", r.max_gap_ms);
    }

    #[test]
    fn cbr_reports_the_stall_and_the_loss_around_a_cut() {
        let mut s = spec(FlowKind::UdpCbr);
        s.stop = Duration::from_secs(1);
        s.cuts = crate::cuts::windows(&[ms(300)], s.start, s.stop);
        let mut f = Flow::new(s);
        // Drop the packets sent in [300 ms, 500 ms): seq 20..40.
        let mut pipe = Pipe::new(ms(10), None).with_drop(Box::new(|_, n, _| (20..40).contains(&n)));
        pipe.run(&mut f, Duration::from_secs(2));
        let r = f.report(Duration::from_secs(2));
        let c = r.cuts[0];
        // Seq 19 (sent at 290) arrives at the cut, seq 40 (sent at 500) at 510.
        assert_eq!(
            (c.at, c.stall, c.data_again),
            (ms(300), ms(210), Some(ms(210)))
        );
        // The loss window [0, 2.3 s) holds every packet of the flow.
        assert_eq!((c.sent, c.delivered, c.lost()), (90, 70, 20));
        assert_eq!(r.lost, c.lost());
    }

    #[test]
    fn cbr_without_arrivals_reports_whole_period_gap() {
        let mut f = Flow::new(spec(FlowKind::UdpCbr));
        Pipe::new(ms(10), None)
            .with_drop(Box::new(|_, _, _| true))
            .run(&mut f, Duration::from_secs(2));
        let r = f.report(Duration::from_secs(2));
        assert_eq!((r.sent, r.delivered, r.lost), (100, 0, 100));
        assert_eq!(r.max_gap_ms, 1000.0);
        assert_eq!(r.goodput_mbps, 0.0);
        assert_eq!(r.latency_ms.max, 0.0);
    }

    #[test]
    fn udp_reports_are_deterministic() {
        let run = || {
            let mut f = Flow::new(spec(FlowKind::UdpCbr));
            Pipe::new(ms(7), Some(2e6))
                .with_drop(Box::new(|_, n, _| n % 7 == 3))
                .run(&mut f, Duration::from_secs(2));
            f.report(Duration::from_secs(2))
        };
        assert_eq!(run(), run());
    }
}
