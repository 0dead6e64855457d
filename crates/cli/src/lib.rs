//! `tlsscope`'s commands: the command line is parsed once (`args`), then each command calls the
//! libraries and writes its outputs. The binary's `main` only calls [`main_with`].

pub mod args;
mod bench_cmd;
mod client;
mod compare_cmd;
mod completions;
mod handshake_cmd;
mod lab_cmd;
mod library;
mod openssl_cmd;
pub mod output;
mod profile_cmd;
mod serve_cmd;
pub mod signals;
mod sniff_cmd;
pub mod spelling;
mod trace_cmd;
mod wording;

use std::process::ExitCode;

use clap::Parser;

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

/// Exit status 3 when the library under test lacks what was asked (a group, a key type, a
/// feature: compare's matrix reports such a variant as not run), 1 for any other failure.
fn failure_status(e: &anyhow::Error) -> ExitCode {
    let lacks = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<ossl::Error>(),
            Some(ossl::Error::NotInLibrary { .. })
        )
    });
    if lacks {
        ExitCode::from(experiments::servers::EXIT_NOT_IN_LIBRARY)
    } else {
        ExitCode::FAILURE
    }
}

/// A command line that parses but asks for what cannot be done (options that exclude each
/// other, a value out of range): a usage error, exit status 2, as clap's own.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Returns early from a command with a [`UsageError`].
#[macro_export]
macro_rules! usage_bail {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::UsageError(format!($($arg)*))))
    };
}

/// Prints a usage error as one line pointing to the subcommand's help; exit status 2.
fn usage_line(why: &str, argv: &[std::ffi::OsString]) -> ExitCode {
    eprintln!(
        "tlsscope: error: {why} (see tlsscope {}--help)",
        subcommand_path(argv)
    );
    ExitCode::from(2)
}

/// The error and its causes joined on one line, each said once: a cause whose text an outer
/// message already includes (an OS error quoted in its context) is not repeated.
pub fn one_line(e: &anyhow::Error) -> String {
    let top: &(dyn std::error::Error + 'static) = e.as_ref();
    experiments::error::one_line(top)
}

/// Runs a parsed command line; the exit status says how it ended.
pub fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    // Before any probe is loaded: libbpf's log goes through tlsscope, shown only with -v.
    probes::log::set_verbose(opts.verbose);
    let openssl = opts.openssl.as_deref();
    // The one library a command loads, resolved once (compare takes a list of its own).
    let library = || library::source(openssl);
    match opts.command {
        Command::Serve(a) => serve_cmd::run(&library()?, &a),
        Command::Bench(a) => bench_cmd::run(&library()?, openssl.is_some(), &a),
        Command::Handshake(a) => handshake_cmd::run(&library()?, &a),
        Command::Trace(a) => trace_cmd::run(&a),
        Command::Lab(a) => lab_cmd::run(&library()?, &a),
        Command::Compare(a) => compare_cmd::run(openssl, &a),
        Command::CompareWorker { spec } => compare_cmd::worker(library(), &spec),
        Command::Sniff(a) => sniff_cmd::run(&a),
        Command::Profile(a) => profile_cmd::run(openssl, &a),
        Command::Openssl(OpensslCommand::Build(a)) => {
            let jobs = a
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
            openssl_cmd::build(&a.versions, a.source.as_deref(), jobs, a.force)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Openssl(OpensslCommand::List) => {
            library::print_system_library()?;
            openssl_cmd::list()?;
            Ok(ExitCode::SUCCESS)
        }
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
