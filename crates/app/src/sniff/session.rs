//! A capture, from its checked [`Config`] to what it did ([`Sniffed`]): [`run`] attaches the
//! sniffer (or starts the command under tlsscope's library), creates the output files, and
//! writes each captured call as it completes: filtered, given its socket's ends and handed to
//! `crate::sniff::render` (text, hex or JSON lines, and a pcap), losses said in the stream where
//! they happened; at the end it detaches and settles the tally for the summary.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use model::sniff::{Losses, Record, Tally};
use probes::sniff::{Assembler, Call, Capture, Direction, Polled, SniffCounters, Sniffer};
use probes::Edge;

use crate::common::error::Result;
use crate::common::latency::placement_doc;
use crate::common::probing::{
    alive, attached_words, end_program, planned_words, processes_only, spawn, user_first,
    watched_pids, BackendChoice, Until,
};
use crate::render::pcap::PcapWriter;
use crate::sniff::config::Config;
use crate::sniff::render::{push_hex, push_text, redact_headers, write_json, write_lost_line};

/// Why a capture is not complete (it then ends with exit status 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incomplete {
    /// Calls lost in part or whole: the ring buffer was full (`records` did not fit).
    Lost { calls: u64, records: u64 },
    /// In-process wrappers that failed and stopped copying their function's calls.
    WrapperFailures(u64),
    /// NSPR calls whose file could not be checked for being a TLS socket.
    Unchecked(u64),
    /// Key log lines (`--keylog`) that did not fit their ring buffer.
    LostKeys(u64),
}

/// What a capture did: what reached the output (the tally), the probes' counters, how long
/// it captured, why it ended early, and what failed on the way (a poll, the output), which
/// the caller reports after the summary.
pub struct Sniffed {
    pub tally: Tally,
    pub counters: SniffCounters,
    pub window: Duration,
    pub ended_by: Option<String>,
    pub failure: Option<anyhow::Error>,
    /// Key log lines written (`--keylog`).
    pub key_lines: Option<u64>,
}

impl Sniffed {
    /// Why the capture is not complete, if it is not.
    pub fn incomplete(&self) -> Option<Incomplete> {
        let c = &self.counters;
        if c.lost_calls > c.unchecked || self.tally.incomplete > 0 {
            Some(Incomplete::Lost {
                calls: c.lost_calls.saturating_sub(c.unchecked),
                records: c.lost_records,
            })
        } else if c.wrapper_failures > 0 {
            Some(Incomplete::WrapperFailures(c.wrapper_failures))
        } else if c.unchecked > 0 {
            Some(Incomplete::Unchecked(c.unchecked))
        } else if c.lost_keys > 0 {
            Some(Incomplete::LostKeys(c.lost_keys))
        } else {
            None
        }
    }
}

/// How long a command tlsscope started has to exit after SIGTERM when the capture ends.
const CHILD_GRACE: Duration = Duration::from_secs(10);

/// Runs the capture `config` asks for until its end (the duration, `stop`, every sniffed
/// process gone, the output closed or full): each call goes to the stream (and the pcap) as
/// it completes. The probes are detached before this returns, on every way out.
pub fn run(config: &Config, stop: &AtomicBool) -> anyhow::Result<Sniffed> {
    let mut session = start(config)?;
    // The files once the probes are in: a sniff that cannot start leaves no empty file (the
    // command line checked that they can be made). The output file's size says how much of the
    // stream it holds, whatever the writer thread has left to write when the disk fills.
    let mut measure = None;
    let mut out = match config.create_stream()? {
        // Past the page cache: a busy server's capture runs at tens of MB/s.
        Some(file) => {
            measure = file.try_clone().ok();
            Stream::File(host::DirectFile::new(file))
        }
        None => Stream::Stdout(BufWriter::new(io::stdout())),
    };
    let mut pcap = config.create_pcap()?;
    let mut keylog = key_log_file(config, &*session.capture)?;
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
    if let Some(line) = not_sniffed_line(sniffer.not_attached()) {
        eprintln!("tlsscope sniff: {line}");
    }
    if let Some(note) = sniffer
        .syscall_hooks()
        .and_then(|h| h.note(Edge::Enter, probes::sniff::SYSCALL_ENTERS_EFFECT))
    {
        eprintln!("tlsscope sniff: {note}");
    }

    let mut writer = Writer::new(config.view.clone(), &mut out, pcap.as_mut());
    if let Some(file) = measure {
        writer = writer.measured_by(file);
    }
    let watched = watched_pids(session.child.as_ref(), &config.attach.pids);
    let until = Until {
        duration: config.duration,
        pids: &watched,
        stop,
    };
    let end = capture(sniffer, &mut writer, keylog.as_mut(), &until);
    let (window, mut ended_by) = (end.window, end.ended_by);
    let mut failure: Option<anyhow::Error> = end.poll_error.map(Into::into);
    if let Some(e) = &end.write_error {
        ended_by = Some(output_problem(e, config));
        if e.kind() != io::ErrorKind::BrokenPipe {
            failure = Some(anyhow::anyhow!("{}", ended_by.clone().unwrap_or_default()));
        }
    }
    let counters = sniffer.counters();
    if let Some(child) = session.child.as_mut() {
        if let Some(how) = end_program(child, CHILD_GRACE) {
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
    if let Some(k) = keylog.as_mut() {
        if let Err(e) = k.file.flush() {
            failure.get_or_insert(anyhow::anyhow!(
                "--keylog {}: cannot write: {e}",
                k.path.display()
            ));
        }
    }
    if let (Err(e), None) = (&flushed, &failure) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            failure = Some(anyhow::anyhow!("{}", output_problem(e, config)));
        }
    }
    Ok(Sniffed {
        tally,
        counters: counters?,
        window,
        ended_by,
        failure,
        key_lines: keylog.map(|k| k.lines),
    })
}

/// The key log file (`--keylog`) and the lines written to it.
struct KeyLog {
    file: BufWriter<std::fs::File>,
    path: std::path::PathBuf,
    lines: u64,
}

impl KeyLog {
    /// Writes the lines the capture read since the last call.
    fn drain(&mut self, capture: &dyn Capture) -> io::Result<()> {
        for line in capture.take_key_lines() {
            writeln!(self.file, "{line}")?;
            self.lines += 1;
        }
        Ok(())
    }
}

/// The key log file, once the capture has its hooks in: an error when `--keylog` is given and
/// no target is a Go program (the only key log tlsscope reads), or the kernel refused them all.
fn key_log_file(config: &Config, capture: &dyn Capture) -> Result<Option<KeyLog>> {
    let Some(path) = &config.keylog else {
        return Ok(None);
    };
    let (hooks, refused) = capture.key_log_hooks();
    if hooks == 0 {
        match refused.first() {
            Some(why) => crate::fail!(
                "--keylog {}: the kernel refused the probe on Go's key log hook ({why})",
                path.display()
            ),
            None => crate::fail!(
                "--keylog {}: key logs are read from Go programs only (crypto/tls's own key log hook), and no target is one: drop --keylog",
                path.display()
            ),
        }
    }
    let file = config
        .create_keylog()
        .map_err(|e| crate::common::error::Error::msg(format!("{e:#}")))?
        .expect("--keylog was given");
    Ok(Some(KeyLog {
        file,
        path: path.clone(),
        lines: 0,
    }))
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

/// Why writing failed, in the words the user needs.
fn output_problem(e: &io::Error, config: &Config) -> String {
    let target = match &config.stream {
        Some(o) => o.path_or_dash().display().to_string(),
        None => "standard output".to_string(),
    };
    match e.kind() {
        io::ErrorKind::BrokenPipe => "output closed".to_string(),
        _ if e.raw_os_error() == Some(libc::ENOSPC) => {
            format!("cannot write to {target}: no space left on the device")
        }
        _ => format!("cannot write to {target}: {e}"),
    }
}

/// A running capture, and the program tlsscope started, if it did.
struct Session {
    capture: Box<dyn Capture>,
    child: Option<std::process::Child>,
    /// The targets, in words (for the in-process backend).
    targets: Vec<String>,
    /// How the capture was set up, where the user should know (a fallback, and why).
    notes: Vec<String>,
}

/// Starts sniffing: the kernel's uprobes on the targets, or tlsscope's library in a program it
/// starts or in running processes (`--backend user`; auto where it covers every function).
/// Starts a Go program under the kernel's probes (its crypto/tls is compiled in, with no library
/// call for tlsscope's library to wrap): its file is probed first, then the program started.
fn start_go(config: &Config, program: std::path::PathBuf) -> Result<Session> {
    if config.attach.backend == BackendChoice::User {
        crate::fail!(
            "{} is a Go program: its crypto/tls is compiled in, so only the kernel backend sniffs it; drop --backend user",
            program.display()
        );
    }
    let targets = [probes::Target::Binary(program)];
    let selection = probes::Selection::Plaintext { handshake: true };
    let plan = probes::Plan::new(&targets, selection)?.with_placement(config.placement);
    let sniffer = Sniffer::start(&config.probes, &plan)?;
    let child = crate::common::probing::spawn_plain(&config.attach.command)?;
    let targets = vec![format!("pid {}", child.id())];
    Ok(Session {
        capture: Box::new(sniffer),
        child: Some(child),
        targets,
        notes: Vec::new(),
    })
}

fn start(config: &Config) -> Result<Session> {
    let c = &config.probes;
    let user = |tracer: probes::user::UserTracer| -> Box<dyn Capture> {
        tracer.enable_sniff(c.max_bytes);
        Box::new(tracer)
    };
    if let Some(program) = crate::common::probing::go_program(&config.attach.command) {
        return start_go(config, program);
    }
    if !config.attach.command.is_empty() {
        let tracer = probes::user::UserTracer::new(
            &config.selection,
            probes::Buckets::Log2,
            false,
            c.threads.clone(),
            c.user_ring_bytes,
        )?;
        let child = spawn(&config.attach.command, &tracer)?;
        let targets = vec![format!("pid {}", child.id())];
        return Ok(Session {
            capture: user(tracer),
            child: Some(child),
            targets,
            notes: Vec::new(),
        });
    }
    let pids = processes_only(&config.attach.targets);
    // With auto, a --ring-size only the kernel's ring takes (4K, 8K...) asks for the kernel.
    let try_user = user_first(config.attach.backend, &pids, &config.selection)
        && (config.attach.backend == BackendChoice::User
            || probes::user::valid_ring_bytes(c.user_ring_bytes));
    let mut notes = Vec::new();
    if try_user {
        match probes::user::UserTracer::attach(
            &config.selection,
            probes::Buckets::Log2,
            false,
            &pids,
            c.threads.comm.clone(),
            c.user_ring_bytes,
        ) {
            Ok(tracer) => {
                let targets = attached_words(&tracer);
                return Ok(Session {
                    capture: user(tracer),
                    child: None,
                    targets,
                    notes,
                });
            }
            Err(e @ probes::Error::Attach { .. })
                if config.attach.backend == BackendChoice::Auto =>
            {
                let e = crate::common::wording::probes_error(&e);
                notes.push(format!("{e}; sniffing with the kernel backend instead"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    // The handshake calls are probed whatever --handshake says (see
    // `SniffConfig::handshake_records`).
    let selection = match config.selection {
        probes::Selection::Plaintext { .. } => probes::Selection::Plaintext { handshake: true },
        ref other => other.clone(),
    };
    let plan =
        probes::Plan::new(&config.attach.targets, selection)?.with_placement(config.placement);
    let sniffer = Sniffer::start(c, &plan)?;
    notes.extend(placement_note(sniffer.attached()));
    notes.extend(unseen_notes(sniffer.attached()));
    // Said when the plan follows children the user did not name.
    let targets = if plan.children.is_empty() {
        Vec::new()
    } else {
        planned_words(&config.attach.targets, &plan)
    };
    Ok(Session {
        capture: Box::new(sniffer),
        child: None,
        targets,
        notes,
    })
}

/// Where the kernel probes sit, as trace says it: "placement: 6 of 8 functions on emulated
/// instructions (2 entry, 4 callee); single-stepped: ...".
fn placement_note(attached: &[probes::AttachPoint]) -> Option<String> {
    let docs: Vec<(&str, model::trace::PlacementDoc)> = attached
        .iter()
        .map(|p| (p.function.name, placement_doc(p)))
        .collect();
    crate::render::placement::placement_line(docs.iter().map(|(f, d)| (*f, d)))
}

/// The calls a callee placement does not see (they return before the callee is called, having
/// moved no data), one line per function.
fn unseen_notes(attached: &[probes::AttachPoint]) -> Vec<String> {
    attached
        .iter()
        .filter_map(|p| {
            let unseen = p.placement.unseen()?;
            Some(format!(
                "{} is probed at its callee: {unseen}",
                p.function.name
            ))
        })
        .collect()
}

/// What the capture leaves out, in one line ("SSL_read_ex, SSL_write_ex in libssl: why"; a
/// clause per file and reason), or None when it leaves out nothing.
fn not_sniffed_line(missing: &[probes::Missing]) -> Option<String> {
    let mut groups: Vec<(&std::path::Path, String, Vec<&str>)> = Vec::new();
    for m in missing {
        let reason = crate::common::wording::missing_reason(&m.reason);
        match groups
            .iter_mut()
            .find(|(path, r, _)| *path == m.path && *r == reason)
        {
            Some((_, _, functions)) => functions.push(m.function),
            None => groups.push((&m.path, reason, vec![m.function])),
        }
    }
    let clauses: Vec<String> = groups
        .iter()
        .map(|(path, reason, functions)| {
            format!("{} in {}: {reason}", functions.join(", "), path.display())
        })
        .collect();
    (!clauses.is_empty()).then(|| format!("not sniffed: {}", clauses.join("; ")))
}

/// How calls are shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Hex,
    Json,
    /// Counted, not shown.
    Quiet,
}

/// What to show of the calls.
#[derive(Clone, Debug)]
pub struct View {
    pub format: Format,
    /// Only calls whose payload contains this.
    pub grep: Option<String>,
    /// Mask Authorization, Cookie and Set-Cookie values.
    pub redact_headers: bool,
}

/// Sockets whose /proc ends `Writer` keeps, at most; past it the table starts again.
const MAX_SOCKETS: usize = 4096;

/// How many formatted bytes `Writer` gathers before it writes them.
const CHUNK: usize = 1 << 20;

/// Where calls go (the stream, and a pcap when asked for), and what has been written so far.
struct Writer<'a, W: Write> {
    view: View,
    out: &'a mut dyn Write,
    pcap: Option<&'a mut PcapWriter<W>>,
    clock: Clock,
    tally: Tally,
    /// Socket ends found in /proc for calls the backend gave none, per (pid, socket inode):
    /// never per fd, which the process gives to its next connection.
    endpoints: HashMap<(u32, u64), Option<(SocketAddr, SocketAddr)>>,
    /// The kernel's loss counters when a loss was last written.
    lost_reported: SniffCounters,
    /// What was formatted and not yet written: records go out in chunks of `CHUNK` bytes (a
    /// chunk that size passes through the stream's own buffer uncopied).
    pending: Vec<u8>,
    /// What the stream was handed, and what of it the output is known to hold.
    delivery: Delivery,
}

/// The calls handed to the stream and not yet known to be wholly in the output, oldest first:
/// they count as shown once the output holds them, and as not written if it fails first.
#[derive(Default)]
struct Delivery {
    /// Bytes handed to the stream so far.
    handed_bytes: u64,
    in_flight: std::collections::VecDeque<InFlight>,
    /// The output file, to ask how much of the stream it holds (the stream may be written by a
    /// thread of its own, behind what was handed to it); None: what was handed counts.
    output_file: Option<std::fs::File>,
}

impl Delivery {
    /// Counts as shown in `tally` the calls the output holds by now.
    fn count_written(&mut self, tally: &mut Tally) {
        let held = match &self.output_file {
            Some(f) => f.metadata().map_or(0, |m| m.len()),
            None => self.handed_bytes,
        };
        while let Some(call) = self.in_flight.front().copied() {
            if call.end > held {
                break;
            }
            self.in_flight.pop_front();
            count_shown(tally, call.direction, call.bytes);
        }
    }
}

/// A capture's tally whose last calls may still be on their way to the output: settled once
/// the stream is finished (see [`Writer::into_tally`]).
struct Unsettled {
    tally: Tally,
    delivery: Delivery,
}

impl Unsettled {
    /// The tally, once the stream is finished or has failed: the calls the output holds count
    /// as shown, the rest as not written; with a file, what it holds in bytes.
    pub fn settle(mut self) -> Tally {
        self.delivery.count_written(&mut self.tally);
        self.tally.unwritten += self.delivery.in_flight.len() as u64;
        if let Some(f) = &self.delivery.output_file {
            self.tally.output_bytes = f.metadata().ok().map(|m| m.len());
        }
        self.tally
    }
}

/// A call formatted for the stream: where it ends in the stream, and what it adds to the tally
/// once written.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    end: u64,
    direction: Direction,
    bytes: u64,
}

impl<'a, W: Write> Writer<'a, W> {
    pub fn new(view: View, out: &'a mut dyn Write, pcap: Option<&'a mut PcapWriter<W>>) -> Self {
        let tally = Tally {
            quiet: view.format == Format::Quiet,
            ..Tally::default()
        };
        Writer {
            view,
            out,
            pcap,
            clock: Clock::now(),
            tally,
            endpoints: HashMap::new(),
            lost_reported: SniffCounters::default(),
            pending: Vec::with_capacity(CHUNK),
            delivery: Delivery::default(),
        }
    }

    /// Counts what reached the stream by the size of `file` (the stream's file, written from
    /// its start), not by what was handed to it; a file that is not a regular one (a pipe, a
    /// device) has no size to tell, and what was handed to it counts.
    pub fn measured_by(mut self, file: std::fs::File) -> Self {
        if file.metadata().is_ok_and(|m| m.is_file()) {
            self.delivery.output_file = Some(file);
        }
        self
    }

    /// Filters, resolves and writes one call, whose captured bytes are `data`.
    pub fn call(&mut self, call: &Call, data: &[u8]) -> io::Result<()> {
        emit(self, call, data)
    }

    /// Writes a line for the calls lost since the last one, if any; true when it did.
    pub fn losses(&mut self, now: &SniffCounters) -> io::Result<bool> {
        if now.lost_calls <= self.lost_reported.lost_calls {
            return Ok(false);
        }
        if self.view.format != Format::Quiet {
            let lost = losses(now, Some(&self.lost_reported));
            write_lost_line(&mut self.pending, self.view.format == Format::Json, &lost)?;
            self.write_chunk()?;
        }
        self.lost_reported = *now;
        Ok(true)
    }

    /// Writes what is pending, and flushes the stream.
    pub fn flush(&mut self) -> io::Result<()> {
        self.write_pending()?;
        let flushed = self.out.flush();
        // Handed to a stream that failed to flush is not written; a file's size still tells.
        if flushed.is_ok() || self.delivery.output_file.is_some() {
            self.delivery.count_written(&mut self.tally);
        }
        flushed
    }

    /// Writes the pending records once they fill a chunk.
    fn write_chunk(&mut self) -> io::Result<()> {
        if self.pending.len() >= CHUNK {
            self.write_pending()?;
        }
        Ok(())
    }

    fn write_pending(&mut self) -> io::Result<()> {
        let written = self.out.write_all(&self.pending);
        if written.is_ok() {
            self.delivery.handed_bytes += self.pending.len() as u64;
        }
        self.pending.clear();
        written
    }

    /// What was written, for the summary, settled once the stream is finished
    /// ([`Unsettled::settle`]): the stream's writer may still be behind.
    pub fn into_tally(self) -> Unsettled {
        Unsettled {
            tally: self.tally,
            delivery: self.delivery,
        }
    }
}

/// The loss figures of the kernel's counters: all of them, or (with `before`) since then.
pub fn losses(now: &SniffCounters, before: Option<&SniffCounters>) -> Losses {
    let before = before.copied().unwrap_or_default();
    Losses {
        calls: now.lost_calls - before.lost_calls,
        records: now.lost_records - before.lost_records,
        unchecked: now.unchecked - before.unchecked,
    }
}

/// Converts the probes' CLOCK_MONOTONIC times to wall-clock time for the pcap.
#[derive(Clone, Copy)]
struct Clock {
    realtime_minus_monotonic_ns: i128,
}

impl Clock {
    pub fn now() -> Clock {
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

/// Filters, resolves and writes one call, whose captured bytes are `data`.
fn emit<W: Write>(w: &mut Writer<'_, W>, call: &Call, data: &[u8]) -> io::Result<()> {
    let (view, tally) = (&w.view, &mut w.tally);
    let quiet = view.format == Format::Quiet;
    tally.calls += 1;
    if call.incomplete {
        tally.incomplete += 1;
    }
    if call.uncaptured_bytes > 0 && !(quiet && w.pcap.is_none()) {
        tally.cut_calls += 1;
        tally.cut_bytes += call.uncaptured_bytes;
    }
    if call.total_bytes == 0 && call.direction != Direction::Handshake {
        tally.failed_calls += 1;
    }
    if let Some(pattern) = &view.grep {
        if !contains(data, pattern.as_bytes()) {
            return Ok(());
        }
    }
    if quiet {
        // Counted, not shown: nothing goes to the stream that could fail to hold it.
        count_shown(tally, call.direction, call.total_bytes);
        if w.pcap.is_none() {
            return Ok(());
        }
    }
    // The backend's view, taken during the call; else /proc, while the socket is still open.
    let ends = call.endpoints.or_else(|| {
        let fd = call.fd?;
        let inode = crate::common::sockets::socket_inode(call.pid, fd)?;
        if w.endpoints.len() >= MAX_SOCKETS {
            w.endpoints.clear();
        }
        *w.endpoints
            .entry((call.pid, inode))
            .or_insert_with(|| crate::common::sockets::endpoints_of_inode(call.pid, inode))
    });
    if let Some(pcap) = w.pcap.as_deref_mut() {
        let sent = match call.direction {
            Direction::Write => Some(true),
            Direction::Read => Some(false),
            Direction::Handshake => None,
        };
        match (ends, sent) {
            (Some((local, peer)), Some(sent)) if !data.is_empty() => pcap.add(
                call.pid,
                local,
                peer,
                w.clock.wall_us(call.start_ns),
                sent,
                data,
                call.uncaptured_bytes,
            )?,
            (None, Some(_)) if !data.is_empty() => pcap.skipped_calls += 1,
            _ => {}
        }
    }
    if quiet {
        return Ok(());
    }
    let redacted;
    let data: &[u8] = if view.redact_headers {
        redacted = redact_headers(data);
        &redacted
    } else {
        data
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
    match view.format {
        Format::Json => write_json(&mut w.pending, &record)?,
        Format::Hex => push_hex(&mut w.pending, &record),
        Format::Text | Format::Quiet => push_text(&mut w.pending, &record),
    }
    w.delivery.in_flight.push_back(InFlight {
        end: w.delivery.handed_bytes + w.pending.len() as u64,
        direction: call.direction,
        bytes: call.total_bytes,
    });
    w.write_chunk()
}

/// Adds a call to what the summary says was shown (or, with --quiet, counted).
fn count_shown(tally: &mut Tally, direction: Direction, bytes: u64) {
    tally.shown += 1;
    match direction {
        Direction::Read => tally.reads += 1,
        Direction::Write => tally.writes += 1,
        Direction::Handshake => {}
    }
    tally.bytes += bytes;
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// How a capture ended.
struct CaptureEnd {
    /// How long it captured (the detach that follows is not counted).
    pub window: Duration,
    /// Why it ended early ("signal", "the sniffed process exited"); None when the duration ran
    /// out or the output failed (see `write_error`).
    pub ended_by: Option<String>,
    /// Reading the ring buffer failed.
    pub poll_error: Option<probes::Error>,
    /// Writing failed (a closed pipe, a full disk).
    pub write_error: Option<io::Error>,
}

/// How long the reader sleeps between polls while no calls come.
const IDLE_POLL: Duration = Duration::from_millis(20);

/// ... and while they do: small batches, often. The reader shares a CPU with other work (the
/// load generator, in the benchmarks); at 80k requests a second a 20 ms batch kept that CPU for
/// milliseconds at a time, the generator stalled, and the sniffed server sat idle for 8-10% of
/// the run (2 ms: 1-2%).
const BUSY_POLL: Duration = Duration::from_millis(2);

/// The shortest wait between polls, for a ring that fills fast: a wakeup costs the CPU the
/// reader shares.
const MIN_POLL: Duration = Duration::from_micros(250);

/// How full a ring may get between polls before the reader polls sooner, and how empty before
/// it polls later again (up to `BUSY_POLL`): traffic that would fill a ring within `BUSY_POLL`
/// is read more often instead of lost.
const FILL_HIGH: f64 = 0.25;
const FILL_LOW: f64 = 0.0625;

/// The wait before the next poll, after one that found `polled` having waited `waited`.
fn next_interval(waited: Duration, polled: Polled) -> Duration {
    if polled.calls == 0 {
        return IDLE_POLL;
    }
    let busy = waited.min(BUSY_POLL);
    match polled.fullest {
        Some(f) if f > FILL_HIGH => (busy / 2).max(MIN_POLL),
        Some(f) if f < FILL_LOW => (busy * 2).min(BUSY_POLL),
        Some(_) => busy.max(MIN_POLL),
        None => BUSY_POLL,
    }
}

/// How often the output is flushed, at least, while calls keep coming.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Reads the sniffer's calls into `writer` until `until` says stop or writing fails; the
/// output is flushed when the calls pause and every `FLUSH_EVERY` while they flow, and losses are written where they happen. What is still
/// in the ring buffer at the end is written too, unless the output is gone.
fn capture<W: Write>(
    sniffer: &dyn Capture,
    writer: &mut Writer<'_, W>,
    mut keylog: Option<&mut KeyLog>,
    until: &Until<'_>,
) -> CaptureEnd {
    let started = std::time::Instant::now();
    let mut assembler = Assembler::default();
    let mut interval = IDLE_POLL;
    let (mut unflushed, mut last_flush) = (false, started);
    let mut end = CaptureEnd {
        window: Duration::ZERO,
        ended_by: None,
        poll_error: None,
        write_error: None,
    };
    loop {
        let (polled, written) = poll_into(sniffer, interval, &mut assembler, writer);
        let polled = match polled {
            Ok(polled) => polled,
            Err(e) => {
                end.poll_error = Some(e);
                break;
            }
        };
        let seen = polled.calls;
        interval = next_interval(interval, polled);
        // The secrets as they come: a key log read while the capture runs decrypts it.
        if let Some(k) = keylog.as_deref_mut() {
            if let Err(e) = k.drain(sniffer).and_then(|()| k.file.flush()) {
                end.write_error = Some(io::Error::new(
                    e.kind(),
                    format!("--keylog {}: {e}", k.path.display()),
                ));
                break;
            }
        }
        let result = written.and_then(|()| match sniffer.counters() {
            Ok(now) => writer.losses(&now).map(|lost| lost || seen > 0),
            Err(_) => Ok(seen > 0),
        });
        // What was written reaches the reader when the calls pause, and at least every
        // FLUSH_EVERY while they flow (a closed pipe shows up then, not at exit).
        let result = result.and_then(|wrote| {
            unflushed |= wrote;
            if unflushed && (seen == 0 || last_flush.elapsed() >= FLUSH_EVERY) {
                unflushed = false;
                last_flush = std::time::Instant::now();
                writer.flush()
            } else {
                Ok(())
            }
        });
        if let Err(e) = result {
            end.write_error = Some(e);
            break;
        }
        if until.stop.load(std::sync::atomic::Ordering::Relaxed) {
            end.ended_by = Some("signal".into());
            break;
        }
        if until.duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if !until.pids.is_empty() && until.pids.iter().all(|&p| !alive(p)) {
            end.ended_by = Some("the sniffed process exited".into());
            break;
        }
    }
    end.window = started.elapsed();
    if end.poll_error.is_none() && end.write_error.is_none() {
        let (_, written) = poll_into(sniffer, Duration::ZERO, &mut assembler, writer);
        if written.is_ok() {
            for call in assembler.finish() {
                if writer.call(&call, &call.data).is_err() {
                    break;
                }
            }
        }
        if let Some(k) = keylog {
            if let Err(e) = k.drain(sniffer) {
                end.write_error = Some(io::Error::new(
                    e.kind(),
                    format!("--keylog {}: {e}", k.path.display()),
                ));
            }
        }
    }
    end
}

/// One poll of the capture, each call written as it is handed over; after a write error the
/// rest of the poll's calls are drained unwritten. Returns the poll's result and the writes'.
fn poll_into<W: Write>(
    sniffer: &dyn Capture,
    interval: Duration,
    assembler: &mut Assembler,
    writer: &mut Writer<'_, W>,
) -> (Result<Polled, probes::Error>, io::Result<()>) {
    let mut written = Ok(());
    let polled = sniffer.poll(interval, assembler, &mut |call, data| {
        if written.is_ok() {
            written = writer.call(call, data);
        }
    });
    (polled, written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn polled(calls: usize, fullest: Option<f64>) -> Polled {
        Polled { calls, fullest }
    }

    #[test]
    fn losses_come_first_then_failed_wrappers_then_unchecked_calls_then_lost_keys() {
        let sniffed = |counters: SniffCounters, incomplete: u64| Sniffed {
            tally: Tally {
                incomplete,
                ..Tally::default()
            },
            counters,
            window: Duration::ZERO,
            ended_by: None,
            failure: None,
            key_lines: None,
        };
        let counters = SniffCounters {
            lost_calls: 5,
            lost_records: 7,
            unchecked: 2,
            wrapper_failures: 1,
            ..SniffCounters::default()
        };
        // The unchecked NSPR calls are counted in lost_calls too: not said twice.
        assert_eq!(
            sniffed(counters, 0).incomplete(),
            Some(Incomplete::Lost {
                calls: 3,
                records: 7
            })
        );
        let only_unchecked = SniffCounters {
            lost_calls: 2,
            wrapper_failures: 0,
            ..counters
        };
        assert_eq!(
            sniffed(only_unchecked, 0).incomplete(),
            Some(Incomplete::Unchecked(2))
        );
        // A call the capture cut short is a loss, whatever the counters say.
        assert!(matches!(
            sniffed(only_unchecked, 1).incomplete(),
            Some(Incomplete::Lost { calls: 0, .. })
        ));
        let failed_wrapper = SniffCounters {
            wrapper_failures: 1,
            ..SniffCounters::default()
        };
        assert_eq!(
            sniffed(failed_wrapper, 0).incomplete(),
            Some(Incomplete::WrapperFailures(1))
        );
        // Lost key log lines make it incomplete, after everything else.
        let lost_keys = SniffCounters {
            lost_keys: 2,
            ..SniffCounters::default()
        };
        assert_eq!(
            sniffed(lost_keys, 0).incomplete(),
            Some(Incomplete::LostKeys(2))
        );
        assert_eq!(sniffed(SniffCounters::default(), 0).incomplete(), None);
    }

    #[test]
    fn what_is_not_sniffed_is_said_in_one_line() {
        let missing = |function, path: &str, reason: &str| probes::Missing {
            function,
            path: path.into(),
            reason: probes::MissingReason::Other(reason.into()),
        };
        assert_eq!(not_sniffed_line(&[]), None);
        let line = not_sniffed_line(&[
            missing("SSL_read_ex", "libssl", "not called"),
            missing("SSL_write_ex", "libssl", "not called"),
            missing("gnutls_record_recv", "/x/libgnutls.so.30", "stripped"),
        ]);
        assert_eq!(
            line.as_deref(),
            Some(
                "not sniffed: SSL_read_ex, SSL_write_ex in libssl: not called; \
                 gnutls_record_recv in /x/libgnutls.so.30: stripped"
            )
        );
    }

    #[test]
    fn the_reader_polls_sooner_as_a_ring_fills_and_later_as_it_empties() {
        // Nothing came: back to the idle wait, whatever the ring.
        assert_eq!(next_interval(MIN_POLL, polled(0, Some(0.9))), IDLE_POLL);
        // Calls after an idle wait: at most the busy wait, halved while the ring fills.
        assert_eq!(next_interval(IDLE_POLL, polled(5, Some(0.1))), BUSY_POLL);
        let mut wait = IDLE_POLL;
        let mut waits = Vec::new();
        for _ in 0..8 {
            wait = next_interval(wait, polled(100, Some(0.5)));
            waits.push(wait);
        }
        assert_eq!(waits[0], BUSY_POLL / 2);
        assert!(waits.windows(2).all(|w| w[1] <= w[0]), "{waits:?}");
        assert_eq!(*waits.last().unwrap(), MIN_POLL);
        // A nearly empty ring: doubled back up to the busy wait, not beyond.
        for _ in 0..8 {
            wait = next_interval(wait, polled(100, Some(0.01)));
        }
        assert_eq!(wait, BUSY_POLL);
        // Between the marks the wait stays; a backend that cannot tell gets the busy wait.
        assert_eq!(
            next_interval(BUSY_POLL / 4, polled(9, Some(0.1))),
            BUSY_POLL / 4
        );
        assert_eq!(next_interval(MIN_POLL, polled(9, None)), BUSY_POLL);
    }
}
