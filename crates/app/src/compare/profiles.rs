//! `compare --profile`: each profiled variant's flame graph, folded stacks and pprof file, its
//! difference from the first, and one table of them all (`profile.txt`).

use std::path::Path;

use super::matrix::{Gathered, Plan};
use crate::common::error::{Context, Result};

/// Each variant's flame graph, folded stacks (CPU-nanoseconds per operation) and pprof file,
/// a differential flame graph of each against the first, and one table of every variant's
/// costliest functions per operation: `profile.txt`.
pub(super) fn write_profiles(
    dir: &Path,
    plans: &[Plan],
    gathered: &[Gathered],
    kernel: &str,
    sampler: &profile::Sampler,
    perf_version: &str,
) -> Result<()> {
    use crate::render::flame::{
        comment_lines, diff_table, folded_per_op, write_differential, write_flamegraph,
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the profile directory {}", dir.display()))?;
    let profiled: Vec<(usize, &Plan, &Gathered)> = plans
        .iter()
        .zip(gathered)
        .enumerate()
        .filter(|(_, (_, g))| !g.profile.stacks.is_empty())
        .map(|(i, (p, g))| (i, p, g))
        .collect();
    let write = |name: String, bytes: &[u8]| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    // The environment, at the head of profile.txt and in each pprof file.
    let mut environment = vec![format!(
        "kernel {kernel}; {perf_version}, cpu-clock at {} Hz, DWARF stacks of {} bytes",
        sampler.frequency_hz, sampler.stack_bytes
    )];
    for &(_, p, g) in &profiled {
        environment.push(format!(
            "{}: client {} ({}), server {}; {} chunks of samples lost; {} frames put back where tail calls hid them",
            p.label,
            g.library.as_deref().unwrap_or("?"),
            p.client_openssl.as_deref().unwrap_or("system"),
            p.server_openssl.as_deref().unwrap_or("system"),
            g.profile.lost_chunks,
            g.profile.restored_frames
        ));
    }
    let notes = environment.join("; ");
    for &(i, p, g) in &profiled {
        let stem = file_stem(i, &p.label);
        let info = crate::render::flame::ProfileInfo {
            subject: &p.label,
            window_s: g.profile.total_ns() as f64 / 1e9,
            frequency_hz: sampler.frequency_hz,
            sampler: "perf (cpu-clock, DWARF stacks), measured operations only",
            environment: &notes,
            operations: None,
        };
        let mut svg = Vec::new();
        write_flamegraph(&g.profile, &info, &mut svg)?;
        write(format!("{stem}.svg"), &svg)?;
        write(
            format!("{stem}.folded"),
            (comment_lines(&environment) + &folded_per_op(&g.profile, g.profiled_ops)).as_bytes(),
        )?;
        write(
            format!("{stem}.pb"),
            &crate::render::pprof::encode(&g.profile, info.frequency_hz, &environment),
        )?;
        if let Some(&(b, base_plan, base)) = profiled.first().filter(|(b, _, _)| *b != i) {
            let mut svg = Vec::new();
            write_differential(
                (&base.profile, base.profiled_ops),
                (&g.profile, g.profiled_ops),
                &format!("{} against {}", p.label, base_plan.label),
                &notes,
                &mut svg,
            )?;
            write(format!("{stem}-vs-{}.svg", b + 1), &svg)?;
        }
    }
    let variants: Vec<(&str, &profile::Profile, u64)> = profiled
        .iter()
        .map(|(_, p, g)| (p.label.as_str(), &g.profile, g.profiled_ops))
        .collect();
    if !variants.is_empty() {
        let head = comment_lines(&environment);
        write(
            "profile.txt".into(),
            (head + &diff_table(&variants, 150)).as_bytes(),
        )?;
    }
    Ok(())
}

/// `2-openssl=3.0.2`: the variant's number (from 0 here, from 1 in the name) and label, safe
/// as a file name: how `compare --profile` names a variant's files.
pub fn file_stem(i: usize, label: &str) -> String {
    let clean: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".=-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}-{clean}", i + 1)
}
