//! Helpers shared by the integration tests: the tlsscope binary, a running server, real peers.

pub mod go;
pub mod peers;

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The tlsscope binary under test.
/// Held by the tests whose figures need both CPUs to themselves (thread scaling, which keeps
/// both busy, and the paired-round verdict on a calibrated difference, which a neighbour
/// pinned to its CPU can flip): they run one at a time, beside the tests that do not care.
pub fn both_cpus() -> std::sync::MutexGuard<'static, ()> {
    static CPUS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CPUS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

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
    python_as(Path::new("python3"), script)
}

/// Like [`python`], running the python3 at `program` (e.g. a [`UniqueProgram`]'s path).
pub fn python_as(program: &Path, script: &str) -> Output {
    let out = run_with_timeout(
        Command::new(program).args(["-c", script]),
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
    /// Its stdout after the "listening" line.
    later: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
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
        // Keep draining stdout so the server never blocks on a full pipe, keeping its lines.
        let later = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&later);
        std::thread::spawn(move || {
            for line in rx {
                sink.lock().unwrap().push(line);
            }
        });
        Serve {
            child: Some(child),
            addr,
            dir,
            stats_path,
            later,
        }
    }

    /// The first line after the "listening" one that contains `needle`, waiting up to 20 s.
    pub fn stdout_line(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let lines = self.later.lock().unwrap();
            if let Some(line) = lines.iter().find(|l| l.contains(needle)) {
                return line.clone();
            }
            assert!(
                Instant::now() < deadline,
                "tlsscope serve printed no {needle:?}: {lines:?}"
            );
            drop(lines);
            std::thread::sleep(Duration::from_millis(50));
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
    curl_as(Path::new("curl"), cert, url, extra)
}

/// Like [`curl`], running the curl at `program` (e.g. a [`UniqueProgram`]'s path).
pub fn curl_as(program: &Path, cert: &Path, url: &str, extra: &[&str]) -> Output {
    run_with_timeout(
        Command::new(program)
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
    // Longer than `tlsscope`'s limit: on a fresh machine the tests start several builds at
    // once on few cores (BoringSSL alone is about 6 CPU-minutes).
    let out = run_with_timeout(
        Command::new(bin()).args(["openssl", "build", name]),
        Duration::from_secs(2400),
    );
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

/// A token no other test, run or process on the machine uses at the same time: this process's
/// ID, a counter, and the nanoseconds since the UNIX epoch.
pub fn unique_token() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos();
    format!("tok{}x{n}x{since_epoch}", std::process::id())
}

/// A program on PATH (curl, python3, tstclnt...) under a name of its own, so that its processes
/// have a comm (the name exec'd, at most 15 bytes) that no other test's copy has: a filter by
/// comm on the whole machine then sees this test's process only. The link goes with the value.
pub struct UniqueProgram {
    _dir: tempfile::TempDir,
    path: PathBuf,
    comm: String,
}

impl UniqueProgram {
    /// `program` (the first executable of that name on PATH that is a real program, not a
    /// script such as pyenv's shims, which pick what to run by the name they were called
    /// under) linked as `<first letters of program><number>`.
    pub fn new(program: &str) -> UniqueProgram {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let is_elf = |p: &Path| {
            let mut magic = [0u8; 4];
            std::fs::File::open(p)
                .and_then(|mut f| f.read_exact(&mut magic))
                .is_ok_and(|()| magic == *b"\x7fELF")
        };
        let target = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .filter_map(|dir| std::fs::canonicalize(dir.join(program)).ok())
            .find(|p| is_elf(p))
            .unwrap_or_else(|| panic!("{program} is not on PATH (make deps)"));
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Unique on the machine: this process's ID and a counter, in base 36.
        let suffix = format!("{}{}", base36(std::process::id()), base36(n));
        let stem: String = program.chars().take(15 - suffix.len().min(11)).collect();
        let comm = format!("{stem}{suffix}");
        assert!(comm.len() <= 15, "{comm:?} is longer than a comm");
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(&comm);
        std::os::unix::fs::symlink(&target, &path).expect("symlink the program");
        UniqueProgram {
            _dir: dir,
            path,
            comm,
        }
    }

    /// The path to run: its processes' comm is [`UniqueProgram::comm`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The comm its processes have.
    pub fn comm(&self) -> &str {
        &self.comm
    }

    /// A command that runs it.
    pub fn command(&self) -> Command {
        Command::new(&self.path)
    }
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}

/// A loopback port that refuses connections and that nobody else can take while this value
/// lives: a TCP socket bound to it that never listens (the kernel answers a connect with a
/// reset). A port found by binding a listener and closing it could be taken by another test
/// before it is used.
pub struct RefusingPort {
    _fd: std::os::fd::OwnedFd,
    pub addr: SocketAddr,
}

impl RefusingPort {
    /// A port on 127.0.0.1, or on ::1 when `v6`.
    pub fn new(v6: bool) -> RefusingPort {
        let family = if v6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: socket has no memory effects; the result is checked.
        let raw = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: raw is a new descriptor that nothing else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        let fd_raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let bound = if v6 {
            // SAFETY: an all-zero sockaddr_in6 is valid; the fields set make it [::1]:0.
            let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sa.sin6_addr.s6_addr[15] = 1;
            // SAFETY: sa is a sockaddr_in6 of the size given.
            unsafe {
                libc::bind(
                    fd_raw,
                    std::ptr::from_ref(&sa).cast(),
                    std::mem::size_of_val(&sa) as libc::socklen_t,
                )
            }
        } else {
            // SAFETY: an all-zero sockaddr_in is valid; the fields set make it 127.0.0.1:0.
            let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            sa.sin_family = libc::AF_INET as libc::sa_family_t;
            sa.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            // SAFETY: sa is a sockaddr_in of the size given.
            unsafe {
                libc::bind(
                    fd_raw,
                    std::ptr::from_ref(&sa).cast(),
                    std::mem::size_of_val(&sa) as libc::socklen_t,
                )
            }
        };
        assert_eq!(bound, 0, "bind: {}", std::io::Error::last_os_error());
        // SAFETY: an all-zero sockaddr_storage is valid; getsockname fills it, up to len.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of_val(&storage) as libc::socklen_t;
        // SAFETY: storage is large enough for any address; len says how large.
        let named =
            unsafe { libc::getsockname(fd_raw, std::ptr::from_mut(&mut storage).cast(), &mut len) };
        assert_eq!(named, 0, "getsockname: {}", std::io::Error::last_os_error());
        let port = if v6 {
            // SAFETY: the socket is AF_INET6, so the storage holds a sockaddr_in6.
            let sa = unsafe { &*std::ptr::from_ref(&storage).cast::<libc::sockaddr_in6>() };
            u16::from_be(sa.sin6_port)
        } else {
            // SAFETY: the socket is AF_INET, so the storage holds a sockaddr_in.
            let sa = unsafe { &*std::ptr::from_ref(&storage).cast::<libc::sockaddr_in>() };
            u16::from_be(sa.sin_port)
        };
        let ip: std::net::IpAddr = if v6 {
            std::net::Ipv6Addr::LOCALHOST.into()
        } else {
            std::net::Ipv4Addr::LOCALHOST.into()
        };
        RefusingPort {
            _fd: fd,
            addr: SocketAddr::new(ip, port),
        }
    }
}

/// The address in the first line of `path` (a file a server's stdout goes to) that says
/// `https://ADDR` (the built-in server's "listening" line), waiting up to 20 s for it; panics
/// if `child` (the server, or what started it) exits first. For a server told to listen on
/// port 0, so that no other process can take its port between a choice and its bind.
pub fn wait_for_listening_line(path: &Path, child: &mut Child) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(addr) = out
            .lines()
            .filter_map(|l| l.split("https://").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .find_map(|a| a.trim_end_matches('/').parse().ok())
        {
            return addr;
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("the server exited ({status}) before listening: {out}",);
        }
        assert!(
            Instant::now() < deadline,
            "no listening line in {}: {out}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` holds a socket listening on TCP port `port` (any address), read from
/// `/proc/net/tcp{,6}` and the process's fds: unlike a connect, not fooled by another process
/// that listens on the port.
pub fn listens(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEXIP:HEXPORT; st 0A is LISTEN; the inode is the tenth field.
            let listening = f.get(3) == Some(&"0A");
            let on_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port {
                if let Some(inode) = f.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// A loopback port nothing listens on now, for a program that cannot be told to listen on port
/// 0 and say which port it got. Another process may take it before the program binds it:
/// callers check with [`listens`] and try another port when the program fails.
pub fn probably_free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// The address in a "metrics at http://ADDR/metrics" line, as a command with
/// `--metrics-listen 127.0.0.1:0` prints the port it got.
pub fn metrics_addr(line: &str) -> SocketAddr {
    line.split("metrics at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no metrics address in {line:?}"))
}
