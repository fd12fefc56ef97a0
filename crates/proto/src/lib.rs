//! The latebind protocol engine: a sans-IO state machine for one end of a late-binding
//! multipath tunnel.
//!
//! No sockets, no clock reads, no threads, no global randomness: inputs are `handle_*`
//! calls and outputs are `poll_*` calls, all taking `now` from the driver (the daemon's
//! monotonic clock, the simulator's event heap, or a test's field). Clippy's
//! `disallowed-methods` (see `clippy.toml`) keeps it that way.
//!
//! Module map:
//! - [`time`]: the engine's `Instant` (nanoseconds from the driver's origin).
//! - [`ids`]: `LinkId`, `FlowId`.
//! - [`config`]: `Config` and `LinkConfig` with documented defaults and validation.
//! - [`classify`]: inner IP packet -> flow key, DSCP, ECN; CE marking.
//! - `compact`: inner header compression: template slots, compact bodies (§3.9, §3.10).
//! - `fq`: per-flow queues above the binding point (DRR, sparse and DSCP priority,
//!   per-flow CoDel, limits with drop-from-fattest).
//! - [`link`]: per-link RTT, loss detection, rates, pacer, budget below the binding point,
//!   acknowledgement state, liveness.
//! - [`policy`]: the `BindPolicy` trait and the default earliest-delivery policy.
//! - `reorder`: duplicate filter on the global sequence and per-flow reorder with hold time.
//! - [`wire`]: wire format v1 (docs/protocol.md), zero-copy parse, emit into caller buffers.
//! - [`endpoint`]: `Endpoint`, tying it together.
//!
//! The call order for drivers is documented on [`Endpoint`].

#![warn(missing_docs)]

mod cc;
mod clamp;
pub mod classify;
mod compact;
pub mod config;
pub mod endpoint;
mod fq;
pub mod ids;
pub mod link;
pub mod pmtu;
pub mod policy;
mod reorder;
#[cfg(test)]
mod tests;
pub mod time;
pub mod wire;

pub use config::{Config, ConfigError, LinkConfig, ReinjectTimer, Role};
pub use endpoint::{Endpoint, EndpointStats, Event, LinkChange, ReinjectCause, Transmit, TunError};
pub use fq::QueueStats;
pub use ids::{FlowId, LinkId};
pub use link::{LinkState, LinkStats, LinkView};
pub use policy::{
    Aggregate, BindPolicy, Binding, MinRtt, Overflow, OverflowParams, PacketMeta, PolicyKind,
    PolicyRule,
};
pub use reorder::{FlowCounts, FlowReorderView, ReorderStats};
pub use time::Instant;
