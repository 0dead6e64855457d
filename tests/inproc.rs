//! The in-process backend (`trace --backend user -- COMMAND`): tlsscope's library inside real
//! nginx, counts checked against what the load generator did and nginx logged, the workers
//! reported as themselves, and nginx left serving whatever happens to tlsscope.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::support::peers::{make_cert, CertType};
use crate::trace::{bench, calls};

/// nginx as a master and one worker (the fork the library must follow), everything in `dir`.
pub(crate) struct NginxDir {
    dir: tempfile::TempDir,
    /// Where nginx listens: chosen free before nginx binds it, and chosen again if another
    /// process took it first (nginx then exits saying so).
    addr: std::cell::Cell<SocketAddr>,
}

impl NginxDir {
    pub(crate) fn new() -> NginxDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("html")).unwrap();
        std::fs::create_dir(root.join("tmp")).unwrap();
        std::fs::write(root.join("html/index.html"), "inproc test page\n").unwrap();
        make_cert(root, CertType::EcdsaP256);
        let nginx = NginxDir {
            dir,
            addr: std::cell::Cell::new(SocketAddr::from(([127, 0, 0, 1], 0))),
        };
        nginx.choose_port();
        nginx
    }

    /// Picks a free port and writes the configuration that listens on it.
    fn choose_port(&self) {
        let port = support::probably_free_port();
        let r = self.dir.path().display();
        // `user root`: the worker must read the 0700 temporary directory.
        let conf = format!(
            "user root;\nworker_processes 1;\ndaemon off;\npid {r}/nginx.pid;\n\
             error_log {r}/error.log;\nevents {{ worker_connections 256; }}\n\
             http {{\n  access_log {r}/access.log;\n  client_body_temp_path {r}/tmp;\n  \
             proxy_temp_path {r}/tmp;\n  fastcgi_temp_path {r}/tmp;\n  uwsgi_temp_path {r}/tmp;\n  \
             scgi_temp_path {r}/tmp;\n  server {{\n    listen 127.0.0.1:{port} ssl;\n    \
             ssl_certificate {r}/cert.pem;\n    ssl_certificate_key {r}/key.pem;\n    \
             root {r}/html;\n  }}\n}}\n"
        );
        std::fs::write(self.path("nginx.conf"), conf).unwrap();
        self.addr.set(SocketAddr::from(([127, 0, 0, 1], port)));
    }

    /// Where nginx listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr.get()
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts nginx with `spawn` until its master (`master(child)`) listens on our port and
    /// `ready`; when nginx exits because another process took the port, on another port.
    fn start_listening(
        &self,
        mut spawn: impl FnMut() -> Child,
        master: impl Fn(&Child) -> Option<u32>,
        ready: impl Fn(&Child) -> bool,
        logs: impl Fn() -> String,
    ) -> Child {
        for _ in 0..5 {
            let _ = std::fs::remove_file(self.path("nginx.pid"));
            let _ = std::fs::remove_file(self.path("error.log"));
            let mut child = spawn();
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                let listening =
                    master(&child).is_some_and(|pid| support::listens(pid, self.addr().port()));
                if listening && ready(&child) {
                    return child;
                }
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                assert!(Instant::now() < deadline, "nginx did not start: {}", logs());
                std::thread::sleep(Duration::from_millis(50));
            }
            let logs = logs();
            assert!(
                logs.contains("Address already in use"),
                "nginx did not start: {logs}"
            );
            self.choose_port();
        }
        panic!("nginx found its port taken five times: {}", logs());
    }

    /// `tlsscope trace ARGS -- nginx ...`, returned once nginx accepts connections.
    fn trace(&self, args: &[&str]) -> Child {
        let spawn = || {
            let mut cmd = Command::new(support::bin());
            cmd.arg("trace").args(args).arg("--").arg("/usr/sbin/nginx");
            cmd.arg("-p").arg(self.dir.path());
            cmd.arg("-c").arg(self.path("nginx.conf"));
            cmd.arg("-e").arg(self.path("error.log"));
            cmd.stdin(Stdio::null())
                .stdout(Stdio::from(
                    std::fs::File::create(self.path("trace.out")).unwrap(),
                ))
                .stderr(Stdio::from(
                    std::fs::File::create(self.path("trace.err")).unwrap(),
                ))
                .spawn()
                .unwrap()
        };
        // nginx is tlsscope's child: its master is the PID in its pid file.
        self.start_listening(
            spawn,
            |_| read(&self.path("nginx.pid")).trim().parse().ok(),
            |_| true,
            || {
                format!(
                    "{}{}",
                    read(&self.path("trace.err")),
                    read(&self.path("error.log"))
                )
            },
        )
    }

    /// nginx itself (not under tlsscope), returned once it accepts connections and has its
    /// worker; ended (by its PID) when dropped, whatever the test's outcome.
    pub(crate) fn start(&self) -> Running {
        let spawn = || {
            Command::new("/usr/sbin/nginx")
                .arg("-p")
                .arg(self.dir.path())
                .arg("-c")
                .arg(self.path("nginx.conf"))
                .arg("-e")
                .arg(self.path("error.log"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        Running(self.start_listening(
            spawn,
            |child| Some(child.id()),
            |child| !workers(child.id()).is_empty(),
            || read(&self.path("error.log")),
        ))
    }

    /// `tlsscope trace ARGS -p MASTER --backend user`, returned once it has attached.
    fn attach(&self, master: u32, args: &[&str]) -> support::Watched {
        let mut cmd = Command::new(support::bin());
        cmd.args(["trace", "--backend", "user", "-p", &master.to_string()])
            .args(args)
            .stdout(Stdio::from(
                std::fs::File::create(self.path("trace.out")).unwrap(),
            ));
        support::start_until(&mut cmd, "wrapped in process", Duration::from_secs(60))
    }

    pub(crate) fn master_pid(&self) -> u32 {
        read(&self.path("nginx.pid")).trim().parse().unwrap()
    }

    pub(crate) fn access_log_lines(&self) -> usize {
        read(&self.path("access.log")).lines().count()
    }
}

/// An nginx master this test started, SIGTERMed and reaped when dropped.
pub(crate) struct Running(Child);

impl Running {
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        support::terminate(&mut self.0);
        let _ = self.0.wait();
    }
}

/// The children of `pid` (nginx's workers).
pub(crate) fn workers(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// nginx's GOT entries for the functions `trace --probes handshake,io` wraps, in process
/// `pid`: (symbol, address, value), found with binutils' `readelf`, independently of
/// tlsscope.
fn got(pid: u32) -> Vec<(String, u64, u64)> {
    const WRAPPED: &[&str] = &["SSL_do_handshake", "SSL_read", "SSL_write", "SSL_shutdown"];
    let out = Command::new("readelf")
        .args(["-W", "-r", "/usr/sbin/nginx"])
        .output()
        .expect("readelf (binutils)");
    let maps = read(Path::new(&format!("/proc/{pid}/maps")));
    let base = maps
        .lines()
        .find(|l| l.ends_with("/usr/sbin/nginx") && l.split(' ').nth(2) == Some("00000000"))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .expect("nginx's first mapping");
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut entries = Vec::new();
    for line in support::text(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 5 || !(f[2] == "R_X86_64_JUMP_SLOT" || f[2] == "R_X86_64_GLOB_DAT") {
            continue;
        }
        let name = f[4].split('@').next().unwrap();
        if !WRAPPED.contains(&name) {
            continue;
        }
        let address = base + u64::from_str_radix(f[0], 16).unwrap();
        let mut value = [0; 8];
        std::os::unix::fs::FileExt::read_exact_at(&mem, &mut value, address).unwrap();
        entries.push((name.to_string(), address, u64::from_ne_bytes(value)));
    }
    assert_eq!(entries.len(), WRAPPED.len(), "{entries:?}");
    entries
}

/// Whether `address` lies in a mapping of a file whose path contains `needle`, in `pid`.
fn in_file(pid: u32, address: u64, needle: &str) -> bool {
    read(Path::new(&format!("/proc/{pid}/maps")))
        .lines()
        .filter(|l| l.contains(needle))
        .any(|l| {
            let (start, end) = l.split(' ').next().unwrap().split_once('-').unwrap();
            let (start, end) = (
                u64::from_str_radix(start, 16).unwrap(),
                u64::from_str_radix(end, 16).unwrap(),
            );
            (start..end).contains(&address)
        })
}

/// Where the user backend keeps its library and the region files it hands to running
/// processes (the tests run as root).
const RUN_DIR: &str = "/run/tlsscope";

/// Region files the tlsscope run `pid` left in its directory (named `region-PID-N`; other
/// tests' runs, going on at the same time, have files of their own). The directory must exist:
/// the run put its library there.
fn region_files(pid: u32) -> Vec<String> {
    let prefix = format!("region-{pid}-");
    std::fs::read_dir(RUN_DIR)
        .unwrap_or_else(|e| panic!("{RUN_DIR}, where the user backend works: {e}"))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// The region files of the tlsscope run `pid` that process `target` maps, as its maps name
/// them (" (deleted)" once removed).
fn mapped_regions(target: u32, pid: u32) -> Vec<String> {
    let prefix = format!("{RUN_DIR}/region-{pid}-");
    let mut mapped: Vec<String> = read(Path::new(&format!("/proc/{target}/maps")))
        .lines()
        .filter_map(|l| l.find(&prefix).map(|at| l[at..].to_string()))
        .collect();
    mapped.dedup();
    mapped
}

/// Process `target` maps a region file of the tlsscope run `pid`, and that file is gone from
/// the directory: it was removed once mapped.
fn assert_region_mapped_and_removed(target: u32, pid: u32) {
    let mapped = mapped_regions(target, pid);
    assert!(
        !mapped.is_empty() && mapped.iter().all(|m| m.ends_with(" (deleted)")),
        "{target} maps {mapped:?}"
    );
    let files = region_files(pid);
    assert!(files.is_empty(), "{files:?}");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill signals a child we started and have not reaped.
    unsafe { libc::kill(i32::try_from(child.id()).unwrap(), signal) };
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(i32::try_from(pid).unwrap(), 0) == 0 }
}

// Issue 13.
#[test]
fn nginx_under_the_user_backend_counts_exactly_per_worker() {
    let nginx = NginxDir::new();
    let json = nginx.path("trace.json");
    let json_arg = json.to_str().unwrap();
    let mut trace = nginx.trace(&["--per-pid", "--probes", "handshake,io", "--json", json_arg]);
    let master = nginx.master_pid();
    bench(
        nginx.addr(),
        &["--mode", "full", "-n", "120", "-c", "4", "--request", "/"],
    );
    bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "300", "-c", "3"],
    );
    signal(&trace, libc::SIGINT);
    let status = trace.wait().unwrap();
    let stderr = read(&nginx.path("trace.err"));
    let stdout = read(&nginx.path("trace.out"));
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    support::assert_matches_schema(&doc, "trace.v1");
    assert_eq!(doc["backend"], "user");
    // 120 connections with a request, 3 keep-alive connections, and each run's check.
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), 125, "{stdout}");
    // The handshake of a non-blocking server needs more bytes at least once: a retry, known
    // exactly in process (never "unknown").
    assert!(calls(&doc, "SSL_do_handshake", "retry") >= 1, "{stdout}");
    for f in doc["functions"].as_array().unwrap() {
        assert_ne!(f["outcome"], "unknown", "{f:#}");
        // The worker, a forked child of the master, is reported as itself.
        let pid = f["pid"].as_u64().unwrap();
        assert_ne!(pid, u64::from(master), "{f:#}");
    }
    // Every request nginx logged was answered with one SSL_write.
    assert_eq!(
        calls(&doc, "SSL_write", "success"),
        nginx.access_log_lines() as u64,
        "{stdout}"
    );
    assert!(calls(&doc, "SSL_read", "success") >= 300, "{stdout}");
    assert!(doc["overhead"]["cost_ns_per_call"].as_f64().unwrap() > 0.0);
    // tlsscope started nginx, and ended it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(master) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(master), "nginx {master} outlived the trace");
}

// Issue 13.
#[test]
fn nginx_started_under_the_user_backend_keeps_serving_when_tlsscope_is_killed() {
    let nginx = NginxDir::new();
    let mut trace = nginx.trace(&["--probes", "all"]);
    let master = nginx.master_pid();
    bench(nginx.addr(), &["--mode", "full", "-n", "20", "-c", "2"]);
    signal(&trace, libc::SIGKILL);
    let _ = trace.wait();
    // The wrappers keep counting into memory nobody reads; nginx answers as before.
    let out = bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "200", "-c", "2"],
    );
    assert!(out.contains("status 200: 200"), "{out}");
    // Nothing of tlsscope's is left outside nginx: the region was a memfd.
    let leftovers: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("tlsscope"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // nginx, which the test started through tlsscope, is ended by its PID.
    // SAFETY: signals the nginx master this test started (its own pid file).
    unsafe { libc::kill(i32::try_from(master).unwrap(), libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(master) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

// Issue 13.
#[test]
fn the_user_backend_attached_to_running_nginx_counts_exactly_and_puts_its_got_back() {
    let nginx = NginxDir::new();
    let server = nginx.start();
    let master = server.id();
    let worker = workers(master)[0];
    let (master_before, worker_before) = (got(master), got(worker));
    for (name, _, value) in &worker_before {
        assert!(in_file(worker, *value, "libssl"), "{name} leads to libssl");
    }
    let json = nginx.path("trace.json");
    let mut trace = nginx.attach(
        master,
        &[
            "--per-pid",
            "--probes",
            "handshake,io",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    // Master and worker both call the wrappers now: every entry leads into tlsscope's library.
    for pid in [master, worker] {
        for (name, _, value) in got(pid) {
            assert!(in_file(pid, value, "libtlsscope_inproc"), "{pid} {name}");
        }
    }
    // Both processes mapped the region's file, which is gone once they did.
    for pid in [master, worker] {
        assert_region_mapped_and_removed(pid, trace.child.id());
    }
    bench(
        nginx.addr(),
        &["--mode", "full", "-n", "60", "-c", "2", "--request", "/"],
    );
    bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "200", "-c", "2"],
    );
    signal(&trace.child, libc::SIGINT);
    let status = trace.child.wait().unwrap();
    let stderr: Vec<String> = trace.lines.try_iter().collect();
    let stdout = read(&nginx.path("trace.out"));
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr:?}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    support::assert_matches_schema(&doc, "trace.v1");
    assert_eq!(doc["backend"], "user");
    // 60 connections with a request, 2 keep-alive ones, and each run's check connection.
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), 64, "{stdout}");
    assert!(calls(&doc, "SSL_do_handshake", "retry") >= 1, "{stdout}");
    for f in doc["functions"].as_array().unwrap() {
        assert_ne!(f["outcome"], "unknown", "{f:#}");
        assert_eq!(f["pid"].as_u64(), Some(u64::from(worker)), "{f:#}");
    }
    assert_eq!(
        calls(&doc, "SSL_write", "success"),
        nginx.access_log_lines() as u64,
        "{stdout}"
    );
    // Detached: every entry holds what it held before, in both processes.
    assert_eq!(got(master), master_before);
    assert_eq!(got(worker), worker_before);
    let out = bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "50", "-c", "1"],
    );
    assert!(out.contains("status 200: 50"), "{out}");
}

// Issue 13.
#[test]
fn attached_nginx_keeps_serving_when_tlsscope_is_killed_and_a_new_run_restores_it() {
    let nginx = NginxDir::new();
    let server = nginx.start();
    let master = server.id();
    let worker = workers(master)[0];
    let before = got(worker);
    let mut trace = nginx.attach(master, &["--probes", "handshake,io"]);
    bench(nginx.addr(), &["--mode", "full", "-n", "10", "-c", "1"]);
    let killed = trace.child.id();
    assert_region_mapped_and_removed(worker, killed);
    trace.child.kill().unwrap();
    let _ = trace.child.wait();
    // Left swapped (nobody put them back), with wrappers that stop timing once tlsscope's
    // lease runs out; nginx answers as before, and no file of the run is left.
    assert!(got(worker)
        .iter()
        .all(|(_, _, v)| in_file(worker, *v, "libtlsscope_inproc")));
    let out = bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "200", "-c", "2"],
    );
    assert!(out.contains("status 200: 200"), "{out}");
    let files = region_files(killed);
    assert!(files.is_empty(), "{files:?}");
    // A new run attaches over the old one (the library is loaded already) and counts.
    let json = nginx.path("again.json");
    let mut again = nginx.attach(
        master,
        &["--probes", "handshake,io", "--json", json.to_str().unwrap()],
    );
    assert!(
        again
            .seen
            .iter()
            .any(|l| l.contains("library already loaded")),
        "{:?}",
        again.seen
    );
    bench(nginx.addr(), &["--mode", "full", "-n", "10", "-c", "1"]);
    signal(&again.child, libc::SIGTERM);
    assert!(again.child.wait().unwrap().success());
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), 11);
    // And its end puts back what the killed run swapped.
    assert_eq!(got(worker), before);
}

// Issue 13.
/// A panic in tlsscope while attached unwinds through the tracer, which puts every GOT entry
/// back in nginx's master and worker; nginx keeps serving.
#[test]
fn a_panic_while_attached_puts_nginx_s_got_back() {
    let nginx = NginxDir::new();
    let server = nginx.start();
    let master = server.id();
    let worker = workers(master)[0];
    let (master_before, worker_before) = (got(master), got(worker));
    let mut cmd = Command::new(support::bin());
    cmd.args(["trace", "--backend", "user", "--probes", "handshake,io"])
        .args(["-p", &master.to_string()])
        .env("TLSSCOPE_TEST_PANIC_WHILE_TRACING", "1")
        .stdout(Stdio::null());
    let mut trace = support::start_until(&mut cmd, "wrapped in process", Duration::from_secs(60));
    let status = trace.child.wait().unwrap();
    let stderr: Vec<String> = trace.lines.try_iter().collect();
    assert!(!status.success(), "{stderr:?}");
    assert!(stderr.iter().any(|l| l.contains("panicked")), "{stderr:?}");
    assert_eq!(got(master), master_before);
    assert_eq!(got(worker), worker_before);
    let out = bench(
        nginx.addr(),
        &["--mode", "keepalive", "-n", "50", "-c", "1"],
    );
    assert!(out.contains("status 200: 50"), "{out}");
}

/// The JSON lines of a sniff capture.
fn sniffed(path: &Path) -> Vec<Value> {
    read(path)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The captured call of `direction` whose payload contains `token`.
fn call_with<'a>(calls: &'a [Value], direction: &str, token: &str) -> &'a Value {
    calls
        .iter()
        .find(|c| {
            c["direction"] == direction
                && String::from_utf8_lossy(&crate::sniff::data(c)).contains(token)
        })
        .unwrap_or_else(|| panic!("no {direction} with {token}: {calls:#?}"))
}

// Issue 13.
#[test]
fn sniff_in_process_shows_curl_s_token_on_both_sides_with_socket_addresses() {
    use std::os::unix::fs::PermissionsExt;
    let nginx = NginxDir::new();
    let server = nginx.start();
    let master = server.id();
    let worker = workers(master)[0];
    let before = got(worker);
    // Server side: attached to the running nginx.
    let server_file = nginx.path("server.jsonl");
    let mut cmd = Command::new(support::bin());
    cmd.args([
        "sniff",
        "--backend",
        "user",
        "-p",
        &master.to_string(),
        "--json",
    ])
    .arg(&server_file);
    let mut server_sniff =
        support::start_until(&mut cmd, "wrapped in process", Duration::from_secs(60));
    // Client side: curl started under the library.
    let client_file = nginx.path("client.jsonl");
    let token = format!("token-{}", std::process::id());
    let url = format!("https://{}/?{token}", nginx.addr());
    let out = Command::new(support::bin())
        .args(["sniff", "--json"])
        .arg(&client_file)
        .args(["--", "curl", "-sk", "-o", "/dev/null", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    std::thread::sleep(Duration::from_millis(300));
    signal(&server_sniff.child, libc::SIGINT);
    let status = server_sniff.child.wait().unwrap();
    let lines: Vec<String> = server_sniff.lines.try_iter().collect();
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{lines:?}");
    let (server_calls, client_calls) = (sniffed(&server_file), sniffed(&client_file));
    for path in [&server_file, &client_file] {
        let mode = std::fs::metadata(path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
    }
    // The request, as curl wrote it and as nginx's worker read it, with both sockets' ends.
    // curl reads and writes through a BIO of its own, which has no fd to ask: its socket is the
    // one its sniffed calls read and wrote.
    let sent = call_with(&client_calls, "write", &token);
    let received = call_with(&server_calls, "read", &token);
    assert_eq!(sent["peer"], nginx.addr().to_string(), "{sent:#}");
    assert_eq!(sent["local"], received["peer"], "{sent:#}");
    assert_eq!(received["pid"].as_u64(), Some(u64::from(worker)));
    assert_eq!(received["local"], nginx.addr().to_string());
    assert!(
        received["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{received:#}"
    );
    // And the response, both ways, on the same connection.
    let answered = call_with(&server_calls, "write", "inproc test page");
    let got_page = call_with(&client_calls, "read", "inproc test page");
    assert_eq!(answered["peer"], received["peer"]);
    assert_eq!(got_page["local"], sent["local"], "{got_page:#}");
    assert_eq!(got(worker), before);
}

// Issue 13.
/// tstclnt (NSS) under in-process sniff: NSPR's `PR_Read`/`PR_Write`/`PR_Send`/`PR_Recv`
/// also serve its request file and stdout, and only the calls on NSS's TLS layer are captured,
/// each with the socket under it.
#[test]
fn sniff_in_process_captures_an_nss_client_on_its_tls_socket_only() {
    let serve = support::Serve::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let token = crate::sniff::token();
    let request =
        format!("GET /nss-{token} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let request_file = dir.path().join("request");
    std::fs::write(&request_file, &request).unwrap();
    let capture = dir.path().join("capture.jsonl");
    let port = serve.addr.port().to_string();
    let out = Command::new(support::bin())
        .args(["sniff", "--json"])
        .arg(&capture)
        .args([
            "--",
            "tstclnt",
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-D",
            "-o",
            "-A",
        ])
        .arg(&request_file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = support::text(&out.stdout);
    let stderr = support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("HTTP/1.1 404"),
        "tstclnt got no response: {stdout}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("not sniffed") && l.contains("PR_")),
        "{stderr}"
    );
    let calls = sniffed(&capture);
    // The request was read from its file with PR_Read (not TLS), then sent (TLS): once.
    let with_token: Vec<&Value> = calls
        .iter()
        .filter(|c| String::from_utf8_lossy(&crate::sniff::data(c)).contains(&token))
        .collect();
    assert_eq!(with_token.len(), 1, "{with_token:#?}");
    let sent = with_token[0];
    assert_eq!(sent["direction"], "write");
    assert!(
        sent["function"].as_str().unwrap().starts_with("PR_"),
        "{sent:#}"
    );
    assert_eq!(sent["peer"], serve.addr.to_string(), "{sent:#}");
    // The response was received once (printing it with PR_Write is not captured).
    let responses = calls
        .iter()
        .filter(|c| String::from_utf8_lossy(&crate::sniff::data(c)).contains("HTTP/1.1 404"))
        .count();
    assert_eq!(responses, 1, "{calls:#?}");
    let socket = sent["fd"].as_i64().unwrap();
    for c in &calls {
        assert_eq!(c["fd"].as_i64(), Some(socket), "{c:#}");
    }
}

/// A program that links OpenSSL into its executable (a dynamic program with static TLS, as
/// vendored builds are) and waits: compiled with Debian's gcc and libssl-dev.
fn static_tls_program(dir: &Path) -> PathBuf {
    let src = dir.join("static_tls.c");
    std::fs::write(
        &src,
        "#include <openssl/ssl.h>\n#include <unistd.h>\n\
         int main(void) { SSL_CTX *c = SSL_CTX_new(TLS_method()); SSL *s = SSL_new(c);\n\
         if (SSL_read(s, 0, 0) > 1) return 1; pause(); return 0; }\n",
    )
    .unwrap();
    let exe = dir.join("static_tls");
    let out = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args([
            "-Wl,-Bstatic",
            "-lssl",
            "-lcrypto",
            "-Wl,-Bdynamic",
            "-lpthread",
            "-ldl",
        ])
        .output()
        .expect("cc");
    assert!(out.status.success(), "{}", support::text(&out.stderr));
    exe
}

/// `tlsscope trace --backend user -p PID` on `program`, which is ended afterwards.
fn attach_refused(
    program: &mut Command,
    pid_of: impl Fn(&Child) -> Option<u32>,
) -> std::process::Output {
    let mut child = program
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // strace's tracee may take longer to appear on a busy machine: up to 10 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let pid = loop {
        match pid_of(&child) {
            Some(pid) => break pid,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50))
            }
            None => panic!("the program to attach to did not start"),
        }
    };
    if pid != child.id() {
        // A grandchild just forked (strace's tracee): give its parent time to finish with it.
        std::thread::sleep(Duration::from_millis(300));
    }
    let out = support::tlsscope(&[
        "trace",
        "--backend",
        "user",
        "-p",
        &pid.to_string(),
        "-d",
        "1",
    ]);
    if pid != child.id() {
        // The program's own child (strace's tracee), ended by its PID first.
        // SAFETY: kill signals a process this test started through `program`.
        unsafe { libc::kill(i32::try_from(pid).unwrap(), libc::SIGKILL) };
    }
    support::terminate(&mut child);
    out
}

// Issue 13.
#[test]
fn processes_the_user_backend_cannot_attach_to_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let exe = static_tls_program(dir.path());
    let out = attach_refused(&mut Command::new(&exe), |c| Some(c.id()));
    support::assert_one_line_error(&out, &["statically", "--backend kernel"]);
    // Traced already (strace holds it).
    let out = attach_refused(
        Command::new("strace").args(["-o", "/dev/null", "sleep", "30"]),
        |c| workers(c.id()).first().copied(),
    );
    support::assert_one_line_error(&out, &["traced already", "by PID", "--backend kernel"]);
    // In a mount namespace of its own.
    let out = attach_refused(Command::new("unshare").args(["-m", "sleep", "30"]), |c| {
        Some(c.id())
    });
    support::assert_one_line_error(&out, &["mount namespace", "--backend kernel"]);
    // auto falls back to the kernel's uprobes, saying why: the built-in server looks the TLS
    // functions up with dlsym, so there is no GOT entry to redirect.
    let serve = support::Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    let out = support::tlsscope(&["trace", "-p", &pid, "--probes", "handshake,io", "-d", "1"]);
    let stderr = support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("dlsym") && stderr.contains("tracing with the kernel backend instead"),
        "{stderr}"
    );
    assert!(stderr.contains("kernel backend)"), "{stderr}");
    serve.stop();
}

// Issue 13.
#[test]
fn backend_misuse_gets_one_line_errors() {
    let out = support::tlsscope(&["trace", "--backend", "user", "--lib", "/bin/true"]);
    support::assert_one_line_error(&out, &["--backend user", "-p PID"]);
    let out = support::tlsscope(&["trace", "--backend", "kernel", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["--backend kernel", "-p PID"]);
    let out = support::tlsscope(&["trace", "--", "/nonexistent/program"]);
    support::assert_one_line_error(&out, &["cannot start", "/nonexistent/program"]);
    let out = support::tlsscope(&["trace", "--backend", "bpf", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["bpf", "kernel, user, auto"]);
    let out = support::tlsscope(&["sniff", "--ring-size", "4K", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["--ring-size 4096", "65536"]);
    for verb in ["trace", "sniff"] {
        let out = support::tlsscope(&[verb, "--lib", "/bin/true", "--", "/bin/true"]);
        support::assert_one_line_error(&out, &["--binary and --lib", "own target"]);
    }
    let out = support::tlsscope(&["trace", "--attach-all", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["--attach-all", "its own processes"]);
}

// Issue 13.
/// --comm narrows a started program's threads in process: curl's calls are reported only
/// under its own name.
#[test]
fn comm_narrows_a_started_command_s_threads_in_process() {
    let nginx = NginxDir::new();
    let _server = nginx.start();
    let url = format!("https://{}/", nginx.addr());
    let json = nginx.path("trace.json");
    let trace = |comm: &str| {
        let out = Command::new(support::bin())
            .args([
                "trace",
                "--probes",
                "handshake,io",
                "--comm",
                comm,
                "--json",
            ])
            .arg(&json)
            .args(["--", "curl", "-sk", "-o", "/dev/null", &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", support::text(&out.stderr));
        serde_json::from_str::<Value>(&read(&json)).unwrap()
    };
    assert_eq!(calls(&trace("curl"), "SSL_do_handshake", "success"), 1);
    assert_eq!(
        calls(&trace("nothing-such"), "SSL_do_handshake", "success"),
        0
    );
}

// Issue 13.
/// `sniff --ring-size` sizes each thread's ring in process: curl reading a 1 MiB page through
/// a 64 KiB ring (drained every 20 ms) loses records and says so; the default ring holds it.
#[test]
fn the_in_process_ring_size_is_the_one_asked_for() {
    let nginx = NginxDir::new();
    std::fs::write(nginx.path("html/big.bin"), vec![b'x'; 1 << 20]).unwrap();
    let _server = nginx.start();
    let url = format!("https://{}/big.bin", nginx.addr());
    let capture = nginx.path("capture.jsonl");
    let sniff = |ring: &[&str]| {
        let out = Command::new(support::bin())
            .arg("sniff")
            .args(ring)
            .arg("--json")
            .arg(&capture)
            .args(["--", "curl", "-sk", "-o", "/dev/null", &url])
            .output()
            .unwrap();
        (out.status.code(), support::text(&out.stderr))
    };
    let (code, stderr) = sniff(&["--ring-size", "64K"]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("use a larger --ring-size"), "{stderr}");
    let (code, stderr) = sniff(&[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("lost (ring buffer full): 0 calls"),
        "{stderr}"
    );
}

/// `tlsscope trace --backend user ARGS -- COMMAND`, output in `dir`.
fn trace_command(dir: &Path, args: &[&str], command: &[&str]) -> Child {
    Command::new(support::bin())
        .args(["trace", "--backend", "user"])
        .args(args)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            std::fs::File::create(dir.join("trace.out")).unwrap(),
        ))
        .stderr(Stdio::from(
            std::fs::File::create(dir.join("trace.err")).unwrap(),
        ))
        .spawn()
        .unwrap()
}

/// The number after `label` in the built-in server's closing statistics ("handshakes   full 41").
fn served(stdout: &str, label: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with(label.split(' ').next().unwrap()))
        .unwrap_or_else(|| panic!("no {label:?} in the server's statistics: {stdout}"));
    let after = line
        .split(label)
        .nth(1)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    after
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

// Issue 13.
/// The built-in server loads OpenSSL with dlopen and calls it through its own table: under the
/// library its calls still pass the wrappers, and the counts equal the server's own.
#[test]
fn the_built_in_server_under_the_user_backend_counts_its_own_calls() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trace.json");
    let (addr, mut trace) = built_in_server_under_trace(dir.path(), &json, &[], &[]);
    bench(
        addr,
        &["--mode", "full", "-n", "60", "-c", "2", "--request", "/"],
    );
    bench(addr, &["--mode", "keepalive", "-n", "200", "-c", "2"]);
    signal(&trace, libc::SIGINT);
    let status = trace.wait().unwrap();
    let stdout = read(&dir.path().join("trace.out"));
    let stderr = read(&dir.path().join("trace.err"));
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    assert_eq!(doc["backend"], "user");
    let handshakes = served(&stdout, "handshakes   full");
    // 60 + 2 connections, and each bench run's check.
    assert_eq!(handshakes, 64, "{stdout}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    let requests = served(&stdout, "requests");
    assert_eq!(calls(&doc, "SSL_write", "success"), requests, "{stdout}");
    assert!(calls(&doc, "SSL_do_handshake", "retry") >= 1, "{stdout}");
}

/// `tlsscope serve` on a free port under `trace --backend user --probes handshake,io`, its
/// command line after `prefix` (e.g. `env NAME=VALUE`), with tlsscope's `global` options
/// (e.g. `--openssl DIR`) before `serve`; returns once it accepts connections.
fn built_in_server_under_trace(
    dir: &Path,
    json: &Path,
    prefix: &[&str],
    global: &[&str],
) -> (SocketAddr, Child) {
    let exe = support::bin();
    let mut server = prefix.to_vec();
    server.push(exe.to_str().unwrap());
    server.extend_from_slice(global);
    // Port 0: the server's first line on stdout says which port it got.
    server.extend(["serve", "--listen", "127.0.0.1:0", "--threads", "1"]);
    let mut trace = trace_command(
        dir,
        &["--probes", "handshake,io", "--json", json.to_str().unwrap()],
        &server,
    );
    let addr = support::wait_for_listening_line(&dir.join("trace.out"), &mut trace);
    (addr, trace)
}

// Issue 13.
/// A wrapper that fails (a panic, injected for the test) never reaches the program: the server
/// serves every request, the failure is counted and reported, that wrapper stops counting, and
/// the other functions' counts stay exact.
#[test]
fn a_failing_wrapper_is_disabled_and_counted_and_the_program_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trace.json");
    let inject = format!(
        "{}=SSL_write",
        inproc_abi::ENV_INJECT_FAILURE.to_str().unwrap()
    );
    let (addr, trace) = built_in_server_under_trace(dir.path(), &json, &["env", &inject], &[]);
    bench(addr, &["--mode", "keepalive", "-n", "300", "-c", "2"]);
    signal(&trace, libc::SIGINT);
    let status = trace.wait_with_output().unwrap().status;
    let stdout = read(&dir.path().join("trace.out"));
    let stderr = read(&dir.path().join("trace.err"));
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let requests = served(&stdout, "requests");
    assert!(requests >= 300, "{stdout}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    assert_eq!(
        doc["wrapper_failures"],
        serde_json::json!([{"function": "SSL_write", "failures": 1}]),
        "{stdout}"
    );
    assert_eq!(calls(&doc, "SSL_write", "success"), 0, "{stdout}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        served(&stdout, "handshakes   full"),
        "{stdout}"
    );
    assert!(calls(&doc, "SSL_read", "success") >= requests, "{stdout}");
    assert!(
        stdout.contains("the in-process wrapper of SSL_write failed 1 time(s)"),
        "{stdout}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

// Issue 13.
/// Python's `_ssl` module brings libssl in with RTLD_LOCAL, out of reach of the library's
/// `dlsym(RTLD_NEXT)`: the wrappers still find the real functions, the program works, and its
/// `SSL_*_ex` calls are counted.
#[test]
fn a_program_with_a_locally_loaded_libssl_works_under_the_user_backend() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trace.json");
    let server = support::Serve::start(&["--threads", "1"]);
    let addr = server.addr;
    let script = format!(
        "import ssl, urllib.request\n\
         c = ssl.create_default_context(); c.check_hostname = False; c.verify_mode = ssl.CERT_NONE\n\
         print('body', len(urllib.request.urlopen('https://{addr}/', context=c).read()))"
    );
    let mut trace = trace_command(
        dir.path(),
        &["--probes", "handshake,io", "--json", json.to_str().unwrap()],
        &["/usr/bin/python3", "-c", &script],
    );
    let status = trace.wait().unwrap();
    let stdout = read(&dir.path().join("trace.out"));
    let stderr = read(&dir.path().join("trace.err"));
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("body "), "{stdout}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    assert_eq!(calls(&doc, "SSL_do_handshake", "success"), 1, "{stdout}");
    assert_eq!(calls(&doc, "SSL_write_ex", "success"), 1, "{stdout}");
    assert!(calls(&doc, "SSL_read_ex", "success") >= 1, "{stdout}");
}

// Issue 13.
/// Attached to tlsscope's built-in server, which calls OpenSSL through dlsym pointers: only
/// libssl's own GOT calls into libcrypto can be redirected, and the SSL_* functions are said
/// not to be traced instead of being counted as wrapped and silently missed.
#[test]
fn functions_no_got_entry_reaches_are_not_claimed_as_traced() {
    let serve = support::Serve::start(&["--threads", "1"]);
    let pid = serve.pid().to_string();
    let out = support::tlsscope(&["trace", "--backend", "user", "-p", &pid, "-d", "1s"]);
    let stderr = support::text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for f in ["SSL_read", "SSL_write", "SSL_do_handshake"] {
        assert!(
            stderr.contains(&format!(
                "not traced: {f} in libssl: the attached processes call it through no GOT entry"
            )),
            "{f}: {stderr}"
        );
    }
    assert!(stderr.contains("dlsym pointers"), "{stderr}");
}

/// `tlsscope sniff -p PID ARGS`, with the default backend (in process for -p), returned once
/// the wrappers are in.
fn sniff_in_process(pid: u32, args: &[&str]) -> support::Watched {
    let watched = sniff_until(pid, args, "wrapped in process");
    assert!(
        watched.seen.iter().any(|l| l.contains("user backend")),
        "-p picks the in-process backend: {:?}",
        watched.seen
    );
    watched
}

/// `tlsscope sniff -p PID ARGS`, returned once it printed `ready`.
fn sniff_until(pid: u32, args: &[&str], ready: &str) -> support::Watched {
    let mut cmd = Command::new(support::bin());
    cmd.args(["sniff", "-p", &pid.to_string()])
        .args(args)
        .stdout(Stdio::null());
    support::start_until(&mut cmd, ready, Duration::from_secs(60))
}

/// Ctrl-C to a sniff, once the last calls have had time to reach its rings; its stderr.
fn stop_sniff(mut sniff: support::Watched) -> Vec<String> {
    std::thread::sleep(Duration::from_millis(300));
    signal(&sniff.child, libc::SIGINT);
    let status = sniff.child.wait().unwrap();
    let mut lines = sniff.seen;
    lines.extend(sniff.lines.try_iter());
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{lines:#?}");
    lines
}

/// Three curls from known local ports to an nginx worker sniffed in process: each call is
/// shown with its own connection's peer, and the pcap holds three TCP conversations, one per
/// curl port (tshark's `-z conv,tcp`). nginx gives each new connection the fd and, from its
/// allocator, the `SSL` object of the one before: ends remembered by either showed the first
/// connection's peer for all (issue 30).
#[test]
fn sniff_shows_each_connections_own_peer_port() {
    each_connection_shows_its_own_peer(None);
}

/// The same with the kernel backend: the two backends agree.
#[test]
fn sniff_shows_each_connections_own_peer_port_with_the_kernel_backend() {
    let _one = crate::trace::one_at_a_time();
    each_connection_shows_its_own_peer(Some("kernel"));
}

/// Three curls from known local ports to an nginx worker sniffed with `backend` (None: the
/// default): each connection's calls show its curl's port, and tshark finds three
/// conversations with those ports in the pcap.
fn each_connection_shows_its_own_peer(backend: Option<&str>) {
    let nginx = NginxDir::new();
    let server = nginx.start();
    let worker = workers(server.id())[0];
    let (calls_file, pcap) = (nginx.path("calls.jsonl"), nginx.path("calls.pcapng"));
    let mut args = vec![
        "--json",
        "-o",
        calls_file.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
    ];
    let sniff = match backend {
        None => sniff_in_process(worker, &args),
        Some(backend) => {
            args.extend(["--backend", backend]);
            sniff_until(worker, &args, "functions attached")
        }
    };
    // Each curl's local port, as curl reports it (`-w`): a port chosen for curl beforehand
    // could be taken by another process first.
    let mut ports = Vec::new();
    for i in 0..3 {
        let url = format!("https://{}/?connection-{i}", nginx.addr());
        let out = support::curl(
            &nginx.path("cert.pem"),
            &url,
            &["-o", "/dev/null", "-w", "%{local_port}"],
        );
        assert!(out.status.success(), "{}", support::text(&out.stderr));
        let port: u16 = support::text(&out.stdout).trim().parse().unwrap();
        assert!(!ports.contains(&port), "{port} twice: {ports:?}");
        ports.push(port);
    }
    let stderr = stop_sniff(sniff);
    let calls = sniffed(&calls_file);
    let peers: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    for (i, peer) in peers.iter().enumerate() {
        let request = call_with(&calls, "read", &format!("connection-{i}"));
        assert_eq!(&request["peer"], peer, "{request:#}\n{stderr:#?}");
        assert_eq!(request["local"], nginx.addr().to_string(), "{request:#}");
        // The response goes back on the same connection.
        assert!(
            calls
                .iter()
                .any(|c| c["direction"] == "write" && &c["peer"] == peer),
            "no response to {peer}: {calls:#?}"
        );
    }
    assert!(
        calls.iter().all(|c| c["peer"]
            .as_str()
            .is_some_and(|p| peers.iter().any(|q| q == p))),
        "a call with another peer: {calls:#?}"
    );
    // tshark, on its own, finds one conversation per connection.
    let out = support::run_with_timeout(
        Command::new("tshark")
            .arg("-r")
            .arg(&pcap)
            .args(["-q", "-z", "conv,tcp"]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "tshark: {}",
        support::text(&out.stderr)
    );
    let table = support::text(&out.stdout);
    let mut conversations: Vec<u16> = table
        .lines()
        .filter(|l| l.contains("<->"))
        .map(|l| {
            let ends: Vec<&str> = l.split_whitespace().collect();
            let server = nginx.addr().to_string();
            let client = if ends[0] == server { ends[2] } else { ends[0] };
            client.rsplit(':').next().unwrap().parse().unwrap()
        })
        .collect();
    conversations.sort_unstable();
    let mut expected = ports.clone();
    expected.sort_unstable();
    assert_eq!(conversations, expected, "{table}");
}

/// nginx loads OpenSSL only: sniffing it says nothing of GnuTLS or NSS/NSPR functions (issue
/// 30 found eight lines about them), and at most one line of what its OpenSSL leaves out.
#[test]
fn sniff_says_nothing_of_libraries_the_target_does_not_load() {
    let nginx = NginxDir::new();
    let server = nginx.start();
    let worker = workers(server.id())[0];
    let sniff = sniff_in_process(worker, &["-q"]);
    let stderr = stop_sniff(sniff);
    for needle in ["gnutls", "GnuTLS", "PR_", "NSPR", "libnspr", "NSS"] {
        assert!(
            !stderr.iter().any(|l| l.contains(needle)),
            "{needle}: {stderr:#?}"
        );
    }
    let not_sniffed = stderr.iter().filter(|l| l.contains("not sniffed")).count();
    assert!(not_sniffed <= 1, "{stderr:#?}");
}

/// Issue 31: the built-in server on `prefix` (OpenSSL 4.0.3, AWS-LC or BoringSSL) started under
/// the user backend, while bench makes full and resumed handshakes with a request each:
/// SSL_do_handshake and SSL_write successes equal the server's own counts.
fn a_flavour_server_under_the_user_backend_counts_exactly(prefix: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("trace.json");
    let (addr, mut trace) = built_in_server_under_trace(
        dir.path(),
        &json,
        &[],
        &["--openssl", prefix.to_str().unwrap()],
    );
    for mode in ["full", "resume"] {
        bench(
            addr,
            &["--mode", mode, "-n", "40", "-c", "2", "--request", "/"],
        );
    }
    signal(&trace, libc::SIGINT);
    let status = trace.wait().unwrap();
    let stdout = read(&dir.path().join("trace.out"));
    let stderr = read(&dir.path().join("trace.err"));
    assert_eq!(status.code(), Some(crate::EXIT_INTERRUPTED), "{stderr}");
    let doc: Value = serde_json::from_str(&read(&json)).unwrap();
    assert_eq!(doc["backend"], "user");
    // "handshakes   full 43, resumed by session ID 0, resumed by ticket 38, failed 0 (...)"
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("handshakes"))
        .unwrap_or_else(|| panic!("no handshakes in {stdout}"));
    let of_handshakes = |label: &str| -> u64 {
        let after = line.split(&format!("{label} ")).nth(1).unwrap();
        after.split(',').next().unwrap().trim().parse().unwrap()
    };
    let resumed = of_handshakes("resumed by ticket") + of_handshakes("resumed by session ID");
    let handshakes = of_handshakes("full") + resumed;
    // 80 over 4 connections, and each bench run's check.
    assert_eq!(handshakes, 82, "{stdout}");
    assert!(resumed >= 36, "{stdout}");
    assert_eq!(
        calls(&doc, "SSL_do_handshake", "success"),
        handshakes,
        "{stdout}"
    );
    let requests = served(&stdout, "requests");
    assert_eq!(calls(&doc, "SSL_write", "success"), requests, "{stdout}");
}

#[test]
fn an_openssl_403_server_under_the_user_backend_counts_exactly() {
    a_flavour_server_under_the_user_backend_counts_exactly(support::openssl_403());
}

#[test]
fn an_aws_lc_server_under_the_user_backend_counts_exactly() {
    a_flavour_server_under_the_user_backend_counts_exactly(support::openssl_aws_lc());
}

#[test]
fn a_boringssl_server_under_the_user_backend_counts_exactly() {
    a_flavour_server_under_the_user_backend_counts_exactly(support::openssl_boringssl());
}
