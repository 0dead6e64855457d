//! One load run, as `bench`, the lab's experiments and compare's load experiment make it: the
//! run in its threads, a watcher that stops it when asked and reports progress, the result,
//! and the check every caller makes of it. Nothing printed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use load::result::RunMode;
use load::{LoadConfig, Run, RunResult};

use crate::common::error::Result;

/// What a progress display gets every 50 ms: time since the start, operations and errors so
/// far, and the measured window's length.
pub struct Progress {
    pub elapsed: Duration,
    pub ops: u64,
    pub errors: u64,
    pub measured: Duration,
}

/// Runs `cfg` with `client` until it ends or `interrupted` is set; `progress` is called about
/// every 50 ms meanwhile (from another thread).
pub fn run(
    client: load::Client<'_>,
    cfg: LoadConfig,
    interrupted: &AtomicBool,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(RunResult, Vec<load::result::ConnectionRow>)> {
    let (result, rows, _) = run_clocked(client, cfg, interrupted, progress)?;
    Ok((result, rows))
}

/// When a run was, on the wall clock.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    /// When the load began (connections opened, warm-up started).
    pub started: SystemTime,
    /// The measured window, [start, end]: the span the result's rates are over.
    pub window: [SystemTime; 2],
}

/// Like [`run`], saying when the run and its measured window were on the wall clock.
pub fn run_clocked(
    client: load::Client<'_>,
    cfg: LoadConfig,
    interrupted: &AtomicBool,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(RunResult, Vec<load::result::ConnectionRow>, WallClock)> {
    let run = Run::new(cfg)?;
    let outcome = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&run, interrupted, progress));
        let outcome = run.run(client);
        run.shared().stop.store(true, Ordering::Relaxed);
        let _ = watcher.join();
        outcome
    })?;
    let (mut result, rows) = outcome;
    let shared = run.shared();
    let [from, to] = run
        .measured_window()
        .unwrap_or([shared.measure_start, shared.measure_start]);
    let clock = WallClock {
        started: shared.start_wall,
        window: [run.wall_clock(from), run.wall_clock(to)],
    };
    // The library says the client was the bottleneck; this layer says which flags help.
    if let Some(b) = result.client_bottleneck.take() {
        result
            .warnings
            .insert(0, crate::common::wording::client_bottleneck(&b));
    }
    Ok((result, rows, clock))
}

fn watch(run: &Run, interrupted: &AtomicBool, progress: &(dyn Fn(&Progress) + Sync)) {
    let shared = run.shared();
    let started = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        if interrupted.load(Ordering::Relaxed) {
            shared.stop.store(true, Ordering::Relaxed);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        let (ops, errors) = shared.progress_totals();
        progress(&Progress {
            elapsed: started.elapsed(),
            ops,
            errors,
            measured: Instant::now().saturating_duration_since(shared.measure_start),
        });
    }
}

/// The source addresses for a target: several loopback addresses for a loopback IPv4 target
/// (so long full-handshake runs never run out of local ports), else the kernel's choice.
pub fn source_ips(target: SocketAddr, count: u8) -> Vec<IpAddr> {
    match target.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && count > 1 => (1..=count)
            .map(|last| IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))
            .collect(),
        _ => Vec::new(),
    }
}

/// How a run broke its own rules. Its text is the command layer's one line (it names the
/// options that would mend it), the same for every command that runs load.
#[derive(Debug, Clone, PartialEq)]
pub enum RunProblem {
    /// The mode's resumption rule was not met (the load engine says how).
    Resumption { mode: RunMode, problem: String },
    /// Operations failed: the total, and the count of each kind.
    Errors {
        total: u64,
        kinds: Vec<(String, u64)>,
    },
    /// In keep-alive, connections were still being set up when the measured window closed.
    ConnectionsNotUp {
        connected: u64,
        connections: u64,
        handshakes_per_s: f64,
    },
    /// Nothing completed in the measured window.
    Empty,
}

impl std::fmt::Display for RunProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunProblem::Resumption { mode, problem } => write!(f, "--mode {mode}: {problem}"),
            RunProblem::Errors { total, kinds } => {
                let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}: {n}")).collect();
                write!(
                    f,
                    "{} failed ({})",
                    crate::render::words::count(*total, "operation"),
                    kinds.join(", ")
                )
            }
            RunProblem::ConnectionsNotUp {
                connected,
                connections,
                handshakes_per_s: rate,
            } => {
                let needed = if *rate > 0.0 {
                    format!(
                        " (about {:.0} s at this server's {rate:.0} handshakes/s)",
                        *connections as f64 / rate
                    )
                } else {
                    String::new()
                };
                write!(
                    f,
                    "no request completed in the measured window: {connected} of {} had finished their handshake by its end, and the server was busy with the rest; give --warmup time for all of them to come up{needed}, or use fewer connections",
                    crate::render::words::count(*connections, "connection")
                )
            }
            RunProblem::Empty => f.write_str("no operation completed in the measured window"),
        }
    }
}

impl std::error::Error for RunProblem {}

/// A run that broke its own rules (errors, resumption not obtained, nothing done).
pub fn check(r: &RunResult) -> std::result::Result<(), RunProblem> {
    if let Some(problem) = &r.resumption.problem {
        return Err(RunProblem::Resumption {
            mode: r.mode,
            problem: problem.clone(),
        });
    }
    if r.errors_total > 0 {
        return Err(RunProblem::Errors {
            total: r.errors_total,
            kinds: r.errors.iter().map(|(k, n)| (k.clone(), *n)).collect(),
        });
    }
    if r.ops == 0 {
        return Err(empty_window(r));
    }
    Ok(())
}

/// Why a run measured nothing, where it can be told: in keep-alive, connections that were still
/// being set up when the window closed (each starts its requests once its handshake is done,
/// but a server busy with thousands of handshakes answers little else).
fn empty_window(r: &RunResult) -> RunProblem {
    let connected = r.handshakes.total;
    if r.mode == RunMode::Keepalive && connected < r.connections as u64 {
        return RunProblem::ConnectionsNotUp {
            connected,
            connections: r.connections as u64,
            handshakes_per_s: connected as f64 / r.duration_s.max(1e-9),
        };
    }
    RunProblem::Empty
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_keepalive_window_says_how_many_connections_came_up() {
        let mut r = RunResult {
            mode: RunMode::Keepalive,
            connections: 5000,
            duration_s: 3.0,
            ..RunResult::default()
        };
        r.handshakes.total = 3000;
        let why = check(&r).unwrap_err().to_string();
        assert!(why.contains("3000 of 5000 connections"), "{why}");
        assert!(why.contains("--warmup"), "{why}");
        assert!(why.contains("about 5 s"), "{why}");
        r.mode = RunMode::Full;
        assert_eq!(
            check(&r).unwrap_err().to_string(),
            "no operation completed in the measured window"
        );
    }
}
