//! `tlsscope serve`: the built-in target.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use ossl::{ContextBuilder, Credentials, Role};
use server::{Limits, Server, ServerConfig};

use crate::args::ServeArgs;
use crate::signals::StopFlags;

pub fn run(library: &ossl::LibrarySource, a: &ServeArgs) -> anyhow::Result<ExitCode> {
    let lib = crate::library::load(library)?;
    experiments::wording::check_cpus("--cpus", &a.cpus).map_err(crate::UsageError)?;
    if a.max_connections < a.threads {
        crate::usage_bail!(
            "--max-connections must be at least one per thread ({})",
            a.threads
        );
    }
    let settings = a.tls.settings(a.session_cache.on(), a.tickets.on())?;
    // Before the key exists: a 1.1.1 RSA key takes its method from the default engine when
    // it is made.
    let engine = match &a.async_engine {
        Some(name) => Some(
            ossl::Engine::load_default(lib, name)
                .with_context(|| format!("serve --async-engine {name}"))?,
        ),
        None => None,
    };
    if a.async_mode && engine.is_none() {
        eprintln!(
            "tlsscope serve: --async without --async-engine: OpenSSL's own crypto never pauses, \
             so no call will wait (give --async-engine dasync with a library from `tlsscope \
             openssl build`)"
        );
    }

    let (creds, cert_name) = match (&a.cert, &a.key) {
        (Some(cert), Some(key)) => (
            Credentials::from_files(lib, cert, key)?,
            cert.display().to_string(),
        ),
        _ => (
            Credentials::generate(lib, a.cert_type)?,
            a.cert_type.to_string(),
        ),
    };
    if let Some(out) = &a.cert_out {
        out.write(&creds.cert.to_pem()?)?;
    }
    let mut builder = ContextBuilder::new(lib, Role::Server)?;
    builder
        .apply(&settings)?
        .credentials(&creds)?
        .refuse_renegotiation();
    if a.async_mode {
        builder.async_mode().context("serve --async")?;
    }
    if let Some(sink) = a.tls.keylog_sink() {
        builder.keylog(sink);
    }
    let ctx = builder.build();

    let config = ServerConfig {
        listen: a.listen,
        threads: a.threads,
        cpus: a.cpus.clone(),
        limits: limits(a),
    };
    let mut exporter =
        experiments::metrics::Exporter::bind(a.metrics.metrics_listen, a.metrics.file())?;
    let server = Server::bind(config, ctx).map_err(crate::wording::server_error)?;
    let stop = server.shutdown_flag();
    // Ctrl-C ends the server like SIGTERM, and is told apart by the exit status (130).
    let signals = StopFlags::with_stop(stop.clone())?;
    if let Some(duration) = a.duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(duration);
            stop.store(true, Ordering::Relaxed);
        });
    }
    if a.ready_json {
        let ready = experiments::servers::Ready {
            listening: server.local_addr(),
            pid: std::process::id(),
            library: lib.name().to_string(),
        };
        // A server keeps serving whatever becomes of its stdout.
        let _ = writeln!(std::io::stdout(), "{}", serde_json::to_string(&ready)?);
    }
    // With --stats-json -, stdout is the JSON alone: the lines for people go to stderr.
    let json_on_stdout = a.stats_json.as_ref().is_some_and(|o| o.is_stdout());
    let mut people: Box<dyn Write> = if json_on_stdout {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let _ = writeln!(
        people,
        "tlsscope serve: listening on https://{} ({}, {}, {}, session cache {}, tickets {}{})",
        server.local_addr(),
        cert_name,
        lib.name(),
        report::count(a.threads, "thread"),
        on_off(a.session_cache.on()),
        on_off(a.tickets.on()),
        async_note(a.async_mode, engine.as_ref()),
    );
    if let Some(addr) = exporter.addr() {
        let _ = writeln!(people, "tlsscope serve: metrics at http://{addr}/metrics");
    }
    let _ = people.flush();
    drop(people);

    // The counters, read when scraped (and for the file, every 10 s and at the end).
    let counters = server.counters();
    let running = stop.clone();
    let exporting = exporter.is_active();
    // No thread at all when nothing is exported: the server under test runs as it always did.
    let metrics = exporting.then(|| {
        std::thread::spawn(move || -> anyhow::Result<()> {
            let mut render = |format| {
                let m = report::metrics::ServeMetrics {
                    stats: counters.snapshot(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                };
                Ok(report::metrics::serve_exposition(&m, format))
            };
            while !running.load(Ordering::Relaxed) {
                exporter.tick(&mut render)?;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Ok(exporter.write_file(&mut render)?)
        })
    });

    let snapshot = server.run()?;
    stop.store(true, Ordering::Relaxed);
    match metrics.map(|t| t.join()) {
        None | Some(Ok(Ok(()))) => {}
        Some(Ok(Err(e))) => eprintln!("tlsscope serve: metrics: {e:#}"),
        Some(Err(_)) => eprintln!("tlsscope serve: the metrics thread panicked"),
    }
    if let Some(out) = &a.stats_json {
        out.write(&serde_json::to_vec_pretty(&snapshot)?)?;
    }
    // A reader that went away (the terminal closed, `| head`) is not the server's failure.
    if !json_on_stdout {
        let _ = report::serve::summary(&mut std::io::stdout().lock(), &snapshot);
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}

/// The listening line's word on async mode.
fn async_note(on: bool, engine: Option<&ossl::Engine>) -> String {
    match (on, engine) {
        (false, _) => String::new(),
        (true, Some(e)) => format!(", async with engine {}", e.id()),
        (true, None) => ", async (no engine: nothing pauses)".into(),
    }
}

/// The server's limits from the command line.
fn limits(a: &ServeArgs) -> Limits {
    Limits {
        handshake_timeout: a.handshake_timeout,
        request_timeout: a.request_timeout,
        idle_timeout: a.idle_timeout,
        max_connections: a.max_connections,
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Command, Opts};

    fn serve_args(argv: &[&str]) -> ServeArgs {
        let mut all = vec!["tlsscope", "serve"];
        all.extend_from_slice(argv);
        match Opts::try_parse_from(all).unwrap().command {
            Command::Serve(a) => a,
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn the_flags_default_to_the_servers_own_limits() {
        assert_eq!(limits(&serve_args(&[])), Limits::default());
    }

    #[test]
    fn limits_come_from_the_flags() {
        let a = serve_args(&[
            "--handshake-timeout",
            "2s",
            "--request-timeout",
            "1500ms",
            "--idle-timeout",
            "1m",
            "--max-connections",
            "64",
        ]);
        let l = limits(&a);
        assert_eq!(l.handshake_timeout, std::time::Duration::from_secs(2));
        assert_eq!(l.request_timeout, std::time::Duration::from_millis(1500));
        assert_eq!(l.idle_timeout, std::time::Duration::from_secs(60));
        assert_eq!(l.max_connections, 64);
    }
}
