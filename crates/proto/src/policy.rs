//! Binding policies: which link the packet at the head of the per-flow queues goes on.
//!
//! The binding point calls a policy only when a packet is ready to leave; the policy sees
//! every link's live state ([`LinkView`]) and answers with a link that has room *now*, or
//! [`Binding::Wait`] when the best link for this packet is busy and will free up sooner
//! than any other would deliver it. Policies are `on_*`-driven plug-ins (as quinn's
//! congestion controllers); more arrive with the policies issue (aggregate, overflow,
//! redundant, backup).

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
}

/// A policy's answer.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Binding {
    /// Bind the packet to this link now. The link must have room (see [`LinkView::has_room`]).
    Link(LinkId),
    /// Keep the packet above the binding point for now.
    Wait,
}

/// A binding policy.
pub trait BindPolicy: fmt::Debug + Send {
    /// Short name, as used in configuration files.
    fn name(&self) -> &'static str;
    /// Chooses a link for `packet`. `links` lists every link (any state) in id order.
    fn bind(&mut self, now: Instant, packet: &PacketMeta, links: &[LinkView]) -> Binding;
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
    /// half the smoothed RTT. The drain rate is the local interface's measured rate; when
    /// it is unknown (the interface never backed up) draining counts as instantaneous. The
    /// acknowledgement-based delivery rate is not used: measured over probes alone it is
    /// application-limited and would make an idle link look seconds slow.
    pub fn expected_delivery_ns(now: Instant, len: usize, link: &LinkView) -> u64 {
        let rate = link.tx_rate;
        let pacer_wait_ns = link.pacer_next.as_nanos().saturating_sub(now.as_nanos());
        // Plain float arithmetic: this runs for every link on every packet.
        // `as_nanos` is a u128; converting that to f64 is a slow libcall.
        let half_rtt = link.srtt.as_secs_f64() * 0.5e9;
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

    /// [`Self::expected_delivery_ns`] as a duration.
    pub fn expected_delivery(now: Instant, len: usize, link: &LinkView) -> Duration {
        Duration::from_nanos(Self::expected_delivery_ns(now, len, link))
    }
}

/// The links a policy may choose from: up links, backups only when no other link is up.
pub fn usable(links: &[LinkView]) -> impl Iterator<Item = &LinkView> {
    let primary_up = links.iter().any(|l| l.state == LinkState::Up && !l.backup);
    links
        .iter()
        .filter(move |l| l.state == LinkState::Up && (l.backup != primary_up))
}

impl BindPolicy for MinRtt {
    fn name(&self) -> &'static str {
        "min-rtt"
    }

    fn bind(&mut self, now: Instant, packet: &PacketMeta, links: &[LinkView]) -> Binding {
        // The minimum over `usable(links)` of (expected delivery, id), in one pass: the
        // best primary link that is up and, as long as there is none, the best backup.
        let mut primary: Option<(u64, LinkId, &LinkView)> = None;
        let mut backup: Option<(u64, LinkId, &LinkView)> = None;
        for l in links {
            if l.state != LinkState::Up {
                continue;
            }
            if !l.backup {
                let key = (Self::expected_delivery_ns(now, packet.len, l), l.id);
                if primary.is_none_or(|(k, id, _)| key < (k, id)) {
                    primary = Some((key.0, key.1, l));
                }
            } else if primary.is_none() {
                let key = (Self::expected_delivery_ns(now, packet.len, l), l.id);
                if backup.is_none_or(|(k, id, _)| key < (k, id)) {
                    backup = Some((key.0, key.1, l));
                }
            }
        }
        match primary.or(backup) {
            Some((_, id, l)) if l.has_room(now) => Binding::Link(id),
            _ => Binding::Wait,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(id: u16, srtt_ms: u64, below: usize) -> LinkView {
        LinkView {
            id: LinkId(id),
            state: LinkState::Up,
            srtt: Duration::from_millis(srtt_ms),
            rttvar: Duration::ZERO,
            min_rtt: Duration::from_millis(srtt_ms),
            rtt_measured: true,
            below_binding: below,
            budget: 2,
            tx_rate: 625_000.0, // 5 Mbit/s
            delivery_rate: 0.0,
            in_flight: 0,
            pacer_next: Instant::ZERO,
            backup: false,
        }
    }

    fn meta() -> PacketMeta {
        PacketMeta {
            flow: FlowId(1),
            len: 1400,
            latency_sensitive: false,
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
    fn full_best_link_waits_rather_than_spill_to_much_slower_link() {
        let links = [view(0, 100, 2), view(1, 140, 0)];
        assert_eq!(MinRtt.bind(Instant::ZERO, &meta(), &links), Binding::Wait);
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
}
