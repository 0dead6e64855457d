//! `tlsscope bench` against real servers: the built-in one, nginx, and openssl s_server. What
//! the client says it obtained is checked against what each server saw.

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::Value;

use crate::support::peers::{Nginx, NginxOpts, Protocols, SServer, SServerOpts};
use crate::support::{self, assert_one_line_error, text, Netns, Serve};

/// Runs `tlsscope bench` with `--json`, returns (exit success, stdout, stderr, JSON result).
fn bench(args: &[&str]) -> (bool, String, String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("result.json");
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--json", json_path.to_str().unwrap()]);
    let out = support::tlsscope(&all);
    let doc: Value = match std::fs::read(&json_path) {
        Ok(bytes) => serde_json::from_slice(&bytes).expect("bench JSON parses"),
        Err(_) => Value::Null,
    };
    if !doc.is_null() {
        assert_valid(&doc);
    }
    (
        out.status.success(),
        text(&out.stdout),
        text(&out.stderr),
        doc,
    )
}

/// Checks a bench document against the committed schema.
fn assert_valid(doc: &Value) {
    support::assert_matches_schema(doc, "bench.v1");
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn full_handshakes_on_the_builtin_server() {
    let server = Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("rows.csv");
    let addr = server.addr.to_string();
    let (ok, stdout, stderr, doc) = bench(&[
        &addr,
        "-n",
        "200",
        "-c",
        "4",
        "--csv",
        csv.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let r = &doc["result"];
    assert_eq!(n(&r["ops"]), 200);
    assert_eq!(n(&r["handshakes"]["full"]), 200);
    assert_eq!(
        n(&r["handshakes"]["resumed_ticket"]) + n(&r["handshakes"]["resumed_session_id"]),
        0
    );
    assert_eq!(r["negotiated"][0]["version"], "TLSv1.3");
    assert_eq!(r["negotiated"][0]["signature"], "rsa_pss_rsae_sha256");
    assert_eq!(r["negotiated"][0]["server_key"], "RSA-2048");
    assert_eq!(n(&r["latency"]["handshake"]["count"]), 200);
    assert!(stdout.contains("connections/user sec"), "{stdout}");
    assert!(stdout.contains("handshake"), "{stdout}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(
        rows.lines().count(),
        201,
        "header and one row per connection"
    );
    assert!(rows.lines().nth(1).unwrap().contains(",full,TLSv1.3,"));
    let stats = server.stop();
    // The run's 200 and the one connection that checked the target first.
    assert_eq!(stats["handshakes"]["full"], 201, "{stats}");
    assert_eq!(stats["handshakes"]["failed"], 0, "{stats}");
}

/// Issue 30, item 11: a target that dies mid-run was averaged over its dead seconds without a
/// word. The result dates the loss and gives the rate while it answered, and the operations
/// before it are the ones the server counted.
#[test]
fn a_target_that_dies_mid_run_is_dated_and_its_live_rate_given() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let bench = std::process::Command::new(support::bin())
        .args(["bench", &addr, "-d", "4s", "-c", "1", "--json"])
        .arg(&json)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1800));
    let stats = server.stop();
    let out = bench.wait_with_output().unwrap();
    let stdout = text(&out.stdout);
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_valid(&doc);
    let r = &doc["result"];
    let lost = r["target_lost_at_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{r}"));
    assert!((1.0..=3.0).contains(&lost), "{lost}");
    assert!(n(&r["errors_total"]) > 0);
    let ops = n(&r["ops"]);
    // The server also counted bench's check connection; one handshake may have been cut off.
    let served = n(&stats["handshakes"]["full"]) - 1;
    assert!(served.abs_diff(ops) <= 1, "bench {ops}, server {served}");
    let live = r["ops_per_s_while_up"].as_f64().unwrap();
    assert!(
        (live * lost - ops as f64).abs() < 0.5,
        "{live} x {lost} vs {ops}"
    );
    assert!(live > r["ops_per_s"].as_f64().unwrap());
    assert!(
        stdout.contains(&format!("the target stopped answering {lost} s into")),
        "{stdout}"
    );
}

/// "N connections in Xs; Y connections/user sec" -> (N, X, Y).
fn s_time_figures(line: &str) -> (f64, f64, f64) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |word: &str| words.iter().position(|w| *w == word).expect(line);
    let number = |w: &str| -> f64 {
        w.trim_end_matches([';', 's', ','])
            .parse()
            .unwrap_or_else(|_| panic!("{w} in {line}"))
    };
    let connections = number(words[at("connections") - 1]);
    let seconds = number(words[at("in") + 1]);
    let rate = number(words[at("connections/user") - 1]);
    (connections, seconds, rate)
}

/// Issue 30, item 8: s_time divides its connections by the client's user CPU seconds and
/// prints those seconds in its line; tlsscope printed wall seconds there, so its figures did not
/// divide. Both lines must divide the same way.
#[test]
fn the_s_time_line_divides_by_user_seconds_as_s_time_does() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let out = std::process::Command::new("openssl")
        .args(["s_time", "-connect", &addr, "-new", "-time", "2"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl s_time runs");
    let peer = text(&out.stdout);
    let line = peer
        .lines()
        .find(|l| l.contains("connections/user sec"))
        .unwrap_or_else(|| panic!("s_time printed no rate: {peer}"));
    let (n, seconds, rate) = s_time_figures(line);
    assert!(
        (n / seconds - rate).abs() <= rate * 0.01 + 0.5,
        "s_time's own line: {line}"
    );
    let (ok, stdout, stderr, doc) = bench(&[&addr, "-d", "2s", "-c", "1"]);
    assert!(ok, "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.contains("s_time line"))
        .unwrap_or_else(|| panic!("no s_time line: {stdout}"));
    let (n, seconds, rate) = s_time_figures(line);
    let user_s = doc["result"]["cpu"]["client_user_s"].as_f64().unwrap();
    assert!((seconds - user_s).abs() < 0.006, "{line} vs user {user_s}");
    // The seconds are printed to 1/100: allow that rounding in the division.
    assert!(
        (n / seconds - rate).abs() <= rate * (0.005 / seconds + 0.01),
        "{line}"
    );
    assert!(
        stdout.contains(&format!("{n} connections in ")) && stdout.contains("real seconds"),
        "{stdout}"
    );
}

#[test]
fn resumption_by_ticket_and_session_id_agrees_with_the_server() {
    // The group each engine names for its resumed handshakes, per TLS version.
    let mut resumed_groups: Vec<(String, String, Vec<Value>)> = Vec::new();
    // Each engine keeps and offers sessions its own way; both must say what the server did.
    for engine in ["rustls", "openssl"] {
        let server = Serve::start(&[]);
        let addr = server.addr.to_string();
        let e = ["--client-engine", engine];
        for tls in ["1.3", "1.2"] {
            let (ok, _, stderr, doc) = bench(&[
                &addr, "--mode", "resume", "--tls", tls, "-n", "100", "-c", "4", e[0], e[1],
            ]);
            assert!(ok, "{engine} {tls}: {stderr}");
            let r = &doc["result"];
            assert_eq!(r["client"]["engine"], engine);
            assert_eq!(
                n(&r["handshakes"]["full"]),
                4,
                "{engine} {tls}: the first handshake of each slot"
            );
            assert_eq!(n(&r["handshakes"]["resumed_ticket"]), 96, "{engine} {tls}");
            assert_eq!(r["resumption"]["ok"], true);
            assert_eq!(n(&r["resumption"]["offered"]), 96);
            let groups: Vec<Value> = r["negotiated"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|n| n["handshake"].as_str().unwrap().starts_with("resumed"))
                .map(|n| n["group"].clone())
                .collect();
            resumed_groups.push((engine.into(), tls.into(), groups));
        }
        let (ok, _, stderr, doc) = bench(&[
            &addr, "--mode", "resume", "--tls", "1.2", "--resume", "id", "-n", "50", "-c", "2",
            e[0], e[1],
        ]);
        assert!(ok, "{engine}: {stderr}");
        assert_eq!(
            n(&doc["result"]["handshakes"]["resumed_session_id"]),
            48,
            "{engine}"
        );
        let stats = server.stop();
        let h = &stats["handshakes"];
        assert_eq!(n(&h["resumed_ticket"]), 192, "{engine}: {stats}");
        assert_eq!(n(&h["resumed_session_id"]), 48, "{engine}: {stats}");
        assert_eq!(n(&h["full"]), 4 + 4 + 2 + 3, "{engine}: {stats}");
    }
    // Issue 30, item 9: the engines agree on the group of a resumed handshake. TLS 1.3
    // resumption (psk_dhe_ke) exchanges a key; a TLS 1.2 one exchanges none, so it has no group
    // (OpenSSL 3.x named the group of the session's first handshake).
    for tls in ["1.3", "1.2"] {
        let of = |engine: &str| -> &Vec<Value> {
            &resumed_groups
                .iter()
                .find(|(e, t, _)| e == engine && t == tls)
                .unwrap()
                .2
        };
        assert_eq!(of("rustls"), of("openssl"), "TLS {tls}: {resumed_groups:?}");
        let expected = if tls == "1.3" {
            Value::from("x25519")
        } else {
            Value::Null
        };
        assert!(
            of("openssl").iter().all(|g| *g == expected),
            "TLS {tls}: {resumed_groups:?}"
        );
    }
}

/// What one handshake obtained, as bench reports it: everything but the count.
fn obtained(doc: &Value) -> Vec<String> {
    let neg = doc["result"]["negotiated"].as_array().expect("negotiated");
    assert_eq!(neg.len(), 1, "one kind of handshake: {neg:?}");
    [
        "version",
        "cipher",
        "group",
        "signature",
        "server_key",
        "handshake",
    ]
    .iter()
    .map(|k| neg[0][*k].to_string())
    .collect()
}

// Issue 17.
#[test]
fn the_default_rustls_client_obtains_what_the_openssl_client_does() {
    for cert in ["ecdsa-p256", "rsa2048", "ed25519"] {
        let server = Serve::start(&["--cert-type", cert]);
        let addr = server.addr.to_string();
        for tls in ["1.3", "1.2"] {
            let (ok, stdout, stderr, rustls) = bench(&[&addr, "--tls", tls, "-n", "30", "-c", "2"]);
            assert!(ok, "{cert} {tls}: {stderr}");
            let client = &rustls["result"]["client"];
            assert_eq!(client["engine"], "rustls", "{cert} {tls}");
            assert!(
                client["library"]
                    .as_str()
                    .unwrap()
                    .starts_with("rustls 0.23."),
                "{client}"
            );
            assert!(stdout.contains("client rustls 0.23."), "{stdout}");
            let (ok, stdout, stderr, openssl) = bench(&[
                &addr,
                "--tls",
                tls,
                "-n",
                "30",
                "-c",
                "2",
                "--client-engine",
                "openssl",
            ]);
            assert!(ok, "{cert} {tls}: {stderr}");
            assert_eq!(openssl["result"]["client"]["engine"], "openssl");
            assert!(stdout.contains("client OpenSSL "), "{stdout}");
            // The same server work: version, suite, group, the server's signature and key.
            assert_eq!(obtained(&rustls), obtained(&openssl), "{cert} TLS {tls}");
            assert_eq!(n(&rustls["result"]["handshakes"]["full"]), 30);
        }
        let stats = server.stop();
        assert_eq!(n(&stats["handshakes"]["full"]), 4 * 31, "{cert}: {stats}");
    }
}

// Issue 17.
#[test]
fn a_setting_only_openssl_honours_picks_the_openssl_client_and_says_so() {
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    // The default: OpenSSL runs, and the result says why.
    let (ok, _, stderr, doc) = bench(&[
        &addr,
        "--tls",
        "1.2",
        "--ciphers",
        "HIGH:!aNULL",
        "-n",
        "10",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(doc["result"]["client"]["engine"], "openssl");
    assert!(
        stderr.contains("rather than the default rustls: --ciphers HIGH:!aNULL"),
        "{stderr}"
    );
    let warnings = doc["result"]["warnings"].to_string();
    assert!(warnings.contains("--ciphers HIGH"), "{warnings}");
    // Asked for by name: one line, naming the setting and the way out.
    let out = support::tlsscope(&[
        "bench",
        &addr,
        "--client-engine",
        "rustls",
        "--min-tls",
        "1.0",
        "-n",
        "10",
    ]);
    assert_one_line_error(
        &out,
        &[
            "--min-tls 1.0",
            "TLS 1.2 and 1.3 only",
            "--client-engine openssl",
        ],
    );
    // --openssl chooses an OpenSSL client: asking for rustls beside it is a contradiction.
    let lib = support::openssl_111w().to_str().unwrap().to_string();
    let out = support::tlsscope(&[
        "--openssl",
        &lib,
        "bench",
        &addr,
        "--client-engine",
        "rustls",
        "-n",
        "10",
    ]);
    assert_one_line_error(&out, &["--client-engine rustls and --openssl"]);
    // --openssl alone: that library's OpenSSL client, named in the result.
    let (ok, _, stderr, doc) = bench(&[&addr, "--openssl", &lib, "-n", "10"]);
    assert!(ok, "{stderr}");
    assert_eq!(doc["result"]["client"]["engine"], "openssl");
    let library = doc["result"]["client"]["library"].as_str().unwrap();
    assert!(library.starts_with("OpenSSL 1.1.1w"), "{library}");
    // An exact list rustls has is honoured by rustls.
    let (ok, _, stderr, doc) = bench(&[
        &addr,
        "--tls",
        "1.2",
        "--ciphers",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "--groups",
        "P-256",
        "-n",
        "10",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(doc["result"]["client"]["engine"], "rustls");
    let neg = &doc["result"]["negotiated"][0];
    assert_eq!(neg["cipher"], "ECDHE-RSA-AES128-GCM-SHA256", "{neg}");
    assert_eq!(neg["group"], "secp256r1", "{neg}");
    server.stop();
}

#[test]
fn resumption_ratio_mixes_full_and_resumed() {
    let server = Serve::start(&[]);
    let (ok, _, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--mode",
        "resume",
        "--resume-ratio",
        "0.5",
        "-n",
        "201",
        "-c",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let h = &doc["result"]["handshakes"];
    assert_eq!((n(&h["full"]), n(&h["resumed_ticket"])), (101, 100), "{h}");
    server.stop();
}

#[test]
fn resume_mode_fails_loudly_when_nothing_resumes() {
    let server = Serve::start(&["--session-cache", "off", "--tickets", "off"]);
    let (ok, stdout, stderr, doc) =
        bench(&[&server.addr.to_string(), "--mode", "resume", "-n", "20"]);
    assert!(!ok);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("--mode resume") && stderr.contains("resum"),
        "{stderr}"
    );
    assert!(
        stdout.contains("resumption   FAILED"),
        "figures still printed: {stdout}"
    );
    assert_eq!(
        doc["result"]["resumption"]["ok"], false,
        "figures still written"
    );
    server.stop();
}

#[test]
fn keepalive_requests_on_the_builtin_server() {
    let server = Serve::start(&[]);
    let (ok, _, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--mode",
        "keepalive",
        "-n",
        "500",
        "-c",
        "5",
        "-t",
        "2",
    ]);
    assert!(ok, "{stderr}");
    let r = &doc["result"];
    assert_eq!(n(&r["requests"]), 500);
    assert_eq!(n(&r["ops"]), 500);
    assert_eq!(
        n(&r["handshakes"]["total"]),
        5,
        "one handshake per connection"
    );
    assert_eq!(n(&r["http_status"]["200"]), 500);
    assert_eq!(n(&r["body_bytes"]), 500 * 623);
    assert_eq!(n(&r["latency"]["ttfb"]["count"]), 500);
    assert_eq!(r["cpu"]["thread_busy_pct"].as_array().unwrap().len(), 2);
    let stats = server.stop();
    assert_eq!(n(&stats["requests"]), 500, "{stats}");
    assert_eq!(
        n(&stats["connections"]["accepted"]),
        6,
        "five and the first check: {stats}"
    );
    // The client closed its idle connections with close_notify: no error on the server's side,
    // and no connection ended without one.
    assert_eq!(n(&stats["connections"]["errors"]), 0, "{stats}");
    assert_eq!(
        n(&stats["connections"]["closed_without_close_notify"]),
        0,
        "{stats}"
    );
}

#[test]
fn paced_runs_keep_to_the_rate_and_report_both_latencies() {
    let server = Serve::start(&[]);
    let pid = server.pid().to_string();
    let (ok, stdout, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--rate",
        "200",
        "-d",
        "2s",
        "-c",
        "8",
        "--server-pid",
        &pid,
    ]);
    assert!(ok, "{stderr}");
    let r = &doc["result"];
    let ops = n(&r["ops"]);
    assert!((360..=410).contains(&ops), "200/s for 2 s: {ops}");
    assert_eq!(r["rate_per_s"], 200.0);
    assert!(n(&r["latency"]["total_uncorrected"]["count"]) > 0);
    assert!(stdout.contains("uncorrected"), "{stdout}");
    let server_cpu = &r["cpu"]["server"];
    assert_eq!(server_cpu["pid"].as_u64().unwrap().to_string(), pid);
    assert!(
        server_cpu["busy_pct"].as_f64().unwrap() > 0.0,
        "{server_cpu}"
    );
    server.stop();
}

/// At a rate an idle server easily sustains, `total` (from each planned start) exceeds
/// `request` by the pacer's own lateness only, which is measured and reported: microseconds,
/// not the half millisecond that millisecond epoll timeouts used to add.
#[test]
fn paced_keepalive_charges_the_server_only_for_its_own_time() {
    let server = Serve::start(&[]);
    let (ok, stdout, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--mode",
        "keepalive",
        "--rate",
        "500",
        "-d",
        "2s",
        "-c",
        "4",
    ]);
    assert!(ok, "{stderr}");
    let l = &doc["result"]["latency"];
    let requests = n(&l["request"]["count"]);
    assert_eq!(n(&l["pacer_late"]["count"]), requests, "{l}");
    assert!(stdout.contains("pacer late"), "{stdout}");
    let p50 = |phase: &str| l[phase]["p50_us"].as_f64().unwrap();
    let added = p50("total") - p50("request");
    assert!(
        added < 300.0,
        "total p50 exceeds request p50 by {added} us: {l}"
    );
    assert!(p50("pacer_late") < 300.0, "{l}");
    server.stop();
}

#[test]
fn warmup_is_not_counted() {
    let server = Serve::start(&[]);
    let (ok, _, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--warmup",
        "1s",
        "-d",
        "1s",
        "-c",
        "2",
    ]);
    assert!(ok, "{stderr}");
    let measured = n(&doc["result"]["handshakes"]["full"]);
    let duration = doc["result"]["duration_s"].as_f64().unwrap();
    assert!((0.9..1.5).contains(&duration), "{duration}");
    let stats = server.stop();
    // The run ended on its deadline with connections in flight: they were finished, not
    // abandoned half-way, so the server saw no failed handshake.
    assert_eq!(n(&stats["handshakes"]["failed"]), 0, "{stats}");
    let seen = n(&stats["handshakes"]["full"]);
    assert!(
        seen > measured + 10,
        "the warm-up's handshakes happened but were not counted: {seen} vs {measured}"
    );
}

#[test]
fn errors_are_counted_by_kind_and_fail_the_run() {
    let server = Serve::start(&[]);
    let (ok, stdout, stderr, doc) = bench(&[
        &server.addr.to_string(),
        "--request",
        "/nope",
        "-n",
        "10",
        "-c",
        "1",
    ]);
    assert!(!ok);
    assert_eq!(n(&doc["result"]["errors"]["http 404"]), 10);
    assert!(stdout.contains("http 404: 10"), "{stdout}");
    assert!(
        stderr.contains("10 operations failed") && stderr.contains("http 404"),
        "{stderr}"
    );
    server.stop();

    // A server that goes away mid-run: refused connections are counted, not hidden.
    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let run = std::thread::spawn(move || bench(&[&addr, "-d", "2s", "-c", "2"]));
    std::thread::sleep(std::time::Duration::from_millis(700));
    server.stop();
    let (ok, _, stderr, doc) = run.join().unwrap();
    assert!(!ok, "{stderr}");
    let errors = doc["result"]["errors"].as_object().unwrap();
    assert!(errors.contains_key("refused"), "{errors:?}");
}

#[test]
fn bad_targets_and_options_are_one_line_errors() {
    let refusing = support::RefusingPort::new(false);
    let free = refusing.addr.to_string();
    let out = support::tlsscope(&["bench", &free, "-n", "1"]);
    assert_one_line_error(&out, &[&free, "refused"]);

    // A plain-text HTTP server on the port.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_addr = plain.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in plain.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let out = support::tlsscope(&["bench", &plain_addr, "-n", "1"]);
    assert_one_line_error(&out, &["TLS port"]);

    let server = Serve::start(&[]);
    let addr = server.addr.to_string();
    let cert = server.cert();
    let out = support::tlsscope(&[
        "bench",
        &addr,
        "-n",
        "1",
        "--cafile",
        cert.to_str().unwrap(),
        "--sni",
        "wrong.example",
    ]);
    assert_one_line_error(&out, &["verification failed", "hostname mismatch"]);
    let out = support::tlsscope(&[
        "bench",
        &addr,
        "-n",
        "1",
        "--tls",
        "1.2",
        "--ciphers",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
    ]);
    assert_one_line_error(&out, &["handshake failed"]);
    let out = support::tlsscope(&["bench", &addr, "--rate", "10"]);
    assert_one_line_error(&out, &["--rate", "--duration"]);
    let out = support::tlsscope(&["bench", &addr, "--resume", "id"]);
    assert_one_line_error(&out, &["--mode resume"]);
    let out = support::tlsscope(&["bench", &addr, "-d", "1s", "-n", "5"]);
    assert_one_line_error(&out, &["--duration", "cannot be used with", "--count"]);
    let out = support::tlsscope(&["bench", &addr, "-d", "soon"]);
    assert_one_line_error(&out, &["soon"]);
    let out = support::tlsscope(&["bench", &addr, "-c", "1", "-t", "2", "-n", "5"]);
    assert_one_line_error(&out, &["--connections"]);
    // More connections than the open-file limit (hard 2000 here) allows: one line, before
    // any connect, where it used to make tens of thousands of connect errors.
    let out = with_fd_limit(2000, 1000)
        .args(["bench", &addr, "-c", "100000", "-n", "10"])
        .output()
        .unwrap();
    assert_one_line_error(&out, &["-c 100000", "open files", "2000"]);
    // Under the hard limit: the soft one is raised to make room, and the run is clean.
    let out = with_fd_limit(2000, 256)
        .args(["bench", &addr, "-c", "600", "-n", "600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("errors       none"),
        "{}",
        text(&out.stdout)
    );
    server.stop();
}

/// tlsscope with its open-file limits set to (hard, soft) before it starts.
fn with_fd_limit(hard: u64, soft: u64) -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(support::bin());
    // SAFETY: the closure runs in the child between fork and exec and calls only setrlimit,
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

#[test]
fn nginx_sees_what_the_client_says() {
    // Full handshakes: nginx with its cache and tickets off, TLS 1.2 and 1.3.
    let nginx = Nginx::start(NginxOpts {
        session_cache: false,
        tickets: false,
        ..NginxOpts::default()
    });
    let addr = nginx.addr().to_string();
    for tls in ["1.2", "1.3"] {
        let (ok, _, stderr, doc) =
            bench(&[&addr, "--tls", tls, "--request", "/", "-n", "60", "-c", "3"]);
        assert!(ok, "{tls}: {stderr}");
        assert_eq!(n(&doc["result"]["handshakes"]["full"]), 60);
        assert_eq!(
            doc["result"]["negotiated"][0]["version"],
            format!("TLSv{tls}")
        );
    }
    let log = nginx.stop();
    assert_eq!(log.len(), 122, "two runs of 60 and their first checks");
    assert!(log
        .iter()
        .all(|l| !l.reused && l.connection_requests == 1 && l.status == 200));

    // Resumption: nginx's own $ssl_session_reused agrees with tlsscope's count.
    let nginx = Nginx::start(NginxOpts::default());
    let addr = nginx.addr().to_string();
    let (ok, _, stderr, doc) = bench(&[
        &addr,
        "--mode",
        "resume",
        "--tls",
        "1.3",
        "--request",
        "/",
        "-n",
        "80",
        "-c",
        "4",
    ]);
    assert!(ok, "{stderr}");
    let resumed = n(&doc["result"]["handshakes"]["resumed_ticket"]);
    assert_eq!(resumed, 76);
    let log = nginx.stop();
    assert_eq!(
        log.iter().filter(|l| l.reused).count() as u64,
        resumed,
        "nginx's count"
    );
    assert_eq!(log.len(), 81);

    // TLS 1.2, by ticket and by session ID.
    for (by, kind) in [("ticket", "resumed_ticket"), ("id", "resumed_session_id")] {
        let nginx = Nginx::start(NginxOpts::default());
        let addr = nginx.addr().to_string();
        let (ok, _, stderr, doc) = bench(&[
            &addr,
            "--mode",
            "resume",
            "--tls",
            "1.2",
            "--resume",
            by,
            "--request",
            "/",
            "-n",
            "40",
            "-c",
            "2",
        ]);
        assert!(ok, "{by}: {stderr}");
        assert_eq!(n(&doc["result"]["handshakes"][kind]), 38, "{by}");
        let log = nginx.stop();
        assert_eq!(
            log.iter().filter(|l| l.reused).count(),
            38,
            "{by}: nginx's count"
        );
        assert!(log.iter().all(|l| l.protocol == "TLSv1.2"));
    }

    // Keep-alive requests: nginx counts them per connection.
    let nginx = Nginx::start(NginxOpts {
        protocols: Protocols::Tls12And13,
        ..NginxOpts::default()
    });
    let (ok, _, stderr, doc) = bench(&[
        &nginx.addr().to_string(),
        "--mode",
        "keepalive",
        "-n",
        "300",
        "-c",
        "3",
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(n(&doc["result"]["requests"]), 300);
    let log = nginx.stop();
    assert_eq!(log.len(), 300);
    assert!(
        log.iter().any(|l| l.connection_requests >= 90),
        "requests share connections"
    );
}

#[test]
fn s_server_resumes_on_both_versions() {
    let s = SServer::start(SServerOpts::default());
    let addr = s.addr().to_string();
    for tls in ["1.2", "1.3"] {
        let (ok, _, stderr, doc) = bench(&[
            &addr,
            "--mode",
            "resume",
            "--tls",
            tls,
            "--request",
            "/",
            "-n",
            "30",
            "-c",
            "1",
        ]);
        assert!(ok, "{tls}: {stderr}");
        let r = &doc["result"];
        assert_eq!(n(&r["handshakes"]["full"]), 1, "{tls}");
        assert_eq!(n(&r["resumption"]["resumed"]), 29, "{tls}");
        assert_eq!(
            n(&r["http_status"]["200"]),
            30,
            "{tls}: s_server -www answers HTTP/1.0 and closes"
        );
    }
    s.stop();
}

/// A bench run inside a fresh namespace with 100 ephemeral ports and no TIME_WAIT reuse: the
/// client closes first, so each connection keeps its local port for a minute.
fn bench_with_100_ports(tag: &str, extra: &[&str]) -> (std::process::Output, Value) {
    let ns = Netns::new(tag);
    ns.run(&[
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.ip_local_port_range=40000 40099",
    ]);
    ns.run(&["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=0"]);
    // No tickets: a server that sends nothing after the handshake lets the client close with
    // a FIN (unread tickets would make the close a RST, which leaves no TIME_WAIT).
    let server = Serve::start_in(
        &ns.prefix(),
        &[],
        &["--session-cache", "off", "--tickets", "off"],
    );
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let mut cmd = std::process::Command::new("ip");
    cmd.args(&ns.prefix()[1..]).arg(support::bin());
    cmd.args([
        "bench",
        &server.addr.to_string(),
        "-c",
        "8",
        "--json",
        json.to_str().unwrap(),
    ]);
    let out = support::run_with_timeout(cmd.args(extra), std::time::Duration::from_secs(60));
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    server.stop();
    (out, doc)
}

#[test]
fn long_full_handshake_runs_do_not_run_out_of_local_ports() {
    // Once the kernel has no port left, connections move over 16 loopback sources: 1,000
    // connections fit where 100 ports would not.
    let (out, doc) = bench_with_100_ports("ports", &["-n", "1000"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(n(&doc["result"]["handshakes"]["full"]), 1000);
}

#[test]
fn running_out_of_local_ports_is_counted_not_hidden() {
    // From one source the ports run out: the run still ends on time and says why.
    let (out, doc) = bench_with_100_ports("noports", &["-d", "2s", "--source-ips", "1"]);
    assert!(!out.status.success());
    let errors = doc["result"]["errors"].as_object().unwrap();
    assert!(
        errors.contains_key("no local address or port left"),
        "{errors:?}"
    );
    assert!(text(&out.stderr).contains("no local address or port left"));
    assert!(
        n(&doc["result"]["handshakes"]["full"]) >= 90,
        "the ports there were got used"
    );
}

#[test]
fn client_certificates_for_servers_that_require_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    for (name, cn) in [("server", "localhost"), ("client", "tlsscope client")] {
        let out = support::run_with_timeout(
            std::process::Command::new("openssl").args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN={cn}"),
                "-keyout",
                &path(&format!("{name}.key")),
                "-out",
                &path(&format!("{name}.pem")),
            ]),
            std::time::Duration::from_secs(30),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let (mut server, addr) = crate::trace::listening_on_a_free_port("openssl s_server", |port| {
        std::process::Command::new("openssl")
            .args([
                "s_server",
                "-accept",
                &format!("127.0.0.1:{port}"),
                "-cert",
                &path("server.pem"),
            ])
            .args([
                "-key",
                &path("server.key"),
                "-Verify",
                "1",
                "-CAfile",
                &path("client.pem"),
                "-www",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    });
    let addr = addr.to_string();
    let (ok, _, stderr, doc) = bench(&[
        &addr,
        "--request",
        "/",
        "-n",
        "10",
        "-c",
        "1",
        "--cert",
        &path("client.pem"),
        "--key",
        &path("client.key"),
    ]);
    let without = support::tlsscope(&["bench", &addr, "--request", "/", "-n", "1"]);
    support::terminate(&mut server);
    let _ = server.wait();
    assert!(ok, "{stderr}");
    assert_eq!(n(&doc["result"]["http_status"]["200"]), 10);
    // The default engine presented the certificate (issue 17).
    assert_eq!(doc["result"]["client"]["engine"], "rustls");
    assert_one_line_error(&without, &["certificate required"]);
}

// Issue 17.
/// `--keylog` with the rustls engine: every secret the client logs is one the server logged
/// for the same connection (same label, client random and secret), in a file only root reads.
#[test]
fn the_rustls_client_logs_the_same_secrets_as_the_server() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let server_log = dir.path().join("server.keys");
    let client_log = dir.path().join("client.keys");
    let server = Serve::start(&["--keylog", server_log.to_str().unwrap()]);
    let addr = server.addr.to_string();
    for tls in ["1.3", "1.2"] {
        let (ok, _, stderr, doc) = bench(&[
            &addr,
            "--tls",
            tls,
            "-n",
            "5",
            "--keylog",
            client_log.to_str().unwrap(),
        ]);
        assert!(ok, "{stderr}");
        assert_eq!(doc["result"]["client"]["engine"], "rustls");
    }
    server.stop();
    let lines = |p: &std::path::Path| -> std::collections::BTreeSet<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    };
    let (ours, theirs) = (lines(&client_log), lines(&server_log));
    let mode = std::fs::metadata(&client_log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Two runs of 5 and their check connections: TLS 1.3 logs handshake and traffic secrets
    // per connection, TLS 1.2 its master secret.
    let count = |label: &str| ours.iter().filter(|l| l.starts_with(label)).count();
    assert_eq!(count("CLIENT_HANDSHAKE_TRAFFIC_SECRET "), 6, "{ours:#?}");
    assert_eq!(count("CLIENT_RANDOM "), 6, "{ours:#?}");
    for line in &ours {
        assert!(theirs.contains(line), "the server never logged {line}");
    }
}
