//! `tlsscope lab`'s options, as the command line defines them, and the typed settings made
//! from them once ([`LabArgs::config`]): the only part of lab that knows flag names, so the
//! messages naming one are worded here.

use anyhow::{bail, Context as _};
use clap::{Args, ValueEnum};

use crate::common::args::*;
use crate::common::output::OutputFile;
use crate::lab::session::{self, LabBackend, LabConfig, Skip};

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
    pub backend: crate::common::probing::BackendChoice,
    /// Also write the report as one self-contained HTML page: rates and the cost of tracing,
    /// where the server's time goes, and per experiment the handshakes, CPU, latency and the
    /// server's traced calls as histograms.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub html: Option<OutputFile>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LabTarget {
    Builtin,
    Nginx,
}

impl LabArgs {
    /// The lab asked for, checked: the CPUs exist and differ, and a backend traces. `library`
    /// is the resolved `--openssl`, which the built-in server is started on.
    pub fn config(&self, library: &ossl::LibrarySource) -> anyhow::Result<LabConfig> {
        crate::common::wording::check_cpus("--server-cpu", &[self.server_cpu])
            .map_err(crate::common::usage::UsageError)?;
        crate::common::wording::check_cpus("--client-cpu", &[self.client_cpu])
            .map_err(crate::common::usage::UsageError)?;
        let backends = LabBackend::chosen(self.backend);
        if backends.is_empty() {
            bail!("the lab needs a backend to trace with: --backend kernel, user or auto");
        }
        if self.server_cpu == self.client_cpu {
            bail!("--server-cpu and --client-cpu must differ, or the client's CPU use is the server's");
        }
        Ok(LabConfig {
            target: match self.target {
                LabTarget::Builtin => session::LabTarget::Builtin,
                LabTarget::Nginx => session::LabTarget::Nginx,
            },
            exe: std::env::current_exe().context("finding the tlsscope executable")?,
            openssl: crate::common::library::child_arg(library),
            duration: self.duration,
            trace_duration: self.trace_duration,
            warmup: self.warmup,
            connections: self.connections,
            server_cpu: self.server_cpu,
            client_cpu: self.client_cpu,
            backends,
        })
    }
}

/// Why an experiment is not run, as the report says it.
pub fn word_skip(skip: &Skip) -> String {
    match skip {
        Skip::BuiltinOnly => "the built-in server only".to_string(),
        Skip::NoEngine { engine, dir } => format!(
            "{engine} is not in {dir}: give --openssl with a version built by `tlsscope \
             openssl build` (1.1.1w: its dasync pauses every RSA operation)"
        ),
    }
}

/// The report's note on catalog functions the kernel backend could not trace in the library.
pub fn not_traced_note(functions: &[&str]) -> String {
    format!(
        "not traced in this library: {} (internal functions need a library with its symbol table, e.g. --openssl 1.1.1w)",
        functions.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Lab {
        #[command(flatten)]
        a: LabArgs,
    }

    fn lab(args: &[&str]) -> anyhow::Result<LabConfig> {
        let parsed = Lab::try_parse_from(["lab"].iter().chain(args)).unwrap();
        parsed.a.config(&ossl::LibrarySource::System)
    }

    #[test]
    fn one_cpu_for_server_and_load_is_refused_naming_both_flags() {
        let e = lab(&["--server-cpu", "0", "--client-cpu", "0"])
            .err()
            .expect("refused")
            .to_string();
        assert_eq!(
            e,
            "--server-cpu and --client-cpu must differ, or the client's CPU use is the server's"
        );
        let e = lab(&["--server-cpu", "100000"]).err().expect("refused");
        assert!(e
            .downcast_ref::<crate::common::usage::UsageError>()
            .is_some());
        assert!(e.to_string().contains("--server-cpu"), "{e}");
    }

    #[test]
    fn skips_are_worded_with_the_flag_that_mends_them() {
        let why = word_skip(&Skip::NoEngine {
            engine: "dasync",
            dir: "/x/engines-3".into(),
        });
        assert!(
            why.starts_with("dasync is not in /x/engines-3: give --openssl with a version built"),
            "{why}"
        );
        assert_eq!(word_skip(&Skip::BuiltinOnly), "the built-in server only");
    }
}
