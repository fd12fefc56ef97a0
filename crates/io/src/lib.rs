//! Linux I/O for the latebind daemons. Nothing here knows the protocol: it moves bytes
//! and reports events, and the daemon feeds them to the sans-IO engine.
//!
//! Module map:
//! - [`clock`]: `CLOCK_MONOTONIC` as nanoseconds (the engine's `now`).
//! - [`dispatch`]: precise sends: a sender thread emits datagrams built ahead of time
//!   at their slot (sleep, then spin, then `sendmmsg`), and the sequential sender it is
//!   measured against.
//! - [`tun`]: the TUN device (one stable virtual address; the engine's inner packets).
//! - [`link`]: one UDP socket per link, bound to its interface, with a small send buffer
//!   so that little waits below the binding point.
//! - [`netlink`]: interface up/down and address events from rtnetlink.
//! - [`poll`]: epoll, a timerfd armed at absolute instants (epoll's own timeout is only
//!   millisecond-grained), and a signalfd for SIGINT/SIGTERM.

#![warn(missing_docs)]

pub mod clock;
pub mod dispatch;
pub mod link;
pub mod netlink;
pub mod poll;
pub mod tun;
