//! `tlsscope sniff`: attach the sniffer, write each call as it completes, and on every way out
//! (duration, signal, the sniffed processes gone, the output closed or full) detach and say
//! what was captured and what was lost.
//!
//! The path: `cli` parses [`config::SniffArgs`]; [`config::SniffArgs::config`] checks them
//! once into a [`config::Config`] (targets, backend, view, where the stream goes);
//! [`session::run`] captures and returns a [`session::Sniffed`]; [`run`] writes the summary
//! ([`render::write_summary`]) and sets the exit status.

pub mod config;
pub mod render;
pub mod session;

use std::io;
use std::process::ExitCode;

use crate::common::signals::StopFlags;
use crate::sniff::config::SniffArgs;

/// Exit status when events were lost (ring buffer full): the capture is not complete.
const EXIT_LOST: u8 = 3;

pub fn run(a: &SniffArgs) -> anyhow::Result<ExitCode> {
    let config = a.config()?;
    let signals = StopFlags::install()?;
    let sniffed = session::run(&config, &signals.stop)?;
    let _ = render::write_summary(
        &mut io::stderr().lock(),
        &sniffed.tally,
        sniffed.counters.calls,
        &session::losses(&sniffed.counters, None),
        sniffed.ended_by.as_deref(),
        sniffed.window,
    );
    if let (Some(lines), Some(path)) = (sniffed.key_lines, &config.keylog) {
        eprintln!(
            "tlsscope sniff: key log: {} written to {}",
            crate::render::words::count(lines, "line"),
            path.display()
        );
    }
    if let Some(e) = sniffed.failure {
        return Err(e);
    }
    if let Some(why) = sniffed.incomplete() {
        eprintln!("tlsscope: error: {}", config::incomplete_message(&why));
        return Ok(ExitCode::from(EXIT_LOST));
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}
