//! Tracing, as `trace` and the lab do it: what to attach to, the trace document built from a
//! tracer, and the kernel's cells grouped per function and outcome.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use probes::latency::SYSCALL_EXITS_EFFECT;
use probes::{catalog, Buckets, Edge, Outcome, Snapshot, Target, TraceConfig, Tracer};
use report::trace::{
    BucketScheme, FunctionStats, KernelHookDoc, MissingDoc, Overhead, ProbeDoc, TraceDocument,
};
use stats::buckets::{summarize, Bucket};

use crate::error::Result;
use crate::fail;

/// The one line worth saying about the tracer's syscall hooks, if any (a private tracefs mount,
/// or hooks missing and what that costs).
pub fn syscall_hooks_note(tracer: &Tracer) -> Option<String> {
    tracer
        .syscall_hooks()?
        .note(Edge::Exit, SYSCALL_EXITS_EFFECT)
}

/// Checks what to attach to (shared by trace and sniff, `verb` naming which) and turns it into
/// targets: processes, programs with TLS linked in, libraries; `comm` is checked here too.
pub fn targets(
    pids: &[u32],
    binary: &[PathBuf],
    lib: &[PathBuf],
    comm: Option<&str>,
    verb: &str,
) -> Result<Vec<Target>> {
    if pids.is_empty() && binary.is_empty() && lib.is_empty() {
        fail!("nothing to {verb}: give -p PID, --binary PATH or --lib PATH");
    }
    if let Some(comm) = comm {
        if comm.is_empty() || comm.len() > 15 {
            fail!("--comm {comm:?}: a thread name is 1 to 15 bytes (as in /proc/PID/comm)");
        }
    }
    for pid in pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            fail!("no process with PID {pid}");
        }
    }
    let mut targets = Vec::new();
    // With --binary or --lib, the PIDs filter; alone, they also say which libraries to use.
    if binary.is_empty() && lib.is_empty() {
        targets.extend(pids.iter().map(|&p| Target::Pid(p)));
    }
    for path in binary {
        if !path.is_file() {
            fail!("--binary {}: no such file", path.display());
        }
        targets.push(Target::Binary(path.clone()));
    }
    for path in lib {
        if !path.is_file() {
            fail!("--lib {}: no such file", path.display());
        }
        targets.push(Target::Library(path.clone()));
    }
    Ok(targets)
}

/// "pid 1, library /x.so".
pub fn target_words(targets: &[Target]) -> String {
    targets
        .iter()
        .map(|t| match t {
            Target::Pid(p) => format!("pid {p}"),
            Target::Binary(p) => format!("binary {}", p.display()),
            Target::Library(p) => format!("library {}", p.display()),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A process that exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// The document's parts known once tracing is over, before the tracer (and its list of
/// attached probes) is dropped. The figures are filled in from the final snapshot.
pub fn document(
    targets: &[Target],
    config: &TraceConfig,
    tracer: &Tracer,
    elapsed: Duration,
    environment: report::Environment,
) -> TraceDocument {
    let mut doc = TraceDocument::new(environment);
    doc.targets = targets
        .iter()
        .map(|t| target_words(std::slice::from_ref(t)))
        .collect();
    doc.buckets = match config.buckets {
        Buckets::Log2 => BucketScheme {
            kind: "log2".into(),
            ..BucketScheme::default()
        },
        Buckets::Linear {
            min_us,
            max_us,
            step_us,
        } => BucketScheme {
            kind: "linear".into(),
            min_us: Some(min_us),
            max_us: Some(max_us),
            step_us: Some(step_us),
        },
    };
    doc.duration_s = elapsed.as_secs_f64();
    doc.attached = tracer
        .attached()
        .iter()
        .map(|a| ProbeDoc {
            function: a.point.function.name.to_string(),
            symbol: a.point.symbol.to_string(),
            path: a.point.path.display().to_string(),
            offset: a.point.offset,
            pid: i64::from(a.point.pid),
        })
        .collect();
    doc.not_attached = tracer
        .not_attached()
        .iter()
        .map(|m| MissingDoc {
            function: m.function.to_string(),
            path: m.path.display().to_string(),
            reason: m.reason.clone(),
        })
        .collect();
    doc.kernel_hooks = tracer
        .syscall_hooks()
        .map(|h| KernelHookDoc {
            hooks: Edge::Exit.hooks_name(),
            attached: h.attached(),
            detail: h.detail(),
            effect: if h.attached() {
                String::new()
            } else {
                SYSCALL_EXITS_EFFECT.to_string()
            },
        })
        .into_iter()
        .collect();
    if let Some(c) = tracer.calibration() {
        doc.overhead = Overhead {
            calibration_calls: c.calls,
            plain_ns_per_call: c.plain_ns_per_call,
            probed_ns_per_call: c.probed_ns_per_call,
            cost_ns_per_call: c.cost_ns_per_call(),
            ..Overhead::default()
        };
    }
    doc
}

/// Groups the kernel's cells into one entry per (process, function, outcome), in catalog
/// order, then outcome order.
pub fn function_stats(snapshot: &Snapshot, buckets: Buckets) -> Vec<FunctionStats> {
    let mut keys: Vec<(u16, Outcome, u32)> = snapshot
        .cells
        .iter()
        .map(|c| (c.function, c.outcome, c.pid))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for (function, outcome, pid) in keys {
        let Some(f) = catalog::function(function) else {
            continue;
        };
        let cells = snapshot
            .cells
            .iter()
            .filter(|c| (c.function, c.outcome, c.pid) == (function, outcome, pid));
        let mut list: Vec<Bucket> = Vec::new();
        let mut total_ns = 0;
        for c in cells {
            let (low_us, high_us) = buckets.range_us(c.bucket);
            list.push(Bucket {
                low_us,
                high_us,
                count: c.count,
            });
            total_ns += c.total_ns;
        }
        list.sort_by_key(|b| b.low_us);
        out.push(FunctionStats {
            function: f.name.to_string(),
            group: f.group.name().to_string(),
            outcome: outcome.name().to_string(),
            pid: (pid != 0).then_some(pid),
            summary: summarize(&list, total_ns),
            buckets: list,
        });
    }
    out
}

/// When a trace ends: after `duration`, when `stop` is set, or when every process of `pids`
/// (if any) has exited.
pub struct Until<'a> {
    pub duration: Option<Duration>,
    pub pids: &'a [u32],
    pub stop: &'a AtomicBool,
}

/// Waits for the end; every `interval`, `each` gets the calls since the last one and the time
/// since the start. Returns why it ended early, if it did ("signal", "the traced process
/// exited"); None when the duration ran out.
pub fn watch(
    tracer: &Tracer,
    until: &Until<'_>,
    interval: Option<Duration>,
    buckets: Buckets,
    each: &mut dyn FnMut(&[FunctionStats], Duration) -> std::io::Result<()>,
) -> Result<Option<String>> {
    let started = Instant::now();
    let mut last = tracer.snapshot()?;
    let mut next = interval.map(|i| started + i);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if until.stop.load(Ordering::Relaxed) {
            return Ok(Some("signal".into()));
        }
        if until.duration.is_some_and(|d| started.elapsed() >= d) {
            return Ok(None);
        }
        if !until.pids.is_empty() && until.pids.iter().all(|&p| !alive(p)) {
            return Ok(Some("the traced process exited".into()));
        }
        if let (Some(at), Some(every)) = (next, interval) {
            if Instant::now() >= at {
                let now = tracer.snapshot()?;
                each(
                    &function_stats(&now.since(&last), buckets),
                    started.elapsed(),
                )?;
                last = now;
                next = Some(at + every);
            }
        }
    }
}

/// The document's figures from the final snapshot: calls per function and outcome, lost
/// cells, probed calls and what they cost.
pub fn fill(doc: &mut TraceDocument, snapshot: &Snapshot, buckets: Buckets) {
    doc.functions = function_stats(snapshot, buckets);
    doc.dropped_cells = snapshot.dropped_cells;
    doc.overhead.probed_calls = snapshot.calls;
    doc.overhead.estimated_cpu_s = snapshot.calls as f64 * doc.overhead.cost_ns_per_call / 1e9;
}

/// The files the probes are in, each once: "libssl.so.3, libcrypto.so.3".
pub fn file_names(attached: &[probes::latency::Attached]) -> String {
    let mut names: Vec<String> = Vec::new();
    for a in attached {
        let name = a.point.path.file_name().map_or_else(
            || a.point.path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names.join(", ")
}
