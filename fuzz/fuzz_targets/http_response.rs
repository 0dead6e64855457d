//! Fuzzes the load engine's HTTP response parser, fed in reads of every size; the properties checked are in `fuzz_checks::http_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::http_response::check(data);
});
