//! ML-DSA certificates (issue 31): served where the library signs with them (OpenSSL 3.5+),
//! verified by 3.5.5's OpenSSL engine, its own `openssl s_client` and rustls on aws-lc-rs;
//! refused in one line by the system's 3.0 and by rustls on ring.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::support::{self, text, Serve};

#[test]
fn ml_dsa_certificates_from_35_are_verified_by_its_engine_its_s_client_and_rustls_on_aws_lc_rs() {
    let p = support::openssl_355().to_str().unwrap().to_string();
    for (cert_type, key, scheme) in [
        ("ml-dsa-44", "ML-DSA-44", "mldsa44"),
        ("ml-dsa-65", "ML-DSA-65", "mldsa65"),
    ] {
        let server = Serve::start_with(&["--openssl", &p], &["--cert-type", cert_type]);
        let cert = server.cert();
        let cafile = cert.to_str().unwrap();
        let target = format!("localhost:{}", server.port());

        // 3.5.5's own s_client verifies the chain and the handshake signature.
        let out = support::run_with_timeout(
            Command::new(support::openssl_355().join("bin/openssl"))
                .args(["s_client", "-connect", &server.addr.to_string()])
                .args(["-servername", "localhost", "-verify_return_error"])
                .args(["-CAfile", cafile])
                .stdin(std::process::Stdio::null()),
            Duration::from_secs(30),
        );
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(said.contains("Verification: OK"), "{cert_type}: {said}");
        assert!(
            said.contains(&format!("Peer signature type: {scheme}")),
            "{cert_type}: {said}"
        );

        // tlsscope's OpenSSL engine on 3.5.5, verifying.
        let out = support::tlsscope(&[
            "--openssl",
            &p,
            "handshake",
            &target,
            "--cafile",
            cafile,
            "--json",
        ]);
        assert!(out.status.success(), "{cert_type}: {}", text(&out.stderr));
        let got: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(got["signature"], scheme, "{got}");
        assert_eq!(got["server_key"], key, "{got}");

        // rustls, verifying: an ML-DSA trust anchor puts it on aws-lc-rs.
        let url = format!("https://{target}");
        let out = support::tlsscope(&[
            "bench", &url, "--count", "10", "--cafile", cafile, "--json", "-",
        ]);
        assert!(out.status.success(), "{cert_type}: {}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        support::assert_matches_schema(&doc, "bench.v1");
        let r = &doc["result"];
        assert_eq!(r["client"]["provider"], "aws-lc-rs", "{}", r["client"]);
        assert_eq!(r["errors_total"], 0, "{r}");
        let n = &r["negotiated"][0];
        assert_eq!(
            (&n["signature"], &n["server_key"]),
            (&scheme.into(), &key.into()),
            "{n}"
        );

        // s_client, handshake, and bench's 10 (its check of the target, on the system's 3.0,
        // fails: 3.0 has no ML-DSA, and rustls's own check then passes).
        let stats = server.stop();
        assert_eq!(stats["handshakes"]["full"], 13, "{cert_type}: {stats}");
    }
}

#[test]
fn ml_dsa_is_refused_in_one_line_where_the_library_lacks_it() {
    let out = support::tlsscope(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--duration",
        "1s",
        "--cert-type",
        "ml-dsa-44",
    ]);
    support::assert_one_line_error(&out, &["OpenSSL 3.0.", "ml-dsa-44", "3.5"]);
}

#[test]
fn rustls_on_ring_refuses_ml_dsa_pointing_to_aws_lc_rs() {
    let p = support::openssl_355().to_str().unwrap().to_string();
    let server = Serve::start_with(&["--openssl", &p], &["--cert-type", "ml-dsa-44"]);
    let cert = server.cert();
    let url = format!("https://localhost:{}", server.port());
    // Verifying against an ML-DSA certificate: refused before connecting.
    let out = support::tlsscope(&[
        "bench",
        &url,
        "--count",
        "1",
        "--rustls-provider",
        "ring",
        "--cafile",
        cert.to_str().unwrap(),
    ]);
    support::assert_one_line_error(
        &out,
        &["ML-DSA-44", "rustls on ring", "--rustls-provider aws-lc-rs"],
    );
    // Not verifying: the server finds no signature scheme ring offers, and the check before
    // the run says where the fix is.
    let out = support::tlsscope(&["bench", &url, "--count", "1", "--client-engine", "rustls"]);
    support::assert_one_line_error(&out, &["handshake failure", "--rustls-provider aws-lc-rs"]);
    let stats = server.stop();
    assert_eq!(stats["handshakes"]["full"], 0, "{stats}");
}
