//! `tlsscope serve`'s options, as the command line defines them, and the typed settings made
//! from them once ([`ServeArgs::config`]): the only code that knows serve's flag names.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::common::args::*;
use crate::common::output::OutputFile;
use server::Limits;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:4433", value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Generate a key and self-signed certificate of this type at start: rsa2048, rsa3072,
    /// rsa4096, ecdsa-p256, ecdsa-p384, ed25519, ml-dsa-44 or ml-dsa-65 (ML-DSA: OpenSSL 3.5+).
    #[arg(long, default_value = "rsa2048", value_name = "TYPE", value_parser = parse_cert_type)]
    pub cert_type: ossl::CertType,
    /// Use this certificate (chain) file instead of generating one (PEM); needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The private key for --cert (PEM, unencrypted).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Write the server's certificate here (PEM), for clients to verify against.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub cert_out: Option<OutputFile>,
    /// Worker threads, each with its own event loop.
    #[arg(long, default_value_t = 1, value_parser = at_least_1, allow_negative_numbers = true)]
    pub threads: usize,
    /// CPUs to pin the workers to, round robin (e.g. 0 or 0,1).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub cpus: Vec<usize>,
    /// Server-side session cache (resumption by session ID; TLS 1.3 stateful tickets).
    #[arg(long, value_enum, default_value = "on")]
    pub session_cache: Switch,
    /// Session tickets (TLS 1.2 tickets; TLS 1.3 stateless tickets).
    #[arg(long, value_enum, default_value = "on")]
    pub tickets: Switch,
    /// Async TLS (SSL_MODE_ASYNC): a handshake or I/O call whose crypto an async engine paused
    /// returns WANT_ASYNC, and the connection goes on when the job's wait fd is readable.
    #[arg(long = "async")]
    pub async_mode: bool,
    /// The async engine: an id the library finds in its engines directory (dasync, kept by
    /// `tlsscope openssl build`) or the path to an engine's .so (e.g. Intel's QAT engine).
    /// It handles every algorithm it implements. Needs --async.
    #[arg(long, value_name = "ID|PATH", requires = "async_mode")]
    pub async_engine: Option<String>,
    /// Stop after this long: 30, 30s, 500ms, 2m (default: run until Ctrl-C or SIGTERM).
    #[arg(long, short = 'd', value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// At exit, write the final counters here as JSON (`-`: on stdout, instead of the text
    /// summary).
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub stats_json: Option<OutputFile>,
    /// Close a connection whose TLS handshake is not done this long after accept.
    #[arg(long, default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub handshake_timeout: std::time::Duration,
    /// Close a connection whose request head is not complete this long after its first byte
    /// (however steadily the bytes arrive).
    #[arg(long, default_value = "20s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub request_timeout: std::time::Duration,
    /// Close a connection that goes this long without moving: kept alive without a new
    /// request, or with a request body or a response that stopped.
    #[arg(long, default_value = "60s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub idle_timeout: std::time::Duration,
    /// Open connections at most (shared among the workers). At the cap, a new connection
    /// replaces the one that has waited longest for its client; if none is waiting, new
    /// connections wait in the listen backlog.
    #[arg(long, default_value_t = 4096, value_name = "N", value_parser = at_least_1, allow_negative_numbers = true)]
    pub max_connections: usize,
    /// (for programs that start a server) Print `{"listening":"ADDR","pid":N}` as the first line
    /// on stdout once listening, before the line for people.
    #[arg(long, hide = true)]
    pub ready_json: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// A serve run's settings, validated.
#[derive(Debug)]
pub struct ServeConfig {
    /// The OpenSSL that serves (`--openssl`, resolved).
    pub library: ossl::LibrarySource,
    pub listen: SocketAddr,
    pub certificate: Certificate,
    /// Where the certificate is written (PEM), for clients to verify against.
    pub cert_out: Option<OutputFile>,
    pub threads: usize,
    pub cpus: Vec<usize>,
    /// The handshake settings, session cache and tickets included.
    pub settings: ossl::Settings,
    /// SSL_MODE_ASYNC.
    pub async_mode: bool,
    /// The async engine's id or path.
    pub async_engine: Option<String>,
    /// Stop after this long (None: at Ctrl-C or SIGTERM).
    pub duration: Option<std::time::Duration>,
    pub limits: Limits,
    pub keylog: Option<PathBuf>,
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_file: Option<PathBuf>,
    /// The final counters as JSON, here.
    pub stats_json: Option<OutputFile>,
    /// Print the machine-readable ready line first.
    pub ready_json: bool,
    /// Notes for the user on settings that do less than they seem to.
    pub notes: Vec<String>,
}

/// The server's certificate: from files, or generated at start.
#[derive(Debug, Clone)]
pub enum Certificate {
    Files { cert: PathBuf, key: PathBuf },
    Generate(ossl::CertType),
}

/// A step of the server's setup that failed, as the options name it (the library's error is
/// its cause).
#[derive(Debug)]
pub enum SetupStep {
    /// Loading the engine --async-engine names.
    AsyncEngine(String),
    /// Turning async mode on.
    AsyncMode,
}

impl std::fmt::Display for SetupStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupStep::AsyncEngine(name) => write!(f, "serve --async-engine {name}"),
            SetupStep::AsyncMode => f.write_str("serve --async"),
        }
    }
}

impl ServeArgs {
    /// The server's settings, checked before anything is loaded or bound.
    pub fn config(&self, library: &ossl::LibrarySource) -> anyhow::Result<ServeConfig> {
        let a = self;
        crate::common::wording::check_cpus("--cpus", &a.cpus)
            .map_err(crate::common::usage::UsageError)?;
        if a.max_connections < a.threads {
            crate::usage_bail!(
                "--max-connections must be at least one per thread ({})",
                a.threads
            );
        }
        let settings = a.tls.settings(a.session_cache.on(), a.tickets.on())?;
        let mut notes = Vec::new();
        if a.async_mode && a.async_engine.is_none() {
            notes.push(
                "--async without --async-engine: OpenSSL's own crypto never pauses, so no call \
                 will wait (give --async-engine dasync with a library from `tlsscope openssl \
                 build`)"
                    .to_string(),
            );
        }
        Ok(ServeConfig {
            library: library.clone(),
            listen: a.listen,
            certificate: match (&a.cert, &a.key) {
                (Some(cert), Some(key)) => Certificate::Files {
                    cert: cert.clone(),
                    key: key.clone(),
                },
                _ => Certificate::Generate(a.cert_type),
            },
            cert_out: a.cert_out.clone(),
            threads: a.threads,
            cpus: a.cpus.clone(),
            settings,
            async_mode: a.async_mode,
            async_engine: a.async_engine.clone(),
            duration: a.duration,
            limits: a.limits(),
            keylog: a.tls.keylog.as_ref().and_then(|k| k.path.clone()),
            metrics_listen: a.metrics.metrics_listen,
            metrics_file: a.metrics.file().map(PathBuf::from),
            stats_json: a.stats_json.clone(),
            ready_json: a.ready_json,
            notes,
        })
    }

    /// The server's limits from the command line.
    fn limits(&self) -> Limits {
        Limits {
            handshake_timeout: self.handshake_timeout,
            request_timeout: self.request_timeout,
            idle_timeout: self.idle_timeout,
            max_connections: self.max_connections,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `tlsscope serve`'s options alone, parsed as the command line would.
    #[derive(Parser)]
    struct ServeOnly {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn serve_args(argv: &[&str]) -> ServeArgs {
        let mut all = vec!["serve"];
        all.extend_from_slice(argv);
        ServeOnly::try_parse_from(all).unwrap().serve
    }

    #[test]
    fn the_flags_default_to_the_servers_own_limits() {
        assert_eq!(serve_args(&[]).limits(), Limits::default());
    }

    #[test]
    fn limits_come_from_the_flags() {
        let a = serve_args(&[
            "--handshake-timeout",
            "2s",
            "--request-timeout",
            "1500ms",
            "--idle-timeout",
            "1m",
            "--max-connections",
            "64",
        ]);
        let l = a.limits();
        assert_eq!(l.handshake_timeout, std::time::Duration::from_secs(2));
        assert_eq!(l.request_timeout, std::time::Duration::from_millis(1500));
        assert_eq!(l.idle_timeout, std::time::Duration::from_secs(60));
        assert_eq!(l.max_connections, 64);
    }

    #[test]
    fn async_without_an_engine_is_a_note_and_too_few_connections_a_usage_error() {
        let system = ossl::LibrarySource::System;
        let c = serve_args(&["--async"]).config(&system).unwrap();
        assert_eq!(c.notes.len(), 1);
        assert!(c.notes[0].starts_with("--async without --async-engine"));
        let c = serve_args(&["--async", "--async-engine", "dasync"])
            .config(&system)
            .unwrap();
        assert!(c.notes.is_empty());
        let c = serve_args(&["--tickets", "off"]).config(&system).unwrap();
        assert!(c.settings.session_cache && !c.settings.tickets);
        let why = serve_args(&["--threads", "4", "--max-connections", "2"])
            .config(&system)
            .unwrap_err();
        assert!(why.is::<crate::common::usage::UsageError>());
        assert_eq!(
            why.to_string(),
            "--max-connections must be at least one per thread (4)"
        );
    }
}
