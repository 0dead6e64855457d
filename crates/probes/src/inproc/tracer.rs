//! The in-process tracer: tlsscope's probe library runs inside the traced program and counts
//! each call of the catalog's exported functions in the shared region, which the tracer
//! creates, configures and reads (histograms for `trace`, rings of calls for `sniff`). A probed
//! call costs tens of nanoseconds instead of a kernel probe's trap and single step.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use inproc_abi::{BUCKETS, FUNCTIONS, MAX_SLOTS, OUTCOMES};

use super::attach;
use super::library::{env_region, library_file, LIBRARY};
use super::region::{Lease, Region};
use crate::capture::{socket_pair, Call, CallSink, Polled, SniffCounters};
use crate::catalog::{self, Selection};
use crate::histogram::{Buckets, Calibration, Cell, Outcome, Snapshot};
use crate::maps::LibraryKind;
use crate::plan::{AttachPoint, Attached, Missing, MissingReason, Placement, Threads};
use crate::Error;

/// How much of a ring the reader consumes before handing the space back mid-drain.
const RELEASE_EVERY: u64 = 64 << 10;

/// What the in-process backend times of a selection.
pub struct UserPlan {
    /// The catalog functions it wraps.
    pub attached: Vec<Attached>,
    /// Their indexes in the region.
    pub indexes: Vec<usize>,
    /// The ones it cannot wrap, with why.
    pub missing: Vec<Missing>,
}

/// Plans `selection` for the in-process backend, whose library is at `library`.
pub fn plan(selection: &Selection, library: &Path) -> Result<UserPlan, Error> {
    selection.check()?;
    let (mut attached, mut indexes, mut missing) = (Vec::new(), Vec::new(), Vec::new());
    for kind in LibraryKind::ALL {
        for (id, function) in selection.functions(kind) {
            // SSL_get_error is asked directly, in process: no wrapper needed.
            if function.semantics == catalog::Semantics::OpensslGetError {
                continue;
            }
            match inproc_abi::index_of(function.name) {
                Some(index) => {
                    indexes.push(index);
                    attached.push(Attached {
                        point: AttachPoint {
                            id,
                            function,
                            symbol: function.name,
                            path: library.to_path_buf(),
                            offset: 0,
                            pid: -1,
                            placement: Placement::Entry { emulated: false },
                        },
                    });
                }
                None => missing.push(Missing {
                    function: function.name,
                    path: PathBuf::from(family_file(kind)),
                    reason: MissingReason::InternalToLibrary,
                }),
            }
        }
    }
    if attached.is_empty() {
        return Err(Error::NothingToAttach {
            reasons: "the in-process backend wraps none of the functions asked for".into(),
        });
    }
    Ok(UserPlan {
        attached,
        indexes,
        missing,
    })
}

/// The library families processes `pids` map (a process that has exited maps none).
fn loaded_kinds(pids: impl Iterator<Item = u32>) -> Vec<LibraryKind> {
    let mut kinds = Vec::new();
    for pid in pids {
        for library in crate::maps::tls_libraries(pid).unwrap_or_default() {
            if !kinds.contains(&library.kind) {
                kinds.push(library.kind);
            }
        }
    }
    kinds
}

/// The library family of catalog function `name` (unknown names: OpenSSL's libssl, where a
/// note about them is never wrong to keep).
fn family_of(name: &str) -> LibraryKind {
    catalog::CATALOG
        .iter()
        .find(|f| f.name == name)
        .map_or(LibraryKind::OpensslSsl, |f| f.library)
}

/// The usual file name of a library family, to say where an unwrapped function lives.
fn family_file(kind: LibraryKind) -> &'static str {
    match kind {
        LibraryKind::OpensslSsl => "libssl",
        LibraryKind::OpensslCrypto => "libcrypto",
        LibraryKind::GnuTls => "libgnutls",
        LibraryKind::Nss => "libssl3 (NSS)",
        LibraryKind::Nspr => "libnspr4",
        LibraryKind::Go => "the Go program itself",
    }
}

/// A running in-process trace: the region the program's library writes, read here.
pub struct UserTracer {
    /// Dropped first: it must stop before the region is unmapped.
    _lease: Lease,
    /// Running processes the library was put into (empty for a started program); their
    /// entries are put back when the trace ends.
    attachments: Vec<attach::Attachment>,
    region: Region,
    library: PathBuf,
    attached: Vec<Attached>,
    not_attached: Vec<Missing>,
    per_pid: bool,
    threads: Threads,
    calibration: Option<Calibration>,
    /// Thread names by (pid, tid), read once from /proc per thread for sniffed calls.
    comms: std::sync::Mutex<std::collections::HashMap<(u32, u32), std::sync::Arc<str>>>,
}

impl UserTracer {
    /// Prepares a trace of `selection`: writes the library and creates the region. The
    /// program to trace is then started with [`UserTracer::environment`].
    pub fn new(
        selection: &Selection,
        buckets: Buckets,
        per_pid: bool,
        threads: Threads,
        ring_bytes: u64,
    ) -> Result<UserTracer, Error> {
        let library = library_file()?;
        let plan = plan(selection, &library)?;
        let region = Region::create(&plan.indexes, buckets, ring_bytes)?;
        Ok(UserTracer::with(region, library, plan, per_pid, threads))
    }

    fn with(
        region: Region,
        library: PathBuf,
        plan: UserPlan,
        per_pid: bool,
        threads: Threads,
    ) -> UserTracer {
        UserTracer {
            _lease: Lease::keep(&region),
            attachments: Vec::new(),
            region,
            library,
            attached: plan.attached,
            not_attached: plan.missing,
            per_pid,
            threads,
            calibration: None,
            comms: Default::default(),
        }
    }

    /// Makes `command` run under the library: `LD_PRELOAD` (the library first, then any the
    /// caller had), and the region's descriptor left open for it, named in `TLSSCOPE_INPROC_REGION`.
    pub fn prepare(&self, command: &mut std::process::Command) {
        let mut preload = self.library.as_os_str().to_os_string();
        if let Some(theirs) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
            preload.push(":");
            preload.push(theirs);
        }
        let fd = self.region.raw_fd();
        command.env("LD_PRELOAD", preload);
        command.env(env_region(), format!("fd:{fd}"));
        // SAFETY: the closure only calls fcntl, which is async-signal-safe, on a descriptor
        // this process owns (the child's copy keeps its number).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(command, move || {
                if libc::fcntl(fd, libc::F_SETFD, 0) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }

    /// Traces `selection` in running processes `pids` and their descendants (a server's
    /// workers): checks them all, then puts the library into each and redirects its calls (see
    /// `attach`). Any refusal undoes what was done and names the process and why.
    pub fn attach(
        selection: &Selection,
        buckets: Buckets,
        per_pid: bool,
        pids: &[u32],
        comm: Option<String>,
        ring_bytes: u64,
    ) -> Result<UserTracer, Error> {
        let library = attach::library_path(&library_file()?);
        let symbols = attach::LibrarySymbols::read(LIBRARY).map_err(|reason| Error::Attach {
            pid: pids.first().copied().unwrap_or(0),
            reason: reason.into(),
        })?;
        let plan = plan(selection, &library)?;
        let indexes = plan.indexes.clone();
        let processes = crate::maps::with_descendants(pids);
        for &pid in &processes {
            attach::check(pid).map_err(refused)?;
        }
        let region = Region::create_file(&indexes, buckets, ring_bytes)?;
        let region_path = region.path().map(Path::to_path_buf).unwrap_or_default();
        // Every process the library is in is reported: respawned workers have new PIDs.
        // Every attached process and its descendants count; --comm still narrows the threads.
        let threads = Threads {
            pids: Vec::new(),
            comm,
        };
        let mut tracer = UserTracer::with(region, library, plan, per_pid, threads);
        for pid in processes {
            tracer.region.give_to(pid);
            let request = attach::Request {
                library: &tracer.library,
                symbols: &symbols,
                region: &region_path,
                wanted: &indexes,
            };
            // On an error, dropping the tracer puts back what was swapped so far.
            let attachment = attach::attach(pid, &request).map_err(refused)?;
            tracer.attachments.push(attachment);
        }
        tracer.region.unlink();
        tracer.keep_called();
        Ok(tracer)
    }

    /// After attaching: a function no attached process calls through a GOT entry of its own is
    /// not traced (its calls, if any, bypass the wrappers: through dlsym pointers, or from
    /// inside its library), and says so where its library is one the processes load; of a
    /// library none of them loads (GnuTLS in nginx) nothing is said.
    fn keep_called(&mut self) {
        let called: Vec<usize> = self
            .attachments
            .iter()
            .flat_map(|a| a.called.iter().copied())
            .collect();
        let loaded = loaded_kinds(self.attachments.iter().map(|a| a.pid));
        let (kept, bypassed): (Vec<Attached>, Vec<Attached>) = std::mem::take(&mut self.attached)
            .into_iter()
            .partition(|a| {
                inproc_abi::index_of(a.point.function.name).is_some_and(|i| called.contains(&i))
            });
        self.attached = kept;
        self.not_attached
            .retain(|m| loaded.contains(&family_of(m.function)));
        let bypassed = bypassed
            .into_iter()
            .filter(|a| loaded.contains(&a.point.function.library));
        self.not_attached.extend(bypassed.map(|a| Missing {
            function: a.point.function.name,
            path: PathBuf::from(family_file(a.point.function.library)),
            reason: MissingReason::NoOwnGotEntry,
        }));
    }

    /// The running processes the library was put into, and what was swapped in each.
    pub fn attachments(&self) -> &[attach::Attachment] {
        &self.attachments
    }

    /// Puts back every swapped GOT entry, in the attached processes and the children they
    /// forked since. Returns how many entries, and the processes where that failed, with why.
    pub fn detach(&mut self) -> (usize, Vec<(u32, String)>) {
        self.region.deactivate();
        let (mut restored, mut failed) = (0, Vec::new());
        let roots: Vec<u32> = self.attachments.iter().map(|a| a.pid).collect();
        for a in std::mem::take(&mut self.attachments) {
            let forked = attach::forked_since(a.pid, &roots, &self.library);
            for pid in std::iter::once(a.pid).chain(forked) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    continue;
                }
                match attach::restore(pid, &a.swapped) {
                    Ok(n) => restored += n,
                    Err(e) => failed.push((pid, e)),
                }
            }
        }
        (restored, failed)
    }

    pub fn attached(&self) -> &[Attached] {
        &self.attached
    }

    pub fn not_attached(&self) -> &[Missing] {
        &self.not_attached
    }

    pub fn calibration(&self) -> Option<Calibration> {
        self.calibration
    }

    /// The wrappers stop timing, in every process, at once.
    pub fn deactivate(&self) {
        self.region.deactivate();
    }

    /// The wrappers time their calls again, after [`UserTracer::deactivate`] (e.g. after a
    /// warm-up that should not count).
    pub fn activate(&self) {
        self.region.activate();
    }

    /// Measures what the wrapper adds to a call: the library loaded into this process with a
    /// region of its own, `calls` calls of a no-op straight and through the timing path.
    pub fn calibrate(&mut self, calls: u64) -> Result<Calibration, Error> {
        let fail = |detail: String| Error::Bpf {
            what: "calibrating the in-process probe cost".into(),
            detail,
        };
        let own = Region::create(&[], Buckets::Log2, inproc_abi::MIN_RING_BYTES)?;
        let handle = dlopen(&self.library).map_err(fail)?;
        let map: unsafe extern "C" fn(*const libc::c_char) -> i32 =
            symbol(handle, c"tlsscope_inproc_map").map_err(fail)?;
        let calibrate: unsafe extern "C" fn(u64, &mut f64, &mut f64) -> i32 =
            symbol(handle, c"tlsscope_inproc_calibrate").map_err(fail)?;
        let path = CString::new(format!("/proc/self/fd/{}", own.raw_fd()))
            .map_err(|e| fail(e.to_string()))?;
        let (mut plain, mut wrapped) = (0.0, 0.0);
        // SAFETY: both are the library's exported functions, called with their own signatures;
        // the region stays mapped (in the library, until this process ends) after `own` drops.
        let ok =
            unsafe { map(path.as_ptr()) == 0 && calibrate(calls, &mut plain, &mut wrapped) == 0 };
        if !ok {
            return Err(fail("the library could not map its region".into()));
        }
        let c = Calibration {
            calls,
            plain_ns_per_call: plain,
            probed_ns_per_call: wrapped,
        };
        self.calibration = Some(c);
        Ok(c)
    }

    /// Makes the wrappers copy each sniffed call (the plan's functions that the catalog says
    /// carry plaintext, or a handshake) into their thread's ring, `max_bytes` of payload at
    /// most.
    pub fn enable_sniff(&self, max_bytes: u32) {
        let h = self.region.header();
        for a in &self.attached {
            let (Some(index), Some(sniffed)) = (
                inproc_abi::index_of(a.point.function.name),
                a.point.function.sniffed,
            ) else {
                continue;
            };
            let kind = match sniffed.direction {
                catalog::Direction::Read => inproc_abi::SNIFF_READ,
                catalog::Direction::Write => inproc_abi::SNIFF_WRITE,
                catalog::Direction::Handshake => inproc_abi::SNIFF_HANDSHAKE,
            };
            let count = match sniffed.count {
                catalog::Count::Return => inproc_abi::COUNT_RETURN,
                catalog::Count::Arg4Pointer => inproc_abi::COUNT_ARG4_POINTER,
            };
            h.sniff_count[index].store(count, Ordering::Relaxed);
            h.sniff_kind[index].store(kind, Ordering::Relaxed);
        }
        h.max_bytes.store(max_bytes, Ordering::Relaxed);
        h.sniff.store(1, Ordering::Release);
    }

    /// Hands `sink` each sniffed call the rings hold, oldest first per thread, with its
    /// payload read in place in the ring (not copied); the rings are emptied. Returns how many,
    /// and how full the fullest ring was.
    pub fn visit_calls(&self, sink: &mut CallSink<'_>) -> Polled {
        let h = self.region.header();
        let taken = (h.slots_taken.load(Ordering::Acquire) as usize).min(MAX_SLOTS);
        let ring_bytes = self.region.ring_bytes as u64;
        let (mut seen, mut fullest) = (0, 0u64);
        // One call, refilled per record: its payload is the `bytes` handed beside it.
        let mut call: Option<Call> = None;
        for i in 0..taken {
            let pid = self.region.slot(i).pid.load(Ordering::Acquire);
            let (ring, data) = self.region.ring(i);
            let head = ring.head.load(Ordering::Acquire);
            let mut tail = ring.tail.load(Ordering::Relaxed);
            fullest = fullest.max(head - tail);
            let mut released = tail;
            while tail < head {
                // A long drain hands space back as it goes, so the thread need not wait for the
                // end of it to find room.
                if tail - released >= RELEASE_EVERY {
                    ring.tail.store(tail, Ordering::Release);
                    released = tail;
                }
                let at = (tail % ring_bytes) as usize;
                // SAFETY: [tail, head) holds records the thread finished writing (its Release
                // store of head, read with Acquire above), within the ring's data; the thread
                // writes there again only after a Release store of tail past them, made once
                // the sink is done with them.
                let size = unsafe { std::ptr::read_unaligned(data.add(at).cast::<u32>()) };
                if size & inproc_abi::PADDING != 0 {
                    tail += u64::from(size & !inproc_abi::PADDING);
                    continue;
                }
                // SAFETY: as above: a whole Record and its payload start at `at`.
                let r =
                    unsafe { std::ptr::read_unaligned(data.add(at).cast::<inproc_abi::Record>()) };
                let payload = at + std::mem::size_of::<inproc_abi::Record>();
                let len = (r.len as usize).min(self.region.ring_bytes - payload);
                // SAFETY: as above.
                let bytes = unsafe { std::slice::from_raw_parts(data.add(payload), len) };
                if (pid == 0 || self.wants(pid, r.tid)) && r.size > 0 {
                    let filled = match call.as_mut() {
                        // Each ring is one thread's: its name is looked up once per ring.
                        Some(c) if (c.pid, c.tid) == (r.pid, r.tid) => {
                            self.refill(c, &r);
                            c
                        }
                        _ => call.insert(self.call_of(&r, self.comm(r.pid, r.tid))),
                    };
                    sink(filled, bytes);
                    seen += 1;
                }
                tail += u64::from(r.size.max(8));
            }
            ring.tail.store(tail, Ordering::Release);
        }
        Polled {
            calls: seen,
            fullest: Some(fullest as f64 / ring_bytes as f64),
        }
    }

    /// A call from a ring record, without its payload (handed apart).
    fn call_of(&self, r: &inproc_abi::Record, comm: std::sync::Arc<str>) -> Call {
        let mut call = Call {
            start_ns: 0,
            latency_ns: 0,
            pid: r.pid,
            tid: r.tid,
            comm,
            fd: None,
            fd_from_earlier_call: false,
            connection: 0,
            endpoints: None,
            function: "?",
            direction: catalog::Direction::Handshake,
            ret: 0,
            total_bytes: 0,
            data: Vec::new(),
            uncaptured_bytes: 0,
            incomplete: false,
        };
        self.refill(&mut call, r);
        call
    }

    /// Sets everything of `call` that differs between one thread's records.
    fn refill(&self, call: &mut Call, r: &inproc_abi::Record) {
        call.start_ns = r.start_ns;
        call.latency_ns = r.latency_ns;
        call.fd = (r.fd >= 0).then_some(r.fd);
        call.connection = r.connection;
        call.endpoints = socket_pair(
            r.family,
            (&r.local_addr, r.local_port),
            (&r.peer_addr, r.peer_port),
        );
        call.function = FUNCTIONS
            .get(usize::from(r.function))
            .map_or("?", |f| f.name);
        call.direction = match r.kind {
            inproc_abi::SNIFF_READ => catalog::Direction::Read,
            inproc_abi::SNIFF_WRITE => catalog::Direction::Write,
            _ => catalog::Direction::Handshake,
        };
        call.ret = r.ret;
        call.total_bytes = r.total_bytes;
        call.uncaptured_bytes = r.uncaptured;
    }

    /// Thread `tid`'s name, read from /proc the first time it is asked for (a few threads make
    /// every call: reading it per call cost more than the rest of the reader).
    fn comm(&self, pid: u32, tid: u32) -> std::sync::Arc<str> {
        let mut comms = self.comms.lock().unwrap_or_else(|e| e.into_inner());
        if comms.len() > 4096 {
            comms.clear();
        }
        comms
            .entry((pid, tid))
            .or_insert_with(|| {
                std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
                    .map(|c| c.trim_end().into())
                    .unwrap_or_else(|_| "".into())
            })
            .clone()
    }

    /// The rings' counters, as the kernel sniffer's: every lost call is one lost record.
    pub fn sniff_counters(&self) -> SniffCounters {
        let h = self.region.header();
        let taken = (h.slots_taken.load(Ordering::Acquire) as usize).min(MAX_SLOTS);
        let mut c = SniffCounters::default();
        for i in 0..taken {
            let (ring, _) = self.region.ring(i);
            c.calls += ring.calls.load(Ordering::Relaxed);
            let lost = ring.lost.load(Ordering::Relaxed);
            c.lost_calls += lost;
            c.lost_records += lost;
        }
        c.wrapper_failures = h
            .wrapper_failures
            .iter()
            .map(|n| u64::from(n.load(Ordering::Relaxed)))
            .sum();
        c
    }

    /// Everything counted so far, in every process, as the kernel backend reports it.
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        let h = self.region.header();
        let taken = (h.slots_taken.load(Ordering::Acquire) as usize).min(MAX_SLOTS);
        let ids: Vec<Option<u16>> = FUNCTIONS.iter().map(|f| catalog::id_of(f.name)).collect();
        let mut snap = Snapshot {
            dropped_cells: h.calls_without_slot.load(Ordering::Relaxed),
            wrapper_failures: ids
                .iter()
                .zip(&h.wrapper_failures)
                .filter_map(|(id, n)| Some(((*id)?, u64::from(n.load(Ordering::Relaxed)))))
                .filter(|&(_, n)| n > 0)
                .collect(),
            ..Snapshot::default()
        };
        for i in 0..taken {
            let slot = self.region.slot(i);
            let pid = slot.pid.load(Ordering::Acquire);
            if pid == 0 || !self.wants(pid, slot.tid.load(Ordering::Relaxed)) {
                continue;
            }
            snap.calls += slot.calls.load(Ordering::Relaxed);
            for (index, id) in ids.iter().enumerate() {
                let Some(id) = *id else { continue };
                for (o, outcome) in OUTCOME_ORDER.iter().enumerate().take(OUTCOMES) {
                    for bucket in 0..BUCKETS {
                        let cell = &slot.cells[index][o][bucket];
                        let count = cell.count.load(Ordering::Relaxed);
                        if count == 0 {
                            continue;
                        }
                        snap.add(Cell {
                            pid: if self.per_pid { pid } else { 0 },
                            function: id,
                            outcome: *outcome,
                            bucket: u8::try_from(bucket).unwrap_or(u8::MAX),
                            count,
                            total_ns: cell.total_ns.load(Ordering::Relaxed),
                        });
                    }
                }
            }
        }
        Ok(snap)
    }

    /// Whether a thread's counts and calls are reported (-p narrows a started program's
    /// processes; --comm, the threads by name).
    fn wants(&self, pid: u32, tid: u32) -> bool {
        (self.threads.pids.is_empty() || self.threads.pids.contains(&pid))
            && self
                .threads
                .comm
                .as_ref()
                .is_none_or(|comm| **comm == *self.comm(pid, tid))
    }
}

impl Drop for UserTracer {
    fn drop(&mut self) {
        if !self.attachments.is_empty() {
            self.detach();
        }
    }
}

fn refused(r: attach::Refused) -> Error {
    Error::Attach {
        pid: r.pid,
        reason: r.reason,
    }
}

/// The region's outcome numbers, in order (they are `enum ts_outcome`'s: see `inproc_abi`).
const OUTCOME_ORDER: [Outcome; OUTCOMES] = [
    Outcome::Success,
    Outcome::Retry,
    Outcome::Failure,
    Outcome::Unknown,
    Outcome::Closed,
    Outcome::RetryAsync,
];

fn dlopen(path: &Path) -> Result<*mut libc::c_void, String> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: dlopen with a NUL-terminated path. RTLD_LOCAL: its definitions of the TLS
    // functions stay out of this process's global scope.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return Err(format!("cannot load {}", path.display()));
    }
    Ok(handle)
}

fn symbol<T: Copy>(handle: *mut libc::c_void, name: &std::ffi::CStr) -> Result<T, String> {
    // SAFETY: dlsym on a live handle with a NUL-terminated name.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(format!(
            "the in-process library lacks {}",
            name.to_string_lossy()
        ));
    }
    assert_eq!(
        std::mem::size_of::<T>(),
        std::mem::size_of::<*mut libc::c_void>()
    );
    // SAFETY: T is the function pointer type of the symbol, the size of a pointer.
    Ok(unsafe { std::mem::transmute_copy::<*mut libc::c_void, T>(&p) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_s_outcome_numbers_name_their_outcomes() {
        // The numbers themselves are the kernel program's: checked in `kernel::latency`.
        for (number, outcome) in [
            (inproc_abi::SUCCESS, Outcome::Success),
            (inproc_abi::RETRY, Outcome::Retry),
            (inproc_abi::FAILURE, Outcome::Failure),
            (inproc_abi::UNKNOWN, Outcome::Unknown),
            (inproc_abi::CLOSED, Outcome::Closed),
            (inproc_abi::RETRY_ASYNC, Outcome::RetryAsync),
        ] {
            assert_eq!(OUTCOME_ORDER[usize::from(number)], outcome);
        }
    }

    #[test]
    fn internal_functions_are_listed_with_the_way_to_get_them() {
        let lib = Path::new("/x/libtlsscope_inproc.so");
        let UserPlan {
            attached,
            indexes,
            missing,
        } = plan(
            &Selection::latency(crate::catalog::Groups::all(), false),
            lib,
        )
        .unwrap();
        assert_eq!(attached.len(), indexes.len());
        assert!(attached
            .iter()
            .any(|a| a.point.function.name == "SSL_read_ex"));
        let rsa = missing
            .iter()
            .find(|m| m.function == "rsa_ossl_private_decrypt")
            .unwrap();
        assert_eq!(rsa.reason, MissingReason::InternalToLibrary);
    }

    /// Writes `n` records of `payload` bytes into slot 0's ring, as a wrapper does.
    fn fill_ring(tracer: &UserTracer, n: usize, payload: usize) -> u64 {
        let (ring, data) = tracer.region.ring(0);
        let record = std::mem::size_of::<inproc_abi::Record>();
        let size = (record + payload).next_multiple_of(8);
        let mut head = ring.head.load(Ordering::Relaxed);
        for _ in 0..n {
            let at = (head % tracer.region.ring_bytes as u64) as usize;
            let r = inproc_abi::Record {
                size: size as u32,
                len: payload as u32,
                kind: inproc_abi::SNIFF_READ,
                ..Default::default()
            };
            // SAFETY: the test's own region; every record fits before the ring's end.
            unsafe {
                let at = data.cast_mut().add(at);
                std::ptr::write_unaligned(at.cast::<inproc_abi::Record>(), r);
                std::ptr::write_bytes(at.add(record), b'x', payload);
            }
            head += size as u64;
        }
        ring.head.store(head, Ordering::Release);
        tracer
            .region
            .header()
            .slots_taken
            .store(1, Ordering::Release);
        head
    }

    #[test]
    fn a_long_drain_hands_ring_space_back_before_it_ends_and_tells_how_full_the_ring_was() {
        let ring_bytes = 1 << 20;
        let tracer = UserTracer::new(
            &Selection::latency(crate::catalog::Groups::all(), false),
            Buckets::Log2,
            false,
            Threads::default(),
            ring_bytes,
        )
        .unwrap();
        // A quarter of the ring: four times what is handed back at once.
        let head = fill_ring(&tracer, 256, 1000);
        let (ring, _) = tracer.region.ring(0);
        let mut tails = Vec::new();
        let polled = tracer.visit_calls(&mut |call, bytes| {
            assert_eq!(
                (call.direction, bytes.len()),
                (catalog::Direction::Read, 1000)
            );
            tails.push(ring.tail.load(Ordering::Acquire));
        });
        assert_eq!(polled.calls, 256);
        let fullest = polled.fullest.unwrap();
        assert!(
            (fullest - head as f64 / ring_bytes as f64).abs() < 1e-9,
            "{fullest}"
        );
        assert_eq!(ring.tail.load(Ordering::Acquire), head);
        // Space came back while the sink still had records to take, in steps of RELEASE_EVERY.
        let last = *tails.last().unwrap();
        assert!(
            last > 0 && last < head && head - last <= RELEASE_EVERY + 2000,
            "{last} of {head}"
        );
        let empty = tracer.visit_calls(&mut |_, _| panic!("the ring was emptied"));
        assert_eq!((empty.calls, empty.fullest), (0, Some(0.0)));
    }
}
