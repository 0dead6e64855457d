//! `tlsscope openssl build|list`: builds into the cache, and what is installed.

use ossl::{Library, LibrarySource};
use ossl_build::{BuildCache, BuildOutcome, Listing};

use super::config::BuildConfig;

/// Builds what `config` asks for; progress on stderr, and `built` hears each version's outcome.
pub fn build(config: &BuildConfig, built: &mut dyn FnMut(&BuildOutcome)) -> anyhow::Result<()> {
    crate::common::builds::build(&config.request, config.jobs, config.force, built)
}

/// What `openssl list` shows: the system library, then the builds in the cache.
pub struct Installed {
    /// The system's library (name, version number, path), or why there is none usable.
    pub system: Result<(String, u64, std::path::PathBuf), String>,
    /// The builds in the cache (or why the cache cannot be read).
    pub builds: anyhow::Result<Listing>,
}

/// The system library and the cache's builds.
pub fn list() -> Installed {
    let system = match Library::load(&LibrarySource::System) {
        Ok(lib) => Ok((
            lib.name().to_string(),
            lib.version().number,
            lib.ssl_path().to_path_buf(),
        )),
        Err(e) => Err(e.to_string()),
    };
    let builds = BuildCache::new(crate::common::builds::cache_root())
        .listing()
        .map_err(anyhow::Error::from);
    Installed { system, builds }
}
