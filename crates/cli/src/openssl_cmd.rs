//! `tlsscope openssl build|list`: the arguments go to ossl-build and what comes back is printed.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::bail;
use ossl_build::{BuildCache, BuildOptions, BuildRequest, Listing, StatusDisplay};

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

/// Builds each of `versions` (OpenSSL versions from the openssl-src crate, or aws-lc and
/// boringssl from their crates), or the one tree or tarball at `source`, with `-j<jobs>`;
/// `force` rebuilds installed ones. Progress goes to stderr and one
/// final line per version to stdout.
pub fn build(
    versions: &[String],
    source: Option<&Path>,
    jobs: usize,
    force: bool,
) -> anyhow::Result<()> {
    let request = match source {
        Some(_) if !versions.is_empty() => {
            bail!(
                "--source builds the one tree it points at: drop the VERSION arguments or --source"
            )
        }
        Some(path) => BuildRequest::Source(path.to_owned()),
        None if versions.is_empty() => {
            bail!("name what to build (e.g. tlsscope openssl build 3.5.5 aws-lc boringssl) or pass --source PATH")
        }
        None => BuildRequest::Versions(versions.to_vec()),
    };
    let options = BuildOptions {
        jobs: ossl_build::effective_jobs(jobs),
        force,
        cargo_home: cargo_home(),
    };
    let status = StatusDisplay::new(std::io::stderr(), std::io::stderr().is_terminal())
        .with_words(crate::wording::build_words);
    let cache = BuildCache::new(cache_root());
    // A closed stdout does not stop the builds; the outcomes are also in the cache.
    cache
        .build_request(&request, &options, &status, &mut |outcome| {
            let _ = crate::output::to_stdout(format!("{outcome}\n"));
        })
        .map_err(crate::wording::build_error)?;
    Ok(())
}

/// Prints the installed builds as a table, or how to make one if there are none.
pub fn list() -> anyhow::Result<()> {
    match BuildCache::new(cache_root()).listing()? {
        Listing::Empty { root } => {
            crate::output::to_stdout(format!("{}\n", crate::wording::empty_cache(&root)))
        }
        Listing::Builds { header, rows } => {
            crate::output::to_stdout(report::compare::Table { header, rows }.aligned())
        }
    }
}
