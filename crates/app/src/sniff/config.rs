//! `tlsscope sniff`'s options, as the command line defines them.

use clap::Args;

use crate::common::args::*;
use crate::common::output::OutputFile;

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
    #[arg(long, value_name = "FILE", conflicts_with = "quiet", value_parser = crate::common::output::file_or_stdout())]
    pub json: Option<OutputFile>,
    /// Write the stream to FILE (created 0600) instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE", value_parser = crate::common::output::file_or_stdout())]
    pub output: Option<OutputFile>,
    /// Also write the plaintext as synthetic TCP streams between the real endpoints to a pcapng
    /// FILE (created 0600), for Wireshark/tshark (decode the TLS port as HTTP:
    /// `tshark -d tcp.port==443,http`).
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
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
    pub backend: crate::trace::session::BackendChoice,
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
pub(crate) fn parse_size(s: &str) -> Result<u32, String> {
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
