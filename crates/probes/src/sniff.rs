//! The plaintext sniffer: loads `bpf/sniff.bpf.c`, attaches it to the read/write functions of
//! the TLS libraries a target uses, and turns its ring-buffer records back into whole calls.
//! Dropping the [`Sniffer`] detaches everything.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use libbpf_rs::Link;

use crate::loader::{self, Uprobes};
use crate::maps::{tls_libraries, LibraryKind};
use crate::plan::{AttachPoint, Missing, Target};
use crate::skel::sniff::types::{sn_count, sn_counter, sn_endpoints, sn_event, sn_flags, sn_kind};
use crate::skel::sniff::{SniffSkel, SniffSkelBuilder};
use crate::symbols::SymbolTable;
use crate::syscalls::{self, Edge, SyscallHooks};
use crate::Error;

/// The program's name in errors.
const PROGRAM: &str = "sniff";

/// What a sniffed call does with data: `enum sn_kind` in `bpf/sniff.h`, numbered as the
/// program numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Direction {
    /// The program received plaintext (`SSL_read`, ...).
    Read = sn_kind::SN_READ.0 as u8,
    /// The program sent plaintext (`SSL_write`, ...).
    Write = sn_kind::SN_WRITE.0 as u8,
    /// A handshake call (with `handshake` on): no data.
    Handshake = sn_kind::SN_HANDSHAKE.0 as u8,
}

impl Direction {
    fn from_raw(raw: u8) -> Direction {
        const READ: u8 = Direction::Read as u8;
        const WRITE: u8 = Direction::Write as u8;
        match raw {
            READ => Direction::Read,
            WRITE => Direction::Write,
            _ => Direction::Handshake,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Handshake => "handshake",
        }
    }
}

/// How a function returns its byte count (`enum sn_count` in `bpf/sniff.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Count {
    Return = sn_count::SN_COUNT_RET.0 as u8,
    Arg4Pointer = sn_count::SN_COUNT_ARG4_PTR.0 as u8,
}

/// A function the sniffer probes.
#[derive(Clone, Copy, Debug)]
pub struct SniffFunction {
    pub name: &'static str,
    library: LibraryKind,
    direction: Direction,
    count: Count,
    /// NSPR's generic I/O, which serves every kind of file: sniffed only on NSS's TLS layer.
    tls_layer_only: bool,
}

const fn sf(
    name: &'static str,
    library: LibraryKind,
    direction: Direction,
    count: Count,
) -> SniffFunction {
    SniffFunction {
        name,
        library,
        direction,
        count,
        tls_layer_only: false,
    }
}

/// An NSPR I/O function (`PR_Read(fd, buf, amount)` and friends: the byte count returned).
const fn nspr(name: &'static str, direction: Direction) -> SniffFunction {
    SniffFunction {
        name,
        library: LibraryKind::Nspr,
        direction,
        count: Count::Return,
        tls_layer_only: true,
    }
}

/// NSS's libssl as found on disk when a process does not say: the name its mapping has.
const NSS_SSL_FILE: &str = "libssl3.so";

/// The sniff catalog; a function's index here travels in the attach cookie.
pub const SNIFF_FUNCTIONS: &[SniffFunction] = &[
    sf(
        "SSL_read",
        LibraryKind::OpensslSsl,
        Direction::Read,
        Count::Return,
    ),
    sf(
        "SSL_read_ex",
        LibraryKind::OpensslSsl,
        Direction::Read,
        Count::Arg4Pointer,
    ),
    sf(
        "SSL_write",
        LibraryKind::OpensslSsl,
        Direction::Write,
        Count::Return,
    ),
    sf(
        "SSL_write_ex",
        LibraryKind::OpensslSsl,
        Direction::Write,
        Count::Arg4Pointer,
    ),
    sf(
        "gnutls_record_recv",
        LibraryKind::GnuTls,
        Direction::Read,
        Count::Return,
    ),
    sf(
        "gnutls_record_send",
        LibraryKind::GnuTls,
        Direction::Write,
        Count::Return,
    ),
    // NSS: PR_Read/PR_Write and PR_Recv/PR_Send (curl and tstclnt use the latter).
    nspr("PR_Read", Direction::Read),
    nspr("PR_Recv", Direction::Read),
    nspr("PR_Write", Direction::Write),
    nspr("PR_Send", Direction::Write),
    sf(
        "SSL_do_handshake",
        LibraryKind::OpensslSsl,
        Direction::Handshake,
        Count::Return,
    ),
    sf(
        "gnutls_handshake",
        LibraryKind::GnuTls,
        Direction::Handshake,
        Count::Return,
    ),
    sf(
        "SSL_ForceHandshake",
        LibraryKind::Nss,
        Direction::Handshake,
        Count::Return,
    ),
];

/// The attach cookie of a point: its function's index and the fields `bpf/sniff.h` reads
/// (`SN_COOKIE_KIND`, `SN_COOKIE_COUNT`, `SN_COOKIE_TLS_LAYER_ONLY`).
fn cookie(point: &SniffPoint) -> u64 {
    let f = &SNIFF_FUNCTIONS[usize::from(point.id)];
    loader::cookie(
        point.id,
        &[f.direction as u8, f.count as u8, u8::from(f.tls_layer_only)],
    )
}

/// One probe to attach: its function is known by name, `id` is its index in
/// [`SNIFF_FUNCTIONS`].
pub type SniffPoint = AttachPoint<&'static str>;

/// What to sniff.
#[derive(Clone, Debug)]
pub struct SniffConfig {
    /// Only these processes (empty: any).
    pub pids: Vec<u32>,
    pub comm: Option<String>,
    /// Bytes captured per call at most; the rest is counted, not sent.
    pub max_bytes: u32,
    /// Ring buffer size in bytes (a power of two, at least a page).
    pub ring_bytes: u32,
    /// Also report handshake calls (no data).
    pub handshake: bool,
}

/// Where the sniffer attaches, and what it could not find.
#[derive(Clone, Debug, Default)]
pub struct SniffPlan {
    pub points: Vec<SniffPoint>,
    pub missing: Vec<Missing>,
    /// The file name of NSS's libssl, whose method tables mark a PRFileDesc as TLS.
    pub nss_ssl_file: Option<String>,
}

impl SniffPlan {
    /// The read/write functions (and handshake ones with `handshake`) of the targets'
    /// libraries. NSS's data goes through NSPR (`libnspr4.so`): a `--lib` pointing at NSS's
    /// libssl brings in the NSPR next to it.
    pub fn new(targets: &[Target], handshake: bool) -> Result<SniffPlan, Error> {
        let mut plan = SniffPlan::default();
        for target in targets {
            match target {
                Target::Pid(pid) => {
                    let libraries = tls_libraries(*pid)?;
                    if libraries.is_empty() {
                        return Err(Error::NoTlsLibrary { pid: *pid });
                    }
                    for lib in libraries {
                        plan.add(&lib.path, Some(lib.kind), handshake, *pid as i32)?;
                    }
                }
                Target::Library(path) => {
                    let kind = LibraryKind::of(path);
                    plan.add(path, kind, handshake, -1)?;
                    if kind == Some(LibraryKind::Nss) {
                        plan.add_nspr_beside(path, handshake)?;
                    }
                }
                Target::Binary(path) => plan.add(path, None, handshake, -1)?,
            }
        }
        if plan.points.is_empty() {
            let reasons: Vec<String> = plan
                .missing
                .iter()
                .take(3)
                .map(|m| format!("{} in {}: {}", m.function, m.path.display(), m.reason))
                .collect();
            return Err(Error::NothingToAttach {
                reasons: if reasons.is_empty() {
                    "no OpenSSL, GnuTLS or NSS read/write function found".into()
                } else {
                    reasons.join("; ")
                },
            });
        }
        Ok(plan)
    }

    fn add(
        &mut self,
        path: &Path,
        kind: Option<LibraryKind>,
        handshake: bool,
        pid: i32,
    ) -> Result<(), Error> {
        if kind == Some(LibraryKind::OpensslCrypto) {
            return Ok(());
        }
        if kind == Some(LibraryKind::Nss) {
            self.note_nss_ssl(path);
        }
        let table = SymbolTable::read(path)?;
        for (id, f) in (0u16..).zip(SNIFF_FUNCTIONS) {
            if kind.is_some_and(|k| k != f.library) {
                continue;
            }
            if f.direction == Direction::Handshake && !handshake {
                continue;
            }
            match table.uprobe_offset(f.name) {
                Ok(offset) => self.points.push(SniffPoint {
                    id,
                    function: f.name,
                    symbol: f.name,
                    path: path.to_path_buf(),
                    offset,
                    pid,
                }),
                Err(e) if kind.is_some() => self.missing.push(Missing {
                    function: f.name,
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                }),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Remembers NSS's libssl file name; a library target also brings in its NSPR.
    fn note_nss_ssl(&mut self, path: &Path) {
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(name) = real.file_name().and_then(|n| n.to_str()) {
            self.nss_ssl_file = Some(name.to_string());
        }
    }

    /// For `--lib .../libssl3.so`: the NSPR beside it, where NSS's data calls are.
    fn add_nspr_beside(&mut self, nss_ssl: &Path, handshake: bool) -> Result<(), Error> {
        let nspr = nss_ssl.with_file_name("libnspr4.so");
        if nspr.is_file() {
            return self.add(&nspr, Some(LibraryKind::Nspr), handshake, -1);
        }
        self.missing.push(Missing {
            function: "PR_Read",
            path: nspr,
            reason: "NSS's data calls are in NSPR, and no libnspr4.so is beside its libssl3.so; \
                     give --lib PATH/libnspr4.so"
                .into(),
        });
        Ok(())
    }

    /// The name written into the BPF configuration when NSPR functions are probed.
    pub fn tls_layer_file(&self) -> Option<&str> {
        let probes_nspr = self
            .points
            .iter()
            .any(|p| SNIFF_FUNCTIONS[usize::from(p.id)].tls_layer_only);
        probes_nspr.then(|| self.nss_ssl_file.as_deref().unwrap_or(NSS_SSL_FILE))
    }
}

/// One sniffed call, its pieces put back together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub start_ns: u64,
    pub latency_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// The socket; `None` when the call made no syscall and the connection object was not
    /// seen with one before.
    pub fd: Option<i32>,
    /// The fd was not seen in this call but earlier with the same connection object.
    pub fd_from_earlier_call: bool,
    /// The library's connection object (`SSL *`, ...), to tell connections apart.
    pub connection: u64,
    /// (local, peer) of the socket, read from the kernel's socket during the call (or the
    /// earlier call the fd came from); `None` when the fd was not a TCP socket or unknown.
    pub endpoints: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    pub function: &'static str,
    pub direction: Direction,
    pub ret: i64,
    /// Bytes the call moved.
    pub total_bytes: u64,
    pub data: Vec<u8>,
    /// Bytes over the capture limit, not captured.
    pub uncaptured_bytes: u64,
    /// Some of its pieces were lost (ring buffer full): `data` has gaps at the end.
    pub incomplete: bool,
}

/// Kernel-side counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SniffCounters {
    /// Calls the probes saw (whatever their fate in the ring buffer).
    pub calls: u64,
    /// Ring-buffer records that did not fit.
    pub lost_records: u64,
    /// Calls with at least one record lost (or, for NSPR, not checked: see `unchecked`).
    pub lost_calls: u64,
    /// NSPR calls not sniffed because their layer could not be checked (the process's memory
    /// map was locked at that instant); counted in `lost_calls` too.
    pub unchecked: u64,
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
    /// Held, never read: dropping them detaches the probes, before the skeleton unloads.
    _links: Vec<Link>,
    skel: SniffSkel<'static>,
    attached: Vec<SniffPoint>,
    not_attached: Vec<Missing>,
    syscall_hooks: SyscallHooks,
}

impl Sniffer {
    /// Loads and attaches. Probes that fail to attach are listed; none attaching is an error.
    pub fn start(config: &SniffConfig, plan: &SniffPlan) -> Result<Sniffer, Error> {
        let mut open = loader::open(SniffSkelBuilder::default(), PROGRAM)?;
        open.maps
            .events
            .set_max_entries(config.ring_bytes)
            .map_err(|e| Error::bpf("sizing the ring buffer", e))?;
        let rodata = loader::rodata(open.maps.rodata_data.as_deref_mut(), PROGRAM)?;
        let cfg = &mut rodata.cfg;
        loader::set_filter(
            &mut cfg.filter,
            &config.pids,
            config.comm.as_deref(),
            &plan.points,
            false,
        );
        cfg.max_bytes = config.max_bytes;
        if let Some(file) = plan.tls_layer_file() {
            cfg.tls_layer_file = loader::c_name(file);
        }
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
        let ring = builder
            .build()
            .map_err(|e| Error::bpf("reading the ring buffer", e))?;
        loader::allow_pids(&skel.maps.pids, &config.pids)?;
        let uprobes = Uprobes {
            entry: &skel.progs.sniff_enter,
            ret: &skel.progs.sniff_return,
        };
        let attachment = loader::attach_points(&uprobes, &plan.points, false, cookie)?;
        let mut links = attachment.links;
        let mut not_attached = plan.missing.clone();
        not_attached.extend(attachment.refused);
        let (hook_links, syscall_hooks) =
            syscalls::attach(&skel.progs.sniff_sys_enter, Edge::Enter);
        links.extend(hook_links);
        Ok(Sniffer {
            ring,
            records,
            _links: links,
            skel,
            attached: attachment.attached,
            not_attached,
            syscall_hooks,
        })
    }

    pub fn attached(&self) -> &[SniffPoint] {
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
}

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
        let entry = self
            .open
            .entry(tid)
            .or_insert_with(|| (call_id, new_call(e)));
        let call = &mut entry.1;
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

fn new_call(e: &sn_event) -> Call {
    let comm: Vec<u8> = e
        .comm
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Call {
        start_ns: e.start_ns,
        latency_ns: e.latency_ns,
        pid: e.pid,
        tid: e.tid,
        comm: String::from_utf8_lossy(&comm).into_owned(),
        fd: (e.fd >= 0).then_some(e.fd),
        fd_from_earlier_call: e.flags & FD_GUESSED != 0,
        connection: e.ssl,
        endpoints: endpoints(&e.ends),
        function: SNIFF_FUNCTIONS
            .get(usize::from(e.func))
            .map_or("?", |f| f.name),
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
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = |b: &[u8; 16]| -> Option<IpAddr> {
        match i32::from(ends.family) {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
            libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    };
    Some((
        SocketAddr::new(ip(&ends.local_addr)?, ends.local_port),
        SocketAddr::new(ip(&ends.peer_addr)?, ends.peer_port),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skel::sniff::types::sn_limits;

    #[test]
    fn kinds_counts_and_flags_are_numbered_as_the_program_numbers_them() {
        // `as u8` would cut a number over 255 without a word.
        for (ours, theirs) in [
            (Direction::Read as u8, sn_kind::SN_READ.0),
            (Direction::Write as u8, sn_kind::SN_WRITE.0),
            (Direction::Handshake as u8, sn_kind::SN_HANDSHAKE.0),
            (Count::Return as u8, sn_count::SN_COUNT_RET.0),
            (Count::Arg4Pointer as u8, sn_count::SN_COUNT_ARG4_PTR.0),
            (LAST_PIECE, sn_flags::SN_LAST_PIECE.0),
            (FD_GUESSED, sn_flags::SN_FD_GUESSED.0),
        ] {
            assert_eq!(u32::from(ours), theirs);
        }
        for d in [Direction::Read, Direction::Write, Direction::Handshake] {
            assert_eq!(Direction::from_raw(d as u8), d);
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
        let mut e = Box::<sn_event>::default();
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
}
