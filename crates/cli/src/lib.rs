//! `tlsscope`'s command line: the argument definitions (`args`), parsed once, and a dispatch to
//! the command's folder in the `app` crate. The binary's `main` only calls [`main_with`].

pub mod args;
mod completions;
pub mod spelling;

use std::process::ExitCode;

use clap::Parser;

use app::common::library::LibraryList;
use app::common::usage::{failure_status, one_line, UsageError};
use args::{Command, OpensslCommand, Opts};

/// Runs the command line `argv` (program name first): parses it, runs the command, and prints an
/// error as one line on stderr.
pub fn main_with(argv: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let argv: Vec<std::ffi::OsString> = argv.into_iter().collect();
    let argv = match spelling::respell(argv.clone()) {
        Ok(respelled) => {
            for notice in &respelled.notices {
                eprintln!("{notice}");
            }
            respelled.argv
        }
        Err(why) => return usage_line(&why, &argv),
    };
    let opts = match Opts::try_parse_from(&argv) {
        Ok(opts) => opts,
        Err(e) => return usage_error(e, &argv),
    };
    match run(opts) {
        Ok(code) => code,
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(usage) => usage_line(&usage.0, &argv),
            None => {
                eprintln!("tlsscope: error: {}", one_line(&e));
                failure_status(&e)
            }
        },
    }
}

/// Prints a usage error as one line pointing to the subcommand's help; exit status 2.
fn usage_line(why: &str, argv: &[std::ffi::OsString]) -> ExitCode {
    eprintln!(
        "tlsscope: error: {why} (see tlsscope {}--help)",
        subcommand_path(argv)
    );
    ExitCode::from(2)
}

/// Runs a parsed command line; the exit status says how it ended.
pub fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    app::common::show_library_log(opts.verbose);
    let openssl = opts.openssl.as_deref();
    // The one library a command loads, resolved once (compare takes a list of its own).
    let library = || app::common::library::source(openssl);
    match opts.command {
        Command::Serve(a) => app::serve::run(&library()?, &a),
        Command::Bench(a) => app::bench::run(&library()?, &a),
        Command::Merge(a) => app::merge::run(&a),
        Command::Handshake(a) => app::handshake::run(&library()?, &a),
        Command::Trace(a) => app::trace::run(&a),
        Command::Lab(a) => app::lab::run(&library()?, &a),
        Command::Compare(a) => app::compare::run(&LibraryList::parse(openssl), &a),
        Command::CompareWorker { spec } => app::compare::worker(library(), &spec),
        Command::Sniff(a) => app::sniff::run(&a),
        Command::Profile(a) => app::profile::run(&LibraryList::parse(openssl), &a),
        Command::Openssl(OpensslCommand::Build(a)) => app::openssl::build_command(&a),
        Command::Openssl(OpensslCommand::List) => app::openssl::list_command(),
        Command::Completions(a) => completions::print_completions(a.shell),
        Command::Man(a) => completions::man_pages(a.dir.as_ref()),
    }
}

/// Help and version go to stdout as clap renders them; a usage error becomes one line on stderr
/// that points to the help of the subcommand it was in.
fn usage_error(e: clap::Error, argv: &[std::ffi::OsString]) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.to_string();
    let first = rendered
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid usage");
    let first = invalid_choice(&e)
        .or_else(|| invalid_value(&e))
        .or_else(|| missing_arguments(&e))
        .unwrap_or_else(|| first.trim_start_matches("error: ").into());
    usage_line(&first, argv)
}

/// "missing --output <DIR>" for arguments required but not given (clap lists them on lines of
/// their own).
fn missing_arguments(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::MissingRequiredArgument {
        return None;
    }
    match e.get(ContextKind::InvalidArg)? {
        ContextValue::Strings(names) if !names.is_empty() => {
            Some(format!("missing {}", names.join(", ")))
        }
        _ => None,
    }
}

/// "--ctx sometimes: use shared or per-connection" for a value that is not one of a flag's
/// choices (clap says the choices on a line of their own).
fn invalid_choice(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::InvalidValue {
        return None;
    }
    let flag = match e.get(ContextKind::InvalidArg)? {
        ContextValue::String(s) => s.split_whitespace().next()?.to_string(),
        _ => return None,
    };
    let value = match e.get(ContextKind::InvalidValue)? {
        ContextValue::String(s) => s.clone(),
        _ => return None,
    };
    let choices = match e.get(ContextKind::ValidValue)? {
        ContextValue::Strings(v) => v.join(", "),
        _ => return None,
    };
    Some(format!("{flag} {value}: use one of {choices}"))
}

/// "--level 2: a confidence level between 0.5 and 1" for a value its parser refused (clap says
/// "invalid value '2' for '--level <LEVEL>': ..."): the flag and the value as typed, then why.
fn invalid_value(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    if e.kind() != clap::error::ErrorKind::ValueValidation {
        return None;
    }
    // Options only: a positional's parser names its value itself.
    let flag = match e.get(ContextKind::InvalidArg)? {
        ContextValue::String(s) if s.starts_with('-') => s.split_whitespace().next()?.to_string(),
        _ => return None,
    };
    let value = match e.get(ContextKind::InvalidValue)? {
        ContextValue::String(s) => s.clone(),
        _ => return None,
    };
    let why = std::error::Error::source(e)?.to_string();
    Some(format!("{flag} {value}: {why}"))
}

/// The subcommands named in `argv` ("bench ", "openssl build "), for pointing to their help.
fn subcommand_path(argv: &[std::ffi::OsString]) -> String {
    use clap::CommandFactory;
    let mut command = Opts::command();
    let mut path = String::new();
    for arg in argv.iter().skip(1) {
        let Some(arg) = arg.to_str() else { break };
        let Some(sub) = command.find_subcommand(arg).cloned() else {
            continue;
        };
        path.push_str(sub.get_name());
        path.push(' ');
        command = sub;
    }
    path
}
