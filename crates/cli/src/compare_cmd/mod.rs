//! `tlsscope compare`: saved runs side by side, or `--matrix`, an experiment run across
//! library versions and configurations. Both end in one [`CompareDocument`], rendered as a
//! terminal table, Markdown, a self-contained HTML page, and JSON.

mod matrix;
mod saved;
pub mod worker;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use report::compare::CompareDocument;

use crate::args::CompareArgs;

pub fn run(openssl: Option<&str>, a: &CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        a.level > 0.5 && a.level < 1.0,
        "--level {}: a confidence level between 0.5 and 1 (e.g. 0.95)",
        a.level
    );
    let doc = if a.matrix {
        anyhow::ensure!(
            a.files.is_empty(),
            "--matrix runs the experiment itself: drop the files, or drop --matrix to compare them"
        );
        anyhow::ensure!(a.count >= 2, "--count {}: at least 2 per round", a.count);
        anyhow::ensure!(a.repeat >= 1, "--repeat must be at least 1");
        host::check_cpus("--server-cpu", &[a.server_cpu]).map_err(anyhow::Error::msg)?;
        host::check_cpus("--client-cpu", &[a.client_cpu]).map_err(anyhow::Error::msg)?;
        let versions: Vec<String> = openssl
            .unwrap_or("system")
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        matrix::run(&versions, a, a.level)?
    } else {
        anyhow::ensure!(
            a.files.len() >= 2,
            "give two or more saved runs to compare (JSON from bench, trace or compare), or --matrix"
        );
        saved::load(&a.files, a.level)?
    };
    write_outputs(&doc, a)?;
    let failed = doc.variants.iter().filter(|v| v.error.is_some()).count();
    if failed > 0 {
        eprintln!(
            "tlsscope: error: {failed} of {} variants failed (see the warnings); the others are reported",
            doc.variants.len()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn write_outputs(doc: &CompareDocument, a: &CompareArgs) -> anyhow::Result<()> {
    print!("{}", report::compare::text(doc));
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(doc)? + "\n";
        write(path, &text, "--json")?;
    }
    if let Some(path) = &a.markdown {
        write(path, &report::compare::markdown(doc), "--markdown")?;
    }
    if let Some(path) = &a.html {
        write(path, &report::compare::html::page(doc), "--html")?;
    }
    Ok(())
}

fn write(path: &Path, text: &str, flag: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("{flag} {}: cannot write", path.display()))
}
