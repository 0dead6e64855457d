//! `tlsscope trace` results for people: the document (`model::trace`) rendered as text
//! (bpftrace-like histograms, then a stats table) and its footer.

use std::io::{self, Write};

use model::trace::{FunctionStats, TraceDocument};
use stats::buckets::Bucket;

use crate::render::histogram::us_label;
use crate::render::words::duration;

/// The text report: a histogram per function and outcome, then one stats table.
pub fn trace_text(w: &mut impl Write, doc: &TraceDocument, histograms: bool) -> io::Result<()> {
    if histograms {
        for f in &doc.functions {
            let pid = f.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
            writeln!(w, "@{} [{}]{pid}:", f.function, f.outcome)?;
            write_histogram(w, &f.buckets)?;
            writeln!(w)?;
        }
    }
    stats_table(w, &doc.functions)?;
    if doc.functions.is_empty() {
        writeln!(w, "  (no calls traced)")?;
    }
    if doc.dropped_cells > 0 {
        writeln!(
            w,
            "warning: {} histogram updates were lost (the kernel map was full)",
            doc.dropped_cells
        )?;
    }
    for f in &doc.wrapper_failures {
        writeln!(
            w,
            "warning: the in-process wrapper of {} failed {} time(s) and stopped timing in that \
             process; the program kept running, but {} is undercounted from then on",
            f.function, f.failures, f.function
        )?;
    }
    Ok(())
}

/// The trailer: where the probes are, what is not traced, and what tracing cost.
pub fn trace_footer(w: &mut impl Write, doc: &TraceDocument) -> io::Result<()> {
    let placed = doc
        .attached
        .iter()
        .filter_map(|a| Some((a.function.as_str(), a.placement.as_ref()?)));
    if let Some(line) = crate::render::placement::placement_line(placed) {
        writeln!(w, "{line}")?;
    }
    for m in &doc.not_attached {
        writeln!(w, "not traced: {} in {}: {}", m.function, m.path, m.reason)?;
    }
    for h in doc.kernel_hooks.iter().filter(|h| !h.attached) {
        writeln!(
            w,
            "kernel hooks missing: {} ({}): {}",
            h.hooks, h.detail, h.effect
        )?;
    }
    let o = &doc.overhead;
    if o.calibration_calls > 0 {
        let share = if doc.duration_s > 0.0 {
            format!(
                " ({:.1}% of one CPU)",
                100.0 * o.estimated_cpu_s / doc.duration_s
            )
        } else {
            String::new()
        };
        writeln!(
            w,
            "probe cost: {:.2} us per probed call (measured on {} at start-up); {} ~ {:.3} CPU-s{share}",
            o.cost_ns_per_call / 1000.0,
            crate::render::words::count(o.calibration_calls, "call"),
            crate::render::words::count(o.probed_calls, "probed call"),
            o.estimated_cpu_s
        )?;
    }
    Ok(())
}

/// One interval's table, headed by where it ends ("--- 2.0 s"; a partial one says how long it
/// was).
pub fn interval(
    w: &mut impl Write,
    functions: &[FunctionStats],
    end: crate::trace::session::IntervalEnd,
) -> io::Result<()> {
    if end.partial {
        writeln!(
            w,
            "--- {:.1} s (partial interval: the last {:.1} s)",
            end.at.as_secs_f64(),
            end.length.as_secs_f64()
        )?;
    } else {
        writeln!(w, "--- {:.1} s", end.at.as_secs_f64())?;
    }
    stats_table(w, functions)
}

/// Columns: function, outcome, count, average, total, p50, p99 (estimated from buckets).
pub fn stats_table(w: &mut impl Write, functions: &[FunctionStats]) -> io::Result<()> {
    let per_pid = functions.iter().any(|f| f.pid.is_some());
    let pid_head = if per_pid { "     pid" } else { "" };
    writeln!(
        w,
        "{pid_head}  {:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "function", "outcome", "count", "avg", "total", "p50", "p99"
    )?;
    for f in functions {
        let s = &f.summary;
        let pid = match (per_pid, f.pid) {
            (true, Some(p)) => format!("{p:>8}"),
            (true, None) => format!("{:>8}", "-"),
            _ => String::new(),
        };
        writeln!(
            w,
            "{pid}  {:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9}",
            f.function,
            f.outcome,
            s.count,
            duration(s.mean_us),
            duration(s.total_ns as f64 / 1000.0),
            duration(s.p50_us),
            duration(s.p99_us)
        )?;
    }
    Ok(())
}

/// bpftrace's layout: "[low, high)   count |@@@@   |".
fn write_histogram(w: &mut impl Write, buckets: &[Bucket]) -> io::Result<()> {
    const WIDTH: u64 = 52;
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    for b in buckets {
        let range = match b.high_us {
            Some(h) => format!("[{}, {})", us_label(b.low_us), us_label(h)),
            None => format!("[{}, ...)", us_label(b.low_us)),
        };
        let bar = "@".repeat(usize::try_from(b.count * WIDTH / max).unwrap_or(0));
        writeln!(w, "{range:<20} {:>10} |{bar:<52}|", b.count)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::Environment;

    #[test]
    fn histogram_and_table_render() {
        let buckets = vec![
            Bucket {
                low_us: 256,
                high_us: Some(512),
                count: 10,
                total_ns: None,
            },
            Bucket {
                low_us: 512,
                high_us: Some(1024),
                count: 5,
                total_ns: None,
            },
        ];
        let mut doc = TraceDocument::new(Environment::default());
        doc.functions.push(FunctionStats {
            function: "SSL_do_handshake".into(),
            group: "handshake".into(),
            outcome: "success".into(),
            pid: None,
            summary: stats::buckets::summarize(&buckets, 6_000_000),
            buckets,
        });
        let mut out = Vec::new();
        trace_text(&mut out, &doc, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("@SSL_do_handshake [success]:"), "{text}");
        assert!(text.contains("[256us, 512us)"), "{text}");
        let full_bar = format!("|{}|", "@".repeat(52));
        assert!(text.contains(&full_bar), "{text}");
        assert!(
            text.contains("SSL_do_handshake           success          15"),
            "{text}"
        );
    }
}
