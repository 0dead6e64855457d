//! `tlsscope merge`'s text: the shards' table, then the merged run as bench reports a run
//! (rates, handshakes obtained, CPU, latency, and the warnings, the merge's first).

use std::io::{self, Write};

use model::bench::{BenchDocument, ShardRow};

/// The shards' table and the merged run.
pub fn merge_text(w: &mut impl Write, doc: &BenchDocument) -> io::Result<()> {
    let merged = doc.shards.iter().filter(|s| s.status == "merged").count();
    writeln!(
        w,
        "tlsscope merge: {} of {} added up, from {}",
        merged,
        crate::render::words::count(doc.shards.len() as u64, "shard document"),
        doc.environment.hostname
    )?;
    shards_table(w, &doc.shards)?;
    writeln!(w)?;
    crate::bench::render::bench_text(w, &doc.environment, &doc.result)
}

/// One line per shard document: its shard, host, start, window, operations, rate, errors and
/// client CPU per operation, or why it was not merged.
pub fn shards_table(w: &mut impl Write, rows: &[ShardRow]) -> io::Result<()> {
    writeln!(
        w,
        "  {:<6} {:<16} {:>10} {:>9} {:>10} {:>7} {:>10}  file",
        "shard", "host", "start", "window", "ops", "ops/s", "cpu us/op"
    )?;
    for r in rows {
        if r.status != "merged" {
            writeln!(
                w,
                "  {:<6} failed: {}  {}",
                "-",
                r.problem.as_deref().unwrap_or("?"),
                r.file
            )?;
            continue;
        }
        let (shard, host, start, window) = match &r.shard {
            Some(s) => (
                format!("{}/{}", s.index, s.count),
                s.host.clone(),
                s.start_skew_ms
                    .map_or("-".into(), |ms| format!("{ms:+.1} ms")),
                format!(
                    "{:.2} s",
                    s.window_unix_ns[1].saturating_sub(s.window_unix_ns[0]) as f64 / 1e9
                ),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        writeln!(
            w,
            "  {:<6} {:<16} {:>10} {:>9} {:>10} {:>7.0} {:>10.1}  {}{}",
            shard,
            host,
            start,
            window,
            r.ops,
            r.ops_per_s,
            r.client_cpu_s_per_1000_ops * 1000.0,
            r.file,
            if r.client_bound {
                " (client-bound)"
            } else {
                ""
            }
        )?;
    }
    Ok(())
}
