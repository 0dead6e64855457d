//! Picks the OpenSSL under test from `--openssl`.

use std::path::Path;

use anyhow::Context as _;
use ossl::{Library, LibrarySource};

use crate::openssl_cmd;

/// Resolves `--openssl` (a directory, or a version in the build cache) and loads it.
pub fn load(openssl: Option<&str>) -> anyhow::Result<&'static Library> {
    let source = source(openssl)?;
    Library::load(&source).with_context(|| format!("loading {source}"))
}

fn source(openssl: Option<&str>) -> anyhow::Result<LibrarySource> {
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
