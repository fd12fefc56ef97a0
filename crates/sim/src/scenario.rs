//! The scenario contract v1 (DESIGN.md section 4): TOML in, validated typed scenario out.
//!
//! Unknown keys are errors (a typo must not silently fall back to a default), and every
//! range error names the key, the value and what is expected.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

/// A scenario file that could not be used.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// Not valid TOML or not of the scenario's shape.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (it names the key and the line).
        message: String,
    },
    /// A value out of range.
    #[error("{path}: {key} = {value}: expected {expected}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key, with its table path (`links[1].loss`).
        key: String,
        /// The value given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
    /// A trace file could not be loaded.
    #[error("{path}: {key}: trace {trace}: {message}")]
    Trace {
        /// The scenario file.
        path: PathBuf,
        /// The key naming the trace.
        key: String,
        /// The trace file.
        trace: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A `--set` override that does not apply.
    #[error("--set {0}: expected KEY=VALUE with a dotted key such as late.budget_packets=4")]
    Override(String),
}

/// `[scenario]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    /// Name used in reports.
    pub name: String,
    /// Simulated seconds.
    pub duration_s: f64,
    /// Seed of every random draw.
    #[serde(default = "one")]
    pub seed: u64,
}

fn one() -> u64 {
    1
}

/// `[[links]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Name used in reports.
    pub name: String,
    /// Fixed rate, both directions.
    pub rate_mbps: Option<f64>,
    /// Fixed rate of the uplink (client to server), over `rate_mbps`: an asymmetric
    /// link such as DSL.
    pub rate_up_mbps: Option<f64>,
    /// Fixed rate of the downlink, over `rate_mbps`.
    pub rate_down_mbps: Option<f64>,
    /// Mahimahi trace for both directions (relative to the scenario file).
    pub trace: Option<PathBuf>,
    /// Uplink trace.
    pub trace_up: Option<PathBuf>,
    /// Downlink trace.
    pub trace_down: Option<PathBuf>,
    /// One-way propagation delay.
    #[serde(default)]
    pub delay_ms: f64,
    /// Jitter of the one-way delay (uniform within +/- jitter, links never reorder).
    #[serde(default)]
    pub jitter_ms: f64,
    /// Random loss probability per packet.
    #[serde(default)]
    pub loss: f64,
    /// Buffer at the link's bottleneck, packets.
    #[serde(default = "default_queue")]
    pub queue_packets: usize,
    /// `[start_s, end_s)` intervals during which the link carries nothing, in either
    /// direction.
    #[serde(default)]
    pub outages: Vec<[f64; 2]>,
    /// Where this link's outages happen. `true` (the default): the client's interface
    /// goes down, and the client is told at once (the simulator's client engine gets
    /// `LinkChange::Down` / `Up`; mode early moves its route; the lab sets `c{i}` down).
    /// `false`: the path dies somewhere in the network and neither end is told: the
    /// client's interface stays up and keeps sending at the link's rate, and every
    /// packet that leaves it during the outage is lost (as is everything on the
    /// downlink, as for a local outage); mode early keeps its route on the dead link,
    /// as Linux does with a dead next hop.
    #[serde(default = "yes")]
    pub outage_local: bool,
    /// The link comes back from each of its (local) outages with another client address:
    /// the client joined another network (another access point, a modem's new session).
    /// The server learns the link's new address from its first datagram there and starts
    /// the link's RTT and rate control over (`docs/protocol.md` 4.1); the simulator has no
    /// addresses and makes that call at the first datagram the server takes on the link
    /// after the outage; the lab gives `c{i}` the next address of its /24 (`.11`, `.12`,
    /// ...). Default `false`: the same address, as after a cable pulled and put back.
    #[serde(default)]
    pub outage_new_address: bool,
    /// Where the uplink's bottleneck queue (`queue_packets`) is: `client` (the default):
    /// at the client's interface, whose departures the client sees (the late-binding
    /// paper's interface and driver buffer, shaped in the lab by `htb` on the client's
    /// interface); `network`: in the network (a modem, a base station), which the client
    /// cannot see: its datagrams leave its interface at once, as the server's always do.
    #[serde(default = "client_side")]
    pub uplink_bottleneck: String,
}

impl LinkSpec {
    /// The fixed rate of the uplink (`up`) or the downlink, if one is given: the
    /// direction's own key over `rate_mbps`. A trace of the direction wins over both.
    pub fn fixed_rate_mbps(&self, up: bool) -> Option<f64> {
        if up {
            self.rate_up_mbps
        } else {
            self.rate_down_mbps
        }
        .or(self.rate_mbps)
    }
}

fn client_side() -> String {
    "client".into()
}

fn default_queue() -> usize {
    1000
}

fn yes() -> bool {
    true
}

/// `[[flows]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowToml {
    /// Name used in reports.
    pub name: String,
    /// tcp-bulk | udp-cbr | udp-burst | urgent | quic-bulk (the simulator only: its TCP in
    /// UDP datagrams to port 443, which the tunnel classifies as QUIC).
    pub kind: String,
    /// up | down.
    #[serde(default = "default_direction")]
    pub direction: String,
    /// Start time.
    #[serde(default)]
    pub start_s: f64,
    /// Stop time (default: the scenario's end).
    pub stop_s: Option<f64>,
    /// udp-cbr: the rate of whole IP packets (required). tcp-bulk: the application's
    /// write rate, payload bits (optional; without it the application keeps the socket's
    /// buffer full and TCP alone sets the pace).
    pub rate_mbps: Option<f64>,
    /// IP packet size (UDP kinds) or IP MTU (tcp-bulk).
    pub packet_bytes: Option<usize>,
    /// udp-burst / urgent packet count.
    pub count: Option<u64>,
    /// DSCP (urgent flows default to EF, 46).
    pub dscp: Option<u8>,
    /// Outside the tunnel: the flow goes straight over this link (its index), sharing
    /// the link's bottleneck with the tunnel, as another host's traffic would. Default:
    /// through the tunnel (mode late) or the route (mode early).
    pub via_link: Option<usize>,
}

fn default_direction() -> String {
    "up".into()
}

/// `[late]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LateKnobs {
    /// Packets per link below the binding point.
    #[serde(default = "two")]
    pub budget_packets: usize,
    /// Default binding policy.
    #[serde(default = "auto")]
    pub policy: String,
    /// Reinjection timer: srtt+rttvar-delta (default), srtt+rttvar, minrtt+rttvar, off.
    #[serde(default = "default_reinjection")]
    pub reinjection: String,
    /// Floor of the reinjection timer after the last acknowledgement, ms. Default 10.
    #[serde(default = "default_rej_min_ms")]
    pub rej_min_ms: f64,
    /// Rules mapping flows to policies (`[[late.rules]]`), first match wins.
    #[serde(default)]
    pub rules: Vec<RuleToml>,
    /// Parameters of the overflow policy (`[late.overflow]`).
    #[serde(default)]
    pub overflow: OverflowToml,
    /// Copies of a redundant flow's packet, each on another link (0: one on every link;
    /// more than there are links: the rest on the best links again). Default 2.
    #[serde(default = "two")]
    pub redundant_links: usize,
    /// Playout alignment of redundant flows at the receiver (each first copy waits for
    /// its slower copies). Default false.
    #[serde(default)]
    pub redundant_align: bool,
    /// Per-link rate and delay control (keeps each link's bottleneck queue short).
    /// Default true.
    #[serde(default = "yes")]
    pub rate_control: bool,
    /// Longest queueing delay rate control keeps at a link's bottleneck, ms. Default 20.
    #[serde(default = "default_rc_max_queue_ms")]
    pub rate_control_max_queue_ms: f64,
    /// CoDel target sojourn of a per-flow queue, ms. Default 5.
    #[serde(default = "default_codel_target_ms")]
    pub codel_target_ms: f64,
    /// The receive-window clamp of local TCP senders (the engine's `tcp_window_clamp`).
    /// Default false.
    #[serde(default)]
    pub tcp_window_clamp: bool,
    /// CoDel's target of a min-rtt or redundant flow covers half its link's recent pause
    /// (the engine's `codel_covers_pause`). Default false.
    #[serde(default)]
    pub codel_covers_pause: bool,
    /// An aggregate flow's slower link is sent the packet that arrives in order there
    /// (the engine's `aggregate_arrival_order`). Default true.
    #[serde(default = "yes")]
    pub aggregate_arrival_order: bool,
    /// Rate control on each link starts from the link's capacity in that direction (its
    /// rate, or its trace's mean) instead of searching for it, as a daemon does with a
    /// link's `capacity_mbps` (measured beforehand with `latebind probe`). Default false.
    #[serde(default)]
    pub seed_capacity: bool,
    /// The client's dispatch stage: packets bound `dispatch_horizon_us` before their
    /// pacing slot, sent at it (by the daemon's sender thread in the lab; exactly on
    /// time in the simulator, where they wait at the client and are lost with its
    /// interface at a cut). Default false.
    #[serde(default)]
    pub dispatch: bool,
    /// The dispatch stage's binding horizon φ, µs. Default 1000.
    #[serde(default = "default_dispatch_horizon_us")]
    pub dispatch_horizon_us: f64,
    /// Lab only: `SCHED_FIFO` priority of the dispatch stage's sender thread (default:
    /// the normal scheduler).
    #[serde(default)]
    pub dispatch_rt_priority: Option<i32>,
    /// A cap on the client's pacing rate on every link, Mbit/s of the engine's
    /// datagrams; none by default.
    #[serde(default)]
    pub pacing_rate_mbps: Option<f64>,
    /// Lab only: the daemons' TUN devices with the kernel's segmentation offloads
    /// (`tun_offload`). Default true.
    #[serde(default = "yes")]
    pub tun_offload: bool,
    /// A pure TCP acknowledgement replaces an older one of its connection waiting at its
    /// flow's tail (the daemons' `ack_filter`). Default true.
    #[serde(default = "yes")]
    pub ack_filter: bool,
    /// Inner packets sent as a difference from an earlier packet's headers (the daemons'
    /// `header_compression`). Default true.
    #[serde(default = "yes")]
    pub header_compression: bool,
    /// How long an acknowledgement that is due waits for a packet of the reverse
    /// direction to ride on, ms (the daemons' `ack_ride_wait_ms`). Default 0.
    #[serde(default = "default_ack_ride_wait_ms")]
    pub ack_ride_wait_ms: f64,
}

fn default_ack_ride_wait_ms() -> f64 {
    latebind_proto::Config::default()
        .ack_ride_wait
        .as_secs_f64()
        * 1e3
}

fn default_dispatch_horizon_us() -> f64 {
    1000.0
}

/// `[[late.rules]]`: flows to a policy. Every key set must match.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleToml {
    /// A flow of the scenario by name (its ports, in the simulator and the lab).
    pub flow: Option<String>,
    /// DSCP of the flow's first packet.
    pub dscp: Option<u8>,
    /// IP protocol number (6 TCP, 17 UDP).
    pub protocol: Option<u8>,
    /// Source or destination port range, inclusive: `[lo, hi]`.
    pub ports: Option<[u16; 2]>,
    /// Source or destination address prefix, `a.b.c.d/len` or an IPv6 prefix.
    pub prefix: Option<String>,
    /// min-rtt, aggregate, overflow, redundant or auto.
    pub policy: String,
}

/// `[late.overflow]`: the bonding slides' parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverflowToml {
    /// AWI's gain. Default 0.5.
    #[serde(default = "overflow_k")]
    pub k: f64,
    /// Time without loss before DWD, ms. Default 250.
    #[serde(default = "overflow_t_dwd")]
    pub t_dwd_ms: f64,
    /// The primary link's weight. Default 50.
    #[serde(default = "fifty_u32")]
    pub w_fixed: u32,
    /// A secondary link's largest weight. Default 50.
    #[serde(default = "fifty_u32")]
    pub w_max: u32,
}

fn overflow_k() -> f64 {
    latebind_proto::policy::OverflowParams::default().k
}

fn overflow_t_dwd() -> f64 {
    latebind_proto::policy::OverflowParams::default()
        .t_dwd
        .as_secs_f64()
        * 1e3
}

fn fifty_u32() -> u32 {
    50
}

impl Default for OverflowToml {
    fn default() -> Self {
        Self {
            k: overflow_k(),
            t_dwd_ms: overflow_t_dwd(),
            w_fixed: 50,
            w_max: 50,
        }
    }
}

pub use latebind_proto::policy::parse_prefix;

fn default_reinjection() -> String {
    latebind_proto::Config::default().reinjection.name().into()
}

fn default_rc_max_queue_ms() -> f64 {
    latebind_proto::Config::default()
        .rate_control_max_queue
        .as_secs_f64()
        * 1e3
}

fn default_codel_target_ms() -> f64 {
    latebind_proto::Config::default().codel_target.as_secs_f64() * 1e3
}

fn default_rej_min_ms() -> f64 {
    latebind_proto::Config::default().rej_min.as_secs_f64() * 1e3
}

impl LateKnobs {
    /// The reinjection timer (validated when the scenario is loaded).
    pub fn reinjection_timer(&self) -> latebind_proto::ReinjectTimer {
        self.reinjection.parse().unwrap_or_default()
    }

    /// `rate_control_max_queue_ms` as a duration.
    pub fn rate_control_max_queue(&self) -> core::time::Duration {
        core::time::Duration::from_secs_f64(self.rate_control_max_queue_ms / 1e3)
    }

    /// `codel_target_ms` as a duration.
    pub fn codel_target(&self) -> core::time::Duration {
        core::time::Duration::from_secs_f64(self.codel_target_ms / 1e3)
    }

    /// `ack_ride_wait_ms` as a duration.
    pub fn ack_ride_wait(&self) -> core::time::Duration {
        core::time::Duration::from_secs_f64(self.ack_ride_wait_ms / 1e3)
    }

    /// The reinjection timer's floor.
    pub fn rej_min(&self) -> core::time::Duration {
        core::time::Duration::from_secs_f64(self.rej_min_ms.max(0.0) / 1e3)
    }

    /// The default policy (validated when the scenario is loaded).
    pub fn default_policy(&self) -> latebind_proto::PolicyKind {
        self.policy.parse().unwrap_or_default()
    }

    /// The overflow policy's parameters.
    pub fn overflow_params(&self) -> latebind_proto::policy::OverflowParams {
        latebind_proto::policy::OverflowParams {
            k: self.overflow.k,
            t_dwd: core::time::Duration::from_secs_f64(self.overflow.t_dwd_ms.max(0.0) / 1e3),
            w_fixed: self.overflow.w_fixed,
            w_max: self.overflow.w_max,
            ..latebind_proto::policy::OverflowParams::default()
        }
    }

    /// The engine's rules; a rule naming a flow matches that flow's ports (`10000 + i` at
    /// the client, `20000 + i` at the server, for the `i`-th flow).
    pub fn engine_rules(&self, flows: &[FlowToml]) -> Vec<latebind_proto::PolicyRule> {
        self.rules
            .iter()
            .map(|r| {
                let flow_ports = r.flow.as_ref().and_then(|name| {
                    flows
                        .iter()
                        .position(|f| &f.name == name)
                        .map(|i| 10_000 + i as u16)
                });
                latebind_proto::PolicyRule {
                    dscp: r.dscp,
                    protocol: r.protocol,
                    ports: flow_ports
                        .map(|p| (p, p))
                        .or(r.ports.map(|[lo, hi]| (lo, hi))),
                    prefix: r.prefix.as_deref().and_then(parse_prefix),
                    policy: r.policy.parse().unwrap_or_default(),
                }
            })
            .collect()
    }
}

fn two() -> usize {
    2
}

fn auto() -> String {
    "auto".into()
}

impl Default for LateKnobs {
    fn default() -> Self {
        Self {
            budget_packets: 2,
            policy: auto(),
            reinjection: default_reinjection(),
            rej_min_ms: default_rej_min_ms(),
            rules: Vec::new(),
            overflow: OverflowToml::default(),
            redundant_links: 2,
            redundant_align: false,
            rate_control: true,
            rate_control_max_queue_ms: default_rc_max_queue_ms(),
            codel_target_ms: default_codel_target_ms(),
            tcp_window_clamp: false,
            codel_covers_pause: false,
            aggregate_arrival_order: true,
            seed_capacity: false,
            dispatch: false,
            dispatch_horizon_us: default_dispatch_horizon_us(),
            dispatch_rt_priority: None,
            pacing_rate_mbps: None,
            tun_offload: true,
            ack_filter: true,
            header_compression: true,
            ack_ride_wait_ms: default_ack_ride_wait_ms(),
        }
    }
}

/// `[early]`: the Linux default latebind replaces.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyKnobs {
    /// qdisc FIFO length, packets.
    #[serde(default = "thousand")]
    pub qdisc_packets: usize,
    /// Driver buffer, packets.
    #[serde(default = "fifty")]
    pub driver_packets: usize,
}

fn thousand() -> usize {
    1000
}

fn fifty() -> usize {
    50
}

impl Default for EarlyKnobs {
    fn default() -> Self {
        Self {
            qdisc_packets: 1000,
            driver_packets: 50,
        }
    }
}

/// `[[variants]]`: the runs `latebind sim --compare` puts side by side.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    /// Column label.
    pub label: String,
    /// late | early.
    pub mode: String,
    /// Dotted-key overrides, as `--set` takes them.
    #[serde(default)]
    pub set: toml::Table,
}

/// A scenario as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioToml {
    /// `[scenario]`.
    pub scenario: Meta,
    /// `[[links]]`.
    pub links: Vec<LinkSpec>,
    /// `[[flows]]`.
    #[serde(default)]
    pub flows: Vec<FlowToml>,
    /// `[late]`.
    #[serde(default)]
    pub late: LateKnobs,
    /// `[early]`.
    #[serde(default)]
    pub early: EarlyKnobs,
    /// `[[variants]]`.
    #[serde(default)]
    pub variants: Vec<Variant>,
}

/// A loaded scenario: the parsed file, its path, and the raw TOML for overrides.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Parsed and validated.
    pub spec: ScenarioToml,
    /// Where it came from (trace paths are relative to its folder).
    pub path: PathBuf,
    raw: toml::Table,
}

impl Scenario {
    /// Reads, parses and validates a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScenarioError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::from_str(&text, path)
    }

    /// Parses and validates scenario text; `path` names it in errors and anchors traces.
    pub fn from_str(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let raw: toml::Table = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_owned(),
            message: e.to_string(),
        })?;
        Self::from_table(raw, path)
    }

    fn from_table(raw: toml::Table, path: &Path) -> Result<Self, ScenarioError> {
        check_bools(&raw, path)?;
        let spec: ScenarioToml =
            raw.clone()
                .try_into()
                .map_err(|e: toml::de::Error| ScenarioError::Parse {
                    path: path.to_owned(),
                    message: e.to_string(),
                })?;
        let s = Self {
            spec,
            path: path.to_owned(),
            raw,
        };
        s.validate()?;
        Ok(s)
    }

    /// A copy with dotted-key overrides applied (`late.budget_packets=4`,
    /// `links.0.loss=0.01`). Values are TOML (`4`, `0.5`, `"min-rtt"`, `[[6.0, 7.0]]`).
    pub fn with_overrides<'a>(
        &self,
        sets: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, ScenarioError> {
        let mut raw = self.raw.clone();
        for set in sets {
            let (key, value) = set
                .split_once('=')
                .ok_or_else(|| ScenarioError::Override(set.to_owned()))?;
            let value =
                parse_value(value.trim()).ok_or_else(|| ScenarioError::Override(set.to_owned()))?;
            apply(&mut raw, key.trim(), value)
                .ok_or_else(|| ScenarioError::Override(set.to_owned()))?;
        }
        Self::from_table(raw, &self.path)
    }

    /// A copy with a variant's overrides applied.
    pub fn with_variant(&self, v: &Variant) -> Result<Self, ScenarioError> {
        let sets: Vec<String> = v.set.iter().map(|(k, val)| format!("{k}={val}")).collect();
        self.with_overrides(sets.iter().map(String::as_str))
    }

    fn invalid(&self, key: String, value: impl ToString, expected: &str) -> ScenarioError {
        ScenarioError::Invalid {
            path: self.path.clone(),
            key,
            value: value.to_string(),
            expected: expected.to_owned(),
        }
    }

    fn validate(&self) -> Result<(), ScenarioError> {
        let s = &self.spec;
        let dur = s.scenario.duration_s;
        if !(dur.is_finite() && dur > 0.0 && dur <= 86_400.0) {
            return Err(self.invalid(
                "scenario.duration_s".into(),
                dur,
                "seconds, above 0 and at most 86400",
            ));
        }
        if s.links.is_empty() {
            return Err(self.invalid("links".into(), "[]", "at least one [[links]] table"));
        }
        if s.links.len() > 64 {
            return Err(self.invalid("links".into(), s.links.len(), "at most 64 links"));
        }
        for (i, l) in s.links.iter().enumerate() {
            let k = |f: &str| format!("links[{i}].{f}");
            for (name, r) in [
                ("rate_mbps", l.rate_mbps),
                ("rate_up_mbps", l.rate_up_mbps),
                ("rate_down_mbps", l.rate_down_mbps),
            ] {
                if let Some(r) = r
                    && !(r.is_finite() && r > 0.0 && r <= 100_000.0)
                {
                    return Err(self.invalid(k(name), r, "Mbit/s above 0 and at most 100000"));
                }
            }
            if l.trace.is_some() && (l.trace_up.is_some() || l.trace_down.is_some()) {
                return Err(self.invalid(
                    k("trace"),
                    "together with trace_up/trace_down",
                    "either trace or trace_up and trace_down",
                ));
            }
            for (up, name) in [(true, "up"), (false, "down")] {
                let trace = l.trace.is_some()
                    || if up {
                        l.trace_up.is_some()
                    } else {
                        l.trace_down.is_some()
                    };
                if !trace && l.fixed_rate_mbps(up).is_none() {
                    return Err(self.invalid(
                        k("rate_mbps"),
                        "(missing)",
                        &format!(
                            "a rate in Mbit/s (or rate_{name}_mbps), or trace / trace_up and trace_down"
                        ),
                    ));
                }
            }
            for (name, v) in [("delay_ms", l.delay_ms), ("jitter_ms", l.jitter_ms)] {
                if !(v.is_finite() && (0.0..=60_000.0).contains(&v)) {
                    return Err(self.invalid(k(name), v, "milliseconds from 0 to 60000"));
                }
            }
            if !(0.0..=1.0).contains(&l.loss) {
                return Err(self.invalid(k("loss"), l.loss, "a probability between 0 and 1"));
            }
            if l.queue_packets == 0 {
                return Err(self.invalid(k("queue_packets"), 0, "at least 1 packet"));
            }
            if l.outage_new_address && !l.outage_local {
                return Err(self.invalid(
                    k("outage_new_address"),
                    true,
                    "false with outage_local = false (a path that dies in the network keeps \
                     the client's address)",
                ));
            }
            if !["client", "network"].contains(&l.uplink_bottleneck.as_str()) {
                return Err(self.invalid(
                    k("uplink_bottleneck"),
                    format!("{:?}", l.uplink_bottleneck),
                    "client or network",
                ));
            }
            for (j, [a, b]) in l.outages.iter().enumerate() {
                if !(a.is_finite() && *a >= 0.0 && b > a) {
                    return Err(self.invalid(
                        format!("links[{i}].outages[{j}]"),
                        format!("[{a}, {b}]"),
                        "[start_s, end_s) with 0 <= start_s < end_s",
                    ));
                }
            }
        }
        for (i, f) in s.flows.iter().enumerate() {
            let k = |x: &str| format!("flows[{i}].{x}");
            if f.kind.parse::<latebind_traffic::FlowKind>().is_err() {
                return Err(self.invalid(
                    k("kind"),
                    format!("{:?}", f.kind),
                    &format!("one of {}", latebind_traffic::FlowKind::names()),
                ));
            }
            if let Some(v) = f.via_link
                && v >= s.links.len()
            {
                return Err(self.invalid(
                    k("via_link"),
                    v,
                    "the index of one of the scenario's links",
                ));
            }
            if !["up", "down"].contains(&f.direction.as_str()) {
                return Err(self.invalid(
                    k("direction"),
                    format!("{:?}", f.direction),
                    "up or down",
                ));
            }
            let stop = f.stop_s.unwrap_or(dur);
            if !(f.start_s.is_finite() && f.start_s >= 0.0 && f.start_s <= dur) {
                return Err(self.invalid(
                    k("start_s"),
                    f.start_s,
                    "seconds within the scenario's duration",
                ));
            }
            if !(stop.is_finite() && stop >= f.start_s) {
                return Err(self.invalid(k("stop_s"), stop, "seconds, not before start_s"));
            }
            match (f.kind.as_str(), f.rate_mbps) {
                ("udp-cbr", None) => {
                    return Err(self.invalid(
                        k("rate_mbps"),
                        "(missing)",
                        "a rate in Mbit/s for udp-cbr",
                    ));
                }
                (_, Some(r)) if !(r.is_finite() && r > 0.0 && r <= 100_000.0) => {
                    return Err(self.invalid(
                        k("rate_mbps"),
                        r,
                        "Mbit/s above 0 and at most 100000",
                    ));
                }
                _ => {}
            }
            if let Some(b) = f.packet_bytes
                && !(48..=9000).contains(&b)
            {
                return Err(self.invalid(k("packet_bytes"), b, "48 to 9000 bytes"));
            }
            if let Some(c) = f.count
                && !(1..=10_000_000).contains(&c)
            {
                return Err(self.invalid(k("count"), c, "1 to 10000000 packets"));
            }
            if let Some(d) = f.dscp
                && d > 63
            {
                return Err(self.invalid(k("dscp"), d, "a DSCP from 0 to 63"));
            }
        }
        if !(1..=1024).contains(&s.late.budget_packets) {
            return Err(self.invalid(
                "late.budget_packets".into(),
                s.late.budget_packets,
                "a whole number of packets from 1 to 1024",
            ));
        }
        if let Err(e) = s.late.policy.parse::<latebind_proto::PolicyKind>() {
            return Err(self.invalid("late.policy".into(), format!("{:?}", s.late.policy), &e));
        }
        for (i, r) in s.late.rules.iter().enumerate() {
            let k = |key: &str| format!("late.rules[{i}].{key}");
            if let Err(e) = r.policy.parse::<latebind_proto::PolicyKind>() {
                return Err(self.invalid(k("policy"), format!("{:?}", r.policy), &e));
            }
            if let Some(name) = &r.flow
                && !s.flows.iter().any(|f| &f.name == name)
            {
                return Err(self.invalid(k("flow"), format!("{name:?}"), "the name of a flow"));
            }
            if r.flow.is_some() && r.ports.is_some() {
                return Err(self.invalid(k("ports"), "(set with flow)", "either flow or ports"));
            }
            if let Some(p) = &r.prefix
                && parse_prefix(p).is_none()
            {
                return Err(self.invalid(
                    k("prefix"),
                    format!("{p:?}"),
                    "an address prefix such as \"10.0.0.0/8\"",
                ));
            }
        }
        // The engine's own checks, with this file's keys.
        let engine =
            |key: String, e: latebind_proto::ConfigError| self.invalid(key, e.value, e.expected);
        for (i, r) in s.late.engine_rules(&s.flows).iter().enumerate() {
            r.validate()
                .map_err(|e| engine(format!("late.rules[{i}].{}", e.key), e))?;
        }
        let o = &s.late.overflow;
        if !(o.t_dwd_ms.is_finite() && o.t_dwd_ms >= 0.0) {
            return Err(self.invalid(
                "late.overflow.t_dwd_ms".into(),
                o.t_dwd_ms,
                "a time from 0 to 60000 ms",
            ));
        }
        s.late
            .overflow_params()
            .validate()
            .map_err(|e| engine(format!("late.{}", e.key), e))?;
        latebind_proto::config::validate_redundant_links(s.late.redundant_links)
            .map_err(|e| engine(format!("late.{}", e.key), e))?;
        if let Err(e) = s.late.reinjection.parse::<latebind_proto::ReinjectTimer>() {
            return Err(self.invalid(
                "late.reinjection".into(),
                format!("{:?}", s.late.reinjection),
                &e,
            ));
        }
        if !(s.late.rej_min_ms.is_finite() && (0.0..=10_000.0).contains(&s.late.rej_min_ms)) {
            return Err(self.invalid(
                "late.rej_min_ms".into(),
                s.late.rej_min_ms,
                "a time from 0 to 10000 ms",
            ));
        }
        for (key, v) in [
            (
                "late.rate_control_max_queue_ms",
                s.late.rate_control_max_queue_ms,
            ),
            ("late.codel_target_ms", s.late.codel_target_ms),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= 10_000.0) {
                return Err(self.invalid(key.into(), v, "a time above 0 and up to 10000 ms"));
            }
        }
        let mad = latebind_proto::Config::default()
            .max_ack_delay
            .as_secs_f64()
            * 1e3;
        if !(s.late.ack_ride_wait_ms.is_finite() && (0.0..=mad).contains(&s.late.ack_ride_wait_ms))
        {
            return Err(self.invalid(
                "late.ack_ride_wait_ms".into(),
                s.late.ack_ride_wait_ms,
                &format!("a time from 0 ms up to max_ack_delay ({mad} ms)"),
            ));
        }
        if !(s.late.dispatch_horizon_us.is_finite()
            && (0.0..=100_000.0).contains(&s.late.dispatch_horizon_us))
        {
            return Err(self.invalid(
                "late.dispatch_horizon_us".into(),
                s.late.dispatch_horizon_us,
                "a time from 0 to 100000 µs",
            ));
        }
        if let Some(p) = s.late.dispatch_rt_priority
            && !(1..=99).contains(&p)
        {
            return Err(self.invalid(
                "late.dispatch_rt_priority".into(),
                p,
                "a SCHED_FIFO priority from 1 to 99",
            ));
        }
        if let Some(r) = s.late.pacing_rate_mbps
            && !(r.is_finite() && r > 0.0 && r <= 100_000.0)
        {
            return Err(self.invalid(
                "late.pacing_rate_mbps".into(),
                r,
                "a rate above 0 and up to 100000 Mbit/s",
            ));
        }
        if s.early.qdisc_packets + s.early.driver_packets == 0 {
            return Err(self.invalid(
                "early.driver_packets".into(),
                0,
                "at least 1 packet in qdisc_packets + driver_packets",
            ));
        }
        for (i, v) in s.variants.iter().enumerate() {
            if !["late", "early"].contains(&v.mode.as_str()) {
                return Err(self.invalid(
                    format!("variants[{i}].mode"),
                    format!("{:?}", v.mode),
                    "late or early",
                ));
            }
        }
        Ok(())
    }

    /// Resolves a trace path relative to the scenario file's folder.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            return p.to_owned();
        }
        self.path.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// The boolean link keys, checked before deserialization so that a wrong value is named
/// with its table path (`links[1].outage_local`) like every other range error.
fn check_bools(raw: &toml::Table, path: &Path) -> Result<(), ScenarioError> {
    let Some(toml::Value::Array(links)) = raw.get("links") else {
        return Ok(());
    };
    for (i, l) in links.iter().enumerate() {
        for (key, expected) in [
            (
                "outage_local",
                "true (the client's interface goes down) or false (the path dies in the \
                 network, no end is told)",
            ),
            (
                "outage_new_address",
                "true (the link comes back from an outage with another client address) or \
                 false (the same address)",
            ),
        ] {
            if let Some(v) = l.get(key)
                && !v.is_bool()
            {
                return Err(ScenarioError::Invalid {
                    path: path.to_owned(),
                    key: format!("links[{i}].{key}"),
                    value: v.to_string(),
                    expected: expected.to_owned(),
                });
            }
        }
    }
    Ok(())
}

fn parse_value(text: &str) -> Option<toml::Value> {
    let wrapped: toml::Table = toml::from_str(&format!("v = {text}"))
        .or_else(|_| toml::from_str(&format!("v = \"{text}\"")))
        .ok()?;
    wrapped.get("v").cloned()
}

/// Sets `a.b.c` in a table, creating missing tables; numeric parts index arrays
/// (`links.0.loss`).
fn apply(table: &mut toml::Table, key: &str, value: toml::Value) -> Option<()> {
    let parts: Vec<&str> = key.split('.').collect();
    let (last, path) = parts.split_last()?;
    let (first, rest) = path.split_first()?;
    let mut cur: &mut toml::Value = table
        .entry((*first).to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    for p in rest {
        cur = match cur {
            toml::Value::Table(t) => t
                .entry((*p).to_owned())
                .or_insert_with(|| toml::Value::Table(toml::Table::new())),
            toml::Value::Array(a) => a.get_mut(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    match cur {
        toml::Value::Table(t) => {
            t.insert((*last).to_owned(), value);
        }
        toml::Value::Array(a) => *a.get_mut(last.parse::<usize>().ok()?)? = value,
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
[scenario]
name = "t"
duration_s = 2.0

[[links]]
name = "a"
rate_mbps = 10.0
delay_ms = 20.0

[[flows]]
name = "f"
kind = "udp-cbr"
rate_mbps = 1.0
"#;

    fn load(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_str(text, Path::new("t.toml"))
    }

    #[test]
    fn minimal_scenario_gets_defaults() {
        let s = load(MINIMAL).unwrap();
        assert_eq!(s.spec.scenario.seed, 1);
        assert_eq!(s.spec.links[0].queue_packets, 1000);
        assert_eq!(s.spec.late.budget_packets, 2);
        assert_eq!(s.spec.early.qdisc_packets, 1000);
    }

    #[test]
    fn bad_loss_names_key_value_and_expectation() {
        let e = load(&MINIMAL.replace("delay_ms = 20.0", "delay_ms = 20.0\nloss = 1.5"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t.toml: links[0].loss = 1.5: expected a probability between 0 and 1"
        );
    }

    #[test]
    fn unknown_key_is_rejected_with_its_name() {
        let e = load(&MINIMAL.replace("delay_ms", "delay_msec"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("delay_msec"), "{e}");
    }

    #[test]
    fn unknown_kind_lists_valid_kinds() {
        let e = load(&MINIMAL.replace("udp-cbr", "udp-cbrr"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("flows[0].kind = \"udp-cbrr\": expected one of tcp-bulk"),
            "{e}"
        );
    }

    #[test]
    fn missing_rate_and_trace_rejected() {
        let e = load(&MINIMAL.replace("rate_mbps = 10.0", ""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("links[0].rate_mbps = (missing)"), "{e}");
    }

    #[test]
    fn a_link_takes_a_rate_per_direction() {
        let asym = MINIMAL.replace(
            "rate_mbps = 10.0",
            "rate_down_mbps = 16.0\nrate_up_mbps = 1.0",
        );
        let s = load(&asym).unwrap();
        assert_eq!(s.spec.links[0].fixed_rate_mbps(true), Some(1.0));
        assert_eq!(s.spec.links[0].fixed_rate_mbps(false), Some(16.0));
        // One direction's own key over the shared one.
        let s = load(&MINIMAL.replace("rate_mbps = 10.0", "rate_mbps = 10.0\nrate_up_mbps = 2.0"))
            .unwrap();
        assert_eq!(s.spec.links[0].fixed_rate_mbps(true), Some(2.0));
        assert_eq!(s.spec.links[0].fixed_rate_mbps(false), Some(10.0));
        // A direction without a rate is named.
        let e = load(&MINIMAL.replace("rate_mbps = 10.0", "rate_up_mbps = 1.0"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links[0].rate_mbps = (missing)") && e.contains("rate_down_mbps"),
            "{e}"
        );
        let e = load(&asym.replace("rate_up_mbps = 1.0", "rate_up_mbps = -1.0"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("links[0].rate_up_mbps = -1"), "{e}");
    }

    #[test]
    fn outage_local_defaults_to_true_and_takes_only_a_boolean() {
        let s = load(MINIMAL).unwrap();
        assert!(s.spec.links[0].outage_local);
        let remote = s.with_overrides(["links.0.outage_local=false"]).unwrap();
        assert!(!remote.spec.links[0].outage_local);
        let e = load(&MINIMAL.replace("delay_ms = 20.0", "delay_ms = 20.0\noutage_local = \"no\""))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "t.toml: links[0].outage_local = \"no\": expected true (the client's interface \
             goes down) or false (the path dies in the network, no end is told)"
        );
        let e = s
            .with_overrides(["links.0.outage_local=1"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links[0].outage_local = 1: expected true"),
            "{e}"
        );
    }

    #[test]
    fn outage_new_address_is_a_boolean_for_local_outages_only() {
        let s = load(MINIMAL).unwrap();
        assert!(!s.spec.links[0].outage_new_address);
        let moved = s
            .with_overrides(["links.0.outage_new_address=true"])
            .unwrap();
        assert!(moved.spec.links[0].outage_new_address);
        let e = s
            .with_overrides(["links.0.outage_new_address=\"yes\""])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links[0].outage_new_address = \"yes\": expected true (the link comes back"),
            "{e}"
        );
        let e = s
            .with_overrides([
                "links.0.outage_new_address=true",
                "links.0.outage_local=false",
            ])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "links[0].outage_new_address = true: expected false with outage_local = false"
            ),
            "{e}"
        );
    }

    #[test]
    fn overrides_apply_dotted_keys_and_revalidate() {
        let s = load(MINIMAL).unwrap();
        let t = s
            .with_overrides(["late.budget_packets=4", "links.0.loss=0.25"])
            .unwrap();
        assert_eq!(t.spec.late.budget_packets, 4);
        assert_eq!(t.spec.links[0].loss, 0.25);
        let e = s
            .with_overrides(["late.budget_packets=0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("late.budget_packets = 0"), "{e}");
        assert!(matches!(
            s.with_overrides(["nonsense"]),
            Err(ScenarioError::Override(_))
        ));
    }

    #[test]
    fn reinjection_keys_default_and_are_validated() {
        let s = load(MINIMAL).unwrap();
        assert_eq!(
            s.spec.late.reinjection_timer(),
            latebind_proto::ReinjectTimer::SrttRttvarDelta
        );
        assert_eq!(s.spec.late.rej_min(), core::time::Duration::from_millis(10));
        let t = s
            .with_overrides(["late.reinjection=\"off\"", "late.rej_min_ms=2.5"])
            .unwrap();
        assert_eq!(
            t.spec.late.reinjection_timer(),
            latebind_proto::ReinjectTimer::Off
        );
        let e = s
            .with_overrides(["late.reinjection=\"rto\""])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("late.reinjection = \"rto\": expected one of srtt+rttvar-delta"),
            "{e}"
        );
        let e = s
            .with_overrides(["late.rej_min_ms=-1.0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("late.rej_min_ms = -1"), "{e}");
        for bad in ["-1.0", "6.0"] {
            let set = format!("late.ack_ride_wait_ms={bad}");
            let e = s.with_overrides([set.as_str()]).unwrap_err().to_string();
            assert!(
                e.contains("late.ack_ride_wait_ms = ") && e.contains("up to max_ack_delay (5 ms)"),
                "{e}"
            );
        }
        let ok = s.with_overrides(["late.ack_ride_wait_ms=0.5"]).unwrap();
        assert_eq!(
            ok.spec.late.ack_ride_wait(),
            core::time::Duration::from_micros(500)
        );
        for key in ["late.codel_target_ms", "late.rate_control_max_queue_ms"] {
            let set = format!("{key}=0.0");
            let e = s.with_overrides([set.as_str()]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{key} = 0")) && e.contains("a time above 0"),
                "{e}"
            );
        }
        let ok = s
            .with_overrides([
                "late.codel_target_ms=20.0",
                "late.rate_control_max_queue_ms=40",
            ])
            .unwrap();
        assert_eq!(
            ok.spec.late.codel_target(),
            core::time::Duration::from_millis(20)
        );
        assert_eq!(
            ok.spec.late.rate_control_max_queue(),
            core::time::Duration::from_millis(40)
        );
    }
}
