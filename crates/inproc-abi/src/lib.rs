//! The shared memory between tlsscope and its in-process probe library (`crates/inproc`): one
//! definition, used by the library that writes it and the reader in `probes::inproc`.
//!
//! The region is a memory file (a memfd, or a file under `/run/tlsscope` that is removed once
//! the processes have mapped it), mapped shared by tlsscope and by every process the
//! library is loaded in (a forked child keeps its parent's mapping). It holds a [`Header`] that
//! tlsscope fills in before the traced program starts (which functions to time, the buckets),
//! then [`Slot`]s, one per traced thread. A thread takes a slot with one atomic add on its
//! first timed call (and again after a fork) and is then the only writer of it, so the hot path
//! takes no lock and shares no cache line with another thread.

#![no_std]

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// "TLSSCOP" and the layout's version: a reader refuses a region with any other.
pub const MAGIC: u64 = u64::from_le_bytes(*b"TLSSCOP\x07");

/// The environment variable that names the region for a program started under the library
/// (`fd:N`, a descriptor it inherits, or a path).
pub const ENV_REGION: &core::ffi::CStr = c"TLSSCOPE_INPROC_REGION";

/// For tests of the failure path only: the name of a function whose wrapper panics on its first
/// timed call (then it is disabled and counted in [`Header::wrapper_failures`]).
pub const ENV_INJECT_FAILURE: &core::ffi::CStr = c"TLSSCOPE_INPROC_FAIL";

/// The library's function that maps a region file into the process it runs in (exported:
/// tlsscope calls it inside a running process it attaches to).
pub const MAP_FUNCTION: &str = "tlsscope_inproc_map";

/// The library's table of real functions (an exported array of [`REAL_SLOTS`] addresses): per
/// [`FUNCTIONS`] index, then per [`HELPERS`] index. 0: look the function up with
/// `dlsym(RTLD_NEXT)` on first use (a program started under `LD_PRELOAD`). tlsscope fills it in
/// a process it attaches to, where the library is loaded on its own and the lookup would not
/// find the TLS library.
pub const REAL_TABLE: &str = "tlsscope_inproc_real";

/// Functions the wrappers call to settle an outcome, after the wrapped ones in the table.
pub const HELPERS: &[&str] = &[
    "SSL_get_error",
    "PR_GetError",
    "SSL_get_fd",
    "gnutls_transport_get_int",
    "PR_FileDesc2NativeHandle",
];
pub const SSL_GET_ERROR: usize = MAX_FUNCTIONS;
pub const PR_GET_ERROR: usize = MAX_FUNCTIONS + 1;
pub const SSL_GET_FD: usize = MAX_FUNCTIONS + 2;
pub const GNUTLS_GET_FD: usize = MAX_FUNCTIONS + 3;
pub const NSPR_GET_FD: usize = MAX_FUNCTIONS + 4;
pub const REAL_SLOTS: usize = MAX_FUNCTIONS + HELPERS.len();

/// How long the wrappers keep timing after tlsscope last renewed [`Header::lease_until_ns`]:
/// a program that outlives tlsscope (killed, even with SIGKILL) is left with wrappers that only
/// call through.
pub const LEASE_NS: u64 = 3_000_000_000;

/// Functions the library wraps, at most.
pub const MAX_FUNCTIONS: usize = 32;
/// Outcome classes, numbered as `enum ts_outcome` in `crates/probes/src/kernel/bpf/latency.h`
/// (checked when `probes` is built).
pub const OUTCOMES: usize = 6;
pub const SUCCESS: u8 = 0;
pub const RETRY: u8 = 1;
pub const FAILURE: u8 = 2;
pub const UNKNOWN: u8 = 3;
pub const CLOSED: u8 = 4;
/// `SSL_ERROR_WANT_ASYNC`/`WANT_ASYNC_JOB`: an async engine's job paused the call.
pub const RETRY_ASYNC: u8 = 5;
/// Latency buckets: log2 microseconds (0: under 1 us; b: [2^(b-1), 2^b) us), or linear (up
/// to `TS_MAX_LINEAR_BUCKETS` + 2, as the kernel's).
pub const BUCKETS: usize = 256;
/// Threads that can have a slot; a thread beyond is counted in `Header::calls_without_slot`.
pub const MAX_SLOTS: usize = 128;

/// How a function's return value says how the call ended (`enum ts_semantics` in
/// `latency.h`, numbered alike); in process, the libraries' own error calls settle it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Semantics {
    /// OpenSSL I/O and handshake calls: > 0 success; <= 0 settled by `SSL_get_error`.
    OpensslIo = 0,
    /// `SSL_shutdown`: >= 0 success; < 0 settled by `SSL_get_error`.
    OpensslShutdown = 1,
    /// > 0 success, <= 0 failure.
    Positive = 3,
    /// GnuTLS: >= 0 success, -28/-52 retry, other negatives failure (`ssize_t` or `int`).
    GnuTls = 4,
    /// NSS `SECStatus`: 0 success, -1 settled by `PR_GetError`.
    NssStatus = 5,
    /// NSPR `PR_Read`/`PR_Write`...: >= 0 success, -1 settled by `PR_GetError`.
    NsprIo = 6,
}

/// A function the library wraps: its symbol and how to read its return value.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    pub name: &'static str,
    pub semantics: Semantics,
}

const fn f(name: &'static str, semantics: Semantics) -> Function {
    Function { name, semantics }
}

use Semantics::*;

/// Every function the library wraps; the index is its number in the region. Internal
/// functions (not called through the PLT) cannot be wrapped: tracing them takes the kernel
/// backend. Exactly the exported functions of tlsscope's one catalog (`probes::catalog`), with
/// its semantics: `probes` does not build when the two differ.
pub const FUNCTIONS: &[Function] = &[
    f("SSL_do_handshake", OpensslIo),
    f("SSL_connect", OpensslIo),
    f("SSL_accept", OpensslIo),
    f("SSL_read", OpensslIo),
    f("SSL_read_ex", OpensslIo),
    f("SSL_peek", OpensslIo),
    f("SSL_peek_ex", OpensslIo),
    f("SSL_write", OpensslIo),
    f("SSL_write_ex", OpensslIo),
    f("SSL_shutdown", OpensslShutdown),
    f("EVP_DigestSign", Positive),
    f("EVP_DigestSignFinal", Positive),
    f("EVP_DigestVerify", Positive),
    f("EVP_DigestVerifyFinal", Positive),
    f("EVP_PKEY_sign", Positive),
    f("EVP_PKEY_derive", Positive),
    f("EVP_PKEY_decrypt", Positive),
    f("EVP_PKEY_keygen", Positive),
    f("X509_verify_cert", Positive),
    f("gnutls_handshake", GnuTls),
    f("gnutls_record_send", GnuTls),
    f("gnutls_record_recv", GnuTls),
    f("SSL_ForceHandshake", NssStatus),
    f("PR_Read", NsprIo),
    f("PR_Write", NsprIo),
    f("PR_Recv", NsprIo),
    f("PR_Send", NsprIo),
];

/// The index of function `name` in [`FUNCTIONS`].
pub fn index_of(name: &str) -> Option<usize> {
    FUNCTIONS.iter().position(|f| f.name == name)
}

/// The start of the region: written by tlsscope before the program runs (settings), counted
/// by the library.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`], written last by tlsscope: the library ignores a region without it.
    pub magic: AtomicU64,
    /// Per function of [`FUNCTIONS`]: nonzero to time it (tlsscope's plan), else the wrapper
    /// only calls through.
    pub enabled: [AtomicU8; MAX_FUNCTIONS],
    /// Nonzero: time the enabled functions. tlsscope clears it when it stops, so the wrappers
    /// of a program that outlives it are inert.
    pub active: AtomicU8,
    /// Nonzero: linear buckets (`lin_*`), else log2.
    pub linear: AtomicU8,
    pub _pad: [u8; 6],
    pub lin_min_us: AtomicU64,
    pub lin_step_us: AtomicU64,
    pub lin_buckets: AtomicU64,
    /// Slots handed out (may exceed [`MAX_SLOTS`]: those threads went without).
    pub slots_taken: AtomicU32,
    pub _pad2: u32,
    /// Timed calls of threads that found no slot free.
    pub calls_without_slot: AtomicU64,
    /// `CLOCK_MONOTONIC` nanoseconds until which the wrappers time calls; tlsscope renews it
    /// while it runs (see [`LEASE_NS`]).
    pub lease_until_ns: AtomicU64,
    /// Nonzero: each sniffed call also goes to its thread's [`Ring`] as a [`Record`].
    pub sniff: AtomicU8,
    pub _pad3: [u8; 3],
    /// Payload bytes copied per call at most.
    pub max_bytes: AtomicU32,
    /// Per function: 0 not sniffed, else [`SNIFF_READ`], [`SNIFF_WRITE`] or
    /// [`SNIFF_HANDSHAKE`] (the catalog's direction, as tlsscope wrote it).
    pub sniff_kind: [AtomicU8; MAX_FUNCTIONS],
    /// Per function: where the byte count is ([`COUNT_RETURN`] or [`COUNT_ARG4_POINTER`]).
    pub sniff_count: [AtomicU8; MAX_FUNCTIONS],
    /// Data bytes of each thread's ring (a power of two, see [`valid_ring_bytes`]), written
    /// before [`Header::magic`] and never changed: the region's layout depends on it.
    pub ring_bytes: AtomicU64,
    /// Per function: calls whose wrapper failed (a panic caught inside it). The wrapper of that
    /// function then only calls through, in that process, for the rest of its life.
    pub wrapper_failures: [AtomicU32; MAX_FUNCTIONS],
}

pub const SNIFF_READ: u8 = 1;
pub const SNIFF_WRITE: u8 = 2;
pub const SNIFF_HANDSHAKE: u8 = 3;
pub const COUNT_RETURN: u8 = 0;
/// Through the `size_t *` fourth argument (`SSL_read_ex`, `SSL_write_ex`).
pub const COUNT_ARG4_POINTER: u8 = 1;

/// One thread's ring of sniffed calls: the thread writes records and moves `head`; tlsscope
/// reads them and moves `tail` (each a running byte count). A record that does not fit is
/// counted in `lost`, never waited for.
#[repr(C)]
pub struct Ring {
    pub head: AtomicU64,
    pub _pad: [u64; 7],
    pub tail: AtomicU64,
    pub _pad2: [u64; 7],
    /// Sniffed calls, and those lost because the ring was full.
    pub calls: AtomicU64,
    pub lost: AtomicU64,
}

/// A sniffed call in a ring, followed by `len` payload bytes; `size` (the whole record, a
/// multiple of 8) with [`PADDING`] set marks the unused end of the ring instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Record {
    pub size: u32,
    pub len: u32,
    pub start_ns: u64,
    pub latency_ns: u64,
    pub ret: i64,
    /// The library's connection object (`SSL *`, `gnutls_session_t`).
    pub connection: u64,
    pub total_bytes: u64,
    pub uncaptured: u64,
    pub pid: u32,
    pub tid: u32,
    pub fd: i32,
    /// Index in [`FUNCTIONS`].
    pub function: u16,
    /// [`SNIFF_READ`], [`SNIFF_WRITE`] or [`SNIFF_HANDSHAKE`].
    pub kind: u8,
    pub _pad: u8,
    /// The socket's ends (`AF_INET`/`AF_INET6`, else 0: unknown), ports in host order,
    /// addresses as in `sockaddr_in`/`sockaddr_in6` (IPv4 in the first four bytes).
    pub family: u16,
    pub local_port: u16,
    pub peer_port: u16,
    pub _pad2: u16,
    pub local_addr: [u8; 16],
    pub peer_addr: [u8; 16],
}

/// Set in [`Record::size`] for the filler at the end of the ring.
pub const PADDING: u32 = 1 << 31;

/// A ring's data bytes unless tlsscope is told otherwise (`sniff --ring-size`).
pub const DEFAULT_RING_BYTES: u64 = 4 << 20;
/// The smallest ring: room for a few records of the largest payload (16 KiB TLS records).
pub const MIN_RING_BYTES: u64 = 64 << 10;
/// The largest ring (the region holds [`MAX_SLOTS`] of them, in address space).
pub const MAX_RING_BYTES: u64 = 256 << 20;

/// Whether `n` can be a ring's data size: a power of two from [`MIN_RING_BYTES`] to
/// [`MAX_RING_BYTES`].
pub const fn valid_ring_bytes(n: u64) -> bool {
    n.is_power_of_two() && n >= MIN_RING_BYTES && n <= MAX_RING_BYTES
}

/// Where slot `i`'s ring starts, for rings of `ring_bytes`: after all the slots,
/// page-aligned; each ring is a header page and its data.
pub const fn ring_offset(i: usize, ring_bytes: usize) -> usize {
    slot_offset(MAX_SLOTS).div_ceil(PAGE) * PAGE + i * (PAGE + ring_bytes)
}

/// Where ring `i`'s data starts.
pub const fn ring_data_offset(i: usize, ring_bytes: usize) -> usize {
    ring_offset(i, ring_bytes) + PAGE
}

/// The whole region's size, for rings of `ring_bytes` (a sparse file: only touched pages take
/// memory).
pub const fn region_bytes(ring_bytes: usize) -> usize {
    ring_offset(MAX_SLOTS, ring_bytes)
}

/// The header's size, rounded to pages: what a reader maps first, to learn the ring size.
pub const HEADER_BYTES: usize = SLOTS_START;

/// One histogram cell.
#[repr(C)]
pub struct Cell {
    pub count: AtomicU64,
    pub total_ns: AtomicU64,
}

/// One thread's counts; only that thread writes it.
#[repr(C)]
pub struct Slot {
    /// The thread's process (0: the slot is being taken).
    pub pid: AtomicU32,
    pub tid: AtomicU32,
    /// Timed calls.
    pub calls: AtomicU64,
    pub cells: [[[Cell; BUCKETS]; OUTCOMES]; MAX_FUNCTIONS],
}

/// Where slot `i` starts in the region: after the header, page-aligned.
pub const fn slot_offset(i: usize) -> usize {
    SLOTS_START + i * core::mem::size_of::<Slot>()
}

const PAGE: usize = 4096;
const SLOTS_START: usize = core::mem::size_of::<Header>().div_ceil(PAGE) * PAGE;

/// The log2 bucket of a latency: 0 under 1 us, b for [2^(b-1), 2^b) us.
pub fn log2_bucket(latency_ns: u64) -> usize {
    let us = latency_ns / 1000;
    (u64::BITS - us.leading_zeros()) as usize
}

/// The linear bucket of a latency: 0 under `min_us`, then `step_us` wide buckets, the last one
/// (`buckets + 1`) everything at or over the top; as `bucket_of` in `latency.bpf.c`.
pub fn linear_bucket(latency_ns: u64, min_us: u64, step_us: u64, buckets: u64) -> usize {
    let us = latency_ns / 1000;
    if us < min_us || step_us == 0 {
        return 0;
    }
    let b = (us - min_us) / step_us + 1;
    b.min(buckets + 1).min(BUCKETS as u64 - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_fits_and_names_are_unique() {
        assert!(FUNCTIONS.len() <= MAX_FUNCTIONS);
        for (i, a) in FUNCTIONS.iter().enumerate() {
            assert!(
                FUNCTIONS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
        assert_eq!(slot_offset(0) % PAGE, 0);
        assert_eq!(core::mem::size_of::<Slot>() % 8, 0);
        assert_eq!(HELPERS[SSL_GET_ERROR - MAX_FUNCTIONS], "SSL_get_error");
        assert_eq!(HELPERS[PR_GET_ERROR - MAX_FUNCTIONS], "PR_GetError");
        assert_eq!(HELPERS[SSL_GET_FD - MAX_FUNCTIONS], "SSL_get_fd");
        assert_eq!(
            HELPERS[NSPR_GET_FD - MAX_FUNCTIONS],
            "PR_FileDesc2NativeHandle"
        );
        assert_eq!(
            HELPERS[GNUTLS_GET_FD - MAX_FUNCTIONS],
            "gnutls_transport_get_int"
        );
        assert!(core::mem::size_of::<Ring>() <= PAGE);
        assert_eq!(core::mem::size_of::<Record>() % 8, 0);
        assert_eq!(ring_offset(0, DEFAULT_RING_BYTES as usize) % PAGE, 0);
        assert!(valid_ring_bytes(DEFAULT_RING_BYTES));
        assert!(!valid_ring_bytes(3 << 20) && !valid_ring_bytes(4096));
    }

    #[test]
    fn buckets_are_the_kernel_s() {
        assert_eq!(log2_bucket(999), 0);
        assert_eq!(log2_bucket(1_000), 1);
        assert_eq!(log2_bucket(3_999), 2);
        assert_eq!(log2_bucket(4_000), 3);
        assert_eq!(linear_bucket(5_000, 10, 5, 4), 0);
        assert_eq!(linear_bucket(10_000, 10, 5, 4), 1);
        assert_eq!(linear_bucket(29_999, 10, 5, 4), 4);
        assert_eq!(linear_bucket(30_000, 10, 5, 4), 5);
        assert_eq!(linear_bucket(900_000, 10, 5, 4), 5);
    }
}
