//! `tlsscope compare`: saved runs side by side, or `--matrix`, an experiment run across
//! library versions and configurations. `config` checks the options once; `session` runs
//! (`saved` reads files; `matrix` starts the servers (`matrix_servers`), drives a `worker`
//! process per variant (whose in-process experiment, on one or more threads, is `engine`) and,
//! with `--profile`, writes `profiles`) and returns one
//! [`CompareDocument`], its verdicts from `analysis`; `render` (terminal table, Markdown) and
//! `page` (HTML) show it, beside its JSON.

pub mod analysis;
pub mod config;
mod engine;
pub mod matrix;
mod matrix_servers;
pub mod page;
mod placement;
pub mod profiles;
pub mod render;
pub mod saved;
pub mod scaling;
pub mod session;
pub mod worker;

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use model::compare::CompareDocument;

use crate::common::library::LibraryList;
use crate::compare::config::CompareArgs;

/// The hidden `compare-worker SPEC` subcommand: one variant's measurements.
pub use worker::run as worker;

/// `tlsscope compare`: `libraries` is `--openssl`'s list (the matrix's varying side).
pub fn run(libraries: &LibraryList, a: &CompareArgs) -> anyhow::Result<ExitCode> {
    let config = a.config(libraries)?;
    let signals = crate::common::signals::StopFlags::install()?;
    let doc =
        session::run(&config, &signals.stop, &mut say_progress).map_err(config::word_error)?;
    write_outputs(&doc, a)?;
    if signals.stop.load(Ordering::Relaxed) {
        eprintln!("tlsscope: stopped by a signal; the rounds before it are reported");
        return Ok(signals.exit_code(ExitCode::FAILURE));
    }
    Ok(exit_status(&doc))
}

/// What the matrix says as it goes: each round on stderr, and a build's outcome on stdout (as
/// `openssl build` says it).
pub fn say_progress(event: matrix::Event<'_>) {
    use std::io::Write as _;
    match event {
        matrix::Event::Round { round, of, label } => {
            eprint!("tlsscope compare: round {round}/{of}: {label} ... ");
            let _ = std::io::stderr().flush();
        }
        matrix::Event::RoundDone(Ok(summary)) => eprintln!("{summary}"),
        matrix::Event::RoundDone(Err(_)) => eprintln!("failed"),
        matrix::Event::Building { library } => {
            eprintln!("tlsscope compare: {library} is not built yet: building it")
        }
        matrix::Event::Built(outcome) => {
            let _ = crate::common::output::to_stdout(format!("{outcome}\n"));
        }
    }
}

/// Failure when a variant failed (said on stderr): the others are still reported.
pub fn exit_status(doc: &CompareDocument) -> ExitCode {
    let failed = doc.variants.iter().filter(|v| v.error.is_some()).count();
    if failed > 0 {
        eprintln!(
            "tlsscope: error: {failed} of {} failed (see the warnings); the others are reported",
            crate::render::words::count(doc.variants.len() as u64, "variant")
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// The files first: a stdout that fails (full, closed) loses no file.
fn write_outputs(doc: &CompareDocument, a: &CompareArgs) -> anyhow::Result<()> {
    if let Some(out) = &a.json {
        out.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(out) = &a.markdown {
        out.write(render::markdown(doc).as_bytes())?;
    }
    if let Some(out) = &a.html {
        let links = a
            .profile
            .as_ref()
            .map(|dir| page::profile_links(doc, &dir.path, out.path_or_dash()))
            .unwrap_or_default();
        out.write(page::page_with_profiles(doc, &links).as_bytes())?;
    }
    let on_stdout = [&a.json, &a.markdown, &a.html]
        .iter()
        .any(|o| o.as_ref().is_some_and(|o| o.is_stdout()));
    if on_stdout {
        return Ok(());
    }
    crate::common::output::to_stdout(render::text(doc))
}
