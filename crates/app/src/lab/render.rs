//! `tlsscope lab`'s report: per experiment, what was obtained, the rates untraced and traced by
//! each backend, both sides' CPU, and the server's traced calls per operation; at the end, the
//! rates of every experiment in one table.

use std::fmt::Write as _;

use load::RunResult;
use model::trace::FunctionStats;

use super::session::{LabBackend, LabConfig, LabSummary, Measured};
use crate::render::words::duration;

/// One traced run of an experiment: who traced, the load's result, the server's calls.
pub struct Traced<'a> {
    /// "kernel probes", "in-process probes".
    pub backend: &'a str,
    pub result: &'a RunResult,
    pub calls: &'a [FunctionStats],
}

/// "request" for keep-alive runs, else "handshake".
pub(crate) fn unit(r: &RunResult) -> &'static str {
    if r.mode == load::result::RunMode::Keepalive {
        "request"
    } else {
        "handshake"
    }
}

/// The change from `base` to `x`, as "+3%" or "-91%".
fn change(base: f64, x: f64) -> String {
    format!("{:+.0}%", 100.0 * (x / base.max(1e-9) - 1.0))
}

/// The server's busy share of its core and its CPU microseconds per operation.
fn server_cpu(r: &RunResult) -> Option<(f64, f64)> {
    r.cpu.server.as_ref().map(|s| {
        (
            s.busy_pct,
            (s.user_s + s.system_s) * 1e6 / r.ops.max(1) as f64,
        )
    })
}

/// The experiment's section: what was obtained, rates and CPU untraced and per traced run,
/// then the server-side calls per operation, a column group per traced run.
pub fn render_experiment(text: &mut String, untraced: &RunResult, traced: &[Traced<'_>]) {
    let per = unit(untraced);
    for n in untraced.negotiated.iter().take(2) {
        let share = 100.0 * n.count as f64 / untraced.handshakes.total.max(1) as f64;
        let _ = writeln!(text, "  obtained   {share:.0}%: {}", n.words());
    }
    let mut rate = format!("{:.0} {per}s/s untraced", untraced.ops_per_s);
    for t in traced {
        let _ = write!(
            rate,
            "; {} {:.0}/s ({})",
            t.backend,
            t.result.ops_per_s,
            change(untraced.ops_per_s, t.result.ops_per_s)
        );
    }
    let _ = writeln!(text, "  rate       {rate}");
    let lat = if per == "request" {
        &untraced.latency.request
    } else {
        &untraced.latency.handshake
    };
    let _ = writeln!(
        text,
        "  latency    {per} p50 {} p99 {} (client side, untraced)",
        duration(lat.p50_us as f64),
        duration(lat.p99_us as f64)
    );
    if let Some((busy, us)) = server_cpu(untraced) {
        let client = (untraced.cpu.client_user_s + untraced.cpu.client_system_s) * 1e6
            / untraced.ops.max(1) as f64;
        let mut line = format!("server {busy:.0}% of its core, {us:.0} us per {per} untraced");
        for t in traced {
            if let Some((_, traced_us)) = server_cpu(t.result) {
                let _ = write!(line, "; {traced_us:.0} us with {}", t.backend);
            }
        }
        let _ = writeln!(
            text,
            "  CPU        {line}; client {client:.0} us per {per} ({})",
            untraced.client.engine.name()
        );
    }
    render_calls(text, per, traced);
}

/// The server's calls per operation: a row per function and outcome any run saw, a column
/// group (per op, mean, p99) per traced run.
fn render_calls(text: &mut String, per: &str, traced: &[Traced<'_>]) {
    if traced.is_empty() {
        return;
    }
    let runs: Vec<String> = traced
        .iter()
        .map(|t| format!("{} ({} {per}s)", t.backend, t.result.ops))
        .collect();
    let _ = writeln!(
        text,
        "  server calls per {per}, traced by {} (log2 buckets, p99 estimated):",
        runs.join(", ")
    );
    let mut header = format!("    {:<22} {:<11}", "function", "outcome");
    for t in traced {
        let name = t.backend.split_whitespace().next().unwrap_or(t.backend);
        let _ = write!(header, " | {:>10} {:>9} {:>9}", name, "mean", "p99");
    }
    let _ = writeln!(text, "{header}");
    for (function, outcome) in rows(traced) {
        let mut line = format!("    {function:<22} {outcome:<11}");
        for t in traced {
            let found = t
                .calls
                .iter()
                .find(|c| c.function == function && c.outcome == outcome);
            match found {
                Some(c) => {
                    let s = &c.summary;
                    let _ = write!(
                        line,
                        " | {:>10.2} {:>9} {:>9}",
                        s.count as f64 / t.result.ops.max(1) as f64,
                        duration(s.mean_us),
                        duration(s.p99_us)
                    );
                }
                None => {
                    let _ = write!(line, " | {:>10} {:>9} {:>9}", "-", "", "");
                }
            }
        }
        let _ = writeln!(text, "{}", line.trim_end());
    }
    for (function, outcome) in rows(traced) {
        if let Some(note) = row_note(function, outcome) {
            let _ = writeln!(text, "    note: {function} {outcome}: {note}");
        }
    }
}

/// What a row means where its name alone would mislead.
fn row_note(function: &str, outcome: &str) -> Option<&'static str> {
    match (function, outcome) {
        ("X509_verify_cert", "failure") => Some(
            "OpenSSL building the server's certificate chain for each handshake (it verifies \
             the chain to build it, with no trust store, and ignores the 0 it gets): expected, \
             not a failed verification of anyone",
        ),
        (_, "unknown") => Some(
            "a call that returned <= 0 whose reason the kernel probes could not settle (most \
             often the peer's close_notify or an alert ending the connection); run trace with \
             --exact-outcomes, or the in-process backend, to have each one classed",
        ),
        _ => None,
    }
}

/// Every (function, outcome) of any run, in the order the runs first list them.
fn rows<'a>(traced: &'a [Traced<'_>]) -> Vec<(&'a str, &'a str)> {
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for c in traced.iter().flat_map(|t| t.calls) {
        let key = (c.function.as_str(), c.outcome.as_str());
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    rows
}

/// One experiment's rates, for the closing table.
pub struct SummaryRow<'a> {
    pub experiment: &'a str,
    /// Operations per second untraced, or None when the experiment failed.
    pub untraced: Option<f64>,
    /// Per traced run, in the columns' order: operations per second.
    pub traced: Vec<Option<f64>>,
}

/// The closing table: per experiment, the rate untraced and under each backend, with the
/// change (the cost of observing).
pub fn render_summary(text: &mut String, backends: &[&str], rows: &[SummaryRow<'_>]) {
    let width = rows.iter().map(|r| r.experiment.len()).max().unwrap_or(10);
    let mut header = format!("  {:<width$} {:>10}", "operations per second", "untraced");
    for b in backends {
        let _ = write!(header, " {b:>24}");
    }
    let _ = writeln!(text, "{header}");
    for r in rows {
        let mut line = format!(
            "  {:<width$} {:>10}",
            r.experiment,
            r.untraced
                .map_or("failed".to_string(), |u| format!("{u:.0}"))
        );
        for t in &r.traced {
            let cell = match (r.untraced, t) {
                (Some(u), Some(x)) => format!("{x:.0} ({})", change(u, *x)),
                _ => "-".to_string(),
            };
            let _ = write!(line, " {cell:>24}");
        }
        let _ = writeln!(text, "{line}");
    }
}

/// The report's first line: the target and CPUs, and how each experiment runs.
pub fn heading(config: &LabConfig) -> String {
    let backends: Vec<&str> = config.backends.iter().map(|b| b.describe()).collect();
    format!(
        "tlsscope lab: {} on CPU {}, load on CPU {}; each experiment {:.0} s untraced, then {:.0} s traced by {}",
        config.target.describe(),
        config.server_cpu,
        config.client_cpu,
        config.duration.as_secs_f64(),
        config.trace_duration.as_secs_f64(),
        backends.join(", then by ")
    )
}

/// One experiment's section: its name, a note, its figures (or why it failed).
pub fn experiment_section<E: std::fmt::Display>(
    name: &str,
    measured: &Result<Measured, E>,
) -> String {
    let mut text = format!("\n== {name}\n");
    match measured {
        Ok(m) => {
            if let Some(note) = &m.note {
                let _ = writeln!(text, "  note: {note}");
            }
            let traced: Vec<Traced<'_>> = m
                .traced
                .iter()
                .map(|t| Traced {
                    backend: t.backend.describe(),
                    result: &t.result,
                    calls: &t.calls,
                })
                .collect();
            render_experiment(&mut text, &m.untraced, &traced);
        }
        Err(err) => {
            let _ = writeln!(text, "  failed: {err}");
        }
    }
    text
}

/// An experiment's rates for the closing table (None: it failed), a column per lab backend.
pub fn summary_row(
    experiment: &'static str,
    measured: Option<&Measured>,
    backends: &[LabBackend],
) -> SummaryRow<'static> {
    let traced = backends
        .iter()
        .map(|b| {
            measured?
                .traced
                .iter()
                .find(|t| t.backend == *b)
                .map(|t| t.result.ops_per_s)
        })
        .collect();
    SummaryRow {
        experiment,
        untraced: measured.map(|m| m.untraced.ops_per_s),
        traced,
    }
}

/// The probe cost each backend measured on this machine, a line each.
pub fn calibration_notes(summary: &LabSummary) -> Vec<String> {
    summary
        .calibrations
        .iter()
        .map(|(backend, c)| {
            format!(
                "probe cost on this machine, {}: {:.2} us per probed call (measured on {} calls of a function in tlsscope)",
                backend.describe(),
                c.cost_ns_per_call() / 1000.0,
                c.calls
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_that_would_mislead_are_explained() {
        assert!(row_note("X509_verify_cert", "failure")
            .is_some_and(|n| n.contains("certificate chain")));
        assert!(row_note("SSL_read", "unknown").is_some_and(|n| n.contains("--exact-outcomes")));
        assert_eq!(row_note("SSL_read", "success"), None);
    }
}
