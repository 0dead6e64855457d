//! The wrappers: one exported function per entry of `inproc_abi::FUNCTIONS`, each timing its
//! call to the real function (set by tlsscope in [`tlsscope_inproc_real`], or found with
//! `dlsym(RTLD_NEXT)` once) and counting it.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use inproc_abi::{
    linear_bucket, log2_bucket, Header, Semantics, Slot, BUCKETS, CLOSED, FAILURE, FUNCTIONS,
    MAX_FUNCTIONS, OUTCOMES, PR_GET_ERROR, REAL_SLOTS, RETRY, RETRY_ASYNC, SSL_GET_ERROR, SUCCESS,
    UNKNOWN,
};

/// The real functions, per `inproc_abi::FUNCTIONS` index and then per helper (see
/// `inproc_abi::REAL_TABLE`): 0 until looked up or set by tlsscope, 1 when not found.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static tlsscope_inproc_real: [AtomicUsize; REAL_SLOTS] =
    [const { AtomicUsize::new(0) }; REAL_SLOTS];

use crate::region;
use crate::sniff;
use crate::sockets;

/// Any wrapped function, as the wrappers call it (see the crate's doc).
type Real = unsafe extern "C" fn(usize, usize, usize, usize, usize, usize) -> isize;

/// `dlsym(RTLD_NEXT, name)`, else [`find_loaded`], cached in `cache` (0: not looked up, 1: not
/// found).
#[inline(always)]
pub(crate) fn resolve(name: &CStr, cache: &AtomicUsize) -> Option<usize> {
    let mut f = cache.load(Ordering::Relaxed);
    if f == 0 {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; a null result is handled.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
        f = if p != 0 {
            p
        } else {
            find_loaded(name).unwrap_or(1)
        };
        cache.store(f, Ordering::Relaxed);
    }
    (f != 1).then_some(f)
}

/// `name` in an object loaded outside the global scope, which `dlsym(RTLD_NEXT)` does not
/// search: a libssl that Python's `_ssl` module brought in with `RTLD_LOCAL`, or one a program
/// opened itself. Each loaded object is asked for the symbol through its own dependency tree;
/// the first answer outside this library wins.
#[cold]
fn find_loaded(name: &CStr) -> Option<usize> {
    let own = object_base(tlsscope_inproc_real.as_ptr() as usize)?;
    let mut objects: Vec<(usize, CString)> = Vec::new();
    // SAFETY: the callback only reads the entries it is given and pushes to the Vec passed
    // as `data`, which outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(list_object), (&mut objects as *mut Vec<_>).cast()) };
    objects
        .iter()
        .filter(|(base, _)| *base != own)
        .find_map(|(_, path)| symbol_of(path, name))
        .filter(|&p| object_base(p) != Some(own))
}

/// `dl_iterate_phdr`'s callback: adds each named object (not the program, not the vDSO) with
/// its load address to the `Vec<(usize, CString)>` at `data`.
unsafe extern "C" fn list_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: the loader passes a valid entry and our `data`, a live `Vec<(usize, CString)>`.
    let (info, objects) = unsafe { (&*info, &mut *data.cast::<Vec<(usize, CString)>>()) };
    if !info.dlpi_name.is_null() {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        let path = unsafe { CStr::from_ptr(info.dlpi_name) };
        if !path.is_empty() {
            objects.push((info.dlpi_addr as usize, path.to_owned()));
        }
    }
    0
}

/// `name` as seen from the already loaded object `path` (its dependency tree).
fn symbol_of(path: &CStr, name: &CStr) -> Option<usize> {
    // SAFETY: RTLD_NOLOAD only hands out a handle of an object already loaded; both strings
    // are NUL-terminated. The handle is given back at once (the object stays loaded).
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if handle.is_null() {
            return None;
        }
        let p = libc::dlsym(handle, name.as_ptr()) as usize;
        libc::dlclose(handle);
        (p != 0).then_some(p)
    }
}

/// The load address of the object holding address `p`.
fn object_base(p: usize) -> Option<usize> {
    // SAFETY: Dl_info is plain data, valid all zeroes; dladdr only fills it.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr accepts any address and reports whether an object holds it.
    (unsafe { libc::dladdr(p as *const libc::c_void, &mut info) } != 0)
        .then_some(info.dli_fbase as usize)
}

/// Monotonic nanoseconds (the vDSO's clock: no system call).
#[inline(always)]
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// One call of function `index` through its wrapper.
///
/// # Safety
/// `args` are the caller's registers for the real function named `name`.
#[inline(always)]
unsafe fn call(index: usize, name: &CStr, real: &AtomicUsize, args: [usize; 6]) -> isize {
    let Some(f) = resolve(name, real) else {
        return unresolved();
    };
    // SAFETY: f is the address of the real function, called with the caller's own registers.
    let f: Real = unsafe { std::mem::transmute::<usize, Real>(f) };
    let [a, b, c, d, e, g] = args;
    let header = match region::header() {
        Some(h) if on(h, index) => h,
        // SAFETY: as above.
        _ => return unsafe { f(a, b, c, d, e, g) },
    };
    let start = now_ns();
    if start >= header.lease_until_ns.load(Ordering::Relaxed) {
        // tlsscope has stopped renewing its lease: gone without clearing `active`.
        // SAFETY: as above.
        return unsafe { f(a, b, c, d, e, g) };
    }
    let sniffing = sniffed(header, index);
    if sniffing {
        sockets::watch();
    }
    // SAFETY: as above.
    let ret = unsafe { f(a, b, c, d, e, g) };
    let latency_ns = now_ns().saturating_sub(start);
    let io_fd = if sniffing { sockets::unwatch() } else { -1 };
    // What the caller will read after the return: left as the real function set it.
    // SAFETY: __errno_location returns this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let call = FinishedCall {
        index,
        semantics: FUNCTIONS
            .get(index)
            .map_or(Semantics::Positive, |f| f.semantics),
        args,
        ret,
        start_ns: start,
        latency_ns,
        io_fd,
    };
    guarded(header, index, || note(header, &call, sniffing));
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    ret
}

/// A call that just returned, as its wrapper saw it: what counting and sniffing it need.
pub struct FinishedCall {
    pub index: usize,
    pub semantics: Semantics,
    pub args: [usize; 6],
    pub ret: isize,
    pub start_ns: u64,
    pub latency_ns: u64,
    /// The last descriptor the call read or wrote (`crate::sockets`), or -1.
    pub io_fd: i32,
}

/// Counts a finished call, and copies it for sniff when `sniffing`.
#[inline(always)]
fn note(header: &'static Header, call: &FinishedCall, sniffing: bool) {
    if INJECTED.load(Ordering::Relaxed) == call.index {
        injected_failure(call.index);
    }
    let Some(slot) = region::slot(header) else {
        header.calls_without_slot.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let outcome = outcome(call.semantics, call.args[0], call.ret);
    count(header, slot, call.index, outcome, call.latency_ns);
    if sniffing {
        sniff::record(header, slot, call);
    }
}

/// Runs a wrapper's own work so that a panic in it never reaches the program: caught here,
/// counted in the region, and the wrapper of function `index` only calls through afterwards.
#[inline(always)]
fn guarded(header: &Header, index: usize, work: impl FnOnce()) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).is_err() {
        disable(header, index);
    }
}

/// Takes function `index`'s wrapper out of this process's work after a failure, and counts it.
#[cold]
fn disable(header: &Header, index: usize) {
    if let Some(d) = DISABLED.get(index) {
        d.store(1, Ordering::Relaxed);
    }
    if let Some(n) = header.wrapper_failures.get(index) {
        n.fetch_add(1, Ordering::Relaxed);
    }
}

/// Per function: nonzero once its wrapper failed in this process (inherited by forks).
static DISABLED: [AtomicU8; MAX_FUNCTIONS] = [const { AtomicU8::new(0) }; MAX_FUNCTIONS];

/// The function whose wrapper fails on purpose (`inproc_abi::ENV_INJECT_FAILURE`, for tests of
/// the failure path), else `usize::MAX`.
static INJECTED: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Reads `inproc_abi::ENV_INJECT_FAILURE` (at load time).
pub(crate) fn read_injected_failure() {
    // SAFETY: the name is a NUL-terminated constant; getenv's result is read at once.
    let value = unsafe { libc::getenv(inproc_abi::ENV_INJECT_FAILURE.as_ptr()) };
    if value.is_null() {
        return;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(value) };
    if let Some(i) = FUNCTIONS
        .iter()
        .position(|f| f.name.as_bytes() == name.to_bytes())
    {
        INJECTED.store(i, Ordering::Relaxed);
    }
}

#[cold]
#[inline(never)]
fn injected_failure(index: usize) -> ! {
    panic!("failure injected in wrapper {index}")
}

/// Whether calls of function `index` are copied for sniff now.
#[inline(always)]
fn sniffed(header: &Header, index: usize) -> bool {
    header.sniff.load(Ordering::Relaxed) != 0
        && header
            .sniff_kind
            .get(index)
            .is_some_and(|k| k.load(Ordering::Relaxed) != 0)
}

/// Whether function `index` is timed now.
#[inline(always)]
fn on(header: &Header, index: usize) -> bool {
    header.active.load(Ordering::Relaxed) != 0
        && DISABLED
            .get(index)
            .is_some_and(|d| d.load(Ordering::Relaxed) == 0)
        && header
            .enabled
            .get(index)
            .is_some_and(|e| e.load(Ordering::Relaxed) != 0)
}

/// A call whose real function this process does not have: answered with -1 and ENOSYS (no
/// library defines it, so the program could not have called it without the wrapper).
#[cold]
pub(crate) fn unresolved() -> isize {
    // SAFETY: __errno_location returns this thread's errno.
    unsafe { *libc::__errno_location() = libc::ENOSYS };
    -1
}

/// Adds one call to this thread's slot (only this thread writes it: plain load and store).
#[inline(always)]
fn count(header: &Header, slot: &Slot, index: usize, outcome: u8, latency_ns: u64) {
    let bucket = if header.linear.load(Ordering::Relaxed) != 0 {
        linear_bucket(
            latency_ns,
            header.lin_min_us.load(Ordering::Relaxed),
            header.lin_step_us.load(Ordering::Relaxed),
            header.lin_buckets.load(Ordering::Relaxed),
        )
    } else {
        log2_bucket(latency_ns)
    };
    let bump = |a: &std::sync::atomic::AtomicU64, by: u64| {
        a.store(
            a.load(Ordering::Relaxed).wrapping_add(by),
            Ordering::Relaxed,
        );
    };
    bump(&slot.calls, 1);
    let cell = slot
        .cells
        .get(index)
        .and_then(|f| f.get(usize::from(outcome).min(OUTCOMES - 1)))
        .and_then(|o| o.get(bucket.min(BUCKETS - 1)));
    if let Some(cell) = cell {
        bump(&cell.count, 1);
        bump(&cell.total_ns, latency_ns);
    }
}

/// How the call ended, asking the library where its return value alone cannot say.
#[inline(always)]
fn outcome(semantics: Semantics, first_arg: usize, ret: isize) -> u8 {
    // Every wrapped function returns an int, or a ssize_t that is a byte count or a small
    // negative error: its low 32 bits say it all.
    let rc = ret as i32;
    match semantics {
        Semantics::OpensslIo if rc > 0 => SUCCESS,
        Semantics::OpensslShutdown if rc >= 0 => SUCCESS,
        Semantics::OpensslIo | Semantics::OpensslShutdown => ssl_error(first_arg, rc),
        Semantics::Positive => {
            if rc > 0 {
                SUCCESS
            } else {
                FAILURE
            }
        }
        Semantics::GnuTls => match rc {
            0.. => SUCCESS,
            -28 | -52 => RETRY, // GNUTLS_E_AGAIN, GNUTLS_E_INTERRUPTED
            _ => FAILURE,
        },
        Semantics::NssStatus => match rc {
            0 => SUCCESS,
            -2 => RETRY, // SECWouldBlock
            _ => nspr_error(),
        },
        Semantics::NsprIo if rc >= 0 => SUCCESS,
        Semantics::NsprIo => nspr_error(),
    }
}

/// `SSL_get_error(ssl, rc)`, classed as `settle` in `latency.bpf.c` classes it.
fn ssl_error(ssl: usize, rc: i32) -> u8 {
    let Some(f) = resolve(c"SSL_get_error", &tlsscope_inproc_real[SSL_GET_ERROR]) else {
        return UNKNOWN;
    };
    type GetError = unsafe extern "C" fn(usize, i32) -> i32;
    // SAFETY: SSL_get_error(const SSL *, int) of the library that made the call; it reads the
    // SSL and this thread's error queue and changes neither.
    let code = unsafe { std::mem::transmute::<usize, GetError>(f)(ssl, rc) };
    match code {
        0 => SUCCESS,
        2 | 3 | 4 | 7 | 8 | 11 | 12 => RETRY,
        9 | 10 => RETRY_ASYNC,
        6 => CLOSED,
        _ => FAILURE,
    }
}

/// `PR_GetError()`: would block is a retry, anything else a failure.
fn nspr_error() -> u8 {
    const PR_WOULD_BLOCK_ERROR: i32 = -5998;
    let Some(f) = resolve(c"PR_GetError", &tlsscope_inproc_real[PR_GET_ERROR]) else {
        return UNKNOWN;
    };
    type GetError = unsafe extern "C" fn() -> i32;
    // SAFETY: PR_GetError() reads this thread's NSPR error.
    match unsafe { std::mem::transmute::<usize, GetError>(f)() } {
        PR_WOULD_BLOCK_ERROR => RETRY,
        _ => FAILURE,
    }
}

/// Defines the wrapper of each named function; `$i` must be its index in `FUNCTIONS`
/// (checked by a test).
macro_rules! wrappers {
    ($($name:ident = $i:expr;)+) => {
        $(
            #[no_mangle]
            #[allow(non_snake_case)]
            /// # Safety
            /// Called as the real function, with its arguments.
            pub unsafe extern "C" fn $name(
                a: usize, b: usize, c: usize, d: usize, e: usize, f: usize,
            ) -> isize {
                let name = const {
                    match std::ffi::CStr::from_bytes_with_nul(
                        concat!(stringify!($name), "\0").as_bytes(),
                    ) {
                        Ok(n) => n,
                        Err(_) => panic!("a symbol name has no NUL inside"),
                    }
                };
                // SAFETY: our caller called the real function's name with its arguments.
                unsafe { call($i, name, &tlsscope_inproc_real[$i], [a, b, c, d, e, f]) }
            }
        )+

        /// The wrappers' names in the order of their indexes.
        #[cfg(test)]
        const WRAPPED: &[(&str, usize)] = &[$((stringify!($name), $i)),+];
    };
}

wrappers! {
    SSL_do_handshake = 0;
    SSL_connect = 1;
    SSL_accept = 2;
    SSL_read = 3;
    SSL_read_ex = 4;
    SSL_peek = 5;
    SSL_peek_ex = 6;
    SSL_write = 7;
    SSL_write_ex = 8;
    SSL_shutdown = 9;
    EVP_DigestSign = 10;
    EVP_DigestSignFinal = 11;
    EVP_DigestVerify = 12;
    EVP_DigestVerifyFinal = 13;
    EVP_PKEY_sign = 14;
    EVP_PKEY_derive = 15;
    EVP_PKEY_decrypt = 16;
    EVP_PKEY_keygen = 17;
    X509_verify_cert = 18;
    gnutls_handshake = 19;
    gnutls_record_send = 20;
    gnutls_record_recv = 21;
    SSL_ForceHandshake = 22;
    PR_Read = 23;
    PR_Write = 24;
    PR_Recv = 25;
    PR_Send = 26;
}

/// Maps the region file at `path` for this process (when the library was loaded without one
/// in its environment: into tlsscope itself, or into a running process). 0 when mapped.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tlsscope_inproc_map(path: *const libc::c_char) -> i32 {
    if path.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let path = unsafe { std::ffi::CStr::from_ptr(path) };
    if region::map(path) {
        0
    } else {
        -1
    }
}

/// The index calibration counts under: never a wrapped function's.
const CALIBRATION: usize = MAX_FUNCTIONS - 1;

extern "C" fn calibration_target(
    a: usize,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
    _: usize,
) -> isize {
    std::hint::black_box(a as isize)
}

/// Measures what the wrapper adds to a call: `calls` calls of a no-op straight, then through the
/// timing path (counted in this process's region, under an index no function has). Returns
/// the nanoseconds per call (plain, wrapped), or (0, 0) when no region is mapped here.
#[no_mangle]
pub extern "C" fn tlsscope_inproc_calibrate(
    calls: u64,
    plain_ns: &mut f64,
    wrapped_ns: &mut f64,
) -> i32 {
    let Some(header) = region::header() else {
        return -1;
    };
    header.enabled[CALIBRATION].store(1, Ordering::Relaxed);
    header.lease_until_ns.store(u64::MAX, Ordering::Relaxed);
    header.active.store(1, Ordering::Relaxed);
    let real = AtomicUsize::new(calibration_target as *const () as usize);
    let n = calls.max(1);
    let t = now_ns();
    for i in 0..n {
        std::hint::black_box(calibration_target(i as usize, 0, 0, 0, 0, 0));
    }
    let plain = now_ns() - t;
    let t = now_ns();
    for i in 0..n {
        // SAFETY: `real` holds calibration_target, which takes six integers.
        std::hint::black_box(unsafe {
            call(
                CALIBRATION,
                c"calibration",
                &real,
                [i as usize, 0, 0, 0, 0, 0],
            )
        });
    }
    let wrapped = now_ns() - t;
    *plain_ns = plain as f64 / n as f64;
    *wrapped_ns = wrapped as f64 / n as f64;
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_function_of_the_region_has_its_wrapper_at_its_index() {
        assert_eq!(WRAPPED.len(), FUNCTIONS.len());
        for &(name, i) in WRAPPED {
            assert_eq!(FUNCTIONS[i].name, name);
        }
        assert!(FUNCTIONS.len() <= CALIBRATION);
    }

    #[test]
    fn exported_names_are_the_ones_tlsscope_looks_up() {
        assert_eq!(stringify!(tlsscope_inproc_real), inproc_abi::REAL_TABLE);
        assert_eq!(stringify!(tlsscope_inproc_map), inproc_abi::MAP_FUNCTION);
    }

    #[test]
    fn outcomes_follow_each_library_s_rules() {
        assert_eq!(outcome(Semantics::Positive, 0, 1), SUCCESS);
        assert_eq!(outcome(Semantics::Positive, 0, 0), FAILURE);
        assert_eq!(outcome(Semantics::GnuTls, 0, -28), RETRY);
        assert_eq!(outcome(Semantics::GnuTls, 0, -9), FAILURE);
        assert_eq!(outcome(Semantics::GnuTls, 0, 512), SUCCESS);
        // The upper half of the return register is not the function's.
        assert_eq!(
            outcome(Semantics::Positive, 0, 0x7fff_ffff_0000_0001),
            SUCCESS
        );
        assert_eq!(outcome(Semantics::OpensslShutdown, 0, 0), SUCCESS);
        assert_eq!(outcome(Semantics::NssStatus, 0, 0), SUCCESS);
        assert_eq!(outcome(Semantics::NssStatus, 0, -2), RETRY);
    }
}
