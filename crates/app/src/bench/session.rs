//! A bench run from its typed settings: load the library, make the client, check the target
//! answers, run the load (with a progress line and live metrics), and return the document. Knows
//! no flag names; prints only progress notes on stderr.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::Context as _;
use load::{LoadConfig, Mode};

use crate::bench::config::{BenchConfig, ClientChoice, IfRustlsRefused, RustlsRefused};
use crate::bench::shard;
use crate::common::client::{connect_first, Probe};
use crate::common::load_run::Progress;

/// What a run returns: the document, and one row per connection (when they were recorded).
pub struct Measured {
    pub document: model::bench::BenchDocument,
    pub rows: Vec<load::result::ConnectionRow>,
}

/// Checks the target answers and runs the load; `interrupted` (set by a signal handler the
/// caller installed) ends the run early.
pub fn run(cfg: &BenchConfig, interrupted: &AtomicBool) -> anyhow::Result<Measured> {
    let exporter = Mutex::new(crate::common::metrics::Exporter::bind(
        cfg.metrics_listen,
        cfg.metrics_file.as_deref(),
    )?);
    let lib = crate::common::library::load(&cfg.library)?;
    let engine = engine(lib, cfg)?;
    // Said first: the library it falls back to may refuse the settings too.
    if let Some(why) = &engine.fallback {
        eprintln!("tlsscope bench: {why}");
    }
    let ctx = match (cfg.tls.context(lib), &engine.rustls) {
        (Ok(ctx), _) => ctx,
        // With rustls, the OpenSSL context only checks the target: where the library lacks a
        // group the run asks for, it checks with the library's default groups.
        (Err(_), Some(_)) if cfg.tls.settings.groups.is_some() => {
            let mut tls = cfg.tls.clone();
            tls.settings.groups = None;
            tls.context(lib)?
        }
        (Err(e), _) => return Err(e),
    };

    // One connection first: a target that is down, not TLS, or fails verification is a
    // one-line error, not a run full of errors. Of a name's addresses, the first that answers
    // is the one loaded.
    let checked = connect_first(
        &ctx,
        &cfg.target,
        |target| Probe {
            target,
            sni: cfg.sni.as_deref(),
            verify: cfg.tls.verifies(),
            timeout: cfg.timeout,
            request: (cfg.mode != Mode::KeepAlive)
                .then_some(cfg.request.as_deref())
                .flatten(),
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
        (Err(e), Some(r)) => rustls_first(r, cfg)
            .map_err(|why| anyhow::anyhow!("{e:#}; the rustls client: {why}"))?,
    };
    if cfg.target.addrs.len() > 1 {
        eprintln!(
            "tlsscope bench: {} resolves to several addresses; loading {addr}",
            cfg.target
        );
    }
    let load = load_config(cfg, addr);

    let environment = crate::common::environment::collect(lib, std::env::args().collect());
    if let Some(addr) = exporter.lock().ok().and_then(|e| e.addr()) {
        eprintln!("tlsscope bench: metrics at http://{addr}/metrics");
    }
    let live = Mutex::new(crate::render::metrics::BenchMetrics {
        mode: cfg.mode_label.to_string(),
        target: addr.to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    });
    let render = |format| {
        let m = live.lock().map_err(|_| "poisoned".to_string())?.clone();
        Ok(crate::render::metrics::bench_exposition(&m, format))
    };
    let line = progress_line();
    // Every 50 ms: the progress line, the live figures, and any waiting scrape.
    let progress = |p: &Progress| {
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
    // A shard waits for the common start, everything set up and the target checked, so the
    // load begins at that instant.
    let mut late = None;
    if let Some(start) = &cfg.start_at {
        if let Ok(ahead) = start.at.duration_since(std::time::SystemTime::now()) {
            eprintln!(
                "tlsscope bench: waiting {:.3} s for the start at {}",
                ahead.as_secs_f64(),
                start.text
            );
        }
        match shard::wait_for(start, interrupted) {
            shard::Waited::OnTime => {}
            shard::Waited::Late(warning) => late = Some(warning),
            shard::Waited::Stopped => anyhow::bail!(
                "stopped by a signal while waiting for the start at {}: no load was run",
                start.text
            ),
        }
    }
    let (mut result, rows, clock) =
        crate::common::load_run::run_clocked(client, load, interrupted, &progress)?;
    result.warnings.extend(engine.fallback);
    result.warnings.extend(late);
    if let Ok(mut m) = live.lock() {
        (m.ops, m.errors, m.measured_s) = (result.ops, result.errors_total, result.duration_s);
    }
    if let Ok(mut e) = exporter.lock() {
        e.write_file(&mut { render })?;
    }
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[K");
    }
    let shard = (cfg.shard.is_some() || cfg.start_at.is_some()).then(|| {
        shard::info(shard::Described {
            shard: cfg.shard,
            start_at: cfg.start_at.as_ref(),
            host: &environment.hostname,
            clock,
            connections: cfg.connections,
            requests: cfg.count,
            rate_per_s: cfg.rate,
        })
    });
    let mut document = model::bench::BenchDocument::new(environment, result);
    document.shard = shard;
    Ok(Measured { document, rows })
}

/// The first of the target's addresses the rustls client completes a handshake with; else
/// the first address's failure.
fn rustls_first(r: &load::RustlsClient, cfg: &BenchConfig) -> Result<SocketAddr, String> {
    let mut first = None;
    for &addr in &cfg.target.addrs {
        match r.probe(cfg.sni.as_deref(), addr, cfg.timeout) {
            Ok(()) => return Ok(addr),
            Err(e) => {
                first.get_or_insert_with(|| crate::common::wording::rustls_client(&e));
            }
        }
    }
    Err(first.unwrap_or_else(|| format!("{} has no address", cfg.target)))
}

/// The client engine a run uses.
struct Engine {
    /// None: the OpenSSL context.
    rustls: Option<load::RustlsClient>,
    /// Why the default rustls client is not used, when a setting needs OpenSSL.
    fallback: Option<String>,
}

fn engine(lib: &'static ossl::Library, cfg: &BenchConfig) -> anyhow::Result<Engine> {
    let ClientChoice::Rustls {
        provider,
        work,
        if_refused,
    } = cfg.client
    else {
        return Ok(Engine {
            rustls: None,
            fallback: None,
        });
    };
    let trust = load::rustls_client::Trust {
        work,
        verify: cfg.tls.verify(),
        credentials: cfg.tls.credentials(),
        keylog: cfg.tls.keylog_sink(),
    };
    match load::RustlsClient::new(&cfg.tls.settings, trust, Some(lib), provider) {
        Ok(r) => Ok(Engine {
            rustls: Some(r),
            fallback: None,
        }),
        Err(e) => {
            let why = crate::common::wording::rustls_client(&e);
            match if_refused {
                IfRustlsRefused::FallBack => Ok(Engine {
                    rustls: None,
                    fallback: Some(format!(
                        "the client is {} rather than the default rustls: {why}",
                        lib.name()
                    )),
                }),
                IfRustlsRefused::Fail => Err(RustlsRefused { why, named: false }.into()),
                IfRustlsRefused::FailNamed => Err(RustlsRefused { why, named: true }.into()),
            }
        }
    }
}

/// The load engine's settings: `addr` is the address that answered.
fn load_config(cfg: &BenchConfig, addr: SocketAddr) -> LoadConfig {
    let host = cfg.sni.clone().unwrap_or_else(|| "localhost".to_string());
    let path = match (cfg.mode, cfg.request.as_deref()) {
        (_, Some(p)) => Some(p),
        (Mode::KeepAlive, None) => Some("/"),
        _ => None,
    };
    let keep_alive = cfg.mode == Mode::KeepAlive;
    LoadConfig {
        target: addr,
        server_name: cfg.sni.clone(),
        // The name the certificate must carry: the SNI name, else the address that answered.
        verify_host: cfg
            .tls
            .verifies()
            .then(|| cfg.sni.clone().unwrap_or_else(|| addr.ip().to_string())),
        threads: cfg.threads,
        connections: cfg.connections,
        cpus: cfg.cpus.clone(),
        duration: cfg.duration,
        count: cfg.count,
        warmup: cfg.warmup,
        mode: cfg.mode,
        request: path.map(|p| load::request_bytes(p, &host, keep_alive)),
        rate: cfg.rate,
        schedule_offset: cfg.schedule_offset,
        timeout: cfg.timeout,
        record_connections: cfg.outputs.csv.is_some(),
        source_ips: crate::common::load_run::source_ips(addr, cfg.source_ips),
        server_pid: cfg.server_pid,
    }
}

/// On a terminal, a progress line every second after the first two (erased at the end).
fn progress_line() -> impl Fn(&Progress) + Sync {
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
            crate::render::words::count(p.ops, "op"),
            p.errors
        );
    }
}
