//! Per-packet cost of the send path: classify, enqueue above the binding point, bind to a
//! link, frame. 1,000 active flows, 4 links, 1400-byte packets; acknowledgements are fed
//! back every 64 packets so the engine's in-flight state stays bounded, as in a real run.
//!
//! Beside it, in the same run: the same with header compression off (the packets are UDP,
//! each flow's the same, so a compact one is its template's 28 bytes less a 4-byte
//! bitmap), and the baseline it replaces, one FIFO per interface (the early-binding path:
//! push, pop, prepend a header), so the cost of late binding shows as the difference.
//!
//! A second group runs the same send path with a single flow (one packet, sent over and
//! over): the difference to 1,000 flows is what per-flow state and 1,000 different packets
//! cost once they no longer stay in cache.
//!
//! A third group is the binding decision of each policy with 10,000 flows and 8 links
//! (min-rtt, aggregate, overflow, redundant, auto; a redundant packet costs two
//! datagrams, both counted in its time; the packets are UDP, so auto binds them as
//! min-rtt, after resolving the policy from the flow's protocol).
//!
//! Run: `cargo bench -p latebind-proto --bench engine`

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use latebind_proto::{Config, Endpoint, Instant, LinkConfig, LinkId, PolicyKind, Role, wire};

const FLOWS: usize = 1000;
const LINKS: u16 = 4;
const PACKET: usize = 1400;

fn packets(flows: usize) -> Vec<Vec<u8>> {
    (0..flows)
        .map(|i| {
            let mut p = vec![0u8; PACKET];
            p[0] = 0x45;
            p[2..4].copy_from_slice(&(PACKET as u16).to_be_bytes());
            p[8] = 64;
            p[9] = 17;
            p[12..16].copy_from_slice(&[198, 18, 0, 2]);
            p[16..20].copy_from_slice(&[198, 19, (i >> 8) as u8, i as u8]);
            p[20..22].copy_from_slice(&(10_000 + i as u16).to_be_bytes());
            p[22..24].copy_from_slice(&20_000u16.to_be_bytes());
            p
        })
        .collect()
}

struct Harness {
    engine: Endpoint,
    now: Instant,
    buf: Vec<u8>,
    ack: Vec<u8>,
    links: u16,
    sent_pn: Vec<u64>,
    acked_pn: Vec<u64>,
    count: u64,
}

impl Harness {
    fn new() -> Self {
        Self::with(LINKS, PolicyKind::MinRtt)
    }

    fn with(links: u16, policy: PolicyKind) -> Self {
        Self::configured(links, policy, true)
    }

    fn configured(links: u16, policy: PolicyKind, header_compression: bool) -> Self {
        let mut config = Config::new(Role::Client);
        config.budget_packets(2);
        config.header_compression = header_compression;
        // The harness acknowledges 64 packets at once, a few µs after they left: a
        // window sized from such a path (`rate_control`) would hold the links shut
        // between two batches. What is measured is the cost of binding a packet.
        config.rate_control = false;
        config.default_policy = policy;
        let now = Instant::ZERO;
        let mut engine = Endpoint::new(config, now).unwrap();
        for l in 0..links {
            // As the daemons set it: a 1500-byte path less the outer headers and the tag
            // (every packet fits every link, the common case of the fitting check).
            let link = LinkConfig {
                max_datagram: Some(1500 - 28 - 16),
                ..LinkConfig::default()
            };
            engine.add_link(now, LinkId(l), link);
        }
        let mut h = Self {
            engine,
            now,
            buf: Vec::with_capacity(2048),
            ack: Vec::with_capacity(256),
            links,
            sent_pn: vec![0; usize::from(links)],
            acked_pn: vec![0; usize::from(links)],
            count: 0,
        };
        // Drain the initial probes.
        while let Some(t) = h.engine.poll_transmit(h.now, &mut h.buf) {
            h.sent_pn[usize::from(t.link.0)] += 1;
            h.engine.handle_tx_done(h.now, t.link);
        }
        h
    }

    /// One packet through the send path. Returns the datagram length.
    fn one(&mut self, packet: &[u8]) -> usize {
        self.now += Duration::from_nanos(300);
        self.engine.handle_tun_packet(self.now, packet).unwrap();
        let t = self
            .engine
            .poll_transmit(self.now, &mut self.buf)
            .expect("a link has room");
        let l = usize::from(t.link.0);
        self.sent_pn[l] += 1;
        self.engine.handle_tx_done(self.now, t.link);
        // A redundant packet's copy (nothing else is pending).
        while let Some(t) = self.engine.poll_transmit(self.now, &mut self.buf) {
            self.sent_pn[usize::from(t.link.0)] += 1;
            self.engine.handle_tx_done(self.now, t.link);
        }
        self.count += 1;
        if self.count.is_multiple_of(64) {
            self.feed_acks();
        }
        t.len
    }

    fn feed_acks(&mut self) {
        for l in 0..self.links {
            let li = usize::from(l);
            if self.sent_pn[li] == self.acked_pn[li] {
                continue;
            }
            let largest = self.sent_pn[li] - 1;
            self.ack.clear();
            wire::Header {
                session: 1,
                link: l,
                pn: self.acked_pn[li] as u32,
            }
            .emit(&mut self.ack);
            wire::emit_ack(&mut self.ack, l, 0, &[0..=largest]);
            self.acked_pn[li] += 1;
            self.engine.handle_datagram(self.now, &self.ack);
        }
        // Nothing else is pending: the acks elicit nothing.
        while let Some(t) = self.engine.poll_transmit(self.now, &mut self.buf) {
            self.sent_pn[usize::from(t.link.0)] += 1;
            self.engine.handle_tx_done(self.now, t.link);
        }
    }
}

/// The early-binding baseline: the packet is bound at enqueue into its interface's FIFO,
/// then popped and framed (a header prepended) by the driver.
struct Fifo {
    queues: Vec<VecDeque<Vec<u8>>>,
    buf: Vec<u8>,
    pool: Vec<Vec<u8>>,
}

impl Fifo {
    fn one(&mut self, packet: &[u8], route: usize) -> usize {
        let mut b = self.pool.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(packet);
        self.queues[route].push_back(b);
        let p = self.queues[route].pop_front().expect("just pushed");
        self.buf.clear();
        self.buf.extend_from_slice(&[0u8; wire::DATA_OVERHEAD]);
        self.buf.extend_from_slice(&p);
        self.pool.push(p);
        self.buf.len()
    }
}

fn bench(c: &mut Criterion) {
    let pkts = packets(FLOWS);
    let mut g = c.benchmark_group("send_path_1000_flows_4_links");
    g.throughput(Throughput::Elements(1));
    let mut h = Harness::new();
    let mut i = 0usize;
    g.bench_function("latebind: classify+enqueue+bind+frame", |b| {
        b.iter(|| {
            i = (i + 1) % FLOWS;
            black_box(h.one(black_box(&pkts[i])))
        })
    });
    // The same without header compression (every packet a whole DATA frame; with it,
    // each flow's packets go compact once its template is acknowledged).
    let mut h = Harness::configured(LINKS, PolicyKind::MinRtt, false);
    let mut i = 0usize;
    g.bench_function("latebind, header compression off", |b| {
        b.iter(|| {
            i = (i + 1) % FLOWS;
            black_box(h.one(black_box(&pkts[i])))
        })
    });
    let mut f = Fifo {
        queues: vec![VecDeque::new(); LINKS as usize],
        buf: Vec::with_capacity(2048),
        pool: Vec::new(),
    };
    let mut j = 0usize;
    g.bench_function("baseline: per-interface FIFO push+pop+header", |b| {
        b.iter(|| {
            j = (j + 1) % FLOWS;
            black_box(f.one(black_box(&pkts[j]), j % LINKS as usize))
        })
    });
    g.finish();

    let pkts = packets(1);
    let mut g = c.benchmark_group("send_path_1_flow_4_links");
    g.throughput(Throughput::Elements(1));
    let mut h = Harness::new();
    g.bench_function("latebind: classify+enqueue+bind+frame", |b| {
        b.iter(|| black_box(h.one(black_box(&pkts[0]))))
    });
    g.finish();

    const MANY: usize = 10_000;
    let pkts = packets(MANY);
    let mut g = c.benchmark_group("send_path_10000_flows_8_links");
    g.throughput(Throughput::Elements(1));
    for policy in [
        PolicyKind::MinRtt,
        PolicyKind::Aggregate,
        PolicyKind::Overflow,
        PolicyKind::Redundant,
        PolicyKind::Auto,
    ] {
        let mut h = Harness::with(8, policy);
        let mut i = 0usize;
        g.bench_function(policy.name(), |b| {
            b.iter(|| {
                i = (i + 1) % MANY;
                black_box(h.one(black_box(&pkts[i])))
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
