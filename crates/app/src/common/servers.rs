//! Servers under test that tlsscope starts as child processes (`lab`, `compare`): the built-in
//! server (`tlsscope serve`) and Debian's nginx, each pinned to a CPU on a free loopback port,
//! and stopped (SIGTERM, then SIGKILL) when dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::common::error::{Context, Error, Result};
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
    /// Set once the process has been stopped and reaped.
    stopped: bool,
}

impl ServerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server by its PID: SIGTERM, then SIGKILL after 5 s; reaped either way.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        if let Ok(pid) = i32::try_from(self.child.id()) {
            if let Ok(None) = self.child.try_wait() {
                // SAFETY: kill signals a child we started and have not reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
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

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Has the kernel send SIGTERM to the child when the thread that started it ends, however it
/// ends: a server left behind by a killed tlsscope is the one exit path `Drop` cannot cover.
fn ends_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs between fork and exec and only calls prctl, which is
    // async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// How to start the built-in server.
pub struct Builtin<'a> {
    /// The tlsscope executable.
    pub exe: &'a Path,
    /// `--openssl` for the server (None: the system's library).
    pub openssl: Option<&'a str>,
    pub cert_type: ossl::CertType,
    /// One worker thread per CPU, pinned to it.
    pub cpus: &'a [usize],
    /// Further `serve` options.
    pub extra: &'a [&'a str],
    /// Runs on the command before it starts (the in-process probe library's environment).
    pub prepare: Option<&'a dyn Fn(&mut Command)>,
}

/// The exit status of a tlsscope command whose library lacks what was asked (a group, a key
/// type, a feature): told apart from other failures, so a matrix can say "not run" and why.
pub const EXIT_NOT_IN_LIBRARY: u8 = 3;

/// Why a built-in server did not start.
#[derive(Debug)]
pub enum NotStarted {
    /// Its library lacks what the settings ask for (serve's own one-line reason).
    NotInLibrary(String),
    /// Anything else.
    Failed(Error),
}

impl From<Error> for NotStarted {
    fn from(e: Error) -> NotStarted {
        NotStarted::Failed(e)
    }
}

/// `tlsscope [--openssl X] serve` as a child, pinned, on a free loopback port; it says where it
/// listens in a machine-readable first line.
pub fn start_builtin(b: &Builtin<'_>) -> Result<ServerProcess> {
    try_start_builtin(b).map_err(|e| match e {
        NotStarted::NotInLibrary(why) => Error::msg(format!("tlsscope serve did not start: {why}")),
        NotStarted::Failed(e) => e,
    })
}

/// [`start_builtin`], telling a library that lacks what was asked from other failures.
pub fn try_start_builtin(b: &Builtin<'_>) -> std::result::Result<ServerProcess, NotStarted> {
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
        &b.cpus.len().max(1).to_string(),
    ])
    .args([
        "--cpus",
        &b.cpus
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
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
    ends_with_parent(&mut cmd);
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
        stopped: false,
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
            // Its stderr is closed: it has ended, or is about to.
            let status = server.child.wait().ok().and_then(|s| s.code());
            server.stopped = true;
            let why = err.trim();
            if status == Some(i32::from(EXIT_NOT_IN_LIBRARY)) {
                let why = why.strip_prefix("tlsscope: error: ").unwrap_or(why);
                return Err(NotStarted::NotInLibrary(why.to_string()));
            }
            Err(Error::msg(format!("tlsscope serve did not start: {why}")).into())
        }
    }
}

/// How to start Debian's nginx.
pub struct Nginx<'a> {
    pub cert: ossl::CertType,
    pub cpu: usize,
    /// The directory of the `libssl.so.3` it runs against, through `LD_LIBRARY_PATH` (None:
    /// the one it is linked to, Debian's).
    pub library_dir: Option<&'a Path>,
    /// Key exchange groups (`ssl_ecdh_curve`, OpenSSL list syntax; None: nginx's default).
    pub groups: Option<&'a str>,
    /// Session cache and tickets on; off, every handshake it does is a full one.
    pub resumption: bool,
    /// Runs on the command before it starts (the in-process probe library's environment).
    pub prepare: Option<&'a dyn Fn(&mut Command)>,
}

/// A running nginx, what it loaded, and the counter it keeps.
pub struct NginxServer {
    pub process: ServerProcess,
    /// The CA certificate that signed the server's certificate.
    pub ca: PathBuf,
    /// The libssl the process mapped, from /proc/PID/maps.
    pub libssl: PathBuf,
    /// The plain-HTTP port of its `stub_status` page.
    status: SocketAddr,
    /// Connections it had handled when it came up (the readiness checks' own).
    handled_at_start: u64,
}

impl NginxServer {
    /// Connections on the TLS port it has handled since it came up: `stub_status`'s
    /// "handled", less the status page's own connections (this read's included).
    pub fn tls_connections(&self) -> Result<u64> {
        let handled = handled_connections(self.status)?;
        Ok(handled.saturating_sub(self.handled_at_start + 1))
    }
}

/// Debian's nginx, one process (no master, so the process is its one worker), pinned to a
/// CPU with `taskset`, with a generated configuration and an end-entity certificate (signed
/// by a CA made beside it: rustls refuses a CA certificate as a server's), on a free loopback
/// port, with a `stub_status` page on a second, plain one.
pub fn start_nginx(n: &Nginx<'_>) -> Result<NginxServer> {
    let nginx = Path::new("/usr/sbin/nginx");
    if !nginx.exists() {
        fail!("nginx as a server needs Debian's nginx (/usr/sbin/nginx): run `make deps`");
    }
    let dir = tempfile::tempdir().context("creating nginx's directory")?;
    let root = dir.path();
    let files = make_cert(root, n.cert)?;
    std::fs::create_dir_all(root.join("html"))?;
    std::fs::write(root.join("html/index.html"), "tlsscope lab page\n")?;
    let port = free_port()?;
    let status = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let conf = root.join("nginx.conf");
    std::fs::write(&conf, nginx_conf(root, port, status.port(), &files, n))?;
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &n.cpu.to_string()])
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
    if let Some(lib) = n.library_dir {
        cmd.env("LD_LIBRARY_PATH", lib);
    }
    if let Some(prepare) = n.prepare {
        prepare(&mut cmd);
    }
    ends_with_parent(&mut cmd);
    let child = cmd.spawn().context("starting nginx")?;
    let mut process = ServerProcess {
        child,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        library: String::new(),
        _dir: None,
        stopped: false,
    };
    // Up once its status page answers: by then it listens on both ports.
    let deadline = Instant::now() + Duration::from_secs(20);
    let handled_at_start = loop {
        if let Ok(handled) = handled_connections(status) {
            break handled;
        }
        if process.child.try_wait()?.is_some() || Instant::now() > deadline {
            let log = std::fs::read_to_string(root.join("error.log")).unwrap_or_default();
            fail!("nginx did not start: {}", log.lines().last().unwrap_or(""));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let libssl = mapped_libssl(process.pid())?;
    process._dir = Some(dir);
    Ok(NginxServer {
        ca: files.ca,
        process,
        libssl,
        status,
        handled_at_start,
    })
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The libssl a process has mapped, from /proc/PID/maps: what it really runs against.
pub fn mapped_libssl(pid: u32) -> Result<PathBuf> {
    let path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|file| {
            Path::new(file)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libssl.so"))
        })
        .map(PathBuf::from)
        .with_context(|| format!("no libssl in {path}"))
}

/// `stub_status`'s "handled" connections, read over plain HTTP (this read's connection is
/// counted in it).
fn handled_connections(status: SocketAddr) -> Result<u64> {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect_timeout(&status, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /status HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut page = String::new();
    s.read_to_string(&mut page)?;
    parse_handled(&page).with_context(|| format!("nginx's status page has no counts: {page:?}"))
}

/// "handled" from a `stub_status` page: the second number of the line after
/// "server accepts handled requests".
fn parse_handled(page: &str) -> Option<u64> {
    let mut lines = page.lines().skip_while(|l| !l.contains("accepts handled"));
    lines.next()?;
    lines.next()?.split_whitespace().nth(1)?.parse().ok()
}

/// nginx's certificate files.
struct CertFiles {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// A CA and an end-entity certificate for localhost signed by it, made by Debian's openssl.
fn make_cert(dir: &Path, cert: ossl::CertType) -> Result<CertFiles> {
    let key_args: &[&str] = match cert {
        ossl::CertType::EcdsaP256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        ossl::CertType::Rsa2048 => &["-newkey", "rsa:2048"],
        other => fail!(
            "nginx gets an RSA-2048 or ECDSA P-256 certificate, not {}",
            other.name()
        ),
    };
    let path = |name: &str| dir.join(name);
    let ext = path("leaf.ext");
    std::fs::write(
        &ext,
        "basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n\
         subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )?;
    let (ca, ca_key, csr) = (path("ca.pem"), path("ca.key"), path("leaf.csr"));
    let (leaf, key) = (path("cert.pem"), path("key.pem"));
    let steps: [Vec<&std::ffi::OsStr>; 3] = [
        os(&[
            "req",
            "-x509",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=tlsscope test CA",
        ])
        .into_iter()
        .chain(os(key_args))
        .chain(os(&["-keyout"]))
        .chain([ca_key.as_os_str()])
        .chain(os(&["-out"]))
        .chain([ca.as_os_str()])
        .collect(),
        os(&["req", "-new", "-nodes", "-subj", "/CN=localhost"])
            .into_iter()
            .chain(os(key_args))
            .chain(os(&["-keyout"]))
            .chain([key.as_os_str()])
            .chain(os(&["-out"]))
            .chain([csr.as_os_str()])
            .collect(),
        os(&["x509", "-req", "-days", "2", "-set_serial", "2", "-in"])
            .into_iter()
            .chain([csr.as_os_str()])
            .chain(os(&["-CA"]))
            .chain([ca.as_os_str()])
            .chain(os(&["-CAkey"]))
            .chain([ca_key.as_os_str()])
            .chain(os(&["-extfile"]))
            .chain([ext.as_os_str()])
            .chain(os(&["-out"]))
            .chain([leaf.as_os_str()])
            .collect(),
    ];
    for args in steps {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .context("running openssl (Debian's openssl package)")?;
        if !out.status.success() {
            return Err(Error::msg(format!(
                "openssl {} failed: {}",
                args[0].to_string_lossy(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            )));
        }
    }
    Ok(CertFiles {
        ca,
        cert: leaf,
        key,
    })
}

fn os<'a>(args: &[&'a str]) -> Vec<&'a std::ffi::OsStr> {
    args.iter().map(|a| std::ffi::OsStr::new(*a)).collect()
}

fn nginx_conf(
    root: &Path,
    port: u16,
    status_port: u16,
    files: &CertFiles,
    n: &Nginx<'_>,
) -> String {
    let sessions = if n.resumption {
        "ssl_session_cache shared:SSL:10m;\n  ssl_session_tickets on;"
    } else {
        "ssl_session_cache off;\n  ssl_session_tickets off;"
    };
    let groups = n
        .groups
        .map(|g| format!("    ssl_ecdh_curve {g};\n"))
        .unwrap_or_default();
    format!(
        "master_process off;\ndaemon off;\nworker_processes 1;\npid {root}/nginx.pid;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  keepalive_requests 1000000;\n  {sessions}\n\
         \x20 server {{\n    listen 127.0.0.1:{port} ssl;\n\
         \x20   ssl_certificate {cert};\n    ssl_certificate_key {key};\n\
         \x20   ssl_protocols TLSv1.2 TLSv1.3;\n{groups}    root {root}/html;\n  }}\n\
         \x20 server {{\n    listen 127.0.0.1:{status_port};\n\
         \x20   location = /status {{ stub_status; }}\n  }}\n}}\n",
        root = root.display(),
        cert = files.cert.display(),
        key = files.key.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handled_count_is_read_from_a_stub_status_page() {
        let page = "HTTP/1.1 200 OK\r\n\r\nActive connections: 1 \nserver accepts handled requests\n 17 16 20 \nReading: 0 Writing: 1 Waiting: 0 \n";
        assert_eq!(parse_handled(page), Some(16));
        assert_eq!(parse_handled("HTTP/1.1 404 Not Found\r\n\r\n"), None);
    }
}
