//! Fuzzes the load engine's ClientHello reader and its wire counter's stream reading; the properties checked are in `fuzz_checks::client_hello`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::client_hello::check(data);
});
