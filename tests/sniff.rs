//! `tlsscope sniff`: real uprobes on curl, nginx, Python's ssl module and gnutls-cli; what each
//! side wrote and read is checked byte for byte against what was sent, with the right sockets;
//! cuts, losses and every way out are checked; bad inputs.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::peers::{Nginx, NginxOpts};
use crate::support::{self, Serve};
use crate::trace::{one_at_a_time, program_ids_of};

/// A `tlsscope sniff --json -o FILE` running in the background, attached.
pub(crate) struct Sniff {
    child: Child,
    dir: tempfile::TempDir,
    stderr: Receiver<String>,
    lines: Vec<String>,
    programs: Vec<u32>,
}

impl Sniff {
    fn start(args: &[&str]) -> Sniff {
        Sniff::start_in(&[], args)
    }

    /// Like `start`, run through a command prefix that ends by exec'ing tlsscope.
    pub(crate) fn start_in(prefix: &[&str], args: &[&str]) -> Sniff {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("sniff.jsonl");
        let watched = support::start_until(
            support::command_in(prefix)
                .arg("sniff")
                .args(args)
                .arg("--json")
                .arg(&out)
                .stdout(Stdio::null()),
            " attached (",
            Duration::from_secs(60),
        );
        let programs = program_ids_of(watched.child.id());
        assert!(!programs.is_empty());
        Sniff {
            child: watched.child,
            dir,
            stderr: watched.lines,
            lines: watched.seen,
            programs,
        }
    }

    fn output(&self) -> PathBuf {
        self.dir.path().join("sniff.jsonl")
    }

    /// Stops it with SIGINT (Ctrl-C: exit 130 unless something was lost); returns the exit
    /// code, stderr, and the calls written.
    pub(crate) fn stop(self) -> (Option<i32>, String, Vec<Value>) {
        // Let the last calls through the ring buffer first.
        std::thread::sleep(Duration::from_millis(300));
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill signals a child we started and have not reaped.
        unsafe { libc::kill(pid, libc::SIGINT) };
        self.finish()
    }

    /// Waits for it to end by itself (after a signal already sent); like `stop` otherwise.
    fn finish(mut self) -> (Option<i32>, String, Vec<Value>) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "sniff did not stop"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        crate::trace::assert_unloaded(&self.programs, "after sniff");
        std::thread::sleep(Duration::from_millis(100));
        let mut stderr = self.lines.join("\n");
        for line in self.stderr.try_iter() {
            stderr.push('\n');
            stderr.push_str(&line);
        }
        // Captured plaintext is private: the -o file is created 0600.
        if let Ok(meta) = std::fs::metadata(self.output()) {
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "the -o file's mode"
            );
        }
        let text = std::fs::read_to_string(self.output()).unwrap_or_default();
        let calls = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("each line is JSON"))
            .collect();
        (status.code(), stderr, calls)
    }
}

impl Drop for Sniff {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The captured bytes of a call.
pub(crate) fn data(call: &Value) -> Vec<u8> {
    decode_base64(call["data_base64"].as_str().unwrap())
}

fn decode_base64(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in chunk {
            n = n << 6 | if c == b'=' { 0 } else { value(c) };
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    out
}

pub(crate) fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A token no other test's traffic carries (see `support::unique_token`).
pub(crate) fn token() -> String {
    support::unique_token()
}

#[test]
fn curl_to_nginx_both_sides_with_sockets_and_ports() {
    let _one = one_at_a_time();
    let nginx = Nginx::start(NginxOpts::default());
    let libssl = support::system_libssl();
    let pcap_dir = tempfile::tempdir().unwrap();
    let pcap = pcap_dir.path().join("plain.pcapng");
    let sniff = Sniff::start(&[
        "--lib",
        libssl.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ]);
    let token = token();
    let url = format!("https://{}/post-{token}", nginx.addr());
    // A curl with a comm of its own: libssl is probed in every process, other tests' curls
    // included.
    let curl = support::UniqueProgram::new("curl");
    let out = support::curl_as(
        curl.path(),
        &nginx.cert(),
        &url,
        &[
            "--tlsv1.3",
            "-X",
            "POST",
            "--data-binary",
            &format!("body={token}"),
        ],
    );
    assert!(
        out.status.code().is_some(),
        "{}",
        support::text(&out.stderr)
    );
    let (code, stderr, calls) = sniff.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");

    let find = |comm_pid: &dyn Fn(&Value) -> bool, direction: &str, needle: &str| -> Value {
        calls
            .iter()
            .find(|c| comm_pid(c) && c["direction"] == direction && contains(&data(c), needle))
            .cloned()
            .unwrap_or_else(|| panic!("no {direction} with {needle:?}: {calls:#?}"))
    };
    let is_curl = |c: &Value| c["comm"] == curl.comm();
    let is_nginx = |c: &Value| c["pid"] == nginx.pid();
    // The request, as curl wrote it and as nginx read it.
    let request_line = format!("POST /post-{token} HTTP/1.1");
    let curl_write = find(&is_curl, "write", &request_line);
    let nginx_read = find(&is_nginx, "read", &request_line);
    assert!(
        contains(&data(&nginx_read), &format!("body={token}"))
            || calls.iter().any(|c| is_nginx(c)
                && c["direction"] == "read"
                && contains(&data(c), &format!("body={token}")))
    );
    // The response, the other way.
    let nginx_write = find(&is_nginx, "write", "HTTP/1.1 ");
    let curl_read = find(&is_curl, "read", "HTTP/1.1 ");
    assert_eq!(data(&nginx_write)[..12], data(&curl_read)[..12]);
    // The sockets: nginx's local address is the server's, its peer is curl's local end.
    let addr = |c: &Value, k: &str| -> SocketAddr {
        c[k].as_str()
            .unwrap_or_else(|| panic!("no {k} in {c}"))
            .parse()
            .unwrap()
    };
    assert_eq!(addr(&nginx_read, "local"), nginx.addr());
    assert_eq!(addr(&curl_write, "peer"), nginx.addr());
    assert_eq!(addr(&curl_write, "local"), addr(&nginx_read, "peer"));
    assert_eq!(nginx_read["fd"], nginx_write["fd"]);
    assert!(nginx_read["fd"].as_i64().unwrap() > 2);
    assert!(curl_write["fd"].as_i64().unwrap() > 2);
    // The pcap: private too, and tshark's HTTP dissector reads the request in it.
    let mode = std::fs::metadata(&pcap).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let decode_as = format!("tcp.port=={},http", nginx.addr().port());
    let out = support::run_with_timeout(
        Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-d", &decode_as, "-Y", "http.request", "-T", "fields"])
            .args([
                "-e",
                "http.request.method",
                "-e",
                "http.request.uri",
                "-e",
                "http.file_data",
            ]),
        Duration::from_secs(60),
    );
    let fields = support::text(&out.stdout);
    assert!(
        out.status.success(),
        "tshark: {}",
        support::text(&out.stderr)
    );
    assert!(
        fields.contains(&format!("POST\t/post-{token}"))
            || fields.contains(&format!("POST	/post-{token}")),
        "tshark saw: {fields:?}"
    );
    assert!(fields.contains(&token), "{fields:?}");
    // Sizes are the real byte counts.
    for c in [&curl_write, &nginx_read, &nginx_write, &curl_read] {
        assert_eq!(n(&c["total_bytes"]), data(c).len() as u64, "{c}");
        assert_eq!(n(&c["uncaptured_bytes"]), 0);
    }
}

/// What one side's calls of one function in one direction did: calls that moved data, their
/// bytes, and calls that moved none.
#[derive(Debug, Default, PartialEq, Eq)]
struct Moved {
    calls: u64,
    bytes: u64,
    empty_calls: u64,
}

/// curl's four keep-alive requests to `serve`, for /r0-TOKEN to /r3-TOKEN; returns the token
/// (the same length for every `placement`, so that byte counts compare across runs).
fn curl_four_requests(serve: &Serve, placement: &str) -> String {
    let token = format!("tok{:010}{placement:_>8}", std::process::id());
    let urls: Vec<String> = (0..4)
        .map(|i| format!("https://{}/r{i}-{token}", serve.addr))
        .collect();
    let mut args = vec!["--http1.1"];
    args.extend(urls[..3].iter().map(String::as_str));
    let out = support::curl(&serve.cert(), &urls[3], &args);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    token
}

/// curl (SSL_read, SSL_write) and Python (SSL_read_ex, SSL_write_ex) to the built-in server,
/// sniffed in the kernel with the probes at `placement`: per (side, function, direction), what
/// moved, after checking every call's socket, count and result, and that the server read each
/// request with its token.
fn sniffed_exchange(placement: &str) -> (std::collections::BTreeMap<String, Moved>, String) {
    let serve = Serve::start(&[]);
    let libssl = support::system_libssl();
    let sniff = Sniff::start(&[
        "--lib",
        libssl.to_str().unwrap(),
        "--backend",
        "kernel",
        "--placement",
        placement,
    ]);
    let token = curl_four_requests(&serve, placement);
    python_post(serve.addr, &serve.cert(), &token, 3000);
    let (code, stderr, calls) = sniff.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let addr = |c: &Value, k: &str| -> Option<SocketAddr> { c[k].as_str()?.parse().ok() };
    let server = serve.pid();
    // Libssl is probed in every process: keep the server and its clients.
    let ours: Vec<&Value> = calls
        .iter()
        .filter(|c| c["pid"] == server || addr(c, "peer") == Some(serve.addr))
        .collect();
    let clients: Vec<SocketAddr> = ours
        .iter()
        .filter(|c| c["pid"] != server)
        .filter_map(|c| addr(c, "local"))
        .collect();
    let mut moved = std::collections::BTreeMap::<String, Moved>::new();
    for c in &ours {
        // The socket: the server's end of a client's connection, or the client's.
        let fd = c["fd"].as_i64().unwrap_or_else(|| panic!("no fd: {c}"));
        assert!(fd > 2, "{c}");
        if c["pid"] == server {
            assert_eq!(addr(c, "local"), Some(serve.addr), "{c}");
            let peer = addr(c, "peer").unwrap_or_else(|| panic!("no peer: {c}"));
            assert!(clients.contains(&peer), "{peer} is no client's: {c}");
        }
        // The count and the result: what the function returned, not its callee.
        let (total, ret) = (n(&c["total_bytes"]), c["ret"].as_i64().unwrap());
        let function = c["function"].as_str().unwrap();
        if total > 0 {
            assert_eq!(data(c).len() as u64, total, "{c}");
            let want = if function.ends_with("_ex") {
                1
            } else {
                total as i64
            };
            assert_eq!(ret, want, "{c}");
        } else {
            assert!(ret <= 0, "{c}");
        }
        let side = if c["pid"] == server {
            "server"
        } else {
            c["comm"].as_str().unwrap()
        };
        let key = format!("{side} {function} {}", c["direction"].as_str().unwrap());
        let m = moved.entry(key).or_default();
        if total > 0 {
            m.calls += 1;
            m.bytes += total;
        } else {
            m.empty_calls += 1;
        }
    }
    // The server read every request, token and all.
    for i in 0..4 {
        let line = format!("GET /r{i}-{token} HTTP/1.1");
        assert!(
            ours.iter().any(|c| c["pid"] == server
                && c["direction"] == "read"
                && contains(&data(c), &line)),
            "no read of {line:?}: {ours:#?}"
        );
    }
    // And Python's request and body (its token repeated).
    let with_token = ours
        .iter()
        .filter(|c| c["pid"] == server && c["direction"] == "read" && contains(&data(c), &token))
        .count();
    assert!(with_token >= 5, "{ours:#?}");
    (moved, stderr)
}

#[test]
fn callee_and_entry_placements_capture_the_same_calls() {
    let _one = one_at_a_time();
    let (entry, _) = sniffed_exchange("entry");
    let (emulated, stderr) = sniffed_exchange("emulated");
    // The exchange covers all four functions, on both sides.
    for key in [
        "server SSL_read read",
        "server SSL_write write",
        "curl SSL_write write",
        "python3 SSL_write_ex write",
        "python3 SSL_read_ex read",
    ] {
        assert!(
            entry.get(key).is_some_and(|m| m.calls > 0),
            "{key}: {entry:#?}"
        );
    }
    // Calls that moved no data (would-block retries) depend on timing; those that did not.
    let moving = |m: &std::collections::BTreeMap<String, Moved>| -> Vec<(String, u64, u64)> {
        m.iter()
            .map(|(k, v)| (k.clone(), v.calls, v.bytes))
            .collect()
    };
    assert_eq!(moving(&emulated), moving(&entry), "{stderr}");
    // It says where the probes are, and which calls a callee placement cannot see (SSL_read's
    // negative length check).
    assert!(
        stderr.contains("tlsscope sniff: placement: 5 of 5 functions on emulated instructions"),
        "{stderr}"
    );
    assert!(
        stderr.contains("SSL_read is probed at its callee"),
        "{stderr}"
    );
}

/// The built-in server on the OpenSSL build at `prefix`, sniffed in the kernel (-p) with the
/// probes at `placement`, while curl makes four keep-alive requests: per (function,
/// direction), the server's calls and bytes that moved, after checking each call's socket,
/// count and result, that every request was read with its token, and that each response was
/// written by one call.
fn sniffed_built_server(prefix: &std::path::Path, placement: &str) -> Vec<(String, u64, u64)> {
    let serve = Serve::start_with(
        &["--openssl", prefix.to_str().unwrap()],
        &["--threads", "1"],
    );
    let pid = serve.pid().to_string();
    let sniff = Sniff::start(&["-p", &pid, "--backend", "kernel", "--placement", placement]);
    let token = curl_four_requests(&serve, placement);
    let (code, stderr, calls) = sniff.stop();
    let (server, local) = (serve.pid(), serve.addr.to_string());
    let stats = serve.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let mut moved = std::collections::BTreeMap::<String, (u64, u64)>::new();
    for c in &calls {
        assert_eq!(c["pid"], server, "{c}");
        assert!(c["fd"].as_i64().is_some_and(|fd| fd > 2), "{c}");
        assert_eq!(c["local"].as_str(), Some(local.as_str()), "{c}");
        let (total, ret) = (n(&c["total_bytes"]), c["ret"].as_i64().unwrap());
        if total == 0 {
            assert!(ret <= 0, "{c}");
            continue;
        }
        // What the function returned, not its callee: SSL_read's count, SSL_read_ex's 1.
        let function = c["function"].as_str().unwrap();
        let want = if function.ends_with("_ex") {
            1
        } else {
            total as i64
        };
        assert_eq!(ret, want, "{c}");
        assert_eq!(data(c).len() as u64, total, "{c}");
        let key = format!("{function} {}", c["direction"].as_str().unwrap());
        let m = moved.entry(key).or_default();
        m.0 += 1;
        m.1 += total;
    }
    for i in 0..4 {
        let line = format!("GET /r{i}-{token} HTTP/1.1");
        assert!(
            calls
                .iter()
                .any(|c| c["direction"] == "read" && contains(&data(c), &line)),
            "no read of {line:?}: {calls:#?}"
        );
    }
    let writes: u64 = moved
        .iter()
        .filter(|(k, _)| k.ends_with(" write"))
        .map(|(_, m)| m.0)
        .sum();
    assert_eq!(
        writes,
        stats["requests"].as_u64().unwrap(),
        "{moved:?} {stats}"
    );
    moved.into_iter().map(|(k, (c, b))| (k, c, b)).collect()
}

/// Callee placement against entry placement, sniffing a server on a built OpenSSL.
fn same_capture_at_both_placements(prefix: &std::path::Path) {
    let _one = one_at_a_time();
    let entry = sniffed_built_server(prefix, "entry");
    let emulated = sniffed_built_server(prefix, "emulated");
    assert!(!entry.is_empty());
    assert_eq!(emulated, entry, "emulated vs entry placement");
}

#[test]
fn callee_and_entry_placements_capture_the_same_calls_on_openssl_111w() {
    same_capture_at_both_placements(support::openssl_111w());
}

#[test]
fn callee_and_entry_placements_capture_the_same_calls_on_openssl_302() {
    same_capture_at_both_placements(support::openssl_302());
}

/// Waits for `child` to exit on its own; panics after `limit`.
fn exits_within(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(start.elapsed() < limit, "{what} kept running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Python's ssl module writes a 1 MiB body with one SSL_write_ex.
fn python_post(addr: SocketAddr, cert: &std::path::Path, token: &str, size: usize) {
    python_post_as(std::path::Path::new("python3"), addr, cert, token, size);
}

/// Like `python_post`, with the python3 at `program`.
fn python_post_as(
    program: &std::path::Path,
    addr: SocketAddr,
    cert: &std::path::Path,
    token: &str,
    size: usize,
) {
    let script = format!(
        "import socket, ssl\n\
         ctx = ssl.create_default_context(cafile={cert:?})\n\
         s = ctx.wrap_socket(socket.create_connection(('127.0.0.1', {port})), server_hostname='localhost')\n\
         body = (b'{token}' * ({size} // {len} + 1))[:{size}]\n\
         s.sendall(b'POST / HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Length: {size}\\r\\n\\r\\n')\n\
         s.sendall(body)\n\
         assert s.recv(65536).startswith(b'HTTP/1.1 200')\n",
        cert = cert.display().to_string(),
        port = addr.port(),
        len = token.len(),
    );
    support::python_as(program, &script);
}

#[test]
fn a_one_mib_write_is_captured_whole_or_cut_exactly() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let libssl = support::system_libssl();
    let size = 1 << 20;
    // A python3 with a comm of its own: other tests run python3 at the same time, and their
    // calls would count among the cut ones.
    let python = support::UniqueProgram::new("python3");
    for (max_bytes, whole) in [("2000000", true), ("1000", false)] {
        let sniff = Sniff::start(&[
            "--lib",
            libssl.to_str().unwrap(),
            "--comm",
            python.comm(),
            "--max-bytes",
            max_bytes,
        ]);
        let token = token();
        python_post_as(python.path(), serve.addr, &serve.cert(), &token, size);
        let (code, stderr, calls) = sniff.stop();
        assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
        let body = calls
            .iter()
            .find(|c| c["direction"] == "write" && n(&c["total_bytes"]) == size as u64)
            .unwrap_or_else(|| panic!("no {size}-byte write: {calls:#?}"));
        let captured = data(body);
        if whole {
            assert_eq!(captured.len(), size);
            assert_eq!(n(&body["uncaptured_bytes"]), 0);
            let expected = token
                .as_bytes()
                .iter()
                .cycle()
                .take(size)
                .copied()
                .collect::<Vec<u8>>();
            assert!(
                captured == expected,
                "the captured body differs from what was sent"
            );
        } else {
            assert_eq!(captured.len(), 1000);
            assert_eq!(n(&body["uncaptured_bytes"]), size as u64 - 1000);
            assert!(stderr.contains("cut at --max-bytes: 1 call "), "{stderr}");
        }
    }
}

#[test]
fn a_gnutls_client_is_captured() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let lib = [
        "/usr/lib/x86_64-linux-gnu/libgnutls.so.30",
        "/lib/x86_64-linux-gnu/libgnutls.so.30",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("libgnutls30 (a dependency of gnutls-bin) is installed");
    let gnutls_cli = support::UniqueProgram::new("gnutls-cli");
    let sniff = Sniff::start(&["--lib", lib.to_str().unwrap(), "--comm", gnutls_cli.comm()]);
    let token = token();
    let request =
        format!("GET /gnutls-{token} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut child = gnutls_cli
        .command()
        .args([
            "--insecure",
            "--port",
            &serve.addr.port().to_string(),
            "127.0.0.1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gnutls-cli (Debian's gnutls-bin)");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        stdin.write_all(request.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(500));
    }
    let _ = child.wait();
    let (code, stderr, calls) = sniff.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let write = calls
        .iter()
        .find(|c| c["function"] == "gnutls_record_send" && contains(&data(c), &token))
        .unwrap_or_else(|| panic!("no gnutls_record_send with the token: {calls:#?}"));
    assert_eq!(write["peer"].as_str().unwrap(), serve.addr.to_string());
    assert!(calls
        .iter()
        .any(|c| c["function"] == "gnutls_record_recv" && contains(&data(c), "HTTP/1.1 404")));
}

/// NSS sends and receives through NSPR's generic `PR_Read`/`PR_Send`..., which tstclnt also
/// uses for its stdin and stdout: only the TLS socket's calls may be captured.
#[test]
fn an_nss_client_is_captured_on_its_tls_socket_only() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let lib = PathBuf::from("/usr/lib/x86_64-linux-gnu/libssl3.so");
    assert!(
        lib.exists(),
        "libnss3 (a dependency of libnss3-tools) is installed"
    );
    // A tstclnt with a comm of its own: tests/inproc runs tstclnt too, without the lock.
    let tstclnt = support::UniqueProgram::new("tstclnt");
    let sniff = Sniff::start(&["--lib", lib.to_str().unwrap(), "--comm", tstclnt.comm()]);
    let token = token();
    let request =
        format!("GET /nss-{token} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    // tstclnt reads the request from this file with PR_Read (stdin would leave it spinning
    // after the response), and prints the response with PR_Write.
    let dir = tempfile::tempdir().unwrap();
    let request_file = dir.path().join("request");
    std::fs::write(&request_file, &request).unwrap();
    let mut child = tstclnt
        .command()
        .args(["-h", "127.0.0.1", "-p", &serve.addr.port().to_string()])
        .args(["-D", "-o", "-A"])
        .arg(&request_file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tstclnt (Debian's libnss3-tools)");
    let status = exits_within(&mut child, Duration::from_secs(20), "tstclnt");
    let mut printed = Vec::new();
    std::io::Read::read_to_end(&mut child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(
        status.success() && contains(&printed, "HTTP/1.1 404"),
        "tstclnt ({status}) got no response: {}",
        String::from_utf8_lossy(&printed)
    );
    let (code, stderr, calls) = sniff.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    // The request: read from the file with PR_Read (not TLS), sent with PR_Send (TLS). Only the
    // latter is captured.
    let with_token: Vec<&Value> = calls
        .iter()
        .filter(|c| contains(&data(c), &token))
        .collect();
    assert_eq!(with_token.len(), 1, "{with_token:#?}");
    let write = with_token[0];
    assert_eq!(write["direction"], "write");
    assert!(write["function"] == "PR_Send" || write["function"] == "PR_Write");
    assert_eq!(write["peer"].as_str().unwrap(), serve.addr.to_string());
    // The response: received on the socket, then written to stdout with PR_Write (not TLS).
    let responses: Vec<&Value> = calls
        .iter()
        .filter(|c| contains(&data(c), "HTTP/1.1 404"))
        .collect();
    assert_eq!(responses.len(), 1, "{responses:#?}");
    assert_eq!(responses[0]["direction"], "read");
    // Every captured call is on the one socket.
    let socket = write["fd"].as_i64().unwrap();
    for c in &calls {
        assert_eq!(c["fd"].as_i64(), Some(socket), "{c:#}");
    }
}

#[test]
fn a_full_ring_buffer_reports_exactly_what_was_lost() {
    let _one = one_at_a_time();
    let serve = Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    // A one-page ring buffer and thousands of small calls: records must be lost.
    let sniff = Sniff::start(&["-p", &pid, "--ring-size", "4K"]);
    crate::trace::bench(
        serve.addr,
        &["--mode", "keepalive", "-n", "3000", "-c", "8"],
    );
    let (code, stderr, calls) = sniff.stop();
    assert_eq!(code, Some(3), "lost events make a non-zero exit: {stderr}");
    let summary_number = |prefix: &str| number_after(&stderr, prefix);
    let seen = summary_number("(signal): ");
    let lost = summary_number("lost (ring buffer full): ");
    assert!(lost > 0, "{stderr}");
    // Every call the probes saw was either written whole or counted as lost.
    let whole = calls.iter().filter(|c| c["incomplete"] == false).count() as u64;
    assert_eq!(whole + lost, seen, "{stderr}");
    // The losses are in the stream too, where they happened.
    let in_stream: u64 = calls.iter().filter_map(|c| c["lost_calls"].as_u64()).sum();
    assert_eq!(in_stream, lost, "{stderr}");
}

#[test]
fn every_way_out_detaches_and_summarizes() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    for (signal, exit) in [(libc::SIGINT, crate::EXIT_INTERRUPTED), (libc::SIGTERM, 0)] {
        let sniff = Sniff::start(&["-p", &pid]);
        let child_pid = i32::try_from(sniff.child.id()).unwrap();
        let programs = sniff.programs.clone();
        // SAFETY: kill signals a child we started.
        unsafe { libc::kill(child_pid, signal) };
        let (code, stderr, _) = sniff.finish();
        assert_eq!(code, Some(exit), "{stderr}");
        assert!(stderr.contains("stopped after"), "{stderr}");
        crate::trace::assert_unloaded(&programs, "signal");
    }
    // SIGKILL: no code of ours runs; the kernel drops the probes and programs with the
    // process's files (`finish` checks the programs are gone).
    let sniff = Sniff::start(&["-p", &pid]);
    // SAFETY: kill signals a child we started.
    unsafe { libc::kill(i32::try_from(sniff.child.id()).unwrap(), libc::SIGKILL) };
    let (code, _, _) = sniff.finish();
    assert_eq!(code, None, "killed by a signal");
    // The output pipe closed (`tlsscope sniff | head`).
    let watched = support::start_until(
        Command::new(support::bin())
            .args(["sniff", "-p", &pid])
            .stdout(Stdio::piped()),
        " attached (",
        Duration::from_secs(60),
    );
    let (mut child, rx) = (watched.child, watched.lines);
    let programs = program_ids_of(child.id());
    drop(child.stdout.take());
    let target = serve.addr.to_string();
    let _ = support::tlsscope(&["handshake", &target, "--request", "/"]);
    let status = exits_within(
        &mut child,
        Duration::from_secs(30),
        "sniff on a closed pipe",
    );
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("output closed")), "{rest:?}");
    crate::trace::assert_unloaded(&programs, "closed pipe");
    // The sniffed process exits.
    let sniff = Sniff::start(&["-p", &pid]);
    let programs = sniff.programs.clone();
    serve.stop();
    let start = Instant::now();
    let mut sniff = sniff;
    while sniff.child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "sniff outlived its process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    crate::trace::assert_unloaded(&programs, "process exit");
}

/// The number after `prefix` in `text`.
fn number_after(text: &str, prefix: &str) -> u64 {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?}: {text}"));
    text[at + prefix.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {prefix:?}: {text}"))
}

/// A full disk ends the capture with one clear line, and the summary counts as shown only the
/// calls the file holds whole; the rest it says were not written, and why (issue 30: it
/// claimed every call "shown").
#[test]
fn a_full_disk_stops_the_capture_and_the_summary_counts_what_the_file_holds() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    // A 64 KiB file system of our own, filled by the stream.
    let dir = tempfile::tempdir().unwrap();
    let mount = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            "size=64k",
            "tlsscope-test",
            dir.path().to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(mount.success(), "mounting a tmpfs (tests run as root)");
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let file = dir.path().join("stream.jsonl");
    let watched = support::start_until(
        Command::new(support::bin())
            .args(["sniff", "-p", &pid, "--json", "-o", file.to_str().unwrap()])
            .stdout(Stdio::null()),
        " attached (",
        Duration::from_secs(60),
    );
    let programs = program_ids_of(watched.child.id());
    let mut child = watched.child;
    crate::trace::bench(
        serve.addr,
        &["--mode", "keepalive", "-n", "2000", "-c", "2"],
    );
    let status = exits_within(&mut child, Duration::from_secs(30), "sniff on a full disk");
    let stderr: Vec<String> = watched.lines.try_iter().collect();
    assert_eq!(status.code(), Some(1), "{stderr:?}");
    let last = stderr.last().cloned().unwrap_or_default();
    assert!(
        last.starts_with("tlsscope: error:") && last.contains("no space left"),
        "{stderr:?}"
    );
    crate::trace::assert_unloaded(&programs, "full disk");
    // What the file holds: whole JSON lines (a call each), then perhaps the start of one.
    let held = std::fs::read(&file).unwrap();
    let whole_lines = held
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| l.ends_with(b"\n") && !l.starts_with(b"{\"lost_calls\""))
        .count() as u64;
    let text = stderr.join("\n");
    let seen: u64 = text
        .split(" calls seen by the probes")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no calls seen: {text}"));
    let received = number_after(&text, "calls seen by the probes, ");
    let shown = number_after(&text, " received; ");
    assert_eq!(shown, whole_lines, "{text}");
    let unwritten = number_after(&text, "not written: ");
    let unread = number_after(&text, "calls received and ");
    let ring_lost = number_after(&text, "lost (ring buffer full): ");
    assert!(unwritten > 0, "{text}");
    assert_eq!(shown + unwritten, received, "{text}");
    assert_eq!(received + unread + ring_lost, seen, "{text}");
    assert_eq!(
        number_after(&text, "the output holds the "),
        shown,
        "{text}"
    );
    let bytes_prefix = format!("the output holds the {shown} shown, ");
    assert_eq!(
        number_after(&text, &bytes_prefix),
        held.len() as u64,
        "{text}"
    );
    assert!(text.contains("no space left on the device"), "{text}");
}

#[test]
fn bad_inputs_get_one_line_errors() {
    let run = |args: &[&str]| {
        let mut all = vec!["sniff"];
        all.extend_from_slice(args);
        support::tlsscope(&all)
    };
    support::assert_one_line_error(&run(&[]), &["nothing to sniff"]);
    support::assert_one_line_error(
        &run(&["-p", "999999999"]),
        &["no process with PID 999999999"],
    );
    support::assert_one_line_error(&run(&["-p", "1", "--ring-size", "1000"]), &["power of two"]);
    support::assert_one_line_error(&run(&["-p", "1", "--max-bytes", "0"]), &["--max-bytes"]);
    support::assert_one_line_error(&run(&["-p", "1", "--hex", "--json", "-"]), &["--json"]);
    support::assert_one_line_error(
        &run(&["-p", "1", "--placement", "callee"]),
        &["unknown placement 'callee'"],
    );
    let out = support::run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(support::bin())
            .args(["sniff", "-p", "1"]),
        Duration::from_secs(30),
    );
    support::assert_one_line_error(&out, &["needs root"]);
}

/// Issue 31: the built-in server on `prefix` (OpenSSL 4.0.3, AWS-LC or BoringSSL), sniffed by
/// `backend` (kernel: attached to the running server; user: the server started under sniff)
/// while bench makes five connections of one request each: every connection that carried a
/// request shows that whole request read and one whole response written, and there are as
/// many as the server counted requests.
fn a_flavour_server_is_sniffed_whole(prefix: &std::path::Path, backend: &str) {
    let _one = one_at_a_time();
    let prefix = prefix.to_str().unwrap();
    let path = "/bytes/1234";
    let bench_args = ["--mode", "full", "-n", "5", "-c", "1", "--request", path];
    let (calls, stderr, requests, handshakes) = if backend == "kernel" {
        let serve = Serve::start_with(&["--openssl", prefix], &["--threads", "1"]);
        let pid = serve.pid().to_string();
        let sniff = Sniff::start(&["-p", &pid, "--backend", "kernel"]);
        crate::trace::bench(serve.addr, &bench_args);
        let (code, stderr, calls) = sniff.stop();
        assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
        let stats = serve.stop();
        let h = &stats["handshakes"];
        let handshakes = n(&h["full"]) + n(&h["resumed_ticket"]) + n(&h["resumed_session_id"]);
        (calls, stderr, n(&stats["requests"]), handshakes)
    } else {
        let dir = tempfile::tempdir().unwrap();
        let (out, stdout) = (dir.path().join("calls.jsonl"), dir.path().join("serve.out"));
        let exe = support::bin();
        let mut child = Command::new(&exe)
            .args(["sniff", "--backend", "user", "--json"])
            .arg(&out)
            .args(["--", exe.to_str().unwrap(), "--openssl", prefix, "serve"])
            .args(["--listen", "127.0.0.1:0", "--threads", "1"])
            .stdout(Stdio::from(std::fs::File::create(&stdout).unwrap()))
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = support::wait_for_listening_line(&stdout, &mut child);
        crate::trace::bench(addr, &bench_args);
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill signals a child we started and have not reaped.
        unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGINT) };
        let status = exits_within(&mut child, Duration::from_secs(60), "sniff");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr}");
        let calls: Vec<Value> = std::fs::read_to_string(&out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let stats = std::fs::read_to_string(&stdout).unwrap();
        let count = |label: &str| -> u64 {
            let line = stats
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no {label:?} in {stats}"));
            let words: Vec<&str> = line.split_whitespace().collect();
            words[if label == "handshakes" { 2 } else { 1 }]
                .trim_end_matches(',')
                .parse()
                .unwrap()
        };
        (calls, stderr, count("requests"), count("handshakes"))
    };
    // Every connection bench made (its check and five measured) was handshaken and sniffed.
    let mut peers: Vec<&str> = calls.iter().filter_map(|c| c["peer"].as_str()).collect();
    peers.sort_unstable();
    peers.dedup();
    assert_eq!(peers.len() as u64, handshakes, "{stderr}\n{calls:#?}");
    let mut with_request = 0;
    for peer in &peers {
        let of = |direction: &str| -> Vec<Vec<u8>> {
            calls
                .iter()
                .filter(|c| c["peer"] == *peer && c["direction"] == direction)
                .map(data)
                .filter(|d| !d.is_empty())
                .collect()
        };
        let (reads, writes) = (of("read"), of("write"));
        if reads.is_empty() {
            continue;
        }
        with_request += 1;
        assert_eq!(reads.len(), 1, "{peer}: one read holds the request");
        let request = String::from_utf8_lossy(&reads[0]);
        assert!(
            request.starts_with(&format!("GET {path} HTTP/1.1\r\n"))
                && request.ends_with("\r\n\r\n"),
            "{peer}: {request:?}"
        );
        assert_eq!(writes.len(), 1, "{peer}: one write holds the response");
        let response = String::from_utf8_lossy(&writes[0]);
        assert!(
            response.starts_with("HTTP/1.1 200 "),
            "{peer}: {response:?}"
        );
        let (head, body) = response.split_once("\r\n\r\n").unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(String::from)
            })
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(
            (body.len(), length),
            (1234, 1234),
            "{peer}: the whole response body"
        );
    }
    assert_eq!(with_request, requests, "{stderr}");
    assert!(with_request >= 5, "{stderr}");
}

#[test]
fn an_openssl_403_server_is_sniffed_whole_by_both_backends() {
    a_flavour_server_is_sniffed_whole(support::openssl_403(), "kernel");
    a_flavour_server_is_sniffed_whole(support::openssl_403(), "user");
}

#[test]
fn an_aws_lc_server_is_sniffed_whole_by_both_backends() {
    a_flavour_server_is_sniffed_whole(support::openssl_aws_lc(), "kernel");
    a_flavour_server_is_sniffed_whole(support::openssl_aws_lc(), "user");
}

#[test]
fn a_boringssl_server_is_sniffed_whole_by_both_backends() {
    a_flavour_server_is_sniffed_whole(support::openssl_boringssl(), "kernel");
    a_flavour_server_is_sniffed_whole(support::openssl_boringssl(), "user");
}
