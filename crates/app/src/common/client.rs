//! The blocking client: one connection, with a time limit, as `handshake` prints it, `bench`
//! checks a target before loading it, and the compare matrix times it; and the one builder of
//! client contexts they all use.

use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use load::wire::{WireCounts, WireTap};
use ossl::{
    Context, ContextBuilder, Credentials, Io, Negotiated, Role, Session, Ssl, TlsError, TlsVersion,
};

use crate::common::error::{Error, Result};
use crate::fail;

/// How a client context is made.
#[derive(Default)]
pub struct ClientOptions<'a> {
    /// Versions, ciphers, groups, signature algorithms (cache and tickets: see `tickets`).
    pub settings: ossl::Settings,
    /// Ask for session tickets; off makes TLS 1.2 resume by session ID.
    pub tickets: bool,
    /// Verify the server's certificate: `Some(Some(file))` against a CA file (loaded into this
    /// context's store, as curl does for each of its contexts), `Some(None)` against the
    /// system's store, `None` not at all.
    pub verify: Option<Option<&'a Path>>,
    /// A client certificate and its key (PEM files).
    pub credentials: Option<(&'a Path, &'a Path)>,
    /// Where the NSS key log lines go.
    pub keylog: Option<Box<ossl::KeylogSink>>,
}

/// A key log sink appending NSS key log lines to `path`, created 0600 (the lines are secrets)
/// with the first line: a run that fails before any handshake leaves no empty file. The
/// command line checked that the file can be made; should it fail anyway, the lines are lost.
pub fn keylog_file(path: &Path) -> Box<ossl::KeylogSink> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = path.to_path_buf();
    let file: std::sync::Mutex<Option<std::fs::File>> = std::sync::Mutex::new(None);
    Box::new(move |line: &str| {
        let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600)
                .open(&path)
                .ok();
        }
        if let Some(f) = f.as_mut() {
            let _ = writeln!(f, "{line}");
        }
    })
}

/// A client context as `options` say.
pub fn client_context(lib: &'static ossl::Library, options: ClientOptions<'_>) -> Result<Context> {
    let mut b = ContextBuilder::new(lib, Role::Client)?;
    b.apply(&ossl::Settings {
        session_cache: false,
        tickets: options.tickets,
        ..options.settings
    })?;
    if let Some(cafile) = options.verify {
        b.verify_peer(cafile)?;
    }
    if let Some((cert, key)) = options.credentials {
        b.credentials(&Credentials::from_files(lib, cert, key)?)?;
    }
    if let Some(sink) = options.keylog {
        b.keylog(sink);
    }
    Ok(b.build())
}

/// Where to connect and what to do there.
pub struct Probe<'a> {
    pub target: SocketAddr,
    pub sni: Option<&'a str>,
    pub verify: bool,
    pub timeout: Duration,
    /// GET this path after the handshake and read the response.
    pub request: Option<&'a str>,
    /// TLS 1.3 without a request: wait briefly for the server's tickets.
    pub await_ticket: bool,
}

/// What one connection got.
pub struct Outcome {
    pub negotiated: Negotiated,
    pub connect: Duration,
    pub handshake: Duration,
    /// HTTP status and body bytes, when a request was sent.
    pub response: Option<(u16, usize)>,
    pub session: Option<Session>,
    /// What the handshake put on the wire (see `load::wire`).
    pub wire: Option<WireCounts>,
}

/// Tries each address `target` resolved to, in order, with the probe `at` makes for it; returns
/// the first address that completed it. When none does, the first address's error, with how
/// the others failed.
pub fn connect_first<'a>(
    ctx: &Context,
    target: &crate::common::target::Endpoint,
    at: impl Fn(SocketAddr) -> Probe<'a>,
    offer: Option<&Session>,
) -> Result<(SocketAddr, Outcome)> {
    let mut failures: Vec<(SocketAddr, Error)> = Vec::new();
    for &addr in &target.addrs {
        match connect_once(ctx, &at(addr), offer) {
            Ok(outcome) => return Ok((addr, outcome)),
            Err(e) => failures.push((addr, e)),
        }
    }
    let mut failures = failures.into_iter();
    let Some((_, first)) = failures.next() else {
        fail!("{target} has no address");
    };
    let others: Vec<String> = failures.map(|(a, e)| format!("{a}: {e}")).collect();
    if others.is_empty() {
        return Err(first);
    }
    Err(first.within(format!(
        "{target}: no address answered (also tried {})",
        others.join("; ")
    )))
}

/// Connects, handshakes (offering `offer`), optionally requests, and closes.
pub fn connect_once(ctx: &Context, a: &Probe<'_>, offer: Option<&Session>) -> Result<Outcome> {
    let timeout = a.timeout;
    let verify = a.verify;
    let start = Instant::now();
    let stream = TcpStream::connect_timeout(&a.target, timeout)
        .map_err(|e| Error::msg(format!("cannot connect to {}: {e}", a.target)))?;
    let connect = start.elapsed();
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;

    let mut ssl = Ssl::new(ctx)?;
    // The wire figures (load::wire); none where the library lacks the message callback.
    ssl.observe_messages(Box::new(WireTap::default()));
    ssl.set_fd(stream.as_fd())?;
    if let Some(name) = a.sni {
        ssl.set_server_name(name)?;
    }
    if verify {
        let host = a
            .sni
            .map_or_else(|| a.target.ip().to_string(), str::to_string);
        ssl.set_verify_host(&host)?;
    }
    if let Some(session) = offer {
        ssl.set_session(session)?;
    }
    let started = Instant::now();
    match ssl.do_handshake() {
        Io::Done(_) => {}
        Io::Failed(e) => {
            let verify_reason = ssl.verify_result().err();
            match verify_reason {
                Some(reason) if verify => fail!("certificate verification failed: {reason}"),
                _ if looks_like_plaintext(&e) => fail!(
                    "TLS handshake failed: {e}; is {} a TLS port? (it answered like a \
                     plain-text protocol)",
                    a.target
                ),
                _ => fail!("TLS handshake failed: {e}"),
            }
        }
        Io::Closed => fail!("the server closed the connection during the handshake"),
        Io::WantRead | Io::WantWrite | Io::Retry(_) => {
            fail!(
                "the handshake timed out after {:.1} s",
                a.timeout.as_secs_f64()
            )
        }
    }
    let handshake = started.elapsed();
    let wire = ssl
        .message_observer()
        .and_then(|o| o.as_any().downcast_ref::<WireTap>())
        .map(WireTap::counts);
    let negotiated = ssl.negotiated();
    let response = match a.request {
        Some(path) => Some(http_get(&mut ssl, path, a.sni)?),
        None => {
            if a.await_ticket && negotiated.version == TlsVersion::Tls1_3.name() {
                collect_tickets(&mut ssl, &stream)?;
            }
            None
        }
    };
    let session = ssl.session();
    let _ = ssl.shutdown();
    Ok(Outcome {
        negotiated,
        connect,
        handshake,
        response,
        session,
        wire,
    })
}

/// OpenSSL's reasons when the peer's first bytes were not a TLS record (an HTTP or SSH server).
fn looks_like_plaintext(e: &ossl::TlsError) -> bool {
    let reason = e.queue.reason().unwrap_or("");
    [
        "wrong version number",
        "packet length too long",
        "record layer failure",
        "http request",
    ]
    .iter()
    .any(|r| reason.contains(r))
}

/// TLS 1.3 servers send their tickets after the handshake: read briefly so OpenSSL processes
/// them, since there is no request whose response would carry them along.
fn collect_tickets(ssl: &mut Ssl, stream: &TcpStream) -> Result<()> {
    let previous = stream.read_timeout()?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut byte = [0u8; 1];
    let _ = ssl.read(&mut byte);
    stream.set_read_timeout(previous)?;
    Ok(())
}

/// Sends `GET path` with `Connection: close` and reads the whole response, framed as the
/// load engine frames it.
fn http_get(ssl: &mut Ssl, path: &str, host: Option<&str>) -> Result<(u16, usize)> {
    let request = load::request_bytes(path, host.unwrap_or("localhost"), false);
    let mut sent = 0;
    while sent < request.len() {
        match ssl.write(&request[sent..]) {
            Io::Done(n) => sent += n,
            Io::Failed(e) => fail!("sending the request failed: {e}"),
            other => fail!("sending the request stalled ({other:?})"),
        }
    }
    let mut parser = load::ResponseParser::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let complete = match ssl.read(&mut buf) {
            Io::Done(n) => parser.feed(&buf[..n]),
            // A server that closes without close_notify has still sent everything.
            Io::Closed
            | Io::Failed(TlsError {
                code: ossl::ErrorCode::Syscall,
                ..
            }) => parser.on_close().map(|()| true),
            Io::Failed(e) => fail!("reading the response failed: {e}"),
            Io::WantRead | Io::WantWrite | Io::Retry(_) => fail!("reading the response timed out"),
        };
        if complete.map_err(|e| Error::msg(format!("the response: {}", e.name())))? {
            return Ok((parser.status, parser.body_bytes as usize));
        }
    }
}
