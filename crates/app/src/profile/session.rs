//! `tlsscope profile -p PID`'s session: perf samples the process (every thread, DWARF stacks)
//! and the samples come back as one [`profile::Profile`] with what it was of.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use anyhow::{bail, Context as _};
use profile::Sampler;

use super::config::PidConfig;
use crate::render::flame::ProfileInfo;

/// One process sampled.
pub struct Sampled {
    pub profile: profile::Profile,
    /// e.g. "nginx (pid 1234)".
    pub subject: String,
    /// Wall time sampled, seconds.
    pub window_s: f64,
    pub frequency_hz: u32,
    /// perf's version.
    pub sampler: String,
    /// Where it was taken: kernel, sampler, the TLS libraries mapped, what perf lost.
    pub environment: String,
    /// The connections the process took or made while sampled, where perf counted them.
    pub connections: Option<u64>,
    /// Lines of perf's output that could not be read and were left out.
    pub skipped: usize,
}

impl Sampled {
    /// What the profile was of, for its renderers.
    pub fn info(&self) -> ProfileInfo<'_> {
        ProfileInfo {
            subject: &self.subject,
            window_s: self.window_s,
            frequency_hz: self.frequency_hz,
            sampler: &self.sampler,
            environment: &self.environment,
            operations: self.connections.map(|c| (c, "connection")),
        }
    }
}

/// Samples the process for the configured time (or until `stop`), perf's data kept in `dir`;
/// a note on stderr says what is sampled.
pub fn sample(c: &PidConfig, dir: &Path, stop: &AtomicBool) -> anyhow::Result<Sampled> {
    let pid = c.pid;
    let sampler = Sampler {
        frequency_hz: c.frequency_hz,
        ..Sampler::default()
    };
    let perf_version = sampler.check()?;
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .map_err(|_| profile::PerfError::NoProcess { pid })?;
    eprintln!(
        "tlsscope profile: sampling {comm} (pid {pid}) for {:.1} s at {} Hz ({perf_version}, cpu-clock, DWARF unwinding); Ctrl-C to stop early",
        c.duration.as_secs_f64(),
        c.frequency_hz
    );
    let data = dir.join("perf.data");
    let recording = sampler.record(pid, c.duration, &data, stop)?;
    let (profile, skipped) = sampler.read(&recording.data, ossl::WRAPPER_CALLS)?;
    if profile.stacks.is_empty() {
        bail!(
            "no samples: {comm} (pid {pid}) used no CPU in the {:.1} s sampled; put it under load (e.g. tlsscope bench) while profiling",
            recording.window.as_secs_f64()
        );
    }
    let environment = format!(
        "{}; {} of samples lost; {} put back where tail calls hid them",
        environment(pid, &perf_version, c.frequency_hz),
        crate::render::words::count(profile.lost_chunks, "chunk"),
        crate::render::words::count(profile.restored_frames, "frame")
    );
    Ok(Sampled {
        subject: format!("{comm} (pid {pid})"),
        // From the first sample to the last: perf's own start and exit are not sampling time.
        window_s: if profile.sampled_s() > 0.0 {
            profile.sampled_s()
        } else {
            recording.window.as_secs_f64()
        },
        frequency_hz: c.frequency_hz,
        sampler: perf_version,
        environment,
        connections: recording.connections.map(|c| c.total()),
        skipped,
        profile,
    })
}

/// A temporary directory for perf's data when none is kept.
pub fn scratch_dir() -> anyhow::Result<tempfile::TempDir> {
    tempfile::tempdir().context("creating a temporary directory")
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
