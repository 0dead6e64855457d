//! Where the kernel backend puts its probes (issue 13): on instructions the kernel emulates,
//! decided from the real libraries' code (Debian's libssl 3.0.x, a 1.1.1w and a 3.0.2 build),
//! and the same counts as probes at the entries under the same load.

use std::path::{Path, PathBuf};

use probes::{Groups, Placement, PlacementMode, Plan, Selection, Target};

use crate::support::{self, Serve};
use crate::trace::{bench, calls, one_at_a_time, Trace};

/// Every catalog function of `library` (and SSL_get_error), placed as `mode` says.
fn placements(library: &Path, mode: PlacementMode) -> Vec<(&'static str, Placement)> {
    let all = Selection::latency(Groups::all(), true);
    let plan = Plan::new(&[Target::Library(library.to_path_buf())], all)
        .unwrap()
        .with_placement(mode);
    plan.points
        .iter()
        .map(|p| (p.function.name, p.placement.clone()))
        .collect()
}

fn placement_of<'a>(placed: &'a [(&str, Placement)], name: &str) -> &'a Placement {
    &placed
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} not planned: {placed:?}"))
        .1
}

fn words(placed: &[(&str, Placement)]) -> String {
    placed
        .iter()
        .map(|(n, p)| {
            format!(
                "{n}: {}{}",
                p.name(),
                if p.emulated() {
                    ""
                } else {
                    " (single-stepped)"
                }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn libssl_of(prefix: &Path, file: &str) -> PathBuf {
    let path = prefix.join("lib").join(file);
    assert!(path.is_file(), "{} missing", path.display());
    path
}

/// The data calls go to their callee, SSL_do_handshake and SSL_shutdown stay at their
/// `push %rbx` entries, and `--placement entry` keeps every probe at the entry.
fn assert_openssl_placements(library: &Path) {
    let placed = placements(library, PlacementMode::Emulated);
    eprintln!("{}: {}", library.display(), words(&placed));
    for name in ["SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex"] {
        let p = placement_of(&placed, name);
        assert!(
            matches!(p, Placement::Callee(_)),
            "{name} in {}: {p:?}",
            library.display()
        );
    }
    // SSL_read and SSL_read_ex share their callee, each with its own return address.
    let (Placement::Callee(read), Placement::Callee(read_ex)) = (
        placement_of(&placed, "SSL_read"),
        placement_of(&placed, "SSL_read_ex"),
    ) else {
        unreachable!()
    };
    assert_eq!(read.probe_offset, read_ex.probe_offset);
    assert_ne!(read.return_delta, read_ex.return_delta);
    use probes::placement::ResultRule::*;
    // SSL_read returns the byte count the callee wrote through its fourth argument...
    assert_eq!(read.results, [OutInt, Callee, Callee]);
    // ...after a length check, whose failures never reach the callee.
    assert!(
        read.unseen
            .as_deref()
            .is_some_and(|u| u.contains("argument 3")),
        "{read:?}"
    );
    // SSL_read_ex turns a negative result into 0.
    assert_eq!(read_ex.results, [Callee, Callee, Constant(0)]);
    assert_eq!(read_ex.unseen, None);
    for name in ["SSL_do_handshake", "SSL_shutdown"] {
        assert_eq!(
            placement_of(&placed, name),
            &Placement::Entry { emulated: true },
            "{name}"
        );
    }
    let at_entry = placements(library, PlacementMode::Entry);
    assert!(
        at_entry
            .iter()
            .all(|(_, p)| matches!(p, Placement::Entry { .. })),
        "{}",
        words(&at_entry)
    );
    assert_eq!(
        placement_of(&at_entry, "SSL_do_handshake"),
        &Placement::Entry { emulated: true }
    );
    assert_eq!(
        placement_of(&at_entry, "SSL_read"),
        &Placement::Entry { emulated: false }
    );
}

#[test]
fn debian_s_libssl_data_calls_are_probed_at_their_callees() {
    assert_openssl_placements(&support::system_libssl());
}

#[test]
fn openssl_111w_data_calls_are_probed_at_their_callees() {
    assert_openssl_placements(&libssl_of(support::openssl_111w(), "libssl.so.1.1"));
}

#[test]
fn openssl_302_data_calls_are_probed_at_their_callees() {
    assert_openssl_placements(&libssl_of(support::openssl_302(), "libssl.so.3"));
}

/// Counts of one traced run: (function, outcome) -> calls, for the outcomes the load decides
/// (retries depend on when the client's bytes arrive, so they are left out).
fn settled_counts(doc: &serde_json::Value) -> Vec<(String, String, u64)> {
    let mut out: Vec<(String, String, u64)> = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] != "retry")
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                f["outcome"].as_str().unwrap().to_string(),
                f["summary"]["count"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn placement_at(doc: &serde_json::Value, function: &str) -> String {
    doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["function"] == function)
        .unwrap_or_else(|| panic!("{function} not attached"))["placement"]["at"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Traces the built-in server (on `global`'s OpenSSL) at `placement` under a fixed load;
/// checks the counts against the server's own, and returns the settled counts.
fn traced_run(global: &[&str], placement: &str) -> Vec<(String, String, u64)> {
    let serve = Serve::start_with(global, &["--threads", "1"]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&[
        "--backend",
        "kernel",
        "-p",
        &pid,
        "--probes",
        "handshake,io",
        "--exact-outcomes",
        "--placement",
        placement,
    ]);
    bench(serve.addr, &["--mode", "keepalive", "-n", "400", "-c", "4"]);
    bench(
        serve.addr,
        &["--mode", "full", "-n", "60", "-c", "2", "--request", "/"],
    );
    let (ok, stdout, stderr, doc) = trace.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    let expected_at = if placement == "entry" {
        "entry"
    } else {
        "callee"
    };
    assert_eq!(placement_at(&doc, "SSL_read"), expected_at, "{stdout}");
    assert_eq!(placement_at(&doc, "SSL_write"), expected_at, "{stdout}");
    let handshakes: u64 = ["full", "resumed_session_id", "resumed_ticket"]
        .iter()
        .map(|k| stats["handshakes"][k].as_u64().unwrap_or(0))
        .sum();
    let requests = stats["requests"].as_u64().unwrap();
    // 400 keep-alive requests and 60 with a connection each, plus bench's checks.
    assert!(requests > 400 + 60, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    let success = |f: &str| calls(&doc, f, "success");
    assert_eq!(
        success("SSL_write") + success("SSL_write_ex"),
        requests,
        "{stdout}"
    );
    assert_eq!(
        success("SSL_read") + success("SSL_read_ex"),
        requests,
        "{stdout}"
    );
    assert!(stdout.contains("placement: "), "{stdout}");
    settled_counts(&doc)
}

/// The same load counted at the entries and at emulated placements: the same calls, with
/// the same outcomes (SSL_get_error settling them, through the callee's SSL pointer).
fn same_counts_at_both_placements(global: &[&str]) {
    let _one = one_at_a_time();
    let emulated = traced_run(global, "emulated");
    let entry = traced_run(global, "entry");
    assert_eq!(emulated, entry, "emulated vs entry placement");
    assert!(
        emulated
            .iter()
            .any(|(f, o, _)| f == "SSL_read" && o == "closed"),
        "the clients' close_notify is seen: {emulated:?}"
    );
}

#[test]
fn emulated_and_entry_placements_count_the_same_on_debian_s_libssl() {
    same_counts_at_both_placements(&[]);
}

#[test]
fn emulated_and_entry_placements_count_the_same_on_openssl_111w() {
    let prefix = support::openssl_111w().to_str().unwrap();
    same_counts_at_both_placements(&["--openssl", prefix]);
}

#[test]
fn emulated_and_entry_placements_count_the_same_on_openssl_302() {
    let prefix = support::openssl_302().to_str().unwrap();
    same_counts_at_both_placements(&["--openssl", prefix]);
}

/// SSL_read alone probed at its callee, which SSL_read_ex calls too: Python's SSL_read_ex and
/// SSL_write_ex calls reach the same callees, and must not count as SSL_read and SSL_write
/// (with no other probe there, the caller is told at the callee's return). Counted per process:
/// the library is traced in every process, other tests' included.
#[test]
fn a_callee_s_other_callers_are_not_counted_as_the_probed_function() {
    let _one = one_at_a_time();
    let serve = Serve::start_with(&[], &["--threads", "1"]);
    let libssl = support::system_libssl();
    let trace = Trace::start(&[
        "--backend",
        "kernel",
        "--lib",
        libssl.to_str().unwrap(),
        "--functions",
        "SSL_read,SSL_write",
        "--placement",
        "emulated",
        "--per-pid",
    ]);
    // The built-in server reads and writes with SSL_read and SSL_write; Python with the _ex
    // calls, in three requests of its own.
    let pythons: Vec<u64> = (0..3)
        .map(|i| python_get(serve.addr, &serve.cert(), i))
        .collect();
    let (ok, stdout, stderr, doc) = trace.stop();
    let server = serve.pid();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    assert_eq!(placement_at(&doc, "SSL_read"), "callee", "{stdout}");
    assert_eq!(placement_at(&doc, "SSL_write"), "callee", "{stdout}");
    let count = |pid: u64, function: &str| -> u64 {
        doc["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["pid"] == pid && f["function"] == function && f["outcome"] == "success")
            .map(|f| f["summary"]["count"].as_u64().unwrap())
            .sum()
    };
    let requests = stats["requests"].as_u64().unwrap();
    assert_eq!(requests, 3, "{stats}");
    assert_eq!(count(u64::from(server), "SSL_write"), requests, "{stdout}");
    assert_eq!(count(u64::from(server), "SSL_read"), requests, "{stdout}");
    for pid in pythons {
        for function in ["SSL_read", "SSL_write"] {
            assert_eq!(
                count(pid, function),
                0,
                "python {pid}, {function}: {stdout}"
            );
        }
    }
}

/// One GET through Python's ssl module (SSL_write_ex, SSL_read_ex); returns its PID.
fn python_get(addr: std::net::SocketAddr, cert: &Path, i: usize) -> u64 {
    let script = format!(
        "import os, socket, ssl\n\
         ctx = ssl.create_default_context(cafile={cert:?})\n\
         s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname='localhost')\n\
         s.sendall(b'GET /?r={i} HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n')\n\
         assert s.recv(65536).startswith(b'HTTP/1.1 200')\n\
         print(os.getpid())\n",
        cert = cert.display().to_string(),
        port = addr.port(),
    );
    let out = support::python(&script);
    support::text(&out.stdout).trim().parse().unwrap()
}
