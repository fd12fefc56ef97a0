//! The report of a run: the JSON of DESIGN.md section 4 (plus extra keys), and readable
//! tables.

use std::fmt::Write as _;

use latebind_traffic::Latency;
use serde::Serialize;

use crate::cuts::{CutReport, FlowCuts, cut_reports};
use crate::world::{Mode, Outcome, UnusedCause, UnusedTally};

/// Latency percentiles, milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyReport {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// One flow.
#[derive(Clone, Debug, Serialize)]
pub struct FlowReport {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: String,
    /// Packets (TCP: data segments) sent.
    pub sent: u64,
    /// Packets delivered to the receiving application.
    pub delivered: u64,
    /// Packets that never arrived (TCP: segments retransmitted by the sender).
    pub lost: u64,
    /// Packets delivered more than once.
    pub duplicates: u64,
    /// One-way latency of delivered packets.
    pub latency_ms: LatencyReport,
    /// Longest time the receiving application saw nothing while the flow was active.
    pub max_gap_ms: f64,
    /// Application goodput.
    pub goodput_mbps: f64,
    /// TCP: data segments retransmitted.
    pub retransmitted: u64,
    /// Application bytes delivered.
    pub bytes_delivered: u64,
}

/// One link.
#[derive(Clone, Debug, Serialize)]
pub struct LinkReport {
    /// Name.
    pub name: String,
    /// Packets the link accepted, both directions.
    pub packets_sent: u64,
    /// Packets lost on the link after acceptance (random loss, outages).
    pub lost_on_link: u64,
    /// Of those, lost to an outage, client -> server: for a local outage, what was
    /// committed to the link at the client's side when it went away (the late-binding
    /// paper's handoff loss); for a remote one (`outage_local = false`), every packet that
    /// left the client's side of the link during the outage.
    pub lost_at_outage_up: u64,
    /// Of those, lost to an outage, server -> client (in the network's queue or in flight).
    pub lost_at_outage_down: u64,
    /// Packets refused at the sender's side of the link because its FIFO was full.
    pub dropped_queue_full: u64,
    /// Packets refused because the link was out.
    pub dropped_outage: u64,
    /// Most packets ever waiting at the client's side of the link; for a link whose
    /// uplink bottleneck is in the network, in the uplink's FIFO there.
    pub max_queue_below_binding: usize,
    /// Packets moved off this link by reinjection, both ends.
    pub reinjected_from: u64,
    /// Inner packets bound to this link (mode late, both ends; reinjections and redundant
    /// copies included; 0 in mode early).
    pub data_sent: u64,
    /// Of those, the packets bound in each second of the run (mode late; the last entry
    /// is the rest of the run, drain included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_sent_per_s: Vec<u64>,
    /// Bytes the link delivered, client -> server and server -> client: the tunnel's
    /// datagrams and the IP packets of flows outside the tunnel. The simulator counts a
    /// tunnel datagram as its UDP payload (it models no outer IP and UDP headers); the
    /// lab counts what its emulator forwarded, by IP length. Against the link's rate (or
    /// a trace's mean) this is how much of it was used.
    pub bytes_delivered: [u64; 2],
    /// Rate control of the uplink (the client's engine) and the downlink (the server's),
    /// sampled every 10 ms while the link was up (mode late; absent when off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_control: Option<[CcReport; 2]>,
    /// How long the packets the link delivered spent in it, client -> server and server
    /// -> client (the tunnel's datagrams and the packets of flows outside the tunnel):
    /// from the moment the sender's side of the link accepted one to its arrival at the
    /// far end. Its excess over the link's one-way delay is the queue at the link's
    /// bottleneck as the packets met it (and, on a trace, the wait for a delivery
    /// opportunity). Simulator only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_delay_ms: Option<[LatencyReport; 2]>,
    /// The capacity each direction offered over the run that went unused, client ->
    /// server and server -> client, and what kept the link idle then (simulator; the
    /// lab gives the share alone, and none for an uplink it shapes at the client).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unused_capacity: Option<[Option<UnusedReport>; 2]>,
}

/// One direction's unused capacity over the run (see `world::UnusedTally`).
#[derive(Clone, Debug, Serialize)]
pub struct UnusedReport {
    /// Of what the direction offered (what it transmitted plus what passed unused: a
    /// trace's delivery opportunities that came while nothing waited in the link, a fixed
    /// rate's idle time), the share that went unused, %.
    pub pct: f64,
    /// Of the unused capacity, the share by what the sending engine was doing at the
    /// start of each 10 ms interval, % (mode late; see `world::UnusedCause`): nothing
    /// waited above its binding point (the inner flows sent no more);
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nothing_waiting_pct: Option<f64>,
    /// packets waited and the engine did not have the link up (suspect or down);
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_up_pct: Option<f64>,
    /// packets waited and the link's window was full;
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_pct: Option<f64>,
    /// packets waited, the window had room, and the budget below the binding point was
    /// taken;
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_pct: Option<f64>,
    /// packets waited, the window had room, and the link's pacer held the next one;
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pacer_pct: Option<f64>,
    /// packets waited and nothing of the link held them: the binding policy kept them
    /// for other links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elsewhere_pct: Option<f64>,
}

fn pct(part: u64, of: u64) -> f64 {
    round3(part as f64 * 100.0 / of.max(1) as f64)
}

impl UnusedReport {
    /// The unused share of what was offered, without its causes.
    pub fn share(offered: u64, unused: u64) -> Self {
        Self {
            pct: pct(unused, offered),
            nothing_waiting_pct: None,
            not_up_pct: None,
            window_pct: None,
            budget_pct: None,
            pacer_pct: None,
            elsewhere_pct: None,
        }
    }

    fn of(t: &UnusedTally, late: bool) -> Self {
        let share = |c: UnusedCause| late.then(|| pct(t.by_cause[c as usize], t.unused));
        Self {
            pct: pct(t.unused, t.offered),
            nothing_waiting_pct: share(UnusedCause::NothingWaiting),
            not_up_pct: share(UnusedCause::NotUp),
            window_pct: share(UnusedCause::Window),
            budget_pct: share(UnusedCause::Budget),
            pacer_pct: share(UnusedCause::Pacer),
            elsewhere_pct: share(UnusedCause::Elsewhere),
        }
    }
}

/// One direction's rate control over the run.
#[derive(Clone, Debug, Serialize)]
pub struct CcReport {
    /// Mean estimated rate (window over standing RTT), Mbit/s.
    pub mean_rate_mbps: f64,
    /// Mean queueing delay at the bottleneck, ms.
    pub mean_queue_ms: f64,
    /// Largest queueing delay sampled, ms.
    pub max_queue_ms: f64,
    /// Mean time the acknowledgements waited on the way back beyond its minimum, ms
    /// (the window covers it).
    pub mean_return_ms: f64,
    /// Share of the samples in competitive mode, percent.
    pub competitive_pct: f64,
    /// The link's minimum RTT at the end of the run, ms.
    pub min_rtt_ms: f64,
    /// Mean number of datagrams below the binding point (the standing queue there).
    pub mean_below_binding: f64,
}

impl CcReport {
    /// The queue's mean and largest delay, `mean/max` in ms, for the text tables.
    fn queue_text(&self) -> String {
        format!("{:.1}/{:.1}", self.mean_queue_ms, self.max_queue_ms)
    }
}

/// Totals.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    /// Sum of the flows' `lost`.
    pub lost: u64,
    /// Reinjected packets sent on another link, both ends.
    pub reinjected: u64,
    /// Reinjections whose original also arrived (acknowledged later), both ends.
    pub spurious_reinjections: u64,
}

/// Engine counters (mode late), both ends.
#[derive(Clone, Debug, Serialize)]
pub struct EngineReport {
    /// Packets dropped or CE-marked by per-flow AQM, client + server.
    pub aqm_dropped: u64,
    /// Packets CE-marked by AQM.
    pub aqm_marked: u64,
    /// Packets dropped because a queue limit was reached.
    pub overflow_dropped: u64,
    /// Pure TCP acknowledgements replaced in their queue by a later one.
    pub ack_filtered: u64,
    /// TCP segments whose window the receive-window clamp lowered, client + server.
    #[serde(default)]
    pub window_clamped: u64,
    /// Small flows' packets sent past a link's full window.
    pub small_past_window: u64,
    /// ACK frames sent, [client, server].
    pub acks_sent: [u64; 2],
    /// ACK frames that rode on a data packet, [client, server].
    pub acks_ridden: [u64; 2],
    /// RX_TIME frames sent, [client, server].
    pub rx_times_sent: [u64; 2],
    /// Header compression: DATA_COMPACT frames sent, [client, server].
    #[serde(default)]
    pub compact_sent: [u64; 2],
    /// DATA_TEMPLATE frames sent, [client, server].
    #[serde(default)]
    pub templates_sent: [u64; 2],
    /// Bytes the DATA_COMPACT frames saved against DATA frames, [client, server].
    #[serde(default)]
    pub compact_saved_bytes: [u64; 2],
    /// DATA_COMPACT frames the receiver could not expand (dropped), both ends.
    #[serde(default)]
    pub compact_undecodable: u64,
    /// Packets that waited in a reorder buffer.
    pub reorder_held: u64,
    /// Missing packets given up after the hold time.
    pub reorder_gaps_skipped: u64,
    /// Packets that arrived after their gap was given up (delivered out of order).
    pub late_delivered: u64,
    /// Gaps held past their hold time while a link was behind them.
    pub reorder_waited_for_links: u64,
    /// Gaps of flows whose sender does not re-send their losses given up before their
    /// hold time: no link could still bring the missing packet.
    pub reorder_gaps_lost: u64,
    /// TCP acknowledgements delivered past a gap before them instead of waiting for it.
    pub reorder_acks_passed: u64,
    /// Packets taken for reinjection because a link's reinjection timer expired.
    pub reinjected_timer: u64,
    /// Packets taken for reinjection because a link went down.
    pub reinjected_link_down: u64,
    /// Packets of aggregate flows declared lost on a working link and sent again on
    /// another.
    #[serde(default)]
    pub reinjected_lost: u64,
    /// Packets of aggregate flows late on one link sent again on a link that had nothing
    /// else to send.
    #[serde(default)]
    pub reinjected_idle: u64,
    /// Reinjections cancelled before they went (the original was acknowledged).
    pub reinjections_cancelled: u64,
    /// Reinjections given back to their link before they went (it answered again, and
    /// the packet was still on its way there).
    #[serde(default)]
    pub reinjections_returned: u64,
    /// Reinjections given up (no other link could take them in time).
    pub reinjections_expired: u64,
    /// Longest time from a link's last acknowledgement to its reinjection, ms.
    pub reinject_after_max_ms: f64,
    /// Times a link became suspect, both ends.
    pub suspected: u64,
    /// Longest time a link stayed suspect before it answered again, ms.
    pub longest_suspect_ms: f64,
    /// Probes that showed a link's acknowledgements unheard while the prober's direction
    /// delivered, both ends (`docs/protocol.md` 3.12).
    #[serde(default)]
    pub probes_unheard: u64,
    /// Acknowledgement frames sent on another link than the one they acknowledge
    /// meanwhile, both ends.
    #[serde(default)]
    pub acks_around: u64,
    /// Copies of a link's ACK that told the peer of a loss over a link whose way back is
    /// shorter, both ends (`docs/protocol.md` 4.3).
    #[serde(default)]
    pub acks_shortcut: u64,
    /// Duplicate data frames dropped.
    pub duplicate_data: u64,
    /// Malformed datagrams dropped.
    pub malformed: u64,
    /// Hold time in force at the end (client, server), ms.
    pub hold_ms: [f64; 2],
    /// Share of 10 ms samples in which the per-flow queues above the binding point held
    /// two full-size packets or less (client, server), %: the inner flows, not the
    /// links' windows, set the pace then. Simulator only (`None` in the lab).
    pub short_backlog_pct: Option<[f64; 2]>,
}

/// A run's report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// late | early.
    pub mode: String,
    /// Seed.
    pub seed: u64,
    /// Label of the variant (for comparisons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Flows, in scenario order.
    pub flows: Vec<FlowReport>,
    /// Links, in scenario order.
    pub links: Vec<LinkReport>,
    /// What each flow saw around each outage start of each link, in time order (see
    /// [`crate::cuts`]).
    pub cuts: Vec<CutReport>,
    /// Totals.
    pub totals: Totals,
    /// Engine counters (mode late).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineReport>,
    /// The simulator's own counters.
    pub simulator: SimReport,
}

/// The simulator's own counters.
#[derive(Clone, Debug, Serialize)]
pub struct SimReport {
    /// Event-loop steps.
    pub steps: u64,
    /// Steps at which nothing could act (see `Outcome::stalls`).
    pub stalls: u64,
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl LatencyReport {
    /// The percentiles, rounded to the microsecond.
    pub fn of(l: &Latency) -> Self {
        Self {
            p50: round3(l.p50),
            p95: round3(l.p95),
            p99: round3(l.p99),
            max: round3(l.max),
        }
    }
}

impl Report {
    /// Builds the report of a finished run.
    pub fn new(name: &str, seed: u64, link_names: &[String], outcome: &Outcome) -> Self {
        let reports: Vec<latebind_traffic::FlowReport> = outcome
            .flows
            .iter()
            .map(|f| f.report(outcome.end))
            .collect();
        let flow_cuts: Vec<FlowCuts<'_>> = reports
            .iter()
            .map(|r| FlowCuts {
                name: &r.name,
                counts_loss: !r.kind.is_reliable(),
                stats: &r.cuts,
            })
            .collect();
        let cuts = cut_reports(&outcome.cuts, link_names, &flow_cuts);
        let flows: Vec<FlowReport> = reports
            .into_iter()
            .map(|r| FlowReport {
                name: r.name,
                kind: r.kind.to_string(),
                sent: r.sent,
                delivered: r.delivered,
                lost: r.lost,
                duplicates: r.duplicates,
                latency_ms: LatencyReport::of(&r.latency_ms),
                max_gap_ms: round3(r.max_gap_ms),
                goodput_mbps: round3(r.goodput_mbps),
                retransmitted: r.retransmitted,
                bytes_delivered: r.bytes_delivered,
            })
            .collect();
        let engine_sum = |f: &dyn Fn(&latebind_proto::Endpoint) -> u64| -> u64 {
            outcome.engines.as_ref().map_or(0, |(c, s)| f(c) + f(s))
        };
        let links = outcome
            .links
            .iter()
            .zip(link_names)
            .enumerate()
            .map(|(i, (t, name))| {
                let data_sent = engine_sum(&|e| {
                    e.link_stats(latebind_proto::LinkId(i as u16))
                        .map_or(0, |s| s.data_sent)
                });
                let network_delay_ms = t
                    .network_delay_ms
                    .each_ref()
                    .map(|v| LatencyReport::of(&Latency::from_samples(v)));
                LinkReport {
                    name: name.clone(),
                    packets_sent: t.packets_sent,
                    lost_on_link: t.lost_on_link,
                    lost_at_outage_up: t.lost_at_outage_up,
                    lost_at_outage_down: t.lost_at_outage_down,
                    dropped_queue_full: t.dropped_queue_full,
                    dropped_outage: t.dropped_outage,
                    max_queue_below_binding: t.max_queue_below_binding,
                    bytes_delivered: t.bytes_delivered,
                    reinjected_from: engine_sum(&|e| {
                        e.link_stats(latebind_proto::LinkId(i as u16))
                            .map_or(0, |s| s.reinjected)
                    }),
                    rate_control: (t.rate_control.iter().any(|c| c.samples > 0)).then(|| {
                        t.rate_control.clone().map(|c| {
                            let n = c.samples.max(1) as f64;
                            CcReport {
                                mean_rate_mbps: round3(c.rate_sum / n * 8e-6),
                                mean_queue_ms: round3(c.queue_sum / n * 1e3),
                                max_queue_ms: round3(c.queue_max * 1e3),
                                mean_return_ms: round3(c.return_sum / n * 1e3),
                                competitive_pct: round3(c.competitive as f64 / n * 100.0),
                                min_rtt_ms: round3(c.min_rtt.as_secs_f64() * 1e3),
                                mean_below_binding: round3(c.below_sum as f64 / n),
                            }
                        })
                    }),
                    network_delay_ms: Some(network_delay_ms),
                    unused_capacity: Some(
                        t.unused
                            .each_ref()
                            .map(|u| Some(UnusedReport::of(u, outcome.mode == Mode::Late))),
                    ),
                    data_sent,
                    data_sent_per_s: if t.data_sent_by_s.is_empty() {
                        Vec::new()
                    } else {
                        t.data_sent_by_s
                            .iter()
                            .chain([&data_sent])
                            .scan(0, |prev, &n| Some(n - std::mem::replace(prev, n)))
                            .collect()
                    },
                }
            })
            .collect();
        let engine = outcome.engines.as_ref().map(|(c, s)| {
            let (cs, ss) = (c.stats(), s.stats());
            // A per-link counter summed over both ends' links.
            let links_sum = |f: fn(&latebind_proto::LinkStats) -> u64| -> u64 {
                [c, s]
                    .iter()
                    .flat_map(|e| e.all_link_stats())
                    .map(|(_, st)| f(&st))
                    .sum()
            };
            EngineReport {
                aqm_dropped: cs.queues.aqm_dropped + ss.queues.aqm_dropped,
                aqm_marked: cs.queues.aqm_marked + ss.queues.aqm_marked,
                overflow_dropped: cs.queues.overflow_dropped + ss.queues.overflow_dropped,
                ack_filtered: cs.queues.ack_filtered + ss.queues.ack_filtered,
                window_clamped: cs.window_clamped + ss.window_clamped,
                small_past_window: cs.small_past_window + ss.small_past_window,
                acks_sent: [cs.acks_sent, ss.acks_sent],
                acks_ridden: [cs.acks_ridden, ss.acks_ridden],
                rx_times_sent: [cs.rx_times_sent, ss.rx_times_sent],
                compact_sent: [cs.compact_sent, ss.compact_sent],
                templates_sent: [cs.templates_sent, ss.templates_sent],
                compact_saved_bytes: [cs.compact_saved_bytes, ss.compact_saved_bytes],
                compact_undecodable: cs.compact_undecodable + ss.compact_undecodable,
                reorder_held: cs.reorder.held + ss.reorder.held,
                reorder_gaps_skipped: cs.reorder.gaps_skipped + ss.reorder.gaps_skipped,
                late_delivered: cs.reorder.late_delivered + ss.reorder.late_delivered,
                reorder_waited_for_links: cs.reorder.waited_for_links + ss.reorder.waited_for_links,
                reorder_gaps_lost: cs.reorder.gaps_lost + ss.reorder.gaps_lost,
                reorder_acks_passed: cs.reorder.acks_passed + ss.reorder.acks_passed,
                reinjected_timer: cs.reinjected_timer + ss.reinjected_timer,
                reinjected_link_down: cs.reinjected_link_down + ss.reinjected_link_down,
                reinjected_lost: cs.reinjected_lost + ss.reinjected_lost,
                reinjected_idle: cs.reinjected_idle + ss.reinjected_idle,
                reinjections_cancelled: cs.reinjections_cancelled + ss.reinjections_cancelled,
                reinjections_returned: cs.reinjections_returned + ss.reinjections_returned,
                reinjections_expired: cs.reinjections_expired + ss.reinjections_expired,
                suspected: links_sum(|st| st.suspected),
                longest_suspect_ms: round3(
                    [c, s]
                        .iter()
                        .flat_map(|e| e.all_link_stats())
                        .map(|(_, st)| st.longest_suspect)
                        .max()
                        .unwrap_or_default()
                        .as_secs_f64()
                        * 1e3,
                ),
                probes_unheard: links_sum(|st| st.probes_unheard),
                acks_around: links_sum(|st| st.acks_around),
                acks_shortcut: links_sum(|st| st.acks_shortcut),
                reinject_after_max_ms: round3(
                    cs.reinject_after_max
                        .max(ss.reinject_after_max)
                        .as_secs_f64()
                        * 1e3,
                ),
                duplicate_data: cs.duplicate_data + ss.duplicate_data,
                malformed: cs.malformed + ss.malformed,
                hold_ms: [
                    round3(c.hold_time().as_secs_f64() * 1e3),
                    round3(s.hold_time().as_secs_f64() * 1e3),
                ],
                short_backlog_pct: Some(
                    outcome
                        .backlog
                        .map(|b| round3(b.short as f64 / b.samples.max(1) as f64 * 100.0)),
                ),
            }
        });
        Self {
            scenario: name.to_owned(),
            mode: outcome.mode.name().to_owned(),
            seed,
            label: None,
            totals: Totals {
                lost: flows.iter().map(|f| f.lost).sum(),
                reinjected: engine_sum(&|e| e.stats().reinjections_sent),
                spurious_reinjections: engine_sum(&|e| e.stats().reinjections_spurious),
            },
            flows,
            links,
            cuts,
            engine,
            simulator: SimReport {
                steps: outcome.steps,
                stalls: outcome.stalls,
            },
        }
    }

    /// A readable table of one run.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {}  mode {}  seed {}",
            self.scenario, self.mode, self.seed
        );
        let _ = writeln!(
            s,
            "{:<12} {:<10} {:>8} {:>9} {:>6} {:>5} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "flow",
            "kind",
            "sent",
            "delivered",
            "lost",
            "dup",
            "p50 ms",
            "p99 ms",
            "max ms",
            "gap ms",
            "Mbit/s"
        );
        for f in &self.flows {
            let _ = writeln!(
                s,
                "{:<12} {:<10} {:>8} {:>9} {:>6} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>9.1} {:>8.2}",
                f.name,
                f.kind,
                f.sent,
                f.delivered,
                f.lost,
                f.duplicates,
                f.latency_ms.p50,
                f.latency_ms.p99,
                f.latency_ms.max,
                f.max_gap_ms,
                f.goodput_mbps
            );
        }
        let _ = writeln!(
            s,
            "{:<12} {:>8} {:>9} {:>14} {:>10} {:>10}",
            "link", "sent", "lost", "outage up/down", "fifo full", "max below"
        );
        for l in &self.links {
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:>9} {:>14} {:>10} {:>10}",
                l.name,
                l.packets_sent,
                l.lost_on_link,
                format!("{}/{}", l.lost_at_outage_up, l.lost_at_outage_down),
                l.dropped_queue_full,
                l.max_queue_below_binding
            );
        }
        if self.links.iter().any(|l| l.rate_control.is_some()) {
            let _ = writeln!(
                s,
                "{:<12} {:<8} {:>11} {:>10} {:>17} {:>9} {:>10} {:>9}",
                "rate control",
                "sender",
                "window Mb/s",
                "min RTT ms",
                "queue ms mean/max",
                "return ms",
                "below mean",
                "compete %"
            );
        }
        for l in &self.links {
            let Some(rc) = &l.rate_control else { continue };
            for (c, side) in rc.iter().zip(["client", "server"]) {
                let _ = writeln!(
                    s,
                    "{:<12} {:<8} {:>11.2} {:>10.1} {:>17} {:>9.1} {:>10.2} {:>9.1}",
                    l.name,
                    side,
                    c.mean_rate_mbps,
                    c.min_rtt_ms,
                    c.queue_text(),
                    c.mean_return_ms,
                    c.mean_below_binding,
                    c.competitive_pct
                );
            }
        }
        if self.links.iter().any(|l| l.unused_capacity.is_some()) {
            let _ = writeln!(
                s,
                "{:<12} {:<4} {:>8} {:>8} {:>7} {:>7} {:>7} {:>6} {:>10}",
                "unused",
                "dir",
                "% of cap",
                "nothing",
                "not up",
                "window",
                "budget",
                "pacer",
                "elsewhere"
            );
        }
        for l in &self.links {
            let Some(u) = &l.unused_capacity else {
                continue;
            };
            for (u, dir) in u.iter().zip(["up", "down"]) {
                let Some(u) = u else { continue };
                let share =
                    |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
                let _ = writeln!(
                    s,
                    "{:<12} {:<4} {:>8.1} {:>8} {:>7} {:>7} {:>7} {:>6} {:>10}",
                    l.name,
                    dir,
                    u.pct,
                    share(u.nothing_waiting_pct),
                    share(u.not_up_pct),
                    share(u.window_pct),
                    share(u.budget_pct),
                    share(u.pacer_pct),
                    share(u.elsewhere_pct)
                );
            }
        }
        if !self.cuts.is_empty() {
            let _ = writeln!(
                s,
                "{:<12} {:>8} {:<12} {:>9} {:>13} {:>6}",
                "cut", "at s", "flow", "stall ms", "data again ms", "lost"
            );
        }
        for c in &self.cuts {
            let _ = writeln!(
                s,
                "{:<12} {:>8.3} {:<12} {:>9.1} {:>13} {:>6}",
                c.link,
                c.at_s,
                c.flow,
                c.stall_ms,
                data_again(c),
                c.lost.map_or_else(|| "-".to_owned(), |n| n.to_string())
            );
        }
        if let Some(e) = &self.engine {
            let _ = writeln!(
                s,
                "reinjected {} (timer {}, link down {}, cancelled {}, given back {}, expired {}), \
                 spurious {}, \
                 lost and sent again {}, late and sent again on an idle link {}; \
                 suspected {} times, longest {:.1} ms; \
                 acknowledgements sent around a paused direction {} (probes unheard {}); \
                 losses told over a shorter way back {}",
                self.totals.reinjected,
                e.reinjected_timer,
                e.reinjected_link_down,
                e.reinjections_cancelled,
                e.reinjections_returned,
                e.reinjections_expired,
                self.totals.spurious_reinjections,
                e.reinjected_lost,
                e.reinjected_idle,
                e.suspected,
                e.longest_suspect_ms,
                e.acks_around,
                e.probes_unheard,
                e.acks_shortcut
            );
        }
        s
    }
}

/// The compare table's engine rows (`-` for a run without engines).
fn engine_rows(reports: &[Report], rows: &mut Vec<(String, Vec<String>)>) {
    if reports.iter().all(|r| r.engine.is_none()) {
        return;
    }
    let e = |f: &dyn Fn(&Report, &EngineReport) -> String| -> Vec<String> {
        reports
            .iter()
            .map(|r| {
                r.engine
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), |e| f(r, e))
            })
            .collect()
    };
    rows.push((
        "reinjected: timer / link down / lost / late, to an idle link".into(),
        e(&|_, e| {
            format!(
                "{} / {} / {} / {}",
                e.reinjected_timer, e.reinjected_link_down, e.reinjected_lost, e.reinjected_idle
            )
        }),
    ));
    rows.push((
        "reinjected: sent / spurious".into(),
        e(&|r, _| {
            format!(
                "{} / {}",
                r.totals.reinjected, r.totals.spurious_reinjections
            )
        }),
    ));
    rows.push((
        "suspected / longest ms".into(),
        e(&|_, e| format!("{} / {:.1}", e.suspected, e.longest_suspect_ms)),
    ));
    rows.push((
        "acks around / probes unheard".into(),
        e(&|_, e| format!("{} / {}", e.acks_around, e.probes_unheard)),
    ));
    rows.push((
        "losses told over a shorter way back".into(),
        e(&|_, e| e.acks_shortcut.to_string()),
    ));
}

/// `data_again_ms` for the tables: one decimal, `-` when none came.
fn data_again(c: &CutReport) -> String {
    c.data_again_ms
        .map_or_else(|| "-".to_owned(), |m| format!("{m:.1}"))
}

/// Runs side by side: one row per figure, one column per run.
pub fn compare_table(reports: &[Report]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let Some(first) = reports.first() else {
        return String::new();
    };
    let col = |f: &dyn Fn(&Report) -> String| reports.iter().map(f).collect::<Vec<_>>();
    rows.push(("mode".into(), col(&|r| r.mode.clone())));
    for (i, f) in first.flows.iter().enumerate() {
        let n = &f.name;
        let flow = move |r: &Report| r.flows[i].clone();
        rows.push((
            format!("{n}: delivered/sent"),
            col(&|r| format!("{}/{}", flow(r).delivered, flow(r).sent)),
        ));
        rows.push((format!("{n}: lost"), col(&|r| flow(r).lost.to_string())));
        rows.push((
            format!("{n}: latency p50 ms"),
            col(&|r| format!("{:.2}", flow(r).latency_ms.p50)),
        ));
        rows.push((
            format!("{n}: latency p95 ms"),
            col(&|r| format!("{:.2}", flow(r).latency_ms.p95)),
        ));
        rows.push((
            format!("{n}: latency p99 ms"),
            col(&|r| format!("{:.2}", flow(r).latency_ms.p99)),
        ));
        rows.push((
            format!("{n}: max gap ms"),
            col(&|r| format!("{:.1}", flow(r).max_gap_ms)),
        ));
        rows.push((
            format!("{n}: goodput Mbit/s"),
            col(&|r| format!("{:.2}", flow(r).goodput_mbps)),
        ));
    }
    for (i, l) in first.links.iter().enumerate() {
        let n = &l.name;
        let link = move |r: &Report| r.links[i].clone();
        rows.push((
            format!("{n}: lost at outage, up"),
            col(&|r| link(r).lost_at_outage_up.to_string()),
        ));
        rows.push((
            format!("{n}: lost at outage, down"),
            col(&|r| link(r).lost_at_outage_down.to_string()),
        ));
        rows.push((
            format!("{n}: lost on link"),
            col(&|r| link(r).lost_on_link.to_string()),
        ));
        rows.push((
            format!("{n}: FIFO-full drops"),
            col(&|r| link(r).dropped_queue_full.to_string()),
        ));
        rows.push((
            format!("{n}: max below binding"),
            col(&|r| link(r).max_queue_below_binding.to_string()),
        ));
        // Rate control's queue at the bottleneck, each sender's view (`-` without it).
        for (side, name) in [(0, "client"), (1, "server")] {
            rows.push((
                format!("{n}: queue ms mean/max, {name} sending"),
                col(&|r| {
                    link(r)
                        .rate_control
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), |c| c[side].queue_text())
                }),
            ));
        }
    }
    engine_rows(reports, &mut rows);
    // Cuts: one group of rows per (link, time, flow) that any run reports (variants may
    // move the outages), `-` in the runs that do not have it.
    let mut keys: Vec<(&str, f64, &str)> = Vec::new();
    for c in reports.iter().flat_map(|r| &r.cuts) {
        let k = (c.link.as_str(), c.at_s, c.flow.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (link, at_s, flow) in keys {
        let find = |r: &Report| {
            r.cuts
                .iter()
                .find(|c| (c.link.as_str(), c.at_s, c.flow.as_str()) == (link, at_s, flow))
                .cloned()
        };
        let cell =
            |f: &dyn Fn(&CutReport) -> String| col(&|r| find(r).map_or("-".into(), |c| f(&c)));
        let k = format!("cut {link} {at_s:.3} s, {flow}");
        rows.push((
            format!("{k}: stall ms"),
            cell(&|c| format!("{:.1}", c.stall_ms)),
        ));
        rows.push((format!("{k}: data again ms"), cell(&data_again)));
        if reports.iter().filter_map(find).any(|c| c.lost.is_some()) {
            rows.push((
                format!("{k}: lost"),
                cell(&|c| c.lost.map_or("-".into(), |n| n.to_string())),
            ));
        }
    }
    let headers: Vec<String> = reports
        .iter()
        .map(|r| r.label.clone().unwrap_or_else(|| r.mode.clone()))
        .collect();
    let w0 = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0).max(8);
    let widths: Vec<usize> = (0..reports.len())
        .map(|c| {
            rows.iter()
                .map(|(_, v)| v[c].len())
                .chain([headers[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut s = String::new();
    let _ = writeln!(s, "scenario {}  seed {}", first.scenario, first.seed);
    let _ = write!(s, "{:<w0$}", "");
    for (h, w) in headers.iter().zip(&widths) {
        let _ = write!(s, "  {h:>w$}");
    }
    s.push('\n');
    for (k, v) in &rows {
        let _ = write!(s, "{k:<w0$}");
        for (x, w) in v.iter().zip(&widths) {
            let _ = write!(s, "  {x:>w$}");
        }
        s.push('\n');
    }
    s
}

/// Runs `scenario` in `mode` and reports.
pub fn run(scenario: &crate::Scenario, mode: Mode) -> Result<Report, crate::ScenarioError> {
    let world = crate::World::new(scenario, mode)?;
    let outcome = world.run();
    let names: Vec<String> = scenario.spec.links.iter().map(|l| l.name.clone()).collect();
    Ok(Report::new(
        &scenario.spec.scenario.name,
        scenario.spec.scenario.seed,
        &names,
        &outcome,
    ))
}
