//! The command line itself: help, and one-line errors for bad input.

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
