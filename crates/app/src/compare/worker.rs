//! One variant's measurements, in a child process (`tlsscope --openssl X compare-worker SPEC`):
//! each OpenSSL version is loaded in a process of its own, so every variant is measured the
//! same way and one that crashes takes nothing else down.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use model::compare::Negotiated;
use ossl::{Session, Settings};
use serde::{Deserialize, Serialize};

use super::engine::Engine;
use crate::common::client::{connect_once, Probe};
use crate::common::error::{Context, Error, Result};
use crate::fail;

/// What a worker measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExperimentKind {
    /// Sequential new connections to a built-in server: context, connect, handshake, GET /.
    Pretransfer,
    /// Client and server in one thread over memory BIOs: the handshake alone.
    Engine,
    /// A closed loop of concurrent new connections to a server, made by bench's load engine:
    /// rate, client and server CPU per handshake, the server's busy share.
    Load,
}

impl ExperimentKind {
    pub fn name(self) -> &'static str {
        match self {
            ExperimentKind::Pretransfer => "pretransfer",
            ExperimentKind::Engine => "engine",
            ExperimentKind::Load => "load",
        }
    }
}

impl std::str::FromStr for ExperimentKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pretransfer" => Ok(ExperimentKind::Pretransfer),
            "engine" => Ok(ExperimentKind::Engine),
            "load" => Ok(ExperimentKind::Load),
            other => Err(format!("{other}: use pretransfer, engine or load")),
        }
    }
}

/// The one TLS version a variant offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tls {
    #[serde(rename = "1.2")]
    V1_2,
    #[serde(rename = "1.3")]
    V1_3,
}

impl Tls {
    pub fn version(self) -> ossl::TlsVersion {
        match self {
            Tls::V1_2 => ossl::TlsVersion::Tls1_2,
            Tls::V1_3 => ossl::TlsVersion::Tls1_3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tls::V1_2 => "1.2",
            Tls::V1_3 => "1.3",
        }
    }
}

/// A certificate type as its name, for the serialized spec.
pub(crate) mod cert_type_name {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &ossl::CertType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ossl::CertType, D::Error> {
        let name = String::deserialize(d)?;
        name.parse()
            .map_err(|e: ossl::UnknownCertType| serde::de::Error::custom(e))
    }
}

pub(crate) use cert_type_name as cert_type_serde;

/// `compare-worker SPEC`: one variant's worker. Each line "run" on stdin asks for a round,
/// answered by one JSON line on stdout; the end of stdin ends it. A worker that cannot start
/// answers its first request (or, with no request, at once) with a line holding only `error`,
/// and exits 1: the matrix reads those lines, never the text on stderr.
pub fn run(
    library: anyhow::Result<ossl::LibrarySource>,
    spec_json: &str,
) -> anyhow::Result<ExitCode> {
    use std::io::BufRead as _;
    let set_up =
        worker_setup(library, spec_json).and_then(|(lib, spec)| Ok(Worker::new(lib, &spec)?));
    let mut w = match set_up {
        Ok(w) => w,
        Err(e) => {
            let failed = WorkerResult::failed(crate::common::usage::one_line(&e));
            crate::common::output::to_stdout(serde_json::to_string(&failed)? + "\n")?;
            return Ok(ExitCode::FAILURE);
        }
    };
    for line in std::io::stdin().lock().lines() {
        if line?.trim() != "run" {
            anyhow::bail!("compare-worker: expected \"run\" on stdin");
        }
        let result = w.batch();
        crate::common::output::to_stdout(serde_json::to_string(&result)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The library loaded, the spec read and the thread pinned.
fn worker_setup(
    library: anyhow::Result<ossl::LibrarySource>,
    spec_json: &str,
) -> anyhow::Result<(&'static ossl::Library, WorkerSpec)> {
    let lib = crate::common::library::load(&library?)?;
    let spec: WorkerSpec =
        anyhow::Context::context(serde_json::from_str(spec_json), "reading the worker spec")?;
    if let Some(cpu) = spec.cpu {
        anyhow::Context::with_context(host::pin_current_thread(cpu), || {
            format!("pinning to CPU {cpu}")
        })?;
    }
    Ok((lib, spec))
}

/// What a worker is asked to do.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkerSpec {
    pub experiments: Vec<ExperimentKind>,
    /// Measured operations per experiment.
    pub count: usize,
    /// Operations before measuring (not recorded).
    pub warmup: usize,
    /// The server for "pretransfer".
    pub target: Option<SocketAddr>,
    /// CA bundle the pretransfer client verifies against (the system's bundle plus the
    /// server's certificate, as curl loads one per context). None: no verification.
    pub cafile: Option<PathBuf>,
    /// The system's bundle, to which the engine adds its own server's certificate (a bundle
    /// with two certificates of one subject would have OpenSSL pick the wrong one).
    pub system_bundle: Option<PathBuf>,
    /// The one version offered; None lets the library choose.
    pub tls: Option<Tls>,
    /// Key exchange groups, OpenSSL list syntax.
    pub groups: Option<String>,
    /// Offer the previous connection's session.
    pub resume: bool,
    /// A new client `SSL_CTX` per connection (curl's way) instead of one shared.
    pub ctx_per_connection: bool,
    /// The in-process engine's server certificate.
    #[serde(with = "cert_type_serde")]
    pub cert_type: ossl::CertType,
    /// Pin the worker to this CPU.
    pub cpu: Option<usize>,
    /// The engine experiment's threads, one per CPU listed (empty: one thread, on `cpu`),
    /// sharing one server and one client context.
    #[serde(default)]
    pub engine_cpus: Vec<usize>,
    /// The load experiment's client threads, one per CPU listed (empty: one, on `cpu`).
    #[serde(default)]
    pub load_cpus: Vec<usize>,
    /// perf's control FIFO when `compare --profile` samples this worker: each experiment's
    /// measured operations are one sampling window (warm-up and setup are left out).
    #[serde(default)]
    pub profile_control: Option<PathBuf>,
    /// Test-only: burn this much more CPU per measured operation, in percent of the
    /// operation's own time, inside what is timed (`compare --calibrate-slower`).
    #[serde(default)]
    pub calibrate_slower_pct: f64,
    /// The load experiment's concurrent connections (a closed loop).
    #[serde(default = "one")]
    pub connections: usize,
    /// Which client makes the load experiment's connections.
    #[serde(default)]
    pub client_engine: load::EngineKind,
    /// Full or lean, for a rustls client.
    #[serde(default)]
    pub client_work: load::rustls_client::Work,
    /// The server's PID, whose CPU the load experiment reads over its window.
    #[serde(default)]
    pub server_pid: Option<u32>,
}

fn one() -> usize {
    1
}

/// What a worker measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkerResult {
    pub library: String,
    /// Per metric name, microseconds.
    pub samples: BTreeMap<String, Vec<f64>>,
    pub negotiated: Vec<Negotiated>,
    /// The client's wire figures over the round's measured handshakes: the load experiment's
    /// when it runs (its engine is the client the variant names), else pretransfer's.
    #[serde(default)]
    pub wire: Option<load::wire::WireSummary>,
    /// Connections the pretransfer experiment made, warm-up included (for the server's CPU).
    pub connections: usize,
    /// Handshakes the load experiment made, warm-up included (for the server's own count).
    #[serde(default)]
    pub load_handshakes: u64,
    pub error: Option<String>,
}

impl WorkerResult {
    /// The result of a worker that could not start: only why.
    pub fn failed(error: String) -> WorkerResult {
        WorkerResult {
            error: Some(error),
            ..WorkerResult::default()
        }
    }
}

/// A worker set up for its spec: contexts, credentials and the server's certificate are made
/// once, and each [`Worker::batch`] measures one round. The matrix keeps one worker per
/// variant for the whole run and asks each for a round in turn, so the variants of a round run
/// one right after the other (their pair sees the same machine) and no round pays for setup.
pub struct Worker {
    lib: &'static ossl::Library,
    spec: WorkerSpec,
    pretransfer: Option<Pretransfer>,
    engine: Option<Engine>,
    load: Option<Load>,
}

impl Worker {
    /// Sets up every experiment of `spec`; says which one could not be set up, and why.
    pub fn new(lib: &'static ossl::Library, spec: &WorkerSpec) -> Result<Worker> {
        let mut w = Worker {
            lib,
            spec: spec.clone(),
            pretransfer: None,
            engine: None,
            load: None,
        };
        for experiment in &spec.experiments {
            let named = |e: Error| Error::msg(format!("{}: {e}", experiment.name()));
            match experiment {
                ExperimentKind::Pretransfer => {
                    w.pretransfer = Some(Pretransfer::new(lib, spec).map_err(named)?)
                }
                ExperimentKind::Engine => w.engine = Some(Engine::new(lib, spec).map_err(named)?),
                ExperimentKind::Load => w.load = Some(Load::new(lib, spec).map_err(named)?),
            }
        }
        Ok(w)
    }

    /// One round: every experiment's warm-up and measured operations. A failed experiment is
    /// reported in the result (with what was measured before it), not as an error.
    pub fn batch(&mut self) -> WorkerResult {
        let mut result = WorkerResult {
            library: self.lib.name().to_string(),
            ..WorkerResult::default()
        };
        for experiment in self.spec.experiments.clone() {
            let outcome = match experiment {
                ExperimentKind::Pretransfer => match &mut self.pretransfer {
                    Some(p) => p.round(self.lib, &self.spec, &mut result),
                    None => Ok(()),
                },
                ExperimentKind::Engine => match &mut self.engine {
                    Some(e) => e.round(self.lib, &self.spec, &mut result),
                    None => Ok(()),
                },
                ExperimentKind::Load => match &self.load {
                    Some(l) => l.round(&self.spec, &mut result),
                    None => Ok(()),
                },
            };
            if let Err(e) = outcome {
                result.error = Some(format!("{}: {e}", experiment.name()));
                break;
            }
        }
        result
    }
}

/// Opens or closes the worker's sampling window, when it is profiled.
pub(super) fn sampling(spec: &WorkerSpec, open: bool) -> Result<()> {
    if let Some(fifo) = &spec.profile_control {
        profile::window(fifo, open).with_context(|| {
            format!(
                "telling perf to {} sampling through {}",
                if open { "start" } else { "stop" },
                fifo.display()
            )
        })?;
    }
    Ok(())
}

pub(super) fn settings(spec: &WorkerSpec) -> Settings {
    let mut s = Settings::new();
    if let Some(v) = spec.tls {
        s.min_version = Some(v.version());
        s.max_version = Some(v.version());
    }
    // The matrix checked the spelling before starting any worker.
    s.groups = spec.groups.as_deref().and_then(|g| g.parse().ok());
    s
}

/// A client context: the spec's settings, and verification against `cafile` when given (which
/// loads the whole bundle into the context's store, as curl does for each of its contexts).
pub(super) fn client_context(
    lib: &'static ossl::Library,
    settings: &Settings,
    cafile: Option<&std::path::Path>,
) -> Result<ossl::Context> {
    let options = crate::common::client::ClientOptions {
        settings: settings.clone(),
        tickets: true,
        verify: cafile.map(Some),
        ..Default::default()
    };
    crate::common::client::client_context(lib, options)
}

pub(super) fn record(negotiated: &mut Vec<Negotiated>, n: &ossl::Negotiated) {
    Negotiated::tally(negotiated, Negotiated::one(n));
}

pub(super) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Burns CPU for `pct` percent of `of` (nothing at 0) and says how long it took: the
/// calibrated extra work of `compare --calibrate-slower`.
pub(super) fn burn(pct: f64, of: Duration) -> Duration {
    // Not even a clock read inside the timed work when nothing is to be burnt.
    if pct <= 0.0 {
        return Duration::ZERO;
    }
    let start = Instant::now();
    let until = of.mul_f64(pct / 100.0);
    let mut x = 0u64;
    while start.elapsed() < until {
        for _ in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
    start.elapsed()
}

/// Sequential connections, each new: context (per-connection mode), TCP connect, handshake
/// ("pretransfer"), then GET / and the whole response ("request_total"). CPU of this process
/// per connection goes in once per round.
struct Pretransfer {
    settings: Settings,
    /// The one client context, unless a new one is made per connection.
    shared: Option<ossl::Context>,
    /// The probe's strings are static: its SNI and request path are fixed.
    probe: Probe<'static>,
    /// The session the next connection offers (resumption).
    session: Option<Session>,
}

impl Pretransfer {
    fn new(lib: &'static ossl::Library, spec: &WorkerSpec) -> Result<Pretransfer> {
        let target = spec.target.context("no server to connect to")?;
        let settings = settings(spec);
        let shared = if spec.ctx_per_connection {
            None
        } else {
            Some(client_context(lib, &settings, spec.cafile.as_deref())?)
        };
        let probe = Probe {
            target,
            sni: Some("localhost"),
            verify: spec.cafile.is_some(),
            timeout: Duration::from_secs(10),
            request: Some("/"),
            await_ticket: false,
        };
        Ok(Pretransfer {
            settings,
            shared,
            probe,
            session: None,
        })
    }

    fn round(
        &mut self,
        lib: &'static ossl::Library,
        spec: &WorkerSpec,
        out: &mut WorkerResult,
    ) -> Result<()> {
        let cafile = spec.cafile.as_deref();
        let (mut pre, mut total) = (Vec::new(), Vec::new());
        let mut negotiated = Vec::new();
        let mut wire = load::wire::WireByKind::default();
        let mut cpu_start = (0.0, 0.0);
        for i in 0..spec.warmup + spec.count {
            if i == spec.warmup {
                sampling(spec, true)?;
                cpu_start = host::process_cpu_s();
            }
            let start = Instant::now();
            let owned;
            let ctx = match &self.shared {
                Some(c) => c,
                None => {
                    owned = client_context(lib, &self.settings, cafile)?;
                    &owned
                }
            };
            let context_time = start.elapsed();
            let offer = if spec.resume {
                self.session.as_ref()
            } else {
                None
            };
            let o = connect_once(ctx, &self.probe, offer)
                .with_context(|| format!("connection {}", i + 1))?;
            let pre_time = context_time + o.connect + o.handshake;
            let extra = burn(spec.calibrate_slower_pct, pre_time);
            let done = start.elapsed();
            out.connections += 1;
            if spec.resume {
                self.session = o.session;
            }
            if i < spec.warmup {
                continue;
            }
            pre.push(us(pre_time + extra));
            total.push(us(done));
            record(&mut negotiated, &o.negotiated);
            if let Some(w) = &o.wire {
                wire.add(o.negotiated.kind.is_resumed(), w);
            }
        }
        // The load experiment's client, when it runs, is the one the variant's figures describe.
        if !spec.experiments.contains(&ExperimentKind::Load) {
            out.wire = wire.summary();
        }
        let cpu_end = host::process_cpu_s();
        sampling(spec, false)?;
        let cpu = (cpu_end.0 - cpu_start.0) + (cpu_end.1 - cpu_start.1);
        out.samples.insert("pretransfer".into(), pre);
        out.samples.insert("request_total".into(), total);
        out.samples.insert(
            "client_cpu_per_connection".into(),
            vec![cpu * 1e6 / spec.count.max(1) as f64],
        );
        check_resumption(spec, &negotiated)?;
        out.negotiated.extend(negotiated);
        Ok(())
    }
}

/// A closed loop of `connections` new connections to the server, made by the load engine
/// bench uses (OpenSSL or rustls), handshake only: the rate, the client's and the server's
/// CPU per handshake and the server's busy share, each as bench computes them over the
/// measured window.
struct Load {
    client: LoadClient,
    target: SocketAddr,
}

/// The load experiment's client: only the one the variant names is made (a rustls client
/// needs no OpenSSL context, nor the client library to have the variant's groups).
enum LoadClient {
    Openssl(ossl::Context),
    Rustls(Box<load::RustlsClient>),
}

/// Local addresses the load experiment connects from: a round of full handshakes leaves its
/// ports in TIME_WAIT, and a long matrix would run out of one address's.
const LOAD_SOURCE_IPS: u8 = 16;

impl Load {
    fn new(lib: &'static ossl::Library, spec: &WorkerSpec) -> Result<Load> {
        let target = spec.target.context("no server to connect to")?;
        let settings = settings(spec);
        let client = match spec.client_engine {
            load::EngineKind::Openssl => {
                LoadClient::Openssl(client_context(lib, &settings, spec.cafile.as_deref())?)
            }
            load::EngineKind::Rustls => {
                let trust = load::rustls_client::Trust {
                    work: spec.client_work,
                    verify: spec.cafile.as_deref().map(Some),
                    credentials: None,
                    keylog: None,
                };
                LoadClient::Rustls(Box::new(load::RustlsClient::new(
                    &settings,
                    trust,
                    Some(lib),
                    None,
                )?))
            }
        };
        Ok(Load { client, target })
    }

    fn config(&self, spec: &WorkerSpec, count: u64) -> load::LoadConfig {
        load::LoadConfig {
            target: self.target,
            server_name: Some("localhost".into()),
            verify_host: spec.cafile.as_ref().map(|_| "localhost".into()),
            threads: spec.load_cpus.len().max(1),
            // -c is per client thread: N threads keep N times the connections open.
            connections: spec.connections.max(1) * spec.load_cpus.len().max(1),
            cpus: match spec.load_cpus.as_slice() {
                [] => spec.cpu.into_iter().collect(),
                cpus => cpus.to_vec(),
            },
            duration: None,
            count: Some(count),
            warmup: Duration::ZERO,
            mode: if spec.resume {
                load::Mode::Resume {
                    by: load::ResumeBy::Ticket,
                    ratio: 1.0,
                }
            } else {
                load::Mode::Full
            },
            request: None,
            rate: None,
            schedule_offset: std::time::Duration::ZERO,
            timeout: Duration::from_secs(10),
            record_connections: false,
            source_ips: crate::common::load_run::source_ips(self.target, LOAD_SOURCE_IPS),
            server_pid: spec.server_pid,
        }
    }

    /// One run of `count` connections, checked as bench checks its runs; a warm-up only for
    /// errors (its slots may end before they have a session to offer).
    fn run(&self, spec: &WorkerSpec, count: u64, warm_up: bool) -> Result<load::RunResult> {
        let client = match &self.client {
            LoadClient::Rustls(r) => load::Client::Rustls(r),
            LoadClient::Openssl(ctx) => load::Client::Openssl(ctx),
        };
        let never = std::sync::atomic::AtomicBool::new(false);
        let (mut r, _) =
            crate::common::load_run::run(client, self.config(spec, count), &never, &|_| {})?;
        if warm_up {
            r.resumption.problem = None;
        }
        crate::common::load_run::check(&r).map_err(Error::msg)?;
        Ok(r)
    }

    fn round(&self, spec: &WorkerSpec, out: &mut WorkerResult) -> Result<()> {
        // The warm-up: one closed loop's worth of connections per warm-up operation.
        if spec.warmup > 0 {
            let warm = self.run(spec, (spec.warmup * spec.connections.max(1)) as u64, true)?;
            out.load_handshakes += warm.handshakes.total;
        }
        sampling(spec, true)?;
        let r = self.run(spec, spec.count as u64, false);
        sampling(spec, false)?;
        let r = r?;
        out.load_handshakes += r.handshakes.total;
        out.library = r.client.library.clone();
        let mut add = |name: &str, v: f64| {
            out.samples.insert(name.into(), vec![v]);
        };
        add(
            "load_handshake_rate",
            r.handshakes.total as f64 / r.duration_s,
        );
        add(
            "load_client_cpu_per_handshake",
            r.cpu.client_cpu_s_per_1000_handshakes * 1e3,
        );
        if let Some(s) = &r.cpu.server {
            add("load_server_cpu_per_handshake", s.cpu_us_per_handshake);
            add("load_server_busy", s.busy_pct);
        }
        // Resumed: each connection slot's first handshake in a run is full (it has no session
        // yet), and load's own rule (99% of the offers resumed, as asked) was checked above.
        let negotiated: Vec<Negotiated> = r.negotiated.clone();
        if !spec.resume {
            check_resumption(spec, &negotiated)?;
        }
        for mut n in negotiated {
            n.handshake = format!("{} (load)", n.handshake);
            Negotiated::tally(&mut out.negotiated, n);
        }
        // Bench's own wire figures (load::wire), taken over as they are.
        if r.wire.is_some() {
            out.wire = r.wire.clone();
        }
        Ok(())
    }
}

/// Resumption asked for must be what was obtained (all but none of the measured handshakes);
/// full handshakes must all be full.
pub(super) fn check_resumption(spec: &WorkerSpec, negotiated: &[Negotiated]) -> Result<()> {
    let total: u64 = negotiated.iter().map(|n| n.count).sum();
    let full: u64 = negotiated
        .iter()
        .filter(|n| n.handshake == "full")
        .map(|n| n.count)
        .sum();
    if spec.resume && total > 0 && (full as f64) > 0.01 * total as f64 {
        fail!(
            "resumption was asked for, but {full} of {} were full",
            crate::render::words::count(total, "handshake")
        );
    }
    if !spec.resume && full != total {
        fail!(
            "full handshakes were asked for, but {} of {total} resumed",
            total - full
        );
    }
    Ok(())
}
