//! `tlsscope profile -p PID`: where a running process's CPU goes.

pub mod config;
pub mod render;

use std::path::Path;
use std::process::ExitCode;

use crate::profile::render::{top_table, write_flamegraph, write_folded, ProfileInfo};
use anyhow::{bail, Context as _};
use profile::Sampler;

use crate::common::signals::StopFlags;
use crate::profile::config::ProfileArgs;

pub fn run(openssl: Option<&str>, a: &ProfileArgs) -> anyhow::Result<ExitCode> {
    let Some(pid) = a.pid else {
        return matrix(openssl, a);
    };
    let sampler = Sampler {
        frequency_hz: a.frequency,
        ..Sampler::default()
    };
    let perf_version = sampler.check()?;
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", pid))
        .map(|s| s.trim().to_string())
        .map_err(|_| profile::PerfError::NoProcess { pid })?;
    let scratch;
    let dir: &Path = match &a.out_dir {
        Some(dir) => dir.create()?,
        None => {
            scratch = tempfile::tempdir().context("creating a temporary directory")?;
            scratch.path()
        }
    };
    let flags = StopFlags::install()?;
    eprintln!(
        "tlsscope profile: sampling {comm} (pid {}) for {:.1} s at {} Hz ({perf_version}, cpu-clock, DWARF unwinding); Ctrl-C to stop early",
        pid,
        a.duration.as_secs_f64(),
        a.frequency
    );
    let data = dir.join("perf.data");
    let recording = sampler.record(pid, a.duration, &data, &flags.stop)?;
    let (profile, skipped) = sampler.read(&recording.data, ossl::WRAPPER_CALLS)?;
    if profile.stacks.is_empty() {
        bail!(
            "no samples: {comm} (pid {}) used no CPU in the {:.1} s sampled; put it under load (e.g. tlsscope bench) while profiling",
            pid,
            recording.window.as_secs_f64()
        );
    }
    let subject = format!("{comm} (pid {})", pid);
    let environment = format!(
        "{}; {} of samples lost; {} put back where tail calls hid them",
        environment(pid, &perf_version, a.frequency),
        crate::render::words::count(profile.lost_chunks, "chunk"),
        crate::render::words::count(profile.restored_frames, "frame")
    );
    let info = ProfileInfo {
        subject: &subject,
        // From the first sample to the last: perf's own start and exit are not sampling time.
        window_s: if profile.sampled_s() > 0.0 {
            profile.sampled_s()
        } else {
            recording.window.as_secs_f64()
        },
        frequency_hz: a.frequency,
        sampler: &perf_version,
        environment: &environment,
        operations: recording.connections.map(|c| (c.total(), "connection")),
    };
    let table = format!("{}\n{}", environment, top_table(&profile, &info, a.top));
    print!("{table}");
    if skipped > 0 {
        eprintln!(
            "tlsscope profile: {} of perf's output could not be read and were left out",
            crate::render::words::count(skipped, "line")
        );
    }
    if let Some(dir) = &a.out_dir {
        let dir = &dir.path;
        write_outputs(
            dir,
            &profile,
            &info,
            &table,
            std::slice::from_ref(&environment),
        )?;
        eprintln!(
            "tlsscope profile: wrote flamegraph.svg, stacks.folded, profile.pb (pprof), top.txt and perf.data in {}",
            dir.display()
        );
    }
    Ok(flags.exit_code(ExitCode::SUCCESS))
}

fn write_outputs(
    dir: &Path,
    profile: &profile::Profile,
    info: &ProfileInfo<'_>,
    table: &str,
    comments: &[String],
) -> anyhow::Result<()> {
    let mut svg = Vec::new();
    write_flamegraph(profile, info, &mut svg).context("drawing the flame graph")?;
    let mut folded = Vec::new();
    write_folded(profile, comments, &mut folded)?;
    let pprof = crate::render::pprof::encode(profile, info.frequency_hz, comments);
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

/// `profile --matrix`: compare's matrix, every worker profiled, the outputs in `-o DIR`.
fn matrix(openssl: Option<&str>, a: &ProfileArgs) -> anyhow::Result<ExitCode> {
    let out_dir = a
        .out_dir
        .as_ref()
        .context("--matrix writes its profiles into --out-dir DIR")?;
    let signals = crate::common::signals::StopFlags::install()?;
    let doc = crate::compare::run_matrix(openssl, &a.m, Some(out_dir), &signals.stop)?;
    let dir = &out_dir.path;
    let json = dir.join("compare.json");
    let mut bytes = Vec::new();
    doc.write_json(&mut bytes)?;
    std::fs::write(&json, bytes).with_context(|| format!("writing {}", json.display()))?;
    let table = std::fs::read_to_string(dir.join("profile.txt")).unwrap_or_default();
    crate::common::output::to_stdout(crate::compare::render::text(&doc) + "\n" + &table)?;
    Ok(crate::compare::exit_status(&doc))
}

/// One line on where the profile was taken: the kernel, the sampler and the TLS libraries the
/// process maps (paths, so a build is told from the system's).
fn environment(pid: u32, perf_version: &str, frequency: u32) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let libraries = probes::tls_libraries(pid)
        .map(|l| {
            l.iter()
                .map(|m| m.path.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    format!(
        "environment: kernel {kernel}; {perf_version}, cpu-clock at {frequency} Hz, DWARF stacks; TLS libraries: {}",
        if libraries.is_empty() { "none mapped" } else { &libraries }
    )
}
