//! `ossl-build`: building OpenSSL versions, AWS-LC and BoringSSL as shared libraries into a
//! cache directory, beside `ossl`, which loads them. Nothing here calls into the libraries; it
//! runs cargo, perl and make (OpenSSL), or cmake and ninja (AWS-LC, BoringSSL: see `cmake`).
//!
//! Layout of the cache root, where `<name>` is an OpenSSL version or "aws-lc", "boringssl":
//! - `<root>/<name>/` — an installed build (the install prefix); it counts as installed only
//!   once its manifest `tlsscope-build.json` exists (written last; it names the flavour and
//!   the version). Its build log is kept in `<root>/<name>/build.log`.
//! - `<root>/<name>.build-failed.log` — the log of the last failed build of that name.
//! - `<root>/.<name>.lock` — flock serialising builds of one name across processes.
//! - `<root>/.build-<name>/`, `<root>/.fetch-*`, ... — scratch space, removed after use.
//!
//! The libraries are built unstripped, with a RUNPATH to their own `lib/` directory, so that
//! internal functions can be found in the symbol tables later. Trees without `util/mkdef.pl`
//! (openssl-src's 3.5 and later) are built `no-module`, with linker version scripts that
//! `version_script` writes from the tree's ordinal files.
//!
//! Besides building, the crate holds the library side of `tlsscope openssl build|list`: where
//! the cache is (from values the caller reads from the environment), a batch of builds with
//! its progress display, the listing, and turning an `--openssl` name into an
//! [`ossl::LibrarySource`] through the cache.

mod batch;
mod cmake;
mod error;
mod index;
mod locate;
mod lock;
mod process;
mod source;
mod status;
mod version_script;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use batch::{effective_jobs, unique, BuildRequest, Listing};
pub use cmake::cmake_build_names;
pub use error::BuildError;
pub use index::KNOWN_RELEASES;
pub use locate::{default_cache_root, default_cargo_home, library_arg, library_source};
pub use status::StatusDisplay;

use lock::VersionLock;
use process::BuildLog;

/// File name of the manifest that marks a finished build.
pub const MANIFEST_FILE: &str = "tlsscope-build.json";
/// The async test engine a build keeps beside the installed ones.
pub const TEST_ENGINE_FILE: &str = "dasync.so";

/// An installed build's engines directory (`lib/engines-1.1`, `lib/engines-3`).
pub fn engines_dir(prefix: &Path) -> Option<PathBuf> {
    let lib = prefix.join("lib");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("engines-"))
        })
        .collect();
    dirs.sort();
    dirs.pop()
}

/// The build's `dasync` engine, when it kept one (builds made before issue 18 did not).
pub fn test_engine(prefix: &Path) -> Option<PathBuf> {
    engines_dir(prefix)
        .map(|d| d.join(TEST_ENGINE_FILE))
        .filter(|p| p.exists())
}

/// File name of the kept build log inside an installed build.
pub const LOG_FILE: &str = "build.log";

/// How many log lines a failure message quotes.
const TAIL_LINES: usize = 3;

pub use ossl::Flavour;

/// How a manifest writes a build's [`Flavour`]: by its name ("OpenSSL", "AWS-LC",
/// "BoringSSL"); manifests from before issue 31 name none, and are all OpenSSL.
mod flavour_name {
    use ossl::Flavour;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(flavour: &Flavour, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(flavour.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Flavour, D::Error> {
        let name = String::deserialize(d)?;
        Flavour::from_version_text(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown library flavour {name:?}")))
    }

    pub fn openssl() -> Flavour {
        Flavour::OpenSsl
    }
}

/// One finished build in the cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstalledBuild {
    /// The build's name in the cache and for `--openssl`: an OpenSSL version ("1.1.1w") or a
    /// CMake-built flavour ("aws-lc", "boringssl").
    pub version: String,
    /// The library family.
    #[serde(with = "flavour_name")]
    pub flavour: Flavour,
    /// The library's version as its installed headers give it: "3.5.5", "5.12.0", "API 44".
    pub flavour_version: String,
    /// The installation prefix (`lib/`, `include/`, `bin/` are below it).
    pub prefix: PathBuf,
    /// Where the source came from: "openssl-src 111.28.2+1.1.1w" or a local path.
    pub source: String,
    /// The kept build log.
    pub log: PathBuf,
    /// Wall-clock time of the build (copy, configure, compile, install).
    pub build_seconds: f64,
}

impl InstalledBuild {
    /// The library and its version in one phrase: "OpenSSL 3.5.5", "AWS-LC 5.12.0".
    pub fn library(&self) -> String {
        format!("{} {}", self.flavour, self.flavour_version)
    }
}

/// What is stored in a build's manifest file.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    /// The build's name (see [`InstalledBuild::version`]).
    version: String,
    #[serde(with = "flavour_name", default = "flavour_name::openssl")]
    flavour: Flavour,
    /// Empty in manifests from before issue 31, whose name is their OpenSSL version.
    #[serde(default)]
    flavour_version: String,
    source: String,
    build_seconds: f64,
    configure_args: Vec<String>,
    built_unix_seconds: u64,
}

/// Progress of one build, reported through the caller's callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Looking up which openssl-src release carries the requested version (via cargo's index).
    Resolving,
    /// Getting a source crate through cargo (downloaded only if not cached yet).
    Fetching {
        /// The crate and its version, e.g. "openssl-src 300.0.5".
        krate: String,
    },
    /// Unpacking a source tarball.
    Extracting,
    /// Another process is building the same version or flavour; waiting for it to finish.
    WaitingForLock,
    /// Copying the source tree into the scratch build directory.
    Copying,
    /// Running OpenSSL's Configure (or CMake).
    Configuring,
    /// Running make (or ninja); `objects` counts the object files compiled so far.
    Compiling {
        /// Object files compiled so far.
        objects: usize,
    },
    /// Running `make install_sw` (or `cmake --install`).
    Installing,
    /// The build is installed.
    Done,
}

impl Progress {
    /// The stage in the user's words ("fetching openssl-src 300.0.2+3.0.2").
    pub fn describe(&self) -> String {
        match self {
            Progress::Resolving => "looking up the openssl-src release".to_owned(),
            Progress::Fetching { krate } => format!("fetching {krate}"),
            Progress::Extracting => "extracting".to_owned(),
            Progress::WaitingForLock => "waiting for another process building it".to_owned(),
            Progress::Copying => "copying sources".to_owned(),
            Progress::Configuring => "configuring".to_owned(),
            Progress::Compiling { .. } => "compiling".to_owned(),
            Progress::Installing => "installing".to_owned(),
            Progress::Done => "done".to_owned(),
        }
    }
}

/// Settings of a build request.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Parallel make jobs (`make -j<jobs>`); 0 is treated as 1.
    pub jobs: usize,
    /// Rebuild even if the version is already installed.
    pub force: bool,
    /// Cargo's home directory (where its registry and index cache live).
    pub cargo_home: PathBuf,
}

/// The result of a build request.
#[derive(Debug, Clone, PartialEq)]
pub enum BuildOutcome {
    /// The version was built now.
    Built(InstalledBuild),
    /// The version was already installed; nothing was done.
    AlreadyInstalled(InstalledBuild),
}

impl BuildOutcome {
    /// The installed build, however it came to be.
    pub fn installed(&self) -> &InstalledBuild {
        match self {
            BuildOutcome::Built(build) | BuildOutcome::AlreadyInstalled(build) => build,
        }
    }
}

/// A source tree ready to be built.
struct PreparedSource {
    /// The OpenSSL version of the tree.
    version: String,
    /// The tree to copy from, or (for tarballs) to move into place as the scratch dir.
    tree: PathBuf,
    /// Whether `tree` is our own extracted copy that may be moved instead of copied.
    owned: bool,
    /// The description stored in the manifest.
    description: String,
}

/// A cache directory of OpenSSL builds, one subdirectory per version.
#[derive(Debug, Clone)]
pub struct BuildCache {
    root: PathBuf,
}

impl BuildCache {
    /// A cache rooted at `root` (created on the first build).
    pub fn new(root: PathBuf) -> Self {
        BuildCache { root }
    }

    /// The cache root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where `version` is (or would be) installed: `<root>/<version>`.
    pub fn install_dir(&self, version: &str) -> PathBuf {
        self.root.join(version)
    }

    /// Where the log of the last failed build of `version` is kept.
    pub fn failed_log_path(&self, version: &str) -> PathBuf {
        self.root.join(format!("{version}.build-failed.log"))
    }

    /// All installed builds, sorted by version. A missing root means none.
    pub fn installed(&self) -> Result<Vec<InstalledBuild>, BuildError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(BuildError::io("read directory", &self.root, e)),
        };
        let mut builds = Vec::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let manifest = entry.path().join(MANIFEST_FILE);
            if !name.starts_with('.') && manifest.is_file() {
                builds.push(self.read_manifest(&name)?);
            }
        }
        builds.sort_by(|a, b| {
            a.flavour
                .cmp(&b.flavour)
                .then_with(|| index::compare_versions(&a.version, &b.version))
        });
        Ok(builds)
    }

    /// The installed build named `name` (an OpenSSL version or a CMake-built flavour such as
    /// "aws-lc"), if its manifest exists and is readable.
    pub fn find(&self, name: &str) -> Option<InstalledBuild> {
        if cmake::recipe(name).is_none() {
            index::validate_version(name).ok()?;
        }
        self.read_manifest(name).ok()
    }

    /// Reads the manifest of the build in `<root>/<dir_name>`.
    fn read_manifest(&self, dir_name: &str) -> Result<InstalledBuild, BuildError> {
        let prefix = self.install_dir(dir_name);
        let path = prefix.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| BuildError::io("read manifest", &path, e))?;
        let manifest: Manifest =
            serde_json::from_str(&text).map_err(|e| BuildError::BadManifest {
                path: path.clone(),
                detail: e.to_string(),
            })?;
        let flavour_version = if manifest.flavour_version.is_empty() {
            manifest.version.clone()
        } else {
            manifest.flavour_version
        };
        Ok(InstalledBuild {
            version: manifest.version,
            flavour: manifest.flavour,
            flavour_version,
            log: prefix.join(LOG_FILE),
            prefix,
            source: manifest.source,
            build_seconds: manifest.build_seconds,
        })
    }

    /// Builds `name`: a CMake-built flavour ("aws-lc", "boringssl": [`cmake_build_names`]) or
    /// an OpenSSL version (see [`BuildCache::build_version`]).
    pub fn build_named(
        &self,
        name: &str,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        match cmake::recipe(name) {
            Some(recipe) => self.build_cmake(recipe, options, progress),
            None => self.build_version(name, options, progress),
        }
    }

    /// Builds OpenSSL `version` from the openssl-src crate (fetched through cargo), unless it is
    /// already installed and `options.force` is off.
    pub fn build_version(
        &self,
        version: &str,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        index::validate_version(version)?;
        if let Some(installed) = self.find(version).filter(|i| keeps(i, options)) {
            return Ok(BuildOutcome::AlreadyInstalled(installed));
        }
        let target = format!("OpenSSL {version}");
        process::require_tools(&target, &[process::CARGO, process::PERL, process::MAKE])?;
        let compiler = process::find_c_compiler(&target)?;
        self.create_root()?;
        if index::builtin_crate_version(version).is_none() {
            progress(Progress::Resolving);
        }
        let crate_version =
            source::resolve_crate_version(version, &options.cargo_home, &self.root)?;
        progress(Progress::Fetching {
            krate: format!("{} {crate_version}", source::OPENSSL_SRC),
        });
        let fetched = source::fetch_crate(&crate_version, &options.cargo_home, &self.root)?;
        let prepared = PreparedSource {
            version: version.to_owned(),
            tree: fetched.tree,
            owned: false,
            description: format!("{} {}", source::OPENSSL_SRC, fetched.crate_version),
        };
        self.build_prepared(prepared, compiler, options, progress)
    }

    /// Builds the OpenSSL source tree or `.tar.gz`/`.tgz` tarball at `source`; its version is
    /// read from the tree. Skipped if that version is installed and `options.force` is off.
    pub fn build_source(
        &self,
        source: &Path,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        let source = std::fs::canonicalize(source).map_err(|_| BuildError::SourceNotFound {
            path: source.to_owned(),
        })?;
        let description = source.display().to_string();
        let target = description.clone();
        if source.is_dir() {
            let version = source::detect_tree_version(&source)?;
            let prepared = PreparedSource {
                version,
                tree: source,
                owned: false,
                description,
            };
            return self.build_local(prepared, &target, options, progress);
        }
        if !source::is_tarball(&source) {
            return Err(BuildError::BadSourcePath { path: source });
        }
        process::require_tools(&target, &[process::TAR])?;
        self.create_root()?;
        progress(Progress::Extracting);
        let unpack_dir = source::scratch_dir(&self.root, "unpack");
        let result = source::extract_tarball(&source, &unpack_dir).and_then(|tree| {
            let version =
                source::detect_tree_version(&tree).map_err(|_| BuildError::NotOpenSslTree {
                    path: source.clone(),
                })?;
            let prepared = PreparedSource {
                version,
                tree,
                owned: true,
                description,
            };
            self.build_local(prepared, &target, options, progress)
        });
        let _ = std::fs::remove_dir_all(&unpack_dir);
        result
    }

    /// Builds a local tree whose version is known, after the installed and tool checks.
    fn build_local(
        &self,
        prepared: PreparedSource,
        target: &str,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        if let Some(installed) = self.find(&prepared.version).filter(|i| keeps(i, options)) {
            return Ok(BuildOutcome::AlreadyInstalled(installed));
        }
        process::require_tools(target, &[process::PERL, process::MAKE])?;
        let compiler = process::find_c_compiler(target)?;
        self.create_root()?;
        self.build_prepared(prepared, compiler, options, progress)
    }

    /// Takes the version lock, re-checks, and runs the build.
    fn build_prepared(
        &self,
        prepared: PreparedSource,
        compiler: &'static str,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        let configure_target = configure_target()?;
        self.check_root_is_safe()?;
        let lock_path = self.root.join(format!(".{}.lock", prepared.version));
        let _lock = VersionLock::acquire(&lock_path, &mut || progress(Progress::WaitingForLock))?;
        if let Some(installed) = self.find(&prepared.version).filter(|i| keeps(i, options)) {
            return Ok(BuildOutcome::AlreadyInstalled(installed));
        }
        let started = Instant::now();
        let job = BuildJob {
            cache: self,
            version: &prepared.version,
            scratch: self.root.join(format!(".build-{}", prepared.version)),
            prefix: self.install_dir(&prepared.version),
            configure_target,
            compiler,
            jobs: options.jobs.max(1),
        };
        job.clear_leftovers()?;
        let log_path = self.root.join(format!(".build-{}.log", prepared.version));
        let mut log = BuildLog::create(log_path)?;
        match job.run(&prepared, &mut log, progress) {
            Ok(configure_args) => {
                let log = log.finish()?;
                let installed = job.finish(&prepared, log, configure_args, started)?;
                progress(Progress::Done);
                Ok(BuildOutcome::Built(installed))
            }
            Err(error) => Err(job.fail(log, error)),
        }
    }

    /// Creates the cache root directory.
    fn create_root(&self) -> Result<(), BuildError> {
        std::fs::create_dir_all(&self.root)
            .map_err(|e| BuildError::io("create cache directory", &self.root, e))
    }

    /// Rejects cache roots that Makefiles and `-Wl,-rpath,<dir>` cannot carry verbatim.
    fn check_root_is_safe(&self) -> Result<(), BuildError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "/._-+@~=".contains(c);
        let root = self.root.to_str().unwrap_or(" ");
        if root.chars().all(allowed) {
            Ok(())
        } else {
            Err(BuildError::UnsafeCacheRoot {
                root: self.root.clone(),
            })
        }
    }
}

/// An installed build is kept unless `--force` is given, or it is from before builds kept the
/// dasync engine (those are built again, once). Builds without loadable modules have none.
fn keeps(installed: &InstalledBuild, options: &BuildOptions) -> bool {
    !options.force
        && (installed.flavour != Flavour::OpenSsl
            || test_engine(&installed.prefix).is_some()
            || built_without_modules(&installed.prefix))
}

/// Whether the build at `prefix` was configured `no-module` (its manifest says so).
fn built_without_modules(prefix: &Path) -> bool {
    std::fs::read_to_string(prefix.join(MANIFEST_FILE))
        .ok()
        .and_then(|text| serde_json::from_str::<Manifest>(&text).ok())
        .is_some_and(|manifest| manifest.configure_args.iter().any(|a| a == NO_MODULE))
}

/// The Configure option that builds no loadable modules (engines, providers).
const NO_MODULE: &str = "no-module";

/// OpenSSL's Configure target for this machine.
fn configure_target() -> Result<&'static str, BuildError> {
    use std::env::consts::{ARCH, OS};
    match (OS, ARCH) {
        ("linux", "x86_64") => Ok("linux-x86_64"),
        ("linux", "aarch64") => Ok("linux-aarch64"),
        (os, arch) => Err(BuildError::UnsupportedPlatform { os, arch }),
    }
}

/// How a tree's shared libraries get their linker version scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recipe {
    /// The Makefile writes them with OpenSSL's `util/mkdef.pl`.
    OpenSsl,
    /// tlsscope writes them from the `.num` files after Configure (see [`version_script`]).
    OwnVersionScripts,
}

/// One build of one version, run while holding its lock.
struct BuildJob<'a> {
    cache: &'a BuildCache,
    version: &'a str,
    /// The scratch copy of the source tree that is configured and compiled.
    scratch: PathBuf,
    /// The install prefix `<root>/<version>`.
    prefix: PathBuf,
    configure_target: &'static str,
    compiler: &'static str,
    jobs: usize,
}

impl BuildJob<'_> {
    /// Removes a partial install (no manifest), a forced rebuild's old install, and a stale
    /// scratch dir from an interrupted build.
    fn clear_leftovers(&self) -> Result<(), BuildError> {
        clear_leftovers(&self.prefix, &self.scratch)
    }

    /// Copies, configures, compiles and installs; returns the Configure arguments used.
    fn run(
        &self,
        prepared: &PreparedSource,
        log: &mut BuildLog,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<String>, BuildError> {
        progress(Progress::Copying);
        self.place_source(prepared)?;
        progress(Progress::Configuring);
        let recipe = self.recipe()?;
        let configure_args = self.configure(log, recipe)?;
        progress(Progress::Compiling { objects: 0 });
        self.compile(log, progress)?;
        progress(Progress::Installing);
        self.install(log, recipe)?;
        Ok(configure_args)
    }

    /// Puts the source tree at the scratch path: moved if it is our own extracted copy,
    /// otherwise copied (the cargo registry copy must stay untouched).
    fn place_source(&self, prepared: &PreparedSource) -> Result<(), BuildError> {
        if prepared.owned && std::fs::rename(&prepared.tree, &self.scratch).is_ok() {
            return Ok(());
        }
        copy_tree(&prepared.tree, &self.scratch)
    }

    /// How this tree builds shared libraries: with OpenSSL's `util/mkdef.pl` if it has one,
    /// otherwise (openssl-src's 3.5 and later copies) with tlsscope's version scripts.
    fn recipe(&self) -> Result<Recipe, BuildError> {
        if self.scratch.join("util/mkdef.pl").exists() {
            return Ok(Recipe::OpenSsl);
        }
        match version_script::missing_input(&self.scratch) {
            None => Ok(Recipe::OwnVersionScripts),
            Some(missing) => Err(BuildError::TrimmedSource {
                version: self.version.to_owned(),
                missing: missing.display().to_string(),
            }),
        }
    }

    /// The Configure arguments: shared libraries, no tests, private prefix with RUNPATH. Trees
    /// built with tlsscope's version scripts build no modules: the providers' and engines'
    /// ordinal file generator is missing from them too.
    fn configure_args(&self, recipe: Recipe) -> Vec<String> {
        let prefix = self.prefix.display();
        let mut args = vec![self.configure_target.to_owned(), "shared".to_owned()];
        if recipe == Recipe::OwnVersionScripts {
            args.push(NO_MODULE.to_owned());
        }
        args.extend([
            "no-tests".to_owned(),
            format!("--prefix={prefix}"),
            format!("--openssldir={prefix}/ssl"),
            "--libdir=lib".to_owned(),
            format!("-Wl,-rpath,{prefix}/lib"),
        ]);
        args
    }

    /// A command running in the scratch tree.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.current_dir(&self.scratch).env("CC", self.compiler);
        command
    }

    /// Runs `perl ./Configure ...`, recognising missing Perl modules; then, for trees without
    /// `util/mkdef.pl`, writes the version scripts the Makefile would have made with it.
    fn configure(&self, log: &mut BuildLog, recipe: Recipe) -> Result<Vec<String>, BuildError> {
        let args = self.configure_args(recipe);
        let mut command = self.command("perl");
        command.arg("./Configure").args(&args);
        let mut missing_module = None;
        let status = log.run(&mut command, &mut |line| {
            if missing_module.is_none() {
                missing_module = process::missing_perl_module(line);
            }
        })?;
        if status.success() {
            if recipe == Recipe::OwnVersionScripts {
                log.line(
                    "tlsscope: writing libcrypto.ld and libssl.ld from util/libcrypto.num and \
                     util/libssl.num (this tree has no util/mkdef.pl)",
                )?;
                version_script::write_for_tree(&self.scratch)?;
            }
            return Ok(args);
        }
        Err(match missing_module {
            Some(module) => BuildError::MissingPerlModule {
                version: self.version.to_owned(),
                module,
                log: PathBuf::new(),
            },
            None => self.step_failed("Configure"),
        })
    }

    /// Runs `make -j<jobs>` (only the software, not the documentation, where the Makefile
    /// distinguishes them), counting compiled objects.
    fn compile(
        &self,
        log: &mut BuildLog,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), BuildError> {
        let mut command = self.command("make");
        command.arg(format!("-j{}", self.jobs));
        if self.makefile_has_target("build_sw") {
            command.arg("build_sw");
        }
        let mut objects = 0;
        let status = log.run(&mut command, &mut |line| {
            if process::is_compile_line(line) {
                objects += 1;
                progress(Progress::Compiling { objects });
            }
        })?;
        if status.success() {
            Ok(())
        } else {
            Err(self.step_failed(&process::describe(&command)))
        }
    }

    /// Returns whether the generated Makefile defines `target` (3.x has `build_sw`, 1.1.1 not).
    fn makefile_has_target(&self, target: &str) -> bool {
        let makefile = std::fs::read_to_string(self.scratch.join("Makefile")).unwrap_or_default();
        let definition = format!("{target}:");
        makefile.lines().any(|line| line.starts_with(&definition))
    }

    /// Runs `make install_sw` and checks the shared libraries arrived.
    fn install(&self, log: &mut BuildLog, recipe: Recipe) -> Result<(), BuildError> {
        let mut command = self.command("make");
        command.arg("install_sw");
        if !log.run(&mut command, &mut |_| {})?.success() {
            return Err(self.step_failed("make install_sw"));
        }
        for library in ["libssl.so", "libcrypto.so"] {
            let path = self.prefix.join("lib").join(library);
            if !path.exists() {
                return Err(BuildError::IncompleteInstall {
                    target: self.target(),
                    missing: path,
                    log: PathBuf::new(),
                });
            }
        }
        match recipe {
            Recipe::OpenSsl => self.keep_test_engine(),
            // Built `no-module`: there is no dasync engine to keep.
            Recipe::OwnVersionScripts => Ok(()),
        }
    }

    /// Copies the `dasync` test engine (built, never installed by `make install_sw`) into the
    /// installed engines directory, where `ENGINE_by_id("dasync")` finds it: an async engine
    /// for `serve --async` (issue 18).
    fn keep_test_engine(&self) -> Result<(), BuildError> {
        let built = self.scratch.join("engines").join(TEST_ENGINE_FILE);
        let Some(dir) = engines_dir(&self.prefix) else {
            return Err(BuildError::IncompleteInstall {
                target: self.target(),
                missing: self.prefix.join("lib").join("engines-*"),
                log: PathBuf::new(),
            });
        };
        if !built.exists() {
            return Err(BuildError::IncompleteInstall {
                target: self.target(),
                missing: built,
                log: PathBuf::new(),
            });
        }
        std::fs::copy(&built, dir.join(TEST_ENGINE_FILE))
            .map(|_| ())
            .map_err(|source| BuildError::Io {
                action: "copy the dasync engine to",
                path: dir.join(TEST_ENGINE_FILE),
                source,
            })
    }

    /// A step failure; the log path and tail are filled in by [`BuildJob::fail`].
    fn step_failed(&self, step: &str) -> BuildError {
        BuildError::StepFailed {
            step: step.to_owned(),
            target: self.target(),
            log: PathBuf::new(),
            tail: String::new(),
        }
    }

    /// What is being built, for messages: "OpenSSL 3.5.5".
    fn target(&self) -> String {
        format!("{} {}", Flavour::OpenSsl, self.version)
    }

    /// Moves the log into the install dir, writes the manifest (last), removes scratch space.
    fn finish(
        &self,
        prepared: &PreparedSource,
        log: PathBuf,
        configure_args: Vec<String>,
        started: Instant,
    ) -> Result<InstalledBuild, BuildError> {
        let manifest = Manifest {
            version: self.version.to_owned(),
            flavour: Flavour::OpenSsl,
            flavour_version: self.version.to_owned(),
            source: prepared.description.clone(),
            build_seconds: started.elapsed().as_secs_f64(),
            configure_args,
            built_unix_seconds: unix_now_seconds(),
        };
        self.cache
            .keep_install(&self.prefix, &self.scratch, &log, manifest)
    }

    /// Keeps the log at `<root>/<version>.build-failed.log`, removes the partial install and
    /// scratch dir, and completes `error` with the log path and its last lines.
    fn fail(&self, log: BuildLog, error: BuildError) -> BuildError {
        self.cache
            .discard_install(self.version, &self.prefix, &self.scratch, log, error)
    }
}

impl BuildCache {
    /// Moves the finished build's `log` into `prefix`, writes its manifest (last: from then on
    /// the build counts as installed) and removes the scratch space.
    fn keep_install(
        &self,
        prefix: &Path,
        scratch: &Path,
        log: &Path,
        manifest: Manifest,
    ) -> Result<InstalledBuild, BuildError> {
        let kept_log = prefix.join(LOG_FILE);
        move_file(log, &kept_log)?;
        let _ = std::fs::remove_file(self.failed_log_path(&manifest.version));
        write_manifest(&prefix.join(MANIFEST_FILE), &manifest)?;
        // Best effort: a leftover scratch dir is removed by the next build of this name.
        let _ = std::fs::remove_dir_all(scratch);
        Ok(InstalledBuild {
            version: manifest.version,
            flavour: manifest.flavour,
            flavour_version: manifest.flavour_version,
            prefix: prefix.to_owned(),
            source: manifest.source,
            log: kept_log,
            build_seconds: manifest.build_seconds,
        })
    }

    /// Keeps the log of the failed build `name` at `<root>/<name>.build-failed.log`, removes
    /// the partial install and scratch dir, and completes `error` with the log path and tail.
    fn discard_install(
        &self,
        name: &str,
        prefix: &Path,
        scratch: &Path,
        log: BuildLog,
        error: BuildError,
    ) -> BuildError {
        let written = log.path.clone();
        drop(log);
        let kept = self.failed_log_path(name);
        let kept = if move_file(&written, &kept).is_ok() {
            kept
        } else {
            written
        };
        let _ = std::fs::remove_dir_all(scratch);
        let _ = std::fs::remove_dir_all(prefix);
        attach_log(error, &kept)
    }
}

/// Removes a partial install (no manifest), a forced rebuild's old install, and a stale
/// scratch dir from an interrupted build.
fn clear_leftovers(prefix: &Path, scratch: &Path) -> Result<(), BuildError> {
    ignore_absent(std::fs::remove_file(prefix.join(MANIFEST_FILE)), prefix)?;
    ignore_absent(std::fs::remove_dir_all(prefix), prefix)?;
    ignore_absent(std::fs::remove_dir_all(scratch), scratch)
}

/// Fills the log path (and for step failures the log's tail) into `error`.
fn attach_log(error: BuildError, kept: &Path) -> BuildError {
    match error {
        BuildError::StepFailed { step, target, .. } => BuildError::StepFailed {
            step,
            target,
            log: kept.to_owned(),
            tail: process::tail_of(kept, TAIL_LINES),
        },
        BuildError::MissingPerlModule {
            version, module, ..
        } => BuildError::MissingPerlModule {
            version,
            module,
            log: kept.to_owned(),
        },
        BuildError::IncompleteInstall {
            target, missing, ..
        } => BuildError::IncompleteInstall {
            target,
            missing,
            log: kept.to_owned(),
        },
        BuildError::HeaderVersion {
            path,
            macro_name,
            library,
            ..
        } => BuildError::HeaderVersion {
            path,
            macro_name,
            library,
            log: kept.to_owned(),
        },
        other => other,
    }
}

/// Maps the result of removing something at `path` to an error, treating absence as done.
fn ignore_absent(result: std::io::Result<()>, path: &Path) -> Result<(), BuildError> {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(BuildError::io("remove", path, e))
        }
        _ => Ok(()),
    }
}

/// Moves `from` to `to`, copying when they are on different file systems.
fn move_file(from: &Path, to: &Path) -> Result<(), BuildError> {
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    std::fs::copy(from, to).map_err(|e| BuildError::io("copy build log to", to, e))?;
    let _ = std::fs::remove_file(from);
    Ok(())
}

/// Writes the manifest atomically (temp file, then rename).
fn write_manifest(path: &Path, manifest: &Manifest) -> Result<(), BuildError> {
    let json = serde_json::to_string_pretty(manifest).map_err(|e| BuildError::BadManifest {
        path: path.to_owned(),
        detail: e.to_string(),
    })?;
    let temp = path.with_extension("json.tmp");
    std::fs::write(&temp, json).map_err(|e| BuildError::io("write manifest", &temp, e))?;
    std::fs::rename(&temp, path).map_err(|e| BuildError::io("write manifest", path, e))
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now_seconds() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map(|elapsed| elapsed.as_secs()).unwrap_or(0)
}

/// Recursively copies the directory `from` to the new directory `to`, keeping file modes and
/// symbolic links.
fn copy_tree(from: &Path, to: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(to).map_err(|e| BuildError::io("create directory", to, e))?;
    let entries = std::fs::read_dir(from).map_err(|e| BuildError::io("read directory", from, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| BuildError::io("read directory", from, e))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry
            .file_type()
            .map_err(|e| BuildError::io("inspect", &source, e))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_symlink() {
            let link =
                std::fs::read_link(&source).map_err(|e| BuildError::io("read link", &source, e))?;
            std::os::unix::fs::symlink(link, &target)
                .map_err(|e| BuildError::io("create link", &target, e))?;
        } else {
            std::fs::copy(&source, &target).map_err(|e| BuildError::io("copy to", &target, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes the manifest of an AWS-LC 5.12.0 build under `root/aws-lc` (no libraries): what
    /// the cache finds for a CMake-built flavour.
    pub(crate) fn place_aws_lc_manifest(root: &Path) {
        let manifest = Manifest {
            version: "aws-lc".into(),
            flavour: Flavour::AwsLc,
            flavour_version: "5.12.0".into(),
            source: "aws-lc-sys 0.47.0".into(),
            build_seconds: 1.0,
            configure_args: vec![],
            built_unix_seconds: 0,
        };
        std::fs::create_dir_all(root.join("aws-lc")).unwrap();
        write_manifest(&root.join("aws-lc").join(MANIFEST_FILE), &manifest).unwrap();
    }

    /// A fresh cache root under the system temp dir.
    fn temp_root(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("ossl-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        root
    }

    #[test]
    fn build_cache_lists_only_dirs_with_manifests() {
        let root = temp_root("list");
        let cache = BuildCache::new(root.clone());
        assert!(
            cache.installed().unwrap().is_empty(),
            "missing root means no builds"
        );
        std::fs::create_dir_all(root.join("3.0.2")).unwrap();
        std::fs::create_dir_all(root.join("1.1.1w")).unwrap();
        std::fs::create_dir_all(root.join(".build-3.1.3")).unwrap();
        let manifest = Manifest {
            version: "1.1.1w".into(),
            flavour: Flavour::OpenSsl,
            flavour_version: "1.1.1w".into(),
            source: "openssl-src 111.28.2+1.1.1w".into(),
            build_seconds: 56.0,
            configure_args: vec![],
            built_unix_seconds: 0,
        };
        write_manifest(&root.join("1.1.1w").join(MANIFEST_FILE), &manifest).unwrap();
        let builds = cache.installed().unwrap();
        let found = cache.find("1.1.1w");
        let partial = cache.find("3.0.2");
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(builds.len(), 1);
        assert_eq!(builds[0].version, "1.1.1w");
        assert_eq!(builds[0].prefix, root.join("1.1.1w"));
        assert_eq!(builds[0].log, root.join("1.1.1w").join(LOG_FILE));
        assert_eq!(found, Some(builds[0].clone()));
        assert_eq!(
            partial, None,
            "a directory without manifest is not installed"
        );
    }

    #[test]
    fn build_configure_args_follow_the_recipe() {
        let cache = BuildCache::new(PathBuf::from("/c"));
        let job = BuildJob {
            cache: &cache,
            version: "1.1.1w",
            scratch: PathBuf::from("/c/.build-1.1.1w"),
            prefix: cache.install_dir("1.1.1w"),
            configure_target: "linux-x86_64",
            compiler: "gcc",
            jobs: 2,
        };
        assert_eq!(
            job.configure_args(Recipe::OpenSsl).join(" "),
            "linux-x86_64 shared no-tests --prefix=/c/1.1.1w --openssldir=/c/1.1.1w/ssl \
             --libdir=lib -Wl,-rpath,/c/1.1.1w/lib"
        );
        assert_eq!(
            job.configure_args(Recipe::OwnVersionScripts)[..3].join(" "),
            "linux-x86_64 shared no-module"
        );
    }

    #[test]
    fn build_without_modules_is_kept_without_a_dasync_engine() {
        let root = temp_root("nomodule");
        let options = BuildOptions {
            jobs: 1,
            force: false,
            cargo_home: PathBuf::from("/x"),
        };
        let mut kept = Vec::new();
        for (version, args) in [("3.5.5", vec![NO_MODULE]), ("3.0.2", vec!["shared"])] {
            let manifest = Manifest {
                version: version.into(),
                flavour: Flavour::OpenSsl,
                flavour_version: version.into(),
                source: "openssl-src".into(),
                build_seconds: 1.0,
                configure_args: args.into_iter().map(str::to_owned).collect(),
                built_unix_seconds: 0,
            };
            std::fs::create_dir_all(root.join(version)).unwrap();
            write_manifest(&root.join(version).join(MANIFEST_FILE), &manifest).unwrap();
            let installed = BuildCache::new(root.clone()).find(version).unwrap();
            kept.push(keeps(&installed, &options));
        }
        std::fs::remove_dir_all(&root).unwrap();
        // A `no-module` build has no engine to keep; an older build without one is rebuilt.
        assert_eq!(kept, [true, false]);
    }

    #[test]
    fn build_manifests_name_their_flavour_and_old_ones_are_openssl() {
        let root = temp_root("flavour");
        let cache = BuildCache::new(root.clone());
        std::fs::create_dir_all(root.join("3.0.2")).unwrap();
        // A manifest from before issue 31: no flavour fields.
        std::fs::write(
            root.join("3.0.2").join(MANIFEST_FILE),
            r#"{"version":"3.0.2","source":"openssl-src 300.0.5+3.0.2","build_seconds":1.0,
               "configure_args":["shared"],"built_unix_seconds":0}"#,
        )
        .unwrap();
        place_aws_lc_manifest(&root);
        let old = cache.find("3.0.2").unwrap();
        let aws_lc = cache.find("aws-lc").unwrap();
        let listing = cache.listing().unwrap();
        let options = BuildOptions {
            jobs: 1,
            force: false,
            cargo_home: PathBuf::from("/x"),
        };
        let kept = keeps(&aws_lc, &options);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(old.library(), "OpenSSL 3.0.2");
        assert_eq!(aws_lc.library(), "AWS-LC 5.12.0");
        // A CMake build has no dasync engine and is kept without one.
        assert!(kept);
        let batch::Listing::Builds { header, rows } = listing else {
            panic!("two builds expected");
        };
        assert_eq!(header, ["NAME", "FLAVOUR", "VERSION", "SOURCE", "PREFIX"]);
        assert_eq!(rows[0][..3], ["3.0.2", "OpenSSL", "3.0.2"]);
        assert_eq!(rows[1][..3], ["aws-lc", "AWS-LC", "5.12.0"]);
    }

    #[test]
    fn build_unsafe_cache_roots_are_rejected() {
        assert!(BuildCache::new("/tmp/a b".into())
            .check_root_is_safe()
            .is_err());
        assert!(BuildCache::new("/tmp/a,b".into())
            .check_root_is_safe()
            .is_err());
        assert!(BuildCache::new("/root/.cache/tlsscope/openssl".into())
            .check_root_is_safe()
            .is_ok());
    }

    #[test]
    fn build_bad_versions_are_refused_before_any_work() {
        let cache = BuildCache::new(temp_root("invalid"));
        let options = BuildOptions {
            jobs: 1,
            force: false,
            cargo_home: PathBuf::from("/nonexistent"),
        };
        let error = cache
            .build_version("../etc", &options, &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(error, BuildError::InvalidVersion { .. }),
            "{error}"
        );
    }

    #[test]
    fn build_source_that_is_not_openssl_is_rejected() {
        let root = temp_root("notree");
        let tree = root.join("tree");
        std::fs::create_dir_all(&tree).unwrap();
        let cache = BuildCache::new(root.join("cache"));
        let options = BuildOptions {
            jobs: 1,
            force: false,
            cargo_home: PathBuf::from("/x"),
        };
        let error = cache
            .build_source(&tree, &options, &mut |_| {})
            .unwrap_err();
        let missing = cache
            .build_source(&root.join("nope"), &options, &mut |_| {})
            .unwrap_err();
        std::fs::remove_dir_all(&root).unwrap();
        assert!(
            matches!(error, BuildError::NotOpenSslTree { .. }),
            "{error}"
        );
        assert!(
            matches!(missing, BuildError::SourceNotFound { .. }),
            "{missing}"
        );
    }
}
