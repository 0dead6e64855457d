//! `tlsscope serve`'s options, as the command line defines them.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::common::args::*;
use crate::common::output::OutputFile;

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
