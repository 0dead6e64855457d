//! Reads the shards' documents, sets aside those that failed, adds up the others
//! (`load::merge`) and says what a reader of the sum must know: a late shard, settings that
//! differ, a shard whose client set its rate, shards missing from the set.

use std::path::Path;

use model::bench::{BenchDocument, ShardInfo, ShardRow, BENCH_SCHEMA_VERSION};

use crate::common::error::{Error, Result};
use crate::merge::config::MergeConfig;

/// A shard that started this much after the common start (or after the others) is late: its
/// load and theirs did not overlap as planned.
pub const LATE_MS: f64 = 50.0;

/// The merged document (its `shards` lists every file given, merged or failed).
pub struct Merged {
    pub document: BenchDocument,
}

/// One file given: its document, or why it is not merged.
struct Input {
    file: String,
    doc: std::result::Result<BenchDocument, String>,
}

pub fn run(cfg: &MergeConfig) -> Result<Merged> {
    let inputs: Vec<Input> = cfg.files.iter().map(|p| read(p)).collect();
    let good: Vec<(&str, &BenchDocument)> = inputs
        .iter()
        .filter_map(|i| i.doc.as_ref().ok().map(|d| (i.file.as_str(), d)))
        .collect();
    if good.is_empty() {
        let why: Vec<String> = inputs
            .iter()
            .map(|i| format!("{}: {}", i.file, i.doc.as_ref().err().unwrap()))
            .collect();
        return Err(Error::msg(format!(
            "no shard document can be merged ({})",
            why.join("; ")
        )));
    }
    let parts: Vec<load::merge::Part<'_>> = good
        .iter()
        .map(|(_, d)| load::merge::Part {
            result: &d.result,
            window_unix_ns: d.shard.as_ref().map(|s| s.window_unix_ns),
        })
        .collect();
    let merged = load::merge::add_up(&parts);
    let mut result = merged.result;
    let mut warnings = warnings(&good);
    if let load::merge::RateWindow::SumOfRates = merged.rate_window {
        warnings.push(
            "the shards' measured windows are unknown or do not all overlap: the rate is the sum of each shard's own rate".into(),
        );
    }
    // Every shard measured the same server: its CPU is kept once, from the first that has it,
    // and its per-unit figures spread over every shard's work (the server served them all in
    // that window, not only the measuring shard's).
    if let Some((file, d)) = good.iter().find(|(_, d)| d.result.cpu.server.is_some()) {
        let mut server = d.result.cpu.server.clone().expect("found with a server");
        let share = |mine: u64, all: u64| {
            if all == 0 {
                0.0
            } else {
                mine as f64 / all as f64
            }
        };
        server.cpu_us_per_handshake *= share(d.result.handshakes.total, result.handshakes.total);
        server.cpu_us_per_request *= share(d.result.requests, result.requests);
        warnings.push(format!(
            "the server's CPU is the one {file} measured over its own window, per handshake and request of all the shards' work"
        ));
        result.cpu.server = Some(server);
    }
    for (file, d) in &good {
        for w in &d.result.warnings {
            warnings.push(format!("{file}: {w}"));
        }
    }
    result.warnings = warnings;
    let first = good[0].1;
    let mut document = BenchDocument::new(first.environment.clone(), result);
    document.environment.command_line = std::env::args().collect();
    document.environment.hostname = hosts(&good);
    document.shards = inputs.iter().map(row).collect();
    Ok(Merged { document })
}

/// Reads one shard's document: a bench document of a schema this tlsscope reads, whose run
/// finished. Anything else is why it is not merged.
fn read(path: &Path) -> Input {
    let file = path.display().to_string();
    let doc = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read it ({e})"))
        .and_then(|text| parse(&text));
    Input { file, doc }
}

fn parse(text: &str) -> std::result::Result<BenchDocument, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let kind = value["kind"].as_str().unwrap_or_default();
    if kind != "bench" {
        return Err(format!("not a tlsscope bench document (kind {kind:?})"));
    }
    let version = value["schema_version"].as_u64().unwrap_or(0);
    if version > u64::from(BENCH_SCHEMA_VERSION) {
        return Err(format!(
            "bench schema version {version} is newer than this tlsscope reads ({BENCH_SCHEMA_VERSION}); use a newer tlsscope"
        ));
    }
    let doc: BenchDocument =
        serde_json::from_value(value).map_err(|e| format!("not a bench document ({e})"))?;
    if doc.result.interrupted {
        return Err("its run was interrupted: its figures cover only part of its window".into());
    }
    if doc.result.ops == 0 {
        return Err(format!(
            "no operation completed ({} errors)",
            doc.result.errors_total
        ));
    }
    if !doc.shards.is_empty() {
        return Err("it is itself a merge: merge the shards' own documents".into());
    }
    Ok(doc)
}

/// What the sum's reader must know about how the shards ran.
fn warnings(good: &[(&str, &BenchDocument)]) -> Vec<String> {
    let mut out = Vec::new();
    let (first_file, first) = good[0];
    let differs = |what: &str, theirs: &dyn Fn(&BenchDocument) -> String| {
        let mine = theirs(first);
        good.iter()
            .filter(|(_, d)| theirs(d) != mine)
            .map(|(f, d)| {
                format!(
                    "{f} ran with another {what} ({:?}) than {first_file} ({mine:?}): the sum mixes two experiments",
                    theirs(d)
                )
            })
            .collect::<Vec<_>>()
    };
    out.extend(differs("target", &|d| d.result.target.clone()));
    out.extend(differs("mode", &|d| d.result.mode.name().to_string()));
    out.extend(differs("client library", &|d| {
        format!("{} {}", d.result.client.library, d.environment.library)
    }));
    out.extend(differs("tlsscope version", &|d| {
        d.environment.tlsscope_version.clone()
    }));
    out.extend(shard_set(good));
    out.extend(late(good));
    for (f, d) in good {
        if let Some(b) = load::bottleneck_of(&d.result) {
            out.push(format!(
                "{f}: its client was the bottleneck (a load thread {:.0}% busy): the sum is short by what that shard could not send; run more shards or give each more CPU",
                b.busiest_pct
            ));
        }
    }
    out
}

/// Shards that say different N, share an index, or leave one of 0..N-1 out.
fn shard_set(good: &[(&str, &BenchDocument)]) -> Vec<String> {
    let shards: Vec<(&str, &ShardInfo)> = good
        .iter()
        .filter_map(|(f, d)| d.shard.as_ref().map(|s| (*f, s)))
        .collect();
    let mut out = Vec::new();
    if shards.len() < good.len() && !shards.is_empty() {
        out.push(
            "some documents are shards (--shard) and some are not: the sum may count one client twice".into(),
        );
    }
    let Some((_, one)) = shards.first() else {
        return out;
    };
    if let Some((f, s)) = shards.iter().find(|(_, s)| s.count != one.count) {
        out.push(format!(
            "{f} is shard {}/{}, another document says {} shards",
            s.index, s.count, one.count
        ));
        return out;
    }
    for i in 0..one.count {
        let with: Vec<&str> = shards
            .iter()
            .filter(|(_, s)| s.index == i)
            .map(|(f, _)| *f)
            .collect();
        match with.len() {
            0 => out.push(format!(
                "shard {i}/{} is missing: the sum covers {} of {} shards",
                one.count,
                shards.len(),
                one.count
            )),
            1 => {}
            _ => out.push(format!(
                "shard {i}/{} is given {} times ({}): it is counted each time",
                one.count,
                with.len(),
                with.join(", ")
            )),
        }
    }
    out
}

/// Shards that started late: after the common start by more than [`LATE_MS`], or, without
/// one, after the earliest shard's window by more than that.
fn late(good: &[(&str, &BenchDocument)]) -> Vec<String> {
    let earliest = good
        .iter()
        .filter_map(|(_, d)| d.shard.as_ref().map(|s| s.window_unix_ns[0]))
        .min();
    good.iter()
        .filter_map(|(f, d)| {
            let s = d.shard.as_ref()?;
            let behind = match s.start_skew_ms {
                Some(skew) => skew,
                None => (s.window_unix_ns[0] - earliest?) as f64 / 1e6,
            };
            (behind > LATE_MS).then(|| {
                format!(
                    "{f}: shard {}/{} started {behind:.1} ms late (more than {LATE_MS} ms): the shards' loads overlapped for less than planned",
                    s.index, s.count
                )
            })
        })
        .collect()
}

/// The hosts the shards ran on, as the merged document's hostname.
fn hosts(good: &[(&str, &BenchDocument)]) -> String {
    let mut names: Vec<String> = Vec::new();
    for (_, d) in good {
        let h = d
            .shard
            .as_ref()
            .map_or(d.environment.hostname.clone(), |s| s.host.clone());
        if !names.contains(&h) {
            names.push(h);
        }
    }
    names.join(", ")
}

/// A file's row in the shards' table.
fn row(input: &Input) -> ShardRow {
    match &input.doc {
        Ok(d) => {
            let r = &d.result;
            let cpu = r.cpu.client_user_s + r.cpu.client_system_s;
            ShardRow {
                file: input.file.clone(),
                shard: d.shard.clone(),
                status: "merged".into(),
                problem: None,
                ops: r.ops,
                ops_per_s: r.ops_per_s,
                errors_total: r.errors_total,
                client_cpu_s_per_1000_ops: if r.ops == 0 {
                    0.0
                } else {
                    cpu / r.ops as f64 * 1000.0
                },
                client_bound: load::bottleneck_of(r).is_some(),
            }
        }
        Err(why) => ShardRow {
            file: input.file.clone(),
            status: "failed".into(),
            problem: Some(why.clone()),
            ..ShardRow::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard_doc(index: usize, count: usize, skew: f64, target: &str) -> BenchDocument {
        let mut d = BenchDocument::new(
            model::Environment::default(),
            load::result::RunResult {
                ops: 10,
                target: target.into(),
                ..Default::default()
            },
        );
        d.shard = Some(ShardInfo {
            index,
            count,
            start_skew_ms: Some(skew),
            window_unix_ns: [1_000_000_000, 2_000_000_000],
            ..ShardInfo::default()
        });
        d
    }

    #[test]
    fn a_missing_a_doubled_and_a_late_shard_are_warned_and_a_mixed_target_too() {
        let (a, b, c) = (
            shard_doc(0, 3, 1.0, "t"),
            shard_doc(0, 3, 80.0, "t"),
            shard_doc(1, 3, 2.0, "u"),
        );
        let good = [("a.json", &a), ("b.json", &b), ("c.json", &c)];
        let w = warnings(&good).join("\n");
        assert!(
            w.contains("shard 0/3 is given 2 times (a.json, b.json)"),
            "{w}"
        );
        assert!(w.contains("shard 2/3 is missing"), "{w}");
        assert!(w.contains("b.json: shard 0/3 started 80.0 ms late"), "{w}");
        assert!(w.contains("c.json ran with another target"), "{w}");
        let clean = [("a.json", &a), ("c2.json", &shard_doc(1, 2, 0.0, "t"))];
        assert!(warnings(&clean)
            .iter()
            .any(|w| w.contains("another document says 3 shards")));
    }

    #[test]
    fn the_server_cpu_one_shard_measured_is_spread_over_every_shard_s_work() {
        let dir = std::env::temp_dir().join(format!("tlsscope-merge-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = Vec::new();
        for i in 0..2 {
            let mut d = shard_doc(i, 2, 0.0, "t");
            d.result.handshakes.total = 100;
            d.result.requests = 1000;
            if i == 0 {
                d.result.cpu.server = Some(load::result::ServerCpu {
                    cpu_us_per_handshake: 500.0,
                    cpu_us_per_request: 50.0,
                    ..Default::default()
                });
            }
            let path = dir.join(format!("{i}.json"));
            std::fs::write(&path, serde_json::to_vec(&d).unwrap()).unwrap();
            files.push(path);
        }
        let cfg = MergeConfig {
            files,
            json: None,
            html: None,
            text: false,
        };
        let merged = run(&cfg).unwrap().document;
        let _ = std::fs::remove_dir_all(&dir);
        let server = merged.result.cpu.server.unwrap();
        assert_eq!(server.cpu_us_per_handshake, 250.0);
        assert_eq!(server.cpu_us_per_request, 25.0);
        assert_eq!(merged.shards.len(), 2);
    }

    #[test]
    fn an_interrupted_run_a_merge_and_other_kinds_are_not_merged() {
        let mut d = shard_doc(0, 1, 0.0, "t");
        d.result.interrupted = true;
        let text = serde_json::to_string(&d).unwrap();
        assert!(parse(&text).unwrap_err().contains("interrupted"));
        assert!(parse("{\"kind\":\"trace\"}")
            .unwrap_err()
            .contains("not a tlsscope bench document"));
        assert!(parse("nonsense").unwrap_err().starts_with("not JSON"));
        let newer = "{\"kind\":\"bench\",\"schema_version\":99}";
        assert!(parse(newer)
            .unwrap_err()
            .contains("newer than this tlsscope reads"));
    }
}
