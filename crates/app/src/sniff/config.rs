//! `tlsscope sniff`'s options, as the command line defines them ([`SniffArgs`]), and the
//! checked settings made from them once ([`SniffArgs::config`] -> [`Config`]): the only part of
//! the command that knows flag names, so the files the options name are opened here too, and
//! an incomplete capture is worded here.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use probes::sniff::SniffConfig;
use probes::{PlacementMode, Selection};

use crate::common::args::*;
use crate::common::attach_args::AttachTo;
use crate::common::output::OutputFile;
use crate::common::probing::BackendChoice;
use crate::render::pcap::PcapWriter;
use crate::sniff::session::{Format, Incomplete, View};

/// The kernel backend's ring buffer unless --ring-size says otherwise.
const KERNEL_RING_BYTES: u32 = 16 << 20;

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
    /// Write the TLS secrets of a Go program's handshakes to FILE (created 0600) in the NSS key
    /// log format, for Wireshark/tshark to decrypt a capture of the real traffic
    /// (`-o tls.keylog_file:FILE`). Read from Go's own key log hook, whether or not the program
    /// set a KeyLogWriter; Go programs only.
    #[arg(long, value_name = "FILE", value_parser = crate::common::output::file_only())]
    pub keylog: Option<OutputFile>,
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
    pub backend: BackendChoice,
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

/// What `tlsscope sniff` is asked to do, checked.
pub struct Config {
    /// What to attach to: targets, -p's PIDs, the command, the backend.
    pub attach: AttachTo,
    /// Where the kernel backend's probes go.
    pub placement: PlacementMode,
    /// The functions to probe (the data calls, and the handshake's with --handshake).
    pub selection: Selection,
    /// The threads, bytes per call and ring sizes.
    pub probes: SniffConfig,
    pub duration: Option<Duration>,
    /// What to show of each call.
    pub view: View,
    /// The file the stream goes to (-o FILE or --json FILE); None: standard output.
    pub stream: Option<OutputFile>,
    /// The pcapng file (--pcap), if any.
    pub pcap: Option<PathBuf>,
    /// The key log file (--keylog), if any.
    pub keylog: Option<PathBuf>,
}

impl SniffArgs {
    /// Checks the options and makes them the capture's settings: what to attach to (a
    /// process, file or library that is not there is an error here), the probes, the view and
    /// where the stream goes.
    pub fn config(&self) -> anyhow::Result<Config> {
        let attach = self
            .target
            .attach_to(&self.command, self.backend, "sniff")?;
        let stream = self.stream_file()?.cloned();
        // Counts only: the probes need not copy any payload (unless the pcap wants it).
        let max_bytes = if self.quiet && self.pcap.is_none() {
            0
        } else {
            self.max_bytes
        };
        Ok(Config {
            attach,
            placement: self.placement,
            selection: Selection::Plaintext {
                handshake: self.handshake,
            },
            probes: SniffConfig {
                threads: self.target.threads(),
                max_bytes,
                ring_bytes: self.ring_size.unwrap_or(KERNEL_RING_BYTES),
                user_ring_bytes: self
                    .ring_size
                    .map_or(probes::user::DEFAULT_RING_BYTES, u64::from),
                handshake_records: self.handshake,
                key_log: self.keylog.is_some(),
            },
            duration: self.duration,
            view: View {
                format: if self.quiet {
                    Format::Quiet
                } else if self.json.is_some() {
                    Format::Json
                } else if self.hex {
                    Format::Hex
                } else {
                    Format::Text
                },
                grep: self.grep.clone(),
                redact_headers: self.redact_headers,
            },
            stream,
            pcap: self.pcap.as_ref().and_then(|p| p.path.clone()),
            keylog: self.keylog.as_ref().and_then(|p| p.path.clone()),
        })
    }

    /// The file the stream goes to (None: stdout): `-o FILE`, or `--json FILE`; the old
    /// `--json -o FILE` (JSON into FILE) still means that.
    fn stream_file(&self) -> anyhow::Result<Option<&OutputFile>> {
        if let (Some(o), Some(j)) = (&self.output, &self.json) {
            if !o.is_stdout() && !j.is_stdout() {
                crate::usage_bail!(
                    "--json {} and -o {}: say once where the stream goes (--json FILE for JSON lines)",
                    j.path_or_dash().display(),
                    o.path_or_dash().display()
                );
            }
        }
        Ok([&self.output, &self.json]
            .into_iter()
            .flatten()
            .find(|f| !f.is_stdout()))
    }
}

impl Config {
    /// Creates the stream's file, if it goes to one (private: it holds plaintext).
    pub fn create_stream(&self) -> anyhow::Result<Option<File>> {
        self.stream
            .as_ref()
            .and_then(|o| Some((o.path.as_deref()?, &o.flag)))
            .map(|(path, flag)| create_private(path, flag))
            .transpose()
    }

    /// Creates the pcapng file, if one is asked for (private, as the stream).
    pub fn create_pcap(&self) -> anyhow::Result<Option<PcapWriter<BufWriter<File>>>> {
        let Some(path) = &self.pcap else {
            return Ok(None);
        };
        Ok(Some(
            PcapWriter::new(BufWriter::new(create_private(path, "--pcap")?))
                .with_context(|| format!("--pcap {}: cannot write", path.display()))?,
        ))
    }
}

impl Config {
    /// Creates the key log file, if one is asked for (private: it holds the secrets).
    pub fn create_keylog(&self) -> anyhow::Result<Option<BufWriter<File>>> {
        self.keylog
            .as_deref()
            .map(|path| Ok(BufWriter::new(create_private(path, "--keylog")?)))
            .transpose()
    }
}

/// Opens a file for captured plaintext: created with mode 0600 (and kept so if it existed).
/// `flag` names the option in errors.
fn create_private(path: &Path, flag: &str) -> anyhow::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("{flag} {}: cannot create it", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("{flag} {}: cannot make it private (0600)", path.display()))?;
    Ok(f)
}

/// Why a capture is not complete, in the error line the user gets (after "tlsscope: error: ").
pub fn incomplete_message(why: &Incomplete) -> String {
    let count = crate::render::words::count;
    match *why {
        Incomplete::Lost { calls, records } => format!(
            "{} lost in part or whole ({} did not fit): use a larger --ring-size",
            count(calls, "call"),
            count(records, "ring-buffer record")
        ),
        Incomplete::WrapperFailures(n) => format!(
            "{} failed and stopped copying their function's calls in that process (the program kept running): later calls were not captured",
            count(n, "in-process wrapper")
        ),
        Incomplete::Unchecked(n) => format!(
            "{n} NSPR calls not sniffed: whether their file was a TLS socket could not be checked (the process's memory map was being changed)"
        ),
        Incomplete::LostKeys(n) => format!(
            "{} did not fit their ring buffer: the key log misses those secrets",
            count(n, "key log line")
        ),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        args: SniffArgs,
    }

    /// `tlsscope sniff ARGS`, with a command after `--` (no root needed).
    fn config(argv: &[&str]) -> anyhow::Result<Config> {
        let line = Line::try_parse_from(std::iter::once("sniff").chain(argv.iter().copied()))
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        line.args.config()
    }

    #[test]
    fn quiet_copies_no_payload_unless_the_pcap_wants_it() {
        let c = config(&["-q", "--", "true"]).unwrap();
        assert_eq!(c.view.format, Format::Quiet);
        assert_eq!(c.probes.max_bytes, 0);
        let pcap = std::env::temp_dir().join("tlsscope-unit-test.pcapng");
        let c = config(&["-q", "--pcap", pcap.to_str().unwrap(), "--", "true"]).unwrap();
        assert_eq!(c.probes.max_bytes, 16384);
        assert_eq!(c.pcap.as_deref(), Some(pcap.as_path()));
        assert!(!pcap.exists(), "the config creates no file");
    }

    #[test]
    fn the_stream_goes_to_one_file_named_once() {
        let dir = std::env::temp_dir();
        let (a, b) = (
            dir.join("tlsscope-unit-a.jsonl"),
            dir.join("tlsscope-unit-b.txt"),
        );
        let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
        let c = config(&["--json", a, "--", "true"]).unwrap();
        assert_eq!(c.view.format, Format::Json);
        assert_eq!(c.stream.unwrap().path_or_dash(), Path::new(a));
        // The old spelling: JSON lines into -o's file.
        let c = config(&["--json", "-", "-o", b, "--", "true"]).unwrap();
        assert_eq!(c.stream.unwrap().path_or_dash(), Path::new(b));
        let e = config(&["--json", a, "-o", b, "--", "true"]).err().unwrap();
        assert!(e
            .downcast_ref::<crate::common::usage::UsageError>()
            .is_some());
        assert_eq!(
            e.to_string(),
            format!("--json {a} and -o {b}: say once where the stream goes (--json FILE for JSON lines)")
        );
        assert!(config(&["--hex", "--", "true"]).unwrap().stream.is_none());
    }

    #[test]
    fn an_incomplete_capture_is_worded_with_the_option_that_helps() {
        assert_eq!(
            incomplete_message(&Incomplete::Lost {
                calls: 3,
                records: 1
            }),
            "3 calls lost in part or whole (1 ring-buffer record did not fit): use a larger --ring-size"
        );
        assert!(incomplete_message(&Incomplete::WrapperFailures(1))
            .starts_with("1 in-process wrapper failed"));
        assert!(
            incomplete_message(&Incomplete::Unchecked(2)).starts_with("2 NSPR calls not sniffed")
        );
    }
}
