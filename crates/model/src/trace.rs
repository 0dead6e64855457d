//! `tlsscope trace --json`: the document (`schemas/trace.v1.schema.json`), per function and
//! outcome a bucketed latency histogram, with where the probes are and what they cost; and the
//! calls of one interval (`trace -i`).

use std::io::{self, Write};

use serde::{Deserialize, Serialize};
use stats::buckets::{Bucket, BucketSummary};

use crate::Environment;

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
    /// An empty document at this schema version, made in `environment`.
    pub fn new(environment: Environment) -> TraceDocument {
        TraceDocument {
            schema_version: TRACE_SCHEMA_VERSION,
            kind: "trace".into(),
            environment,
            ..TraceDocument::default()
        }
    }

    /// Writes the document as pretty JSON.
    pub fn write_json(&self, w: &mut impl Write) -> io::Result<()> {
        crate::write_pretty(w, self)
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
    /// "entry", "entry+4" (after endbr64), "callee" (the function's first callee, for calls
    /// from the function), "entry+returns" (a Go function: its entry and return instructions) or
    /// "entry+deferred+returns" (the same, some returns seen at deferred closures).
    pub at: String,
    /// Whether the kernel emulates the probed instruction (else it single-steps it: a second
    /// trap per hit). For "entry+returns", the entry's (the returns are single-stepped).
    pub emulated: bool,
    /// The file offset the probes are at.
    pub probe_offset: u64,
    /// The calls the probes cannot see, if any (e.g. an argument check failing before the
    /// callee is called).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen: Option<String>,
    /// "entry+returns" (Go's functions, which take no return probe): the file offsets of the
    /// return instructions probed instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub return_offsets: Vec<u64>,
    /// "entry+deferred+returns" (a Go function whose returns run a deferred closure): the file
    /// offsets of those closures' stack-check branches, emulated probes that see the returns
    /// that run them (the others stay in `return_offsets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deferred_offsets: Vec<u64>,
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

/// One interval's calls (`-i`): seconds from the start at its end, and the calls in it.
pub struct Interval {
    pub at_s: f64,
    pub functions: Vec<FunctionStats>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_document_keeps_its_optional_fields_out_when_empty() {
        let mut doc = TraceDocument::new(Environment::default());
        doc.attached.push(ProbeDoc {
            function: "SSL_read".into(),
            symbol: "SSL_read".into(),
            path: "/lib/libssl.so.3".into(),
            offset: 4096,
            pid: -1,
            placement: None,
        });
        let mut out = Vec::new();
        doc.write_json(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("\"kind\": \"trace\""), "{text}");
        assert!(!text.contains("placement"), "{text}");
        assert!(!text.contains("wrapper_failures"), "{text}");
        let again: TraceDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(again.attached, doc.attached);
        assert_eq!(again.schema_version, TRACE_SCHEMA_VERSION);
    }
}
