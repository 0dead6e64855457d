//! `tlsscope trace`: real uprobes on real TLS peers (the built-in server, nginx, curl, a program
//! on a 1.1.1w build, GnuTLS), counts checked against what the peers report, every exit path
//! checked to leave nothing attached, and bad inputs.
//!
//! The tests in this module run one at a time (TRACE_LOCK): they count calls of processes and
//! comms (curl) that another test could also be running. Every tracer's BPF programs (by id,
//! from its fds) are checked to be unloaded when it ends.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::peers::{Nginx, NginxOpts};
use crate::support::{self, Serve};

static TRACE_LOCK: Mutex<()> = Mutex::new(());

pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    TRACE_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `tlsscope trace` running in the background, attached.
pub(crate) struct Trace {
    child: Child,
    /// The BPF programs it had loaded once attached.
    programs: Vec<u32>,
    dir: tempfile::TempDir,
    stderr: Receiver<String>,
    early_stderr: Vec<String>,
}

impl Trace {
    /// Starts `tlsscope trace <args> --json FILE` and waits until its probes are attached.
    pub(crate) fn start(args: &[&str]) -> Trace {
        Trace::start_in(&[], args, &[])
    }

    fn start_env(args: &[&str], env: &[(&str, &str)]) -> Trace {
        Trace::start_in(&[], args, env)
    }

    /// Like `start`, run through a command prefix (e.g. `scripts/fresh-mounts`) that ends by
    /// exec'ing tlsscope, so the child's PID is the tracer's.
    pub(crate) fn start_in(prefix: &[&str], args: &[&str], env: &[(&str, &str)]) -> Trace {
        Trace::start_with_programs(prefix, args, env, 3)
    }

    /// Like `start_in`, for a tracer that loads `programs` BPF programs (five with Go's two).
    pub(crate) fn start_with_programs(
        prefix: &[&str],
        args: &[&str],
        env: &[(&str, &str)],
        programs: usize,
    ) -> Trace {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("trace.json");
        let watched = support::start_until(
            support::command_in(prefix)
                .arg("trace")
                .args(args)
                .arg("--json")
                .arg(&json)
                .envs(env.iter().copied())
                .stdout(Stdio::piped()),
            " attached in ",
            Duration::from_secs(60),
        );
        let loaded = program_ids_of(watched.child.id());
        assert_eq!(
            loaded.len(),
            programs,
            "the tracer holds its {programs} programs: {loaded:?}"
        );
        let programs = loaded;
        Trace {
            child: watched.child,
            programs,
            dir,
            stderr: watched.lines,
            early_stderr: watched.seen,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The first stderr line containing `needle`, among those printed up to now or in the
    /// next 20 s.
    pub(crate) fn stderr_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self.early_stderr.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "tlsscope trace printed no {needle:?}: {:?}",
                self.early_stderr
            );
            if let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(100)) {
                self.early_stderr.push(line);
            }
        }
    }

    fn signal(&self, signal: i32) {
        let pid = i32::try_from(self.pid()).unwrap();
        // SAFETY: kill sends a signal to a child we started and have not reaped.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits for the tracer to end on its own (after `signal`, -d, or the target exiting),
    /// checks that its BPF programs are gone, and returns its exit success, stdout, all of
    /// stderr, and the JSON document (validated).
    pub(crate) fn finish(self) -> (bool, String, String, Value) {
        let (code, stdout, stderr, doc) = self.finish_code();
        (code == Some(0), stdout, stderr, doc)
    }

    /// Like `finish`, with the exit code (None when a signal killed it).
    fn finish_code(mut self) -> (Option<i32>, String, String, Value) {
        let mut stdout = self.child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
            s
        });
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                panic!("tlsscope trace did not stop within 60 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = reader.join().unwrap();
        let mut stderr = self.early_stderr.join("\n");
        for line in self.stderr.try_iter() {
            stderr.push('\n');
            stderr.push_str(&line);
        }
        // Whatever the way out, the kernel must have dropped the tracer's programs.
        assert_unloaded(&self.programs, "after the tracer exited");
        let doc = match std::fs::read(self.dir.path().join("trace.json")) {
            Ok(bytes) => {
                let doc: Value = serde_json::from_slice(&bytes).expect("trace JSON parses");
                assert_valid(&doc);
                doc
            }
            Err(_) => Value::Null,
        };
        (status.code(), stdout, stderr, doc)
    }

    /// Ctrl-C: the tracer still reports and writes its results, and exits with 130; `ok` says
    /// it did exactly that.
    pub(crate) fn stop(self) -> (bool, String, String, Value) {
        self.signal(libc::SIGINT);
        let (code, stdout, stderr, doc) = self.finish_code();
        (code == Some(crate::EXIT_INTERRUPTED), stdout, stderr, doc)
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Checks the document against its schema, and that its environment names every library its
/// probes are in (an OpenSSL one by its version).
pub(crate) fn assert_valid(doc: &Value) {
    support::assert_matches_schema(doc, "trace.v1");
    let env = &doc["environment"];
    let named: Vec<&str> = env["traced_libraries"]
        .as_array()
        .map(|l| l.iter().filter_map(|l| l["path"].as_str()).collect())
        .unwrap_or_default();
    // The kernel backend's probes are in the traced files; the in-process backend's are
    // tlsscope's wrapper library, which is not the library traced.
    let user = doc["backend"] == "user";
    for probe in doc["attached"].as_array().unwrap() {
        let path = probe["path"].as_str().unwrap();
        assert_eq!(named.contains(&path), !user, "{path} in {env:#}");
    }
    // Each libssl by its flavour and version, read from its files (only OpenSSL's own text
    // gives a version number); the environment names the flavour too.
    for l in env["traced_libraries"].as_array().into_iter().flatten() {
        if l["path"].as_str().unwrap().contains("/libssl.so") {
            let version = l["version"].as_str().unwrap();
            let flavour = ["OpenSSL", "AWS-LC", "BoringSSL"]
                .into_iter()
                .find(|f| version.starts_with(f))
                .unwrap_or_else(|| panic!("{version:?} names no flavour: {env:#}"));
            assert_eq!(
                l["version_number"].as_u64().unwrap() > 0,
                flavour == "OpenSSL",
                "{env:#}"
            );
            assert!(
                ["OpenSSL ", "AWS-LC ", "BoringSSL"]
                    .iter()
                    .any(|f| env["library"].as_str().unwrap().starts_with(f)),
                "{env:#}"
            );
            assert!(env["library_flavour"].is_string(), "{env:#}");
            assert!(!env["library_path"].as_str().unwrap().is_empty(), "{env:#}");
        }
    }
}

/// Calls of `function` that ended with `outcome`, over all processes.
pub(crate) fn calls(doc: &Value, function: &str, outcome: &str) -> u64 {
    doc["functions"]
        .as_array()
        .expect("functions")
        .iter()
        .filter(|f| f["function"] == function && f["outcome"] == outcome)
        .map(|f| f["summary"]["count"].as_u64().unwrap())
        .sum()
}

fn attached(doc: &Value) -> Vec<String> {
    doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["function"].as_str().unwrap().to_string())
        .collect()
}

/// Runs `tlsscope bench` to completion; panics when it fails.
pub fn bench(target: SocketAddr, args: &[&str]) -> String {
    let target = target.to_string();
    let mut all = vec!["bench", target.as_str()];
    all.extend_from_slice(args);
    let out = support::tlsscope(&all);
    let text = support::text(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {text}{}",
        support::text(&out.stderr)
    );
    text
}

pub(crate) fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// How many BPF links of each type (`link_type:` of fdinfo) process `pid` holds.
fn link_types_of(pid: u32) -> std::collections::BTreeMap<String, usize> {
    let mut types = std::collections::BTreeMap::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        if let Some(t) = info.lines().find_map(|l| l.strip_prefix("link_type:")) {
            *types.entry(t.trim().to_string()).or_insert(0) += 1;
        }
    }
    types
}

/// Every probe of one file goes in one entry link and one return link (multi-uprobe), which
/// the kernel retires together on exit: closing a link per probe took ~0.1 s each, so a trace
/// of every function spent 4-5 s detaching.
#[test]
fn probes_of_one_file_share_one_entry_and_one_return_link() {
    let _one = one_at_a_time();
    let libssl = support::system_libssl();
    let trace = Trace::start(&["--lib", libssl.to_str().unwrap(), "--probes", "all"]);
    let links = link_types_of(trace.child.id());
    assert_eq!(links.get("uprobe_multi"), Some(&1), "{links:?}");
    assert_eq!(links.get("uretprobe_multi"), Some(&1), "{links:?}");
    let (ok, _, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert!(doc["attached"].as_array().unwrap().len() >= 8, "{doc:#}");
}

/// The BPF programs a process holds open, by id (from the `prog_id:` of its fds' fdinfo).
pub fn program_ids_of(pid: u32) -> Vec<u32> {
    let mut ids = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return ids;
    };
    for fd in fds.flatten() {
        let info = std::fs::read_to_string(fd.path()).unwrap_or_default();
        for line in info.lines() {
            if let Some(id) = line.strip_prefix("prog_id:") {
                if let Ok(id) = id.trim().parse() {
                    if !ids.contains(&id) {
                        ids.push(id);
                    }
                }
            }
        }
    }
    ids
}

/// Waits up to 5 s for the kernel to unload the programs `ids` (a tracer's, taken while it
/// ran). Other tlsscope tracers on the machine do not matter.
pub fn assert_unloaded(ids: &[u32], context: &str) {
    assert!(!ids.is_empty(), "{context}: no program ids were taken");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<(u32, String)> = probes::latency::loaded_programs()
            .into_iter()
            .filter(|(id, _)| ids.contains(id))
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{context}: the tracer's BPF programs are still loaded: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn handshakes_and_requests_of_the_built_in_server_match_its_own_counts() {
    let _one = one_at_a_time();
    let serve = Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&["-p", &pid, "--probes", "all"]);
    bench(
        serve.addr,
        &["--mode", "full", "-n", "300", "-c", "4", "--request", "/"],
    );
    bench(serve.addr, &["--mode", "keepalive", "-n", "400", "-c", "4"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    let server_handshakes: u64 = ["full", "resumed_session_id", "resumed_ticket"]
        .iter()
        .map(|k| stats["handshakes"][k].as_u64().unwrap_or(0))
        .sum();
    assert!(server_handshakes >= 300, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        server_handshakes,
        "SSL_do_handshake successes vs the server's handshakes\n{stdout}\n{stats}"
    );
    // The server is non-blocking: handshakes wait for the client, and say so.
    assert!(calls(&doc, "SSL_do_handshake", "retry") > 0, "{stdout}");
    assert_eq!(calls(&doc, "SSL_do_handshake", "failure"), 0, "{stdout}");
    let requests = n(&stats["requests"]);
    assert!(requests >= 700, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_write", "success") + calls(&doc, "SSL_write_ex", "success"),
        requests,
        "one write per response\n{stdout}\n{stats}"
    );
    let reads = calls(&doc, "SSL_read", "success") + calls(&doc, "SSL_read_ex", "success");
    assert!(
        reads >= requests,
        "{reads} reads for {requests} requests\n{stdout}"
    );
    // Libcrypto's exported functions are traced on Debian's stripped library: one ephemeral
    // key per full handshake, and at least the CertificateVerify signature.
    assert_eq!(
        calls(&doc, "EVP_PKEY_keygen", "success"),
        server_handshakes,
        "{stdout}"
    );
    assert!(
        calls(&doc, "EVP_DigestSign", "success") >= server_handshakes,
        "{stdout}"
    );
    // ...and the internals are reported as not traced, with the reason.
    let missing = doc["not_attached"].as_array().unwrap();
    assert!(
        missing
            .iter()
            .any(|m| m["function"] == "rsa_ossl_private_decrypt"
                && m["reason"].as_str().unwrap().contains("stripped")),
        "{missing:?}"
    );
    assert!(stdout.contains("@SSL_do_handshake [success]:"), "{stdout}");
    assert!(n(&doc["overhead"]["probed_calls"]) > server_handshakes);
    assert!(doc["overhead"]["cost_ns_per_call"].as_f64().unwrap() > 0.0);
}

#[test]
fn nginx_handshakes_and_responses_match_its_access_log() {
    let _one = one_at_a_time();
    let nginx = Nginx::start(NginxOpts::default());
    let pid = nginx.pid().to_string();
    // The kernel backend's test (auto would wrap these functions in process).
    let trace = Trace::start(&[
        "--backend",
        "kernel",
        "-p",
        &pid,
        "--probes",
        "handshake,io",
    ]);
    bench(
        nginx.addr(),
        &["--mode", "full", "-n", "120", "-c", "4", "--request", "/"],
    );
    bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "300", "-c", "3"],
    );
    let (ok, stdout, stderr, doc) = trace.stop();
    let log = nginx.stop();
    assert!(ok, "{stderr}");
    // Every request nginx logged was answered with SSL_write.
    let writes = calls(&doc, "SSL_write", "success");
    assert_eq!(writes, log.len() as u64, "{stdout}");
    // 120 connections with a request, 3 keep-alive connections, plus each run's
    // one-connection check before it starts.
    let handshakes = calls(&doc, "SSL_do_handshake", "success");
    assert_eq!(handshakes, 120 + 3 + 2, "{stdout}");
    assert!(
        !attached(&doc).iter().any(|f| f.starts_with("EVP_")),
        "crypto group not asked for"
    );
}

#[test]
fn curl_client_side_connects_are_traced_through_the_library() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let libssl = support::system_libssl();
    // A curl whose comm no other test's curl has (other tests run curl at the same time,
    // without this module's lock): the filter then leaves exactly this test's three.
    let curl = support::UniqueProgram::new("curl");
    let trace = Trace::start(&[
        "--lib",
        libssl.to_str().unwrap(),
        "--comm",
        curl.comm(),
        "--probes",
        "handshake",
    ]);
    let url = format!("https://{}/", serve.addr);
    for _ in 0..3 {
        let out = support::curl_as(curl.path(), &serve.cert(), &url, &[]);
        assert!(out.status.success(), "{}", support::text(&out.stderr));
    }
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert_eq!(calls(&doc, "SSL_connect", "success"), 3, "{stdout}");
    // SSL_connect runs the handshake through SSL_do_handshake: both are seen, nested.
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), 3, "{stdout}");
    // The server is in another process with another comm: filtered out.
    assert_eq!(calls(&doc, "SSL_accept", "success"), 0, "{stdout}");
    assert!(doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["pid"] == -1));
}

#[test]
fn a_server_on_openssl_111w_is_traced_down_to_its_internal_functions() {
    let _one = one_at_a_time();
    let build = support::openssl_111w();
    let serve = Serve::start_with(&["--openssl", build.to_str().unwrap()], &["--threads", "1"]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&["-p", &pid, "--probes", "handshake,crypto"]);
    bench(serve.addr, &["--mode", "full", "-n", "60", "-c", "2"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    let handshakes = n(&stats["handshakes"]["full"]);
    let libs: Vec<String> = doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["path"].as_str().unwrap().to_string())
        .collect();
    assert!(libs.iter().any(|p| p.contains("libssl.so.1.1")), "{libs:?}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    // The build keeps its symbol table: the RSA private-key operation itself is traced
    // (RSA-PSS signing goes through rsa_ossl_private_encrypt), once per handshake.
    assert_eq!(
        calls(&doc, "rsa_ossl_private_encrypt", "success"),
        handshakes,
        "{stdout}"
    );
    assert!(
        calls(&doc, "ossl_x25519", "success") >= handshakes,
        "{stdout}"
    );
}

#[test]
fn a_gnutls_server_is_traced_through_its_own_functions() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let (mut server, addr) = listening_on_a_free_port("gnutls-serv", |port| {
        Command::new("gnutls-serv")
            .args(["--port", &port.to_string(), "--http", "--x509certfile"])
            .arg(&cert)
            .arg("--x509keyfile")
            .arg(&key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gnutls-serv (Debian's gnutls-bin) starts")
    });
    let pid = server.id().to_string();
    let trace = Trace::start(&[
        "--backend",
        "kernel",
        "-p",
        &pid,
        "--probes",
        "handshake,io",
    ]);
    let target = addr.to_string();
    let out = support::tlsscope(&["handshake", &target, "-n", "5", "--request", "/"]);
    let (ok, stdout, stderr, doc) = trace.stop();
    support::terminate(&mut server);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    assert!(ok, "{stderr}");
    assert_eq!(calls(&doc, "gnutls_handshake", "success"), 5, "{stdout}");
    assert!(
        calls(&doc, "gnutls_record_send", "success") >= 5,
        "{stdout}"
    );
    assert!(
        calls(&doc, "gnutls_record_recv", "success") >= 5,
        "{stdout}"
    );
    assert!(
        !attached(&doc).iter().any(|f| f.starts_with("SSL_")),
        "{:?}",
        attached(&doc)
    );
}

/// A server that takes its port on its command line (`spawn(port)`), started on a free loopback
/// port and returned once it listens there. Another process can take the port between our
/// choice and the server's bind; then the server exits and another port is tried.
pub(crate) fn listening_on_a_free_port(
    what: &str,
    mut spawn: impl FnMut(u16) -> Child,
) -> (Child, SocketAddr) {
    for _ in 0..5 {
        let port = support::probably_free_port();
        let mut child = spawn(port);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if support::listens(child.id(), port) {
                return (child, SocketAddr::from(([127, 0, 0, 1], port)));
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} does not listen on port {port} after 20 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("{what} exited before listening, five times");
}

#[test]
fn every_way_out_detaches_every_probe() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    let base = ["-p", pid.as_str(), "--probes", "handshake"];

    for (name, signal, exit) in [
        ("SIGINT", libc::SIGINT, crate::EXIT_INTERRUPTED),
        ("SIGTERM", libc::SIGTERM, 0),
    ] {
        let trace = Trace::start(&base);
        trace.signal(signal);
        let (code, stdout, stderr, doc) = trace.finish_code();
        assert_eq!(code, Some(exit), "{name}: {stderr}");
        assert!(stdout.contains("stopped: signal"), "{name}: {stdout}");
        assert!(!doc.is_null(), "{name}: the results are still written");
    }

    let mut args = base.to_vec();
    args.extend(["-d", "1s"]);
    let (ok, _, stderr, doc) = Trace::start(&args).finish();
    assert!(ok, "{stderr}");
    assert!(doc["duration_s"].as_f64().unwrap() >= 1.0);

    let trace = Trace::start_env(&base, &[("TLSSCOPE_TEST_PANIC_WHILE_TRACING", "1")]);
    let (ok, _, stderr, _) = trace.finish();
    assert!(!ok && stderr.contains("panicked"), "{stderr}");

    // SIGKILL: no code of ours runs; the kernel drops the probes with the process's files.
    let trace = Trace::start(&base);
    trace.signal(libc::SIGKILL);
    let _ = trace.finish();

    // The traced process exits: the trace ends by itself and reports.
    let trace = Trace::start(&base);
    serve.stop();
    let (ok, stdout, stderr, doc) = trace.finish();
    assert!(ok, "{stderr}");
    assert!(stdout.contains("the traced process exited"), "{stdout}");
    assert!(!doc.is_null());
}

#[test]
fn bad_inputs_get_one_line_errors() {
    let _one = one_at_a_time();
    let run = |args: &[&str]| {
        let mut all = vec!["trace"];
        all.extend_from_slice(args);
        support::tlsscope(&all)
    };
    support::assert_one_line_error(&run(&[]), &["nothing to trace", "-p PID"]);
    support::assert_one_line_error(
        &run(&["-p", "999999999"]),
        &["no process with PID 999999999"],
    );
    support::assert_one_line_error(
        &run(&["--binary", "/bin/true"]),
        &["/bin/true", "defines none"],
    );
    support::assert_one_line_error(
        &run(&["--lib", "/nonexistent/libssl.so.3"]),
        &["no such file"],
    );
    support::assert_one_line_error(&run(&["-p", "1", "--linear", "5,1,1"]), &["MIN < MAX"]);
    support::assert_one_line_error(&run(&["-p", "1", "--probes", "tls"]), &["'tls'"]);
    support::assert_one_line_error(
        &run(&["-p", "1", "--functions", "SSL_reed"]),
        &["unknown function SSL_reed"],
    );
    support::assert_one_line_error(
        &run(&["-p", "1", "--comm", "a-name-longer-than-15"]),
        &["15 bytes"],
    );
    // Not root: the tracer says so before anything else.
    let out = support::run_with_timeout(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(support::bin())
            .args(["trace", "-p", "1"]),
        Duration::from_secs(30),
    );
    support::assert_one_line_error(&out, &["needs root"]);
}

/// `tlsscope lab` on a target: every experiment reports, with the handshake obtained and the
/// server's traced calls.
fn lab(target: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("lab.html");
    let out = short_lab(&[], &["--target", target, "--html", html.to_str().unwrap()]);
    let text = support::text(&out.stdout);
    assert!(
        out.status.success(),
        "lab --target {target} failed: {text}{}",
        support::text(&out.stderr)
    );
    assert_eq!(text.matches("\n== ").count(), 5, "{text}");
    for want in [
        "x25519 rsa_pss_rsae_sha256 full",
        "ecdsa_secp256r1_sha256 full",
        "TLSv1.2",
        "resumed_ticket",
        "requests/s untraced",
        "probe cost on this machine",
        "in-process probes",
        // Issue 17: the load comes from the cheap client, so the server sets the rates.
        "per request (rustls)",
        // Issue 18: the async experiment needs a library with the dasync engine.
        "not run: full handshakes, RSA-2048, TLS 1.3, async (dasync): ",
    ] {
        assert!(
            text.contains(want),
            "lab --target {target} lacks {want:?}: {text}"
        );
    }
    // Each experiment shows the server's SSL_do_handshake (or SSL_read for keep-alive) calls.
    assert!(
        text.matches("SSL_do_handshake       success").count() >= 4,
        "{text}"
    );
    assert!(text.contains("SSL_write              success"), "{text}");
    assert!(!text.contains("failed:"), "{text}");
    backends_side_by_side(&text);
    // The page (issue 16): the breakdown, then per experiment its latency by percentile and
    // a histogram per traced function, every plot rendered in a browser.
    let plots = crate::pages::assert_page_renders(&html);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<h2>").count(), 2 + 5, "{target}");
    assert!(
        page.contains("Where the server&#x27;s time goes")
            || page.contains("Where the server's time goes")
    );
    assert!(page.contains("<h3>Server calls, traced by"), "{target}");
    assert!(
        plots > 5 * 2,
        "{plots} plots: the breakdown and two per experiment at least"
    );
    text
}

/// A lab section's row that starts with `row` (function and outcome), and its calls per
/// operation, one per traced run.
pub(crate) fn calls_per_op(section: &str, row: &str) -> (String, Vec<f64>) {
    let line = section
        .lines()
        .find(|l| l.trim_start().starts_with(row))
        .unwrap_or_else(|| panic!("no {row} row: {section}"));
    let per_op = line
        .split('|')
        .skip(1)
        .map(|cells| cells.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    (line.to_string(), per_op)
}

/// `tlsscope [global] lab` with 1 s runs, no warm-up and 8 connections, plus `extra`.
pub(crate) fn short_lab(global: &[&str], extra: &[&str]) -> std::process::Output {
    let mut args = global.to_vec();
    args.extend([
        "lab",
        "-d",
        "1s",
        "--trace-duration",
        "1s",
        "--warmup",
        "0s",
        "-c",
        "8",
    ]);
    args.extend_from_slice(extra);
    support::tlsscope(&args)
}

/// Every experiment was traced by both backends (the default, auto): their rates in the rate
/// line and the closing table, a probe cost for each, and the same count of server handshakes
/// per full handshake from both (one each).
fn backends_side_by_side(text: &str) {
    for section in text.split("\n== ").skip(1) {
        let rate = section
            .lines()
            .find(|l| l.starts_with("  rate "))
            .unwrap_or_else(|| panic!("no rate line: {section}"));
        assert!(
            rate.contains("kernel probes") && rate.contains("in-process probes"),
            "{rate}"
        );
        if !section.starts_with("full handshakes") {
            continue;
        }
        let (row, per_op) = calls_per_op(section, "SSL_do_handshake       success");
        assert_eq!(per_op.len(), 2, "{row}");
        for p in per_op {
            assert!((0.9..1.1).contains(&p), "{row}");
        }
    }
    let table = text
        .split("operations per second")
        .nth(1)
        .unwrap_or_else(|| panic!("no closing table: {text}"));
    assert_eq!(table.matches('%').count(), 10, "{table}");
    for backend in ["kernel probes:", "in-process probes:"] {
        assert!(
            text.contains(&format!("probe cost on this machine, {backend}")),
            "{text}"
        );
    }
}

#[test]
fn lab_runs_every_experiment_on_the_built_in_server() {
    let _one = one_at_a_time();
    lab("builtin");
}

#[test]
fn lab_runs_every_experiment_on_nginx() {
    let _one = one_at_a_time();
    lab("nginx");
}

/// s_client with stdin at EOF: handshakes, sends close_notify, exits.
pub(crate) fn s_client_closes(addr: SocketAddr) {
    let out = support::run_with_timeout(
        Command::new("openssl").args(["s_client", "-connect", &addr.to_string(), "-brief"]),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", support::text(&out.stderr));
}

#[test]
fn exact_outcomes_tell_a_close_notify_from_a_failure() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    // By default the server's SSL_read returning 0 after reading the alert is "unknown": the
    // syscall read data, and only SSL_get_error can say which alert it was.
    let trace = Trace::start(&["-p", &pid, "--probes", "io"]);
    for _ in 0..3 {
        s_client_closes(serve.addr);
    }
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert_eq!(calls(&doc, "SSL_read", "unknown"), 3, "{stdout}");
    assert_eq!(calls(&doc, "SSL_read", "closed"), 0, "{stdout}");
    assert!(!attached(&doc).contains(&"SSL_get_error".to_string()));
    // --exact-outcomes probes SSL_get_error, which says ZERO_RETURN: closed.
    let trace = Trace::start(&["-p", &pid, "--probes", "io", "--exact-outcomes"]);
    for _ in 0..3 {
        s_client_closes(serve.addr);
    }
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert_eq!(calls(&doc, "SSL_read", "closed"), 3, "{stdout}");
    assert_eq!(calls(&doc, "SSL_read", "unknown"), 0, "{stdout}");
    assert!(attached(&doc).contains(&"SSL_get_error".to_string()));
}

/// Issue 30, item 4: percentiles were interpolated over the whole of a bucket, so one 654 us
/// call in [512, 1024) showed p50 768 us and p99 1.02 ms, and 2 us calls in [0, 200) p50 100 us.
/// The kernel keeps each bucket's sum: a percentile now lies where the bucket's values were.
/// One connection in buckets 50 ms wide: each of its one-call rows is exact.
#[test]
fn percentiles_lie_within_what_each_bucket_recorded() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&[
        "-p",
        &pid,
        "--functions",
        "SSL_do_handshake,SSL_read,SSL_write",
        "--linear",
        "0,100000,50000",
    ]);
    let addr = serve.addr.to_string();
    let out = support::tlsscope(&["handshake", &addr, "--request", "/"]);
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    let rows = doc["functions"].as_array().unwrap();
    let mut exact = 0;
    for f in rows {
        let s = &f["summary"];
        let (count, mean) = (n(&s["count"]), s["mean_us"].as_f64().unwrap());
        let (p50, p99) = (s["p50_us"].as_f64().unwrap(), s["p99_us"].as_f64().unwrap());
        let buckets = f["buckets"].as_array().unwrap();
        let low = n(&buckets[0]["low_us"]) as f64;
        assert!(mean < 50_000.0, "{f}");
        if count == 1 {
            // One value: it is its own every percentile.
            assert!(
                (p50 - mean).abs() < 1e-6 && (p99 - mean).abs() < 1e-6,
                "{f}\n{stdout}"
            );
            exact += 1;
        } else {
            // Within the part of the bucket its mean allows, never at the bucket's middle.
            assert!(
                low <= p50 && p50 <= p99 && p99 <= 2.0 * mean - low,
                "{f}\n{stdout}"
            );
        }
    }
    assert!(
        calls(&doc, "SSL_do_handshake", "success") == 1 && exact >= 1,
        "{stdout}"
    );
}

#[test]
fn linear_buckets_per_process_tables_and_intervals() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&[
        "-p",
        &pid,
        "--functions",
        "SSL_do_handshake",
        "--linear",
        "0,1000,200",
        "--per-pid",
        "-i",
        "500ms",
    ]);
    bench(serve.addr, &["--mode", "full", "-n", "50", "-c", "2"]);
    // Long enough for two more interval tables after the load.
    std::thread::sleep(Duration::from_millis(1300));
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    assert_eq!(doc["buckets"]["kind"], "linear");
    assert_eq!(attached(&doc), ["SSL_do_handshake"]);
    let success: Vec<&Value> = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["outcome"] == "success")
        .collect();
    assert_eq!(success.len(), 1, "{stdout}");
    assert_eq!(success[0]["pid"], serve.pid(), "per process: {stdout}");
    for b in success[0]["buckets"].as_array().unwrap() {
        let low = n(&b["low_us"]);
        assert!(
            low.is_multiple_of(200) && low <= 1000,
            "linear 0,1000,200 edges: {b}"
        );
        match b["high_us"].as_u64() {
            Some(high) => assert_eq!(high, low + 200, "{b}"),
            None => assert_eq!(low, 1000, "only the top bucket is open: {b}"),
        }
    }
    assert_eq!(n(&success[0]["summary"]["count"]), 51, "{stdout}");
    // The interval tables came before the final report.
    assert!(stdout.matches("--- ").count() >= 2, "{stdout}");
    assert!(
        stdout.contains("[0us, 200us)") || stdout.contains("[200us, 400us)"),
        "{stdout}"
    );
}

#[test]
fn attach_all_filters_to_the_traced_process_in_bpf() {
    let _one = one_at_a_time();
    let serve = Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    let trace = Trace::start(&[
        "-p",
        &pid,
        "--functions",
        "SSL_do_handshake",
        "--attach-all",
    ]);
    // The bench client, on OpenSSL, calls SSL_do_handshake too (at least twice a handshake on
    // its non-blocking sockets), in its own process: it hits the same breakpoints (attached for
    // every process) and must be filtered out. (The rustls client would not call it at all.)
    bench(
        serve.addr,
        &[
            "--mode",
            "full",
            "-n",
            "80",
            "-c",
            "2",
            "--client-engine",
            "openssl",
        ],
    );
    let (ok, stdout, stderr, doc) = trace.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    assert!(doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| a["pid"] == -1));
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        n(&stats["handshakes"]["full"]),
        "only the server's calls\n{stdout}"
    );
    // ...while the probe was hit by both processes: past the server's own calls (every
    // outcome, retries included), at least one of the client's for each of the run's 80
    // handshakes (usually two on its non-blocking sockets, but the count of hits from other
    // processes is not exact enough to ask for both).
    let server_calls: u64 = doc["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["function"] == "SSL_do_handshake")
        .map(|f| n(&f["summary"]["count"]))
        .sum();
    let probed = n(&doc["overhead"]["probed_calls"]);
    assert!(
        probed >= server_calls + 80,
        "{probed} probed calls, {server_calls} of them the server's\n{stdout}"
    );
}

/// `trace --backend kernel -p MASTER --probes handshake,io`, attached.
fn kernel_trace_of(master: u32) -> Trace {
    Trace::start(&[
        "--backend",
        "kernel",
        "-p",
        &master.to_string(),
        "--probes",
        "handshake,io",
    ])
}

/// Loads nginx with `requests` connections of one request each (and bench's check before the
/// run), stops `trace`, and checks that it counted one successful handshake per line of nginx's
/// log; returns the trace's document and text.
fn handshakes_match_nginx_s_log(
    nginx: &crate::inproc::NginxDir,
    trace: Trace,
    requests: u64,
) -> (Value, String) {
    let n = requests.to_string();
    bench(
        nginx.addr(),
        &["--mode", "full", "-n", &n, "-c", "2", "--request", "/"],
    );
    let (ok, stdout, stderr, doc) = trace.stop();
    assert!(ok, "{stderr}");
    let logged = nginx.access_log_lines() as u64;
    assert!(logged > requests, "{logged}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        logged,
        "{stdout}"
    );
    (doc, stdout)
}

/// `trace -p <nginx master>` (the PID in nginx.pid) with the kernel backend: nginx handshakes in
/// its worker, a child the master forked after loading libssl, where a probe attached in the
/// master does not fire. The trace follows the worker, says so, and counts every handshake
/// nginx logged (issue 30 found "(no calls traced)").
#[test]
fn tracing_nginx_s_master_follows_its_workers() {
    let _one = one_at_a_time();
    let nginx = crate::inproc::NginxDir::new();
    let _server = nginx.start();
    let master = nginx.master_pid();
    let workers = crate::inproc::workers(master);
    assert!(!workers.is_empty(), "nginx has its worker");
    let trace = kernel_trace_of(master);
    let said = trace.early_stderr.join("\n");
    let (doc, stdout) = handshakes_match_nginx_s_log(&nginx, trace, 100);
    let logged = nginx.access_log_lines() as u64;
    assert_eq!(calls(&doc, "SSL_write", "success"), logged, "{stdout}");
    let probed_in: Vec<u64> = doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["pid"].as_u64())
        .collect();
    for worker in &workers {
        assert!(probed_in.contains(&u64::from(*worker)), "{probed_in:?}");
        assert!(
            said.contains("and its children") && said.contains(&worker.to_string()),
            "the worker is named: {said}"
        );
    }
}

/// A reload (SIGHUP) while `trace -p <nginx master>` runs: the master forks new workers and
/// the old ones leave; the trace follows the new ones as they come, and counts every
/// handshake nginx logged after the reload.
#[test]
fn tracing_nginx_s_master_follows_workers_it_forks_later() {
    let _one = one_at_a_time();
    let nginx = crate::inproc::NginxDir::new();
    let _server = nginx.start();
    let master = nginx.master_pid();
    let before = crate::inproc::workers(master);
    let trace = kernel_trace_of(master);
    // SAFETY: signals the nginx master this test started (its own pid file).
    assert_eq!(
        unsafe { libc::kill(i32::try_from(master).unwrap(), libc::SIGHUP) },
        0
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut said = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no worker followed: {said:?}");
        if let Ok(line) = trace.stderr.recv_timeout(Duration::from_millis(100)) {
            said.push(line);
        }
        let now = crate::inproc::workers(master);
        let fresh: Vec<u32> = now
            .iter()
            .copied()
            .filter(|w| !before.contains(w))
            .collect();
        let old_gone = now.iter().all(|w| !before.contains(w));
        if let Some(&w) = fresh.first() {
            let named = said
                .iter()
                .any(|l| l.contains(&format!("following pid {w}, forked by {master}")));
            if named && old_gone {
                break;
            }
        }
    }
    handshakes_match_nginx_s_log(&nginx, trace, 60);
}

/// `-i 1s -d 3s` prints three interval tables: the last one, which ends with the run, used to
/// be lost (issue 30). A run that ends inside an interval prints that part, marked partial.
/// The start line counts its one function in the singular.
#[test]
fn every_interval_is_printed_including_the_last_and_a_partial_one() {
    let _one = one_at_a_time();
    let serve = Serve::start(&[]);
    let pid = serve.pid().to_string();
    for (duration, whole, partial) in [("3s", 3, 0), ("2800ms", 2, 1)] {
        let trace = Trace::start(&[
            "-p",
            &pid,
            "--functions",
            "SSL_do_handshake",
            "-i",
            "1s",
            "-d",
            duration,
        ]);
        let start_line = trace.early_stderr.join("\n");
        // Handshakes in the last interval: they must show in a table.
        std::thread::sleep(Duration::from_millis(2100));
        bench(serve.addr, &["--mode", "full", "-n", "20", "-c", "1"]);
        let (ok, stdout, stderr, doc) = trace.finish();
        assert!(ok, "{stderr}");
        let headers: Vec<&str> = stdout.lines().filter(|l| l.starts_with("--- ")).collect();
        let partials = headers.iter().filter(|h| h.contains("partial")).count();
        assert_eq!(
            (headers.len() - partials, partials),
            (whole, partial),
            "-d {duration}: {stdout}"
        );
        if partial == 0 {
            assert_eq!(headers.last(), Some(&"--- 3.0 s"), "{stdout}");
        }
        assert!(
            start_line.contains(" 1 function attached in "),
            "{start_line}"
        );
        let handshakes = doc["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["outcome"] == "success")
            .map(|f| n(&f["summary"]["count"]))
            .sum::<u64>();
        assert_eq!(
            handshakes, 21,
            "bench's 20 and its checking connection: {stdout}"
        );
        // They were made in the last interval, and its table shows them.
        let last = stdout.rsplit("--- ").next().unwrap();
        let mut table = last.lines().skip(1).take_while(|l| l.starts_with("  "));
        assert!(
            table.any(|l| l.contains("SSL_do_handshake") && l.contains(" success ")),
            "{stdout}"
        );
    }
    serve.stop();
}

/// Issue 31: a built-in server on `prefix` (OpenSSL 4.0.3, AWS-LC or BoringSSL, whose unversioned
/// `libssl.so` the kernel backend finds in /proc/PID/maps) traced while bench makes full and
/// resumed handshakes with a request each: SSL_do_handshake and SSL_write successes equal the
/// server's own handshakes and responses. AWS-LC's and BoringSSL's zero-byte write that sends
/// their tickets returns 0, which is not a success.
fn a_flavour_server_is_traced_with_exact_counts(prefix: &std::path::Path, file: &str) {
    let _one = one_at_a_time();
    let serve = Serve::start_with(
        &["--openssl", prefix.to_str().unwrap()],
        &["--threads", "1"],
    );
    let pid = serve.pid().to_string();
    let trace = Trace::start(&["-p", &pid, "--probes", "handshake,io"]);
    for mode in ["full", "resume"] {
        bench(
            serve.addr,
            &["--mode", mode, "-n", "40", "-c", "2", "--request", "/"],
        );
    }
    let (ok, stdout, stderr, doc) = trace.stop();
    let stats = serve.stop();
    assert!(ok, "{stderr}");
    let paths: Vec<&str> = doc["attached"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["path"].as_str())
        .collect();
    assert!(
        paths.iter().any(|p| p.ends_with(&format!("/{file}"))),
        "{paths:?}"
    );
    let env = &doc["environment"];
    let flavour = env["library_flavour"].as_str().unwrap();
    assert!(
        stats["library"].as_str().unwrap().starts_with(flavour),
        "{env:#} {stats}"
    );
    let h = &stats["handshakes"];
    let handshakes = n(&h["full"]) + n(&h["resumed_ticket"]) + n(&h["resumed_session_id"]);
    assert!(n(&h["resumed_ticket"]) >= 36, "{stats}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}\n{stats}"
    );
    assert_eq!(calls(&doc, "SSL_do_handshake", "failure"), 0, "{stdout}");
    assert_eq!(
        calls(&doc, "SSL_write", "success") + calls(&doc, "SSL_write_ex", "success"),
        n(&stats["requests"]),
        "one write per response\n{stdout}\n{stats}"
    );
}

#[test]
fn an_openssl_403_server_is_traced_with_exact_counts() {
    a_flavour_server_is_traced_with_exact_counts(support::openssl_403(), "libssl.so.4");
}

#[test]
fn an_aws_lc_server_is_traced_with_exact_counts() {
    a_flavour_server_is_traced_with_exact_counts(support::openssl_aws_lc(), "libssl.so");
}

#[test]
fn a_boringssl_server_is_traced_with_exact_counts() {
    a_flavour_server_is_traced_with_exact_counts(support::openssl_boringssl(), "libssl.so");
}
