//! The lab: the seed experiments in one go. The target (the built-in server or Debian's nginx)
//! runs pinned to one CPU; each experiment loads it from another CPU, untraced and then traced,
//! so one report shows its rates and CPU beside where the server's time went.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use load::{LoadConfig, Mode, ResumeBy, RunResult};
use ossl::{CertType, TlsVersion};
use probes::{Buckets, Calibration, Groups, Plan, Selection, Target, Threads, TraceConfig, Tracer};
use report::trace::FunctionStats;

use crate::client::{client_context, connect_once, ClientOptions, Probe};
use crate::error::{Context, Error, Result};
use crate::servers::{self, ServerProcess};

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

/// How the lab runs.
pub struct LabConfig<'a> {
    pub target: LabTarget,
    /// The tlsscope executable, to start the built-in server.
    pub exe: &'a Path,
    /// The built-in server's `--openssl`, as the user gave it (None: the system's).
    pub openssl: Option<&'a str>,
    /// Measured load per experiment, untraced, and then traced.
    pub duration: Duration,
    pub trace_duration: Duration,
    /// Unmeasured load before each untraced run.
    pub warmup: Duration,
    pub connections: usize,
    pub server_cpu: usize,
    pub client_cpu: usize,
}

/// One experiment: its name, the server's certificate, and the load.
pub struct Experiment {
    pub name: &'static str,
    pub cert: CertType,
    pub mode: Mode,
    /// The one TLS version offered; None: the library's range.
    pub tls: Option<TlsVersion>,
}

const RESUME_BY_TICKET: Mode = Mode::Resume {
    by: ResumeBy::Ticket,
    ratio: 1.0,
};

/// The experiments, in the order they run (grouped by certificate, so each server starts once).
pub const EXPERIMENTS: [Experiment; 5] = [
    Experiment {
        name: "full handshakes, RSA-2048, TLS 1.3",
        cert: CertType::Rsa2048,
        mode: Mode::Full,
        tls: Some(TlsVersion::Tls1_3),
    },
    Experiment {
        name: "resumed handshakes, TLS 1.2 (ticket)",
        cert: CertType::Rsa2048,
        mode: RESUME_BY_TICKET,
        tls: Some(TlsVersion::Tls1_2),
    },
    Experiment {
        name: "resumed handshakes, TLS 1.3 (ticket)",
        cert: CertType::Rsa2048,
        mode: RESUME_BY_TICKET,
        tls: Some(TlsVersion::Tls1_3),
    },
    Experiment {
        name: "keep-alive requests, GET /",
        cert: CertType::Rsa2048,
        mode: Mode::KeepAlive,
        tls: None,
    },
    Experiment {
        name: "full handshakes, ECDSA P-256, TLS 1.3",
        cert: CertType::EcdsaP256,
        mode: Mode::Full,
        tls: Some(TlsVersion::Tls1_3),
    },
];

/// What one experiment measured.
pub struct Measured {
    pub untraced: RunResult,
    pub traced: RunResult,
    /// The server's traced calls, by function and outcome.
    pub calls: Vec<FunctionStats>,
    /// Something about the probes worth one line, said the first time it applies.
    pub note: Option<String>,
}

/// What the whole lab learned beside the experiments.
#[derive(Default)]
pub struct LabSummary {
    /// The cost of one probed call, measured once.
    pub calibration: Option<Calibration>,
    /// Catalog functions the server's library could not be traced in.
    pub not_attached: Vec<&'static str>,
    pub interrupted: bool,
    pub failed: Vec<&'static str>,
}

/// Checks the CPUs and that tracing is possible, before anything starts.
pub fn check(config: &LabConfig<'_>) -> Result<()> {
    probes::latency::check_can_trace()
        .map_err(|e| Error::msg(e).within("tlsscope lab traces the server"))?;
    host::check_cpus("--server-cpu", &[config.server_cpu])?;
    host::check_cpus("--client-cpu", &[config.client_cpu])?;
    if config.server_cpu == config.client_cpu {
        crate::fail!(
            "--server-cpu and --client-cpu must differ, or the client's CPU use is the server's"
        );
    }
    Ok(())
}

/// Runs every experiment, after the caller has run [`check`]; `each` gets each one's result as
/// it ends (an experiment that fails does not stop the others). `interrupted` ends the lab
/// early.
pub fn run(
    config: &LabConfig<'_>,
    lib: &'static ossl::Library,
    interrupted: &AtomicBool,
    mut each: impl FnMut(&Experiment, Result<Measured>),
) -> Result<LabSummary> {
    let mut summary = LabSummary::default();
    let mut notes: Vec<String> = Vec::new();
    for cert in [CertType::Rsa2048, CertType::EcdsaP256] {
        let server = start_server(config, cert)?;
        let everything = Selection::latency(Groups::all(), false);
        let plan = Plan::new(&[Target::Pid(server.pid())], everything)?;
        for e in EXPERIMENTS.iter().filter(|e| e.cert == cert) {
            if interrupted.load(Ordering::Relaxed) {
                break;
            }
            let measured = experiment(config, lib, e, &server, &plan, interrupted, &mut summary)
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

fn start_server(config: &LabConfig<'_>, cert: CertType) -> Result<ServerProcess> {
    match config.target {
        LabTarget::Builtin => servers::start_builtin(&servers::Builtin {
            exe: config.exe,
            openssl: config.openssl,
            cert_type: cert,
            cpu: config.server_cpu,
            extra: &[],
        }),
        LabTarget::Nginx => servers::start_nginx(cert, config.server_cpu),
    }
}

/// One experiment untraced, then traced (the probes attached only for that half, so the
/// untraced figures do not pay for them).
fn experiment(
    config: &LabConfig<'_>,
    lib: &'static ossl::Library,
    e: &Experiment,
    server: &ServerProcess,
    plan: &Plan,
    interrupted: &AtomicBool,
    summary: &mut LabSummary,
) -> Result<Measured> {
    let ctx = client_context(
        lib,
        ClientOptions {
            settings: ossl::Settings {
                min_version: e.tls,
                max_version: e.tls,
                ..ossl::Settings::default()
            },
            tickets: true,
            ..ClientOptions::default()
        },
    )?;
    // One connection first: a server that does not answer is one line, not a run of errors.
    let probe = Probe {
        target: server.addr,
        sni: None,
        verify: false,
        timeout: Duration::from_secs(10),
        request: None,
        await_ticket: false,
    };
    connect_once(&ctx, &probe, None).context("checking the server before the run")?;
    let load = |duration, warmup| {
        let cfg = load_config(config, e, server, duration, warmup);
        crate::bench::run(&ctx, cfg, interrupted, &|_| {}).map(|(result, _)| result)
    };
    let untraced = load(config.duration, config.warmup)?;
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
    if summary.calibration.is_none() {
        summary.calibration = Some(tracer.calibrate(20_000)?);
    }
    for m in tracer.not_attached() {
        if !summary.not_attached.contains(&m.function) {
            summary.not_attached.push(m.function);
        }
    }
    let note = crate::trace::syscall_hooks_note(&tracer);
    let traced = load(config.trace_duration, Duration::ZERO)?;
    let delta = tracer.snapshot()?;
    drop(tracer);
    crate::bench::check(&untraced)
        .and(crate::bench::check(&traced))
        .map_err(Error::msg)?;
    Ok(Measured {
        untraced,
        traced,
        calls: crate::trace::function_stats(&delta, Buckets::Log2),
        note,
    })
}

fn load_config(
    config: &LabConfig<'_>,
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
        timeout: Duration::from_secs(10),
        record_connections: false,
        source_ips: crate::bench::source_ips(server.addr, 16),
        server_pid: Some(server.pid()),
    }
}
