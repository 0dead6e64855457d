//! `tlsscope merge`'s options and the typed settings made from them once: the only code that
//! knows merge's flag names.

use std::path::PathBuf;

use clap::Args;

use crate::common::output::OutputFile;

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shards' bench documents (`bench --shard I/N --json FILE`), at least one. A file that
    /// cannot be read, is no bench document, or whose run was interrupted is reported as a
    /// failed shard; the others are still merged (exit status 3).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Write the merged run as a bench document (schemas/bench.v1.schema.json, with `shards`);
    /// `-`: on stdout, instead of the text report.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the merged run as one self-contained HTML page, with the shards' table.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub html: Option<OutputFile>,
}

/// What a merge reads and where its outputs go.
#[derive(Debug)]
pub struct MergeConfig {
    pub files: Vec<PathBuf>,
    pub json: Option<OutputFile>,
    pub html: Option<OutputFile>,
    /// The text report on stdout: when no other output took stdout.
    pub text: bool,
}

impl MergeArgs {
    pub fn config(&self) -> anyhow::Result<MergeConfig> {
        let text = !crate::common::output::one_on_stdout([&self.json, &self.html])?;
        Ok(MergeConfig {
            files: self.files.clone(),
            json: self.json.clone(),
            html: self.html.clone(),
            text,
        })
    }
}
