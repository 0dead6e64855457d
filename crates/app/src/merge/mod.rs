//! `tlsscope merge`: the documents of a sharded bench run (`bench --shard I/N`) added up into
//! one bench document: the options become a typed config (`config.rs`), the session reads and
//! adds the shards' documents (`session.rs`), and the result is written as text, JSON and HTML
//! (`render.rs`, `page.rs`).

pub mod config;
pub mod page;
pub mod render;
pub mod session;

use std::process::ExitCode;

use crate::merge::config::MergeArgs;

/// Exit status when a shard failed: the others were merged and written, the whole is short.
pub const EXIT_SHARD_FAILED: u8 = 3;

pub fn run(a: &MergeArgs) -> anyhow::Result<ExitCode> {
    let cfg = a.config()?;
    let merged = session::run(&cfg)?;
    let doc = &merged.document;
    if let Some(json) = &cfg.json {
        json.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(html) = &cfg.html {
        html.write(page::page(doc).as_bytes())?;
    }
    if cfg.text {
        let mut text = Vec::new();
        render::merge_text(&mut text, doc)?;
        crate::common::output::to_stdout(text)?;
    }
    let failed: Vec<&model::bench::ShardRow> =
        doc.shards.iter().filter(|s| s.status == "failed").collect();
    for s in &failed {
        eprintln!(
            "tlsscope merge: {}: not merged: {}",
            s.file,
            s.problem.as_deref().unwrap_or("failed")
        );
    }
    if !failed.is_empty() {
        eprintln!(
            "tlsscope: error: {} of {} shard documents failed; the others are merged",
            failed.len(),
            doc.shards.len()
        );
        return Ok(ExitCode::from(EXIT_SHARD_FAILED));
    }
    Ok(ExitCode::SUCCESS)
}
