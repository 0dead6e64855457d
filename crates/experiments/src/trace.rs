//! Tracing, as `trace` and the lab do it: what to attach to, the trace document built from a
//! tracer, and the kernel's cells grouped per function and outcome.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use model::trace::{
    BucketScheme, FunctionStats, KernelHookDoc, MissingDoc, Overhead, PlacementDoc, ProbeDoc,
    TraceDocument, WrapperFailureDoc,
};
use probes::{catalog, Buckets, Edge, Outcome, Snapshot, Target, Trace};
use stats::buckets::{summarize, Bucket};

use crate::error::Result;
use crate::fail;

/// What trace loses without its syscall hooks, and how to get it back.
pub const SYSCALL_EXITS_EFFECT: &str = "OpenSSL calls returning <= 0 cannot be split into retry and failure and are classed unknown; --exact-outcomes settles them with SSL_get_error instead";

/// The one line worth saying about the tracer's syscall hooks, if any (a private tracefs mount,
/// or hooks missing and what that costs).
pub fn syscall_hooks_note(tracer: &dyn Trace) -> Option<String> {
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
            reason: crate::wording::missing_reason(&m.reason),
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

/// Where a kernel probe sits, for the document.
pub(crate) fn placement_doc(point: &probes::AttachPoint) -> PlacementDoc {
    PlacementDoc {
        at: point.placement.name().to_string(),
        emulated: point.placement.emulated(),
        probe_offset: point.probe_offset(),
        unseen: point.placement.unseen().map(str::to_string),
    }
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
                total_ns: Some(c.total_ns),
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

/// The processes whose end ends a trace or capture: the program tlsscope started, if it did,
/// else the -p targets.
pub fn watched_pids(child: Option<&std::process::Child>, targets: &[u32]) -> Vec<u32> {
    match child {
        Some(c) => vec![c.id()],
        None => targets.to_vec(),
    }
}

/// The library files whose calls a trace counted, for the environment: the probes' files for the
/// kernel backend; for the in-process backend (whose probes are tlsscope's own wrapper library)
/// the TLS libraries the traced processes map, those still running.
/// Repeats are left in (`environment::note_traced` names each file once).
pub fn traced_files(tracer: &dyn probes::Trace, pids: &[u32]) -> Vec<String> {
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

/// When a trace ends: after `duration`, when `stop` is set, or when every process of `pids`
/// (if any) has exited.
pub struct Until<'a> {
    pub duration: Option<Duration>,
    pub pids: &'a [u32],
    pub stop: &'a AtomicBool,
}

/// The end of an interval of [`watch`]: the time since the start, how long it was, and whether
/// it is the part of an interval the trace ended in (shorter than asked).
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
pub fn watch(
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
pub fn fill(doc: &mut TraceDocument, snapshot: &Snapshot, buckets: Buckets) {
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
pub fn function_count(attached: &[probes::latency::Attached]) -> usize {
    let mut names: Vec<&str> = attached.iter().map(|a| a.point.function.name).collect();
    names.sort_unstable();
    names.dedup();
    names.len()
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

/// The backend asked for with `--backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// eBPF uprobes.
    Kernel,
    /// tlsscope's library inside the traced program.
    User,
    /// The in-process backend where it can go (a program tlsscope starts), else the kernel's.
    #[default]
    Auto,
}

impl std::str::FromStr for BackendChoice {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "kernel" => Ok(BackendChoice::Kernel),
            "user" => Ok(BackendChoice::User),
            "auto" => Ok(BackendChoice::Auto),
            other => Err(format!(
                "unknown backend '{other}' (choose from kernel, user, auto)"
            )),
        }
    }
}

/// What to trace and how, as typed values.
pub struct Request<'a> {
    /// -p, --binary, --lib: what to attach to (empty with a command).
    pub targets: Vec<Target>,
    /// A program to start and trace (`trace -- COMMAND ARGS...`).
    pub command: &'a [std::ffi::OsString],
    pub backend: BackendChoice,
    pub selection: probes::Selection,
    pub config: probes::TraceConfig,
    /// Where the kernel backend's probes go.
    pub placement: probes::PlacementMode,
    /// Calls of a function in tlsscope used to measure what a probed call costs.
    pub calibration_calls: u64,
}

/// A running trace: its tracer, and the program tlsscope started, if it did.
pub struct Session {
    pub tracer: Box<dyn Trace>,
    /// The targets, in words ("pid 12", "command nginx -g ...").
    pub targets: Vec<String>,
    pub child: Option<std::process::Child>,
    /// What the user should know about how the trace was set up (a fallback, and why).
    pub notes: Vec<String>,
}

/// Starts tracing: attaches to the targets, or starts the command under the probes.
pub fn start(request: &Request<'_>) -> Result<Session> {
    if request.command.is_empty() {
        return attach(request);
    }
    if request.backend == BackendChoice::Kernel {
        fail!("--backend kernel traces running processes: start the program, then tlsscope trace -p PID (or leave --backend out to trace the command in process)");
    }
    if !request.targets.is_empty() {
        fail!("a command is its own target: leave out -p, --binary and --lib, or the command");
    }
    let c = &request.config;
    // Trace copies no calls: the smallest rings.
    let mut tracer = probes::user::UserTracer::new(
        &request.selection,
        c.buckets,
        c.per_pid,
        c.threads.clone(),
        probes::user::MIN_RING_BYTES,
    )?;
    tracer.calibrate(request.calibration_calls)?;
    let child = spawn(request.command, &tracer)?;
    let words = request
        .command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    Ok(Session {
        tracer: Box::new(tracer),
        targets: vec![format!("command {words} (pid {})", child.id())],
        child: Some(child),
        notes: Vec::new(),
    })
}

/// Traces running processes: in process where asked (or, with auto, where that covers every
/// function asked for and the processes let it in), else with the kernel's uprobes.
fn attach(request: &Request<'_>) -> Result<Session> {
    let pids = processes_only(&request.targets);
    let mut notes = Vec::new();
    let try_user = user_first(request.backend, &pids, &request.selection, "trace")?;
    if try_user {
        let c = &request.config;
        let rings = probes::user::MIN_RING_BYTES;
        match probes::user::UserTracer::attach(
            &request.selection,
            c.buckets,
            c.per_pid,
            &pids,
            c.threads.comm.clone(),
            rings,
        ) {
            Ok(mut tracer) => {
                tracer.calibrate(request.calibration_calls)?;
                let targets = attached_words(&tracer);
                return Ok(Session {
                    tracer: Box::new(tracer),
                    targets,
                    child: None,
                    notes,
                });
            }
            Err(e @ probes::Error::Attach { .. }) if request.backend == BackendChoice::Auto => {
                let e = crate::wording::probes_error(&e);
                notes.push(format!("{e}; tracing with the kernel backend instead"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let selection = without_crypto_in_async_jobs(&request.selection, &pids, &mut notes)?;
    let plan = probes::Plan::new(&request.targets, selection)?.with_placement(request.placement);
    let mut tracer = probes::Tracer::start(&request.config, &plan)?;
    tracer.calibrate(request.calibration_calls)?;
    Ok(Session {
        tracer: Box::new(tracer),
        targets: planned_words(&request.targets, &plan),
        child: None,
        notes,
    })
}

/// The targets in words, each process with the children the plan follows: "pid 10 and its
/// children 11, 12 (same library)".
pub fn planned_words(targets: &[Target], plan: &probes::Plan) -> Vec<String> {
    targets
        .iter()
        .map(|t| {
            let words = target_words(std::slice::from_ref(t));
            let Target::Pid(pid) = t else {
                return words;
            };
            let children: Vec<String> = plan
                .children
                .iter()
                .filter(|(parent, _)| parent == pid)
                .map(|(_, child)| child.to_string())
                .collect();
            if children.is_empty() {
                words
            } else {
                format!(
                    "{words} and its children {} (same library)",
                    children.join(", ")
                )
            }
        })
        .collect()
}

/// A process with a crypto engine loaded may run its crypto inside async jobs, on stacks of
/// their own: a kernel return probe on a function a job pauses in loses its place, and the
/// process crashes when the function returns. Such processes keep their TLS-call probes and
/// lose the crypto ones (said in a note); naming crypto functions for them is an error.
pub(crate) fn without_crypto_in_async_jobs(
    selection: &probes::Selection,
    pids: &[u32],
    notes: &mut Vec<String>,
) -> Result<probes::Selection> {
    let Some((pid, engine)) = pids.iter().find_map(|&p| engine_of(p).map(|e| (p, e))) else {
        return Ok(selection.clone());
    };
    if !selection.takes(probes::Group::Crypto) {
        return Ok(selection.clone());
    }
    let named = selection.named_in(probes::Group::Crypto);
    if !named.is_empty() {
        crate::fail!(
            "process {pid} has a crypto engine loaded ({engine}): kernel return probes on {} \
             could crash it (its crypto may run in async jobs, on stacks of their own); trace \
             the SSL calls, or use --backend user",
            named.join(", ")
        );
    }
    notes.push(format!(
        "process {pid} has a crypto engine loaded ({engine}): its crypto functions are not \
         traced by kernel probes, which could crash it inside async jobs; --backend user traces them"
    ));
    Ok(selection.clone().without(probes::Group::Crypto))
}

/// The crypto engine a process has loaded (a file in an OpenSSL `engines-*` directory), if any.
fn engine_of(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|path| path.contains("/engines-") && path.ends_with(".so"))
        .map(str::to_string)
}

/// The PIDs of `targets` when they are all processes (the in-process backend attaches to
/// processes, not files), else none.
pub fn processes_only(targets: &[Target]) -> Vec<u32> {
    let pids: Vec<u32> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Pid(p) => Some(*p),
            _ => None,
        })
        .collect();
    if pids.len() == targets.len() {
        pids
    } else {
        Vec::new()
    }
}

/// Whether the in-process backend wraps every function of `selection`.
pub fn covers_all(selection: &probes::Selection) -> bool {
    probes::user::plan(selection, std::path::Path::new("")).is_ok_and(|p| p.missing.is_empty())
}

/// "pid 12 (+ 2 children): 9 GOT entries redirected".
pub fn attached_words(tracer: &probes::user::UserTracer) -> Vec<String> {
    tracer
        .attachments()
        .iter()
        .map(|a| {
            format!(
                "pid {} ({} GOT entries redirected{})",
                a.pid,
                a.swapped.len(),
                if a.loaded_now {
                    ""
                } else {
                    ", library already loaded"
                }
            )
        })
        .collect()
}

/// Whether to attach the in-process backend to running processes `pids` first: asked for
/// (which needs -p), or with auto where it covers every function asked for. `verb` is the
/// command, for the error.
pub(crate) fn user_first(
    backend: BackendChoice,
    pids: &[u32],
    selection: &probes::Selection,
    verb: &str,
) -> Result<bool> {
    Ok(match backend {
        BackendChoice::Kernel => false,
        BackendChoice::User if pids.is_empty() => {
            fail!("--backend user {verb}s processes: give -p PID (--binary and --lib need --backend kernel), or start the program: tlsscope {verb} -- COMMAND")
        }
        BackendChoice::User => true,
        BackendChoice::Auto => !pids.is_empty() && covers_all(selection),
    })
}

/// Starts `command` under the in-process library of `tracer`.
pub fn spawn(
    command: &[std::ffi::OsString],
    tracer: &probes::user::UserTracer,
) -> Result<std::process::Child> {
    let (program, args) = command.split_first().expect("a command is not empty");
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    tracer.prepare(&mut cmd);
    cmd.spawn().map_err(|e| {
        crate::error::Error::msg(format!("cannot start {}: {e}", program.to_string_lossy()))
    })
}

impl Session {
    /// Ends the program tlsscope started, if it still runs: SIGTERM, then SIGKILL after
    /// `grace`. Returns how it ended, in words.
    pub fn end_child(&mut self, grace: Duration) -> Option<String> {
        end_program(self.child.as_mut()?, grace)
    }
}

/// Ends a program tlsscope started, if it still runs: SIGTERM, then SIGKILL after `grace`.
/// Returns how it ended, in words.
pub fn end_program(child: &mut std::process::Child, grace: Duration) -> Option<String> {
    if let Ok(Some(status)) = child.try_wait() {
        return Some(format!("the command exited ({status})"));
    }
    let pid = i32::try_from(child.id()).ok()?;
    // SAFETY: kill signals the child we started and have not reaped.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(format!(
                "tlsscope ended the command with SIGTERM ({status})"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let status = child.wait().ok()?;
    Some(format!(
        "the command outlived SIGTERM by {} s and was killed ({status})",
        grace.as_secs()
    ))
}

/// The finite upper bounds of `buckets`, in microseconds: the `le` labels of the exported
/// histograms. Log2: 1 us to 2^22 us (4.2 s), so the bounds stay the same in every export.
pub fn bucket_bounds_us(buckets: Buckets) -> Vec<u64> {
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
pub fn metric_libraries(
    tracer: &dyn Trace,
) -> std::collections::BTreeMap<String, (String, String)> {
    let mut libraries = std::collections::BTreeMap::new();
    let mut versions: std::collections::HashMap<&std::path::Path, String> = Default::default();
    for a in tracer.attached() {
        let path = a.point.path.as_path();
        let version = versions
            .entry(path)
            .or_insert_with(|| {
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
pub fn metrics(
    snapshot: &Snapshot,
    buckets: Buckets,
    tracer: &dyn Trace,
    cost_ns_per_call: f64,
    libraries: &std::collections::BTreeMap<String, (String, String)>,
) -> report::metrics::TraceMetrics {
    report::metrics::TraceMetrics {
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
