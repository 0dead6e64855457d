//! Fuzzes the `/proc/PID/maps` parser; the properties checked are in `fuzz_checks::proc_maps`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::proc_maps::check(data);
});
