//! The cache of library builds (`tlsscope openssl build`): where it is, and building into it.
//! Shared by `openssl build` and by `compare --matrix`, which builds a version it is given on
//! demand.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;

use ossl_build::{BuildCache, BuildOptions, BuildOutcome, BuildRequest, StatusDisplay};

/// The build cache: `$XDG_CACHE_HOME/tlsscope/openssl`, else `$HOME/.cache/tlsscope/openssl`.
pub fn cache_root() -> PathBuf {
    ossl_build::default_cache_root(env("XDG_CACHE_HOME"), env("HOME"))
}

/// Cargo's home: `$CARGO_HOME`, else `$HOME/.cargo`.
pub fn cargo_home() -> PathBuf {
    ossl_build::default_cargo_home(env("CARGO_HOME"), env("HOME"))
}

/// The value of environment variable `name` (ossl-build decides what an empty one means).
fn env(name: &str) -> Option<OsString> {
    std::env::var_os(name)
}

/// Builds what `request` names with `-j<jobs>`; `force` rebuilds installed ones. Progress goes
/// to stderr; `built` hears each version's outcome.
pub fn build(
    request: &BuildRequest,
    jobs: usize,
    force: bool,
    built: &mut dyn FnMut(&BuildOutcome),
) -> anyhow::Result<()> {
    let options = BuildOptions {
        jobs: ossl_build::effective_jobs(jobs),
        force,
        cargo_home: cargo_home(),
    };
    let status = StatusDisplay::new(std::io::stderr(), std::io::stderr().is_terminal())
        .with_words(crate::common::wording::build_words);
    let cache = BuildCache::new(cache_root());
    cache
        .build_request(request, &options, &status, built)
        .map_err(crate::common::wording::build_error)?;
    Ok(())
}
