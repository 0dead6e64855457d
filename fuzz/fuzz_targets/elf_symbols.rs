//! Fuzzes the probes' ELF symbol reader, on truncated and corrupt files; the properties checked are in `fuzz_checks::elf_symbols`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    fuzz_checks::elf_symbols::check(data);
});
