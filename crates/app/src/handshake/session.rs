//! A handshake run from its typed settings: connections one after another, each offering the
//! previous one's session when resuming. Each connection goes to the caller as it completes
//! (so a failure later keeps what was shown); prints nothing.

use std::net::SocketAddr;

use anyhow::Context as _;
use ossl::Session;

use crate::common::client::{connect_first, Outcome, Probe};
use crate::handshake::config::HandshakeConfig;

/// One connection, as it completed.
pub struct Connected<'a> {
    /// Its number, from 1.
    pub index: usize,
    /// The address that answered.
    pub addr: SocketAddr,
    pub outcome: &'a Outcome,
    /// The library whose client made it.
    pub lib: &'static ossl::Library,
}

/// What the run as a whole found.
pub struct Summary {
    /// Connections after the first that were offered a session and did not resume.
    pub not_resumed: usize,
}

/// Makes the connections, handing each to `each` as it completes.
pub fn run(
    cfg: &HandshakeConfig,
    mut each: impl FnMut(&Connected<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<Summary> {
    let lib = crate::common::library::load(&cfg.library)?;
    let ctx = cfg.tls.context(lib)?;
    let mut session: Option<Session> = None;
    let mut not_resumed = 0;
    for index in 1..=cfg.count {
        let offer = if cfg.resume { session.as_ref() } else { None };
        let probe = |target| Probe {
            target,
            sni: cfg.sni.as_deref(),
            verify: cfg.tls.verifies(),
            timeout: cfg.timeout,
            request: cfg.request.as_deref(),
            await_ticket: cfg.resume,
        };
        let (addr, outcome) = connect_first(&ctx, &cfg.target, probe, offer)
            .with_context(|| format!("connection {index} to {}", cfg.target))?;
        if cfg.resume && index > 1 && !outcome.negotiated.kind.is_resumed() {
            not_resumed += 1;
        }
        each(&Connected {
            index,
            addr,
            outcome: &outcome,
            lib,
        })?;
        if cfg.resume {
            session = outcome.session;
        }
    }
    Ok(Summary { not_resumed })
}
