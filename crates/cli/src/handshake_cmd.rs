//! `tlsscope handshake`: connect, handshake, say what was negotiated, optionally resume.

use std::io::Write;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use ossl::{Context, ContextBuilder, Io, Negotiated, Role, Session, Ssl, TlsVersion};
use serde_json::json;

use crate::args::HandshakeArgs;
use crate::library;

/// What one connection got.
struct Outcome {
    negotiated: Negotiated,
    connect: Duration,
    handshake: Duration,
    /// HTTP status and body bytes, when a request was sent.
    response: Option<(u16, usize)>,
    session: Option<Session>,
}

pub fn run(openssl: Option<&str>, a: &HandshakeArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.count >= 1, "--count must be at least 1");
    anyhow::ensure!(a.timeout > 0.0, "--timeout must be positive");
    if let Some(path) = &a.request {
        anyhow::ensure!(
            path.starts_with('/'),
            "--request {path}: the path must start with /"
        );
    }
    let lib = library::load(openssl)?;
    let settings = a.tls.settings(false, true)?;
    let verify = a.verify || a.cafile.is_some();
    let mut builder = ContextBuilder::new(lib, Role::Client)?;
    builder.apply(&settings)?;
    if verify {
        builder.verify_peer(a.cafile.as_deref())?;
    }
    if let Some(sink) = a.tls.keylog_sink()? {
        builder.keylog(sink);
    }
    let ctx = builder.build();

    let mut session: Option<Session> = None;
    let mut not_resumed = 0;
    let mut stdout = std::io::stdout().lock();
    for i in 1..=a.count {
        let offer = if a.resume { session.as_ref() } else { None };
        let outcome = connect_once(&ctx, a, verify, offer)
            .with_context(|| format!("connection {i} to {}", a.target))?;
        if a.resume && i > 1 && !outcome.negotiated.kind.is_resumed() {
            not_resumed += 1;
        }
        if a.json {
            writeln!(stdout, "{}", outcome_json(i, lib, &outcome))?;
        } else {
            writeln!(stdout, "{}", outcome_line(i, a, &outcome))?;
        }
        if a.resume {
            session = outcome.session;
        }
    }
    if not_resumed > 0 {
        eprintln!(
            "tlsscope: error: --resume: {not_resumed} of {} connections after the first did not \
             resume (is the server's session cache or ticket support off?)",
            a.count - 1
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn connect_once(
    ctx: &Context,
    a: &HandshakeArgs,
    verify: bool,
    offer: Option<&Session>,
) -> anyhow::Result<Outcome> {
    let timeout = Duration::from_secs_f64(a.timeout);
    let start = Instant::now();
    let stream = TcpStream::connect_timeout(&a.target, timeout)
        .map_err(|e| anyhow!("cannot connect to {}: {e}", a.target))?;
    let connect = start.elapsed();
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;

    let mut ssl = Ssl::new(ctx)?;
    ssl.set_fd(stream.as_fd())?;
    if let Some(name) = &a.sni {
        ssl.set_server_name(name)?;
    }
    if verify {
        let host = a.sni.clone().unwrap_or_else(|| a.target.ip().to_string());
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
                Some(reason) if verify => bail!("certificate verification failed: {reason}"),
                _ => bail!("TLS handshake failed: {e}"),
            }
        }
        Io::Closed => bail!("the server closed the connection during the handshake"),
        Io::WantRead | Io::WantWrite | Io::Retry(_) => {
            bail!("the handshake timed out after {:.1} s", a.timeout)
        }
    }
    let handshake = started.elapsed();
    let negotiated = ssl.negotiated();
    let response = match &a.request {
        Some(path) => Some(http_get(&mut ssl, path, a.sni.as_deref())?),
        None => {
            if a.resume && negotiated.version == TlsVersion::Tls1_3.name() {
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
    })
}

/// TLS 1.3 servers send their tickets after the handshake: read briefly so OpenSSL processes
/// them, since there is no request whose response would carry them along.
fn collect_tickets(ssl: &mut Ssl, stream: &TcpStream) -> anyhow::Result<()> {
    let previous = stream.read_timeout()?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut byte = [0u8; 1];
    let _ = ssl.read(&mut byte);
    stream.set_read_timeout(previous)?;
    Ok(())
}

/// Sends `GET path` with `Connection: close` and reads the whole response.
fn http_get(ssl: &mut Ssl, path: &str, host: Option<&str>) -> anyhow::Result<(u16, usize)> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tlsscope\r\nConnection: close\r\n\r\n",
        host.unwrap_or("localhost")
    );
    let mut sent = 0;
    while sent < request.len() {
        match ssl.write(&request.as_bytes()[sent..]) {
            Io::Done(n) => sent += n,
            Io::Failed(e) => bail!("sending the request failed: {e}"),
            other => bail!("sending the request stalled ({other:?})"),
        }
    }
    let mut response = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match ssl.read(&mut buf) {
            Io::Done(n) => response.extend_from_slice(&buf[..n]),
            Io::Closed => break,
            // A server that closes without close_notify has still sent everything.
            Io::Failed(e) if e.code == ossl::ErrorCode::Syscall => break,
            Io::Failed(e) => bail!("reading the response failed: {e}"),
            Io::WantRead | Io::WantWrite | Io::Retry(_) => bail!("reading the response timed out"),
        }
    }
    parse_response(&response)
}

/// The status code and body length of a complete HTTP/1.1 response.
fn parse_response(response: &[u8]) -> anyhow::Result<(u16, usize)> {
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| anyhow!("the response has no complete HTTP head"))?;
    let head = String::from_utf8_lossy(&response[..head_end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow!("the response has no HTTP status line"))?;
    Ok((status, response.len() - head_end - 4))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn outcome_line(i: usize, a: &HandshakeArgs, o: &Outcome) -> String {
    let n = &o.negotiated;
    let none = || "-".to_string();
    let mut line = format!(
        "#{i} {} {} {} group={} sig={} key={} {} connect={:.2}ms handshake={:.2}ms",
        a.target,
        n.version,
        n.cipher,
        n.group.clone().unwrap_or_else(none),
        n.signature.clone().unwrap_or_else(none),
        n.server_key.clone().unwrap_or_else(none),
        n.kind,
        ms(o.connect),
        ms(o.handshake),
    );
    if let (Some(path), Some((status, bytes))) = (&a.request, o.response) {
        line.push_str(&format!(" GET {path} -> {status} ({bytes} bytes)"));
    }
    line
}

fn outcome_json(i: usize, lib: &ossl::Library, o: &Outcome) -> serde_json::Value {
    let n = &o.negotiated;
    json!({
        "connection": i,
        "library": lib.version().text,
        "library_version_number": lib.version().number,
        "version": n.version,
        "cipher": n.cipher,
        "cipher_standard": n.cipher_standard,
        "group": n.group,
        "signature": n.signature,
        "server_key": n.server_key,
        "handshake": n.kind.name(),
        "resumed": n.kind.is_resumed(),
        "connect_ms": ms(o.connect),
        "handshake_ms": ms(o.handshake),
        "status": o.response.map(|r| r.0),
        "body_bytes": o.response.map(|r| r.1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_body_length() {
        let r = b"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(parse_response(r).unwrap(), (404, 3));
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
