//! `tlsscope sniff`: attach the sniffer, write each call as it completes, and on every way out
//! (duration, signal, the sniffed processes gone, the output closed or full) detach and say
//! what was captured and what was lost.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use std::time::{Duration, Instant};

use anyhow::Context;
use probes::sniff::{Assembler, Call, SniffConfig, SniffPlan, Sniffer};
use probes::Edge;
use report::pcap::PcapWriter;
use report::sniff::{redact_headers, write_hex, write_json, write_text, Record};

use crate::args::SniffArgs;
use crate::signals::StopFlags;
use crate::sockets;
use crate::trace_cmd::targets_of;
use experiments::trace::alive;

/// Exit status when events were lost (ring buffer full): the capture is not complete.
const EXIT_LOST: u8 = 3;

/// Counts for the summary.
#[derive(Default)]
struct Tally {
    calls: u64,
    shown: u64,
    reads: u64,
    writes: u64,
    bytes: u64,
    cut_calls: u64,
    cut_bytes: u64,
    incomplete: u64,
    failed_calls: u64,
}

/// Opens a file for captured plaintext: created with mode 0600 (and kept so if it existed).
pub fn create_private(path: &Path) -> anyhow::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("making {} private (0600)", path.display()))?;
    Ok(f)
}

pub fn run(a: &SniffArgs) -> anyhow::Result<ExitCode> {
    probes::latency::check_can_trace()?;
    let targets = targets_of(&a.target, "sniff")?;
    anyhow::ensure!(a.max_bytes > 0, "--max-bytes must be at least 1");
    let plan = SniffPlan::new(&targets, a.handshake)?;
    // Counts only: the probes need not copy any payload (unless the pcap wants it).
    let max_bytes = if a.quiet && a.pcap.is_none() {
        0
    } else {
        a.max_bytes
    };
    let config = SniffConfig {
        pids: a.target.pids.clone(),
        comm: a.target.comm.clone(),
        max_bytes,
        ring_bytes: a.ring_size,
        handshake: a.handshake,
    };
    let signals = StopFlags::install()?;
    let stop = signals.stop.clone();
    let mut out: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(BufWriter::new(create_private(path)?)),
        None => Box::new(BufWriter::new(io::stdout())),
    };
    let mut pcap = match &a.pcap {
        Some(path) => Some(
            PcapWriter::new(BufWriter::new(create_private(path)?))
                .with_context(|| format!("writing {}", path.display()))?,
        ),
        None => None,
    };
    let clock = Clock::now();
    let sniffer = Sniffer::start(&config, &plan)?;
    eprintln!(
        "tlsscope sniff: {} functions attached ({}); Ctrl-C to stop",
        sniffer.attached().len(),
        sniffer
            .attached()
            .iter()
            .map(|p| p.function)
            .collect::<Vec<_>>()
            .join(", ")
    );
    for m in sniffer.not_attached() {
        eprintln!(
            "tlsscope sniff: not sniffed: {} in {}: {}",
            m.function,
            m.path.display(),
            m.reason
        );
    }
    if let Some(note) = sniffer
        .syscall_hooks()
        .note(Edge::Enter, probes::sniff::SYSCALL_ENTERS_EFFECT)
    {
        eprintln!("tlsscope sniff: {note}");
    }

    let started = Instant::now();
    let mut assembler = Assembler::default();
    let mut tally = Tally::default();
    let mut endpoints: HashMap<(u32, i32), Option<(SocketAddr, SocketAddr)>> = HashMap::new();
    let mut sinks = Sinks {
        out: &mut *out,
        pcap: pcap.as_mut(),
        clock,
    };
    let mut ended_by: Option<String> = None;
    let mut lost_reported = probes::sniff::SniffCounters::default();
    let mut failure: Option<anyhow::Error> = None;
    loop {
        let calls = match sniffer.poll(Duration::from_millis(20), &mut assembler) {
            Ok(calls) => calls,
            Err(e) => {
                failure = Some(e.into());
                break;
            }
        };
        let mut wrote = !calls.is_empty();
        let mut result = Ok(());
        // Losses go into the stream where they happened, not only into the summary.
        if let Ok(now) = sniffer.counters() {
            if now.lost_calls > lost_reported.lost_calls {
                result = lost_line(a, sinks.out, &now, &lost_reported);
                lost_reported = now;
                wrote = true;
            }
        }
        for call in calls {
            if result.is_err() {
                break;
            }
            result = emit(a, &mut sinks, &call, &mut tally, &mut endpoints);
        }
        // Each batch reaches the reader now (and a closed pipe shows up now, not at exit).
        let written = result.and_then(|()| if wrote { sinks.out.flush() } else { Ok(()) });
        if let Err(e) = written {
            ended_by = Some(output_problem(&e, a));
            if e.kind() != io::ErrorKind::BrokenPipe {
                failure = Some(anyhow::anyhow!("{}", ended_by.clone().unwrap_or_default()));
            }
            break;
        }
        if stop.load(Ordering::Relaxed) {
            ended_by = Some("signal".into());
            break;
        }
        if a.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if !a.target.pids.is_empty() && a.target.pids.iter().all(|&p| !alive(p)) {
            ended_by = Some("the sniffed process exited".into());
            break;
        }
    }
    let window = started.elapsed();
    // What is already in the ring buffer still counts; then detach before anything slow.
    if failure.is_none() && ended_by.as_deref() != Some("output closed") {
        if let Ok(calls) = sniffer.poll(Duration::ZERO, &mut assembler) {
            for call in calls.into_iter().chain(assembler.finish()) {
                if emit(a, &mut sinks, &call, &mut tally, &mut endpoints).is_err() {
                    break;
                }
            }
        }
    }
    let counters = sniffer.counters();
    drop(sniffer);
    let mut flushed = out.flush();
    if let Some(p) = pcap.as_mut() {
        flushed = flushed.and(p.flush());
    }
    if let (Err(e), None) = (&flushed, &failure) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            failure = Some(anyhow::anyhow!("{}", output_problem(e, a)));
        }
    }
    let counters = counters?;
    summary(&tally, &counters, ended_by.as_deref(), window);
    if let Some(e) = failure {
        return Err(e);
    }
    if counters.lost_calls > counters.unchecked || tally.incomplete > 0 {
        eprintln!(
            "tlsscope: error: {} calls lost in part or whole ({} ring-buffer records did not fit): use a larger --ring-size",
            counters.lost_calls - counters.unchecked,
            counters.lost_records
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

/// A stream line saying how many more calls the ring buffer lost since the last such line.
fn lost_line(
    a: &SniffArgs,
    out: &mut dyn Write,
    now: &probes::sniff::SniffCounters,
    before: &probes::sniff::SniffCounters,
) -> io::Result<()> {
    let (calls, records) = (
        now.lost_calls - before.lost_calls,
        now.lost_records - before.lost_records,
    );
    let unchecked = now.unchecked - before.unchecked;
    if a.json {
        writeln!(
            out,
            "{{\"lost_calls\":{calls},\"lost_records\":{records},\"unchecked_calls\":{unchecked}}}"
        )
    } else if a.quiet {
        Ok(())
    } else if unchecked == calls {
        writeln!(
            out,
            "*** lost {calls} NSPR calls: whether their file was a TLS socket could not be checked"
        )
    } else {
        writeln!(
            out,
            "*** lost {calls} calls ({records} records, {unchecked} unchecked NSPR calls): the ring buffer was full; use a larger --ring-size"
        )
    }
}

/// Why writing failed, in the words the user needs.
fn output_problem(e: &io::Error, a: &SniffArgs) -> String {
    let target = a.output.as_ref().map_or_else(
        || "standard output".to_string(),
        |p| p.display().to_string(),
    );
    match e.kind() {
        io::ErrorKind::BrokenPipe => "output closed".to_string(),
        _ if e.raw_os_error() == Some(libc::ENOSPC) => {
            format!("cannot write to {target}: no space left on the device")
        }
        _ => format!("cannot write to {target}: {e}"),
    }
}

/// Converts the probes' CLOCK_MONOTONIC times to wall-clock time for the pcap.
#[derive(Clone, Copy)]
struct Clock {
    realtime_minus_monotonic_ns: i128,
}

impl Clock {
    fn now() -> Clock {
        let read = |id| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given; both clocks exist on Linux.
            unsafe { libc::clock_gettime(id, &mut ts) };
            i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
        };
        Clock {
            realtime_minus_monotonic_ns: read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC),
        }
    }

    fn wall_us(&self, monotonic_ns: u64) -> u64 {
        let ns = i128::from(monotonic_ns) + self.realtime_minus_monotonic_ns;
        u64::try_from(ns / 1000).unwrap_or(0)
    }
}

/// Where calls go: the stream, and the pcap file when asked for.
struct Sinks<'a> {
    out: &'a mut dyn Write,
    pcap: Option<&'a mut PcapWriter<BufWriter<File>>>,
    clock: Clock,
}

/// Filters, resolves and writes one call.
fn emit(
    a: &SniffArgs,
    sinks: &mut Sinks<'_>,
    call: &Call,
    tally: &mut Tally,
    endpoints: &mut HashMap<(u32, i32), Option<(SocketAddr, SocketAddr)>>,
) -> io::Result<()> {
    tally.calls += 1;
    if call.incomplete {
        tally.incomplete += 1;
    }
    if call.uncaptured_bytes > 0 && !(a.quiet && a.pcap.is_none()) {
        tally.cut_calls += 1;
        tally.cut_bytes += call.uncaptured_bytes;
    }
    if call.total_bytes == 0 && call.direction != probes::sniff::Direction::Handshake {
        tally.failed_calls += 1;
    }
    if let Some(pattern) = &a.grep {
        if !contains(&call.data, pattern.as_bytes()) {
            return Ok(());
        }
    }
    tally.shown += 1;
    match call.direction {
        probes::sniff::Direction::Read => tally.reads += 1,
        probes::sniff::Direction::Write => tally.writes += 1,
        probes::sniff::Direction::Handshake => {}
    }
    tally.bytes += call.total_bytes;
    if a.quiet && sinks.pcap.is_none() {
        return Ok(());
    }
    // The kernel's view, taken during the call; else /proc, while the socket is still open.
    let ends = call.endpoints.or_else(|| {
        call.fd.and_then(|fd| {
            *endpoints
                .entry((call.pid, fd))
                .or_insert_with(|| sockets::endpoints(call.pid, fd))
        })
    });
    if let Some(pcap) = sinks.pcap.as_deref_mut() {
        let sent = match call.direction {
            probes::sniff::Direction::Write => Some(true),
            probes::sniff::Direction::Read => Some(false),
            probes::sniff::Direction::Handshake => None,
        };
        match (ends, sent) {
            (Some((local, peer)), Some(sent)) if !call.data.is_empty() => pcap.add(
                call.pid,
                local,
                peer,
                sinks.clock.wall_us(call.start_ns),
                sent,
                &call.data,
                call.uncaptured_bytes,
            )?,
            (None, Some(_)) if !call.data.is_empty() => pcap.skipped_calls += 1,
            _ => {}
        }
    }
    if a.quiet {
        return Ok(());
    }
    let redacted;
    let data: &[u8] = if a.redact_headers {
        redacted = redact_headers(&call.data);
        &redacted
    } else {
        &call.data
    };
    let record = Record {
        start_ns: call.start_ns,
        latency_ns: call.latency_ns,
        pid: call.pid,
        tid: call.tid,
        comm: &call.comm,
        fd: call.fd,
        fd_from_earlier_call: call.fd_from_earlier_call,
        local: ends.map(|e| e.0),
        peer: ends.map(|e| e.1),
        function: call.function,
        direction: call.direction.name(),
        ret: call.ret,
        total_bytes: call.total_bytes,
        uncaptured_bytes: call.uncaptured_bytes,
        incomplete: call.incomplete,
        data,
    };
    if a.json {
        write_json(sinks.out, &record)
    } else if a.hex {
        write_hex(sinks.out, &record)
    } else {
        write_text(sinks.out, &record)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

fn summary(t: &Tally, c: &probes::sniff::SniffCounters, ended_by: Option<&str>, took: Duration) {
    let why = ended_by.map(|w| format!(" ({w})")).unwrap_or_default();
    eprintln!(
        "tlsscope sniff: stopped after {:.1} s{why}: {} calls seen by the probes, {} received; {} shown ({} reads, {} writes, {} bytes)",
        took.as_secs_f64(),
        c.calls,
        t.calls,
        t.shown,
        t.reads,
        t.writes,
        t.bytes
    );
    eprintln!(
        "tlsscope sniff: cut at --max-bytes: {} calls ({} bytes not captured); calls that moved no data (failed or would block): {}; lost (ring buffer full): {} calls, {} records",
        t.cut_calls, t.cut_bytes, t.failed_calls, c.lost_calls - c.unchecked, c.lost_records
    );
    if c.unchecked > 0 {
        eprintln!(
            "tlsscope sniff: NSPR calls not sniffed, their layer unchecked (memory map busy): {}",
            c.unchecked
        );
    }
}
