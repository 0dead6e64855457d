//! Issue 11: tlsscope on a fresh machine. Tracefs is not mounted there, and tlsscope must not
//! depend on someone having mounted it by hand. Each test runs tlsscope through
//! `scripts/fresh-mounts` (a private mount namespace without tracefs or debugfs), whatever the
//! machine running the suite has mounted, and checks that nothing of the system's mounts changed.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::sniff::{contains, data, token, Sniff};
use crate::support::{self, Serve};
use crate::trace::{bench, calls, one_at_a_time, Trace};

/// A private mount namespace without tracefs, as on a fresh machine.
const FRESH: &[&str] = &["scripts/fresh-mounts"];
/// The same, where mounting is also denied (a locked-down container).
const LOCKED: &[&str] = &[
    "scripts/fresh-mounts",
    "python3",
    "tests/support/deny-mounts.py",
];

/// The tracefs and debugfs mounts this test process sees (the system's).
fn kernel_fs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter(|l| {
            let kind = l.split_whitespace().nth(2).unwrap_or("");
            kind == "tracefs" || kind == "debugfs"
        })
        .map(str::to_string)
        .collect()
}

fn assert_no_raw_libbpf(stderr: &str) {
    assert!(
        !stderr
            .lines()
            .any(|l| l.trim_start().starts_with("libbpf:")),
        "libbpf's raw log reached the terminal:\n{stderr}"
    );
}

fn curl_token(serve: &Serve, token: &str) {
    let url = format!("https://{}/{token}", serve.addr);
    let out = support::curl(&serve.cert(), &url, &[]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
}

/// The server's read of the request carrying `token`.
fn server_read_of(calls: &[Value], pid: u32, token: &str) -> Value {
    calls
        .iter()
        .find(|c| c["pid"] == pid && c["direction"] == "read" && contains(&data(c), token))
        .cloned()
        .unwrap_or_else(|| panic!("the server's read of {token} was not captured: {calls:#?}"))
}

// Issue 11.
#[test]
fn trace_splits_outcomes_and_sniff_shows_sockets_without_tracefs() {
    let _one = one_at_a_time();
    let system_mounts = kernel_fs_mounts();
    let serve = Serve::start(&["--threads", "1"]);
    let (server_pid, server_addr) = (serve.pid(), serve.addr);
    let pid = server_pid.to_string();
    let trace = Trace::start_in(FRESH, &["-p", &pid, "--probes", "handshake,io"], &[]);
    // -v: libbpf's own log is shown on request, and only then.
    let sniff = Sniff::start_in(FRESH, &["-v", "-p", &pid]);
    let token = token();
    curl_token(&serve, &token);
    bench(serve.addr, &["--mode", "full", "-n", "200", "-c", "4"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    let (code, sniff_stderr, sniffed) = sniff.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{sniff_stderr}");

    // Trace: tracefs was mounted in tlsscope's own namespace, said once, and the outcome split
    // is there: the non-blocking server's handshakes retry, then succeed.
    assert_eq!(
        stderr.matches("tracefs is not mounted").count(),
        1,
        "{stderr}"
    );
    assert_no_raw_libbpf(&stderr);
    let hooks = &doc["kernel_hooks"][0];
    assert_eq!(hooks["attached"], true, "{hooks}");
    assert!(
        hooks["detail"]
            .as_str()
            .unwrap()
            .contains("own mount namespace"),
        "{hooks}"
    );
    let handshakes: u64 = ["full", "resumed_session_id", "resumed_ticket"]
        .iter()
        .map(|k| stats["handshakes"][k].as_u64().unwrap_or(0))
        .sum();
    assert!(handshakes > 200, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    assert!(calls(&doc, "SSL_do_handshake", "retry") > 0, "{stdout}");
    assert_eq!(calls(&doc, "SSL_do_handshake", "unknown"), 0, "{stdout}");
    // Only library functions are listed as not traced.
    for m in doc["not_attached"].as_array().unwrap() {
        assert!(
            m["path"].as_str().unwrap().contains(".so"),
            "a kernel hook listed as a library function: {m}"
        );
    }

    // Sniff: the request's socket, with both ends.
    assert!(
        sniff_stderr.lines().any(|l| l.starts_with("libbpf: ")),
        "-v shows libbpf's log: {sniff_stderr}"
    );
    // The response to it: a write always makes its own syscall, so its socket is known (the
    // request itself may have been read ahead by the handshake, with no syscall of its own).
    let read = server_read_of(&sniffed, server_pid, &token);
    let response = sniffed
        .iter()
        .skip_while(|c| **c != read)
        .find(|c| c["pid"] == server_pid && c["tid"] == read["tid"] && c["direction"] == "write")
        .unwrap_or_else(|| panic!("no response after {read}"));
    let end = |k: &str| -> SocketAddr {
        response[k]
            .as_str()
            .unwrap_or_else(|| panic!("no {k} address in {response}"))
            .parse()
            .unwrap()
    };
    let (local, peer) = (end("local"), end("peer"));
    assert_eq!(local, server_addr, "{response}");
    assert!(
        peer.ip().is_loopback() && peer.port() != local.port(),
        "{response}"
    );
    assert!(response["fd"].as_i64().unwrap() > 2, "{response}");
    if let Some(fd) = read["fd"].as_i64() {
        assert_eq!(fd, response["fd"].as_i64().unwrap(), "{read}");
    }

    assert_eq!(
        kernel_fs_mounts(),
        system_mounts,
        "the system's mounts changed"
    );
}

// Issue 11.
#[test]
fn where_tracefs_cannot_be_mounted_trace_and_sniff_degrade_with_one_note() {
    let _one = one_at_a_time();
    let serve = Serve::start(&["--threads", "1"]);
    let server_pid = serve.pid();
    let pid = server_pid.to_string();
    let trace = Trace::start_in(LOCKED, &["-p", &pid, "--probes", "handshake,io"], &[]);
    let sniff = Sniff::start_in(LOCKED, &["-p", &pid]);
    let token = token();
    curl_token(&serve, &token);
    bench(serve.addr, &["--mode", "full", "-n", "100", "-c", "4"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    let (code, sniff_stderr, sniffed) = sniff.stop();
    let stats = serve.stop();

    // Trace runs, says once what is lost and how to get it back, and classes <= 0 returns
    // unknown instead of guessing.
    assert!(ok, "{stderr}");
    assert_no_raw_libbpf(&stderr);
    assert_eq!(
        stderr.matches("kernel hooks missing").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("--exact-outcomes"), "{stderr}");
    assert!(stdout.contains("kernel hooks missing"), "{stdout}");
    let hooks = &doc["kernel_hooks"][0];
    assert_eq!(hooks["attached"], false, "{hooks}");
    assert!(
        hooks["detail"].as_str().unwrap().contains("CAP_SYS_ADMIN"),
        "{hooks}"
    );
    let handshakes = stats["handshakes"]["full"].as_u64().unwrap();
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), handshakes);
    assert_eq!(calls(&doc, "SSL_do_handshake", "retry"), 0, "{stdout}");
    assert!(calls(&doc, "SSL_do_handshake", "unknown") > 0, "{stdout}");

    // Sniff still captures; the socket is unknown, and it says why once.
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{sniff_stderr}");
    assert_no_raw_libbpf(&sniff_stderr);
    assert_eq!(
        sniff_stderr.matches("kernel hooks missing").count(),
        1,
        "{sniff_stderr}"
    );
    let read = server_read_of(&sniffed, server_pid, &token);
    assert!(read["fd"].is_null(), "{read}");
    assert!(read["local"].is_null() && read["peer"].is_null(), "{read}");
}

// Issue 11.
#[test]
fn an_attach_the_kernel_refuses_names_libbpf_s_reason_in_one_line() {
    let _one = one_at_a_time();
    // A function that starts with int3: the kernel cannot place a uprobe on a breakpoint, and
    // says so when it installs the probe in a process that maps the file (ENOTSUPP).
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("int3.c");
    std::fs::write(
        &source,
        "#include <unistd.h>\n\
         __attribute__((naked, noinline)) int SSL_read(void) { __asm__(\"int3\\n\\tret\"); }\n\
         int main(void) { pause(); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("int3");
    let built = Command::new("gcc")
        .arg("-O0")
        .arg("-o")
        .arg(&exe)
        .arg(&source)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", support::text(&built.stderr));
    let mut program = Command::new(&exe).spawn().unwrap();
    let pid = program.id().to_string();
    let out = support::run_with_timeout(
        Command::new(support::bin()).args([
            "trace",
            "--binary",
            exe.to_str().unwrap(),
            "-p",
            &pid,
            "--functions",
            "SSL_read",
            "-d",
            "1s",
        ]),
        Duration::from_secs(60),
    );
    let _ = program.kill();
    let _ = program.wait();
    support::assert_one_line_error(&out, &["nothing to attach", "libbpf says", "ENOTSUPP"]);
}
