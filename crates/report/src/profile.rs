//! A profile as people read it: a flame graph (SVG, drawn by inferno), folded stacks, and a
//! table of the costliest functions in CPU time.

use std::fmt::Write as _;
use std::io::{self, Write};

use profile::{FunctionCost, Profile};

/// What one profile was of, for its titles and table.
pub struct ProfileInfo<'a> {
    /// e.g. "tlsscope serve (pid 1234)".
    pub subject: &'a str,
    /// Wall time sampled, seconds.
    pub window_s: f64,
    pub frequency_hz: u32,
    pub sampler: &'a str,
}

/// Folded stacks, one line per distinct stack: `root;...;leaf MICROSECONDS` (CPU time).
pub fn folded_lines(p: &Profile) -> Vec<String> {
    p.folded()
        .into_iter()
        .filter_map(|(stack, ns)| {
            let us = (ns + 500) / 1000;
            (us > 0).then(|| format!("{stack} {us}"))
        })
        .collect()
}

/// Writes the folded stacks.
pub fn write_folded(p: &Profile, out: &mut impl Write) -> io::Result<()> {
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
    inferno::flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), out)
}

/// The `n` costliest functions by total time: self and total CPU time in milliseconds and as a
/// share of all samples, and per second of the window.
pub fn top_table(p: &Profile, info: &ProfileInfo<'_>, n: usize) -> String {
    let total = p.total_ns().max(1) as f64;
    let functions = p.functions();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} samples, {:.1} CPU-ms over {:.1} s ({:.0}% of a CPU){}",
        info.subject,
        p.stacks.len(),
        total / 1e6,
        info.window_s,
        total / 1e9 / info.window_s.max(1e-9) * 100.0,
        if p.lost_chunks > 0 {
            format!("; perf lost {} chunks of samples", p.lost_chunks)
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        s,
        "{:>10} {:>6} {:>10} {:>6}  function (object)",
        "total ms", "total", "self ms", "self"
    );
    for f in functions.iter().take(n) {
        let _ = writeln!(s, "{}", row(f, total));
    }
    if functions.iter().take(n).any(|f| f.frame.function.is_none()) {
        let _ = writeln!(
            s,
            "[unknown]: code its object's symbol tables do not name (internal functions of a stripped library), one row per object"
        );
    }
    s
}

fn row(f: &FunctionCost, total: f64) -> String {
    format!(
        "{:>10.1} {:>5.1}% {:>10.1} {:>5.1}%  {}",
        f.total_ns as f64 / 1e6,
        f.total_ns as f64 / total * 100.0,
        f.self_ns as f64 / 1e6,
        f.self_ns as f64 / total * 100.0,
        f.frame.label()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::{Frame, Stack};

    fn frame(f: &str, o: &str) -> Frame {
        Frame {
            function: Some(f.into()),
            object: o.into(),
        }
    }

    fn sample() -> Profile {
        Profile {
            stacks: vec![
                Stack {
                    pid: 1,
                    tid: 1,
                    frames: vec![frame("sha256_block", "libcrypto"), frame("main", "app")],
                    weight_ns: 3_000_000,
                },
                Stack {
                    pid: 1,
                    tid: 1,
                    frames: vec![frame("main", "app")],
                    weight_ns: 1_000_000,
                },
            ],
            lost_chunks: 0,
            span: Some((10.0, 12.0)),
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
        };
        write_flamegraph(&sample(), &info, &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..80]);
        assert!(svg.contains("sha256_block (libcrypto)"));
        assert!(svg.contains("CPU of app (pid 1)"));
        let empty = Profile::default();
        assert!(write_flamegraph(&empty, &info, &mut Vec::new()).is_err());
    }

    #[test]
    fn the_table_ranks_by_total_and_shows_self_time() {
        let info = ProfileInfo {
            subject: "app",
            window_s: 2.0,
            frequency_hz: 999,
            sampler: "perf",
        };
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
