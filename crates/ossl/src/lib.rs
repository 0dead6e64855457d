//! `ossl`: the TLS library under test, OpenSSL 1.1.1 or 3.x, loaded at run time with `dlopen`.
//!
//! This crate is the only place in tlsscope that calls into libssl or libcrypto. It hides the
//! differences between 1.1.1 and 3.x (renamed functions, macros over `*_ctrl`, the group and
//! signature getters) behind one safe API: load a [`Library`], build a [`Context`], make
//! [`Ssl`] connections over non-blocking sockets, and ask what each handshake [`Negotiated`].

mod context;
mod error;
pub mod ffi;
mod file_version;
mod inproc;
mod library;
mod pki;
mod ssl;

pub use context::{
    Context, ContextBuilder, KeylogSink, Role, Settings, TlsVersion, UnknownTlsVersion,
};
pub use error::{Error, ErrorCode, ErrorQueue, TlsError};
pub use file_version::{version_of_file, FileVersion};
pub use library::{Library, LibrarySource, Version};
pub use pki::{CertType, Certificate, Credentials, PrivateKey, UnknownCertType};
pub use ssl::{HandshakeIds, HandshakeKind, Io, Negotiated, Session, Ssl};
