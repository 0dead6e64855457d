//! The client-side TLS context `handshake` and `bench` share.

use std::path::Path;

use ossl::{ContextBuilder, Credentials, Role};

use crate::args::{PeerArgs, TlsArgs};

/// A client context with the handshake settings, verification, optional client certificate
/// and key log the command line asked for. `tickets` off makes TLS 1.2 resume by session ID.
pub fn client_context(
    lib: &'static ossl::Library,
    tls: &TlsArgs,
    peer: &PeerArgs,
    tickets: bool,
    client_cert: Option<(&Path, &Path)>,
) -> anyhow::Result<ossl::Context> {
    let mut b = ContextBuilder::new(lib, Role::Client)?;
    b.apply(&tls.settings(false, tickets)?)?;
    if peer.verifies() {
        b.verify_peer(peer.cafile.as_deref())?;
    }
    if let Some((cert, key)) = client_cert {
        b.credentials(&Credentials::from_files(lib, cert, key)?)?;
    }
    if let Some(sink) = tls.keylog_sink()? {
        b.keylog(sink);
    }
    Ok(b.build())
}
