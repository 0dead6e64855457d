//! tlsscope's integration tests: one binary, a module per feature, real peers throughout.

/// The exit status of a command ended by Ctrl-C.
pub const EXIT_INTERRUPTED: i32 = 130;

mod async_tls;
mod bench;
mod bench_wire;
mod cli;
mod compare;
mod completions;
mod deploy;
mod docs;
mod fresh_machine;
mod go_trace;
mod golang;
mod groups;
mod hostile;
mod inproc;
mod merge;
mod metrics;
mod ml_dsa;
mod openssl_build;
mod ossl_api;
mod pages;
mod peers;
mod placement;
mod probes;
mod profile;
mod scaling;
mod serve;
mod shards;
mod sniff;
mod support;
mod trace;
