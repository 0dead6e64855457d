//! The one error type of `ossl-build`.

use std::path::PathBuf;

/// Everything that can go wrong while resolving, fetching or building an OpenSSL version, or
/// finding one in the cache.
///
/// Each message is one line that names the thing involved and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The version string is not shaped like an OpenSSL version.
    #[error(
        "'{version}' is not an OpenSSL version or a library tlsscope builds: pass one like \
         1.1.1w or 3.5.5, or aws-lc or boringssl"
    )]
    InvalidVersion {
        /// The rejected version string.
        version: String,
    },

    /// No openssl-src release carries the requested OpenSSL version.
    #[error(
        "openssl-src has no release of OpenSSL {version} (known: {known}): \
         pick one of those or build from a source tree or tarball"
    )]
    UnknownVersion {
        /// The requested OpenSSL version.
        version: String,
        /// The OpenSSL versions that are available, comma-separated.
        known: String,
    },

    /// The source tree lacks both `util/mkdef.pl` and an ordinal file tlsscope could write the
    /// version scripts from.
    #[error(
        "the source of OpenSSL {version} lacks util/mkdef.pl and {missing}, one of which \
         building shared libraries needs: build from an official release tarball"
    )]
    TrimmedSource {
        /// The version being built.
        version: String,
        /// The missing file, relative to the tree.
        missing: String,
    },

    /// A line of an ordinal file (`util/libcrypto.num`) is not in OpenSSL's format.
    #[error(
        "{path} line {line} is not an OpenSSL ordinal (NAME NUMBER VERSION \
         EXIST:PLATFORMS:KIND:FEATURES): {detail}; check the source tree"
    )]
    BadOrdinals {
        /// The ordinal file.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        detail: String,
    },

    /// The linker version scripts could not be written from an input of the configured tree.
    #[error(
        "cannot write the linker version scripts from {path}: {detail}; check the source tree"
    )]
    VersionScript {
        /// The input (ordinal file, `configdata.pm` or `Makefile`).
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },

    /// The machine is not one this module knows an OpenSSL Configure target for.
    #[error("cannot build OpenSSL on {os}/{arch}: only Linux on x86_64 and aarch64 is supported")]
    UnsupportedPlatform {
        /// The operating system (`std::env::consts::OS`).
        os: &'static str,
        /// The CPU architecture (`std::env::consts::ARCH`).
        arch: &'static str,
    },

    /// The cache root contains characters that OpenSSL's Makefiles and linker flags cannot carry.
    #[error(
        "the build cache {root} contains a space or special character that OpenSSL's build \
         cannot handle: use a cache directory made of letters, digits and /._-+@~="
    )]
    UnsafeCacheRoot {
        /// The cache root.
        root: PathBuf,
    },

    /// A tool needed for the build is not installed.
    #[error("cannot build {target}: '{tool}' is not installed ({hint})")]
    MissingTool {
        /// What was about to be built, e.g. "OpenSSL 3.1.3".
        target: String,
        /// The missing program.
        tool: &'static str,
        /// How to install it.
        hint: &'static str,
    },

    /// A program could not be started for another reason than being absent.
    #[error("cannot run '{program}': {source}: check that it is installed and executable")]
    Spawn {
        /// The program.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A cargo command (fetch, metadata, generate-lockfile) failed.
    #[error(
        "'cargo {step}' failed for {requirement}: {detail}: \
         check network access and that 'cargo {step}' works in {dir}"
    )]
    Cargo {
        /// The cargo subcommand.
        step: &'static str,
        /// The crate and the version requirement on it, e.g. "openssl-src =300.5.5".
        requirement: String,
        /// The last line cargo printed.
        detail: String,
        /// The throwaway project cargo ran in (removed afterwards).
        dir: PathBuf,
    },

    /// Cargo reported a source crate that does not carry the library's tree where expected.
    #[error(
        "{krate} at {path} has no {library} source tree: \
         delete that directory so cargo unpacks it again"
    )]
    CrateLayout {
        /// The crate and the version cargo resolved, e.g. "openssl-src 300.5.5+3.5.5".
        krate: String,
        /// The library whose tree is missing, e.g. "OpenSSL".
        library: String,
        /// The expected tree (`openssl/`, `aws-lc/`, `deps/boringssl/`).
        path: PathBuf,
    },

    /// The given `--source` path does not exist.
    #[error(
        "source {path} does not exist: pass an OpenSSL source directory or .tar.gz/.tgz tarball"
    )]
    SourceNotFound {
        /// The given path.
        path: PathBuf,
    },

    /// The given `--source` path is neither a directory nor a tarball.
    #[error(
        "source {path} is neither a directory nor a .tar.gz/.tgz tarball: \
         pass an OpenSSL source tree or release tarball"
    )]
    BadSourcePath {
        /// The given path.
        path: PathBuf,
    },

    /// The given source is not an OpenSSL source tree.
    #[error(
        "{path} is not an OpenSSL source tree (no VERSION.dat or include/openssl/opensslv.h \
         with a version): pass the top directory of an OpenSSL 1.1.1/3.x source or its tarball"
    )]
    NotOpenSslTree {
        /// The directory or tarball.
        path: PathBuf,
    },

    /// `tar` could not unpack the tarball.
    #[error("cannot extract {tarball}: {detail}: check that it is an intact .tar.gz")]
    Extract {
        /// The tarball.
        tarball: PathBuf,
        /// The last line tar printed.
        detail: String,
    },

    /// OpenSSL's Configure needs a Perl module that is not installed.
    #[error(
        "cannot configure OpenSSL {version}: Perl module {module} is missing \
         (apt-get install perl, or cpan {module}); log: {log}"
    )]
    MissingPerlModule {
        /// The OpenSSL version.
        version: String,
        /// The module, e.g. "IPC::Cmd".
        module: String,
        /// The kept build log.
        log: PathBuf,
    },

    /// Configure, make or make install (or cmake, ninja, cmake --install) failed.
    #[error("{step} failed for {target}: see {log}; it ends: {tail}")]
    StepFailed {
        /// The failing step, e.g. "make -j2".
        step: String,
        /// What was being built, e.g. "OpenSSL 3.5.5" or "AWS-LC".
        target: String,
        /// The kept build log.
        log: PathBuf,
        /// The last few lines of the log, joined with " | ".
        tail: String,
    },

    /// The install step succeeded but the shared libraries are not where they belong.
    #[error("{target} installed without {missing}: see {log} and force a rebuild")]
    IncompleteInstall {
        /// What was being built, e.g. "OpenSSL 3.5.5" or "AWS-LC".
        target: String,
        /// The missing file.
        missing: PathBuf,
        /// The kept build log.
        log: PathBuf,
    },

    /// An installed header does not give the library's version the way the flavour's do.
    #[error(
        "{path} does not define {macro_name}, which gives the {library} version: \
         see {log} and force a rebuild"
    )]
    HeaderVersion {
        /// The installed header (`include/openssl/base.h`).
        path: PathBuf,
        /// The macro looked for, e.g. "AWSLC_VERSION_NUMBER_STRING".
        macro_name: &'static str,
        /// The flavour, e.g. "AWS-LC".
        library: String,
        /// The kept build log.
        log: PathBuf,
    },

    /// A build manifest exists but cannot be read.
    #[error(
        "build manifest {path} is unreadable ({detail}): delete its directory and build again"
    )]
    BadManifest {
        /// The manifest file.
        path: PathBuf,
        /// Why it could not be read.
        detail: String,
    },

    /// A version or flavour named as a library that the cache does not have.
    #[error(
        "{name} is not in the build cache; run `tlsscope openssl build {name}` first, or pass \
         an install prefix"
    )]
    NotBuilt {
        /// The version or flavour asked for, e.g. "3.5.5" or "aws-lc".
        name: String,
    },

    /// Some builds of a batch of several versions failed (each was reported as it failed).
    #[error("{} of {total} builds failed: {}", failed.len(), failed.join(", "))]
    BatchFailed {
        /// The versions that did not build, in the order they were tried.
        failed: Vec<String>,
        /// How many versions the batch built or tried to.
        total: usize,
    },

    /// A file system operation failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl BuildError {
    /// Wraps an I/O error with the action and path it happened on.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        BuildError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
