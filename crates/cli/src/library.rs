//! Picks the OpenSSL under test from `--openssl`.

use anyhow::Context as _;
use ossl::{Library, LibrarySource};

use crate::openssl_cmd;

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
    let cache = ossl_build::BuildCache::new(openssl_cmd::cache_root());
    ossl_build::library_source(openssl, &cache).map_err(crate::wording::build_error)
}

/// Prints the system library's version, for `openssl list`.
pub fn print_system_library() -> anyhow::Result<()> {
    let line = match Library::load(&LibrarySource::System) {
        Ok(lib) => format!(
            "system: {} (version number 0x{:08x}, {})\n",
            lib.name(),
            lib.version().number,
            lib.ssl_path().display()
        ),
        Err(e) => format!("system: no usable OpenSSL ({e})\n"),
    };
    crate::output::to_stdout(line)
}
