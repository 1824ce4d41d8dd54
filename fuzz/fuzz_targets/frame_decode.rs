#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tether_fuzz::frame_decode(data));
