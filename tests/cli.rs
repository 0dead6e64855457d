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
    // Under taskset the process may run on one CPU only; the machine still has the others.
    let last = (host_cpus() - 1).to_string();
    let out = support::run_with_timeout(
        std::process::Command::new("taskset")
            .args(["-c", "0"])
            .arg(support::bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--cpus",
                &last,
                "--duration",
                "0.2",
            ]),
        std::time::Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
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
    // Nothing listens on this port: find one by binding and closing.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("127.0.0.1:{port}");
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
fn issue_12_targets_take_names_urls_and_bracketed_ipv6() {
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

/// One duration type everywhere (10s, 500ms, 2m, or seconds), -d on serve too, and zero refused.
#[test]
fn issue_12_durations_are_one_type_and_zero_is_refused() {
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

/// -c is connections; trace and sniff name the thread filter --comm (-c still works, unlisted);
/// --resume is a flag in handshake, --resume-by picks bench's TLS 1.2 mechanism, and compare's
/// lists are --handshakes and --tls-versions (their old spellings still parse).
#[test]
fn issue_12_one_meaning_per_flag() {
    for cmd in ["trace", "sniff"] {
        let help = text(&support::tlsscope(&[cmd, "--help"]).stdout);
        assert!(help.contains("--comm <COMM>"), "{help}");
        assert!(!help.contains("-c,"), "{cmd}'s help still shows -c: {help}");
        // The old spelling is accepted: it fails only on what is wrong with the rest.
        let out = support::tlsscope(&[cmd, "-c", "curl"]);
        assert_one_line_error(&out, &["nothing to"]);
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

/// Ctrl-C ends every long-running command with 130, after writing what it has.
#[test]
fn issue_12_ctrl_c_exits_130_with_results_written() {
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
    // SAFETY: kill signals a child we started and have not reaped.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED));
    assert!(stats.exists(), "serve wrote its counters before exiting");
}

/// bench and lab end on SIGINT and SIGTERM as trace, sniff and serve do: 130 after Ctrl-C, 0
/// after SIGTERM (a requested stop), the results written either way.
#[test]
fn issue_12_bench_ends_on_signals_as_every_command_does() {
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

/// An OS error is said once, however many layers quote it.
#[test]
fn issue_12_the_os_reason_is_said_once() {
    let e = anyhow::Error::new(probes::Error::Process {
        pid: 7,
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    });
    let line = tlsscope::one_line(&e);
    assert_eq!(line.matches("os error 13").count(), 1, "{line}");
    let out = support::tlsscope(&[
        "serve",
        "--stats-json",
        "/nonexistent/dir/s.json",
        "-d",
        "1ms",
    ]);
    let err = text(&out.stderr);
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
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
