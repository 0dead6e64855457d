//! Shell completions and man pages, generated from the argument definitions in `args`, so they
//! name the same subcommands, flags and choices as `--help` and cannot drift from it.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Command, CommandFactory};
use clap_complete::Shell;
use clap_mangen::Man;

use crate::args::Opts;
use app::common::output::{to_stdout, OutputDir};

/// The command the scripts complete.
const BIN: &str = "tlsscope";

/// Prints the completion script for `shell` on stdout.
pub fn print_completions(shell: Shell) -> anyhow::Result<ExitCode> {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut without_hidden(Opts::command()),
        BIN,
        &mut script,
    );
    to_stdout(script)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes tlsscope.1 and a page per subcommand (tlsscope-bench.1, tlsscope-openssl-build.1)
/// into `dir`; without one, prints tlsscope.1 on stdout.
pub fn man_pages(dir: Option<&OutputDir>) -> anyhow::Result<ExitCode> {
    // clap's `help` subcommand is `--help` by another name; no page of its own.
    let mut root = Opts::command().disable_help_subcommand(true);
    // Built, each subcommand knows its page name (tlsscope-bench) and the global options.
    root.build();
    match dir {
        None => to_stdout(render(&Man::new(root))?)?,
        Some(dir) => write_pages(&root, dir.create()?)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The page of `cmd` and, in the same directory, those of its visible subcommands.
fn write_pages(cmd: &Command, dir: &Path) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir)?;
    }
    let man = Man::new(cmd.clone());
    let path = dir.join(man.get_filename());
    std::fs::write(&path, render(&man)?)
        .with_context(|| format!("--dir: cannot write {}", path.display()))
}

/// The page as roff.
fn render(man: &Man) -> anyhow::Result<Vec<u8>> {
    let mut page = Vec::new();
    man.render(&mut page).context("rendering a man page")?;
    Ok(page)
}

/// `cmd` without its hidden subcommands (`compare-worker`, which tlsscope runs itself):
/// clap_complete offers every subcommand, hidden or not, and clap has no way to remove one, so
/// the top level is put together again from the same arguments and the visible subcommands.
fn without_hidden(cmd: Command) -> Command {
    let visible: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    // clap takes only static names; both are the ones `args` gives (the package's version).
    let mut top = Command::new(BIN)
        .args(cmd.get_arguments().cloned())
        .subcommands(visible)
        .subcommand_required(cmd.is_subcommand_required_set())
        .propagate_version(cmd.is_propagate_version_set());
    if cmd.get_version().is_some() {
        top = top.version(env!("CARGO_PKG_VERSION"));
    }
    if let Some(about) = cmd.get_about() {
        top = top.about(about.clone());
    }
    top
}
