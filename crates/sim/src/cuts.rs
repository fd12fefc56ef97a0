//! Cuts: the report of what each flow's application saw around each outage start of each
//! link, shared by the simulator and the lab.
//!
//! The measurement itself (windows, stall, data again, loss) is
//! `latebind_traffic::cuts`, re-exported here: the simulator's flows and the lab's
//! traffic tool both feed a [`CutTracker`]. This module lists the scenario's cuts
//! ([`cuts`]) and turns the flows' [`CutStats`] into the report's [`CutReport`]s
//! ([`cut_reports`]). In short, for a cut at `c` and a flow active at `c`:
//!
//! - `stall_ms`: the longest time in `[c, b)` without a delivery to the receiving
//!   application, `b` being the next cut of any link or the flow's stop, whichever comes
//!   first (counted from `c` at the earliest and to `b` at the latest);
//! - `data_again_ms`: from `c` to the delivery that ended that stall (`null`: none before
//!   `b`);
//! - `lost` (UDP flows): packets sent in `[c - 1 s, min(c + 2 s, next cut))` that never
//!   arrived (`null` for TCP).

use std::time::Duration;

use serde::Serialize;

pub use latebind_traffic::cuts::{
    CutStats, CutTracker, CutWindow, LOSS_AFTER, LOSS_BEFORE, windows,
};

use crate::Scenario;

/// One cut: the start of an outage of one link (after merging the link's overlapping or
/// touching outages, as the link model does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// The link's index in the scenario.
    pub link: usize,
    /// When it went out, from scenario time 0.
    pub at: Duration,
}

/// Every cut of the scenario, local and remote, in time order (ties in link order).
pub fn cuts(scenario: &Scenario) -> Vec<Cut> {
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let mut v = Vec::new();
    for (link, l) in scenario.spec.links.iter().enumerate() {
        let mut spans: Vec<(Duration, Duration)> = l
            .outages
            .iter()
            .map(|[a, b]| (secs(*a), secs(*b)))
            .collect();
        spans.sort_unstable();
        let mut end: Option<Duration> = None;
        for (a, b) in spans {
            if end.is_none_or(|e| a > e) {
                v.push(Cut { link, at: a });
            }
            end = Some(end.map_or(b, |e| e.max(b)));
        }
    }
    v.sort_by_key(|c| (c.at, c.link));
    v
}

/// The instants of `cuts`, for [`windows`].
pub fn instants(cuts: &[Cut]) -> Vec<Duration> {
    cuts.iter().map(|c| c.at).collect()
}

/// What one flow's application saw around one cut of one link.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CutReport {
    /// The link that went out.
    pub link: String,
    /// When, scenario time, s.
    pub at_s: f64,
    /// The flow.
    pub flow: String,
    /// The longest time without a delivery from the cut to the next cut of any link or
    /// the flow's stop, ms.
    pub stall_ms: f64,
    /// From the cut to the delivery that ended that stall, ms; `None` (`null`): no
    /// delivery ended it before the next cut or the flow's stop.
    pub data_again_ms: Option<f64>,
    /// UDP flows: packets sent from 1 s before the cut to 2 s after it (or the next cut,
    /// if earlier) that never arrived; `None` (`null`) for TCP flows.
    pub lost: Option<u64>,
}

/// One flow's figures around the cuts, as it reported them.
#[derive(Clone, Copy, Debug)]
pub struct FlowCuts<'a> {
    /// The flow's name.
    pub name: &'a str,
    /// Whether its loss per cut is known (a UDP flow whose sends were counted).
    pub counts_loss: bool,
    /// One entry per cut in the flow's active period (from its [`CutTracker`]).
    pub stats: &'a [CutStats],
}

/// The report's cuts: for each cut (in time order, then link order), each flow active
/// at it (in scenario order).
pub fn cut_reports(cuts: &[Cut], link_names: &[String], flows: &[FlowCuts<'_>]) -> Vec<CutReport> {
    let ms = |d: Duration| (d.as_nanos() as f64 / 1e3).round() / 1e3;
    let mut v = Vec::new();
    for c in cuts {
        for f in flows {
            let Some(s) = f.stats.iter().find(|s| s.at == c.at) else {
                continue;
            };
            v.push(CutReport {
                link: link_names.get(c.link).cloned().unwrap_or_default(),
                at_s: c.at.as_nanos() as f64 / 1e9,
                flow: f.name.to_owned(),
                stall_ms: ms(s.stall),
                data_again_ms: s.data_again.map(ms),
                lost: f.counts_loss.then(|| s.lost()),
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn cuts_merge_each_links_outages_and_sort_by_time() {
        let s = Scenario::from_str(
            "[scenario]\nname='t'\nduration_s=9.0\n\
             [[links]]\nname='a'\nrate_mbps=1.0\noutages=[[3.0, 4.0], [1.0, 2.0], [1.5, 2.5], [2.5, 2.75]]\n\
             [[links]]\nname='b'\nrate_mbps=1.0\noutages=[[1.0, 1.2]]\noutage_local=false\n",
            Path::new("t.toml"),
        )
        .unwrap();
        let s_ = |v: f64| Duration::from_secs_f64(v);
        assert_eq!(
            cuts(&s),
            vec![
                Cut {
                    link: 0,
                    at: s_(1.0)
                },
                Cut {
                    link: 1,
                    at: s_(1.0)
                },
                Cut {
                    link: 0,
                    at: s_(3.0)
                },
            ]
        );
    }

    #[test]
    fn every_flow_active_at_a_cut_gets_a_row_per_link() {
        let ms = Duration::from_millis;
        let cut_list = [
            Cut {
                link: 0,
                at: ms(1000),
            },
            Cut {
                link: 1,
                at: ms(1000),
            },
            Cut {
                link: 0,
                at: ms(5000),
            },
        ];
        let stats = |at| CutStats {
            at,
            stall: Duration::from_micros(120_456),
            data_again: Some(ms(130)),
            sent: 10,
            delivered: 7,
        };
        let udp = [stats(ms(1000)), stats(ms(5000))];
        let tcp = [stats(ms(5000))];
        let names = ["wifi".to_owned(), "lte".to_owned()];
        let v = cut_reports(
            &cut_list,
            &names,
            &[
                FlowCuts {
                    name: "voice",
                    counts_loss: true,
                    stats: &udp,
                },
                FlowCuts {
                    name: "bulk",
                    counts_loss: false,
                    stats: &tcp,
                },
            ],
        );
        let rows: Vec<(&str, f64, &str, Option<u64>)> = v
            .iter()
            .map(|c| (c.link.as_str(), c.at_s, c.flow.as_str(), c.lost))
            .collect();
        assert_eq!(
            rows,
            vec![
                ("wifi", 1.0, "voice", Some(3)),
                ("lte", 1.0, "voice", Some(3)),
                ("wifi", 5.0, "voice", Some(3)),
                ("wifi", 5.0, "bulk", None),
            ]
        );
        assert_eq!((v[0].stall_ms, v[0].data_again_ms), (120.456, Some(130.0)));
    }
}
