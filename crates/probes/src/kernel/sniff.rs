//! The plaintext sniffer: loads `bpf/sniff.bpf.c`, attaches it to the read/write functions of
//! the TLS libraries a target uses, and turns its ring-buffer records back into whole calls.
//! Dropping the [`Sniffer`] detaches everything.

use std::collections::HashMap;
use std::time::Duration;

use libbpf_rs::Link;

use super::loader::{self, Sites, Uprobes};
use super::skel::sniff::types::{sn_counter, sn_endpoints, sn_event, sn_flags, sn_key};
use super::skel::sniff::{SniffSkel, SniffSkelBuilder};
use super::syscalls::{self, Edge, SyscallHooks};
use crate::capture::{socket_pair, Call, SniffCounters};
use crate::catalog::{Count, Direction, CATALOG};
use crate::plan::{AttachPoint, Missing, Placement, Plan, Threads};
use crate::Error;

/// The program's name in errors.
const PROGRAM: &str = "sniff";

/// What to sniff. Where: a [`Plan`] with [`crate::catalog::Selection::Plaintext`].
#[derive(Clone, Debug)]
pub struct SniffConfig {
    pub threads: Threads,
    /// Bytes captured per call at most; the rest is counted, not sent.
    pub max_bytes: u32,
    /// Ring buffer size in bytes (a power of two, at least a page).
    pub ring_bytes: u32,
    /// The in-process backend's ring per thread, in bytes (`inproc_abi::valid_ring_bytes`).
    pub user_ring_bytes: u64,
    /// Records for the handshake calls (`--handshake`). The kernel probes the handshake calls
    /// of its plan either way, to learn each connection's socket from their syscalls: a
    /// connection whose first request was read during the handshake makes none in the
    /// `SSL_read` that returns it.
    pub handshake_records: bool,
    /// Probe Go programs' key log hook (`sniff --keylog`); see [`crate::plan::KeyLogPoint`].
    pub key_log: bool,
}

/// What sniff loses without its syscall hooks.
pub const SYSCALL_ENTERS_EFFECT: &str =
    "each call's socket fd and addresses are shown as unknown; the plaintext is still captured";

/// A running capture. Detaches on drop.
pub struct Sniffer {
    // Declared first: dropped before the maps it reads.
    ring: libbpf_rs::RingBuffer<'static>,
    /// Records the ring-buffer callback copied, back to back, and where each ends.
    records: std::rc::Rc<std::cell::RefCell<Records>>,
    /// Key log lines read from the ring, waiting for [`Sniffer::take_key_lines`].
    key_lines: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
    /// The key log hooks attached, and those the kernel refused (with why).
    key_log_hooks: usize,
    key_log_refused: Vec<String>,
    /// Held, never read: dropping them detaches the probes, before the skeleton unloads.
    _links: Vec<Link>,
    skel: SniffSkel<'static>,
    attached: Vec<AttachPoint>,
    not_attached: Vec<Missing>,
    syscall_hooks: SyscallHooks,
}

impl Sniffer {
    /// Loads and attaches. Probes that fail to attach are listed; none attaching is an error.
    pub fn start(config: &SniffConfig, plan: &Plan) -> Result<Sniffer, Error> {
        let mut open = loader::open(SniffSkelBuilder::default(), PROGRAM)?;
        open.maps
            .events
            .set_max_entries(config.ring_bytes)
            .map_err(|e| Error::bpf("sizing the ring buffer", e))?;
        let rodata = loader::rodata(open.maps.rodata_data.as_deref_mut(), PROGRAM)?;
        let cfg = &mut rodata.cfg;
        loader::set_filter(&mut cfg.filter, &config.threads, &plan.points, false);
        cfg.max_bytes = config.max_bytes;
        cfg.handshake_records = u8::from(config.handshake_records);
        if let Some(file) = plan.tls_layer_file() {
            cfg.tls_layer_file = loader::c_name(file);
        }
        // Go's functions are probed at their entry and returns by programs of their own.
        let (go_points, native) = plan.go_and_native();
        let points: Vec<AttachPoint> = native.iter().map(sniffable).collect();
        let points = Sites::fitted(&points);
        let sites = Sites::of(&points);
        sites.write(&mut cfg.sites);
        open.progs
            .go_sniff_enter
            .set_autoload(!go_points.is_empty());
        open.progs.go_sniff_exit.set_autoload(!go_points.is_empty());
        open.progs
            .go_sniff_deferred_exit
            .set_autoload(!go_points.is_empty());
        let key_log = config.key_log && !plan.key_logs.is_empty();
        open.progs.go_keylog.set_autoload(key_log);
        let skel = loader::load(open, PROGRAM)?;
        let records = std::rc::Rc::new(std::cell::RefCell::new(Records::default()));
        let sink = records.clone();
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&skel.maps.events, move |bytes: &[u8]| {
                let mut r = sink.borrow_mut();
                r.bytes.extend_from_slice(bytes);
                let end = r.bytes.len();
                r.ends.push(end);
                0
            })
            .map_err(|e| Error::bpf("reading the ring buffer", e))?;
        let key_lines = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        if key_log {
            let sink = key_lines.clone();
            builder
                .add(&skel.maps.keys, move |bytes: &[u8]| {
                    if let Some(line) = key_line(bytes) {
                        sink.borrow_mut().push(line);
                    }
                    0
                })
                .map_err(|e| Error::bpf("reading the key log ring buffer", e))?;
        }
        let ring = builder
            .build()
            .map_err(|e| Error::bpf("reading the ring buffer", e))?;
        loader::allow_pids(&skel.maps.pids, &config.threads.pids)?;
        let uprobes = Uprobes {
            entry: &skel.progs.sniff_enter,
            ret: &skel.progs.sniff_return,
        };
        let at = |p: &AttachPoint| {
            let cookie = loader::cookie_at_site(p.id, p.function, sites.index_of(p));
            (p.probe_offset(), cookie)
        };
        let attachment = loader::attach_with_go(
            &uprobes,
            &points,
            &loader::GoPrograms {
                enter: &skel.progs.go_sniff_enter,
                exit: &skel.progs.go_sniff_exit,
                deferred: Some((&skel.progs.go_sniff_deferred_exit, &skel.maps.go_deferred)),
            },
            &go_points,
            false,
            &at,
        )?;
        let mut links = attachment.links;
        let (mut key_log_hooks, mut key_log_refused) = (0, Vec::new());
        if key_log {
            for point in &plan.key_logs {
                let batch = loader::Batch {
                    pid: point.pid,
                    path: &point.path,
                    offsets: vec![usize::try_from(point.offset).unwrap_or(usize::MAX)],
                    cookies: vec![0],
                };
                match loader::attach_multi(&skel.progs.go_keylog, &batch, false) {
                    Ok(link) => {
                        links.push(link);
                        key_log_hooks += 1;
                    }
                    Err(why) => key_log_refused.push(format!("{}: {why}", point.path.display())),
                }
            }
        }
        let mut not_attached = plan.missing.clone();
        not_attached.extend(attachment.refused);
        let (hook_links, syscall_hooks) =
            syscalls::attach(&skel.progs.sniff_sys_enter, Edge::Enter);
        links.extend(hook_links);
        Ok(Sniffer {
            ring,
            records,
            key_lines,
            key_log_hooks,
            key_log_refused,
            _links: links,
            skel,
            attached: attachment.attached,
            not_attached,
            syscall_hooks,
        })
    }

    pub fn attached(&self) -> &[AttachPoint] {
        &self.attached
    }

    pub fn not_attached(&self) -> &[Missing] {
        &self.not_attached
    }

    /// The syscall hooks that note each call's socket: attached, or missing and why (then
    /// every record's socket fd and addresses are unknown).
    pub fn syscall_hooks(&self) -> &SyscallHooks {
        &self.syscall_hooks
    }

    /// The key log hooks attached (`SniffConfig::key_log`), and those refused, with why.
    pub fn key_log_hooks(&self) -> (usize, &[String]) {
        (self.key_log_hooks, &self.key_log_refused)
    }

    /// The key log lines read so far (by [`Sniffer::poll`]) and not yet taken.
    pub fn take_key_lines(&self) -> Vec<String> {
        std::mem::take(&mut *self.key_lines.borrow_mut())
    }

    /// The kernel's counters so far.
    pub fn counters(&self) -> Result<SniffCounters, Error> {
        let sum = |index: sn_counter| {
            loader::counter(
                &self.skel.maps.counters,
                index.0,
                "reading the sniff counters",
            )
        };
        Ok(SniffCounters {
            lost_records: sum(sn_counter::SN_LOST_RECORDS)?,
            lost_calls: sum(sn_counter::SN_LOST_CALLS)?,
            calls: sum(sn_counter::SN_CALLS)?,
            unchecked: sum(sn_counter::SN_UNCHECKED)?,
            wrapper_failures: 0,
            lost_keys: sum(sn_counter::SN_LOST_KEYS)?,
        })
    }

    /// Waits `interval`, then reads every record in the ring and returns the calls they
    /// completed. The probes do not wake the reader (a wakeup per record would cost the traced
    /// process), so the ring is read on this timer; size the ring for `interval` of traffic.
    pub fn poll(&self, interval: Duration, assembler: &mut Assembler) -> Result<Vec<Call>, Error> {
        if !interval.is_zero() {
            std::thread::sleep(interval);
        }
        let rc = self.ring.consume_raw();
        if rc < 0 && rc != -libc::EINTR {
            return Err(Error::Bpf {
                what: "reading the ring buffer".into(),
                detail: std::io::Error::from_raw_os_error(-rc).to_string(),
            });
        }
        let mut records = self.records.borrow_mut();
        let mut calls = Vec::new();
        let mut start = 0;
        for &end in &records.ends {
            calls.extend(assembler.push(&records.bytes[start..end]));
            start = end;
        }
        // Emptied, not freed: the next poll reuses the memory.
        records.bytes.clear();
        records.ends.clear();
        Ok(calls)
    }
}

/// The point as the sniff program can probe it: a callee placement goes back to the entry
/// unless the callee gets the function's buffer (argument 1) and, for the `_ex` functions, its
/// count pointer (argument 3) in the same registers, where `sniff_enter` reads them. The
/// connection object (argument 0) always is: the placement requires it.
fn sniffable(point: &AttachPoint) -> AttachPoint {
    let mut point = point.clone();
    if let (Placement::Callee(site), Some(sniffed)) = (&point.placement, point.function.sniffed) {
        let data = sniffed.direction == Direction::Handshake || site.passes_on(1);
        let count = sniffed.count != Count::Arg4Pointer || site.passes_on(3);
        if !(data && count) {
            point.placement = Placement::Entry { emulated: false };
        }
    }
    point
}

/// One key log record (`struct sn_key`) as a line of the NSS key log format Wireshark reads:
/// `LABEL CLIENT_RANDOM SECRET`, the last two in hex, without the line end. None for a record
/// too short, or one whose fields could not be read.
fn key_line(bytes: &[u8]) -> Option<String> {
    if bytes.len() < std::mem::size_of::<sn_key>() {
        return None;
    }
    // SAFETY: sn_key is a plain #[repr(C)] skeleton type of integers and byte arrays (every bit
    // pattern valid), and `bytes` holds at least its size; read_unaligned copies it out whatever
    // the ring buffer's alignment.
    let k: sn_key = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<sn_key>()) };
    let field = |all: &[u8], len: u8| all.get(..usize::from(len)).map(<[u8]>::to_vec);
    let label: Vec<u8> = k.label.iter().map(|&c| c as u8).collect();
    let (label, random, secret) = (
        field(&label, k.label_len)?,
        field(&k.random, k.random_len)?,
        field(&k.secret, k.secret_len)?,
    );
    let label_ok = !label.is_empty()
        && label
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
    if !label_ok || random.is_empty() || secret.is_empty() {
        return None;
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "{} {} {}",
        String::from_utf8_lossy(&label),
        hex(&random),
        hex(&secret)
    ))
}

/// Ring-buffer records waiting for the assembler.
#[derive(Default)]
struct Records {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

/// Puts pieces back together, per call. Pieces of one call arrive in order (one CPU sends them
/// one after another); a call whose last piece was lost is handed out, marked incomplete, when
/// its thread's next call starts or at the end.
#[derive(Default)]
pub struct Assembler {
    open: HashMap<u32, (u64, Call)>,
    /// The record being read, kept between records (its payload is `SN_PIECE` bytes).
    scratch: Box<sn_event>,
    /// Thread names as the records carry them, made once: the same few threads make every call.
    names: HashMap<[i8; 16], std::sync::Arc<str>>,
}

/// Distinct thread names kept, at most; past it the table starts again.
const MAX_NAMES: usize = 1024;

impl Assembler {
    /// Takes one ring-buffer record; returns the calls it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Call> {
        let header = std::mem::offset_of!(sn_event, data);
        if bytes.len() < header {
            return Vec::new();
        }
        // The header only, into the reused record: the payload is read from `bytes` below.
        let n = header.min(bytes.len());
        // SAFETY: sn_event is a plain #[repr(C)] skeleton type (integers and byte arrays, every
        // bit pattern valid); n <= size_of::<sn_event>() bytes are copied into the boxed value.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                (&mut *self.scratch as *mut sn_event).cast::<u8>(),
                n,
            );
        }
        let e = &self.scratch;
        let (tid, call_id) = (e.tid, e.call_id);
        let len = (e.len as usize).min(bytes.len() - header);
        let piece = &bytes[header..header + len];
        let mut done = Vec::new();
        if let Some((id, _)) = self.open.get(&tid) {
            if *id != call_id {
                let (_, mut stale) = self.open.remove(&tid).expect("present");
                stale.incomplete = true;
                done.push(stale);
            }
        }
        let (_, call) = self.open.entry(tid).or_insert_with(|| {
            let comm = shared_name(&mut self.names, &e.comm);
            (call_id, new_call(e, comm))
        });
        if e.offset as usize != call.data.len() {
            call.incomplete = true;
        }
        call.data.extend_from_slice(piece);
        if e.flags & LAST_PIECE != 0 {
            call.uncaptured_bytes = u64::from(e.uncaptured);
            let (_, call) = self.open.remove(&tid).expect("present");
            done.push(call);
        }
        done
    }

    /// The calls still waiting for pieces that will not come.
    pub fn finish(&mut self) -> Vec<Call> {
        self.open
            .drain()
            .map(|(_, (_, mut c))| {
                c.incomplete = true;
                c
            })
            .collect()
    }
}

/// `sn_event.flags` (`enum sn_flags` in `bpf/sniff.h`).
const LAST_PIECE: u8 = sn_flags::SN_LAST_PIECE.0 as u8;
const FD_GUESSED: u8 = sn_flags::SN_FD_GUESSED.0 as u8;

/// The thread name a record carries (NUL-padded), shared with earlier calls of that name.
fn shared_name(
    names: &mut HashMap<[i8; 16], std::sync::Arc<str>>,
    raw: &[i8; 16],
) -> std::sync::Arc<str> {
    if let Some(name) = names.get(raw) {
        return name.clone();
    }
    if names.len() >= MAX_NAMES {
        names.clear();
    }
    let bytes: Vec<u8> = raw
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let name: std::sync::Arc<str> = String::from_utf8_lossy(&bytes).into();
    names.insert(*raw, name.clone());
    name
}

fn new_call(e: &sn_event, comm: std::sync::Arc<str>) -> Call {
    Call {
        start_ns: e.start_ns,
        latency_ns: e.latency_ns,
        pid: e.pid,
        tid: e.tid,
        comm,
        fd: (e.fd >= 0).then_some(e.fd),
        fd_from_earlier_call: e.flags & FD_GUESSED != 0,
        connection: e.ssl,
        endpoints: endpoints(&e.ends),
        function: CATALOG.get(usize::from(e.func)).map_or("?", |f| f.name),
        direction: Direction::from_raw(e.kind),
        ret: e.ret,
        total_bytes: u64::from(e.total_bytes),
        data: Vec::with_capacity(e.len as usize),
        uncaptured_bytes: 0,
        incomplete: false,
    }
}

/// The kernel-read socket ends of a record, if any.
fn endpoints(ends: &sn_endpoints) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    socket_pair(
        ends.family,
        (&ends.local_addr, ends.local_port),
        (&ends.peer_addr, ends.peer_port),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::skel::sniff::types::sn_limits;

    #[test]
    fn openssl_data_calls_are_sniffed_at_callees_that_get_their_buffers() {
        use crate::catalog::Selection;
        use crate::plan::{PlacementMode, Target};
        let libssl = std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu/libssl.so.3");
        assert!(libssl.exists(), "Debian's libssl3 (in make deps)");
        let plan = Plan::new(
            &[Target::Library(libssl)],
            Selection::Plaintext { handshake: false },
        )
        .unwrap()
        .with_placement(PlacementMode::Emulated);
        for p in plan.points.iter().map(sniffable) {
            let Placement::Callee(site) = &p.placement else {
                panic!("{} stays at {}", p.function.name, p.placement.name());
            };
            assert!(
                site.passes_on(0) && site.passes_on(1),
                "{}",
                p.function.name
            );
        }
        // A callee that gets another buffer (or count pointer) than the function's is not used.
        let mut point = plan.points[0].clone();
        if let Placement::Callee(site) = &mut point.placement {
            site.passes_on = [true, false, true, true, true, true];
        }
        assert_eq!(
            sniffable(&point).placement,
            Placement::Entry { emulated: false }
        );
        let mut ex = plan
            .points
            .iter()
            .find(|p| p.function.name == "SSL_read_ex")
            .unwrap()
            .clone();
        if let Placement::Callee(site) = &mut ex.placement {
            site.passes_on = [true, true, true, false, true, true];
        }
        assert_eq!(
            sniffable(&ex).placement,
            Placement::Entry { emulated: false }
        );
    }

    /// A key log record as `go_keylog` sends it.
    fn key_record(label: &str, random: &[u8], secret: &[u8]) -> Vec<u8> {
        let mut k = sn_key::default();
        for (to, from) in k.label.iter_mut().zip(label.bytes()) {
            *to = from as i8;
        }
        k.random[..random.len()].copy_from_slice(random);
        k.secret[..secret.len()].copy_from_slice(secret);
        k.label_len = u8::try_from(label.len()).unwrap();
        k.random_len = u8::try_from(random.len()).unwrap();
        k.secret_len = u8::try_from(secret.len()).unwrap();
        // SAFETY: sn_key is a #[repr(C)] skeleton type of integers and arrays, its padding spelled
        // out as fields, all initialized by Default.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&k as *const sn_key).cast::<u8>(),
                std::mem::size_of::<sn_key>(),
            )
        };
        bytes.to_vec()
    }

    #[test]
    fn a_key_record_becomes_an_nss_key_log_line_and_junk_none() {
        let line = key_line(&key_record("CLIENT_RANDOM", &[0xab; 32], &[0x01, 0xff]));
        assert_eq!(
            line.as_deref(),
            Some(format!("CLIENT_RANDOM {} 01ff", "ab".repeat(32)).as_str())
        );
        // Fields the probe could not read, a label that is no NSS label, a short record.
        assert_eq!(key_line(&key_record("CLIENT_RANDOM", &[1; 32], &[])), None);
        assert_eq!(key_line(&key_record("bad label", &[1; 32], &[2; 48])), None);
        assert_eq!(key_line(&key_record("", &[1; 32], &[2; 48])), None);
        assert_eq!(key_line(&[0u8; 8]), None);
    }

    #[test]
    fn flags_are_numbered_as_the_program_numbers_them() {
        // `as u8` would cut a number over 255 without a word.
        for (ours, theirs) in [
            (LAST_PIECE, sn_flags::SN_LAST_PIECE.0),
            (FD_GUESSED, sn_flags::SN_FD_GUESSED.0),
        ] {
            assert_eq!(u32::from(ours), theirs);
        }
    }

    #[test]
    fn the_payload_is_the_record_s_last_field() {
        let header = std::mem::offset_of!(sn_event, data);
        let piece_bytes = sn_limits::SN_PIECE.0 as usize;
        assert_eq!(header + piece_bytes, std::mem::size_of::<sn_event>());
    }

    /// A ring-buffer record as `send_piece` in `bpf/sniff.bpf.c` sends it: the header and
    /// `data.len()` bytes of payload.
    fn record(call_id: u64, offset: u32, data: &[u8], flags: u8) -> Vec<u8> {
        named_record(call_id, offset, data, flags, "")
    }

    /// A record as above from a thread named `comm`.
    fn named_record(call_id: u64, offset: u32, data: &[u8], flags: u8, comm: &str) -> Vec<u8> {
        let mut e = Box::<sn_event>::default();
        for (to, from) in e.comm.iter_mut().zip(comm.bytes()) {
            *to = from as i8;
        }
        e.call_id = call_id;
        e.pid = 7;
        e.tid = 7;
        e.fd = 3;
        e.offset = offset;
        e.len = u32::try_from(data.len()).unwrap();
        e.uncaptured = 5;
        e.flags = flags;
        e.data[..data.len()].copy_from_slice(data);
        let n = std::mem::offset_of!(sn_event, data) + data.len();
        // SAFETY: sn_event is a #[repr(C)] skeleton type of integers and arrays, its padding
        // spelled out as fields, all initialized by Default; n bytes lie within it.
        let bytes = unsafe { std::slice::from_raw_parts((&*e as *const sn_event).cast::<u8>(), n) };
        bytes.to_vec()
    }

    #[test]
    fn pieces_come_back_together_and_a_lost_last_piece_shows() {
        let mut assembler = Assembler::default();
        // Every piece of a call carries its flags; only the last has LAST_PIECE.
        assert!(assembler
            .push(&record(1, 0, b"hello ", FD_GUESSED))
            .is_empty());
        let done = assembler.push(&record(1, 6, b"world", LAST_PIECE | FD_GUESSED));
        assert_eq!(done.len(), 1);
        let call = &done[0];
        assert_eq!(call.data, b"hello world");
        assert_eq!((call.fd, call.fd_from_earlier_call), (Some(3), true));
        assert_eq!((call.uncaptured_bytes, call.incomplete), (5, false));
        // Call 2 loses its last piece: call 3 on the same thread hands it out, incomplete.
        assert!(assembler.push(&record(2, 0, b"part", 0)).is_empty());
        let done = assembler.push(&record(3, 0, b"", LAST_PIECE));
        assert_eq!(done.len(), 2);
        assert!(done[0].incomplete && done[0].data == b"part");
        assert!(!done[1].incomplete && !done[1].fd_from_earlier_call);
        assert!(assembler.finish().is_empty());
    }

    #[test]
    fn a_thread_name_is_made_once_and_shared() {
        let mut assembler = Assembler::default();
        let mut name_of = |id, comm| {
            let done = assembler.push(&named_record(id, 0, b"x", LAST_PIECE, comm));
            done[0].comm.clone()
        };
        let (a, b, other) = (name_of(1, "nginx"), name_of(2, "nginx"), name_of(3, "curl"));
        assert_eq!((&*a, &*other), ("nginx", "curl"));
        assert!(std::sync::Arc::ptr_eq(&a, &b));
        assert!(!std::sync::Arc::ptr_eq(&a, &other));
        // A name filling all 16 bytes, without a NUL, is read whole.
        assert_eq!(&*name_of(4, "sixteen-bytes-ab"), "sixteen-bytes-ab");
    }
}
