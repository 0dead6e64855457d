//! The documentation's examples, run, so the docs cannot rot: every fenced block of README.md
//! and docs/*.md whose info string is `sh` is a list of tlsscope commands, each run against a
//! real `tlsscope serve` this test starts, and each must exit 0 and print what its command
//! always prints. A renamed or removed flag fails here.
//!
//! The convention (also in docs/testing.md):
//! - ```` ```sh ````: run. One command per line (a trailing `\` continues it, `#` comments);
//!   every command starts with `tlsscope`.
//! - ```` ```sh not-run: REASON ````: shown, not run. Listed with the reason; their number is
//!   recorded in [`NOT_RUN`], so none is added silently.
//! - any other block (`text`, `console`, none): output or a recipe, not run.
//!
//! The examples are written against the built-in server as `tlsscope serve --cert-out
//! /tmp/cert.pem` starts it (`127.0.0.1:4433`, `localhost:4433`, `[::1]:4433`, `/tmp/cert.pem`)
//! and name the traced process `$(pgrep -n nginx)`, `1234` and the like; the test substitutes
//! its own server's address, certificate and PID, bounds durations and matrix rounds, and
//! keeps the server loaded while trace, sniff and profile run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{self, text, Serve};

/// How many commands the docs show without running, each in a `sh not-run: REASON` block.
/// Change it only with a reason in the block.
const NOT_RUN: usize = 9;

/// The longest any one example may take.
const EXAMPLE_LIMIT: Duration = Duration::from_secs(150);

const COMMANDS: &[&str] = &[
    "serve",
    "bench",
    "merge",
    "handshake",
    "trace",
    "sniff",
    "profile",
    "compare",
    "lab",
    "openssl",
];

/// One command from an `sh` block, with where it is.
#[derive(Debug, Clone)]
struct Example {
    file: String,
    line: usize,
    command: String,
}

/// The examples of one file: those to run and those shown only (with their reason).
#[derive(Default)]
struct Examples {
    run: Vec<Example>,
    not_run: Vec<(Example, String)>,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every Markdown file whose examples are run: README.md and docs/*.md.
fn documents() -> Vec<String> {
    let mut files = vec!["README.md".to_string()];
    let mut guides: Vec<String> = std::fs::read_dir(workspace().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    guides.sort();
    files.extend(guides);
    files
}

/// The `sh` examples of `file` (relative to the workspace).
fn examples(file: &str) -> Examples {
    let source =
        std::fs::read_to_string(workspace().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut found = Examples::default();
    let mut block: Option<(Option<String>, bool)> = None; // (not-run reason, is sh)
    let mut pending: Option<(usize, String)> = None;
    for (index, line) in source.lines().enumerate() {
        let number = index + 1;
        if let Some(info) = line.strip_prefix("```") {
            if block.is_some() {
                assert!(
                    pending.is_none(),
                    "{file}:{number}: a `\\` continuation runs into the end of its block"
                );
                block = None;
                continue;
            }
            let info = info.trim();
            let (is_sh, reason) = match info.split_once(' ') {
                Some(("sh", rest)) => {
                    let reason = rest.trim().strip_prefix("not-run:").unwrap_or_else(|| {
                        panic!("{file}:{number}: an sh block's info string is `sh` or `sh not-run: REASON`, not {info:?}")
                    });
                    assert!(
                        !reason.trim().is_empty(),
                        "{file}:{number}: `not-run:` needs a reason"
                    );
                    (true, Some(reason.trim().to_string()))
                }
                _ => (info == "sh", None),
            };
            block = Some((reason, is_sh));
            continue;
        }
        let Some((reason, true)) = &block else {
            continue;
        };
        let trimmed = line.trim();
        if pending.is_none() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        let (start, mut command) = pending.take().unwrap_or((number, String::new()));
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                command.push_str(head);
                command.push(' ');
                pending = Some((start, command));
                continue;
            }
            None => command.push_str(trimmed),
        }
        let command = without_comment(command.strip_prefix("$ ").unwrap_or(&command));
        assert!(
            reason.is_some() || command.starts_with("tlsscope "),
            "{file}:{start}: every command of an `sh` example starts with `tlsscope` \
             (mark others `sh not-run: REASON` or `text`): {command}"
        );
        let example = Example {
            file: file.to_string(),
            line: start,
            command,
        };
        match reason {
            Some(reason) => found.not_run.push((example, reason.clone())),
            None => found.run.push(example),
        }
    }
    assert!(block.is_none(), "{file}: a code block is not closed");
    found
}

/// `line` without its trailing shell comment (a `#` after a blank, outside quotes).
fn without_comment(line: &str) -> String {
    let mut quote = None;
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if previous.is_whitespace() => return line[..at].trim_end().to_string(),
            _ => {}
        }
        previous = c;
    }
    line.trim_end().to_string()
}

/// The subcommand of a tlsscope command line and the index of its word.
fn subcommand(words: &[String]) -> (usize, &str) {
    words
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, w)| COMMANDS.contains(&w.as_str()))
        .map(|(i, w)| (i, w.as_str()))
        .unwrap_or_else(|| panic!("no tlsscope command in {words:?}"))
}

/// The library builds an example names with `--openssl A,B` (not `system` or a path).
fn builds_named(command: &str) -> Vec<String> {
    let words: Vec<&str> = command.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[0] == "--openssl")
        .flat_map(|w| w[1].split(','))
        .filter(|v| *v != "system" && !v.starts_with('/'))
        .map(String::from)
        .collect()
}

/// What the test runs against: its servers, files and a load to keep the server busy.
struct Bench {
    dir: tempfile::TempDir,
    bin_dir: tempfile::TempDir,
    v4: Serve,
    v6: Option<Serve>,
    load: Option<Child>,
}

impl Bench {
    fn new(examples: &[Example]) -> Bench {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin_dir = tempfile::tempdir().expect("temp dir");
        std::os::unix::fs::symlink(support::bin(), bin_dir.path().join("tlsscope"))
            .expect("tlsscope on PATH");
        let v4 = Serve::start(&[]);
        let v6 = examples
            .iter()
            .any(|e| e.command.contains("[::1]:4433") && !e.command.contains(" serve "))
            .then(|| Serve::start(&["--listen", "[::1]:0"]));
        if examples.iter().any(|e| e.command.contains("server.pem")) {
            let out = support::run_with_timeout(
                Command::new("openssl")
                    .args([
                        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    ])
                    .args(["-subj", "/CN=localhost", "-keyout", "server.key"])
                    .args(["-out", "server.pem"])
                    .current_dir(dir.path()),
                Duration::from_secs(60),
            );
            assert!(out.status.success(), "openssl req: {}", text(&out.stderr));
        }
        let mut built: Vec<String> = examples
            .iter()
            .flat_map(|e| builds_named(&e.command))
            .collect();
        built.sort();
        built.dedup();
        for name in built {
            let out = support::run_with_timeout(
                Command::new(support::bin()).args(["openssl", "build", &name]),
                Duration::from_secs(2400),
            );
            assert!(
                out.status.success(),
                "tlsscope openssl build {name}: {}",
                text(&out.stderr)
            );
        }
        let load = examples
            .iter()
            .any(|e| {
                let words: Vec<String> = e.command.split_whitespace().map(String::from).collect();
                matches!(subcommand(&words).1, "trace" | "sniff" | "profile")
            })
            .then(|| {
                // A slow stream of full handshakes, each with a GET: every probed function
                // runs, and the server uses CPU for profile to sample.
                Command::new(support::bin())
                    .args(["bench", &v4.addr.to_string(), "--request", "/"])
                    .args(["--rate", "40", "-c", "2", "-d", "600s"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("start the background load")
            });
        Bench {
            dir,
            bin_dir,
            v4,
            v6,
            load,
        }
    }

    /// The example's command line as this test runs it: the documented server, certificate
    /// and PIDs replaced by the test's, durations and rounds bounded.
    fn command_line(&self, example: &str) -> String {
        let pid = self.v4.pid().to_string();
        let port = self.v4.port();
        let cert = self.v4.cert().display().to_string();
        let mut line = example.to_string();
        for placeholder in [
            "$(pgrep -n nginx)",
            "$(pgrep -o nginx)",
            "$(pgrep -d, nginx)",
            "$(pgrep -f 'nginx: worker')",
        ] {
            line = line.replace(placeholder, &pid);
        }
        line = line.replace("-p 1234", &format!("-p {pid}"));
        let (head, tail) = match line.split_once(" -- ") {
            Some((head, tail)) => (head.to_string(), Some(tail.to_string())),
            None => (line.clone(), None),
        };
        let mut words: Vec<String> = head.split_whitespace().map(String::from).collect();
        let (at, command) = subcommand(&words);
        let command = command.to_string();
        let matrix = words.iter().any(|w| w == "--matrix");
        let has = |flag: &str| words.iter().any(|w| w == flag);
        let count_given = has("-n") || has("--count");
        // Each bound: the flag's spellings and the value the test runs with. A flag the
        // example gives keeps its place (so a renamed flag still fails) with this value; a
        // flag it does not give is added after the command.
        let duration: (&[&str], &str) = (&["-d", "--duration"], "1s");
        let mut bounds: Vec<(&[&str], &str)> = match command.as_str() {
            "bench" if count_given => vec![],
            "serve" | "bench" | "trace" | "sniff" => vec![duration],
            "profile" if !matrix => vec![duration],
            "lab" => vec![
                (&["-d", "--duration"], "2s"),
                (&["--trace-duration"], "1s"),
                (&["--warmup"], "1s"),
            ],
            // The warm-up stays: it gives a resumed variant its first session.
            "compare" | "profile" => {
                let load = words
                    .windows(2)
                    .any(|w| w[0] == "--experiment" && w[1] == "load");
                vec![
                    (&["--repeat"], "2"),
                    (&["-n", "--count"], if load { "16" } else { "2" }),
                ]
            }
            _ => vec![],
        };
        if command == "serve" && !has("--listen") {
            bounds.push((&["--listen"], "127.0.0.1:0"));
        }
        if command == "bench" && has("keepalive") && !has("--warmup") {
            // Every connection's handshake before the window opens, on a busy machine too.
            bounds.push((&["--warmup"], "1s"));
        }
        let mut added: Vec<String> = Vec::new();
        for (spellings, value) in bounds {
            match (at + 1..words.len()).find(|&i| spellings.contains(&words[i].as_str())) {
                Some(i) if i + 1 < words.len() => words[i + 1] = value.to_string(),
                _ => added.extend([spellings[0].to_string(), value.to_string()]),
            }
        }
        words.splice(at + 1..at + 1, added);
        let mut line = words.join(" ");
        if let Some(tail) = tail {
            line = format!("{line} -- {tail}");
        }
        if command == "serve" {
            // Its own port and certificate file: the test's server keeps 4433's place.
            line = line
                .replace(":4433", ":0")
                .replace("/tmp/cert.pem", "serve-cert.pem");
        } else {
            if let Some(v6) = &self.v6 {
                line = line.replace("[::1]:4433", &v6.addr.to_string());
            }
            line = line
                // The metrics port of the trace guide: a free one here.
                .replace("127.0.0.1:9464", "127.0.0.1:0")
                .replace("127.0.0.1:4433", &self.v4.addr.to_string())
                .replace("localhost:4433", &format!("localhost:{port}"))
                .replace("/tmp/cert.pem", &cert);
        }
        line
    }

    /// Runs one example; panics naming where it is unless it exits 0 and prints what its
    /// command always prints.
    fn run(&self, example: &Example) {
        let line = self.command_line(&example.command);
        let path = format!(
            "{}:{}",
            self.bin_dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let started = Instant::now();
        let out = support::run_with_timeout(
            Command::new("bash")
                .args(["-c", &line])
                .env("PATH", path)
                .current_dir(self.dir.path()),
            EXAMPLE_LIMIT,
        );
        let stdout = text(&out.stdout);
        let stderr = text(&out.stderr);
        let place = format!(
            "{}:{}: `{}`, run as `{line}` ({:.1} s)",
            example.file,
            example.line,
            example.command,
            started.elapsed().as_secs_f64()
        );
        assert!(
            out.status.success(),
            "{place} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "{place}: {stderr}");
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        let expected = printed_by(&words);
        let both = format!("{stdout}{stderr}");
        assert!(
            expected.iter().any(|needle| both.contains(needle)),
            "{place} printed none of {expected:?}:\nstdout: {stdout}\nstderr: {stderr}"
        );
        eprintln!("ok {place}");
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(mut load) = self.load.take() {
            support::terminate(&mut load);
            let _ = load.wait();
        }
    }
}

/// What a successful run of the command always prints (any one of them).
fn printed_by(words: &[String]) -> Vec<&'static str> {
    let has = |flag: &str| words.iter().any(|w| w == flag);
    let (at, command) = subcommand(words);
    match command {
        "serve" => vec!["https://"],
        "bench" if has("--mode") && words.iter().any(|w| w == "keepalive") => vec!["requests"],
        "bench" => vec!["handshakes"],
        "merge" => vec!["added up, from"],
        "handshake" if has("--json") => vec!["\"version\""],
        "handshake" => vec!["TLSv1."],
        "trace" => vec!["probe cost"],
        "sniff" => vec!["calls seen"],
        "profile" | "compare" if has("--matrix") => vec!["rounds"],
        "profile" => vec!["samples"],
        "compare" => vec!["median"],
        "lab" => vec!["operations per second"],
        "openssl" if words.get(at + 1).map(String::as_str) == Some("list") => vec!["OpenSSL"],
        "openssl" => vec![" ready at ", " already built at "],
        _ => unreachable!("{command}"),
    }
}

/// How the examples of a file are run.
#[derive(Clone, Copy, PartialEq)]
enum Order {
    /// One after the other, in the file's order (an example may read what an earlier one
    /// wrote; load runs do not compete for the CPUs).
    InTurn,
    /// Up to this many at once: trace and sniff spend most of their time waiting for the
    /// kernel to attach and detach probes.
    AtOnce(usize),
}

/// Runs every example of one file against one server.
fn run_examples_of(file: &str, order: Order) {
    let found = examples(file);
    assert!(
        !found.run.is_empty(),
        "{file} has no `sh` example to run: a guide shows at least one"
    );
    let bench = Bench::new(&found.run);
    match order {
        Order::InTurn => found.run.iter().for_each(|example| bench.run(example)),
        Order::AtOnce(n) => {
            for batch in found.run.chunks(n) {
                std::thread::scope(|scope| {
                    for example in batch {
                        let bench = &bench;
                        scope.spawn(move || bench.run(example));
                    }
                });
            }
        }
    }
    for (example, reason) in &found.not_run {
        eprintln!(
            "not run: {}:{}: `{}`: {reason}",
            example.file, example.line, example.command
        );
    }
}

/// The files the tests below run, and so every file that has `sh` examples.
const RUN: &[&str] = &[
    "README.md",
    "docs/serve.md",
    "docs/bench.md",
    "docs/merge.md",
    "docs/handshake.md",
    "docs/trace.md",
    "docs/sniff.md",
    "docs/profile.md",
    "docs/compare.md",
    "docs/compare-scaling.md",
    "docs/lab.md",
    "docs/openssl.md",
];

#[test]
fn every_document_with_examples_is_run_and_the_unrun_ones_are_counted() {
    let mut not_run = Vec::new();
    for file in documents() {
        let found = examples(&file);
        assert!(
            found.run.is_empty() || RUN.contains(&file.as_str()),
            "{file} has `sh` examples but no test runs them: add it to RUN and a test below"
        );
        not_run.extend(found.not_run);
    }
    let listed: Vec<String> = not_run
        .iter()
        .map(|(e, reason)| format!("{}:{}: {} ({reason})", e.file, e.line, e.command))
        .collect();
    assert_eq!(
        not_run.len(),
        NOT_RUN,
        "the docs show {} commands they do not run, {NOT_RUN} expected:\n{}",
        not_run.len(),
        listed.join("\n")
    );
}

#[test]
fn readme_examples_run() {
    run_examples_of("README.md", Order::InTurn);
}

#[test]
fn serve_guide_examples_run() {
    run_examples_of("docs/serve.md", Order::AtOnce(4));
}

#[test]
fn bench_guide_examples_run() {
    run_examples_of("docs/bench.md", Order::InTurn);
}

#[test]
fn merge_guide_examples_run() {
    run_examples_of("docs/merge.md", Order::InTurn);
}

#[test]
fn handshake_guide_examples_run() {
    run_examples_of("docs/handshake.md", Order::InTurn);
}

#[test]
fn trace_guide_examples_run() {
    run_examples_of("docs/trace.md", Order::AtOnce(4));
}

#[test]
fn sniff_guide_examples_run() {
    run_examples_of("docs/sniff.md", Order::AtOnce(4));
}

#[test]
fn profile_guide_examples_run() {
    run_examples_of("docs/profile.md", Order::InTurn);
}

#[test]
fn compare_guide_examples_run() {
    run_examples_of("docs/compare.md", Order::InTurn);
}

#[test]
fn lab_guide_examples_run() {
    run_examples_of("docs/lab.md", Order::InTurn);
}

#[test]
fn compare_scaling_guide_examples_run() {
    run_examples_of("docs/compare-scaling.md", Order::InTurn);
}

#[test]
fn openssl_guide_examples_run() {
    run_examples_of("docs/openssl.md", Order::InTurn);
}

/// Every reference from the README, docs/ and bench/README.md into bench/runs/ names a file
/// that exists: packing a run keeps only its summaries outside raw.tar.xz, so a link to a raw
/// file breaks silently unless something checks it.
#[test]
fn every_link_into_bench_runs_names_a_kept_file() {
    let out = Command::new("bash")
        .arg(workspace().join("bench/lib/check-run-links"))
        .arg(workspace())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "broken references into bench/runs/:\n{stdout}"
    );
    assert!(
        stdout.contains("references into bench/runs/ exist"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("all 0 "),
        "no reference was found to check: {stdout}"
    );
}
