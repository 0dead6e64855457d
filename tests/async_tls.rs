//! Issue 18: the built-in server in async mode (`serve --async --async-engine`), loaded by real
//! clients and traced with exact outcomes.

use crate::support::{self, assert_one_line_error, Serve};
use crate::trace::{
    bench, calls, calls_per_op, n, one_at_a_time, s_client_closes, short_lab, Trace,
};

/// The built-in server on the build at `prefix`, async, with the dasync engine.
fn async_server(prefix: &std::path::Path) -> Serve {
    let lib = openssl(prefix);
    Serve::start_with(
        &["--openssl", &lib],
        &["--async", "--async-engine", "dasync"],
    )
}

/// `trace -p PID` on SSL_do_handshake with exact outcomes (async retries told apart).
fn handshake_trace(serve: &Serve) -> Trace {
    let pid = serve.pid().to_string();
    Trace::start(&[
        "-p",
        &pid,
        "--functions",
        "SSL_do_handshake",
        "--exact-outcomes",
    ])
}

/// A built library's `--openssl` argument.
fn openssl(prefix: &std::path::Path) -> String {
    prefix.to_str().unwrap().to_string()
}

// Issue 18.
#[test]
fn openssl_builds_keep_the_dasync_engine() {
    for prefix in [support::openssl_111w(), support::openssl_302()] {
        let engines: Vec<_> = std::fs::read_dir(prefix.join("lib"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.join("dasync.so").is_file())
            .collect();
        assert_eq!(
            engines.len(),
            1,
            "{}: no lib/engines-*/dasync.so",
            prefix.display()
        );
    }
}

// Issue 18.
#[test]
fn async_handshakes_on_1_1_1w_pause_at_every_rsa_signature() {
    let _one = one_at_a_time();
    let serve = async_server(support::openssl_111w());
    let trace = handshake_trace(&serve);
    // tlsscope's client (its check connection, then 40) and openssl s_client (one).
    bench(serve.addr, &["--mode", "full", "-n", "40", "-c", "4"]);
    s_client_closes(serve.addr);
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    let stats = serve.stop();
    let h = &stats["handshakes"];
    let handshakes = n(&h["full"]);
    assert_eq!(handshakes, 42, "{stats}");
    assert_eq!(n(&h["failed"]), 0, "{stats}");
    // Each handshake's RSA signature paused once as an async job: a WANT_ASYNC return, then
    // the call that finished it.
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    let paused = calls(&doc, "SSL_do_handshake", "retry_async");
    assert!(paused >= handshakes, "{paused} async retries: {stdout}");
    assert!(n(&h["async_waits"]) >= handshakes, "{stats}");
    assert!(stdout.contains("retry_async"), "{stdout}");
}

// Issue 18.
#[test]
fn async_mode_on_3_x_loads_dasync_and_serves_without_pausing() {
    let _one = one_at_a_time();
    let serve = async_server(support::openssl_302());
    let trace = handshake_trace(&serve);
    bench(serve.addr, &["--mode", "full", "-n", "20", "-c", "2"]);
    s_client_closes(serve.addr);
    bench(serve.addr, &["--mode", "keepalive", "-n", "50", "-c", "2"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    let stats = serve.stop();
    let handshakes = n(&stats["handshakes"]["full"]);
    // bench's check connection and 20; s_client; the keep-alive check and its 2 connections.
    assert_eq!(handshakes, 21 + 1 + 3, "{stats}");
    assert_eq!(n(&stats["handshakes"]["failed"]), 0, "{stats}");
    assert!(n(&stats["requests"]) >= 50, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    // 3.x's dasync pauses only in its SHA-1 digest, which libssl 3.x fetches by name from the
    // providers, so no TLS call waits here (the README says so; this keeps it true).
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "retry_async"),
        0,
        "{stdout}"
    );
    assert_eq!(n(&stats["handshakes"]["async_waits"]), 0, "{stats}");
}

// Issue 18.
#[test]
fn async_without_an_engine_changes_nothing_and_says_so() {
    let out = support::tlsscope(&["serve", "--async", "--listen", "127.0.0.1:0", "-d", "1s"]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let stderr = support::text(&out.stderr);
    assert!(
        stderr.contains("--async without --async-engine"),
        "{stderr}"
    );
    assert!(
        support::text(&out.stdout).contains("async (no engine: nothing pauses)"),
        "{}",
        support::text(&out.stdout)
    );
    // And handshakes go on as ever.
    let serve = Serve::start(&["--async"]);
    bench(serve.addr, &["--mode", "full", "-n", "10"]);
    let stats = serve.stop();
    assert_eq!(n(&stats["handshakes"]["full"]), 11, "{stats}");
    assert_eq!(n(&stats["handshakes"]["async_waits"]), 0, "{stats}");
}

// Issue 18.
#[test]
fn a_missing_async_engine_is_a_one_line_error() {
    let out = support::tlsscope(&[
        "serve",
        "--async",
        "--async-engine",
        "nosuch",
        "--listen",
        "127.0.0.1:0",
        "-d",
        "1s",
    ]);
    assert_one_line_error(&out, &["--async-engine nosuch", "engine nosuch is not in"]);
    let out = support::tlsscope(&[
        "serve",
        "--async",
        "--async-engine",
        "/nonexistent/engine.so",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_one_line_error(&out, &["/nonexistent/engine.so"]);
}

// Issue 18.
/// Kernel return probes on functions an async job pauses in would crash the server (the
/// kernel loses the return address when the job switches stacks): trace leaves them out.
#[test]
fn kernel_probes_stay_out_of_functions_async_jobs_pause_in() {
    let _one = one_at_a_time();
    let serve = async_server(support::openssl_111w());
    let pid = serve.pid().to_string();
    let out = support::tlsscope(&[
        "trace",
        "-p",
        &pid,
        "--backend",
        "kernel",
        "--functions",
        "EVP_DigestSign",
        "-d",
        "1s",
    ]);
    assert_one_line_error(&out, &["has a crypto engine loaded", "EVP_DigestSign"]);
    // Every group asked for: the crypto one is left out, said in a note.
    let trace = Trace::start(&["-p", &pid, "--backend", "kernel", "--exact-outcomes"]);
    bench(serve.addr, &["--mode", "full", "-n", "30", "-c", "4"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert!(stderr.contains("has a crypto engine loaded"), "{stderr}");
    assert_eq!(calls(&doc, "EVP_DigestSign", "success"), 0, "{stdout}");
    assert!(
        calls(&doc, "SSL_do_handshake", "retry_async") >= 31,
        "{stdout}"
    );
    // The server lived through it (a crash fails `stop`).
    let stats = serve.stop();
    assert_eq!(n(&stats["handshakes"]["full"]), 31, "{stats}");
}

// Issue 18.
/// The lab's async experiment on 1.1.1w: ssllatency's pattern, one or more async retries of
/// SSL_do_handshake per handshake, seen by both backends.
#[test]
fn lab_on_1_1_1w_runs_the_async_experiment_with_both_backends() {
    let _one = one_at_a_time();
    let lib = openssl(support::openssl_111w());
    let out = short_lab(&["--openssl", &lib], &[]);
    let text = support::text(&out.stdout);
    assert!(out.status.success(), "{text}{}", support::text(&out.stderr));
    assert!(!text.contains("not run:"), "{text}");
    let section = text
        .split("\n== ")
        .find(|s| s.starts_with("full handshakes, RSA-2048, TLS 1.3, async (dasync)"))
        .unwrap_or_else(|| panic!("no async experiment: {text}"));
    assert!(
        section.contains("crypto functions run inside async jobs"),
        "{section}"
    );
    let (row, per_handshake) = calls_per_op(section, "SSL_do_handshake       retry_async");
    assert_eq!(per_handshake.len(), 2, "both backends: {row}");
    for p in per_handshake {
        assert!(p >= 0.95, "at least one async retry per handshake: {row}");
    }
}

/// Issue 31: what a library lacks is refused in one line that names the flag, the library and
/// its version: ENGINE (gone in OpenSSL 4.0, never in AWS-LC or BoringSSL), async jobs (AWS-LC,
/// BoringSSL), and BoringSSL's fixed TLS 1.3 ciphersuites.
#[test]
fn features_a_library_lacks_are_refused_in_one_line_naming_it() {
    let serve = |prefix: &std::path::Path, args: &[&str]| {
        let mut all = vec!["--openssl", prefix.to_str().unwrap(), "serve"];
        all.extend(["--listen", "127.0.0.1:0"]);
        all.extend(args);
        support::tlsscope(&all)
    };
    let engine = ["--async", "--async-engine", "dasync"];
    for (prefix, name) in [
        (support::openssl_403(), "OpenSSL 4.0.3"),
        (support::openssl_aws_lc(), "AWS-LC 5."),
        (support::openssl_boringssl(), "BoringSSL API "),
    ] {
        assert_one_line_error(
            &serve(prefix, &engine),
            &[
                "serve --async-engine dasync: ",
                name,
                "has no ENGINE support",
            ],
        );
    }
    for (prefix, name) in [
        (support::openssl_aws_lc(), "AWS-LC 5."),
        (support::openssl_boringssl(), "BoringSSL API "),
    ] {
        let out = serve(prefix, &["--async"]);
        // The warning that no engine was given comes first; the refusal ends it.
        support::assert_error_line(&out, &["serve --async: ", name, "has no async job support"]);
    }
    assert_one_line_error(
        &serve(
            support::openssl_boringssl(),
            &["--ciphersuites", "TLS_AES_128_GCM_SHA256"],
        ),
        &["BoringSSL API ", "has no TLS 1.3 ciphersuite setting"],
    );
}
