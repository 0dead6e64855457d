//! One load run, as `bench` and the lab's experiments make it: the run in its threads, a
//! watcher that stops it when asked and reports progress, and the result. Nothing printed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use load::result::RunMode;
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

/// Runs `cfg` with `client` until it ends or `interrupted` is set; `progress` is called about
/// every 50 ms meanwhile (from another thread).
pub fn run(
    client: load::Client<'_>,
    cfg: LoadConfig,
    interrupted: &AtomicBool,
    progress: &(dyn Fn(&Progress) + Sync),
) -> Result<(RunResult, Vec<load::result::ConnectionRow>)> {
    let run = Run::new(cfg)?;
    let outcome = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| watch(&run, interrupted, progress));
        let outcome = run.run(client);
        run.shared().stop.store(true, Ordering::Relaxed);
        let _ = watcher.join();
        outcome
    })?;
    let (mut result, rows) = outcome;
    // The library says the client was the bottleneck; this layer says which flags help.
    if let Some(b) = result.client_bottleneck.take() {
        result
            .warnings
            .insert(0, crate::wording::client_bottleneck(&b));
    }
    Ok((result, rows))
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

/// Why a run measured nothing, where it can be told: in keep-alive, connections that were still
/// being set up when the window closed (each starts its requests once its handshake is done,
/// but a server busy with thousands of handshakes answers little else).
fn empty_window(r: &RunResult) -> String {
    let connected = r.handshakes.total;
    if r.mode == RunMode::Keepalive && connected < r.connections as u64 {
        let rate = connected as f64 / r.duration_s.max(1e-9);
        let needed = if rate > 0.0 {
            format!(
                " (about {:.0} s at this server's {rate:.0} handshakes/s)",
                r.connections as f64 / rate
            )
        } else {
            String::new()
        };
        return format!(
            "no request completed in the measured window: {connected} of {} had finished their handshake by its end, and the server was busy with the rest; give --warmup time for all of them to come up{needed}, or use fewer connections",
            report::count(r.connections as u64, "connection")
        );
    }
    "no operation completed in the measured window".into()
}

/// A run that broke its own rules (errors, resumption not obtained, nothing done).
pub fn check(r: &RunResult) -> std::result::Result<(), String> {
    if let Some(problem) = &r.resumption.problem {
        return Err(format!("--mode {}: {problem}", r.mode));
    }
    if r.errors_total > 0 {
        let kinds: Vec<String> = r.errors.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        return Err(format!(
            "{} failed ({})",
            report::count(r.errors_total, "operation"),
            kinds.join(", ")
        ));
    }
    if r.ops == 0 {
        return Err(empty_window(r));
    }
    Ok(())
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
        let why = check(&r).unwrap_err();
        assert!(why.contains("3000 of 5000 connections"), "{why}");
        assert!(why.contains("--warmup"), "{why}");
        assert!(why.contains("about 5 s"), "{why}");
        r.mode = RunMode::Full;
        assert_eq!(
            check(&r).unwrap_err(),
            "no operation completed in the measured window"
        );
    }
}
