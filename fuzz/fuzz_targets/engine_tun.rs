//! Any bytes as inner packets into `handle_tun_packet`; every datagram the engine then
//! emits must parse (see `latebind_fuzz::engine::run_tun`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latebind_fuzz::engine::run_tun(data));
