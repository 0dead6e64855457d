//! A trace, from its checked [`Config`] to its [`Traced`] result: [`run`] binds the metrics
//! exporter, attaches the probes (or starts the command under tlsscope's library), waits for
//! the end while handing each interval's calls to the caller, detaches, and returns the trace
//! document. It says how the trace was set up on stderr as it goes; the report is the caller's.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::latency::SYSCALL_EXITS_EFFECT;
use model::trace::{
    BucketScheme, FunctionStats, Interval, KernelHookDoc, MissingDoc, Overhead, ProbeDoc,
    TraceDocument, WrapperFailureDoc,
};
use probes::{Buckets, Edge, Snapshot, Trace};

use crate::common::error::Result;
use crate::common::latency::{function_stats, placement_doc, syscall_hooks_note};
use crate::common::metrics::Exporter;
use crate::common::probing::{
    alive, attached_words, end_program, planned_words, processes_only, spawn, user_first,
    watched_pids, without_crypto_in_async_jobs, BackendChoice, Until,
};
use crate::trace::config::Config;

/// Calls of tlsscope's own function used to measure the cost of a probed call.
const CALIBRATION_CALLS: u64 = 20_000;

/// How long a command tlsscope started has to exit after SIGTERM when the trace ends.
const CHILD_GRACE: Duration = Duration::from_secs(10);

/// How often the targets' process tree is read for children forked since the start (a read of
/// every /proc/PID/stat).
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// What a trace found: the document (figures, probes, environment), the intervals the HTML
/// page plots (kept only when it is asked for), and why the trace ended early, if it did.
pub struct Traced {
    pub doc: TraceDocument,
    pub intervals: Vec<Interval>,
    pub ended_by: Option<String>,
}

/// Runs the trace `config` asks for until its end (the duration, `stop`, or every traced
/// process gone); `each` gets every interval's calls as the interval ends (with -i).
/// The probes are detached before this returns, on every way out.
pub fn run(
    config: &Config,
    stop: &AtomicBool,
    each: &mut dyn FnMut(&[FunctionStats], IntervalEnd) -> io::Result<()>,
) -> anyhow::Result<Traced> {
    // The metrics first: a taken port or an unwritable file is found before anything is
    // attached or started.
    let mut exporter = Exporter::bind(config.metrics_listen, config.metrics_file.as_deref())?;
    let mut session = start(config)?;
    for note in &session.notes {
        eprintln!("tlsscope trace: {note}");
    }
    let tracer = &*session.tracer;
    let started = Instant::now();
    eprintln!(
        "tlsscope trace: {} {} ({}, {} backend); {}",
        crate::render::words::count(function_count(tracer.attached()) as u64, "function"),
        match tracer.backend() {
            probes::Backend::Kernel => format!("attached in {}", file_names(tracer.attached())),
            probes::Backend::User => "wrapped in process".to_string(),
        },
        session.targets.join(", "),
        tracer.backend().name(),
        match config.duration {
            Some(d) => format!("for {:.1} s, Ctrl-C to stop early", d.as_secs_f64()),
            None => "Ctrl-C to stop".to_string(),
        }
    );
    for m in tracer.not_attached() {
        eprintln!(
            "tlsscope trace: not traced: {} in {}: {}",
            m.function,
            m.path.display(),
            crate::common::wording::missing_reason(&m.reason)
        );
    }
    if let Some(note) = syscall_hooks_note(tracer) {
        eprintln!("tlsscope trace: {note}");
    }

    // Fault injection for the tests: a panic while the probes are attached must still detach
    // them (the tracer's Drop runs as the panic unwinds).
    if std::env::var_os("TLSSCOPE_TEST_PANIC_WHILE_TRACING").is_some() {
        panic!("TLSSCOPE_TEST_PANIC_WHILE_TRACING is set");
    }
    let watched = watched_pids(session.child.as_ref(), &config.attach.pids);
    let until = Until {
        duration: config.duration,
        pids: &watched,
        stop,
    };
    let buckets = config.probes.buckets;
    let cost = tracer.calibration().map_or(0.0, |c| c.cost_ns_per_call());
    let libraries = metric_libraries(tracer);
    let mut render = |format: crate::render::metrics::Format| {
        let snapshot = tracer.snapshot().map_err(|e| e.to_string())?;
        let m = metrics(&snapshot, buckets, tracer, cost, &libraries);
        Ok(crate::render::metrics::exposition(&m, format))
    };
    if let Some(addr) = exporter.addr() {
        eprintln!("tlsscope trace: metrics at http://{addr}/metrics");
    }
    let mut intervals: Vec<Interval> = Vec::new();
    let mut keep = |functions: &[FunctionStats], end: IntervalEnd| {
        // The page plots calls per interval: a partial one would show as a false drop.
        if config.keep_intervals && !end.partial {
            intervals.push(Interval {
                at_s: end.at.as_secs_f64(),
                functions: functions.to_vec(),
            });
        }
        each(functions, end)
    };
    // Children the targets fork from now on (a reloaded server's new workers) are probed too.
    let mut followed_at = Instant::now();
    let end = watch(
        tracer,
        &until,
        config.interval,
        buckets,
        &mut keep,
        &mut || {
            if followed_at.elapsed() >= FOLLOW_EVERY {
                followed_at = Instant::now();
                for (parent, child) in tracer.follow_children() {
                    eprintln!("tlsscope trace: following pid {child}, forked by {parent} since the start (same library)");
                }
            }
            exporter.tick(&mut render)
        },
    );
    let snapshot = tracer.final_snapshot();
    // The file's last figures: the final ones, before the probes go.
    let written = match &snapshot {
        Ok(last) => exporter.write_file(&mut |format| {
            let m = metrics(last, buckets, tracer, cost, &libraries);
            Ok(crate::render::metrics::exposition(&m, format))
        }),
        Err(_) => Ok(()),
    };
    let elapsed = started.elapsed();
    let environment = crate::common::environment::host(std::env::args().collect());
    let mut doc = document(&session.targets, buckets, tracer, elapsed, environment);
    let paths = traced_files(tracer, &watched);
    crate::common::environment::note_traced(&mut doc.environment, paths.iter().map(String::as_str));
    // Detach before the report: a slow or closed stdout must not keep the probes in place.
    let child_end = session
        .child
        .as_mut()
        .and_then(|c| end_program(c, CHILD_GRACE));
    crate::common::output::detach_noting(session, "trace");
    let ended_by = end?.map(|why| match child_end {
        Some(how) if why != "signal" => how,
        _ => why,
    });
    fill(&mut doc, &snapshot?, buckets);
    written?;
    Ok(Traced {
        doc,
        intervals,
        ended_by,
    })
}

/// A running trace: its tracer, and the program tlsscope started, if it did.
struct Session {
    tracer: Box<dyn Trace>,
    /// The targets, in words ("pid 12", "command nginx -g ...").
    targets: Vec<String>,
    child: Option<std::process::Child>,
    /// What the user should know about how the trace was set up (a fallback, and why).
    notes: Vec<String>,
}

/// Starts tracing: attaches to the targets, or starts the command under the probes.
fn start(config: &Config) -> Result<Session> {
    if config.attach.command.is_empty() {
        return attach(config);
    }
    if let Some(program) = crate::common::probing::go_program(&config.attach.command) {
        return start_go(config, program);
    }
    let c = &config.probes;
    // Trace copies no calls: the smallest rings.
    let mut tracer = probes::user::UserTracer::new(
        &config.selection,
        c.buckets,
        c.per_pid,
        c.threads.clone(),
        probes::user::MIN_RING_BYTES,
    )?;
    tracer.calibrate(CALIBRATION_CALLS)?;
    let child = spawn(&config.attach.command, &tracer)?;
    Ok(command_session(config, Box::new(tracer), child))
}

/// The session of a command tlsscope started: its words and PID name the target.
fn command_session(config: &Config, tracer: Box<dyn Trace>, child: std::process::Child) -> Session {
    let words = config
        .attach
        .command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    Session {
        tracer,
        targets: vec![format!("command {words} (pid {})", child.id())],
        child: Some(child),
        notes: Vec::new(),
    }
}

/// Starts a Go program under the kernel's probes: Go's crypto/tls is compiled into the program
/// (no library call for tlsscope's library to wrap), so its file is probed first, in every
/// process that runs it, and then the program is started.
fn start_go(config: &Config, program: std::path::PathBuf) -> Result<Session> {
    if config.attach.backend == BackendChoice::User {
        crate::fail!(
            "{} is a Go program: its crypto/tls is compiled in, so only the kernel backend traces it; drop --backend user",
            program.display()
        );
    }
    let targets = [probes::Target::Binary(program)];
    let plan =
        probes::Plan::new(&targets, config.selection.clone())?.with_placement(config.placement);
    let mut tracer = probes::Tracer::start(&config.probes, &plan)?;
    tracer.calibrate(CALIBRATION_CALLS)?;
    let child = crate::common::probing::spawn_plain(&config.attach.command)?;
    Ok(command_session(config, Box::new(tracer), child))
}

/// Traces running processes: in process where asked (or, with auto, where that covers every
/// function asked for and the processes let it in), else with the kernel's uprobes.
fn attach(config: &Config) -> Result<Session> {
    let pids = processes_only(&config.attach.targets);
    let mut notes = Vec::new();
    if user_first(config.attach.backend, &pids, &config.selection) {
        let c = &config.probes;
        let rings = probes::user::MIN_RING_BYTES;
        match probes::user::UserTracer::attach(
            &config.selection,
            c.buckets,
            c.per_pid,
            &pids,
            c.threads.comm.clone(),
            rings,
        ) {
            Ok(mut tracer) => {
                tracer.calibrate(CALIBRATION_CALLS)?;
                let targets = attached_words(&tracer);
                return Ok(Session {
                    tracer: Box::new(tracer),
                    targets,
                    child: None,
                    notes,
                });
            }
            Err(e @ probes::Error::Attach { .. })
                if config.attach.backend == BackendChoice::Auto =>
            {
                notes.push(format!("{e}; tracing with the kernel backend instead"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let selection = without_crypto_in_async_jobs(&config.selection, &pids, &mut notes)?;
    let plan =
        probes::Plan::new(&config.attach.targets, selection)?.with_placement(config.placement);
    let mut tracer = probes::Tracer::start(&config.probes, &plan)?;
    tracer.calibrate(CALIBRATION_CALLS)?;
    Ok(Session {
        tracer: Box::new(tracer),
        targets: planned_words(&config.attach.targets, &plan),
        child: None,
        notes,
    })
}

/// The document's parts known once tracing is over, before the tracer (and its list of
/// attached probes) is dropped. The figures are filled in from the final snapshot.
fn document(
    targets: &[String],
    buckets: Buckets,
    tracer: &dyn Trace,
    elapsed: Duration,
    environment: model::Environment,
) -> TraceDocument {
    let mut doc = TraceDocument::new(environment);
    doc.backend = tracer.backend().name().to_string();
    doc.targets = targets.to_vec();
    doc.buckets = match buckets {
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
    let kernel = tracer.backend() == probes::Backend::Kernel;
    doc.attached = tracer
        .attached()
        .iter()
        .map(|a| ProbeDoc {
            function: a.point.function.name.to_string(),
            symbol: a.point.symbol.to_string(),
            path: a.point.path.display().to_string(),
            offset: a.point.offset,
            pid: i64::from(a.point.pid),
            placement: kernel.then(|| placement_doc(&a.point)),
        })
        .collect();
    doc.not_attached = tracer
        .not_attached()
        .iter()
        .map(|m| MissingDoc {
            function: m.function.to_string(),
            path: m.path.display().to_string(),
            reason: crate::common::wording::missing_reason(&m.reason),
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

/// The library files whose calls a trace counted, for the environment: the probes' files for the
/// kernel backend; for the in-process backend (whose probes are tlsscope's own wrapper library)
/// the TLS libraries the traced processes map, those still running.
/// Repeats are left in (`environment::note_traced` names each file once).
fn traced_files(tracer: &dyn probes::Trace, pids: &[u32]) -> Vec<String> {
    match tracer.backend() {
        probes::Backend::Kernel => tracer
            .attached()
            .iter()
            .map(|a| a.point.path.display().to_string())
            .collect(),
        probes::Backend::User => pids
            .iter()
            .filter_map(|&pid| probes::tls_libraries(pid).ok())
            .flatten()
            .map(|l| l.path.display().to_string())
            .collect(),
    }
}

/// The end of an interval of the wait loop: the time since the start, how long it was, and
/// whether it is the part of an interval the trace ended in (shorter than asked).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalEnd {
    pub at: Duration,
    pub length: Duration,
    pub partial: bool,
}

/// Waits for the end; every `interval`, `each` gets the calls since the last one and where the
/// interval ends; at the end, the calls of the last interval, whole or partial, so no interval
/// is lost; `tick` runs every 50 ms (metrics scrapes are answered there). Returns why it ended
/// early, if it did ("signal", "the traced process exited"); None when the duration ran out.
fn watch(
    tracer: &dyn Trace,
    until: &Until<'_>,
    interval: Option<Duration>,
    buckets: Buckets,
    each: &mut dyn FnMut(&[FunctionStats], IntervalEnd) -> std::io::Result<()>,
    tick: &mut dyn FnMut() -> Result<()>,
) -> Result<Option<String>> {
    let started = Instant::now();
    let mut last = tracer.snapshot()?;
    let mut intervals = interval.map(|every| Intervals {
        every,
        last_end: Duration::ZERO,
    });
    loop {
        std::thread::sleep(Duration::from_millis(50));
        tick()?;
        // One reading of the clock for both questions: an interval that ends with the run is
        // printed whole, not lost to the end or split off as a sliver.
        let elapsed = started.elapsed();
        let ended = if until.stop.load(Ordering::Relaxed) {
            Some(Some("signal".into()))
        } else if until.duration.is_some_and(|d| elapsed >= d) {
            Some(None)
        } else if !until.pids.is_empty() && until.pids.iter().all(|&p| !alive(p)) {
            Some(Some("the traced process exited".into()))
        } else {
            None
        };
        // The end of a duration is where its last interval ends, not where the poll saw it.
        let elapsed = match (&ended, until.duration) {
            (Some(None), Some(d)) => d,
            _ => elapsed,
        };
        if let Some(iv) = intervals.as_mut() {
            if let Some(end) = iv.due(elapsed, ended.is_some()) {
                let now = tracer.snapshot()?;
                each(&function_stats(&now.since(&last), buckets), end)?;
                last = now;
            }
        }
        if let Some(why) = ended {
            return Ok(why);
        }
    }
}

/// The intervals of [`watch`], counted from its start.
struct Intervals {
    every: Duration,
    /// Where the last interval printed ended.
    last_end: Duration,
}

impl Intervals {
    /// The interval to print at `elapsed`, if one is due: a whole one once its end has passed;
    /// at the `end` of the trace, also the part since the last one (when there is one).
    fn due(&mut self, elapsed: Duration, end: bool) -> Option<IntervalEnd> {
        let whole = |d: Duration| d.as_nanos() / self.every.as_nanos().max(1);
        // Past the end of the next whole interval (after a stall, the intervals it spanned are
        // printed as one).
        if whole(elapsed) > whole(self.last_end) {
            let length = elapsed.saturating_sub(self.last_end);
            self.last_end = elapsed;
            return Some(IntervalEnd {
                at: elapsed,
                length,
                partial: false,
            });
        }
        let length = elapsed.saturating_sub(self.last_end);
        (end && !length.is_zero()).then(|| {
            self.last_end = elapsed;
            IntervalEnd {
                at: elapsed,
                length,
                partial: true,
            }
        })
    }
}

/// The document's figures from the final snapshot: calls per function and outcome, lost
/// cells, probed calls and what they cost.
fn fill(doc: &mut TraceDocument, snapshot: &Snapshot, buckets: Buckets) {
    doc.functions = function_stats(snapshot, buckets);
    doc.dropped_cells = snapshot.dropped_cells;
    doc.wrapper_failures = wrapper_failures(snapshot);
    doc.overhead.probed_calls = snapshot.calls;
    doc.overhead.estimated_cpu_s = snapshot.calls as f64 * doc.overhead.cost_ns_per_call / 1e9;
}

/// The in-process wrappers that failed, by function name.
fn wrapper_failures(snapshot: &Snapshot) -> Vec<WrapperFailureDoc> {
    snapshot
        .wrapper_failures
        .iter()
        .map(|&(id, failures)| WrapperFailureDoc {
            function: probes::catalog::function(id)
                .map_or_else(|| format!("function {id}"), |f| f.name.to_string()),
            failures,
        })
        .collect()
}

/// How many functions are probed, each once however many processes it is probed in.
fn function_count(attached: &[probes::latency::Attached]) -> usize {
    let mut names: Vec<&str> = attached.iter().map(|a| a.point.function.name).collect();
    names.sort_unstable();
    names.dedup();
    names.len()
}

/// The files the probes are in, each once: "libssl.so.3, libcrypto.so.3".
fn file_names(attached: &[probes::latency::Attached]) -> String {
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

/// The finite upper bounds of `buckets`, in microseconds: the `le` labels of the exported
/// histograms. Log2: 1 us to 2^22 us (4.2 s), so the bounds stay the same in every export.
fn bucket_bounds_us(buckets: Buckets) -> Vec<u64> {
    match buckets {
        Buckets::Log2 => (0..=22).map(|b| 1u64 << b).collect(),
        Buckets::Linear { .. } => (0u8..=u8::MAX)
            .map_while(|b| buckets.range_us(b).1)
            .collect(),
    }
}

/// Per traced function, the library it is traced in and that library's version ("libssl",
/// "3.0.19"): the metrics' labels. Reading a version reads the library's file, so this is done
/// once per trace, not per scrape.
fn metric_libraries(tracer: &dyn Trace) -> std::collections::BTreeMap<String, (String, String)> {
    let mut libraries = std::collections::BTreeMap::new();
    let mut versions: std::collections::HashMap<&std::path::Path, String> = Default::default();
    for a in tracer.attached() {
        let path = a.point.path.as_path();
        let version = versions
            .entry(path)
            .or_insert_with(|| {
                // A Go program: the Go release that built it ("go1.26.8").
                if a.point.function.library == probes::LibraryKind::Go {
                    return probes::GoBinary::read(path)
                        .ok()
                        .and_then(|g| g.go_version().map(String::from))
                        .unwrap_or_default();
                }
                // "OpenSSL 3.0.19 27 Jan 2026": the version number alone.
                ossl::version_of_file(path).map_or_else(String::new, |v| {
                    let mut words = v.text.split_whitespace();
                    match (words.next(), words.next()) {
                        (Some("OpenSSL"), Some(number)) => number.to_string(),
                        _ => v.text.clone(),
                    }
                })
            })
            .clone();
        let library = profile::stacks::object_name(&path.to_string_lossy());
        libraries
            .entry(a.point.function.name.to_string())
            .or_insert((library, version));
    }
    libraries
}

/// What a trace has counted up to `snapshot`, as metrics (`--metrics-listen`,
/// `--metrics-file`), each function labeled from `libraries` ([`metric_libraries`]).
fn metrics(
    snapshot: &Snapshot,
    buckets: Buckets,
    tracer: &dyn Trace,
    cost_ns_per_call: f64,
    libraries: &std::collections::BTreeMap<String, (String, String)>,
) -> crate::render::metrics::TraceMetrics {
    crate::render::metrics::TraceMetrics {
        functions: function_stats(snapshot, buckets),
        libraries: libraries.clone(),
        bounds_us: bucket_bounds_us(buckets),
        backend: tracer.backend().name().to_string(),
        probed_calls: snapshot.calls,
        probe_cpu_s: snapshot.calls as f64 * cost_ns_per_call / 1e9,
        dropped_cells: snapshot.dropped_cells,
        wrapper_failures: wrapper_failures(snapshot),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_interval_that_ends_with_the_run_is_printed_whole() {
        let mut iv = Intervals {
            every: ms(1000),
            last_end: Duration::ZERO,
        };
        assert_eq!(iv.due(ms(950), false), None);
        assert!(iv.due(ms(1020), false).is_some_and(|e| !e.partial));
        assert!(iv.due(ms(2010), false).is_some_and(|e| !e.partial));
        // -d 3s: the end falls on the interval's end.
        let last = iv.due(ms(3000), true).unwrap();
        assert!(!last.partial && last.at == ms(3000), "{last:?}");
        assert_eq!(last.length, ms(990));
    }

    #[test]
    fn a_run_that_ends_inside_an_interval_prints_the_part_marked_partial() {
        let mut iv = Intervals {
            every: ms(1000),
            last_end: Duration::ZERO,
        };
        iv.due(ms(1000), false).unwrap();
        iv.due(ms(2000), false).unwrap();
        assert_eq!(iv.due(ms(2300), false), None);
        let last = iv.due(ms(2500), true).unwrap();
        assert!(last.partial, "{last:?}");
        assert_eq!((last.at, last.length), (ms(2500), ms(500)));
        // Nothing left after it.
        assert_eq!(iv.due(ms(2500), true), None);
    }
}
