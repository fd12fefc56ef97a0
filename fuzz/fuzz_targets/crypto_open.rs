//! Untrusted bytes into `Transport::open`, `KeyRing::open`, `Responder::handle_initiation`
//! and `Initiator::handle_response`, plus seal-edit-open and edited-handshake round trips
//! (see `latebind_fuzz::crypto`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latebind_fuzz::crypto::run(data));
