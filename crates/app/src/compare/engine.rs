//! The engine experiment: client and server over memory BIOs, no sockets and no scheduler
//! between the two sides, so what it times is the library's own work. On N threads (`compare
//! --threads`), each pinned to a CPU of its own and driving its own client/server pairs, with
//! one server `SSL_CTX` and one client `SSL_CTX` shared by all of them, as a real server shares
//! its context: the library's locks and shared counters are then contended as in production,
//! and what the threads lose to them shows as a rate below N times one thread's, and as time
//! blocked (the engine does no I/O, so a thread that blocks waits for a lock).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use load::memory::{ClientContext, EngineError};
use model::compare::Negotiated;
use ossl::{ContextBuilder, Credentials, Role, Session, Settings};

use super::worker::{
    burn, check_resumption, client_context, record, sampling, settings, us, WorkerResult,
    WorkerSpec,
};
use crate::common::error::{Context, Error, Result};

/// The experiment, set up once per worker.
pub(super) struct Engine {
    contexts: Contexts,
    /// The CPU of each thread.
    cpus: Vec<Option<usize>>,
    /// Each thread's session to offer next (resumption), kept from round to round.
    sessions: Vec<Option<Session>>,
}

/// What every thread shares.
struct Contexts {
    server: ossl::Context,
    settings: Settings,
    /// The bundle the client verifies against (in `_dir`), when it verifies.
    cafile: Option<PathBuf>,
    shared: ossl::Context,
    /// Kept while the contexts use them.
    _creds: Credentials,
    _dir: tempfile::TempDir,
}

/// What one thread measured over its measured handshakes.
#[derive(Default)]
struct ThreadRun {
    total: Vec<f64>,
    client: Vec<f64>,
    server: Vec<f64>,
    negotiated: Vec<Negotiated>,
    /// When its measured handshakes started and ended.
    window: Option<(Instant, Instant)>,
    spent: host::Spent,
}

impl Engine {
    pub(super) fn new(lib: &'static ossl::Library, spec: &WorkerSpec) -> Result<Engine> {
        let creds = Credentials::generate(lib, spec.cert_type)?;
        let mut sb = ContextBuilder::new(lib, Role::Server)?;
        sb.credentials(&creds)?;
        sb.session_cache(true)?.tickets(true);
        let server = sb.build();
        // The client verifies against the same bundle as in pretransfer, plus this certificate.
        let dir = tempfile::tempdir()?;
        let cafile = match (&spec.cafile, &spec.system_bundle) {
            (Some(_), Some(bundle)) => {
                let ca = dir.path().join("ca.pem");
                let mut pem = std::fs::read(bundle)
                    .with_context(|| format!("reading {}", bundle.display()))?;
                pem.extend_from_slice(creds.cert.to_pem()?.as_bytes());
                std::fs::write(&ca, pem)?;
                Some(ca)
            }
            (Some(_), None) => {
                let ca = dir.path().join("ca.pem");
                std::fs::write(&ca, creds.cert.to_pem()?)?;
                Some(ca)
            }
            (None, _) => None,
        };
        let settings = settings(spec);
        let shared = client_context(lib, &settings, cafile.as_deref())?;
        let cpus: Vec<Option<usize>> = match spec.engine_cpus.as_slice() {
            [] => vec![spec.cpu],
            cpus => cpus.iter().copied().map(Some).collect(),
        };
        Ok(Engine {
            contexts: Contexts {
                server,
                settings,
                cafile,
                shared,
                _creds: creds,
                _dir: dir,
            },
            sessions: cpus.iter().map(|_| None).collect(),
            cpus,
        })
    }

    /// One round: every thread's warm-up, then, all of them warm, their measured handshakes
    /// started together (the sampling window open around them alone).
    pub(super) fn round(
        &mut self,
        lib: &'static ossl::Library,
        spec: &WorkerSpec,
        out: &mut WorkerResult,
    ) -> Result<()> {
        let threads = self.cpus.len();
        // Warm (or failed): every thread; then the start, given once sampling is open.
        let warm = Barrier::new(threads + 1);
        let start = Barrier::new(threads + 1);
        let abort = AtomicBool::new(false);
        let contexts = &self.contexts;
        let runs: Vec<Result<ThreadRun>> = std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .sessions
                .iter_mut()
                .zip(&self.cpus)
                .map(|(session, cpu)| {
                    let (warm, start, abort) = (&warm, &start, &abort);
                    scope.spawn(move || {
                        contexts.thread(lib, spec, *cpu, session, [warm, start], abort)
                    })
                })
                .collect();
            warm.wait();
            let opened = sampling(spec, true);
            if opened.is_err() {
                abort.store(true, Ordering::Relaxed);
            }
            start.wait();
            let runs: Vec<Result<ThreadRun>> = handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::msg("an engine thread panicked")))
                })
                .collect();
            match opened {
                Ok(()) => runs,
                Err(e) => vec![Err(e)],
            }
        });
        sampling(spec, false)?;
        let runs: Vec<ThreadRun> = runs.into_iter().collect::<Result<_>>()?;
        let negotiated = add_round(runs, out);
        check_resumption(spec, &negotiated)?;
        for mut n in negotiated {
            n.handshake = format!("{} (engine)", n.handshake);
            out.negotiated.push(n);
        }
        Ok(())
    }
}

impl Contexts {
    /// One thread's round: pinned to `cpu`, its warm-up, the two barriers (which it always
    /// reaches, so a failure never leaves the others waiting), then its measured handshakes.
    fn thread(
        &self,
        lib: &'static ossl::Library,
        spec: &WorkerSpec,
        cpu: Option<usize>,
        session: &mut Option<Session>,
        [warm, start]: [&Barrier; 2],
        abort: &AtomicBool,
    ) -> Result<ThreadRun> {
        let pinned = cpu.map_or(Ok(()), host::pin_current_thread);
        let mut run = ThreadRun::default();
        let warmed = pinned
            .map_err(Error::from)
            .and_then(|()| self.handshakes(lib, spec, spec.warmup, session, None, abort));
        if warmed.is_err() {
            abort.store(true, Ordering::Relaxed);
        }
        warm.wait();
        start.wait();
        warmed?;
        let before = host::ThreadTimes::now()?;
        let began = Instant::now();
        self.handshakes(lib, spec, spec.count, session, Some(&mut run), abort)?;
        let ended = Instant::now();
        let after = host::ThreadTimes::now()?;
        run.spent = after.since(&before, (ended - began).as_nanos() as u64);
        run.window = Some((began, ended));
        Ok(run)
    }

    /// `n` handshakes, recorded into `run` when given; stops early (with an error) when another
    /// thread failed.
    fn handshakes(
        &self,
        lib: &'static ossl::Library,
        spec: &WorkerSpec,
        n: usize,
        session: &mut Option<Session>,
        mut run: Option<&mut ThreadRun>,
        abort: &AtomicBool,
    ) -> Result<()> {
        let verify_host = self.cafile.as_ref().map(|_| "localhost");
        let (settings, cafile) = (&self.settings, self.cafile.as_deref());
        let make = || client_context(lib, settings, cafile).map_err(|e| e.to_string());
        let client = if spec.ctx_per_connection {
            ClientContext::PerHandshake(&make)
        } else {
            ClientContext::Shared(&self.shared)
        };
        for _ in 0..n {
            if abort.load(Ordering::Relaxed) {
                return Err(Error::msg("another engine thread failed"));
            }
            let offer = if spec.resume { session.as_ref() } else { None };
            let h =
                load::memory::handshake(&client, &self.server, offer, verify_host).map_err(|e| {
                    match e {
                        EngineError::Setup(e) => Error::from(e),
                        other => Error::msg(other),
                    }
                });
            let h = match h {
                Ok(h) => h,
                Err(e) => {
                    abort.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            };
            if spec.resume {
                *session = h.session;
            }
            let Some(run) = run.as_deref_mut() else {
                continue;
            };
            let extra = burn(spec.calibrate_slower_pct, h.timing.total);
            run.total.push(us(h.timing.total + extra));
            run.client.push(us(h.timing.client + extra));
            run.server.push(us(h.timing.server));
            record(&mut run.negotiated, &h.negotiated);
        }
        Ok(())
    }
}

/// The round's samples: every thread's handshake times, and the round's rate, CPU and blocked
/// time per handshake over the window from the first thread's start to the last one's end;
/// returns what the handshakes negotiated.
fn add_round(runs: Vec<ThreadRun>, out: &mut WorkerResult) -> Vec<Negotiated> {
    let handshakes: usize = runs.iter().map(|r| r.total.len()).sum();
    let first = runs.iter().filter_map(|r| r.window).map(|w| w.0).min();
    let last = runs.iter().filter_map(|r| r.window).map(|w| w.1).max();
    let mut spent = host::Spent::default();
    for r in &runs {
        spent += r.spent;
    }
    let mut samples = |name: &str, values: Vec<f64>| {
        out.samples.entry(name.into()).or_default().extend(values);
    };
    if let (Some(first), Some(last), true) = (first, last, handshakes > 0) {
        let window = last.duration_since(first).max(Duration::from_nanos(1));
        let per = |ns: u64| ns as f64 / 1e3 / handshakes as f64;
        samples(
            "engine_rate",
            vec![handshakes as f64 / window.as_secs_f64()],
        );
        samples("engine_cpu_per_handshake", vec![per(spent.on_cpu_ns)]);
        samples("engine_blocked_per_handshake", vec![per(spent.blocked_ns)]);
        samples(
            "engine_blocks_per_handshake",
            vec![spent.voluntary_switches as f64 / handshakes as f64],
        );
        samples(
            "engine_cpu_wait_per_handshake",
            vec![per(spent.runqueue_ns)],
        );
    }
    let mut negotiated = Vec::new();
    for r in runs {
        samples("engine_handshake", r.total);
        samples("engine_client", r.client);
        samples("engine_server", r.server);
        for n in r.negotiated {
            Negotiated::tally(&mut negotiated, n);
        }
    }
    negotiated
}
