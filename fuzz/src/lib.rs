//! Fuzz targets for latebind, as library functions so that the seed corpus can also run
//! as a plain test (`cargo test` in this directory) and the seed generator can share the
//! input format.
//!
//! - [`wire_parse`]: the wire format's parser and emitters.
//! - [`engine`]: an `Endpoint` driven by datagrams, TUN packets and timers.
//! - [`crypto`]: AEAD open and the Noise handshake on untrusted bytes.
//! - [`input`]: the byte format of the engine targets' inputs.

pub mod crypto;
pub mod engine;
pub mod input;
pub mod wire_parse;
