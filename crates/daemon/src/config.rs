//! Daemon configuration: TOML files with documented defaults, validated at start. Every
//! error names the key, the value and what is expected. `examples/client.toml` and
//! `examples/server.toml` show every key.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use core::time::Duration;

use latebind_crypto::{PublicKey, StaticSecret};
use latebind_proto::policy::parse_prefix;
use latebind_proto::{OverflowParams, PolicyKind, PolicyRule, ReinjectTimer};
use serde::Deserialize;
use thiserror::Error;

/// A configuration that cannot be used.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// Not TOML, or not of the expected shape (the message names the key).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A value out of range.
    #[error("{path}: {key} = {value}: expected {expected}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is accepted.
        expected: String,
    },
}

fn default_tun_client() -> String {
    "lb0".into()
}

fn default_tun_server() -> String {
    "lbs0".into()
}

fn default_budget() -> usize {
    2
}

/// `[client]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// This client's private key, base64 (`latebind genkey`). Or `private_key_file`.
    pub private_key: Option<String>,
    /// File holding the private key.
    pub private_key_file: Option<PathBuf>,
    /// The server's public key, base64.
    pub server_public_key: String,
    /// TUN device name. Default `lb0`.
    #[serde(default = "default_tun_client")]
    pub tun: String,
    /// The client's stable virtual address with prefix, e.g. `10.77.0.2/24`.
    pub address: String,
    /// TUN MTU; default: the smallest link MTU minus the tunnel's overhead.
    pub mtu: Option<u16>,
    /// The kernel's segmentation and checksum offloads on the TUN device: a TCP flow's
    /// data crosses the kernel in segments of up to 64 KB (docs/RESULTS.md 5). Default
    /// true; without kernel support the device runs without them.
    pub tun_offload: Option<bool>,
    /// Routes through the tunnel, installed with `--routes` (e.g. `0.0.0.0/1`).
    #[serde(default)]
    pub routes: Vec<String>,
    /// Control socket for `latebind status`. Default `/run/latebind/client.sock`.
    pub control_socket: Option<PathBuf>,
    /// Address of the Prometheus text endpoint; off when absent.
    pub metrics_listen: Option<SocketAddr>,
    /// Packets per link below the binding point. Default 2.
    #[serde(default = "default_budget")]
    pub budget_packets: usize,
    /// Reinjection timer: `srtt+rttvar-delta` (default), `srtt+rttvar`,
    /// `minrtt+rttvar` or `off`.
    pub reinjection: Option<String>,
    /// Floor of the reinjection timer after the last acknowledgement, ms. Default 10.
    pub rej_min_ms: Option<f64>,
    /// Per-link rate and delay control: each link is paced so that the queue at its
    /// bottleneck (a modem, a base station) stays short. Default true.
    pub rate_control: Option<bool>,
    /// Longest queueing delay rate control keeps at a link's bottleneck, ms (it keeps
    /// two packets on a steady link, more on one whose delivery pauses). Default 20.
    pub rate_control_max_queue_ms: Option<f64>,
    /// CoDel's target above the binding point, ms: the sojourn a flow's queue may keep
    /// (at least a tenth of CoDel's interval, which follows the links' RTT). Default 5.
    pub codel_target_ms: Option<f64>,
    /// A pure TCP acknowledgement that finds an older one of its connection waiting at
    /// the tail of its queue replaces it (duplicates, SACK and ECN ones never do).
    /// Default true.
    pub ack_filter: Option<bool>,
    /// Inner packets go as a difference from an earlier packet's headers that the peer
    /// holds (`docs/protocol.md` 3.9): a full-size TCP segment takes about 30 bytes less
    /// on the link. Both ends must speak it. Default true.
    pub header_compression: Option<bool>,
    /// The receive-window clamp (`docs/protocol.md` 4.1): the TCP windows the peer's
    /// segments carry to this end's hosts are lowered so that a sender here keeps only
    /// its CoDel target's worth waiting in the tunnel, and is slowed without a drop.
    /// Default false.
    pub tcp_window_clamp: Option<bool>,
    /// CoDel's target of a min-rtt or redundant flow also covers half the recent pause
    /// of the link it is bound to (`docs/protocol.md` 4.1): on cellular links, more of
    /// the link for a download, a longer wait for a small flow beside it. Default false.
    pub codel_covers_pause: Option<bool>,
    /// An aggregate flow's slower link is sent the packet that arrives in order there,
    /// not the flow's head (`docs/protocol.md` 4.2): beside a slow link far away, a
    /// transfer keeps the fast link's rate; false sends every link the head. Default
    /// true.
    pub aggregate_arrival_order: Option<bool>,
    /// How long an acknowledgement the tunnel owes waits for a packet going the other
    /// way to ride on (an inner TCP's own acknowledgement, a moment later) before it
    /// takes a datagram of its own, ms; 0 sends it at once. Default 0.
    pub ack_ride_wait_ms: Option<f64>,
    /// Policy of flows no `[[rules]]` entry matches: `auto` (default), `min-rtt`,
    /// `aggregate`, `overflow` or `redundant`.
    pub policy: Option<String>,
    /// Copies of a redundant flow's packet, each on another link (0: one on every link);
    /// more than there are links: the rest over the links again, best first. Default 2.
    pub redundant_links: Option<usize>,
    /// Playout alignment of the redundant flows this side receives: each first copy
    /// waits for as long as its copies on the other links have lately come later, so
    /// losing a copy or a link leaves no gap, at the price of that delay. Default false.
    pub redundant_align: Option<bool>,
    /// The dispatch stage: each datagram is bound `dispatch_horizon_us` before its
    /// pacing slot, sealed at once, and sent at its slot by a sender thread that
    /// sleeps and then spins (docs/RESULTS.md 9.7). Default false.
    pub dispatch: Option<bool>,
    /// The binding horizon φ of the dispatch stage, µs. Default 1000.
    pub dispatch_horizon_us: Option<f64>,
    /// `SCHED_FIFO` priority (1-99) of the dispatch stage's sender thread; default: the
    /// normal scheduler.
    pub dispatch_rt_priority: Option<i32>,
}

/// `[[links]]` of a client.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    /// Name in status output.
    pub name: String,
    /// The local interface this link uses (its socket is bound to it).
    pub interface: String,
    /// The server as reached over this link: `ip:port`, `[ipv6]:port`, or `host:port`
    /// (resolved when the client starts).
    pub server: String,
    /// Local address to bind (default: any address, port chosen by the kernel).
    pub bind: Option<SocketAddr>,
    /// Used only when no other link is up.
    #[serde(default)]
    pub backup: bool,
    /// Pacing rate cap of this link, Mbit/s (the whole datagram); none by default.
    pub pacing_rate_mbps: Option<f64>,
    /// The link's uplink capacity, Mbit/s of datagrams, if known (`latebind probe`
    /// measures it): rate control starts from it instead of searching; none by default.
    pub capacity_mbps: Option<f64>,
}

/// `[[rules]]`: flows to a binding policy; every key set must match, first match wins.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSection {
    /// DSCP of the flow's first packet (46 is EF).
    pub dscp: Option<u8>,
    /// IP protocol number (6 TCP, 17 UDP).
    pub protocol: Option<u8>,
    /// Source or destination port range, inclusive: `[lo, hi]`.
    pub ports: Option<[u16; 2]>,
    /// Source or destination address prefix, `a.b.c.d/len` or an IPv6 prefix.
    pub prefix: Option<String>,
    /// `min-rtt`, `aggregate`, `overflow` or `redundant`.
    pub policy: String,
}

/// `[overflow]`: the overflow policy's parameters (the bonding slides' names).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverflowSection {
    /// AWI's gain. Default 0.5.
    pub k: Option<f64>,
    /// Time without loss before DWD lowers the secondary weights, ms. Default 250.
    pub t_dwd_ms: Option<f64>,
    /// The primary (first) link's weight. Default 50.
    pub w_fixed: Option<u32>,
    /// Largest weight of a secondary link. Default 50.
    pub w_max: Option<u32>,
}

/// Binding policies, validated: the default, the rules, the overflow parameters and the
/// redundant links, as the engine takes them.
#[derive(Clone, Debug)]
pub struct Policies {
    /// Policy of flows no rule matches.
    pub default: PolicyKind,
    /// Rules, first match wins.
    pub rules: Vec<PolicyRule>,
    /// Overflow parameters.
    pub overflow: OverflowParams,
    /// Copies of a redundant flow's packet.
    pub redundant_links: usize,
    /// Playout alignment of received redundant flows.
    pub redundant_align: bool,
}

impl Policies {
    /// Puts them into an engine configuration.
    pub fn apply(&self, c: &mut latebind_proto::Config) {
        c.default_policy = self.default;
        c.rules = self.rules.clone();
        c.overflow = self.overflow;
        c.redundant_links = self.redundant_links;
        c.redundant_align = self.redundant_align;
    }
}

/// A client configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientFile {
    /// `[client]`.
    pub client: ClientSection,
    /// `[[links]]`.
    pub links: Vec<LinkSection>,
    /// `[[rules]]`.
    #[serde(default)]
    pub rules: Vec<RuleSection>,
    /// `[overflow]`.
    #[serde(default)]
    pub overflow: OverflowSection,
}

/// `[server]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    /// Private key, base64. Or `private_key_file`.
    pub private_key: Option<String>,
    /// File holding the private key.
    pub private_key_file: Option<PathBuf>,
    /// UDP addresses to listen on (clients' links arrive on any of them).
    pub listen: Vec<SocketAddr>,
    /// TUN device name. Default `lbs0`.
    #[serde(default = "default_tun_server")]
    pub tun: String,
    /// The server's virtual address with prefix, e.g. `10.77.0.1/24`.
    pub address: String,
    /// TUN MTU. Default 1400.
    pub mtu: Option<u16>,
    /// The kernel's segmentation and checksum offloads on the TUN device, as in
    /// `[client]`. Default true.
    pub tun_offload: Option<bool>,
    /// Control socket. Default `/run/latebind/server.sock`.
    pub control_socket: Option<PathBuf>,
    /// Address of the Prometheus text endpoint; off when absent.
    pub metrics_listen: Option<SocketAddr>,
    /// A client session from which nothing authentic came for this long is dropped, its
    /// keys with it (a client that went away; a live client probes each of its links every
    /// second and rekeys every 120 s). Seconds, default 180 (WireGuard's reject-after
    /// time).
    pub session_timeout_s: Option<f64>,
    /// Packets per link below the binding point. Default 2.
    #[serde(default = "default_budget")]
    pub budget_packets: usize,
    /// Reinjection timer: `srtt+rttvar-delta` (default), `srtt+rttvar`,
    /// `minrtt+rttvar` or `off`.
    pub reinjection: Option<String>,
    /// Floor of the reinjection timer after the last acknowledgement, ms. Default 10.
    pub rej_min_ms: Option<f64>,
    /// Per-link rate and delay control: each link is paced so that the queue at its
    /// bottleneck (a modem, a base station) stays short. Default true.
    pub rate_control: Option<bool>,
    /// Longest queueing delay rate control keeps at a link's bottleneck, ms (it keeps
    /// two packets on a steady link, more on one whose delivery pauses). Default 20.
    pub rate_control_max_queue_ms: Option<f64>,
    /// CoDel's target above the binding point, ms: the sojourn a flow's queue may keep
    /// (at least a tenth of CoDel's interval, which follows the links' RTT). Default 5.
    pub codel_target_ms: Option<f64>,
    /// A pure TCP acknowledgement that finds an older one of its connection waiting at
    /// the tail of its queue replaces it (duplicates, SACK and ECN ones never do).
    /// Default true.
    pub ack_filter: Option<bool>,
    /// Inner packets go as a difference from an earlier packet's headers that the peer
    /// holds (`docs/protocol.md` 3.9): a full-size TCP segment takes about 30 bytes less
    /// on the link. Both ends must speak it. Default true.
    pub header_compression: Option<bool>,
    /// The receive-window clamp (`docs/protocol.md` 4.1): the TCP windows the peer's
    /// segments carry to this end's hosts are lowered so that a sender here keeps only
    /// its CoDel target's worth waiting in the tunnel, and is slowed without a drop.
    /// Default false.
    pub tcp_window_clamp: Option<bool>,
    /// CoDel's target of a min-rtt or redundant flow also covers half the recent pause
    /// of the link it is bound to (`docs/protocol.md` 4.1): on cellular links, more of
    /// the link for a download, a longer wait for a small flow beside it. Default false.
    pub codel_covers_pause: Option<bool>,
    /// An aggregate flow's slower link is sent the packet that arrives in order there,
    /// not the flow's head (`docs/protocol.md` 4.2): beside a slow link far away, a
    /// transfer keeps the fast link's rate; false sends every link the head. Default
    /// true.
    pub aggregate_arrival_order: Option<bool>,
    /// How long an acknowledgement the tunnel owes waits for a packet going the other
    /// way to ride on (an inner TCP's own acknowledgement, a moment later) before it
    /// takes a datagram of its own, ms; 0 sends it at once. Default 0.
    pub ack_ride_wait_ms: Option<f64>,
    /// Policy of flows no `[[rules]]` entry matches: `auto` (default), `min-rtt`,
    /// `aggregate`, `overflow` or `redundant`.
    pub policy: Option<String>,
    /// Copies of a redundant flow's packet, each on another link (0: one on every link);
    /// more than there are links: the rest over the links again, best first. Default 2.
    pub redundant_links: Option<usize>,
    /// Playout alignment of the redundant flows this side receives: each first copy
    /// waits for as long as its copies on the other links have lately come later, so
    /// losing a copy or a link leaves no gap, at the price of that delay. Default false.
    pub redundant_align: Option<bool>,
    /// The dispatch stage: each datagram is bound `dispatch_horizon_us` before its
    /// pacing slot, sealed at once, and sent at its slot by a sender thread that
    /// sleeps and then spins (docs/RESULTS.md 9.7). Default false.
    pub dispatch: Option<bool>,
    /// The binding horizon φ of the dispatch stage, µs. Default 1000.
    pub dispatch_horizon_us: Option<f64>,
    /// `SCHED_FIFO` priority (1-99) of the dispatch stage's sender thread; default: the
    /// normal scheduler.
    pub dispatch_rt_priority: Option<i32>,
}

/// `[[peers]]`: a client the server accepts.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// Name in status output.
    pub name: Option<String>,
    /// The client's public key, base64.
    pub public_key: String,
    /// The client's virtual address (packets to it go to this client; packets from this
    /// client must come from it).
    pub address: Ipv4Addr,
}

/// A server configuration file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFile {
    /// `[server]`.
    pub server: ServerSection,
    /// `[[peers]]`.
    #[serde(default)]
    pub peers: Vec<PeerSection>,
    /// `[[rules]]`.
    #[serde(default)]
    pub rules: Vec<RuleSection>,
    /// `[overflow]`.
    #[serde(default)]
    pub overflow: OverflowSection,
}

/// A validated client configuration.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// As written.
    pub file: ClientFile,
    /// Parsed private key.
    pub private_key: StaticSecret,
    /// Parsed server key.
    pub server_key: PublicKey,
    /// Virtual address and prefix.
    pub address: (Ipv4Addr, u8),
    /// Routes, parsed.
    pub routes: Vec<(Ipv4Addr, u8)>,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// Reinjection timer and its floor.
    pub reinjection: (ReinjectTimer, Duration),
    /// Rate control on, and its longest target queue.
    pub rate_control: (bool, Duration),
    /// CoDel's target above the binding point.
    pub codel_target: Duration,
    /// How long a due acknowledgement waits for a packet to ride on.
    pub ack_ride_wait: Duration,
    /// Binding policies.
    pub policies: Policies,
    /// The dispatch stage, when on.
    pub dispatch: Option<Dispatch>,
    /// Each link's server, parsed.
    pub servers: Vec<ServerAddr>,
}

/// A link's server: an address, or a name the client resolves when it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerAddr {
    /// `ip:port` or `[ipv6]:port`.
    Addr(SocketAddr),
    /// `host:port`.
    Name {
        /// The host name.
        host: String,
        /// The UDP port.
        port: u16,
    },
}

impl ServerAddr {
    /// Parses `ip:port`, `[ipv6]:port` or `host:port` (a DNS name: letters, digits, `-`
    /// and `.`; a port from 1).
    pub fn parse(text: &str) -> Option<Self> {
        if let Ok(a) = text.parse::<SocketAddr>() {
            return (a.port() != 0).then_some(Self::Addr(a));
        }
        let (host, port) = text.rsplit_once(':')?;
        let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        let name = host.strip_suffix('.').unwrap_or(host);
        (host.len() <= 253
            && name.split('.').all(label_ok)
            && !name.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .then(|| Self::Name {
            host: host.to_owned(),
            port,
        })
    }

    /// The address to send to: an address as it is; a name through the system's
    /// resolver, its first address of the family asked for (`Some(true)`: IPv6) if it
    /// has one, else its first.
    pub fn resolve(&self, want_v6: Option<bool>) -> std::io::Result<SocketAddr> {
        match self {
            Self::Addr(a) => Ok(*a),
            Self::Name { host, port } => {
                use std::net::ToSocketAddrs as _;
                let all: Vec<SocketAddr> = (host.as_str(), *port).to_socket_addrs()?.collect();
                want_v6
                    .and_then(|v6| all.iter().find(|a| a.is_ipv6() == v6))
                    .or(all.first())
                    .copied()
                    .ok_or_else(|| std::io::Error::other("the name has no address"))
            }
        }
    }
}

impl std::fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Addr(a) => write!(f, "{a}"),
            Self::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A validated server configuration.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// As written.
    pub file: ServerFile,
    /// Parsed private key.
    pub private_key: StaticSecret,
    /// Virtual address and prefix.
    pub address: (Ipv4Addr, u8),
    /// Peers: key, virtual address, name.
    pub peers: Vec<(PublicKey, Ipv4Addr, String)>,
    /// Control socket path.
    pub control_socket: PathBuf,
    /// Reinjection timer and its floor.
    pub reinjection: (ReinjectTimer, Duration),
    /// Rate control on, and its longest target queue.
    pub rate_control: (bool, Duration),
    /// CoDel's target above the binding point.
    pub codel_target: Duration,
    /// How long a due acknowledgement waits for a packet to ride on.
    pub ack_ride_wait: Duration,
    /// Binding policies.
    pub policies: Policies,
    /// The dispatch stage, when on.
    pub dispatch: Option<Dispatch>,
    /// How long a silent client session is kept.
    pub session_timeout: Duration,
}

/// The dispatch stage's settings, validated.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dispatch {
    /// The binding horizon φ.
    pub horizon: Duration,
    /// `SCHED_FIFO` priority of the sender thread.
    pub rt_priority: Option<i32>,
}

/// The default binding horizon φ of the dispatch stage (docs/RESULTS.md 9.7).
pub const DEFAULT_DISPATCH_HORIZON: Duration = Duration::from_micros(1000);

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        path: path.to_owned(),
        error,
    })
}

fn parse_toml<T: for<'de> Deserialize<'de>>(path: &Path, text: &str) -> Result<T, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

struct V<'a> {
    path: &'a Path,
}

impl V<'_> {
    fn err(&self, key: impl Into<String>, value: impl ToString, expected: &str) -> ConfigError {
        ConfigError::Invalid {
            path: self.path.to_owned(),
            key: key.into(),
            value: value.to_string(),
            expected: expected.to_owned(),
        }
    }

    fn cidr(&self, key: &str, text: &str) -> Result<(Ipv4Addr, u8), ConfigError> {
        let expected = "an IPv4 address with a prefix length, like 10.77.0.2/24";
        let (a, p) = text
            .split_once('/')
            .ok_or_else(|| self.err(key, format!("{text:?}"), expected))?;
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| self.err(key, format!("{text:?}"), expected))?;
        let prefix: u8 = p
            .parse()
            .map_err(|_| self.err(key, format!("{text:?}"), expected))?;
        if prefix > 32 {
            return Err(self.err(key, format!("{text:?}"), expected));
        }
        Ok((addr, prefix))
    }

    fn private_key(
        &self,
        section: &str,
        inline: Option<&String>,
        file: Option<&PathBuf>,
    ) -> Result<StaticSecret, ConfigError> {
        let text = match (inline, file) {
            (Some(k), None) => k.clone(),
            (None, Some(f)) => read(f)?.trim().to_owned(),
            (Some(_), Some(_)) => {
                return Err(self.err(
                    format!("{section}.private_key"),
                    "(set together with private_key_file)",
                    "either private_key or private_key_file",
                ));
            }
            (None, None) => {
                return Err(self.err(
                    format!("{section}.private_key"),
                    "(missing)",
                    "a base64 private key from `latebind genkey`, or private_key_file",
                ));
            }
        };
        text.parse::<StaticSecret>()
            .map_err(|e| self.err(format!("{section}.private_key"), "(hidden)", &e.to_string()))
    }

    fn public_key(&self, key: &str, text: &str) -> Result<PublicKey, ConfigError> {
        text.parse::<PublicKey>()
            .map_err(|e| self.err(key, format!("{text:?}"), &e.to_string()))
    }

    fn budget(&self, key: &str, b: usize) -> Result<(), ConfigError> {
        if (1..=1024).contains(&b) {
            Ok(())
        } else {
            Err(self.err(key, b, "a whole number of packets from 1 to 1024"))
        }
    }

    fn reinjection(
        &self,
        section: &str,
        timer: Option<&String>,
        floor_ms: Option<f64>,
    ) -> Result<(ReinjectTimer, Duration), ConfigError> {
        let defaults = latebind_proto::Config::default();
        let timer = match timer {
            Some(t) => t
                .parse::<ReinjectTimer>()
                .map_err(|e| self.err(format!("{section}.reinjection"), format!("{t:?}"), &e))?,
            None => defaults.reinjection,
        };
        let floor = self.millis(
            format!("{section}.rej_min_ms"),
            floor_ms,
            0.0..=10_000.0,
            "a time from 0 to 10000 ms",
            defaults.rej_min,
        )?;
        Ok((timer, floor))
    }

    /// A time given in milliseconds under `key`: within `range`, else an error naming
    /// the key, the value and `expected`; `default` when absent.
    fn millis(
        &self,
        key: String,
        ms: Option<f64>,
        range: core::ops::RangeInclusive<f64>,
        expected: &str,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match ms {
            Some(ms) if ms.is_finite() && range.contains(&ms) => {
                Ok(Duration::from_secs_f64(ms / 1e3))
            }
            Some(ms) => Err(self.err(key, ms, expected)),
            None => Ok(default),
        }
    }

    fn rate_control(
        &self,
        section: &str,
        on: Option<bool>,
        max_queue_ms: Option<f64>,
    ) -> Result<(bool, Duration), ConfigError> {
        let defaults = latebind_proto::Config::default();
        let max_queue = self.millis(
            format!("{section}.rate_control_max_queue_ms"),
            max_queue_ms,
            1.0..=1_000.0,
            "a time from 1 to 1000 ms",
            defaults.rate_control_max_queue,
        )?;
        Ok((on.unwrap_or(defaults.rate_control), max_queue))
    }

    fn codel_target(&self, section: &str, ms: Option<f64>) -> Result<Duration, ConfigError> {
        self.millis(
            format!("{section}.codel_target_ms"),
            ms,
            1.0..=1_000.0,
            "a time from 1 to 1000 ms",
            latebind_proto::Config::default().codel_target,
        )
    }

    fn ack_ride_wait(&self, section: &str, ms: Option<f64>) -> Result<Duration, ConfigError> {
        let defaults = latebind_proto::Config::default();
        let most = defaults.max_ack_delay.as_secs_f64() * 1e3;
        self.millis(
            format!("{section}.ack_ride_wait_ms"),
            ms,
            0.0..=most,
            &format!("a time from 0 ms up to the acknowledgement delay ({most} ms)"),
            defaults.ack_ride_wait,
        )
    }

    fn policies(
        &self,
        section: &str,
        default: Option<&String>,
        redundant_links: Option<usize>,
        redundant_align: Option<bool>,
        rules: &[RuleSection],
        o: &OverflowSection,
    ) -> Result<Policies, ConfigError> {
        let kind = |key: String, text: &str| {
            text.parse::<PolicyKind>()
                .map_err(|e| self.err(key, format!("{text:?}"), &e))
        };
        let default = match default {
            Some(p) => kind(format!("{section}.policy"), p)?,
            None => PolicyKind::default(),
        };
        // The engine's own checks, with the keys of this file.
        let engine =
            |key: String, e: latebind_proto::ConfigError| self.err(key, e.value, e.expected);
        let mut out = Vec::new();
        for (i, r) in rules.iter().enumerate() {
            let k = |key: &str| format!("rules[{i}].{key}");
            let policy = kind(k("policy"), &r.policy)?;
            let prefix = match &r.prefix {
                Some(p) => Some(parse_prefix(p).ok_or_else(|| {
                    self.err(
                        k("prefix"),
                        format!("{p:?}"),
                        "an address prefix such as \"10.0.0.0/8\"",
                    )
                })?),
                None => None,
            };
            let rule = PolicyRule {
                dscp: r.dscp,
                protocol: r.protocol,
                ports: r.ports.map(|[lo, hi]| (lo, hi)),
                prefix,
                policy,
            };
            rule.validate().map_err(|e| engine(k(e.key), e))?;
            out.push(rule);
        }
        let d = OverflowParams::default();
        let t_dwd = match o.t_dwd_ms {
            Some(ms) => Duration::try_from_secs_f64(ms / 1e3)
                .map_err(|_| self.err("overflow.t_dwd_ms", ms, "a time from 0 to 60000 ms"))?,
            None => d.t_dwd,
        };
        let overflow = OverflowParams {
            k: o.k.unwrap_or(d.k),
            t_dwd,
            w_fixed: o.w_fixed.unwrap_or(d.w_fixed),
            w_max: o.w_max.unwrap_or(d.w_max),
            ..d
        };
        overflow
            .validate()
            .map_err(|e| engine(e.key.to_owned(), e))?;
        let redundant_links = redundant_links.unwrap_or(2);
        latebind_proto::config::validate_redundant_links(redundant_links)
            .map_err(|e| engine(format!("{section}.{}", e.key), e))?;
        Ok(Policies {
            default,
            rules: out,
            overflow,
            redundant_links,
            redundant_align: redundant_align.unwrap_or(false),
        })
    }

    fn dispatch(
        &self,
        section: &str,
        on: Option<bool>,
        horizon_us: Option<f64>,
        rt_priority: Option<i32>,
    ) -> Result<Option<Dispatch>, ConfigError> {
        let horizon = match horizon_us {
            Some(us) if us.is_finite() && (0.0..=100_000.0).contains(&us) => {
                Duration::from_secs_f64(us / 1e6)
            }
            Some(us) => {
                return Err(self.err(
                    format!("{section}.dispatch_horizon_us"),
                    us,
                    "a time from 0 to 100000 µs",
                ));
            }
            None => DEFAULT_DISPATCH_HORIZON,
        };
        if let Some(p) = rt_priority
            && !(1..=99).contains(&p)
        {
            return Err(self.err(
                format!("{section}.dispatch_rt_priority"),
                p,
                "a SCHED_FIFO priority from 1 to 99",
            ));
        }
        Ok(on.unwrap_or(false).then_some(Dispatch {
            horizon,
            rt_priority,
        }))
    }

    fn ifname(&self, key: &str, name: &str) -> Result<(), ConfigError> {
        if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
            return Err(self.err(
                key,
                format!("{name:?}"),
                "an interface name of 1 to 15 characters",
            ));
        }
        Ok(())
    }
}

impl ClientConfig {
    /// Reads and validates a client configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        Self::parse(path, &text)
    }

    /// Validates configuration text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let file: ClientFile = parse_toml(path, text)?;
        let v = V { path };
        let c = &file.client;
        let private_key = v.private_key(
            "client",
            c.private_key.as_ref(),
            c.private_key_file.as_ref(),
        )?;
        let server_key = v.public_key("client.server_public_key", &c.server_public_key)?;
        let address = v.cidr("client.address", &c.address)?;
        let routes = c
            .routes
            .iter()
            .enumerate()
            .map(|(i, r)| v.cidr(&format!("client.routes[{i}]"), r))
            .collect::<Result<Vec<_>, _>>()?;
        v.ifname("client.tun", &c.tun)?;
        v.budget("client.budget_packets", c.budget_packets)?;
        let reinjection = v.reinjection("client", c.reinjection.as_ref(), c.rej_min_ms)?;
        let rate_control = v.rate_control("client", c.rate_control, c.rate_control_max_queue_ms)?;
        let codel_target = v.codel_target("client", c.codel_target_ms)?;
        let ack_ride_wait = v.ack_ride_wait("client", c.ack_ride_wait_ms)?;
        let dispatch = v.dispatch(
            "client",
            c.dispatch,
            c.dispatch_horizon_us,
            c.dispatch_rt_priority,
        )?;
        let policies = v.policies(
            "client",
            c.policy.as_ref(),
            c.redundant_links,
            c.redundant_align,
            &file.rules,
            &file.overflow,
        )?;
        if let Some(m) = c.mtu
            && !(576..=9000).contains(&m)
        {
            return Err(v.err("client.mtu", m, "576 to 9000 bytes"));
        }
        if file.links.is_empty() {
            return Err(v.err("links", "[]", "at least one [[links]] table"));
        }
        if file.links.len() > 64 {
            return Err(v.err("links", file.links.len(), "at most 64 links"));
        }
        let mut servers = Vec::new();
        for (i, l) in file.links.iter().enumerate() {
            v.ifname(&format!("links[{i}].interface"), &l.interface)?;
            let Some(server) = ServerAddr::parse(&l.server) else {
                return Err(v.err(
                    format!("links[{i}].server"),
                    format!("{:?}", l.server),
                    "ip:port, [ipv6]:port or host:port, with a port from 1",
                ));
            };
            for (key, rate) in [
                ("pacing_rate_mbps", l.pacing_rate_mbps),
                ("capacity_mbps", l.capacity_mbps),
            ] {
                if let Some(r) = rate
                    && !(r.is_finite() && r > 0.0 && r <= 100_000.0)
                {
                    return Err(v.err(
                        format!("links[{i}].{key}"),
                        r,
                        "a rate above 0 and up to 100000 Mbit/s",
                    ));
                }
            }
            if let (Some(b), ServerAddr::Addr(a)) = (l.bind, &server)
                && b.is_ipv6() != a.is_ipv6()
            {
                let family = if a.is_ipv6() { "IPv6" } else { "IPv4" };
                return Err(v.err(
                    format!("links[{i}].bind"),
                    b,
                    &format!(
                        "an {family} address, the family of links[{i}].server ({})",
                        l.server
                    ),
                ));
            }
            if file.links[..i].iter().any(|o| o.name == l.name) {
                return Err(v.err(
                    format!("links[{i}].name"),
                    format!("{:?}", l.name),
                    "a name no other link has",
                ));
            }
            servers.push(server);
        }
        let control_socket = c
            .control_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from("/run/latebind/client.sock"));
        Ok(Self {
            private_key,
            server_key,
            address,
            routes,
            control_socket,
            reinjection,
            rate_control,
            codel_target,
            ack_ride_wait,
            policies,
            dispatch,
            servers,
            file,
        })
    }
}

impl ServerConfig {
    /// Reads and validates a server configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        Self::parse(path, &text)
    }

    /// Validates configuration text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let file: ServerFile = parse_toml(path, text)?;
        let v = V { path };
        let s = &file.server;
        let private_key = v.private_key(
            "server",
            s.private_key.as_ref(),
            s.private_key_file.as_ref(),
        )?;
        let address = v.cidr("server.address", &s.address)?;
        v.ifname("server.tun", &s.tun)?;
        v.budget("server.budget_packets", s.budget_packets)?;
        let reinjection = v.reinjection("server", s.reinjection.as_ref(), s.rej_min_ms)?;
        let rate_control = v.rate_control("server", s.rate_control, s.rate_control_max_queue_ms)?;
        let codel_target = v.codel_target("server", s.codel_target_ms)?;
        let ack_ride_wait = v.ack_ride_wait("server", s.ack_ride_wait_ms)?;
        let dispatch = v.dispatch(
            "server",
            s.dispatch,
            s.dispatch_horizon_us,
            s.dispatch_rt_priority,
        )?;
        let policies = v.policies(
            "server",
            s.policy.as_ref(),
            s.redundant_links,
            s.redundant_align,
            &file.rules,
            &file.overflow,
        )?;
        let session_timeout = match s.session_timeout_s {
            None => Duration::from_secs(180),
            Some(t) if t.is_finite() && (1.0..=86_400.0).contains(&t) => Duration::from_secs_f64(t),
            Some(t) => {
                return Err(v.err(
                    "server.session_timeout_s",
                    t,
                    "seconds from 1 to 86400 (a live client is heard every second)",
                ));
            }
        };
        if s.listen.is_empty() {
            return Err(v.err(
                "server.listen",
                "[]",
                "at least one address such as \"0.0.0.0:51820\"",
            ));
        }
        if let Some(m) = s.mtu
            && !(576..=9000).contains(&m)
        {
            return Err(v.err("server.mtu", m, "576 to 9000 bytes"));
        }
        let mut peers = Vec::new();
        for (i, p) in file.peers.iter().enumerate() {
            let key = v.public_key(&format!("peers[{i}].public_key"), &p.public_key)?;
            if peers.iter().any(|(k, _, _)| *k == key) {
                return Err(v.err(
                    format!("peers[{i}].public_key"),
                    format!("{:?}", p.public_key),
                    "a key no other peer has",
                ));
            }
            if peers.iter().any(|(_, a, _)| *a == p.address) || p.address == address.0 {
                return Err(v.err(
                    format!("peers[{i}].address"),
                    p.address,
                    "an address no other peer (nor the server) has",
                ));
            }
            let name = p.name.clone().unwrap_or_else(|| format!("peer{i}"));
            peers.push((key, p.address, name));
        }
        let control_socket = s
            .control_socket
            .clone()
            .unwrap_or_else(|| PathBuf::from("/run/latebind/server.sock"));
        Ok(Self {
            private_key,
            address,
            peers,
            control_socket,
            reinjection,
            rate_control,
            codel_target,
            ack_ride_wait,
            policies,
            dispatch,
            session_timeout,
            file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example client file with real keys and `extra` lines added to `[client]`.
    fn client_text(extra: &str) -> String {
        let key = StaticSecret::from_random_bytes([7; 32]);
        let server = StaticSecret::from_random_bytes([9; 32]).public_key();
        include_str!("../../../examples/client.toml")
            .replace(
                "\"REPLACE: output of `latebind genkey`\"",
                &format!("\"{}\"", key.to_base64()),
            )
            .replace(
                "\"REPLACE: `latebind pubkey < server.key`\"",
                &format!("\"{server}\""),
            )
            .replace(
                "reinjection = \"srtt+rttvar-delta\"\nrej_min_ms = 10.0\n",
                extra,
            )
    }

    #[test]
    fn example_client_file_parses_with_the_default_reinjection() {
        let c = ClientConfig::parse(Path::new("c.toml"), &client_text("")).unwrap();
        assert_eq!(
            c.reinjection,
            (ReinjectTimer::SrttRttvarDelta, Duration::from_millis(10))
        );
        let c = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("reinjection = \"minrtt+rttvar\"\nrej_min_ms = 2.5\n"),
        )
        .unwrap();
        assert_eq!(
            c.reinjection,
            (ReinjectTimer::MinRttRttvar, Duration::from_micros(2500))
        );
    }

    #[test]
    fn example_rules_and_policies_parse() {
        let c = ClientConfig::parse(Path::new("c.toml"), &client_text("")).unwrap();
        assert_eq!(c.policies.default, PolicyKind::Auto);
        // Without the key: the same default as the example states.
        let text = client_text("");
        assert!(
            text.contains("\npolicy = \"auto\"\n"),
            "the example states it"
        );
        let c = ClientConfig::parse(
            Path::new("c.toml"),
            &text.replace("\npolicy = \"auto\"\n", "\n"),
        )
        .unwrap();
        assert_eq!(c.policies.default, PolicyKind::Auto);
        assert_eq!(c.policies.rules.len(), 1);
        assert_eq!(c.policies.rules[0].dscp, Some(46));
        assert_eq!(c.policies.rules[0].policy, PolicyKind::Redundant);
        assert_eq!(c.policies.overflow.k, 0.5);
        let text = client_text("").replace("dscp = 46 ", "prefix = \"10.1.0.0/16\" ");
        let c = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(c.policies.rules[0].prefix.map(|p| p.1), Some(96 + 16));
    }

    #[test]
    fn bad_policy_keys_name_key_value_and_expectation() {
        let e = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("").replace("policy = \"redundant\"", "policy = \"fastest\""),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rules[0].policy = \"fastest\""), "{e}");
        assert!(e.contains("min-rtt, aggregate, overflow, redundant"), "{e}");
        let e = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("").replace("dscp = 46 ", "ports = [6000, 5000] "),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rules[0].ports = [6000, 5000]"), "{e}");
        let e = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("").replace("k = 0.5", "k = -1.0"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("overflow.k = -1"), "{e}");
    }

    #[test]
    fn a_link_capacity_is_a_rate_in_mbps() {
        let c = ClientConfig::parse(Path::new("c.toml"), &client_text("")).unwrap();
        assert_eq!(c.file.links[0].capacity_mbps, None);
        let text = client_text("").replacen("# capacity_mbps = 20.0", "capacity_mbps = 20.0", 1);
        let c = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(c.file.links[0].capacity_mbps, Some(20.0));
        let text = client_text("").replacen("# capacity_mbps = 20.0", "capacity_mbps = 0.0", 1);
        let e = ClientConfig::parse(Path::new("c.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links[0].capacity_mbps = 0") && e.contains("a rate above 0"),
            "{e}"
        );
    }

    #[test]
    fn session_timeout_defaults_to_180_s_and_takes_seconds_from_1() {
        let text = include_str!("../../../examples/server.toml")
            .replace(
                "\"REPLACE: output of `latebind genkey`\"",
                &format!(
                    "\"{}\"",
                    StaticSecret::from_random_bytes([5; 32]).to_base64()
                ),
            )
            .replace(
                "\"REPLACE: the client's public key\"",
                &format!(
                    "\"{}\"",
                    StaticSecret::from_random_bytes([6; 32]).public_key()
                ),
            );
        let s = ServerConfig::parse(Path::new("s.toml"), &text).unwrap();
        assert_eq!(s.session_timeout, Duration::from_secs(180));
        let text = text.replacen("# session_timeout_s = 180.0", "session_timeout_s = 0.5", 1);
        let e = ServerConfig::parse(Path::new("s.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("server.session_timeout_s = 0.5: expected seconds from 1 to 86400"),
            "{e}"
        );
    }

    #[test]
    fn a_links_server_is_an_address_or_a_host_name_with_a_port() {
        for (text, want) in [
            (
                "192.0.2.10:51820",
                Some(ServerAddr::Addr("192.0.2.10:51820".parse().unwrap())),
            ),
            (
                "[2001:db8::1]:443",
                Some(ServerAddr::Addr("[2001:db8::1]:443".parse().unwrap())),
            ),
            (
                "vpn.example.com:51820",
                Some(ServerAddr::Name {
                    host: "vpn.example.com".into(),
                    port: 51820,
                }),
            ),
            (
                "vpn:1",
                Some(ServerAddr::Name {
                    host: "vpn".into(),
                    port: 1,
                }),
            ),
            ("vpn.example.com", None),
            ("vpn.example.com:0", None),
            ("vpn.example.com:70000", None),
            ("vpn_example.com:51820", None),
            ("-vpn.example.com:51820", None),
            ("..:51820", None),
            (":51820", None),
            ("192.0.2.300:51820", None),
            ("2001:db8::1:51820", None),
        ] {
            assert_eq!(ServerAddr::parse(text), want, "{text}");
        }
        let text = client_text("").replacen(
            "server = \"192.0.2.10:51820\"",
            "server = \"vpn.example.com\"",
            1,
        );
        let e = ClientConfig::parse(Path::new("c.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "links[0].server = \"vpn.example.com\": expected ip:port, [ipv6]:port or host:port"
            ),
            "{e}"
        );
        // A name is resolved by the client, not here; any bind address goes with it.
        let text = client_text("")
            .replacen(
                "server = \"192.0.2.10:51820\"",
                "server = \"vpn.example.com:51820\"",
                1,
            )
            .replacen("# bind = \"0.0.0.0:0\"", "bind = \"[::]:0\"", 1);
        let c = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert!(matches!(c.servers[0], ServerAddr::Name { .. }));
        assert_eq!(
            ServerAddr::parse("127.0.0.1:9")
                .unwrap()
                .resolve(Some(true))
                .unwrap(),
            "127.0.0.1:9".parse().unwrap()
        );
    }

    #[test]
    fn a_links_bind_address_must_have_its_servers_family() {
        let text = client_text("").replacen(
            "server = \"192.0.2.10:51820\"",
            "server = \"[2001:db8::10]:51820\"",
            1,
        );
        let c = ClientConfig::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(
            c.servers[0],
            ServerAddr::Addr("[2001:db8::10]:51820".parse().unwrap())
        );
        let text = text.replacen("# bind = \"0.0.0.0:0\"", "bind = \"0.0.0.0:0\"", 1);
        let e = ClientConfig::parse(Path::new("c.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("links[0].bind = 0.0.0.0:0: expected an IPv6 address, the family of links[0].server ([2001:db8::10]:51820)"),
            "{e}"
        );
    }

    #[test]
    fn dispatch_keys_default_off_and_bad_values_name_key_value_and_expectation() {
        let c = ClientConfig::parse(Path::new("c.toml"), &client_text("")).unwrap();
        assert_eq!(c.dispatch, None);
        let c = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("").replace(
                "dispatch = false\n",
                "dispatch = true\ndispatch_rt_priority = 50\n",
            ),
        )
        .unwrap();
        assert_eq!(
            c.dispatch,
            Some(Dispatch {
                horizon: DEFAULT_DISPATCH_HORIZON,
                rt_priority: Some(50)
            })
        );
        let c = ClientConfig::parse(
            Path::new("c.toml"),
            &client_text("")
                .replace("dispatch = false\n", "dispatch = true\n")
                .replace("dispatch_horizon_us = 1000.0", "dispatch_horizon_us = 0.0"),
        )
        .unwrap();
        assert_eq!(c.dispatch.unwrap().horizon, Duration::ZERO);
        for (from, to, key, expected) in [
            (
                "dispatch_horizon_us = 1000.0",
                "dispatch_horizon_us = -5.0",
                "client.dispatch_horizon_us = -5",
                "0 to 100000 µs",
            ),
            (
                "# dispatch_rt_priority = 50",
                "dispatch_rt_priority = 0",
                "client.dispatch_rt_priority = 0",
                "from 1 to 99",
            ),
        ] {
            let text = client_text("").replace(from, to);
            let e = ClientConfig::parse(Path::new("c.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key) && e.contains(expected), "{e}");
        }
    }

    #[test]
    fn bad_reinjection_keys_name_key_value_and_expectation() {
        let e = ClientConfig::parse(Path::new("c.toml"), &client_text("reinjection = \"rto\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("client.reinjection = \"rto\""), "{e}");
        assert!(
            e.contains("srtt+rttvar-delta, srtt+rttvar, minrtt+rttvar, off"),
            "{e}"
        );
        let e = ClientConfig::parse(Path::new("c.toml"), &client_text("rej_min_ms = -1.0\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("client.rej_min_ms = -1"), "{e}");
        assert!(e.contains("0 to 10000 ms"), "{e}");
    }

    #[test]
    fn ack_ride_wait_defaults_and_bad_values_name_key_value_and_expectation() {
        let parse = |text: &str| ClientConfig::parse(Path::new("c.toml"), text);
        let edit = |value: Option<&str>| {
            client_text("")
                .lines()
                .filter_map(|l| match l.starts_with("ack_ride_wait_ms = ") {
                    true => value.map(|v| format!("ack_ride_wait_ms = {v}")),
                    false => Some(l.to_string()),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let defaults = latebind_proto::Config::default();
        assert_eq!(
            parse(&edit(None)).unwrap().ack_ride_wait,
            defaults.ack_ride_wait
        );
        assert_eq!(
            parse(&edit(Some("1.5"))).unwrap().ack_ride_wait,
            Duration::from_micros(1500)
        );
        for bad in ["-1.0", "6.0", "nan"] {
            let e = parse(&edit(Some(bad))).unwrap_err().to_string();
            assert!(
                e.contains("client.ack_ride_wait_ms = ")
                    && e.contains("a time from 0 ms up to the acknowledgement delay (5 ms)"),
                "{e}"
            );
        }
    }

    #[test]
    fn queue_targets_default_and_bad_values_name_key_value_and_expectation() {
        // The example sets both keys: each case edits or drops the key's line.
        let keys = ["codel_target_ms", "rate_control_max_queue_ms"];
        let edit = |key: &str, value: Option<&str>| {
            client_text("")
                .lines()
                .filter_map(|l| match l.starts_with(&format!("{key} = ")) {
                    true => value.map(|v| format!("{key} = {v}")),
                    false => Some(l.to_string()),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let parse = |text: &str| ClientConfig::parse(Path::new("c.toml"), text);
        let defaults = latebind_proto::Config::default();
        let c = parse(&edit(keys[0], None)).unwrap();
        assert_eq!(c.codel_target, defaults.codel_target);
        let c = parse(&edit(keys[1], None)).unwrap();
        assert_eq!(c.rate_control.1, defaults.rate_control_max_queue);
        let c = parse(&edit(keys[0], Some("30.0"))).unwrap();
        assert_eq!(c.codel_target, Duration::from_millis(30));
        for key in keys {
            for bad in ["0.0", "5000.0", "nan"] {
                let e = parse(&edit(key, Some(bad))).unwrap_err().to_string();
                assert!(
                    e.contains(&format!("client.{key} = "))
                        && e.contains("a time from 1 to 1000 ms"),
                    "{e}"
                );
            }
        }
    }
}
