//! `tlsscope compare`: saved runs (checked-in fixtures made by the tool, and bench runs made
//! here), the matrix over Debian's OpenSSL 3.0 and a built 1.1.1w with every report format
//! (the HTML opened in Debian's headless Chromium), and bad inputs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, Serve};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/compare")
        .join(name)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn comparison<'a>(doc: &'a Value, metric: &str, variant_contains: &str) -> &'a Value {
    doc["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["metric"] == metric && c["variant"].as_str().unwrap().contains(variant_contains)
        })
        .unwrap_or_else(|| panic!("no {metric} comparison for {variant_contains}: {doc:#}"))
}

/// Two saved matrix runs (engine only): one context shared, one per handshake, which loads the
/// system CA bundle each time and is many times slower.
#[test]
fn saved_runs_are_aligned_by_metric_with_ratio_interval_and_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let md = dir.path().join("out.md");
    let (a, b) = (
        fixture("engine-shared.json"),
        fixture("engine-per-connection.json"),
    );
    let out = support::tlsscope(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
    ]);
    let text = support::text(&out.stdout);
    assert!(out.status.success(), "{text}{}", support::text(&out.stderr));
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    assert_eq!(doc["experiment"]["source"], "compare");
    // Labels say which file each variant came from; the first file is the baseline.
    let c = comparison(&doc, "engine_handshake", "engine-per-connection");
    assert!(
        c["baseline"]
            .as_str()
            .unwrap()
            .starts_with("engine-shared:"),
        "{c:#}"
    );
    assert_eq!(c["comparison"]["verdict"], "worse", "{c:#}");
    let ratio = &c["comparison"]["ratio"];
    let (low, est, high) = (
        ratio["low"].as_f64().unwrap(),
        ratio["estimate"].as_f64().unwrap(),
        ratio["high"].as_f64().unwrap(),
    );
    assert!(1.0 < low && low <= est && est <= high, "{ratio:#}");
    // The ratio is the ratio of the medians the two files hold.
    let median = |path: &Path| {
        let d = read_json(path);
        let m = d["variants"][0]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "engine_handshake")
            .unwrap()
            .clone();
        let mut s: Vec<f64> = m["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        }
    };
    let expected = median(&b) / median(&a);
    assert!(
        (est - expected).abs() < 1e-9 * expected,
        "{est} vs {expected}"
    );
    // The terminal and Markdown tables carry the same rows.
    assert!(
        text.contains("engine_handshake") && text.contains("slower"),
        "{text}"
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("## engine_handshake") && md.contains("| slower |"),
        "{md}"
    );
}

/// Two bench runs of one mode compare by their latency histograms: one connection at a time
/// against sixteen concurrent ones on a one-thread server.
#[test]
fn saved_bench_runs_compare_by_their_latency_histograms() {
    let serve = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let target = serve.addr.to_string();
    let mut files = Vec::new();
    for (name, conns) in [("one", "1"), ("sixteen", "16")] {
        let path = dir.path().join(format!("{name}.json"));
        let out = support::tlsscope(&[
            "bench",
            &target,
            "--mode",
            "full",
            "-c",
            conns,
            "-d",
            "1s",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", support::text(&out.stderr));
        files.push(path);
    }
    let json = dir.path().join("out.json");
    let out = support::tlsscope(&[
        "compare",
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    // Issue 17: each run is named by the client that made it (bench's default engine).
    for v in doc["variants"].as_array().unwrap() {
        let library = v["library"].as_str().unwrap_or_default();
        assert!(library.starts_with("rustls 0.23."), "{v:#}");
    }
    let c = comparison(&doc, "total", "sixteen");
    assert_eq!(c["comparison"]["verdict"], "worse", "{c:#}");
    let metric = doc["variants"][1]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "total")
        .unwrap();
    assert_eq!(metric["from_histogram"], true);
    assert!(metric["summary"]["n"].as_u64().unwrap() > 100, "{metric:#}");
    // A rate is one value per run: shown, never called significant.
    let rate = comparison(&doc, "ops_per_s", "sixteen");
    assert_eq!(rate["comparison"]["verdict"], "untestable");
    assert_eq!(rate["comparison"]["n"], serde_json::json!([1, 1]));
    assert!(
        support::text(&out.stdout).contains("too few samples (n=1 vs 1)"),
        "{}",
        support::text(&out.stdout)
    );

    // One file twice: two rows of distinct names, and only the second compared.
    let twice = dir.path().join("twice.json");
    let out = support::tlsscope(&[
        "compare",
        files[0].to_str().unwrap(),
        files[0].to_str().unwrap(),
        "--json",
        twice.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let doc = read_json(&twice);
    let labels: Vec<&str> = doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["one", "one #2"]);
    assert!(doc["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["variant"] == "one #2" && c["baseline"] == "one"));
    let text = support::text(&out.stdout);
    let baseline_rows: Vec<&str> = text.lines().filter(|l| l.starts_with("one  ")).collect();
    assert!(!baseline_rows.is_empty(), "{text}");
    assert!(
        baseline_rows
            .iter()
            .all(|l| !l.contains("significant") && !l.contains("too few")),
        "{text}"
    );
}

/// Issue 30, item 2: a saved keep-alive run of many requests compared as 20,000 values
/// resampled from its histogram, one at least of every bucket, so its tail was the rare buckets'
/// (p99 1.31 ms against bench's 403 us). Every recorded value counts now: the summary compare
/// shows is the one bench wrote, from the same histogram.
#[test]
fn saved_runs_are_summarized_from_every_recorded_value() {
    let serve = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("keepalive.json");
    let out = support::tlsscope(&[
        "bench",
        &serve.addr.to_string(),
        "--mode",
        "keepalive",
        "-c",
        "2",
        "-d",
        "3s",
        "--json",
        run.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let bench = read_json(&run);
    let json = dir.path().join("out.json");
    let out = support::tlsscope(&[
        "compare",
        run.to_str().unwrap(),
        run.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    for phase in ["request", "total"] {
        let recorded = &bench["result"]["latency"][phase];
        let count = recorded["count"].as_u64().unwrap();
        assert!(
            count > 20_000,
            "{phase}: a run longer than the old cap ({count})"
        );
        let metric = doc["variants"][0]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == phase)
            .unwrap();
        let s = &metric["summary"];
        assert_eq!(s["n"].as_u64(), Some(count), "{phase}");
        for (ours, theirs) in [("p90", "p90_us"), ("p99", "p99_us"), ("median", "p50_us")] {
            assert_eq!(
                s[ours].as_f64().unwrap(),
                recorded[theirs].as_f64().unwrap(),
                "{phase} {ours}"
            );
        }
        assert_eq!(s["max"].as_f64(), recorded["max_us"].as_f64(), "{phase}");
        // bench's mean and deviation take each cell at its middle value, compare at its
        // highest (what the saved cells carry): 3 significant digits apart at most.
        for (ours, theirs) in [("mean", "mean_us"), ("stdev", "stdev_us")] {
            let (a, b) = (
                s[ours].as_f64().unwrap(),
                recorded[theirs].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() <= 0.01 * b + 1.0,
                "{phase} {ours}: {a} vs {b}"
            );
        }
        // The same run twice: no verdict, whatever its size.
        let c = comparison(&doc, phase, "#2");
        assert_eq!(
            c["comparison"]["verdict"], "no_significant_difference",
            "{c:#}"
        );
        assert_eq!(c["comparison"]["method"], "histograms", "{c:#}");
    }
}

/// Issue 30, item 1: the matrix took every operation as a sample and ran the variants in one
/// order every round, so the same library twice was called slower (p to 9e-8) for ~1%. The
/// order now rotates every round, the rounds are the replicates (paired), and a calibrated
/// difference is still found.
#[test]
fn matrix_rounds_rotate_and_are_the_replicates_of_the_verdict() {
    let _cpus = support::both_cpus();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("aa.json");
    let out = support::tlsscope(&[
        "--openssl",
        "system,system",
        "compare",
        "--matrix",
        "--experiment",
        "engine",
        "-n",
        "5",
        "--repeat",
        "8",
        "--warmup",
        "1",
        "--calibrate-slower",
        "40",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stderr = support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Round by round on stderr: the first variant first in odd rounds, second in even ones.
    let order: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("tlsscope compare: round "))
        .filter_map(|l| l.split(": ").nth(2)?.split(" ...").next())
        .collect();
    let (a, b) = ("openssl=system", "openssl=system #2");
    assert_eq!(order, [[a, b], [b, a]].concat().repeat(4), "{stderr}");
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    assert_eq!(doc["noise_threshold"], 0.01);
    // The second variant's client burned 40% more CPU per handshake on purpose: called slower,
    // from the 8 paired rounds.
    let c = comparison(&doc, "engine_client", "#2");
    let cmp = &c["comparison"];
    assert_eq!(cmp["method"], "paired_rounds", "{c:#}");
    assert_eq!(cmp["n"], serde_json::json!([8, 8]), "{c:#}");
    assert_eq!(cmp["verdict"], "worse", "{c:#}");
    assert!(cmp["noise_floor"].as_f64().unwrap() > 0.0, "{c:#}");
    // Its estimate is the Hodges-Lehmann centre of the rounds' own log ratios: the median of
    // their pairwise means.
    let rounds = |v: usize| -> Vec<f64> {
        doc["variants"][v]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "engine_client")
            .unwrap()["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let (base, slow) = (rounds(0), rounds(1));
    let logs: Vec<f64> = base.iter().zip(&slow).map(|(x, y)| (y / x).ln()).collect();
    let mut walsh: Vec<f64> = (0..8)
        .flat_map(|i| (i..8).map(move |j| (i, j)))
        .map(|(i, j)| (logs[i] + logs[j]) / 2.0)
        .collect();
    walsh.sort_by(f64::total_cmp);
    // 36 averages: the median is the mean of the 18th and 19th.
    let estimate = ((walsh[17] + walsh[18]) / 2.0).exp();
    assert!(
        (cmp["ratio"]["estimate"].as_f64().unwrap() - estimate).abs() < 1e-9,
        "{c:#}"
    );
    assert!(estimate > 1.2, "40% more client work: {estimate}");
    let text = support::text(&out.stdout);
    assert!(text.contains("rounds as replicates, paired"), "{text}");
    assert!(text.contains("noise floor"), "{text}");
}

#[test]
fn bad_inputs_get_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = fixture("engine-shared.json");
    let good = good.to_str().unwrap();
    let missing = dir.path().join("missing.json");
    let out = support::tlsscope(&["compare", good, missing.to_str().unwrap()]);
    support::assert_one_line_error(&out, &["missing.json", "cannot read"]);

    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "not json").unwrap();
    let out = support::tlsscope(&["compare", good, garbage.to_str().unwrap()]);
    support::assert_one_line_error(&out, &["garbage.json", "not JSON"]);

    let mut newer = read_json(&fixture("engine-shared.json"));
    newer["schema_version"] = Value::from(2);
    let newer_path = dir.path().join("newer.json");
    std::fs::write(&newer_path, newer.to_string()).unwrap();
    let out = support::tlsscope(&["compare", good, newer_path.to_str().unwrap()]);
    support::assert_one_line_error(&out, &["newer.json", "schema version 2", "newer tlsscope"]);

    let mut bench = read_json(&fixture("engine-shared.json"));
    bench["kind"] = Value::from("bench");
    bench["result"] = serde_json::json!({"mode": "full"});
    let bench_path = dir.path().join("bench.json");
    std::fs::write(&bench_path, bench.to_string()).unwrap();
    let out = support::tlsscope(&["compare", good, bench_path.to_str().unwrap()]);
    support::assert_one_line_error(&out, &["bench run", "one experiment"]);

    let out = support::tlsscope(&["compare", good]);
    support::assert_one_line_error(&out, &["two or more"]);
    let out = support::tlsscope(&["compare", "--matrix", good]);
    support::assert_one_line_error(&out, &["--matrix", "drop the files"]);
    let out = support::tlsscope(&["compare", "--matrix", "--level", "2"]);
    support::assert_one_line_error(&out, &["--level 2"]);
    let out = support::tlsscope(&["compare", "--matrix", "--ctx", "sometimes"]);
    support::assert_one_line_error(&out, &["--ctx sometimes"]);
}

// Issue 12.
/// The matrix reads a worker's JSON result line, never its stderr: a worker that cannot start
/// says why in that line too.
#[test]
fn a_matrix_worker_that_cannot_start_says_why_in_its_result_line() {
    for (args, why) in [
        (
            vec!["compare-worker", "not a spec"],
            "reading the worker spec",
        ),
        (
            vec!["--openssl", "/nonexistent/openssl", "compare-worker", "{}"],
            "/nonexistent/openssl",
        ),
    ] {
        let out = support::tlsscope(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let line = support::text(&out.stdout);
        let result: Value = serde_json::from_str(line.trim()).expect("one JSON result line");
        let error = result["error"].as_str().unwrap_or_default();
        assert!(error.contains(why), "{args:?}: {result:#}");
        assert!(result["samples"].as_object().is_some_and(|s| s.is_empty()));
    }
}

/// The worker processes of `parent` whose command line holds `needle`.
fn workers_of(parent: u32, needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if ppid == Some(parent) && cmdline.contains("compare-worker") && cmdline.contains(needle) {
            found.push(pid);
        }
    }
    found
}

/// A variant's worker that dies while the matrix runs (killed here, as a crash would end it):
/// that variant stops, says which round failed and how its worker ended, and keeps the rounds
/// it finished; the others are reported, the JSON is written, and the exit says a variant
/// failed. (Each worker is set up once for the whole run, so a library directory removed
/// mid-run no longer stops it: its library is loaded.)
#[test]
fn a_worker_that_dies_mid_compare_keeps_its_finished_rounds() {
    let lib = support::openssl_111w().to_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let mut watched = support::start_until(
        Command::new(support::bin())
            .args(["compare", "--matrix", "--openssl"])
            .arg(format!("system,{lib}"))
            .args([
                "--experiment",
                "engine",
                "--repeat",
                "200",
                "-n",
                "20",
                "--json",
            ])
            .arg(&json)
            .stdout(std::process::Stdio::null()),
        &format!("round 3/200: openssl={lib} ... "),
        Duration::from_secs(300),
    );
    let worker = workers_of(watched.child.id(), &lib);
    assert_eq!(worker.len(), 1, "one worker for the variant: {worker:?}");
    // SAFETY: kill(2) on a process this test's child started.
    assert_eq!(unsafe { libc::kill(worker[0] as i32, libc::SIGKILL) }, 0);
    let status = watched.child.wait().unwrap();
    let stderr: Vec<String> = watched.lines.try_iter().collect();
    assert_eq!(status.code(), Some(1), "{stderr:?}");
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    let killed = variants
        .iter()
        .find(|v| v["label"].as_str().unwrap().contains(&lib))
        .unwrap();
    let error = killed["error"].as_str().unwrap();
    assert!(
        error.contains("a compare worker ended (signal: 9"),
        "{error}"
    );
    let done = killed["metrics"][0]["rounds"].as_array().unwrap().len();
    assert!(
        (2..200).contains(&done)
            && error.contains(&format!("round {}/200 failed", done + 1))
            && error.contains(&format!("the {done} rounds before it are reported")),
        "{done}: {error}"
    );
    let system = variants
        .iter()
        .find(|v| v["label"] == "openssl=system")
        .unwrap();
    assert!(system["error"].is_null(), "{system:#}");
    let rounds = system["metrics"][0]["rounds"].as_array().unwrap().len();
    assert_eq!(rounds, 200, "the other variant ran every round");
}

/// The matrix the issue names: Debian's 3.0 and a built 1.1.1w, client side, on the built-in
/// server, shared and per-connection contexts, plus a variant whose library does not exist:
/// it fails with its reason and the others are still reported in every format.
#[test]
fn matrix_over_3_0_and_1_1_1w_writes_every_format_and_the_html_renders() {
    support::openssl_111w();
    let dir = tempfile::tempdir().unwrap();
    let (json, md, html) = (
        dir.path().join("m.json"),
        dir.path().join("m.md"),
        dir.path().join("m.html"),
    );
    let out = support::tlsscope(&[
        "--openssl",
        "system,1.1.1w,/nonexistent/openssl",
        "compare",
        "--matrix",
        "--ctx",
        "shared,per-connection",
        "-n",
        "5",
        "--repeat",
        "8",
        "--warmup",
        "1",
        "--json",
        json.to_str().unwrap(),
        "--markdown",
        md.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let stdout = support::text(&out.stdout);
    let stderr = support::text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "one variant fails: {stdout}{stderr}"
    );
    assert!(stderr.contains("2 of 6 variants failed"), "{stderr}");
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 6);
    for v in variants {
        let label = v["label"].as_str().unwrap();
        if label.contains("/nonexistent") {
            assert!(
                v["error"].as_str().unwrap().contains("/nonexistent"),
                "{v:#}"
            );
            continue;
        }
        assert!(v["error"].is_null(), "{v:#}");
        let library = v["library"].as_str().unwrap();
        assert!(
            library.contains(if label.contains("1.1.1w") {
                "1.1.1w"
            } else {
                "OpenSSL 3."
            }),
            "{label}: {library}"
        );
        // 8 rounds x 5, per experiment, and one value per round; every handshake full TLS
        // 1.3, as asked.
        for name in ["pretransfer", "request_total", "engine_handshake"] {
            let m = v["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == name)
                .unwrap();
            assert_eq!(m["samples"].as_array().unwrap().len(), 40, "{label} {name}");
            assert_eq!(m["rounds"].as_array().unwrap().len(), 8, "{label} {name}");
        }
        let mix = v["negotiated"].as_array().unwrap();
        let total: u64 = mix.iter().map(|n| n["count"].as_u64().unwrap()).sum();
        assert_eq!(total, 80, "{label}: {mix:#?}");
        assert!(mix
            .iter()
            .all(|n| n["version"] == "TLSv1.3"
                && n["handshake"].as_str().unwrap().starts_with("full")));
    }
    // A context per connection loads the CA bundle each time: slower than one shared.
    let c = doc["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| {
            c["metric"] == "pretransfer" && c["variant"] == "openssl=system ctx=per-connection"
        })
        .unwrap();
    assert_eq!(c["comparison"]["verdict"], "worse", "{c:#}");
    assert!(
        stdout.contains("pretransfer") && stdout.contains("handshakes obtained"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(
        md.contains("## pretransfer") && md.contains("| openssl=1.1.1w ctx=shared |"),
        "{md}"
    );
    // The page is self-contained, and every plot renders in a browser.
    let page = std::fs::read_to_string(&html).unwrap();
    for outside in ["src=\"http", "href=\"http", "<link", "@import"] {
        assert!(
            !page.contains(outside),
            "the page loads something: {outside}"
        );
    }
    let (dom, console) = support::chromium_page(&html);
    assert!(console.is_empty(), "the page logged: {console:?}");
    let plots = support::body_attribute(&dom, "data-plots");
    let rendered = support::body_attribute(&dom, "data-plots-rendered");
    // Per metric a CDF and a bar chart (7 metrics, and the engine's rate, CPU, blocked time,
    // blocks and CPU wait per handshake), and the handshake mix.
    assert_eq!(plots, 2 * 12 + 1, "{plots} plots");
    // 3.0.2 with a context per connection takes over ten times 1.1.1w's shared one: its CDFs
    // are on a log axis, with the legend below the plot.
    assert!(page.contains("(log scale)"), "no log axis");
    assert_eq!(rendered, plots, "{rendered} of {plots} plots rendered");
}

/// The server's library varies (a built 1.1.1w against the system's), with resumed TLS 1.2 and
/// 1.3 handshakes: every measured handshake must be the resumption asked for.
#[test]
fn matrix_varies_the_server_side_and_checks_resumption() {
    support::openssl_111w();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("s.json");
    let out = support::tlsscope(&[
        "--openssl",
        "system,1.1.1w",
        "compare",
        "--matrix",
        "--side",
        "server",
        "--resume",
        "resumed",
        "--tls",
        "1.2,1.3",
        "--experiment",
        "pretransfer",
        "-n",
        "10",
        "--repeat",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let doc = read_json(&json);
    assert_eq!(doc["experiment"]["side"], "server");
    let variants = doc["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 4);
    for v in variants {
        let settings = &v["settings"];
        assert_eq!(settings["client library"], "system", "{v:#}");
        assert_eq!(settings["server library"], settings["openssl"], "{v:#}");
        let tls = format!("TLSv{}", settings["tls"].as_str().unwrap());
        let mix = v["negotiated"].as_array().unwrap();
        assert_eq!(
            mix.iter()
                .map(|n| n["count"].as_u64().unwrap())
                .sum::<u64>(),
            10
        );
        for n in mix {
            assert_eq!(n["version"], tls.as_str(), "{v:#}");
            assert!(
                n["handshake"].as_str().unwrap().starts_with("resumed"),
                "{v:#}"
            );
        }
    }
}

/// The processes `parent` started whose name (`comm`) is `name`.
fn children_named(parent: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let comm = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')'));
        let Some((comm, rest)) = comm else { continue };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) && comm == name {
            found.push(pid);
        }
    }
    found
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn variant<'a>(doc: &'a Value, label: &str) -> &'a Value {
    doc["variants"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == label)
        .unwrap_or_else(|| panic!("no variant {label}: {doc:#}"))
}

fn rounds(v: &Value, metric: &str) -> Vec<f64> {
    v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == metric)
        .unwrap_or_else(|| panic!("no {metric} in {v:#}"))["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// The load experiment over the system's OpenSSL and a built 3.5.5 (and 1.1.1w, which nginx
/// cannot load), on the built-in server and nginx, with the rustls and OpenSSL clients: each
/// server's own count equals the handshakes its clients made, the busy share is the rate
/// times the server's CPU per handshake in every round, nginx maps the library it was given,
/// the 1.1.1w nginx rows are "not run" with the reason, and no nginx outlives the run.
#[test]
fn load_experiment_handshakes_are_counted_by_builtin_and_nginx_servers() {
    let built = support::openssl_355();
    support::openssl_111w();
    let dir = tempfile::tempdir().unwrap();
    let (json, html) = (dir.path().join("l.json"), dir.path().join("l.html"));
    let (count, rounds_n, warmup, connections) = (40u64, 6u64, 1u64, 4u64);
    let out = support::tlsscope(&[
        "--openssl",
        "system,3.5.5,1.1.1w",
        "compare",
        "--matrix",
        "--side",
        "server",
        "--server",
        "builtin,nginx",
        "--client-engine",
        "rustls,openssl",
        "--experiment",
        "load",
        "--groups",
        "X25519",
        "--cert-type",
        "ecdsa-p256",
        "--baseline",
        "same-settings",
        "-n",
        &count.to_string(),
        "--repeat",
        &rounds_n.to_string(),
        "--warmup",
        &warmup.to_string(),
        "-c",
        &connections.to_string(),
        "--json",
        json.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ]);
    let text = support::text(&out.stdout);
    assert!(out.status.success(), "{text}{}", support::text(&out.stderr));
    let doc = read_json(&json);
    support::assert_matches_schema(&doc, "compare.v1");
    assert_eq!(doc["variants"].as_array().unwrap().len(), 12);
    // Two clients share each server; each made (count + warm-up) per round.
    let per_server = 2 * rounds_n * (count + warmup * connections);
    let mut nginx_pids = Vec::new();
    for lib in ["system", "3.5.5", "1.1.1w"] {
        for server in ["builtin", "nginx"] {
            for client in ["rustls", "openssl"] {
                let label = format!("openssl={lib} server={server} client={client}");
                let v = variant(&doc, &label);
                assert!(v["error"].is_null(), "{label}: {v:#}");
                if lib == "1.1.1w" && server == "nginx" {
                    let why = v["not_run"].as_str().unwrap_or_default();
                    assert!(
                        why.contains("libssl.so.1.1") && why.contains("another soname"),
                        "{label}: {v:#}"
                    );
                    assert!(v["metrics"].as_array().unwrap().is_empty());
                    continue;
                }
                let check = &v["server_check"];
                assert_eq!(check["server"], server, "{label}: {check:#}");
                assert_eq!(check["server_count"], per_server, "{label}: {check:#}");
                assert_eq!(check["client_count"], per_server, "{label}: {check:#}");
                let libssl = check["libssl"].as_str().unwrap();
                match lib {
                    "3.5.5" => assert!(libssl.starts_with(built.to_str().unwrap()), "{libssl}"),
                    "1.1.1w" => assert!(libssl.ends_with("libssl.so.1.1"), "{libssl}"),
                    _ => assert!(
                        !libssl.contains("/.cache/") && libssl.ends_with("libssl.so.3"),
                        "{libssl}"
                    ),
                }
                if server == "nginx" {
                    nginx_pids.push(check["pid"].as_u64().unwrap() as u32);
                }
                // Busy share = rate x server CPU per handshake, round by round.
                let (rate, cpu, busy) = (
                    rounds(v, "load_handshake_rate"),
                    rounds(v, "load_server_cpu_per_handshake"),
                    rounds(v, "load_server_busy"),
                );
                assert_eq!(busy.len() as u64, rounds_n);
                for i in 0..busy.len() {
                    let product = rate[i] * cpu[i] / 1e4;
                    assert!(
                        (product - busy[i]).abs() <= 1e-9 * busy[i].max(1.0) && busy[i] > 0.0,
                        "{label} round {i}: {} x {} != {}",
                        rate[i],
                        cpu[i],
                        busy[i]
                    );
                }
                assert!(rounds(v, "load_client_cpu_per_handshake")[0] > 0.0);
                let mix = v["negotiated"].as_array().unwrap();
                assert_eq!(mix.len(), 1, "{label}: {mix:?}");
                assert_eq!(mix[0]["group"], "x25519");
                assert_eq!(mix[0]["handshake"], "full (load)");
                assert_eq!(mix[0]["count"], rounds_n * count);
            }
        }
    }
    // Same settings: each library against the system's, within its server and client.
    let c = comparison(
        &doc,
        "load_server_cpu_per_handshake",
        "openssl=3.5.5 server=nginx client=rustls",
    );
    assert_eq!(c["baseline"], "openssl=system server=nginx client=rustls");
    assert_eq!(doc["experiment"]["baseline"], "same-settings");
    for pid in nginx_pids {
        assert!(gone(pid), "nginx {pid} outlived the matrix");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("The servers&#39; own counts") || page.contains("The servers' own counts")
    );
    assert!(page.contains("not run: nginx is linked to libssl.so.3"));
    assert!(text.contains("load_server_busy") && text.contains("not run"));
}

/// SIGTERM in the middle of a matrix: the round in progress ends, nginx is stopped by its
/// PID, the rounds before are written, and the exit says it did not finish.
#[test]
fn nginx_is_stopped_when_the_matrix_is_terminated_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    let mut watched = support::start_until(
        Command::new(support::bin())
            .args([
                "compare",
                "--matrix",
                "--server",
                "nginx",
                "--experiment",
                "load",
                "-n",
                "20",
                "--repeat",
                "10000",
                "--json",
            ])
            .arg(&json)
            .stdout(std::process::Stdio::null()),
        "round 3/10000",
        Duration::from_secs(120),
    );
    let parent = watched.child.id();
    let nginx = children_named(parent, "nginx");
    assert_eq!(nginx.len(), 1, "one nginx: {nginx:?}");
    // SAFETY: kill(2) on the process this test started.
    assert_eq!(unsafe { libc::kill(parent as i32, libc::SIGTERM) }, 0);
    let status = watched.child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    assert!(gone(nginx[0]), "nginx {} outlived SIGTERM", nginx[0]);
    let doc = read_json(&json);
    let warnings = doc["warnings"].to_string();
    assert!(warnings.contains("stopped by a signal"), "{warnings}");
    let v = &doc["variants"][0];
    assert!(rounds(v, "load_handshake_rate").len() >= 2, "{v:#}");
}

#[test]
fn clients_and_servers_the_experiments_cannot_use_are_refused() {
    let out = support::tlsscope(&[
        "compare",
        "--matrix",
        "--client-engine",
        "rustls",
        "--experiment",
        "engine",
    ]);
    support::assert_one_line_error(&out, &["--client-engine rustls", "--experiment load"]);
    let out = support::tlsscope(&[
        "compare",
        "--matrix",
        "--server",
        "nginx",
        "--experiment",
        "engine",
    ]);
    support::assert_one_line_error(&out, &["--server nginx", "--experiment load"]);
}

/// Issue 31: `compare --matrix` runs OpenSSL 4.0.3, AWS-LC and BoringSSL on the server side and
/// on the client side; every variant resumes as asked, and each names the library and version
/// that ran on each side.
#[test]
fn matrix_runs_4_0_3_aws_lc_and_boringssl_on_each_side_and_names_them() {
    let libraries = [
        (support::openssl_403(), "OpenSSL 4.0.3"),
        (support::openssl_aws_lc(), "AWS-LC 5."),
        (support::openssl_boringssl(), "BoringSSL API "),
    ];
    let list: Vec<&str> = libraries.iter().map(|(p, _)| p.to_str().unwrap()).collect();
    let list = list.join(",");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("m.json");
    // The in-process engine runs both ends in one process, of the variant's library.
    for (side, experiment) in [
        ("server", "pretransfer"),
        ("client", "pretransfer"),
        ("both", "engine"),
    ] {
        let out = support::tlsscope(&[
            "--openssl",
            &list,
            "compare",
            "--matrix",
            "--side",
            side,
            "--resume",
            "resumed",
            "--experiment",
            experiment,
            "-n",
            "10",
            "--repeat",
            "1",
            "--json",
            json.to_str().unwrap(),
        ]);
        let stdout = support::text(&out.stdout);
        assert!(
            out.status.success(),
            "{side}: {}",
            support::text(&out.stderr)
        );
        let doc = read_json(&json);
        support::assert_matches_schema(&doc, "compare.v1");
        let variants = doc["variants"].as_array().unwrap();
        assert_eq!(variants.len(), 3, "{side}");
        for (v, (_, name)) in variants.iter().zip(libraries) {
            assert!(v["error"].is_null(), "{side}: {v:#}");
            let (client, server) = (v["library"].as_str(), v["server_library"].as_str());
            let (varied, fixed) = match side {
                "server" => (server, client),
                "client" => (client, server),
                _ => (client, None),
            };
            assert!(varied.unwrap().starts_with(name), "{side}: {v:#}");
            if side != "both" {
                assert!(fixed.unwrap().starts_with("OpenSSL 3."), "{side}: {v:#}");
            }
            assert!(stdout.contains(varied.unwrap()), "{side}: {stdout}");
            let mix = v["negotiated"].as_array().unwrap();
            assert!(
                mix.iter().all(|n| n["handshake"]
                    .as_str()
                    .unwrap()
                    .starts_with("resumed_ticket")),
                "{side}: {v:#}"
            );
            let total: u64 = mix.iter().map(|n| n["count"].as_u64().unwrap()).sum();
            assert_eq!(total, 10, "{side}: {v:#}");
        }
    }
}
