//! The properties tlsscope's fuzz targets check, one module per parser of bytes that other
//! programs wrote: HTTP requests (the built-in server), HTTP responses (the load engine), ELF
//! files (the probes' symbol reader), Go programs (the probes' Go reader), `/proc/PID/maps`
//! text, saved runs (`compare`), and ClientHellos and server flights (the load engine's wire
//! figures).
//!
//! Each `check` takes any bytes and panics when the parser breaks a property, which is what a
//! fuzzer reports as a crash. The fuzz targets in `fuzz/` (built with cargo-fuzz on nightly)
//! call these functions and nothing else, and this crate's tests feed them every file of the
//! committed corpus (`fuzz/corpus/<target>/`), so a plain `cargo test` replays what the fuzzers
//! found without a fuzzer.

pub mod client_hello;
pub mod elf_symbols;
pub mod go_binary;
pub mod http_request;
pub mod http_response;
pub mod proc_maps;
pub mod saved_runs;

/// A check: takes any bytes, panics when the parser breaks a property, and says whether the
/// parser accepted the input (a refused input is checked for less: the corpus replay requires
/// its known-good inputs accepted, so a parser that refuses everything cannot pass).
pub type Check = fn(&[u8]) -> bool;

/// Every fuzz target: its name (the file in `fuzz/fuzz_targets/` and the folder in
/// `fuzz/corpus/`) and its check.
pub const TARGETS: [(&str, Check); 7] = [
    ("http_request", http_request::check),
    ("http_response", http_response::check),
    ("elf_symbols", elf_symbols::check),
    ("proc_maps", proc_maps::check),
    ("saved_runs", saved_runs::check),
    ("client_hello", client_hello::check),
    ("go_binary", go_binary::check),
];

#[cfg(test)]
mod replay;
