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
        backends: lab::LabBackend::chosen(a.backend),
    };
    experiments::wording::check_cpus("--server-cpu", &[a.server_cpu]).map_err(crate::UsageError)?;
    experiments::wording::check_cpus("--client-cpu", &[a.client_cpu]).map_err(crate::UsageError)?;
    lab::check(&config)?;
    let lib = crate::library::load(library)?;
    let signals = StopFlags::install()?;
    let started = Instant::now();
    let mut out = crate::output::Stdout::lock();
    let backends: Vec<&str> = config.backends.iter().map(|b| b.describe()).collect();
    let heading = format!(
        "tlsscope lab: {} on CPU {}, load on CPU {}; each experiment {:.0} s untraced, then {:.0} s traced by {}",
        config.target.describe(),
        a.server_cpu,
        a.client_cpu,
        a.duration.as_secs_f64(),
        a.trace_duration.as_secs_f64(),
        backends.join(", then by ")
    );
    writeln!(out, "{heading}")?;
    for (name, why) in lab::skipped(&config, lib) {
        writeln!(out, "not run: {name}: {why}")?;
    }
    out.flush()?;
    let mut rates: Vec<Rates> = Vec::new();
    let mut kept: Vec<model::lab::LabExperiment> = Vec::new();
    let summary = lab::run(&config, lib, &signals.stop, |e, measured| {
        let mut text = format!("\n== {}\n", e.name);
        if a.html.is_some() {
            kept.push(keep(e.name, &measured));
        }
        match measured {
            Ok(m) => {
                if let Some(note) = &m.note {
                    let _ = writeln!(text, "  note: {note}");
                }
                let traced: Vec<report::lab::Traced<'_>> = m
                    .traced
                    .iter()
                    .map(|t| report::lab::Traced {
                        backend: t.backend.describe(),
                        result: &t.result,
                        calls: &t.calls,
                    })
                    .collect();
                report::lab::render_experiment(&mut text, &m.untraced, &traced);
                rates.push(Rates::of(e.name, Some(&m), &config.backends));
            }
            Err(err) => {
                let _ = writeln!(text, "  failed: {err}");
                rates.push(Rates::of(e.name, None, &config.backends));
            }
        }
        let _ = write!(out, "{text}");
        let _ = out.flush();
    })?;
    let mut text = String::from("\n");
    let rows: Vec<report::lab::SummaryRow<'_>> = rates.iter().map(Rates::row).collect();
    report::lab::render_summary(&mut text, &backends, &rows);
    write!(out, "{text}")?;
    let mut notes: Vec<String> = summary
        .calibrations
        .iter()
        .map(|(backend, c)| {
            format!(
                "probe cost on this machine, {}: {:.2} us per probed call (measured on {} calls of a function in tlsscope)",
                backend.describe(),
                c.cost_ns_per_call() / 1000.0,
                c.calls
            )
        })
        .collect();
    if !summary.not_attached.is_empty() {
        notes.push(format!(
            "not traced in this library: {} (internal functions need a library with its symbol table, e.g. --openssl 1.1.1w)",
            summary.not_attached.join(", ")
        ));
    }
    for n in &notes {
        writeln!(out, "{n}")?;
    }
    if let Some(html) = &a.html {
        let mut env = experiments::environment::host(std::env::args().collect());
        env.library = lib.name().to_string();
        env.library_flavour = lib.flavour().name().to_string();
        env.library_version_number = lib.version().number;
        let page = report::lab_page::page(&heading, &env, &kept, &notes);
        html.write(page.as_bytes())?;
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

/// An experiment as the HTML page shows it (owned: the page is written at the end).
fn keep<E: std::fmt::Display>(
    name: &str,
    measured: &Result<lab::Measured, E>,
) -> model::lab::LabExperiment {
    match measured {
        Ok(m) => model::lab::LabExperiment {
            name: name.to_string(),
            note: m.note.clone(),
            untraced: Some(m.untraced.clone()),
            traced: m
                .traced
                .iter()
                .map(|t| model::lab::LabTraced {
                    backend: t.backend.describe().to_string(),
                    result: t.result.clone(),
                    calls: t.calls.clone(),
                })
                .collect(),
            error: None,
        },
        Err(e) => model::lab::LabExperiment {
            name: name.to_string(),
            note: None,
            untraced: None,
            traced: Vec::new(),
            error: Some(e.to_string()),
        },
    }
}

/// One experiment's rates, kept for the closing table.
struct Rates {
    experiment: &'static str,
    untraced: Option<f64>,
    traced: Vec<Option<f64>>,
}

impl Rates {
    /// The rates of `measured` (None: the experiment failed), a column per lab backend.
    fn of(
        experiment: &'static str,
        measured: Option<&lab::Measured>,
        backends: &[lab::LabBackend],
    ) -> Rates {
        let traced = backends
            .iter()
            .map(|b| {
                measured?
                    .traced
                    .iter()
                    .find(|t| t.backend == *b)
                    .map(|t| t.result.ops_per_s)
            })
            .collect();
        Rates {
            experiment,
            untraced: measured.map(|m| m.untraced.ops_per_s),
            traced,
        }
    }

    fn row(&self) -> report::lab::SummaryRow<'_> {
        report::lab::SummaryRow {
            experiment: self.experiment,
            untraced: self.untraced,
            traced: self.traced.clone(),
        }
    }
}
