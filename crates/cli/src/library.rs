//! Picks the OpenSSL under test from `--openssl`.

use std::path::Path;

use anyhow::Context as _;
use ossl::{Library, LibrarySource};

use crate::openssl_cmd;

/// Loads the library `--openssl` was resolved to.
pub fn load(source: &LibrarySource) -> anyhow::Result<&'static Library> {
    Library::load(source).with_context(|| format!("loading {source}"))
}

/// The `--openssl` a child process gets to load the same library (None: the system's).
pub fn child_arg(source: &LibrarySource) -> Option<String> {
    match source {
        LibrarySource::System => None,
        LibrarySource::Dir(dir) => Some(dir.display().to_string()),
    }
}

/// Resolves `--openssl` once: a directory, or a version in the build cache (which must be
/// built); none is the system's library.
pub fn source(openssl: Option<&str>) -> anyhow::Result<LibrarySource> {
    let Some(arg) = openssl else {
        return Ok(LibrarySource::System);
    };
    let path = Path::new(arg);
    if arg.contains('/') || path.is_dir() {
        return Ok(LibrarySource::Dir(path.to_path_buf()));
    }
    let cache = ossl::build::BuildCache::new(openssl_cmd::cache_root());
    match cache.find(arg) {
        Some(build) => Ok(LibrarySource::Dir(build.prefix)),
        None => anyhow::bail!(
            "--openssl {arg}: OpenSSL {arg} is not built; run `tlsscope openssl build {arg}` \
             first, or pass an install prefix"
        ),
    }
}

/// Prints the system library's version, for `openssl list`.
pub fn print_system_library() {
    match Library::load(&LibrarySource::System) {
        Ok(lib) => println!(
            "system: {} (version number 0x{:08x}, {})",
            lib.version().text,
            lib.version().number,
            lib.ssl_path().display()
        ),
        Err(e) => println!("system: no usable OpenSSL ({e})"),
    }
}
