//! `tlsscope handshake`: connect, handshake, say what was negotiated, optionally resume. The
//! options become one typed config (`config.rs`), the session makes the connections
//! (`session.rs`), and each is shown as a line or a JSON object (`render.rs`).

pub mod config;
pub mod render;
pub mod session;

use std::io::Write;
use std::process::ExitCode;

use crate::handshake::config::HandshakeArgs;
use crate::handshake::render::Connection;

/// `library`: `--openssl`, resolved.
pub fn run(library: &ossl::LibrarySource, a: &HandshakeArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config(library)?;
    let mut stdout = crate::common::output::Stdout::lock();
    // JSON to a file: the lines are gathered and written at the end, the text still shown.
    let json_on_stdout = cfg.json.as_ref().is_some_and(|j| j.is_stdout());
    let mut json_lines: Option<Vec<u8>> = cfg
        .json
        .as_ref()
        .filter(|j| !j.is_stdout())
        .map(|_| Vec::new());
    let summary = session::run(&cfg, |c| {
        let connection = Connection::of(c.outcome, c.index);
        if json_on_stdout {
            writeln!(stdout, "{}", render::json(&connection, c.lib))?;
            return Ok(());
        }
        if let Some(lines) = json_lines.as_mut() {
            writeln!(lines, "{}", render::json(&connection, c.lib))?;
        }
        let line = render::line(&connection, c.addr, cfg.request.as_deref());
        writeln!(stdout, "{line}")?;
        Ok(())
    })?;
    if let (Some(out), Some(lines)) = (&cfg.json, &json_lines) {
        out.write(lines)?;
    }
    if summary.not_resumed > 0 {
        eprintln!(
            "tlsscope: error: {}",
            config::not_resumed(summary.not_resumed, cfg.count)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
