//! The client engines a run can use, behind one connection type the worker drives: OpenSSL
//! (the library `--openssl` loaded) or rustls.

use std::net::IpAddr;
use std::os::fd::AsFd;

use mio::net::TcpStream;
use ossl::{HandshakeIds, Negotiated, Session, Ssl, TlsError};
use serde::{Deserialize, Serialize};

use crate::rustls_client::{RustlsClient, RustlsConn, SlotClient};
use crate::wire::{WireCounts, WireTap};

/// What a run's connections are made with.
#[derive(Clone, Copy)]
pub enum Client<'a> {
    Openssl(&'a ossl::Context),
    Rustls(&'a RustlsClient),
}

impl Client<'_> {
    /// The engine and library, as the result reports them.
    pub fn info(&self) -> ClientInfo {
        match self {
            Client::Openssl(ctx) => ClientInfo {
                engine: EngineKind::Openssl,
                library: ctx.library().name().to_string(),
                provider: None,
                work: None,
            },
            Client::Rustls(r) => ClientInfo {
                engine: EngineKind::Rustls,
                library: r.description(),
                provider: Some(r.provider().name().to_string()),
                work: Some(r.work().name().to_string()),
            },
        }
    }
}

/// Which engine made a run's connections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    #[default]
    Openssl,
    Rustls,
}

impl EngineKind {
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Openssl => "openssl",
            EngineKind::Rustls => "rustls",
        }
    }
}

/// The client a run used: its engine and library ("OpenSSL 3.0.19 27 Jan 2026",
/// "rustls 0.23.46 (ring 0.17.14)").
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    pub engine: EngineKind,
    pub library: String,
    /// The rustls client's crypto provider ("ring", "aws-lc-rs"); absent for OpenSSL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The rustls client's work ("full", "lean"); absent for OpenSSL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<String>,
}

/// How a call on a connection ended.
pub enum Io {
    /// Done: bytes read or written (1 for a completed handshake).
    Done(usize),
    /// Call again when the socket is ready.
    Wait,
    /// The peer closed the TLS connection cleanly (close_notify).
    Closed,
    /// The call failed, named as results name failures; `eof` when the transport ended or
    /// broke rather than TLS failing (a response without a length ends that way).
    Failed { kind: String, eof: bool },
}

/// A slot's engine state that outlives its connections: the session it may offer.
pub enum SlotSession {
    Openssl(Option<Session>),
    Rustls(SlotClient),
}

impl SlotSession {
    pub fn new(client: Client<'_>, resume: bool) -> SlotSession {
        match client {
            Client::Openssl(_) => SlotSession::Openssl(None),
            Client::Rustls(r) => SlotSession::Rustls(r.slot(resume)),
        }
    }

    pub fn has_session(&self) -> bool {
        match self {
            SlotSession::Openssl(s) => s.is_some(),
            SlotSession::Rustls(r) => r.has_session(),
        }
    }
}

/// Where a connection goes: the SNI name (none for an address) and the name to verify.
pub struct Peer<'a> {
    pub server_name: Option<&'a str>,
    pub verify_host: Option<&'a str>,
    pub ip: IpAddr,
}

/// One client connection, of either engine.
pub enum Tls {
    Openssl(Ssl),
    Rustls(Box<RustlsConn>),
}

impl Tls {
    /// A connection on `stream`, offering the slot's session when `offer`.
    pub fn new(
        client: Client<'_>,
        slot: &SlotSession,
        stream: &TcpStream,
        peer: &Peer<'_>,
        offer: bool,
    ) -> Result<Tls, String> {
        match (client, slot) {
            (Client::Openssl(ctx), SlotSession::Openssl(session)) => {
                let setup = || -> Result<Ssl, ossl::Error> {
                    let mut ssl = Ssl::new(ctx)?;
                    // Where the library lacks the message callback the run has no wire
                    // figures (`Tls::wire` is None), and says so.
                    ssl.observe_messages(Box::new(WireTap::default()));
                    ssl.set_fd(stream.as_fd())?;
                    if let Some(name) = peer.server_name {
                        ssl.set_server_name(name)?;
                    }
                    if let Some(host) = peer.verify_host {
                        ssl.set_verify_host(host)?;
                    }
                    if let (true, Some(session)) = (offer, session) {
                        ssl.set_session(session)?;
                    }
                    Ok(ssl)
                };
                setup().map(Tls::Openssl).map_err(|e| e.to_string())
            }
            (Client::Rustls(_), SlotSession::Rustls(slot)) => slot
                .connect(peer.server_name, peer.ip, offer)
                .map(Tls::Rustls),
            _ => Err("the slot's engine is not the run's".into()),
        }
    }

    pub fn do_handshake(&mut self, stream: &mut TcpStream) -> Io {
        match self {
            Tls::Openssl(ssl) => {
                let io = ssl.do_handshake();
                openssl_io(io, ssl)
            }
            Tls::Rustls(r) => r.do_handshake(stream),
        }
    }

    pub fn read(&mut self, stream: &mut TcpStream, buf: &mut [u8]) -> Io {
        match self {
            Tls::Openssl(ssl) => {
                let io = ssl.read(buf);
                openssl_io(io, ssl)
            }
            Tls::Rustls(r) => r.read(stream, buf),
        }
    }

    pub fn write(&mut self, stream: &mut TcpStream, buf: &[u8]) -> Io {
        match self {
            Tls::Openssl(ssl) => {
                let io = ssl.write(buf);
                openssl_io(io, ssl)
            }
            Tls::Rustls(r) => r.write(stream, buf),
        }
    }

    /// Sends close_notify (the peer's is not awaited).
    pub fn shutdown(&mut self, stream: &mut TcpStream) {
        match self {
            Tls::Openssl(ssl) => {
                let _ = ssl.shutdown();
            }
            Tls::Rustls(r) => r.shutdown(stream),
        }
    }

    /// Before the connection is dropped: OpenSSL would otherwise mark its session (which the
    /// slot keeps) as not resumable.
    pub fn mark_shut_down(&mut self) {
        if let Tls::Openssl(ssl) = self {
            ssl.mark_shut_down();
        }
    }

    pub fn handshake_ids(&self) -> HandshakeIds {
        match self {
            Tls::Openssl(ssl) => ssl.handshake_ids(),
            Tls::Rustls(r) => r.handshake_ids(),
        }
    }

    /// The connection's wire figures so far (see `crate::wire`); None when its library could
    /// not count them.
    pub fn wire(&self) -> Option<WireCounts> {
        match self {
            Tls::Openssl(ssl) => ssl
                .message_observer()
                .and_then(|o| o.as_any().downcast_ref::<WireTap>())
                .map(WireTap::counts),
            Tls::Rustls(r) => Some(r.wire()),
        }
    }

    pub fn negotiated(&self) -> Negotiated {
        match self {
            Tls::Openssl(ssl) => ssl.negotiated(),
            Tls::Rustls(r) => r.negotiated(),
        }
    }

    /// True when the connection got a session the slot can offer later (in TLS 1.3 only once
    /// the server's ticket has been read).
    pub fn has_resumable_session(&self) -> bool {
        match self {
            Tls::Openssl(ssl) => ssl.has_resumable_session(),
            Tls::Rustls(r) => r.has_resumable_session(),
        }
    }

    /// Keeps the connection's session in the slot (rustls's store has it already).
    pub fn keep_session(&self, slot: &mut SlotSession) {
        if let (Tls::Openssl(ssl), SlotSession::Openssl(kept)) = (self, slot) {
            if let Some(s) = ssl.session() {
                *kept = Some(s);
            }
        }
    }
}

fn openssl_io(io: ossl::Io, ssl: &Ssl) -> Io {
    match io {
        ossl::Io::Done(n) => Io::Done(n),
        ossl::Io::WantRead | ossl::Io::WantWrite | ossl::Io::Retry(_) => Io::Wait,
        ossl::Io::Closed => Io::Closed,
        ossl::Io::Failed(e) => Io::Failed {
            eof: e.code == ossl::ErrorCode::Syscall,
            kind: tls_error_kind(&e, ssl),
        },
    }
}

/// Names a TLS failure: a verification failure, an alert, a reset, or OpenSSL's reason.
fn tls_error_kind(e: &TlsError, ssl: &Ssl) -> String {
    if let Err(reason) = ssl.verify_result() {
        return format!("verify: {reason}");
    }
    if let Some(alert) = e.alert() {
        return format!("tls alert: {alert}");
    }
    match (e.code, e.os_error) {
        (ossl::ErrorCode::Syscall, Some(libc::ECONNRESET) | Some(libc::EPIPE)) => "reset".into(),
        (ossl::ErrorCode::Syscall, _) if e.queue.is_empty() => "closed early (handshake)".into(),
        _ => format!("tls: {}", e.queue.reason().unwrap_or(e.code.name())),
    }
}
