//! The client side of a command's options, shared by `handshake`, `bench` and `compare`: the
//! load client's engine, provider and work as the command line names them, and the client TLS
//! settings built once from the option groups.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

use crate::common::args::{PeerArgs, TlsArgs};
use crate::common::client::ClientOptions;

/// The load client's TLS engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientEngine {
    /// rustls (built in), on ring or aws-lc-rs (see --rustls-provider).
    Rustls,
    /// The OpenSSL `--openssl` names (the system's by default).
    Openssl,
}

impl ClientEngine {
    pub fn typed(self) -> load::EngineKind {
        match self {
            ClientEngine::Rustls => load::EngineKind::Rustls,
            ClientEngine::Openssl => load::EngineKind::Openssl,
        }
    }
}

/// The rustls client's crypto provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RustlsProvider {
    /// ring: classic groups, the cheaper.
    Ring,
    /// aws-lc-rs: also X25519MLKEM768, SecP256r1MLKEM768, MLKEM768/1024 and ML-DSA.
    #[value(name = "aws-lc-rs")]
    AwsLcRs,
}

impl RustlsProvider {
    pub fn typed(self) -> load::rustls_client::Provider {
        match self {
            RustlsProvider::Ring => load::rustls_client::Provider::Ring,
            RustlsProvider::AwsLcRs => load::rustls_client::Provider::AwsLcRs,
        }
    }
}

/// How much of a real client's work the rustls client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientWork {
    /// A real client's: a fresh key share per connection, the server's signature checked.
    Full,
    /// A load generator's: one key share per group for the run, the server's handshake
    /// signature not checked (the server's work is unchanged).
    Lean,
}

impl ClientWork {
    /// The work asked for, or the default: full when the client verifies the server (a lean
    /// client checks no signature), lean otherwise.
    pub fn resolve(given: Option<ClientWork>, verifies: bool) -> load::rustls_client::Work {
        match given.unwrap_or(if verifies {
            ClientWork::Full
        } else {
            ClientWork::Lean
        }) {
            ClientWork::Full => load::rustls_client::Work::Full,
            ClientWork::Lean => load::rustls_client::Work::Lean,
        }
    }
}

/// A client's TLS as its command's options set it, validated once: the handshake settings,
/// verification, an optional client certificate and the key log.
#[derive(Clone, Debug)]
pub struct ClientTls {
    /// Versions, ciphers, groups, signature algorithms; tickets as `tickets` says.
    pub settings: ossl::Settings,
    /// Ask for session tickets; off makes TLS 1.2 resume by session ID.
    pub tickets: bool,
    /// `Some(Some(file))`: verify against a CA file; `Some(None)`: against the system's
    /// store; `None`: not at all.
    pub verify: Option<Option<PathBuf>>,
    /// A client certificate and its key (PEM files).
    pub credentials: Option<(PathBuf, PathBuf)>,
    /// The NSS key log file.
    pub keylog: Option<PathBuf>,
}

impl ClientTls {
    /// The client TLS the option groups ask for; errors name the option that is wrong.
    pub fn from_args(
        tls: &TlsArgs,
        peer: &PeerArgs,
        tickets: bool,
        credentials: Option<(&Path, &Path)>,
    ) -> anyhow::Result<ClientTls> {
        Ok(ClientTls {
            settings: tls.settings(false, tickets)?,
            tickets,
            verify: peer.verifies().then(|| peer.cafile.clone()),
            credentials: credentials.map(|(c, k)| (c.to_path_buf(), k.to_path_buf())),
            keylog: tls.keylog.as_ref().and_then(|k| k.path.clone()),
        })
    }

    /// True when the server's certificate is verified.
    pub fn verifies(&self) -> bool {
        self.verify.is_some()
    }

    /// The verification as the clients take it.
    pub fn verify(&self) -> Option<Option<&Path>> {
        self.verify.as_ref().map(|f| f.as_deref())
    }

    /// The client certificate and key as the clients take them.
    pub fn credentials(&self) -> Option<(&Path, &Path)> {
        self.credentials
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path()))
    }

    /// A fresh key log sink appending to the key log file, if there is one.
    pub fn keylog_sink(&self) -> Option<Box<ossl::KeylogSink>> {
        self.keylog
            .as_deref()
            .map(crate::common::client::keylog_file)
    }

    /// An OpenSSL client context with these settings.
    pub fn context(&self, lib: &'static ossl::Library) -> anyhow::Result<ossl::Context> {
        let options = ClientOptions {
            settings: self.settings.clone(),
            tickets: self.tickets,
            verify: self.verify(),
            credentials: self.credentials(),
            keylog: self.keylog_sink(),
        };
        Ok(crate::common::client::client_context(lib, options)?)
    }
}
