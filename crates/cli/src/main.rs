//! `tlsscope`: parses the command line once, then calls the libraries.

mod args;
mod bench_cmd;
mod child_server;
mod client;
mod compare_cmd;
mod environment;
mod handshake_cmd;
mod lab_cmd;
mod library;
mod openssl_cmd;
mod probe;
mod serve_cmd;
mod sniff_cmd;
mod sockets;
mod trace_cmd;

use std::process::ExitCode;

use clap::Parser;

use args::{Command, OpensslCommand, Opts};

fn main() -> ExitCode {
    let opts = match Opts::try_parse() {
        Ok(opts) => opts,
        Err(e) => return usage_error(e),
    };
    match run(opts) {
        Ok(code) => code,
        Err(e) => {
            // One line: the error and its causes, joined.
            eprintln!("tlsscope: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: Opts) -> anyhow::Result<ExitCode> {
    // Before any probe is loaded: libbpf's log goes through tlsscope, shown only with -v.
    probes::log::set_verbose(opts.verbose);
    let openssl = opts.openssl.as_deref();
    match opts.command {
        Command::Serve(a) => serve_cmd::run(openssl, &a),
        Command::Bench(a) => bench_cmd::run(openssl, &a),
        Command::Handshake(a) => handshake_cmd::run(openssl, &a),
        Command::Trace(a) => trace_cmd::run(&a),
        Command::Lab(a) => lab_cmd::run(openssl, &a),
        Command::Compare(a) => compare_cmd::run(openssl, &a),
        Command::CompareWorker { spec } => compare_cmd::worker::run(openssl, &spec),
        Command::Sniff(a) => sniff_cmd::run(&a),
        Command::Openssl(OpensslCommand::Build(a)) => {
            let jobs = a
                .jobs
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
            openssl_cmd::build(&a.versions, a.source.as_deref(), jobs, a.force)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Openssl(OpensslCommand::List) => {
            library::print_system_library();
            openssl_cmd::list()?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Help and version go to stdout as clap renders them; a usage error becomes one line on stderr.
fn usage_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.to_string();
    let first = rendered
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("invalid usage");
    let first = first.trim_start_matches("error: ");
    eprintln!("tlsscope: error: {first} (see tlsscope --help)");
    ExitCode::from(2)
}
