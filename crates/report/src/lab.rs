//! `tlsscope lab`'s report: per experiment, what was obtained, the rates untraced and traced,
//! both sides' CPU, and the server's traced calls per operation.

use std::fmt::Write as _;

use load::RunResult;

use crate::duration;
use crate::trace::FunctionStats;

/// The experiment's section: what was obtained, rates and CPU untraced and traced, then the
/// server-side calls per operation.
pub fn render_experiment(
    text: &mut String,
    untraced: &RunResult,
    traced: &RunResult,
    calls: &[FunctionStats],
) {
    let per = if untraced.mode == load::result::RunMode::Keepalive {
        "request"
    } else {
        "handshake"
    };
    for n in untraced.negotiated.iter().take(2) {
        let share = 100.0 * n.count as f64 / untraced.handshakes.total.max(1) as f64;
        let _ = writeln!(
            text,
            "  obtained   {share:.0}%: {} {} {} {} {}",
            n.version,
            n.cipher,
            n.group.as_deref().unwrap_or("-"),
            n.signature.as_deref().unwrap_or("-"),
            n.handshake
        );
    }
    let change = 100.0 * (traced.ops_per_s / untraced.ops_per_s.max(1e-9) - 1.0);
    let _ = writeln!(
        text,
        "  rate       {:.0} {per}s/s untraced; {:.0}/s traced ({change:+.0}%)",
        untraced.ops_per_s, traced.ops_per_s
    );
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
    let server_us_per_op = |r: &RunResult| {
        r.cpu.server.as_ref().map(|s| {
            (
                s.busy_pct,
                (s.user_s + s.system_s) * 1e6 / r.ops.max(1) as f64,
            )
        })
    };
    let client_us =
        |r: &RunResult| (r.cpu.client_user_s + r.cpu.client_system_s) * 1e6 / r.ops.max(1) as f64;
    if let Some((busy, us)) = server_us_per_op(untraced) {
        let _ = writeln!(
            text,
            "  CPU        server {busy:.0}% of its core, {us:.0} us per {per}; client {:.0} us per {per}",
            client_us(untraced)
        );
    }
    let traced_server_us = server_us_per_op(traced).map_or(0.0, |(_, us)| us);
    let ops = traced.ops.max(1) as f64;
    let _ = writeln!(
        text,
        "  server calls (traced, {} {per}s; log2 buckets, p50/p99 estimated):",
        traced.ops
    );
    let _ = writeln!(
        text,
        "    {:<22} {:<8} {:>8} {:>9} {:>9} {:>9} {:>11}",
        "function", "outcome", "per op", "mean", "p50", "p99", "us per op"
    );
    for row in calls {
        let s = &row.summary;
        let _ = writeln!(
            text,
            "    {:<22} {:<8} {:>8.2} {:>9} {:>9} {:>9} {:>11.1}",
            row.function,
            row.outcome,
            s.count as f64 / ops,
            duration(s.mean_us),
            duration(s.p50_us),
            duration(s.p99_us),
            s.total_ns as f64 / 1000.0 / ops
        );
    }
    if traced_server_us > 0.0 {
        let _ = writeln!(
            text,
            "    (the server spent {traced_server_us:.0} us of CPU per {per} while traced; calls nest, e.g. SSL_do_handshake holds the EVP_* calls)"
        );
    }
}
