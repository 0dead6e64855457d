//! What `tlsscope openssl build` and `list` do with the cache: build a request of several
//! versions (or one local source) one after another, and list what is installed.

use std::fmt;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crate::status::{format_duration, StatusDisplay};
use crate::{BuildCache, BuildError, BuildOptions, BuildOutcome};

/// What to build: versions from the openssl-src crate, or the one tree or tarball at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildRequest {
    /// OpenSSL versions, e.g. "1.1.1w", or CMake-built flavours ("aws-lc", "boringssl");
    /// repetitions are built once.
    Versions(Vec<String>),
    /// A local OpenSSL source tree or `.tar.gz`/`.tgz` release tarball.
    Source(PathBuf),
}

/// What `tlsscope openssl list` shows of a cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listing {
    /// No builds yet in the cache at `root` (the caller says how to make one).
    Empty { root: PathBuf },
    /// One row per installed build (name, flavour, version, source, prefix) under `header`.
    Builds {
        /// The column names.
        header: Vec<String>,
        /// The cells, one row per build, sorted by version.
        rows: Vec<Vec<String>>,
    },
}

/// `versions` without repetitions, in the given order.
pub fn unique(versions: &[String]) -> Vec<String> {
    let mut unique: Vec<String> = Vec::new();
    for version in versions {
        if !unique.contains(version) {
            unique.push(version.clone());
        }
    }
    unique
}

/// `jobs`, or the number of CPUs when it is 0.
pub fn effective_jobs(jobs: usize) -> usize {
    if jobs > 0 {
        return jobs;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

impl BuildCache {
    /// Builds what `request` names, one build after another, with its progress on `status`;
    /// `built` gets each build that is ready. Of several versions, a failure is shown on
    /// `status` and does not stop the others ([`BuildError::BatchFailed`] at the end); a single
    /// build's failure is returned as it is.
    pub fn build_request<W: Write + Send>(
        &self,
        request: &BuildRequest,
        options: &BuildOptions,
        status: &StatusDisplay<W>,
        built: &mut dyn FnMut(&BuildOutcome),
    ) -> Result<(), BuildError> {
        let versions = match request {
            BuildRequest::Source(path) => {
                let label = path.display().to_string();
                let outcome = status.run(&label, |progress| {
                    self.build_source(path, options, progress)
                })?;
                built(&outcome);
                return Ok(());
            }
            BuildRequest::Versions(versions) => unique(versions),
        };
        let mut failed = Vec::new();
        for version in &versions {
            let label = match crate::cmake::recipe(version) {
                Some(recipe) => recipe.flavour.to_string(),
                None => format!("OpenSSL {version}"),
            };
            match status.run(&label, |progress| {
                self.build_named(version, options, progress)
            }) {
                Ok(outcome) => built(&outcome),
                Err(error) if versions.len() == 1 => return Err(error),
                Err(error) => {
                    status.error(&error);
                    failed.push(version.clone());
                }
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(BuildError::BatchFailed {
                failed,
                total: versions.len(),
            })
        }
    }

    /// The installed builds as `tlsscope openssl list` shows them.
    pub fn listing(&self) -> Result<Listing, BuildError> {
        let builds = self.installed()?;
        if builds.is_empty() {
            return Ok(Listing::Empty {
                root: self.root().to_path_buf(),
            });
        }
        Ok(Listing::Builds {
            header: ["NAME", "FLAVOUR", "VERSION", "SOURCE", "PREFIX"]
                .map(String::from)
                .to_vec(),
            rows: builds
                .iter()
                .map(|b| {
                    vec![
                        b.version.clone(),
                        b.flavour.to_string(),
                        b.flavour_version.clone(),
                        b.source.clone(),
                        b.prefix.display().to_string(),
                    ]
                })
                .collect(),
        })
    }
}

/// The one line that ends a build: "OpenSSL 3.0.2 ready at PREFIX (built in 3m12s)" or
/// "AWS-LC 5.12.0 already built at PREFIX".
impl fmt::Display for BuildOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let build = self.installed();
        match self {
            BuildOutcome::Built(_) => write!(
                f,
                "{} ready at {} (built in {})",
                build.library(),
                build.prefix.display(),
                format_duration(Duration::from_secs_f64(build.build_seconds))
            ),
            BuildOutcome::AlreadyInstalled(_) => write!(
                f,
                "{} already built at {}",
                build.library(),
                build.prefix.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InstalledBuild;

    #[test]
    fn versions_are_deduplicated_in_order() {
        let versions = ["3.0.2", "1.1.1w", "3.0.2"].map(String::from);
        assert_eq!(unique(&versions), ["3.0.2", "1.1.1w"]);
    }

    #[test]
    fn jobs_zero_means_every_cpu() {
        assert_eq!(effective_jobs(3), 3);
        assert!(effective_jobs(0) >= 1);
    }

    #[test]
    fn a_build_ends_with_one_line() {
        let build = InstalledBuild {
            version: "3.0.2".into(),
            flavour: crate::Flavour::OpenSsl,
            flavour_version: "3.0.2".into(),
            prefix: "/c/3.0.2".into(),
            source: "openssl-src 300.0.5+3.0.2".into(),
            log: "/c/3.0.2/build.log".into(),
            build_seconds: 192.4,
        };
        assert_eq!(
            BuildOutcome::Built(build.clone()).to_string(),
            "OpenSSL 3.0.2 ready at /c/3.0.2 (built in 3m12s)"
        );
        assert_eq!(
            BuildOutcome::AlreadyInstalled(build).to_string(),
            "OpenSSL 3.0.2 already built at /c/3.0.2"
        );
    }

    #[test]
    fn several_versions_go_on_past_a_failure() {
        let root = std::env::temp_dir().join(format!("ossl-batch-{}", std::process::id()));
        let cache = BuildCache::new(root.clone());
        let options = BuildOptions {
            jobs: 1,
            force: false,
            cargo_home: PathBuf::from("/nonexistent"),
        };
        let status = StatusDisplay::new(Vec::new(), false);
        let request = BuildRequest::Versions(["../a", "../b", "../a"].map(String::from).to_vec());
        let error = cache
            .build_request(&request, &options, &status, &mut |_| {})
            .unwrap_err();
        let one = BuildRequest::Versions(vec!["../a".into()]);
        let single = cache
            .build_request(&one, &options, &status, &mut |_| {})
            .unwrap_err();
        let shown = String::from_utf8(status.into_inner()).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(error.to_string(), "2 of 2 builds failed: ../a, ../b");
        assert!(
            matches!(single, BuildError::InvalidVersion { .. }),
            "{single}"
        );
        assert_eq!(shown.matches("error: '../").count(), 2, "{shown}");
    }

    #[test]
    fn an_empty_cache_says_how_to_fill_it() {
        let cache = BuildCache::new(PathBuf::from("/nonexistent/cache"));
        let Listing::Empty { root } = cache.listing().unwrap() else {
            panic!("no builds expected");
        };
        assert_eq!(root, PathBuf::from("/nonexistent/cache"));
    }
}
