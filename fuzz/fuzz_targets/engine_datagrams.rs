//! An engine (client or server, by the first byte) fed datagrams, raw or built from frame
//! descriptions, interleaved with timers, departures and link changes; its outputs are
//! checked after every step (see `latebind_fuzz::engine::run_datagrams`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latebind_fuzz::engine::run_datagrams(data));
