//! What `latebind status` shows and the metrics endpoint exports: per link state, RTT,
//! rates, in flight, what waits above and below the binding point, and every drop and
//! reinjection counter by reason.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use latebind_proto::{Instant, LinkState};
use serde::{Deserialize, Serialize};

use crate::dispatch::DispatchStatus;
use crate::session::{Session, SessionCounters};

/// One link.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct LinkStatus {
    /// Configured name (client) or `link<id>` (server).
    pub name: String,
    /// Where the peer is reached on this link: the client's configured server address; on
    /// the server, the address the link's last datagram came from (it moves when the
    /// client's network changes). `None` before the server has heard from the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<String>,
    /// Wire id.
    pub id: u16,
    /// up | suspect | down.
    pub state: String,
    /// Smoothed RTT, ms.
    pub srtt_ms: f64,
    /// RTT variation, ms.
    pub rttvar_ms: f64,
    /// Minimum RTT, ms.
    pub min_rtt_ms: f64,
    /// Whether the RTT figures are measured (else the initial guess).
    pub rtt_measured: bool,
    /// The largest datagram the link carries whole, bytes before the AEAD tag: the
    /// smaller of this end's limit (its interface's MTU; the server assumes a 1500-byte
    /// path) and the peer's (LINK_MTU). `None`: no limit known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_datagram: Option<usize>,
    /// Local interface drain rate, Mbit/s (0: not measured).
    pub tx_rate_mbps: f64,
    /// Delivery rate from acknowledgements, Mbit/s.
    pub delivery_rate_mbps: f64,
    /// Ack-eliciting datagrams in flight.
    pub in_flight: usize,
    /// Share of its packets the link lost lately while it worked, percent (the aggregate
    /// policy gives a link that loses a smaller share of a backlog).
    #[serde(default)]
    pub loss_pct: f64,
    /// Rate control: the link's estimated rate (its window over the standing RTT),
    /// Mbit/s (0: rate control off).
    #[serde(default)]
    pub cc_rate_mbps: f64,
    /// Rate control: the window, bytes.
    #[serde(default)]
    pub cwnd_bytes: usize,
    /// Rate control: queueing delay at the link's bottleneck, ms.
    #[serde(default)]
    pub queue_delay_ms: f64,
    /// Rate control: how long the acknowledgements wait on the way back beyond its
    /// minimum, ms (the window covers it).
    #[serde(default)]
    pub return_delay_ms: f64,
    /// Rate control: competing traffic keeps the bottleneck full, and the link competes
    /// for its share instead of keeping the queue short.
    #[serde(default)]
    pub competitive: bool,
    /// Datagrams below the binding point (handed over, not yet departed).
    pub below_binding: usize,
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received.
    pub datagrams_received: u64,
    /// Inner packets bound to this link.
    pub data_sent: u64,
    /// Packets the sender's loss detection declared lost.
    pub lost: u64,
    /// Packets the peer reported lost on this link.
    pub peer_reported_lost: u64,
    /// Times suspected.
    pub suspected: u64,
    /// Times down.
    pub went_down: u64,
    /// Packets lost below the binding point when the interface went down: those the
    /// daemon held plus those in the kernel's queue.
    pub dropped_below_binding: u64,
    /// Of those, the sealed datagrams the daemon still held (never given to the kernel).
    #[serde(default)]
    pub held_dropped: u64,
    /// Inner packets taken from this link for reinjection on others.
    pub reinjected: u64,
    /// Times its reinjection timer expired.
    #[serde(default)]
    pub rej_expired: u64,
    /// Time from its last acknowledgement to its latest reinjection, ms.
    #[serde(default)]
    pub last_reinject_after_ms: f64,
    /// Longest time it stayed suspect before it answered again, ms.
    #[serde(default)]
    pub longest_suspect_ms: f64,
    /// The peer's probes that showed this end's acknowledgements on the link unheard
    /// while the peer's direction delivered (`docs/protocol.md` 3.12).
    #[serde(default)]
    pub probes_unheard: u64,
    /// Acknowledgement frames of the link sent on another link meanwhile.
    #[serde(default)]
    pub acks_around: u64,
    /// Copies of the link's ACK that told the peer of a loss over a link whose way back
    /// is shorter (`docs/protocol.md` 4.3).
    #[serde(default)]
    pub acks_shortcut: u64,
}

/// Engine counters, by reason.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct EngineCounters {
    /// Packets accepted from the TUN side.
    pub tun_packets: u64,
    /// Not IP (dropped).
    pub tun_invalid: u64,
    /// Too large (dropped).
    pub tun_too_large: u64,
    /// AQM drops above the binding point.
    pub aqm_dropped: u64,
    /// AQM CE marks.
    pub aqm_marked: u64,
    /// Drops because a queue limit was reached.
    pub overflow_dropped: u64,
    /// Pure TCP acknowledgements replaced in their queue by a later one (`ack_filter`).
    #[serde(default)]
    pub ack_filtered: u64,
    /// The peer's TCP segments whose window was lowered (`tcp_window_clamp`).
    #[serde(default)]
    pub window_clamped: u64,
    /// Inner packets bound to a link.
    pub data_bound: u64,
    /// Of those, small flows' packets sent past a link's full window.
    #[serde(default)]
    pub small_past_window: u64,
    /// Malformed datagrams (after decryption).
    pub malformed: u64,
    /// Wrong session id.
    pub wrong_session: u64,
    /// Unknown link id.
    pub unknown_link: u64,
    /// Duplicate or replayed packet numbers.
    pub duplicate_packets: u64,
    /// Duplicate DATA frames.
    pub duplicate_data: u64,
    /// DATA older than the duplicate window.
    pub too_old_data: u64,
    /// Packets held for reordering.
    pub reorder_held: u64,
    /// Missing packets given up.
    pub reorder_gaps_skipped: u64,
    /// Packets that came after their gap was given up (delivered out of order).
    pub late_delivered: u64,
    /// Acknowledgements that did not fit on the data packet they were due to ride on (the
    /// link's largest datagram) and went alone.
    #[serde(default)]
    pub acks_too_big_to_ride: u64,
    /// ACK frames sent.
    #[serde(default)]
    pub acks_sent: u64,
    /// ACK frames of those that rode on a data packet (the rest took a datagram of their
    /// own, `ack_ride_wait`).
    #[serde(default)]
    pub acks_ridden: u64,
    /// RX_TIME frames sent (one-way delay samples for the peer's rate control).
    #[serde(default)]
    pub rx_times_sent: u64,
    /// Header compression: DATA_TEMPLATE frames sent.
    #[serde(default)]
    pub templates_sent: u64,
    /// DATA_COMPACT frames sent.
    #[serde(default)]
    pub compact_sent: u64,
    /// Bytes the DATA_COMPACT frames sent saved against DATA frames.
    #[serde(default)]
    pub compact_saved_bytes: u64,
    /// DATA_TEMPLATE frames received.
    #[serde(default)]
    pub templates_received: u64,
    /// DATA_COMPACT frames dropped: no template of their generation, or a body that does
    /// not fit it.
    #[serde(default)]
    pub compact_undecodable: u64,
    /// Inner packets sent in a datagram larger than their link carries whole (no link up
    /// did; the kernel fragments them).
    #[serde(default)]
    pub data_oversized: u64,
    /// Packets larger than every link up carries whole, with DF set (or IPv6): dropped,
    /// their senders answered "packet too big" (at most 100 a second).
    #[serde(default)]
    pub too_big_dropped: u64,
    /// "Packet too big" answers written to the TUN device.
    #[serde(default)]
    pub too_big_signalled: u64,
    /// Packets of redundant flows held back to arrive with their slower copies.
    #[serde(default)]
    pub reorder_aligned: u64,
    /// Gaps held past their hold time while a link that could still carry the missing
    /// packet was behind them.
    #[serde(default)]
    pub reorder_waited_for_links: u64,
    /// Gaps of flows whose sender does not re-send their losses given up before their
    /// hold time: no link could still bring the missing packet.
    #[serde(default)]
    pub reorder_gaps_lost: u64,
    /// TCP acknowledgements delivered past a gap before them instead of waiting for it.
    #[serde(default)]
    pub reorder_acks_passed: u64,
    /// Packets declared lost by loss detection.
    pub lost: u64,
    /// Packets taken for reinjection: a link's reinjection timer expired.
    pub reinjected_timer: u64,
    /// Packets taken for reinjection: a link went down.
    pub reinjected_link_down: u64,
    /// Packets of aggregate flows declared lost on a working link and sent again.
    #[serde(default)]
    pub reinjected_lost: u64,
    /// Packets of aggregate flows late on one link sent again on a link that had nothing
    /// else to send.
    #[serde(default)]
    pub reinjected_idle: u64,
    /// Reinjected packets sent on another link.
    pub reinjections_sent: u64,
    /// Reinjections cancelled: the original was acknowledged before they went.
    pub reinjections_cancelled: u64,
    /// Reinjections given back to their link before they went: it answered again.
    #[serde(default)]
    pub reinjections_returned: u64,
    /// Reinjections sent although the original arrived too.
    pub reinjections_spurious: u64,
    /// Reinjections given up: no other link could take them in time.
    pub reinjections_expired: u64,
}

/// One inner flow as the receiving side sees it: where it came from and how much it
/// had to wait for reordering.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct FlowStatus {
    /// `proto src:port > dst:port` of its first packet that parsed, or the sender's
    /// flow id.
    pub flow: String,
    /// The links its packets came over in the last one to two seconds.
    pub links: Vec<String>,
    /// The reorder hold its latest out-of-order packet got, ms (absent: none needed).
    pub hold_ms: Option<f64>,
    /// While it is aligned (a redundant flow, `redundant_align`): how long its latest
    /// first copy waited for its slower copies, ms.
    #[serde(default)]
    pub align_ms: Option<f64>,
    /// Packets received (duplicates not counted).
    pub received: u64,
    /// Of those, how many came over each link (its first copy, for a redundant flow),
    /// by link name: how the binding point spread the flow.
    #[serde(default)]
    pub received_by_link: BTreeMap<String, u64>,
    /// Packets that waited for an earlier one.
    pub held: u64,
    /// Missing packets given up after the hold.
    pub gaps_skipped: u64,
    /// Packets that came after their gap was given up (delivered out of order).
    pub late_delivered: u64,
}

/// How many flows a session's status lists (the busiest).
pub const FLOWS_LISTED: usize = 16;

/// `proto src:port > dst:port` for a flow key.
fn flow_name(k: &latebind_proto::classify::FlowKey) -> String {
    let ip = |a: [u8; 16]| std::net::Ipv6Addr::from(a).to_canonical();
    let proto = match k.protocol {
        6 => "tcp".to_owned(),
        17 => "udp".to_owned(),
        1 | 58 => "icmp".to_owned(),
        p => format!("proto {p}"),
    };
    if k.src_port == 0 && k.dst_port == 0 {
        format!("{proto} {} > {}", ip(k.src), ip(k.dst))
    } else {
        let sa = std::net::SocketAddr::new(ip(k.src), k.src_port);
        let da = std::net::SocketAddr::new(ip(k.dst), k.dst_port);
        format!("{proto} {sa} > {da}")
    }
}

/// One session (the client's, or one client at the server).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct SessionStatus {
    /// Peer name (server) or "server" (client).
    pub peer: String,
    /// Session id.
    pub session: u32,
    /// Keys established.
    pub established: bool,
    /// Client: how long the current handshake (the first, or a rekey) has gone
    /// unanswered, s; `None` when none is waiting for an answer.
    #[serde(default)]
    pub handshake_unanswered_s: Option<f64>,
    /// Links.
    pub links: Vec<LinkStatus>,
    /// Packets above the binding point.
    pub queued_packets: usize,
    /// Bytes above the binding point.
    pub queued_bytes: usize,
    /// Flows above the binding point.
    pub flows: usize,
    /// Packets in reorder buffers.
    pub reorder_held_now: usize,
    /// Reorder hold time, ms.
    pub hold_ms: f64,
    /// Packets waiting to be reinjected on another link.
    #[serde(default)]
    pub reinject_pending: usize,
    /// Longest time from a link's last acknowledgement to its reinjection, ms.
    #[serde(default)]
    pub reinject_after_max_ms: f64,
    /// The busiest flows received ([`FLOWS_LISTED`] at most), busiest first.
    #[serde(default)]
    pub flows_received: Vec<FlowStatus>,
    /// Engine counters.
    pub engine: EngineCounters,
    /// Daemon counters.
    pub daemon: SessionCounters,
}

/// The whole daemon.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Status {
    /// client | server.
    pub role: String,
    /// TUN device.
    pub tun: String,
    /// TUN MTU.
    pub mtu: u16,
    /// Whether the TUN device runs with the kernel's segmentation offloads (`tun_offload`).
    #[serde(default)]
    pub tun_offload: bool,
    /// Seconds since start.
    pub uptime_s: f64,
    /// Sessions.
    pub sessions: Vec<SessionStatus>,
    /// Handshake datagrams rejected (unknown key, replay, malformed).
    pub handshakes_rejected: u64,
    /// Datagrams for no known session.
    pub unknown_session: u64,
    /// Packets from the TUN device dropped because no client owns their destination
    /// (server; not IPv4, or an address no peer has).
    #[serde(default)]
    pub no_client_for_destination: u64,
    /// Packets (with the TUN offloads: coalesced batches) the TUN device refused.
    #[serde(default)]
    pub tun_write_errors: u64,
    /// The dispatch stage's counters, when it is on.
    #[serde(default)]
    pub dispatch: Option<DispatchStatus>,
}

fn ms(d: core::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn mbps(bytes_per_sec: f64) -> f64 {
    (bytes_per_sec * 8.0 / 1e6 * 1000.0).round() / 1000.0
}

fn pct(share: f64) -> f64 {
    (share * 1e5).round() / 1e3
}

impl SessionStatus {
    /// Snapshot of a session.
    pub fn new(peer: &str, s: &Session, now: Instant, names: &dyn Fn(u16) -> String) -> Self {
        let e = &s.engine;
        let st = e.stats();
        let links = e
            .link_views(now)
            .iter()
            .map(|v| {
                let ls = e.link_stats(v.id).unwrap_or_default();
                LinkStatus {
                    name: names(v.id.0),
                    peer_address: None,
                    id: v.id.0,
                    state: match v.state {
                        LinkState::Up => "up",
                        LinkState::Suspect => "suspect",
                        LinkState::Down => "down",
                    }
                    .into(),
                    srtt_ms: ms(v.srtt),
                    rttvar_ms: ms(v.rttvar),
                    min_rtt_ms: ms(v.min_rtt),
                    rtt_measured: v.rtt_measured,
                    max_datagram: (v.max_datagram != usize::MAX).then_some(v.max_datagram),
                    tx_rate_mbps: mbps(v.tx_rate),
                    delivery_rate_mbps: mbps(v.delivery_rate),
                    in_flight: v.in_flight,
                    loss_pct: pct(v.loss_rate),
                    cc_rate_mbps: mbps(v.cc_rate),
                    cwnd_bytes: v.cwnd,
                    queue_delay_ms: ms(v.queue_delay),
                    return_delay_ms: ms(v.return_delay),
                    competitive: v.competitive,
                    below_binding: v.below_binding,
                    datagrams_sent: ls.datagrams_sent,
                    datagrams_received: ls.datagrams_received,
                    data_sent: ls.data_sent,
                    lost: ls.lost,
                    peer_reported_lost: ls.peer_reported_lost,
                    suspected: ls.suspected,
                    went_down: ls.went_down,
                    dropped_below_binding: ls.dropped_below_binding,
                    held_dropped: s.held_dropped(v.id),
                    reinjected: ls.reinjected,
                    rej_expired: ls.rej_expired,
                    last_reinject_after_ms: ms(ls.last_reinject_after),
                    longest_suspect_ms: ms(ls.longest_suspect),
                    probes_unheard: ls.probes_unheard,
                    acks_around: ls.acks_around,
                    acks_shortcut: ls.acks_shortcut,
                }
            })
            .collect();
        Self {
            peer: peer.to_owned(),
            session: e.config().session,
            established: s.established(),
            handshake_unanswered_s: None,
            links,
            queued_packets: e.queued_packets(),
            queued_bytes: e.queued_bytes(),
            flows: e.flow_count(),
            reorder_held_now: e.reorder_held(),
            hold_ms: ms(e.hold_time()),
            flows_received: e
                .reorder_flows(FLOWS_LISTED)
                .into_iter()
                .map(|f| FlowStatus {
                    flow: f
                        .key
                        .as_ref()
                        .map_or_else(|| format!("flow {:08x}", f.flow.0), flow_name),
                    links: f.links.iter().map(|l| names(l.0)).collect(),
                    hold_ms: f.hold.map(ms),
                    align_ms: f.align.map(ms),
                    received: f.counts.received,
                    received_by_link: f
                        .received_by_link
                        .iter()
                        .map(|&(l, n)| (names(l.0), n))
                        .collect(),
                    held: f.counts.held,
                    gaps_skipped: f.counts.gaps_skipped,
                    late_delivered: f.counts.late_delivered,
                })
                .collect(),
            engine: EngineCounters {
                tun_packets: st.tun_packets,
                tun_invalid: st.tun_invalid,
                tun_too_large: st.tun_too_large,
                aqm_dropped: st.queues.aqm_dropped,
                aqm_marked: st.queues.aqm_marked,
                overflow_dropped: st.queues.overflow_dropped,
                ack_filtered: st.queues.ack_filtered,
                window_clamped: st.window_clamped,
                data_bound: st.data_bound,
                small_past_window: st.small_past_window,
                malformed: st.malformed,
                wrong_session: st.wrong_session,
                unknown_link: st.unknown_link,
                duplicate_packets: st.duplicate_packets,
                duplicate_data: st.duplicate_data,
                too_old_data: st.too_old_data,
                acks_too_big_to_ride: st.acks_too_big_to_ride,
                acks_sent: st.acks_sent,
                acks_ridden: st.acks_ridden,
                rx_times_sent: st.rx_times_sent,
                templates_sent: st.templates_sent,
                compact_sent: st.compact_sent,
                compact_saved_bytes: st.compact_saved_bytes,
                templates_received: st.templates_received,
                compact_undecodable: st.compact_undecodable,
                data_oversized: st.data_oversized,
                too_big_dropped: st.too_big_dropped,
                too_big_signalled: st.too_big_signalled,
                reorder_held: st.reorder.held,
                reorder_gaps_skipped: st.reorder.gaps_skipped,
                late_delivered: st.reorder.late_delivered,
                reorder_aligned: st.reorder.aligned,
                reorder_waited_for_links: st.reorder.waited_for_links,
                reorder_gaps_lost: st.reorder.gaps_lost,
                reorder_acks_passed: st.reorder.acks_passed,
                lost: st.lost,
                reinjected_timer: st.reinjected_timer,
                reinjected_link_down: st.reinjected_link_down,
                reinjected_lost: st.reinjected_lost,
                reinjected_idle: st.reinjected_idle,
                reinjections_sent: st.reinjections_sent,
                reinjections_cancelled: st.reinjections_cancelled,
                reinjections_returned: st.reinjections_returned,
                reinjections_spurious: st.reinjections_spurious,
                reinjections_expired: st.reinjections_expired,
            },
            reinject_pending: e.reinject_pending(),
            reinject_after_max_ms: ms(st.reinject_after_max),
            daemon: s.counters,
        }
    }
}

impl Status {
    /// A readable table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} on {} (mtu {}{}), up {:.0} s",
            self.role,
            self.tun,
            self.mtu,
            if self.tun_offload { ", offloads" } else { "" },
            self.uptime_s
        );
        for ses in &self.sessions {
            let _ = writeln!(
                s,
                "session {:08x} peer {} {}  queued {} pkts / {} B in {} flows  reorder held {}  hold {:.1} ms",
                ses.session,
                ses.peer,
                match (ses.established, ses.handshake_unanswered_s) {
                    (true, _) => "established".to_owned(),
                    (false, Some(u)) if u >= 1.0 =>
                        format!("handshaking (unanswered for {u:.0} s)"),
                    (false, _) => "handshaking".to_owned(),
                },
                ses.queued_packets,
                ses.queued_bytes,
                ses.flows,
                ses.reorder_held_now,
                ses.hold_ms
            );
            let _ = writeln!(
                s,
                "  {:<10} {:>3} {:<8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8} {:>7} {:>6} {:>5} {:>9} {:>9} {:>6} {:>6}",
                "link",
                "id",
                "state",
                "srtt ms",
                "min ms",
                "tx Mb/s",
                "dlv Mb/s",
                "rate Mb/s",
                "queue ms",
                "back ms",
                "inflt",
                "below",
                "sent",
                "recv",
                "lost",
                "loss %"
            );
            for l in &ses.links {
                let _ = writeln!(
                    s,
                    "  {:<10} {:>3} {:<8} {:>8.2} {:>8.2} {:>9.2} {:>9.2} {:>9.2} {:>8.2} {:>7.2} {:>6} {:>5} {:>9} {:>9} {:>6} {:>6.2}",
                    l.name,
                    l.id,
                    if l.competitive {
                        "compete"
                    } else {
                        l.state.as_str()
                    },
                    l.srtt_ms,
                    l.min_rtt_ms,
                    l.tx_rate_mbps,
                    l.delivery_rate_mbps,
                    l.cc_rate_mbps,
                    l.queue_delay_ms,
                    l.return_delay_ms,
                    l.in_flight,
                    l.below_binding,
                    l.datagrams_sent,
                    l.datagrams_received,
                    l.lost,
                    l.loss_pct
                );
            }
            let at: Vec<String> = ses
                .links
                .iter()
                .filter_map(|l| Some(format!("{} {}", l.name, l.peer_address.as_ref()?)))
                .collect();
            if !at.is_empty() {
                let _ = writeln!(s, "  peer at: {}", at.join(", "));
            }
            let sizes: Vec<String> = ses
                .links
                .iter()
                .filter_map(|l| Some(format!("{} {} B", l.name, l.max_datagram?)))
                .collect();
            if !sizes.is_empty() {
                let _ = writeln!(s, "  largest datagram: {}", sizes.join(", "));
            }
            let e = &ses.engine;
            let d = &ses.daemon;
            let _ = writeln!(
                s,
                "  drops: aqm {} overflow {} acks-filtered {} windows-clamped {} too-big {} invalid {} malformed {} auth {} dup {} gaps {} send-errors {} spoofed {}  (late, delivered: {})",
                e.aqm_dropped,
                e.overflow_dropped,
                e.ack_filtered,
                e.window_clamped,
                e.too_big_dropped,
                e.tun_invalid,
                e.malformed,
                d.auth_failed,
                e.duplicate_packets + e.duplicate_data,
                e.reorder_gaps_skipped,
                d.send_errors,
                d.spoofed,
                e.late_delivered,
            );
            let _ = writeln!(
                s,
                "  acks: sent {} on data {} alone {} rx-times {}",
                e.acks_sent,
                e.acks_ridden,
                e.acks_sent.saturating_sub(e.acks_ridden),
                e.rx_times_sent,
            );
            let _ = writeln!(
                s,
                "  headers: compact {} templates {} saved {} B  received templates {} undecodable {}",
                e.compact_sent,
                e.templates_sent,
                e.compact_saved_bytes,
                e.templates_received,
                e.compact_undecodable,
            );
            let _ = writeln!(
                s,
                "  reinjections: timer {} link-down {} lost {} late {} sent {} cancelled {} given back {} spurious {} expired {} waiting {}  (longest after last ack {:.1} ms)",
                e.reinjected_timer,
                e.reinjected_link_down,
                e.reinjected_lost,
                e.reinjected_idle,
                e.reinjections_sent,
                e.reinjections_cancelled,
                e.reinjections_returned,
                e.reinjections_spurious,
                e.reinjections_expired,
                ses.reinject_pending,
                ses.reinject_after_max_ms,
            );
            let around: Vec<String> = ses
                .links
                .iter()
                .filter(|l| l.probes_unheard > 0 || l.acks_around > 0)
                .map(|l| {
                    format!(
                        "{} {} (probes unheard {})",
                        l.name, l.acks_around, l.probes_unheard
                    )
                })
                .collect();
            if !around.is_empty() {
                let _ = writeln!(
                    s,
                    "  acks sent around a paused direction: {}",
                    around.join(", ")
                );
            }
            let shortcut: Vec<String> = ses
                .links
                .iter()
                .filter(|l| l.acks_shortcut > 0)
                .map(|l| format!("{} {}", l.name, l.acks_shortcut))
                .collect();
            if !shortcut.is_empty() {
                let _ = writeln!(
                    s,
                    "  losses told over a shorter way back: {}",
                    shortcut.join(", ")
                );
            }
            if !ses.flows_received.is_empty() {
                let _ = writeln!(
                    s,
                    "  {:<47} {:<16} {:>8} {:>8} {:>9} {:>7} {:>6} {:>6}  recv by link",
                    "flow received", "links", "hold ms", "align ms", "recv", "held", "gaps", "late",
                );
            }
            let ms_or_dash =
                |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |h| format!("{h:.1}"));
            for f in &ses.flows_received {
                let _ = writeln!(
                    s,
                    "  {:<47} {:<16} {:>8} {:>8} {:>9} {:>7} {:>6} {:>6}  {}",
                    f.flow,
                    f.links.join(","),
                    ms_or_dash(f.hold_ms),
                    ms_or_dash(f.align_ms),
                    f.received,
                    f.held,
                    f.gaps_skipped,
                    f.late_delivered,
                    f.received_by_link
                        .iter()
                        .map(|(l, n)| format!("{l} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
        }
        if let Some(d) = &self.dispatch {
            let _ = writeln!(
                s,
                "dispatch: horizon {:.0} µs  sent {} late {} (>50 µs) submitted-late {} errors {}  lateness p50 {:.0} p99 {:.0} max {:.0} µs  cpu {:.1} s ({:.1} %)",
                d.horizon_us,
                d.sent,
                d.late,
                d.submitted_late,
                d.send_errors,
                d.lateness_p50_us,
                d.lateness_p99_us,
                d.lateness_max_us,
                d.cpu_s,
                d.cpu_percent,
            );
        }
        let _ = writeln!(
            s,
            "handshakes rejected {}  unknown session {}  no client for destination {}  tun write errors {}",
            self.handshakes_rejected,
            self.unknown_session,
            self.no_client_for_destination,
            self.tun_write_errors
        );
        s
    }

    /// Prometheus text exposition.
    pub fn prometheus(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# TYPE latebind_uptime_seconds gauge\nlatebind_uptime_seconds {}",
            self.uptime_s
        );
        let _ = writeln!(
            s,
            "latebind_handshakes_rejected_total {}",
            self.handshakes_rejected
        );
        let _ = writeln!(s, "latebind_unknown_session_total {}", self.unknown_session);
        let _ = writeln!(
            s,
            "latebind_no_client_for_destination_total {}",
            self.no_client_for_destination
        );
        let _ = writeln!(
            s,
            "latebind_tun_write_errors_total {}",
            self.tun_write_errors
        );
        if let Some(d) = &self.dispatch {
            for (k, v) in [
                ("sent_total", d.sent as f64),
                ("send_errors_total", d.send_errors as f64),
                ("late_total", d.late as f64),
                ("submitted_late_total", d.submitted_late as f64),
                ("lateness_p50_us", d.lateness_p50_us),
                ("lateness_p99_us", d.lateness_p99_us),
                ("lateness_max_us", d.lateness_max_us),
                ("cpu_seconds_total", d.cpu_s),
                ("horizon_us", d.horizon_us),
            ] {
                let _ = writeln!(s, "latebind_dispatch_{k} {v}");
            }
        }
        for ses in &self.sessions {
            let p = format!("peer=\"{}\",session=\"{:08x}\"", ses.peer, ses.session);
            let _ = writeln!(s, "latebind_queued_packets{{{p}}} {}", ses.queued_packets);
            let _ = writeln!(s, "latebind_queued_bytes{{{p}}} {}", ses.queued_bytes);
            let _ = writeln!(s, "latebind_reorder_hold_ms{{{p}}} {}", ses.hold_ms);
            let _ = writeln!(
                s,
                "latebind_reinject_pending{{{p}}} {}",
                ses.reinject_pending
            );
            let _ = writeln!(
                s,
                "latebind_reinject_after_max_ms{{{p}}} {}",
                ses.reinject_after_max_ms
            );
            let engine = serde_json::to_value(&ses.engine).unwrap_or_default();
            let daemon = serde_json::to_value(ses.daemon).unwrap_or_default();
            for (prefix, v) in [("engine", engine), ("daemon", daemon)] {
                if let Some(m) = v.as_object() {
                    for (k, v) in m {
                        let _ = writeln!(s, "latebind_{prefix}_{k}_total{{{p}}} {v}");
                    }
                }
            }
            for l in &ses.links {
                let lp = format!("{p},link=\"{}\"", l.name);
                let _ = writeln!(s, "latebind_link_up{{{lp}}} {}", u8::from(l.state == "up"));
                let _ = writeln!(s, "latebind_link_srtt_ms{{{lp}}} {}", l.srtt_ms);
                let _ = writeln!(s, "latebind_link_min_rtt_ms{{{lp}}} {}", l.min_rtt_ms);
                let _ = writeln!(s, "latebind_link_tx_rate_mbps{{{lp}}} {}", l.tx_rate_mbps);
                let _ = writeln!(s, "latebind_link_in_flight{{{lp}}} {}", l.in_flight);
                let _ = writeln!(s, "latebind_link_loss_pct{{{lp}}} {}", l.loss_pct);
                let _ = writeln!(s, "latebind_link_rate_mbps{{{lp}}} {}", l.cc_rate_mbps);
                let _ = writeln!(s, "latebind_link_cwnd_bytes{{{lp}}} {}", l.cwnd_bytes);
                if let Some(m) = l.max_datagram {
                    let _ = writeln!(s, "latebind_link_max_datagram_bytes{{{lp}}} {m}");
                }
                let _ = writeln!(
                    s,
                    "latebind_link_queue_delay_ms{{{lp}}} {}",
                    l.queue_delay_ms
                );
                let _ = writeln!(
                    s,
                    "latebind_link_return_delay_ms{{{lp}}} {}",
                    l.return_delay_ms
                );
                let _ = writeln!(
                    s,
                    "latebind_link_competitive{{{lp}}} {}",
                    u8::from(l.competitive)
                );
                let _ = writeln!(s, "latebind_link_below_binding{{{lp}}} {}", l.below_binding);
                let _ = writeln!(
                    s,
                    "latebind_link_datagrams_sent_total{{{lp}}} {}",
                    l.datagrams_sent
                );
                let _ = writeln!(
                    s,
                    "latebind_link_datagrams_received_total{{{lp}}} {}",
                    l.datagrams_received
                );
                let _ = writeln!(s, "latebind_link_lost_total{{{lp}}} {}", l.lost);
                let _ = writeln!(s, "latebind_link_suspected_total{{{lp}}} {}", l.suspected);
                let _ = writeln!(s, "latebind_link_reinjected_total{{{lp}}} {}", l.reinjected);
                let _ = writeln!(
                    s,
                    "latebind_link_probes_unheard_total{{{lp}}} {}",
                    l.probes_unheard
                );
                let _ = writeln!(
                    s,
                    "latebind_link_acks_around_total{{{lp}}} {}",
                    l.acks_around
                );
                let _ = writeln!(
                    s,
                    "latebind_link_acks_shortcut_total{{{lp}}} {}",
                    l.acks_shortcut
                );
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use latebind_proto::classify::FlowKey;

    use super::flow_name;

    fn v4(a: [u8; 4]) -> [u8; 16] {
        std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets()
    }

    #[test]
    fn flows_are_named_by_their_5_tuple() {
        let mut k = FlowKey {
            protocol: 6,
            src: v4([10, 77, 0, 2]),
            dst: v4([10, 77, 0, 1]),
            src_port: 40000,
            dst_port: 5201,
        };
        assert_eq!(flow_name(&k), "tcp 10.77.0.2:40000 > 10.77.0.1:5201");
        k.protocol = 1;
        (k.src_port, k.dst_port) = (0, 0);
        assert_eq!(flow_name(&k), "icmp 10.77.0.2 > 10.77.0.1");
        k.protocol = 17;
        k.src = std::net::Ipv6Addr::LOCALHOST.octets();
        (k.src_port, k.dst_port) = (53, 5353);
        assert_eq!(flow_name(&k), "udp [::1]:53 > 10.77.0.1:5353");
        k.protocol = 132;
        assert!(flow_name(&k).starts_with("proto 132 "));
    }
}
