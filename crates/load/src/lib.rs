//! `load`: tlsscope's load engine. Non-blocking TLS connections on one epoll loop per thread,
//! closed loop or paced (`rate`), with per-phase latency, the handshakes actually obtained, and
//! CPU accounting. It never prints: progress is read from [`Progress`], results returned as
//! [`RunResult`].

pub mod client_hello;
pub mod engine;
mod http;
pub mod memory;
pub mod merge;
mod pacer;
mod record;
pub mod result;
mod reused_share;
pub mod rustls_client;
pub mod wire;
mod worker;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

pub use engine::{Client, ClientInfo, EngineKind};
pub use http::{request_bytes, HttpError, ResponseParser};
pub use record::Recorder;
pub use result::{ConnectionRow, RunResult};
pub use rustls_client::RustlsClient;

use result::{CpuUsage, HandshakeCounts, Latencies, NegotiatedCount, ResumptionCheck, ServerCpu};

/// How resumption is asked for in TLS 1.2 (TLS 1.3 always resumes with a ticket/PSK).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeBy {
    Ticket,
    SessionId,
}

/// What an operation is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    /// Every connection does a full handshake (no session is ever offered).
    Full,
    /// A slot's first handshake is full; later ones offer the slot's last session, for a
    /// fraction `ratio` of connections (1 = all).
    Resume { by: ResumeBy, ratio: f64 },
    /// One handshake per connection, then requests on it.
    KeepAlive,
}

impl Mode {
    /// The mode as the result records it.
    pub fn kind(self) -> result::RunMode {
        match self {
            Mode::Full => result::RunMode::Full,
            Mode::Resume { .. } => result::RunMode::Resume,
            Mode::KeepAlive => result::RunMode::Keepalive,
        }
    }

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        self.kind().name()
    }
}

/// A validated run description.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub target: SocketAddr,
    /// SNI to send.
    pub server_name: Option<String>,
    /// Host name (or IP) to check the certificate against, when verifying.
    pub verify_host: Option<String>,
    pub threads: usize,
    /// Concurrent connection slots, over all threads.
    pub connections: usize,
    /// CPUs to pin the threads to, round robin.
    pub cpus: Vec<usize>,
    /// Measure for this long after the warm-up.
    pub duration: Option<Duration>,
    /// Or stop after this many operations (connections in full/resume mode, requests in
    /// keepalive mode).
    pub count: Option<u64>,
    pub warmup: Duration,
    pub mode: Mode,
    /// The request each operation sends (required in keepalive mode).
    pub request: Option<Vec<u8>>,
    /// Operations per second over all threads, started on schedule (open loop).
    pub rate: Option<f64>,
    /// Open loop: how long after the run's start its schedule begins (zero for a whole run;
    /// a shard of a paced run takes its place among the other shards' starts, so that their
    /// schedules interleave as one client's would).
    pub schedule_offset: Duration,
    /// How long one phase of an operation may take.
    pub timeout: Duration,
    /// Keep one row per connection (for CSV).
    pub record_connections: bool,
    /// Local addresses to connect from, rotated (empty: the kernel's choice).
    pub source_ips: Vec<IpAddr>,
    /// A server process to account CPU for.
    pub server_pid: Option<u32>,
}

/// Errors that stop a run from starting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("load thread {thread}: {source}")]
    Thread {
        thread: usize,
        source: std::io::Error,
    },
    #[error("cannot pin load thread {thread} to CPU {cpu}: {source}")]
    Pin {
        thread: usize,
        cpu: usize,
        source: std::io::Error,
    },
}

/// A [`LoadConfig`] that cannot run, naming the setting and the numbers involved.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("a run needs at least one load thread")]
    ThreadsZero,
    #[error("{connections} connections are fewer than {threads} load threads (each thread needs a connection)")]
    ConnectionsBelowThreads { connections: usize, threads: usize },
    #[error("a run needs a duration or an operation count to end")]
    NoEnd,
    #[error("rate {rate}: must be a positive number of operations per second")]
    Rate { rate: f64 },
    #[error("keep-alive mode needs a request path")]
    KeepAliveWithoutRequest,
    #[error("resumption ratio {ratio}: must be between 0 and 1")]
    ResumeRatio { ratio: f64 },
    #[error("the timeout must be positive")]
    TimeoutZero,
    /// The open-file limit is below what `connections` sockets need.
    #[error("{connections} connections need about {wanted} open files, but this process may open only {limit} (ulimit -n; the hard limit allows no more): use fewer connections or raise the limit")]
    FdLimit {
        connections: usize,
        wanted: u64,
        limit: u64,
    },
}

/// Live counters for a progress display, one per thread.
#[derive(Default)]
#[repr(align(128))]
pub struct ThreadProgress {
    pub ops: AtomicU64,
    pub errors: AtomicU64,
}

/// State the threads share: the clock, the stop flag, the operation budget and progress.
pub struct Shared {
    pub start: Instant,
    /// The wall clock at `start`.
    pub start_wall: SystemTime,
    pub measure_start: Instant,
    pub deadline: Instant,
    pub stop: AtomicBool,
    pub claimed: AtomicU64,
    pub progress: Vec<ThreadProgress>,
}

impl Shared {
    /// Operations and errors recorded so far, over all threads.
    pub fn progress_totals(&self) -> (u64, u64) {
        self.progress.iter().fold((0, 0), |(o, e), p| {
            (o + p.ops.load(Relaxed), e + p.errors.load(Relaxed))
        })
    }
}

/// A run that has been set up: its shared state can be watched (progress) and stopped.
pub struct Run {
    cfg: LoadConfig,
    shared: Shared,
    /// The measured window, once the run has ended: [start, end].
    window: OnceLock<[Instant; 2]>,
}

/// Descriptors a run needs beyond one per connection (epoll, timers, files, the library's).
const SPARE_FDS: u64 = 64;

/// Raises the open-file limit for `connections` sockets, or stops the run in one line: past
/// the limit every further connect fails, and the figures would describe that.
fn check_fd_room(connections: usize) -> Result<(), Error> {
    let wanted = connections as u64 + SPARE_FDS;
    match host::raise_fd_limit(wanted) {
        Ok(limit) if limit < wanted => Err(ConfigError::FdLimit {
            connections,
            wanted,
            limit,
        }
        .into()),
        _ => Ok(()),
    }
}

/// A run longer than this without a duration is bounded anyway (count runs against a slow
/// target must end).
const MAX_RUN: Duration = Duration::from_secs(24 * 3600);

impl Run {
    /// Checks the configuration and fixes the clock: the run starts now.
    pub fn new(cfg: LoadConfig) -> Result<Run, Error> {
        validate(&cfg)?;
        check_fd_room(cfg.connections)?;
        let start = Instant::now();
        let start_wall = SystemTime::now();
        let measure_start = start + cfg.warmup;
        let deadline = measure_start + cfg.duration.unwrap_or(MAX_RUN);
        let threads = cfg.threads;
        Ok(Run {
            cfg,
            window: OnceLock::new(),
            shared: Shared {
                start,
                start_wall,
                measure_start,
                deadline,
                stop: AtomicBool::new(false),
                claimed: AtomicU64::new(0),
                progress: (0..threads).map(|_| ThreadProgress::default()).collect(),
            },
        })
    }

    /// The shared state, for progress and for stopping early (set `stop`).
    pub fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The wall-clock time of `at`, an instant of this run (from the wall clock read with
    /// its start).
    pub fn wall_clock(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.shared.start) {
            Some(after) => self.shared.start_wall + after,
            None => self.shared.start_wall - self.shared.start.duration_since(at),
        }
    }

    /// The measured window, [start, end], once [`Run::run`] has returned: the span the
    /// result's rates are over (`duration_s` long).
    pub fn measured_window(&self) -> Option<[Instant; 2]> {
        self.window.get().copied()
    }

    /// Runs the load threads to the end and assembles the result.
    pub fn run(&self, client: Client<'_>) -> Result<(RunResult, Vec<ConnectionRow>), Error> {
        let cfg = &self.cfg;
        let shared = &self.shared;
        let request = cfg.request.clone().unwrap_or_default();
        let per_thread = split(cfg.connections, cfg.threads);
        let mut cpu_start = None;
        let mut cpu_end = None;
        let recorders = std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for (index, &slots) in per_thread.iter().enumerate() {
                let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[index % cfg.cpus.len()]);
                let request = &request;
                let handle = std::thread::Builder::new()
                    .name(format!("tlsscope-load-{index}"))
                    .spawn_scoped(scope, move || -> Result<Recorder, Error> {
                        if let Some(cpu) = cpu {
                            host::pin_current_thread(cpu).map_err(|source| Error::Pin {
                                thread: index,
                                cpu,
                                source,
                            })?;
                        }
                        let worker = worker::Worker {
                            index,
                            cfg,
                            shared,
                            client,
                            request,
                            slots,
                        };
                        worker.run().map_err(|source| Error::Thread {
                            thread: index,
                            source,
                        })
                    })
                    .map_err(|source| Error::Thread {
                        thread: index,
                        source,
                    })?;
                handles.push(handle);
            }
            // Sample CPU at the start of the measured window.
            let wait = shared
                .measure_start
                .saturating_duration_since(Instant::now());
            std::thread::sleep(wait);
            cpu_start = Some(CpuSample::take(cfg.server_pid));
            if cfg.duration.is_some() {
                // The window ends at the deadline; the threads then drain what is in flight,
                // which is neither counted nor charged to the window's CPU.
                let wait = shared.deadline.saturating_duration_since(Instant::now());
                while !shared.stop.load(Relaxed) && Instant::now() < shared.deadline {
                    std::thread::sleep(wait.min(Duration::from_millis(50)));
                }
                cpu_end = Some(CpuSample::take(cfg.server_pid));
            }
            let mut recorders = Vec::new();
            for handle in handles {
                match handle.join() {
                    Ok(r) => recorders.push(r?),
                    Err(_) => {
                        return Err(Error::Thread {
                            thread: recorders.len(),
                            source: std::io::Error::other("load thread panicked"),
                        })
                    }
                }
            }
            Ok(recorders)
        })?;
        let cpu_end = cpu_end.unwrap_or_else(|| CpuSample::take(cfg.server_pid));
        let cpu_start = cpu_start.unwrap_or_else(|| cpu_end.clone());
        Ok(self.assemble(client.info(), recorders, &cpu_start, &cpu_end))
    }

    fn assemble(
        &self,
        client: ClientInfo,
        recorders: Vec<Recorder>,
        cpu_start: &CpuSample,
        cpu_end: &CpuSample,
    ) -> (RunResult, Vec<ConnectionRow>) {
        let cfg = &self.cfg;
        let thread_busy_pct: Vec<f64> = recorders
            .iter()
            .map(|r| pct(r.thread_cpu_s, r.window_s))
            .collect();
        let mut all = Recorder::default();
        for r in recorders {
            all.merge(r);
        }
        let window_start = self.shared.measure_start.max(cpu_start.at);
        let _ = self
            .window
            .set([window_start, cpu_end.at.max(window_start)]);
        let window_s = cpu_end
            .at
            .saturating_duration_since(window_start)
            .as_secs_f64()
            .max(1e-9);
        let (full, by_id, by_ticket) = all.handshake_kinds();
        let handshakes = full + by_id + by_ticket;
        let per_s = |n: u64| n as f64 / window_s;
        let mut warnings = Vec::new();
        let busiest = thread_busy_pct.iter().cloned().fold(0.0, f64::max);
        let cpu = cpu_usage(
            cpu_start,
            cpu_end,
            Work {
                handshakes,
                requests: all.requests,
                ops: all.ops,
            },
            window_s,
            thread_busy_pct,
        );
        let server_busy = cpu.server.as_ref().map(|s| s.busy_pct);
        let client_bottleneck = bottleneck(busiest, server_busy, cfg.mode, client.engine);
        let resumption = resumption_check(cfg.mode, &all);
        if let Some(problem) = &resumption.problem {
            warnings.push(problem.clone());
        }
        let lost = target_lost(&all.per_second);
        if let Some(at) = lost {
            let up = all.per_second[..at].iter().map(|s| s.0).sum::<u64>();
            let errors_after: u64 = all.per_second[at..].iter().map(|s| s.1).sum();
            warnings.push(format!(
                "the target stopped answering {at} s into the {window_s:.1} s window: no operation completed after it, {errors_after} errors did; the rates are over the whole window, {:.1}/s while it answered",
                up as f64 / at as f64
            ));
        }
        let wire = all.wire.summary();
        if wire.is_none() && handshakes > 0 {
            warnings.push(format!(
                "no wire figures: the client's library ({}) has no message callback \
                 (SSL_set_msg_callback)",
                client.library
            ));
        }
        let errors_total = all.errors.values().sum();
        let mut rows = std::mem::take(&mut all.rows);
        rows.sort_by_key(|r| r.start_us);
        let result = RunResult {
            client,
            mode: cfg.mode.kind(),
            target: cfg.target.to_string(),
            threads: cfg.threads,
            connections: cfg.connections,
            rate_per_s: cfg.rate,
            duration_s: window_s,
            warmup_s: cfg.warmup.as_secs_f64(),
            ops: all.ops,
            ops_per_s: per_s(all.ops),
            handshakes: HandshakeCounts {
                total: handshakes,
                full,
                resumed_session_id: by_id,
                resumed_ticket: by_ticket,
                per_s: per_s(handshakes).round() as u64,
            },
            requests: all.requests,
            requests_per_s: per_s(all.requests),
            body_bytes: all.body_bytes,
            negotiated: negotiated_counts(&all),
            resumption,
            latency: Latencies {
                connect: all.hist.connect.summary(),
                handshake: all.hist.handshake.summary(),
                ttfb: all.hist.ttfb.summary(),
                request: all.hist.request.summary(),
                total: all.hist.total.summary(),
                total_uncorrected: all.hist.total_uncorrected.summary(),
                pacer_late: all.hist.pacer_late.summary(),
            },
            errors: all.errors,
            errors_total,
            http_status: all
                .status
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
            cpu,
            per_second: all
                .per_second
                .iter()
                .map(|&(ops, errors)| result::SecondCounts { ops, errors })
                .collect(),
            target_lost_at_s: lost.map(|at| at as f64),
            ops_per_s_while_up: lost
                .map(|at| all.per_second[..at].iter().map(|s| s.0).sum::<u64>() as f64 / at as f64),
            wire,
            warnings,
            client_bottleneck,
            interrupted: self.shared.stop.load(Relaxed),
        };
        (result, rows)
    }
}

/// The second (from the window's start) after which the target answered no more: operations
/// completed before it, none in any later second, and errors in them. A run that merely ended
/// in a slow second, or a target that never answered, is not that.
fn target_lost(per_second: &[(u64, u64)]) -> Option<usize> {
    let last_op = per_second.iter().rposition(|s| s.0 > 0)?;
    let after = &per_second[last_op + 1..];
    after.iter().any(|s| s.1 > 0).then_some(last_op + 1)
}

fn validate(cfg: &LoadConfig) -> Result<(), ConfigError> {
    if cfg.threads == 0 {
        return Err(ConfigError::ThreadsZero);
    }
    if cfg.connections < cfg.threads {
        return Err(ConfigError::ConnectionsBelowThreads {
            connections: cfg.connections,
            threads: cfg.threads,
        });
    }
    if cfg.duration.is_none() && cfg.count.is_none() {
        return Err(ConfigError::NoEnd);
    }
    if let Some(rate) = cfg.rate {
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(ConfigError::Rate { rate });
        }
    }
    if cfg.mode == Mode::KeepAlive && cfg.request.is_none() {
        return Err(ConfigError::KeepAliveWithoutRequest);
    }
    if let Mode::Resume { ratio, .. } = cfg.mode {
        if !(0.0..=1.0).contains(&ratio) {
            return Err(ConfigError::ResumeRatio { ratio });
        }
    }
    if cfg.timeout.is_zero() {
        return Err(ConfigError::TimeoutZero);
    }
    Ok(())
}

/// `total` split into `parts` nearly equal shares.
fn split(total: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| total / parts + usize::from(i < total % parts))
        .collect()
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole <= 0.0 {
        0.0
    } else {
        100.0 * part / whole
    }
}

fn negotiated_counts(all: &Recorder) -> Vec<NegotiatedCount> {
    let mut out: Vec<NegotiatedCount> = all
        .handshakes
        .iter()
        .map(|(ids, &count)| {
            let n = all.names.get(ids).cloned();
            NegotiatedCount {
                version: n.as_ref().map(|n| n.version.clone()).unwrap_or_default(),
                cipher: n.as_ref().map(|n| n.cipher.clone()).unwrap_or_default(),
                cipher_standard: n.as_ref().and_then(|n| n.cipher_standard.clone()),
                group: n.as_ref().and_then(|n| n.group.clone()),
                signature: n.as_ref().and_then(|n| n.signature.clone()),
                server_key: n.as_ref().and_then(|n| n.server_key.clone()),
                handshake: ids.kind.name().to_string(),
                count,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.handshake.cmp(&b.handshake))
    });
    out
}

/// The resumption rule of the mode: full runs must not resume; resume runs must resume at
/// least 99% of the handshakes that offered a session, the requested way.
fn resumption_check(mode: Mode, all: &Recorder) -> ResumptionCheck {
    let r = &all.resumption;
    let ratio = if r.offered == 0 {
        1.0
    } else {
        r.resumed as f64 / r.offered as f64
    };
    let mut check = ResumptionCheck {
        offered: r.offered,
        resumed: r.resumed,
        resumed_other_kind: r.resumed_other_kind,
        no_session: r.no_session,
        unexpected_resumptions: r.unexpected,
        resumed_ratio: ratio,
        ok: true,
        problem: None,
    };
    let problem = match mode {
        Mode::Full if r.unexpected > 0 => Some(format!(
            "handshakes resumed in a full-handshake run: {}",
            r.unexpected
        )),
        Mode::Resume { ratio: wanted, by } => {
            let (full, _, _) = all.handshake_kinds();
            if wanted > 0.0 && r.offered == 0 && full > 0 {
                Some(format!(
                    "no handshake could offer a session: the server gave none it could resume \
                     (connections that ended without a resumable session: {}; are its session \
                     cache and tickets off?)",
                    r.no_session
                ))
            } else if r.offered > 0 && ratio < 0.99 {
                Some(format!(
                    "of the handshakes that offered a session, only {} of {} resumed ({:.1}%, needed 99%)",
                    r.resumed,
                    r.offered,
                    100.0 * ratio
                ))
            } else if r.resumed_other_kind > 0 {
                let asked = match by {
                    ResumeBy::Ticket => "tickets",
                    ResumeBy::SessionId => "session IDs",
                };
                Some(format!(
                    "resumptions that did not use {asked} as asked: {} of {}",
                    r.resumed_other_kind, r.resumed
                ))
            } else {
                None
            }
        }
        _ => None,
    };
    if let Some(p) = problem {
        check.ok = false;
        check.problem = Some(p);
    }
    check
}

/// Process and server CPU at one moment.
#[derive(Clone, Debug)]
struct CpuSample {
    at: Instant,
    user_s: f64,
    system_s: f64,
    /// (pid, user s, system s, total s): the split in clock ticks, the total to the ns.
    server: Option<(u32, f64, f64, f64)>,
}

impl CpuSample {
    fn take(server_pid: Option<u32>) -> CpuSample {
        let (user_s, system_s) = host::process_cpu_s();
        CpuSample {
            at: Instant::now(),
            user_s,
            system_s,
            server: server_pid.and_then(|pid| {
                let (u, s) = host::proc_cpu_s(pid)?;
                Some((pid, u, s, host::proc_cpu_total_s(pid).unwrap_or(u + s)))
            }),
        }
    }
}

/// What the measured window did, for the CPU figures per unit of work.
struct Work {
    handshakes: u64,
    requests: u64,
    ops: u64,
}

/// `cpu_s` per `n` things, scaled by `scale` (0 when there were none).
fn per_unit(cpu_s: f64, n: u64, scale: f64) -> f64 {
    if n == 0 {
        0.0
    } else {
        scale * cpu_s / n as f64
    }
}

/// A load thread was over 90% busy while the server was not: the client may have set the
/// rate. What helps is more threads on more CPUs or, for full handshakes with the OpenSSL
/// client, the cheaper rustls client.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientBottleneck {
    /// The busiest load thread's share of a CPU.
    pub busiest_pct: f64,
    /// The server's share of a CPU, when its process is known.
    pub server_busy_pct: Option<f64>,
    /// The run made full handshakes with the OpenSSL client, for which rustls is cheaper.
    pub cheaper_engine: bool,
}

impl std::fmt::Display for ClientBottleneck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cheaper = if self.cheaper_engine {
            "; or the cheaper client for full handshakes, the rustls engine (see bench/client-cost)"
        } else {
            ""
        };
        write!(
            f,
            "the client was the bottleneck: a load thread was {:.0}% busy{}; add load threads \
             with a CPU each{cheaper}, or the figures describe tlsscope rather than the server",
            self.busiest_pct,
            server_busy(self.server_busy_pct)
        )
    }
}

/// " while the server was N% busy", when known.
pub fn server_busy(pct: Option<f64>) -> String {
    match pct {
        Some(s) => format!(" while the server was {s:.0}% busy"),
        None => String::new(),
    }
}

/// Whether a finished run's client set its rate, by the rule a run applies as it ends (see
/// [`bottleneck`]): for results read back from a document, which does not keep the verdict.
pub fn bottleneck_of(r: &result::RunResult) -> Option<ClientBottleneck> {
    let busiest = r.cpu.thread_busy_pct.iter().cloned().fold(0.0, f64::max);
    let mode = match r.mode {
        result::RunMode::Full => Mode::Full,
        _ => Mode::KeepAlive,
    };
    bottleneck(
        busiest,
        r.cpu.server.as_ref().map(|s| s.busy_pct),
        mode,
        r.client.engine,
    )
}

/// A load thread over 90% busy means the client may have set the rate. With the server's
/// share known: only while the server was not as busy (both saturated is a fair fight).
fn bottleneck(
    busiest: f64,
    server_busy: Option<f64>,
    mode: Mode,
    engine: EngineKind,
) -> Option<ClientBottleneck> {
    if busiest <= 90.0 || server_busy.is_some_and(|s| s >= 90.0) {
        return None;
    }
    Some(ClientBottleneck {
        busiest_pct: busiest,
        server_busy_pct: server_busy,
        cheaper_engine: mode == Mode::Full && engine == EngineKind::Openssl,
    })
}

fn cpu_usage(
    start: &CpuSample,
    end: &CpuSample,
    work: Work,
    window_s: f64,
    thread_busy_pct: Vec<f64>,
) -> CpuUsage {
    let Work {
        handshakes,
        requests,
        ops,
    } = work;
    let user_s = end.user_s - start.user_s;
    let system_s = end.system_s - start.system_s;
    let cpu_s = user_s + system_s;
    let server = match (start.server, end.server) {
        (Some((pid, u0, s0, t0)), Some((_, u1, s1, t1))) => Some(ServerCpu {
            pid,
            user_s: u1 - u0,
            system_s: s1 - s0,
            busy_pct: pct(t1 - t0, window_s),
            cpu_us_per_handshake: per_unit(t1 - t0, handshakes, 1e6),
            cpu_us_per_request: per_unit(t1 - t0, requests, 1e6),
        }),
        _ => None,
    };
    let per = |n: u64, d: f64| if d > 0.0 { n as f64 / d } else { 0.0 };
    CpuUsage {
        client_user_s: user_s,
        client_system_s: system_s,
        client_cpu_s_per_1000_handshakes: per_unit(cpu_s, handshakes, 1000.0),
        client_cpu_s_per_1000_requests: per_unit(cpu_s, requests, 1000.0),
        handshakes_per_client_cpu_s: per(handshakes, cpu_s),
        connections_per_user_s: per(if handshakes > 0 { handshakes } else { ops }, user_s),
        thread_busy_pct,
        server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_that_stops_answering_is_dated_to_the_second() {
        let up = (1000, 0);
        assert_eq!(target_lost(&[up, up, (400, 3), (0, 50), (0, 40)]), Some(3));
        // Healthy to the end, or a slow last second without errors: nothing to say.
        assert_eq!(target_lost(&[up, up, up]), None);
        assert_eq!(target_lost(&[up, up, (0, 0)]), None);
        // Never answered: the errors say it, not a date.
        assert_eq!(target_lost(&[(0, 9), (0, 9)]), None);
    }

    #[test]
    fn the_client_is_the_bottleneck_only_while_the_server_is_not() {
        let ossl = EngineKind::Openssl;
        assert_eq!(bottleneck(80.0, Some(50.0), Mode::Full, ossl), None);
        assert_eq!(
            bottleneck(98.0, Some(95.0), Mode::Full, ossl),
            None,
            "both saturated"
        );
        let b = bottleneck(98.0, Some(52.0), Mode::Full, ossl).unwrap();
        assert_eq!(
            b,
            ClientBottleneck {
                busiest_pct: 98.0,
                server_busy_pct: Some(52.0),
                cheaper_engine: true
            }
        );
        let w = b.to_string();
        assert!(w.contains("98% busy while the server was 52% busy"), "{w}");
        assert!(
            w.contains("load threads") && w.contains("rustls engine"),
            "{w}"
        );
        assert!(!w.contains("--"), "a library names no flag: {w}");
        let b = bottleneck(98.0, None, Mode::KeepAlive, ossl).unwrap();
        assert!(b.server_busy_pct.is_none() && !b.cheaper_engine, "{b:?}");
        assert!(!b.to_string().contains("server was"), "{b}");
        // Already the cheaper engine: only more threads help.
        let b = bottleneck(98.0, Some(52.0), Mode::Full, EngineKind::Rustls).unwrap();
        assert!(!b.cheaper_engine, "{b:?}");
    }

    #[test]
    fn config_errors_name_the_numbers_not_flags() {
        let mut cfg = LoadConfig {
            target: SocketAddr::from(([127, 0, 0, 1], 443)),
            server_name: None,
            verify_host: None,
            threads: 4,
            connections: 2,
            cpus: vec![],
            duration: Some(Duration::from_secs(1)),
            count: None,
            warmup: Duration::ZERO,
            mode: Mode::Full,
            request: None,
            rate: None,
            schedule_offset: Duration::ZERO,
            timeout: Duration::from_secs(1),
            record_connections: false,
            source_ips: vec![],
            server_pid: None,
        };
        let e = validate(&cfg).unwrap_err();
        assert_eq!(
            e,
            ConfigError::ConnectionsBelowThreads {
                connections: 2,
                threads: 4
            }
        );
        assert!(
            e.to_string().starts_with("2 connections are fewer than 4"),
            "{e}"
        );
        cfg.connections = 4;
        assert_eq!(validate(&cfg), Ok(()));
        cfg.mode = Mode::KeepAlive;
        assert_eq!(validate(&cfg), Err(ConfigError::KeepAliveWithoutRequest));
        cfg.mode = Mode::Resume {
            by: ResumeBy::Ticket,
            ratio: 1.5,
        };
        assert_eq!(validate(&cfg), Err(ConfigError::ResumeRatio { ratio: 1.5 }));
    }

    #[test]
    fn split_spreads_the_remainder() {
        assert_eq!(split(10, 3), vec![4, 3, 3]);
        assert_eq!(split(2, 2), vec![1, 1]);
    }

    #[test]
    fn resumption_rule() {
        let mut r = Recorder::default();
        r.resumption.offered = 1000;
        r.resumption.resumed = 989;
        let mode = Mode::Resume {
            by: ResumeBy::Ticket,
            ratio: 1.0,
        };
        let c = resumption_check(mode, &r);
        assert!(!c.ok);
        assert!(c.problem.unwrap().contains("989 of 1000"));
        r.resumption.resumed = 990;
        assert!(resumption_check(mode, &r).ok);
        r.resumption.resumed_other_kind = 3;
        assert!(!resumption_check(mode, &r).ok);
        let mut full = Recorder::default();
        full.resumption.unexpected = 1;
        assert!(!resumption_check(Mode::Full, &full).ok);
    }
}
