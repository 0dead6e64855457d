//! `tlsscope profile`'s options, as the command line defines them.

use clap::Args;

use crate::common::args::*;
use crate::common::output::OutputDir;
use crate::compare::config::MatrixOptions;

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The process to sample, every thread of it (e.g. nginx's worker, or `tlsscope serve`).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        required_unless_present = "matrix",
        conflicts_with = "matrix"
    )]
    pub pid: Option<u32>,
    /// Profile compare --matrix's variants instead (the same variant options, --openssl a
    /// comma-separated list): as `compare --matrix --profile DIR`, DIR given by --out-dir.
    #[arg(long, requires = "out_dir")]
    pub matrix: bool,
    /// How long to sample.
    #[arg(long, short = 'd', default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, conflicts_with = "matrix")]
    pub duration: std::time::Duration,
    /// Samples per second of CPU time (the cpu-clock event).
    #[arg(long, short = 'F', default_value_t = 999, value_parser = clap::value_parser!(u32).range(1..=20000), conflicts_with = "matrix")]
    pub frequency: u32,
    /// Write flamegraph.svg, stacks.folded (CPU-microseconds per stack), profile.pb (pprof),
    /// top.txt and perf's perf.data into this directory (created if missing); with --matrix,
    /// compare --profile's files and compare.json.
    #[arg(long, value_name = "DIR", value_parser = crate::common::output::DirParser)]
    pub out_dir: Option<OutputDir>,
    /// With --matrix: the variants and how each is measured, as compare --matrix takes them.
    #[command(flatten)]
    pub m: MatrixOptions,
    /// Functions in the table.
    #[arg(long, default_value_t = 25, value_name = "N", value_parser = at_least_1, allow_negative_numbers = true)]
    pub top: usize,
}
