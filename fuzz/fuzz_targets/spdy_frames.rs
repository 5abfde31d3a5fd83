#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| k3rs::fuzzing::spdy_frames(data));
