//! `tlsscope bench`'s options, as the command line defines them.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::common::args::*;
use crate::common::output::OutputFile;
use crate::common::target::Endpoint;

/// What each operation of a bench run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchMode {
    /// A full handshake per connection (no session is ever offered).
    Full,
    /// Each connection slot resumes its previous session after its first handshake.
    Resume,
    /// A handshake per connection, then HTTP/1.1 requests on it.
    Keepalive,
}

/// The load client's TLS engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientEngine {
    /// rustls (built in), on ring or aws-lc-rs (see --rustls-provider).
    Rustls,
    /// The OpenSSL `--openssl` names (the system's by default).
    Openssl,
}

impl ClientEngine {
    pub fn typed(self) -> load::EngineKind {
        match self {
            ClientEngine::Rustls => load::EngineKind::Rustls,
            ClientEngine::Openssl => load::EngineKind::Openssl,
        }
    }
}

/// The rustls client's crypto provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RustlsProvider {
    /// ring: classic groups, the cheaper.
    Ring,
    /// aws-lc-rs: also X25519MLKEM768, SecP256r1MLKEM768, MLKEM768/1024 and ML-DSA.
    #[value(name = "aws-lc-rs")]
    AwsLcRs,
}

impl RustlsProvider {
    pub fn typed(self) -> load::rustls_client::Provider {
        match self {
            RustlsProvider::Ring => load::rustls_client::Provider::Ring,
            RustlsProvider::AwsLcRs => load::rustls_client::Provider::AwsLcRs,
        }
    }
}

/// How much of a real client's work the rustls client does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientWork {
    /// A real client's: a fresh key share per connection, the server's signature checked.
    Full,
    /// A load generator's: one key share per group for the run, the server's handshake
    /// signature not checked (the server's work is unchanged).
    Lean,
}

impl ClientWork {
    /// The work asked for, or the default: full when the client verifies the server (a lean
    /// client checks no signature), lean otherwise.
    pub fn resolve(given: Option<ClientWork>, verifies: bool) -> load::rustls_client::Work {
        match given.unwrap_or(if verifies {
            ClientWork::Full
        } else {
            ClientWork::Lean
        }) {
            ClientWork::Full => load::rustls_client::Work::Full,
            ClientWork::Lean => load::rustls_client::Work::Lean,
        }
    }
}

/// How TLS 1.2 resumes (TLS 1.3 always uses tickets/PSK).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ResumeKind {
    Ticket,
    Id,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Server to load: HOST[:PORT], [IPv6]:PORT or https://HOST[:PORT]/PATH (the path becomes
    /// --request, as wrk does; port 443 when none is given). A name is resolved once; the first
    /// address that answers is loaded.
    #[arg(default_value = "127.0.0.1:4433", value_name = "TARGET")]
    pub target: Endpoint,
    /// What each operation is.
    #[arg(long, value_enum, default_value = "full")]
    pub mode: BenchMode,
    /// Load threads, each with its own event loop.
    #[arg(long, short = 't', default_value_t = 1, value_parser = at_least_1, allow_negative_numbers = true)]
    pub threads: usize,
    /// Concurrent connections over all threads.
    #[arg(long, short = 'c', default_value_t = 10, value_parser = at_least_1, allow_negative_numbers = true)]
    pub connections: usize,
    /// CPUs to pin the load threads to, round robin (e.g. 1).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub cpus: Vec<usize>,
    /// How long to measure, after the warm-up: 10, 10s, 500ms, 2m. Default 10s unless -n.
    #[arg(long, short = 'd', value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true, conflicts_with = "count")]
    pub duration: Option<std::time::Duration>,
    /// Stop after this many operations in total (connections; requests in keepalive mode).
    /// Was --requests.
    #[arg(long, short = 'n', value_name = "COUNT", value_parser = at_least_1_u64, allow_negative_numbers = true)]
    pub count: Option<u64>,
    /// Run this long before measuring; what happens then is not counted.
    #[arg(long, default_value = "0", value_name = "TIME", value_parser = parse_duration, allow_hyphen_values = true)]
    pub warmup: std::time::Duration,
    /// GET this path on each connection (full/resume; like s_time -www) or repeatedly
    /// (keepalive, default /).
    #[arg(long, value_name = "PATH")]
    pub request: Option<String>,
    /// TLS 1.2 resumption by ticket or by session ID (resume mode).
    #[arg(
        long = "resume-by",
        alias = "resume",
        value_enum,
        value_name = "ticket|id"
    )]
    pub resume: Option<ResumeKind>,
    /// Fraction of connections after the first that offer a session (resume mode).
    #[arg(long, value_name = "R", value_parser = parse_ratio, allow_negative_numbers = true)]
    pub resume_ratio: Option<f64>,
    /// Start this many operations per second, on schedule (open loop); latency counts from
    /// each planned start, so a stalled server shows (coordinated omission corrected).
    #[arg(long, value_name = "PER_SECOND", value_parser = parse_rate, allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// Give up on an operation's phase after this long.
    #[arg(long, default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub peer: PeerArgs,
    /// The client's TLS engine. Default: rustls, the cheapest per full handshake (see
    /// bench/client-cost), unless --openssl is given or a setting needs OpenSSL (the result
    /// says which ran, and why).
    #[arg(long, value_enum, value_name = "ENGINE")]
    pub client_engine: Option<ClientEngine>,
    /// The rustls client's crypto provider. Default: aws-lc-rs when --groups has a
    /// post-quantum group (ring has none), ring otherwise (the cheaper per handshake).
    #[arg(long, value_enum, value_name = "PROVIDER")]
    pub rustls_provider: Option<RustlsProvider>,
    /// How much of a real client's work the rustls client does. Default: lean (one key share
    /// per group for the run, the server's handshake signature not checked, so that one client
    /// core outruns one server core); full with --verify or --client-work full.
    #[arg(long, value_enum, value_name = "WORK")]
    pub client_work: Option<ClientWork>,
    /// Client certificate (PEM), for servers that ask for one; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Account the server's CPU (from /proc) over the measured window.
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,
    /// Connect from this many loopback source addresses (127.0.0.1, .2, ...), so long
    /// full-handshake runs never run out of local ports. Loopback targets only.
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u8).range(1..), allow_negative_numbers = true)]
    pub source_ips: u8,
    /// Write the result as JSON (schema: schemas/bench.v1.schema.json); `-`: on stdout,
    /// instead of the text report.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write one row per connection as CSV.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub csv: Option<OutputFile>,
    /// Write the result as one self-contained HTML page: the report, operations per second,
    /// and each phase's latency by percentile.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}
