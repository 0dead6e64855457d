//! `compare --matrix`: the variants (the product of every list given), the servers and builds
//! they need, and the rounds. Every variant runs once per round, in an order rotated from round
//! to round (A B C, B C A, C A B, ...), so neither drift in the machine nor the place in a round
//! favours one variant; each round gives each metric one value (its median there), and the
//! rounds are the replicates the verdicts are drawn from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use report::compare::{CompareDocument, Experiment, Metric, Negotiated, Variant};

use super::worker::{WorkerResult, WorkerSpec};
use super::{ExperimentKind, Tls};
use crate::error::{Context, Error, Result};
use crate::fail;
use crate::servers::{start_builtin, Builtin, ServerProcess};

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
    pub environment: report::Environment,
    /// Sample each worker's measured operations with perf and write flame graphs, tables and
    /// the difference against the first variant into this directory (`compare --profile`).
    pub profile: Option<PathBuf>,
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
}

/// The system's CA bundle: what curl loads into each of its contexts on Debian.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One variant to measure.
#[derive(Clone, Debug)]
struct Plan {
    label: String,
    settings: BTreeMap<String, String>,
    /// The client's and the server's library (None: the system's).
    client_openssl: Option<String>,
    server_openssl: Option<String>,
    cert: ossl::CertType,
    tls: Option<Tls>,
    groups: Option<String>,
    resume: bool,
    per_connection: bool,
}

/// What a variant has gathered so far.
#[derive(Default)]
struct Gathered {
    library: Option<String>,
    samples: BTreeMap<String, Vec<f64>>,
    /// Per metric, one value per completed round: the replicates.
    rounds: BTreeMap<String, Vec<f64>>,
    negotiated: Vec<Negotiated>,
    /// The client's wire figures over the rounds (pretransfer's connections).
    wire: Option<load::wire::WireSummary>,
    error: Option<String>,
    /// Rounds that completed: those before a failure are still reported.
    rounds_done: usize,
    /// The workers' stacks over their measured operations (`compare --profile`), and how many
    /// operations they were.
    profile: profile::Profile,
    profiled_ops: u64,
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
    let dims: [(&str, Vec<String>); 6] = [
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
            }
        })
        .collect()
}

/// Asks `build` for every version the plans name that is not a path; returns the ones that
/// could not be had, with why.
fn ensure_built(
    plans: &[Plan],
    build: &mut dyn FnMut(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut failed = BTreeMap::new();
    let mut wanted: Vec<&String> = Vec::new();
    for p in plans {
        for v in [&p.client_openssl, &p.server_openssl].into_iter().flatten() {
            if !v.contains('/') && !wanted.contains(&v) {
                wanted.push(v);
            }
        }
    }
    for v in wanted {
        if let Some(why) = build(v) {
            failed.insert(v.clone(), why);
        }
    }
    failed
}

/// A server's library (None: the system's) and certificate type.
type ServerKey = (Option<String>, ossl::CertType);

/// A running server for one (library, certificate), and the CA file that trusts it.
struct Server {
    process: ServerProcess,
    cafile: PathBuf,
}

fn start_server(c: &MatrixConfig, key: &ServerKey, dir: &Path, index: usize) -> Result<Server> {
    let cert_out = dir.join(format!("server-{index}.pem"));
    let process = start_builtin(&Builtin {
        exe: &c.exe,
        openssl: key.0.as_deref(),
        cert_type: key.1,
        cpu: c.server_cpu,
        extra: &["--cert-out", cert_out.to_str().unwrap_or_default()],
        prepare: None,
    })?;
    let mut pem = std::fs::read(SYSTEM_BUNDLE).unwrap_or_default();
    pem.extend_from_slice(&std::fs::read(&cert_out).context("reading the server's certificate")?);
    let cafile = dir.join(format!("ca-{index}.pem"));
    std::fs::write(&cafile, pem)?;
    Ok(Server { process, cafile })
}

/// Runs the matrix and returns the document (variants that failed included, with why).
/// `build` makes a library version available (None) or says why it cannot; `events` hears of
/// each round.
pub fn run(
    c: &MatrixConfig,
    build: &mut dyn FnMut(&str) -> Option<String>,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<CompareDocument> {
    let plans = plans(c);
    let pretransfer = c.experiments.contains(&ExperimentKind::Pretransfer);
    // The sampler, and perf's version for the profiles' environment.
    let sampler = match &c.profile {
        Some(_) => {
            let s = profile::Sampler::default();
            let version = s.check().map_err(|e| Error::msg(e.to_string()))?;
            Some((s, version))
        }
        None => None,
    };
    let build_failures = ensure_built(&plans, build);
    let dir = tempfile::tempdir()?;
    let mut servers: Vec<(ServerKey, std::result::Result<Server, String>)> = Vec::new();
    let mut gathered: Vec<Gathered> = plans.iter().map(|_| Gathered::default()).collect();
    for (p, g) in plans.iter().zip(gathered.iter_mut()) {
        let broken = [&p.client_openssl, &p.server_openssl]
            .into_iter()
            .flatten()
            .find_map(|v| build_failures.get(v));
        if let Some(why) = broken {
            g.error = Some(why.clone());
            continue;
        }
        let key = (p.server_openssl.clone(), p.cert);
        if pretransfer && !servers.iter().any(|(k, _)| *k == key) {
            let s = start_server(c, &key, dir.path(), servers.len())
                .map_err(|e| format!("the server did not start: {e}"));
            servers.push((key, s));
        }
    }
    // One worker per variant for the whole run, set up before the first round; each round asks
    // each worker for one batch, so a round's variants run back to back.
    let last = plans.len().saturating_sub(1);
    let mut workers: Vec<Option<WorkerProcess>> = Vec::new();
    for (i, p) in plans.iter().enumerate() {
        let server = match server_of(&servers, p) {
            _ if gathered[i].error.is_some() => {
                workers.push(None);
                continue;
            }
            Some(Err(why)) => {
                gathered[i].error = Some(why.clone());
                workers.push(None);
                continue;
            }
            Some(Ok(s)) => Some(s),
            None => None,
        };
        let spec = WorkerSpec {
            experiments: c.experiments.clone(),
            count: c.count,
            warmup: c.warmup,
            target: server.map(|s| s.process.addr),
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
            cpu: Some(c.client_cpu),
            profile_control: None,
            calibrate_slower_pct: if i == last && plans.len() > 1 {
                c.calibrate_slower_pct
            } else {
                0.0
            },
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
    for round in 0..c.repeat {
        // The order rotates every round, so each variant takes each place in turn.
        for i in (0..plans.len()).map(|k| (k + round) % plans.len()) {
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
            let server_cpu_before = server.and_then(|s| host::proc_cpu_total_s(s.process.pid()));
            let outcome = worker.round();
            let server_cpu_after = server.and_then(|s| host::proc_cpu_total_s(s.process.pid()));
            let g = &mut gathered[i];
            match outcome {
                Ok(mut r) => {
                    events(Event::RoundDone(Ok(one_line(&r))));
                    if let (Some(b), Some(e)) = (server_cpu_before, server_cpu_after) {
                        if r.connections > 0 {
                            let cpu = e - b;
                            r.samples.insert(
                                "server_cpu_per_connection".into(),
                                vec![cpu * 1e6 / r.connections as f64],
                            );
                        }
                    }
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
                g.profiled_ops = (c.count * c.experiments.len() * g.rounds_done) as u64;
            }
            Ok(None) => {}
            Err(e) if g.error.is_none() => g.error = Some(format!("profiling: {e}")),
            Err(_) => {}
        }
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
    Ok(document(&plans, gathered, c))
}

/// Each variant's flame graph, folded stacks (CPU-nanoseconds per operation) and pprof file,
/// a differential flame graph of each against the first, and one table of every variant's
/// costliest functions per operation: `profile.txt`.
fn write_profiles(
    dir: &Path,
    plans: &[Plan],
    gathered: &[Gathered],
    kernel: &str,
    sampler: &profile::Sampler,
    perf_version: &str,
) -> Result<()> {
    use report::profile::{
        comment_lines, diff_table, folded_per_op, write_differential, write_flamegraph,
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the profile directory {}", dir.display()))?;
    let profiled: Vec<(usize, &Plan, &Gathered)> = plans
        .iter()
        .zip(gathered)
        .enumerate()
        .filter(|(_, (_, g))| !g.profile.stacks.is_empty())
        .map(|(i, (p, g))| (i, p, g))
        .collect();
    let write = |name: String, bytes: &[u8]| -> Result<()> {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    // The environment, at the head of profile.txt and in each pprof file.
    let mut environment = vec![format!(
        "kernel {kernel}; {perf_version}, cpu-clock at {} Hz, DWARF stacks of {} bytes",
        sampler.frequency_hz, sampler.stack_bytes
    )];
    for &(_, p, g) in &profiled {
        environment.push(format!(
            "{}: client {} ({}), server {}; {} chunks of samples lost; {} frames put back where tail calls hid them",
            p.label,
            g.library.as_deref().unwrap_or("?"),
            p.client_openssl.as_deref().unwrap_or("system"),
            p.server_openssl.as_deref().unwrap_or("system"),
            g.profile.lost_chunks,
            g.profile.restored_frames
        ));
    }
    let notes = environment.join("; ");
    for &(i, p, g) in &profiled {
        let stem = file_stem(i, &p.label);
        let info = report::profile::ProfileInfo {
            subject: &p.label,
            window_s: g.profile.total_ns() as f64 / 1e9,
            frequency_hz: sampler.frequency_hz,
            sampler: "perf (cpu-clock, DWARF stacks), measured operations only",
            environment: &notes,
            operations: None,
        };
        let mut svg = Vec::new();
        write_flamegraph(&g.profile, &info, &mut svg)?;
        write(format!("{stem}.svg"), &svg)?;
        write(
            format!("{stem}.folded"),
            (comment_lines(&environment) + &folded_per_op(&g.profile, g.profiled_ops)).as_bytes(),
        )?;
        write(
            format!("{stem}.pb"),
            &report::pprof::encode(&g.profile, info.frequency_hz, &environment),
        )?;
        if let Some(&(b, base_plan, base)) = profiled.first().filter(|(b, _, _)| *b != i) {
            let mut svg = Vec::new();
            write_differential(
                (&base.profile, base.profiled_ops),
                (&g.profile, g.profiled_ops),
                &format!("{} against {}", p.label, base_plan.label),
                &notes,
                &mut svg,
            )?;
            write(format!("{stem}-vs-{}.svg", b + 1), &svg)?;
        }
    }
    let variants: Vec<(&str, &profile::Profile, u64)> = profiled
        .iter()
        .map(|(_, p, g)| (p.label.as_str(), &g.profile, g.profiled_ops))
        .collect();
    if !variants.is_empty() {
        let head = comment_lines(&environment);
        write(
            "profile.txt".into(),
            (head + &diff_table(&variants, 150)).as_bytes(),
        )?;
    }
    Ok(())
}

/// `2-openssl=3.0.2`: the variant's number (from 0 here, from 1 in the name) and label, safe
/// as a file name: how `compare --profile` names a variant's files.
pub fn file_stem(i: usize, label: &str) -> String {
    let clean: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".=-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}-{clean}", i + 1)
}

/// The server a plan's pretransfer experiment connects to, if it has one.
fn server_of<'a>(
    servers: &'a [(ServerKey, std::result::Result<Server, String>)],
    p: &Plan,
) -> Option<&'a std::result::Result<Server, String>> {
    servers
        .iter()
        .find(|(k, _)| k.0 == p.server_openssl && k.1 == p.cert)
        .map(|(_, s)| s)
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
                report::duration(stats::compare::describe(s).median)
            ))
        })
        .collect();
    parts.join(", ")
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

/// Metric order in reports.
const METRICS: &[&str] = &[
    "pretransfer",
    "request_total",
    "engine_handshake",
    "engine_client",
    "engine_server",
    "client_cpu_per_connection",
    "server_cpu_per_connection",
];

fn document(plans: &[Plan], gathered: Vec<Gathered>, c: &MatrixConfig) -> CompareDocument {
    let level = c.level;
    let mut warnings = Vec::new();
    let variants: Vec<Variant> = plans
        .iter()
        .zip(gathered)
        .map(|(p, mut g)| {
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
                    .filter_map(|name| {
                        let samples = g.samples.remove(*name)?;
                        let rounds = g.rounds.remove(*name).unwrap_or_default();
                        Some(Metric::new(name, "us", true, samples, level).with_rounds(rounds))
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
                error: g.error,
                metrics,
                negotiated: g.negotiated,
                wire: g.wire,
            }
        })
        .collect();
    if c.experiments.contains(&ExperimentKind::Engine) && c.side != Side::Both {
        warnings.push(
            "the in-process engine runs client and server in one process, so both use the variant's library whatever --side says".into(),
        );
    }
    if c.calibrate_slower_pct > 0.0 && variants.len() > 1 {
        warnings.push(format!(
            "calibration run: the last variant's client burned {}% more CPU per operation on purpose",
            c.calibrate_slower_pct
        ));
    }
    let comparisons = super::analyze(&variants, level, c.noise_threshold);
    CompareDocument {
        schema_version: report::compare::COMPARE_SCHEMA_VERSION,
        kind: "compare".into(),
        environment: c.environment.clone(),
        experiment: Experiment {
            source: "matrix".into(),
            side: Some(c.side.name().into()),
            count: Some(c.count),
            repeat: Some(c.repeat),
            target: Some(
                "the built-in server (tlsscope serve), one per library and certificate".into(),
            ),
            files: Vec::new(),
        },
        level,
        noise_threshold: c.noise_threshold,
        variants,
        comparisons,
        warnings,
    }
}
