//! Issue 14: the built-in server against hostile clients. Each test starts `tlsscope serve`
//! with short deadlines, attacks it from this process (TCP sockets from std, TLS through
//! `ossl`, or `openssl s_client`) while `tlsscope bench` loads it politely, and checks that the
//! polite load was served in full, that the server counted the attack, and that its resident
//! memory stayed under a fixed cap. How fast the server stays under attack is measured by
//! `bench/hostile-clients`, not asserted here.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ossl::{ContextBuilder, Io, Library, LibrarySource, Role, Ssl};
use serde_json::Value;

use crate::support::{self, text, Serve};

/// The server's resident memory must stay under this during every attack. A debug build of
/// the idle server takes 15 to 20 MiB, and each half-open connection about 53 KiB more
/// (3000 of them took 175 MiB with no connection limit), so the flood below alone would
/// pass this cap by far if it were not bounded.
const RSS_CAP_KIB: u64 = 48 * 1024;

/// Every socket operation of an attacker gives up after this long (a bound, not a measure).
const SOCKET_LIMIT: Duration = Duration::from_secs(10);

/// `serve` flags with deadlines short enough for a test: a second for the handshake and the
/// request head, two for an idle connection.
const SHORT_LIMITS: [&str; 6] = [
    "--handshake-timeout",
    "1s",
    "--request-timeout",
    "1s",
    "--idle-timeout",
    "2s",
];

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

// --- the polite load, and the memory watch ----------------------------------------------------

/// A `tlsscope bench` run in the background: the well-behaved clients.
struct PoliteLoad {
    handle: JoinHandle<(std::process::Output, Value)>,
    dir: tempfile::TempDir,
}

impl PoliteLoad {
    /// Starts `tlsscope bench ADDR <args> --json ...`.
    fn start(addr: SocketAddr, args: &[&str]) -> PoliteLoad {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("bench.json");
        let mut all: Vec<String> = vec!["bench".into(), addr.to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        all.extend(["--json".into(), json.display().to_string()]);
        let handle = std::thread::spawn(move || {
            let argv: Vec<&str> = all.iter().map(String::as_str).collect();
            let out = support::tlsscope(&argv);
            let doc = std::fs::read(&json)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            (out, doc)
        });
        PoliteLoad { handle, dir }
    }

    /// Waits for the run and asserts every one of its `ops` operations succeeded.
    fn assert_all_served(self, ops: u64) -> Value {
        let (out, doc) = self.handle.join().expect("bench thread");
        drop(self.dir);
        assert!(
            out.status.success(),
            "the polite load failed: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let r = &doc["result"];
        assert_eq!(n(&r["ops"]), ops, "{r}");
        assert_eq!(n(&r["errors_total"]), 0, "polite clients saw errors: {r}");
        r.clone()
    }
}

/// Keep-alive requests over 4 connections, all of which must get a 200.
fn keepalive_load(addr: SocketAddr, requests: u64) -> PoliteLoad {
    PoliteLoad::start(
        addr,
        &[
            "--mode",
            "keepalive",
            "-c",
            "4",
            "-n",
            &requests.to_string(),
        ],
    )
}

/// The peak of a process's resident memory, sampled in the background.
struct RssWatch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<u64>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut peak = 0;
            // At most a minute of samples; a test ends long before.
            for _ in 0..3000 {
                peak = peak.max(rss_kib(pid));
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        RssWatch { stop, handle }
    }

    /// Stops sampling; asserts the peak stayed under [`RSS_CAP_KIB`] and returns it.
    fn assert_bounded(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.handle.join().expect("rss thread");
        assert!(peak > 0, "no VmRSS read");
        eprintln!("the server's peak resident memory: {peak} KiB");
        assert!(
            peak < RSS_CAP_KIB,
            "the server's resident memory reached {peak} KiB (cap {RSS_CAP_KIB} KiB)"
        );
        peak
    }
}

/// VmRSS of a process, in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

// --- attackers --------------------------------------------------------------------------------

/// A TCP connection with the limits every attacker socket has.
fn tcp(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(SOCKET_LIMIT)).unwrap();
    s.set_write_timeout(Some(SOCKET_LIMIT)).unwrap();
    s
}

/// A TLS client connection over a blocking socket, handshake done.
struct TlsClient {
    // Dropped before `sock`: the connection must not outlive its fd.
    ssl: Ssl,
    sock: TcpStream,
}

fn client_context() -> ossl::Context {
    let lib = Library::load(&LibrarySource::System).expect("the system libssl");
    ContextBuilder::new(lib, Role::Client).unwrap().build()
}

impl TlsClient {
    fn connect(addr: SocketAddr, ctx: &ossl::Context) -> TlsClient {
        let sock = tcp(addr);
        let mut ssl = Ssl::new(ctx).unwrap();
        ssl.set_fd(sock.as_fd()).unwrap();
        match ssl.do_handshake() {
            Io::Done(_) => {}
            other => panic!("handshake with the server: {other:?}"),
        }
        TlsClient { ssl, sock }
    }

    /// Writes all of `bytes`; false if the server closed or the socket timed out first.
    fn write_all(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            match self.ssl.write(bytes) {
                Io::Done(n) => bytes = &bytes[n..],
                _ => return false,
            }
        }
        true
    }

    /// Reads until the server closes (or `limit` bytes, or the socket times out); returns what
    /// came and whether the server did close.
    fn read_to_close(&mut self, limit: usize) -> (Vec<u8>, bool) {
        let mut got = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        while got.len() < limit {
            match self.ssl.read(&mut buf) {
                Io::Done(n) => got.extend_from_slice(&buf[..n]),
                Io::Closed => return (got, true),
                // EOF without close_notify, or a reset: closed all the same.
                Io::Failed(e) if e.code == ossl::ErrorCode::Syscall || e.is_unexpected_eof() => {
                    return (got, true)
                }
                Io::Failed(e) => panic!("reading from the server: {e}"),
                // The socket's read timeout.
                Io::WantRead | Io::WantWrite | Io::Retry(_) => return (got, false),
            }
        }
        (got, false)
    }
}

/// Whether the server closed a plain TCP connection (EOF or reset) before the read timeout.
fn closed_by_server(sock: &mut TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    // Bounded: each read either ends the loop or takes bytes the server sent.
    for _ in 0..64 {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

/// A real ClientHello, as OpenSSL's client writes it: made against a listener of our own.
fn client_hello(ctx: &ossl::Context) -> Vec<u8> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (mut peer, _) = listener.accept().unwrap();
    peer.set_read_timeout(Some(SOCKET_LIMIT)).unwrap();
    client.set_nonblocking(true).unwrap();
    let mut ssl = Ssl::new(ctx).unwrap();
    ssl.set_fd(client.as_fd()).unwrap();
    assert_eq!(ssl.do_handshake(), Io::WantRead, "the ClientHello is out");
    let mut hello = vec![0u8; 4096];
    let len = peer.read(&mut hello).expect("the ClientHello");
    hello.truncate(len);
    assert_eq!(hello[0], 0x16, "a handshake record");
    drop(ssl);
    hello
}

/// Sends `bytes` one at a time, `gap` apart, until they are all sent or the server closes
/// the connection; returns whether it closed it.
fn dribble(sock: &mut TcpStream, bytes: &[u8], gap: Duration) -> bool {
    for b in bytes {
        if sock.write_all(&[*b]).is_err() {
            return true;
        }
        std::thread::sleep(gap);
    }
    false
}

/// The same over TLS: one byte per record.
fn dribble_tls(c: &mut TlsClient, bytes: &[u8], gap: Duration) -> bool {
    for b in bytes {
        if !c.write_all(&[*b]) {
            return true;
        }
        std::thread::sleep(gap);
    }
    false
}

/// Sets SO_LINGER to 0, so closing the socket resets the connection.
fn reset_on_close(sock: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket we own; the option value is a live `linger` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER: {}", std::io::Error::last_os_error());
}

// --- the attacks --------------------------------------------------------------------------------

// Issue 14.
/// Slowloris: request heads sent a byte every 200 ms (their head would need 8 s), a TLS
/// handshake dribbled the same way, and a kept-alive connection left idle after one request.
/// The request, handshake and idle deadlines close each one, and each is counted under its
/// deadline; the polite load meanwhile gets every request answered.
#[test]
fn slowloris_heads_and_handshakes_are_cut_off_by_their_deadlines() {
    let server = Serve::start(&SHORT_LIMITS);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let ctx = client_context();
    let hello = client_hello(&ctx);
    let (heads, dribbled_handshakes) = (3, 2);
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut attackers = Vec::new();
    for _ in 0..heads {
        let ctx = ctx.clone();
        let ready = ready_tx.clone();
        attackers.push(std::thread::spawn(move || {
            let mut c = TlsClient::connect(addr, &ctx);
            ready.send(()).unwrap();
            let head = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slow\r\n\r\n";
            dribble_tls(&mut c, head, Duration::from_millis(200))
        }));
    }
    for _ in 0..dribbled_handshakes {
        let hello = hello.clone();
        let ready = ready_tx.clone();
        attackers.push(std::thread::spawn(move || {
            let mut sock = tcp(addr);
            ready.send(()).unwrap();
            dribble(&mut sock, &hello, Duration::from_millis(200))
        }));
    }
    for _ in 0..heads + dribbled_handshakes {
        ready_rx
            .recv_timeout(SOCKET_LIMIT)
            .expect("attacker connected");
    }
    let idle = {
        let mut c = TlsClient::connect(addr, &ctx);
        assert!(c.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: localhost\r\n\r\n"));
        c
    };

    let load = keepalive_load(addr, 3000);
    load.assert_all_served(3000);
    for a in attackers {
        assert!(
            a.join().unwrap(),
            "the server let a slow client finish instead of closing it"
        );
    }
    let mut idle = idle;
    let (reply, closed) = idle.read_to_close(1 << 20);
    assert!(
        text(&reply).starts_with("HTTP/1.1 200 OK"),
        "{}",
        text(&reply)
    );
    assert!(closed, "the idle kept-alive connection was not closed");
    rss.assert_bounded();

    let stats = server.stop();
    let t = &stats["connections"]["timed_out"];
    assert_eq!(n(&t["request_head"]), heads, "{stats}");
    assert_eq!(n(&t["handshake"]), dribbled_handshakes, "{stats}");
    assert_eq!(n(&t["keep_alive"]), 1, "{stats}");
    let h = &stats["handshakes"];
    assert_eq!(
        n(&h["failed_by"]["timeout"]),
        dribbled_handshakes,
        "{stats}"
    );
    assert_eq!(n(&h["failed"]), dribbled_handshakes, "{stats}");
}

// Issue 14.
/// A flood of half-open handshakes: 1500 connections that send nothing or half a ClientHello
/// and hold, against a limit of 64 connections. New connections shed the longest waiting,
/// the handshake deadline closes the rest, memory stays bounded, and polite clients
/// connecting meanwhile all get their full handshakes.
#[test]
fn a_flood_of_half_open_handshakes_is_shed_and_timed_out() {
    let mut args = SHORT_LIMITS.to_vec();
    args.extend(["--max-connections", "64"]);
    let server = Serve::start(&args);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let hello = client_hello(&client_context());
    let flood = 1500;
    let mut held: Vec<TcpStream> = (0..flood)
        .map(|i| {
            let mut s = tcp(addr);
            if i % 2 == 1 {
                // Half a ClientHello: OpenSSL waits for the rest of the record.
                let _ = s.write_all(&hello[..hello.len() / 2]);
            }
            s
        })
        .collect();

    let load = PoliteLoad::start(addr, &["--mode", "full", "-c", "4", "-n", "300"]);
    load.assert_all_served(300);
    for s in &mut held {
        assert!(closed_by_server(s), "a half-open connection was left open");
    }
    rss.assert_bounded();

    let stats = server.stop();
    let c = &stats["connections"];
    let f = &stats["handshakes"]["failed_by"];
    assert_eq!(
        n(&c["shed"]) + n(&c["timed_out"]["handshake"]),
        flood,
        "every half-open connection was shed or timed out: {stats}"
    );
    assert!(n(&c["shed"]) > 0, "{stats}");
    assert_eq!(n(&f["shed"]), n(&c["shed"]), "{stats}");
    assert_eq!(n(&f["timeout"]) + n(&f["shed"]), flood, "{stats}");
    assert_eq!(n(&c["accepted"]), n(&c["closed"]), "{stats}");
}

// Issue 14.
/// Exactly as many connections as the limit, all waiting at once: the worker takes them in
/// one batch and, looking for more, must not shed one of them when nobody else is queued (it
/// shed first and accepted second, and the accept found nothing).
#[test]
fn no_connection_is_shed_when_nobody_is_queued() {
    let mut args = SHORT_LIMITS.to_vec();
    args.extend(["--max-connections", "64", "--threads", "1"]);
    let server = Serve::start(&args);
    let pid = i32::try_from(server.pid()).unwrap();
    // Stopped, the server leaves the 64 connections in the kernel's queue, to be taken in one
    // batch of 64 (ACCEPT_BATCH) when it goes on.
    // SAFETY: kill signals the server this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let held: Vec<TcpStream> = (0..64).map(|_| tcp(server.addr)).collect();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    std::thread::sleep(std::time::Duration::from_millis(500));
    drop(held);
    let stats = server.stop();
    let c = &stats["connections"];
    assert_eq!(n(&c["accepted"]), 64, "{stats}");
    assert_eq!(n(&c["shed"]), 0, "nobody was queued: {stats}");
}

// Issue 14.
/// Garbage instead of a ClientHello (plain HTTP, an SSH banner, noise) is refused at once:
/// the connection closes long before the 30 s handshake deadline, and each is counted as not
/// TLS.
#[test]
fn garbage_instead_of_a_client_hello_is_closed_at_once() {
    let server = Serve::start(&["--handshake-timeout", "30s"]);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let garbage: [&[u8]; 4] = [
        b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
        b"\x00\x01\x02\x03\x04\x05\x06\x07\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8",
        b"\x16\x03\x01\x00\x05\x99\x99\x99\x99\x99",
    ];
    let load = keepalive_load(addr, 3000);
    for round in 0..5 {
        for g in garbage {
            let mut s = tcp(addr);
            s.write_all(g).unwrap();
            assert!(closed_by_server(&mut s), "round {round}: {g:?} left open");
        }
    }
    load.assert_all_served(3000);
    rss.assert_bounded();

    let stats = server.stop();
    let h = &stats["handshakes"];
    let attempts = 5 * garbage.len() as u64;
    assert_eq!(n(&h["failed_by"]["not_tls"]), attempts, "{stats}");
    assert_eq!(n(&h["failed"]), attempts, "{stats}");
    assert_eq!(
        n(&stats["connections"]["timed_out"]["handshake"]),
        0,
        "{stats}"
    );
}

// Issue 14.
/// Oversized request lines and heads, and a head that is not HTTP, each get their error
/// status (414, 431, 400) and a close, and are counted; the input buffer never grows.
#[test]
fn oversized_heads_and_request_lines_are_refused_and_closed() {
    let server = Serve::start(&SHORT_LIMITS);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let ctx = client_context();
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(10_000));
    let mut big_head = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    while big_head.len() < 20_000 {
        big_head.push_str("X-Filler: 0123456789abcdef0123456789abcdef\r\n");
    }
    big_head.push_str("\r\n");
    let endless_line = "GET /".to_string() + &"b".repeat(64 * 1024);
    let cases = [
        (long_line.as_str(), "HTTP/1.1 414 URI Too Long"),
        (endless_line.as_str(), "HTTP/1.1 414 URI Too Long"),
        (
            big_head.as_str(),
            "HTTP/1.1 431 Request Header Fields Too Large",
        ),
        ("HELLO\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ];
    let load = keepalive_load(addr, 3000);
    let rounds = 3;
    for _ in 0..rounds {
        for (request, status) in cases {
            let mut c = TlsClient::connect(addr, &ctx);
            // The server may close before it has read everything: a failed write is fine.
            let _ = c.write_all(request.as_bytes());
            let (reply, closed) = c.read_to_close(1 << 20);
            assert!(text(&reply).starts_with(status), "{}", text(&reply));
            assert!(text(&reply).contains("Connection: close"));
            assert!(closed, "not closed after {status}");
        }
    }
    load.assert_all_served(3000);
    rss.assert_bounded();

    let stats = server.stop();
    let r = &stats["requests_rejected"];
    assert_eq!(n(&r["uri_too_long"]), 2 * rounds, "{stats}");
    assert_eq!(n(&r["head_too_large"]), rounds, "{stats}");
    assert_eq!(n(&r["malformed"]), rounds, "{stats}");
    assert_eq!(n(&stats["responses"]["4xx"]), 4 * rounds, "{stats}");
}

// Issue 14.
/// A pipelining flood: requests for 16 KiB written back to back, never reading a response.
/// The server answers until the client's socket is full, then reads nothing more from it, so
/// the client's own writes stall; memory stays bounded, and the polite load, which shares the
/// worker, is served all the same.
#[test]
fn a_pipelining_flood_is_held_back_by_its_own_unread_responses() {
    let server = Serve::start(&SHORT_LIMITS);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let ctx = client_context();
    let mut flooder = TlsClient::connect(addr, &ctx);
    flooder
        .sock
        .set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let request = b"GET /bytes/16384 HTTP/1.1\r\nHost: x\r\n\r\n";
    let batch: Vec<u8> = request.repeat(100);
    let mut sent_requests = 0u64;
    // Until a write stalls for half a second (the server stopped reading), at most 1 GiB.
    let held_back = (0..(1 << 30) / batch.len()).any(|_| {
        let stalled = !flooder.write_all(&batch);
        if !stalled {
            sent_requests += 100;
        }
        stalled
    });
    assert!(
        held_back,
        "the server read a gigabyte of unanswerable requests"
    );

    let load = keepalive_load(addr, 3000);
    load.assert_all_served(3000);
    rss.assert_bounded();
    // Going away with the responses unread resets the connection under the server's writes.
    reset_on_close(&flooder.sock);
    drop(flooder);

    let stats = server.stop();
    assert!(n(&stats["requests_pipelined"]) > 0, "{stats}");
    assert!(
        n(&stats["requests_pipelined"]) < sent_requests,
        "the server answered everything the flood sent ({sent_requests}): {stats}"
    );
    assert!(n(&stats["responses"]["blocked_on_client"]) > 0, "{stats}");
}

// Issue 14.
/// Client-initiated TLS 1.2 renegotiation (s_client's `R` command) is refused with a
/// no_renegotiation alert, and every attempt is counted.
#[test]
fn client_renegotiation_is_refused_and_counted() {
    let server = Serve::start(&SHORT_LIMITS);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let load = keepalive_load(addr, 3000);
    let attempts = 3;
    for _ in 0..attempts {
        let out = renegotiate(addr);
        assert!(out.contains("RENEGOTIATING"), "{out}");
        assert!(out.contains("no renegotiation"), "{out}");
    }
    load.assert_all_served(3000);
    rss.assert_bounded();

    let stats = server.stop();
    let h = &stats["handshakes"];
    assert_eq!(n(&h["renegotiations_refused"]), attempts, "{stats}");
    assert_eq!(n(&h["tls12"]), attempts, "{stats}");
}

/// Runs `openssl s_client -tls1_2`, types `R` (renegotiate) and returns what it printed. Its
/// stdin stays open until it exits by itself (the refusal ends it), at most 10 s.
fn renegotiate(addr: SocketAddr) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", &addr.to_string(), "-tls1_2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl s_client (install the openssl package: make deps)");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"R\n").unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < SOCKET_LIMIT {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let out = child.wait_with_output().expect("s_client output");
    format!("{}{}", text(&out.stdout), text(&out.stderr))
}

// Issue 14.
/// Clients that reset the connection (SO_LINGER 0, then close) while the server writes them a
/// 10 MB response: the server neither crashes nor dies of SIGPIPE, counts each one, and keeps
/// serving.
#[test]
fn clients_resetting_mid_response_are_counted_and_survived() {
    let server = Serve::start(&SHORT_LIMITS);
    let addr = server.addr;
    let rss = RssWatch::start(server.pid());
    let ctx = client_context();
    let load = keepalive_load(addr, 3000);
    let resets = 5;
    for _ in 0..resets {
        let mut c = TlsClient::connect(addr, &ctx);
        assert!(c.write_all(b"GET /bytes/10000000 HTTP/1.1\r\nHost: x\r\n\r\n"));
        let (got, closed) = c.read_to_close(64 * 1024);
        assert!(
            !closed && got.len() >= 64 * 1024,
            "the response stopped early"
        );
        reset_on_close(&c.sock);
        drop(c);
    }
    load.assert_all_served(3000);
    rss.assert_bounded();

    let stats = server.stop();
    assert_eq!(
        n(&stats["connections"]["responses_aborted"]),
        resets,
        "{stats}"
    );
    // Each reset is also a connection that ended without close_notify (the polite load's end
    // with one).
    assert_eq!(
        n(&stats["connections"]["closed_without_close_notify"]),
        resets,
        "{stats}"
    );
}
