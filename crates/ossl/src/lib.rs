//! `ossl`: the TLS library under test, loaded at run time with `dlopen`: OpenSSL 1.1.1, 3.x or
//! 4.x, AWS-LC or BoringSSL (a [`Flavour`]).
//!
//! This crate is the only place in tlsscope that calls into libssl or libcrypto. It hides the
//! differences between them (renamed functions, macros over `*_ctrl` against real functions,
//! integer widths, the group and signature getters) behind one safe API: load a [`Library`], build a [`Context`], make
//! [`Ssl`] connections over non-blocking sockets, and ask what each handshake [`Negotiated`].

mod context;
mod engine;
mod error;
pub mod ffi;
mod file_version;
mod group;
mod inproc;
mod library;
mod messages;
mod pki;
mod shim;
mod ssl;

pub use context::{
    Context, ContextBuilder, KeylogSink, Role, Settings, TlsVersion, UnknownTlsVersion,
};
pub use engine::{engines_dir, test_engine_path, Engine, TEST_ENGINE};
pub use error::{Error, ErrorCode, ErrorQueue, TlsError};
pub use file_version::{version_of_file, FileVersion};
pub use group::{Group, GroupList, UnknownGroup};
pub use library::{Flavour, Library, LibrarySource, Version};
pub use messages::MessageObserver;
pub use pki::{CertType, Certificate, Credentials, PrivateKey, UnknownCertType};
pub use ssl::{HandshakeIds, HandshakeKind, Io, Negotiated, Session, Ssl};

/// Wrapper methods of this crate that call one function of the library through its function
/// table, with that function's name: what a profiler needs to put the function back on sampled
/// stacks. A call through a pointer in a register names no target, and both functions end in
/// tail calls (OpenSSL 3's `SSL_do_handshake` jumps to the handshake function, `SSL_CTX_new` to
/// `SSL_CTX_new_ex`), so their own frames are gone by the time anything under them is sampled.
pub const WRAPPER_CALLS: &[(&str, &str)] = &[
    ("ossl::ssl::Ssl::do_handshake", "SSL_do_handshake"),
    ("ossl::context::ContextBuilder::new", "SSL_CTX_new"),
];
