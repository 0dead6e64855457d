//! `tlsscope bench --json`: the document (`schemas/bench.v1.schema.json`). Its result is the
//! load engine's own model, [`load::result::RunResult`].

use std::io::{self, Write};

use load::result::RunResult;
use serde::{Deserialize, Serialize};

use crate::Environment;

/// The version of the bench JSON document; `schemas/bench.v1.schema.json` describes it.
pub const BENCH_SCHEMA_VERSION: u32 = 1;

/// The JSON document `tlsscope bench --json` writes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchDocument {
    pub schema_version: u32,
    pub kind: String,
    pub environment: Environment,
    pub result: RunResult,
    /// `bench --shard I/N`: this run's part of a sharded run. Absent for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
    /// `tlsscope merge`: one row per shard document merged into `result`. Absent elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardRow>,
}

/// One shard of a sharded run (`bench --shard I/N [--start-at T]`), as it ran.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// I, counted from 0 (a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`).
    pub index: usize,
    /// N, the number of shards.
    pub count: usize,
    /// The host the shard ran on (its hostname).
    pub host: String,
    /// `--start-at`, as given (RFC 3339); None when the shard started at once.
    pub start_at: Option<String>,
    /// When the shard's load really began, RFC 3339 with nanoseconds (UTC).
    pub started_at: String,
    /// `started_at` minus `start_at`, in milliseconds (positive: late); None without
    /// `--start-at`.
    pub start_skew_ms: Option<f64>,
    /// The measured window (after warm-up), as Unix time in nanoseconds of this host's clock:
    /// [start, end].
    pub window_unix_ns: [u64; 2],
    /// What the host's clock discipline says of its own error, in milliseconds (the kernel's
    /// estimated error, `adjtimex`), and whether it is synchronised; None where it cannot tell.
    pub clock_error_ms: Option<f64>,
    pub clock_synchronised: Option<bool>,
    /// This shard's part of the whole run's settings: connections, `-n` and `--rate`.
    pub connections: usize,
    pub requests: Option<u64>,
    pub rate_per_s: Option<f64>,
}

/// One shard in a merged document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShardRow {
    /// The document merged (its path as given to `merge`).
    pub file: String,
    /// The shard's own description; None when the document had none (a plain bench run) or
    /// could not be read.
    pub shard: Option<ShardInfo>,
    /// "merged", or "failed" with `problem` saying why (unreadable, interrupted, errors...).
    pub status: String,
    pub problem: Option<String>,
    pub ops: u64,
    pub ops_per_s: f64,
    pub errors_total: u64,
    /// Client CPU seconds per 1000 operations on this shard.
    pub client_cpu_s_per_1000_ops: f64,
    /// The shard's client was the bottleneck (its own `client_bottleneck`).
    pub client_bound: bool,
}

impl BenchDocument {
    /// The document of one run, at this schema version.
    pub fn new(environment: Environment, result: RunResult) -> BenchDocument {
        BenchDocument {
            schema_version: BENCH_SCHEMA_VERSION,
            kind: "bench".into(),
            environment,
            result,
            shard: None,
            shards: Vec::new(),
        }
    }

    /// Writes the document as pretty JSON.
    pub fn write_json(&self, w: &mut impl Write) -> io::Result<()> {
        crate::write_pretty(w, self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bench_document_reads_back_as_written() {
        let doc = BenchDocument::new(Environment::default(), RunResult::default());
        let mut out = Vec::new();
        doc.write_json(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("{\n  \"schema_version\": 1,\n  \"kind\": \"bench\","));
        assert!(text.ends_with("}\n"), "{text}");
        let again: BenchDocument = serde_json::from_str(&text).unwrap();
        assert_eq!(again.kind, "bench");
        assert_eq!(again.environment, doc.environment);
    }
}
