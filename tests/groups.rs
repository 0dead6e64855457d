//! Post-quantum and hybrid key exchange as a setting (issue 31): `--groups` on serve, bench
//! (both engines) and handshake, against OpenSSL 3.5.5 and the system's 3.0, with 3.5.5's own
//! `openssl s_client` as the peer that says what was negotiated.

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, text, Serve};

/// 3.5.5's own `openssl s_client` (its build has an rpath to its libraries).
fn s_client_355(addr: std::net::SocketAddr, extra: &[&str]) -> Output {
    let openssl = support::openssl_355().join("bin/openssl");
    let mut cmd = Command::new(openssl);
    cmd.args(["s_client", "-connect", &addr.to_string()])
        .args(extra)
        .stdin(std::process::Stdio::null());
    support::run_with_timeout(&mut cmd, Duration::from_secs(30))
}

/// `tlsscope [global] bench https://ADDR --count N --json -` and its document.
fn bench(global: &[&str], addr: std::net::SocketAddr, extra: &[&str]) -> Value {
    let url = format!("https://{addr}");
    let mut args: Vec<&str> = global.to_vec();
    args.extend(["bench", &url, "--count", "20", "--json", "-"]);
    args.extend(extra);
    let out = support::tlsscope(&args);
    assert!(
        out.status.success(),
        "bench {extra:?}: {}",
        text(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    support::assert_matches_schema(&doc, "bench.v1");
    doc
}

/// The groups a bench run's handshakes used, one entry per distinct handshake.
fn negotiated_groups(doc: &Value) -> Vec<String> {
    doc["result"]["negotiated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["group"].as_str().unwrap_or("-").to_string())
        .collect()
}

fn prefix_355() -> String {
    support::openssl_355().to_str().unwrap().to_string()
}

#[test]
fn openssl_355_s_client_negotiates_x25519mlkem768_and_the_server_counts_it() {
    let p = prefix_355();
    let server = Serve::start_with(&["--openssl", &p], &[]);
    let out = s_client_355(server.addr, &["-groups", "X25519MLKEM768"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("Negotiated TLS1.3 group: X25519MLKEM768"),
        "{said}"
    );
    // tlsscope's own client on the same library names the group as s_client does.
    let out = support::tlsscope(&[
        "--openssl",
        &p,
        "handshake",
        &server.addr.to_string(),
        "--groups",
        "x25519mlkem768",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["group"], "X25519MLKEM768", "{got}");
    let stats = server.stop();
    let h = &stats["handshakes"];
    assert_eq!(h["full"], 2, "{stats}");
    assert_eq!(
        h["by_group"],
        serde_json::json!({"X25519MLKEM768": 2}),
        "{h}"
    );
}

#[test]
fn bench_with_both_engines_gets_hybrid_groups_from_a_35_server_and_names_the_provider() {
    let p = prefix_355();
    // SecP256r1MLKEM768 is not in 3.5's default server list: the server is given it.
    let server = Serve::start_with(
        &["--openssl", &p],
        &["--groups", "SecP256r1MLKEM768:X25519MLKEM768:x25519"],
    );
    for group in ["X25519MLKEM768", "SecP256r1MLKEM768"] {
        let rustls = bench(&[], server.addr, &["--groups", group]);
        let client = &rustls["result"]["client"];
        assert_eq!(client["engine"], "rustls", "{client}");
        assert_eq!(client["provider"], "aws-lc-rs", "{client}");
        assert!(
            client["library"]
                .as_str()
                .unwrap()
                .contains("(aws-lc-rs 1."),
            "{client}"
        );
        assert_eq!(negotiated_groups(&rustls), [group], "{rustls}");
        assert_eq!(rustls["result"]["handshakes"]["full"], 20);

        let openssl = bench(&["--openssl", &p], server.addr, &["--groups", group]);
        let client = &openssl["result"]["client"];
        assert_eq!(client["engine"], "openssl", "{client}");
        assert!(
            client["library"].as_str().unwrap().contains("3.5.5"),
            "{client}"
        );
        assert!(client.get("provider").is_none(), "{client}");
        assert_eq!(negotiated_groups(&openssl), [group], "{openssl}");
    }
    // Each bench first checks the target with one handshake of the library it loaded: 3.5.5
    // with the run's group, or, for rustls, the system's 3.0 with its own default (x25519).
    let stats = server.stop();
    assert_eq!(
        stats["handshakes"]["by_group"],
        serde_json::json!({"X25519MLKEM768": 41, "SecP256r1MLKEM768": 41, "x25519": 2}),
        "{stats}"
    );
}

#[test]
fn each_default_client_sends_its_library_s_default_groups() {
    let p = prefix_355();
    let server = Serve::start_with(&["--openssl", &p], &[]);
    // 3.5.5's client offers X25519MLKEM768 first (with an x25519 share beside it).
    let openssl = bench(&["--openssl", &p], server.addr, &[]);
    assert_eq!(negotiated_groups(&openssl), ["X25519MLKEM768"], "{openssl}");
    // The default rustls client stays on ring, whose groups are classic.
    let rustls = bench(&[], server.addr, &[]);
    assert_eq!(rustls["result"]["client"]["provider"], "ring");
    assert_eq!(negotiated_groups(&rustls), ["x25519"], "{rustls}");
    // On aws-lc-rs, rustls's own default order puts the hybrid first.
    let aws = bench(&[], server.addr, &["--rustls-provider", "aws-lc-rs"]);
    assert_eq!(aws["result"]["client"]["provider"], "aws-lc-rs");
    assert_eq!(negotiated_groups(&aws), ["X25519MLKEM768"], "{aws}");
    // Plus each bench's check of the target: 3.5.5's (the hybrid) and, for both rustls runs,
    // the system 3.0's (x25519).
    let stats = server.stop();
    assert_eq!(
        stats["handshakes"]["by_group"],
        serde_json::json!({"X25519MLKEM768": 41, "x25519": 22}),
        "{stats}"
    );
}

#[test]
fn the_system_openssl_30_refuses_a_hybrid_group_before_connecting() {
    // Nothing listens on port 1: an attempt to connect would fail differently.
    let refused = |out: &Output| {
        support::assert_one_line_error(
            out,
            &[
                "X25519MLKEM768",
                "OpenSSL 3.0.",
                "has no key exchange group",
            ],
        )
    };
    refused(&support::tlsscope(&[
        "handshake",
        "127.0.0.1:1",
        "--groups",
        "X25519MLKEM768",
    ]));
    refused(&support::tlsscope(&[
        "bench",
        "https://127.0.0.1:1",
        "--client-engine",
        "openssl",
        "--count",
        "1",
        "--groups",
        "X25519MLKEM768:x25519",
    ]));
    refused(&support::tlsscope(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--duration",
        "1s",
        "--groups",
        "X25519MLKEM768",
    ]));
    // A name that is no group at all is refused as such, listing the names.
    let out = support::tlsscope(&["handshake", "127.0.0.1:1", "--groups", "P-999"]);
    support::assert_one_line_error(&out, &["--groups P-999", "SecP384r1MLKEM1024"]);
}

#[test]
fn rustls_on_ring_refuses_post_quantum_groups_naming_aws_lc_rs() {
    let out = support::tlsscope(&[
        "bench",
        "https://127.0.0.1:1",
        "--count",
        "1",
        "--rustls-provider",
        "ring",
        "--groups",
        "X25519MLKEM768",
    ]);
    support::assert_one_line_error(
        &out,
        &[
            "--groups X25519MLKEM768",
            "rustls on ring",
            "--rustls-provider aws-lc-rs",
        ],
    );
}

#[test]
fn compare_runs_a_hybrid_group_where_the_library_has_it_and_says_why_not_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("compare.json");
    let p = prefix_355();
    let libraries = format!("system,{p}");
    let out = support::tlsscope(&[
        "compare",
        "--matrix",
        "--openssl",
        &libraries,
        "--groups",
        "X25519MLKEM768",
        "--experiment",
        "engine",
        "--repeat",
        "2",
        "--warmup",
        "0",
        "--json",
        json.to_str().unwrap(),
    ]);
    // One variant failed, so the run fails, after reporting the other.
    support::assert_error_line(&out, &["1 of 2 variants failed"]);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "compare.v1");
    let variants = doc["variants"].as_array().unwrap();
    let system = &variants[0];
    let error = system["error"].as_str().unwrap();
    assert!(
        error.contains("OpenSSL 3.0.")
            && error.contains("has no key exchange group X25519MLKEM768"),
        "{system}"
    );
    let v355 = &variants[1];
    assert!(v355["error"].is_null(), "{v355}");
    let groups: Vec<&str> = v355["negotiated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["group"].as_str().unwrap())
        .collect();
    assert_eq!(groups, ["X25519MLKEM768"], "{v355}");
}

#[test]
fn a_lean_client_completes_every_group_it_reuses_and_the_server_counts_each_handshake() {
    let p = prefix_355();
    let all = "x25519:secp256r1:secp384r1:X25519MLKEM768:SecP256r1MLKEM768:MLKEM768:MLKEM1024";
    let server = Serve::start_with(&["--openssl", &p], &["--groups", all]);
    let groups: Vec<&str> = all.split(':').collect();
    for group in &groups {
        let doc = bench(
            &[],
            server.addr,
            &["--groups", group, "--client-work", "lean"],
        );
        let client = &doc["result"]["client"];
        assert_eq!(client["work"], "lean", "{group}: {client}");
        assert!(
            client["library"]
                .as_str()
                .unwrap()
                .contains("key share reused"),
            "{client}"
        );
        assert_eq!(negotiated_groups(&doc), [*group], "{doc}");
        assert_eq!(doc["result"]["handshakes"]["full"], 20, "{group}: {doc}");
        assert_eq!(doc["result"]["errors_total"], 0, "{group}: {doc}");
    }
    // Each run's 20 handshakes, per group, and bench's own check of the target (on the
    // system's 3.0: the run's group where it has it, else x25519): the server completed
    // every exchange with the reused shares.
    let stats = server.stop();
    let by_group = &stats["handshakes"]["by_group"];
    for group in &groups {
        let lean = by_group[group].as_u64().unwrap_or(0);
        assert!(lean >= 20, "{group}: {stats}");
    }
    assert_eq!(stats["handshakes"]["full"], 7 * 21, "{stats}");
    assert_eq!(stats["handshakes"]["failed"], 0, "{stats}");
}

#[test]
fn a_lean_hybrid_offer_completes_on_its_classical_half_when_the_server_takes_only_that() {
    let p = prefix_355();
    let server = Serve::start_with(&["--openssl", &p], &["--groups", "x25519"]);
    let doc = bench(
        &[],
        server.addr,
        &["--groups", "X25519MLKEM768:x25519", "--client-work", "lean"],
    );
    assert_eq!(negotiated_groups(&doc), ["x25519"], "{doc}");
    let full = &doc["result"]["wire"]["full"];
    // Both shares were offered (the hybrid's X25519 half also stands alone), so the server
    // took the second without a HelloRetryRequest.
    assert_eq!(
        full["key_shares"][0]["groups"],
        serde_json::json!(["X25519MLKEM768", "x25519"]),
        "{full}"
    );
    assert_eq!(full["hello_retry_requests"], 0, "{full}");
    assert_eq!(server.stop()["handshakes"]["by_group"]["x25519"], 21);
}

#[test]
fn bench_runs_lean_by_default_and_full_when_it_verifies_the_server() {
    let server = Serve::start(&["--cert-type", "ecdsa-p256"]);
    let doc = bench(&[], server.addr, &[]);
    assert_eq!(doc["result"]["client"]["work"], "lean", "{doc}");
    let ca = server.cert();
    let doc = bench(
        &[],
        server.addr,
        &[
            "--verify",
            "--cafile",
            ca.to_str().unwrap(),
            "--sni",
            "localhost",
        ],
    );
    assert_eq!(doc["result"]["client"]["work"], "full", "{doc}");
    let doc = bench(&[], server.addr, &["--client-work", "full"]);
    assert_eq!(doc["result"]["client"]["work"], "full", "{doc}");
    let doc = bench(&[], server.addr, &["--client-engine", "openssl"]);
    assert!(doc["result"]["client"].get("work").is_none(), "{doc}");
}

#[test]
fn lean_is_refused_with_verification_and_with_an_openssl_client() {
    let server = Serve::start(&[]);
    let url = format!("https://{}", server.addr);
    for (args, says) in [
        (
            vec![
                "bench",
                &url,
                "-n",
                "5",
                "--client-work",
                "lean",
                "--verify",
            ],
            "--client-work lean",
        ),
        (
            vec![
                "bench",
                &url,
                "-n",
                "5",
                "--client-work",
                "lean",
                "--client-engine",
                "openssl",
            ],
            "--client-work",
        ),
        (
            vec![
                "compare",
                "--matrix",
                "--experiment",
                "load",
                "--client-engine",
                "rustls",
                "--client-work",
                "lean",
            ],
            "--verify off",
        ),
    ] {
        let out = support::tlsscope(&args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} ran");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_server_library_without_the_group_is_a_not_run_row_and_serve_exits_3() {
    // serve itself: a library that lacks what was asked exits 3, not 1.
    let out = support::tlsscope(&["serve", "--groups", "X25519MLKEM768", "-d", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    support::assert_error_line(&out, &["has no key exchange group X25519MLKEM768"]);

    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("compare.json");
    let libraries = format!("system,{}", prefix_355());
    let out = support::tlsscope(&[
        "--openssl",
        &libraries,
        "compare",
        "--matrix",
        "--side",
        "server",
        "--experiment",
        "load",
        "--server",
        "builtin,nginx",
        "--client-engine",
        "rustls",
        "--groups",
        "X25519MLKEM768",
        "--verify",
        "off",
        "-n",
        "20",
        "--repeat",
        "2",
        "--json",
        json.to_str().unwrap(),
    ]);
    // Nothing failed: the system's rows were not run, and say why.
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    support::assert_matches_schema(&doc, "compare.v1");
    for v in doc["variants"].as_array().unwrap() {
        let system = v["settings"]["openssl"] == "system";
        if system {
            let why = v["not_run"].as_str().unwrap_or_default();
            assert!(
                why.contains("has no key exchange group X25519MLKEM768"),
                "{v}"
            );
            assert!(v["error"].is_null(), "{v}");
        } else {
            assert!(v["error"].is_null() && v["not_run"].is_null(), "{v}");
            assert_eq!(v["negotiated"][0]["group"], "X25519MLKEM768", "{v}");
        }
    }
}
