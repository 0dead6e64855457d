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
/// since a replay of nothing would pass without testing anything.
fn replay(target: &str) {
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
    for file in &files {
        let data = std::fs::read(file)
            .unwrap_or_else(|e| panic!("{}: cannot read it: {e}", file.display()));
        eprintln!("replaying {}", file.display());
        check(&data);
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
    replay("http_request");
}

#[test]
fn corpus_http_response() {
    replay("http_response");
}

#[test]
fn corpus_elf_symbols() {
    replay("elf_symbols");
}

#[test]
fn corpus_proc_maps() {
    replay("proc_maps");
}

#[test]
fn corpus_client_hello() {
    replay("client_hello");
}

#[test]
fn corpus_saved_runs() {
    replay("saved_runs");
}
