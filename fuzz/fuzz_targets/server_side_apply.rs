#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| k3rs::fuzzing::server_side_apply(data));
