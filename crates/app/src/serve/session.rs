//! The built-in server from its typed settings: load the library (and an async engine), make
//! the certificate and the context, bind, serve until stopped, and return the final counters.
//! Knows no flag names; what it prints is the caller's, told when the server listens.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use anyhow::Context as _;
use ossl::{ContextBuilder, Credentials, Role};
use server::{Server, ServerConfig, StatsSnapshot};

use crate::common::signals::StopFlags;
use crate::serve::config::{Certificate, ServeConfig, SetupStep};

/// The server, once it listens: what its first lines say.
pub struct Listening<'a> {
    pub addr: SocketAddr,
    pub lib: &'static ossl::Library,
    /// The certificate's file, or the type generated.
    pub cert_name: &'a str,
    /// The async engine's id, when one is loaded.
    pub engine: Option<&'a str>,
    /// Where metrics are served.
    pub metrics: Option<SocketAddr>,
}

/// How the server ended.
pub struct Served {
    /// The final counters.
    pub snapshot: StatsSnapshot,
    /// The signal handlers that stopped it (the exit status says if Ctrl-C did).
    pub signals: StopFlags,
}

/// Runs the server until Ctrl-C, SIGTERM or the configured duration; `listening` is called
/// once, when it listens.
pub fn run(cfg: &ServeConfig, listening: impl FnOnce(&Listening<'_>)) -> anyhow::Result<Served> {
    let lib = crate::common::library::load(&cfg.library)?;
    // Before the key exists: a 1.1.1 RSA key takes its method from the default engine when
    // it is made.
    let engine = match &cfg.async_engine {
        Some(name) => Some(
            ossl::Engine::load_default(lib, name)
                .with_context(|| SetupStep::AsyncEngine(name.clone()))?,
        ),
        None => None,
    };
    let (creds, cert_name) = match &cfg.certificate {
        Certificate::Files { cert, key } => (
            Credentials::from_files(lib, cert, key)?,
            cert.display().to_string(),
        ),
        Certificate::Generate(cert_type) => (
            Credentials::generate(lib, *cert_type)?,
            cert_type.to_string(),
        ),
    };
    if let Some(out) = &cfg.cert_out {
        out.write(&creds.cert.to_pem()?)?;
    }
    let mut builder = ContextBuilder::new(lib, Role::Server)?;
    builder
        .apply(&cfg.settings)?
        .credentials(&creds)?
        .refuse_renegotiation();
    if cfg.async_mode {
        builder.async_mode().with_context(|| SetupStep::AsyncMode)?;
    }
    if let Some(path) = &cfg.keylog {
        builder.keylog(crate::common::client::keylog_file(path));
    }
    let ctx = builder.build();

    let config = ServerConfig {
        listen: cfg.listen,
        threads: cfg.threads,
        cpus: cfg.cpus.clone(),
        limits: cfg.limits.clone(),
    };
    let mut exporter =
        crate::common::metrics::Exporter::bind(cfg.metrics_listen, cfg.metrics_file.as_deref())?;
    let server = Server::bind(config, ctx).map_err(crate::common::wording::server_error)?;
    let stop = server.shutdown_flag();
    // Ctrl-C ends the server like SIGTERM, and is told apart by the exit status (130).
    let signals = StopFlags::with_stop(stop.clone())?;
    if let Some(duration) = cfg.duration {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(duration);
            stop.store(true, Ordering::Relaxed);
        });
    }
    listening(&Listening {
        addr: server.local_addr(),
        lib,
        cert_name: &cert_name,
        engine: engine.as_ref().map(|e| e.id()),
        metrics: exporter.addr(),
    });

    // The counters, read when scraped (and for the file, every 10 s and at the end).
    let counters = server.counters();
    let running = stop.clone();
    let exporting = exporter.is_active();
    // No thread at all when nothing is exported: the server under test runs as it always did.
    let metrics = exporting.then(|| {
        std::thread::spawn(move || -> anyhow::Result<()> {
            let mut render = |format| {
                let m = crate::render::metrics::ServeMetrics {
                    stats: counters.snapshot(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                };
                Ok(crate::render::metrics::serve_exposition(&m, format))
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
    Ok(Served { snapshot, signals })
}
