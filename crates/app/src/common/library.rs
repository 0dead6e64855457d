//! Picks the OpenSSL under test from `--openssl`.

use anyhow::Context as _;
use ossl::{Library, LibrarySource};

/// Loads the library `--openssl` was resolved to.
pub fn load(source: &LibrarySource) -> anyhow::Result<&'static Library> {
    Library::load(source).with_context(|| format!("loading {source}"))
}

/// The `--openssl` a child process gets to load the same library (None: the system's).
pub fn child_arg(source: &LibrarySource) -> Option<String> {
    ossl_build::library_arg(source)
}

/// Resolves `--openssl` once: a directory, or a version in the build cache (which must be
/// built); none is the system's library.
pub fn source(openssl: Option<&str>) -> anyhow::Result<LibrarySource> {
    let cache = ossl_build::BuildCache::new(crate::common::builds::cache_root());
    ossl_build::library_source(openssl, &cache).map_err(crate::common::wording::build_error)
}

/// `--openssl` as `compare --matrix` and `profile --matrix` take it: a comma-separated list of
/// libraries, each a version in the build cache (built on demand), an install directory, or
/// "system"; none given is the system's alone. Resolved per variant, as each is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LibraryList(pub Vec<String>);

impl LibraryList {
    /// The list `--openssl` gives (empty items dropped).
    pub fn parse(openssl: Option<&str>) -> LibraryList {
        LibraryList(
            openssl
                .unwrap_or("system")
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect(),
        )
    }
}
