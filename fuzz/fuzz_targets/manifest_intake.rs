#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz::manifest_intake(data));
