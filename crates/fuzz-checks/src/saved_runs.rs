//! The saved-run loader of `tlsscope compare a.json b.json`
//! (`app::compare::saved::load_texts`), which reads JSON files that may come from another
//! tlsscope version, another machine, or a hand edit.
//!
//! The input is one saved run, or two separated by a NUL byte (which JSON text cannot hold);
//! one run is compared with itself. Properties: loading never panics; a refusal names the file
//! it is about; and a document it makes serializes to JSON that reads back as a compare
//! document, since `compare --json` output is itself a saved run that `compare` reads.

use std::path::PathBuf;

use app::compare::saved::load_texts;
use model::compare::CompareDocument;

/// The confidence level `compare` uses unless told otherwise.
const LEVEL: f64 = 0.95;

/// Checks the saved-run loader on `data` (see the module's properties); panics on a violation.
/// Accepted: a compare document made.
pub fn check(data: &[u8]) -> bool {
    let (first, second) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    // `compare` reads files as strings: other bytes never reach the loader.
    let (Ok(first), Ok(second)) = (std::str::from_utf8(first), std::str::from_utf8(second)) else {
        return false;
    };
    let texts = [
        (PathBuf::from("a.json"), first),
        (PathBuf::from("b.json"), second),
    ];
    match load_texts(&texts, LEVEL, 0.01, model::Environment::default()) {
        Ok(doc) => {
            check_document(&doc);
            true
        }
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("a.json") || message.contains("b.json"),
                "a refusal that names no file: {message}"
            );
            false
        }
    }
}

/// The document serializes, and the JSON reads back as a compare document.
fn check_document(doc: &CompareDocument) {
    let json = serde_json::to_string(doc).expect("a compare document serializes");
    if let Err(e) = serde_json::from_str::<CompareDocument>(&json) {
        panic!("the document does not read back: {e}\n{json}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_json_is_refused_by_name() {
        assert!(!check(b"not json"));
        assert!(!check(b"{\"kind\": \"bench\", \"schema_version\": 99}"));
        assert!(!check(b"{\"kind\": \"bench\"}\0{\"kind\": \"trace\"}"));
    }
}
