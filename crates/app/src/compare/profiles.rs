//! `compare --profile`: each profiled variant's flame graph, folded stacks and pprof file, its
//! difference from the first (and, on N threads, from the same settings on one thread), and
//! one table of them all (`profile.txt`), headed by the CPU each variant spends in locks and
//! atomics and in the library's method fetching.

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
        // On N threads, what changed from one thread with every other setting the same.
        let twin = profiled.iter().find(|(_, q, _)| {
            p.threads > 1 && q.threads == 1 && {
                let others = |x: &Plan| {
                    let mut s = x.settings.clone();
                    s.remove("threads");
                    s
                };
                others(q) == others(p)
            }
        });
        // Against the first variant, and against the twin when it is another one.
        let first = profiled.first().filter(|(b, _, _)| *b != i);
        let twin = twin.filter(|t| Some(t.0) != profiled.first().map(|f| f.0));
        for &(b, base_plan, base) in first.into_iter().chain(twin) {
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
            (head + &families_table(&variants) + "\n" + &diff_table(&variants, 150)).as_bytes(),
        )?;
    }
    Ok(())
}

/// A family of functions: its name, and whether a function (by name) belongs to it.
pub type Family = (&'static str, fn(&str) -> bool);

/// Families of functions whose share of the CPU says where threads lose to each other.
pub const FAMILIES: [Family; 2] = [
    ("locks and atomics", is_lock),
    ("method fetch and library context", is_fetch),
];

/// Lock, unlock, futex and atomic-update functions: glibc's rwlocks and mutexes and their
/// futex waits (user and kernel side), OpenSSL's `CRYPTO_THREAD_*_lock`, `CRYPTO_atomic_*` and
/// RCU (3.3 and later).
pub fn is_lock(f: &str) -> bool {
    [
        "pthread_rwlock",
        "pthread_mutex",
        "lll_lock",
        "lll_unlock",
        "futex",
        "ossl_rcu",
    ]
    .iter()
    .any(|p| f.contains(p))
        || [
            "CRYPTO_THREAD_read_lock",
            "CRYPTO_THREAD_write_lock",
            "CRYPTO_THREAD_unlock",
            "CRYPTO_atomic_",
        ]
        .iter()
        .any(|p| f.starts_with(p))
}

/// OpenSSL 3's fetching of algorithm implementations by name and properties, and the library
/// context's stores it searches (the paths 3.0 made shared and locked).
pub fn is_fetch(f: &str) -> bool {
    [
        "ossl_method_store_",
        "ossl_lib_ctx_",
        "ossl_property_",
        "ossl_namemap_",
        "ossl_provider_",
        "ossl_decoder_",
        "OSSL_DECODER_",
        "evp_generic_fetch",
        "inner_evp_generic_fetch",
    ]
    .iter()
    .any(|p| f.starts_with(p))
        || (f.starts_with("EVP_") && f.ends_with("_fetch"))
}

/// Per variant, the CPU per operation in each family (inclusive: a sample counts once if any
/// of its frames is of the family) and its share of the variant's CPU.
fn families_table(variants: &[(&str, &profile::Profile, u64)]) -> String {
    use std::fmt::Write as _;
    let mut s = String::from(
        "CPU-us per operation in each family of functions (share of the variant's CPU); a sample counts once if any frame on its stack is of the family\n",
    );
    for (name, p, ops) in variants {
        let ops = (*ops).max(1) as f64;
        let total = p.total_ns().max(1) as f64;
        let cells: Vec<String> = FAMILIES
            .iter()
            .map(|(family, matches)| {
                let ns = p.ns_with(|f| f.function.as_deref().is_some_and(matches)) as f64;
                format!(
                    "{family} {:.1} ({:.1}%)",
                    ns / ops / 1e3,
                    100.0 * ns / total
                )
            })
            .collect();
        let _ = writeln!(s, "  {name}: {}", cells.join(", "));
    }
    s
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_and_fetch_families_name_the_functions_seen_in_3_0_2s_profile() {
        for lock in [
            "pthread_rwlock_unlock@@GLIBC_2.34",
            "___pthread_rwlock_rdlock",
            "__lll_lock_wait",
            "do_futex",
            "CRYPTO_THREAD_write_lock",
            "CRYPTO_atomic_add",
        ] {
            assert!(is_lock(lock), "{lock}");
        }
        for fetch in [
            "ossl_method_store_fetch",
            "ossl_namemap_name2num_n",
            "OSSL_DECODER_CTX_new_for_pkey",
            "EVP_MD_fetch",
            "inner_evp_generic_fetch",
        ] {
            assert!(is_fetch(fetch), "{fetch}");
        }
        for neither in [
            "SHA512_Update",
            "CRYPTO_THREAD_get_local",
            "EVP_DigestInit_ex",
        ] {
            assert!(!is_lock(neither) && !is_fetch(neither), "{neither}");
        }
    }
}
