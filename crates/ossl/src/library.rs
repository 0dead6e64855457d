//! Finding, loading and identifying the libssl/libcrypto under test.

use std::ffi::{c_void, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::Error;
use crate::ffi::{self, Api};

/// Where to load OpenSSL from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LibrarySource {
    /// The system's default `libssl.so.3` / `libcrypto.so.3`, found by the dynamic loader.
    System,
    /// An install prefix (a directory holding `lib/libssl.so.*`), or the lib directory itself.
    Dir(PathBuf),
}

impl fmt::Display for LibrarySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibrarySource::System => f.write_str("the system OpenSSL"),
            LibrarySource::Dir(dir) => write!(f, "{}", dir.display()),
        }
    }
}

/// The OpenSSL version a library reports about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// `OpenSSL_version_num()`, e.g. `0x1010117f` for 1.1.1w, `0x30000130` for 3.0.19.
    pub number: u64,
    /// `OpenSSL_version(OPENSSL_VERSION)`, e.g. "OpenSSL 3.0.19 27 Jan 2026".
    pub text: String,
}

impl Version {
    /// The major version: 1 for 1.1.1, 3 for 3.x.
    pub fn major(&self) -> u64 {
        self.number >> 28
    }

    /// The minor version: 1 for 1.1.1, 0 for 3.0.x.
    pub fn minor(&self) -> u64 {
        (self.number >> 20) & 0xff
    }

    /// The short version name, e.g. "1.1.1w" or "3.0.19": the second word of `text`.
    pub fn short(&self) -> &str {
        self.text.split_whitespace().nth(1).unwrap_or(&self.text)
    }

    /// True for OpenSSL 3.0 and later.
    pub fn is_3x_or_later(&self) -> bool {
        self.major() >= 3
    }
}

/// A loaded OpenSSL: the two library handles, the resolved functions and the version.
///
/// Libraries are loaded once and never unloaded (OpenSSL does not support being unloaded while
/// threads may still use it), so a `Library` lives for the whole process as `&'static`.
pub struct Library {
    api: Api,
    version: Version,
    ssl_path: PathBuf,
    crypto_path: PathBuf,
    source: LibrarySource,
}

// SAFETY: the table holds only function pointers into a library that is never unloaded, and the
// OpenSSL versions supported (1.1.1, 3.x) are thread-safe without locking callbacks.
unsafe impl Send for Library {}
// SAFETY: as above; nothing in `Library` is mutated after loading.
unsafe impl Sync for Library {}

/// The one library this process has loaded. Two OpenSSL builds with the same soname
/// (`libssl.so.3`) cannot be told apart by the dynamic loader, so a process loads only one and
/// comparisons run each variant in its own process.
static LOADED: OnceLock<&'static Library> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

impl Library {
    /// Loads OpenSSL from `source`, or returns the library already loaded from the same source.
    pub fn load(source: &LibrarySource) -> Result<&'static Library, Error> {
        let _guard = LOADING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(lib) = LOADED.get() {
            if lib.source == *source {
                return Ok(lib);
            }
            return Err(Error::AlreadyLoaded {
                loaded: lib.source.to_string(),
                requested: source.to_string(),
            });
        }
        let lib: &'static Library = Box::leak(Box::new(open(source)?));
        // Only this function sets LOADED, under LOADING, and it was empty above.
        let _ = LOADED.set(lib);
        Ok(lib)
    }

    /// The library this process loaded, if any. Callbacks from OpenSSL use it.
    pub fn loaded() -> Option<&'static Library> {
        LOADED.get().copied()
    }

    /// The resolved function table.
    pub fn api(&self) -> &Api {
        &self.api
    }

    /// The version the library reports.
    pub fn version(&self) -> &Version {
        &self.version
    }

    /// Where libssl was loaded from (a file name for the system library).
    pub fn ssl_path(&self) -> &Path {
        &self.ssl_path
    }

    /// Where libcrypto was loaded from.
    pub fn crypto_path(&self) -> &Path {
        &self.crypto_path
    }

    /// What the library was asked to be loaded from.
    pub fn source(&self) -> &LibrarySource {
        &self.source
    }
}

impl fmt::Debug for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Library")
            .field("version", &self.version)
            .field("ssl_path", &self.ssl_path)
            .field("crypto_path", &self.crypto_path)
            .finish()
    }
}

/// The two files to load, libcrypto first.
struct Files {
    crypto: PathBuf,
    ssl: PathBuf,
}

fn open(source: &LibrarySource) -> Result<Library, Error> {
    let files = match source {
        LibrarySource::System => Files {
            crypto: PathBuf::from("libcrypto.so.3"),
            ssl: PathBuf::from("libssl.so.3"),
        },
        LibrarySource::Dir(dir) => find_in_dir(dir)?,
    };
    // libcrypto first: a build without an rpath can then satisfy libssl's dependency on it from
    // the copy already loaded instead of the system's.
    let crypto = dlopen(&files.crypto)?;
    let ssl = dlopen(&files.ssl)?;
    // SAFETY: both handles were just returned by dlopen and are never closed.
    let mut api = unsafe { Api::resolve(crypto, ssl) }.map_err(|missing| Error::MissingSymbol {
        symbol: missing.names.join(" or "),
        path: match missing.which {
            ffi::Which::Crypto => files.crypto.clone(),
            ffi::Which::Ssl => files.ssl.clone(),
        },
    })?;
    // SAFETY: the handles are live and never closed.
    unsafe { crate::inproc::route(&mut api, crypto, ssl) };
    // SAFETY: both functions take no pointers; OpenSSL_version returns a static string.
    let version = unsafe {
        Version {
            number: (api.OpenSSL_version_num)(),
            text: ffi::string((api.OpenSSL_version)(ffi::OPENSSL_VERSION)).unwrap_or_default(),
        }
    };
    if version.number < 0x1010_1000 {
        return Err(Error::Unsupported {
            path: files.ssl,
            version: version.text,
        });
    }
    Ok(Library {
        api,
        version,
        ssl_path: files.ssl,
        crypto_path: files.crypto,
        source: source.clone(),
    })
}

/// Finds `libssl.so.<v>` and the matching `libcrypto.so.<v>` under an install prefix.
fn find_in_dir(dir: &Path) -> Result<Files, Error> {
    if !dir.is_dir() {
        return Err(Error::NotADirectory(dir.to_path_buf()));
    }
    let candidates = [dir.join("lib"), dir.join("lib64"), dir.to_path_buf()];
    for lib_dir in &candidates {
        for suffix in ["3", "1.1"] {
            let ssl = lib_dir.join(format!("libssl.so.{suffix}"));
            let crypto = lib_dir.join(format!("libcrypto.so.{suffix}"));
            if ssl.is_file() && crypto.is_file() {
                return Ok(Files { crypto, ssl });
            }
        }
    }
    Err(Error::NoLibssl {
        dir: dir.to_path_buf(),
        looked_in: candidates.iter().map(|p| p.display().to_string()).collect(),
    })
}

fn dlopen(path: &Path) -> Result<*mut c_void, Error> {
    let cpath = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Error::Load {
        path: path.to_path_buf(),
        reason: "the path contains a NUL byte".into(),
    })?;
    // SAFETY: `cpath` is NUL-terminated. RTLD_LOCAL keeps this OpenSSL's symbols from resolving
    // anything else in the process.
    let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns null or a thread-local NUL-terminated message.
        let reason = unsafe { ffi::string(libc::dlerror()) }.unwrap_or_default();
        return Err(Error::Load {
            path: path.to_path_buf(),
            reason,
        });
    }
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parts() {
        let v = Version {
            number: 0x1010_117f,
            text: "OpenSSL 1.1.1w  11 Sep 2023".into(),
        };
        assert_eq!((v.major(), v.minor(), v.short()), (1, 1, "1.1.1w"));
        assert!(!v.is_3x_or_later());
        let v = Version {
            number: 0x3000_0130,
            text: "OpenSSL 3.0.19 27 Jan 2026".into(),
        };
        assert_eq!((v.major(), v.minor(), v.short()), (3, 0, "3.0.19"));
        assert!(v.is_3x_or_later());
    }

    #[test]
    fn a_directory_without_libssl_is_named_in_the_error() {
        let dir = std::env::temp_dir().join(format!("ossl-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = find_in_dir(&dir).err().expect("an empty dir has no libssl");
        std::fs::remove_dir(&dir).unwrap();
        let msg = err.to_string();
        assert!(msg.contains(&dir.display().to_string()), "{msg}");
        assert!(msg.contains("libssl"), "{msg}");
    }
}
