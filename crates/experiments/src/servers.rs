//! Servers under test that tlsscope starts as child processes (`lab`, `compare`): the built-in
//! server (`tlsscope serve`) and Debian's nginx, each pinned to a CPU on a free loopback port,
//! and stopped (SIGTERM, then SIGKILL) when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result};
use crate::fail;

/// The line `tlsscope serve --ready-json` prints first once it listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub listening: SocketAddr,
    pub pid: u32,
    /// The server's library and version ("AWS-LC 5.12.0"); absent before issue 31.
    #[serde(default)]
    pub library: String,
}

/// A server process we started.
pub struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
    /// The built-in server's library and version, as it said when ready (empty for nginx).
    pub library: String,
    /// Files the server uses (nginx's configuration and certificate), removed after it stops.
    _dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill signals a child we started and have not reaped.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How to start the built-in server.
pub struct Builtin<'a> {
    /// The tlsscope executable.
    pub exe: &'a Path,
    /// `--openssl` for the server (None: the system's library).
    pub openssl: Option<&'a str>,
    pub cert_type: ossl::CertType,
    pub cpu: usize,
    /// Further `serve` options.
    pub extra: &'a [&'a str],
    /// Runs on the command before it starts (the in-process probe library's environment).
    pub prepare: Option<&'a dyn Fn(&mut Command)>,
}

/// `tlsscope [--openssl X] serve` as a child, pinned, on a free loopback port; it says where it
/// listens in a machine-readable first line.
pub fn start_builtin(b: &Builtin<'_>) -> Result<ServerProcess> {
    let mut cmd = Command::new(b.exe);
    if let Some(o) = b.openssl {
        cmd.args(["--openssl", o]);
    }
    cmd.args([
        "serve",
        "--ready-json",
        "--listen",
        "127.0.0.1:0",
        "--threads",
        "1",
    ])
    .args([
        "--cpus",
        &b.cpu.to_string(),
        "--cert-type",
        b.cert_type.name(),
    ])
    .args(b.extra)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(prepare) = b.prepare {
        prepare(&mut cmd);
    }
    let mut child = cmd.spawn().context("starting tlsscope serve")?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    // Keep draining, so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let mut server = ServerProcess {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        library: String::new(),
        _dir: None,
    };
    match serde_json::from_str::<Ready>(&first) {
        Ok(ready) => {
            server.addr = ready.listening;
            server.library = ready.library;
            Ok(server)
        }
        Err(_) => {
            let mut err = String::new();
            if let Some(mut e) = server.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            fail!("tlsscope serve did not start: {}", err.trim())
        }
    }
}

/// Debian's nginx, one process (no master), pinned to `cpu`, with a generated config and
/// certificate of type `cert`, session cache and tickets on; `prepare` runs on its command before
/// it starts.
pub fn start_nginx(
    cert: ossl::CertType,
    cpu: usize,
    prepare: Option<&dyn Fn(&mut Command)>,
) -> Result<ServerProcess> {
    let nginx = Path::new("/usr/sbin/nginx");
    if !nginx.exists() {
        fail!("--target nginx needs Debian's nginx (/usr/sbin/nginx): run `make deps`");
    }
    let dir = tempfile::tempdir().context("creating nginx's directory")?;
    let root = dir.path();
    let (cert_path, key_path) = make_cert(root, cert)?;
    std::fs::create_dir_all(root.join("html"))?;
    std::fs::write(root.join("html/index.html"), "tlsscope lab page\n")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let conf = root.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(root, port, &cert_path, &key_path))?;
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &cpu.to_string()])
        .arg(nginx)
        .arg("-p")
        .arg(root)
        .arg("-e")
        .arg(root.join("error.log"))
        .arg("-c")
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(prepare) = prepare {
        prepare(&mut cmd);
    }
    let child = cmd.spawn().context("starting nginx")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut server = ServerProcess {
        child,
        addr,
        library: String::new(),
        _dir: None,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        if server.child.try_wait()?.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(root.join("error.log")).unwrap_or_default();
            fail!("nginx did not start: {}", log.lines().last().unwrap_or(""));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server._dir = Some(dir);
    Ok(server)
}

/// A self-signed certificate and key for nginx, made by Debian's `openssl req`.
fn make_cert(dir: &Path, cert: ossl::CertType) -> Result<(PathBuf, PathBuf)> {
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    let key_args: &[&str] = match cert {
        ossl::CertType::EcdsaP256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        ossl::CertType::Rsa2048 => &["-newkey", "rsa:2048"],
        other => fail!(
            "nginx gets an RSA-2048 or ECDSA P-256 certificate, not {}",
            other.name()
        ),
    };
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
        ])
        .args(key_args)
        .arg("-keyout")
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .context("running openssl req (Debian's openssl package)")?;
    if !out.status.success() {
        return Err(Error::msg(format!(
            "openssl req failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        )));
    }
    Ok((c, k))
}

fn nginx_conf(root: &Path, port: u16, cert: &Path, key: &Path) -> String {
    format!(
        "master_process off;\ndaemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n\
         \x20 ssl_session_cache shared:SSL:10m;\n  ssl_session_tickets on;\n\
         \x20 server {{\n    listen 127.0.0.1:{port} ssl;\n\
         \x20   ssl_certificate {cert};\n    ssl_certificate_key {key};\n\
         \x20   ssl_protocols TLSv1.2 TLSv1.3;\n    root {root}/html;\n  }}\n}}\n",
        root = root.display(),
        cert = cert.display(),
        key = key.display()
    )
}
