//! `tlsscope sniff`: attach the sniffer, write each call as it completes, and on every way out
//! (duration, signal, the sniffed processes gone, the output closed or full) detach and say
//! what was captured and what was lost.

pub mod config;
pub mod render;
pub mod session;

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;

use crate::sniff::session::{Format, View, Writer};
use anyhow::Context;
use probes::sniff::SniffConfig;
use probes::{Edge, Selection};

/// The kernel backend's ring buffer unless --ring-size says otherwise.
const KERNEL_RING_BYTES: u32 = 16 << 20;
use crate::render::pcap::PcapWriter;

use crate::common::signals::StopFlags;
use crate::sniff::config::SniffArgs;
use crate::trace::{targets_of, threads_of};

/// How long a command tlsscope started has to exit after SIGTERM when the capture ends.
const CHILD_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Exit status when events were lost (ring buffer full): the capture is not complete.
const EXIT_LOST: u8 = 3;

/// Opens a file for captured plaintext: created with mode 0600 (and kept so if it existed).
/// `flag` names the option in errors.
pub fn create_private(path: &Path, flag: &str) -> anyhow::Result<File> {
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

/// The file the stream goes to (None: stdout): `-o FILE`, or `--json FILE`; the old `--json -o
/// FILE` (JSON into FILE) still means that.
fn stream_file(a: &SniffArgs) -> anyhow::Result<Option<&crate::common::output::OutputFile>> {
    if let (Some(o), Some(j)) = (&a.output, &a.json) {
        if !o.is_stdout() && !j.is_stdout() {
            crate::usage_bail!(
                "--json {} and -o {}: say once where the stream goes (--json FILE for JSON lines)",
                j.path_or_dash().display(),
                o.path_or_dash().display()
            );
        }
    }
    Ok([&a.output, &a.json]
        .into_iter()
        .flatten()
        .find(|f| !f.is_stdout()))
}

pub fn run(a: &SniffArgs) -> anyhow::Result<ExitCode> {
    let targets = if a.command.is_empty() {
        probes::latency::check_can_trace()?;
        targets_of(&a.target, "sniff")?
    } else {
        crate::trace::with_command(&a.target)?;
        Vec::new()
    };
    // Counts only: the probes need not copy any payload (unless the pcap wants it).
    let max_bytes = if a.quiet && a.pcap.is_none() {
        0
    } else {
        a.max_bytes
    };
    let request = crate::sniff::session::Request {
        targets,
        command: &a.command,
        backend: a.backend,
        placement: a.placement,
        selection: Selection::Plaintext {
            handshake: a.handshake,
        },
        config: SniffConfig {
            threads: threads_of(&a.target),
            max_bytes,
            ring_bytes: a.ring_size.unwrap_or(KERNEL_RING_BYTES),
            user_ring_bytes: a
                .ring_size
                .map_or(probes::user::DEFAULT_RING_BYTES, u64::from),
            handshake_records: a.handshake,
        },
    };
    let stream_to = stream_file(a)?;
    let signals = StopFlags::install()?;
    let stop = signals.stop.clone();
    let mut session = crate::sniff::session::start(&request)?;
    // The files once the probes are in: a sniff that cannot start leaves no empty file (the
    // command line checked that they can be made). The output file's size says how much of the
    // stream it holds, whatever the writer thread has left to write when the disk fills.
    let mut measure = None;
    let mut out = match stream_to.and_then(|o| o.path.as_deref().map(|p| (p, &o.flag))) {
        // Past the page cache: a busy server's capture runs at tens of MB/s.
        Some((path, flag)) => {
            let file = create_private(path, flag)?;
            measure = file.try_clone().ok();
            Stream::File(host::DirectFile::new(file))
        }
        None => Stream::Stdout(BufWriter::new(io::stdout())),
    };
    let mut pcap = match a.pcap.as_ref().and_then(|p| p.path.as_deref()) {
        Some(path) => Some(
            PcapWriter::new(BufWriter::new(create_private(path, "--pcap")?))
                .with_context(|| format!("--pcap {}: cannot write", path.display()))?,
        ),
        None => None,
    };
    for note in &session.notes {
        eprintln!("tlsscope sniff: {note}");
    }
    let sniffer = &*session.capture;
    let backend = sniffer.backend();
    eprintln!(
        "tlsscope sniff: {} {} ({}){}; Ctrl-C to stop",
        crate::render::words::count(sniffer.functions().len() as u64, "function"),
        match backend {
            probes::Backend::Kernel => "attached",
            probes::Backend::User => "wrapped in process",
        },
        sniffer.functions().join(", "),
        if session.targets.is_empty() {
            String::new()
        } else {
            format!(
                " in {}, {} backend",
                session.targets.join(", "),
                backend.name()
            )
        }
    );
    if let Some(line) = crate::sniff::session::not_sniffed_line(sniffer.not_attached()) {
        eprintln!("tlsscope sniff: {line}");
    }
    if let Some(note) = sniffer
        .syscall_hooks()
        .and_then(|h| h.note(Edge::Enter, probes::sniff::SYSCALL_ENTERS_EFFECT))
    {
        eprintln!("tlsscope sniff: {note}");
    }

    let mut writer = Writer::new(view(a), &mut out, pcap.as_mut());
    if let Some(file) = measure {
        writer = writer.measured_by(file);
    }
    let watched = crate::trace::session::watched_pids(session.child.as_ref(), &a.target.pids);
    let until = crate::trace::session::Until {
        duration: a.duration,
        pids: &watched,
        stop: &stop,
    };
    let end = crate::sniff::session::capture(sniffer, &mut writer, &until);
    let (window, mut ended_by) = (end.window, end.ended_by);
    let mut failure: Option<anyhow::Error> = end.poll_error.map(Into::into);
    if let Some(e) = &end.write_error {
        ended_by = Some(output_problem(e, a));
        if e.kind() != io::ErrorKind::BrokenPipe {
            failure = Some(anyhow::anyhow!("{}", ended_by.clone().unwrap_or_default()));
        }
    }
    let counters = sniffer.counters();
    if let Some(child) = session.child.as_mut() {
        if let Some(how) = crate::trace::session::end_program(child, CHILD_GRACE) {
            ended_by.get_or_insert(how);
        }
    }
    crate::common::output::detach_noting(session, "sniff");
    let mut flushed = writer.flush();
    let unsettled = writer.into_tally();
    flushed = flushed.and(out.finish());
    let mut tally = unsettled.settle();
    tally.output_failed = end.write_error.is_some();
    if let Some(p) = pcap.as_mut() {
        flushed = flushed.and(p.flush());
    }
    if let (Err(e), None) = (&flushed, &failure) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            failure = Some(anyhow::anyhow!("{}", output_problem(e, a)));
        }
    }
    let counters = counters?;
    let _ = crate::sniff::render::write_summary(
        &mut io::stderr().lock(),
        &tally,
        counters.calls,
        &crate::sniff::session::losses(&counters, None),
        ended_by.as_deref(),
        window,
    );
    if let Some(e) = failure {
        return Err(e);
    }
    if counters.lost_calls > counters.unchecked || tally.incomplete > 0 {
        eprintln!(
            "tlsscope: error: {} lost in part or whole ({} did not fit): use a larger --ring-size",
            crate::render::words::count(counters.lost_calls - counters.unchecked, "call"),
            crate::render::words::count(counters.lost_records, "ring-buffer record")
        );
        return Ok(ExitCode::from(EXIT_LOST));
    }
    if counters.wrapper_failures > 0 {
        eprintln!(
            "tlsscope: error: {} failed and stopped copying their function's calls in that process (the program kept running): later calls were not captured",
            crate::render::words::count(counters.wrapper_failures, "in-process wrapper")
        );
        return Ok(ExitCode::from(EXIT_LOST));
    }
    if counters.unchecked > 0 {
        eprintln!(
            "tlsscope: error: {} NSPR calls not sniffed: whether their file was a TLS socket could not be checked (the process's memory map was being changed)",
            counters.unchecked
        );
        return Ok(ExitCode::from(EXIT_LOST));
    }
    Ok(signals.exit_code(ExitCode::SUCCESS))
}

/// Where the stream goes: a file (`-o`) or standard output.
enum Stream {
    File(host::DirectFile),
    Stdout(BufWriter<io::Stdout>),
}

impl Stream {
    /// Waits until everything written is where it goes, with the first error on the way.
    fn finish(&mut self) -> io::Result<()> {
        match self {
            Stream::File(f) => f.wait(),
            Stream::Stdout(s) => s.flush(),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::File(f) => f.write(data),
            Stream::Stdout(s) => s.write(data),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::File(f) => f.flush(),
            Stream::Stdout(s) => s.flush(),
        }
    }
}

/// What to show, as the options say.
fn view(a: &SniffArgs) -> View {
    View {
        format: if a.quiet {
            Format::Quiet
        } else if a.json.is_some() {
            Format::Json
        } else if a.hex {
            Format::Hex
        } else {
            Format::Text
        },
        grep: a.grep.clone(),
        redact_headers: a.redact_headers,
    }
}

/// Why writing failed, in the words the user needs.
fn output_problem(e: &io::Error, a: &SniffArgs) -> String {
    let target = match stream_file(a) {
        Ok(Some(o)) => o.path_or_dash().display().to_string(),
        _ => "standard output".to_string(),
    };
    match e.kind() {
        io::ErrorKind::BrokenPipe => "output closed".to_string(),
        _ if e.raw_os_error() == Some(libc::ENOSPC) => {
            format!("cannot write to {target}: no space left on the device")
        }
        _ => format!("cannot write to {target}: {e}"),
    }
}
