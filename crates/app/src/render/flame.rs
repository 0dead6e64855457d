//! A profile as people read it: a flame graph (SVG, drawn by inferno), folded stacks, and the
//! differences between variants' profiles (`compare --profile`). `profile -p`'s table of the
//! costliest functions is its own (`crate::profile::render`).

use std::fmt::Write as _;
use std::io::{self, Write};

use profile::Profile;

/// What one profile was of, for its titles and table.
pub struct ProfileInfo<'a> {
    /// e.g. "tlsscope serve (pid 1234)".
    pub subject: &'a str,
    /// Wall time sampled, seconds.
    pub window_s: f64,
    pub frequency_hz: u32,
    pub sampler: &'a str,
    /// Where it was taken (kernel, sampler, libraries), kept in the SVG's notes.
    pub environment: &'a str,
    /// The operations done while sampling, where they were counted, and what one is called
    /// (e.g. 2454 "connection"): the table then gives CPU time per operation too.
    pub operations: Option<(u64, &'a str)>,
}

/// Folded stacks, one line per distinct stack: `root;...;leaf MICROSECONDS` (CPU time).
pub fn folded_lines(p: &Profile) -> Vec<String> {
    scaled_folded(p, 1000.0)
}

/// Folded stacks with each stack's CPU nanoseconds divided by `by` and rounded; stacks that
/// round to 0 are left out.
fn scaled_folded(p: &Profile, by: f64) -> Vec<String> {
    p.folded()
        .into_iter()
        .filter_map(|(stack, ns)| {
            let v = (ns as f64 / by).round() as u64;
            (v > 0).then(|| format!("{stack} {v}"))
        })
        .collect()
}

/// `# ` lines for the head of a folded-stacks file. Readers of the format (flamegraph.pl,
/// inferno, speedscope) skip a line that does not end in a count, so a line whose last word is
/// a number gets a closing `.` that keeps it from being read as a stack.
pub fn comment_lines(lines: &[String]) -> String {
    lines
        .iter()
        .map(|l| {
            let ends_in_number = l
                .split_whitespace()
                .last()
                .is_some_and(|w| w.trim_end_matches('.').parse::<f64>().is_ok());
            format!("# {l}{}\n", if ends_in_number { " ." } else { "" })
        })
        .collect()
}

/// Writes the folded stacks, `comments` (the environment) first.
pub fn write_folded(p: &Profile, comments: &[String], out: &mut impl Write) -> io::Result<()> {
    out.write_all(comment_lines(comments).as_bytes())?;
    for line in folded_lines(p) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// An interactive flame graph of the profile (SVG: hover for a frame's CPU time, click to zoom).
pub fn write_flamegraph(
    p: &Profile,
    info: &ProfileInfo<'_>,
    out: &mut impl Write,
) -> io::Result<()> {
    let lines = folded_lines(p);
    if lines.is_empty() {
        return Err(io::Error::other(
            "no samples: the process used no CPU while it was sampled",
        ));
    }
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("CPU of {}", info.subject);
    options.subtitle = Some(format!(
        "{:.1} s sampled at {} Hz by {}; widths in CPU-microseconds",
        info.window_s, info.frequency_hz, info.sampler
    ));
    options.count_name = "us".into();
    options.notes = info.environment.to_string();
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// Folded stacks with each stack's CPU time per operation, in nanoseconds: what lines two
/// variants up when they completed different numbers of operations.
pub fn folded_per_op(p: &Profile, ops: u64) -> String {
    scaled_folded(p, ops.max(1) as f64)
        .into_iter()
        .map(|l| l + "\n")
        .collect()
}

/// A differential flame graph: `after`'s stacks, each coloured by how its CPU time per
/// operation changed from `before` (red: more, blue: less).
pub fn write_differential(
    before: (&Profile, u64),
    after: (&Profile, u64),
    title: &str,
    notes: &str,
    out: &mut impl Write,
) -> io::Result<()> {
    let (b, a) = (
        folded_per_op(before.0, before.1),
        folded_per_op(after.0, after.1),
    );
    let mut combined = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        b.as_bytes(),
        a.as_bytes(),
        &mut combined,
    )?;
    let combined = String::from_utf8_lossy(&combined);
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_string();
    options.subtitle = Some("widths: CPU-nanoseconds per operation in the second; red: more than in the first, blue: less".into());
    options.count_name = "ns/op".into();
    options.notes = notes.to_string();
    inferno::flamegraph::from_lines(&mut options, combined.lines(), out)
}

/// Per function, CPU-microseconds per operation in each variant and the change from the first
/// (the baseline), largest changes in total time first.
pub fn diff_table(variants: &[(&str, &Profile, u64)], n: usize) -> String {
    use std::collections::BTreeMap;
    let mut per: BTreeMap<profile::Frame, Vec<(f64, f64)>> = BTreeMap::new();
    for (i, (_, p, ops)) in variants.iter().enumerate() {
        let ops = (*ops).max(1) as f64;
        for f in p.functions() {
            let e = per
                .entry(f.frame)
                .or_insert_with(|| vec![(0.0, 0.0); variants.len()]);
            e[i] = (f.total_ns as f64 / ops / 1e3, f.self_ns as f64 / ops / 1e3);
        }
    }
    let mut rows: Vec<_> = per.into_iter().collect();
    let change = |v: &[(f64, f64)]| v.iter().map(|x| (x.0 - v[0].0).abs()).fold(0.0, f64::max);
    rows.sort_by(|a, b| change(&b.1).total_cmp(&change(&a.1)));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "CPU-us per operation, total (self); change against {}",
        variants[0].0
    );
    for (name, p, ops) in variants {
        let _ = writeln!(
            s,
            "  {name}: {}, {:.1} CPU-us each",
            crate::render::words::count(*ops, "operation"),
            p.total_ns() as f64 / (*ops).max(1) as f64 / 1e3
        );
    }
    for (frame, v) in rows.into_iter().take(n) {
        let cells: Vec<String> = v
            .iter()
            .enumerate()
            .map(|(i, (t, own))| {
                if i == 0 {
                    format!("{t:.1} ({own:.1})")
                } else {
                    format!("{t:.1} ({own:.1}) {:+.1}", t - v[0].0)
                }
            })
            .collect();
        let _ = writeln!(s, "{}  {}", cells.join(" | "), frame.label());
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use profile::{Frame, Stack};

    fn frame(f: &str, o: &str) -> Frame {
        Frame {
            function: Some(f.into()),
            object: o.into(),
        }
    }

    /// Two stacks of "app": main alone (1 ms), and main calling sha256_block (3 ms).
    pub(crate) fn sample() -> Profile {
        Profile {
            stacks: vec![
                Stack {
                    pid: 1,
                    tid: 1,
                    frames: vec![frame("sha256_block", "libcrypto"), frame("main", "app")],
                    sites: Vec::new(),
                    weight_ns: 3_000_000,
                },
                Stack {
                    pid: 1,
                    tid: 1,
                    frames: vec![frame("main", "app")],
                    sites: Vec::new(),
                    weight_ns: 1_000_000,
                },
            ],
            lost_chunks: 0,
            span: Some((10.0, 12.0)),
            restored_frames: 0,
        }
    }

    #[test]
    fn folded_lines_carry_cpu_microseconds_root_first() {
        assert_eq!(
            folded_lines(&sample()),
            vec![
                "main (app) 1000".to_string(),
                "main (app);sha256_block (libcrypto) 3000".to_string()
            ]
        );
    }

    #[test]
    fn the_flame_graph_is_an_svg_naming_each_function() {
        let mut svg = Vec::new();
        let info = ProfileInfo {
            subject: "app (pid 1)",
            window_s: 1.0,
            frequency_hz: 999,
            sampler: "perf",
            environment: "kernel 6.18",
            operations: None,
        };
        write_flamegraph(&sample(), &info, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..80]);
        assert!(svg.contains("sha256_block (libcrypto)"));
        assert!(svg.contains("CPU of app (pid 1)"));
        assert!(svg.contains("kernel 6.18"), "the environment in the notes");
        let empty = Profile::default();
        assert!(write_flamegraph(&empty, &info, &mut Vec::new()).is_err());
    }

    #[test]
    fn variants_are_compared_per_operation_largest_change_first() {
        let base = sample();
        // Twice the operations, and sha256_block twice as costly per operation.
        let mut slower = sample();
        slower.stacks[0].weight_ns = 12_000_000;
        slower.stacks[1].weight_ns = 2_000_000;
        let t = diff_table(&[("old", &base, 1000), ("new", &slower, 2000)], 10);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[1], "  old: 1000 operations, 4.0 CPU-us each");
        assert_eq!(lines[2], "  new: 2000 operations, 7.0 CPU-us each");
        // main: 4.0 us per op before, 7.0 after; sha256_block: 3.0 before, 6.0 after.
        assert!(
            lines[3].ends_with("main (app)") && lines[3].contains("4.0 (1.0) | 7.0 (1.0) +3.0"),
            "{t}"
        );
        assert!(
            lines[4].contains("3.0 (3.0) | 6.0 (6.0) +3.0  sha256_block (libcrypto)"),
            "{t}"
        );
        let mut svg = Vec::new();
        write_differential(
            (&base, 1000),
            (&slower, 2000),
            "old vs new",
            "kernel 6.18",
            &mut svg,
        )
        .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("sha256_block (libcrypto)") && svg.contains("old vs new"));
        assert!(svg.contains("kernel 6.18"), "the environment in the notes");
    }

    #[test]
    fn folded_files_open_with_the_environment_that_readers_skip() {
        let mut out = Vec::new();
        let env = [
            "kernel 6.18; perf at 999 Hz".to_string(),
            "1.1.1w: 0 chunks lost; 12".to_string(),
        ];
        write_folded(&sample(), &env, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "# kernel 6.18; perf at 999 Hz");
        // A last word that is a number would be read as a stack's count.
        assert_eq!(lines[1], "# 1.1.1w: 0 chunks lost; 12 .");
        assert_eq!(lines[2], "main (app) 1000");
        // What inferno makes of the file: the two stacks, the comments skipped.
        let mut svg = Vec::new();
        let mut options = inferno::flamegraph::Options::default();
        inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.contains("sha256_block (libcrypto)"));
        assert!(!svg.contains("kernel 6.18"), "a comment drawn as a frame");
    }
}
