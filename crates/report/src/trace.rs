//! `tlsscope trace` results: the JSON document (`schemas/trace.v1.schema.json`) and its text
//! rendering (bpftrace-like histograms, then a stats table).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use stats::buckets::{Bucket, BucketSummary};

use crate::{duration, Environment};

/// The version of the trace JSON document.
pub const TRACE_SCHEMA_VERSION: u32 = 1;

/// The JSON document `tlsscope trace --json` writes.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TraceDocument {
    pub schema_version: u32,
    pub kind: String,
    pub environment: Environment,
    /// Which backend counted the calls: "kernel" (eBPF uprobes) or "user" (tlsscope's library
    /// in the traced program). Absent in documents written before there were two.
    #[serde(default)]
    pub backend: String,
    /// The targets as given: "pid 123", "binary /path", "library /path", "command nginx ...".
    pub targets: Vec<String>,
    pub buckets: BucketScheme,
    /// Seconds from the probes attaching to the last read-out.
    pub duration_s: f64,
    pub attached: Vec<ProbeDoc>,
    pub not_attached: Vec<MissingDoc>,
    /// Kernel hooks beside the probes (the syscall exits that settle <= 0 returns): attached,
    /// or missing with what that costs. Absent in documents written before it existed.
    #[serde(default)]
    pub kernel_hooks: Vec<KernelHookDoc>,
    pub overhead: Overhead,
    /// Histogram cells lost because the kernel map was full (0 normally).
    pub dropped_cells: u64,
    /// In-process wrappers that failed (a panic caught inside them), per function: each then
    /// only called through in its process, so that function's counts stop there. Absent when
    /// none failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wrapper_failures: Vec<WrapperFailureDoc>,
    /// One entry per function and outcome (and process, with --per-pid).
    pub functions: Vec<FunctionStats>,
}

impl TraceDocument {
    pub fn new(environment: Environment) -> TraceDocument {
        TraceDocument {
            schema_version: TRACE_SCHEMA_VERSION,
            kind: "trace".into(),
            environment,
            ..TraceDocument::default()
        }
    }
}

/// A function whose in-process wrapper failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrapperFailureDoc {
    pub function: String,
    /// Calls whose wrapper failed (one per process: the wrapper is disabled after it).
    pub failures: u64,
}

/// How latencies were bucketed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketScheme {
    /// "log2" or "linear".
    pub kind: String,
    pub min_us: Option<u64>,
    pub max_us: Option<u64>,
    pub step_us: Option<u64>,
}

/// An attached probe pair (uprobe + uretprobe).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeDoc {
    pub function: String,
    pub symbol: String,
    pub path: String,
    pub offset: u64,
    /// The process it was attached in; -1 for every process.
    pub pid: i64,
    /// Where on the function the kernel's probes are; absent for the in-process backend and in
    /// documents written before placements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementDoc>,
}

/// Where a function's uprobe + uretprobe pair sits.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementDoc {
    /// "entry", "entry+4" (after endbr64) or "callee" (the function's first callee, for calls
    /// from the function).
    pub at: String,
    /// Whether the kernel emulates the probed instruction (else it single-steps it: a second
    /// trap per hit).
    pub emulated: bool,
    /// The file offset the probes are at.
    pub probe_offset: u64,
    /// The calls the probes cannot see, if any (e.g. an argument check failing before the
    /// callee is called).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<String>,
}

/// A function that is not traced, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingDoc {
    pub function: String,
    pub path: String,
    pub reason: String,
}

/// A set of kernel hooks a tracer uses beside its probes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelHookDoc {
    /// e.g. `syscalls:sys_exit_{read,write,...}`.
    pub hooks: String,
    pub attached: bool,
    /// How they were reached ("tracefs at /sys/kernel/tracing", "tracefs mounted privately"),
    /// or why they are missing.
    pub detail: String,
    /// What is lost while they are missing, and how to get it back; empty when attached.
    pub effect: String,
}

/// What observing cost, estimated from a measurement at start-up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Calls that hit an entry probe (in any process).
    pub probed_calls: u64,
    /// Calls of a function in tlsscope itself, timed without and with the probes.
    pub calibration_calls: u64,
    pub plain_ns_per_call: f64,
    pub probed_ns_per_call: f64,
    /// probed - plain: what one probed call costs.
    pub cost_ns_per_call: f64,
    /// probed_calls x cost_ns_per_call, in CPU seconds.
    pub estimated_cpu_s: f64,
}

/// One function's calls with one outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FunctionStats {
    pub function: String,
    /// handshake, io or crypto.
    pub group: String,
    /// success, retry, failure or unknown.
    pub outcome: String,
    /// The process (with --per-pid), else absent.
    pub pid: Option<u32>,
    pub summary: BucketSummary,
    /// Non-empty buckets, lowest first.
    pub buckets: Vec<Bucket>,
}

/// Writes the document as pretty JSON.
pub fn trace_json(w: &mut impl Write, doc: &TraceDocument) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, doc)?;
    writeln!(w)
}

/// The text report: a histogram per function and outcome, then one stats table.
pub fn trace_text(w: &mut impl Write, doc: &TraceDocument, histograms: bool) -> io::Result<()> {
    if histograms {
        for f in &doc.functions {
            let pid = f.pid.map(|p| format!(" pid {p}")).unwrap_or_default();
            writeln!(w, "@{} [{}]{pid}:", f.function, f.outcome)?;
            write_histogram(w, &f.buckets)?;
            writeln!(w)?;
        }
    }
    stats_table(w, &doc.functions)?;
    if doc.functions.is_empty() {
        writeln!(w, "  (no calls traced)")?;
    }
    if doc.dropped_cells > 0 {
        writeln!(
            w,
            "warning: {} histogram updates were lost (the kernel map was full)",
            doc.dropped_cells
        )?;
    }
    for f in &doc.wrapper_failures {
        writeln!(
            w,
            "warning: the in-process wrapper of {} failed {} time(s) and stopped timing in that \
             process; the program kept running, but {} is undercounted from then on",
            f.function, f.failures, f.function
        )?;
    }
    Ok(())
}

/// The trailer: where the probes are, what is not traced, and what tracing cost.
pub fn trace_footer(w: &mut impl Write, doc: &TraceDocument) -> io::Result<()> {
    let placed = doc
        .attached
        .iter()
        .filter_map(|a| Some((a.function.as_str(), a.placement.as_ref()?)));
    if let Some(line) = placement_line(placed) {
        writeln!(w, "{line}")?;
    }
    for m in &doc.not_attached {
        writeln!(w, "not traced: {} in {}: {}", m.function, m.path, m.reason)?;
    }
    for h in doc.kernel_hooks.iter().filter(|h| !h.attached) {
        writeln!(
            w,
            "kernel hooks missing: {} ({}): {}",
            h.hooks, h.detail, h.effect
        )?;
    }
    let o = &doc.overhead;
    if o.calibration_calls > 0 {
        let share = if doc.duration_s > 0.0 {
            format!(
                " ({:.1}% of one CPU)",
                100.0 * o.estimated_cpu_s / doc.duration_s
            )
        } else {
            String::new()
        };
        writeln!(
            w,
            "probe cost: {:.2} us per probed call (measured on {} at start-up); {} ~ {:.3} CPU-s{share}",
            o.cost_ns_per_call / 1000.0,
            crate::count(o.calibration_calls, "call"),
            crate::count(o.probed_calls, "probed call"),
            o.estimated_cpu_s
        )?;
    }
    Ok(())
}

/// "placement: 8 of 11 functions on emulated instructions (4 entry, 4 callee); single-stepped:
/// SSL_connect, SSL_accept, SSL_get_error", for (function, placement) pairs (kernel probes).
pub fn placement_line<'a>(
    placed: impl IntoIterator<Item = (&'a str, &'a PlacementDoc)>,
) -> Option<String> {
    let placed: Vec<(&str, &PlacementDoc)> = placed.into_iter().collect();
    if placed.is_empty() {
        return None;
    }
    let emulated = placed.iter().filter(|(_, p)| p.emulated).count();
    let mut kinds: Vec<String> = Vec::new();
    for at in ["entry", "entry+4", "callee"] {
        let n = placed
            .iter()
            .filter(|(_, p)| p.emulated && p.at == at)
            .count();
        if n > 0 {
            kinds.push(format!("{n} {at}"));
        }
    }
    let stepped: Vec<&str> = placed
        .iter()
        .filter(|(_, p)| !p.emulated)
        .map(|(f, _)| *f)
        .collect();
    let mut line = format!(
        "placement: {emulated} of {} on emulated instructions",
        crate::count(placed.len() as u64, "function")
    );
    if !kinds.is_empty() {
        line.push_str(&format!(" ({})", kinds.join(", ")));
    }
    if !stepped.is_empty() {
        line.push_str(&format!("; single-stepped: {}", stepped.join(", ")));
    }
    Some(line)
}

/// Columns: function, outcome, count, average, total, p50, p99 (estimated from buckets).
pub fn stats_table(w: &mut impl Write, functions: &[FunctionStats]) -> io::Result<()> {
    let per_pid = functions.iter().any(|f| f.pid.is_some());
    let pid_head = if per_pid { "     pid" } else { "" };
    writeln!(
        w,
        "{pid_head}  {:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "function", "outcome", "count", "avg", "total", "p50", "p99"
    )?;
    for f in functions {
        let s = &f.summary;
        let pid = match (per_pid, f.pid) {
            (true, Some(p)) => format!("{p:>8}"),
            (true, None) => format!("{:>8}", "-"),
            _ => String::new(),
        };
        writeln!(
            w,
            "{pid}  {:<26} {:<8} {:>10} {:>9} {:>9} {:>9} {:>9}",
            f.function,
            f.outcome,
            s.count,
            duration(s.mean_us),
            duration(s.total_ns as f64 / 1000.0),
            duration(s.p50_us),
            duration(s.p99_us)
        )?;
    }
    Ok(())
}

/// bpftrace's layout: "[low, high)   count |@@@@   |".
fn write_histogram(w: &mut impl Write, buckets: &[Bucket]) -> io::Result<()> {
    const WIDTH: u64 = 52;
    let max = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    for b in buckets {
        let range = match b.high_us {
            Some(h) => format!("[{}, {})", us_label(b.low_us), us_label(h)),
            None => format!("[{}, ...)", us_label(b.low_us)),
        };
        let bar = "@".repeat(usize::try_from(b.count * WIDTH / max).unwrap_or(0));
        writeln!(w, "{range:<20} {:>10} |{bar:<52}|", b.count)?;
    }
    Ok(())
}

/// Microseconds with bpftrace's K/M suffixes for round values.
pub(crate) fn us_label(us: u64) -> String {
    if us >= 1_000_000 && us.is_multiple_of(1_000_000) {
        format!("{}s", us / 1_000_000)
    } else if us >= 1000 && us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else {
        format!("{us}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_and_table_render() {
        let buckets = vec![
            Bucket {
                low_us: 256,
                high_us: Some(512),
                count: 10,
                total_ns: None,
            },
            Bucket {
                low_us: 512,
                high_us: Some(1024),
                count: 5,
                total_ns: None,
            },
        ];
        let mut doc = TraceDocument::new(Environment::default());
        doc.functions.push(FunctionStats {
            function: "SSL_do_handshake".into(),
            group: "handshake".into(),
            outcome: "success".into(),
            pid: None,
            summary: stats::buckets::summarize(&buckets, 6_000_000),
            buckets,
        });
        let mut out = Vec::new();
        trace_text(&mut out, &doc, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("@SSL_do_handshake [success]:"), "{text}");
        assert!(text.contains("[256us, 512us)"), "{text}");
        let full_bar = format!("|{}|", "@".repeat(52));
        assert!(text.contains(&full_bar), "{text}");
        assert!(
            text.contains("SSL_do_handshake           success          15"),
            "{text}"
        );
    }
}
