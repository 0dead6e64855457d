//! `tlsscope lab`: runs the lab's experiments (`experiments::lab`) and writes the report as each
//! experiment ends.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context as _;
use experiments::lab::{self, LabConfig};

use crate::args::{LabArgs, LabTarget};
use crate::signals::StopFlags;

pub fn run(library: &ossl::LibrarySource, a: &LabArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("finding the tlsscope executable")?;
    let child_openssl = crate::library::child_arg(library);
    let config = LabConfig {
        target: match a.target {
            LabTarget::Builtin => lab::LabTarget::Builtin,
            LabTarget::Nginx => lab::LabTarget::Nginx,
        },
        exe: &exe,
        openssl: child_openssl.as_deref(),
        duration: a.duration,
        trace_duration: a.trace_duration,
        warmup: a.warmup,
        connections: a.connections,
        server_cpu: a.server_cpu,
        client_cpu: a.client_cpu,
    };
    lab::check(&config)?;
    let lib = crate::library::load(library)?;
    let signals = StopFlags::install()?;
    let started = Instant::now();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "tlsscope lab: {} on CPU {}, load on CPU {}; each experiment {:.0} s untraced, then {:.0} s traced",
        config.target.describe(),
        a.server_cpu,
        a.client_cpu,
        a.duration.as_secs_f64(),
        a.trace_duration.as_secs_f64()
    )?;
    out.flush()?;
    let summary = lab::run(&config, lib, &signals.stop, |e, measured| {
        let mut text = format!("\n== {}\n", e.name);
        match measured {
            Ok(m) => {
                if let Some(note) = &m.note {
                    let _ = writeln!(text, "  note: {note}");
                }
                report::lab::render_experiment(&mut text, &m.untraced, &m.traced, &m.calls);
            }
            Err(err) => {
                let _ = writeln!(text, "  failed: {err}");
            }
        }
        let _ = write!(out, "{text}");
        let _ = out.flush();
    })?;
    if let Some(c) = summary.calibration {
        writeln!(
            out,
            "\nprobe cost on this machine: {:.2} us per probed call (measured on {} calls of a function in tlsscope)",
            c.cost_ns_per_call() / 1000.0,
            c.calls
        )?;
    }
    if !summary.not_attached.is_empty() {
        writeln!(
            out,
            "not traced in this library: {} (internal functions need a library with its symbol table, e.g. --openssl 1.1.1w)",
            summary.not_attached.join(", ")
        )?;
    }
    writeln!(
        out,
        "\nlab finished in {:.0} s",
        started.elapsed().as_secs_f64()
    )?;
    if summary.interrupted {
        return Ok(signals.exit_code(ExitCode::SUCCESS));
    }
    if !summary.failed.is_empty() {
        eprintln!(
            "tlsscope: error: experiments failed: {}",
            summary.failed.join("; ")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
