//! The lab: the seed experiments in one go. The target (the built-in server or Debian's nginx)
//! runs pinned to one CPU; each experiment loads it from another CPU, untraced and then traced
//! by each backend (kernel uprobes, tlsscope's in-process library), so one report shows its
//! rates and CPU, what observing it costs, and where the server's time went.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use load::{LoadConfig, Mode, ResumeBy, RunResult};
use model::trace::FunctionStats;
use ossl::{CertType, TlsVersion};
use probes::user::UserTracer;
use probes::{Buckets, Calibration, Groups, Plan, Selection, Target, Threads, TraceConfig, Tracer};

use crate::common::client::{client_context, connect_once, ClientOptions, Probe};
use crate::common::error::{Context, Error, Result};
use crate::common::probing::BackendChoice;
use crate::common::servers::{self, ServerProcess};

/// The server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabTarget {
    Builtin,
    Nginx,
}

impl LabTarget {
    pub fn describe(self) -> &'static str {
        match self {
            LabTarget::Builtin => "the built-in server",
            LabTarget::Nginx => "nginx (Debian's, one process)",
        }
    }
}

/// How the lab runs: checked (the CPUs exist and differ, a backend is chosen) when built.
pub struct LabConfig {
    pub target: LabTarget,
    /// The tlsscope executable, to start the built-in server.
    pub exe: PathBuf,
    /// The built-in server's library, as a child's `--openssl` (None: the system's).
    pub openssl: Option<String>,
    /// Measured load per experiment, untraced, and then traced.
    pub duration: Duration,
    pub trace_duration: Duration,
    /// Unmeasured load before each untraced run.
    pub warmup: Duration,
    pub connections: usize,
    pub server_cpu: usize,
    pub client_cpu: usize,
    /// Who traces the server, a traced run each, in this order.
    pub backends: Vec<LabBackend>,
}

/// One experiment: its name, the server's certificate, and the load.
pub struct Experiment {
    pub name: &'static str,
    pub cert: CertType,
    pub mode: Mode,
    /// The one TLS version offered; None: the library's range.
    pub tls: Option<TlsVersion>,
    /// The server runs async TLS with this engine (`serve --async --async-engine`).
    pub async_engine: Option<&'static str>,
}

const RESUME_BY_TICKET: Mode = Mode::Resume {
    by: ResumeBy::Ticket,
    ratio: 1.0,
};

/// The experiments, in the order they run (grouped by certificate, so each server starts once).
pub const EXPERIMENTS: [Experiment; 6] = [
    Experiment {
        name: "full handshakes, RSA-2048, TLS 1.3",
        cert: CertType::Rsa2048,
        mode: Mode::Full,
        tls: Some(TlsVersion::Tls1_3),
        async_engine: None,
    },
    // The in-line experiment above, with the server's RSA handed to the dasync test engine as
    // async jobs (issue 18): ssllatency's offload pattern, without offload hardware.
    Experiment {
        name: "full handshakes, RSA-2048, TLS 1.3, async (dasync)",
        cert: CertType::Rsa2048,
        mode: Mode::Full,
        tls: Some(TlsVersion::Tls1_3),
        async_engine: Some(ossl::TEST_ENGINE),
    },
    Experiment {
        name: "resumed handshakes, TLS 1.2 (ticket)",
        cert: CertType::Rsa2048,
        mode: RESUME_BY_TICKET,
        tls: Some(TlsVersion::Tls1_2),
        async_engine: None,
    },
    Experiment {
        name: "resumed handshakes, TLS 1.3 (ticket)",
        cert: CertType::Rsa2048,
        mode: RESUME_BY_TICKET,
        tls: Some(TlsVersion::Tls1_3),
        async_engine: None,
    },
    Experiment {
        name: "keep-alive requests, GET /",
        cert: CertType::Rsa2048,
        mode: Mode::KeepAlive,
        tls: None,
        async_engine: None,
    },
    Experiment {
        name: "full handshakes, ECDSA P-256, TLS 1.3",
        cert: CertType::EcdsaP256,
        mode: Mode::Full,
        tls: Some(TlsVersion::Tls1_3),
        async_engine: None,
    },
];

/// Who traces the server in a traced run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LabBackend {
    /// eBPF uprobes on the running server.
    Kernel,
    /// tlsscope's library inside the server: a second server started under it, warmed up with
    /// the wrappers idle, then traced.
    User,
}

impl LabBackend {
    pub fn describe(self) -> &'static str {
        match self {
            LabBackend::Kernel => "kernel probes",
            LabBackend::User => "in-process probes",
        }
    }

    /// The traced runs `--backend` asks for: auto runs both.
    pub fn chosen(choice: BackendChoice) -> Vec<LabBackend> {
        match choice {
            BackendChoice::Kernel => vec![LabBackend::Kernel],
            BackendChoice::User => vec![LabBackend::User],
            BackendChoice::Auto => vec![LabBackend::Kernel, LabBackend::User],
        }
    }
}

/// One traced run of an experiment.
pub struct Traced {
    pub backend: LabBackend,
    pub result: RunResult,
    /// The server's traced calls, by function and outcome.
    pub calls: Vec<FunctionStats>,
}

/// What one experiment measured.
pub struct Measured {
    pub untraced: RunResult,
    /// Per backend of the lab's, in its order.
    pub traced: Vec<Traced>,
    /// Something about the probes worth one line, said the first time it applies.
    pub note: Option<String>,
}

/// What the whole lab learned beside the experiments.
#[derive(Default)]
pub struct LabSummary {
    /// The cost of one probed call, measured once per backend.
    pub calibrations: Vec<(LabBackend, Calibration)>,
    /// Catalog functions the server's library could not be traced in by the kernel backend.
    pub not_attached: Vec<&'static str>,
    pub interrupted: bool,
    pub failed: Vec<&'static str>,
}

impl LabSummary {
    fn calibrated(&self, backend: LabBackend) -> bool {
        self.calibrations.iter().any(|(b, _)| *b == backend)
    }
}

/// Checks that tracing is possible, before anything starts.
pub fn check(config: &LabConfig) -> Result<()> {
    if config.backends.contains(&LabBackend::Kernel) {
        probes::latency::check_can_trace().map_err(|e| {
            Error::msg(e).within("tlsscope lab traces the server with kernel probes")
        })?;
    }
    Ok(())
}

/// Runs every experiment, after the caller has run [`check`]; `each` gets each one's result as
/// it ends (an experiment that fails does not stop the others). `interrupted` ends the lab
/// early.
pub fn run(
    config: &LabConfig,
    lib: &'static ossl::Library,
    interrupted: &AtomicBool,
    mut each: impl FnMut(&Experiment, Result<Measured>),
) -> Result<LabSummary> {
    let mut summary = LabSummary::default();
    let mut notes: Vec<String> = Vec::new();
    let skipped = skipped(config, lib);
    // One server per kind the experiments ask for (certificate, async engine), in their order.
    let mut groups: Vec<(CertType, Option<&str>)> = Vec::new();
    for e in &EXPERIMENTS {
        if !groups.contains(&(e.cert, e.async_engine)) {
            groups.push((e.cert, e.async_engine));
        }
    }
    for (cert, engine) in groups {
        let chosen: Vec<&Experiment> = EXPERIMENTS
            .iter()
            .filter(|e| e.cert == cert && e.async_engine == engine)
            .filter(|e| !skipped.iter().any(|(name, _)| *name == e.name))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let server = start_server(config, cert, engine, None)?;
        let mut crypto_left_out = false;
        let plan = if config.backends.contains(&LabBackend::Kernel) {
            // Async retries return without a syscall: only SSL_get_error tells them (as the
            // in-process backend always asks it). And, as trace does, no kernel probes on the
            // crypto functions of a server with an engine loaded (they would crash it).
            let asked = Selection::latency(Groups::all(), engine.is_some());
            let mut left_out = Vec::new();
            let everything = crate::common::probing::without_crypto_in_async_jobs(
                &asked,
                &[server.pid()],
                &mut left_out,
            )?;
            crypto_left_out = !left_out.is_empty();
            // As trace does by default: probes on instructions the kernel emulates where the
            // function allows.
            Some(
                Plan::new(&[Target::Pid(server.pid())], everything)?
                    .with_placement(probes::PlacementMode::Emulated),
            )
        } else {
            None
        };
        for e in chosen {
            if interrupted.load(Ordering::Relaxed) {
                break;
            }
            let run = Run {
                config,
                lib,
                e,
                interrupted,
                crypto_left_out,
            };
            let measured = run
                .experiment(&server, plan.as_ref(), &mut summary)
                .map(|mut m| {
                    m.note = m.note.filter(|n| !notes.contains(n));
                    notes.extend(m.note.clone());
                    m
                });
            if measured.is_err() {
                summary.failed.push(e.name);
            }
            each(e, measured);
        }
    }
    summary.interrupted = interrupted.load(Ordering::Relaxed);
    Ok(summary)
}

/// Why the lab cannot run an experiment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The async experiment runs on the built-in server only.
    BuiltinOnly,
    /// The library has no `engine` in its engines directory `dir`.
    NoEngine { engine: &'static str, dir: String },
}

/// The experiments this lab cannot run, with why: the async one needs the built-in server
/// and a library that has the dasync engine (one built by `tlsscope openssl build`).
pub fn skipped(config: &LabConfig, lib: &'static ossl::Library) -> Vec<(&'static str, Skip)> {
    let mut out = Vec::new();
    for e in EXPERIMENTS.iter() {
        let Some(engine) = e.async_engine else {
            continue;
        };
        let why = if config.target != LabTarget::Builtin {
            Some(Skip::BuiltinOnly)
        } else if ossl::test_engine_path(lib).is_none() {
            Some(Skip::NoEngine {
                engine,
                dir: ossl::engines_dir(lib),
            })
        } else {
            None
        };
        if let Some(why) = why {
            out.push((e.name, why));
        }
    }
    out
}

fn start_server(
    config: &LabConfig,
    cert: CertType,
    engine: Option<&str>,
    prepare: Option<&dyn Fn(&mut Command)>,
) -> Result<ServerProcess> {
    let asynchronous: Vec<&str> = match engine {
        Some(id) => vec!["--async", "--async-engine", id],
        None => Vec::new(),
    };
    match config.target {
        LabTarget::Builtin => servers::start_builtin(&servers::Builtin {
            exe: &config.exe,
            openssl: config.openssl.as_deref(),
            cert_type: cert,
            cpus: &[config.server_cpu],
            extra: &asynchronous,
            prepare,
        }),
        LabTarget::Nginx => servers::start_nginx(&servers::Nginx {
            cert,
            cpu: config.server_cpu,
            library_dir: None,
            groups: None,
            resumption: true,
            prepare,
        })
        .map(|n| n.process),
    }
}

/// The lab's clients: OpenSSL checks that the server answers; the load is made by bench's
/// default engine, rustls, the cheapest per handshake (bench/client-cost), so the server and
/// not the client sets the rates.
struct Clients {
    check: ossl::Context,
    load: load::RustlsClient,
}

/// One experiment being run.
struct Run<'a> {
    config: &'a LabConfig,
    lib: &'static ossl::Library,
    e: &'a Experiment,
    interrupted: &'a AtomicBool,
    /// The kernel probes leave the server's crypto functions out (an engine is loaded).
    crypto_left_out: bool,
}

impl Run<'_> {
    /// The experiment untraced, then traced by each backend (probes attached only for their
    /// run, so the untraced figures do not pay for them).
    fn experiment(
        &self,
        server: &ServerProcess,
        plan: Option<&Plan>,
        summary: &mut LabSummary,
    ) -> Result<Measured> {
        let settings = ossl::Settings {
            min_version: self.e.tls,
            max_version: self.e.tls,
            tickets: true,
            ..ossl::Settings::default()
        };
        let ctx = &Clients {
            check: client_context(
                self.lib,
                ClientOptions {
                    settings: settings.clone(),
                    tickets: true,
                    ..ClientOptions::default()
                },
            )?,
            load: load::RustlsClient::new(&settings, Default::default(), Some(self.lib), None)?,
        };
        self.answers(ctx, server)?;
        let untraced = self.load(ctx, server, self.config.duration, self.config.warmup)?;
        crate::common::load_run::check(&untraced).map_err(Error::msg)?;
        let mut note = None;
        let mut traced = Vec::new();
        for &backend in &self.config.backends {
            if self.interrupted.load(Ordering::Relaxed) {
                break;
            }
            let run = match (backend, plan) {
                (LabBackend::Kernel, Some(plan)) => {
                    self.traced_by_kernel(ctx, server, plan, summary, &mut note)?
                }
                (LabBackend::Kernel, None) => crate::fail!("no kernel probe plan for the server"),
                (LabBackend::User, _) => self.traced_in_process(ctx, summary)?,
            };
            crate::common::load_run::check(&run.result).map_err(Error::msg)?;
            traced.push(run);
        }
        Ok(Measured {
            untraced,
            traced,
            note,
        })
    }

    /// One connection first: a server that does not answer is one line, not a run of errors.
    fn answers(&self, ctx: &Clients, server: &ServerProcess) -> Result<()> {
        let probe = Probe {
            target: server.addr,
            sni: None,
            verify: false,
            timeout: Duration::from_secs(10),
            request: None,
            await_ticket: false,
        };
        connect_once(&ctx.check, &probe, None).context("checking the server before the run")?;
        Ok(())
    }

    fn load(
        &self,
        ctx: &Clients,
        server: &ServerProcess,
        duration: Duration,
        warmup: Duration,
    ) -> Result<RunResult> {
        let cfg = load_config(self.config, self.e, server, duration, warmup);
        crate::common::load_run::run(
            load::Client::Rustls(&ctx.load),
            cfg,
            self.interrupted,
            &|_| {},
        )
        .map(|(result, _)| result)
    }

    /// The server traced by eBPF uprobes, attached for this run only.
    fn traced_by_kernel(
        &self,
        ctx: &Clients,
        server: &ServerProcess,
        plan: &Plan,
        summary: &mut LabSummary,
        note: &mut Option<String>,
    ) -> Result<Traced> {
        let trace = TraceConfig {
            threads: Threads {
                pids: vec![server.pid()],
                comm: None,
            },
            buckets: Buckets::Log2,
            per_pid: false,
            attach_all: false,
        };
        let mut tracer = Tracer::start(&trace, plan)?;
        if !summary.calibrated(LabBackend::Kernel) {
            let c = tracer.calibrate(20_000)?;
            summary.calibrations.push((LabBackend::Kernel, c));
        }
        for m in tracer.not_attached() {
            if !summary.not_attached.contains(&m.function) {
                summary.not_attached.push(m.function);
            }
        }
        *note = crate::common::latency::syscall_hooks_note(&tracer);
        if self.crypto_left_out {
            let why = "kernel probes on SSL entry points only here: crypto functions run inside \
                       async jobs, on the jobs' own stacks, where a return probe loses its place \
                       when a job pauses (the server would crash); the in-process probes see them";
            *note = Some(match note.take() {
                Some(n) => format!("{n}; {why}"),
                None => why.to_string(),
            });
        }
        let result = self.load(ctx, server, self.config.trace_duration, Duration::ZERO)?;
        let delta = tracer.snapshot()?;
        Ok(Traced {
            backend: LabBackend::Kernel,
            result,
            calls: crate::common::latency::function_stats(&delta, Buckets::Log2),
        })
    }

    /// A server of the same kind started under the in-process library: warmed up with the
    /// wrappers calling straight through, then traced for the run.
    fn traced_in_process(&self, ctx: &Clients, summary: &mut LabSummary) -> Result<Traced> {
        let everything = Selection::latency(Groups::all(), false);
        let mut tracer = UserTracer::new(
            &everything,
            Buckets::Log2,
            false,
            Threads::default(),
            probes::user::MIN_RING_BYTES,
        )?;
        if !summary.calibrated(LabBackend::User) {
            let c = tracer.calibrate(20_000)?;
            summary.calibrations.push((LabBackend::User, c));
        }
        // Idle until the measured run: the server's start (its certificate) and the warm-up
        // are not the experiment.
        tracer.deactivate();
        let prepare = |cmd: &mut Command| tracer.prepare(cmd);
        let server = start_server(
            self.config,
            self.e.cert,
            self.e.async_engine,
            Some(&prepare),
        )?;
        self.answers(ctx, &server)?;
        if !self.config.warmup.is_zero() {
            self.load(ctx, &server, self.config.warmup, Duration::ZERO)?;
        }
        tracer.activate();
        let result = self.load(ctx, &server, self.config.trace_duration, Duration::ZERO)?;
        let snapshot = tracer.snapshot()?;
        tracer.deactivate();
        Ok(Traced {
            backend: LabBackend::User,
            result,
            calls: crate::common::latency::function_stats(&snapshot, Buckets::Log2),
        })
    }
}

fn load_config(
    config: &LabConfig,
    e: &Experiment,
    server: &ServerProcess,
    duration: Duration,
    warmup: Duration,
) -> LoadConfig {
    let keep_alive = e.mode == Mode::KeepAlive;
    LoadConfig {
        target: server.addr,
        server_name: None,
        verify_host: None,
        threads: 1,
        connections: config.connections,
        cpus: vec![config.client_cpu],
        duration: Some(duration),
        count: None,
        warmup,
        mode: e.mode,
        request: keep_alive.then(|| load::request_bytes("/", "localhost", true)),
        rate: None,
        schedule_offset: std::time::Duration::ZERO,
        timeout: Duration::from_secs(10),
        record_connections: false,
        source_ips: crate::common::load_run::source_ips(server.addr, 16),
        server_pid: Some(server.pid()),
    }
}
