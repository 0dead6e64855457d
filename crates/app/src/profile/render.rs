//! `tlsscope profile -p`'s table: the costliest functions in CPU time. The flame graph and
//! folded stacks are drawn by the shared `crate::render::flame`.

use std::fmt::Write as _;

use profile::{FunctionCost, Profile};

use crate::render::flame::ProfileInfo;

/// The `n` costliest functions by total time: self and total CPU time in milliseconds and as a
/// share of all samples, and per second of the window.
pub fn top_table(p: &Profile, info: &ProfileInfo<'_>, n: usize) -> String {
    let total = p.total_ns().max(1) as f64;
    let functions = p.functions();
    let per = info.operations.filter(|&(ops, _)| ops > 0);
    let mut s = String::new();
    let _ = write!(
        s,
        "{}: {}, {:.1} CPU-ms over {:.1} s ({:.0}% of a CPU)",
        info.subject,
        crate::render::words::count(p.stacks.len() as u64, "sample"),
        total / 1e6,
        info.window_s,
        total / 1e9 / info.window_s.max(1e-9) * 100.0,
    );
    if let Some((ops, unit)) = per {
        let _ = write!(
            s,
            "; {ops} {unit}s, {:.1} CPU-us each",
            total / ops as f64 / 1e3
        );
    }
    let _ = writeln!(s, "{}", summary_notes(p));
    let _ = write!(
        s,
        "{:>10} {:>6} {:>10} {:>6}  ",
        "total ms", "total", "self ms", "self"
    );
    if let Some((_, unit)) = per {
        let short: String = unit.chars().take(4).collect();
        let _ = write!(
            s,
            "{:>10} {:>10}  ",
            format!("us/{short}"),
            format!("self/{short}")
        );
    }
    let _ = writeln!(s, "function (object)");
    for f in functions.iter().take(n) {
        let _ = writeln!(s, "{}", row(f, total, per.map(|(ops, _)| ops)));
    }
    if functions.iter().take(n).any(|f| f.frame.function.is_none()) {
        let _ = writeln!(
            s,
            "[unknown]: code its object's symbol tables do not name (internal functions of a stripped library), one row per object"
        );
    }
    s
}

/// What the summary line adds: samples lost, frames put back behind tail calls.
fn summary_notes(p: &Profile) -> String {
    let mut s = match p.lost_chunks {
        0 => "; no samples lost".to_string(),
        n => format!(
            "; perf lost {} of samples",
            crate::render::words::count(n, "chunk")
        ),
    };
    if p.restored_frames > 0 {
        let _ = write!(
            s,
            "; {} put back where tail calls hid them",
            crate::render::words::count(p.restored_frames, "frame")
        );
    }
    s
}

/// One function's row; with `ops`, its CPU-microseconds per operation too.
fn row(f: &FunctionCost, total: f64, ops: Option<u64>) -> String {
    let mut s = format!(
        "{:>10.1} {:>5.1}% {:>10.1} {:>5.1}%  ",
        f.total_ns as f64 / 1e6,
        f.total_ns as f64 / total * 100.0,
        f.self_ns as f64 / 1e6,
        f.self_ns as f64 / total * 100.0,
    );
    if let Some(ops) = ops {
        let ops = ops as f64;
        let _ = write!(
            s,
            "{:>10.1} {:>10.1}  ",
            f.total_ns as f64 / ops / 1e3,
            f.self_ns as f64 / ops / 1e3
        );
    }
    s + &f.frame.label()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::flame::tests::sample;

    /// What the table tests say the profile was of: 2 s of "app".
    fn app_info() -> ProfileInfo<'static> {
        ProfileInfo {
            subject: "app",
            window_s: 2.0,
            frequency_hz: 999,
            sampler: "perf",
            environment: "kernel 6.18",
            operations: None,
        }
    }

    #[test]
    fn counted_operations_give_cpu_microseconds_each() {
        let info = ProfileInfo {
            operations: Some((2000, "connection")),
            ..app_info()
        };
        let t = top_table(&sample(), &info, 10);
        let lines: Vec<&str> = t.lines().collect();
        // 4 ms of samples over 2000 connections: 2 us each; main 2.0 (0.5 self), sha 1.5.
        assert!(
            lines[0].contains("; 2000 connections, 2.0 CPU-us each;"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains("us/conn  self/conn  function"),
            "{}",
            lines[1]
        );
        assert!(
            lines[2].ends_with("2.0        0.5  main (app)"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].ends_with("1.5        1.5  sha256_block (libcrypto)"),
            "{}",
            lines[3]
        );
    }

    #[test]
    fn the_summary_says_what_was_lost_and_put_back() {
        let info = app_info();
        let mut p = sample();
        assert!(top_table(&p, &info, 1)
            .lines()
            .next()
            .unwrap()
            .ends_with("; no samples lost"));
        p.lost_chunks = 3;
        p.restored_frames = 7;
        let first = top_table(&p, &info, 1).lines().next().unwrap().to_string();
        assert!(
            first.ends_with(
                "; perf lost 3 chunks of samples; 7 frames put back where tail calls hid them"
            ),
            "{first}"
        );
    }

    #[test]
    fn the_table_ranks_by_total_and_shows_self_time() {
        let info = app_info();
        let t = top_table(&sample(), &info, 10);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].contains("2 samples, 4.0 CPU-ms over 2.0 s (0% of a CPU)"),
            "{}",
            lines[0]
        );
        assert!(
            lines[2].ends_with("main (app)") && lines[2].contains("100.0%"),
            "{}",
            lines[2]
        );
        assert!(lines[3].contains("sha256_block (libcrypto)"));
        assert!(lines[3].contains("3.0  75.0%"), "{}", lines[3]);
    }
}
