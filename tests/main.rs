//! tlsscope's integration tests: one binary, a module per feature, real peers throughout.

mod bench;
mod cli;
mod compare;
mod fresh_machine;
mod openssl_build;
mod ossl_api;
mod peers;
mod probes;
mod serve;
mod sniff;
mod support;
mod trace;
