//! AWS-LC and BoringSSL: built with CMake and Ninja from the library sources their Rust binding
//! crates carry (aws-lc-sys, boring-sys), which are fetched through cargo like openssl-src.
//!
//! Everything that differs between these flavours is one [`CmakeRecipe`] in [`RECIPES`]; the
//! build itself (locking, scratch copy, log, manifest) works like an OpenSSL version's.
//! The libraries are shared (`BUILD_SHARED_LIBS`), release-optimised and unstripped, keep the
//! OpenSSL names unprefixed (no `BORINGSSL_PREFIX`), and have a RUNPATH to their own `lib/`.
//! Neither needs Go or Perl: AWS-LC is told so (`DISABLE_GO`, `DISABLE_PERL`) and uses its
//! `generated-src/`; boring-sys ships BoringSSL's pre-generated `gen/`, and Go is only wanted
//! for tests and FIPS builds, which are off.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::process::{self, BuildLog};
use crate::{
    source, BuildCache, BuildError, BuildOptions, BuildOutcome, Flavour, Manifest, Progress,
};

/// How one CMake-built flavour is fetched, configured, built and recognised.
#[derive(Debug)]
pub(crate) struct CmakeRecipe {
    /// The build's name in the cache and on the command line, e.g. "aws-lc".
    pub name: &'static str,
    /// The library family.
    pub flavour: Flavour,
    /// The crate carrying the sources.
    pub krate: &'static str,
    /// The exact crate version fetched.
    pub crate_version: &'static str,
    /// The CMake tree inside the crate.
    pub tree: &'static str,
    /// CMake settings of this flavour, beside the common ones.
    pub settings: &'static [&'static str],
    /// The targets compiled (none: all); `cmake --install` installs what they made.
    pub targets: &'static [&'static str],
    /// The macro of the installed `include/openssl/base.h` that gives the version.
    pub version_macro: &'static str,
    /// What goes before the macro's value in the version ("API " for BoringSSL's API number).
    pub version_prefix: &'static str,
}

/// The flavours built with CMake.
pub(crate) const RECIPES: &[CmakeRecipe] = &[
    CmakeRecipe {
        name: "aws-lc",
        flavour: Flavour::AwsLc,
        krate: "aws-lc-sys",
        crate_version: "0.47.0",
        tree: "aws-lc",
        settings: &[
            "-DDISABLE_GO=ON",
            "-DDISABLE_PERL=ON",
            "-DBUILD_TOOL=OFF",
            // The scratch copy is ours, but nothing needs rewriting in it either.
            "-DENABLE_SOURCE_MODIFICATION=OFF",
        ],
        targets: &[],
        version_macro: "AWSLC_VERSION_NUMBER_STRING",
        version_prefix: "",
    },
    CmakeRecipe {
        name: "boringssl",
        flavour: Flavour::BoringSsl,
        krate: "boring-sys",
        crate_version: "5.4.0",
        tree: "deps/boringssl",
        settings: &[],
        // What its install rules name; libdecrepit and libpki (in `all`) are not installed.
        targets: &["crypto", "ssl", "bssl"],
        version_macro: "BORINGSSL_API_VERSION",
        version_prefix: "API ",
    },
];

/// The recipe of the CMake-built flavour named `name`, if it is one.
pub(crate) fn recipe(name: &str) -> Option<&'static CmakeRecipe> {
    RECIPES.iter().find(|recipe| recipe.name == name)
}

/// The names of the flavours built with CMake ("aws-lc", "boringssl").
pub fn cmake_build_names() -> impl Iterator<Item = &'static str> {
    RECIPES.iter().map(|recipe| recipe.name)
}

impl CmakeRecipe {
    /// The version `base_h` (the text of `include/openssl/base.h`) gives: "5.12.0" for AWS-LC,
    /// "API 44" for BoringSSL. None if the macro is missing or not a version.
    pub(crate) fn version_from_header(&self, base_h: &str) -> Option<String> {
        let value = macro_value(base_h, self.version_macro)?;
        let digits_first = value.starts_with(|c: char| c.is_ascii_digit());
        let plain = value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-');
        (digits_first && plain).then(|| format!("{}{value}", self.version_prefix))
    }
}

/// The value of `#define <name> <value>` in C header text, without quotes.
fn macro_value(header: &str, name: &str) -> Option<String> {
    header.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix('#')?.trim_start();
        let mut words = rest.strip_prefix("define")?.split_whitespace();
        (words.next()? == name).then_some(())?;
        let value = words.next()?.trim_matches('"');
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// Returns whether a ninja output line reports compiling one object
/// (`[12/418] Building C object crypto/...`).
fn is_ninja_compile_line(line: &str) -> bool {
    line.starts_with('[') && line.contains("] Building ")
}

impl BuildCache {
    /// Builds the flavour of `recipe` into `<root>/<name>`, unless it is installed and
    /// `options.force` is off.
    pub(crate) fn build_cmake(
        &self,
        recipe: &'static CmakeRecipe,
        options: &BuildOptions,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<BuildOutcome, BuildError> {
        if let Some(installed) = self.find(recipe.name).filter(|_| !options.force) {
            return Ok(BuildOutcome::AlreadyInstalled(installed));
        }
        let target = recipe.flavour.to_string();
        process::require_tools(&target, &[process::CMAKE, process::NINJA, process::CARGO])?;
        let c_compiler = process::find_c_compiler(&target)?;
        let cxx_compiler = process::find_cxx_compiler(&target)?;
        self.create_root()?;
        self.check_root_is_safe()?;
        progress(Progress::Fetching {
            krate: format!("{} {}", recipe.krate, recipe.crate_version),
        });
        let fetched = source::fetch_tree(
            recipe.krate,
            recipe.crate_version,
            recipe.tree,
            "CMakeLists.txt",
            recipe.flavour.name(),
            &options.cargo_home,
            &self.root,
        )?;
        let lock_path = self.root.join(format!(".{}.lock", recipe.name));
        let _lock = crate::lock::VersionLock::acquire(&lock_path, &mut || {
            progress(Progress::WaitingForLock)
        })?;
        if let Some(installed) = self.find(recipe.name).filter(|_| !options.force) {
            return Ok(BuildOutcome::AlreadyInstalled(installed));
        }
        let started = Instant::now();
        let job = CmakeJob {
            recipe,
            scratch: self.root.join(format!(".build-{}", recipe.name)),
            prefix: self.install_dir(recipe.name),
            c_compiler,
            cxx_compiler,
            jobs: options.jobs.max(1),
        };
        crate::clear_leftovers(&job.prefix, &job.scratch)?;
        let log_path = self.root.join(format!(".build-{}.log", recipe.name));
        let mut log = BuildLog::create(log_path)?;
        match job.run(&fetched.tree, &mut log, progress) {
            Ok(flavour_version) => {
                let log = log.finish()?;
                let manifest = Manifest {
                    version: recipe.name.to_owned(),
                    flavour: recipe.flavour,
                    flavour_version,
                    source: format!("{} {}", recipe.krate, fetched.crate_version),
                    build_seconds: started.elapsed().as_secs_f64(),
                    configure_args: job.cmake_args(),
                    built_unix_seconds: crate::unix_now_seconds(),
                };
                let installed = self.keep_install(&job.prefix, &job.scratch, &log, manifest)?;
                progress(Progress::Done);
                Ok(BuildOutcome::Built(installed))
            }
            Err(error) => {
                Err(self.discard_install(recipe.name, &job.prefix, &job.scratch, log, error))
            }
        }
    }
}

/// One CMake build, run while holding its lock.
struct CmakeJob {
    recipe: &'static CmakeRecipe,
    /// Holds `src/` (the copy of the crate's tree) and `build/` (CMake's binary dir).
    scratch: PathBuf,
    /// The install prefix `<root>/<name>`.
    prefix: PathBuf,
    c_compiler: &'static str,
    cxx_compiler: &'static str,
    jobs: usize,
}

impl CmakeJob {
    /// Copies, configures, compiles and installs; returns the version the headers give.
    fn run(
        &self,
        tree: &Path,
        log: &mut BuildLog,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<String, BuildError> {
        progress(Progress::Copying);
        crate::copy_tree(tree, &self.source_dir())?;
        progress(Progress::Configuring);
        let mut configure = self.command("cmake");
        configure.args(self.cmake_args());
        self.step(log, configure, &mut |_| {})?;
        progress(Progress::Compiling { objects: 0 });
        let mut compile = self.command("ninja");
        compile
            .arg("-C")
            .arg(self.build_dir())
            .arg(format!("-j{}", self.jobs))
            .args(self.recipe.targets);
        let mut objects = 0;
        self.step(log, compile, &mut |line| {
            if is_ninja_compile_line(line) {
                objects += 1;
                progress(Progress::Compiling { objects });
            }
        })?;
        progress(Progress::Installing);
        let mut install = self.command("cmake");
        install.arg("--install").arg(self.build_dir());
        self.step(log, install, &mut |_| {})?;
        self.check_install()
    }

    /// The CMake arguments: Ninja, release, shared, no tests, the private prefix with `lib/`
    /// as the library dir and as the RUNPATH, then the flavour's own settings.
    fn cmake_args(&self) -> Vec<String> {
        let prefix = self.prefix.display();
        let mut args = vec![
            "-G".to_owned(),
            "Ninja".to_owned(),
            "-S".to_owned(),
            self.source_dir().display().to_string(),
            "-B".to_owned(),
            self.build_dir().display().to_string(),
            "-DCMAKE_BUILD_TYPE=Release".to_owned(),
            "-DBUILD_SHARED_LIBS=ON".to_owned(),
            "-DBUILD_TESTING=OFF".to_owned(),
            format!("-DCMAKE_INSTALL_PREFIX={prefix}"),
            "-DCMAKE_INSTALL_LIBDIR=lib".to_owned(),
            format!("-DCMAKE_INSTALL_RPATH={prefix}/lib"),
            // RUNPATH (as the OpenSSL builds have), whatever the linker's default.
            "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--enable-new-dtags".to_owned(),
        ];
        args.extend(self.recipe.settings.iter().map(|s| (*s).to_owned()));
        args
    }

    /// The scratch copy of the crate's tree.
    fn source_dir(&self) -> PathBuf {
        self.scratch.join("src")
    }

    /// CMake's binary directory.
    fn build_dir(&self) -> PathBuf {
        self.scratch.join("build")
    }

    /// A command with the chosen compilers, run in the scratch dir.
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .current_dir(&self.scratch)
            .env("CC", self.c_compiler)
            .env("CXX", self.cxx_compiler);
        command
    }

    /// Runs one step into the log; a failure names the step (its log tail is added later).
    fn step(
        &self,
        log: &mut BuildLog,
        mut command: Command,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<(), BuildError> {
        if log.run(&mut command, on_line)?.success() {
            return Ok(());
        }
        let mut words = process::describe(&command);
        // The arguments of cmake's configure step are in the log; the message names the step.
        if words.len() > 60 {
            words = format!("{} ...", &words[..words.find(" -S").unwrap_or(words.len())]);
        }
        Err(BuildError::StepFailed {
            step: words,
            target: self.recipe.flavour.to_string(),
            log: PathBuf::new(),
            tail: String::new(),
        })
    }

    /// Checks the shared libraries arrived and reads the version from the installed headers.
    fn check_install(&self) -> Result<String, BuildError> {
        let lib = self.prefix.join("lib");
        for library in ["libssl.so", "libcrypto.so"] {
            if !lib.join(library).exists() {
                return Err(BuildError::IncompleteInstall {
                    target: self.recipe.flavour.to_string(),
                    missing: lib.join(library),
                    log: PathBuf::new(),
                });
            }
        }
        let header = self.prefix.join("include/openssl/base.h");
        let text = std::fs::read_to_string(&header).unwrap_or_default();
        self.recipe
            .version_from_header(&text)
            .ok_or_else(|| BuildError::HeaderVersion {
                path: header,
                macro_name: self.recipe.version_macro,
                library: self.recipe.flavour.to_string(),
                log: PathBuf::new(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_aws_lc_version_is_read_from_base_h() {
        let base_h = "#define OPENSSL_VERSION_NUMBER 0x1010107f\n\
                      // comment AWSLC_VERSION_NUMBER_STRING \"0.0\"\n\
                      #define AWSLC_VERSION_NUMBER_STRING \"5.12.0\"\n\
                      #define BORINGSSL_API_VERSION 36\n";
        let aws_lc = recipe("aws-lc").unwrap();
        assert_eq!(
            aws_lc.version_from_header(base_h).as_deref(),
            Some("5.12.0")
        );
        assert_eq!(aws_lc.version_from_header("#define X 1\n"), None);
    }

    #[test]
    fn build_boringssl_version_is_its_api_number() {
        let base_h = "#define OPENSSL_VERSION_NUMBER 0x1010107f\n\
                      # define  BORINGSSL_API_VERSION 44\n";
        let boringssl = recipe("boringssl").unwrap();
        assert_eq!(
            boringssl.version_from_header(base_h).as_deref(),
            Some("API 44")
        );
        // A value that is no version (a macro expression) is not taken as one.
        let odd = "#define BORINGSSL_API_VERSION (FOO + 1)\n";
        assert_eq!(boringssl.version_from_header(odd), None);
        assert_eq!(
            boringssl.version_from_header("#define BORINGSSL_API_VERSION_X 4\n"),
            None
        );
    }

    #[test]
    fn build_cmake_names_are_flavours_not_versions() {
        assert_eq!(recipe("aws-lc").unwrap().flavour, Flavour::AwsLc);
        assert_eq!(recipe("boringssl").unwrap().flavour, Flavour::BoringSsl);
        assert!(recipe("3.5.5").is_none());
        assert_eq!(
            cmake_build_names().collect::<Vec<_>>(),
            ["aws-lc", "boringssl"]
        );
    }

    #[test]
    fn build_ninja_compile_lines_are_counted() {
        assert!(is_ninja_compile_line(
            "[12/418] Building C object crypto/CMakeFiles/crypto_objects.dir/ex_data.c.o"
        ));
        assert!(is_ninja_compile_line(
            "[406/426] Building CXX object ssl/CMakeFiles/ssl.dir/ssl_text.cc.o"
        ));
        assert!(!is_ninja_compile_line(
            "[418/418] Linking C shared library ssl/libssl.so"
        ));
    }

    #[test]
    fn build_cmake_args_keep_names_symbols_and_a_runpath() {
        let job = CmakeJob {
            recipe: recipe("aws-lc").unwrap(),
            scratch: PathBuf::from("/c/.build-aws-lc"),
            prefix: PathBuf::from("/c/aws-lc"),
            c_compiler: "gcc",
            cxx_compiler: "g++",
            jobs: 2,
        };
        let args = job.cmake_args().join(" ");
        for wanted in [
            "-G Ninja -S /c/.build-aws-lc/src -B /c/.build-aws-lc/build",
            "-DBUILD_SHARED_LIBS=ON",
            "-DCMAKE_INSTALL_RPATH=/c/aws-lc/lib",
            "-DDISABLE_GO=ON -DDISABLE_PERL=ON",
        ] {
            assert!(args.contains(wanted), "{wanted} not in {args}");
        }
        // Unprefixed and unstripped: no symbol prefix, no install/strip.
        assert!(
            !args.contains("BORINGSSL_PREFIX") && !args.contains("strip"),
            "{args}"
        );
    }
}
