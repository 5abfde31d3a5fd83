#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| k3rs::fuzzing::nft_render(data));
