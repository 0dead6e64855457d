//! The second client engine: rustls with the ring provider. A full handshake costs this client
//! about half of what it costs wrk on OpenSSL 3.0 (bench/client-cost, issue 17), so one client
//! core keeps a server core busy. ring has no post-quantum groups and no ML-DSA: a run that
//! asks for an ML-KEM group runs on the aws-lc-rs provider instead (issue 31), and either
//! can be chosen outright ([`Provider`]).
//!
//! What bench reports stays exact: each slot has its own session store and its own certificate
//! verifier, so the session a slot offers is the slot's own, and the server's handshake
//! signature is read where rustls checks it. TLS 1.2 resumption by ticket is told from
//! resumption by session ID by what the ClientHello carried.

use std::io::{self, IoSlice, Read, Write};
use std::net::IpAddr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use mio::net::TcpStream;
use ossl::{Group, GroupList, HandshakeIds, HandshakeKind, Negotiated, Settings, TlsVersion};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{
    ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls12Resumption,
    Tls13ClientSessionValue, WebPkiServerVerifier,
};
use rustls::crypto::{CryptoProvider, SupportedKxGroup, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, NamedGroup, RootCertStore,
    SignatureScheme,
};

use crate::client_hello;
use crate::engine::Io;
use crate::wire::{WireCounts, WireTap};

/// The rustls release linked in (pinned in Cargo.toml; a unit test checks Cargo.lock).
pub const RUSTLS_VERSION: &str = "0.23.46";
/// The ring release the ring provider runs on (pinned by Cargo.lock; a unit test checks).
pub const RING_VERSION: &str = "0.17.14";
/// The aws-lc-rs release the aws-lc-rs provider runs on (the same check).
pub const AWS_LC_RS_VERSION: &str = "1.19.0";

/// The crypto provider a rustls client runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// ring: the cheaper per classic handshake (bench/client-cost); no ML-KEM, no ML-DSA.
    Ring,
    /// aws-lc-rs: X25519MLKEM768, SecP256r1MLKEM768, MLKEM768/1024, ML-DSA verification.
    AwsLcRs,
}

impl Provider {
    /// The name `--rustls-provider` takes and results give.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Ring => "ring",
            Provider::AwsLcRs => "aws-lc-rs",
        }
    }

    /// Name and release, as results give them ("aws-lc-rs 1.19.0").
    pub fn description(self) -> String {
        match self {
            Provider::Ring => format!("ring {RING_VERSION}"),
            Provider::AwsLcRs => format!("aws-lc-rs {AWS_LC_RS_VERSION}"),
        }
    }

    /// The provider a run uses: `chosen` when given; otherwise aws-lc-rs when a post-quantum
    /// group is asked for or an ML-DSA certificate is to be verified, ring when not (it is
    /// the cheaper).
    pub fn choose(chosen: Option<Provider>, groups: Option<&GroupList>, ml_dsa: bool) -> Provider {
        chosen.unwrap_or(
            if ml_dsa || groups.is_some_and(GroupList::has_post_quantum) {
                Provider::AwsLcRs
            } else {
                Provider::Ring
            },
        )
    }

    /// rustls's default provider of this kind (its suites, groups and verifiers).
    fn crypto(self) -> CryptoProvider {
        match self {
            Provider::Ring => rustls::crypto::ring::default_provider(),
            Provider::AwsLcRs => rustls::crypto::aws_lc_rs::default_provider(),
        }
    }

    /// Every group the provider has, the ones it does not offer by default included.
    fn all_groups(self) -> &'static [&'static dyn SupportedKxGroup] {
        match self {
            Provider::Ring => rustls::crypto::ring::ALL_KX_GROUPS,
            Provider::AwsLcRs => rustls::crypto::aws_lc_rs::ALL_KX_GROUPS,
        }
    }
}

/// Where Debian keeps the system's trust store as one PEM file.
const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The suites both providers have, by IANA number: OpenSSL's name and the standard one.
const SUITES: &[(u16, &str, &str)] = &[
    (0x1301, "TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
    (
        0x1303,
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_CHACHA20_POLY1305_SHA256",
    ),
    (
        0xc02b,
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        0xc02c,
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        0xcca9,
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        0xc02f,
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        0xc030,
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        0xcca8,
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Signature schemes by their TLS registry names.
const SCHEMES: &[(u16, &str)] = &[
    (0x0201, "rsa_pkcs1_sha1"),
    (0x0203, "ecdsa_sha1"),
    (0x0401, "rsa_pkcs1_sha256"),
    (0x0501, "rsa_pkcs1_sha384"),
    (0x0601, "rsa_pkcs1_sha512"),
    (0x0403, "ecdsa_secp256r1_sha256"),
    (0x0503, "ecdsa_secp384r1_sha384"),
    (0x0603, "ecdsa_secp521r1_sha512"),
    (0x0804, "rsa_pss_rsae_sha256"),
    (0x0805, "rsa_pss_rsae_sha384"),
    (0x0806, "rsa_pss_rsae_sha512"),
    (0x0807, "ed25519"),
    (0x0808, "ed448"),
    (0x0809, "rsa_pss_pss_sha256"),
    (0x080a, "rsa_pss_pss_sha384"),
    (0x080b, "rsa_pss_pss_sha512"),
    (0x0904, "mldsa44"),
    (0x0905, "mldsa65"),
    (0x0906, "mldsa87"),
];

/// OpenSSL's default client signature algorithm order. In TLS 1.2 an OpenSSL server signs
/// with the first of the client's list its key allows, so the rustls client offers its
/// schemes in this order: the server then signs as it would for an OpenSSL client.
const OPENSSL_SIGALG_ORDER: &[u16] = &[
    0x0403, 0x0503, 0x0603, 0x0807, 0x0808, 0x0809, 0x080a, 0x080b, 0x0804, 0x0805, 0x0806, 0x0401,
    0x0501, 0x0601, 0x0203, 0x0201,
];

/// How much of a real client's work the rustls client does for each handshake.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Work {
    /// What a real client does: a fresh key share for every connection, and the server's
    /// handshake signature checked (and the chain, when verifying).
    #[default]
    Full,
    /// A load generator's client, so that one client core outruns one server core: one key
    /// share per group for the whole process (see `reused_share`), and the server's handshake
    /// signature read (its scheme is still reported) but not checked. The server does all of
    /// its work, as for any client. Not with chain verification.
    Lean,
}

impl Work {
    /// The name `--client-work` takes and results give.
    pub fn name(self) -> &'static str {
        match self {
            Work::Full => "full",
            Work::Lean => "lean",
        }
    }

    /// What the client skipped, as results say it.
    pub fn description(self) -> &'static str {
        match self {
            Work::Full => "full client work",
            Work::Lean => "lean: key share reused, server signature not checked",
        }
    }
}

/// How a run's client trusts the server and shows itself: verification, a client
/// certificate, the key log; and how much of a real client's work it does.
#[derive(Default)]
pub struct Trust<'a> {
    /// `Some(Some(file))`: verify against a CA file; `Some(None)`: against the system's store;
    /// `None`: accept any certificate (the handshake signature is still checked, unless lean).
    pub verify: Option<Option<&'a Path>>,
    /// Full or lean (lean refuses `verify`).
    pub work: Work,
    /// A client certificate and its key (PEM files).
    pub credentials: Option<(&'a Path, &'a Path)>,
    /// Where the NSS key log lines go.
    pub keylog: Option<Box<ossl::KeylogSink>>,
}

/// A configured rustls client: what every slot's connections are made from.
pub struct RustlsClient {
    provider: Provider,
    work: Work,
    base: ClientConfig,
    webpki: Option<Arc<WebPkiServerVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
    schemes: Vec<SignatureScheme>,
    tls12: Tls12Resumption,
    /// Names the server's key the way the OpenSSL engine does.
    lib: Option<&'static ossl::Library>,
}

/// Where a client's trusted certificates come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TrustStore {
    /// A CA file the user named.
    CaFile(PathBuf),
    /// The system's store (or `SSL_CERT_FILE`) at this path.
    System(PathBuf),
}

impl std::fmt::Display for TrustStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TrustStore::CaFile(path) => write!(f, "the CA file {}", path.display()),
            TrustStore::System(path) => write!(f, "the system's trust store {}", path.display()),
        }
    }
}

/// Why a rustls client cannot be made for the settings given, or its check handshake
/// failed. Each names the setting's value, file or address involved.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the lean client does not check the server's signature, so it cannot verify the server either; verify with the full client")]
    LeanCannotVerify,
    #[error("{store}: holds an {ml_dsa} certificate, which rustls on ring cannot verify; use the aws-lc-rs provider")]
    MlDsaOnRing {
        store: TrustStore,
        ml_dsa: &'static str,
    },
    #[error("minimum TLS version {version}: the rustls client speaks TLS 1.2 and 1.3 only")]
    MinVersion { version: &'static str },
    #[error("{} list {list}: {name} is not a suite the rustls client has ({})", if *tls13 { "TLS 1.3 suite" } else { "TLS 1.2 cipher" }, known.join(", "))]
    UnknownSuite {
        /// The TLS 1.3 list (else the TLS 1.2 one).
        tls13: bool,
        list: String,
        name: String,
        known: Vec<&'static str>,
    },
    #[error("group {group}: rustls on {} has {}{}", provider.name(), available.join(", "), hint_provider.map(|p| format!("; rustls on {} has it", p.name())).unwrap_or_default())]
    GroupNotInProvider {
        group: Group,
        provider: Provider,
        available: Vec<&'static str>,
        /// The provider that has the group, when the other one does.
        hint_provider: Option<Provider>,
    },
    #[error("signature scheme {name}: the rustls client verifies {}", verified.join(", "))]
    SigalgNotVerified {
        name: String,
        verified: Vec<&'static str>,
    },
    #[error("{store}: {reason}")]
    TrustStoreUnusable { store: TrustStore, reason: String },
    #[error("the rustls client cannot use these settings: {reason}")]
    Settings { reason: String },
    #[error("client certificate {}: {reason}", path.display())]
    ClientCertificate { path: PathBuf, reason: String },
    #[error("client key {}: {reason}", path.display())]
    ClientKey { path: PathBuf, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("{addr}: {source}")]
    Socket { addr: SocketAddr, source: io::Error },
    #[error("{name}: {reason}")]
    ServerName { name: String, reason: String },
    #[error("{reason}")]
    Connection { reason: String },
    /// The check handshake failed; `kind` as a run's errors name it.
    #[error("TLS handshake with {addr} failed: {kind}")]
    Handshake { addr: SocketAddr, kind: String },
    /// The server refused every signature scheme ring offers: an ML-DSA key, most likely.
    #[error("TLS handshake with {addr} failed: {RING_HANDSHAKE_FAILURE}")]
    RingHandshakeFailure { addr: SocketAddr },
}

/// A handshake failure alert to a client on ring, as a run counts it.
const RING_HANDSHAKE_FAILURE: &str = "tls alert: handshake failure (if the server's key is \
    ML-DSA: rustls on ring cannot verify it; rustls on aws-lc-rs can)";

impl RustlsClient {
    /// A client for `settings` (versions, suites, groups, signature schemes; `tickets` off
    /// makes TLS 1.2 resume by session ID) and `trust`. A setting this engine cannot honour
    /// exactly is an error naming it. `lib`, when given, names the server's key. The
    /// provider is `provider`, or the one [`Provider::choose`] picks.
    pub fn new(
        settings: &Settings,
        trust: Trust<'_>,
        lib: Option<&'static ossl::Library>,
        provider: Option<Provider>,
    ) -> Result<RustlsClient, ClientError> {
        if trust.work == Work::Lean && trust.verify.is_some() {
            return Err(ClientError::LeanCannotVerify);
        }
        let anchors = trust.verify.map(trust_anchors).transpose()?;
        let ml_dsa = anchors
            .as_ref()
            .and_then(|a| a.certs.iter().find_map(|c| ml_dsa_in(c)));
        let kind = Provider::choose(provider, settings.groups.as_ref(), ml_dsa.is_some());
        if let (Provider::Ring, Some(ml_dsa), Some(a)) = (kind, ml_dsa, &anchors) {
            return Err(ClientError::MlDsaOnRing {
                store: a.store.clone(),
                ml_dsa,
            });
        }
        let mut provider = kind.crypto();
        let versions = versions(settings)?;
        provider.cipher_suites = suites(&provider, settings)?;
        if let Some(list) = &settings.groups {
            provider.kx_groups = groups(kind, list)?;
        }
        if trust.work == Work::Lean {
            provider.kx_groups = reused_shares(&provider.kx_groups);
        }
        let algorithms = provider.signature_verification_algorithms;
        let schemes = match &settings.sigalgs {
            Some(list) => sigalgs(&algorithms, list)?,
            None => in_openssl_order(algorithms.supported_schemes()),
        };
        let provider = Arc::new(provider);
        let webpki = anchors.map(|a| webpki_verifier(a, &provider)).transpose()?;
        let verifier = Arc::new(SlotVerifier {
            webpki: webpki.clone(),
            check_signature: trust.work == Work::Full,
            algorithms,
            schemes: schemes.clone(),
            slot: Arc::new(SlotState::default()),
        });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)
            .map_err(|e| ClientError::Settings {
                reason: e.to_string(),
            })?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut base = match trust.credentials {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let (chain, key) = client_identity(cert, key)?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    ClientError::ClientCertificate {
                        path: cert.to_path_buf(),
                        reason: e.to_string(),
                    }
                })?
            }
        };
        if let Some(sink) = trust.keylog {
            base.key_log = Arc::new(KeyLogSink(sink));
        }
        Ok(RustlsClient {
            provider: kind,
            work: trust.work,
            base,
            webpki,
            algorithms,
            schemes,
            tls12: if settings.tickets {
                Tls12Resumption::SessionIdOrTickets
            } else {
                Tls12Resumption::SessionIdOnly
            },
            lib,
        })
    }

    /// The engine's name, release and provider, as results give them
    /// ("rustls 0.23.46 (aws-lc-rs 1.19.0)"), and, when lean, what it skips.
    pub fn description(&self) -> String {
        let lean = match self.work {
            Work::Full => String::new(),
            Work::Lean => format!(", {}", Work::Lean.description()),
        };
        format!(
            "rustls {RUSTLS_VERSION} ({}){lean}",
            self.provider.description()
        )
    }

    /// Full or lean.
    pub fn work(&self) -> Work {
        self.work
    }

    /// The provider the client runs on.
    pub fn provider(&self) -> Provider {
        self.provider
    }

    /// One blocking handshake with `addr` (SNI `name`, none without one), then close: does
    /// the target answer this client? The error is one line, as a run's failures name it.
    pub fn probe(
        &self,
        name: Option<&str>,
        addr: std::net::SocketAddr,
        timeout: std::time::Duration,
    ) -> Result<(), ClientError> {
        let mut stream = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(|source| ClientError::Connect { addr, source })?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(|source| ClientError::Socket { addr, source })?;
        let slot = self.slot(false);
        let server = match name {
            Some(n) => {
                ServerName::try_from(n.to_string()).map_err(|e| ClientError::ServerName {
                    name: n.to_string(),
                    reason: e.to_string(),
                })?
            }
            None => ServerName::IpAddress(addr.ip().into()),
        };
        let mut conn = ClientConnection::new(slot.config.clone(), server).map_err(|e| {
            ClientError::Connection {
                reason: e.to_string(),
            }
        })?;
        while conn.is_handshaking() {
            if let Err(e) = conn.complete_io(&mut stream) {
                let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
                return Err(match tls {
                    Some(tls) if ring_handshake_failure(tls, Some(self.provider)) => {
                        ClientError::RingHandshakeFailure { addr }
                    }
                    Some(tls) => ClientError::Handshake {
                        addr,
                        kind: error_kind(tls, Some(self.provider)),
                    },
                    None => ClientError::Handshake {
                        addr,
                        kind: format!("tls: {e}"),
                    },
                });
            }
        }
        conn.send_close_notify();
        let _ = conn.complete_io(&mut stream);
        Ok(())
    }

    /// One connection slot's client: its own session store (kept only when `resume`) and
    /// verifier, so what it offers and what it is told are its own.
    pub fn slot(&self, resume: bool) -> SlotClient {
        let state = Arc::new(SlotState {
            provider: Some(self.provider),
            resume,
            ..SlotState::default()
        });
        let mut config = self.base.clone();
        config.resumption =
            Resumption::store(Arc::new(SlotStore(state.clone()))).tls12_resumption(self.tls12);
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(SlotVerifier {
                webpki: self.webpki.clone(),
                check_signature: self.work == Work::Full,
                algorithms: self.algorithms,
                schemes: self.schemes.clone(),
                slot: state.clone(),
            }));
        SlotClient {
            config: Arc::new(config),
            state,
            lib: self.lib,
        }
    }
}

/// The TLS versions to offer: rustls speaks 1.2 and 1.3 only.
fn versions(s: &Settings) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, ClientError> {
    let min = s.min_version.unwrap_or(TlsVersion::Tls1_2);
    let max = s.max_version.unwrap_or(TlsVersion::Tls1_3);
    if min < TlsVersion::Tls1_2 {
        let version = if min == TlsVersion::Tls1_0 {
            "1.0"
        } else {
            "1.1"
        };
        return Err(ClientError::MinVersion { version });
    }
    let mut v = Vec::new();
    if max >= TlsVersion::Tls1_3 {
        v.push(&rustls::version::TLS13);
    }
    if min <= TlsVersion::Tls1_2 && max >= TlsVersion::Tls1_2 {
        v.push(&rustls::version::TLS12);
    }
    Ok(v)
}

/// The provider's suites, narrowed to the TLS 1.3 and TLS 1.2 lists in their order; each
/// list must be exact names of suites rustls has.
fn suites(
    provider: &CryptoProvider,
    s: &Settings,
) -> Result<Vec<rustls::SupportedCipherSuite>, ClientError> {
    let by_number = |n: u16| {
        provider
            .cipher_suites
            .iter()
            .find(|cs| u16::from(cs.suite()) == n)
            .copied()
    };
    let pick = |list: &str, tls13: bool| -> Result<Vec<_>, ClientError> {
        let mut out = Vec::new();
        for name in list.split(':').filter(|n| !n.is_empty()) {
            let found = SUITES
                .iter()
                .filter(|(n, _, _)| (*n >> 8 == 0x13) == tls13)
                .find(|(_, ossl, iana)| name == *ossl || name == *iana)
                .and_then(|(n, _, _)| by_number(*n));
            match found {
                Some(cs) => out.push(cs),
                None => return Err(unsupported_name(list, name, tls13)),
            }
        }
        Ok(out)
    };
    let defaults = |tls13: bool| -> Vec<_> {
        provider
            .cipher_suites
            .iter()
            .filter(|cs| (u16::from(cs.suite()) >> 8 == 0x13) == tls13)
            .copied()
            .collect()
    };
    let mut all = match &s.ciphersuites {
        Some(list) => pick(list, true)?,
        None => defaults(true),
    };
    all.extend(match &s.cipher_list {
        Some(list) => pick(list, false)?,
        None => defaults(false),
    });
    Ok(all)
}

fn unsupported_name(list: &str, name: &str, tls13: bool) -> ClientError {
    let known = SUITES
        .iter()
        .filter(|(n, _, _)| (*n >> 8 == 0x13) == tls13)
        .map(|(_, ossl, _)| *ossl)
        .collect();
    ClientError::UnknownSuite {
        tls13,
        list: list.to_string(),
        name: name.to_string(),
        known,
    }
}

/// The provider's groups for `list`, in its order; a group the provider lacks is refused,
/// naming the provider that has it.
fn groups(
    provider: Provider,
    list: &GroupList,
) -> Result<Vec<&'static dyn SupportedKxGroup>, ClientError> {
    let all = provider.all_groups();
    let find = |g: Group| {
        all.iter()
            .find(|k| u16::from(k.name()) == g.code_point())
            .copied()
    };
    let mut out = Vec::new();
    for &group in list.groups() {
        match find(group) {
            Some(k) => out.push(k),
            None => {
                let available = all
                    .iter()
                    .filter_map(|k| Group::from_code_point(k.name().into()))
                    .map(Group::name)
                    .collect();
                let hint_provider = (provider == Provider::Ring && group.is_post_quantum())
                    .then_some(Provider::AwsLcRs);
                return Err(ClientError::GroupNotInProvider {
                    group,
                    provider,
                    available,
                    hint_provider,
                });
            }
        }
    }
    Ok(out)
}

/// A lean client's groups: each one's reused form where there is one, the provider's own
/// (a fresh share per connection) where not.
fn reused_shares(groups: &[&'static dyn SupportedKxGroup]) -> Vec<&'static dyn SupportedKxGroup> {
    groups
        .iter()
        .map(|g| crate::reused_share::reused(g.name()).unwrap_or(*g))
        .collect()
}

fn sigalgs(
    algorithms: &WebPkiSupportedAlgorithms,
    list: &str,
) -> Result<Vec<SignatureScheme>, ClientError> {
    let supported = algorithms.supported_schemes();
    let mut out = Vec::new();
    for name in list.split(':').filter(|n| !n.is_empty()) {
        let scheme = SCHEMES
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map(|(n, _)| SignatureScheme::from(*n))
            .filter(|s| supported.contains(s));
        match scheme {
            Some(s) => out.push(s),
            None => {
                return Err(ClientError::SigalgNotVerified {
                    name: name.to_string(),
                    verified: supported
                        .iter()
                        .filter_map(|s| scheme_name(u16::from(*s)))
                        .collect(),
                })
            }
        }
    }
    Ok(out)
}

fn in_openssl_order(mut schemes: Vec<SignatureScheme>) -> Vec<SignatureScheme> {
    let rank = |s: &SignatureScheme| {
        OPENSSL_SIGALG_ORDER
            .iter()
            .position(|&n| n == u16::from(*s))
            .unwrap_or(usize::MAX)
    };
    schemes.sort_by_key(rank);
    schemes
}

/// The certificates a client trusts, and where they came from.
struct Anchors {
    store: TrustStore,
    certs: Vec<CertificateDer<'static>>,
}

/// Reads `cafile`, or the system's trust store when None.
fn trust_anchors(cafile: Option<&Path>) -> Result<Anchors, ClientError> {
    let env_file = std::env::var_os("SSL_CERT_FILE");
    let path = cafile
        .map(Path::to_path_buf)
        .or_else(|| env_file.map(Into::into))
        .unwrap_or_else(|| SYSTEM_CA_FILE.into());
    let store = if cafile.is_some() {
        TrustStore::CaFile(path.clone())
    } else {
        TrustStore::System(path.clone())
    };
    let unusable = |e: rustls::pki_types::pem::Error| ClientError::TrustStoreUnusable {
        store: store.clone(),
        reason: e.to_string(),
    };
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(unusable)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(unusable)?;
    Ok(Anchors { store, certs })
}

fn webpki_verifier(
    anchors: Anchors,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, ClientError> {
    let store = anchors.store;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(anchors.certs);
    if added == 0 {
        return Err(ClientError::TrustStoreUnusable {
            store,
            reason: "no usable CA certificate in it".into(),
        });
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| ClientError::TrustStoreUnusable {
            store,
            reason: e.to_string(),
        })
}

/// The ML-DSA parameter set a certificate's key or signature uses, found by its algorithm
/// identifier (id-ml-dsa-44/65/87, 2.16.840.1.101.3.4.3.17-19, RFC 9881).
fn ml_dsa_in(cert: &CertificateDer<'_>) -> Option<&'static str> {
    const OID_PREFIX: [u8; 10] = [0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03];
    cert.windows(OID_PREFIX.len() + 1).find_map(|w| {
        if w[..OID_PREFIX.len()] != OID_PREFIX {
            return None;
        }
        match w[OID_PREFIX.len()] {
            0x11 => Some("ML-DSA-44"),
            0x12 => Some("ML-DSA-65"),
            0x13 => Some("ML-DSA-87"),
            _ => None,
        }
    })
}

fn client_identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), ClientError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ClientError::ClientCertificate {
            path: cert.to_path_buf(),
            reason: e.to_string(),
        })?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| ClientError::ClientKey {
        path: key.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok((chain, key))
}

/// Key log lines in NSS format, handed to the run's sink.
struct KeyLogSink(Box<ossl::KeylogSink>);

impl std::fmt::Debug for KeyLogSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyLogSink")
    }
}

impl rustls::KeyLog for KeyLogSink {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        (self.0)(&format!("{label} {} {}", hex(client_random), hex(secret)));
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What one slot's store and verifier share.
#[derive(Debug, Default)]
struct SlotState {
    /// The run's provider, which names what a failure may need.
    provider: Option<Provider>,
    /// Keep sessions (resume mode); otherwise the store takes nothing and offers nothing.
    resume: bool,
    sessions: Mutex<Sessions>,
    /// The server's handshake signature scheme on the slot's current connection (0: none).
    signature: AtomicU16,
}

#[derive(Debug, Default)]
struct Sessions {
    /// May the next connection offer what is kept?
    offer: bool,
    tls12: Option<Tls12ClientSessionValue>,
    tls13: Option<Tls13ClientSessionValue>,
    /// The current connection received a session that can be offered later.
    received: bool,
}

impl SlotState {
    fn sessions(&self) -> MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps a session the server gave (resume mode only).
    fn keep(&self, put: impl FnOnce(&mut Sessions)) {
        if self.resume {
            let mut s = self.sessions();
            put(&mut s);
            s.received = true;
        }
    }

    /// A kept session for the ClientHello, when the slot offers one on this connection.
    fn hand_out<T>(&self, get: impl FnOnce(&mut Sessions) -> Option<T>) -> Option<T> {
        let mut s = self.sessions();
        if !s.offer {
            return None;
        }
        get(&mut s)
    }
}

/// A slot's session store: at most one session, offered only when the slot says so.
#[derive(Debug)]
struct SlotStore(Arc<SlotState>);

impl ClientSessionStore for SlotStore {
    // Like OpenSSL's client, every connection starts with the configured first group.
    fn set_kx_hint(&self, _: ServerName<'static>, _: NamedGroup) {}

    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        None
    }

    fn set_tls12_session(&self, _: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.0.keep(|s| s.tls12 = Some(value));
    }

    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.0.hand_out(|s| s.tls12.clone())
    }

    fn remove_tls12_session(&self, _: &ServerName<'static>) {
        self.0.sessions().tls12 = None;
    }

    fn insert_tls13_ticket(&self, _: ServerName<'static>, value: Tls13ClientSessionValue) {
        self.0.keep(|s| s.tls13 = Some(value));
    }

    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.0.hand_out(|s| s.tls13.take())
    }
}

/// Checks the certificate (when asked) and the handshake signature, noting the signature's
/// scheme for the slot's report.
#[derive(Debug)]
struct SlotVerifier {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    /// False for a lean client: the signature's scheme is noted, the signature not checked.
    check_signature: bool,
    algorithms: WebPkiSupportedAlgorithms,
    schemes: Vec<SignatureScheme>,
    slot: Arc<SlotState>,
}

impl ServerCertVerifier for SlotVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match &self.webpki {
            Some(v) => v.verify_server_cert(end_entity, intermediates, server_name, ocsp, now),
            None => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.slot.signature.store(u16::from(dss.scheme), Relaxed);
        if !self.check_signature {
            return Ok(HandshakeSignatureValid::assertion());
        }
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.slot.signature.store(u16::from(dss.scheme), Relaxed);
        if !self.check_signature {
            return Ok(HandshakeSignatureValid::assertion());
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes.clone()
    }
}

/// One slot's client: its connections share its session store.
pub struct SlotClient {
    config: Arc<ClientConfig>,
    state: Arc<SlotState>,
    lib: Option<&'static ossl::Library>,
}

impl SlotClient {
    /// True when the slot keeps a session it could offer.
    pub fn has_session(&self) -> bool {
        let s = self.state.sessions();
        s.tls12.is_some() || s.tls13.is_some()
    }

    /// A new connection to `name` (or, without one, to `ip`, which sends no SNI), offering
    /// the slot's session when `offer`.
    pub fn connect(
        &self,
        name: Option<&str>,
        ip: IpAddr,
        offer: bool,
    ) -> Result<Box<RustlsConn>, String> {
        {
            let mut s = self.state.sessions();
            s.offer = offer;
            s.received = false;
        }
        self.state.signature.store(0, Relaxed);
        let server = match name {
            Some(n) => ServerName::try_from(n.to_string()).map_err(|e| format!("{n}: {e}"))?,
            None => ServerName::IpAddress(ip.into()),
        };
        // The store is read while the ClientHello is made, here: from then on nothing is
        // offered until the slot says so again.
        let conn = ClientConnection::new(self.config.clone(), server).map_err(|e| e.to_string());
        self.state.sessions().offer = false;
        Ok(Box::new(RustlsConn {
            conn: conn?,
            state: self.state.clone(),
            lib: self.lib,
            hello_checked: false,
            hello_has_ticket: false,
            wire: WireTap::default(),
        }))
    }
}

/// One rustls client connection over a non-blocking socket.
pub struct RustlsConn {
    conn: ClientConnection,
    state: Arc<SlotState>,
    lib: Option<&'static ossl::Library>,
    /// The ClientHello has been looked at: did it carry a TLS 1.2 session ticket?
    hello_checked: bool,
    hello_has_ticket: bool,
    /// The connection's wire figures, counted at the socket (see `crate::wire`).
    wire: WireTap,
}

impl RustlsConn {
    /// Drives the handshake: done once the client's last flight is on the wire.
    pub fn do_handshake(&mut self, stream: &mut TcpStream) -> Io {
        loop {
            if let Some(stop) = self.flush(stream) {
                return stop;
            }
            if !self.conn.is_handshaking() {
                return Io::Done(1);
            }
            if let Some(stop) = self.receive(stream, "handshake") {
                return stop;
            }
        }
    }

    /// Reads application data into `buf`.
    pub fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8]) -> Io {
        loop {
            if let Some(stop) = self.flush(stream) {
                return stop;
            }
            match self.conn.reader().read(buf) {
                Ok(0) => return Io::Closed,
                Ok(n) => return Io::Done(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return transport_failure(&e, "response"),
            }
            if let Some(stop) = self.receive(stream, "response") {
                return stop;
            }
        }
    }

    /// Writes application data; it is on the wire, or queued for the next call, when this
    /// returns.
    pub fn write(&mut self, stream: &mut TcpStream, buf: &[u8]) -> Io {
        if let Some(stop) = self.flush(stream) {
            return stop;
        }
        let n = match self.conn.writer().write(buf) {
            Ok(n) => n,
            Err(e) => return transport_failure(&e, "request"),
        };
        match self.flush(stream) {
            None | Some(Io::Wait) => Io::Done(n),
            Some(stop) => stop,
        }
    }

    /// Sends close_notify, without waiting for the peer's.
    pub fn shutdown(&mut self, stream: &mut TcpStream) {
        self.conn.send_close_notify();
        let _ = self.flush(stream);
    }

    /// True when the slot received a session on this connection.
    pub fn has_resumable_session(&self) -> bool {
        self.state.sessions().received
    }

    /// The wire figures so far (taken when the handshake is done).
    pub fn wire(&self) -> WireCounts {
        self.wire.counts()
    }

    /// What the handshake obtained, as numbers (IANA code points).
    pub fn handshake_ids(&self) -> HandshakeIds {
        let c = &self.conn;
        HandshakeIds {
            version: c.protocol_version().map_or(0, |v| u16::from(v).into()),
            cipher: c
                .negotiated_cipher_suite()
                .map_or(0, |s| u16::from(s.suite()).into()),
            group: c
                .negotiated_key_exchange_group()
                .map_or(0, |g| u16::from(g.name()).into()),
            signature_type: self.state.signature.load(Relaxed).into(),
            signature_digest: 0,
            kind: self.kind(),
        }
    }

    fn kind(&self) -> HandshakeKind {
        if self.conn.handshake_kind() != Some(rustls::HandshakeKind::Resumed) {
            return HandshakeKind::Full;
        }
        let tls12 = self.conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_2);
        if tls12 && !self.hello_has_ticket {
            HandshakeKind::ResumedSessionId
        } else {
            HandshakeKind::ResumedTicket
        }
    }

    /// The handshake in words, named as the OpenSSL engine names it.
    pub fn negotiated(&self) -> Negotiated {
        let ids = self.handshake_ids();
        let suite = SUITES
            .iter()
            .find(|(n, _, _)| usize::from(*n) == ids.cipher);
        let server_key = self.server_key();
        Negotiated {
            version: match ids.version {
                0x0304 => "TLSv1.3".into(),
                0x0303 => "TLSv1.2".into(),
                v => format!("0x{v:04x}"),
            },
            cipher: suite.map_or_else(|| format!("0x{:04x}", ids.cipher), |s| s.1.to_string()),
            cipher_standard: suite.map(|s| s.2.to_string()),
            group: u16::try_from(ids.group).ok().filter(|&g| g != 0).map(|g| {
                Group::from_code_point(g)
                    .map_or_else(|| format!("0x{g:04x}"), |g| g.name().to_string())
            }),
            signature: u16::try_from(ids.signature_type)
                .ok()
                .filter(|&s| s != 0)
                .map(|s| scheme_name(s).map_or_else(|| format!("0x{s:04x}"), str::to_string)),
            server_key,
            kind: ids.kind,
        }
    }

    fn server_key(&self) -> Option<String> {
        let der = self.conn.peer_certificates()?.first()?;
        let described = self
            .lib
            .and_then(|lib| ossl::Certificate::from_der(lib, der).ok())
            .map(|cert| cert.key_description())
            .filter(|d| d != "none");
        // A library older than ML-DSA reads no key from such a certificate: name it here.
        described.or_else(|| ml_dsa_in(der).map(str::to_string))
    }

    /// Sends what rustls has queued. None when all of it went out; otherwise what the caller
    /// returns (wait for the socket, or the failure).
    fn flush(&mut self, stream: &mut TcpStream) -> Option<Io> {
        while self.conn.wants_write() {
            let mut tap = HelloTap {
                stream,
                check: !self.hello_checked,
                looked: false,
                has_ticket: false,
                wire: &mut self.wire,
            };
            let result = self.conn.write_tls(&mut tap);
            if tap.check {
                self.hello_checked = true;
                self.hello_has_ticket = tap.has_ticket;
            }
            match result {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(Io::Wait),
                Err(e) => return Some(transport_failure(&e, "request")),
            }
        }
        None
    }

    /// Reads what the socket has and processes it. None when there may be more to do.
    fn receive(&mut self, stream: &mut TcpStream, phase: &str) -> Option<Io> {
        let mut tap = ReadTap {
            stream,
            wire: &mut self.wire,
        };
        match self.conn.read_tls(&mut tap) {
            Ok(0) => {
                // The peer closed: what it sent before is still processed.
                if let Err(e) = self.conn.process_new_packets() {
                    return Some(Io::Failed {
                        kind: error_kind(&e, self.state.provider),
                        eof: false,
                    });
                }
                if self.conn.is_handshaking() {
                    return Some(Io::Failed {
                        kind: format!("closed early ({phase})"),
                        eof: true,
                    });
                }
                // reader() now tells a close_notify (Ok(0)) from a plain end (an error).
                return None;
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Some(Io::Wait),
            Err(e) => return Some(transport_failure(&e, phase)),
        }
        if let Err(e) = self.conn.process_new_packets() {
            // Send the alert rustls queued, as OpenSSL would.
            let _ = self.flush(stream);
            return Some(Io::Failed {
                kind: error_kind(&e, self.state.provider),
                eof: false,
            });
        }
        None
    }
}

/// Passes rustls's writes to the socket, counting what the socket took; the first one (the
/// ClientHello, a whole record) is read for its size, its key shares and a TLS 1.2 session
/// ticket. Counting here, where the engine does its own I/O, costs an addition per write.
struct HelloTap<'a> {
    stream: &'a mut TcpStream,
    check: bool,
    looked: bool,
    has_ticket: bool,
    wire: &'a mut WireTap,
}

impl Write for HelloTap<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.look(buf);
        let n = self.stream.write(buf)?;
        self.wire.sent(n);
        Ok(n)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if let Some(first) = bufs.first() {
            self.look(first);
        }
        let n = self.stream.write_vectored(bufs)?;
        self.wire.sent(n);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl HelloTap<'_> {
    fn look(&mut self, buf: &[u8]) {
        // Only the connection's first write is the ClientHello (`check`), and it is read once.
        if self.check && !self.looked {
            self.looked = true;
            let hello = client_hello::parse_record(buf);
            self.has_ticket = hello.is_some_and(|h| h.offers_ticket);
            self.wire.client_hello(hello);
        }
    }
}

/// Passes the socket's bytes to rustls, counting them (and reading the server's first
/// message for a HelloRetryRequest).
struct ReadTap<'a> {
    stream: &'a mut TcpStream,
    wire: &'a mut WireTap,
}

impl Read for ReadTap<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.wire.received_stream(&buf[..n]);
        Ok(n)
    }
}

fn scheme_name(n: u16) -> Option<&'static str> {
    SCHEMES.iter().find(|(s, _)| *s == n).map(|(_, name)| *name)
}

/// A socket error as the OpenSSL engine names it.
fn transport_failure(e: &io::Error, phase: &str) -> Io {
    let kind = match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => "reset".to_string(),
        _ if e.kind() == io::ErrorKind::UnexpectedEof => format!("closed early ({phase})"),
        _ => format!("tls: {e}"),
    };
    Io::Failed { kind, eof: true }
}

/// A rustls error named as the OpenSSL engine names its failures. On ring, a server that
/// found no signature scheme to use may hold an ML-DSA key, which ring cannot verify: the
/// failure says where the fix is.
fn error_kind(e: &rustls::Error, provider: Option<Provider>) -> String {
    match e {
        e if ring_handshake_failure(e, provider) => RING_HANDSHAKE_FAILURE.into(),
        rustls::Error::AlertReceived(alert) => {
            format!("tls alert: {}", words(&format!("{alert:?}")))
        }
        rustls::Error::InvalidCertificate(c) => format!("verify: {}", certificate_error(c)),
        other => format!("tls: {other}"),
    }
}

/// A handshake failure alert to a client on ring: the server found no signature scheme it
/// offers, which an ML-DSA key explains.
fn ring_handshake_failure(e: &rustls::Error, provider: Option<Provider>) -> bool {
    provider == Some(Provider::Ring)
        && matches!(
            e,
            rustls::Error::AlertReceived(rustls::AlertDescription::HandshakeFailure)
        )
}

fn certificate_error(e: &rustls::CertificateError) -> String {
    use rustls::CertificateError as C;
    match e {
        C::Expired | C::ExpiredContext { .. } => "certificate has expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "certificate is not yet valid".into(),
        C::UnknownIssuer => "unable to get local issuer certificate".into(),
        C::NotValidForName | C::NotValidForNameContext { .. } => "hostname mismatch".into(),
        C::BadSignature => "certificate signature failure".into(),
        other => words(&format!("{other:?}")),
    }
}

/// "HandshakeFailure" -> "handshake failure"; "UnknownCA" -> "unknown ca".
fn words(camel: &str) -> String {
    let name = camel.split(['(', ' ', '{']).next().unwrap_or(camel);
    let mut out = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c.is_ascii_uppercase() && prev_lower {
            out.push(' ');
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_rustls_is_the_one_in_cargo_lock() {
        let lock = include_str!("../../../Cargo.lock");
        for (name, version) in [
            ("rustls", RUSTLS_VERSION),
            ("ring", RING_VERSION),
            ("aws-lc-rs", AWS_LC_RS_VERSION),
        ] {
            let entry = format!("name = \"{name}\"\nversion = \"{version}\"");
            assert!(lock.contains(&entry), "{name} {version} not in Cargo.lock");
        }
    }

    #[test]
    fn alert_and_error_names_read_like_openssl_s() {
        assert_eq!(words("HandshakeFailure"), "handshake failure");
        assert_eq!(words("UnknownCA"), "unknown ca");
        assert_eq!(words("ProtocolVersion"), "protocol version");
    }

    #[test]
    fn settings_rustls_cannot_honour_are_named() {
        let err = |s: Settings| {
            RustlsClient::new(&s, Trust::default(), None, None)
                .err()
                .unwrap()
        };
        let e = err(Settings {
            cipher_list: Some("HIGH:!aNULL".into()),
            ..Settings::new()
        });
        assert!(
            matches!(&e, ClientError::UnknownSuite { tls13: false, list, name, .. }
                if list == "HIGH:!aNULL" && name == "HIGH"),
            "{e:?}"
        );
        let e = err(Settings {
            min_version: Some(TlsVersion::Tls1_1),
            ..Settings::new()
        });
        assert!(
            matches!(e, ClientError::MinVersion { version: "1.1" }),
            "{e:?}"
        );
        let e = err(Settings {
            groups: "ffdhe2048".parse().ok(),
            ..Settings::new()
        });
        assert!(
            matches!(&e, ClientError::GroupNotInProvider { group, provider: Provider::Ring, available, hint_provider: None }
                if group.to_string() == "ffdhe2048" && available[0] == "x25519"),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("group ffdhe2048: rustls on ring has x25519"),
            "{e}"
        );
        let ok = RustlsClient::new(
            &Settings {
                cipher_list: Some("ECDHE-ECDSA-AES128-GCM-SHA256".into()),
                ciphersuites: Some("TLS_AES_128_GCM_SHA256".into()),
                groups: "P-256:X25519".parse().ok(),
                sigalgs: Some("ecdsa_secp256r1_sha256".into()),
                ..Settings::new()
            },
            Trust::default(),
            None,
            None,
        );
        assert_eq!(ok.map(|c| c.provider()).ok(), Some(Provider::Ring));
    }

    #[test]
    fn post_quantum_groups_run_on_aws_lc_rs_unless_ring_is_asked_for() {
        let pq = |provider| {
            let settings = Settings {
                groups: "X25519MLKEM768:SecP256r1MLKEM768:x25519".parse().ok(),
                ..Settings::new()
            };
            RustlsClient::new(&settings, Trust::default(), None, provider)
        };
        let auto = pq(None).unwrap();
        assert_eq!(auto.provider(), Provider::AwsLcRs);
        assert_eq!(auto.description(), "rustls 0.23.46 (aws-lc-rs 1.19.0)");
        let e = pq(Some(Provider::Ring)).err().unwrap();
        assert!(
            matches!(&e, ClientError::GroupNotInProvider { group, provider: Provider::Ring, hint_provider: Some(Provider::AwsLcRs), .. }
                if group.to_string() == "X25519MLKEM768"),
            "{e:?}"
        );
        assert!(e.to_string().ends_with("rustls on aws-lc-rs has it"), "{e}");
        let e = RustlsClient::new(
            &Settings {
                groups: "MLKEM512".parse().ok(),
                ..Settings::new()
            },
            Trust::default(),
            None,
            None,
        )
        .err()
        .unwrap();
        assert!(
            matches!(&e, ClientError::GroupNotInProvider { group, provider: Provider::AwsLcRs, hint_provider: None, .. }
                if group.to_string() == "MLKEM512"),
            "{e:?}"
        );
    }
}
