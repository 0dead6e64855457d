//! Sniffing in process: a call's plaintext, copied right after the call into its thread's ring
//! (`inproc_abi::Ring`) for tlsscope to read. A full ring loses the record and counts it; the
//! thread never waits.

use std::sync::atomic::Ordering;

use inproc_abi::{
    Header, Record, Semantics, Slot, COUNT_ARG4_POINTER, GNUTLS_GET_FD, NSPR_GET_FD, PADDING,
    SNIFF_HANDSHAKE, SSL_GET_FD,
};

use crate::region;
use crate::wrap::{resolve, tlsscope_inproc_real, FinishedCall};

/// Writes the call into this thread's ring, if its function is sniffed.
pub fn record(header: &Header, slot: &'static Slot, call: &FinishedCall) {
    let Some(kind) = header
        .sniff_kind
        .get(call.index)
        .map(|k| k.load(Ordering::Relaxed))
        .filter(|&k| k != 0)
    else {
        return;
    };
    // NSPR's calls serve every kind of file: only NSS's TLS layer carries plaintext.
    // SAFETY: the program just passed args[0] to an NSPR I/O call: a live PRFileDesc.
    if call.semantics == Semantics::NsprIo && !unsafe { nss_tls_layer(call.args[0]) } {
        return;
    }
    let Some((ring, data)) = region::ring_of(slot) else {
        return;
    };
    ring.calls.fetch_add(1, Ordering::Relaxed);
    let count = header.sniff_count[call.index].load(Ordering::Relaxed);
    let total = if kind == SNIFF_HANDSHAKE {
        0
    } else {
        bytes_moved(call, count)
    };
    let max = u64::from(header.max_bytes.load(Ordering::Relaxed));
    let len = total.min(max) as usize;
    let head_size = std::mem::size_of::<Record>();
    let size = (head_size + len).next_multiple_of(8);
    let head = ring.head.load(Ordering::Relaxed);
    let tail = ring.tail.load(Ordering::Acquire);
    let ring_bytes = header.ring_bytes.load(Ordering::Relaxed) as usize;
    let at = (head % ring_bytes as u64) as usize;
    // A record never wraps: the end of the ring is skipped with a filler when it is short.
    let filler = if ring_bytes - at < size {
        ring_bytes - at
    } else {
        0
    };
    if (head - tail) as usize + filler + size > ring_bytes {
        ring.lost.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: fd helpers take the connection object the program just used.
    let fd = match unsafe { fd_of(call.semantics, call.args[0]) } {
        // A BIO of the program's own: the socket its I/O used.
        ..0 => crate::sockets::of_connection(call.args[0], call.io_fd),
        fd => fd,
    };
    let r = Record {
        size: size as u32,
        len: len as u32,
        start_ns: call.start_ns,
        latency_ns: call.latency_ns,
        ret: returned(call),
        connection: call.args[0] as u64,
        total_bytes: total,
        uncaptured: total - len as u64,
        // The slot's: taken by this thread (after a fork, again), no system call per record.
        pid: slot.pid.load(Ordering::Relaxed),
        tid: slot.tid.load(Ordering::Relaxed),
        fd,
        function: call.index as u16,
        kind,
        _pad: 0,
        ..ends_of(fd)
    };
    // SAFETY: the ring's data is `ring_bytes` bytes of the region; every write below stays within
    // it (checked above), in bytes tlsscope has consumed; `args[1]` is the call's buffer, of
    // which the call moved at least `len` bytes.
    unsafe {
        let mut at = at;
        if filler > 0 {
            std::ptr::write_unaligned(data.add(at).cast::<u32>(), filler as u32 | PADDING);
            at = 0;
        }
        std::ptr::write_unaligned(data.add(at).cast::<Record>(), r);
        std::ptr::copy_nonoverlapping(call.args[1] as *const u8, data.add(at + head_size), len);
    }
    ring.head
        .store(head + (filler + size) as u64, Ordering::Release);
}

/// The bytes the call moved: its return value, or what it wrote through its fourth argument.
fn bytes_moved(call: &FinishedCall, count: u8) -> u64 {
    if count != COUNT_ARG4_POINTER {
        return u64::try_from(returned(call)).unwrap_or(0);
    }
    if returned(call) <= 0 || call.args[3] == 0 {
        return 0;
    }
    // SAFETY: a successful `_ex` call wrote the byte count through its `size_t *` argument.
    unsafe { *(call.args[3] as *const usize) as u64 }
}

/// A record with the ends of socket `fd` filled in (all unknown for -1).
fn ends_of(fd: i32) -> Record {
    let e = if fd < 0 {
        crate::sockets::Ends::default()
    } else {
        crate::sockets::ends(fd)
    };
    Record {
        family: e.family,
        local_port: e.local_port,
        peer_port: e.peer_port,
        local_addr: e.local_addr,
        peer_addr: e.peer_addr,
        ..Record::default()
    }
}

/// The return value: GnuTLS's record calls return a `ssize_t`, the others an `int` (the upper
/// half of the register is not theirs).
fn returned(call: &FinishedCall) -> i64 {
    if call.semantics == Semantics::GnuTls {
        call.ret as i64
    } else {
        i64::from(call.ret as i32)
    }
}

/// The socket under a connection object: `SSL_get_fd`, `gnutls_transport_get_int`.
///
/// # Safety
/// `connection` is the object the program just passed to a call of that library.
unsafe fn fd_of(semantics: Semantics, connection: usize) -> i32 {
    let (name, slot) = match semantics {
        Semantics::OpensslIo | Semantics::OpensslShutdown => (c"SSL_get_fd", SSL_GET_FD),
        Semantics::GnuTls => (c"gnutls_transport_get_int", GNUTLS_GET_FD),
        Semantics::NsprIo => (c"PR_FileDesc2NativeHandle", NSPR_GET_FD),
        _ => return -1,
    };
    let Some(f) = resolve(name, &tlsscope_inproc_real[slot]) else {
        return -1;
    };
    type GetFd = unsafe extern "C" fn(usize) -> i32;
    // SAFETY: both take the connection object and only read it.
    unsafe { std::mem::transmute::<usize, GetFd>(f)(connection) }
}

/// Method tables checked lately on this thread, and whether each is NSS's TLS layer's: a
/// program has a handful (sockets, files, the SSL layer), so `dladdr` runs once per table.
const CHECKED: usize = 4;

thread_local! {
    static LAYERS: std::cell::Cell<([(usize, bool); CHECKED], usize)> =
        const { std::cell::Cell::new(([(0, false); CHECKED], 0)) };
}

/// Whether NSPR file `fd` is NSS's TLS layer: its method table (a `PRFileDesc` starts with a
/// pointer to it, nspr/pr/include/prio.h) lies in NSS's libssl3, as the kernel backend checks.
///
/// # Safety
/// `fd` is a live `PRFileDesc` (one the program just passed to NSPR).
unsafe fn nss_tls_layer(fd: usize) -> bool {
    if fd == 0 {
        return false;
    }
    // SAFETY: the caller guarantees fd points to a PRFileDesc, whose first field is this.
    let methods = unsafe { *(fd as *const usize) };
    LAYERS
        .try_with(|cell| {
            let (mut known, next) = cell.get();
            if let Some(&(_, tls)) = known.iter().find(|(m, _)| *m == methods && methods != 0) {
                return tls;
            }
            let tls = in_libssl3(methods);
            known[next] = (methods, tls);
            cell.set((known, (next + 1) % CHECKED));
            tls
        })
        .unwrap_or(false)
}

/// Whether address `p` lies in NSS's `libssl3.so`.
fn in_libssl3(p: usize) -> bool {
    // SAFETY: Dl_info is plain data, valid all zeroes; dladdr only fills it for any address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    if unsafe { libc::dladdr(p as *const libc::c_void, &mut info) } == 0 || info.dli_fname.is_null()
    {
        return false;
    }
    // SAFETY: dli_fname is the loader's NUL-terminated path of the object.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    path.rsplit(|&b| b == b'/').next() == Some(b"libssl3.so".as_slice())
}
