//! `compare --matrix`: the variants (the product of every list given), the servers and builds
//! they need, and the rounds. Every variant runs once per round, in an order rotated from round
//! to round (A B C, B C A, C A B, ...), so neither drift in the machine nor the place in a round
//! favours one variant; each round gives each metric one value (its median there), and the
//! rounds are the replicates the verdicts are drawn from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use model::compare::{CompareDocument, Experiment, Metric, Negotiated, Variant};

use super::matrix_servers::{start_server, NoServer, Server, ServerKey, ServerSlot};
use super::placement::{place, Placement};
use super::profiles::write_profiles;
use super::worker::{ExperimentKind, Tls};
use super::worker::{WorkerResult, WorkerSpec};
use crate::common::error::{Context, Error, Result};
use crate::fail;

/// Which side's library the variants change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
    Both,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Both => "both",
        }
    }
}

/// A library to test: a version built by `tlsscope openssl build`, an install directory, or the
/// system's, as the user named it.
pub type LibraryName = String;

/// The matrix, validated: every list has at least one value, and the variants are their product.
pub struct MatrixConfig {
    /// The tlsscope executable (workers and servers are copies of it).
    pub exe: PathBuf,
    /// Libraries of the side that varies ("system" is the system's).
    pub libraries: Vec<LibraryName>,
    /// The library of the side that does not vary (None: the system's).
    pub fixed: Option<LibraryName>,
    pub side: Side,
    pub cert_types: Vec<ossl::CertType>,
    /// None: any version.
    pub tls: Vec<Option<Tls>>,
    /// None: the library's default groups.
    pub groups: Vec<Option<String>>,
    /// Resumed (true) and/or full handshakes.
    pub resumed: Vec<bool>,
    /// A client context per connection (true) and/or one shared.
    pub ctx_per_connection: Vec<bool>,
    pub experiments: Vec<ExperimentKind>,
    pub count: usize,
    pub repeat: usize,
    pub warmup: usize,
    /// Verify the server's certificate (against the system's bundle plus the server's own).
    pub verify: bool,
    pub level: f64,
    /// Changes smaller than this fraction are never called.
    pub noise_threshold: f64,
    /// Test-only: the last variant's client burns this much more CPU per operation, in percent
    /// of the operation's own time (a calibrated difference for the verdicts' benchmark).
    pub calibrate_slower_pct: f64,
    pub server_cpu: usize,
    pub client_cpu: usize,
    /// Where the run is made, for the document.
    pub environment: model::Environment,
    /// Sample each worker's measured operations with perf and write flame graphs, tables and
    /// the difference against the first variant into this directory (`compare --profile`).
    pub profile: Option<PathBuf>,
    /// The servers the pretransfer and load experiments connect to.
    pub servers: Vec<ServerKind>,
    /// The load experiment's clients.
    pub client_engines: Vec<load::EngineKind>,
    /// How much of a real client's work the load experiment's rustls client does.
    pub client_work: load::rustls_client::Work,
    /// The load experiment's concurrent connections (a closed loop).
    pub connections: usize,
    /// Thread counts, one variant each (1 among them when any is above 1).
    pub threads: Vec<usize>,
    /// The machine's CPUs in the order threads get them (one per physical core first).
    pub cpu_order: Vec<usize>,
    /// What each variant is compared with.
    pub baseline: super::analysis::Baseline,
    /// Warnings about the settings themselves, worded by the command, for the document.
    pub warnings: Vec<String>,
}

/// The server a variant's client connects to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// `tlsscope serve`, on the variant's server library.
    Builtin,
    /// Debian's nginx, run against the variant's server library (a 3.x one).
    Nginx,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Builtin => "builtin",
            ServerKind::Nginx => "nginx",
        }
    }
}

/// What the matrix tells its caller as it goes.
pub enum Event<'a> {
    /// A round of a variant starts.
    Round {
        round: usize,
        of: usize,
        label: &'a str,
    },
    /// It ended: a one-line summary, or why it failed.
    RoundDone(std::result::Result<String, String>),
    /// A library version the cache lacks is being built (before the rounds).
    Building { library: &'a str },
    /// A build ended: its outcome line.
    Built(String),
}

/// The system's CA bundle: what curl loads into each of its contexts on Debian.
pub(super) const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One variant to measure.
#[derive(Clone, Debug)]
pub(super) struct Plan {
    pub(super) label: String,
    pub(super) settings: BTreeMap<String, String>,
    /// The client's and the server's library (None: the system's).
    pub(super) client_openssl: Option<String>,
    pub(super) server_openssl: Option<String>,
    pub(super) cert: ossl::CertType,
    pub(super) tls: Option<Tls>,
    pub(super) groups: Option<String>,
    pub(super) resume: bool,
    pub(super) per_connection: bool,
    pub(super) server: ServerKind,
    pub(super) client_engine: load::EngineKind,
    pub(super) threads: usize,
    /// The CPUs of its threads.
    pub(super) placement: Placement,
    /// Experiments of the matrix this variant cannot run, each with why (too few CPUs for
    /// its threads, say).
    pub(super) refused: Vec<String>,
    /// The experiments that apply to it: the engine runs without a server, once per library
    /// (built-in server, OpenSSL client); pretransfer is OpenSSL's blocking client.
    pub(super) experiments: Vec<ExperimentKind>,
}

/// What a variant has gathered so far.
#[derive(Default)]
pub(super) struct Gathered {
    pub(super) library: Option<String>,
    /// The library of the server the variant's client connected to, when tlsscope started it.
    pub(super) server_library: Option<String>,
    pub(super) samples: BTreeMap<String, Vec<f64>>,
    /// Per metric, one value per completed round: the replicates.
    pub(super) rounds: BTreeMap<String, Vec<f64>>,
    pub(super) negotiated: Vec<Negotiated>,
    /// The client's wire figures over the rounds (the load experiment's client when it runs,
    /// else pretransfer's).
    pub(super) wire: Option<load::wire::WireSummary>,
    pub(super) error: Option<String>,
    /// Rounds that completed: those before a failure are still reported.
    pub(super) rounds_done: usize,
    /// The workers' stacks over their measured operations (`compare --profile`), and how many
    /// operations they were.
    pub(super) profile: profile::Profile,
    pub(super) profiled_ops: u64,
    /// Why it is not run (a library its server cannot load).
    pub(super) not_run: Option<String>,
    /// Connections its client made to its server, warm-ups included.
    pub(super) client_count: u64,
    pub(super) server_check: Option<model::compare::ServerCheck>,
}

/// Why a variant stopped at `round` (from 0), with what is still reported: a library
/// directory that was there when the run started and is gone now was removed during it.
fn round_failure(why: &str, round: usize, repeat: usize, g: &Gathered, p: &Plan) -> String {
    let removed = [&p.client_openssl, &p.server_openssl]
        .into_iter()
        .flatten()
        .find(|v| v.contains('/') && !Path::new(v.as_str()).exists());
    let why = match removed {
        Some(dir) => format!("{dir} was removed during the run ({why})"),
        None => why.to_string(),
    };
    match g.rounds_done {
        0 => why,
        1 => format!(
            "round {}/{repeat} failed: {why}; the round before it is reported",
            round + 1
        ),
        done => format!(
            "round {}/{repeat} failed: {why}; the {done} rounds before it are reported",
            round + 1
        ),
    }
}

/// A library name as a worker's `--openssl` (None: the system's).
fn library_choice(v: &str) -> Option<String> {
    (v != "system").then(|| v.to_string())
}

/// Every combination of the lists, labelled by the settings that vary; a label given twice (the
/// same library twice, for an A/A run) is numbered ("openssl=system #2").
fn plans(c: &MatrixConfig) -> Vec<Plan> {
    let mut plans = combinations(c);
    for p in &mut plans {
        let (placement, refused) = place(
            p.threads,
            &p.experiments,
            (c.server_cpu, c.client_cpu),
            &c.cpu_order,
        );
        let mut refused: Vec<(ExperimentKind, String)> = refused;
        if p.server == ServerKind::Nginx && p.threads > 1 {
            refused.push((
                ExperimentKind::Load,
                "nginx runs one worker process here: --threads sets the built-in server's workers"
                    .into(),
            ));
        }
        p.experiments
            .retain(|e| !refused.iter().any(|(r, _)| r == e));
        // Pretransfer's refusal at N threads is the matrix's shape, said once in the warnings.
        p.refused = refused
            .into_iter()
            .filter(|(e, _)| *e != ExperimentKind::Pretransfer)
            .map(|(e, why)| format!("{}: {why}", e.name()))
            .collect();
        p.refused.dedup();
        p.placement = placement;
    }
    plans.retain(|p| !p.experiments.is_empty() || !p.refused.is_empty());
    let mut seen: Vec<String> = Vec::new();
    for p in &mut plans {
        let mut label = p.label.clone();
        let mut n = 1;
        while seen.contains(&label) {
            n += 1;
            label = format!("{} #{n}", p.label);
        }
        seen.push(label.clone());
        p.label = label;
    }
    plans
}

fn combinations(c: &MatrixConfig) -> Vec<Plan> {
    let names = |v: &[bool], yes: &str, no: &str| -> Vec<String> {
        v.iter()
            .map(|b| if *b { yes } else { no }.to_string())
            .collect()
    };
    let dims: [(&str, Vec<String>); 9] = [
        ("openssl", c.libraries.clone()),
        (
            "cert",
            c.cert_types.iter().map(|t| t.name().to_string()).collect(),
        ),
        (
            "tls",
            c.tls
                .iter()
                .map(|t| t.map_or("any", Tls::name).to_string())
                .collect(),
        ),
        (
            "group",
            c.groups
                .iter()
                .map(|g| g.clone().unwrap_or_else(|| "default".into()))
                .collect(),
        ),
        ("resume", names(&c.resumed, "resumed", "full")),
        (
            "ctx",
            names(&c.ctx_per_connection, "per-connection", "shared"),
        ),
        (
            "server",
            c.servers.iter().map(|s| s.name().to_string()).collect(),
        ),
        (
            "client",
            c.client_engines
                .iter()
                .map(|e| e.name().to_string())
                .collect(),
        ),
        ("threads", c.threads.iter().map(|n| n.to_string()).collect()),
    ];
    // Every combination, as one index per dimension.
    let mut combos: Vec<Vec<usize>> = vec![Vec::new()];
    for (_, values) in &dims {
        combos = combos
            .into_iter()
            .flat_map(|combo| {
                (0..values.len()).map(move |i| {
                    let mut next = combo.clone();
                    next.push(i);
                    next
                })
            })
            .collect();
    }
    let fixed = c.fixed.as_deref().and_then(library_choice);
    combos
        .into_iter()
        .map(|ix| {
            let text = |d: usize| dims[d].1[ix[d]].clone();
            let varying: Vec<String> = (0..dims.len())
                .filter(|d| dims[*d].1.len() > 1)
                .map(|d| format!("{}={}", dims[d].0, text(d)))
                .collect();
            let label = if varying.is_empty() {
                format!("openssl={}", text(0))
            } else {
                varying.join(" ")
            };
            let lib = library_choice(&text(0));
            let (client_openssl, server_openssl) = match c.side {
                Side::Client => (lib, fixed.clone()),
                Side::Server => (fixed.clone(), lib),
                Side::Both => (lib.clone(), lib),
            };
            Plan {
                label,
                settings: (0..dims.len())
                    .map(|d| (dims[d].0.to_string(), text(d)))
                    .collect(),
                client_openssl,
                server_openssl,
                cert: c.cert_types[ix[1]],
                tls: c.tls[ix[2]],
                groups: c.groups[ix[3]].clone(),
                resume: c.resumed[ix[4]],
                per_connection: c.ctx_per_connection[ix[5]],
                server: c.servers[ix[6]],
                client_engine: c.client_engines[ix[7]],
                threads: c.threads[ix[8]],
                placement: Placement::default(),
                refused: Vec::new(),
                experiments: experiments_of(
                    c,
                    c.servers[ix[6]],
                    c.client_engines[ix[7]],
                    c.threads[ix[8]],
                ),
            }
        })
        .collect()
}

/// The experiments of `c` that a variant with this server, client and thread count runs
/// (pretransfer is one connection at a time: one thread).
fn experiments_of(
    c: &MatrixConfig,
    server: ServerKind,
    client: load::EngineKind,
    threads: usize,
) -> Vec<ExperimentKind> {
    let openssl = client == load::EngineKind::Openssl;
    c.experiments
        .iter()
        .copied()
        .filter(|e| match e {
            ExperimentKind::Engine => openssl && server == ServerKind::Builtin,
            ExperimentKind::Pretransfer => openssl && threads == 1,
            ExperimentKind::Load => true,
        })
        .collect()
}

/// Asks `prepare` for every library the plans name (a version the cache lacks is built
/// first): its install prefix, or why it cannot be had.
fn prepare_libraries(
    plans: &[Plan],
    prepare: &mut dyn FnMut(&str) -> std::result::Result<PathBuf, String>,
) -> BTreeMap<String, std::result::Result<PathBuf, String>> {
    let mut out = BTreeMap::new();
    for p in plans {
        for v in [&p.client_openssl, &p.server_openssl].into_iter().flatten() {
            if !out.contains_key(v) {
                let prefix = prepare(v);
                out.insert(v.clone(), prefix);
            }
        }
    }
    out
}

impl ServerKey {
    fn of(p: &Plan) -> ServerKey {
        ServerKey {
            kind: p.server,
            library: p.server_openssl.clone(),
            cert: p.cert,
            groups: p.groups.clone(),
            resumption: p.resume,
            cpus: p.placement.server.clone(),
        }
    }
}

/// Measured operations of a plan per round: `count` per experiment, per thread in the engine.
fn ops_per_round(c: &MatrixConfig, p: &Plan) -> usize {
    p.experiments
        .iter()
        .map(|e| match e {
            ExperimentKind::Engine => c.count * p.threads,
            _ => c.count,
        })
        .sum()
}

/// Whether a plan's experiments connect to a server.
fn needs_server(p: &Plan) -> bool {
    p.experiments.iter().any(|e| *e != ExperimentKind::Engine)
}

/// Runs the matrix and returns the document (variants that failed included, with why).
/// `prepare` makes a library available and says where it is installed (or why it cannot be
/// had); `events` hears of each round; `stop` (set by a signal) ends the run after the round
/// in progress, every server and worker stopped.
pub fn run(
    c: &MatrixConfig,
    prepare: &mut dyn FnMut(&str) -> std::result::Result<PathBuf, String>,
    events: &mut dyn FnMut(Event<'_>),
    stop: &AtomicBool,
) -> Result<CompareDocument> {
    let plans = plans(c);
    // The sampler, and perf's version for the profiles' environment.
    let sampler = match &c.profile {
        Some(_) => {
            let s = profile::Sampler::default();
            let version = s.check().map_err(|e| Error::msg(e.to_string()))?;
            Some((s, version))
        }
        None => None,
    };
    let libraries = prepare_libraries(&plans, prepare);
    let dir = tempfile::tempdir()?;
    let mut servers: Vec<ServerSlot> = Vec::new();
    let mut gathered: Vec<Gathered> = plans.iter().map(|_| Gathered::default()).collect();
    for (p, g) in plans.iter().zip(gathered.iter_mut()) {
        if p.experiments.is_empty() {
            g.not_run = Some(p.refused.join("; "));
            continue;
        }
        let broken = [&p.client_openssl, &p.server_openssl]
            .into_iter()
            .flatten()
            .find_map(|v| libraries.get(v)?.as_ref().err());
        if let Some(why) = broken {
            g.error = Some(why.clone());
            continue;
        }
        let key = ServerKey::of(p);
        if needs_server(p) && !servers.iter().any(|(k, _)| *k == key) {
            let prefix = key
                .library
                .as_ref()
                .and_then(|l| libraries.get(l)?.as_ref().ok())
                .cloned();
            let s = start_server(c, &key, prefix.as_deref(), dir.path(), servers.len());
            servers.push((key, s));
        }
    }
    // One worker per variant for the whole run, set up before the first round; each round asks
    // each worker for one batch, so a round's variants run back to back.
    let last = plans.len().saturating_sub(1);
    let mut workers: Vec<Option<WorkerProcess>> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let server = match server_of(&servers, p) {
            _ if gathered[i].error.is_some() || gathered[i].not_run.is_some() => {
                workers.push(None);
                continue;
            }
            Some(Err(NoServer::Failed(why))) => {
                gathered[i].error = Some(why.clone());
                workers.push(None);
                continue;
            }
            Some(Err(NoServer::NotRun(why))) => {
                gathered[i].not_run = Some(why.clone());
                workers.push(None);
                continue;
            }
            Some(Ok(s)) => {
                gathered[i].server_library =
                    Some(s.process().library.clone()).filter(|l| !l.is_empty());
                Some(s)
            }
            None => None,
        };
        let spec = WorkerSpec {
            experiments: p.experiments.clone(),
            count: c.count,
            warmup: c.warmup,
            target: server.map(|s| s.process().addr),
            cafile: match (c.verify, server) {
                (true, Some(s)) => Some(s.cafile.clone()),
                (true, None) => Some(PathBuf::from(SYSTEM_BUNDLE)),
                (false, _) => None,
            },
            system_bundle: Path::new(SYSTEM_BUNDLE)
                .exists()
                .then(|| PathBuf::from(SYSTEM_BUNDLE)),
            tls: p.tls,
            groups: p.groups.clone(),
            resume: p.resume,
            ctx_per_connection: p.per_connection,
            cert_type: p.cert,
            cpu: p.placement.client.first().copied(),
            engine_cpus: if p.threads > 1 {
                p.placement.engine.clone()
            } else {
                Vec::new()
            },
            load_cpus: p.placement.client.clone(),
            profile_control: None,
            calibrate_slower_pct: if i == last && plans.len() > 1 {
                c.calibrate_slower_pct
            } else {
                0.0
            },
            connections: c.connections,
            client_engine: p.client_engine,
            client_work: c.client_work,
            server_pid: server.map(|s| s.process().pid()),
        };
        let sampler = sampler.as_ref().map(|(s, _)| s);
        match WorkerProcess::start(&c.exe, p.client_openssl.as_deref(), &spec, sampler) {
            Ok(w) => workers.push(Some(w)),
            Err(e) => {
                gathered[i].error =
                    Some(round_failure(&e.to_string(), 0, c.repeat, &gathered[i], p));
                workers.push(None);
            }
        }
    }
    let mut stopped_in = None;
    'rounds: for round in 0..c.repeat {
        // The order rotates every round, so each variant takes each place in turn.
        for i in (0..plans.len()).map(|k| (k + round) % plans.len()) {
            if stop.load(Ordering::Relaxed) {
                stopped_in = Some(round);
                break 'rounds;
            }
            let p = &plans[i];
            let Some(worker) = workers[i].as_mut() else {
                continue;
            };
            let server = server_of(&servers, p).and_then(|s| s.as_ref().ok());
            events(Event::Round {
                round: round + 1,
                of: c.repeat,
                label: &p.label,
            });
            let pid = server.map(|s| s.process().pid());
            let server_cpu_before = pid.and_then(host::proc_cpu_total_s);
            let outcome = worker.round();
            let server_cpu_after = pid.and_then(host::proc_cpu_total_s);
            let g = &mut gathered[i];
            match outcome {
                Ok(mut r) => {
                    events(Event::RoundDone(Ok(one_line(&r))));
                    let served = r.connections as u64 + r.load_handshakes;
                    if let (Some(b), Some(e)) = (server_cpu_before, server_cpu_after) {
                        if served > 0 {
                            r.samples.insert(
                                "server_cpu_per_connection".into(),
                                vec![(e - b) * 1e6 / served as f64],
                            );
                        }
                    }
                    g.client_count += served;
                    merge(g, r);
                    g.rounds_done += 1;
                }
                Err(e) => {
                    events(Event::RoundDone(Err(e.to_string())));
                    g.error = Some(round_failure(&e.to_string(), round, c.repeat, g, p));
                    // Ours, and of no more use: ended now.
                    workers[i] = None;
                }
            }
        }
    }
    // Each worker ends when its input does; a profiled one's samples are read then.
    for (i, w) in workers.into_iter().enumerate() {
        let Some(w) = w else { continue };
        let sampled = w.finish(sampler.as_ref().map(|(s, _)| s));
        let g = &mut gathered[i];
        match sampled {
            Ok(Some(p)) => {
                g.profile = p;
                g.profiled_ops = (ops_per_round(c, &plans[i]) * g.rounds_done) as u64;
            }
            Ok(None) => {}
            Err(e) if g.error.is_none() => g.error = Some(format!("profiling: {e}")),
            Err(_) => {}
        }
    }
    if stopped_in.is_none() {
        check_server_counts(&plans, &mut servers, &mut gathered);
    }
    drop(servers);
    if let (Some(dir), Some((sampler, version))) = (&c.profile, &sampler) {
        write_profiles(
            dir,
            &plans,
            &gathered,
            &c.environment.kernel,
            sampler,
            version,
        )?;
    }
    let mut doc = document(&plans, gathered, c);
    if let Some(round) = stopped_in {
        doc.warnings.push(format!(
            "stopped by a signal in round {} of {}: the rounds before it are reported",
            round + 1,
            c.repeat
        ));
    }
    Ok(doc)
}

/// Stops every server and sets each variant's check: the server's own count against the
/// connections the clients of all its variants made. A difference fails those variants
/// (unless one of them failed already, which explains it).
fn check_server_counts(plans: &[Plan], servers: &mut [ServerSlot], gathered: &mut [Gathered]) {
    for (key, slot) in servers.iter_mut() {
        let Ok(server) = slot else { continue };
        let users: Vec<usize> = (0..plans.len())
            .filter(|&i| needs_server(&plans[i]) && ServerKey::of(&plans[i]) == *key)
            .collect();
        let client_count: u64 = users.iter().map(|&i| gathered[i].client_count).sum();
        let explained = users.iter().any(|&i| gathered[i].error.is_some());
        let pid = server.process().pid();
        match server.stop_and_count() {
            Ok(server_count) => {
                let check = model::compare::ServerCheck {
                    server: key.kind.name().into(),
                    pid,
                    libssl: server.libssl.as_ref().map(|p| p.display().to_string()),
                    server_count,
                    client_count,
                };
                for &i in &users {
                    if server_count != client_count && !explained {
                        gathered[i].error = Some(format!(
                            "the {} server (PID {pid}) counted {server_count}, its clients made {client_count}",
                            key.kind.name()
                        ));
                    }
                    gathered[i].server_check = Some(check.clone());
                }
            }
            Err(e) => {
                for &i in &users {
                    gathered[i]
                        .error
                        .get_or_insert_with(|| format!("reading the server's own count: {e}"));
                }
            }
        }
    }
}

/// The server a plan's pretransfer and load experiments connect to, if it has one.
fn server_of<'a>(
    servers: &'a [ServerSlot],
    p: &Plan,
) -> Option<&'a std::result::Result<Server, NoServer>> {
    if !needs_server(p) {
        return None;
    }
    let key = ServerKey::of(p);
    servers.iter().find(|(k, _)| *k == key).map(|(_, s)| s)
}

/// A running worker process (`tlsscope --openssl X compare-worker SPEC`): one line "run" on
/// its input asks for a round, answered by one JSON line; the end of its input ends it. Its
/// stderr goes to a file, quoted only when it ends without a result (it crashed). Dropped
/// while running, it is killed (it is ours) and reaped.
struct WorkerProcess {
    child: std::process::Child,
    input: Option<std::process::ChildStdin>,
    output: std::io::BufReader<std::process::ChildStdout>,
    /// Its stderr, and perf's data and control FIFO when profiled.
    dir: tempfile::TempDir,
    profiled: bool,
}

impl WorkerProcess {
    fn start(
        exe: &Path,
        openssl: Option<&str>,
        spec: &WorkerSpec,
        sampler: Option<&profile::Sampler>,
    ) -> Result<WorkerProcess> {
        let dir = tempfile::tempdir()?;
        let mut spec = spec.clone();
        // Profiled: perf starts the worker, sampling only while the worker says so.
        let mut cmd = match sampler {
            Some(s) => {
                let fifo = dir.path().join("control");
                profile::make_control_fifo(&fifo).map_err(|e| Error::msg(e.to_string()))?;
                spec.profile_control = Some(fifo.clone());
                let mut cmd = s.record_windows(&dir.path().join("perf.data"), &fifo);
                cmd.arg(exe);
                cmd
            }
            None => Command::new(exe),
        };
        if let Some(o) = openssl {
            cmd.args(["--openssl", o]);
        }
        let stderr = std::fs::File::create(dir.path().join("stderr"))?;
        let mut child = cmd
            .arg("compare-worker")
            .arg(serde_json::to_string(&spec)?)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting a compare worker")?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            fail!("a compare worker started without its pipes");
        };
        Ok(WorkerProcess {
            child,
            input: Some(input),
            output: std::io::BufReader::new(output),
            dir,
            profiled: sampler.is_some(),
        })
    }

    /// One round's result, or why there is none (the worker's own error, or how it ended).
    fn round(&mut self) -> Result<WorkerResult> {
        use std::io::{BufRead, Write};
        let asked = self
            .input
            .as_mut()
            .map(|i| i.write_all(b"run\n").and_then(|()| i.flush()));
        let mut line = String::new();
        let read = match asked {
            Some(Ok(())) => self.output.read_line(&mut line).ok(),
            _ => None,
        };
        let parsed = read
            .filter(|n| *n > 0)
            .and_then(|_| serde_json::from_str::<WorkerResult>(line.trim()).ok());
        let Some(r) = parsed else {
            self.input = None;
            let status = self
                .child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            let stderr =
                std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default();
            let last = stderr.lines().last().unwrap_or("nothing on stderr");
            fail!("a compare worker ended ({status}) without a result; its stderr ends: {last}");
        };
        if let Some(e) = &r.error {
            return Err(Error::msg(e));
        }
        Ok(r)
    }

    /// Ends the worker (the end of its input) and, when profiled, reads its samples.
    fn finish(mut self, sampler: Option<&profile::Sampler>) -> Result<Option<profile::Profile>> {
        self.input = None;
        let status = self.child.wait()?;
        match (sampler, self.profiled) {
            (Some(s), true) => {
                if !status.success() {
                    fail!("perf or the worker under it ended with {status}");
                }
                Ok(Some(
                    s.read(&self.dir.path().join("perf.data"), ossl::WRAPPER_CALLS)
                        .map_err(|e| Error::msg(e.to_string()))?
                        .0,
                ))
            }
            _ => Ok(None),
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// "pretransfer median 12.3ms, engine median 4.1ms".
fn one_line(r: &WorkerResult) -> String {
    let parts: Vec<String> = ["pretransfer", "engine_handshake"]
        .iter()
        .filter_map(|name| {
            let s = r.samples.get(*name)?;
            Some(format!(
                "{name} median {}",
                crate::render::words::duration(stats::compare::describe(s).median)
            ))
        })
        .collect();
    let load = r.samples.get("load_handshake_rate").map(|rate| {
        let busy = r
            .samples
            .get("load_server_busy")
            .map_or(String::new(), |b| format!(", server {:.0}% busy", b[0]));
        format!("load {:.0} handshakes/s{busy}", rate[0])
    });
    parts.into_iter().chain(load).collect::<Vec<_>>().join(", ")
}

/// Adds a round's result: its samples, and per metric the round's one value (its median).
fn merge(g: &mut Gathered, r: WorkerResult) {
    g.library = Some(r.library);
    for (name, values) in r.samples {
        if !values.is_empty() {
            let round = stats::compare::describe(&values).median;
            g.rounds.entry(name.clone()).or_default().push(round);
        }
        g.samples.entry(name).or_default().extend(values);
    }
    for n in r.negotiated {
        Negotiated::tally(&mut g.negotiated, n);
    }
    if let Some(w) = r.wire {
        match &mut g.wire {
            Some(mine) => mine.merge(&w),
            None => g.wire = Some(w),
        }
    }
}

/// Metric order in reports: name, unit, and whether lower is better.
const METRICS: &[(&str, &str, bool)] = &[
    ("pretransfer", "us", true),
    ("request_total", "us", true),
    ("engine_handshake", "us", true),
    ("engine_client", "us", true),
    ("engine_server", "us", true),
    ("client_cpu_per_connection", "us", true),
    ("server_cpu_per_connection", "us", true),
    ("load_handshake_rate", "1/s", false),
    ("load_client_cpu_per_handshake", "us", true),
    ("load_server_cpu_per_handshake", "us", true),
    ("load_server_busy", "%", false),
    ("engine_rate", "1/s", false),
    ("engine_cpu_per_handshake", "us", true),
    ("engine_blocked_per_handshake", "us", true),
    ("engine_blocks_per_handshake", "", true),
    ("engine_cpu_wait_per_handshake", "us", true),
];

fn document(plans: &[Plan], gathered: Vec<Gathered>, c: &MatrixConfig) -> CompareDocument {
    let level = c.level;
    let mut warnings = Vec::new();
    let variants: Vec<Variant> = plans
        .iter()
        .zip(gathered)
        .map(|(p, mut g)| {
            for why in p.refused.iter().filter(|_| !p.experiments.is_empty()) {
                warnings.push(format!("{}: not run: {why}", p.label));
            }
            if let Some(e) = &g.error {
                warnings.push(format!("{}: {e}", p.label));
                if g.rounds_done == 0 {
                    g.negotiated.clear();
                }
            }
            let metrics = if g.error.is_some() && g.rounds_done == 0 {
                Vec::new()
            } else {
                METRICS
                    .iter()
                    .filter_map(|&(name, unit, lower_is_better)| {
                        let samples = g.samples.remove(name)?;
                        let rounds = g.rounds.remove(name).unwrap_or_default();
                        Some(
                            Metric::new(name, unit, lower_is_better, samples, level)
                                .with_rounds(rounds),
                        )
                    })
                    .collect()
            };
            let mut settings = p.settings.clone();
            settings.insert(
                "client library".into(),
                p.client_openssl.clone().unwrap_or_else(|| "system".into()),
            );
            settings.insert(
                "server library".into(),
                p.server_openssl.clone().unwrap_or_else(|| "system".into()),
            );
            Variant {
                label: p.label.clone(),
                settings,
                library: g.library,
                server_library: g.server_library,
                error: g.error,
                metrics,
                negotiated: g.negotiated,
                not_run: g.not_run,
                server_check: g.server_check,
                wire: g.wire,
            }
        })
        .collect();
    warnings.extend(c.warnings.iter().cloned());
    if c.calibrate_slower_pct > 0.0 && variants.len() > 1 {
        warnings.push(format!(
            "calibration run: the last variant's client burned {}% more CPU per operation on purpose",
            c.calibrate_slower_pct
        ));
    }
    let comparisons = super::analysis::analyze(&variants, level, c.noise_threshold, c.baseline);
    let scaling = super::scaling::scaling(&variants, level);
    let servers: Vec<&str> = c
        .servers
        .iter()
        .map(|s| match s {
            ServerKind::Builtin => "the built-in server (tlsscope serve)",
            ServerKind::Nginx => "Debian's nginx (one process, on the variant's libssl.so.3)",
        })
        .collect();
    CompareDocument {
        schema_version: model::compare::COMPARE_SCHEMA_VERSION,
        kind: "compare".into(),
        environment: c.environment.clone(),
        experiment: Experiment {
            source: "matrix".into(),
            side: Some(c.side.name().into()),
            count: Some(c.count),
            repeat: Some(c.repeat),
            target: Some(format!(
                "{}, one per library, certificate, group and handshake kind",
                servers.join(" and ")
            )),
            files: Vec::new(),
            baseline: c.baseline.name().map(String::from),
        },
        level,
        noise_threshold: c.noise_threshold,
        variants,
        comparisons,
        scaling,
        warnings,
    }
}
