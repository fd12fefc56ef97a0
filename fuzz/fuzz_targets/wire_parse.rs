//! Any bytes through `wire::parse`, every frame, ACK range and loss entry walked, and the
//! frames that parsed emitted again and parsed back (see `latebind_fuzz::wire_parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| latebind_fuzz::wire_parse::run(data));
