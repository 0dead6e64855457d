//! `tlsscope openssl`'s options, as the command line defines them, and the build they ask for.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use ossl_build::BuildRequest;

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

/// `openssl build`, checked: what to build, with how many jobs.
pub struct BuildConfig {
    pub request: BuildRequest,
    pub jobs: usize,
    /// Rebuild installed ones.
    pub force: bool,
}

impl BuildArgs {
    /// The build asked for: versions or one source tree (not both), jobs defaulting to the
    /// CPU count.
    pub fn config(&self) -> anyhow::Result<BuildConfig> {
        let request = match &self.source {
            Some(_) if !self.versions.is_empty() => {
                bail!(
                    "--source builds the one tree it points at: drop the VERSION arguments or --source"
                )
            }
            Some(path) => BuildRequest::Source(path.to_owned()),
            None if self.versions.is_empty() => {
                bail!("name what to build (e.g. tlsscope openssl build 3.5.5 aws-lc boringssl) or pass --source PATH")
            }
            None => BuildRequest::Versions(self.versions.clone()),
        };
        let jobs = self
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
        Ok(BuildConfig {
            request,
            jobs,
            force: self.force,
        })
    }
}
