//! `tlsscope trace`: attach the latency probes, read the kernel's histograms every interval and
//! at the end, print them, and detach on every way out.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use probes::latency::{Attached, SYSCALL_EXITS_EFFECT};
use probes::{catalog, Buckets, Edge, Outcome, Plan, Snapshot, Target, TraceConfig, Tracer};
use report::trace::{
    trace_footer, trace_json, trace_text, BucketScheme, FunctionStats, KernelHookDoc, MissingDoc,
    Overhead, ProbeDoc, TraceDocument,
};
use stats::buckets::{summarize, Bucket};

use crate::args::TraceArgs;
use crate::signals::StopFlags;

/// Calls of tlsscope's own function used to measure the cost of a probed call.
const CALIBRATION_CALLS: u64 = 20_000;

pub fn run(a: &TraceArgs) -> anyhow::Result<ExitCode> {
    probes::latency::check_can_trace()?;
    let targets = targets(a)?;
    let plan = Plan::with_functions(&targets, a.probes, &a.functions, a.exact_outcomes)?;
    let config = TraceConfig {
        pids: a.target.pids.clone(),
        comm: a.target.comm.clone(),
        buckets: a.linear.unwrap_or(Buckets::Log2),
        per_pid: a.per_pid,
        attach_all: a.attach_all,
    };
    let signals = StopFlags::install()?;
    let stop = signals.stop.clone();
    let mut tracer = Tracer::start(&config, &plan)?;
    tracer.calibrate(CALIBRATION_CALLS)?;
    let started = Instant::now();
    eprintln!(
        "tlsscope trace: {} functions attached in {} ({}); {}",
        tracer.attached().len(),
        files(tracer.attached()),
        target_words(&targets),
        match a.duration {
            Some(d) => format!("for {:.1} s, Ctrl-C to stop early", d.as_secs_f64()),
            None => "Ctrl-C to stop".to_string(),
        }
    );
    for m in tracer.not_attached() {
        eprintln!(
            "tlsscope trace: not traced: {} in {}: {}",
            m.function,
            m.path.display(),
            m.reason
        );
    }
    if let Some(note) = syscall_hooks_note(&tracer) {
        eprintln!("tlsscope trace: {note}");
    }

    // Fault injection for the tests: a panic while the probes are attached must still detach
    // them (the tracer's Drop runs as the panic unwinds).
    if std::env::var_os("TLSSCOPE_TEST_PANIC_WHILE_TRACING").is_some() {
        panic!("TLSSCOPE_TEST_PANIC_WHILE_TRACING is set");
    }
    let end = watch(a, &tracer, &stop, started);
    let snapshot = tracer.final_snapshot();
    let elapsed = started.elapsed();
    let mut doc = document(&targets, &config, &tracer, elapsed);
    // Detach before printing: a slow or closed stdout must not keep the probes in place.
    drop(tracer);
    let end = end?;
    let snapshot = snapshot?;
    doc.functions = function_stats(&snapshot, config.buckets);
    doc.dropped_cells = snapshot.dropped_cells;
    doc.overhead.probed_calls = snapshot.calls;
    doc.overhead.estimated_cpu_s = snapshot.calls as f64 * doc.overhead.cost_ns_per_call / 1e9;

    let mut out = BufWriter::new(io::stdout().lock());
    if let Some(reason) = &end.reason {
        writeln!(out, "tlsscope trace: stopped: {reason}")?;
    }
    trace_text(&mut out, &doc, !a.no_histograms)?;
    trace_footer(&mut out, &doc)?;
    out.flush()?;
    if let Some(path) = &a.json {
        let mut f = BufWriter::new(
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        trace_json(&mut f, &doc).with_context(|| format!("writing {}", path.display()))?;
        f.flush()
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}

/// The one line worth saying about the tracer's syscall hooks, if any (a private tracefs mount,
/// or hooks missing and what that costs).
pub fn syscall_hooks_note(tracer: &Tracer) -> Option<String> {
    tracer
        .syscall_hooks()?
        .note(Edge::Exit, SYSCALL_EXITS_EFFECT)
}

fn targets(a: &TraceArgs) -> anyhow::Result<Vec<Target>> {
    targets_of(&a.target, "trace")
}

/// Checks -p/--binary/--lib/-c (shared by trace and sniff) and turns them into targets.
pub fn targets_of(t: &crate::args::TargetArgs, verb: &str) -> anyhow::Result<Vec<Target>> {
    let (pids, binary, lib, comm) = (&t.pids, &t.binary, &t.lib, t.comm.as_deref());
    if pids.is_empty() && binary.is_empty() && lib.is_empty() {
        bail!("nothing to {verb}: give -p PID, --binary PATH or --lib PATH");
    }
    if let Some(comm) = comm {
        if comm.is_empty() || comm.len() > 15 {
            bail!("--comm {comm:?}: a thread name is 1 to 15 bytes (as in /proc/PID/comm)");
        }
    }
    for pid in pids {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("no process with PID {pid}");
        }
    }
    let mut targets = Vec::new();
    // With --binary or --lib, the PIDs filter; alone, they also say which libraries to use.
    if binary.is_empty() && lib.is_empty() {
        targets.extend(pids.iter().map(|&p| Target::Pid(p)));
    }
    for path in binary {
        if !path.is_file() {
            bail!("--binary {}: no such file", path.display());
        }
        targets.push(Target::Binary(path.clone()));
    }
    for path in lib {
        if !path.is_file() {
            bail!("--lib {}: no such file", path.display());
        }
        targets.push(Target::Library(path.clone()));
    }
    Ok(targets)
}

fn target_words(targets: &[Target]) -> String {
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

fn files(attached: &[Attached]) -> String {
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

/// Why the trace ended.
struct End {
    reason: Option<String>,
}

/// Waits for the end (duration, signal, traced processes gone), printing each interval.
fn watch(
    a: &TraceArgs,
    tracer: &Tracer,
    stop: &AtomicBool,
    started: Instant,
) -> anyhow::Result<End> {
    let tick = Duration::from_millis(50);
    let mut last = tracer.snapshot()?;
    let mut next_interval = a.interval.map(|i| started + i);
    loop {
        std::thread::sleep(tick);
        if stop.load(Ordering::Relaxed) {
            return Ok(End {
                reason: Some("signal".into()),
            });
        }
        if a.duration.is_some_and(|d| started.elapsed() >= d) {
            return Ok(End { reason: None });
        }
        if !a.target.pids.is_empty() && a.target.pids.iter().all(|&p| !alive(p)) {
            return Ok(End {
                reason: Some("the traced process exited".into()),
            });
        }
        if let (Some(at), Some(every)) = (next_interval, a.interval) {
            if Instant::now() >= at {
                let now = tracer.snapshot()?;
                print_interval(a, &now.since(&last), started.elapsed())?;
                last = now;
                next_interval = Some(at + every);
            }
        }
    }
}

fn print_interval(a: &TraceArgs, delta: &Snapshot, at: Duration) -> anyhow::Result<()> {
    let functions = function_stats(delta, a.linear.unwrap_or(Buckets::Log2));
    let mut out = io::stdout().lock();
    writeln!(out, "--- {:.1} s", at.as_secs_f64())?;
    report::trace::stats_table(&mut out, &functions)?;
    out.flush()?;
    Ok(())
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
fn document(
    targets: &[Target],
    config: &TraceConfig,
    tracer: &Tracer,
    elapsed: Duration,
) -> TraceDocument {
    let mut doc = TraceDocument::new(experiments::environment::host(std::env::args().collect()));
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
fn function_stats(snapshot: &Snapshot, buckets: Buckets) -> Vec<FunctionStats> {
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
