//! `trace` and `sniff` on Go programs (issue 34): Go's crypto/tls is compiled into each
//! program, so its functions are found in the program itself and probed at their entry and
//! each return instruction. Real programs, built here with the Go toolchain: an HTTPS server
//! (net/http), plain and stripped, loaded by `tlsscope bench`; and a Go program without TLS.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::{self, go};
use crate::trace::{bench, calls, one_at_a_time, Trace};

/// A throwaway RSA certificate and key for localhost in `dir`, made by openssl.
fn certificate(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", support::text(&made.stderr));
    (cert, key)
}

/// A Go server we started: ended by SIGTERM, after which it prints its own counts.
struct GoServer {
    watched: support::Watched,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl GoServer {
    fn start(binary: &Path) -> GoServer {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = certificate(dir.path());
        let watched = support::start_until(
            Command::new(binary).arg(&cert).arg(&key),
            "listening ",
            Duration::from_secs(30),
        );
        let addr = watched
            .seen
            .last()
            .and_then(|l| l.strip_prefix("listening "))
            .and_then(|a| a.trim().parse().ok())
            .expect("an address");
        GoServer {
            watched,
            addr,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.watched.child.id()
    }

    /// Ends it and returns its own counts: (handshakes, requests).
    fn stop(mut self) -> (u64, u64) {
        let pid = i32::try_from(self.pid()).unwrap();
        // SAFETY: kill signals the child we started and have not reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
        let line = self
            .watched
            .lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the server's counts");
        let _ = self.watched.child.wait();
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["handshakes", h, "requests", r] => (h.parse().unwrap(), r.parse().unwrap()),
            _ => panic!("not the server's counts: {line}"),
        }
    }
}

/// Traces `binary` (plain or stripped) while bench loads it with full handshakes and
/// keep-alive requests, and checks the trace against the server's own counts.
fn trace_matches_the_servers_counts(binary: &Path) {
    let _one = one_at_a_time();
    let server = GoServer::start(binary);
    let pid = server.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let metrics = dir.path().join("metrics.prom");
    let trace = Trace::start_with_programs(
        &[],
        &["-p", &pid, "--metrics-file", metrics.to_str().unwrap()],
        &[],
        6,
    );
    bench(
        server.addr,
        &["--mode", "full", "-n", "60", "-c", "2", "--request", "/"],
    );
    bench(
        server.addr,
        &["--mode", "keepalive", "-n", "120", "-c", "2"],
    );
    let (ok, stdout, stderr, doc) = trace.stop();
    let (handshakes, requests) = server.stop();
    assert!(ok, "{stderr}");
    assert!(
        handshakes >= 60 && requests >= 180,
        "{handshakes} {requests}"
    );
    let handshake = "crypto/tls.(*Conn).serverHandshake";
    assert_eq!(calls(&doc, handshake, "success"), handshakes, "{stdout}");
    assert_eq!(calls(&doc, handshake, "failure"), 0, "{stdout}");
    let (read, write) = ("crypto/tls.(*Conn).Read", "crypto/tls.(*Conn).Write");
    // One write per response; every request read; net/http's background read of each
    // kept-alive connection ends with a passed deadline (retry), and each closed connection's
    // last read with io.EOF (closed); nothing fails.
    assert_eq!(calls(&doc, write, "success"), requests, "{stdout}");
    assert!(calls(&doc, read, "success") >= requests, "{stdout}");
    assert!(calls(&doc, read, "retry") > 0, "{stdout}");
    assert!(calls(&doc, read, "closed") > 0, "{stdout}");
    assert_eq!(calls(&doc, read, "failure"), 0, "{stdout}");
    assert!(
        stdout.contains("@crypto/tls.(*Conn).Read [success]:"),
        "{stdout}"
    );
    // The metrics label each function with the program and the Go release that built it.
    let exposition = std::fs::read_to_string(&metrics).unwrap();
    let series = format!(
        "tlsscope_tls_call_duration_seconds_count{{function=\"{handshake}\",outcome=\"success\""
    );
    let line = exposition
        .lines()
        .find(|l| l.starts_with(&series))
        .unwrap_or_else(|| panic!("no {series}: {exposition}"));
    assert!(line.contains("library_version=\"go1."), "{line}");
    assert!(line.ends_with(&format!(" {handshakes}")), "{line}");
    for function in [read, write] {
        let placement = doc["attached"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["function"] == function)
            .map(|a| a["placement"].clone())
            .unwrap_or_else(|| panic!("{function} not attached: {doc:#}"));
        // Returns after the lock are seen where the deferred unlock starts, on its stack check's
        // branch; the early returns (before the lock) at their return instructions.
        assert_eq!(placement["at"], "entry+deferred+returns", "{placement:#}");
        // The entry probe sits on the stack check's branch, which the kernel emulates.
        assert_eq!(placement["emulated"], true, "{placement:#}");
        assert_eq!(
            placement["deferred_offsets"].as_array().unwrap().len(),
            1,
            "{placement:#}"
        );
        assert!(
            !placement["return_offsets"].as_array().unwrap().is_empty(),
            "{placement:#}"
        );
    }
}

#[test]
fn a_go_https_server_is_traced_by_its_own_crypto_tls() {
    let build = go::build("https-server", None);
    trace_matches_the_servers_counts(&build.plain);
}

/// Stripped of its symbol table and DWARF, the program is read from Go's own .gopclntab.
#[test]
fn a_stripped_go_server_gives_the_same_counts() {
    let build = go::build("https-server", None);
    trace_matches_the_servers_counts(&build.stripped);
}

/// The other Go release the tests build with.
#[test]
fn a_go_1_27_server_stripped_gives_the_same_counts() {
    let build = go::build("https-server", Some("go1.27.3"));
    trace_matches_the_servers_counts(&build.stripped);
}

/// Debian's Go 1.19: the older layout of Go's function table, and Go's register ABI in its
/// second year.
#[test]
fn a_go_1_19_server_stripped_gives_the_same_counts() {
    let build = go::build("https-server", Some("debian-go1.19"));
    trace_matches_the_servers_counts(&build.stripped);
}

#[test]
fn a_go_program_without_tls_gets_one_line_saying_so() {
    let build = go::build("tcp-echo", None);
    let watched = support::start_until(
        &mut Command::new(&build.plain),
        "listening ",
        Duration::from_secs(30),
    );
    let mut child = watched.child;
    let pid = child.id().to_string();
    let out = support::tlsscope(&["trace", "-p", &pid, "-d", "1"]);
    let _ = child.kill();
    let _ = child.wait();
    support::assert_one_line_error(
        &out,
        &[
            "is a Go program",
            "without Go's crypto/tls",
            "serverHandshake",
        ],
    );
}

/// `sniff` on the Go server, stripped: every request and response in plaintext, with the
/// connection's socket fd and both ends read from the Go connection, no call lost, the -o
/// file private, and tshark's HTTP dissector reading the requests in the pcap.
#[test]
fn a_stripped_go_server_is_sniffed_whole_with_its_sockets() {
    use std::os::unix::fs::PermissionsExt;

    use crate::sniff::{contains, data, token, Sniff};
    let _one = one_at_a_time();
    let build = go::build("https-server", None);
    let server = GoServer::start(&build.stripped);
    let addr = server.addr;
    let pid = server.pid().to_string();
    let pcap_dir = tempfile::tempdir().unwrap();
    let pcap = pcap_dir.path().join("go.pcapng");
    let sniff = Sniff::start_in(&[], &["-p", &pid, "--pcap", pcap.to_str().unwrap()]);
    let token = token();
    let path = format!("/go-{token}");
    bench(
        server.addr,
        &["--mode", "full", "-n", "20", "-c", "2", "--request", &path],
    );
    let (code, stderr, calls) = sniff.stop();
    let (_, requests) = server.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    assert!(
        stderr.contains("lost (ring buffer full): 0 calls"),
        "{stderr}"
    );
    let request_line = format!("GET {path} HTTP/1.1");
    let reads: Vec<&serde_json::Value> = calls
        .iter()
        .filter(|c| c["direction"] == "read" && contains(&data(c), &request_line))
        .collect();
    let writes: Vec<&serde_json::Value> = calls
        .iter()
        .filter(|c| {
            c["direction"] == "write" && contains(&data(c), &format!("hello from go, GET {path}"))
        })
        .collect();
    assert_eq!(reads.len() as u64, requests, "{stderr}");
    assert_eq!(writes.len() as u64, requests, "{stderr}");
    for c in reads.iter().chain(&writes) {
        assert!(
            c["function"].as_str().unwrap().starts_with("crypto/tls."),
            "{c}"
        );
        assert!(c["fd"].as_i64().unwrap() > 2, "{c}");
        let local: SocketAddr = c["local"].as_str().unwrap().parse().unwrap();
        assert_eq!(local, addr, "{c}");
        assert_eq!(
            c["total_bytes"].as_u64().unwrap(),
            data(c).len() as u64,
            "{c}"
        );
    }
    let mode = std::fs::metadata(&pcap).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let decode_as = format!("tcp.port=={},http", addr.port());
    let out = support::run_with_timeout(
        Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-d", &decode_as, "-Y", "http.request", "-T", "fields"])
            .args(["-e", "http.request.uri"]),
        Duration::from_secs(60),
    );
    let uris = support::text(&out.stdout);
    assert_eq!(
        uris.lines().filter(|l| l.trim() == path).count() as u64,
        requests,
        "tshark saw: {uris}"
    );
}

/// `sniff --keylog` on a Go server that set no KeyLogWriter: the secrets Go hands its own key
/// log hook, in a private file, let tshark decrypt a real capture of the traffic, TLS 1.3 and
/// TLS 1.2 alike: every request bench made is read back from the wire.
#[test]
fn a_go_servers_secrets_let_tshark_decrypt_a_capture_of_its_traffic() {
    use std::os::unix::fs::PermissionsExt;

    use crate::bench_wire::Capture;
    use crate::sniff::{token, Sniff};
    let _one = one_at_a_time();
    let build = go::build("https-server", None);
    let server = GoServer::start(&build.plain);
    let pid = server.pid().to_string();
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    let capture = Capture::start(server.addr.port());
    let sniff = Sniff::start_in(&[], &["-p", &pid, "--keylog", keys.to_str().unwrap()]);
    let path = format!("/keys-{}", token());
    for tls in ["1.3", "1.2"] {
        bench(
            server.addr,
            &[
                "--mode",
                "full",
                "-n",
                "6",
                "-c",
                "1",
                "--tls",
                tls,
                "--request",
                &path,
            ],
        );
    }
    let (code, stderr, _) = sniff.stop();
    let (file, _capture_dir) = capture.finish();
    let (handshakes, requests) = server.stop();
    assert_eq!(code, Some(crate::EXIT_INTERRUPTED), "{stderr}");
    // Each bench run also makes one connection to check the target first.
    assert!(handshakes >= 12 && handshakes % 2 == 0, "{handshakes}");
    let mode = std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let log = std::fs::read_to_string(&keys).unwrap();
    let lines_of = |label: &str| log.lines().filter(|l| l.starts_with(label)).count();
    // TLS 1.3: four secrets per handshake; TLS 1.2: the master secret. Half of each.
    let per_version = usize::try_from(handshakes / 2).unwrap();
    assert_eq!(
        lines_of("CLIENT_HANDSHAKE_TRAFFIC_SECRET "),
        per_version,
        "{log}"
    );
    assert_eq!(
        lines_of("SERVER_HANDSHAKE_TRAFFIC_SECRET "),
        per_version,
        "{log}"
    );
    assert_eq!(lines_of("CLIENT_TRAFFIC_SECRET_0 "), per_version, "{log}");
    assert_eq!(lines_of("SERVER_TRAFFIC_SECRET_0 "), per_version, "{log}");
    assert_eq!(lines_of("CLIENT_RANDOM "), per_version, "{log}");
    assert!(
        stderr.contains(&format!("key log: {} lines written", log.lines().count())),
        "{stderr}"
    );
    let keylog_option = format!("tls.keylog_file:{}", keys.display());
    let tshark = |filter: &str, fields: &[&str]| {
        let mut command = Command::new("tshark");
        command
            .arg("-r")
            .arg(&file)
            .args(["-o", &keylog_option, "-Y", filter]);
        if !fields.is_empty() {
            command.args(["-T", "fields"]);
            for field in fields {
                command.args(["-e", field]);
            }
        }
        support::text(&support::run_with_timeout(&mut command, Duration::from_secs(60)).stdout)
    };
    let decrypted: std::collections::BTreeSet<String> =
        tshark("http.request", &["tcp.stream", "http.request.uri"])
            .lines()
            .filter(|l| l.ends_with(&path))
            .map(|l| l.split('\t').next().unwrap().to_owned())
            .collect();
    let hellos: std::collections::BTreeSet<String> =
        tshark("tls.handshake.type == 1", &["tcp.stream"])
            .lines()
            .map(str::to_owned)
            .collect();
    // Every connection the capture holds had its request read back, and it holds them all.
    let undecrypted: Vec<String> = hellos
        .difference(&decrypted)
        .map(|stream| tshark(&format!("tcp.stream == {stream}"), &[]))
        .collect();
    assert!(
        undecrypted.is_empty(),
        "not decrypted:\n{}",
        undecrypted.join("\n")
    );
    assert_eq!(
        decrypted.len() as u64,
        requests,
        "connections decrypted: {decrypted:?}"
    );
    // Without the key log tshark sees no request at all: the figure above is the key log's.
    let blind = support::run_with_timeout(
        Command::new("tshark").arg("-r").arg(&file).args([
            "-Y",
            "http.request",
            "-T",
            "fields",
            "-e",
            "http.request.uri",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(support::text(&blind.stdout).trim(), "");
}

/// `sniff --keylog` where no target is a Go program: one line saying key logs come from Go
/// programs only, a non-zero exit, and no file left behind.
#[test]
fn a_keylog_for_a_program_that_is_not_go_is_refused_in_one_line() {
    let _one = one_at_a_time();
    let server = support::Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.txt");
    let pid = server.pid().to_string();
    let keys_arg = keys.to_str().unwrap();
    let out = support::tlsscope(&[
        "sniff",
        "--backend",
        "kernel",
        "-p",
        &pid,
        "--keylog",
        keys_arg,
    ]);
    let stderr = support::text(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("--keylog") && errors[0].contains("Go programs only"),
        "{stderr}"
    );
    assert!(!keys.exists());
}

/// `trace --binary` probes the program's file in every process that runs it, and `trace --
/// PROGRAM` starts a Go program after probing its file (tlsscope's in-process library cannot
/// wrap compiled-in functions): both count what the server counts.
#[test]
fn a_go_program_is_traced_by_its_file_and_when_started_by_trace() {
    let _one = one_at_a_time();
    let build = go::build("https-server", None);
    // --binary: the server runs first.
    let server = GoServer::start(&build.stripped);
    let trace =
        Trace::start_with_programs(&[], &["--binary", build.stripped.to_str().unwrap()], &[], 6);
    bench(server.addr, &["--mode", "full", "-n", "10", "-c", "1"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    let (handshakes, _) = server.stop();
    assert!(ok, "{stderr}");
    let handshake = "crypto/tls.(*Conn).serverHandshake";
    assert_eq!(calls(&doc, handshake, "success"), handshakes, "{stdout}");
    // -- PROGRAM: the server's own lines come through tlsscope's stderr.
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = certificate(dir.path());
    let json = dir.path().join("trace.json");
    let mut watched = support::start_until(
        support::command_in(&[])
            .args(["trace", "-d", "6", "--json"])
            .arg(&json)
            .arg("--")
            .arg(&build.stripped)
            .arg(&cert)
            .arg(&key)
            .stdout(std::process::Stdio::null()),
        "listening ",
        Duration::from_secs(60),
    );
    let addr: SocketAddr = watched
        .seen
        .last()
        .and_then(|l| l.split("listening ").nth(1))
        .and_then(|a| a.trim().parse().ok())
        .expect("the server's address");
    bench(addr, &["--mode", "full", "-n", "10", "-c", "1"]);
    let status = watched.child.wait().unwrap();
    // Every line, up to the end of tlsscope's stderr.
    let mut lines = Vec::new();
    while let Ok(line) = watched.lines.recv_timeout(Duration::from_secs(10)) {
        lines.push(line);
    }
    assert!(status.success(), "{lines:?}");
    let counts = lines
        .iter()
        .find_map(|l| l.strip_prefix("handshakes "))
        .unwrap_or_else(|| panic!("the server's counts: {lines:?}"));
    let handshakes: u64 = counts.split_whitespace().next().unwrap().parse().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    crate::trace::assert_valid(&doc);
    assert_eq!(calls(&doc, handshake, "success"), handshakes, "{doc:#}");
    assert!(handshakes >= 10);
}

/// A Go program whose function table has a layout the reader does not know (its magic changed
/// here, as a future Go would) is refused in one line naming the magic, never traced empty.
#[test]
fn a_go_function_table_of_an_unknown_layout_is_one_line() {
    let build = go::build("https-server", None);
    let mut bytes = std::fs::read(&build.stripped).unwrap();
    // Go 1.20's header: magic 0xfffffff1, two zero bytes, minLC 1, pointer size 8.
    let header = [0xf1, 0xff, 0xff, 0xff, 0x00, 0x00, 0x01, 0x08];
    let at = bytes
        .windows(header.len())
        .position(|w| w == header)
        .expect("the .gopclntab header");
    bytes[at] = 0xf5;
    let dir = tempfile::tempdir().unwrap();
    let future = dir.path().join("future-go");
    std::fs::write(&future, &bytes).unwrap();
    let out = support::tlsscope(&["trace", "--binary", future.to_str().unwrap(), "-d", "1"]);
    support::assert_one_line_error(&out, &["0xfffffff5", "too old, or too new"]);
}

/// A Go HTTPS client, stripped, started by `trace --`: its handshakes (clientHandshake) equal
/// the full handshakes the built-in server counted, one request written per connection, each
/// response read.
#[test]
fn a_stripped_go_client_is_traced_against_the_built_in_server() {
    let _one = one_at_a_time();
    let build = go::build("https-client", None);
    let serve = support::Serve::start(&["--threads", "1"]);
    let url = format!("https://{}/", serve.addr);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trace.json");
    let out = support::tlsscope(&[
        "trace",
        "--json",
        json.to_str().unwrap(),
        "--",
        build.stripped.to_str().unwrap(),
        &url,
        "12",
    ]);
    let stats = serve.stop();
    let stderr = support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("requests 12 "), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    crate::trace::assert_valid(&doc);
    let full = stats["handshakes"]["full"].as_u64().unwrap();
    assert_eq!(full, 12, "{stats}");
    assert_eq!(
        calls(&doc, "crypto/tls.(*Conn).clientHandshake", "success"),
        full,
        "{doc:#}"
    );
    assert_eq!(calls(&doc, "crypto/tls.(*Conn).Write", "success"), 12);
    assert!(calls(&doc, "crypto/tls.(*Conn).Read", "success") >= 12);
    assert_eq!(calls(&doc, "crypto/tls.(*Conn).Read", "failure"), 0);
}
