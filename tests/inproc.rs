//! The in-process backend (`trace --backend user -- COMMAND`): tlsscope's library inside real
//! nginx, counts checked against what the load generator did and nginx logged, the workers
//! reported as themselves, and nginx left serving whatever happens to tlsscope.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support;
use crate::support::peers::{make_cert, CertType};
use crate::trace::{bench, calls};

/// nginx as a master and one worker (the fork the library must follow), everything in `dir`.
struct NginxDir {
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl NginxDir {
    fn new() -> NginxDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("html")).unwrap();
        std::fs::create_dir(root.join("tmp")).unwrap();
        std::fs::write(root.join("html/index.html"), "inproc test page\n").unwrap();
        make_cert(root, CertType::EcdsaP256);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let r = root.display();
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
        std::fs::write(root.join("nginx.conf"), conf).unwrap();
        NginxDir {
            dir,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tlsscope trace ARGS -- nginx ...`, returned once nginx accepts connections.
    fn trace(&self, args: &[&str]) -> Child {
        let mut cmd = Command::new(support::bin());
        cmd.arg("trace").args(args).arg("--").arg("/usr/sbin/nginx");
        cmd.arg("-p").arg(self.dir.path());
        cmd.arg("-c").arg(self.path("nginx.conf"));
        cmd.arg("-e").arg(self.path("error.log"));
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                std::fs::File::create(self.path("trace.out")).unwrap(),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(self.path("trace.err")).unwrap(),
            ))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(self.addr).is_err() {
            if child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                panic!(
                    "nginx under tlsscope did not start: {}{}",
                    read(&self.path("trace.err")),
                    read(&self.path("error.log"))
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child
    }

    fn master_pid(&self) -> u32 {
        read(&self.path("nginx.pid")).trim().parse().unwrap()
    }

    fn access_log_lines(&self) -> usize {
        read(&self.path("access.log")).lines().count()
    }
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

#[test]
fn issue_13_nginx_under_the_user_backend_counts_exactly_per_worker() {
    let nginx = NginxDir::new();
    let json = nginx.path("trace.json");
    let json_arg = json.to_str().unwrap();
    let mut trace = nginx.trace(&["--per-pid", "--probes", "handshake,io", "--json", json_arg]);
    let master = nginx.master_pid();
    bench(
        nginx.addr,
        &["--mode", "full", "-n", "120", "-c", "4", "--request", "/"],
    );
    bench(nginx.addr, &["--mode", "keepalive", "-n", "300", "-c", "3"]);
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

#[test]
fn issue_13_nginx_keeps_serving_when_tlsscope_is_killed() {
    let nginx = NginxDir::new();
    let mut trace = nginx.trace(&["--probes", "all"]);
    let master = nginx.master_pid();
    bench(nginx.addr, &["--mode", "full", "-n", "20", "-c", "2"]);
    signal(&trace, libc::SIGKILL);
    let _ = trace.wait();
    // The wrappers keep counting into memory nobody reads; nginx answers as before.
    let out = bench(nginx.addr, &["--mode", "keepalive", "-n", "200", "-c", "2"]);
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

#[test]
fn issue_13_backend_misuse_gets_one_line_errors() {
    let out = support::tlsscope(&["trace", "--backend", "user", "-p", "1"]);
    support::assert_one_line_error(&out, &["--backend user", "-- COMMAND"]);
    let out = support::tlsscope(&["trace", "--backend", "kernel", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["--backend kernel", "-p PID"]);
    let out = support::tlsscope(&["trace", "--", "/nonexistent/program"]);
    support::assert_one_line_error(&out, &["cannot start", "/nonexistent/program"]);
    let out = support::tlsscope(&["trace", "--backend", "bpf", "--", "/bin/true"]);
    support::assert_one_line_error(&out, &["bpf", "kernel, user, auto"]);
}
