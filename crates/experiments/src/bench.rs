//! One load run, as `bench` and the lab's experiments make it: the run in its threads, a
//! watcher that stops it when asked and reports progress, and the result. Nothing printed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use load::{LoadConfig, Run, RunResult};

use crate::error::Result;

/// What a progress display gets every 50 ms: time since the start, operations and errors so
/// far, and the measured window's length.
pub struct Progress {
    pub elapsed: Duration,
    pub ops: u64,
    pub errors: u64,
    pub measured: Duration,
}

/// Runs `cfg` with `ctx` until it ends or `interrupted` is set; `progress` is called about
/// every 50 ms meanwhile (from another thread).
pub fn run(
    ctx: &ossl::Context,
    cfg: LoadConfig,
    interrupted: &AtomicBool,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(RunResult, Vec<load::result::ConnectionRow>)> {
    let run = Run::new(cfg)?;
    let outcome = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&run, interrupted, progress));
        let outcome = run.run(ctx);
        run.shared().stop.store(true, Ordering::Relaxed);
        let _ = watcher.join();
        outcome
    })?;
    Ok(outcome)
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

/// A run that broke its own rules (errors, resumption not obtained, nothing done).
pub fn check(r: &RunResult) -> std::result::Result<(), String> {
    if let Some(problem) = &r.resumption.problem {
        return Err(format!("--mode {}: {problem}", r.mode));
    }
    if r.errors_total > 0 {
        let kinds: Vec<String> = r.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        return Err(format!(
            "{} operations failed ({})",
            r.errors_total,
            kinds.join(", ")
        ));
    }
    if r.ops == 0 {
        return Err("no operation completed in the measured window".into());
    }
    Ok(())
}
