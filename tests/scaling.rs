//! `compare --threads`: handshake scaling per library and thread count, in memory (the engine
//! experiment, one shared server and client SSL_CTX) and over sockets (the built-in server on
//! N CPUs), with the time lost to locks and where the profile puts it. OpenSSL 3.0.2 (Ubuntu
//! 22.04's) loses most of its second thread to lock contention; 1.1.1w and the system's 3.0.19
//! do not (OpenSSL's own perftools `handshake` here: 0.31 against 0.95 and 0.96).

use std::path::Path;

use serde_json::Value;

use crate::support;

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The scaling row of the variant whose label starts with `prefix`.
fn row<'a>(doc: &'a Value, prefix: &str) -> &'a Value {
    doc["scaling"]
        .as_array()
        .unwrap_or_else(|| panic!("no scaling in {doc:#}"))
        .iter()
        .find(|s| s["variant"].as_str().unwrap().starts_with(prefix))
        .unwrap_or_else(|| panic!("no scaling row for {prefix}: {:#}", doc["scaling"]))
}

/// `compare --matrix` of the engine alone over `libraries` (both sides) at `threads`.
fn engine_matrix(libraries: &str, threads: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "--openssl",
        libraries,
        "compare",
        "--matrix",
        "--side",
        "both",
        "--experiment",
        "engine",
        "--threads",
        threads,
    ];
    args.extend_from_slice(extra);
    support::tlsscope(&args)
}

/// The per-round values of a variant's metric.
fn rounds_of(doc: &Value, label: &str, metric: &str) -> Vec<f64> {
    let v = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == label)
        .unwrap_or_else(|| panic!("no variant {label}"));
    v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == metric)
        .unwrap_or_else(|| panic!("no {metric} in {label}"))["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect()
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Runs the engine at 1 and 2 threads over three libraries: every variant's handshakes are
/// checked and counted, the efficiency figures hold together, 3.0.2 collapses with its
/// threads blocked on locks, 1.1.1w and the system's 3.0.19 scale.
#[test]
fn three_0_2_loses_its_second_thread_to_locks_while_1_1_1w_and_3_0_19_scale() {
    support::openssl_111w();
    support::openssl_302();
    let _cpus = support::both_cpus();
    let dir = tempfile::tempdir().unwrap();
    let (json, html) = (dir.path().join("s.json"), dir.path().join("s.html"));
    let (n, repeat) = (40, 8);
    let out = engine_matrix(
        "system,1.1.1w,3.0.2",
        "2",
        &[
            "-n",
            &n.to_string(),
            "--repeat",
            &repeat.to_string(),
            "--json",
            json.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    );
    let stdout = support::text(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        support::text(&out.stderr)
    );
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    // --threads 2 brings 1 beside it: six variants, each with exactly the handshakes asked.
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 6, "{stdout}");
    for v in variants {
        assert!(v["error"].is_null(), "{v:#}");
        let threads: u64 = v["settings"]["threads"].as_str().unwrap().parse().unwrap();
        let obtained: u64 = v["negotiated"]
            .as_array()
            .unwrap()
            .iter()
            .inspect(|k| assert_eq!(k["handshake"], "full (engine)", "{k:#}"))
            .map(|k| k["count"].as_u64().unwrap())
            .sum();
        assert_eq!(obtained, threads * n * repeat, "{}", v["label"]);
    }
    let [system, old, collapsing] = ["openssl=system", "openssl=1.1.1w", "openssl=3.0.2"]
        .map(|p| row(&doc, &format!("{p} threads=2")));
    for r in [system, old, collapsing] {
        assert_eq!(r["threads"], 2);
        assert_eq!(r["rounds"], repeat);
        // The rates are the two variants' medians, and the efficiency lies among the rounds'
        // own rate at 2 / (2 x rate at 1), each round pairing the two.
        let one = rounds_of(&doc, r["baseline"].as_str().unwrap(), "engine_rate");
        let two = rounds_of(&doc, r["variant"].as_str().unwrap(), "engine_rate");
        assert_eq!((one.len(), two.len()), (repeat as usize, repeat as usize));
        assert!(
            (f(&r["rate_1"]) - median(&one)).abs() < 1e-6 * median(&one),
            "{r:#}"
        );
        assert!(
            (f(&r["rate_n"]) - median(&two)).abs() < 1e-6 * median(&two),
            "{r:#}"
        );
        let per_round: Vec<f64> = one.iter().zip(&two).map(|(a, b)| b / (2.0 * a)).collect();
        let (lo, hi) = per_round
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), e| (l.min(*e), h.max(*e)));
        let e = &r["efficiency"];
        assert!(
            lo <= f(&e["estimate"]) && f(&e["estimate"]) <= hi,
            "{e} outside the rounds' {per_round:?}"
        );
        assert!(f(&e["low"]) <= f(&e["estimate"]) && f(&e["estimate"]) <= f(&e["high"]));
    }
    let idle = |r: &Value| f(&r["efficiency_on_idle_cpus"]["estimate"]);
    let blocked_at_2 = |r: &Value| f(&r["per_handshake"]["blocked_us"][1]);
    assert!(idle(collapsing) < 0.5, "{collapsing:#}");
    assert!(
        f(&collapsing["efficiency"]["estimate"]) < f(&old["efficiency"]["estimate"]),
        "{:#}",
        doc["scaling"]
    );
    for scaling in [system, old] {
        assert!(idle(scaling) > 0.85, "{scaling:#}");
    }
    // The threads of 3.0.2 block on locks (the engine does no I/O): hundreds of microseconds
    // per handshake and several blocks each, where 1.1.1w's hardly ever block.
    assert!(
        blocked_at_2(collapsing) > 100.0
            && blocked_at_2(collapsing) > 10.0 * blocked_at_2(old).max(1.0),
        "{:#}",
        doc["scaling"]
    );
    assert!(f(&collapsing["per_handshake"]["blocks"][1]) > 1.0);
    assert!(f(&old["per_handshake"]["blocks"][1]) < 0.5);
    for needle in [
        "scaling: efficiency",
        "on idle CPUs",
        "openssl=3.0.2 threads=2",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
}

/// The profile of 3.0.2 at 1 and 2 threads: more of each handshake in locks and atomics at 2
/// (profile.txt's families), the futex and rwlock functions among what grew most, and a
/// differential flame graph of 2 threads against 1.
#[test]
fn the_profile_puts_3_0_2s_lost_time_in_locks_and_method_fetch() {
    support::openssl_302();
    let _cpus = support::both_cpus();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile");
    let out = engine_matrix(
        "3.0.2",
        "1,2",
        &[
            "-n",
            "60",
            "--repeat",
            "3",
            "--profile",
            profile.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        support::text(&out.stdout),
        support::text(&out.stderr)
    );
    let table = std::fs::read_to_string(profile.join("profile.txt")).unwrap();
    // "  threads=2: locks and atomics 357.9 (23.7%), method fetch ... 725.7 (48.1%)"
    let family = |label: &str, family: &str| -> f64 {
        let line = table
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{label}:")) && l.contains(family))
            .unwrap_or_else(|| panic!("no {family} line for {label}: {table}"));
        let after = &line[line.find(family).unwrap() + family.len()..];
        after.split_whitespace().next().unwrap().parse().unwrap()
    };
    let (one, two) = (
        family("threads=1", "locks and atomics"),
        family("threads=2", "locks and atomics"),
    );
    assert!(two > 1.5 * one, "locks and atomics {one} -> {two}: {table}");
    assert!(family("threads=2", "method fetch and library context") > 0.0);
    // The diff table lists functions by how much they grew: the lock paths are near the top.
    let top: Vec<&str> = table
        .lines()
        .filter(|l| l.contains(" | "))
        .take(60)
        .collect();
    for lock in ["futex", "pthread_rwlock"] {
        assert!(
            top.iter().any(|l| l.contains(lock)),
            "{lock} not among the 60 that changed most: {table}"
        );
    }
    assert!(profile.join("2-threads=2-vs-1.svg").exists());
}

/// More threads than the machine can place are said, per variant, not measured: the engine
/// needs a CPU per thread, the load experiment one per server worker and one per client
/// thread.
#[test]
fn threads_the_machine_cannot_place_are_not_run_and_say_why() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let too_many = (cpus + 1).to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let out = support::tlsscope(&[
        "compare",
        "--matrix",
        "--experiment",
        "engine,load",
        "--threads",
        &too_many,
        "-n",
        "4",
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let doc = read_json(&json);
    let stdout = support::text(&out.stdout);
    let label = format!("threads={too_many}");
    let v = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == label.as_str())
        .unwrap_or_else(|| panic!("no {label}: {doc:#}"));
    let why = v["not_run"].as_str().unwrap_or_else(|| panic!("{v:#}"));
    for needle in [
        format!("engine needs {too_many} CPUs"),
        format!("load experiment needs {} CPUs", 2 * (cpus + 1)),
        format!("this machine has {cpus}"),
    ] {
        assert!(why.contains(&needle), "{needle}: {why}");
    }
    assert!(v["metrics"].as_array().unwrap().is_empty());
    // The one-thread variant ran both experiments.
    let one = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == "threads=1")
        .unwrap();
    assert!(
        one["error"].is_null() && one["not_run"].is_null(),
        "{one:#}"
    );
    assert!(doc["scaling"].is_null(), "{stdout}");
    // --threads with pretransfer alone has nothing to set.
    let out = support::tlsscope(&[
        "compare",
        "--matrix",
        "--experiment",
        "pretransfer",
        "--threads",
        "2",
    ]);
    support::assert_one_line_error(&out, &["--threads", "pretransfer", "--experiment engine"]);
}
