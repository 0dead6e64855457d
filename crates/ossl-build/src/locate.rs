//! Where things are: the build cache, cargo's home, and the library `--openssl` names.
//!
//! Nothing here reads the environment: the caller passes the variables' values in.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use ossl::LibrarySource;

use crate::{BuildCache, BuildError};

/// The build cache directory: `$XDG_CACHE_HOME/tlsscope/openssl`, else
/// `$HOME/.cache/tlsscope/openssl`, given those variables' values (empty counts as unset).
pub fn default_cache_root(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> PathBuf {
    let base = non_empty(xdg_cache_home)
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir(home).join(".cache"));
    base.join("tlsscope").join("openssl")
}

/// Cargo's home: `$CARGO_HOME`, else `$HOME/.cargo`, given those variables' values.
pub fn default_cargo_home(cargo_home: Option<OsString>, home: Option<OsString>) -> PathBuf {
    non_empty(cargo_home)
        .map(PathBuf::from)
        .unwrap_or_else(|| home_dir(home).join(".cargo"))
}

/// `$HOME`, or `/` when it is unset.
fn home_dir(home: Option<OsString>) -> PathBuf {
    non_empty(home)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The value of a variable if it is set and not empty.
fn non_empty(value: Option<OsString>) -> Option<OsString> {
    value.filter(|value| !value.is_empty())
}

/// The library a user named with `--openssl`: an install directory (a path), or a version or
/// flavour ("aws-lc", "boringssl") in `cache`, which must be built (nothing is built here).
/// None is the system's library.
pub fn library_source(name: Option<&str>, cache: &BuildCache) -> Result<LibrarySource, BuildError> {
    let Some(name) = name else {
        return Ok(LibrarySource::System);
    };
    let path = Path::new(name);
    if name.contains('/') || path.is_dir() {
        return Ok(LibrarySource::Dir(path.to_path_buf()));
    }
    cache
        .find(name)
        .map(|build| LibrarySource::Dir(build.prefix))
        .ok_or_else(|| BuildError::NotBuilt {
            name: name.to_string(),
        })
}

/// The `--openssl` value that names `source` again, e.g. for a child process (None: the
/// system's library, which is the default).
pub fn library_arg(source: &LibrarySource) -> Option<String> {
    match source {
        LibrarySource::System => None,
        LibrarySource::Dir(dir) => Some(dir.display().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_is_a_path_a_built_version_or_the_system() {
        let cache = BuildCache::new(PathBuf::from("/nonexistent/cache"));
        assert_eq!(
            library_source(None, &cache).ok(),
            Some(LibrarySource::System)
        );
        assert_eq!(
            library_source(Some("/opt/ssl"), &cache).ok(),
            Some(LibrarySource::Dir("/opt/ssl".into()))
        );
        let e = library_source(Some("9.9.9"), &cache).unwrap_err();
        assert!(
            e.to_string().contains("tlsscope openssl build 9.9.9"),
            "{e}"
        );
    }

    #[test]
    fn a_cmake_flavour_resolves_to_its_prefix_in_the_cache() {
        let root = std::env::temp_dir().join(format!("ossl-locate-{}", std::process::id()));
        let cache = BuildCache::new(root.clone());
        let missing = library_source(Some("boringssl"), &cache).unwrap_err();
        crate::tests::place_aws_lc_manifest(&root);
        let found = library_source(Some("aws-lc"), &cache).ok();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(found, Some(LibrarySource::Dir(root.join("aws-lc"))));
        assert!(
            missing
                .to_string()
                .contains("run `tlsscope openssl build boringssl`"),
            "{missing}"
        );
    }

    #[test]
    fn a_library_source_names_itself_again() {
        assert_eq!(library_arg(&LibrarySource::System), None);
        let dir = LibrarySource::Dir("/opt/ssl".into());
        assert_eq!(library_arg(&dir).as_deref(), Some("/opt/ssl"));
    }

    #[test]
    fn the_cache_follows_xdg_then_home() {
        let some = |s: &str| Some(OsString::from(s));
        assert_eq!(
            default_cache_root(some("/x"), some("/h")),
            Path::new("/x/tlsscope/openssl")
        );
        assert_eq!(
            default_cache_root(some(""), some("/h")),
            Path::new("/h/.cache/tlsscope/openssl")
        );
        assert_eq!(
            default_cache_root(None, None),
            Path::new("/.cache/tlsscope/openssl")
        );
        assert_eq!(default_cargo_home(some("/c"), some("/h")), Path::new("/c"));
        assert_eq!(default_cargo_home(None, some("/h")), Path::new("/h/.cargo"));
    }
}
