//! `tlsscope openssl`'s options, as the command line defines them.

use std::path::PathBuf;

use clap::Args;

use crate::common::args::*;

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// OpenSSL versions, e.g. 1.1.1w 3.0.2 3.5.5, or aws-lc, boringssl.
    #[arg(value_name = "VERSION", required_unless_present = "source")]
    pub versions: Vec<String>,
    /// Build from this OpenSSL source tree or .tar.gz instead of the crate's sources.
    #[arg(long, value_name = "PATH")]
    pub source: Option<PathBuf>,
    /// Parallel compile jobs (default: the number of CPUs).
    #[arg(long, short = 'j', value_parser = at_least_1, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// Rebuild even when it is already built.
    #[arg(long)]
    pub force: bool,
}
