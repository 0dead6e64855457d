//! `tlsscope compare`'s session: saved runs read and compared (`saved`), or the matrix run
//! (`matrix`, each variant in a worker process, `worker`), either way one [`CompareDocument`].
//! Progress of the matrix's rounds is said on stderr as they go.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use model::compare::CompareDocument;

use super::config::CompareConfig;
use super::matrix::{Event, MatrixConfig};
use super::saved::SavedError;
use crate::common::error::Error;

/// Why a comparison could not be made (a variant that fails is reported in the document).
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error(transparent)]
    Saved(#[from] SavedError),
    #[error(transparent)]
    Matrix(#[from] Error),
}

/// Runs the comparison `config` asks for. `stop` (set by a signal handler) ends a matrix after
/// the round in progress.
pub fn run(config: &CompareConfig, stop: &AtomicBool) -> Result<CompareDocument, CompareError> {
    match config {
        CompareConfig::Saved(c) => Ok(super::saved::load(c)?),
        CompareConfig::Matrix(c) => Ok(matrix(c, stop)?),
    }
}

/// Runs the matrix, each round said on stderr as it goes, a library version the cache lacks
/// built first. `stop` ends it after the round in progress.
pub fn matrix(config: &MatrixConfig, stop: &AtomicBool) -> Result<CompareDocument, Error> {
    let mut build = |library: &str| install_prefix(library);
    let mut events = |event: Event<'_>| match event {
        Event::Round { round, of, label } => {
            eprint!("tlsscope compare: round {round}/{of}: {label} ... ");
            let _ = std::io::stderr().flush();
        }
        Event::RoundDone(Ok(summary)) => eprintln!("{summary}"),
        Event::RoundDone(Err(_)) => eprintln!("failed"),
    };
    super::matrix::run(config, &mut build, &mut events, stop)
}

/// Where a library is installed: a directory as given, a version from the cache (built first
/// if the cache does not have it yet); or why it cannot be had.
fn install_prefix(library: &str) -> Result<PathBuf, String> {
    if library.contains('/') {
        return Ok(PathBuf::from(library));
    }
    let cache = ossl_build::BuildCache::new(crate::common::builds::cache_root());
    if let Some(b) = cache.find(library) {
        return Ok(b.prefix);
    }
    eprintln!("tlsscope compare: {library} is not built yet: building it");
    let request = ossl_build::BuildRequest::Versions(vec![library.to_string()]);
    crate::common::builds::build(&request, host::online_cpus(), false)
        .map_err(|e| format!("{library} did not build: {e:#}"))?;
    cache
        .find(library)
        .map(|b| b.prefix)
        .ok_or_else(|| format!("OpenSSL {library} was built but is not in the cache"))
}
