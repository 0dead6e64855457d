//! `tlsscope lab`: `config` checks the options once, `session` runs the lab's experiments, and
//! the report is written as each experiment ends (`render` for text, `page` for HTML).

pub mod config;
pub mod page;
pub mod render;
pub mod session;

use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

use crate::common::signals::StopFlags;
use crate::lab::config::LabArgs;

pub fn run(library: &ossl::LibrarySource, a: &LabArgs) -> anyhow::Result<ExitCode> {
    let config = a.config(library)?;
    session::check(&config)?;
    let lib = crate::common::library::load(library)?;
    let signals = StopFlags::install()?;
    let started = Instant::now();
    let mut out = crate::common::output::Stdout::lock();
    let heading = render::heading(&config);
    writeln!(out, "{heading}")?;
    for (name, why) in session::skipped(&config, lib) {
        writeln!(out, "not run: {name}: {}", config::word_skip(&why))?;
    }
    out.flush()?;
    // Each experiment is written as it ends; its rates (and, for the page, all of it) kept.
    let mut rows: Vec<render::SummaryRow<'static>> = Vec::new();
    let mut kept: Vec<model::lab::LabExperiment> = Vec::new();
    let summary = session::run(&config, lib, &signals.stop, |e, measured| {
        if a.html.is_some() {
            kept.push(page::kept_experiment(e.name, &measured));
        }
        rows.push(render::summary_row(
            e.name,
            measured.as_ref().ok(),
            &config.backends,
        ));
        let _ = write!(out, "{}", render::experiment_section(e.name, &measured));
        let _ = out.flush();
    })?;
    let backends: Vec<&str> = config.backends.iter().map(|b| b.describe()).collect();
    let mut text = String::from("\n");
    render::render_summary(&mut text, &backends, &rows);
    write!(out, "{text}")?;
    let mut notes = render::calibration_notes(&summary);
    if !summary.not_attached.is_empty() {
        notes.push(config::not_traced_note(&summary.not_attached));
    }
    for n in &notes {
        writeln!(out, "{n}")?;
    }
    if let Some(html) = &a.html {
        let mut env = crate::common::environment::host(std::env::args().collect());
        env.library = lib.name().to_string();
        env.library_flavour = lib.flavour().name().to_string();
        env.library_version_number = lib.version().number;
        html.write(page::page(&heading, &env, &kept, &notes).as_bytes())?;
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
