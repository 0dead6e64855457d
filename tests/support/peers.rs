//! Real TLS servers for tests of a load generator: Debian's nginx and `openssl s_server`, each a
//! child process we own, listening on a free loopback port with a key and certificate made for
//! the test in its own temporary directory.

use std::fs::{self, File};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{run_with_timeout, terminate, text};

/// Debian's nginx (`make deps`).
const NGINX: &str = "/usr/sbin/nginx";
/// How long a server may take to start listening.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long a server may take to exit after SIGTERM.
const STOP_LIMIT: Duration = Duration::from_secs(10);
/// How often to look again while waiting for a server.
const POLL: Duration = Duration::from_millis(10);
/// Ports to try when something else takes the one we picked before the server binds it.
const BIND_ATTEMPTS: usize = 5;

/// The page nginx serves at `/`.
pub const NGINX_INDEX_HTML: &str =
    "<!DOCTYPE html>\n<html><body><p>tlsscope test peer: nginx</p></body></html>\n";

/// Key type of a peer's certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CertType {
    #[default]
    Rsa2048,
    EcdsaP256,
}

impl CertType {
    fn newkey_args(self) -> &'static [&'static str] {
        match self {
            CertType::Rsa2048 => &["-newkey", "rsa:2048"],
            CertType::EcdsaP256 => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
        }
    }
}

/// The TLS versions a peer accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocols {
    Tls12,
    Tls13,
    #[default]
    Tls12And13,
}

impl Protocols {
    /// Lowest and highest version, in the names OpenSSL and nginx use.
    fn range(self) -> (&'static str, &'static str) {
        match self {
            Protocols::Tls12 => ("TLSv1.2", "TLSv1.2"),
            Protocols::Tls13 => ("TLSv1.3", "TLSv1.3"),
            Protocols::Tls12And13 => ("TLSv1.2", "TLSv1.3"),
        }
    }

    fn nginx_list(self) -> String {
        match self.range() {
            (min, max) if min == max => min.to_string(),
            (min, max) => format!("{min} {max}"),
        }
    }
}

/// How to configure an nginx peer; the default resumes sessions both ways (cache and tickets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NginxOpts {
    pub cert: CertType,
    pub protocols: Protocols,
    /// `ssl_session_cache shared:SSL:1m` when on, `off` otherwise.
    pub session_cache: bool,
    /// `ssl_session_tickets`.
    pub tickets: bool,
}

impl Default for NginxOpts {
    fn default() -> Self {
        NginxOpts {
            cert: CertType::default(),
            protocols: Protocols::default(),
            session_cache: true,
            tickets: true,
        }
    }
}

/// One access log line: one request nginx finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessLine {
    /// The request came over a resumed session (`$ssl_session_reused` is "r").
    pub reused: bool,
    /// `$ssl_protocol`, e.g. "TLSv1.3".
    pub protocol: String,
    /// `$connection_requests`: 1 for the first request on a connection.
    pub connection_requests: u64,
    /// `$status`: the HTTP status sent.
    pub status: u16,
}

impl AccessLine {
    fn parse(line: &str) -> AccessLine {
        let fields: Vec<&str> = line.split(' ').collect();
        let [reused, protocol, connection_requests, status] = fields[..] else {
            panic!("access log line is not 4 fields: {line:?}");
        };
        let reused = match reused {
            "r" => true,
            "." => false,
            other => panic!("$ssl_session_reused is {other:?} in {line:?}"),
        };
        AccessLine {
            reused,
            protocol: protocol.to_string(),
            connection_requests: connection_requests
                .parse()
                .unwrap_or_else(|_| panic!("bad $connection_requests in {line:?}")),
            status: status
                .parse()
                .unwrap_or_else(|_| panic!("bad $status in {line:?}")),
        }
    }
}

/// Debian's nginx as a single process (`master_process off`) we own, with everything it writes
/// (pid, error and access logs, temp files) in its own temporary directory.
pub struct Nginx {
    process: ServerProcess,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx with `opts` on a free loopback port; returns once it accepts connections,
    /// panics with its error log if it does not within 10 s.
    pub fn start(opts: NginxOpts) -> Nginx {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let (cert, key) = make_cert(root, opts.cert);
        fs::create_dir(root.join("html")).expect("html dir");
        fs::write(root.join("html/index.html"), NGINX_INDEX_HTML).expect("index.html");
        fs::create_dir(root.join("tmp")).expect("tmp dir");
        let conf = root.join("nginx.conf");
        let pid_file = root.join("nginx.pid");
        let error_log = root.join("error.log");
        let stderr_log = root.join("stderr.log");
        let logs = || {
            format!(
                "error log: {}\nstderr: {}",
                read_lossy(&error_log),
                read_lossy(&stderr_log)
            )
        };
        let (process, addr) = start_on_free_port(
            "nginx",
            |addr| {
                fs::write(&conf, nginx_conf(root, addr, &cert, &key, &opts)).expect("nginx.conf");
                // Start each attempt with empty logs, so a failure reports only its own.
                let _ = fs::remove_file(&error_log);
                let stderr = File::create(&stderr_log).expect("stderr.log");
                Command::new(NGINX)
                    .arg("-p")
                    .arg(root)
                    .arg("-c")
                    .arg(&conf)
                    // Without -e, nginx opens its compiled-in error log before reading the
                    // config (stderr on Debian, a file under /var/log on other builds).
                    .arg("-e")
                    .arg(&error_log)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(stderr)
                    .spawn()
                    .unwrap_or_else(|e| panic!("cannot start {NGINX} (make deps): {e}"))
            },
            // nginx writes its pid file after it has bound the port.
            |pid| fs::read_to_string(&pid_file).is_ok_and(|s| s.trim() == pid.to_string()),
            logs,
        );
        Nginx { process, addr, dir }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's certificate (PEM), self-signed for `localhost` and 127.0.0.1: the trust
    /// anchor for verification.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The nginx process id (to check it is gone after `stop`).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Every request logged so far. nginx logs a request when it finishes it: before closing
    /// the connection, so after a client that waited for the close has exited, but possibly
    /// just after a keep-alive client got the last byte; `stop` returns the complete log.
    pub fn access_log(&self) -> Vec<AccessLine> {
        let path = self.dir.path().join("access.log");
        let log = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        log.lines().map(AccessLine::parse).collect()
    }

    /// Stops nginx with SIGTERM, asserts it exited cleanly, and returns the complete access log.
    pub fn stop(mut self) -> Vec<AccessLine> {
        let status = self.process.stop("nginx");
        assert!(
            status.success(),
            "nginx exited with {status}; error log: {}",
            read_lossy(&self.dir.path().join("error.log"))
        );
        self.access_log()
    }
}

/// nginx.conf for one test: loopback only, one process, nothing outside `dir`.
fn nginx_conf(dir: &Path, addr: SocketAddr, cert: &Path, key: &Path, opts: &NginxOpts) -> String {
    let dir = dir.display();
    let cert = cert.display();
    let key = key.display();
    let protocols = opts.protocols.nginx_list();
    let cache = if opts.session_cache {
        "shared:SSL:1m"
    } else {
        "off"
    };
    let tickets = if opts.tickets { "on" } else { "off" };
    // No `user`: with master_process off there are no workers to switch user, so the one
    // process keeps our uid and reads the 0700 temp dir.
    format!(
        r#"# Written by tests/support/peers.rs for one test.
daemon off;
master_process off;
worker_processes 1;
pid "{dir}/nginx.pid";
error_log "{dir}/error.log" warn;

events {{
    worker_connections 1024;
}}

http {{
    log_format peers '$ssl_session_reused $ssl_protocol $connection_requests $status';
    access_log "{dir}/access.log" peers;

    # The compiled-in defaults are under /var/lib/nginx.
    client_body_temp_path "{dir}/tmp/client_body";
    proxy_temp_path "{dir}/tmp/proxy";
    fastcgi_temp_path "{dir}/tmp/fastcgi";
    uwsgi_temp_path "{dir}/tmp/uwsgi";
    scgi_temp_path "{dir}/tmp/scgi";

    default_type text/html;
    keepalive_requests 1000000;

    server {{
        listen {addr} ssl;
        server_name localhost;
        ssl_certificate "{cert}";
        ssl_certificate_key "{key}";
        ssl_protocols {protocols};
        ssl_session_cache {cache};
        ssl_session_tickets {tickets};
        root "{dir}/html";
    }}
}}
"#
    )
}

/// How to configure an `openssl s_server` peer; the default resumes sessions both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SServerOpts {
    pub cert: CertType,
    pub protocols: Protocols,
    /// `-no_cache` when off.
    pub session_cache: bool,
    /// `-no_ticket` when off: no TLS 1.2 tickets, and TLS 1.3 tickets become stateful.
    pub tickets: bool,
    /// `-num_tickets N`: how many TLS 1.3 tickets after a handshake (OpenSSL's default is 2).
    pub num_tickets: Option<u32>,
}

impl Default for SServerOpts {
    fn default() -> Self {
        SServerOpts {
            cert: CertType::default(),
            protocols: Protocols::default(),
            session_cache: true,
            tickets: true,
            num_tickets: None,
        }
    }
}

/// `openssl s_server -www` we own: answers `GET /` with an HTML status page (ciphers, session)
/// and closes; one connection at a time.
pub struct SServer {
    process: ServerProcess,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl SServer {
    /// Starts s_server with `opts` on a free loopback port; returns once it accepts
    /// connections, panics with its output if it does not within 10 s.
    pub fn start(opts: SServerOpts) -> SServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let (cert, key) = make_cert(dir.path(), opts.cert);
        let log = dir.path().join("s_server.log");
        let (min, max) = opts.protocols.range();
        let (process, addr) = start_on_free_port(
            "openssl s_server",
            |addr| {
                let out = File::create(&log).expect("s_server.log");
                let err = out.try_clone().expect("s_server.log");
                let mut cmd = Command::new("openssl");
                cmd.arg("s_server")
                    .args(["-accept", &addr.to_string(), "-www"])
                    .arg("-cert")
                    .arg(&cert)
                    .arg("-key")
                    .arg(&key)
                    .args(["-min_protocol", min, "-max_protocol", max]);
                if !opts.session_cache {
                    cmd.arg("-no_cache");
                }
                if !opts.tickets {
                    cmd.arg("-no_ticket");
                }
                if let Some(n) = opts.num_tickets {
                    cmd.args(["-num_tickets", &n.to_string()]);
                }
                cmd.stdin(Stdio::null())
                    .stdout(out)
                    .stderr(err)
                    .spawn()
                    .unwrap_or_else(|e| panic!("cannot start openssl s_server (make deps): {e}"))
            },
            // s_server prints ACCEPT (and flushes) once it listens.
            |_| read_lossy(&log).lines().any(|l| l == "ACCEPT"),
            || read_lossy(&log),
        );
        SServer { process, addr, dir }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's certificate (PEM), self-signed for `localhost` and 127.0.0.1.
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// The s_server process id (to check it is gone after `stop`).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Stops s_server with SIGTERM (which it does not catch: it dies of the signal).
    pub fn stop(mut self) {
        self.process.stop("openssl s_server");
    }
}

/// True while `pid` names a process (a zombie included), as seen by kill(2).
pub fn process_exists(pid: u32) -> bool {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: signal 0 only checks that the process exists; kill has no memory effects.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// A server child we own: `stop` ends it with SIGTERM, dropping it kills it otherwise.
struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM and wait; if it outlives STOP_LIMIT, SIGKILL and panic.
    fn stop(&mut self, what: &str) -> ExitStatus {
        terminate(&mut self.child);
        let deadline = Instant::now() + STOP_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{what} ignored SIGTERM for {STOP_LIMIT:?}");
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // After `stop` the child is reaped and std sends nothing; otherwise this kills it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a server with `spawn(addr)` on a free loopback port and waits until `ready(pid)` and
/// the server listens on the port. Another process can take the port between our probe and the
/// server's bind; then the server exits saying so and we try another port.
fn start_on_free_port(
    what: &str,
    mut spawn: impl FnMut(SocketAddr) -> Child,
    ready: impl Fn(u32) -> bool,
    logs: impl Fn() -> String,
) -> (ServerProcess, SocketAddr) {
    for _ in 0..BIND_ATTEMPTS {
        let addr = free_port();
        let mut process = ServerProcess { child: spawn(addr) };
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let exited = process.child.try_wait().expect("wait");
            // The server itself listens there: another process that took the port would
            // answer a connect.
            if exited.is_none()
                && ready(process.pid())
                && super::listens(process.pid(), addr.port())
            {
                return (process, addr);
            }
            let logs = logs();
            if logs.contains("Address already in use") {
                // Next port; nginx would retry this one for 2.5 s before exiting, so dropping
                // `process` kills it.
                break;
            }
            if let Some(status) = exited {
                panic!("{what} exited with {status} before listening on {addr}:\n{logs}");
            }
            if Instant::now() > deadline {
                panic!("{what} is not accepting on {addr} after {START_LIMIT:?}:\n{logs}");
            }
            std::thread::sleep(POLL);
        }
    }
    panic!(
        "{what} found its port taken {BIND_ATTEMPTS} times; last time:\n{}",
        logs()
    );
}

/// A loopback port nothing listens on right now.
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr")
}

/// A key (`key.pem`) and a self-signed certificate (`cert.pem`) for `localhost` and 127.0.0.1,
/// written to `dir`.
/// A self-signed certificate for localhost and 127.0.0.1 in `dir` (cert.pem, key.pem).
pub fn make_cert(dir: &Path, cert_type: CertType) -> (PathBuf, PathBuf) {
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    let out = run_with_timeout(
        Command::new("openssl")
            .args(["req", "-x509", "-nodes", "-days", "2"])
            .args(cert_type.newkey_args())
            .args(["-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "openssl req ({cert_type:?}) failed: {}",
        text(&out.stderr)
    );
    (cert, key)
}

/// A log file's text, or a note saying why there is none.
fn read_lossy(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => text(&bytes),
        Err(e) => format!("({}: {e})", path.display()),
    }
}
