//! `tlsscope profile -p PID`: where a running process's CPU goes. `config` checks the options,
//! `session` samples the process with perf, `render` writes the table and the shared
//! `render::flame` the flame graph and folded stacks. `profile --matrix` is `compare --matrix
//! --profile DIR`: it runs compare's session and renderer (their public API) and adds
//! compare.json to DIR.

pub mod config;
pub mod render;
pub mod session;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::common::library::LibraryList;
use crate::common::signals::StopFlags;
use crate::compare::matrix::MatrixConfig;
use crate::profile::config::{PidConfig, ProfileArgs, ProfileConfig};
use crate::profile::render::top_table;
use crate::render::flame::{write_flamegraph, write_folded};

/// `tlsscope profile`: `libraries` is `--openssl`'s list (one library for `-p`, which only
/// names the library in its report; a list for `--matrix`).
pub fn run(libraries: &LibraryList, a: &ProfileArgs) -> anyhow::Result<ExitCode> {
    match a.config(libraries)? {
        ProfileConfig::Pid(c) => pid(&c),
        ProfileConfig::Matrix { matrix, out_dir } => matrix_profiles(&matrix, &out_dir),
    }
}

/// `profile -p PID`: the table on stdout; with `-o DIR`, the files there too.
fn pid(c: &PidConfig) -> anyhow::Result<ExitCode> {
    let scratch;
    let dir: &Path = match &c.out_dir {
        Some(dir) => dir,
        None => {
            scratch = session::scratch_dir()?;
            scratch.path()
        }
    };
    let flags = StopFlags::install()?;
    let sampled = session::sample(c, dir, &flags.stop)?;
    let info = sampled.info();
    let table = format!(
        "{}\n{}",
        sampled.environment,
        top_table(&sampled.profile, &info, c.top)
    );
    print!("{table}");
    if sampled.skipped > 0 {
        eprintln!(
            "tlsscope profile: {} of perf's output could not be read and were left out",
            crate::render::words::count(sampled.skipped as u64, "line")
        );
    }
    if let Some(dir) = &c.out_dir {
        write_outputs(dir, &sampled, &table)?;
        eprintln!(
            "tlsscope profile: wrote flamegraph.svg, stacks.folded, profile.pb (pprof), top.txt and perf.data in {}",
            dir.display()
        );
    }
    Ok(flags.exit_code(ExitCode::SUCCESS))
}

fn write_outputs(dir: &Path, sampled: &session::Sampled, table: &str) -> anyhow::Result<()> {
    let profile = &sampled.profile;
    let comments = std::slice::from_ref(&sampled.environment);
    let mut svg = Vec::new();
    write_flamegraph(profile, &sampled.info(), &mut svg).context("drawing the flame graph")?;
    let mut folded = Vec::new();
    write_folded(profile, comments, &mut folded)?;
    let pprof = crate::render::pprof::encode(profile, sampled.frequency_hz, comments);
    for (name, bytes) in [
        ("flamegraph.svg", svg.as_slice()),
        ("stacks.folded", folded.as_slice()),
        ("top.txt", table.as_bytes()),
        ("profile.pb", pprof.as_slice()),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `profile --matrix`: compare's matrix, every worker profiled into `dir` (compare's session
/// writes the flame graphs and profile.txt), then compare.json there and the comparison and
/// profile.txt on stdout.
fn matrix_profiles(matrix: &MatrixConfig, dir: &Path) -> anyhow::Result<ExitCode> {
    let signals = StopFlags::install()?;
    let doc =
        crate::compare::session::matrix(matrix, &signals.stop, &mut crate::compare::say_progress)?;
    let json = dir.join("compare.json");
    let mut bytes = Vec::new();
    doc.write_json(&mut bytes)?;
    std::fs::write(&json, bytes).with_context(|| format!("writing {}", json.display()))?;
    let table = std::fs::read_to_string(dir.join("profile.txt")).unwrap_or_default();
    crate::common::output::to_stdout(crate::compare::render::text(&doc) + "\n" + &table)?;
    Ok(crate::compare::exit_status(&doc))
}
