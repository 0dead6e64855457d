//! `tlsscope bench`: validate, check the target answers, run the load, report.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use load::{LoadConfig, Mode, ResumeBy};

use crate::args::{BenchArgs, BenchMode, ClientEngine, ResumeKind};
use crate::client::client_context;
use crate::signals::StopFlags;
use experiments::client::{connect_first, Probe};

/// `openssl_given`: `--openssl` was on the command line (the user chose an OpenSSL client).
pub fn run(
    library: &ossl::LibrarySource,
    openssl_given: bool,
    a: &BenchArgs,
) -> anyhow::Result<ExitCode> {
    let text_to_stdout = !crate::output::one_on_stdout([&a.json, &a.csv, &a.html])?;
    let signals = StopFlags::install()?;
    let (doc, rows) = measure(library, openssl_given, a, &signals.stop)?;
    if let Some(out) = &a.json {
        out.write_with(|w| Ok(doc.write_json(w)?))?;
    }
    if let Some(out) = &a.csv {
        out.write_with(|w| Ok(report::bench_csv(w, &rows)?))?;
    }
    if let Some(out) = &a.html {
        out.write(report::bench_page::page(&doc).as_bytes())?;
    }
    if text_to_stdout {
        let mut text = Vec::new();
        report::bench_text(&mut text, &doc.environment, &doc.result)?;
        crate::output::to_stdout(text)?;
    }
    Ok(verdict(&doc.result, &signals))
}

/// Validates, checks the target answers, and runs the load; prints nothing. `interrupted`
/// (set by a signal handler the caller installed) ends the run early.
pub fn measure(
    library: &ossl::LibrarySource,
    openssl_given: bool,
    a: &BenchArgs,
    interrupted: &AtomicBool,
) -> anyhow::Result<(
    model::bench::BenchDocument,
    Vec<load::result::ConnectionRow>,
)> {
    let mode = mode(a)?;
    let exporter = std::sync::Mutex::new(experiments::metrics::Exporter::bind(
        a.metrics.metrics_listen,
        a.metrics.file(),
    )?);
    let lib = crate::library::load(library)?;
    let engine = engine(lib, a, openssl_given)?;
    // Said first: the library it falls back to may refuse the settings too.
    if let Some(why) = &engine.fallback {
        eprintln!("tlsscope bench: {why}");
    }
    let ctx = match (context(lib, a), &engine.rustls) {
        (Ok(ctx), _) => ctx,
        // With rustls, the OpenSSL context only checks the target: where the library lacks a
        // group the run asks for, it checks with the library's default groups.
        (Err(_), Some(_)) if a.tls.groups.is_some() => context_without_groups(lib, a)?,
        (Err(e), _) => return Err(e),
    };

    // One connection first: a target that is down, not TLS, or fails verification is a
    // one-line error, not a run full of errors. Of a name's addresses, the first that answers
    // is the one loaded.
    let sni = a.peer.server_name(&a.target);
    let request = request_path(a);
    let checked = connect_first(
        &ctx,
        &a.target,
        |target| Probe {
            target,
            sni: sni.as_deref(),
            verify: a.peer.verifies(),
            timeout: a.timeout,
            request: (mode != Mode::KeepAlive).then_some(request).flatten(),
            await_ticket: false,
        },
        None,
    )
    .context("checking the target before the run");
    let addr = match (checked, &engine.rustls) {
        (Ok((addr, _)), _) => addr,
        (Err(e), None) => return Err(e),
        // The library's check can fail where the rustls client does not (a post-quantum
        // group or an ML-DSA key the library lacks): the client that runs decides, and when
        // it fails too, both say why.
        (Err(e), Some(r)) => rustls_first(r, a, sni.as_deref())
            .map_err(|why| anyhow::anyhow!("{e:#}; the rustls client: {why}"))?,
    };
    if a.target.addrs.len() > 1 {
        eprintln!(
            "tlsscope bench: {} resolves to several addresses; loading {addr}",
            a.target
        );
    }
    let cfg = load_config(a, mode, addr, sni)?;

    let environment = experiments::environment::collect(lib, std::env::args().collect());
    if let Some(addr) = exporter.lock().ok().and_then(|e| e.addr()) {
        eprintln!("tlsscope bench: metrics at http://{addr}/metrics");
    }
    let live = std::sync::Mutex::new(report::metrics::BenchMetrics {
        mode: format!("{:?}", a.mode).to_lowercase(),
        target: addr.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    });
    let render = |format| {
        let m = live.lock().map_err(|_| "poisoned".to_string())?.clone();
        Ok(report::metrics::bench_exposition(&m, format))
    };
    let line = progress_line();
    // Every 50 ms: the progress line, the live figures, and any waiting scrape.
    let progress = |p: &experiments::bench::Progress| {
        line(p);
        if let Ok(mut m) = live.lock() {
            (m.ops, m.errors, m.measured_s) = (p.ops, p.errors, p.measured.as_secs_f64());
        }
        if let Ok(mut e) = exporter.lock() {
            let _ = e.tick(&mut { render });
        }
    };
    let client = match &engine.rustls {
        Some(r) => load::Client::Rustls(r),
        None => load::Client::Openssl(&ctx),
    };
    let (mut result, rows) = experiments::bench::run(client, cfg, interrupted, &progress)?;
    result.warnings.extend(engine.fallback);
    if let Ok(mut m) = live.lock() {
        (m.ops, m.errors, m.measured_s) = (result.ops, result.errors_total, result.duration_s);
    }
    if let Ok(mut e) = exporter.lock() {
        e.write_file(&mut { render })?;
    }
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
    Ok((model::bench::BenchDocument::new(environment, result), rows))
}

/// The run's exit status: errors and an unmet resumption rule fail it, after the figures; else
/// 130 after Ctrl-C, as in every command.
fn verdict(r: &load::RunResult, signals: &StopFlags) -> ExitCode {
    if let Err(problem) = experiments::bench::check(r) {
        eprintln!("tlsscope: error: {problem}");
        return ExitCode::FAILURE;
    }
    signals.exit_code(ExitCode::SUCCESS)
}

fn mode(a: &BenchArgs) -> anyhow::Result<Mode> {
    if a.mode != BenchMode::Resume && (a.resume.is_some() || a.resume_ratio.is_some()) {
        crate::usage_bail!("--resume-by and --resume-ratio go with --mode resume");
    }
    // The options that go together, checked before any connection is made.
    if a.connections < a.threads {
        crate::usage_bail!(
            "--connections {} is fewer than --threads {}: each thread needs a connection",
            a.connections,
            a.threads
        );
    }
    if a.rate.is_some() && a.duration.is_none() && a.count.is_none() {
        crate::usage_bail!("--rate needs a --duration or a --count to end the run");
    }
    if let Some(path) = &a.request {
        if !path.starts_with('/') {
            crate::usage_bail!("--request {path}: the path must start with /");
        }
    }
    experiments::wording::check_cpus("--cpus", &a.cpus).map_err(crate::UsageError)?;
    Ok(match a.mode {
        BenchMode::Full => Mode::Full,
        BenchMode::Keepalive => Mode::KeepAlive,
        BenchMode::Resume => Mode::Resume {
            by: match a.resume.unwrap_or(ResumeKind::Ticket) {
                ResumeKind::Ticket => ResumeBy::Ticket,
                ResumeKind::Id => ResumeBy::SessionId,
            },
            ratio: a.resume_ratio.unwrap_or(1.0),
        },
    })
}

fn context(lib: &'static ossl::Library, a: &BenchArgs) -> anyhow::Result<ossl::Context> {
    // Resumption by session ID: do not ask for tickets, so the server falls back to its cache.
    let tickets = a.resume != Some(ResumeKind::Id);
    let cert = a.cert.as_deref().zip(a.key.as_deref());
    client_context(lib, &a.tls, &a.peer, tickets, cert)
}

/// The OpenSSL context for checking the target, with the library's default groups.
fn context_without_groups(
    lib: &'static ossl::Library,
    a: &BenchArgs,
) -> anyhow::Result<ossl::Context> {
    let mut tls = a.tls.clone();
    tls.groups = None;
    let tickets = a.resume != Some(ResumeKind::Id);
    let cert = a.cert.as_deref().zip(a.key.as_deref());
    client_context(lib, &tls, &a.peer, tickets, cert)
}

/// The first of the target's addresses the rustls client completes a handshake with; else
/// the first address's failure.
fn rustls_first(
    r: &load::RustlsClient,
    a: &BenchArgs,
    sni: Option<&str>,
) -> Result<SocketAddr, String> {
    let mut first = None;
    for &addr in &a.target.addrs {
        match r.probe(sni, addr, a.timeout) {
            Ok(()) => return Ok(addr),
            Err(e) => {
                first.get_or_insert_with(|| experiments::wording::rustls_client(&e));
            }
        }
    }
    Err(first.unwrap_or_else(|| format!("{} has no address", a.target)))
}

/// The client engine a run uses: rustls unless OpenSSL was asked for, or is needed.
struct Engine {
    /// None: the OpenSSL context.
    rustls: Option<load::RustlsClient>,
    /// Why the default rustls client is not used, when a setting needs OpenSSL.
    fallback: Option<String>,
}

fn engine(
    lib: &'static ossl::Library,
    a: &BenchArgs,
    openssl_given: bool,
) -> anyhow::Result<Engine> {
    let openssl = Engine {
        rustls: None,
        fallback: None,
    };
    match (a.client_engine, openssl_given) {
        (Some(ClientEngine::Openssl), _) | (None, true) if a.rustls_provider.is_some() => bail!(
            "--rustls-provider: the client is OpenSSL (--openssl or --client-engine openssl); drop one of them"
        ),
        (Some(ClientEngine::Openssl), _) | (None, true) if a.client_work.is_some() => bail!(
            "--client-work: only the rustls client has a lean form, and the client is OpenSSL (--openssl or --client-engine openssl); drop --client-work"
        ),
        (Some(ClientEngine::Openssl), _) | (None, true) => return Ok(openssl),
        (Some(ClientEngine::Rustls), true) => bail!(
            "--client-engine rustls and --openssl: --openssl chooses an OpenSSL client; give one of them"
        ),
        _ => {}
    }
    let tickets = a.resume != Some(ResumeKind::Id);
    let work = crate::args::ClientWork::resolve(a.client_work, a.peer.verifies());
    let trust = load::rustls_client::Trust {
        work,
        verify: a.peer.verifies().then_some(a.peer.cafile.as_deref()),
        credentials: a.cert.as_deref().zip(a.key.as_deref()),
        keylog: a.tls.keylog_sink(),
    };
    let provider = a.rustls_provider.map(|p| p.typed());
    let client =
        load::RustlsClient::new(&a.tls.settings(false, tickets)?, trust, Some(lib), provider)
            .map_err(|e| experiments::wording::rustls_client(&e));
    match client {
        Ok(r) => Ok(Engine {
            rustls: Some(r),
            fallback: None,
        }),
        Err(why) if a.client_engine.is_none() && provider.is_none() && a.client_work.is_none() => {
            Ok(Engine {
                fallback: Some(format!(
                    "the client is {} rather than the default rustls: {why}",
                    lib.name()
                )),
                ..openssl
            })
        }
        Err(why) if a.client_engine.is_none() => bail!("{why}"),
        Err(why) => bail!("--client-engine rustls: {why}; or use --client-engine openssl"),
    }
}

/// The path to GET: --request, else the target URL's path (as wrk takes it).
fn request_path(a: &BenchArgs) -> Option<&str> {
    a.request.as_deref().or(a.target.path.as_deref())
}

/// The load engine's settings: `addr` is the address that answered, `server_name` the SNI.
fn load_config(
    a: &BenchArgs,
    mode: Mode,
    addr: SocketAddr,
    server_name: Option<String>,
) -> anyhow::Result<LoadConfig> {
    let duration = match (a.duration, a.count) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) => d,
    };
    let host = server_name
        .clone()
        .unwrap_or_else(|| "localhost".to_string());
    let path = match (mode, request_path(a)) {
        (_, Some(p)) => Some(p),
        (Mode::KeepAlive, None) => Some("/"),
        _ => None,
    };
    let keep_alive = mode == Mode::KeepAlive;
    Ok(LoadConfig {
        target: addr,
        server_name,
        verify_host: a.peer.verify_host(&a.target, addr),
        threads: a.threads,
        connections: a.connections,
        cpus: a.cpus.clone(),
        duration,
        count: a.count,
        warmup: a.warmup,
        mode,
        request: path.map(|p| load::request_bytes(p, &host, keep_alive)),
        rate: a.rate,
        timeout: a.timeout,
        record_connections: a.csv.is_some(),
        source_ips: experiments::bench::source_ips(addr, a.source_ips),
        server_pid: a.server_pid,
    })
}

/// On a terminal, a progress line every second after the first two (erased at the end).
fn progress_line() -> impl Fn(&experiments::bench::Progress) + Sync {
    let tty = std::io::stderr().is_terminal();
    let last_second = std::sync::atomic::AtomicU64::new(0);
    move |p| {
        let second = p.elapsed.as_secs();
        if !tty || second < 2 || last_second.swap(second, Ordering::Relaxed) == second {
            return;
        }
        let rate = p.ops as f64 / p.measured.as_secs_f64().max(1e-9);
        eprint!(
            "\r  {:>6.1} s  {}  {rate:.0}/s  errors {}   \x1b[K",
            p.elapsed.as_secs_f64(),
            report::count(p.ops, "op"),
            p.errors
        );
    }
}
