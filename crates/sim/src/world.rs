//! The deterministic discrete-event simulator: two endpoints, the scenario's links, and
//! the scenario's flows, in virtual time.
//!
//! Each step takes the earliest pending time of any component (link directions, flows,
//! endpoints; ties resolved by a fixed component order), then lets every component act at
//! that instant until nothing more happens. Nothing reads a clock or an unseeded random
//! source, and no decision iterates a hash map, so a run is a pure function of the
//! scenario and the seed.
//!
//! Topology per scenario link: an uplink direction (client -> server) whose bottleneck
//! queue sits at the client, so the client's sender sees its departures (the late-binding
//! paper's interface and driver buffer); and a downlink direction whose bottleneck queue
//! sits in the network in front of the client (a base station), which the server cannot
//! see: the server's datagrams leave its host at once.
//!
//! Outages: a link's outage is local by default (`outage_local = true`): the client's
//! interface goes down and the uplink model loses what waits at the client's side of it
//! (see `latebind_linkmodel`). A remote outage (`outage_local = false`) is a path dying in
//! the network: the uplink model has no outage, so the client's side keeps serializing at
//! the link's rate (its sender sees departures as usual), and the world loses every packet
//! whose serialization ends inside the outage (counted in `lost_at_outage_up`); the
//! downlink model drops as for a local outage. Neither end is told.
//!
//! Modes:
//! - `late`: latebind engines at both ends; the client's engine is told at once when a
//!   local outage starts or ends (its interface goes down / up), never of a remote one.
//!   A link with `outage_new_address` comes back with another client address: the
//!   server's daemon learns it from the first datagram it takes there and calls the
//!   engine's `handle_path_change`; the simulator, which has no addresses, makes that
//!   call at the first datagram the server's engine takes on the link after the outage.
//! - `early`: the Linux default. A packet is bound to the current route's interface when
//!   it enters that interface's FIFO of `qdisc_packets + driver_packets`; when the
//!   interface goes down, the FIFO's contents are lost and the route moves to the
//!   lowest-numbered link that is up (and back when the first link returns); a remote
//!   outage leaves the route where it is, as Linux does with a dead next hop. The server
//!   follows the client's route at once (an optimistic baseline). A full FIFO tail-drops
//!   UDP, but pushes back on TCP: Linux answers a full qdisc with NET_XMIT_DROP, TCP keeps
//!   the segment in its write queue (above the binding point) and reduces its window, so
//!   the sender waits instead of losing data. The simulator models that by not taking
//!   packets from a TCP sender while the route's FIFO is full.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use core::time::Duration;

use latebind_linkmodel::{DropReason, LinkDirection, LinkEvent, LinkParams, Rate, Trace};
use latebind_proto::{Config, Endpoint, LinkChange, LinkConfig, LinkId, Role};
use latebind_traffic::{Direction, Flow, FlowKind, FlowSpec, Side};

use crate::cuts::{self, Cut};
use crate::scenario::{Scenario, ScenarioError};

/// Which stack the endpoints run.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Mode {
    /// latebind.
    Late,
    /// Linux early binding.
    Early,
}

impl Mode {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Late => "late",
            Self::Early => "early",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "late" => Ok(Self::Late),
            "early" => Ok(Self::Early),
            other => Err(format!(
                "mode {other:?}: expected late or early (mptcp runs only in the lab)"
            )),
        }
    }
}

/// Per-link measurements the simulator takes itself (it trusts no endpoint's self-report).
#[derive(Clone, Debug, Default)]
pub struct LinkTally {
    /// Packets accepted by the link, both directions.
    pub packets_sent: u64,
    /// Packets lost on the link after acceptance (random loss, outage).
    pub lost_on_link: u64,
    /// Of those, lost because of an outage, client -> server.
    pub lost_at_outage_up: u64,
    /// Of those, lost because of an outage, server -> client.
    pub lost_at_outage_down: u64,
    /// Packets refused at the sender's side because its queue was full.
    pub dropped_queue_full: u64,
    /// Packets refused because the link was out.
    pub dropped_outage: u64,
    /// Most packets ever waiting at the client's side of the uplink (queued or being
    /// serialized): what is below the binding point in mode late, the qdisc and driver
    /// FIFO in mode early. With `uplink_bottleneck = "network"`, the uplink's FIFO in the
    /// network instead (the client's side holds nothing there).
    pub max_queue_below_binding: usize,
    /// Rate control, sampled every [`CC_SAMPLE`] while the link was up: the client's
    /// engine (uplink) and the server's (downlink).
    pub rate_control: [CcTally; 2],
    /// Inner packets bound to the link so far (both engines, mode late), taken at the
    /// end of every whole second of the run.
    pub data_sent_by_s: Vec<u64>,
    /// Bytes the link delivered to the far end, client -> server and server -> client:
    /// the tunnel's datagrams as IP packets (outer IP and UDP headers, its header,
    /// frames and AEAD tag: [`WIRE_EXTRA`] more than the engine writes) and the IP
    /// packets of flows outside the tunnel.
    pub bytes_delivered: [u64; 2],
    /// Milliseconds each packet the link delivered spent in it, client -> server and
    /// server -> client: from the moment the sender's side accepted it to its arrival
    /// at the far end (queueing, serialization or the wait for a trace's delivery
    /// opportunity, and propagation).
    pub network_delay_ms: [Vec<f64>; 2],
    /// The capacity each direction offered and what of it went unused, and why, client
    /// -> server and server -> client.
    pub unused: [UnusedTally; 2],
}

/// What one direction of a link offered up to the run's end and what of it went unused
/// (a trace's delivery opportunities that came while nothing waited in the link, a
/// fixed rate's idle time; outages offer nothing), taken every [`CC_SAMPLE`]. Each
/// interval's unused capacity goes to the sending engine's state at its start (mode
/// late): what kept the link idle then.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnusedTally {
    /// Bytes the direction offered: what it transmitted plus what went unused.
    pub offered: u64,
    /// Bytes that went unused (up to the last sample).
    pub unused: u64,
    /// Of those, by the sending engine's state ([`UnusedCause`]). Mode late; the rest
    /// (the first interval, mode early) is not attributed.
    pub by_cause: [u64; UnusedCause::COUNT],
    /// The sending engine's state at the last sample.
    cause: Option<UnusedCause>,
}

/// One engine at a sample: its link views and the bytes waiting above its binding point.
type EngineSample = (Vec<latebind_proto::LinkView>, usize);

/// What kept a link direction idle, as its sending engine stood (see [`UnusedTally`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnusedCause {
    /// Nothing waited above the binding point: the inner flows sent no more.
    NothingWaiting = 0,
    /// Packets waited and the engine did not have the link up (suspect or down: no new
    /// data).
    NotUp = 1,
    /// Packets waited and the link's window was full.
    Window = 2,
    /// Packets waited, the window had room, and the budget below the binding point was
    /// taken (packets handed to the host's interface and not yet departed).
    Budget = 3,
    /// Packets waited, the window had room, and the link's pacer held the next one.
    Pacer = 4,
    /// Packets waited, and the window, the budget and the pacer had room: the binding
    /// policy kept them for other links.
    Elsewhere = 5,
}

impl UnusedCause {
    /// Number of causes (the length of [`UnusedTally::by_cause`]).
    pub const COUNT: usize = 6;
}

/// Rate control of one link at one end, sampled over the run.
#[derive(Clone, Debug, Default)]
pub struct CcTally {
    /// Samples taken.
    pub samples: u64,
    /// Sum of the estimated rate, bytes per second.
    pub rate_sum: f64,
    /// Sum of the queueing delay, seconds.
    pub queue_sum: f64,
    /// Largest queueing delay sampled, seconds.
    pub queue_max: f64,
    /// Sum of the acknowledgements' way back beyond its minimum, seconds.
    pub return_sum: f64,
    /// Samples in competitive mode.
    pub competitive: u64,
    /// Sum of the datagrams below the binding point.
    pub below_sum: u64,
    /// The link's minimum RTT at the last sample.
    pub min_rtt: Duration,
}

/// How often the rate-control state is sampled for the report.
pub const CC_SAMPLE: Duration = Duration::from_millis(10);

/// Bytes a tunnel datagram takes on a link beyond what the engine writes: the outer IPv4
/// and UDP headers (20 + 8) and the AEAD tag the daemons seal it with (16; the simulator
/// does not encrypt). A link's rate and queue count them, as the lab's emulator counts
/// the IP datagram and a real link its packets, so that the tunnel's goodput is set
/// against the same link as the plain path's, whose packets the links count whole.
pub const WIRE_EXTRA: usize = 20 + 8 + 16;

/// Samples (every 10 ms of a run in mode late, while some link is up) of one engine's
/// per-flow queues above the binding point.
#[derive(Clone, Copy, Debug, Default)]
pub struct BacklogTally {
    /// Samples taken.
    pub samples: u64,
    /// Samples in which the queues held two full-size packets or less: the inner flows,
    /// not the links' windows, set the pace then.
    pub short: u64,
}

/// A finished run, ready for the report.
pub struct Outcome {
    /// The mode.
    pub mode: Mode,
    /// End of the run.
    pub end: Duration,
    /// The flows, with their own accounting.
    pub flows: Vec<Flow>,
    /// Per-link tallies, in scenario order.
    pub links: Vec<LinkTally>,
    /// The scenario's cuts (outage starts), in time order.
    pub cuts: Vec<Cut>,
    /// The engines (mode late): client, server.
    pub engines: Option<(Endpoint, Endpoint)>,
    /// How often each engine's queues above the binding point ran short (client, server).
    pub backlog: [BacklogTally; 2],
    /// Steps the event loop took.
    pub steps: u64,
    /// Steps where no component had anything to do at the time it asked for (the loop
    /// moved on by 1 µs). A handful is normal; many mean a component asks for a time it
    /// cannot act at.
    pub stalls: u64,
}

struct SimLink {
    up: LinkDirection<Vec<u8>>,
    down: LinkDirection<Vec<u8>>,
    tally: LinkTally,
    /// The client's interface is down (a local outage).
    out: bool,
    /// The link comes back from a local outage with another client address
    /// (`outage_new_address`).
    new_address: bool,
    /// It came back so, and the server has not yet taken a datagram from the new address.
    moved: bool,
    /// Remote outages (`outage_local = false`): the intervals, empty for a local link.
    remote_outages: Vec<(Duration, Duration)>,
    /// Remote outages: ids of uplink packets that left the client's side during one; lost
    /// when they would arrive. A set, not a queue: one of them may be lost at random
    /// (its `Lost` event comes at its departure) while those ahead of it still
    /// propagate.
    doomed: HashSet<u64>,
    /// The uplink's bottleneck is the client's interface, whose departures the client
    /// sees (`uplink_bottleneck = "client"`); otherwise it is in the network.
    up_visible: bool,
    /// Ids of packets of flows outside the tunnel (`via_link`), per direction (uplink
    /// first): delivered straight to the flow's other end.
    outside: [HashSet<u64>; 2],
    /// Every packet the link accepted and has not yet delivered or lost, per direction
    /// (uplink first), in the order the link serves them: its id and when it was
    /// accepted.
    accepted: [VecDeque<(u64, Duration)>; 2],
}

impl SimLink {
    fn remote_out(&self, t: Duration) -> bool {
        self.remote_outages.iter().any(|&(a, b)| a <= t && t < b)
    }

    /// When the link accepted packet `id` (which it now delivers or loses). The link
    /// serves its packets in order, so the ones before it are settled already.
    fn settle(&mut self, uplink: bool, id: u64) -> Option<Duration> {
        let q = &mut self.accepted[usize::from(!uplink)];
        while q.front().is_some_and(|&(i, _)| i < id) {
            q.pop_front();
        }
        q.front()
            .is_some_and(|&(i, _)| i == id)
            .then(|| q.pop_front().map(|(_, t)| t))
            .flatten()
    }
}

/// The simulator.
pub struct World {
    mode: Mode,
    now: Duration,
    end: Duration,
    /// After `end`, the network runs on (flows stop sending) until this time, so that what
    /// is in flight at the end arrives instead of being counted lost.
    drain_until: Duration,
    links: Vec<SimLink>,
    flows: Vec<Flow>,
    /// (protocol, destination port) -> flow index, for early mode's delivery.
    demux: HashMap<(u8, u16), usize>,
    /// Per flow: the link it takes outside the tunnel (`via_link`), if any.
    via: Vec<Option<usize>>,
    client: Option<Endpoint>,
    server: Option<Endpoint>,
    route: usize,
    early_capacity: usize,
    cuts: Vec<Cut>,
    buf: Vec<u8>,
    steps: u64,
    stalls: u64,
    backlog: [BacklogTally; 2],
    /// Mode late with `[late] dispatch`: the client binds packets this long before their
    /// pacing slot (the daemon's dispatch stage, without its send-time error).
    horizon: Option<Duration>,
    /// Per link: the client's datagrams bound ahead, waiting for their slot (the
    /// dispatch stage's sender thread), in slot order.
    ahead: Vec<VecDeque<(Duration, Vec<u8>)>>,
    /// `LATEBIND_SIM_UNUSED` is set: each sample's unused capacity goes to stderr.
    print_unused: bool,
}

/// `LATEBIND_SIM_UNUSED=1`: every sample of the unused capacity (10 ms) goes to stderr
/// as `T unused link I DIR CAUSE BYTES`: the bytes link `I`'s direction `DIR` (`up` or
/// `down`) left unused since the sample before, and what its sending engine was doing
/// then (an [`UnusedCause`]), so that where in a run the report's `unused` table comes
/// from can be read per second. A debugging aid: the report does not depend on it.
///
/// `LATEBIND_SIM_TRACE=MS`: every MS milliseconds of simulated time, both engines' link
/// views (state, rate control's window, rate and queueing delay, the largest RTT sample
/// of the last 2 s) go to stderr. A debugging aid: the report does not depend on it.
fn trace_every() -> Option<u128> {
    std::env::var("LATEBIND_SIM_TRACE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&ms| ms > 0)
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

fn seed_for(seed: u64, link: usize, dir: u64) -> u64 {
    // splitmix64 of (seed, link, direction): independent streams per link direction.
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(link as u64 * 2 + dir + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn now_i(d: Duration) -> latebind_proto::Instant {
    latebind_proto::Instant::from_duration(d)
}

impl World {
    /// Builds the world for `scenario` in `mode`, loading any traces.
    pub fn new(scenario: &Scenario, mode: Mode) -> Result<Self, ScenarioError> {
        let spec = &scenario.spec;
        let seed = spec.scenario.seed;
        let end = secs(spec.scenario.duration_s);
        let early_capacity = spec.early.qdisc_packets + spec.early.driver_packets;
        let max_delay_ms = spec
            .links
            .iter()
            .map(|l| l.delay_ms + l.jitter_ms)
            .fold(0.0, f64::max);
        let drain_until =
            end + Duration::from_secs(1) + Duration::from_secs_f64(2.0 * max_delay_ms / 1e3);
        let mut traces: HashMap<std::path::PathBuf, Arc<Trace>> = HashMap::new();
        let mut load = |key: String, p: &std::path::Path| -> Result<Arc<Trace>, ScenarioError> {
            let path = scenario.resolve(p);
            if let Some(t) = traces.get(&path) {
                return Ok(t.clone());
            }
            let err = |message: String| ScenarioError::Trace {
                path: scenario.path.clone(),
                key: key.clone(),
                trace: path.clone(),
                message,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
            let t = Arc::new(Trace::parse(&text).map_err(|e| err(e.to_string()))?);
            traces.insert(path, t.clone());
            Ok(t)
        };
        let mut links = Vec::new();
        for (i, l) in spec.links.iter().enumerate() {
            let mut rate = |up: bool| -> Result<Rate, ScenarioError> {
                let (trace, key) = if up {
                    (l.trace_up.as_ref(), "trace_up")
                } else {
                    (l.trace_down.as_ref(), "trace_down")
                };
                match (trace.or(l.trace.as_ref()), l.fixed_rate_mbps(up)) {
                    (Some(p), _) => {
                        let k = if trace.is_some() { key } else { "trace" };
                        Ok(Rate::Trace(load(format!("links[{i}].{k}"), p)?))
                    }
                    (None, Some(r)) => Ok(Rate::Fixed {
                        bits_per_sec: r * 1e6,
                    }),
                    (None, None) => unreachable!("validated: rate or trace"),
                }
            };
            let rate_up = rate(true)?;
            let rate_down = rate(false)?;
            let outages: Vec<(Duration, Duration)> = l
                .outages
                .iter()
                .map(|[a, b]| (secs(*a), secs(*b)))
                .collect();
            let params = |rate: Rate, queue: usize, drop_in_flight: bool| LinkParams {
                rate,
                delay: Duration::from_secs_f64(l.delay_ms / 1e3),
                jitter: Duration::from_secs_f64(l.jitter_ms / 1e3),
                loss: l.loss,
                queue_packets: queue,
                outages: outages.clone(),
                drop_in_flight_on_outage: drop_in_flight,
            };
            // In early mode the client's FIFO in front of its interface is Linux's
            // qdisc + driver buffer; in late mode it is the link's own queue, of which the
            // engine uses only its budget.
            let up_visible = l.uplink_bottleneck == "client";
            let up_queue = match mode {
                Mode::Early if up_visible => early_capacity,
                _ => l.queue_packets,
            };
            // A remote outage is not the client's interface going down: its side of the
            // uplink keeps serializing, and the world drops what leaves it meanwhile.
            let mut up_params = params(rate_up, up_queue, false);
            let remote_outages = if l.outage_local {
                Vec::new()
            } else {
                std::mem::take(&mut up_params.outages)
            };
            let up = LinkDirection::new(up_params, seed_for(seed, i, 0), Duration::ZERO);
            let down = LinkDirection::new(
                params(rate_down, l.queue_packets, true),
                seed_for(seed, i, 1),
                Duration::ZERO,
            );
            links.push(SimLink {
                up,
                down,
                tally: LinkTally::default(),
                out: false,
                new_address: l.outage_new_address,
                moved: false,
                remote_outages,
                doomed: HashSet::new(),
                up_visible,
                outside: [HashSet::new(), HashSet::new()],
                accepted: [VecDeque::new(), VecDeque::new()],
            });
        }
        let cut_list = cuts::cuts(scenario);
        let cut_times = cuts::instants(&cut_list);
        let mut flows = Vec::new();
        let mut demux = HashMap::new();
        let mut via = Vec::new();
        for (i, f) in spec.flows.iter().enumerate() {
            let kind: FlowKind =
                f.kind
                    .parse()
                    .map_err(
                        |e: latebind_traffic::ParseFlowKindError| ScenarioError::Invalid {
                            path: scenario.path.clone(),
                            key: format!("flows[{i}].kind"),
                            value: f.kind.clone(),
                            expected: e.to_string(),
                        },
                    )?;
            let index = u16::try_from(i).unwrap_or(u16::MAX);
            let default_bytes = if kind == FlowKind::Urgent { 100 } else { 1400 };
            let default_count = match kind {
                FlowKind::UdpBurst => 1000,
                _ => 1,
            };
            let default_dscp = if kind == FlowKind::Urgent { 46 } else { 0 };
            let (start, stop) = (
                secs(f.start_s),
                secs(f.stop_s.unwrap_or(spec.scenario.duration_s)),
            );
            let spec = FlowSpec {
                name: f.name.clone(),
                kind,
                direction: if f.direction == "down" {
                    Direction::Down
                } else {
                    Direction::Up
                },
                start,
                stop,
                rate_bps: f.rate_mbps.unwrap_or(0.0) * 1e6,
                packet_bytes: f.packet_bytes.unwrap_or(default_bytes),
                count: f.count.unwrap_or(default_count),
                dscp: f.dscp.unwrap_or(default_dscp),
                index,
                cuts: cuts::windows(&cut_times, start, stop.min(end)),
            };
            let proto = kind.ip_protocol();
            demux.insert((proto, 10_000 + index), i);
            demux.insert((proto, 20_000 + index), i);
            flows.push(Flow::new(spec));
            via.push(f.via_link);
        }
        let (client, server) = match mode {
            Mode::Early => (None, None),
            Mode::Late => {
                let mut cc = Config::new(Role::Client);
                cc.budget_packets(spec.late.budget_packets);
                let mut sc = Config::new(Role::Server);
                sc.budget_packets(spec.late.budget_packets);
                for c in [&mut cc, &mut sc] {
                    c.reinjection = spec.late.reinjection_timer();
                    c.rej_min = spec.late.rej_min();
                    c.default_policy = spec.late.default_policy();
                    c.rules = spec.late.engine_rules(&spec.flows);
                    c.overflow = spec.late.overflow_params();
                    c.redundant_links = spec.late.redundant_links;
                    c.redundant_align = spec.late.redundant_align;
                    c.rate_control = spec.late.rate_control;
                    c.ack_filter = spec.late.ack_filter;
                    c.header_compression = spec.late.header_compression;
                    c.ack_ride_wait = spec.late.ack_ride_wait();
                    c.rate_control_max_queue = spec.late.rate_control_max_queue();
                    c.codel_target = spec.late.codel_target();
                    c.tcp_window_clamp = spec.late.tcp_window_clamp;
                    c.codel_covers_pause = spec.late.codel_covers_pause;
                    c.aggregate_arrival_order = spec.late.aggregate_arrival_order;
                }
                let mut c = Endpoint::new(cc, now_i(Duration::ZERO)).map_err(|e| {
                    ScenarioError::Invalid {
                        path: scenario.path.clone(),
                        key: format!("late.{}", e.key),
                        value: e.value,
                        expected: e.expected.to_owned(),
                    }
                })?;
                let mut s =
                    Endpoint::new(sc, now_i(Duration::ZERO)).expect("same config validated");
                for (i, link) in links.iter().enumerate() {
                    let id = LinkId(i as u16);
                    let pacing_rate = scenario.spec.late.pacing_rate_mbps.map(|r| r * 1e6 / 8.0);
                    // `[late] seed_capacity`: each end knows its direction's mean rate,
                    // as `latebind probe` would have measured it.
                    let capacity = |d: &LinkDirection<Vec<u8>>| {
                        spec.late
                            .seed_capacity
                            .then(|| d.params().rate.mean_bits_per_sec() / 8.0)
                    };
                    c.add_link(
                        now_i(Duration::ZERO),
                        id,
                        LinkConfig {
                            pacing_rate,
                            capacity: capacity(&link.up),
                            ..LinkConfig::default()
                        },
                    );
                    s.add_link(
                        now_i(Duration::ZERO),
                        id,
                        LinkConfig {
                            capacity: capacity(&link.down),
                            ..LinkConfig::default()
                        },
                    );
                }
                (Some(c), Some(s))
            }
        };
        let horizon = (mode == Mode::Late && spec.late.dispatch)
            .then(|| secs(spec.late.dispatch_horizon_us / 1e6));
        let ahead = vec![VecDeque::new(); links.len()];
        Ok(Self {
            mode,
            now: Duration::ZERO,
            end,
            drain_until,
            horizon,
            ahead,
            print_unused: std::env::var_os("LATEBIND_SIM_UNUSED").is_some(),
            links,
            flows,
            demux,
            via,
            client,
            server,
            route: 0,
            early_capacity,
            cuts: cut_list,
            buf: Vec::with_capacity(2048),
            steps: 0,
            stalls: 0,
            backlog: [BacklogTally::default(); 2],
        })
    }

    /// Runs to the scenario's end.
    pub fn run(mut self) -> Outcome {
        loop {
            let next = self.next_time();
            let Some(next) = next else { break };
            if next > self.drain_until {
                break;
            }
            // Components may ask for a time already reached while they wait for an input;
            // never go back, and move on by a microsecond when nothing can happen now.
            let t = if next <= self.now && self.steps > 0 {
                self.stalls += 1;
                self.now + Duration::from_micros(1)
            } else {
                next.max(self.now)
            };
            if t.as_nanos() / CC_SAMPLE.as_nanos() != self.now.as_nanos() / CC_SAMPLE.as_nanos() {
                self.sample_links(t);
            }
            if t.as_secs() != self.now.as_secs() && self.now < self.end {
                self.sample_data_sent(t.min(self.end));
            }
            if let Some(every) = trace_every()
                && t.as_millis() / every != self.now.as_millis() / every
            {
                for (n, e) in [("c", &self.client), ("s", &self.server)] {
                    if let Some(e) = e {
                        let q = e.stats().queues;
                        eprintln!(
                            "{:.3} {n} queued {} B aqm dropped {} marked {}",
                            t.as_secs_f64(),
                            e.queued_bytes(),
                            q.aqm_dropped,
                            q.aqm_marked
                        );
                        for v in e.link_views(now_i(t)) {
                            eprintln!(
                                "{:.3} {n} link {} {:?} cwnd {} rate {:.2} Mb/s queue {:?} \
                                 competitive {} in flight {} srtt {:?} min {:?} tx {:.2} Mb/s \
                                 below {} loss {:.3} back {:?} capacity {:.2} Mb/s \
                                 searching {} recent max RTT {:?}",
                                t.as_secs_f64(),
                                v.id.0,
                                v.state,
                                v.cwnd,
                                v.cc_rate * 8e-6,
                                v.queue_delay,
                                v.competitive,
                                v.bytes_in_flight,
                                v.srtt,
                                v.min_rtt,
                                v.tx_rate * 8e-6,
                                v.below_binding,
                                v.loss_rate,
                                v.return_delay,
                                v.capacity * 8e-6,
                                v.searching,
                                v.recent_max_rtt
                            );
                        }
                    }
                }
            }
            self.now = t;
            self.step();
            self.steps += 1;
        }
        self.now = self.end;
        Outcome {
            mode: self.mode,
            end: self.end,
            flows: self.flows,
            links: self.links.into_iter().map(|l| l.tally).collect(),
            cuts: self.cuts,
            engines: self.client.zip(self.server),
            backlog: self.backlog,
            steps: self.steps,
            stalls: self.stalls,
        }
    }

    fn next_time(&self) -> Option<Duration> {
        let mut next: Option<Duration> = None;
        let mut consider = |t: Option<Duration>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n: Duration| n.min(t)));
            }
        };
        for l in &self.links {
            consider(l.up.poll_timeout());
            consider(l.down.poll_timeout());
        }
        for (i, f) in self.flows.iter().enumerate() {
            // After the end the flows only receive.
            if self.now >= self.end {
                break;
            }
            // A sender held back by a full FIFO is woken by the FIFO's departures.
            let t = f.poll_timeout();
            if t.is_some_and(|t| t <= self.now) && self.blocked(i, Side::Client) {
                continue;
            }
            consider(t);
        }
        for e in [&self.client, &self.server].into_iter().flatten() {
            consider(e.poll_timeout().map(|t| t.as_duration()));
        }
        for q in &self.ahead {
            consider(q.front().map(|(at, _)| *at));
        }
        next
    }

    /// Takes every link's count of inner packets bound to it at the end of each whole
    /// second up to `t` not taken yet (a step may cross several: nothing was bound in
    /// between, so each gets the same count), so that entry `k` is second `k`'s.
    fn sample_data_sent(&mut self, t: Duration) {
        let (Some(c), Some(s)) = (&self.client, &self.server) else {
            return;
        };
        let seconds = t.as_secs() as usize;
        for (i, l) in self.links.iter_mut().enumerate() {
            let id = LinkId(i as u16);
            let sent = [c, s]
                .iter()
                .filter_map(|e| e.link_stats(id))
                .map(|st| st.data_sent)
                .sum();
            let by_s = &mut l.tally.data_sent_by_s;
            by_s.resize(seconds.max(by_s.len()), sent);
        }
    }

    /// Adds one sample of every link's rate-control state to the tallies.
    fn sample_rate_control(&mut self, engines: &[Option<EngineSample>; 2]) {
        for (side, e) in engines.iter().enumerate() {
            let Some((views, queued)) = e else { continue };
            if views
                .iter()
                .any(|v| v.state == latebind_proto::LinkState::Up)
            {
                let b = &mut self.backlog[side];
                b.samples += 1;
                b.short += u64::from(*queued <= 2 * 1500);
            }
            for v in views {
                let Some(l) = self.links.get_mut(usize::from(v.id.0)) else {
                    continue;
                };
                if v.cwnd == 0 || v.state != latebind_proto::LinkState::Up {
                    continue;
                }
                let c = &mut l.tally.rate_control[side];
                let q = v.queue_delay.as_secs_f64();
                c.samples += 1;
                c.rate_sum += v.cc_rate;
                c.queue_sum += q;
                c.queue_max = c.queue_max.max(q);
                c.return_sum += v.return_delay.as_secs_f64();
                c.competitive += u64::from(v.competitive);
                c.below_sum += v.below_binding as u64;
                c.min_rtt = v.min_rtt;
            }
        }
    }

    /// Every [`CC_SAMPLE`]: both engines' link views and queued bytes, taken once for
    /// rate control's tallies and, up to the run's end, the unused capacity's.
    fn sample_links(&mut self, t: Duration) {
        let engines = [&self.client, &self.server].map(|e| {
            e.as_ref()
                .map(|e| (e.link_views(now_i(t)), e.queued_bytes()))
        });
        self.sample_rate_control(&engines);
        if t <= self.end {
            self.sample_unused(t, &engines);
        }
    }

    /// Adds each link direction's capacity unused since the last sample to the cause
    /// its sending engine showed then, and notes the engine's state of now.
    fn sample_unused(&mut self, t: Duration, engines: &[Option<EngineSample>; 2]) {
        for (i, l) in self.links.iter_mut().enumerate() {
            for (side, dir) in [&l.up, &l.down].into_iter().enumerate() {
                let u = &mut l.tally.unused[side];
                let unused = dir.unused_bytes(t);
                if let Some(cause) = u.cause {
                    u.by_cause[cause as usize] += unused - u.unused;
                    if self.print_unused {
                        let dir = ["up", "down"][side];
                        let bytes = unused - u.unused;
                        eprintln!(
                            "{:.3} unused link {i} {dir} {cause:?} {bytes}",
                            t.as_secs_f64()
                        );
                    }
                }
                u.unused = unused;
                u.offered = unused + dir.stats().bytes_transmitted;
                u.cause = engines[side].as_ref().map(|(views, queued)| {
                    let view = views.iter().find(|v| usize::from(v.id.0) == i);
                    match view {
                        _ if *queued == 0 => UnusedCause::NothingWaiting,
                        Some(v) if v.state == latebind_proto::LinkState::Up => {
                            if v.cwnd > 0 && v.bytes_in_flight + 1500 >= v.cwnd {
                                UnusedCause::Window
                            } else if v.below_binding >= v.budget {
                                UnusedCause::Budget
                            } else if v.pace_next > now_i(t) {
                                UnusedCause::Pacer
                            } else {
                                UnusedCause::Elsewhere
                            }
                        }
                        _ => UnusedCause::NotUp,
                    }
                });
            }
        }
    }

    /// Lets every component act at `self.now` until nothing more happens.
    fn step(&mut self) {
        let now = self.now;
        for round in 0.. {
            let mut progressed = false;
            for i in 0..self.links.len() {
                progressed |= self.drive_link(i, now);
            }
            for i in 0..self.flows.len() {
                for side in [Side::Client, Side::Server] {
                    while !self.blocked(i, side) && now <= self.end {
                        let Some(pkt) = self.flows[i].poll_transmit(now, side) else {
                            break;
                        };
                        match self.via[i] {
                            Some(l) => self.send_outside(l, side, pkt),
                            None => self.send_inner(side, pkt),
                        }
                        progressed = true;
                    }
                }
            }
            if self.mode == Mode::Late {
                progressed |= self.release_ahead(now);
                progressed |= self.drive_engine(Side::Client, now);
                progressed |= self.drive_engine(Side::Server, now);
            }
            if !progressed || round > 10_000 {
                break;
            }
        }
    }

    fn drive_link(&mut self, i: usize, now: Duration) -> bool {
        let mut progressed = false;
        for uplink in [true, false] {
            let l = &mut self.links[i];
            let dir = if uplink { &mut l.up } else { &mut l.down };
            if dir.poll_timeout().is_some_and(|t| t <= now) {
                dir.handle_timeout(now);
            }
            while let Some(ev) = dir_of(&mut self.links[i], uplink).poll_event() {
                progressed = true;
                self.on_link_event(i, uplink, ev, now);
            }
        }
        let l = &mut self.links[i];
        l.tally.max_queue_below_binding = l.tally.max_queue_below_binding.max(l.up.backlog());
        progressed
    }

    fn on_link_event(&mut self, i: usize, uplink: bool, ev: LinkEvent<Vec<u8>>, now: Duration) {
        let id = LinkId(i as u16);
        match ev {
            LinkEvent::TxDone { id: packet } => {
                if uplink && self.links[i].remote_out(now) {
                    self.links[i].doomed.insert(packet);
                }
                if uplink
                    && self.links[i].up_visible
                    && !self.links[i].outside[0].contains(&packet)
                    && let Some(c) = self.client.as_mut()
                {
                    c.handle_tx_done(now_i(now), id);
                }
            }
            LinkEvent::Delivered {
                id: packet,
                payload,
                at,
            } => {
                let accepted = self.links[i].settle(uplink, packet);
                let outside = self.links[i].outside[usize::from(!uplink)].remove(&packet);
                // A tunnel datagram on the wire; a packet outside the tunnel as it is.
                let extra = if outside { 0 } else { WIRE_EXTRA };
                self.links[i].tally.bytes_delivered[usize::from(!uplink)] +=
                    (payload.len() + extra) as u64;
                if uplink && self.links[i].doomed.remove(&packet) {
                    let l = &mut self.links[i];
                    l.tally.lost_on_link += 1;
                    l.tally.lost_at_outage_up += 1;
                    return;
                }
                if let Some(t) = accepted {
                    self.links[i].tally.network_delay_ms[usize::from(!uplink)]
                        .push((at.saturating_sub(t)).as_secs_f64() * 1e3);
                }
                let to = if uplink { Side::Server } else { Side::Client };
                if outside {
                    self.deliver_inner(to, &payload);
                } else {
                    self.deliver(i, to, &payload);
                }
            }
            LinkEvent::Lost {
                id: packet, reason, ..
            } => {
                self.links[i].settle(uplink, packet);
                // Lost anyway (random loss): counted once, below.
                if uplink {
                    self.links[i].doomed.remove(&packet);
                }
                self.links[i].outside[usize::from(!uplink)].remove(&packet);
                let t = &mut self.links[i].tally;
                t.lost_on_link += 1;
                if reason == DropReason::Outage {
                    if uplink {
                        t.lost_at_outage_up += 1;
                    } else {
                        t.lost_at_outage_down += 1;
                    }
                }
            }
            // Only a local outage's uplink model has outages (see the module doc), so
            // these are the client's interface going down and up.
            LinkEvent::OutageStart { .. } => {
                if !uplink {
                    return;
                }
                self.links[i].out = true;
                // What waits for its slot at the client goes with the interface.
                let held = self.ahead.get_mut(i).map_or(0, |q| std::mem::take(q).len());
                self.links[i].tally.lost_at_outage_up += held as u64;
                if let Some(c) = self.client.as_mut() {
                    c.handle_link_change(now_i(now), id, LinkChange::Down);
                }
                self.reroute();
            }
            LinkEvent::OutageEnd { .. } => {
                if !uplink {
                    return;
                }
                self.links[i].out = false;
                self.links[i].moved = self.links[i].new_address;
                if let Some(c) = self.client.as_mut() {
                    c.handle_link_change(now_i(now), id, LinkChange::Up);
                }
                self.reroute();
            }
        }
    }

    /// Whether flow `i`'s end at `side` must wait: early mode, a TCP sender at the client,
    /// and the route's FIFO full (see the module doc).
    fn blocked(&self, i: usize, side: Side) -> bool {
        let (link, own_host) = match self.via[i] {
            Some(l) => (l, true),
            None => (self.route, self.mode == Mode::Early),
        };
        own_host
            && side == Side::Client
            && self.flows[i].spec().kind.is_reliable()
            && self.links[link].up_visible
            && self.links[link].up.queue_len() >= self.early_capacity
    }

    /// Early mode's routing: the lowest-numbered link that is up.
    fn reroute(&mut self) {
        if let Some(r) = self.links.iter().position(|l| !l.out) {
            self.route = r;
        }
    }

    fn deliver(&mut self, link: usize, to: Side, payload: &[u8]) {
        match self.mode {
            Mode::Late => {
                let e = match to {
                    Side::Client => self.client.as_mut(),
                    Side::Server => self.server.as_mut(),
                };
                if let Some(e) = e {
                    let taken = e.handle_datagram(now_i(self.now), payload);
                    // As the server's daemon: the first datagram taken from a link's new
                    // address moves the link there and starts its measurements over.
                    if taken && to == Side::Server && self.links[link].moved {
                        self.links[link].moved = false;
                        e.handle_path_change(now_i(self.now), LinkId(link as u16));
                    }
                }
            }
            Mode::Early => self.deliver_inner(to, payload),
        }
    }

    fn deliver_inner(&mut self, to: Side, packet: &[u8]) {
        let Some((key, src)) = ports(packet) else {
            return;
        };
        // A quic-bulk flow's datagrams to the server go to port 443, which every such
        // flow shares: those are found by their source port, the client's.
        let flow = self.demux.get(&key).or_else(|| self.demux.get(&src));
        if let Some(&f) = flow {
            self.flows[f].handle_packet(self.now, to, packet);
        }
    }

    /// An inner packet emitted by a flow's end at `side`.
    fn send_inner(&mut self, side: Side, pkt: Vec<u8>) {
        let now = self.now;
        match self.mode {
            Mode::Late => {
                let e = match side {
                    Side::Client => self.client.as_mut(),
                    Side::Server => self.server.as_mut(),
                };
                if let Some(e) = e {
                    // Refusals (not IP, too large) are counted by the engine.
                    let _ = e.handle_tun_packet(now_i(now), &pkt);
                }
            }
            Mode::Early => {
                let r = self.route;
                let len = pkt.len();
                self.enqueue(r, side == Side::Client, len, pkt);
            }
        }
    }

    /// A packet of a flow outside the tunnel: straight onto link `l`.
    fn send_outside(&mut self, l: usize, side: Side, pkt: Vec<u8>) {
        let uplink = side == Side::Client;
        let len = pkt.len();
        let link = &mut self.links[l];
        let dir = if uplink { &mut link.up } else { &mut link.down };
        match dir.enqueue(self.now, len, pkt) {
            Ok(id) => {
                link.outside[usize::from(!uplink)].insert(id);
                link.accepted[usize::from(!uplink)].push_back((id, self.now));
            }
            Err((reason, _)) => match reason {
                DropReason::Outage => link.tally.dropped_outage += 1,
                _ => link.tally.dropped_queue_full += 1,
            },
        }
    }

    fn enqueue(&mut self, i: usize, uplink: bool, len: usize, payload: Vec<u8>) -> bool {
        let now = self.now;
        let l = &mut self.links[i];
        let dir = if uplink { &mut l.up } else { &mut l.down };
        match dir.enqueue(now, len, payload) {
            Ok(id) => {
                l.accepted[usize::from(!uplink)].push_back((id, now));
                l.tally.packets_sent += 1;
                true
            }
            Err((reason, _)) => {
                match reason {
                    DropReason::Outage => l.tally.dropped_outage += 1,
                    _ => l.tally.dropped_queue_full += 1,
                }
                false
            }
        }
    }

    fn engine_slot(&mut self, side: Side) -> &mut Option<Endpoint> {
        match side {
            Side::Client => &mut self.client,
            Side::Server => &mut self.server,
        }
    }

    fn drive_engine(&mut self, side: Side, now: Duration) -> bool {
        let t = now_i(now);
        // Take the engine out while it talks to the links and flows.
        let Some(mut e) = self.engine_slot(side).take() else {
            return false;
        };
        let mut buf = std::mem::take(&mut self.buf);
        let mut progressed = false;
        loop {
            if e.poll_timeout().is_some_and(|d| d <= t) {
                e.handle_timeout(t);
            }
            let mut did = false;
            loop {
                let tx = match (side, self.horizon) {
                    (Side::Client, Some(h)) => e.poll_transmit_ahead(t, h, &mut buf),
                    _ => e.poll_transmit(t, &mut buf),
                };
                let Some(tx) = tx else { break };
                did = true;
                if tx.send_at > t
                    && let Some(q) = self.ahead.get_mut(usize::from(tx.link.0))
                {
                    // Bound ahead: it waits for its slot (release_ahead).
                    q.push_back((tx.send_at.as_duration(), buf[..tx.len].to_vec()));
                    continue;
                }
                let uplink = side == Side::Client;
                let ok = self.enqueue_dgram(usize::from(tx.link.0), uplink, &buf[..tx.len]);
                // The server's interface is not the bottleneck: its datagrams leave at
                // once, as the client's do when its uplink's bottleneck is in the
                // network. A refused datagram has left the client's interface too.
                let li = usize::from(tx.link.0);
                let visible = uplink && self.links.get(li).is_some_and(|l| l.up_visible);
                if !visible || !ok {
                    e.handle_tx_done(t, tx.link);
                }
            }
            while let Some(p) = e.poll_deliver() {
                did = true;
                self.deliver_inner(side, &p);
                e.recycle(p);
            }
            while e.poll_event().is_some() {}
            progressed |= did;
            if !did {
                break;
            }
        }
        self.buf = buf;
        *self.engine_slot(side) = Some(e);
        progressed
    }

    /// Hands the client's datagrams whose slot has come to their links (the dispatch
    /// stage's sender thread, exactly on time).
    fn release_ahead(&mut self, now: Duration) -> bool {
        let mut progressed = false;
        for li in 0..self.ahead.len() {
            while self.ahead[li].front().is_some_and(|(at, _)| *at <= now) {
                let (_, d) = self.ahead[li].pop_front().expect("checked");
                progressed = true;
                let ok = self.enqueue_dgram(li, true, &d);
                if (!self.links[li].up_visible || !ok)
                    && let Some(c) = self.client.as_mut()
                {
                    c.handle_tx_done(now_i(now), LinkId(li as u16));
                }
            }
        }
        progressed
    }

    fn enqueue_dgram(&mut self, li: usize, uplink: bool, dgram: &[u8]) -> bool {
        if li >= self.links.len() {
            return false;
        }
        self.enqueue(li, uplink, dgram.len() + WIRE_EXTRA, dgram.to_vec())
    }
}

fn dir_of(l: &mut SimLink, uplink: bool) -> &mut LinkDirection<Vec<u8>> {
    if uplink { &mut l.up } else { &mut l.down }
}

/// An inner IPv4 packet's protocol with its destination port, and with its source port.
fn ports(p: &[u8]) -> Option<((u8, u16), (u8, u16))> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let port = p.get(ihl..ihl + 4)?;
    let (src, dst) = (
        u16::from_be_bytes([port[0], port[1]]),
        u16::from_be_bytes([port[2], port[3]]),
    );
    Some(((p[9], dst), (p[9], src)))
}
