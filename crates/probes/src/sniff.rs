//! The plaintext sniffer: loads `bpf/sniff.bpf.c`, attaches it to the read/write functions of
//! the TLS libraries a target uses, and turns its ring-buffer records back into whole calls.
//! Dropping the [`Sniffer`] detaches everything.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::time::Duration;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, UprobeOpts};

use crate::maps::{tls_libraries, LibraryKind};
use crate::plan::{Missing, Target};
use crate::symbols::SymbolTable;
use crate::syscalls::{self, Edge, SyscallHooks};
use crate::Error;

mod skel {
    #![allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/sniff.skel.rs"));
}

use skel::types::sn_event;
use skel::{SniffSkel, SniffSkelBuilder};

/// What a sniffed call does with data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The program received plaintext (`SSL_read`, ...).
    Read,
    /// The program sent plaintext (`SSL_write`, ...).
    Write,
    /// A handshake call (with `handshake` on): no data.
    Handshake,
}

impl Direction {
    fn from_raw(raw: u8) -> Direction {
        match raw {
            0 => Direction::Read,
            1 => Direction::Write,
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
enum Count {
    Return = 0,
    Arg4Pointer = 1,
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

fn cookie(index: usize, f: &SniffFunction) -> u64 {
    let kind = match f.direction {
        Direction::Read => 0u64,
        Direction::Write => 1,
        Direction::Handshake => 2,
    };
    index as u64 | (kind << 8) | ((f.count as u64) << 16) | (u64::from(f.tls_layer_only) << 24)
}

/// One probe to attach.
#[derive(Clone, Debug)]
pub struct SniffPoint {
    pub function: &'static str,
    index: usize,
    pub path: PathBuf,
    pub offset: u64,
    pub pid: i32,
}

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
        for (index, f) in SNIFF_FUNCTIONS.iter().enumerate() {
            if kind.is_some_and(|k| k != f.library) {
                continue;
            }
            if f.direction == Direction::Handshake && !handshake {
                continue;
            }
            match table.uprobe_offset(f.name) {
                Ok(offset) => self.points.push(SniffPoint {
                    function: f.name,
                    index,
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
            .any(|p| SNIFF_FUNCTIONS[p.index].tls_layer_only);
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
    links: Vec<Link>,
    skel: SniffSkel<'static>,
    attached: Vec<SniffPoint>,
    not_attached: Vec<Missing>,
    syscall_hooks: SyscallHooks,
}

impl Sniffer {
    /// Loads and attaches. Probes that fail to attach are listed; none attaching is an error.
    pub fn start(config: &SniffConfig, plan: &SniffPlan) -> Result<Sniffer, Error> {
        crate::latency::check_can_trace()?;
        crate::log::install();
        crate::log::forget_warnings();
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = SniffSkelBuilder::default()
            .open(storage)
            .map_err(|e| Error::bpf("opening the sniff BPF object", e))?;
        open.maps
            .events
            .set_max_entries(config.ring_bytes)
            .map_err(|e| Error::bpf("sizing the ring buffer", e))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Bpf {
                what: "setting the sniff program's configuration".into(),
                detail: "the object has no read-only data section".into(),
            })?;
        let cfg = &mut rodata.cfg;
        cfg.filter_pids =
            u8::from(!config.pids.is_empty() && plan.points.iter().any(|p| p.pid == -1));
        cfg.max_bytes = config.max_bytes;
        if let Some(comm) = &config.comm {
            cfg.filter_comm = 1;
            cfg.comm = crate::comm_filter(comm);
        }
        if let Some(file) = plan.tls_layer_file() {
            cfg.tls_layer_file = crate::comm_filter(file);
        }
        let skel = open
            .load()
            .map_err(|e| Error::bpf("loading the sniff BPF programs into the kernel", e))?;
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
        let mut sniffer = Sniffer {
            ring,
            records,
            links: Vec::new(),
            skel,
            attached: Vec::new(),
            not_attached: plan.missing.clone(),
            syscall_hooks: SyscallHooks::Missing("not attached yet".into()),
        };
        for pid in &config.pids {
            crate::allow_pid(&sniffer.skel.maps.pids, *pid)?;
        }
        for point in &plan.points {
            match sniffer.attach(point) {
                Ok(()) => sniffer.attached.push(point.clone()),
                Err(reason) => sniffer.not_attached.push(Missing {
                    function: point.function,
                    path: point.path.clone(),
                    reason,
                }),
            }
        }
        if sniffer.attached.is_empty() {
            return Err(crate::all_refused(
                &sniffer.not_attached[plan.missing.len()..],
            ));
        }
        let (links, hooks) = syscalls::attach(&sniffer.skel.progs.sniff_sys_enter, Edge::Enter);
        sniffer.links.extend(links);
        sniffer.syscall_hooks = hooks;
        Ok(sniffer)
    }

    fn attach(&mut self, point: &SniffPoint) -> Result<(), String> {
        let f = &SNIFF_FUNCTIONS[point.index];
        let cookie = cookie(point.index, f);
        let offset = usize::try_from(point.offset).map_err(|e| e.to_string())?;
        for retprobe in [false, true] {
            let prog = if retprobe {
                &self.skel.progs.sniff_return
            } else {
                &self.skel.progs.sniff_enter
            };
            let opts = UprobeOpts {
                cookie,
                retprobe,
                ..Default::default()
            };
            let link = prog
                .attach_uprobe_with_opts(point.pid, &point.path, offset, opts)
                .map_err(|e| {
                    format!(
                        "the kernel refused the probe: {}",
                        crate::log::with_reason(&e.to_string())
                    )
                })?;
            self.links.push(link);
        }
        Ok(())
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
        let sum = |index: u32| -> Result<u64, Error> {
            let values = self
                .skel
                .maps
                .counters
                .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the sniff counters", e))?
                .unwrap_or_default();
            Ok(values.iter().map(|v| crate::read_pod::<u64>(v)).sum())
        };
        Ok(SniffCounters {
            lost_records: sum(0)?,
            lost_calls: sum(1)?,
            calls: sum(2)?,
            unchecked: sum(3)?,
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
    /// The record being read, kept between records (it is 16 KiB).
    scratch: Box<sn_event>,
}

impl Assembler {
    /// Takes one ring-buffer record; returns the calls it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Call> {
        let header = std::mem::size_of::<sn_event>() - std::mem::size_of::<[u8; 16384]>();
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
        if e.flags & 1 != 0 {
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
        fd_from_earlier_call: e.flags & 2 != 0,
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
fn endpoints(
    ends: &skel::types::sn_endpoints,
) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = |b: &[u8; 16]| -> Option<IpAddr> {
        match ends.family {
            2 => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
            10 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    };
    Some((
        SocketAddr::new(ip(&ends.local_addr)?, ends.local_port),
        SocketAddr::new(ip(&ends.peer_addr)?, ends.peer_port),
    ))
}
