//! The committed corpus, replayed through the checks: every input a fuzzer once found
//! interesting (and every crash, once fixed) is tested on every `cargo test`.

use std::path::{Path, PathBuf};

/// The folder of `target`'s corpus.
fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

/// Feeds every corpus file of `target` to its check; fails if the corpus is missing or empty,
/// since a replay of nothing would pass without testing anything, and unless the parser
/// accepted each file named in `accepted` (known-good inputs: a parser that refuses
/// everything would check nothing past its refusal, and must fail).
fn replay(target: &str, accepted: &[&str]) {
    let (_, check) = crate::TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .expect("a known target");
    let dir = corpus_dir(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: cannot list the corpus: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries.map(|e| e.expect("a corpus entry").path()).collect();
    files.sort();
    assert!(!files.is_empty(), "{}: the corpus is empty", dir.display());
    let mut took = Vec::new();
    for file in &files {
        let data = std::fs::read(file)
            .unwrap_or_else(|e| panic!("{}: cannot read it: {e}", file.display()));
        let verdict = check(&data);
        eprintln!(
            "replaying {}: {}",
            file.display(),
            if verdict { "accepted" } else { "refused" }
        );
        if verdict {
            took.push(file.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(!accepted.is_empty(), "{target}: name its known-good inputs");
    for name in accepted {
        assert!(
            took.iter().any(|t| t == name),
            "{target}: the known-good {name} was refused (accepted: {took:?})"
        );
    }
}

#[test]
fn every_target_has_a_fuzz_target_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/fuzz_targets");
    for (name, _) in crate::TARGETS {
        let file = dir.join(format!("{name}.rs"));
        assert!(file.is_file(), "{} is missing", file.display());
    }
}

#[test]
fn corpus_http_request() {
    replay(
        "http_request",
        &[
            "get-bytes-close",
            "get-index",
            "pipelined-stats",
            "post-http10-keepalive",
        ],
    );
}

#[test]
fn corpus_http_response() {
    replay(
        "http_response",
        &[
            "http10-until-close",
            "not-found-close",
            "not-modified",
            "ok-content-length",
        ],
    );
}

#[test]
fn corpus_elf_symbols() {
    replay(
        "elf_symbols",
        &["libtiny-stripped.so", "libtiny.so", "tiny-static-exe"],
    );
}

#[test]
fn corpus_proc_maps() {
    replay("proc_maps", &["cat-self", "libraries"]);
}

#[test]
fn corpus_client_hello() {
    replay(
        "client_hello",
        &[
            "openssl-3.5.5-resumed",
            "openssl-3.5.5-two-shares",
            "rustls-tls13-full",
            "rustls-tls13-resumed-psk",
        ],
    );
}

#[test]
fn corpus_saved_runs() {
    replay(
        "saved_runs",
        &[
            "bench-histograms.json",
            "bench-two-runs",
            "bench-without-histograms.json",
            "compare-engine.json",
            "trace.json",
        ],
    );
}

#[test]
fn corpus_go_binary() {
    replay("go_binary", &["synthetic-go1.20"]);
}
