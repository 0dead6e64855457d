//! `tlsscope bench`'s options, as the command line defines them, and the typed settings of a
//! run made from them once ([`BenchArgs::config`]): the only code that knows bench's flag names.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use crate::bench::shard::{parse_shard, parse_start_at, Shard, StartAt};
use crate::common::args::*;
use crate::common::client_args::{ClientEngine, ClientTls, ClientWork, RustlsProvider};
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
    /// Run as shard I of N (I from 0: a Kubernetes Indexed Job's $JOB_COMPLETION_INDEX/N):
    /// this run takes its part of --connections, -n and --rate (split evenly, the remainder
    /// to the lowest shards); `tlsscope merge` adds the shards' documents up.
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Begin the load at this wall-clock time (RFC 3339, e.g. 2026-11-28T10:00:00.250Z or with
    /// a UTC offset), so shards on several hosts start together; the measured window starts
    /// after --warmup from then.
    #[arg(long, value_name = "TIME", value_parser = parse_start_at)]
    pub start_at: Option<StartAt>,
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

/// A bench run's settings, validated: what the session runs and where its outputs go.
#[derive(Debug)]
pub struct BenchConfig {
    /// The OpenSSL under test (`--openssl`, resolved once): it checks the target, and is the
    /// client when `client` says so.
    pub library: ossl::LibrarySource,
    pub target: Endpoint,
    pub mode: load::Mode,
    /// The mode as the metrics label it ("full", "resume", "keepalive").
    pub mode_label: &'static str,
    pub client: ClientChoice,
    pub tls: ClientTls,
    /// The name sent as SNI (and verified, with verification on).
    pub sni: Option<String>,
    /// The path to GET: --request, else the target URL's path (as wrk takes it).
    pub request: Option<String>,
    pub threads: usize,
    pub connections: usize,
    pub cpus: Vec<usize>,
    /// How long to measure; None: until `count` operations are done.
    pub duration: Option<std::time::Duration>,
    pub count: Option<u64>,
    pub warmup: std::time::Duration,
    pub rate: Option<f64>,
    /// A shard's part of a paced run: where its schedule begins (zero otherwise).
    pub schedule_offset: std::time::Duration,
    /// `--shard`: connections, count and rate above are this shard's parts.
    pub shard: Option<Shard>,
    pub start_at: Option<StartAt>,
    pub timeout: std::time::Duration,
    pub source_ips: u8,
    pub server_pid: Option<u32>,
    pub metrics_listen: Option<std::net::SocketAddr>,
    pub metrics_file: Option<PathBuf>,
    pub outputs: Outputs,
}

/// Where a run's result goes.
#[derive(Debug)]
pub struct Outputs {
    pub json: Option<OutputFile>,
    /// One row per connection (recorded only when asked for).
    pub csv: Option<OutputFile>,
    pub html: Option<OutputFile>,
    /// The text report on stdout: when no other output took stdout.
    pub text: bool,
}

/// The load client a run uses, as the options choose it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClientChoice {
    /// The OpenSSL client: --client-engine openssl, or --openssl without --client-engine.
    Openssl,
    /// The rustls client; `if_refused` says what follows when it cannot take the settings.
    Rustls {
        provider: Option<load::rustls_client::Provider>,
        work: load::rustls_client::Work,
        if_refused: IfRustlsRefused,
    },
}

/// What a run does when the rustls client refuses its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfRustlsRefused {
    /// The default client: the library's OpenSSL client runs instead, and the result says why.
    FallBack,
    /// Asked for through its provider or its work: the run fails with rustls's reason.
    Fail,
    /// Asked for by name (--client-engine rustls): the run fails, pointing to OpenSSL.
    FailNamed,
}

/// The rustls client refused the settings of a run that asked for it (rustls's reason).
#[derive(Debug)]
pub struct RustlsRefused {
    pub why: String,
    pub named: bool,
}

impl std::fmt::Display for RustlsRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.named {
            write!(
                f,
                "--client-engine rustls: {}; or use --client-engine openssl",
                self.why
            )
        } else {
            f.write_str(&self.why)
        }
    }
}

impl std::error::Error for RustlsRefused {}

impl BenchArgs {
    /// The run's settings, checked before any connection is made. `library` is `--openssl`,
    /// resolved (a directory: the user named an OpenSSL, and so an OpenSSL client).
    pub fn config(&self, library: &ossl::LibrarySource) -> anyhow::Result<BenchConfig> {
        let a = self;
        let text = !crate::common::output::one_on_stdout([&a.json, &a.csv, &a.html])?;
        let connections = a.shard_connections()?;
        let count = a.shard_count()?;
        let mode = a.load_mode(connections)?;
        let openssl_named = matches!(library, ossl::LibrarySource::Dir(_));
        let client = a.client(openssl_named)?;
        // Resumption by session ID: do not ask for tickets, so the server falls back to its cache.
        let tickets = a.resume != Some(ResumeKind::Id);
        let credentials = a.cert.as_deref().zip(a.key.as_deref());
        let tls = ClientTls::from_args(&a.tls, &a.peer, tickets, credentials)?;
        Ok(BenchConfig {
            library: library.clone(),
            target: a.target.clone(),
            mode,
            mode_label: match a.mode {
                BenchMode::Full => "full",
                BenchMode::Resume => "resume",
                BenchMode::Keepalive => "keepalive",
            },
            client,
            tls,
            sni: a.peer.server_name(&a.target),
            request: a.request.clone().or_else(|| a.target.path.clone()),
            threads: a.threads,
            connections,
            cpus: a.cpus.clone(),
            duration: match (a.duration, a.count) {
                (None, None) => Some(std::time::Duration::from_secs(10)),
                (d, _) => d,
            },
            count,
            warmup: a.warmup,
            rate: match a.shard {
                Some(shard) => a.rate.map(|r| shard.rate_part(r)),
                None => a.rate,
            },
            schedule_offset: match (a.shard, a.rate) {
                (Some(shard), Some(rate)) => shard.schedule_offset(rate),
                _ => std::time::Duration::ZERO,
            },
            shard: a.shard,
            start_at: a.start_at.clone(),
            timeout: a.timeout,
            source_ips: a.source_ips,
            server_pid: a.server_pid,
            metrics_listen: a.metrics.metrics_listen,
            metrics_file: a.metrics.file().map(PathBuf::from),
            outputs: Outputs {
                json: a.json.clone(),
                csv: a.csv.clone(),
                html: a.html.clone(),
                text,
            },
        })
    }

    /// This run's connections: all of --connections, or a shard's part of them (at least
    /// one, and one per thread).
    fn shard_connections(&self) -> anyhow::Result<usize> {
        let a = self;
        let Some(shard) = a.shard else {
            return Ok(a.connections);
        };
        let part = shard.part(a.connections as u64) as usize;
        if part == 0 {
            crate::usage_bail!(
                "--shard {shard}: --connections {} leaves this shard none; give each of the {} shards one (-c {} or more)",
                a.connections,
                shard.count,
                shard.count
            );
        }
        if part < a.threads {
            crate::usage_bail!(
                "--shard {shard}: this shard's part of --connections {} is {part}, fewer than --threads {}: each thread needs a connection (-c {} or more, or fewer threads)",
                a.connections,
                a.threads,
                a.threads * shard.count
            );
        }
        Ok(part)
    }

    /// This run's operation count: all of -n, or a shard's part of it (at least one).
    fn shard_count(&self) -> anyhow::Result<Option<u64>> {
        let a = self;
        match (a.shard, a.count) {
            (Some(shard), Some(total)) => {
                let part = shard.part(total);
                if part == 0 {
                    crate::usage_bail!(
                        "--shard {shard}: --count {total} leaves this shard no operation; give each of the {} shards one (-n {} or more)",
                        shard.count,
                        shard.count
                    );
                }
                Ok(Some(part))
            }
            (_, count) => Ok(count),
        }
    }

    /// The load mode, once the options that go together are checked; `connections`: this
    /// run's (a shard's part).
    fn load_mode(&self, connections: usize) -> anyhow::Result<load::Mode> {
        let a = self;
        if a.mode != BenchMode::Resume && (a.resume.is_some() || a.resume_ratio.is_some()) {
            crate::usage_bail!("--resume-by and --resume-ratio go with --mode resume");
        }
        if connections < a.threads {
            crate::usage_bail!(
                "--connections {} is fewer than --threads {}: each thread needs a connection",
                a.connections,
                a.threads
            );
        }
        if a.rate.is_some() && a.duration.is_none() && a.count.is_none() {
            crate::usage_bail!("--rate needs a --duration or a --count to end the run");
        }
        if let Some(path) = &a.request {
            if !path.starts_with('/') {
                crate::usage_bail!("--request {path}: the path must start with /");
            }
        }
        crate::common::wording::check_cpus("--cpus", &a.cpus)
            .map_err(crate::common::usage::UsageError)?;
        Ok(match a.mode {
            BenchMode::Full => load::Mode::Full,
            BenchMode::Keepalive => load::Mode::KeepAlive,
            BenchMode::Resume => load::Mode::Resume {
                by: match a.resume.unwrap_or(ResumeKind::Ticket) {
                    ResumeKind::Ticket => load::ResumeBy::Ticket,
                    ResumeKind::Id => load::ResumeBy::SessionId,
                },
                ratio: a.resume_ratio.unwrap_or(1.0),
            },
        })
    }

    /// The client engine: rustls unless OpenSSL was asked for (by --client-engine or by
    /// naming one with --openssl); the rustls-only options refused with an OpenSSL client.
    fn client(&self, openssl_named: bool) -> anyhow::Result<ClientChoice> {
        let a = self;
        match (a.client_engine, openssl_named) {
            (Some(ClientEngine::Openssl), _) | (None, true) if a.rustls_provider.is_some() => anyhow::bail!(
                "--rustls-provider: the client is OpenSSL (--openssl or --client-engine openssl); drop one of them"
            ),
            (Some(ClientEngine::Openssl), _) | (None, true) if a.client_work.is_some() => anyhow::bail!(
                "--client-work: only the rustls client has a lean form, and the client is OpenSSL (--openssl or --client-engine openssl); drop --client-work"
            ),
            (Some(ClientEngine::Openssl), _) | (None, true) => Ok(ClientChoice::Openssl),
            (Some(ClientEngine::Rustls), true) => anyhow::bail!(
                "--client-engine rustls and --openssl: --openssl chooses an OpenSSL client; give one of them"
            ),
            (engine, false) => Ok(ClientChoice::Rustls {
                provider: a.rustls_provider.map(|p| p.typed()),
                work: ClientWork::resolve(a.client_work, a.peer.verifies()),
                if_refused: match engine {
                    Some(_) => IfRustlsRefused::FailNamed,
                    None if a.rustls_provider.is_none() && a.client_work.is_none() => {
                        IfRustlsRefused::FallBack
                    }
                    None => IfRustlsRefused::Fail,
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `tlsscope bench`'s options alone, parsed as the command line would.
    #[derive(Parser)]
    struct BenchOnly {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn config(argv: &[&str], library: &ossl::LibrarySource) -> anyhow::Result<BenchConfig> {
        let mut all = vec!["bench"];
        all.extend_from_slice(argv);
        BenchOnly::try_parse_from(all)
            .unwrap()
            .bench
            .config(library)
    }

    fn named() -> ossl::LibrarySource {
        ossl::LibrarySource::Dir("/opt/openssl".into())
    }

    #[test]
    fn the_client_is_rustls_by_default_and_openssl_where_one_is_named() {
        let system = ossl::LibrarySource::System;
        let c = config(&[], &system).unwrap();
        assert!(matches!(
            c.client,
            ClientChoice::Rustls {
                if_refused: IfRustlsRefused::FallBack,
                work: load::rustls_client::Work::Lean,
                ..
            }
        ));
        assert_eq!(config(&[], &named()).unwrap().client, ClientChoice::Openssl);
        let c = config(&["--client-engine", "openssl"], &system).unwrap();
        assert_eq!(c.client, ClientChoice::Openssl);
        let c = config(&["--client-engine", "rustls", "--verify"], &system).unwrap();
        assert!(matches!(
            c.client,
            ClientChoice::Rustls {
                if_refused: IfRustlsRefused::FailNamed,
                work: load::rustls_client::Work::Full,
                ..
            }
        ));
        let c = config(&["--rustls-provider", "ring"], &system).unwrap();
        assert!(matches!(
            c.client,
            ClientChoice::Rustls {
                if_refused: IfRustlsRefused::Fail,
                provider: Some(load::rustls_client::Provider::Ring),
                ..
            }
        ));
        let why = config(&["--client-engine", "rustls"], &named()).unwrap_err();
        assert!(why
            .to_string()
            .starts_with("--client-engine rustls and --openssl"));
        let why = config(&["--client-work", "lean"], &named()).unwrap_err();
        assert!(why.to_string().starts_with("--client-work: "), "{why}");
    }

    #[test]
    fn a_run_measures_ten_seconds_unless_counted_and_takes_the_targets_path() {
        let system = ossl::LibrarySource::System;
        let c = config(&["https://127.0.0.1:4433/index.html"], &system).unwrap();
        assert_eq!(c.duration, Some(std::time::Duration::from_secs(10)));
        assert_eq!(c.request.as_deref(), Some("/index.html"));
        assert!(c.outputs.text);
        let c = config(&["-n", "5", "--request", "/a", "--json", "-"], &system).unwrap();
        assert_eq!((c.duration, c.count), (None, Some(5)));
        assert_eq!(c.request.as_deref(), Some("/a"));
        assert!(!c.outputs.text);
        let c = config(&["--mode", "resume", "--resume-by", "id"], &system).unwrap();
        assert!(!c.tls.tickets && !c.tls.settings.tickets);
    }

    #[test]
    fn a_shard_runs_its_part_of_connections_count_and_rate() {
        let system = ossl::LibrarySource::System;
        let parts = |i: &str| {
            let c = config(
                &["--shard", i, "-c", "10", "-n", "1000", "--rate", "301"],
                &system,
            )
            .unwrap();
            (c.connections, c.count, c.rate, c.schedule_offset)
        };
        let all: Vec<_> = ["0/3", "1/3", "2/3"].into_iter().map(parts).collect();
        assert_eq!(all.iter().map(|p| p.0).collect::<Vec<_>>(), [4, 3, 3]);
        assert_eq!(
            all.iter().map(|p| p.1).collect::<Vec<_>>(),
            [Some(334), Some(333), Some(333)]
        );
        assert_eq!(
            all.iter().map(|p| p.2).collect::<Vec<_>>(),
            [Some(101.0), Some(100.0), Some(100.0)]
        );
        assert!(all[0].3.is_zero() && all[2].3 > all[1].3);
        // Threads are left as given; a whole run is untouched.
        let c = config(&["--shard", "1/2", "-c", "8", "-t", "2"], &system).unwrap();
        assert_eq!((c.threads, c.connections), (2, 4));
        let c = config(&["-c", "10", "--rate", "301", "-d", "1"], &system).unwrap();
        assert_eq!((c.connections, c.rate, c.shard), (10, Some(301.0), None));
    }

    #[test]
    fn a_shard_left_without_connections_or_operations_is_refused_in_one_line() {
        let system = ossl::LibrarySource::System;
        let e = config(&["--shard", "3/4", "-c", "3"], &system).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("--shard 3/4: --connections 3 leaves this shard none"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let e = config(&["--shard", "2/3", "-n", "2"], &system).unwrap_err();
        assert!(e.to_string().contains("-n 3 or more"), "{e}");
        let e = config(&["--shard", "1/2", "-c", "3", "-t", "2"], &system).unwrap_err();
        assert!(e.to_string().contains("fewer than --threads 2"), "{e}");
    }
}
