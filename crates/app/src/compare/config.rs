//! `tlsscope compare`'s options, as the command line defines them, and the typed settings made
//! from them once ([`CompareArgs::config`], [`MatrixOptions::config`]): the only part of compare
//! that knows flag names, so every message naming one is worded here.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, ValueEnum};

use crate::common::args::*;
use crate::common::client_args::{ClientEngine, ClientWork};
use crate::common::library::LibraryList;
use crate::common::output::{OutputDir, OutputFile};
use crate::compare::matrix::MatrixConfig;
use crate::compare::saved::{SavedConfig, SavedError};
use crate::compare::session::CompareError;

/// A confidence level, between 0.5 and 1 (exclusive).
/// A percentage from 0 to under 100.
pub(crate) fn parse_percentage(s: &str) -> Result<f64, String> {
    let p = real_number(s)?;
    if !(0.0..100.0).contains(&p) {
        return Err("a percentage from 0 to under 100 (e.g. 1)".into());
    }
    Ok(p)
}

pub(crate) fn parse_level(s: &str) -> Result<f64, String> {
    let l = real_number(s)?;
    if !(l > 0.5 && l < 1.0) {
        return Err("a confidence level between 0.5 and 1 (e.g. 0.95)".into());
    }
    Ok(l)
}

/// Which side's library varies in `compare --matrix`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Client,
    Server,
    Both,
}

impl Side {
    pub fn typed(self) -> crate::compare::matrix::Side {
        match self {
            Side::Client => crate::compare::matrix::Side::Client,
            Side::Server => crate::compare::matrix::Side::Server,
            Side::Both => crate::compare::matrix::Side::Both,
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
    pub fn typed(self) -> Option<crate::compare::worker::Tls> {
        match self {
            TlsChoice::V1_2 => Some(crate::compare::worker::Tls::V1_2),
            TlsChoice::V1_3 => Some(crate::compare::worker::Tls::V1_3),
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
    pub fn typed(self) -> crate::compare::matrix::ServerKind {
        match self {
            ServerChoice::Builtin => crate::compare::matrix::ServerKind::Builtin,
            ServerChoice::Nginx => crate::compare::matrix::ServerKind::Nginx,
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
    pub fn typed(self) -> crate::compare::analysis::Baseline {
        match self {
            BaselineChoice::First => crate::compare::analysis::Baseline::First,
            BaselineChoice::SameSettings => crate::compare::analysis::Baseline::SameSettings,
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
    pub fn typed(self) -> crate::compare::worker::ExperimentKind {
        match self {
            ExperimentChoice::Pretransfer => crate::compare::worker::ExperimentKind::Pretransfer,
            ExperimentChoice::Engine => crate::compare::worker::ExperimentKind::Engine,
            ExperimentChoice::Load => crate::compare::worker::ExperimentKind::Load,
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
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the tables as Markdown.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub markdown: Option<OutputFile>,
    /// Write one self-contained HTML page with the tables and plots.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    /// With --matrix: sample each worker's measured operations with perf (DWARF stacks) and
    /// write per variant a flame graph, folded stacks and a pprof file, a differential flame
    /// graph against the first variant, and profile.txt (CPU-us per operation per function,
    /// with the change) into this directory.
    #[arg(long, value_name = "DIR", requires = "matrix", value_parser = crate::common::output::DirParser)]
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
    /// Threads, one variant per count (e.g. 1,2,4): the engine experiment runs that many
    /// threads, one per CPU, sharing one server and one client SSL_CTX; the load experiment
    /// runs the built-in server with that many workers on as many CPUs, loaded by as many
    /// client threads on other CPUs (-c connections each). Each count above 1 is reported with its scaling
    /// efficiency against 1 thread (which is then added). CPUs are handed out one per
    /// physical core first.
    #[arg(long, value_delimiter = ',', default_value = "1", value_name = "LIST", value_parser = at_least_1, allow_negative_numbers = true)]
    pub threads: Vec<usize>,
    /// The load experiment's concurrent connections (a closed loop), each new per handshake.
    #[arg(short = 'c', long, default_value_t = 4, value_parser = at_least_1, allow_negative_numbers = true)]
    pub connections: usize,
    /// What each variant is compared with: first (the first variant with results) or
    /// same-settings (the libraries side by side within each certificate, group, client
    /// and server).
    #[arg(long, value_enum, default_value = "first")]
    pub baseline: BaselineChoice,
}

/// What `compare` runs: saved runs side by side, or the matrix.
// Built once per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum CompareConfig {
    Saved(SavedConfig),
    Matrix(MatrixConfig),
}

impl CompareArgs {
    /// The comparison asked for, checked: at most one output on stdout; saved files or
    /// `--matrix`, not both; the matrix's options (see [`MatrixOptions::config`]), its profile
    /// directory created.
    pub fn config(&self, libraries: &LibraryList) -> anyhow::Result<CompareConfig> {
        crate::common::output::one_on_stdout([&self.json, &self.markdown, &self.html])?;
        if self.matrix {
            if !self.files.is_empty() {
                crate::usage_bail!(
                    "--matrix runs the experiment itself: drop the files, or drop --matrix to compare them"
                );
            }
            let profile = self
                .profile
                .as_ref()
                .map(|d| d.create().map(std::path::Path::to_path_buf))
                .transpose()?;
            return Ok(CompareConfig::Matrix(self.m.config(libraries, profile)?));
        }
        if self.files.len() < 2 {
            crate::usage_bail!(
                "give two or more saved runs to compare (JSON from bench, trace or compare), or --matrix"
            );
        }
        Ok(CompareConfig::Saved(SavedConfig {
            files: self.files.clone(),
            level: self.m.level,
            noise_threshold: self.m.noise_threshold / 100.0,
            environment: crate::common::environment::host(std::env::args().collect()),
            one_run_each_side: ONE_RUN_EACH_SIDE.into(),
        }))
    }
}

/// The warning on two single bench runs compared (the saved-run loader adds it).
const ONE_RUN_EACH_SIDE: &str = "one run on each side: the intervals hold the spread of operations within each run, not from run to run; for a verdict that holds across runs, compare --matrix takes rounds as the replicates";

/// The session's failure as the user reads it: a saved file that is not JSON is one not saved
/// with `--json`.
pub fn word_error(e: CompareError) -> anyhow::Error {
    match e {
        CompareError::Saved(e @ SavedError::NotJson { .. }) => {
            anyhow::anyhow!("{e}; give files saved with --json")
        }
        CompareError::Saved(SavedError::Refused(e)) | CompareError::Matrix(e) => e.into(),
    }
}

impl MatrixOptions {
    /// The matrix, checked and typed: the CPUs exist; the client engines, servers and client
    /// work suit the experiments; the groups parse. `libraries` is `--openssl`'s list (the side
    /// that varies); `profile` the directory `--profile` (or `profile --matrix -o`) writes to.
    pub fn config(
        &self,
        libraries: &LibraryList,
        profile: Option<PathBuf>,
    ) -> anyhow::Result<MatrixConfig> {
        let m = self;
        crate::common::wording::check_cpus("--server-cpu", &[m.server_cpu])
            .map_err(crate::common::usage::UsageError)?;
        crate::common::wording::check_cpus("--client-cpu", &[m.client_cpu])
            .map_err(crate::common::usage::UsageError)?;
        let mut experiments: Vec<_> = m.experiment.iter().map(|e| e.typed()).collect();
        experiments.dedup();
        let load = m.experiment.contains(&ExperimentChoice::Load);
        if m.client_engine.contains(&ClientEngine::Rustls) && !load {
            crate::usage_bail!(
                "--client-engine rustls drives only the load experiment: add --experiment load"
            );
        }
        let through_server = load || m.experiment.contains(&ExperimentChoice::Pretransfer);
        if m.server.contains(&ServerChoice::Nginx) && !through_server {
            crate::usage_bail!(
                "--server nginx serves the pretransfer and load experiments, not engine (no server): add --experiment load or pretransfer"
            );
        }
        let mut servers: Vec<_> = m.server.iter().map(|s| s.typed()).collect();
        servers.dedup();
        let mut client_engines: Vec<_> = m.client_engine.iter().map(|e| e.typed()).collect();
        client_engines.dedup();
        let client_work = match (m.client_work, m.verify.on()) {
            (Some(ClientWork::Lean), true) => crate::usage_bail!(
                "--client-work lean does not check the server's signature, so it cannot verify the server either; add --verify off, or use --client-work full"
            ),
            (Some(ClientWork::Lean), false) if !client_engines.contains(&load::EngineKind::Rustls) => crate::usage_bail!(
                "--client-work lean: only the rustls client has a lean form; add --client-engine rustls, or drop --client-work"
            ),
            (given, verifies) => ClientWork::resolve(given, verifies),
        };
        let side = m.side.typed();
        let mut warnings = Vec::new();
        let mut threads = m.threads.clone();
        // Efficiency is against one thread: it is always measured beside the others.
        if threads.iter().any(|&n| n > 1) && !threads.contains(&1) {
            threads.insert(0, 1);
        }
        threads.sort_unstable();
        threads.dedup();
        if threads.len() > 1 && experiments == [crate::compare::worker::ExperimentKind::Pretransfer]
        {
            crate::usage_bail!(
                "--threads: pretransfer makes one connection at a time; add --experiment engine or load, whose threads it sets"
            );
        }
        if threads.len() > 1
            && experiments.contains(&crate::compare::worker::ExperimentKind::Pretransfer)
        {
            warnings.push(
                "pretransfer makes one connection at a time: it runs at threads=1 only".into(),
            );
        }
        if experiments.contains(&crate::compare::worker::ExperimentKind::Engine)
            && side != crate::compare::matrix::Side::Both
        {
            warnings.push(
                "the in-process engine runs client and server in one process, so both use the variant's library whatever --side says".into(),
            );
        }
        Ok(MatrixConfig {
            exe: std::env::current_exe().context("finding the tlsscope executable")?,
            libraries: libraries.0.clone(),
            fixed: m.fixed_openssl.clone(),
            side,
            cert_types: m.cert_type.clone(),
            tls: m.tls.iter().map(|t| t.typed()).collect(),
            groups: m
                .groups
                .iter()
                .map(|g| {
                    (g != "default")
                        .then(|| {
                            g.parse::<ossl::GroupList>()
                                .map(|_| g.clone())
                                .map_err(|e| anyhow::anyhow!("--groups {g}: {e}"))
                        })
                        .transpose()
                })
                .collect::<anyhow::Result<_>>()?,
            resumed: m
                .resume
                .iter()
                .map(|r| *r == HandshakeChoice::Resumed)
                .collect(),
            ctx_per_connection: m
                .ctx
                .iter()
                .map(|c| *c == CtxChoice::PerConnection)
                .collect(),
            experiments,
            count: m.count,
            repeat: m.repeat,
            warmup: m.warmup,
            verify: m.verify.on(),
            level: m.level,
            noise_threshold: m.noise_threshold / 100.0,
            calibrate_slower_pct: m.calibrate_slower.max(0.0),
            server_cpu: m.server_cpu,
            client_cpu: m.client_cpu,
            environment: crate::common::environment::host(std::env::args().collect()),
            profile,
            servers,
            client_engines,
            client_work,
            connections: m.connections,
            threads,
            cpu_order: host::topology::spread(&host::topology::cpus()),
            baseline: m.baseline.typed(),
            warnings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_confidence_level_lies_between_a_half_and_one() {
        assert!(parse_level("0.5").is_err() && parse_level("1").is_err());
        assert!(parse_level("0.99").is_ok());
        assert!(parse_percentage("100").is_err() && parse_percentage("2.5").is_ok());
    }

    /// The matrix options alone, as `compare` and `profile` flatten them.
    #[derive(Parser)]
    struct Matrix {
        #[command(flatten)]
        m: MatrixOptions,
    }

    fn matrix(args: &[&str]) -> anyhow::Result<MatrixConfig> {
        let parsed = Matrix::try_parse_from(["compare"].iter().chain(args)).unwrap();
        parsed
            .m
            .config(&LibraryList::parse(Some("system, 3.5.5,")), None)
    }

    #[test]
    fn the_openssl_list_drops_empty_items_and_defaults_to_the_system() {
        assert_eq!(
            LibraryList::parse(Some("system, 3.5.5,")).0,
            ["system", "3.5.5"]
        );
        assert_eq!(LibraryList::parse(None).0, ["system"]);
        let c = matrix(&["--server-cpu", "0", "--client-cpu", "0"]).unwrap();
        assert_eq!(c.libraries, ["system", "3.5.5"]);
    }

    #[test]
    fn options_the_experiments_cannot_use_are_refused_naming_the_flags() {
        let cpus = ["--server-cpu", "0", "--client-cpu", "0"];
        for (extra, words) in [
            (&["--client-engine", "rustls"][..], "add --experiment load"),
            (
                &["--server", "nginx", "--experiment", "engine"],
                "--server nginx",
            ),
            (
                &["--experiment", "load", "--client-work", "lean"],
                "add --verify off",
            ),
            (&["--groups", "no-such-group"], "--groups no-such-group"),
        ] {
            let args: Vec<&str> = cpus.iter().chain(extra).copied().collect();
            let e = matrix(&args).err().expect("refused").to_string();
            assert!(e.contains(words), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_engine_warns_that_it_ignores_the_side_unless_both_vary() {
        let cpus = ["--server-cpu", "0", "--client-cpu", "0"];
        let c = matrix(&cpus).unwrap();
        assert!(c
            .warnings
            .iter()
            .any(|w| w.contains("whatever --side says")));
        let both: Vec<&str> = cpus.iter().chain(&["--side", "both"]).copied().collect();
        assert!(matrix(&both).unwrap().warnings.is_empty());
    }

    #[test]
    fn a_saved_file_that_is_not_json_is_said_to_need_json_output() {
        let e = SavedError::NotJson {
            path: "a.txt".into(),
            reason: "expected value".into(),
        };
        let said = word_error(CompareError::Saved(e)).to_string();
        assert_eq!(
            said,
            "a.txt: not JSON (expected value); give files saved with --json"
        );
    }
}
