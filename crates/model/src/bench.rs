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
}

impl BenchDocument {
    /// The document of one run, at this schema version.
    pub fn new(environment: Environment, result: RunResult) -> BenchDocument {
        BenchDocument {
            schema_version: BENCH_SCHEMA_VERSION,
            kind: "bench".into(),
            environment,
            result,
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
