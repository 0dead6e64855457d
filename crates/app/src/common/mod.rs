//! What several commands share on the session side: option groups, the library under test,
//! targets, the blocking client, servers under test, signals, output files and errors.

pub mod args;
pub mod attach_args;
pub mod builds;
pub mod client;
pub mod client_args;
pub mod environment;
pub mod error;
pub mod latency;
pub mod library;
pub mod load_run;
pub mod metrics;
pub mod output;
pub mod probing;
pub mod servers;
pub mod signals;
pub mod sockets;
pub mod target;
pub mod usage;
pub mod wording;

/// Before any probe is loaded: libbpf's log goes through tlsscope, shown on stderr only when
/// `verbose` (-v); otherwise an error quotes the line that explains it.
pub fn show_library_log(verbose: bool) {
    probes::log::set_verbose(verbose);
}
