//! latebind's encryption layer: a Noise IK handshake between client and server static
//! keys, then ChaCha20-Poly1305 over every datagram. Sans-IO: no clocks, no sockets, no
//! randomness of its own; the wall clock and random seeds are arguments.
//!
//! The protocol engine emits and consumes plaintext v1 datagrams (12-byte header and
//! frames, docs/protocol.md §2). The daemon seals each datagram right after the engine
//! emits it (at the binding instant, once the link and packet number are fixed) and opens
//! each one right before feeding it to the engine:
//!
//! ```text
//! engine ─► poll_transmit ─► KeyRing::seal ─► socket        (data, flags & 0x80 == 0)
//! socket ─► KeyRing::open ─► engine.handle_datagram
//! socket ─► is_handshake? ─► Responder::handle_initiation / Initiator::handle_response
//! ```
//!
//! The construction (wire layout, what is authenticated, nonces, rekeying) is written
//! down in this crate's `README.md`.
//!
//! Module map:
//! - `key`: [`StaticSecret`], [`PublicKey`], base64 text form.
//! - `handshake`: [`Initiator`], [`Responder`], [`Accepted`], [`is_handshake`],
//!   [`session_of`].
//! - `transport`: [`Transport`] (seal, open) and [`KeyRing`] (key phases across rekeys).
//! - `header`: the v1 header fields this crate reads and writes.
//! - `error`: [`CryptoError`].

#![warn(missing_docs)]

mod error;
mod handshake;
mod header;
mod key;
#[cfg(test)]
mod tests;
mod transport;

pub use error::CryptoError;
pub use handshake::{
    Accepted, INITIATION_LEN, Initiator, NOISE_PARAMS, RESPONSE_LEN, Responder, is_handshake,
    session_of,
};
pub use header::HEADER_LEN;
pub use key::{KEY_LEN, PublicKey, StaticSecret};
pub use transport::{
    KeyRing, REJECT_AFTER_PACKETS, REKEY_AFTER_PACKETS, REKEY_AFTER_TIME, TAG_LEN, Transport,
};
