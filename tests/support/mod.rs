//! Helpers shared by the integration tests: the tlsscope binary, a running server, real peers.

pub mod peers;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The tlsscope binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tlsscope"))
}

/// A command that runs tlsscope, through `prefix` when one is given (e.g. `["scripts/fresh-mounts"]`,
/// relative to the workspace root); the caller adds tlsscope's arguments.
pub fn command_in(prefix: &[&str]) -> Command {
    match prefix.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(workspace_path(program));
            c.args(rest.iter().map(|a| workspace_path(a))).arg(bin());
            c
        }
        None => Command::new(bin()),
    }
}

/// `path` in the workspace, when it names a file there (scripts/...); else as given (a
/// program on PATH, an option).
pub fn workspace_path(path: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let candidate = root.join(path);
    if path.contains('/') && candidate.exists() {
        candidate
    } else {
        PathBuf::from(path)
    }
}

/// Runs tlsscope to completion with a time limit.
pub fn tlsscope(args: &[&str]) -> Output {
    run_with_timeout(Command::new(bin()).args(args), Duration::from_secs(600))
}

/// Runs a Python 3 script (`python3 -c`), at most 60 s; panics with its stderr unless it
/// succeeds. Returns its output.
pub fn python(script: &str) -> Output {
    let out = run_with_timeout(
        Command::new("python3").args(["-c", script]),
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "python3: {}", text(&out.stderr));
    out
}

/// Runs a command with stdin closed, killing it if it outlives `limit`.
pub fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    wait_with_timeout(&mut child, limit, &format!("{cmd:?}"))
}

fn wait_with_timeout(child: &mut Child, limit: Duration, what: &str) -> Output {
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    }
}

/// Text of a process's output stream.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts a failed run printed exactly one line on stderr, containing every `needles`, and no
/// panic or backtrace.
pub fn assert_one_line_error(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "expected one line on stderr, got: {err:?}"
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    for needle in needles {
        assert!(err.contains(needle), "stderr lacks {needle:?}: {err}");
    }
}

/// Asserts a failed run ended with one error line containing every `needles` (progress lines
/// may come before it), and no panic.
pub fn assert_error_line(out: &Output, needles: &[&str]) {
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "expected failure, got success; stderr: {err}"
    );
    assert!(!err.contains("panicked"), "panic: {err}");
    let errors: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("tlsscope: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "expected one error line: {err}");
    assert_eq!(
        err.trim_end().lines().last(),
        Some(errors[0]),
        "the error must come last: {err}"
    );
    for needle in needles {
        assert!(errors[0].contains(needle), "error lacks {needle:?}: {err}");
    }
}

/// A `tlsscope serve` started for one test, on a free loopback port.
pub struct Serve {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    stats_path: PathBuf,
}

impl Serve {
    /// Starts `tlsscope [global] serve <args>`; waits for its "listening" line.
    pub fn start(args: &[&str]) -> Serve {
        Self::start_with(&[], args)
    }

    /// Like `start`, with global options (e.g. `--openssl DIR`) before `serve`.
    pub fn start_with(global: &[&str], args: &[&str]) -> Serve {
        Self::start_in(&[], global, args)
    }

    /// Like `start_with`, run through a command prefix (e.g. `ip netns exec NAME`).
    pub fn start_in(prefix: &[&str], global: &[&str], args: &[&str]) -> Serve {
        let dir = tempfile::tempdir().expect("temp dir");
        let cert = dir.path().join("cert.pem");
        let stats_path = dir.path().join("stats.json");
        let mut command = match prefix.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let mut child = command
            .args(global)
            .arg("serve")
            .args(if args.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .arg("--cert-out")
            .arg(&cert)
            .arg("--stats-json")
            .arg(&stats_path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tlsscope serve");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let first = rx.recv_timeout(Duration::from_secs(30));
        let Ok(line) = first else {
            let _ = child.kill();
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("tlsscope serve did not start: {err}");
        };
        let addr = line
            .split("https://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in rx {});
        Serve {
            child: Some(child),
            addr,
            dir,
            stats_path,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server's process ID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The certificate the server generated (PEM).
    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("cert.pem")
    }

    /// Stops the server with SIGTERM and returns its final counters (what it saw, unperturbed
    /// by any stats request).
    pub fn stop(mut self) -> serde_json::Value {
        let mut child = self.child.take().expect("running");
        terminate(&mut child);
        let status = child.wait().expect("wait for serve");
        assert!(status.success(), "tlsscope serve exited with {status}");
        let json = std::fs::read(&self.stats_path).expect("stats json written at exit");
        serde_json::from_slice(&json).expect("stats json parses")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A network namespace made for one test, with its loopback up; deleted when dropped.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Creates `tlsscope-<tag>-<pid>`.
    pub fn new(tag: &str) -> Netns {
        let name = format!("tlsscope-{tag}-{}", std::process::id());
        let ns = Netns { name };
        ns.ip(&["netns", "add", &ns.name]);
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn ip(&self, args: &[&str]) {
        let out = run_with_timeout(Command::new("ip").args(args), Duration::from_secs(10));
        assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
    }

    /// Runs a command inside the namespace and asserts it succeeded.
    pub fn run(&self, command: &[&str]) {
        let mut args = vec!["netns", "exec", &self.name];
        args.extend_from_slice(command);
        self.ip(&args);
    }

    /// The prefix that runs a program inside the namespace.
    pub fn prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// Sends SIGTERM to a child we started.
pub fn terminate(child: &mut Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill has no memory effects; the pid is our own child, not yet reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
}

/// `openssl s_client` to the server, sending `stdin_data` and waiting for the server to close
/// (`-ign_eof`), so TLS 1.3 tickets and the response are read before it exits.
pub fn s_client(addr: SocketAddr, extra: &[&str], stdin_data: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("openssl")
        .arg("s_client")
        .args(["-connect", &addr.to_string(), "-ign_eof"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client (install the openssl package: make deps)");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(stdin_data.as_bytes())
        .expect("write to s_client");
    drop(stdin);
    wait_with_timeout(&mut child, Duration::from_secs(30), "openssl s_client")
}

/// A request that makes the built-in server answer and then close.
pub const GET_AND_CLOSE: &str = "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

/// `curl` with the server's certificate as the only trust anchor.
pub fn curl(cert: &Path, url: &str, extra: &[&str]) -> Output {
    run_with_timeout(
        Command::new("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(cert)
            .args(extra)
            .arg(url),
        Duration::from_secs(30),
    )
}

/// The OpenSSL 1.1.1w build the tests compare against, built by `tlsscope openssl build` once
/// per machine (cached in the build cache; built here when the cache does not have it).
pub fn openssl_111w() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("1.1.1w"))
}

/// The OpenSSL 3.0.2 build (Ubuntu 22.04's version), as [`openssl_111w`].
pub fn openssl_302() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("3.0.2"))
}

/// The OpenSSL 3.5.5 build (the LTS from 2025; openssl-src's copy lacks util/mkdef.pl, so
/// tlsscope writes its linker version scripts), as [`openssl_111w`].
pub fn openssl_355() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("3.5.5"))
}

/// The OpenSSL 4.0.3 build (openssl-src 400.0.2, built `no-module` like 3.5.5), as
/// [`openssl_111w`].
pub fn openssl_403() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("4.0.3"))
}

/// The AWS-LC build (from the aws-lc-sys crate's sources, with CMake), as [`openssl_111w`].
pub fn openssl_aws_lc() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("aws-lc"))
}

/// The BoringSSL build (from the boring-sys crate's sources, with CMake), as [`openssl_111w`].
pub fn openssl_boringssl() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| openssl_build("boringssl"))
}

/// The install prefix of the build `name` (a version, or a flavour such as "aws-lc"), built by
/// `tlsscope openssl build` unless cached.
fn openssl_build(name: &str) -> PathBuf {
    let out = tlsscope(&["openssl", "build", name]);
    assert!(
        out.status.success(),
        "tlsscope openssl build {name} failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let listing = tlsscope(&["openssl", "list"]);
    let listing = text(&listing.stdout);
    let line = listing
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in `openssl list`: {listing}"));
    let prefix = line
        .split_whitespace()
        .find(|w| w.starts_with('/'))
        .unwrap_or_else(|| panic!("no prefix in {line:?}"));
    PathBuf::from(prefix)
}

/// Asserts `doc` matches the committed JSON schema `schemas/<name>.schema.json`.
pub fn assert_matches_schema(doc: &serde_json::Value, name: &str) {
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas")
        .join(format!("{name}.schema.json"));
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "the document does not match {}: {errors:?}",
        schema_path.display()
    );
}

/// A process started with its stderr read line by line in the background.
pub struct Watched {
    pub child: Child,
    /// Lines not taken yet.
    pub lines: mpsc::Receiver<String>,
    /// The lines read up to and including the awaited one.
    pub seen: Vec<String>,
}

/// Starts `cmd` (stdin closed, stderr piped) and waits up to `limit` for a stderr line
/// containing `needle`; panics with what it printed if it ends or times out first.
pub fn start_until(cmd: &mut Command, needle: &str, limit: Duration) -> Watched {
    let mut child = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return Watched {
                        child,
                        lines: rx,
                        seen,
                    };
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = child.wait();
                panic!("{cmd:?} ended before printing {needle:?}: {seen:?}");
            }
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} did not print {needle:?} within {limit:?}: {seen:?}");
        }
    }
}

/// The system's libssl, by the path this test process maps it from.
pub fn system_libssl() -> PathBuf {
    ossl::Library::load(&ossl::LibrarySource::System).unwrap();
    probes::tls_libraries(std::process::id())
        .unwrap()
        .into_iter()
        .find(|l| l.kind == probes::LibraryKind::OpensslSsl)
        .expect("libssl mapped")
        .path
}

/// Debian's chromium, headless, prints a page's DOM after its scripts have run (an SVG's too).
/// A number the page's check script put on `<body>` (`data-plots`, `data-plots-rendered`).
pub fn body_attribute(dom: &str, name: &str) -> usize {
    let key = format!("{name}=\"");
    let start = dom
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in the DOM"))
        + key.len();
    dom[start..].split('"').next().unwrap().parse().unwrap()
}

pub fn chromium_dom(page: &Path) -> String {
    chromium_page(page).0
}

/// The page as headless Chromium leaves it after its scripts ran, and what the page wrote to
/// the browser's console (errors included: an uncaught exception is logged there).
pub fn chromium_page(page: &Path) -> (String, Vec<String>) {
    let out = run_with_timeout(
        Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
                "--dump-dom",
            ])
            .arg(format!("file://{}", page.display())),
        Duration::from_secs(120),
    );
    let stderr = text(&out.stderr);
    assert!(
        out.status.success(),
        "chromium (Debian's package) failed: {stderr}"
    );
    let console = stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (text(&out.stdout), console)
}
