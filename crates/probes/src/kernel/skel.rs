//! The libbpf-rs skeletons `build.rs` generates from `bpf/<name>.bpf.c`. Their `types` modules
//! are the Rust side of the BPF headers: the structs, and the enums a program exports with
//! `TS_EXPORT_ENUM` (`bpf/common.bpf.h`), which carry its constants too. Rust reads those
//! numbers from here rather than keeping copies.

pub(crate) mod latency {
    #![allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/latency.skel.rs"));
}

pub(crate) mod sniff {
    #![allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/sniff.skel.rs"));
}
