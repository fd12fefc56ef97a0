//! Sans-IO link models shared by the deterministic simulator (virtual time)
//! and the lab's real-time link emulator.
//!
//! Nothing here reads a clock, spawns a thread, does I/O or uses global
//! randomness: time is passed in as a [`Duration`](std::time::Duration) from
//! an arbitrary origin (`Time = Duration` below), randomness comes from a
//! seed. Same parameters + seed + call sequence => identical results.
//!
//! # The model of one link direction ([`LinkDirection`])
//!
//! ```text
//! enqueue -> FIFO queue -> serializer -> random loss -> delay + jitter -> delivered
//!            (queue_packets) (Rate)       (loss)        (delay, jitter)
//! ```
//!
//! - **Queue**: tail drop ([`DropReason::QueueFull`]) when the serializer is
//!   busy and `queue_len() >= queue_packets`. The packet being serialized does
//!   not count toward the queue, so a link holds at most `queue_packets + 1`
//!   packets on the sender's side. A packet arriving at an idle serializer
//!   starts serializing at once (even with `queue_packets == 0`).
//! - **Serializer**, work-conserving: with [`Rate::Fixed`] a packet takes
//!   `len * 8 / bits_per_sec` (rounded to the ns) and the next one starts when
//!   it ends. With [`Rate::Trace`] (mahimahi): each delivery opportunity gives
//!   1500 bytes of credit that the head packet(s) consume; a packet partly
//!   served keeps its remaining bytes for the next opportunity; unused credit
//!   is lost. A packet arriving waits for the next opportunity at or after its
//!   arrival (one exactly at that instant counts if not already used). Trace
//!   times are offsets from the link's `start`; the trace repeats forever.
//! - **Random loss**: when a packet leaves the serializer ([`LinkEvent::TxDone`])
//!   it is lost with probability `loss` ([`DropReason::RandomLoss`]); it did
//!   consume serializer capacity.
//! - **Propagation**: `delay` plus a uniform draw in `[-jitter, +jitter]`,
//!   clamped at 0; then `arrival = max(arrival of the previous packet,
//!   computed)`, so a link never reorders.
//! - **Randomness**: a ChaCha8 generator seeded with `seed`. Every packet
//!   leaving the serializer consumes exactly two `f64` draws in `[0, 1)`, in
//!   this order: first the loss draw (lost iff `draw < loss`), then the jitter
//!   draw (offset `(2 * draw - 1) * jitter`), even when the packet is lost or
//!   jitter is 0. So the fates of the n-th departing packet depend only on the
//!   seed and n, whatever the other parameters.
//! - **Outages** `[start, end)`, offsets from the link's `start`; overlapping
//!   or touching intervals are merged. During an outage the link carries
//!   nothing: enqueue refuses packets ([`DropReason::Outage`]) and trace
//!   opportunities are wasted. At the outage start, the queued packets and the
//!   one being serialized are lost ([`LinkEvent::Lost`] with
//!   [`DropReason::Outage`]); packets already propagating are lost too if
//!   `drop_in_flight_on_outage` (downlink semantics), else they are delivered
//!   (uplink semantics). [`LinkEvent::OutageStart`] / [`LinkEvent::OutageEnd`]
//!   tell the driver that the sending host's interface went down / up.
//!
//! Ties at one instant: things that only needed the time before it happen
//! first, in this order: deliveries, fixed-rate serialization ends (their
//! serialization ran before the instant), then outage boundaries, then trace
//! opportunities (an opportunity at an outage start is wasted, one at an
//! outage end is usable). So a packet whose fixed-rate serialization ends
//! exactly at an outage start leaves the serializer, and a packet arriving
//! exactly at an outage start is delivered even on a downlink. An enqueue at
//! the outage start is refused, one at the outage end accepted.
//!
//! # Calling convention
//!
//! ```
//! use std::time::Duration;
//! use latebind_linkmodel::{LinkDirection, LinkEvent, LinkParams, Rate};
//!
//! let params = LinkParams {
//!     rate: Rate::fixed_mbps(8.0),
//!     delay: Duration::from_millis(10),
//!     jitter: Duration::ZERO,
//!     loss: 0.0,
//!     queue_packets: 100,
//!     outages: vec![],
//!     drop_in_flight_on_outage: false,
//! };
//! let mut link = LinkDirection::new(params, 1, Duration::ZERO);
//! link.enqueue(Duration::ZERO, 1000, "hello").unwrap();
//! while let Some(at) = link.poll_timeout() {
//!     link.handle_timeout(at); // the driver's clock jumps (or sleeps) to `at`
//!     while let Some(event) = link.poll_event() {
//!         if let LinkEvent::Delivered { payload, at, .. } = event {
//!             assert_eq!((payload, at), ("hello", Duration::from_millis(11)));
//!         }
//!     }
//! }
//! ```
//!
//! `enqueue` processes everything due up to its `now` first, and after it
//! `poll_timeout` may return `now`. Cost is O(1) amortised per packet (trace
//! lookups after an idle period are O(log trace length)); the only
//! allocations are the growth of internal `VecDeque`s.
#![warn(missing_docs)]

mod direction;
mod params;
mod trace;

pub use direction::{DropReason, LinkDirection, LinkEvent, LinkStats};
pub use params::{LinkParams, ParamError, Rate};
pub use trace::{MAX_TRACE_MS, OPPORTUNITY_BYTES, Trace, TraceError};
