//! The command line, defined once. `validate` turns it into typed settings for the libraries.

use app::common::output::OutputDir;

use clap::{Args, Parser, Subcommand};

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
    Serve(app::serve::config::ServeArgs),
    /// Load a TLS server: full or resumed handshakes, or keep-alive requests; report rates,
    /// per-phase latency, the handshakes obtained, both sides' CPU, and what each kind of
    /// handshake put on the wire.
    ///
    /// On the wire, per kind of handshake: bytes each way (every TLS record with its 5-byte
    /// header that each side sent from the first ClientHello up to its Finished, i.e. until the
    /// client's handshake is done; later tickets, data and alerts are not counted), the
    /// ClientHello's record(s), its key shares by group, HelloRetryRequests, and round trips to
    /// the client's first application byte (TCP's handshake not included).
    Bench(Box<app::bench::config::BenchArgs>),
    /// Add up the JSON documents of a sharded bench run (`bench --shard I/N --json`): one bench
    /// document, latency histograms added exactly, the rate over the window all shards ran in,
    /// a table of the shards, and warnings for a late, missing or client-bound shard or
    /// settings that differ. A shard that failed is named and the others merged (exit 3).
    Merge(app::merge::config::MergeArgs),
    /// Connect, handshake, and report what was negotiated (version, cipher, group, signature,
    /// full or resumed) and what the handshake put on the wire (as bench counts it).
    Handshake(app::handshake::config::HandshakeArgs),
    /// Trace TLS library calls with eBPF uprobes: latency histograms per function and outcome
    /// (success, retry, failure), aggregated in the kernel.
    Trace(app::trace::config::TraceArgs),
    /// Show the plaintext TLS libraries read and write (SSL_read/_ex, SSL_write/_ex, GnuTLS),
    /// per call and connection, with nothing lost silently.
    Sniff(app::sniff::config::SniffArgs),
    /// Sample a running process's CPU stacks (Debian's perf, DWARF unwinding through libraries
    /// without frame pointers): a flame graph, folded stacks and the costliest functions.
    Profile(app::profile::config::ProfileArgs),
    /// Compare library versions and configurations: saved runs side by side, or (--matrix) an
    /// experiment run across variants, with confidence intervals, a rank test and a verdict.
    Compare(app::compare::config::CompareArgs),
    /// (internal) One variant's measurements for `compare --matrix`, as JSON on stdout.
    #[command(hide = true)]
    CompareWorker { spec: String },
    /// The main experiment: full RSA and ECDSA handshakes, resumed TLS 1.2 and 1.3, keep-alive
    /// requests, each loaded then traced on the server, in one report (about a minute).
    Lab(app::lab::config::LabArgs),
    /// Build OpenSSL versions to test against, or list the builds.
    #[command(subcommand)]
    Openssl(OpensslCommand),
    /// Print a shell completion script for tlsscope on stdout (made from these definitions).
    Completions(CompletionsArgs),
    /// Write tlsscope's man pages (tlsscope.1 and one per subcommand) into a directory, or
    /// print tlsscope.1 on stdout.
    Man(ManArgs),
}

#[derive(Debug, Subcommand)]
pub enum OpensslCommand {
    /// Build OpenSSL versions (from the openssl-src crate's sources, or a local tree or
    /// tarball), AWS-LC or BoringSSL (from the aws-lc-sys and boring-sys crates' sources, with
    /// CMake) as shared libraries into the cache.
    Build(app::openssl::config::BuildArgs),
    /// List the OpenSSL builds in the cache, and the system library.
    List,
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
    #[arg(long, value_name = "DIR", value_parser = app::common::output::DirParser, value_hint = clap::ValueHint::DirPath)]
    pub dir: Option<OutputDir>,
}
