//! `tlsscope handshake`: connect, handshake, say what was negotiated, optionally resume.

pub mod config;
pub mod render;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;
use ossl::Session;

use crate::common::client::{connect_first, Probe};
use crate::common::client_args::client_context;
use crate::handshake::config::HandshakeArgs;

pub fn run(library: &ossl::LibrarySource, a: &HandshakeArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &a.request {
        if !path.starts_with('/') {
            crate::usage_bail!("--request {path}: the path must start with /");
        }
    }
    let lib = crate::common::library::load(library)?;
    let ctx = client_context(lib, &a.tls, &a.peer, true, None)?;
    let sni = a.peer.server_name(&a.target);
    let request = a.request.as_deref().or(a.target.path.as_deref());

    let mut session: Option<Session> = None;
    let mut not_resumed = 0;
    let mut stdout = crate::common::output::Stdout::lock();
    // JSON to a file: the lines are gathered and written at the end, the text still shown.
    let mut json_lines: Option<Vec<u8>> = a
        .json
        .as_ref()
        .filter(|j| !j.is_stdout())
        .map(|_| Vec::new());
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
        let connection = outcome.connection(i);
        match (&a.json, json_lines.as_mut()) {
            (Some(_), None) => writeln!(
                stdout,
                "{}",
                crate::handshake::render::json(&connection, lib)
            )?,
            (_, to_file) => {
                if let Some(lines) = to_file {
                    writeln!(
                        lines,
                        "{}",
                        crate::handshake::render::json(&connection, lib)
                    )?;
                }
                let line = crate::handshake::render::line(&connection, addr, request);
                writeln!(stdout, "{line}")?;
            }
        }
        if a.resume {
            session = outcome.session;
        }
    }
    if let (Some(out), Some(lines)) = (&a.json, &json_lines) {
        out.write(lines)?;
    }
    if not_resumed > 0 {
        eprintln!(
            "tlsscope: error: --resume: {not_resumed} of {} after the first did not resume \
             (is the server's session cache or ticket support off?)",
            crate::render::words::count(a.count as u64 - 1, "connection")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
