//! `rustls-client ADDR SECONDS THREADS TLS CAFILE|-`: full TLS handshakes (rustls, ring
//! provider) against ADDR from THREADS blocking threads for SECONDS, each connection closed
//! after its handshake, never resumed. Prints one line of `key=value`: handshakes, seconds,
//! handshakes per second, and the process's CPU per handshake in microseconds (getrusage).
//! With `-` for CAFILE the certificate is not verified (its signature over the handshake
//! still is, as OpenSSL's SSL_VERIFY_NONE does).

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

/// Accepts any certificate, and checks the handshake's signature with it.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn config(tls: &str, cafile: &str) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&rustls::SupportedProtocolVersion] = match tls {
        "1.2" => &[&rustls::version::TLS12],
        _ => &[&rustls::version::TLS13],
    };
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .expect("protocol versions");
    let mut config = if cafile == "-" {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCertificateCheck(provider)))
            .with_no_client_auth()
    } else {
        let mut roots = RootCertStore::empty();
        let pem = std::fs::read(cafile).expect("CA file");
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            roots
                .add(cert.expect("a PEM certificate"))
                .expect("a usable root");
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    // Full handshakes only: no session is kept, so none is offered.
    config.resumption = rustls::client::Resumption::disabled();
    config
}

/// One full handshake, then close_notify and close.
fn handshake(addr: &str, config: &Arc<ClientConfig>) -> std::io::Result<()> {
    let mut sock = TcpStream::connect(addr)?;
    sock.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("name");
    let mut conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut sock)?;
    }
    conn.send_close_notify();
    let _ = conn.write_tls(&mut sock);
    let _ = sock.flush();
    Ok(())
}

/// CPU seconds (user and system) this process has used.
fn cpu_s() -> f64 {
    // SAFETY: getrusage fills the zeroed struct it is given; RUSAGE_SELF is always valid.
    let u = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, addr, seconds, threads, tls, cafile] = &args[..] else {
        eprintln!("usage: rustls-client ADDR SECONDS THREADS TLS(1.2|1.3) CAFILE|-");
        std::process::exit(2);
    };
    let seconds: f64 = seconds.parse().expect("SECONDS");
    let threads: usize = threads.parse().expect("THREADS");
    let config = Arc::new(config(tls, cafile));
    handshake(addr, &config).expect("a first handshake");
    let done = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_s();
    let started = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (addr, config) = (addr.clone(), config.clone());
            let (done, count, errors) = (done.clone(), count.clone(), errors.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    match handshake(&addr, &config) {
                        Ok(()) => count.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    done.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_s() - cpu0;
    let n = count.load(Ordering::Relaxed);
    println!(
        "handshakes={n} errors={} seconds={elapsed:.3} rate={:.0} client_us_per_handshake={:.1}",
        errors.load(Ordering::Relaxed),
        n as f64 / elapsed,
        cpu * 1e6 / n.max(1) as f64
    );
}
