//! The client context `handshake` and `bench` ask for, from their options.

use std::path::Path;

use crate::common::client::ClientOptions;

use crate::common::args::PeerArgs;
use crate::common::args::TlsArgs;

/// A client context with the handshake settings, verification, optional client certificate
/// and key log the command line asked for. `tickets` off makes TLS 1.2 resume by session ID.
pub fn client_context(
    lib: &'static ossl::Library,
    tls: &TlsArgs,
    peer: &PeerArgs,
    tickets: bool,
    client_cert: Option<(&Path, &Path)>,
) -> anyhow::Result<ossl::Context> {
    let options = ClientOptions {
        settings: tls.settings(false, tickets)?,
        tickets,
        verify: peer.verifies().then_some(peer.cafile.as_deref()),
        credentials: client_cert,
        keylog: tls.keylog_sink(),
    };
    Ok(crate::common::client::client_context(lib, options)?)
}
