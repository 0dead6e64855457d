//! `bench --shard I/N --start-at T`: shards on separate hosts (network namespaces: the
//! built-in server in one, each shard in its own, joined by a bridge) start together at T, take
//! their parts of the run, and their documents say so (issue 35).

use std::process::{Command, Output};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::support::{self, assert_one_line_error, text, Netns, Serve};

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// A server host and `clients` client hosts: namespaces on one bridge (in the server's
/// namespace), 10.235.0.1 for the server and 10.235.0.10 + i for client i.
struct Hosts {
    server: Netns,
    clients: Vec<Netns>,
}

const SERVER_IP: &str = "10.235.0.1";

impl Hosts {
    fn new(tag: &str, clients: usize) -> Hosts {
        let server = Netns::new(&format!("{tag}-srv"));
        server.run(&["ip", "link", "add", "br0", "type", "bridge"]);
        server.run(&[
            "ip",
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            "br0",
        ]);
        server.run(&["ip", "link", "set", "br0", "up"]);
        let clients = (0..clients)
            .map(|i| {
                let client = Netns::new(&format!("{tag}-c{i}"));
                let (inner, outer) = (format!("vc{i}"), format!("vs{i}"));
                // Made in the two namespaces directly: no name is ever in the host's.
                let made = support::run_with_timeout(
                    Command::new("ip").args([
                        "link",
                        "add",
                        &inner,
                        "netns",
                        &client.name,
                        "type",
                        "veth",
                        "peer",
                        "name",
                        &outer,
                        "netns",
                        &server.name,
                    ]),
                    Duration::from_secs(10),
                );
                assert!(made.status.success(), "veth: {}", text(&made.stderr));
                let addr = format!("10.235.0.{}/24", 10 + i);
                client.run(&["ip", "addr", "add", &addr, "dev", &inner]);
                client.run(&["ip", "link", "set", &inner, "up"]);
                server.run(&["ip", "link", "set", &outer, "master", "br0"]);
                server.run(&["ip", "link", "set", &outer, "up"]);
                client
            })
            .collect();
        Hosts { server, clients }
    }

    /// The built-in server on the server host.
    fn serve(&self) -> Serve {
        Serve::start_in(
            &self.server.prefix(),
            &[],
            &["--listen", &format!("{SERVER_IP}:0")],
        )
    }

    /// `tlsscope bench ARGS --shard I/N` on client host I, for every I at once, each writing
    /// its JSON document; their outputs and documents, in shard order.
    fn shards(&self, args: &[&str]) -> Vec<(Output, Value)> {
        let dir = tempfile::tempdir().unwrap();
        let count = self.clients.len();
        let runs: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .clients
                .iter()
                .enumerate()
                .map(|(i, client)| {
                    let json = dir.path().join(format!("shard-{i}.json"));
                    scope.spawn(move || {
                        let mut cmd = Command::new("ip");
                        cmd.args(&client.prefix()[1..]).arg(support::bin());
                        cmd.arg("bench").args(args);
                        cmd.args(["--shard", &format!("{i}/{count}"), "--json"]);
                        cmd.arg(&json);
                        let out = support::run_with_timeout(&mut cmd, Duration::from_secs(90));
                        (out, json)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        runs.into_iter()
            .map(|(out, json)| {
                assert!(
                    out.status.success(),
                    "a shard failed: {}",
                    text(&out.stderr)
                );
                let doc = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
                (out, doc)
            })
            .collect()
    }
}

/// A start time `ahead` from now, whole milliseconds: (RFC 3339 text, Unix ns).
pub(crate) fn start_time(ahead: Duration) -> (String, u64) {
    let at = SystemTime::now() + ahead;
    let ms = at.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let out = support::run_with_timeout(
        Command::new("date").args([
            "-u",
            "-d",
            &format!("@{}.{:03}", ms / 1000, ms % 1000),
            "+%Y-%m-%dT%H:%M:%S.%3NZ",
        ]),
        Duration::from_secs(10),
    );
    assert!(out.status.success());
    (text(&out.stdout).trim().to_string(), ms * 1_000_000)
}

#[test]
fn three_shards_on_three_hosts_start_together_and_split_the_connections_and_count() {
    let hosts = Hosts::new("shards3", 3);
    let server = hosts.serve();
    // Far enough ahead for the three processes to start, load the library and check the
    // target on a busy two-CPU machine.
    let (at, at_ns) = start_time(Duration::from_secs(3));
    let target = server.addr.to_string();
    let runs = hosts.shards(&[
        &target,
        "--mode",
        "keepalive",
        "-c",
        "10",
        "-n",
        "900",
        "--start-at",
        &at,
    ]);
    let mut connections = Vec::new();
    let mut counts = Vec::new();
    let mut ops = 0;
    for (i, (out, doc)) in runs.iter().enumerate() {
        support::assert_matches_schema(doc, "bench.v1");
        let s = &doc["shard"];
        assert_eq!((n(&s["index"]), n(&s["count"])), (i as u64, 3), "{s}");
        assert_eq!(s["start_at"], at.as_str());
        assert!(!s["host"].as_str().unwrap().is_empty());
        // No warm-up: the measured window starts when the load does, at T.
        let [from, to] = [n(&s["window_unix_ns"][0]), n(&s["window_unix_ns"][1])];
        let off_ms = (from as f64 - at_ns as f64) / 1e6;
        assert!(
            (0.0..50.0).contains(&off_ms),
            "shard {i}'s window starts {off_ms} ms after T"
        );
        let skew = f(&s["start_skew_ms"]);
        assert!(
            (0.0..50.0).contains(&skew),
            "shard {i} started {skew} ms late"
        );
        assert!(to > from);
        let window_s = (to - from) as f64 / 1e9;
        assert!((window_s - f(&doc["result"]["duration_s"])).abs() < 1e-6);
        assert_eq!(n(&doc["result"]["connections"]), n(&s["connections"]));
        connections.push(n(&s["connections"]));
        counts.push(n(&s["requests"]));
        ops += n(&doc["result"]["ops"]);
        let stdout = text(&out.stdout);
        assert!(
            stdout.starts_with(&format!("shard {i}/3 on ")) && stdout.contains(&at),
            "{stdout}"
        );
    }
    assert_eq!(connections, [4, 3, 3], "the parts of -c 10");
    assert_eq!(counts, [300, 300, 300], "the parts of -n 900");
    assert_eq!(ops, 900);
    let stats = server.stop();
    assert_eq!(n(&stats["requests"]), 900, "{stats}");
    assert_eq!(
        n(&stats["connections"]["accepted"]),
        13,
        "ten connections and each shard's check: {stats}"
    );
}

#[test]
fn an_open_loop_rate_split_three_ways_is_delivered_in_full() {
    let hosts = Hosts::new("shardsrate", 3);
    let server = hosts.serve();
    let (at, at_ns) = start_time(Duration::from_secs(3));
    let target = server.addr.to_string();
    const RATE: f64 = 300.0;
    let runs = hosts.shards(&[
        &target,
        "--mode",
        "keepalive",
        "-c",
        "6",
        "--rate",
        "300",
        "-d",
        "3s",
        "--warmup",
        "500ms",
        "--start-at",
        &at,
    ]);
    let mut delivered = 0.0;
    let mut parts = 0.0;
    for (_, doc) in &runs {
        let s = &doc["shard"];
        let window_s = (n(&s["window_unix_ns"][1]) - n(&s["window_unix_ns"][0])) as f64 / 1e9;
        // The load begins at T; the measured window after the warm-up.
        let off_ms = (n(&s["window_unix_ns"][0]) as f64 - at_ns as f64) / 1e6 - 500.0;
        assert!(
            (0.0..50.0).contains(&off_ms),
            "window {off_ms} ms after T + warm-up"
        );
        delivered += n(&doc["result"]["ops"]) as f64 / window_s;
        parts += f(&s["rate_per_s"]);
        assert_eq!(f(&doc["result"]["rate_per_s"]), f(&s["rate_per_s"]));
        assert_eq!(n(&doc["result"]["errors_total"]), 0);
    }
    assert_eq!(parts, RATE, "the shards' rates add up to --rate");
    let off = (delivered - RATE).abs() / RATE;
    assert!(off < 0.02, "delivered {delivered:.1}/s of {RATE}/s");
    server.stop();
}

#[test]
fn bad_shard_and_start_values_are_one_line_errors() {
    let cases: &[(&[&str], &[&str])] = &[
        (&["--shard", "3/3"], &["--shard 3/3", "I/N", "0 to 2"]),
        (&["--shard", "1/0"], &["--shard 1/0", "I/N", "at least 1"]),
        (&["--shard", "x/2"], &["--shard x/2", "I/N"]),
        (
            &["--shard", "2/3", "-c", "2"],
            &["--shard 2/3", "--connections 2", "-c 3 or more"],
        ),
        (&["--start-at", "soon"], &["--start-at soon", "RFC 3339"]),
        (
            &["--start-at", "2099-01-01T00:00:00Z"],
            &["--start-at", "at most 24 hours"],
        ),
    ];
    for (args, needles) in cases {
        // Refused before any connection: the address need not answer.
        let mut all = vec!["bench", "127.0.0.1:9"];
        all.extend_from_slice(args);
        let out = support::tlsscope(&all);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_one_line_error(&out, needles);
    }
}

#[test]
fn a_start_time_already_past_starts_at_once_and_says_how_late() {
    let server = Serve::start(&[]);
    let out = support::tlsscope(&[
        "bench",
        &server.addr.to_string(),
        "-n",
        "20",
        "-c",
        "2",
        "--start-at",
        "2026-01-01T00:00:00+01:00",
        "--json",
        "-",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &doc["shard"];
    assert_eq!((n(&s["index"]), n(&s["count"])), (0, 1), "{s}");
    assert!(f(&s["start_skew_ms"]) > 1e9, "{s}");
    let warnings = doc["result"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("had passed")),
        "{warnings:?}"
    );
    server.stop();
}

#[test]
fn a_shard_stopped_while_waiting_for_its_start_runs_no_load() {
    let server = Serve::start(&[]);
    let (at, _) = start_time(Duration::from_secs(60));
    let mut cmd = support::command_in(&[]);
    cmd.args(["bench", &server.addr.to_string(), "-n", "10"]);
    cmd.args(["--shard", "0/2", "--start-at", &at]);
    let mut w = support::start_until(&mut cmd, "waiting", Duration::from_secs(30));
    let stopped_at = std::time::Instant::now();
    support::terminate(&mut w.child);
    let status = w.child.wait().unwrap();
    assert!(
        stopped_at.elapsed() < Duration::from_secs(2),
        "took {:?} to stop",
        stopped_at.elapsed()
    );
    assert!(!status.success());
    let rest: Vec<String> = w.lines.iter().collect();
    assert!(
        rest.iter()
            .any(|l| l.contains("while waiting for the start") && l.contains(&at)),
        "{rest:?}"
    );
    let stats = server.stop();
    assert_eq!(
        n(&stats["connections"]["accepted"]),
        1,
        "only the target's check: {stats}"
    );
}

/// `tlsscope merge FILES...`, with its JSON and HTML in `dir`: (output, merged document).
fn merge(dir: &std::path::Path, files: &[std::path::PathBuf]) -> (Output, Value) {
    let json = dir.join("merged.json");
    let html = dir.join("merged.html");
    let mut cmd = Command::new(support::bin());
    cmd.arg("merge").args(files).arg("--json").arg(&json);
    cmd.arg("--html").arg(&html);
    let out = support::run_with_timeout(&mut cmd, Duration::from_secs(60));
    let doc = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (out, doc)
}

/// The value at quantile `q` of the multiset of recorded values ([value_us, count] pairs, each
/// value the top of its bucket), counted out by rank as an HDR histogram ranks them: the
/// smallest value with at least ceil(q * n) values at or below it.
fn quantile_of(values: &[[u64; 2]], q: f64) -> u64 {
    let mut sorted = values.to_vec();
    sorted.sort();
    let n: u64 = sorted.iter().map(|v| v[1]).sum();
    let rank = ((q * n as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for [value, count] in sorted {
        seen += count;
        if seen >= rank {
            return value;
        }
    }
    panic!("empty");
}

/// Issue 35's whole path: three shards on three hosts, merged. The merged count is the
/// server's own; the merged percentiles are those of every recorded value of every shard put
/// together (never an average of the shards' percentiles); the JSON is a bench document with a
/// row per shard, and the HTML page renders with the shards' table.
#[test]
fn three_shards_merged_count_what_the_server_counted_with_exact_percentiles() {
    let hosts = Hosts::new("merge3", 3);
    let server = hosts.serve();
    let (at, _) = start_time(Duration::from_secs(3));
    let target = server.addr.to_string();
    let runs = hosts.shards(&[
        &target,
        "--mode",
        "keepalive",
        "-c",
        "9",
        "-n",
        "6000",
        "--start-at",
        &at,
    ]);
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<std::path::PathBuf> = runs
        .iter()
        .enumerate()
        .map(|(i, (_, doc))| {
            let path = dir.path().join(format!("shard-{i}.json"));
            std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
            path
        })
        .collect();
    let stats = server.stop();
    let (out, merged) = merge(dir.path(), &files);
    assert!(out.status.success(), "{}", text(&out.stderr));
    support::assert_matches_schema(&merged, "bench.v1");
    let r = &merged["result"];
    // Every request the shards made (-n: none in flight at the end), and the server counted
    // them too (each shard's target check is a connection without a request).
    let ops: u64 = runs.iter().map(|(_, d)| n(&d["result"]["ops"])).sum();
    assert_eq!(ops, 6000);
    assert_eq!(n(&r["ops"]), ops);
    assert_eq!(n(&r["requests"]), n(&stats["requests"]), "{stats}");
    assert_eq!(n(&r["connections"]), 9);
    let shards = merged["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 3);
    for (i, row) in shards.iter().enumerate() {
        assert_eq!(row["status"], "merged");
        assert_eq!(n(&row["shard"]["index"]), i as u64);
        assert_eq!(n(&row["ops"]), n(&runs[i].1["result"]["ops"]));
    }
    // The percentiles of all shards' values together.
    let all: Vec<[u64; 2]> = runs
        .iter()
        .flat_map(|(_, d)| {
            d["result"]["latency"]["total"]["histogram"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| [n(&v[0]), n(&v[1])])
                .collect::<Vec<_>>()
        })
        .collect();
    let total = &r["latency"]["total"];
    assert_eq!(n(&total["count"]), ops);
    for (key, q) in [
        ("p50_us", 0.5),
        ("p90_us", 0.9),
        ("p99_us", 0.99),
        ("p999_us", 0.999),
    ] {
        assert_eq!(n(&total[key]), quantile_of(&all, q), "{key}");
    }
    // The merged rate is over the window all three ran in: close to the sum of their rates
    // (they started together and ran about as long).
    let sum_of_rates: f64 = runs.iter().map(|(_, d)| f(&d["result"]["ops_per_s"])).sum();
    let rate = f(&r["ops_per_s"]);
    assert!(
        (rate - sum_of_rates).abs() / sum_of_rates < 0.15,
        "{rate} against {sum_of_rates}"
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("3 of 3 shard documents added up"),
        "{stdout}"
    );
    let dom = support::chromium_dom(&dir.path().join("merged.html"));
    assert!(
        dom.contains("Shards") && dom.contains("shard-2.json"),
        "{dom}"
    );
}

/// A shard killed mid-run leaves no document: merge names it, adds up the others and exits
/// with status 3.
#[test]
fn a_killed_shard_is_named_and_the_others_are_merged() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = server.addr.to_string();
    let files: Vec<std::path::PathBuf> = (0..3)
        .map(|i| dir.path().join(format!("shard-{i}.json")))
        .collect();
    let children: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, json)| {
            let mut cmd = Command::new(support::bin());
            cmd.args([
                "bench",
                &target,
                "--mode",
                "keepalive",
                "-c",
                "3",
                "-d",
                "2s",
            ]);
            cmd.args(["--shard", &format!("{i}/3"), "--json"]).arg(json);
            cmd.stdout(std::process::Stdio::null());
            cmd.stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let mut children = children;
    // SAFETY: kill has no memory effects; the pid is our own child, not yet reaped.
    unsafe { libc::kill(children[2].id() as libc::pid_t, libc::SIGKILL) };
    for c in &mut children {
        let _ = c.wait();
    }
    server.stop();
    assert!(!files[2].exists(), "a killed shard writes nothing");
    let (out, merged) = merge(dir.path(), &files);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("shard-2.json: not merged: cannot read it"),
        "{stderr}"
    );
    let shards = merged["shards"].as_array().unwrap();
    let status: Vec<&str> = shards
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["merged", "merged", "failed"]);
    let ops: u64 = shards.iter().map(|s| n(&s["ops"])).sum();
    assert!(ops > 0);
    assert_eq!(n(&merged["result"]["ops"]), ops);
    let warnings = merged["result"]["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("shard 2/3 is missing")),
        "{warnings:?}"
    );
}
