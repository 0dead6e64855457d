//! `tlsscope openssl build|list`: library builds in the cache. `config` checks what to build,
//! `session` builds (ossl-build does the work) or lists, `render` writes the list.

pub mod config;
pub mod render;
pub mod session;

use std::process::ExitCode;

/// `tlsscope openssl build`: builds each version asked for (jobs default to the CPU count).
pub fn build_command(a: &config::BuildArgs) -> anyhow::Result<ExitCode> {
    let config = a.config()?;
    session::build(&config, &mut say_built)?;
    Ok(ExitCode::SUCCESS)
}

/// `tlsscope openssl list`: the system library, then the builds in the cache.
pub fn list_command() -> anyhow::Result<ExitCode> {
    let installed = session::list();
    crate::common::output::to_stdout(render::system(&installed.system))?;
    crate::common::output::to_stdout(render::builds(&installed.builds?))?;
    Ok(ExitCode::SUCCESS)
}

/// A version's outcome, one line on stdout as it is built. A closed stdout does not stop the
/// builds: the outcomes are also in the cache.
pub fn say_built(outcome: &ossl_build::BuildOutcome) {
    let _ = crate::common::output::to_stdout(format!("{outcome}\n"));
}
