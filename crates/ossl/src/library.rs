//! Finding, loading and identifying the libssl/libcrypto under test.

use std::ffi::{c_void, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::Error;
use crate::ffi::{self, Api};

/// Where to load the library from.
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

/// Which TLS library a `libssl`/`libcrypto` pair is: OpenSSL itself or one of the forks that
/// keep its names. AWS-LC and BoringSSL both report OpenSSL 1.1.1's version number
/// (`0x1010107f`), so the version number alone cannot tell them from OpenSSL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    OpenSsl,
    AwsLc,
    BoringSsl,
}

impl Flavour {
    /// The library's own name: "OpenSSL", "AWS-LC", "BoringSSL".
    pub fn name(self) -> &'static str {
        match self {
            Flavour::OpenSsl => "OpenSSL",
            Flavour::AwsLc => "AWS-LC",
            Flavour::BoringSsl => "BoringSSL",
        }
    }

    /// True for OpenSSL itself.
    pub fn is_openssl(self) -> bool {
        self == Flavour::OpenSsl
    }

    /// The flavour `OpenSSL_version(OPENSSL_VERSION)` names: "OpenSSL 3.0.19 27 Jan 2026",
    /// "AWS-LC 5.12.0" (or "AWS-LC FIPS ..."), "BoringSSL".
    pub fn from_version_text(text: &str) -> Option<Flavour> {
        let first = text.split_whitespace().next()?;
        match first {
            "OpenSSL" => Some(Flavour::OpenSsl),
            "AWS-LC" => Some(Flavour::AwsLc),
            "BoringSSL" => Some(Flavour::BoringSsl),
            _ => None,
        }
    }
}

impl fmt::Display for Flavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A loaded OpenSSL: the two library handles, the resolved functions and the version.
///
/// Libraries are loaded once and never unloaded (OpenSSL does not support being unloaded while
/// threads may still use it), so a `Library` lives for the whole process as `&'static`.
pub struct Library {
    api: Api,
    version: Version,
    flavour: Flavour,
    name: String,
    /// AWS-LC and BoringSSL: the connection ex data index that holds a client's newest session
    /// (see `crate::context`).
    session_index: Option<std::ffi::c_int>,
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

    /// Which library this is: OpenSSL, AWS-LC or BoringSSL.
    pub fn flavour(&self) -> Flavour {
        self.flavour
    }

    /// The flavour and version as results name them: "OpenSSL 4.0.3", "AWS-LC 5.12.0",
    /// "BoringSSL API 44" (BoringSSL has no releases; its API version is read from the headers
    /// installed beside the library, and it is plain "BoringSSL" without them).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// AWS-LC and BoringSSL: where a client connection keeps its newest session.
    pub(crate) fn session_index(&self) -> Option<std::ffi::c_int> {
        self.session_index
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
            .field("name", &self.name)
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
    let flavour = match Flavour::from_version_text(&version.text) {
        Some(flavour) if version.number >= 0x1010_1000 => flavour,
        _ => {
            return Err(Error::Unsupported {
                path: files.ssl,
                version: version.text,
            })
        }
    };
    api.keep_flavour(flavour);
    let name = display_name(flavour, &version, &files.ssl);
    let session_index = api.SSL_get_ex_new_index.map(|new_index| {
        // SAFETY: no argument is used (no callbacks); returns a fresh index.
        unsafe {
            new_index(
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
    });
    Ok(Library {
        api,
        version,
        flavour,
        name,
        session_index: session_index.filter(|&i| i >= 0),
        ssl_path: files.ssl,
        crypto_path: files.crypto,
        source: source.clone(),
    })
}

/// See [`Library::name`].
fn display_name(flavour: Flavour, version: &Version, ssl: &Path) -> String {
    match flavour {
        Flavour::OpenSsl => format!("OpenSSL {}", version.short()),
        Flavour::AwsLc => version.text.clone(),
        Flavour::BoringSsl => match boringssl_api_version(ssl) {
            Some(api) => format!("BoringSSL API {api}"),
            None => "BoringSSL".into(),
        },
    }
}

/// `BORINGSSL_API_VERSION` from `include/openssl/base.h` beside the library's `lib` directory:
/// BoringSSL exports no function that reports it.
fn boringssl_api_version(ssl: &Path) -> Option<u32> {
    let prefix = ssl.parent()?.parent()?;
    let header = std::fs::read_to_string(prefix.join("include/openssl/base.h")).ok()?;
    header.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("#define BORINGSSL_API_VERSION")?;
        rest.trim().parse().ok()
    })
}

/// The sonames looked for, newest first: OpenSSL 4 (`.so.4`), 3.x, 1.1.1, and the unversioned
/// names CMake builds of AWS-LC and BoringSSL install.
const SONAME_SUFFIXES: [&str; 4] = [".4", ".3", ".1.1", ""];

/// Finds `libssl.so.<v>` and the matching `libcrypto.so.<v>` under an install prefix.
fn find_in_dir(dir: &Path) -> Result<Files, Error> {
    if !dir.is_dir() {
        return Err(Error::NotADirectory(dir.to_path_buf()));
    }
    let candidates = [dir.join("lib"), dir.join("lib64"), dir.to_path_buf()];
    for lib_dir in &candidates {
        for suffix in SONAME_SUFFIXES {
            let ssl = lib_dir.join(format!("libssl.so{suffix}"));
            let crypto = lib_dir.join(format!("libcrypto.so{suffix}"));
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
    fn the_flavour_is_read_from_the_version_text() {
        let f = Flavour::from_version_text;
        assert_eq!(f("OpenSSL 4.0.3 14 Apr 2026"), Some(Flavour::OpenSsl));
        assert_eq!(f("AWS-LC 5.12.0"), Some(Flavour::AwsLc));
        assert_eq!(f("AWS-LC FIPS 3.0.0"), Some(Flavour::AwsLc));
        assert_eq!(f("BoringSSL"), Some(Flavour::BoringSsl));
        assert_eq!(f("LibreSSL 3.9.2"), None);
        assert_eq!(f(""), None);
    }

    #[test]
    fn display_names_carry_flavour_and_version() {
        let v = |number, text: &str| Version {
            number,
            text: text.into(),
        };
        let nowhere = Path::new("/nonexistent/lib/libssl.so");
        assert_eq!(
            display_name(
                Flavour::OpenSsl,
                &v(0x4000_0030, "OpenSSL 4.0.3 14 Apr 2026"),
                nowhere
            ),
            "OpenSSL 4.0.3"
        );
        assert_eq!(
            display_name(Flavour::AwsLc, &v(0x1010_107f, "AWS-LC 5.12.0"), nowhere),
            "AWS-LC 5.12.0"
        );
        assert_eq!(
            display_name(Flavour::BoringSsl, &v(0x1010_107f, "BoringSSL"), nowhere),
            "BoringSSL"
        );
        let prefix = std::env::temp_dir().join(format!("ossl-bssl-{}", std::process::id()));
        std::fs::create_dir_all(prefix.join("include/openssl")).unwrap();
        std::fs::create_dir_all(prefix.join("lib")).unwrap();
        std::fs::write(
            prefix.join("include/openssl/base.h"),
            "// x\n#define BORINGSSL_API_VERSION 44\n",
        )
        .unwrap();
        let name = display_name(
            Flavour::BoringSsl,
            &v(0x1010_107f, "BoringSSL"),
            &prefix.join("lib/libssl.so"),
        );
        std::fs::remove_dir_all(&prefix).unwrap();
        assert_eq!(name, "BoringSSL API 44");
    }

    #[test]
    fn openssl_4_and_unversioned_cmake_names_are_found() {
        let root = std::env::temp_dir().join(format!("ossl-names-{}", std::process::id()));
        for (dir, suffix) in [("four", ".so.4"), ("cmake", ".so")] {
            let lib = root.join(dir).join("lib");
            std::fs::create_dir_all(&lib).unwrap();
            for name in ["libssl", "libcrypto"] {
                std::fs::write(lib.join(format!("{name}{suffix}")), b"").unwrap();
            }
        }
        let four = find_in_dir(&root.join("four")).map(|f| f.ssl);
        let cmake = find_in_dir(&root.join("cmake")).map(|f| f.crypto);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(four.unwrap(), root.join("four/lib/libssl.so.4"));
        assert_eq!(cmake.unwrap(), root.join("cmake/lib/libcrypto.so"));
    }

    #[test]
    fn openssl_keeps_none_of_the_boringssl_family_entries() {
        let lib = Library::load(&LibrarySource::System).unwrap();
        assert_eq!(lib.flavour(), Flavour::OpenSsl);
        let api = lib.api();
        // OpenSSL exports these names too; they are dropped, and its ctrl entry points kept.
        assert!(api.ERR_get_error_bssl.is_none() && api.SSL_SESSION_up_ref.is_none());
        assert!(api.SSL_in_init.is_none() && lib.session_index().is_none());
        assert!(api.SSL_CTX_ctrl.is_some() && api.SSL_ctrl.is_some());
        assert!(lib.name().starts_with("OpenSSL 3."), "{}", lib.name());
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
