//! `model`: tlsscope's result documents, one module per schema (`schemas/bench.v1`, `trace.v1`,
//! `compare.v1`), the results of the commands without a schema (`sniff`'s records and counts,
//! `lab`'s experiments), and the [`Environment`] every document records. Data only: the
//! renderers (text, HTML, plots) live in `report` and read these types.

pub mod bench;
pub mod compare;
pub mod lab;
pub mod sniff;
pub mod trace;

use serde::{Deserialize, Serialize};

/// Where and with what a run was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    pub tlsscope_version: String,
    /// The client's library and version ("OpenSSL 3.5.5", "AWS-LC 5.12.0", "BoringSSL API
    /// 44"); in trace and sniff, the traced library as its file names itself.
    pub library: String,
    /// Its flavour: "OpenSSL", "AWS-LC" or "BoringSSL"; empty where none was loaded or the
    /// traced file does not say (absent in documents from before issue 31).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub library_flavour: String,
    pub library_version_number: u64,
    pub library_path: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub hostname: String,
    pub command_line: Vec<String>,
    /// UTC start time, RFC 3339.
    pub started_at: String,
    /// trace and sniff: each library file the probes are in, as it names itself (the
    /// `library` fields above then describe the first). Absent elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub traced_libraries: Vec<TracedLibrary>,
}

/// A library file tlsscope observed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TracedLibrary {
    pub path: String,
    /// "OpenSSL 3.0.19 27 Jan 2026", "GnuTLS 3.7.9", "NSS 3.87.1", as the file (or an OpenSSL
    /// libssl's libcrypto) holds it; empty when it holds none tlsscope knows (NSPR's libnspr4).
    pub version: String,
    /// OpenSSL's `OPENSSL_VERSION_NUMBER`; 0 for the others.
    pub version_number: u64,
}

/// The newest schema version of a document `kind` ("bench", "trace", "compare") this tlsscope
/// reads and writes; None for a kind it does not know.
pub fn newest_schema_version(kind: &str) -> Option<u32> {
    match kind {
        "bench" => Some(bench::BENCH_SCHEMA_VERSION),
        "trace" => Some(trace::TRACE_SCHEMA_VERSION),
        "compare" => Some(compare::COMPARE_SCHEMA_VERSION),
        _ => None,
    }
}

/// Writes a document as pretty JSON and a line end: what `--json` saves.
fn write_pretty(w: &mut impl std::io::Write, doc: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *w, doc)?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_with_a_schema_has_a_version() {
        assert_eq!(newest_schema_version("bench"), Some(1));
        assert_eq!(newest_schema_version("trace"), Some(1));
        assert_eq!(newest_schema_version("compare"), Some(1));
        assert_eq!(newest_schema_version("sniff"), None);
    }
}
