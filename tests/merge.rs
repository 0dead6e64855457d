//! `tlsscope merge` on real `bench --shard I/N` documents, for what the three-host test in
//! tests/shards.rs leaves out: files that are not shard documents fail alone (exit 3) and none
//! readable is a one-line error (exit 1), a shard stopped by a signal (its document says
//! interrupted) is named and left out, shards against different targets are warned about, and
//! an open-loop rate split three ways is delivered in full by the merged rate (issue 35).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::shards::start_time;
use crate::support::{self, text, Serve};

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// `tlsscope bench TARGET ARGS --shard I/N --start-at AT --json DIR/shard-I.json`.
fn shard_command(
    dir: &Path,
    (i, count): (usize, usize),
    target: &str,
    at: &str,
    args: &[&str],
) -> (Command, PathBuf) {
    let json = dir.join(format!("shard-{i}.json"));
    let mut cmd = Command::new(support::bin());
    cmd.arg("bench").arg(target).args(args);
    cmd.args(["--shard", &format!("{i}/{count}"), "--start-at", at]);
    cmd.arg("--json").arg(&json);
    (cmd, json)
}

/// Shard I of `targets.len()` against each target at once, starting together 3 s from now;
/// the documents' paths, in shard order.
fn shards(dir: &Path, targets: &[String], args: &[&str]) -> Vec<PathBuf> {
    let (at, _) = start_time(Duration::from_secs(3));
    let count = targets.len();
    std::thread::scope(|scope| {
        let runs: Vec<_> = targets
            .iter()
            .enumerate()
            .map(|(i, target)| {
                let (mut cmd, json) = shard_command(dir, (i, count), target, &at, args);
                scope.spawn(move || {
                    let out = support::run_with_timeout(&mut cmd, Duration::from_secs(90));
                    assert!(out.status.success(), "shard {i}: {}", text(&out.stderr));
                    json
                })
            })
            .collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn merge(files: &[PathBuf], extra: &[&str]) -> Output {
    let mut cmd = Command::new(support::bin());
    cmd.arg("merge").args(files).args(extra);
    support::run_with_timeout(&mut cmd, Duration::from_secs(60))
}

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn statuses(merged: &Value) -> Vec<String> {
    merged["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

fn warnings(merged: &Value) -> Vec<String> {
    merged["result"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn files_that_are_not_shard_documents_fail_alone_and_the_rest_are_merged() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = server.addr.to_string();
    let mut files = shards(
        dir.path(),
        &[target.clone(), target],
        &["-c", "2", "-n", "40"],
    );
    server.stop();
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "{ this is not json").unwrap();
    let other = dir.path().join("other-kind.json");
    std::fs::write(&other, r#"{"kind": "trace", "schema_version": 1}"#).unwrap();
    let newer = dir.path().join("newer.json");
    let mut doc = read(&files[0]);
    doc["schema_version"] = Value::from(999);
    std::fs::write(&newer, serde_json::to_vec(&doc).unwrap()).unwrap();
    let missing = dir.path().join("missing.json");
    files.extend([garbage, other, newer, missing]);
    let json = dir.path().join("merged.json");
    let out = merge(&files, &["--json", json.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    for needle in [
        "garbage.json: not merged: not JSON",
        "other-kind.json: not merged: not a tlsscope bench document",
        "newer.json: not merged: bench schema version 999 is newer",
        "missing.json: not merged: cannot read it",
        "4 of 6 shard documents failed",
    ] {
        assert_eq!(stderr.matches(needle).count(), 1, "{needle}: {stderr}");
    }
    let merged = read(&json);
    support::assert_matches_schema(&merged, "bench.v1");
    assert_eq!(
        n(&merged["result"]["ops"]),
        40,
        "the two shards' parts of -n"
    );
    assert_eq!(
        statuses(&merged),
        ["merged", "merged", "failed", "failed", "failed", "failed"]
    );
    // Nothing to merge at all: one line naming the files, exit 1.
    let out = merge(&files[2..], &["--json", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "exit 1, as docs/merge.md says");
    support::assert_one_line_error(&out, &["garbage.json", "missing.json"]);
}

#[test]
fn a_shard_stopped_by_a_signal_is_named_as_interrupted_and_the_others_are_merged() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = server.addr.to_string();
    let (at, at_ns) = start_time(Duration::from_secs(3));
    let short = ["--mode", "keepalive", "-c", "6", "-d", "2s"];
    let long = ["--mode", "keepalive", "-c", "6", "-d", "60s"];
    let (mut cmd, stopped) = shard_command(dir.path(), (2, 3), &target, &at, &long);
    let mut victim = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut files: Vec<PathBuf> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|i| {
                let (mut cmd, json) = shard_command(dir.path(), (i, 3), &target, &at, &short);
                scope.spawn(move || {
                    let out = support::run_with_timeout(&mut cmd, Duration::from_secs(90));
                    assert!(out.status.success(), "shard {i}: {}", text(&out.stderr));
                    json
                })
            })
            .collect();
        // Stopped a second into its load: it writes its document, marked interrupted.
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        std::thread::sleep(Duration::from_nanos(
            (at_ns + 1_000_000_000).saturating_sub(now_ns),
        ));
        support::terminate(&mut victim);
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    victim.wait().unwrap();
    server.stop();
    assert_eq!(read(&stopped)["result"]["interrupted"], true);
    files.push(stopped);
    let json = dir.path().join("merged.json");
    let out = merge(&files, &["--json", json.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("shard-2.json: not merged: its run was interrupted"),
        "{stderr}"
    );
    let merged = read(&json);
    assert_eq!(statuses(&merged), ["merged", "merged", "failed"]);
    let ops: u64 = files[..2]
        .iter()
        .map(|f| n(&read(f)["result"]["ops"]))
        .sum();
    assert_eq!(
        n(&merged["result"]["ops"]),
        ops,
        "the two whole shards only"
    );
}

#[test]
fn shards_against_different_targets_are_warned_about() {
    let (a, b) = (Serve::start(&[]), Serve::start(&[]));
    let dir = tempfile::tempdir().unwrap();
    let targets = [a.addr.to_string(), b.addr.to_string()];
    let files = shards(dir.path(), &targets, &["-c", "2", "-n", "20"]);
    a.stop();
    b.stop();
    let out = merge(&files, &["--json", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    let warnings = warnings(&merged);
    let mismatch = warnings
        .iter()
        .find(|w| w.contains("ran with another target"))
        .unwrap_or_else(|| panic!("no mismatch warned: {warnings:?}"));
    assert!(
        mismatch.contains(&targets[0]) && mismatch.contains(&targets[1]),
        "{mismatch}"
    );
    assert!(!warnings.iter().any(|w| w.contains("another mode")));
}

#[test]
fn an_open_loop_rate_split_three_ways_is_delivered_in_full_by_the_merged_rate() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = server.addr.to_string();
    let targets = vec![target.clone(), target.clone(), target];
    let args = [
        "--mode",
        "keepalive",
        "-c",
        "6",
        "--rate",
        "300",
        "-d",
        "3s",
    ];
    let files = shards(dir.path(), &targets, &args);
    server.stop();
    let out = merge(&files, &["--json", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged: Value = serde_json::from_slice(&out.stdout).unwrap();
    let r = &merged["result"];
    assert_eq!(r["rate_per_s"].as_f64(), Some(300.0), "the parts add up");
    let rate = r["ops_per_s"].as_f64().unwrap();
    assert!(
        (rate - 300.0).abs() / 300.0 < 0.02,
        "300/s planned, {rate}/s delivered"
    );
    // Each shard kept its own coordinated-omission correction; both totals are added.
    assert_eq!(
        r["latency"]["total"]["count"],
        r["latency"]["total_uncorrected"]["count"]
    );
}
