//! tlsscope's probe library (`crates/inproc`, a cdylib that `build.rs` builds and this crate
//! embeds, so that tlsscope stays one file) as a file a program can load, and where tlsscope
//! keeps its files for traced programs (the library, region files).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use crate::Error;

/// The library's bytes, as built by `build.rs`.
pub(super) static LIBRARY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libtlsscope_inproc.so"));

/// The environment variable that tells the library where the region is (see `inproc_abi`).
pub(super) fn env_region() -> &'static std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(inproc_abi::ENV_REGION.to_bytes())
}

/// The library as a file a program can load: written once per build, by content, under
/// `/run/tlsscope` (root) or the user's runtime or cache directory, readable by all (a server's
/// workers may run as another user).
pub fn library_file() -> Result<PathBuf, Error> {
    let dir = library_dir();
    let path = dir.join(format!("{LIBRARY_FILE_PREFIX}{:016x}.so", fnv1a(LIBRARY)));
    if std::fs::read(&path).is_ok_and(|b| b == LIBRARY) {
        return Ok(path);
    }
    let io = |source| Error::Read {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
    // Written aside and renamed: a program never loads half a library.
    let tmp = dir.join(format!(".inproc-{}.tmp", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, LIBRARY))
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(io)?;
    Ok(path)
}

/// How the library's file name starts (the rest is its content's hash).
pub const LIBRARY_FILE_PREFIX: &str = "libtlsscope_inproc-";

/// Where tlsscope keeps the library and region files: `/run/tlsscope` (root), else the
/// user's runtime or cache directory.
pub(super) fn library_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return PathBuf::from("/run/tlsscope");
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(dir).join("tlsscope");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".cache/tlsscope")
}

/// FNV-1a, to name the library file by its content.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
