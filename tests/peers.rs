//! The real peers other tests measure against (tests/support/peers.rs): nginx resumes sessions
//! as configured and logs which requests came over resumed ones; s_server answers with its
//! status page; every peer is gone after `stop` or drop.

use std::net::SocketAddr;
use std::path::Path;

use crate::support::peers::{
    process_exists, AccessLine, CertType, Nginx, NginxOpts, Protocols, SServer, SServerOpts,
    NGINX_INDEX_HTML,
};
use crate::support::{curl, s_client, text, GET_AND_CLOSE};

/// What s_client prints on a new and on a resumed session, before the protocol.
const NEW: &str = "New, ";
const REUSED: &str = "Reused, ";
/// s_client's line for a session ticket it received.
const TICKET_HINT: &str = "TLS session ticket lifetime hint";
/// A line of s_server's `-www` status page.
const S_SERVER_PAGE: &str = "Ciphers supported in s_server binary";

/// One s_client run that verifies `cert` for localhost, sends a request and reads until the
/// server closes; returns its stdout.
fn get(addr: SocketAddr, cert: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "-CAfile",
        cert.to_str().expect("UTF-8 temp path"),
        "-verify_return_error",
        "-verify_hostname",
        "localhost",
    ];
    args.extend_from_slice(extra);
    let out = s_client(addr, &args, GET_AND_CLOSE);
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "s_client {args:?} failed: {stdout}{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("Verify return code: 0 (ok)"), "{stdout}");
    stdout
}

/// Two s_client runs, the second offering the session the first saved (`-sess_out`,
/// `-sess_in`). No second run when the first had no resumable session: s_client then writes
/// no session file.
fn get_twice(addr: SocketAddr, cert: &Path, extra: &[&str]) -> (String, Option<String>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let session = dir.path().join("session.pem");
    let session_arg = session.to_str().expect("UTF-8 temp path");
    let first = get(addr, cert, &[extra, &["-sess_out", session_arg]].concat());
    let second = session
        .exists()
        .then(|| get(addr, cert, &[extra, &["-sess_in", session_arg]].concat()));
    (first, second)
}

/// A successful request over TLS `protocol`, first on its connection.
fn logged(reused: bool, protocol: &str) -> AccessLine {
    AccessLine {
        reused,
        protocol: protocol.to_string(),
        connection_requests: 1,
        status: 200,
    }
}

/// With `opts`, a second s_client run (`version_flag`) resumes the first one's session and the
/// access log shows one full and one resumed request. Returns the first run's output.
fn nginx_resumes(opts: NginxOpts, version_flag: &str, protocol: &str) -> String {
    let nginx = Nginx::start(opts);
    let pid = nginx.pid();
    let (first, second) = get_twice(nginx.addr(), &nginx.cert(), &[version_flag]);
    let second = second.expect("the first connection saved a session");
    assert!(first.contains(&format!("{NEW}{protocol}, ")), "{first}");
    assert!(
        second.contains(&format!("{REUSED}{protocol}, ")),
        "{second}"
    );
    for out in [&first, &second] {
        assert!(out.contains("HTTP/1.1 200 OK"), "{out}");
        assert!(out.contains(NGINX_INDEX_HTML), "{out}");
    }
    let expected = [logged(false, protocol), logged(true, protocol)];
    // s_client waited for nginx to close, and nginx logs a request before closing.
    assert_eq!(nginx.access_log(), expected);
    assert_eq!(nginx.stop(), expected);
    assert!(!process_exists(pid), "nginx {pid} still runs after stop");
    first
}

#[test]
fn nginx_resumes_tls12_with_cache_and_tickets() {
    nginx_resumes(NginxOpts::default(), "-tls1_2", "TLSv1.2");
}

#[test]
fn nginx_resumes_tls13_with_cache_and_tickets() {
    nginx_resumes(NginxOpts::default(), "-tls1_3", "TLSv1.3");
}

#[test]
fn nginx_resumes_tls12_by_session_id_when_tickets_are_off() {
    let opts = NginxOpts {
        tickets: false,
        ..NginxOpts::default()
    };
    let first = nginx_resumes(opts, "-tls1_2", "TLSv1.2");
    assert!(!first.contains(TICKET_HINT), "{first}");
}

#[test]
fn nginx_resumes_tls12_by_ticket_when_the_cache_is_off() {
    let opts = NginxOpts {
        session_cache: false,
        ..NginxOpts::default()
    };
    let first = nginx_resumes(opts, "-tls1_2", "TLSv1.2");
    assert!(first.contains(TICKET_HINT), "{first}");
}

/// No cache and no tickets: TLS 1.2 leaves the client nothing to offer; TLS 1.3 still brings
/// tickets (OpenSSL sends them), which nginx then refuses. curl gets the page, two requests
/// on one keep-alive connection.
#[test]
fn nginx_without_cache_or_tickets_never_resumes() {
    let nginx = Nginx::start(NginxOpts {
        session_cache: false,
        tickets: false,
        ..NginxOpts::default()
    });
    let pid = nginx.pid();
    let cert = nginx.cert();

    let (first, second) = get_twice(nginx.addr(), &cert, &["-tls1_2"]);
    assert!(first.contains("New, TLSv1.2, "), "{first}");
    assert_eq!(second, None, "a TLS 1.2 session was saved: {first}");

    let (first, second) = get_twice(nginx.addr(), &cert, &["-tls1_3"]);
    assert!(first.contains(TICKET_HINT), "{first}");
    let second = second.expect("TLS 1.3 tickets saved, though unusable");
    assert!(second.contains("New, TLSv1.3, "), "{second}");
    assert!(!second.contains(REUSED), "{second}");

    let url = format!("https://localhost:{}/", nginx.addr().port());
    let out = curl(&cert, &url, &["-w", "%{http_code}\n", &url]);
    assert!(out.status.success(), "curl failed: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("{NGINX_INDEX_HTML}200\n").repeat(2)
    );

    let log = nginx.stop();
    assert!(!process_exists(pid), "nginx {pid} still runs after stop");
    let keep_alive = |n| AccessLine {
        connection_requests: n,
        ..logged(false, "TLSv1.3")
    };
    assert_eq!(
        log,
        [
            logged(false, "TLSv1.2"),
            logged(false, "TLSv1.3"),
            logged(false, "TLSv1.3"),
            keep_alive(1),
            keep_alive(2),
        ]
    );
}

#[test]
fn nginx_serves_an_ecdsa_p256_cert() {
    let nginx = Nginx::start(NginxOpts {
        cert: CertType::EcdsaP256,
        ..NginxOpts::default()
    });
    let pid = nginx.pid();
    let out = get(nginx.addr(), &nginx.cert(), &[]);
    assert!(out.contains("Peer signature type: ECDSA"), "{out}");
    assert!(out.contains("Server public key is 256 bit"), "{out}");
    nginx.stop();
    assert!(!process_exists(pid), "nginx {pid} still runs after stop");
}

/// Each version alone: a client offering only the other version fails its handshake.
#[test]
fn nginx_speaks_only_the_protocols_asked_for() {
    for (protocols, offered, refused) in [
        (Protocols::Tls12, "-tls1_2", "-tls1_3"),
        (Protocols::Tls13, "-tls1_3", "-tls1_2"),
    ] {
        let nginx = Nginx::start(NginxOpts {
            protocols,
            ..NginxOpts::default()
        });
        let pid = nginx.pid();
        get(nginx.addr(), &nginx.cert(), &[offered]);
        let out = s_client(nginx.addr(), &[refused], GET_AND_CLOSE);
        assert!(!out.status.success(), "{protocols:?} {refused} got through");
        assert_eq!(nginx.stop().len(), 1, "{protocols:?}");
        assert!(!process_exists(pid), "nginx {pid} still runs after stop");
    }
}

/// The default s_server: curl verifies it and gets the status page; a second s_client run
/// resumes, and the page says so too.
#[test]
fn s_server_serves_its_status_page_and_resumes() {
    let server = SServer::start(SServerOpts::default());
    let pid = server.pid();
    let url = format!("https://localhost:{}/", server.addr().port());
    let out = curl(&server.cert(), &url, &[]);
    assert!(out.status.success(), "curl failed: {}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(page.contains(S_SERVER_PAGE), "{page}");
    assert!(page.contains("New, TLSv1.3, "), "{page}");

    let (first, second) = get_twice(server.addr(), &server.cert(), &["-tls1_2"]);
    let second = second.expect("the first connection saved a session");
    assert!(first.contains("HTTP/1.0 200 ok"), "{first}");
    assert!(first.contains(S_SERVER_PAGE), "{first}");
    // Once in s_client's summary, once in the page.
    assert_eq!(second.matches("Reused, TLSv1.2, ").count(), 2, "{second}");

    server.stop();
    assert!(!process_exists(pid), "s_server {pid} still runs after stop");
}

/// `-no_cache -no_ticket`: nothing to resume in TLS 1.2; TLS 1.3 tickets still come, unusable.
/// `-num_tickets 0` stops those too.
#[test]
fn s_server_without_cache_or_tickets_never_resumes() {
    let opts = SServerOpts {
        session_cache: false,
        tickets: false,
        ..SServerOpts::default()
    };
    let server = SServer::start(opts);
    let pid = server.pid();
    let (_, second) = get_twice(server.addr(), &server.cert(), &["-tls1_2"]);
    assert_eq!(second, None, "a TLS 1.2 session was saved");
    let (_, second) = get_twice(server.addr(), &server.cert(), &["-tls1_3"]);
    let second = second.expect("TLS 1.3 tickets saved, though unusable");
    assert!(!second.contains(REUSED), "{second}");
    server.stop();
    assert!(!process_exists(pid), "s_server {pid} still runs after stop");

    let server = SServer::start(SServerOpts {
        num_tickets: Some(0),
        ..opts
    });
    let pid = server.pid();
    let (first, second) = get_twice(server.addr(), &server.cert(), &["-tls1_3"]);
    assert!(!first.contains(TICKET_HINT), "{first}");
    assert_eq!(second, None, "a TLS 1.3 session was saved");
    server.stop();
    assert!(!process_exists(pid), "s_server {pid} still runs after stop");
}

#[test]
fn s_server_speaks_only_tls12_with_an_ecdsa_cert_when_asked() {
    let server = SServer::start(SServerOpts {
        cert: CertType::EcdsaP256,
        protocols: Protocols::Tls12,
        ..SServerOpts::default()
    });
    let pid = server.pid();
    let out = get(server.addr(), &server.cert(), &[]);
    assert!(out.contains("New, TLSv1.2, "), "{out}");
    assert!(out.contains("Peer signature type: ECDSA"), "{out}");
    let refused = s_client(server.addr(), &["-tls1_3"], GET_AND_CLOSE);
    assert!(!refused.status.success(), "TLS 1.3 got through");
    server.stop();
    assert!(!process_exists(pid), "s_server {pid} still runs after stop");
}

/// A test that panics before `stop` leaves nothing behind.
#[test]
fn peers_are_killed_when_dropped() {
    let nginx = Nginx::start(NginxOpts::default());
    let server = SServer::start(SServerOpts::default());
    let pids = [nginx.pid(), server.pid()];
    assert!(pids.iter().all(|&pid| process_exists(pid)));
    drop(nginx);
    drop(server);
    for pid in pids {
        assert!(!process_exists(pid), "{pid} still runs after drop");
    }
}
