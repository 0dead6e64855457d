//! `tlsscope profile`'s options, as the command line defines them, and the typed settings made
//! from them once ([`ProfileArgs::config`]): the only part of profile that knows flag names.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::common::args::*;
use crate::common::library::LibraryList;
use crate::common::output::OutputDir;
// profile --matrix is compare --matrix --profile: the same variant options, checked by
// compare's config into compare's typed matrix.
use crate::compare::config::MatrixOptions;
use crate::compare::matrix::MatrixConfig;

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

/// What `profile` does: sample one process, or profile compare's matrix.
// Built once per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum ProfileConfig {
    Pid(PidConfig),
    /// `compare --matrix --profile DIR` (the matrix's `profile` is DIR), compare.json and the
    /// tables written there too.
    Matrix {
        matrix: MatrixConfig,
        out_dir: PathBuf,
    },
}

/// `profile -p PID`.
pub struct PidConfig {
    pub pid: u32,
    pub duration: Duration,
    pub frequency_hz: u32,
    /// Functions in the table.
    pub top: usize,
    /// Where the files go (created); None: only the table, on stdout.
    pub out_dir: Option<PathBuf>,
}

impl ProfileArgs {
    /// The profile asked for, its output directory created; with `--matrix`, `libraries` is
    /// `--openssl`'s list, as compare --matrix takes it.
    pub fn config(&self, libraries: &LibraryList) -> anyhow::Result<ProfileConfig> {
        let out_dir = self
            .out_dir
            .as_ref()
            .map(|d| d.create().map(std::path::Path::to_path_buf))
            .transpose()?;
        let Some(pid) = self.pid else {
            let out_dir = out_dir.context("--matrix writes its profiles into --out-dir DIR")?;
            let matrix = self.m.config(libraries, Some(out_dir.clone()))?;
            return Ok(ProfileConfig::Matrix { matrix, out_dir });
        };
        Ok(ProfileConfig::Pid(PidConfig {
            pid,
            duration: self.duration,
            frequency_hz: self.frequency,
            top: self.top,
            out_dir,
        }))
    }
}
