//! Binding policies: which link the packet at the head of the per-flow queues goes on.
//!
//! The binding point calls a policy only when a packet is ready to leave; the policy sees
//! every link's live state ([`LinkView`]) and answers with a link that has room *now*, or
//! [`Binding::Wait`] when the best link for this packet is busy and will free up sooner
//! than any other would deliver it. Policies are plug-ins (as quinn's congestion
//! controllers). Each flow uses one, chosen by the configuration's rules
//! ([`PolicyKind`], [`PolicyRule`]):
//!
//! - [`MinRtt`]: the link that delivers soonest (the default);
//! - [`Aggregate`]: earliest completion first: a flow with a backlog also uses slower
//!   links, when a packet sent there arrives before the backlog would have drained through
//!   the faster one, so one flow gets the sum of the links; such a link may be sent the
//!   packet of the backlog that arrives in order there ([`Binding::Behind`]);
//! - [`Overflow`]: the bonding slides' weighted round robin, a primary link first and the
//!   others with weights that follow the primary's reported loss (AWI, IWI, DWD);
//! - redundant: MinRtt's choice, and a copy on the next best links (the engine sends the
//!   copies, see `Endpoint`).
//!
//! Backup links ([`usable`]) are used by every policy only when no other link is up.

use core::fmt;
use core::time::Duration;

use crate::ids::{FlowId, LinkId};
use crate::link::{LinkState, LinkView};
use crate::time::Instant;

/// What a policy knows about the packet to bind.
#[derive(Clone, Copy, Debug)]
pub struct PacketMeta {
    /// The flow it belongs to.
    pub flow: FlowId,
    /// Size of the datagram it will become, bytes.
    pub len: usize,
    /// DSCP-marked latency-sensitive flow.
    pub latency_sensitive: bool,
    /// Bytes of the flow waiting above the binding point, this packet included.
    pub backlog: usize,
}

/// The binding policy of a flow.
#[derive(Clone, Copy, Debug, Default, Eq, PartialEq, Hash)]
pub enum PolicyKind {
    /// The link that delivers soonest ([`MinRtt`]).
    MinRtt,
    /// Spread one flow over every link by earliest completion ([`Aggregate`]).
    Aggregate,
    /// A primary link first, the others for the excess ([`Overflow`]).
    Overflow,
    /// MinRtt's link, and copies on the next best links; the receiver keeps the first.
    Redundant,
    /// A TCP or QUIC flow is bound as [`Self::Aggregate`] while at least two links can
    /// share it, any other flow (and a TCP or QUIC flow on one link) as
    /// [`Self::MinRtt`]: see [`Self::resolve`]. The default.
    #[default]
    Auto,
}

impl PolicyKind {
    /// The names used in configuration files.
    pub const NAMES: [&'static str; 5] = ["min-rtt", "aggregate", "overflow", "redundant", "auto"];
    const ALL: [Self; 5] = [
        Self::MinRtt,
        Self::Aggregate,
        Self::Overflow,
        Self::Redundant,
        Self::Auto,
    ];

    /// The configuration name.
    pub fn name(self) -> &'static str {
        Self::NAMES[Self::ALL.iter().position(|k| *k == self).expect("listed")]
    }

    /// The policy a flow of this kind is bound by now. `Auto` resolves to `Aggregate`
    /// for a flow whose transport is `reliable` (TCP or QUIC,
    /// [`crate::classify::PacketInfo::reliable`]) while `spreads` (at least two links
    /// up whose packets lag the fastest path's by no more than the receiver waits for a
    /// gap: those an aggregate flow may use), else to `MinRtt`. TCP and QUIC deliver in
    /// order and re-send what is lost, so the receiver's wait for a packet of another
    /// link or for a resend costs them nothing they would not wait for anyway, and a
    /// transfer gets the links' sum instead of the one link that delivers soonest. A
    /// datagram flow (a call, a game) keeps the link that delivers soonest, and is not
    /// held for resends. On one link the two are the same but for CoDel's target, which for an aggregate
    /// flow covers the links' pauses: that queue is worth its delay only where it lets
    /// the flow use another link.
    #[inline]
    pub fn resolve(self, reliable: bool, spreads: bool) -> Self {
        match self {
            Self::Auto if spreads && reliable => Self::Aggregate,
            Self::Auto => Self::MinRtt,
            kind => kind,
        }
    }
}

impl core::str::FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::NAMES
            .iter()
            .position(|n| *n == s)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| format!("one of {}", Self::NAMES.join(", ")))
    }
}

/// A rule that maps flows to a policy. Every condition that is set must hold (an unset
/// one matches everything); the first matching rule wins, else the default policy.
#[derive(Clone, Debug, Default, Eq, PartialEq)]
pub struct PolicyRule {
    /// DiffServ code point of the flow's first packet.
    pub dscp: Option<u8>,
    /// IP protocol (6 TCP, 17 UDP, ...).
    pub protocol: Option<u8>,
    /// Source or destination port within this range (inclusive).
    pub ports: Option<(u16, u16)>,
    /// Source or destination address within this prefix (IPv4 addresses as
    /// IPv4-mapped IPv6, `::ffff:a.b.c.d`, prefix length counted on the 128 bits).
    pub prefix: Option<([u8; 16], u8)>,
    /// The policy of matching flows.
    pub policy: PolicyKind,
}

impl PolicyRule {
    /// Whether a flow whose first packet is `info` matches.
    pub fn matches(&self, info: &crate::classify::PacketInfo) -> bool {
        let k = &info.key;
        self.dscp.is_none_or(|d| d == info.dscp)
            && self.protocol.is_none_or(|p| p == k.protocol)
            && self.ports.is_none_or(|(lo, hi)| {
                (lo..=hi).contains(&k.src_port) || (lo..=hi).contains(&k.dst_port)
            })
            && self.prefix.is_none_or(|(net, len)| {
                in_prefix(&k.src, &net, len) || in_prefix(&k.dst, &net, len)
            })
    }
}

/// Parses an address prefix for [`PolicyRule::prefix`]: `a.b.c.d/len` (as IPv4-mapped
/// IPv6, the engine's flow keys) or an IPv6 prefix.
pub fn parse_prefix(text: &str) -> Option<([u8; 16], u8)> {
    let (addr, len) = text.split_once('/')?;
    let len: u8 = len.parse().ok()?;
    match addr.parse::<core::net::IpAddr>().ok()? {
        core::net::IpAddr::V4(a) if len <= 32 => Some((a.to_ipv6_mapped().octets(), 96 + len)),
        core::net::IpAddr::V6(a) if len <= 128 => Some((a.octets(), len)),
        _ => None,
    }
}

fn in_prefix(addr: &[u8; 16], net: &[u8; 16], len: u8) -> bool {
    let len = usize::from(len.min(128));
    let (bytes, bits) = (len / 8, len % 8);
    addr[..bytes] == net[..bytes]
        && (bits == 0 || (addr[bytes] ^ net[bytes]) & (0xff << (8 - bits)) == 0)
}

/// The policy of a flow whose first packet is `info`: the first matching rule's, else
/// `default`.
pub fn policy_for(
    rules: &[PolicyRule],
    default: PolicyKind,
    info: &crate::classify::PacketInfo,
) -> PolicyKind {
    rules
        .iter()
        .find(|r| r.matches(info))
        .map_or(default, |r| r.policy)
}

/// A policy's answer.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Binding {
    /// Bind the packet to this link now. The link must have room (see [`LinkView::has_room`]).
    Link(LinkId),
    /// Bind to this link now (it has room) not the flow's head packet but the one that
    /// this many bytes of the flow's backlog (datagrams, as [`PacketMeta::len`] counts
    /// them) are ahead of: the packet the faster links would deliver about when one sent
    /// here arrives ([`Aggregate`]), so the flow arrives in order. The queues take the
    /// last packet if the backlog is shorter, and never give the link a packet ahead of
    /// one it took from behind that is still ahead of the flow's head: `Behind(id, 0)` is
    /// the head, or the first packet past those.
    Behind(LinkId, usize),
    /// Keep the packet above the binding point for now.
    Wait,
}

impl Binding {
    /// The link the packet goes on, if any.
    pub fn link(self) -> Option<LinkId> {
        match self {
            Self::Link(id) | Self::Behind(id, _) => Some(id),
            Self::Wait => None,
        }
    }
}

/// A binding policy.
pub trait BindPolicy: fmt::Debug + Send {
    /// Short name, as used in configuration files.
    fn name(&self) -> &'static str;
    /// Chooses a link for `packet`. `links` lists every link (any state) in id order.
    fn bind(&mut self, now: Instant, packet: &PacketMeta, links: &[LinkView]) -> Binding;

    /// The peer reported, cumulatively, `received` packets and `lost` packets missing on
    /// `link` (LOSS_REPORT). Policies that follow loss override this.
    fn on_loss_report(&mut self, _link: LinkId, _received: u64, _lost: u64) {}
}

/// Lowest expected delivery time: for each usable link, the time until the packet would
/// have a slot below the binding point, plus the time to drain what is ahead of it, plus
/// its own transmission time, plus half the smoothed RTT. Backup links only count when no
/// other link is up. Waits when the winner is momentarily full.
#[derive(Clone, Debug, Default)]
pub struct MinRtt;

impl MinRtt {
    /// Expected time from now until `len` bytes bound to `link` arrive at the peer, in
    /// nanoseconds: the wait for the pacer or for the packets already below the binding
    /// point to drain, whichever is longer, plus the packet's own transmission time, plus
    /// the forward path's delay ([`Self::forward_rtt`], halved). Both drain at
    /// [`Self::drain_rate`], the link's bottleneck as far as the sender knows it; when
    /// that is unknown draining counts as instantaneous.
    pub fn expected_delivery_ns(now: Instant, len: usize, link: &LinkView) -> u64 {
        Self::delivery_at_rate_ns(
            now,
            len,
            link,
            Self::drain_rate(link),
            Self::forward_rtt(link),
        )
    }

    /// Twice the forward path's delay as far as rate control has measured the two
    /// directions: the smoothed RTT with the forward queue counted whole and the way
    /// back's queue not at all (`srtt + queue_delay - return_delay`, at least the minimum
    /// RTT). Half the smoothed RTT counts half of each queue: a download's packets wait
    /// at the bottleneck for all of its queue, their acknowledgements for none of it.
    /// Without rate control both queues read zero and this is the smoothed RTT.
    #[inline]
    pub fn forward_rtt(l: &LinkView) -> Duration {
        (l.srtt + l.queue_delay)
            .saturating_sub(l.return_delay)
            .max(l.min_rtt)
    }

    /// The rate at which a link takes packets, bytes per second (0: unknown): the slower
    /// of the local interface's measured rate and the rate the link's window allows
    /// (rate control's share of the bottleneck). A link whose bottleneck is in the
    /// network (a download's, or a modem's buffer) drains at the latter however fast its
    /// interface is: counted at the interface's rate alone, a packet's time at a 2 Mbit/s
    /// bottleneck (6 ms) was left out, and only half the queue there (in half the
    /// smoothed RTT) counted, so a bulk download took a 2 Mbit/s link 5 ms away over a
    /// 20 Mbit/s one 20 ms away, where the same upload did not (`docs/RESULTS.md` 8.4).
    /// The acknowledgement-based delivery rate is not used: measured over probes alone it
    /// is application-limited and would make an idle link look seconds slow.
    #[inline]
    pub fn drain_rate(l: &LinkView) -> f64 {
        Self::slower_known(l.tx_rate, l.cc_rate)
    }

    /// The slower of two rates, bytes per second, of those known (above 0); 0 if neither is.
    #[inline]
    fn slower_known(a: f64, b: f64) -> f64 {
        match (a > 0.0, b > 0.0) {
            (true, true) => a.min(b),
            (true, false) => a,
            (false, true) => b,
            (false, false) => 0.0,
        }
    }

    /// [`Self::expected_delivery_ns`] with the interface sending at `rate` bytes per
    /// second (0: no serialization counted) and the path's RTT taken as `rtt`.
    #[inline]
    fn delivery_at_rate_ns(
        now: Instant,
        len: usize,
        link: &LinkView,
        rate: f64,
        rtt: Duration,
    ) -> u64 {
        let pacer_wait_ns = link.pacer_next.as_nanos().saturating_sub(now.as_nanos());
        // Plain float arithmetic: this runs for every link on every packet.
        // `as_nanos` is a u128; converting that to f64 is a slow libcall.
        let half_rtt = rtt.as_secs_f64() * 0.5e9;
        if rate <= 0.0 && pacer_wait_ns == 0 {
            // The common case of an unpaced link whose interface never backed up: the
            // general formula below adds only zeros to `half_rtt`.
            return half_rtt as u64;
        }
        let per_byte_ns = if rate > 0.0 { 1e9 / rate } else { 0.0 };
        let ahead = (link.below_binding * len) as f64 * per_byte_ns;
        let own = len as f64 * per_byte_ns;
        let pacer_wait = pacer_wait_ns as f64;
        (pacer_wait.max(ahead) + own + half_rtt) as u64
    }

    /// [`Self::expected_delivery_ns`] plus twice the link's measured RTT variation: a
    /// delivery time the packet will rarely exceed, rather than its mean. A link whose
    /// delay jumps (a cellular scheduler's pauses) is chosen only when it is sooner by
    /// more than its jumps; on steady links it is the expected delivery. (Before a
    /// sample the variation is a guess, and the guessed RTT is pessimistic already.)
    pub fn likely_delivery_ns(now: Instant, len: usize, link: &LinkView) -> u64 {
        let var = if link.rtt_measured {
            2 * link.rttvar.as_nanos() as u64
        } else {
            0
        };
        Self::expected_delivery_ns(now, len, link).saturating_add(var)
    }

    /// When the last byte of a flow's backlog (`packet.backlog`, the packet at its head
    /// included) would arrive if the whole of it went on `link`: the head packet's
    /// [`Self::expected_delivery_ns`] plus the rest at the link's [`Self::drain_rate`].
    /// The flow's throughput follows this, not the head packet's delivery: a bulk flow
    /// judged by its head packet alone stays on a 2 Mbit/s link 2 ms away beside a
    /// 50 Mbit/s one 20 ms away, since each packet in turn arrives sooner there
    /// (`docs/RESULTS.md` 8.4).
    ///
    /// While a link's rate control is in its startup ([`LinkView::searching`]) the rate
    /// its window allows is only where its search stands: a backlog given to it fills the
    /// window, which then doubles each round trip, so the backlog counts at twice that
    /// rate (or the interface's, if slower). A link judged by its window's rate alone
    /// would never be given the backlog that makes the search go on: beside 5 Mbit/s 20 ms
    /// away, a 50 Mbit/s link 40 ms away starts at 4.8 Mbit/s over its RTT, and an upload
    /// got 4.5 Mbit/s (44 now; `docs/RESULTS.md` 8.5).
    pub fn backlog_delivery_ns(now: Instant, packet: &PacketMeta, link: &LinkView) -> u64 {
        let rate = if link.searching {
            Self::slower_known(link.tx_rate, 2.0 * link.cc_rate)
        } else {
            Self::drain_rate(link)
        };
        let head = Self::delivery_at_rate_ns(now, packet.len, link, rate, Self::forward_rtt(link));
        if rate <= 0.0 {
            return head;
        }
        let rest = packet.backlog.saturating_sub(packet.len) as f64 * 1e9 / rate;
        head.saturating_add(rest as u64)
    }

    /// [`Self::expected_delivery_ns`] as a duration.
    pub fn expected_delivery(now: Instant, len: usize, link: &LinkView) -> Duration {
        Duration::from_nanos(Self::expected_delivery_ns(now, len, link))
    }
}

/// A flow with at most this many bytes waiting above the binding point is sparse.
const SPARSE_BACKLOG: usize = 1500;

/// The links a policy may choose from: up links, backups only when no other link is up.
pub fn usable(links: &[LinkView]) -> impl Iterator<Item = &LinkView> {
    let primary_up = links.iter().any(|l| l.state == LinkState::Up && !l.backup);
    links
        .iter()
        .filter(move |l| l.state == LinkState::Up && (l.backup != primary_up))
}

/// The smallest [`LinkView::max_datagram`] of the links that are not down: a datagram of
/// at most this many bytes fits every link a policy may choose, and
/// [`links_that_carry`] has nothing to hide.
pub fn smallest_datagram(links: &[LinkView]) -> usize {
    links
        .iter()
        .filter(|l| l.state != LinkState::Down)
        .map(|l| l.max_datagram)
        .min()
        .unwrap_or(usize::MAX)
}

/// The links a policy may choose from for a datagram of `len` bytes: links that would
/// have to fragment it are hidden (shown down, in `scratch`), so that a packet goes only
/// where it travels whole (a link's path MTU smaller than the tunnel's), or waits for
/// such a link that is suspect. When no link that is not down carries it whole, every
/// link is offered as it is: the packet then leaves fragmented rather than not at all.
/// `smallest` is [`smallest_datagram`] of `links`; the common case (the packet fits
/// every link) costs one comparison and no copy.
pub fn links_that_carry<'a>(
    links: &'a [LinkView],
    len: usize,
    smallest: usize,
    scratch: &'a mut Vec<LinkView>,
) -> &'a [LinkView] {
    if len <= smallest {
        return links;
    }
    scratch.clear();
    scratch.extend_from_slice(links);
    if hide_links_too_small(scratch, len) {
        scratch
    } else {
        links
    }
}

/// Whether a link that is not down carries a datagram of `len` bytes whole. (A suspect
/// one counts: it is likely only slow for a moment, and the packet is better kept for it
/// than sent where it is fragmented, or lost on a path that drops what it cannot carry.)
fn carried_whole(links: &[LinkView], len: usize) -> bool {
    links
        .iter()
        .any(|l| l.state != LinkState::Down && l.max_datagram >= len)
}

/// [`links_that_carry`] in place: shows down the links too small for a datagram of `len`
/// bytes, if a link that is not down carries it whole, and returns whether one does (if
/// not, changes nothing).
pub fn hide_links_too_small(links: &mut [LinkView], len: usize) -> bool {
    if !carried_whole(links, len) {
        return false;
    }
    for l in links.iter_mut().filter(|l| l.max_datagram < len) {
        l.state = LinkState::Down;
    }
    true
}

impl BindPolicy for MinRtt {
    fn name(&self) -> &'static str {
        "min-rtt"
    }

    fn bind(&mut self, now: Instant, packet: &PacketMeta, links: &[LinkView]) -> Binding {
        // The minimum over `usable(links)` of (delivery, id), in one pass: the best
        // primary link that is up and, as long as there is none, the best backup.
        let mut primary: Option<(u64, LinkId, &LinkView)> = None;
        let mut backup: Option<(u64, LinkId, &LinkView)> = None;
        // A packet of a sparse flow (less than a full-size packet waits, this one
        // included), a reinjection, or a latency-sensitive flow's is judged by when it
        // would surely arrive; a flow with a backlog by when its backlog would have
        // arrived, which is what its throughput follows.
        let sure = packet.latency_sensitive || packet.backlog <= SPARSE_BACKLOG;
        let delivery = |l: &LinkView| {
            if sure {
                Self::likely_delivery_ns(now, packet.len, l)
            } else {
                Self::backlog_delivery_ns(now, packet, l)
            }
        };
        for l in links {
            if l.state != LinkState::Up {
                continue;
            }
            if !l.backup {
                let key = (delivery(l), l.id);
                if primary.is_none_or(|(k, id, _)| key < (k, id)) {
                    primary = Some((key.0, key.1, l));
                }
            } else if primary.is_none() {
                let key = (delivery(l), l.id);
                if backup.is_none_or(|(k, id, _)| key < (k, id)) {
                    backup = Some((key.0, key.1, l));
                }
            }
        }
        let Some((_, id, home)) = primary.or(backup) else {
            return Binding::Wait;
        };
        if home.has_room(now) {
            return Binding::Link(id);
        }
        if sure {
            return Binding::Wait;
        }
        // The flow's link is full: the packet at the head goes on a usable link (primary,
        // or backup when no primary is up) that has room, if it arrives there sooner than
        // through the flow's link once that has room (two links of nearly the same delay
        // thus share a flow's backlog, as before the backlog counted).
        let via_home = Self::expected_delivery_ns(now, packet.len, home);
        let mut spill: Option<(u64, LinkId)> = None;
        for l in usable(links).filter(|l| l.has_room(now)) {
            let key = (Self::expected_delivery_ns(now, packet.len, l), l.id);
            if key.0 < via_home && spill.is_none_or(|s| key < s) {
                spill = Some(key);
            }
        }
        spill.map_or(Binding::Wait, |(_, id)| Binding::Link(id))
    }
}

/// Earliest completion first: a packet goes on the link where it arrives soonest
/// ([`MinRtt::expected_delivery_ns`]); when that link has no room, on another link that has
/// room if the packet would arrive there before the flow's backlog could have drained
/// through the best link (its arrival there + backlog / the best link's rate). A flow with
/// a standing backlog thus fills every link, each in proportion to how fast it delivers,
/// while a flow without one stays on the fastest link; packets sent on a slower link are
/// the ones the faster link could not have delivered sooner, so they arrive roughly in
/// order (the receiver's reorder buffer absorbs the rest).
///
/// With `arrival_order`, a slower link may be sent, instead of the head, the packet of the
/// backlog that arrives in order there ([`Binding::Behind`], `Self::behind`).
#[derive(Clone, Debug, Default)]
pub struct Aggregate {
    /// Send a slower link the packet that arrives in order there where that holds less at
    /// the receiver than the head (`Config::aggregate_arrival_order`).
    pub arrival_order: bool,
}

impl Aggregate {
    /// A link's drain rate, bytes per second: the slower of the interface's measured
    /// rate and the rate control's estimate of the bottleneck (a link whose bottleneck
    /// is in the network drains at the latter however fast its interface is), else the
    /// acknowledged delivery rate, else unknown (0).
    fn rate(l: &LinkView) -> f64 {
        let r = MinRtt::drain_rate(l);
        if r > 0.0 { r } else { l.delivery_rate }
    }

    /// When a packet bound to `link` now would arrive: [`MinRtt::expected_delivery_ns`],
    /// except that a link with nothing below the binding point is judged by its pacer
    /// and its RTT alone. Its interface rate was measured from what left it: on a link
    /// that carried only keepalives, from packets each of which waited for the
    /// interface to start (a cellular scheduler's grant, a trace's next delivery
    /// opportunity: the Verizon LTE uplink read as 0.03 Mb/s), so the link was never
    /// chosen and never measured again. The RTT, from the same padded probes and from
    /// data, holds that wait already.
    ///
    /// A link with nothing in flight that a flow has used (rate control knows its
    /// capacity) is judged by the largest RTT sample of the last two seconds instead, if
    /// that is below its smoothed RTT, plus the packet's time at that capacity. The
    /// smoothed RTT holds the queue the link's own traffic made before it stopped, which
    /// has drained since, and moves an eighth of the way per sample, one keepalive a
    /// second on a link no flow uses: a sender that paces at the rate it measures (BBR)
    /// keeps too short a backlog to spill onto a link judged 70 ms slower than it is, and
    /// never measures that link's rate again (`docs/RESULTS.md` 8.1). A link no flow
    /// has used keeps its smoothed RTT: a path that pauses for seconds answers some
    /// keepalives at once, and the packets spilled onto it would wait out its pauses.
    fn arrival_ns(now: Instant, len: usize, link: &LinkView) -> u64 {
        if link.below_binding > 0 {
            return MinRtt::delivery_at_rate_ns(now, len, link, link.tx_rate, link.srtt);
        }
        if let Some(rtt) = link.recent_rtt() {
            let own = len as f64 * 1e9 / link.capacity;
            return MinRtt::delivery_at_rate_ns(now, len, link, 0.0, rtt)
                .saturating_add(own as u64);
        }
        MinRtt::delivery_at_rate_ns(now, len, link, 0.0, link.srtt)
    }
}

impl BindPolicy for Aggregate {
    fn name(&self) -> &'static str {
        "aggregate"
    }

    fn bind(&mut self, now: Instant, packet: &PacketMeta, links: &[LinkView]) -> Binding {
        // The two soonest arrivals over the usable links, before loss is weighed: a packet
        // lost on one link is sent again on the soonest of the others.
        let mut first: Option<(u64, LinkId)> = None;
        let mut second: Option<u64> = None;
        for l in usable(links) {
            let key = (Self::arrival_ns(now, packet.len, l), l.id);
            if first.is_none_or(|f| key < f) {
                second = first.map(|f| f.0);
                first = Some(key);
            } else if second.is_none_or(|s| key.0 < s) {
                second = Some(key.0);
            }
        }
        let Some((soonest, soonest_id)) = first else {
            return Binding::Wait;
        };
        // In one pass, with loss weighed: the link where the packet is expected soonest,
        // and the soonest of those with room.
        let mut best: Option<(u64, LinkId, &LinkView)> = None;
        let mut best_with_room: Option<(u64, LinkId)> = None;
        for l in usable(links) {
            let raw = Self::arrival_ns(now, packet.len, l);
            let elsewhere = if l.id == soonest_id {
                second.unwrap_or(raw)
            } else {
                soonest
            };
            let key = (Self::expected_arrival_ns(raw, l, elsewhere), l.id);
            if best.is_none_or(|(e, id, _)| key < (e, id)) {
                best = Some((key.0, key.1, l));
            }
            if l.has_room(now) && best_with_room.is_none_or(|b| key < b) {
                best_with_room = Some(key);
            }
        }
        let Some((best_arrival, best_id, best)) = best else {
            return Binding::Wait;
        };
        if best.has_room(now) {
            return Binding::Link(best_id);
        }
        let rate = Self::rate(best);
        if rate <= 0.0 {
            return Binding::Wait;
        }
        // When the backlog would have finished arriving through the best link.
        let completion = best_arrival as f64 + packet.backlog as f64 * 1e9 / rate;
        match best_with_room {
            Some((arrival, id)) if (arrival as f64) < completion => {
                if self.arrival_order {
                    Self::behind(now, packet, links, id)
                } else {
                    Binding::Link(id)
                }
            }
            _ => Binding::Wait,
        }
    }
}

impl Aggregate {
    /// The binding for link `id`, which has room but is not where the flow's head packet
    /// arrives soonest. Sent there, the head packet would arrive after the packets behind
    /// it that the links ahead (where it would arrive sooner) carry, and the receiver
    /// would hold them all for it: the flow's trip grows by the links' delay spread. So
    /// `id` may take instead the packet that the links ahead, each from its own arrival
    /// on at its own rate, would deliver about when one sent on `id` now arrives
    /// ([`Binding::Behind`]; earliest-arrival scheduling), so that the flow arrives in
    /// order.
    ///
    /// That place is a forecast, off by up to `err` (both links' RTT variation and a
    /// packet's time on the link ahead) either way. Aimed early by `err` (the packet the
    /// links ahead would deliver `err` after one sent on `id` now arrives), the packet
    /// seldom comes after the packets behind it in the flow, and waits at the receiver
    /// for the packets ahead of it; aimed late, the links ahead's packets wait for it. So
    /// the aim puts the wait on the fewer bytes: early by `err` times `(ahead - rate) /
    /// (ahead + rate)`, `rate` being `id`'s and `ahead` the links ahead's sum, which goes
    /// smoothly from early by `err` beside much faster links to late by `err` beside
    /// much slower ones (a switch between the two at equal rates flipped with a cellular
    /// link's swings and stalled the flow, `docs/RESULTS.md` 21.3). A link ahead that
    /// pauses (a cellular uplink's scheduling gaps) delivers the packets ahead later than
    /// the receiver's hold, which then waits on while that link has not delivered past
    /// the gap (`RxFlow::link_behind_gap` in `reorder.rs`): without that, aimed early,
    /// the simulator's download beside a cellular trace met its 1 s timeout in 6 of ten
    /// runs. Aimed late by `err` whatever the rates (until 21.3), each packet of a slow
    /// link held what the fast links ahead delivered over about `err`, longer when it
    /// came later still, and 21.2's ATT trace dragged the bond below the two fixed links
    /// alone. Rates are the slower of the drain rate and the rate acknowledgements
    /// measured. And it is taken only where it holds less at the receiver (bytes times
    /// seconds, per second) than the head would: sent from the head, the packet holds
    /// what the links ahead deliver over its lag; sent from behind, about `err` for each
    /// packet of `id` (at most, whichever way the aim puts the wait), and a packet lost
    /// on a link ahead holds those of `id` that come while it is found lost and sent
    /// again, where from the head its repair mostly fits in the lag. A slow link far
    /// away beside a fast one takes from behind; a fast link far away beside a slow,
    /// lossy one near takes the head (`docs/RESULTS.md` 8.7).
    fn behind(now: Instant, packet: &PacketMeta, links: &[LinkView], id: LinkId) -> Binding {
        let Some(link) = links.iter().find(|l| l.id == id) else {
            return Binding::Link(id);
        };
        let here = Self::arrival_ns(now, packet.len, link);
        let rate_of = |l: &LinkView| MinRtt::slower_known(Self::rate(l), l.delivery_rate);
        // The links ahead, each with its lag behind `id` (seconds).
        let ahead_links = || {
            usable(links).filter(|l| l.id != id).filter_map(move |l| {
                let there = Self::arrival_ns(now, packet.len, l);
                (there < here).then(|| (l, (here - there) as f64 / 1e9))
            })
        };
        let err = link.rttvar.as_secs_f64()
            + ahead_links()
                .map(|(l, _)| {
                    let packet_time = match rate_of(l) {
                        r if r > 0.0 => packet.len as f64 / r,
                        _ => 0.0,
                    };
                    l.rttvar.as_secs_f64() + packet_time
                })
                .fold(0.0, f64::max);
        let rate = rate_of(link);
        let rate_ahead: f64 = ahead_links().map(|(l, _)| rate_of(l)).sum();
        let aim = if rate + rate_ahead > 0.0 {
            err * (rate_ahead - rate) / (rate_ahead + rate)
        } else {
            err
        };
        let (mut ahead, mut held_head, mut held_behind) = (0.0, 0.0, rate * err);
        for (l, lag) in ahead_links() {
            let rate_l = rate_of(l);
            ahead += (lag + aim).max(0.0) * rate_l;
            held_head += lag * rate_l;
            // Found lost as the receiver's wait for a resend counts it (4.4), and sent
            // again over the link.
            let found = crate::link::found_lost_by(l.srtt, l.rttvar);
            let repair = (found + l.srtt / 2 + l.rttvar * 2).as_secs_f64();
            let losses = l.loss_rate * rate_l / packet.len as f64;
            held_behind += losses * rate * repair * repair / 2.0;
        }
        if ahead < packet.len as f64 || held_behind >= held_head {
            // The head, unless `id` already carries packets of the flow from behind it
            // (the queues then give it the first packet past those).
            return Binding::Behind(id, 0);
        }
        // Saturates for a huge product; the queues take the last packet then.
        Binding::Behind(id, ahead as usize)
    }

    /// The expected arrival of a packet whose arrival on `link` would be `raw_ns` if the
    /// link did not lose it: with the link's loss rate `p`, the packet is lost, found lost
    /// (the sender's time threshold, 9/8 of the link's smoothed RTT) and sent again on
    /// another link, arriving there `elsewhere_ns` later. A link that loses more thus
    /// takes a smaller share of a backlog, in proportion to what its losses delay the flow
    /// behind the reorder buffer, and its full share again as its loss rate decays.
    #[inline]
    fn expected_arrival_ns(raw_ns: u64, link: &LinkView, elsewhere_ns: u64) -> u64 {
        let found_lost = crate::link::loss_delay(link.srtt).as_secs_f64() * 1e9;
        arrival_counting_loss_ns(raw_ns, link.loss_rate, found_lost, elsewhere_ns)
    }
}

/// The expected arrival, nanoseconds from now, of a packet that arrives `raw_ns` from now
/// on a link unless the link loses it, which it does with probability `loss_rate`: it is
/// then found lost `found_lost_ns` after it left and sent again on another link, arriving
/// there `elsewhere_ns` from then.
#[inline]
pub(crate) fn arrival_counting_loss_ns(
    raw_ns: u64,
    loss_rate: f64,
    found_lost_ns: f64,
    elsewhere_ns: u64,
) -> u64 {
    if loss_rate <= 0.0 {
        return raw_ns;
    }
    let late = (found_lost_ns + elsewhere_ns as f64 - raw_ns as f64).max(0.0);
    raw_ns + (loss_rate * late) as u64
}

/// Parameters of [`Overflow`] (the bonding slides' names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OverflowParams {
    /// The primary link's fixed weight. Default 50.
    pub w_fixed: u32,
    /// Largest weight of a secondary link. Default 50.
    pub w_max: u32,
    /// AWI's gain: a secondary's weight grows by `k * lost / sent * w_fixed` per report.
    /// Default 0.5.
    pub k: f64,
    /// Interval of the weight updates (the loss reports). Default 50 ms.
    pub t_report: Duration,
    /// After this long without loss, DWD takes 1 off each secondary's weight per report.
    /// Default 250 ms.
    pub t_dwd: Duration,
}

impl Default for OverflowParams {
    fn default() -> Self {
        Self {
            w_fixed: 50,
            w_max: 50,
            k: 0.5,
            t_report: Duration::from_millis(50),
            t_dwd: Duration::from_millis(250),
        }
    }
}

/// The bonding slides' scheduler: a smooth weighted round robin between the primary link
/// (the first usable link in id order, weight `w_fixed`) and the secondary links, whose
/// weight starts at 0 and follows the loss the peer reports on the primary (LOSS_REPORT):
/// every `t_report`, AWI adds `k * lost / sent * w_fixed`, IWI (weight 0) adds the number
/// of lost packets, and after `t_dwd` without loss DWD takes 1 off; weights stay within
/// `[0, w_max]`. The primary is filled first and the excess that it drops moves to the
/// secondaries. When the round robin's link has no room the packet waits for it.
#[derive(Clone, Debug, Default)]
pub struct Overflow {
    params: OverflowParams,
    /// Weight per secondary link id.
    weights: Vec<(LinkId, f64)>,
    /// Smooth WRR state per link id.
    current: Vec<(LinkId, f64)>,
    next_update: Option<Instant>,
    last_loss: Option<Instant>,
    /// The primary's cumulative peer-reported (received, lost) at the last update.
    last_counts: Option<(LinkId, u64, u64)>,
    /// The latest cumulative peer-reported (received, lost) per link.
    reported: Vec<(LinkId, u64, u64)>,
    /// Overflow flows' packets the binding point's queues dropped or marked because
    /// they waited too long for the primary, cumulative, and at the last update.
    local_congestion: u64,
    last_local_congestion: u64,
}

impl Overflow {
    /// With the given parameters.
    pub fn new(params: OverflowParams) -> Self {
        Self {
            params,
            ..Self::default()
        }
    }

    /// The weight of secondary link `id` (0 if it has none yet).
    pub fn weight(&self, id: LinkId) -> f64 {
        self.weights
            .iter()
            .find(|(l, _)| *l == id)
            .map_or(0.0, |(_, w)| *w)
    }

    fn entry(v: &mut Vec<(LinkId, f64)>, id: LinkId) -> &mut f64 {
        match v.iter().position(|(l, _)| *l == id) {
            Some(i) => &mut v[i].1,
            None => {
                v.push((id, 0.0));
                &mut v.last_mut().expect("pushed").1
            }
        }
    }

    /// Applies the loss reports received since the last update (AWI, IWI, DWD).
    /// `links` are the usable links, the primary first.
    fn update(&mut self, now: Instant, primary: LinkId, links: &[LinkView]) {
        let secondaries = || usable(links).skip(1).map(|l| l.id);
        if self.next_update.is_some_and(|t| now < t) {
            return;
        }
        let p = self.params;
        self.next_update = Some(now + p.t_report);
        let (received, lost) = self
            .reported
            .iter()
            .find(|(l, _, _)| *l == primary)
            .map_or((0, 0), |&(_, r, l)| (r, l));
        let (d_recv, d_lost) = match self.last_counts {
            Some((id, r, l)) if id == primary => {
                (received.saturating_sub(r), lost.saturating_sub(l))
            }
            _ => (0, 0),
        };
        self.last_counts = Some((primary, received, lost));
        // The primary's overflow as the binding point sees it: packets that waited too
        // long for it count as lost on it (a bottleneck kept short by rate control
        // loses nothing itself).
        let d_local = self
            .local_congestion
            .saturating_sub(self.last_local_congestion);
        self.last_local_congestion = self.local_congestion;
        let d_lost = d_lost + d_local;
        let w_max = f64::from(p.w_max);
        if d_lost > 0 {
            self.last_loss = Some(now);
            let sent = (d_recv + d_lost) as f64;
            for id in secondaries() {
                let w = Self::entry(&mut self.weights, id);
                *w = if *w == 0.0 {
                    d_lost as f64
                } else {
                    *w + p.k * d_lost as f64 / sent * f64::from(p.w_fixed)
                }
                .min(w_max);
            }
        } else if self.last_loss.is_none_or(|t| now - t >= p.t_dwd) {
            for id in secondaries() {
                let w = Self::entry(&mut self.weights, id);
                *w = (*w - 1.0).max(0.0);
            }
        }
    }
}

impl Overflow {
    /// The queues above the binding point dropped or marked `cumulative` packets of
    /// overflow flows so far (CoDel: they waited too long for the primary); counted as
    /// the primary's loss at the next update.
    pub fn on_local_congestion(&mut self, cumulative: u64) {
        self.local_congestion = cumulative;
    }
}

impl BindPolicy for Overflow {
    fn name(&self) -> &'static str {
        "overflow"
    }

    fn on_loss_report(&mut self, link: LinkId, received: u64, lost: u64) {
        match self.reported.iter_mut().find(|(l, _, _)| *l == link) {
            Some(e) => *e = (link, received, lost),
            None => self.reported.push((link, received, lost)),
        }
    }

    fn bind(&mut self, now: Instant, _packet: &PacketMeta, links: &[LinkView]) -> Binding {
        let Some(primary) = usable(links).next() else {
            return Binding::Wait;
        };
        self.update(now, primary.id, links);
        // Smooth weighted round robin: each turn adds every weight to its link's current
        // value, picks the largest, and takes the total off it. The turn is taken only if
        // the pick has room: otherwise the packet waits for its link.
        let w_fixed = f64::from(self.params.w_fixed);
        let (weights, current) = (&self.weights, &mut self.current);
        let weight = |id: LinkId| {
            weights
                .iter()
                .find(|(l, _)| *l == id)
                .map_or(0.0, |(_, w)| *w)
        };
        let turn = || {
            core::iter::once((primary.id, w_fixed)).chain(
                usable(links)
                    .skip(1)
                    .map(|l| (l.id, weight(l.id)))
                    .filter(|&(_, w)| w > 0.0),
            )
        };
        let mut pick = (primary.id, f64::NEG_INFINITY);
        let mut total = 0.0;
        for (id, w) in turn() {
            total += w;
            let c = current
                .iter()
                .find(|(l, _)| *l == id)
                .map_or(0.0, |(_, c)| *c)
                + w;
            if c > pick.1 {
                pick = (id, c);
            }
        }
        let room = |id: LinkId| links.iter().any(|l| l.id == id && l.has_room(now));
        if !room(pick.0) {
            // Work-conserving: the turn goes to the link of the round that has room and
            // is next in line (the largest current value), so that a full link never
            // holds back one that could send: a full primary overflows onto a secondary
            // with room at once, and a secondary whose window is still small does not
            // stall the primary.
            let next = turn()
                .filter(|&(id, _)| room(id))
                .map(|(id, w)| {
                    let c = current
                        .iter()
                        .find(|(l, _)| *l == id)
                        .map_or(0.0, |(_, c)| *c);
                    (id, c + w)
                })
                .max_by(|a, b| a.1.total_cmp(&b.1));
            match next {
                Some(n) => pick = n,
                None => return Binding::Wait,
            }
        }
        for (id, w) in turn() {
            *Self::entry(current, id) += w;
        }
        *Self::entry(current, pick.0) -= total;
        Binding::Link(pick.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u16, srtt_ms: u64, below: usize) -> LinkView {
        LinkView {
            below_binding: below,
            tx_rate: 625_000.0, // 5 Mbit/s
            ..LinkView::idle(id, srtt_ms)
        }
    }

    fn meta() -> PacketMeta {
        PacketMeta {
            flow: FlowId(1),
            len: 1400,
            latency_sensitive: false,
            backlog: 1400,
        }
    }

    #[test]
    fn idle_links_lowest_rtt_wins() {
        let links = [view(0, 120, 0), view(1, 100, 0)];
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), &links),
            Binding::Link(LinkId(1))
        );
    }

    #[test]
    fn a_sparse_packet_avoids_a_link_whose_delay_jumps_a_backlogged_one_does_not() {
        // Link 1 is sooner on average (30 ms against 40) but its delay varies by 10 ms.
        let mut jumpy = view(1, 60, 0);
        jumpy.rttvar = Duration::from_millis(10);
        let links = [view(0, 80, 0), jumpy];
        let sparse = meta_backlog(200);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &sparse, &links),
            Binding::Link(LinkId(0))
        );
        let backlogged = meta_backlog(20_000);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &backlogged, &links),
            Binding::Link(LinkId(1))
        );
        // A latency-sensitive flow's packets are judged like a sparse flow's.
        let urgent = PacketMeta {
            latency_sensitive: true,
            ..backlogged
        };
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &urgent, &links),
            Binding::Link(LinkId(0))
        );
        // An unmeasured link's variation is a guess and does not count.
        jumpy.rtt_measured = false;
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &sparse, &[view(0, 80, 0), jumpy]),
            Binding::Link(LinkId(1))
        );
    }

    #[test]
    fn full_best_link_waits_rather_than_spill_to_much_slower_link() {
        let links = [view(0, 100, 2), view(1, 140, 0)];
        assert_eq!(MinRtt.bind(Instant::ZERO, &meta(), &links), Binding::Wait);
    }

    /// A link whose bottleneck is in the network (its interface never backs up), at
    /// `mbps` as rate control has it, `rtt_ms` of smoothed RTT.
    fn network_bottleneck(id: u16, rtt_ms: u64, mbps: f64) -> LinkView {
        LinkView {
            tx_rate: 0.0,
            cc_rate: mbps * 1e6 / 8.0,
            ..view(id, rtt_ms, 0)
        }
    }

    #[test]
    fn a_packet_counts_its_time_at_a_bottleneck_in_the_network_and_the_queue_there() {
        let at = |l: &LinkView| MinRtt::expected_delivery_ns(Instant::ZERO, 1400, l);
        let near = network_bottleneck(0, 4, 2.0);
        // 2 ms one way and 1400 bytes at 2 Mbit/s (5.6 ms).
        assert_eq!(at(&near), 7_600_000);
        // A standing queue of 10 ms at the bottleneck: the packet waits for all of it,
        // its acknowledgement for none; the smoothed RTT holds it once.
        let srtt = Duration::from_millis(14);
        let queue = Duration::from_millis(10);
        let queued = LinkView {
            srtt,
            queue_delay: queue,
            ..near
        };
        assert_eq!(at(&queued), 17_600_000);
        // The way back's queue is the acknowledgements' and not the packet's.
        let back = LinkView {
            srtt,
            return_delay: queue,
            ..near
        };
        assert_eq!(at(&back), 7_600_000);
        // The interface's rate counts when it is the slower.
        let slow_interface = LinkView {
            tx_rate: 125_000.0,
            ..near
        };
        assert_eq!(at(&slow_interface), 13_200_000);
    }

    /// A 2 Mbit/s link 2 ms away and a 50 Mbit/s one 20 ms away: a sparse flow's packet
    /// arrives sooner on the near one, a bulk flow's backlog through the far one (30 KB:
    /// 122 ms at 2 Mbit/s, 25 ms at 50). Judged by its head packet alone, the bulk flow
    /// stayed on the near link at 2 Mbit/s.
    #[test]
    fn a_bulk_flow_goes_where_its_backlog_arrives_soonest_a_sparse_one_where_its_packet_does() {
        let links = [
            network_bottleneck(0, 4, 2.0),
            network_bottleneck(1, 40, 50.0),
        ];
        let sparse = PacketMeta {
            len: 200,
            ..meta_backlog(200)
        };
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &sparse, &links),
            Binding::Link(LinkId(0))
        );
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta_backlog(30_000), &links),
            Binding::Link(LinkId(1))
        );
        // A backlog of two packets still arrives sooner through the near link.
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta_backlog(2800), &links),
            Binding::Link(LinkId(0))
        );
    }

    /// A link still searching (rate control's startup) counts a backlog at twice its
    /// window's rate: the window doubles each round trip while the backlog fills it. At
    /// its window's rate alone, 4.8 Mbit/s 40 ms away, it never got the backlog beside
    /// 5 Mbit/s 20 ms away; at twice that it does, and a link whose search has ended is
    /// judged as before.
    #[test]
    fn a_searching_link_counts_a_backlog_at_twice_its_windows_rate() {
        let near = network_bottleneck(0, 40, 5.0);
        let far = network_bottleneck(1, 80, 4.8);
        let bulk = meta_backlog(60_000);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &bulk, &[near, far]),
            Binding::Link(LinkId(0))
        );
        let searching = LinkView {
            searching: true,
            ..far
        };
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &bulk, &[near, searching]),
            Binding::Link(LinkId(1))
        );
        // The interface's measured rate, if slower, still bounds it.
        let slow_interface = LinkView {
            tx_rate: 4.8e6 / 8.0,
            ..searching
        };
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &bulk, &[near, slow_interface]),
            Binding::Link(LinkId(0))
        );
    }

    /// The bulk flow's link full: its head packet goes on a link with room only where it
    /// arrives sooner than through the full link once that has room.
    #[test]
    fn a_bulk_flow_whose_link_is_full_spills_only_where_its_packet_arrives_sooner() {
        let bulk = meta_backlog(30_000);
        let full = |l: LinkView, ms: u64| LinkView {
            below_binding: l.budget,
            pacer_next: Instant::from_nanos(ms * 1_000_000),
            ..l
        };
        // The far link frees up in 1 ms; the near one would deliver in 7.6 ms against its
        // 21.2: it takes the packet.
        let links = [
            network_bottleneck(0, 4, 2.0),
            full(network_bottleneck(1, 40, 50.0), 1),
        ];
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &bulk, &links),
            Binding::Link(LinkId(0))
        );
        // A link 30 ms away delivers later than the full one: the packet waits.
        let links = [
            network_bottleneck(0, 60, 2.0),
            full(network_bottleneck(1, 40, 50.0), 1),
        ];
        assert_eq!(MinRtt.bind(Instant::ZERO, &bulk, &links), Binding::Wait);
        // A sparse flow's packet waits for the link where it surely arrives soonest.
        let links = [
            network_bottleneck(0, 40, 2.0),
            full(network_bottleneck(1, 4, 50.0), 1),
        ];
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta_backlog(1400), &links),
            Binding::Wait
        );
    }

    #[test]
    fn full_best_link_spills_to_nearly_equal_link() {
        let links = [view(0, 100, 2), view(1, 101, 0)];
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), &links),
            Binding::Link(LinkId(1))
        );
    }

    #[test]
    fn down_and_suspect_links_are_skipped() {
        let mut a = view(0, 10, 0);
        a.state = LinkState::Down;
        let mut b = view(1, 20, 0);
        b.state = LinkState::Suspect;
        let c = view(2, 300, 0);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), &[a, b, c]),
            Binding::Link(LinkId(2))
        );
    }

    #[test]
    fn a_packet_is_offered_only_links_that_carry_it_whole() {
        let len = meta().len;
        let mut small = view(1, 10, 0);
        small.max_datagram = len - 1;
        let big = view(0, 30, 0);
        let links = [big, small];
        let smallest = smallest_datagram(&links);
        assert_eq!(smallest, len - 1);
        let mut scratch = Vec::new();
        // The faster link is too small: the packet goes on the other.
        let offered = links_that_carry(&links, len, smallest, &mut scratch);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), offered),
            Binding::Link(LinkId(0))
        );
        // A packet that fits both is offered both, as they are.
        let offered = links_that_carry(&links, len - 1, smallest, &mut scratch);
        assert!(offered.iter().all(|l| l.state == LinkState::Up));
        // The link that carries it is suspect: the packet waits for it.
        let mut suspect = links;
        suspect[0].state = LinkState::Suspect;
        let offered = links_that_carry(&suspect, len, smallest, &mut scratch);
        assert_eq!(MinRtt.bind(Instant::ZERO, &meta(), offered), Binding::Wait);
        // It is down: nothing carries the packet whole, and it goes where it can.
        let mut down = links;
        down[0].state = LinkState::Down;
        let offered = links_that_carry(&down, len, smallest_datagram(&down), &mut scratch);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), offered),
            Binding::Link(LinkId(1))
        );
    }

    #[test]
    fn backup_used_only_when_no_primary_up() {
        let mut backup = view(0, 10, 0);
        backup.backup = true;
        let mut primary = view(1, 100, 0);
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), &[backup, primary]),
            Binding::Link(LinkId(1))
        );
        primary.state = LinkState::Down;
        assert_eq!(
            MinRtt.bind(Instant::ZERO, &meta(), &[backup, primary]),
            Binding::Link(LinkId(0))
        );
    }

    #[test]
    fn no_usable_link_waits() {
        let mut a = view(0, 10, 0);
        a.state = LinkState::Down;
        assert_eq!(MinRtt.bind(Instant::ZERO, &meta(), &[a]), Binding::Wait);
    }

    fn meta_backlog(backlog: usize) -> PacketMeta {
        PacketMeta { backlog, ..meta() }
    }

    #[test]
    fn aggregate_uses_the_best_link_while_it_has_room() {
        // 10 ms against 30 ms one way, both idle.
        let links = [view(0, 20, 0), view(1, 60, 0)];
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(1_000_000), &links),
            Binding::Link(LinkId(0))
        );
    }

    #[test]
    fn aggregate_spills_only_a_backlog_the_best_link_cannot_drain_first() {
        // The best link is full (2 below the binding point, 5 Mbit/s: 2.24 ms each), the
        // other is 20 ms slower one way. A backlog that drains in less than that waits for
        // the best link; a larger one also goes on the slower link.
        let links = [view(0, 20, 2), view(1, 60, 0)];
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(5 * 1400), &links),
            Binding::Wait,
            "7 ms of backlog: the best link delivers it before the slow one would"
        );
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &links),
            Binding::Link(LinkId(1)),
            "90 ms of backlog: the slow link delivers this packet sooner"
        );
    }

    #[test]
    fn aggregate_sends_a_slower_link_the_packet_that_arrives_in_order_there() {
        // As above: a packet sent on the slower link now arrives 30 ms from now, 13.28 ms
        // after the head would through the best link (16.72 ms). Not the head, then, but
        // the packet the best link would deliver about then. The forecast's error is a
        // packet's time on the best link (2.24 ms; no RTT variation); both links send at
        // 5 Mbit/s, so the aim is the forecast itself: 13.28 ms at 5 Mbit/s, 8300 bytes
        // of the backlog ahead of it.
        let links = [view(0, 20, 2), view(1, 60, 0)];
        let mut in_order = Aggregate {
            arrival_order: true,
        };
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &links),
            Binding::Behind(LinkId(1), 8300)
        );
        // Without `arrival_order`, the head.
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &links),
            Binding::Link(LinkId(1))
        );
        // The slower link at a third of the best one's rate: aimed early by half the
        // error, (5 - 5/3) / (5 + 5/3), so that the wait falls mostly on its fewer
        // packets: 14.40 ms, 9000 bytes. At three times, late by as much: 12.16 ms,
        // 7600 bytes.
        let mut third = links;
        third[1].tx_rate = links[0].tx_rate / 3.0;
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &third),
            Binding::Behind(LinkId(1), 9000)
        );
        let mut triple = links;
        triple[1].tx_rate = links[0].tx_rate * 3.0;
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &triple),
            Binding::Behind(LinkId(1), 7600)
        );
        // RTT variation widens the error: 1 ms on each link, 4.24 ms in all, half of it
        // early at a third of the rate: 15.40 ms at 5 Mbit/s, 9625 bytes.
        let mut varied = third;
        varied[0].rttvar = Duration::from_millis(1);
        varied[1].rttvar = Duration::from_millis(1);
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &varied),
            Binding::Behind(LinkId(1), 9625)
        );
    }

    #[test]
    fn aggregate_sends_a_slower_link_the_head_where_the_links_ahead_would_hold_it_longer() {
        let links = [view(0, 20, 2), view(1, 60, 0)];
        let mut in_order = Aggregate {
            arrival_order: true,
        };
        // The slower link carries 100 times the best one's rate: its every packet would
        // wait for the best link's, 140 KB for 2.24 ms against 8.3 KB for 13.28 ms.
        // (The head: `Behind(_, 0)`, for the queues to keep it past any packet the link
        // took from behind before.)
        let mut fast = links;
        fast[1].tx_rate = 62_500_000.0;
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &fast),
            Binding::Behind(LinkId(1), 0)
        );
        // The best link loses a tenth of its packets: 45 losses a second, each holding
        // the slower link's packets while it is found lost and sent again (32.5 ms).
        let mut lossy = links;
        lossy[0].loss_rate = 0.1;
        assert_eq!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &lossy),
            Binding::Behind(LinkId(1), 0)
        );
        // A hundredth: from behind still.
        lossy[0].loss_rate = 0.01;
        assert!(matches!(
            in_order.bind(Instant::ZERO, &meta_backlog(40 * 1400), &lossy),
            Binding::Behind(LinkId(1), _)
        ));
    }

    #[test]
    fn aggregate_spills_onto_a_lossy_link_only_a_backlog_its_losses_do_not_outweigh() {
        // As above, the other link 40 ms slower in RTT. A packet bound there arrives
        // 30 ms from now; if the link loses a fifth of its packets, a fifth arrive by
        // reinjection instead, after the loss is found (67.5 ms) and the resend crosses
        // the best link (16.7 ms): 40.8 ms expected. 10 packets of backlog (39.1 ms
        // through the best link) go on the clean link but wait for the best one when the
        // other loses; 20 packets (61.5 ms) go on it either way.
        let clean = [view(0, 20, 2), view(1, 60, 0)];
        let mut lossy = clean;
        lossy[1].loss_rate = 0.2;
        let backlog = |n: usize| meta_backlog(n * 1400);
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog(10), &clean),
            Binding::Link(LinkId(1))
        );
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog(10), &lossy),
            Binding::Wait
        );
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog(20), &lossy),
            Binding::Link(LinkId(1))
        );
        // Losing on the best link moves nothing while it is the only one with room.
        let mut best_lossy = clean;
        best_lossy[0].loss_rate = 0.2;
        best_lossy[0].below_binding = 0;
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog(10), &best_lossy),
            Binding::Link(LinkId(0)),
            "10 + a fifth of (22.5 + 30 - 10) ms is still sooner than 30"
        );
    }

    #[test]
    fn aggregate_drains_the_best_link_at_its_bottleneck_rate_not_its_interface_rate() {
        // The best link's interface sends at 1 Gbit/s, but rate control measured its
        // bottleneck (further on, in the network) at 5 Mbit/s: 40 packets of backlog take
        // 90 ms through it, so the slower link carries some of them.
        let mut best = view(0, 20, 2);
        best.tx_rate = 125_000_000.0;
        best.cc_rate = 625_000.0;
        let links = [best, view(1, 60, 0)];
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &links),
            Binding::Link(LinkId(1))
        );
        // Without the bottleneck's rate, the interface's says the backlog drains at once.
        let mut fast = links[0];
        fast.cc_rate = 0.0;
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &[fast, links[1]]),
            Binding::Wait
        );
    }

    /// A cellular link that carried only keepalives measured its interface at tens of
    /// kbit/s: each keepalive waited for the scheduler's next grant. Judged by that
    /// rate, a packet would take 187 ms to leave and the link was never chosen (so never
    /// measured again); judged by its RTT, which holds that wait (30 ms one way), it
    /// delivers the packet before the best link would have drained the 90 ms of backlog
    /// ahead of it, and carries its share.
    #[test]
    fn aggregate_judges_an_idle_link_by_its_rtt_not_a_keepalives_wait() {
        let best = view(0, 20, 2);
        let mut lte = view(1, 60, 0);
        lte.tx_rate = 7_500.0; // 0.06 Mbit/s
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &[best, lte]),
            Binding::Link(LinkId(1))
        );
        // Once it has packets below the binding point, its interface rate counts: at
        // that rate the next one would wait behind them.
        lte.below_binding = 1;
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(40 * 1400), &[best, lte]),
            Binding::Wait
        );
    }

    /// A link the flow used until a moment ago, its smoothed RTT still 200 ms from the
    /// queue its traffic made then (its keepalives have since come back in 60 ms):
    /// judged by its recent samples and its known capacity, it takes a backlog the best
    /// link would need 64 ms to drain, as it did before. A link no flow has used, one
    /// with packets in flight (whose samples will refresh the smoothed RTT), and one
    /// whose recent samples include a pause are still judged by the smoothed RTT.
    #[test]
    fn aggregate_judges_a_link_it_used_by_its_recent_samples() {
        let best = view(0, 20, 2);
        let mut lte = view(1, 200, 0);
        lte.min_rtt = Duration::from_millis(50);
        lte.recent_max_rtt = Duration::from_millis(60);
        lte.capacity = 900_000.0; // 7.2 Mbit/s
        let backlog = meta_backlog(40_000);
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog, &[best, lte]),
            Binding::Link(LinkId(1))
        );
        let mut unknown = lte;
        unknown.capacity = 0.0;
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog, &[best, unknown]),
            Binding::Wait
        );
        let mut in_flight = lte;
        in_flight.in_flight = 1;
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog, &[best, in_flight]),
            Binding::Wait
        );
        let mut paused = lte;
        paused.recent_max_rtt = Duration::from_millis(400);
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &backlog, &[best, paused]),
            Binding::Wait
        );
    }

    #[test]
    fn aggregate_waits_when_the_best_link_rate_is_unknown() {
        let mut best = view(0, 20, 2);
        best.tx_rate = 0.0;
        let links = [best, view(1, 60, 0)];
        assert_eq!(
            Aggregate::default().bind(Instant::ZERO, &meta_backlog(1_000_000), &links),
            Binding::Wait
        );
    }

    /// Binds `n` packets at `now`, returning how many went on each of links 0 and 1.
    fn overflow_split(o: &mut Overflow, now: Instant, links: &[LinkView], n: usize) -> [usize; 2] {
        let mut split = [0; 2];
        for _ in 0..n {
            if let Binding::Link(id) = o.bind(now, &meta(), links) {
                split[usize::from(id.0)] += 1;
            }
        }
        split
    }

    #[test]
    fn overflow_fills_the_primary_until_it_reports_loss() {
        let mut o = Overflow::new(OverflowParams::default());
        let links = [view(0, 13, 0), view(1, 35, 0)];
        let t = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        assert_eq!(overflow_split(&mut o, t(0), &links, 100), [100, 0]);
        // The peer reports 10 of 100 packets lost on the primary.
        o.on_loss_report(LinkId(0), 90, 10);
        overflow_split(&mut o, t(50), &links, 1);
        // IWI: from 0, the weight becomes the number lost.
        assert_eq!(o.weight(LinkId(1)), 10.0);
        let split = overflow_split(&mut o, t(60), &links, 600);
        // Weights 50 : 10.
        assert_eq!(split, [500, 100]);
        // More loss: AWI adds k * lost / sent * w_fixed = 0.5 * 20 / 100 * 50 = 5.
        o.on_loss_report(LinkId(0), 170, 30);
        overflow_split(&mut o, t(100), &links, 1);
        assert_eq!(o.weight(LinkId(1)), 15.0);
    }

    #[test]
    fn overflow_weight_decays_after_t_dwd_without_loss_and_is_clamped() {
        let mut o = Overflow::new(OverflowParams::default());
        let links = [view(0, 13, 0), view(1, 35, 0)];
        let t = |ms: u64| Instant::ZERO + Duration::from_millis(ms);
        overflow_split(&mut o, t(0), &links, 1);
        o.on_loss_report(LinkId(0), 100, 400);
        overflow_split(&mut o, t(50), &links, 1);
        assert_eq!(o.weight(LinkId(1)), 50.0, "clamped to w_max");
        // No loss for less than T_dwd (250 ms): unchanged.
        for ms in [100, 150, 200, 250] {
            overflow_split(&mut o, t(ms), &links, 1);
        }
        assert_eq!(o.weight(LinkId(1)), 50.0);
        // From T_dwd on, minus one per report.
        overflow_split(&mut o, t(300), &links, 1);
        assert_eq!(o.weight(LinkId(1)), 49.0);
        overflow_split(&mut o, t(350), &links, 1);
        assert_eq!(o.weight(LinkId(1)), 48.0);
    }

    #[test]
    fn overflow_waits_for_its_link_instead_of_breaking_the_ratio() {
        let mut o = Overflow::new(OverflowParams::default());
        let links = [view(0, 13, 2), view(1, 35, 0)];
        assert_eq!(o.bind(Instant::ZERO, &meta(), &links), Binding::Wait);
    }

    fn info(
        proto: u8,
        sport: u16,
        dport: u16,
        dscp: u8,
        src4: [u8; 4],
    ) -> crate::classify::PacketInfo {
        let mut src = [0u8; 16];
        src[10] = 0xff;
        src[11] = 0xff;
        src[12..].copy_from_slice(&src4);
        crate::classify::PacketInfo {
            key: crate::classify::FlowKey {
                protocol: proto,
                src,
                dst: [0; 16],
                src_port: sport,
                dst_port: dport,
            },
            dscp,
            ecn: 0,
            reliable: proto == 6,
        }
    }

    #[test]
    fn auto_is_aggregate_for_tcp_while_two_links_can_share_it_else_min_rtt() {
        assert_eq!("auto".parse::<PolicyKind>(), Ok(PolicyKind::Auto));
        assert_eq!(PolicyKind::Auto.name(), "auto");
        assert_eq!(PolicyKind::Auto.resolve(true, true), PolicyKind::Aggregate);
        assert_eq!(
            PolicyKind::Auto.resolve(true, false),
            PolicyKind::MinRtt,
            "one link"
        );
        assert_eq!(
            PolicyKind::Auto.resolve(false, true),
            PolicyKind::MinRtt,
            "UDP"
        );
        for k in [
            PolicyKind::MinRtt,
            PolicyKind::Aggregate,
            PolicyKind::Overflow,
            PolicyKind::Redundant,
        ] {
            assert_eq!(k.resolve(true, true), k);
            assert_eq!(k.resolve(false, false), k);
        }
    }

    #[test]
    fn rules_match_every_condition_set_and_the_first_match_wins() {
        let mut net = [0u8; 16];
        net[10] = 0xff;
        net[11] = 0xff;
        net[12] = 10;
        let rules = [
            PolicyRule {
                dscp: Some(46),
                policy: PolicyKind::Redundant,
                ..PolicyRule::default()
            },
            PolicyRule {
                protocol: Some(6),
                ports: Some((5000, 5999)),
                policy: PolicyKind::Aggregate,
                ..PolicyRule::default()
            },
            PolicyRule {
                prefix: Some((net, 104)),
                policy: PolicyKind::Overflow,
                ..PolicyRule::default()
            },
        ];
        let d = PolicyKind::MinRtt;
        assert_eq!(
            policy_for(&rules, d, &info(17, 1, 2, 46, [1, 2, 3, 4])),
            PolicyKind::Redundant
        );
        assert_eq!(
            policy_for(&rules, d, &info(6, 40000, 5001, 0, [1, 2, 3, 4])),
            PolicyKind::Aggregate
        );
        assert_eq!(
            policy_for(&rules, d, &info(17, 40000, 5001, 0, [1, 2, 3, 4])),
            d,
            "UDP is not TCP"
        );
        assert_eq!(
            policy_for(&rules, d, &info(17, 1, 2, 0, [10, 9, 8, 7])),
            PolicyKind::Overflow
        );
        assert_eq!(policy_for(&rules, d, &info(17, 1, 2, 0, [11, 9, 8, 7])), d);
        // The first match wins: EF inside 10/8 is redundant.
        assert_eq!(
            policy_for(&rules, d, &info(17, 1, 2, 46, [10, 9, 8, 7])),
            PolicyKind::Redundant
        );
    }

    #[test]
    fn policy_names_round_trip() {
        for n in PolicyKind::NAMES {
            assert_eq!(n.parse::<PolicyKind>().unwrap().name(), n);
        }
        assert!(
            "fastest"
                .parse::<PolicyKind>()
                .unwrap_err()
                .contains("min-rtt, aggregate")
        );
    }
}
