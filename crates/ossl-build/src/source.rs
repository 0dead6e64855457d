//! Where source trees come from: crates that carry them (openssl-src, and for the CMake-built
//! flavours aws-lc-sys and boring-sys), fetched through cargo only, or a local OpenSSL
//! directory or tarball.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;

use super::index::{self, CrateRelease};
use super::process::{last_line, run_captured};
use super::BuildError;

/// The crate carrying OpenSSL's sources.
pub(crate) const OPENSSL_SRC: &str = "openssl-src";

/// A throwaway cargo project, removed when dropped.
struct ScratchProject {
    dir: PathBuf,
}

impl ScratchProject {
    /// Creates a project in `dir` whose only dependency is `<krate> = "<requirement>"`.
    fn create(dir: PathBuf, krate: &str, requirement: &str) -> Result<Self, BuildError> {
        let _ = std::fs::remove_dir_all(&dir);
        let src = dir.join("src");
        std::fs::create_dir_all(&src).map_err(|e| BuildError::io("create directory", &src, e))?;
        let project = ScratchProject { dir };
        // The empty [workspace] table keeps cargo from attaching this project to a workspace
        // that happens to enclose the cache directory.
        let manifest = format!(
            "[package]\nname = \"tlsscope-openssl-fetch\"\nversion = \"0.0.0\"\n\
             edition = \"2021\"\npublish = false\n\n[dependencies]\n\
             {krate} = \"{requirement}\"\n\n[workspace]\n"
        );
        write_file(&project.dir.join("Cargo.toml"), manifest.as_bytes())?;
        write_file(&src.join("lib.rs"), b"")?;
        Ok(project)
    }

    /// A cargo command running in this project with `cargo_home` as CARGO_HOME.
    fn cargo(&self, cargo_home: &Path, args: &[&str]) -> Command {
        let mut command = Command::new("cargo");
        command
            .args(args)
            .current_dir(&self.dir)
            .env("CARGO_HOME", cargo_home);
        command
    }

    /// Runs `cargo <step> <extra args>`; on failure returns the last line cargo printed.
    fn run(&self, cargo_home: &Path, step: &'static str, extra: &[&str]) -> Result<String, String> {
        let mut args = vec![step];
        args.extend_from_slice(extra);
        match run_captured(&mut self.cargo(cargo_home, &args)) {
            Ok((status, output)) if status.success() => Ok(output),
            Ok((_, output)) => Err(last_line(&output)),
            Err(error) => Err(error.to_string()),
        }
    }
}

impl Drop for ScratchProject {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes `bytes` to `path`.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    std::fs::write(path, bytes).map_err(|e| BuildError::io("write", path, e))
}

/// A unique scratch directory name under `root` for throwaway work of this process.
pub(crate) fn scratch_dir(root: &Path, purpose: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let serial = COUNTER.fetch_add(1, Ordering::Relaxed);
    root.join(format!(".{purpose}-{}-{serial}", std::process::id()))
}

/// Finds the openssl-src crate version carrying `openssl_version`: the built-in table first,
/// then cargo's index cache (refreshed through cargo first).
pub(crate) fn resolve_crate_version(
    openssl_version: &str,
    cargo_home: &Path,
    scratch_root: &Path,
) -> Result<String, BuildError> {
    if let Some(crate_version) = index::builtin_crate_version(openssl_version) {
        return Ok(crate_version.to_owned());
    }
    // A refresh failure (e.g. offline) is not fatal: whatever cache is there may still know it.
    let _ = refresh_index_cache(cargo_home, scratch_root);
    let releases: Vec<CrateRelease> = index::read_index_caches(cargo_home);
    index::newest_release_of(&releases, openssl_version).ok_or_else(|| BuildError::UnknownVersion {
        version: openssl_version.to_owned(),
        known: index::known_openssl_versions(&releases),
    })
}

/// Makes cargo update its local index cache entry for openssl-src.
fn refresh_index_cache(cargo_home: &Path, scratch_root: &Path) -> Result<(), BuildError> {
    let project = ScratchProject::create(scratch_dir(scratch_root, "index"), OPENSSL_SRC, "*")?;
    project
        .run(cargo_home, "generate-lockfile", &[])
        .map_err(|detail| BuildError::Cargo {
            step: "generate-lockfile",
            requirement: format!("{OPENSSL_SRC} *"),
            detail,
            dir: project.dir.clone(),
        })?;
    Ok(())
}

/// The parts of `cargo metadata` output used here.
#[derive(Debug, Deserialize)]
struct Metadata {
    packages: Vec<MetadataPackage>,
}

/// One package of `cargo metadata` output.
#[derive(Debug, Deserialize)]
struct MetadataPackage {
    name: String,
    version: String,
    manifest_path: PathBuf,
}

/// The OpenSSL source tree inside a fetched openssl-src crate.
#[derive(Debug, Clone)]
pub(crate) struct CrateSource {
    /// The full crate version, e.g. "111.28.2+1.1.1w".
    pub crate_version: String,
    /// The `openssl/` directory in cargo's registry (read only for us).
    pub tree: PathBuf,
}

/// Fetches openssl-src `=<crate_version>` with cargo and locates its OpenSSL tree.
pub(crate) fn fetch_crate(
    crate_version: &str,
    cargo_home: &Path,
    scratch_root: &Path,
) -> Result<CrateSource, BuildError> {
    fetch_tree(
        OPENSSL_SRC,
        crate_version,
        "openssl",
        "Configure",
        "OpenSSL",
        cargo_home,
        scratch_root,
    )
}

/// Fetches crate `krate` `=<crate_version>` with cargo and returns the tree at `subdir` of the
/// unpacked crate, which must hold `marker` (else it is not `library`'s tree). Tries offline
/// first so an already downloaded crate needs no network.
pub(crate) fn fetch_tree(
    krate: &str,
    crate_version: &str,
    subdir: &str,
    marker: &str,
    library: &str,
    cargo_home: &Path,
    scratch_root: &Path,
) -> Result<CrateSource, BuildError> {
    let requirement = format!("={crate_version}");
    let project = ScratchProject::create(scratch_dir(scratch_root, "fetch"), krate, &requirement)?;
    let cargo_error = |step: &'static str, detail: String| BuildError::Cargo {
        step,
        requirement: format!("{krate} {requirement}"),
        detail,
        dir: project.dir.clone(),
    };
    if project.run(cargo_home, "fetch", &["--offline"]).is_err() {
        project
            .run(cargo_home, "fetch", &[])
            .map_err(|detail| cargo_error("fetch", detail))?;
    }
    let json = project
        .run(
            cargo_home,
            "metadata",
            &["--format-version", "1", "--offline"],
        )
        .map_err(|detail| cargo_error("metadata", detail))?;
    let package = find_package(&json, krate).map_err(|detail| cargo_error("metadata", detail))?;
    let tree = package
        .manifest_path
        .parent()
        .unwrap_or(Path::new("/"))
        .join(subdir);
    if !tree.join(marker).is_file() {
        return Err(BuildError::CrateLayout {
            krate: format!("{krate} {}", package.version),
            library: library.to_owned(),
            path: tree,
        });
    }
    Ok(CrateSource {
        crate_version: package.version,
        tree,
    })
}

/// Picks the package `krate` out of `cargo metadata` output. Cargo may print warnings before
/// the JSON, so the JSON is taken from the first line starting with '{'.
fn find_package(output: &str, krate: &str) -> Result<MetadataPackage, String> {
    let json = output
        .lines()
        .find(|line| line.starts_with('{'))
        .ok_or("no JSON in its output")?;
    let metadata: Metadata =
        serde_json::from_str(json).map_err(|e| format!("unexpected output ({e})"))?;
    metadata
        .packages
        .into_iter()
        .find(|package| package.name == krate)
        .ok_or_else(|| format!("no {krate} package in its output"))
}

/// Reads the OpenSSL version of the source tree at `tree` (3.x `VERSION.dat`, or 1.x
/// `include/openssl/opensslv.h`).
pub(crate) fn detect_tree_version(tree: &Path) -> Result<String, BuildError> {
    let not_a_tree = || BuildError::NotOpenSslTree {
        path: tree.to_owned(),
    };
    if !tree.join("Configure").is_file() {
        return Err(not_a_tree());
    }
    let from_dat = std::fs::read_to_string(tree.join("VERSION.dat"))
        .ok()
        .and_then(|text| version_from_dat(&text));
    let version = from_dat.or_else(|| {
        std::fs::read_to_string(tree.join("include/openssl/opensslv.h"))
            .ok()
            .and_then(|text| version_from_opensslv_h(&text))
    });
    let version = version.ok_or_else(not_a_tree)?;
    index::validate_version(&version).map_err(|_| not_a_tree())?;
    Ok(version)
}

/// Parses `MAJOR=3 MINOR=0 PATCH=2 PRE_RELEASE_TAG=` lines into "3.0.2" (or "3.2.0-alpha1").
fn version_from_dat(text: &str) -> Option<String> {
    let field = |name: &str| {
        text.lines()
            .filter_map(|line| line.split_once('='))
            .find(|(key, _)| key.trim() == name)
            .map(|(_, value)| value.trim().trim_matches('"').to_owned())
    };
    let core = format!(
        "{}.{}.{}",
        field("MAJOR")?,
        field("MINOR")?,
        field("PATCH")?
    );
    match field("PRE_RELEASE_TAG") {
        Some(tag) if !tag.is_empty() => Some(format!("{core}-{tag}")),
        _ => Some(core),
    }
}

/// Parses `# define OPENSSL_VERSION_TEXT "OpenSSL 1.1.1w  11 Sep 2023"` into "1.1.1w".
fn version_from_opensslv_h(text: &str) -> Option<String> {
    let line = text.lines().find(|line| {
        line.trim_start_matches(['#', ' ', '\t'])
            .starts_with("define OPENSSL_VERSION_TEXT")
    })?;
    let quoted = line.split('"').nth(1)?;
    let mut words = quoted.split_whitespace();
    (words.next()? == "OpenSSL").then_some(())?;
    words.next().map(str::to_owned)
}

/// Returns whether `path` names a gzip-compressed tarball by its file name.
pub(crate) fn is_tarball(path: &Path) -> bool {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.is_file() && (name.ends_with(".tar.gz") || name.ends_with(".tgz"))
}

/// Unpacks `tarball` into the empty directory `into` with tar and returns the OpenSSL tree in
/// it (the directory itself, or its single top-level directory).
pub(crate) fn extract_tarball(tarball: &Path, into: &Path) -> Result<PathBuf, BuildError> {
    std::fs::create_dir_all(into).map_err(|e| BuildError::io("create directory", into, e))?;
    let mut tar = Command::new("tar");
    tar.arg("-xzf").arg(tarball).arg("-C").arg(into);
    let (status, output) = run_captured(&mut tar)?;
    if !status.success() {
        return Err(BuildError::Extract {
            tarball: tarball.to_owned(),
            detail: last_line(&output),
        });
    }
    if into.join("Configure").is_file() {
        return Ok(into.to_owned());
    }
    let entries = std::fs::read_dir(into).map_err(|e| BuildError::io("read directory", into, e))?;
    let dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    match dirs.as_slice() {
        [single] if single.join("Configure").is_file() => Ok(single.clone()),
        _ => Err(BuildError::NotOpenSslTree {
            path: tarball.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_version_dat_is_parsed() {
        let dat = "MAJOR=3\nMINOR=0\nPATCH=2\nPRE_RELEASE_TAG=\nBUILD_METADATA=\n\
                   RELEASE_DATE=\"15 Mar 2022\"\nSHLIB_VERSION=3\n";
        assert_eq!(version_from_dat(dat).as_deref(), Some("3.0.2"));
        let alpha = "MAJOR=3\nMINOR=2\nPATCH=0\nPRE_RELEASE_TAG=alpha1\n";
        assert_eq!(version_from_dat(alpha).as_deref(), Some("3.2.0-alpha1"));
        assert_eq!(version_from_dat("MAJOR=3\n"), None);
    }

    #[test]
    fn build_opensslv_h_is_parsed() {
        let header = "# define OPENSSL_VERSION_NUMBER  0x1010117fL\n\
                      # define OPENSSL_VERSION_TEXT    \"OpenSSL 1.1.1w  11 Sep 2023\"\n";
        assert_eq!(version_from_opensslv_h(header).as_deref(), Some("1.1.1w"));
        assert_eq!(version_from_opensslv_h("#define X 1\n"), None);
    }

    #[test]
    fn build_metadata_output_is_parsed() {
        let output = "warning: something\n{\"packages\":[{\"name\":\"cc\",\"version\":\"1.0.0\",\
                      \"manifest_path\":\"/r/cc/Cargo.toml\"},{\"name\":\"openssl-src\",\
                      \"version\":\"111.28.2+1.1.1w\",\"manifest_path\":\"/r/o/Cargo.toml\"}]}\n";
        let package = find_package(output, OPENSSL_SRC).unwrap();
        assert_eq!(package.version, "111.28.2+1.1.1w");
        assert_eq!(package.manifest_path, Path::new("/r/o/Cargo.toml"));
        assert!(find_package("{\"packages\":[]}", OPENSSL_SRC).is_err());
    }

    #[test]
    fn build_non_openssl_directory_is_rejected() {
        let dir = std::env::temp_dir().join(format!("ossl-tree-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let result = detect_tree_version(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(result, Err(BuildError::NotOpenSslTree { .. })));
    }
}
