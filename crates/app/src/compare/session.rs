//! `tlsscope compare`'s session: saved runs read and compared (`saved`), or the matrix run
//! (`matrix`, each variant in a worker process, `worker`), either way one [`CompareDocument`].
//! The matrix tells its caller of builds and rounds as they go ([`Event`]); the session itself
//! prints nothing.

use std::cell::RefCell;
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

/// Runs the comparison `config` asks for; `events` hears of a matrix's builds and rounds.
/// `stop` (set by a signal handler) ends a matrix after the round in progress.
pub fn run(
    config: &CompareConfig,
    stop: &AtomicBool,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<CompareDocument, CompareError> {
    match config {
        CompareConfig::Saved(c) => Ok(super::saved::load(c)?),
        CompareConfig::Matrix(c) => Ok(matrix(c, stop, events)?),
    }
}

/// Runs the matrix, a library version the cache lacks built first; `events` hears of the
/// builds and of each round as it goes. `stop` ends it after the round in progress.
pub fn matrix(
    config: &MatrixConfig,
    stop: &AtomicBool,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<CompareDocument, Error> {
    // The builds all happen before the first round: the two never hear at once.
    let events = RefCell::new(events);
    let mut build =
        |library: &str| install_prefix(library, &mut |e: Event<'_>| (events.borrow_mut())(e));
    let mut rounds = |e: Event<'_>| (events.borrow_mut())(e);
    super::matrix::run(config, &mut build, &mut rounds, stop)
}

/// Where a library is installed: a directory as given, a version from the cache (built first
/// if the cache does not have it yet); or why it cannot be had.
fn install_prefix(library: &str, events: &mut dyn FnMut(Event<'_>)) -> Result<PathBuf, String> {
    if library.contains('/') {
        return Ok(PathBuf::from(library));
    }
    let cache = ossl_build::BuildCache::new(crate::common::builds::cache_root());
    if let Some(b) = cache.find(library) {
        return Ok(b.prefix);
    }
    events(Event::Building { library });
    let request = ossl_build::BuildRequest::Versions(vec![library.to_string()]);
    crate::common::builds::build(&request, host::online_cpus(), false, &mut |o| {
        events(Event::Built(o.to_string()))
    })
    .map_err(|e| format!("{library} did not build: {e:#}"))?;
    cache
        .find(library)
        .map(|b| b.prefix)
        .ok_or_else(|| format!("OpenSSL {library} was built but is not in the cache"))
}
