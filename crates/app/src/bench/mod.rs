//! `tlsscope bench`: the options become one typed config (`config.rs`, where every check of
//! them is), the session checks the target and runs the load (`session.rs`), and the result is
//! written as text, JSON, CSV or HTML (`render.rs`, `page.rs`).

pub mod config;
pub mod page;
pub mod render;
pub mod session;
pub mod shard;

use std::process::ExitCode;

use crate::bench::config::BenchArgs;
use crate::common::signals::StopFlags;

/// `library`: `--openssl`, resolved.
pub fn run(library: &ossl::LibrarySource, a: &BenchArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config(library)?;
    let signals = StopFlags::install()?;
    let session::Measured { document, rows } = session::run(&cfg, &signals.stop)?;
    let out = &cfg.outputs;
    if let Some(json) = &out.json {
        json.write_with(|w| Ok(document.write_json(w)?))?;
    }
    if let Some(csv) = &out.csv {
        csv.write_with(|w| Ok(render::bench_csv(w, &rows)?))?;
    }
    if let Some(html) = &out.html {
        html.write(page::page(&document).as_bytes())?;
    }
    if out.text {
        let mut text = Vec::new();
        if let Some(shard) = &document.shard {
            render::shard_text(&mut text, shard)?;
        }
        render::bench_text(&mut text, &document.environment, &document.result)?;
        crate::common::output::to_stdout(text)?;
    }
    // Errors and an unmet resumption rule fail the run, after the figures; else 130 after
    // Ctrl-C, as in every command.
    if let Err(problem) = crate::common::load_run::check(&document.result) {
        eprintln!("tlsscope: error: {problem}");
        return Ok(ExitCode::FAILURE);
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}
