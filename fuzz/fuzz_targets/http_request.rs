//! Fuzzes the built-in server's HTTP request head parser; the properties checked are in `fuzz_checks::http_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::http_request::check(data);
});
