//! `tlsscope lab`'s options, as the command line defines them.

use clap::{Args, ValueEnum};

use crate::common::args::*;
use crate::common::output::OutputFile;

#[derive(Debug, Args)]
pub struct LabArgs {
    /// The server under test: the built-in one, or Debian's nginx with a generated config.
    #[arg(long, value_enum, default_value = "builtin")]
    pub target: LabTarget,
    /// Measured load per experiment, without probes.
    #[arg(long, short = 'd', default_value = "5s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: std::time::Duration,
    /// Load per experiment with the server traced.
    #[arg(long, default_value = "3s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub trace_duration: std::time::Duration,
    /// Unmeasured load before each experiment.
    #[arg(long, default_value = "1s", value_name = "TIME", value_parser = parse_duration, allow_hyphen_values = true)]
    pub warmup: std::time::Duration,
    /// Client connections.
    #[arg(long, short = 'c', default_value_t = 32, value_parser = at_least_1, allow_negative_numbers = true)]
    pub connections: usize,
    /// The CPU the server is pinned to.
    #[arg(long, default_value_t = 0, value_name = "CPU")]
    pub server_cpu: usize,
    /// The CPU the load runs on.
    #[arg(long, default_value_t = 1, value_name = "CPU")]
    pub client_cpu: usize,
    /// Who traces the server: kernel (eBPF uprobes on it), user (tlsscope's library inside a
    /// server started under it), or auto (a traced run with each, side by side).
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub backend: crate::common::probing::BackendChoice,
    /// Also write the report as one self-contained HTML page: rates and the cost of tracing,
    /// where the server's time goes, and per experiment the handshakes, CPU, latency and the
    /// server's traced calls as histograms.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub html: Option<OutputFile>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LabTarget {
    Builtin,
    Nginx,
}
