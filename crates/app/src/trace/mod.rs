//! `tlsscope trace`: attach the latency probes, read the kernel's histograms every interval and
//! at the end, print them, and detach on every way out.
//!
//! The path of `tlsscope trace -p PID`, from argv to its report, all in this folder:
//!
//! 1. **argv -> options.** The `cli` crate parses the command line into [`config::TraceArgs`]
//!    (clap) and calls [`run`].
//! 2. **options -> config.** [`config::TraceArgs::config`] checks them once and makes a
//!    [`config::Config`]: the targets (`-p PID` must be a running process; `--binary` and
//!    `--lib` files must exist), the backend, the probe selection and buckets, the outputs.
//!    Every message that names a flag is made there.
//! 3. **config -> session.** [`session::run`] binds the metrics exporter (`--metrics-listen`,
//!    `--metrics-file`), attaches (kernel uprobes through `probes::Tracer`, or tlsscope's
//!    library in the process through `probes::user::UserTracer`), waits for the end (the
//!    duration, Ctrl-C, every traced process gone) while handing each `-i` interval to the
//!    caller, detaches, and returns a [`session::Traced`]: the `model::trace::TraceDocument`,
//!    the intervals, and why it ended.
//! 4. **result -> report.** [`run`] writes the document as JSON (`--json`:
//!    `TraceDocument::write_json`) and HTML (`--html`: [`page::page`]), then the text report
//!    ([`render::trace_text`], [`render::trace_footer`]); each interval's table is
//!    [`render::interval`].
//!
//! What trace shares with sniff and the lab (targets from the options, the backend choice,
//! starting and ending a command, the end of a run, the figures per function) is in
//! `crate::common::attach_args` (the target options, checked), `crate::common::probing` and
//! `crate::common::latency`.

pub mod config;
pub mod page;
pub mod render;
pub mod session;

use std::io::{self, Write};
use std::process::ExitCode;

use crate::common::output::to_stdout;
use crate::common::signals::StopFlags;
use crate::trace::config::TraceArgs;

pub fn run(a: &TraceArgs) -> anyhow::Result<ExitCode> {
    let config = a.config()?;
    let signals = StopFlags::install()?;
    let traced = session::run(&config, &signals.stop, &mut |functions, end| {
        // Stdout holds the data when --json or --html is `-`: the intervals go to stderr then.
        let mut out: Box<dyn Write> = if config.text_to_stdout {
            Box::new(io::stdout().lock())
        } else {
            Box::new(io::stderr().lock())
        };
        render::interval(&mut out, functions, end)?;
        out.flush()
    })?;
    let doc = &traced.doc;

    // The files first: a stdout that fails (full, closed) loses no file.
    if let Some(out) = &config.json {
        out.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(out) = &config.html {
        out.write(page::page(doc, &traced.intervals).as_bytes())?;
    }
    if let Some(reason) = &traced.ended_by {
        // With the report on stdout, or said where the report is not.
        if config.text_to_stdout {
            to_stdout(format!("tlsscope trace: stopped: {reason}\n"))?;
        } else {
            eprintln!("tlsscope trace: stopped: {reason}");
        }
    }
    if config.text_to_stdout {
        let mut out = Vec::new();
        render::trace_text(&mut out, doc, config.histograms)?;
        render::trace_footer(&mut out, doc)?;
        to_stdout(out)?;
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}
