//! `tlsscope serve` against real peers: openssl s_client, curl, and tlsscope's own client.

use std::path::Path;

use crate::support::{self, curl, s_client, text, Serve, GET_AND_CLOSE};

/// s_client verifies the generated certificate and sees the key type asked for; curl fetches
/// the page and a sized body; tlsscope's client reports the same key and signature.
fn serves_cert_type(cert_type: &str, key: &str, peer_sig_type: &str, sigalg: &str) {
    let server = Serve::start(&["--cert-type", cert_type]);
    let cert = server.cert();
    let cert_arg = cert.to_str().unwrap();

    let out = s_client(
        server.addr,
        &[
            "-CAfile",
            cert_arg,
            "-verify_return_error",
            "-verify_hostname",
            "localhost",
            "-brief",
        ],
        GET_AND_CLOSE,
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "s_client failed: {err}");
    assert!(err.contains("Verification: OK"), "{err}");
    assert!(
        err.contains(&format!("Signature type: {peer_sig_type}")),
        "{err}"
    );
    assert!(text(&out.stdout).contains("tlsscope built-in server"));

    let url = format!("https://localhost:{}/", server.port());
    let out = curl(&cert, &url, &[]);
    assert!(out.status.success(), "curl failed: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("tlsscope built-in server"));
    let url = format!("https://localhost:{}/bytes/100000", server.port());
    let out = curl(
        &cert,
        &url,
        &["-o", "/dev/null", "-w", "%{http_code} %{size_download}"],
    );
    assert_eq!(text(&out.stdout), "200 100000", "{}", text(&out.stderr));

    let out = support::tlsscope(&[
        "handshake",
        &server.addr.to_string(),
        "--json",
        "--cafile",
        cert_arg,
        "--sni",
        "localhost",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON line");
    assert_eq!(got["server_key"], key);
    assert_eq!(got["signature"], sigalg);
    assert_eq!(got["handshake"], "full");

    let stats = server.stop();
    // s_client, two curls and our client: four full handshakes, no failures.
    assert_eq!(stats["handshakes"]["full"], 4, "{stats}");
    assert_eq!(stats["handshakes"]["failed"], 0, "{stats}");
    assert_eq!(stats["responses"]["2xx"], 3, "{stats}");
}

#[test]
fn serves_rsa2048() {
    serves_cert_type("rsa2048", "RSA-2048", "RSA-PSS", "rsa_pss_rsae_sha256");
}

#[test]
fn serves_rsa3072() {
    serves_cert_type("rsa3072", "RSA-3072", "RSA-PSS", "rsa_pss_rsae_sha256");
}

#[test]
fn serves_rsa4096() {
    serves_cert_type("rsa4096", "RSA-4096", "RSA-PSS", "rsa_pss_rsae_sha256");
}

#[test]
fn serves_ecdsa_p256() {
    serves_cert_type(
        "ecdsa-p256",
        "ECDSA-P256",
        "ECDSA",
        "ecdsa_secp256r1_sha256",
    );
}

#[test]
fn serves_ecdsa_p384() {
    serves_cert_type(
        "ecdsa-p384",
        "ECDSA-P384",
        "ECDSA",
        "ecdsa_secp384r1_sha384",
    );
}

#[test]
fn serves_ed25519() {
    serves_cert_type("ed25519", "Ed25519", "ed25519", "ed25519");
}

/// Two s_client runs sharing a session file: the second must report reuse, and return the
/// server's counters.
fn s_client_resumes(
    global: &[&str],
    serve_args: &[&str],
    tls: &str,
) -> (String, serde_json::Value) {
    let server = Serve::start_with(global, serve_args);
    let sess = server.dir.path().join("session.pem");
    let sess = sess.to_str().unwrap();
    let first = s_client(server.addr, &[tls, "-sess_out", sess], GET_AND_CLOSE);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(
        text(&first.stdout).contains("New, "),
        "{}",
        text(&first.stdout)
    );
    let second = s_client(server.addr, &[tls, "-sess_in", sess], GET_AND_CLOSE);
    assert!(second.status.success(), "{}", text(&second.stderr));
    (text(&second.stdout), server.stop())
}

#[test]
fn resumes_tls12_by_session_id() {
    let (out, stats) = s_client_resumes(&[], &["--tickets", "off"], "-tls1_2");
    assert!(out.contains("Reused, TLSv1.2"), "{out}");
    let h = &stats["handshakes"];
    assert_eq!(
        (h["full"].as_u64(), h["resumed_session_id"].as_u64()),
        (Some(1), Some(1)),
        "{stats}"
    );
    assert_eq!(h["resumed_ticket"], 0, "{stats}");
}

#[test]
fn resumes_tls12_by_ticket() {
    let (out, stats) = s_client_resumes(&[], &["--session-cache", "off"], "-tls1_2");
    assert!(out.contains("Reused, TLSv1.2"), "{out}");
    let h = &stats["handshakes"];
    assert_eq!(
        (h["full"].as_u64(), h["resumed_ticket"].as_u64()),
        (Some(1), Some(1)),
        "{stats}"
    );
    assert_eq!(h["resumed_session_id"], 0, "{stats}");
}

/// AWS-LC and BoringSSL have no ticket-decryption hook: the server tells a TLS 1.2 ticket
/// resumption from a session-ID one by the ticket the ClientHello offered, and counts each as
/// what it was (the client, Debian's OpenSSL, says which it got).
#[test]
fn forks_count_tls12_ticket_and_session_id_resumptions_apart() {
    // (serve's settings, the kind the resumption must be counted as, the other kind)
    let ways = [
        (
            ["--session-cache", "off"],
            "resumed_ticket",
            "resumed_session_id",
        ),
        (["--tickets", "off"], "resumed_session_id", "resumed_ticket"),
    ];
    for prefix in [support::openssl_aws_lc(), support::openssl_boringssl()] {
        let global = ["--openssl", prefix.to_str().unwrap()];
        for (serve_args, counted, other) in &ways {
            let (out, stats) = s_client_resumes(&global, serve_args, "-tls1_2");
            let what = format!("{} {serve_args:?}", prefix.display());
            assert!(out.contains("Reused, TLSv1.2"), "{what}: {out}");
            let h = &stats["handshakes"];
            assert_eq!(
                (h["full"].as_u64(), h[*counted].as_u64()),
                (Some(1), Some(1)),
                "{what}: {stats}"
            );
            assert_eq!(h[*other], 0, "{what}: {stats}");
        }
    }
}

#[test]
fn resumes_tls13_by_ticket() {
    let (out, stats) = s_client_resumes(&[], &[], "-tls1_3");
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    let h = &stats["handshakes"];
    assert_eq!(
        (h["full"].as_u64(), h["resumed_ticket"].as_u64()),
        (Some(1), Some(1)),
        "{stats}"
    );
    assert_eq!(h["tls13"], 2, "{stats}");
}

#[test]
fn does_not_resume_with_cache_and_tickets_off() {
    for tls in ["-tls1_2", "-tls1_3"] {
        let server = Serve::start(&["--session-cache", "off", "--tickets", "off"]);
        // -reconnect: one connection, then five more offering the first one's session.
        let out = s_client(server.addr, &[tls, "-reconnect"], GET_AND_CLOSE);
        let stdout = text(&out.stdout);
        assert_eq!(stdout.matches("\nNew, ").count(), 6, "{tls}: {stdout}");
        assert_eq!(stdout.matches("\nReused, ").count(), 0, "{tls}: {stdout}");
        let stats = server.stop();
        let h = &stats["handshakes"];
        assert_eq!(h["full"], 6, "{tls}: {stats}");
        assert_eq!(
            h["resumed_ticket"].as_u64().unwrap() + h["resumed_session_id"].as_u64().unwrap(),
            0
        );
    }
}

#[test]
fn tlsscope_client_resumes_and_the_server_agrees() {
    let server = Serve::start(&[]);
    for tls in ["1.2", "1.3"] {
        let out = support::tlsscope(&[
            "handshake",
            &server.addr.to_string(),
            "--tls",
            tls,
            "-n",
            "3",
            "--resume",
            "--request",
            "/bytes/5000",
            "--json",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let lines: Vec<serde_json::Value> = text(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["handshake"], "full");
        for l in &lines[1..] {
            assert_eq!(l["handshake"], "resumed_ticket", "{l}");
            assert_eq!(l["version"], format!("TLSv{tls}"));
        }
        assert!(lines
            .iter()
            .all(|l| l["status"] == 200 && l["body_bytes"] == 5000));
    }
    let stats = server.stop();
    let h = &stats["handshakes"];
    assert_eq!(
        (h["full"].as_u64(), h["resumed_ticket"].as_u64()),
        (Some(2), Some(4)),
        "{stats}"
    );
    assert_eq!(
        (h["tls12"].as_u64(), h["tls13"].as_u64()),
        (Some(3), Some(3)),
        "{stats}"
    );
    assert_eq!(stats["requests"], 6, "{stats}");
    assert!(
        stats["bytes"]["written"].as_u64().unwrap() > 6 * 5000,
        "{stats}"
    );
}

#[test]
fn resume_fails_loudly_when_the_server_cannot_resume() {
    let server = Serve::start(&["--session-cache", "off", "--tickets", "off"]);
    let out = support::tlsscope(&["handshake", &server.addr.to_string(), "-n", "2", "--resume"]);
    support::assert_one_line_error(&out, &["--resume", "1 of 1"]);
    // The figures are still printed.
    assert_eq!(text(&out.stdout).lines().count(), 2);
    server.stop();
}

#[test]
fn stats_endpoint_reports_what_the_server_saw() {
    let server = Serve::start(&[]);
    let url = format!("https://localhost:{}/", server.port());
    let out = curl(
        &server.cert(),
        &url,
        &["-o", "/dev/null", "-o", "/dev/null", &url],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stats_url = format!(
        "https://localhost:{}/.well-known/tlsscope/stats",
        server.port()
    );
    let out = curl(&server.cert(), &stats_url, &[]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    // Two keep-alive requests on one connection, then the stats request on a second one.
    assert_eq!(stats["requests"], 3, "{stats}");
    assert_eq!(stats["connections"]["accepted"], 2, "{stats}");
    assert!(
        stats["library"].as_str().unwrap().starts_with("OpenSSL 3."),
        "{stats}"
    );
    server.stop();
}

#[test]
fn several_pinned_workers_share_the_port_and_the_counts() {
    let server = Serve::start(&["--threads", "2", "--cpus", "0,1"]);
    let out = support::tlsscope(&[
        "handshake",
        &server.addr.to_string(),
        "-n",
        "8",
        "--request",
        "/",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stats = server.stop();
    assert_eq!(stats["handshakes"]["full"], 8, "{stats}");
    assert_eq!(stats["requests"], 8, "{stats}");
    assert_eq!(stats["connections"]["closed"], 8, "{stats}");
}

#[test]
fn http_errors_and_keep_alive_pipelining() {
    let server = Serve::start(&[]);
    let pipelined = "GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /bytes/3 HTTP/1.1\r\nHost: x\r\n\r\n\
                     DELETE / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let out = s_client(server.addr, &["-quiet"], pipelined);
    let body = text(&out.stdout);
    assert!(body.contains("HTTP/1.1 404 Not Found"), "{body}");
    assert!(
        body.contains("Content-Length: 3\r\nConnection: keep-alive\r\n\r\nabc"),
        "{body}"
    );
    assert!(body.contains("HTTP/1.1 405 Method Not Allowed"), "{body}");
    let stats = server.stop();
    assert_eq!(stats["responses"]["4xx"], 2, "{stats}");
    assert_eq!(stats["responses"]["2xx"], 1, "{stats}");
}

#[test]
fn failed_handshakes_are_counted_with_their_reason() {
    let server = Serve::start(&["--tls", "1.3"]);
    let out = s_client(server.addr, &["-tls1_2"], "");
    assert!(!out.status.success());
    let stats = server.stop();
    assert_eq!(stats["handshakes"]["failed"], 1, "{stats}");
    let reasons = stats["handshakes"]["failure_reasons"].as_object().unwrap();
    assert!(reasons.keys().any(|r| r.contains("protocol")), "{stats}");
}

#[test]
fn serves_on_openssl_111w() {
    let prefix = support::openssl_111w().to_str().unwrap().to_string();
    let (out, stats) = s_client_resumes(&["--openssl", &prefix], &[], "-tls1_3");
    assert!(out.contains("Reused, TLSv1.3"), "{out}");
    assert!(
        stats["library"].as_str().unwrap().contains("1.1.1w"),
        "{stats}"
    );
    assert_eq!(stats["handshakes"]["resumed_ticket"], 1, "{stats}");

    // tlsscope's client on 1.1.1w against a 3.0 server: negotiated details from 1.1.1's getters.
    let server = Serve::start(&["--cert-type", "ecdsa-p256"]);
    let out = support::tlsscope(&[
        "--openssl",
        "1.1.1w",
        "handshake",
        &server.addr.to_string(),
        "--tls",
        "1.2",
        "--groups",
        "P-256",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(got["library"].as_str().unwrap().contains("1.1.1w"), "{got}");
    assert_eq!(got["group"], "secp256r1", "{got}");
    assert_eq!(got["signature"], "ecdsa_secp256r1_sha256", "{got}");
    assert_eq!(got["server_key"], "ECDSA-P256", "{got}");
    server.stop();
}

/// A `Connection: close` request whose body is still arriving when the response is sent: the
/// server reads the rest before closing, so the client can finish sending (found while
/// sniffing a 1 MiB upload: the server used to close and reset the connection).
#[test]
fn a_large_body_with_connection_close_is_read_before_closing() {
    let server = Serve::start(&[]);
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.create_default_context(cafile={cert:?})\n\
         s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname='localhost')\n\
         size = 1 << 20\n\
         s.sendall(b'POST / HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\nContent-Length: %d\\r\\n\\r\\n' % size)\n\
         s.sendall(b'x' * size)\n\
         reply = b''\n\
         while True:\n\
         \x20   chunk = s.recv(65536)\n\
         \x20   if not chunk: break\n\
         \x20   reply += chunk\n\
         assert reply.startswith(b'HTTP/1.1 200'), reply[:40]\n",
        cert = server.cert().display().to_string(),
        port = server.addr.port(),
    );
    support::python(&script);
    let stats = server.stop();
    assert_eq!(stats["requests"], 1, "{stats}");
}

/// A response that takes many turns of the worker (about 1 MiB each) is written without
/// waiting between turns: a connection that used up its turn used to wait for the next 100 ms
/// sweep (no epoll event comes for it), and 100 MB took about 10 s. The bound leaves a margin of
/// more than ten times the healthy time on this machine kind (0.05-0.3 s).
#[test]
fn a_long_response_is_written_without_waiting_between_turns() {
    let server = Serve::start(&["--threads", "1"]);
    let url = format!("https://localhost:{}/bytes/100000000", server.port());
    let started = std::time::Instant::now();
    let out = support::curl(
        &server.cert(),
        &url,
        &["-o", "/dev/null", "-w", "%{size_download}"],
    );
    let took = started.elapsed();
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    assert_eq!(support::text(&out.stdout).trim(), "100000000");
    assert!(
        took < std::time::Duration::from_secs(4),
        "100 MB took {took:?}: the connection waited between turns"
    );
    let stats = server.stop();
    assert_eq!(stats["requests"], 1, "{stats}");
}

/// Issue 31: a server on `prefix` (OpenSSL 4.0.3, AWS-LC or BoringSSL, named `name` and of
/// flavour `flavour`) serves full and resumed handshakes, TLS 1.3 and 1.2, to bench's two
/// engines (rustls, and the OpenSSL engine on the same library); every count bench reports is
/// the server's own, and both name the library.
fn flavour_serves_full_and_resumed_handshakes(prefix: &Path, name: &str, flavour: &str) {
    let prefix = prefix.to_str().unwrap();
    let serve = Serve::start_with(&["--openssl", prefix], &[]);
    let addr = serve.addr.to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("bench.json");
    let (mut full, mut resumed) = (0, 0);
    for (engine, global) in [("rustls", vec![]), ("openssl", vec!["--openssl", prefix])] {
        for tls in ["1.3", "1.2"] {
            for mode in ["full", "resume"] {
                let mut args = global.clone();
                args.extend([
                    "bench",
                    &addr,
                    "--client-engine",
                    engine,
                    "--tls",
                    tls,
                    "--mode",
                    mode,
                    "-n",
                    "20",
                    "-c",
                    "2",
                    "--json",
                    json.to_str().unwrap(),
                ]);
                let out = support::tlsscope(&args);
                let what = format!("{name} server, {engine} client, TLS {tls}, {mode}");
                assert!(out.status.success(), "{what}: {}", text(&out.stderr));
                let doc: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
                support::assert_matches_schema(&doc, "bench.v1");
                let h = &doc["result"]["handshakes"];
                let got_full = h["full"].as_u64().unwrap();
                let got_resumed = h["resumed_ticket"].as_u64().unwrap()
                    + h["resumed_session_id"].as_u64().unwrap();
                if mode == "full" {
                    assert_eq!((got_full, got_resumed), (20, 0), "{what}: {h}");
                } else {
                    // One full handshake per connection, then every offer resumed.
                    assert_eq!((got_full, got_resumed), (2, 18), "{what}: {h}");
                }
                if engine == "openssl" {
                    let client = doc["result"]["client"]["library"].as_str().unwrap();
                    assert!(client.starts_with(name), "{what}: {client}");
                    assert_eq!(doc["environment"]["library_flavour"], flavour, "{what}");
                }
                // The server also counts bench's check connection before each run.
                full += got_full + 1;
                resumed += got_resumed;
            }
        }
    }
    let stats = serve.stop();
    assert!(
        stats["library"].as_str().unwrap().starts_with(name),
        "{stats}"
    );
    assert_eq!(stats["library_flavour"], flavour, "{stats}");
    let h = &stats["handshakes"];
    let server_resumed =
        h["resumed_ticket"].as_u64().unwrap() + h["resumed_session_id"].as_u64().unwrap();
    assert_eq!(
        (
            h["full"].as_u64().unwrap(),
            server_resumed,
            h["failed"].as_u64().unwrap()
        ),
        (full, resumed, 0),
        "{stats}"
    );
}

#[test]
fn openssl_403_server_handshakes_are_counted_by_bench_and_server() {
    flavour_serves_full_and_resumed_handshakes(support::openssl_403(), "OpenSSL 4.0.3", "OpenSSL");
}

#[test]
fn aws_lc_server_handshakes_are_counted_by_bench_and_server() {
    flavour_serves_full_and_resumed_handshakes(support::openssl_aws_lc(), "AWS-LC 5.", "AWS-LC");
}

#[test]
fn boringssl_server_handshakes_are_counted_by_bench_and_server() {
    flavour_serves_full_and_resumed_handshakes(
        support::openssl_boringssl(),
        "BoringSSL API ",
        "BoringSSL",
    );
}
