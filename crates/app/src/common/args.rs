//! Option groups and value parsers that several commands share.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::common::output::OutputFile;
use crate::common::target::Endpoint;

pub(crate) fn parse_cert_type(s: &str) -> Result<ossl::CertType, String> {
    s.parse().map_err(|e: ossl::UnknownCertType| e.to_string())
}

/// How a client names and checks the server: shared by `handshake` and `bench`.
#[derive(Debug, Args, Clone)]
pub struct PeerArgs {
    /// Server name to send (SNI) and, with --verify, to check the certificate against.
    #[arg(long, value_name = "NAME")]
    pub sni: Option<String>,
    /// Verify the server certificate (against --cafile, or the system's trust store).
    #[arg(long)]
    pub verify: bool,
    /// CA certificates (PEM) to verify against; implies --verify.
    #[arg(long, value_name = "FILE")]
    pub cafile: Option<PathBuf>,
}

impl PeerArgs {
    /// True when the certificate is to be verified.
    pub fn verifies(&self) -> bool {
        self.verify || self.cafile.is_some()
    }

    /// The name to send as SNI: --sni, else the target's host name (not for an IP address).
    pub fn server_name(&self, target: &Endpoint) -> Option<String> {
        self.sni
            .clone()
            .or_else(|| target.name().map(str::to_string))
    }

    /// The name the certificate must carry: the SNI name, else the target's address.
    pub fn verify_host(&self, target: &Endpoint, addr: SocketAddr) -> Option<String> {
        self.verifies().then(|| {
            self.server_name(target)
                .unwrap_or_else(|| addr.ip().to_string())
        })
    }
}

/// On or off, for settings that default to on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

impl Switch {
    pub fn on(self) -> bool {
        self == Switch::On
    }
}

/// Handshake parameters shared by the server and the clients.
#[derive(Debug, Args, Clone)]
pub struct TlsArgs {
    /// Use exactly this TLS version (1.2 or 1.3); shorthand for --min-tls V --max-tls V.
    #[arg(long, value_name = "VERSION", conflicts_with_all = ["min_tls", "max_tls"])]
    pub tls: Option<String>,
    /// Lowest TLS version to accept (1.0, 1.1, 1.2, 1.3).
    #[arg(long, value_name = "VERSION")]
    pub min_tls: Option<String>,
    /// Highest TLS version to accept.
    #[arg(long, value_name = "VERSION")]
    pub max_tls: Option<String>,
    /// TLS 1.2 cipher list, OpenSSL syntax (e.g. ECDHE-RSA-AES128-GCM-SHA256).
    #[arg(long, value_name = "LIST")]
    pub ciphers: Option<String>,
    /// TLS 1.3 ciphersuites (e.g. TLS_AES_128_GCM_SHA256).
    #[arg(long, value_name = "LIST")]
    pub ciphersuites: Option<String>,
    /// Key exchange groups in preference order (e.g. X25519MLKEM768:X25519:P-256); classic
    /// (x25519, secp256r1, secp384r1, secp521r1, x448, ffdhe2048...), ML-KEM (MLKEM768...) and
    /// hybrid (X25519MLKEM768, SecP256r1MLKEM768, SecP384r1MLKEM1024), where the library has them.
    #[arg(long, value_name = "LIST")]
    pub groups: Option<String>,
    /// Signature algorithms (e.g. rsa_pss_rsae_sha256:ecdsa_secp256r1_sha256).
    #[arg(long, value_name = "LIST")]
    pub sigalgs: Option<String>,
    /// Append TLS secrets to FILE in NSS key log format (created with mode 0600).
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub keylog: Option<OutputFile>,
}

/// What trace and sniff attach to.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// These processes (the TLS libraries each maps; comma-separated PIDs).
    #[arg(short = 'p', long = "pid", value_delimiter = ',', value_name = "PID")]
    pub pids: Vec<u32>,
    /// A program with the TLS library linked in statically (its own symbol tables), in every
    /// process running it (or only --pid's).
    #[arg(long, value_name = "PATH")]
    pub binary: Vec<PathBuf>,
    /// A shared library (e.g. /usr/lib/x86_64-linux-gnu/libssl.so.3) in every process using
    /// it (or only --pid's).
    #[arg(long, value_name = "PATH")]
    pub lib: Vec<PathBuf>,
    /// Only threads with this name (as in /proc/PID/comm, at most 15 characters).
    #[arg(long, value_name = "COMM")]
    pub comm: Option<String>,
}

/// Where metrics go for machines to read.
#[derive(Clone, Debug, Default, Args)]
pub struct MetricsArgs {
    /// Serve metrics at http://ADDR:PORT/metrics for Prometheus (OpenMetrics, or the Prometheus
    /// text format for a scraper that does not ask for OpenMetrics), read from the aggregates
    /// at each scrape.
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_metrics_listen)]
    pub metrics_listen: Option<SocketAddr>,
    /// Keep FILE up to date (every 10 s and at the end) for node_exporter's textfile collector:
    /// a `*.prom` file in its `--collector.textfile.directory`.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub metrics_file: Option<OutputFile>,
}

impl MetricsArgs {
    /// The `--metrics-file` path.
    pub fn file(&self) -> Option<&std::path::Path> {
        self.metrics_file.as_ref().and_then(|f| f.path.as_deref())
    }
}

pub fn parse_metrics_listen(s: &str) -> Result<SocketAddr, String> {
    s.parse().map_err(|_| {
        "not an address and port: give ADDR:PORT, e.g. 127.0.0.1:9464 or [::1]:9464".to_string()
    })
}

/// The longest duration any option takes: 7 days (168h). Long enough for any soak run; short
/// enough that every deadline (`Instant` + duration), every millisecond count in an `i32`
/// (a poll timeout) and every nanosecond count in a `u64` stays far from overflowing.
pub const MAX_DURATION: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Like [`parse_duration`], refusing zero: for how long something runs or waits.
pub fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be more than zero (e.g. 10s, 500ms)".to_string());
    }
    Ok(d)
}

/// Parses "10", "10s", "250ms", "2m", "1.5s", "1h", up to [`MAX_DURATION`]; never panics.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (number, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| !v.is_nan())
        .ok_or_else(|| "not a duration (try 10s, 500ms, 2m)".to_string())?;
    if value < 0.0 {
        return Err("a duration cannot be negative (e.g. 10s, 500ms)".into());
    }
    let seconds = value * scale;
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err("too long: at most 7 days (168h)".into());
    }
    std::time::Duration::try_from_secs_f64(seconds)
        .map_err(|_| "not a duration (try 10s, 500ms, 2m)".to_string())
}

/// A whole number of at least `min`, said plainly when it is not (negative, zero, too big).
pub(crate) fn whole_number(s: &str, min: u64) -> Result<u64, String> {
    let t = s.trim();
    if t.starts_with('-') && t[1..].chars().all(|c| c.is_ascii_digit()) && t.len() > 1 {
        return Err(format!("cannot be negative (at least {min})"));
    }
    let n: u64 = t.parse().map_err(|e: std::num::ParseIntError| {
        if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) {
            "too large".to_string()
        } else {
            "not a whole number".to_string()
        }
    })?;
    if n < min {
        return Err(format!("must be at least {min}"));
    }
    Ok(n)
}

/// A count of at least one (threads, connections, operations, rounds, ...).
pub(crate) fn at_least_1(s: &str) -> Result<usize, String> {
    usize::try_from(whole_number(s, 1)?).map_err(|_| "too large".to_string())
}

/// A count of at least one, as a u64 (operations in total).
pub(crate) fn at_least_1_u64(s: &str) -> Result<u64, String> {
    whole_number(s, 1)
}

/// A count of at least two (samples a spread is computed from).
pub(crate) fn at_least_2(s: &str) -> Result<usize, String> {
    usize::try_from(whole_number(s, 2)?).map_err(|_| "too large".to_string())
}

/// A real number, finite.
pub(crate) fn real_number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| "not a number".to_string())
}

/// Operations per second: more than zero.
pub(crate) fn parse_rate(s: &str) -> Result<f64, String> {
    let r = real_number(s)?;
    if r <= 0.0 {
        return Err("must be more than zero operations per second".into());
    }
    Ok(r)
}

/// A fraction from 0 to 1.
pub(crate) fn parse_ratio(s: &str) -> Result<f64, String> {
    let r = real_number(s)?;
    if !(0.0..=1.0).contains(&r) {
        return Err("must be from 0 to 1 (e.g. 0.5)".into());
    }
    Ok(r)
}

impl TlsArgs {
    /// The validated handshake settings; cache and tickets are the caller's (servers have
    /// switches for them, clients offer sessions explicitly).
    pub fn settings(&self, session_cache: bool, tickets: bool) -> anyhow::Result<ossl::Settings> {
        let version =
            |flag: &str, v: &Option<String>| -> anyhow::Result<Option<ossl::TlsVersion>> {
                v.as_deref()
                    .map(|s| s.parse().map_err(|e| anyhow::anyhow!("{flag}: {e}")))
                    .transpose()
            };
        let exact = version("--tls", &self.tls)?;
        let settings = ossl::Settings {
            min_version: exact.or(version("--min-tls", &self.min_tls)?),
            max_version: exact.or(version("--max-tls", &self.max_tls)?),
            cipher_list: self.ciphers.clone(),
            ciphersuites: self.ciphersuites.clone(),
            groups: self
                .groups
                .as_deref()
                .map(|g| g.parse().map_err(|e| anyhow::anyhow!("--groups {g}: {e}")))
                .transpose()?,
            sigalgs: self.sigalgs.clone(),
            session_cache,
            tickets,
        };
        if let (Some(min), Some(max)) = (settings.min_version, settings.max_version) {
            anyhow::ensure!(
                min <= max,
                "--min-tls {min} is above --max-tls {max}: swap them or use --tls"
            );
        }
        Ok(settings)
    }

    /// A key log sink appending to `--keylog`, created 0600 (the lines are secrets) with its
    /// first line.
    pub fn keylog_sink(&self) -> Option<Box<ossl::KeylogSink>> {
        self.keylog
            .as_ref()
            .and_then(|k| k.path.as_deref())
            .map(crate::common::client::keylog_file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_cannot_overflow_or_be_negative() {
        assert_eq!(parse_duration("168h"), Ok(MAX_DURATION));
        assert_eq!(
            parse_duration("1.5s"),
            Ok(std::time::Duration::from_millis(1500))
        );
        for too_long in ["169h", "99999999999999999999s", "1e400", "inf", "604801"] {
            let e = parse_duration(too_long).unwrap_err();
            assert!(e.contains("at most 7 days"), "{too_long}: {e}");
        }
        for negative in ["-1", "-0.5s", "-inf"] {
            let e = parse_duration(negative).unwrap_err();
            assert!(e.contains("cannot be negative"), "{negative}: {e}");
        }
        assert!(parse_duration("NaN").is_err());
        assert!(parse_positive_duration("0ms").is_err());
    }

    #[test]
    fn counts_say_what_is_wrong() {
        assert_eq!(at_least_1("3"), Ok(3));
        assert!(at_least_1("0").unwrap_err().contains("at least 1"));
        assert!(at_least_1("-2").unwrap_err().contains("cannot be negative"));
        assert!(at_least_1_u64("99999999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert!(at_least_2("1").is_err());
        assert!(parse_rate("0").is_err() && parse_rate("nan").is_err());
        assert!(parse_ratio("1.5").is_err() && parse_ratio("1").is_ok());
    }
}
