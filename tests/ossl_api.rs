//! The `ossl` API, client and server in one process over loopback sockets, against Debian's
//! OpenSSL 3.0 here and against a 1.1.1w build in a child process (a process loads one OpenSSL).

use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ossl::{
    CertType, ContextBuilder, Credentials, ErrorCode, HandshakeKind, Io, Library, LibrarySource,
    Negotiated, Role, Session, Settings, Ssl, TlsVersion,
};

use crate::support;

/// A connected client/server pair over non-blocking loopback sockets.
struct Pair {
    client: Ssl,
    server: Ssl,
    // Kept open for the connections' lifetime; dropped after them.
    _sockets: (TcpStream, TcpStream),
    /// Whether either side had to wait for the other during the handshake.
    saw_retry: bool,
}

fn connect(
    client_ctx: &ossl::Context,
    server_ctx: &ossl::Context,
    offer: Option<&Session>,
) -> Result<Pair, String> {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (s, _) = listener.accept().unwrap();
    for sock in [&c, &s] {
        sock.set_nonblocking(true).unwrap();
    }
    let mut client = Ssl::new(client_ctx).unwrap();
    let mut server = Ssl::new(server_ctx).unwrap();
    client.set_fd(c.as_fd()).unwrap();
    server.set_fd(s.as_fd()).unwrap();
    if let Some(session) = offer {
        client.set_session(session).unwrap();
    }
    let (mut c_done, mut s_done, mut saw_retry) = (false, false, false);
    for _ in 0..10_000 {
        if !c_done {
            match client.do_handshake() {
                Io::Done(_) => c_done = true,
                Io::WantRead | Io::WantWrite => saw_retry = true,
                Io::Failed(e) => return Err(format!("client: {e}")),
                other => return Err(format!("client: {other:?}")),
            }
        }
        if !s_done {
            match server.do_handshake() {
                Io::Done(_) => s_done = true,
                Io::WantRead | Io::WantWrite => saw_retry = true,
                Io::Failed(e) => return Err(format!("server: {e}")),
                other => return Err(format!("server: {other:?}")),
            }
        }
        if c_done && s_done {
            return Ok(Pair {
                client,
                server,
                _sockets: (c, s),
                saw_retry,
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Err("handshake did not finish".into())
}

/// Moves `data` from one side to the other and returns what arrived.
fn transfer(from: &mut Ssl, to: &mut Ssl, data: &[u8]) -> Vec<u8> {
    let mut sent = 0;
    while sent < data.len() {
        match from.write(&data[sent..]) {
            Io::Done(n) => sent += n,
            Io::WantWrite | Io::WantRead => std::thread::sleep(Duration::from_micros(200)),
            other => panic!("write: {other:?}"),
        }
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..10_000 {
        if got.len() == data.len() {
            break;
        }
        match to.read(&mut buf) {
            Io::Done(n) => got.extend_from_slice(&buf[..n]),
            Io::WantRead => std::thread::sleep(Duration::from_micros(200)),
            other => panic!("read: {other:?}"),
        }
    }
    got
}

fn server_ctx(lib: &'static Library, cert: CertType, settings: &Settings) -> ossl::Context {
    let creds = Credentials::generate(lib, cert).unwrap();
    let mut b = ContextBuilder::new(lib, Role::Server).unwrap();
    b.apply(settings).unwrap().credentials(&creds).unwrap();
    b.build()
}

fn client_ctx(lib: &'static Library, settings: &Settings) -> ossl::Context {
    let mut b = ContextBuilder::new(lib, Role::Client).unwrap();
    b.apply(settings).unwrap();
    b.build()
}

fn assert_both_sides_agree(p: &Pair) -> Negotiated {
    let c = p.client.negotiated();
    let s = p.server.negotiated();
    assert_eq!(c, s, "client and server disagree");
    c
}

/// Everything the API promises, against whichever library `lib` is.
fn suite(lib: &'static Library) {
    let default = Settings::new();

    // TLS 1.3 full handshake, RSA-2048: what each side says it negotiated.
    let sctx = server_ctx(lib, CertType::Rsa2048, &default);
    let cctx = client_ctx(lib, &default);
    let mut p = connect(&cctx, &sctx, None).unwrap();
    assert!(
        p.saw_retry,
        "a non-blocking handshake must have waited at least once"
    );
    let n = assert_both_sides_agree(&p);
    assert_eq!(n.version, "TLSv1.3");
    assert_eq!(n.group.as_deref(), Some("x25519"));
    assert_eq!(n.signature.as_deref(), Some("rsa_pss_rsae_sha256"));
    assert_eq!(n.server_key.as_deref(), Some("RSA-2048"));
    assert_eq!(n.kind, HandshakeKind::Full);
    assert_eq!(p.client.protocol_version(), Some(TlsVersion::Tls1_3));

    // Data both ways; reading with nothing there is a retry, not an error; clean close.
    assert_eq!(
        transfer(&mut p.server, &mut p.client, b"hello client"),
        b"hello client"
    );
    assert_eq!(
        transfer(&mut p.client, &mut p.server, &[7u8; 40_000]),
        vec![7u8; 40_000]
    );
    let mut buf = [0u8; 16];
    assert_eq!(p.client.read(&mut buf), Io::WantRead);
    assert!(matches!(p.server.shutdown(), Io::Done(0)));
    let mut closed = Io::WantRead;
    for _ in 0..1000 {
        closed = p.client.read(&mut buf);
        if closed != Io::WantRead {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(closed, Io::Closed);

    // TLS 1.3 resumption: the session (with its ticket, read with the data above) resumes.
    let session = p.client.session().expect("a session");
    assert!(session.is_resumable());
    let p2 = connect(&cctx, &sctx, Some(&session)).unwrap();
    assert_eq!(
        assert_both_sides_agree(&p2).kind,
        HandshakeKind::ResumedTicket
    );

    // TLS 1.2 with ECDSA P-256 and a chosen cipher and group.
    let tls12 = Settings {
        min_version: Some(TlsVersion::Tls1_2),
        max_version: Some(TlsVersion::Tls1_2),
        cipher_list: Some("ECDHE-ECDSA-AES128-GCM-SHA256".into()),
        groups: "P-256".parse().ok(),
        ..Settings::new()
    };
    let sctx12 = server_ctx(lib, CertType::EcdsaP256, &tls12);
    let cctx12 = client_ctx(lib, &tls12);
    let p = connect(&cctx12, &sctx12, None).unwrap();
    let n = assert_both_sides_agree(&p);
    assert_eq!(
        (n.version.as_str(), n.cipher.as_str(), n.group.as_deref()),
        (
            "TLSv1.2",
            "ECDHE-ECDSA-AES128-GCM-SHA256",
            Some("secp256r1")
        )
    );
    assert_eq!(
        n.cipher_standard.as_deref(),
        Some("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")
    );
    assert_eq!(n.signature.as_deref(), Some("ecdsa_secp256r1_sha256"));
    assert_eq!(n.server_key.as_deref(), Some("ECDSA-P256"));

    // TLS 1.2 resumption by ticket, then by session ID with the server's tickets off.
    let session = p.client.session().unwrap();
    assert!(session.has_ticket());
    let p = connect(&cctx12, &sctx12, Some(&session)).unwrap();
    assert_eq!(
        assert_both_sides_agree(&p).kind,
        HandshakeKind::ResumedTicket
    );
    let no_tickets = Settings {
        tickets: false,
        ..tls12.clone()
    };
    let sctx_id = server_ctx(lib, CertType::EcdsaP256, &no_tickets);
    let p = connect(&cctx12, &sctx_id, None).unwrap();
    let session = p.client.session().unwrap();
    assert!(!session.has_ticket());
    let p = connect(&cctx12, &sctx_id, Some(&session)).unwrap();
    let n = assert_both_sides_agree(&p);
    assert_eq!(n.kind, HandshakeKind::ResumedSessionId);
    assert_eq!(n.signature, None, "a resumed handshake has no signature");

    // TLS 1.3 ciphersuite choice, Ed25519 signatures.
    let chacha = Settings {
        ciphersuites: Some("TLS_CHACHA20_POLY1305_SHA256".into()),
        ..Settings::new()
    };
    let p = connect(
        &client_ctx(lib, &chacha),
        &server_ctx(lib, CertType::Ed25519, &chacha),
        None,
    )
    .unwrap();
    let n = assert_both_sides_agree(&p);
    assert_eq!(n.cipher, "TLS_CHACHA20_POLY1305_SHA256");
    assert_eq!(n.signature.as_deref(), Some("ed25519"));

    // Key log lines for both versions.
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&lines);
    let mut b = ContextBuilder::new(lib, Role::Client).unwrap();
    b.keylog(Box::new(move |l: &str| {
        sink.lock().unwrap().push(l.to_string())
    }));
    let keylog_ctx = b.build();
    connect(&keylog_ctx, &sctx, None).unwrap();
    connect(&keylog_ctx, &sctx12, None).unwrap();
    let lines = lines.lock().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("CLIENT_HANDSHAKE_TRAFFIC_SECRET ")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("CLIENT_RANDOM ")),
        "{lines:?}"
    );

    // Failures: no common version is a readable error with its TLS alert, on both sides.
    let only13 = Settings {
        min_version: Some(TlsVersion::Tls1_3),
        ..Settings::new()
    };
    let err = connect(&cctx12, &server_ctx(lib, CertType::Rsa2048, &only13), None)
        .err()
        .expect("no common version must fail");
    assert!(
        err.contains("protocol version") || err.contains("unsupported protocol"),
        "{err}"
    );
    let mut b = ContextBuilder::new(lib, Role::Client).unwrap();
    let bad = b
        .cipher_list("NO-SUCH-CIPHER")
        .err()
        .expect("bad cipher list rejected")
        .to_string();
    assert!(
        bad.contains("NO-SUCH-CIPHER") && bad.contains("no cipher match"),
        "{bad}"
    );
    let bad = "P-999"
        .parse::<ossl::GroupList>()
        .expect_err("bad group rejected")
        .to_string();
    assert!(bad.contains("P-999"), "{bad}");
    assert!(ErrorCode::WantRead.is_retry() && !ErrorCode::Ssl.is_retry());

    // PEM round trip of generated credentials.
    let creds = Credentials::generate(lib, CertType::EcdsaP384).unwrap();
    let pem = creds.cert.to_pem().unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"));
    let back = ossl::Certificate::from_pem(lib, pem.as_bytes(), "mem".as_ref()).unwrap();
    assert_eq!(back.key_description(), "ECDSA-P384");
    let key_pem = creds.key.to_pem().unwrap();
    let key = ossl::PrivateKey::from_pem(lib, key_pem.as_bytes(), "mem".as_ref()).unwrap();
    assert_eq!(key.describe(), "ECDSA-P384");
}

#[test]
fn api_on_the_system_openssl() {
    let lib = Library::load(&LibrarySource::System).expect("Debian's libssl.so.3");
    assert!(lib.version().is_3x_or_later(), "{:?}", lib.version());
    assert!(lib.version().text.starts_with("OpenSSL 3."));
    suite(lib);
}

#[test]
fn api_on_openssl_111w() {
    let prefix = support::openssl_111w();
    let out = support::run_with_timeout(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "ossl_api::api_in_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("TLSSCOPE_TEST_OPENSSL", prefix),
        Duration::from_secs(300),
    );
    let all = format!(
        "{}{}",
        support::text(&out.stdout),
        support::text(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(all.contains("1 passed"), "the child ran no test: {all}");
    assert!(all.contains("loaded OpenSSL 1.1.1w"), "{all}");
}

/// Run by `api_on_openssl_111w` in a child process, with the library to load in the
/// environment.
#[test]
#[ignore = "runs in a child process started by api_on_openssl_111w"]
fn api_in_child() {
    let dir = std::env::var_os("TLSSCOPE_TEST_OPENSSL").expect("TLSSCOPE_TEST_OPENSSL");
    let lib = Library::load(&LibrarySource::Dir(dir.into())).unwrap();
    println!("loaded {}", lib.version().text);
    assert_eq!(lib.version().short(), "1.1.1w");
    assert!(!lib.version().is_3x_or_later());
    suite(lib);
}

#[test]
fn a_second_different_library_is_refused() {
    Library::load(&LibrarySource::System).unwrap();
    let err = Library::load(&LibrarySource::Dir(support::openssl_111w().to_path_buf()))
        .expect_err("refused")
        .to_string();
    assert!(err.contains("already loaded"), "{err}");
}
