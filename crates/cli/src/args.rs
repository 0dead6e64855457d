//! The command line, defined once. `validate` turns it into typed settings for the libraries.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::output::{OutputDir, OutputFile};

use clap::{Args, Parser, Subcommand, ValueEnum};
use experiments::Endpoint;

/// A TLS performance lab in one binary: serve, load, trace and compare TLS stacks.
#[derive(Debug, Parser)]
#[command(name = "tlsscope", version, about, propagate_version = true)]
pub struct Opts {
    /// The OpenSSL under test: an install prefix (holding lib/libssl.so.*) or a version built
    /// by `tlsscope openssl build` (e.g. 1.1.1w). Default: the system's libssl.so.3.
    #[arg(long, global = true, value_name = "DIR|VERSION")]
    pub openssl: Option<String>,

    /// Show libbpf's own log (loading, attaching, the verifier) on stderr; by default tlsscope
    /// keeps it, and an error quotes the line that explains it.
    #[arg(short = 'v', long, global = true)]
    pub verbose: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the built-in TLS/HTTP server (the default target of every experiment).
    Serve(ServeArgs),
    /// Load a TLS server: full or resumed handshakes, or keep-alive requests; report rates,
    /// per-phase latency, the handshakes obtained, both sides' CPU, and what each kind of
    /// handshake put on the wire.
    ///
    /// On the wire, per kind of handshake: bytes each way (every TLS record with its 5-byte
    /// header that each side sent from the first ClientHello up to its Finished, i.e. until the
    /// client's handshake is done; later tickets, data and alerts are not counted), the
    /// ClientHello's record(s), its key shares by group, HelloRetryRequests, and round trips to
    /// the client's first application byte (TCP's handshake not included).
    Bench(Box<BenchArgs>),
    /// Connect, handshake, and report what was negotiated (version, cipher, group, signature,
    /// full or resumed) and what the handshake put on the wire (as bench counts it).
    Handshake(HandshakeArgs),
    /// Trace TLS library calls with eBPF uprobes: latency histograms per function and outcome
    /// (success, retry, failure), aggregated in the kernel.
    Trace(TraceArgs),
    /// Show the plaintext TLS libraries read and write (SSL_read/_ex, SSL_write/_ex, GnuTLS),
    /// per call and connection, with nothing lost silently.
    Sniff(SniffArgs),
    /// Sample a running process's CPU stacks (Debian's perf, DWARF unwinding through libraries
    /// without frame pointers): a flame graph, folded stacks and the costliest functions.
    Profile(ProfileArgs),
    /// Compare library versions and configurations: saved runs side by side, or (--matrix) an
    /// experiment run across variants, with confidence intervals, a rank test and a verdict.
    Compare(CompareArgs),
    /// (internal) One variant's measurements for `compare --matrix`, as JSON on stdout.
    #[command(hide = true)]
    CompareWorker { spec: String },
    /// The main experiment: full RSA and ECDSA handshakes, resumed TLS 1.2 and 1.3, keep-alive
    /// requests, each loaded then traced on the server, in one report (about a minute).
    Lab(LabArgs),
    /// Build OpenSSL versions to test against, or list the builds.
    #[command(subcommand)]
    Openssl(OpensslCommand),
    /// Print a shell completion script for tlsscope on stdout (made from these definitions).
    Completions(CompletionsArgs),
    /// Write tlsscope's man pages (tlsscope.1 and one per subcommand) into a directory, or
    /// print tlsscope.1 on stdout.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The process to sample, every thread of it (e.g. nginx's worker, or `tlsscope serve`).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        required_unless_present = "matrix",
        conflicts_with = "matrix"
    )]
    pub pid: Option<u32>,
    /// Profile compare --matrix's variants instead (the same variant options, --openssl a
    /// comma-separated list): as `compare --matrix --profile DIR`, DIR given by --out-dir.
    #[arg(long, requires = "out_dir")]
    pub matrix: bool,
    /// How long to sample.
    #[arg(long, short = 'd', default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, conflicts_with = "matrix")]
    pub duration: std::time::Duration,
    /// Samples per second of CPU time (the cpu-clock event).
    #[arg(long, short = 'F', default_value_t = 999, value_parser = clap::value_parser!(u32).range(1..=20000), conflicts_with = "matrix")]
    pub frequency: u32,
    /// Write flamegraph.svg, stacks.folded (CPU-microseconds per stack), profile.pb (pprof),
    /// top.txt and perf's perf.data into this directory (created if missing); with --matrix,
    /// compare --profile's files and compare.json.
    #[arg(long, value_name = "DIR", value_parser = crate::output::DirParser)]
    pub out_dir: Option<OutputDir>,
    /// With --matrix: the variants and how each is measured, as compare --matrix takes them.
    #[command(flatten)]
    pub m: MatrixOptions,
    /// Functions in the table.
    #[arg(long, default_value_t = 25, value_name = "N", value_parser = at_least_1, allow_negative_numbers = true)]
    pub top: usize,
}

#[derive(Debug, Subcommand)]
pub enum OpensslCommand {
    /// Build OpenSSL versions (from the openssl-src crate's sources, or a local tree or
    /// tarball), AWS-LC or BoringSSL (from the aws-lc-sys and boring-sys crates' sources, with
    /// CMake) as shared libraries into the cache.
    Build(BuildArgs),
    /// List the OpenSSL builds in the cache, and the system library.
    List,
}

#[derive(Debug, Args)]
pub struct BuildArgs {
    /// OpenSSL versions, e.g. 1.1.1w 3.0.2 3.5.5, or aws-lc, boringssl.
    #[arg(value_name = "VERSION", required_unless_present = "source")]
    pub versions: Vec<String>,
    /// Build from this OpenSSL source tree or .tar.gz instead of the crate's sources.
    #[arg(long, value_name = "PATH")]
    pub source: Option<PathBuf>,
    /// Parallel compile jobs (default: the number of CPUs).
    #[arg(long, short = 'j', value_parser = at_least_1, allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// Rebuild even when it is already built.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell the script is for.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write tlsscope.1, tlsscope-bench.1 and the others into this directory (created if
    /// missing); without it, tlsscope.1 goes to stdout.
    #[arg(long, value_name = "DIR", value_parser = crate::output::DirParser, value_hint = clap::ValueHint::DirPath)]
    pub dir: Option<OutputDir>,
}

fn parse_cert_type(s: &str) -> Result<ossl::CertType, String> {
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
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_only())]
    pub keylog: Option<OutputFile>,
}

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
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_only())]
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
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
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
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write one row per connection as CSV.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub csv: Option<OutputFile>,
    /// Write the result as one self-contained HTML page: the report, operations per second,
    /// and each phase's latency by percentile.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
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

#[derive(Debug, Args)]
pub struct SniffArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Bytes captured per call at most; the rest is counted and reported, not captured.
    #[arg(long, default_value_t = 16384, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(1..), allow_negative_numbers = true)]
    pub max_bytes: u32,
    /// Ring buffer size (power of two; suffixes K, M). Too small loses events, and says so.
    /// Kernel backend: one ring, 16M unless given. In process: a ring per thread, 4M unless
    /// given (64K to 256M).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub ring_size: Option<u32>,
    /// Also report handshake calls (no data).
    #[arg(long)]
    pub handshake: bool,
    /// Payload as a hex dump.
    #[arg(long, conflicts_with_all = ["quiet", "json"])]
    pub hex: bool,
    /// Counts only: no payload is printed or written.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Write JSON lines (one object per call, the payload in base64) instead of text, to FILE
    /// (created 0600), `-` for stdout.
    #[arg(long, value_name = "FILE", conflicts_with = "quiet", value_parser = crate::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the stream to FILE (created 0600) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub output: Option<OutputFile>,
    /// Also write the plaintext as synthetic TCP streams between the real endpoints to a pcapng
    /// FILE (created 0600), for Wireshark/tshark (decode the TLS port as HTTP:
    /// `tshark -d tcp.port==443,http`).
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_only())]
    pub pcap: Option<OutputFile>,
    /// Keep only calls whose payload contains this text.
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// Mask the values of Authorization, Cookie and Set-Cookie headers.
    #[arg(long)]
    pub redact_headers: bool,
    /// Stop after this long (default: Ctrl-C, SIGTERM, or every sniffed process gone).
    #[arg(long, short = 'd', value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    /// Who copies the calls: kernel (eBPF uprobes), user (tlsscope's library inside the
    /// program: a program it starts after --, or running processes with -p and their workers,
    /// attached with ptrace), or auto (user for a command, and for -p when the processes let it
    /// in and the in-process ring takes --ring-size; kernel otherwise, and for --binary/--lib).
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub backend: experiments::trace::BackendChoice,
    /// Where the kernel backend's probes go: emulated (on an instruction the kernel emulates
    /// where one is as good as the entry: a push or NOP entry, the one after endbr64, or the
    /// first callee for calls from the function when it gets the function's buffer; cheaper
    /// per call) or entry (always the function's first instruction).
    #[arg(long, default_value = "emulated", value_name = "PLACEMENT")]
    pub placement: probes::PlacementMode,
    /// A program to start and sniff, with its arguments (after --); the capture ends when it
    /// exits, and ending the capture ends it (SIGTERM).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// "4M", "256K", "65536": a power of two of at least 4096 bytes.
fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (n, scale) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 1024u64),
        Some((i, 'M' | 'm')) => (&t[..i], 1024 * 1024),
        _ => (t, 1),
    };
    let bytes = n
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(scale))
        .ok_or_else(|| "not a size (try 4M, 256K)".to_string())?;
    if bytes < 4096 || !bytes.is_power_of_two() || bytes > 1 << 30 {
        return Err("the ring size must be a power of two from 4K to 1024M".to_string());
    }
    Ok(bytes as u32)
}

#[derive(Debug, Args)]
pub struct LabArgs {
    /// The server under test: the built-in one, or Debian's nginx with a generated config.
    #[arg(long, value_enum, default_value = "builtin")]
    pub target: LabTarget,
    /// Measured load per experiment, without probes.
    #[arg(long, short = 'd', default_value = "5s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: std::time::Duration,
    /// Load per experiment with the server traced.
    #[arg(long, default_value = "3s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub trace_duration: std::time::Duration,
    /// Unmeasured load before each experiment.
    #[arg(long, default_value = "1s", value_name = "TIME", value_parser = parse_duration, allow_hyphen_values = true)]
    pub warmup: std::time::Duration,
    /// Client connections.
    #[arg(long, short = 'c', default_value_t = 32, value_parser = at_least_1, allow_negative_numbers = true)]
    pub connections: usize,
    /// The CPU the server is pinned to.
    #[arg(long, default_value_t = 0, value_name = "CPU")]
    pub server_cpu: usize,
    /// The CPU the load runs on.
    #[arg(long, default_value_t = 1, value_name = "CPU")]
    pub client_cpu: usize,
    /// Who traces the server: kernel (eBPF uprobes on it), user (tlsscope's library inside a
    /// server started under it), or auto (a traced run with each, side by side).
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub backend: experiments::trace::BackendChoice,
    /// Also write the report as one self-contained HTML page: rates and the cost of tracing,
    /// where the server's time goes, and per experiment the handshakes, CPU, latency and the
    /// server's traced calls as histograms.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_only())]
    pub html: Option<OutputFile>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LabTarget {
    Builtin,
    Nginx,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Probe groups: handshake, io, crypto, or all (comma-separated).
    #[arg(long, default_value = "all", value_name = "GROUPS", value_parser = parse_groups)]
    pub probes: probes::Groups,
    /// Only these functions (comma-separated catalog names, e.g.
    /// SSL_do_handshake,SSL_read,SSL_write), whatever --probes says.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub functions: Vec<String>,
    /// Stop after this long (default: at Ctrl-C, SIGTERM, or when every traced process exits).
    #[arg(long, short = 'd', value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    /// Print the table of the last interval this often.
    #[arg(long, short = 'i', value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub interval: Option<std::time::Duration>,
    /// Linear buckets MIN,MAX,STEP in microseconds (like ssllatency's lhist 0,1000,200)
    /// instead of powers of two.
    #[arg(long, value_name = "MIN,MAX,STEP", value_parser = parse_linear)]
    pub linear: Option<probes::Buckets>,
    /// One histogram per process.
    #[arg(long)]
    pub per_pid: bool,
    /// Settle every OpenSSL call returning <= 0 with the caller's SSL_get_error (probed too):
    /// exact retry / closed / failure classes, one more probe hit per such call. Without it,
    /// the call's last read/write syscall decides (EAGAIN: retry; EOF, errors: failure), and a
    /// close_notify or alert is "unknown".
    #[arg(long)]
    pub exact_outcomes: bool,
    /// Attach the probes for every process running the library and filter by PID in BPF:
    /// the traced process pays a little less per call, every other process using the
    /// library pays the breakpoint. Default: attach in the traced processes only.
    #[arg(long)]
    pub attach_all: bool,
    /// Where the kernel backend's probes go: emulated (on an instruction the kernel emulates
    /// where one is as good as the entry: a push or NOP entry, the one after endbr64, or the
    /// first callee for calls from the function; cheaper per call) or entry (always the
    /// function's first instruction).
    #[arg(long, default_value = "emulated", value_name = "PLACEMENT")]
    pub placement: probes::PlacementMode,
    /// Only the stats table at the end, no histograms.
    #[arg(long)]
    pub no_histograms: bool,
    /// Write the results as JSON (schemas/trace.v1.schema.json); `-`: on stdout, instead of
    /// the text report.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the results as one self-contained HTML page: the stats, a histogram per function
    /// and outcome, and with -i the calls and time per interval.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    /// Who counts the calls: kernel (eBPF uprobes, any running process, internal functions
    /// too), user (tlsscope's library inside the program, tens of nanoseconds per call: a
    /// program it starts after --, or running processes with -p and their workers, attached
    /// with ptrace), or auto (user for a command, and for -p when it covers every function
    /// asked for and the processes let it in; kernel otherwise).
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub backend: experiments::trace::BackendChoice,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// A program to start and trace, with its arguments (after --); the trace ends when it
    /// exits, and ending the trace ends it (SIGTERM).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
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
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_only())]
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

fn parse_groups(s: &str) -> Result<probes::Groups, String> {
    s.parse()
}

fn parse_linear(s: &str) -> Result<probes::Buckets, String> {
    let numbers: Vec<u64> = s
        .split(',')
        .map(|n| n.trim().parse::<u64>())
        .collect::<Result<_, _>>()
        .map_err(|_| "not MIN,MAX,STEP in microseconds (e.g. 0,1000,200)".to_string())?;
    // Edges past the longest duration are no latency, and MIN + buckets x STEP must not
    // overflow.
    let most_us = MAX_DURATION.as_micros() as u64;
    if numbers.iter().any(|&n| n > most_us) {
        return Err(format!(
            "each of MIN,MAX,STEP is at most {most_us} us (7 days)"
        ));
    }
    match numbers[..] {
        [min, max, step] => probes::Buckets::linear(min, max, step),
        _ => Err("not MIN,MAX,STEP in microseconds (e.g. 0,1000,200)".to_string()),
    }
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
fn whole_number(s: &str, min: u64) -> Result<u64, String> {
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
fn at_least_1(s: &str) -> Result<usize, String> {
    usize::try_from(whole_number(s, 1)?).map_err(|_| "too large".to_string())
}

/// A count of at least one, as a u64 (operations in total).
fn at_least_1_u64(s: &str) -> Result<u64, String> {
    whole_number(s, 1)
}

/// A count of at least two (samples a spread is computed from).
fn at_least_2(s: &str) -> Result<usize, String> {
    usize::try_from(whole_number(s, 2)?).map_err(|_| "too large".to_string())
}

/// A real number, finite.
fn real_number(s: &str) -> Result<f64, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| "not a number".to_string())
}

/// Operations per second: more than zero.
fn parse_rate(s: &str) -> Result<f64, String> {
    let r = real_number(s)?;
    if r <= 0.0 {
        return Err("must be more than zero operations per second".into());
    }
    Ok(r)
}

/// A fraction from 0 to 1.
fn parse_ratio(s: &str) -> Result<f64, String> {
    let r = real_number(s)?;
    if !(0.0..=1.0).contains(&r) {
        return Err("must be from 0 to 1 (e.g. 0.5)".into());
    }
    Ok(r)
}

/// A confidence level, between 0.5 and 1 (exclusive).
/// A percentage from 0 to under 100.
fn parse_percentage(s: &str) -> Result<f64, String> {
    let p = real_number(s)?;
    if !(0.0..100.0).contains(&p) {
        return Err("a percentage from 0 to under 100 (e.g. 1)".into());
    }
    Ok(p)
}

fn parse_level(s: &str) -> Result<f64, String> {
    let l = real_number(s)?;
    if !(l > 0.5 && l < 1.0) {
        return Err("a confidence level between 0.5 and 1 (e.g. 0.95)".into());
    }
    Ok(l)
}

#[derive(Debug, Args)]
pub struct HandshakeArgs {
    /// Server to connect to: HOST[:PORT], [IPv6]:PORT or https://HOST[:PORT]/PATH (the path
    /// becomes --request; port 443 when none is given).
    #[arg(default_value = "127.0.0.1:4433", value_name = "TARGET")]
    pub target: Endpoint,
    /// Connections to make, one after another.
    #[arg(long, short = 'n', default_value_t = 1, value_parser = at_least_1, allow_negative_numbers = true)]
    pub count: usize,
    /// Offer each connection's session to the next one, and fail unless they all resume.
    #[arg(long)]
    pub resume: bool,
    /// Send GET PATH on each connection and read the response.
    #[arg(long, value_name = "PATH")]
    pub request: Option<String>,
    #[command(flatten)]
    pub peer: PeerArgs,
    /// Write one JSON object per connection instead of text, to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Give up on a connection after this long: 10s, 500ms, 2m.
    #[arg(long, default_value = "10s", value_name = "TIME", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub tls: TlsArgs,
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
            .map(experiments::client::keylog_file)
    }
}

/// Which side's library varies in `compare --matrix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Client,
    Server,
    Both,
}

impl Side {
    pub fn typed(self) -> experiments::compare::matrix::Side {
        match self {
            Side::Client => experiments::compare::matrix::Side::Client,
            Side::Server => experiments::compare::matrix::Side::Server,
            Side::Both => experiments::compare::matrix::Side::Both,
        }
    }
}

/// A TLS version of a compare variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TlsChoice {
    #[value(name = "1.2")]
    V1_2,
    #[value(name = "1.3")]
    V1_3,
    /// Whatever the libraries agree on.
    Any,
}

impl TlsChoice {
    pub fn typed(self) -> Option<experiments::compare::Tls> {
        match self {
            TlsChoice::V1_2 => Some(experiments::compare::Tls::V1_2),
            TlsChoice::V1_3 => Some(experiments::compare::Tls::V1_3),
            TlsChoice::Any => None,
        }
    }
}

/// The server of a compare variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ServerChoice {
    /// tlsscope serve, on the variant's server library.
    Builtin,
    /// Debian's nginx (/usr/sbin/nginx), on the variant's server library (3.x only).
    Nginx,
}

impl ServerChoice {
    pub fn typed(self) -> experiments::compare::matrix::ServerKind {
        match self {
            ServerChoice::Builtin => experiments::compare::matrix::ServerKind::Builtin,
            ServerChoice::Nginx => experiments::compare::matrix::ServerKind::Nginx,
        }
    }
}

/// What each variant of a compare matrix is compared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BaselineChoice {
    /// The first variant with results.
    First,
    /// Within each set of variants sharing every setting but the library (certificate,
    /// group, client, server, ...), the first library: the libraries side by side.
    SameSettings,
}

impl BaselineChoice {
    pub fn typed(self) -> experiments::compare::Baseline {
        match self {
            BaselineChoice::First => experiments::compare::Baseline::First,
            BaselineChoice::SameSettings => experiments::compare::Baseline::SameSettings,
        }
    }
}

/// Full or resumed handshakes in a compare variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HandshakeChoice {
    #[value(alias = "off")]
    Full,
    #[value(alias = "on")]
    Resumed,
}

/// The client's SSL_CTX in a compare variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CtxChoice {
    Shared,
    PerConnection,
}

/// An experiment of `compare --matrix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExperimentChoice {
    Pretransfer,
    Engine,
    Load,
}

impl ExperimentChoice {
    pub fn typed(self) -> experiments::compare::ExperimentKind {
        match self {
            ExperimentChoice::Pretransfer => experiments::compare::ExperimentKind::Pretransfer,
            ExperimentChoice::Engine => experiments::compare::ExperimentKind::Engine,
            ExperimentChoice::Load => experiments::compare::ExperimentKind::Load,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Saved runs to compare (from bench --json, trace --json or compare --json); the first
    /// is the baseline.
    pub files: Vec<PathBuf>,
    /// Run the experiment across variants: the product of --openssl (a comma-separated list
    /// here, built on demand; "system" is the system's), --cert-type, --tls, --groups, --resume
    /// and --ctx.
    #[arg(long)]
    pub matrix: bool,
    #[command(flatten)]
    pub m: MatrixOptions,
    /// Write the whole comparison (every sample) as JSON (`-`: on stdout, instead of the text).
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the tables as Markdown.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub markdown: Option<OutputFile>,
    /// Write one self-contained HTML page with the tables and plots.
    #[arg(long, value_name = "FILE", value_parser = crate::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    /// With --matrix: sample each worker's measured operations with perf (DWARF stacks) and
    /// write per variant a flame graph, folded stacks and a pprof file, a differential flame
    /// graph against the first variant, and profile.txt (CPU-us per operation per function,
    /// with the change) into this directory.
    #[arg(long, value_name = "DIR", requires = "matrix", value_parser = crate::output::DirParser)]
    pub profile: Option<OutputDir>,
}

/// The variants of a matrix and how each is measured: `compare --matrix` and `profile --matrix`.
#[derive(Debug, Args)]
pub struct MatrixOptions {
    /// Certificate types of the server (rsa2048, ecdsa-p256, ed25519, ...).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rsa2048",
        value_name = "LIST",
        value_parser = parse_cert_type
    )]
    pub cert_type: Vec<ossl::CertType>,
    /// TLS versions: 1.2, 1.3, or any.
    #[arg(
        long = "tls-versions",
        alias = "tls",
        value_delimiter = ',',
        default_value = "1.3",
        value_name = "LIST",
        value_enum
    )]
    pub tls: Vec<TlsChoice>,
    /// Key exchange groups, one per variant (e.g. X25519,P-256; "default" for the library's).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "default",
        value_name = "LIST"
    )]
    pub groups: Vec<String>,
    /// full and/or resumed handshakes.
    #[arg(
        long = "handshakes",
        alias = "resume",
        value_delimiter = ',',
        default_value = "full",
        value_name = "LIST",
        value_enum
    )]
    pub resume: Vec<HandshakeChoice>,
    /// The client's SSL_CTX: shared (one for all connections) and/or per-connection (a new one
    /// per connection, loading the CA bundle each time, as curl does).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "shared",
        value_name = "LIST",
        value_enum
    )]
    pub ctx: Vec<CtxChoice>,
    /// Which side's library the variants change; the other side uses --fixed-openssl.
    #[arg(long, value_enum, default_value = "client")]
    pub side: Side,
    /// The library of the side that does not vary (default: the system's).
    #[arg(long, value_name = "DIR|VERSION")]
    pub fixed_openssl: Option<String>,
    /// Experiments: pretransfer (sequential new connections to the server), engine
    /// (in-process handshakes over memory BIOs, no sockets) and/or load (a closed loop of -c
    /// concurrent new connections made by bench's load engine: rate, client and server CPU
    /// per handshake, the server's busy share).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "pretransfer,engine",
        value_name = "LIST",
        value_enum
    )]
    pub experiment: Vec<ExperimentChoice>,
    /// Measured operations per variant per round. Short rounds keep a round's variants close
    /// in time, so drift in the machine seldom falls between them.
    #[arg(short = 'n', long, default_value_t = 5, value_parser = at_least_2, allow_negative_numbers = true)]
    pub count: usize,
    /// Rounds; each round runs every variant once, in an order rotated every round. The rounds
    /// are the replicates the verdicts are drawn from: at least 6 for a verdict.
    #[arg(long, default_value_t = 200, value_parser = at_least_1, allow_negative_numbers = true)]
    pub repeat: usize,
    /// Operations before measuring, per variant per round.
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Verify the server's certificate against the system CA bundle plus the server's own
    /// certificate (as curl loads its bundle).
    #[arg(long, value_enum, default_value = "on")]
    pub verify: Switch,
    /// Confidence level of the intervals and the test.
    #[arg(long, default_value_t = 0.95, value_parser = parse_level, allow_negative_numbers = true)]
    pub level: f64,
    /// Changes smaller than this many percent are never called slower or faster, however
    /// significant (criterion's noise threshold).
    #[arg(long, default_value_t = 1.0, value_name = "PCT", value_parser = parse_percentage, allow_negative_numbers = true)]
    pub noise_threshold: f64,
    /// Test-only: the last variant's client burns PCT percent more CPU per operation (a
    /// calibrated difference for checking the verdicts).
    #[arg(long, default_value_t = 0.0, value_name = "PCT", hide = true, value_parser = parse_percentage)]
    pub calibrate_slower: f64,
    /// CPU for the server(s).
    #[arg(long, default_value_t = 0)]
    pub server_cpu: usize,
    /// CPU for the client (the workers).
    #[arg(long, default_value_t = 1)]
    pub client_cpu: usize,
    /// Servers the pretransfer and load experiments connect to: builtin (tlsscope serve)
    /// and/or nginx (Debian's, one per 3.x server library, through LD_LIBRARY_PATH).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "builtin",
        value_name = "LIST",
        value_enum
    )]
    pub server: Vec<ServerChoice>,
    /// The load experiment's clients: openssl (the client library) and/or rustls.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "openssl",
        value_name = "LIST",
        value_enum
    )]
    pub client_engine: Vec<ClientEngine>,
    /// How much of a real client's work the load experiment's rustls client does: lean (one
    /// key share per group, the server's signature not checked: the server's work is
    /// unchanged, the client's is cut so that the server is what is measured) or full.
    /// Default: lean with --verify off, full with --verify on.
    #[arg(long, value_enum, value_name = "WORK")]
    pub client_work: Option<ClientWork>,
    /// The load experiment's concurrent connections (a closed loop), each new per handshake.
    #[arg(short = 'c', long, default_value_t = 4, value_parser = at_least_1, allow_negative_numbers = true)]
    pub connections: usize,
    /// What each variant is compared with: first (the first variant with results) or
    /// same-settings (the libraries side by side within each certificate, group, client
    /// and server).
    #[arg(long, value_enum, default_value = "first")]
    pub baseline: BaselineChoice,
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
        assert!(parse_level("0.5").is_err() && parse_level("0.99").is_ok());
    }
}
