//! `tlsscope trace`'s options, as the command line defines them ([`TraceArgs`]), and the
//! checked settings made from them once ([`TraceArgs::config`] -> [`Config`]): the only part of
//! the command that knows flag names.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use probes::{Buckets, PlacementMode, Selection};

use crate::common::args::*;
use crate::common::attach_args::AttachTo;
use crate::common::output::OutputFile;
use crate::common::probing::BackendChoice;

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
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the results as one self-contained HTML page: the stats, a histogram per function
    /// and outcome, and with -i the calls and time per interval.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub html: Option<OutputFile>,
    /// Who counts the calls: kernel (eBPF uprobes, any running process, internal functions
    /// too), user (tlsscope's library inside the program, tens of nanoseconds per call: a
    /// program it starts after --, or running processes with -p and their workers, attached
    /// with ptrace), or auto (user for a command, and for -p when it covers every function
    /// asked for and the processes let it in; kernel otherwise).
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    pub backend: BackendChoice,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// A program to start and trace, with its arguments (after --); the trace ends when it
    /// exits, and ending the trace ends it (SIGTERM).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

/// What `tlsscope trace` is asked to do, checked.
pub struct Config {
    /// What to attach to: targets, -p's PIDs, the command, the backend.
    pub attach: AttachTo,
    /// The functions to probe (--probes, --functions, --exact-outcomes).
    pub selection: Selection,
    /// The threads, buckets, per-process split and --attach-all.
    pub probes: probes::TraceConfig,
    /// Where the kernel backend's probes go.
    pub placement: PlacementMode,
    pub duration: Option<Duration>,
    /// How often the last interval's table is printed (-i).
    pub interval: Option<Duration>,
    pub metrics_listen: Option<SocketAddr>,
    pub metrics_file: Option<PathBuf>,
    /// Whether the intervals are kept for the report (the HTML page plots them).
    pub keep_intervals: bool,
    /// The text report (and the interval tables) on stdout: no --json or --html is `-`.
    pub text_to_stdout: bool,
    /// Histograms in the text report (not --no-histograms).
    pub histograms: bool,
    pub json: Option<OutputFile>,
    pub html: Option<OutputFile>,
}

impl TraceArgs {
    /// Checks the options and makes them the trace's settings: what to attach to (a process,
    /// file or library that is not there is an error here), the probes, the outputs.
    pub fn config(&self) -> anyhow::Result<Config> {
        let text_to_stdout = !crate::common::output::one_on_stdout([&self.json, &self.html])?;
        let attach = self
            .target
            .attach_to(&self.command, self.backend, "trace")?;
        anyhow::ensure!(
            attach.command.is_empty() || !self.attach_all,
            "--attach-all attaches in every process: a command (after --) is traced in its own processes only; leave one out"
        );
        Ok(Config {
            attach,
            selection: Selection::Latency {
                groups: self.probes,
                only: self.functions.clone(),
                exact: self.exact_outcomes,
            },
            probes: probes::TraceConfig {
                threads: self.target.threads(),
                buckets: self.linear.unwrap_or(Buckets::Log2),
                per_pid: self.per_pid,
                attach_all: self.attach_all,
            },
            placement: self.placement,
            duration: self.duration,
            interval: self.interval,
            metrics_listen: self.metrics.metrics_listen,
            metrics_file: self.metrics.file().map(PathBuf::from),
            keep_intervals: self.html.is_some(),
            text_to_stdout,
            histograms: !self.no_histograms,
            json: self.json.clone(),
            html: self.html.clone(),
        })
    }
}

pub(crate) fn parse_groups(s: &str) -> Result<probes::Groups, String> {
    s.parse()
}

pub(crate) fn parse_linear(s: &str) -> Result<probes::Buckets, String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        args: TraceArgs,
    }

    /// `tlsscope trace ARGS`: a command after `--` keeps these tests from needing root (the
    /// check that the kernel lets tlsscope trace is for running processes).
    fn config(argv: &[&str]) -> anyhow::Result<Config> {
        let line = Line::try_parse_from(std::iter::once("trace").chain(argv.iter().copied()))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        line.args.config()
    }

    fn refused(argv: &[&str]) -> String {
        match config(argv) {
            Ok(_) => panic!("{argv:?} is accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_command_s_options_become_its_config() {
        let c = config(&["-i", "2s", "--json", "-", "--per-pid", "--", "true", "x"]).unwrap();
        assert_eq!(c.attach.command, ["true", "x"]);
        assert!(c.attach.targets.is_empty());
        assert_eq!(c.interval, Some(Duration::from_secs(2)));
        // The JSON holds stdout: the text report and the intervals go elsewhere.
        assert!(!c.text_to_stdout && !c.keep_intervals && c.histograms);
        assert!(c.probes.per_pid && !c.probes.attach_all);
        assert_eq!(c.probes.buckets, Buckets::Log2);
        assert_eq!(c.attach.backend, BackendChoice::Auto);
        let c = config(&["--linear", "0,1000,200", "--no-histograms", "--", "true"]).unwrap();
        assert!(c.text_to_stdout && !c.histograms);
        assert!(matches!(
            c.probes.buckets,
            Buckets::Linear { step_us: 200, .. }
        ));
    }

    #[test]
    fn options_a_command_gives_no_meaning_are_refused_naming_them() {
        assert_eq!(
            refused(&["--attach-all", "--", "true"]),
            "--attach-all attaches in every process: a command (after --) is traced in its own processes only; leave one out"
        );
        assert_eq!(
            refused(&["--lib", "/x.so", "--", "true"]),
            "--binary and --lib name what to attach to: a command (after --) is its own target; leave one out"
        );
        assert_eq!(
            refused(&["--backend", "kernel", "--", "true"]),
            "--backend kernel traces running processes: start the program, then tlsscope trace -p PID (or leave --backend out to trace the command in process)"
        );
    }

    #[test]
    fn two_outputs_on_stdout_are_a_usage_error() {
        let e = config(&["--json", "-", "--html", "-", "--", "true"])
            .err()
            .unwrap();
        assert!(e
            .downcast_ref::<crate::common::usage::UsageError>()
            .is_some());
        assert!(e.to_string().contains("--json and --html"), "{e}");
    }
}
