//! `tlsscope handshake`: connect, handshake, say what was negotiated, optionally resume.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ossl::Session;
use serde_json::json;

use crate::args::HandshakeArgs;
use crate::client::client_context;
use crate::library;
use experiments::client::{connect_first, Outcome, Probe};

pub fn run(openssl: Option<&str>, a: &HandshakeArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(a.count >= 1, "--count must be at least 1");
    if let Some(path) = &a.request {
        anyhow::ensure!(
            path.starts_with('/'),
            "--request {path}: the path must start with /"
        );
    }
    let lib = library::load(openssl)?;
    let ctx = client_context(lib, &a.tls, &a.peer, true, None)?;
    let sni = a.peer.server_name(&a.target);
    let request = a.request.as_deref().or(a.target.path.as_deref());

    let mut session: Option<Session> = None;
    let mut not_resumed = 0;
    let mut stdout = std::io::stdout().lock();
    for i in 1..=a.count {
        let offer = if a.resume { session.as_ref() } else { None };
        let probe = |target| Probe {
            target,
            sni: sni.as_deref(),
            verify: a.peer.verifies(),
            timeout: a.timeout,
            request,
            await_ticket: a.resume,
        };
        let (addr, outcome) = connect_first(&ctx, &a.target, probe, offer)
            .with_context(|| format!("connection {i} to {}", a.target))?;
        if a.resume && i > 1 && !outcome.negotiated.kind.is_resumed() {
            not_resumed += 1;
        }
        if a.json {
            writeln!(stdout, "{}", outcome_json(i, lib, &outcome))?;
        } else {
            writeln!(stdout, "{}", outcome_line(i, addr, request, &outcome))?;
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn outcome_line(
    i: usize,
    addr: std::net::SocketAddr,
    request: Option<&str>,
    o: &Outcome,
) -> String {
    let n = &o.negotiated;
    let none = || "-".to_string();
    let mut line = format!(
        "#{i} {} {} {} group={} sig={} key={} {} connect={:.2}ms handshake={:.2}ms",
        addr,
        n.version,
        n.cipher,
        n.group.clone().unwrap_or_else(none),
        n.signature.clone().unwrap_or_else(none),
        n.server_key.clone().unwrap_or_else(none),
        n.kind,
        ms(o.connect),
        ms(o.handshake),
    );
    if let (Some(path), Some((status, bytes))) = (request, o.response) {
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
