//! The command line itself: help, and one-line errors for bad input.

use std::time::Duration;

use crate::support::{self, assert_one_line_error, text, Serve};

#[test]
fn help_lists_the_subcommands() {
    let out = support::tlsscope(&["--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for cmd in ["serve", "handshake", "openssl"] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing: {help}"
        );
    }
    let out = support::tlsscope(&["openssl", "--help"]);
    let help = text(&out.stdout);
    assert!(help.contains("build") && help.contains("list"), "{help}");
}

#[test]
fn port_in_use() {
    let first = Serve::start(&[]);
    let addr = first.addr.to_string();
    let out = support::tlsscope(&["serve", "--listen", &addr]);
    assert_one_line_error(&out, &[&addr, "already in use"]);
    // Also with several workers, whose listeners share the port with SO_REUSEPORT.
    let out = support::tlsscope(&["serve", "--listen", &addr, "--threads", "2"]);
    assert_one_line_error(&out, &[&addr, "already in use"]);
    first.stop();
}

#[test]
fn unknown_cert_type() {
    let out = support::tlsscope(&["serve", "--cert-type", "rsa1024"]);
    assert_one_line_error(&out, &["rsa1024", "ecdsa-p256"]);
}

#[test]
fn unreadable_or_wrong_key_files() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "this is not a key\n").unwrap();
    // A real certificate, written by the server itself.
    let server = Serve::start(&[]);
    std::fs::copy(server.cert(), &cert).unwrap();
    server.stop();
    let cert_s = cert.to_str().unwrap();

    let out = support::tlsscope(&["serve", "--cert", cert_s, "--key", "/nonexistent/key.pem"]);
    assert_one_line_error(&out, &["/nonexistent/key.pem", "No such file"]);
    let out = support::tlsscope(&[
        "serve",
        "--cert",
        cert_s,
        "--key",
        garbage.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, &["garbage.pem", "private key"]);
    // A key that is fine but belongs to another certificate.
    let other = Serve::start(&["--cert-type", "ecdsa-p256"]);
    let key_dir = tempfile::tempdir().unwrap();
    let key = key_dir.path().join("key.pem");
    let status = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&key)
        .status()
        .unwrap();
    assert!(status.success());
    let out = support::tlsscope(&[
        "serve",
        "--cert",
        other.cert().to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, &["belong together"]);
    other.stop();
}

#[test]
fn openssl_paths_and_versions_that_are_not_openssl() {
    let empty = tempfile::tempdir().unwrap();
    let out = support::tlsscope(&["--openssl", empty.path().to_str().unwrap(), "serve"]);
    assert_one_line_error(&out, &[empty.path().to_str().unwrap(), "no libssl"]);
    let out = support::tlsscope(&["--openssl", "/nonexistent/openssl", "serve"]);
    assert_one_line_error(&out, &["/nonexistent/openssl", "not a directory"]);
    let out = support::tlsscope(&["--openssl", "9.8.7", "handshake"]);
    assert_one_line_error(&out, &["9.8.7", "tlsscope openssl build 9.8.7"]);
    // A directory with files of the right names that are not libraries.
    let fake = tempfile::tempdir().unwrap();
    std::fs::create_dir(fake.path().join("lib")).unwrap();
    for f in ["libssl.so.3", "libcrypto.so.3"] {
        std::fs::write(fake.path().join("lib").join(f), "not an ELF file").unwrap();
    }
    let out = support::tlsscope(&["--openssl", fake.path().to_str().unwrap(), "serve"]);
    assert_one_line_error(&out, &["libcrypto.so.3", "cannot load"]);
}

#[test]
fn cpus_are_checked_against_the_machine_not_the_affinity_mask() {
    // Under taskset the process may run on CPU 0 only; the machine still has the others, and
    // serve's worker runs on the one asked for. On one CPU the mask and the machine are the
    // same, so this needs two.
    let cpus = host_cpus();
    assert!(
        cpus >= 2,
        "this check needs two CPUs or more; the machine has {cpus}"
    );
    let last = (cpus - 1).to_string();
    let serve = Serve::start_in(
        &["taskset", "-c", "0"],
        &[],
        &["--cpus", &last, "--threads", "1"],
    );
    let worker = format!("/proc/{}/task", serve.pid());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Each thread's CPUs: the main thread keeps taskset's, the worker has the last one.
        let allowed: Vec<(String, String)> = std::fs::read_dir(&worker)
            .unwrap()
            .flatten()
            .map(|t| {
                let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                let cpus = read("status")
                    .lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                (read("comm").trim().to_string(), cpus)
            })
            .collect();
        if allowed
            .iter()
            .any(|(comm, cpus)| comm.starts_with("tlsscope-serve") && *cpus == last)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no worker on CPU {last}: {allowed:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    serve.stop();
    // One past the machine's last CPU is refused, naming it.
    let out = support::tlsscope(&["serve", "--cpus", &cpus.to_string()]);
    assert_one_line_error(&out, &[&format!("--cpus {cpus}")]);
}

fn host_cpus() -> usize {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    // "0-1" or "0": the last number is the highest CPU.
    let highest: usize = online
        .trim()
        .rsplit(['-', ','])
        .next()
        .unwrap()
        .parse()
        .unwrap();
    highest + 1
}

#[test]
fn bad_cpu_threads_and_tls_options() {
    let out = support::tlsscope(&["serve", "--cpus", "4096"]);
    assert_one_line_error(&out, &["--cpus 4096"]);
    let out = support::tlsscope(&["serve", "--listen", "127.0.0.1:0", "--tls", "1.4"]);
    assert_one_line_error(&out, &["1.4"]);
    let out = support::tlsscope(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--min-tls",
        "1.3",
        "--max-tls",
        "1.2",
    ]);
    assert_one_line_error(&out, &["--min-tls"]);
    let out = support::tlsscope(&["serve", "--listen", "127.0.0.1:0", "--ciphers", "NOPE"]);
    assert_one_line_error(&out, &["NOPE", "cipher"]);
    let out = support::tlsscope(&["serve", "--listen", "not-an-address"]);
    assert_one_line_error(&out, &["not-an-address"]);
}

#[test]
fn handshake_errors() {
    // Nothing listens on this port, and nobody can while it is held.
    let refusing = support::RefusingPort::new(false);
    let target = refusing.addr.to_string();
    let out = support::tlsscope(&["handshake", &target]);
    assert_one_line_error(&out, &[&target, "refused"]);
    // Verification against the wrong trust anchor.
    let server = Serve::start(&[]);
    let other = Serve::start(&[]);
    let out = support::tlsscope(&[
        "handshake",
        &server.addr.to_string(),
        "--cafile",
        other.cert().to_str().unwrap(),
    ]);
    assert_one_line_error(&out, &["certificate verification failed"]);
    // Wrong host name against the right anchor.
    let out = support::tlsscope(&[
        "handshake",
        &server.addr.to_string(),
        "--cafile",
        server.cert().to_str().unwrap(),
        "--sni",
        "wrong.example",
    ]);
    assert_one_line_error(&out, &["verification failed", "hostname mismatch"]);
    server.stop();
    other.stop();
}

// Issue 12: a command line a user does not have to learn twice.

/// Every form of target a user types reaches the server: a host name, a URL whose path becomes
/// the request (wrk's habit), a bracketed IPv6 address; port 443 when none is given.
#[test]
fn targets_take_names_urls_and_bracketed_ipv6() {
    let server = Serve::start(&[]);
    let port = server.port();
    // A name, resolved once.
    let out = support::tlsscope(&["bench", &format!("localhost:{port}"), "-n", "5", "-c", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("handshakes   5"),
        "{}",
        text(&out.stdout)
    );
    // A URL: its path is what each connection GETs.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let url = format!("https://127.0.0.1:{port}/bytes/7");
    let out = support::tlsscope(&[
        "bench",
        &url,
        "-n",
        "4",
        "-c",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["result"]["requests"], 4, "{doc}");
    assert_eq!(doc["result"]["body_bytes"], 28, "{doc}");
    // handshake takes the same forms.
    let out = support::tlsscope(&["handshake", &format!("https://localhost:{port}/bytes/3")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("GET /bytes/3 -> 200 (3 bytes)"),
        "{}",
        text(&out.stdout)
    );
    server.stop();

    // Bracketed IPv6, against a server on ::1.
    let v6_server = Serve::start(&["--listen", "[::1]:0"]);
    let target = v6_server.addr.to_string();
    assert!(target.starts_with("[::1]:"), "{target}");
    let out = support::tlsscope(&["handshake", &target]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&target), "{}", text(&out.stdout));
    let out = support::tlsscope(&["bench", &format!("https://{target}/"), "-n", "3", "-c", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    v6_server.stop();

    // No port: 443, said in the error when nothing listens there.
    let out = support::tlsscope(&["bench", "127.0.0.1", "-n", "1"]);
    assert_one_line_error(&out, &["127.0.0.1:443"]);
    // A bad target shows the accepted forms, and the subcommand's help.
    for bad in ["http://127.0.0.1:4433/", "127.0.0.1:http", "::1:4433:x"] {
        let out = support::tlsscope(&["bench", bad]);
        assert_one_line_error(&out, &["HOST:PORT", "[IPv6]:PORT", "tlsscope bench --help"]);
    }
    let out = support::tlsscope(&["handshake", "no-such-host.invalid:4433"]);
    assert_one_line_error(&out, &["no-such-host.invalid", "does not resolve"]);
}

// Issue 12.
/// One duration type everywhere (10s, 500ms, 2m, or seconds), -d on serve too, and zero refused.
#[test]
fn durations_are_one_type_and_zero_is_refused() {
    let start = std::time::Instant::now();
    let out = support::tlsscope(&["serve", "--listen", "127.0.0.1:0", "-d", "500ms"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
    let out = support::tlsscope(&["serve", "--listen", "127.0.0.1:0", "--duration", "1s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let server = Serve::start(&[]);
    let out = support::tlsscope(&["handshake", &server.addr.to_string(), "--timeout", "2s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    server.stop();
    for args in [
        &["serve", "-d", "0"][..],
        &["bench", "-d", "0"],
        &["bench", "--timeout", "0s"],
        &["handshake", "--timeout", "0ms"],
        &["lab", "-d", "0"],
        &["lab", "--trace-duration", "0"],
        &["trace", "-p", "1", "-d", "0"],
        &["trace", "-p", "1", "-i", "0s"],
        &["sniff", "-p", "1", "-d", "0"],
    ] {
        let out = support::tlsscope(args);
        assert_one_line_error(&out, &["more than zero"]);
        let help = format!("tlsscope {} --help", args[0]);
        assert!(
            text(&out.stderr).contains(&help),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

// Issue 12.
/// -c is connections; trace and sniff name the thread filter --comm (-c still works, unlisted);
/// --resume is a flag in handshake, --resume-by picks bench's TLS 1.2 mechanism, and compare's
/// lists are --handshakes and --tls-versions (their old spellings still parse).
#[test]
fn each_flag_has_one_meaning_across_commands() {
    for cmd in ["trace", "sniff"] {
        let help = text(&support::tlsscope(&[cmd, "--help"]).stdout);
        assert!(help.contains("--comm <COMM>"), "{help}");
        assert!(!help.contains("-c,"), "{cmd}'s help still shows -c: {help}");
        // The old spelling is accepted (with a notice): it fails only on what is wrong with
        // the rest.
        let out = support::tlsscope(&[cmd, "-c", "curl"]);
        assert_error_after_notice(&out, "--comm NAME", &["nothing to"]);
        let libssl = support::system_libssl();
        let lib = libssl.to_str().unwrap();
        let out = support::tlsscope(&[cmd, "--lib", lib, "--comm", "a-name-longer-than-15"]);
        assert_one_line_error(&out, &["--comm"]);
    }
    let help = text(&support::tlsscope(&["bench", "--help"]).stdout);
    assert!(help.contains("-c, --connections"), "{help}");
    assert!(help.contains("--resume-by <ticket|id>"), "{help}");
    let help = text(&support::tlsscope(&["compare", "--help"]).stdout);
    assert!(
        help.contains("--handshakes <LIST>") && help.contains("--tls-versions <LIST>"),
        "{help}"
    );
    assert!(!help.contains("--resume <"), "{help}");

    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    for by in ["--resume-by", "--resume"] {
        let out = support::tlsscope(&[
            "bench", &addr, "--mode", "resume", "--tls", "1.2", by, "id", "-n", "20", "-c", "1",
        ]);
        assert!(out.status.success(), "{by}: {}", text(&out.stderr));
        assert!(
            text(&out.stdout).contains("resumed by session ID 19"),
            "{}",
            text(&out.stdout)
        );
    }
    let out = support::tlsscope(&["bench", &addr, "--resume-by", "id"]);
    assert_one_line_error(&out, &["--resume-by", "--mode resume"]);
    server.stop();
}

// Issue 12.
/// Ctrl-C ends every long-running command with 130, after writing what it has.
#[test]
fn ctrl_c_ends_serve_with_130_and_its_counters_written() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let mut child = std::process::Command::new(support::bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--stats-json"])
        .arg(&stats)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line says it is listening (and its signal handlers are in place).
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("listening"), "{first}");
    // Something to count: two connections with a request each.
    let addr = first
        .split("https://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {first:?}"));
    let out = support::tlsscope(&["handshake", addr, "-n", "2", "--request", "/"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // SAFETY: kill signals a child we started and have not reaped.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED));
    // The counters it wrote on the way out are the ones of this run.
    let written = std::fs::read(&stats).expect("serve wrote its counters before exiting");
    let doc: serde_json::Value = serde_json::from_slice(&written).expect("the counters parse");
    assert_eq!(doc["handshakes"]["full"], 2, "{doc:#}");
    assert_eq!(doc["requests"], 2, "{doc:#}");
}

// Issue 12.
/// bench and lab end on SIGINT and SIGTERM as trace, sniff and serve do: 130 after Ctrl-C, 0
/// after SIGTERM (a requested stop), the results written either way.
#[test]
fn bench_ends_on_sigint_and_sigterm_with_its_results_written() {
    let server = support::Serve::start(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    for (signal, exit) in [(libc::SIGINT, crate::EXIT_INTERRUPTED), (libc::SIGTERM, 0)] {
        let json = dir.path().join(format!("bench-{signal}.json"));
        let mut child = std::process::Command::new(support::bin())
            .args([
                "bench",
                &addr,
                "--mode",
                "keepalive",
                "-c",
                "1",
                "-d",
                "30s",
            ])
            .arg("--json")
            .arg(&json)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Long enough to be under load (its handlers are installed before anything else).
        std::thread::sleep(Duration::from_millis(1500));
        // SAFETY: kill signals a child we started and have not reaped.
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(exit), "signal {signal}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["result"]["interrupted"], true, "signal {signal}");
        assert!(doc["result"]["requests"].as_u64().unwrap() > 0, "{doc:#}");
    }
    server.stop();
}

// Issue 12.
/// An OS error is said once, however many layers quote it.
#[test]
fn an_os_error_is_said_once() {
    let e = anyhow::Error::new(probes::Error::Process {
        pid: 7,
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    });
    let line = app::common::usage::one_line(&e);
    assert_eq!(line.matches("os error 13").count(), 1, "{line}");
    // A result file that cannot be written is found before the server starts: said once.
    let out = support::tlsscope(&[
        "serve",
        "--cert-out",
        "/proc/self/no-such/c.pem",
        "-d",
        "1ms",
    ]);
    let err = text(&out.stderr);
    assert!(err.matches("os error").count() <= 1, "{err}");
    assert_one_line_error(&out, &["--cert-out /proc/self/no-such/c.pem"]);
}

/// Every command that writes results, with stdout on a full disk (/dev/full) and on a pipe the
/// reader closed, and with a result file on a full disk: a non-zero exit and one line that
/// says where writing failed (it used to panic, or exit 0 having lost the CSV).
#[test]
fn full_disks_and_closed_pipes_are_one_line_errors() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("run.json");
    let out = support::tlsscope(&[
        "bench",
        &addr,
        "-n",
        "20",
        "--json",
        saved.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let saved = saved.to_str().unwrap();
    let libssl = support::system_libssl();
    let commands: Vec<Vec<&str>> = vec![
        vec!["bench", &addr, "-n", "20"],
        vec!["handshake", &addr],
        vec!["compare", saved, saved],
        vec!["openssl", "list"],
        vec!["trace", "--lib", libssl.to_str().unwrap(), "-d", "1s"],
    ];
    for args in &commands {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        // Each command is bounded (-n, -d).
        let out = support::command_in(&[])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(full)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        assert_ends_in_error(&out, &["stdout", "No space left"]);

        let mut child = support::command_in(&[])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_ends_in_error(&out, &["stdout was closed"]);
    }
    for (flag, file) in [("--json", "/dev/full"), ("--csv", "/dev/full")] {
        let out = support::tlsscope(&["bench", &addr, "-n", "20", flag, file]);
        assert_one_line_error(&out, &[flag, "/dev/full", "No space left"]);
    }
    let out = support::tlsscope(&["compare", saved, saved, "--json", "/dev/full"]);
    assert_one_line_error(&out, &["--json /dev/full", "No space left"]);
    server.stop();
}

/// A failed run whose stderr ends in one error line holding every needle (status lines of
/// trace may come before it), and no panic.
fn assert_ends_in_error(out: &std::process::Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "expected failure; stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("tlsscope: error: "), "{err}");
    for n in needles {
        assert!(last.contains(n), "{n:?} not in {last:?}");
    }
}

/// A usage error: exit status 2, one line holding every needle, no panic.
fn assert_usage_error(out: &std::process::Output, needles: &[&str]) {
    assert_one_line_error(out, needles);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// Each command line (args, flag) is a usage error naming the flag.
fn assert_usage_errors(cases: &[(&[&str], &str)]) {
    for (args, flag) in cases {
        assert_usage_error(&support::tlsscope(args), &[flag]);
    }
}

/// A run with an old spelling: its notice (naming `new`) exactly once on stderr, then one error
/// line holding every needle.
fn assert_error_after_notice(out: &std::process::Output, new: &str, needles: &[&str]) {
    let err = text(&out.stderr);
    assert_eq!(notices(&err, new), 1, "{err}");
    let rest: Vec<&str> = err
        .lines()
        .filter(|l| !l.starts_with("tlsscope: note:"))
        .collect();
    assert_eq!(rest.len(), 1, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(rest[0].contains(n), "{n:?} not in {err}");
    }
}

/// How many notices about an old spelling `stderr` holds that name its new spelling `new`.
fn notices(stderr: &str, new: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("tlsscope: note:") && l.contains(new))
        .count()
}

// Issue 30, item 5: a bad output path used to throw the whole run away (exit 1 after it).

/// Every option that writes a file or directory, pointed into a directory that does not exist
/// (or under a file), fails at once with one line naming the option and the path: bench does
/// not run its 30 s, and the built-in server it would load accepted no connection.
#[test]
fn an_output_that_cannot_be_written_fails_before_any_work() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let pid = server.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let m = |name: &str| missing.join(name).to_str().unwrap().to_string();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let under_file = file.join("sub").to_str().unwrap().to_string();
    let libssl = support::system_libssl().to_str().unwrap().to_string();
    let bench = ["bench", &addr, "-d", "30s"];
    let trace = ["trace", "--lib", &libssl, "-d", "30s"];
    let sniff = ["sniff", "--lib", &libssl, "-d", "30s"];
    let serve = ["serve", "--listen", "127.0.0.1:0", "-d", "30s"];
    let matrix = ["compare", "--matrix", "-n", "5000"];
    let cases: Vec<(Vec<&str>, &str, String)> = vec![
        (bench.to_vec(), "--json", m("b.json")),
        (bench.to_vec(), "--csv", m("b.csv")),
        (bench.to_vec(), "--html", m("b.html")),
        (bench.to_vec(), "--metrics-file", m("b.prom")),
        (bench.to_vec(), "--keylog", m("b.keys")),
        (vec!["handshake", &addr], "--json", m("h.json")),
        (trace.to_vec(), "--json", m("t.json")),
        (trace.to_vec(), "--html", m("t.html")),
        (trace.to_vec(), "--metrics-file", m("t.prom")),
        (sniff.to_vec(), "-o", m("s.txt")),
        (sniff.to_vec(), "--json", m("s.jsonl")),
        (sniff.to_vec(), "--pcap", m("s.pcapng")),
        (serve.to_vec(), "--stats-json", m("s.json")),
        (serve.to_vec(), "--cert-out", m("c.pem")),
        (serve.to_vec(), "--metrics-file", m("s.prom")),
        (matrix.to_vec(), "--json", m("c.json")),
        (matrix.to_vec(), "--markdown", m("c.md")),
        (matrix.to_vec(), "--html", m("c.html")),
        (matrix.to_vec(), "--profile", under_file.clone()),
        (vec!["lab", "-d", "30s"], "--html", m("l.html")),
        (
            vec!["profile", "-p", &pid, "-d", "30s"],
            "--out-dir",
            under_file.clone(),
        ),
    ];
    for (args, flag, path) in &cases {
        let mut all = args.clone();
        all.extend([*flag, path.as_str()]);
        let started = std::time::Instant::now();
        let out = support::tlsscope(&all);
        let took = started.elapsed();
        // Named by its long name (sniff's -o is --output).
        let named = if *flag == "-o" { "--output" } else { flag };
        assert_usage_error(&out, &[&format!("{named} {path}")]);
        assert!(took < Duration::from_secs(2), "{all:?} took {took:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("does not exist: create it") || err.contains("not a directory"),
            "{all:?}: says what to do: {err}"
        );
    }
    assert!(!missing.exists());
    // Stdout as the output: two options cannot share it.
    let out = support::tlsscope(&["bench", &addr, "--json", "-", "--csv", "-"]);
    assert_usage_error(&out, &["--json and --csv", "stdout"]);
    let stats = server.stop();
    assert_eq!(
        stats["connections"]["accepted"], 0,
        "no load was sent: {stats}"
    );
}

/// The check creates nothing: a run that fails before it has a result leaves no empty file
/// behind, and does not empty the file an earlier run wrote.
#[test]
fn a_run_that_fails_leaves_no_empty_output_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let earlier = p("earlier.json");
    std::fs::write(&earlier, "{\"an\":\"earlier run\"}").unwrap();
    // Nothing listens on this port, and nobody can while it is held.
    let refusing = support::RefusingPort::new(false);
    let target = refusing.addr.to_string();
    let out = support::tlsscope(&[
        "bench",
        &target,
        "-n",
        "5",
        "--json",
        earlier.to_str().unwrap(),
        "--csv",
        p("b.csv").to_str().unwrap(),
        "--html",
        p("b.html").to_str().unwrap(),
        "--metrics-file",
        p("b.prom").to_str().unwrap(),
        "--keylog",
        p("b.keys").to_str().unwrap(),
    ]);
    assert_one_line_error(&out, &["refused"]);
    // A process that is gone: sniff cannot start.
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let out = support::tlsscope(&[
        "sniff",
        "-p",
        &gone.id().to_string(),
        "-o",
        p("s.txt").to_str().unwrap(),
        "--pcap",
        p("s.pcapng").to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "{}", text(&out.stderr));
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["earlier.json"], "files left behind");
    assert_eq!(
        std::fs::read_to_string(&earlier).unwrap(),
        "{\"an\":\"earlier run\"}"
    );
}

// Issue 30, item 7: huge values used to panic (exit 101).

/// Durations past the maximum (7 days), negative ones, and counts, rates and sizes out of
/// range are usage errors naming the flag, never a panic.
#[test]
fn huge_and_negative_values_are_usage_errors_not_panics() {
    let huge = "99999999999999999999s";
    assert_usage_errors(&[
        (&["bench", "-d", huge][..], "--duration"),
        (&["trace", "-p", "1", "-d", huge], "--duration"),
        (&["serve", "-d", huge], "--duration"),
        (&["bench", "--timeout", huge], "--timeout"),
        (&["bench", "--warmup", huge], "--warmup"),
        (&["serve", "--idle-timeout", huge], "--idle-timeout"),
        (&["trace", "-p", "1", "-i", "1e300"], "--interval"),
        (&["bench", "-d", "169h"], "--duration"),
        (&["bench", "-d", "inf"], "--duration"),
        (&["bench", "-d", "NaN"], "--duration"),
        (&["bench", "-d", "-1"], "--duration"),
        (&["sniff", "-p", "1", "-d", "-2s"], "--duration"),
        (&["bench", "-n", "99999999999999999999999"], "--count"),
        (&["bench", "--rate", "1e999"], "--rate"),
        (&["bench", "--rate", "-5"], "--rate"),
        (&["bench", "--resume-ratio", "2"], "--resume-ratio"),
        (&["bench", "--source-ips", "300"], "--source-ips"),
        (
            &["serve", "--threads", "99999999999999999999999"],
            "--threads",
        ),
        (
            &["sniff", "-p", "1", "--ring-size", "99999999999M"],
            "--ring-size",
        ),
        (
            &["sniff", "-p", "1", "--max-bytes", "99999999999"],
            "--max-bytes",
        ),
        (&["compare", "--level", "1e999"], "--level"),
        (
            &[
                "trace",
                "-p",
                "1",
                "--linear",
                "0,18446744073709551615,10000000000000000000",
            ],
            "--linear",
        ),
    ]);
    let out = support::tlsscope(&["bench", "-d", "-1"]);
    assert_usage_error(&out, &["cannot be negative"]);
    let out = support::tlsscope(&["bench", "-d", "8d"]);
    assert_usage_error(&out, &["not a duration"]);
    let out = support::tlsscope(&["serve", "-d", "169h"]);
    assert_usage_error(&out, &["at most 7 days"]);
}

// Issue 30, item 10: one flag, one meaning.

/// Values out of range are usage errors (exit 2, as clap's own), one line naming the flag.
#[test]
fn bad_values_exit_2_naming_the_flag() {
    assert_usage_errors(&[
        (&["bench", "-c", "0"][..], "--connections"),
        (&["bench", "-t", "0"], "--threads"),
        (&["bench", "-c", "-4"], "--connections"),
        (&["bench", "-n", "0"], "--count"),
        (&["bench", "-d", "0"], "--duration"),
        (&["bench", "-d", "1s", "-n", "5"], "--count"),
        (&["bench", "--rate", "100"], "--rate"),
        (&["bench", "--resume-ratio", "0.5"], "--resume-ratio"),
        (&["bench", "--request", "x"], "--request"),
        (&["bench", "--cpus", "4096"], "--cpus"),
        (&["bench", "-c", "1", "-t", "2"], "--connections 1"),
        (&["handshake", "-n", "0"], "--count"),
        (&["serve", "--threads", "0"], "--threads"),
        (&["serve", "--max-connections", "0"], "--max-connections"),
        (
            &["serve", "--threads", "4", "--max-connections", "2"],
            "--max-connections",
        ),
        (&["sniff", "-p", "1", "--max-bytes", "0"], "--max-bytes"),
        (&["compare", "-n", "1"], "--count"),
        (&["compare", "--repeat", "0"], "--repeat"),
        (&["compare", "--level", "0.4"], "--level"),
        (&["compare", "only-one.json"], "two or more"),
        (&["lab", "-c", "0"], "--connections"),
        (&["lab", "--server-cpu", "4096"], "--server-cpu"),
        (&["profile", "-p", "1", "--top", "0"], "--top"),
        (&["openssl", "build", "-j", "0", "3.0.2"], "--jobs"),
    ]);
    // A negative duration is said to be one, not taken for an option.
    let out = support::tlsscope(&["trace", "-p", "1", "-d", "-1"]);
    assert_usage_error(&out, &["--duration", "cannot be negative"]);
    // trace has no connection count: bench's habit is refused, pointing to --comm.
    let out = support::tlsscope(&["trace", "-p", "1", "-c", "16"]);
    assert_usage_error(&out, &["no connection count", "--comm 16"]);
}

/// The old spellings still work for one release, each with one notice on stderr; the new ones
/// work without.
#[test]
fn old_spellings_work_with_one_notice_and_new_ones_without() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();

    // bench: --requests is --count (-n), the number of operations in total.
    for (spelling, notice) in [("--requests", 1), ("--count", 0), ("-n", 0)] {
        let json = dir.path().join(format!("bench{spelling}.json"));
        let out = support::tlsscope(&[
            "bench",
            &addr,
            spelling,
            "7",
            "-c",
            "2",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{spelling}: {}", text(&out.stderr));
        assert_eq!(notices(&text(&out.stderr), "--count"), notice, "{spelling}");
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(doc["result"]["ops"], 7, "{spelling}: {doc}");
    }
    // --json - is the result on stdout, instead of the text.
    let out = support::tlsscope(&["bench", &addr, "-n", "3", "--json", "-"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["result"]["ops"], 3, "{doc}");

    // handshake: a bare --json (before the target, or last) is --json -.
    for args in [
        &["handshake", "--json", &addr][..],
        &["handshake", &addr, "--json"],
        &["handshake", "--json", "-", &addr],
    ] {
        let out = support::tlsscope(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        let bare = usize::from(!args.contains(&"-"));
        assert_eq!(notices(&text(&out.stderr), "--json -"), bare, "{args:?}");
        let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["connection"], 1, "{args:?}: {line}");
    }
    let file = dir.path().join("handshake.json");
    let out = support::tlsscope(&[
        "handshake",
        &addr,
        "-n",
        "2",
        "--json",
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&file).unwrap().lines().count(), 2);

    // sniff: the old `--json -o FILE` and the new `--json FILE`, on curl's request.
    let url = format!("https://{addr}/");
    for (spelling, notice) in [(&["--json", "-o"][..], 1), (&["--json"], 0)] {
        let capture = dir.path().join(format!("sniff{notice}.jsonl"));
        let out = support::run_with_timeout(
            std::process::Command::new(support::bin())
                .arg("sniff")
                .args(spelling)
                .arg(&capture)
                .args(["--", "curl", "-sk", "-o", "/dev/null", &url]),
            Duration::from_secs(60),
        );
        assert!(out.status.success(), "{spelling:?}: {}", text(&out.stderr));
        assert_eq!(
            notices(&text(&out.stderr), "--json -"),
            notice,
            "{spelling:?}"
        );
        let written = std::fs::read_to_string(&capture).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(written.lines().next().unwrap_or_default()).unwrap();
        assert!(first["function"].is_string(), "{written}");
    }

    // profile: -o DIR is --out-dir DIR (it reaches the check of the PID).
    let out_dir = dir.path().join("profile");
    let gone = u32::MAX.to_string();
    for (spelling, notice) in [("-o", 1), ("--out-dir", 0)] {
        let out = support::tlsscope(&["profile", "-p", &gone, spelling, out_dir.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(notices(&err, "--out-dir DIR"), notice, "{err}");
        assert!(
            err.contains(&gone) && !err.contains("--out-dir <DIR>"),
            "{err}"
        );
    }

    // trace: -c NAME is --comm NAME.
    let libssl = support::system_libssl();
    let lib = libssl.to_str().unwrap();
    let out = support::tlsscope(&["trace", "--lib", lib, "-c", "a-name-longer-than-15"]);
    assert_error_after_notice(&out, "--comm NAME", &["--comm"]);
    let out = support::tlsscope(&["trace", "--lib", lib, "--comm", "a-name-longer-than-15"]);
    assert_one_line_error(&out, &["--comm"]);

    let stats = server.stop();
    // 3 bench runs of 7, one of 3 (each with its checking connection), 3 + 2 handshakes, 2 curls.
    assert_eq!(stats["handshakes"]["full"], 3 * 8 + 4 + 5 + 2, "{stats}");
}

/// The guides' IPv6 example works as shown: `serve --listen '[::1]:4433'` (docs/serve.md)
/// beside `bench '[::1]:4433'` (docs/bench.md), on a port of the server's choosing here, so
/// tests in parallel do not collide.
#[test]
fn the_guides_ipv6_example_pair_works() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let readme = ["serve.md", "bench.md"]
        .map(|guide| std::fs::read_to_string(docs.join(guide)).unwrap())
        .concat();
    let example = |start: &str| -> Vec<String> {
        let line = readme
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| {
                panic!("no line starting {start:?} in docs/serve.md or docs/bench.md")
            });
        let command = line.split(" #").next().unwrap();
        command
            .split_whitespace()
            .skip(1)
            .map(|w| w.trim_matches('\'').to_string())
            .collect()
    };
    let serve_line = example("tlsscope serve --listen '[::1]:4433'");
    let bench_line = example("tlsscope bench '[::1]:4433'");
    // The port the example names, swapped for port 0 in serve's line (the server says which
    // port it got) and for that port in bench's.
    let swapped = |args: &[String], port: &str| -> Vec<String> {
        args.iter().map(|a| a.replace("4433", port)).collect()
    };
    let serve_args = swapped(&serve_line, "0");
    let serve_args: Vec<&str> = serve_args[1..].iter().map(String::as_str).collect();
    let server = Serve::start(&serve_args);
    let port = server.port().to_string();
    assert_eq!(server.addr.to_string(), format!("[::1]:{port}"));
    let mut bench_args = swapped(&bench_line, &port);
    bench_args.extend(["-n", "20", "-c", "2"].map(String::from));
    let bench_args: Vec<&str> = bench_args.iter().map(String::as_str).collect();
    let out = support::tlsscope(&bench_args);
    assert!(
        out.status.success(),
        "{bench_args:?}: {}",
        text(&out.stderr)
    );
    let stats = server.stop();
    assert!(stats["requests"].as_u64().unwrap() >= 20, "{stats}");
}
