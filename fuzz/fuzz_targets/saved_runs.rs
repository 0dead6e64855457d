//! Fuzzes the saved-run JSON loader of `tlsscope compare`; the properties checked are in `fuzz_checks::saved_runs`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::saved_runs::check(data);
});
