//! `tlsscope bench`'s text report and its per-connection CSV, rendered from the same result as
//! the JSON.

use std::io::{self, Write};

use load::result::{ConnectionRow, RunMode, RunResult};
use load::wire::WireSummary;
use model::Environment;
use stats::LatencySummary;

use crate::render::words::{count, duration};

/// The CSV header of [`bench_csv`].
pub const CSV_HEADER: &str = "thread,start_us,connect_us,handshake_us,ttfb_us,request_us,\
                              total_us,handshake,version,cipher,group,requests,error";

/// One row per connection.
pub fn bench_csv(w: &mut impl Write, rows: &[ConnectionRow]) -> io::Result<()> {
    writeln!(w, "{CSV_HEADER}")?;
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
    for r in rows {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.thread,
            r.start_us,
            r.connect_us,
            r.handshake_us,
            opt(r.ttfb_us),
            opt(r.request_us),
            r.total_us,
            r.handshake,
            r.version,
            r.cipher,
            r.group.as_deref().unwrap_or(""),
            r.requests,
            csv_field(r.error.as_deref().unwrap_or("")),
        )?;
    }
    Ok(())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// A shard's line: which shard, where, how late against the common start, and what the
/// host's clock discipline says of the clock (how far apart the shards' starts may really be).
pub fn shard_text(w: &mut impl Write, s: &model::bench::ShardInfo) -> io::Result<()> {
    let start = match (&s.start_at, s.start_skew_ms) {
        (Some(at), Some(skew)) => format!("started {skew:+.3} ms after {at}"),
        _ => format!("started at {}", s.started_at),
    };
    let clock = match (s.clock_synchronised, s.clock_error_ms) {
        (Some(true), Some(error)) => format!(
            "clock synchronised, estimated error {error:.3} ms (shards' starts may differ by their errors added)"
        ),
        (Some(true), None) => "clock synchronised".to_string(),
        (Some(false), _) => "clock not synchronised (no time daemon disciplines it): the shards start together only as far as their clocks agree".to_string(),
        (None, _) => "the clock's error is unknown".to_string(),
    };
    let window_s = s.window_unix_ns[1].saturating_sub(s.window_unix_ns[0]) as f64 / 1e9;
    writeln!(
        w,
        "shard {}/{} on {}: {start}, measured {window_s:.3} s from {}; {clock}",
        s.index,
        s.count,
        s.host,
        crate::common::environment::rfc3339_ns(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(s.window_unix_ns[0])
        ),
    )
}

/// The human summary: what was asked, what was obtained, rates, CPU, and a latency block.
/// The client a run used: its engine's library ("rustls 0.23.46 (ring 0.17.14)"), or, in
/// documents from before engines were recorded, the OpenSSL the environment names.
pub fn client_name(env: &Environment, r: &RunResult) -> String {
    if r.client.library.is_empty() {
        return format!("client {}", env.library);
    }
    format!("client {}", r.client.library)
}

pub fn bench_text(w: &mut impl Write, env: &Environment, r: &RunResult) -> io::Result<()> {
    let mode = match r.mode {
        RunMode::Full => "full handshakes",
        RunMode::Resume => "resumed handshakes",
        RunMode::Keepalive => "keep-alive requests",
    };
    let pacing = match r.rate_per_s {
        Some(rate) => format!(", paced at {rate}/s"),
        None => String::new(),
    };
    writeln!(
        w,
        "tlsscope bench: {mode} to {}, {} thread{}, {} connection{}{pacing}, {:.2} s measured \
         (warm-up {:.1} s), {}",
        r.target,
        r.threads,
        plural(r.threads),
        r.connections,
        plural(r.connections),
        r.duration_s,
        r.warmup_s,
        client_name(env, r)
    )?;
    if r.interrupted {
        writeln!(w, "  (interrupted: the figures cover the part that ran)")?;
    }
    let h = &r.handshakes;
    writeln!(
        w,
        "  handshakes   {} ({}/s): full {}, resumed by session ID {}, resumed by ticket {}",
        h.total, h.per_s, h.full, h.resumed_session_id, h.resumed_ticket
    )?;
    for n in &r.negotiated {
        writeln!(
            w,
            "    {:>9}  {} {} {} {} {} {}",
            n.count,
            n.version,
            n.cipher,
            n.group.as_deref().unwrap_or("-"),
            n.signature.as_deref().unwrap_or("-"),
            n.server_key.as_deref().unwrap_or("-"),
            n.handshake
        )?;
    }
    if let Some(wire) = &r.wire {
        wire_text(w, wire)?;
    }
    if r.requests > 0 {
        let statuses: Vec<String> = r
            .http_status
            .iter()
            .map(|(code, n)| format!("{code}: {n}"))
            .collect();
        writeln!(
            w,
            "  requests     {} ({:.1}/s), {} body bytes; status {}",
            r.requests,
            r.requests_per_s,
            r.body_bytes,
            statuses.join(", ")
        )?;
    }
    if r.mode == RunMode::Resume || r.resumption.unexpected_resumptions > 0 {
        let c = &r.resumption;
        writeln!(
            w,
            "  resumption   {}: {} of {} resumed ({:.1}%), {} by another kind, {} \
             ended without a session",
            if c.ok { "ok" } else { "FAILED" },
            c.resumed,
            count(c.offered, "offer"),
            100.0 * c.resumed_ratio,
            c.resumed_other_kind,
            count(c.no_session, "connection")
        )?;
    }
    if r.errors_total == 0 {
        writeln!(w, "  errors       none")?;
    } else {
        let kinds: Vec<String> = r.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        writeln!(
            w,
            "  errors       {} ({})",
            r.errors_total,
            kinds.join(", ")
        )?;
    }
    let c = &r.cpu;
    let busy: Vec<String> = c
        .thread_busy_pct
        .iter()
        .map(|b| format!("{b:.0}%"))
        .collect();
    // Keep-alive work is requests: its few handshakes say nothing per unit.
    let keepalive = r.mode == RunMode::Keepalive;
    let (client_per, unit) = if keepalive {
        (c.client_cpu_s_per_1000_requests, "requests")
    } else {
        (c.client_cpu_s_per_1000_handshakes, "handshakes")
    };
    writeln!(
        w,
        "  client CPU   user {:.2} s, system {:.2} s; {client_per:.3} CPU-s per 1000 {unit}; \
         threads busy {}",
        c.client_user_s,
        c.client_system_s,
        busy.join(" ")
    )?;
    if let Some(s) = &c.server {
        let (server_per, unit) = if keepalive {
            (s.cpu_us_per_request, "request")
        } else {
            (s.cpu_us_per_handshake, "handshake")
        };
        writeln!(
            w,
            "  server CPU   pid {}: {:.0}% of a core; {server_per:.0} µs per {unit}",
            s.pid, s.busy_pct
        )?;
    }
    // openssl s_time's own two lines, for comparison with its figures (it makes connections):
    // the first divides by the client's *user* CPU seconds, as s_time times itself; the second
    // gives the wall-clock seconds.
    if !keepalive {
        let connections = if h.total > 0 { h.total } else { r.ops };
        writeln!(
            w,
            "  s_time line  {connections} connections in {:.2}s; {:.2} connections/user sec",
            c.client_user_s, c.connections_per_user_s
        )?;
        writeln!(
            w,
            "               {connections} connections in {:.0} real seconds",
            r.duration_s
        )?;
    }
    latency_block(w, r)?;
    for warning in &r.warnings {
        writeln!(w, "  warning: {warning}")?;
    }
    Ok(())
}

/// The wire figures, a line per kind of handshake ("  wire full     client 290 B, ...").
pub fn wire_text(w: &mut impl Write, wire: &WireSummary) -> io::Result<()> {
    for (name, kind) in [("full", &wire.full), ("resumed", &wire.resumed)] {
        if let Some(k) = kind {
            writeln!(w, "  wire {name:<8}{}", crate::render::wire::words(k))?;
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn latency_block(w: &mut impl Write, r: &RunResult) -> io::Result<()> {
    writeln!(
        w,
        "  latency      {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "count", "p50", "p90", "p99", "p99.9", "max", "mean", "stdev"
    )?;
    let l = &r.latency;
    // Unpaced keep-alive: an operation is one request started at once, so `total` is
    // `request` by construction; shown once, with the reason.
    let total_is_request = r.mode == RunMode::Keepalive && r.rate_per_s.is_none();
    let rows: [(&str, &LatencySummary); 5] = [
        ("connect", &l.connect),
        ("handshake", &l.handshake),
        ("ttfb", &l.ttfb),
        ("request", &l.request),
        ("total", &l.total),
    ];
    for (name, s) in rows {
        if s.count > 0 && !(total_is_request && name == "total") {
            latency_row(w, name, s)?;
        }
    }
    if total_is_request && l.request.count > 0 {
        writeln!(
            w,
            "    (total = request here: without --rate each keep-alive request starts as soon as \
             its connection is free)"
        )?;
    }
    if l.ttfb.count > 0 && same_shape(&l.ttfb, &l.request) {
        writeln!(
            w,
            "    (ttfb = request to the microsecond: each response arrived with its first read)"
        )?;
    }
    if r.rate_per_s.is_some() && l.total_uncorrected.count > 0 {
        latency_row(w, "uncorrected", &l.total_uncorrected)?;
    }
    if r.rate_per_s.is_some() && l.pacer_late.count > 0 {
        latency_row(w, "pacer late", &l.pacer_late)?;
    }
    Ok(())
}

/// Whether two phases' summaries agree at every quantile shown.
fn same_shape(a: &LatencySummary, b: &LatencySummary) -> bool {
    (a.p50_us, a.p90_us, a.p99_us, a.p999_us, a.max_us)
        == (b.p50_us, b.p90_us, b.p99_us, b.p999_us, b.max_us)
}

fn latency_row(w: &mut impl Write, name: &str, s: &LatencySummary) -> io::Result<()> {
    writeln!(
        w,
        "    {:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        name,
        s.count,
        duration(s.p50_us as f64),
        duration(s.p90_us as f64),
        duration(s.p99_us as f64),
        duration(s.p999_us as f64),
        duration(s.max_us as f64),
        duration(s.mean_us),
        duration(s.stdev_us)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_errors() {
        let rows = vec![ConnectionRow {
            error: Some("tls alert: handshake failure, \"x\"".into()),
            ..ConnectionRow::default()
        }];
        let mut out = Vec::new();
        bench_csv(&mut out, &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(CSV_HEADER));
        assert!(text.contains("\"tls alert: handshake failure, \"\"x\"\"\""));
    }

    #[test]
    fn text_names_what_was_obtained() {
        let mut r = RunResult {
            mode: RunMode::Resume,
            target: "127.0.0.1:4433".into(),
            threads: 1,
            connections: 2,
            ..RunResult::default()
        };
        r.resumption.ok = false;
        r.resumption.offered = 10;
        r.errors.insert("refused".into(), 2);
        r.errors_total = 2;
        let mut out = Vec::new();
        bench_text(&mut out, &Environment::default(), &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("resumption   FAILED"), "{text}");
        assert!(text.contains("errors       2 (refused: 2)"), "{text}");
        assert!(text.contains("connections/user sec"), "{text}");
    }

    #[test]
    fn a_shards_line_says_how_late_it_started_and_what_its_clock_is_worth() {
        let mut s = model::bench::ShardInfo {
            index: 1,
            count: 3,
            host: "client-b".into(),
            start_at: Some("2026-11-28T10:00:00Z".into()),
            started_at: "2026-11-28T10:00:00.000021000Z".into(),
            start_skew_ms: Some(0.021),
            window_unix_ns: [1_795_860_005_000_000_000, 1_795_860_065_000_000_000],
            clock_error_ms: Some(0.512),
            clock_synchronised: Some(true),
            connections: 4,
            requests: None,
            rate_per_s: None,
        };
        let line = |s: &model::bench::ShardInfo| {
            let mut out = Vec::new();
            shard_text(&mut out, s).unwrap();
            String::from_utf8(out).unwrap()
        };
        let text = line(&s);
        assert!(
            text.starts_with("shard 1/3 on client-b: started +0.021 ms after 2026-11-28T10:00:00Z, measured 60.000 s from 2026-11-28T10:00:05.000000000Z; clock synchronised, estimated error 0.512 ms"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);
        (s.clock_synchronised, s.clock_error_ms) = (Some(false), None);
        assert!(line(&s).contains("clock not synchronised"));
        (s.start_at, s.start_skew_ms) = (None, None);
        assert!(line(&s).contains("started at 2026-11-28T10:00:00.000021000Z"));
    }
}
