//! Fuzzes the probes' Go program reader (.gopclntab, .go.buildinfo), on truncated and corrupt files; the properties checked are in `fuzz_checks::go_binary`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::go_binary::check(data);
});
