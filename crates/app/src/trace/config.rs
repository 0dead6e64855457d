//! `tlsscope trace`'s options, as the command line defines them.

use clap::Args;

use crate::common::args::*;
use crate::common::output::OutputFile;

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
    pub backend: crate::trace::session::BackendChoice,
    #[command(flatten)]
    pub metrics: MetricsArgs,
    /// A program to start and trace, with its arguments (after --); the trace ends when it
    /// exits, and ending the trace ends it (SIGTERM).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
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
