//! The in-process handshake engine: a client and a server connection in one thread, joined by
//! an in-memory BIO pair, driven in turn until both finish. No sockets and no scheduler between
//! the two sides, so what it times is the library's own work (the idea of OpenSSL's
//! `test/perf/handshake` tool, done here over tlsscope's own API).

use std::time::{Duration, Instant};

use ossl::{Context, Io, Negotiated, Session, Ssl};

/// Bytes each side of the BIO pair buffers: a whole first flight with an RSA-4096 chain.
const PAIR_BUFFER: usize = 64 * 1024;
/// Turns each side gets before a handshake counts as stuck.
const MAX_TURNS: usize = 64;

/// How the client gets its `SSL_CTX`.
pub enum ClientContext<'a> {
    /// One context for every handshake.
    Shared(&'a Context),
    /// A new context per handshake, as curl makes one per connection; its cost is timed with
    /// the handshake (it is part of what a caller doing this pays).
    /// Made by the caller's own builder, whose failure is reported as its text.
    PerHandshake(&'a dyn Fn() -> Result<Context, String>),
}

/// One handshake's times.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    /// From before the client's context (per-handshake mode) to both sides done.
    pub total: Duration,
    /// In the client's calls (context creation included in per-handshake mode).
    pub client: Duration,
    /// In the server's calls.
    pub server: Duration,
}

/// What one handshake did.
pub struct Handshake {
    pub timing: Timing,
    /// As the client saw it.
    pub negotiated: Negotiated,
    /// The client's session afterwards (for TLS 1.3, after reading the server's tickets).
    pub session: Option<Session>,
}

/// Why a handshake did not complete.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{side} failed the handshake: {error}")]
    Failed { side: &'static str, error: String },
    #[error("{0}")]
    Setup(#[from] ossl::Error),
    #[error("making the client context: {0}")]
    ClientContext(String),
    #[error("the handshake did not finish in {MAX_TURNS} turns per side")]
    Stuck,
}

/// Runs one handshake between a new client connection (offering `offer`) and a new server
/// connection from `server`. With `verify_host`, the client checks the certificate's name.
pub fn handshake(
    client: &ClientContext<'_>,
    server: &Context,
    offer: Option<&Session>,
    verify_host: Option<&str>,
) -> Result<Handshake, EngineError> {
    let start = Instant::now();
    let owned;
    let client_ctx = match client {
        ClientContext::Shared(ctx) => *ctx,
        ClientContext::PerHandshake(make) => {
            owned = make().map_err(EngineError::ClientContext)?;
            &owned
        }
    };
    let (mut c, mut s) = Ssl::memory_pair(client_ctx, server, PAIR_BUFFER)?;
    if let Some(host) = verify_host {
        c.set_server_name(host)?;
        c.set_verify_host(host)?;
    }
    if let Some(session) = offer {
        c.set_session(session)?;
    }
    let mut timing = Timing {
        client: start.elapsed(),
        ..Timing::default()
    };
    let (mut client_done, mut server_done) = (false, false);
    for _ in 0..MAX_TURNS {
        if !client_done {
            client_done = turn(&mut c, "the client", &mut timing.client)?;
        }
        if !server_done {
            server_done = turn(&mut s, "the server", &mut timing.server)?;
        }
        if client_done && server_done {
            timing.total = start.elapsed();
            let negotiated = c.negotiated();
            // TLS 1.3 tickets follow the handshake: let the client read them (untimed).
            // AWS-LC and BoringSSL servers made theirs inside the timed handshake but send
            // them with their next write only.
            let _ = s.flush_held_writes();
            let mut byte = [0u8; 1];
            let _ = c.read(&mut byte);
            c.mark_shut_down();
            s.mark_shut_down();
            return Ok(Handshake {
                timing,
                negotiated,
                session: c.session(),
            });
        }
    }
    Err(EngineError::Stuck)
}

/// One `SSL_do_handshake` call, timed into `spent`: true once that side is done.
fn turn(ssl: &mut Ssl, side: &'static str, spent: &mut Duration) -> Result<bool, EngineError> {
    let t = Instant::now();
    let io = ssl.do_handshake();
    *spent += t.elapsed();
    match io {
        Io::Done(_) => Ok(true),
        Io::WantRead | Io::WantWrite | Io::Retry(_) => Ok(false),
        Io::Closed => Err(EngineError::Failed {
            side,
            error: "the peer closed the connection".into(),
        }),
        Io::Failed(e) => Err(EngineError::Failed {
            side,
            error: e.to_string(),
        }),
    }
}
