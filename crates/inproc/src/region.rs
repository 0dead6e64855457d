//! The shared region as this process sees it, and this thread's slot in it.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use inproc_abi::{Header, Ring, Slot, HEADER_BYTES, MAGIC, MAX_SLOTS};

/// The mapped region, or null.
static REGION: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// Bumped in a forked child (its threads take new slots, under their new PID) and when a new
/// region is mapped (they take slots there).
static GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread's slot and the generation it was taken in; null: none yet, NO_SLOT: none free.
    static SLOT: Cell<(*mut Slot, u32)> = const { Cell::new((std::ptr::null_mut(), u32::MAX)) };
}

/// Marks a thread that found no free slot (never a real slot address).
const NO_SLOT: *mut Slot = std::ptr::dangling_mut::<Slot>();

/// Runs when the library is loaded: maps the region the environment names, if any.
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

extern "C" fn init() {
    // A panic inside a wrapper is caught and counted (`wrap::guarded`); the program's stderr
    // is not ours to write to. This library's standard library, and so its hook, is its own.
    #[cfg(not(test))]
    std::panic::set_hook(Box::new(|_| {}));
    crate::wrap::read_injected_failure();
    // SAFETY: pthread_atfork registers a plain function; only the child handler is given.
    unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    // SAFETY: the name is a NUL-terminated constant; getenv's result is read at once.
    let path = unsafe { libc::getenv(inproc_abi::ENV_REGION.as_ptr()) };
    if path.is_null() {
        return;
    }
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let value = unsafe { std::ffi::CStr::from_ptr(path) };
    // "fd:N": a descriptor tlsscope left open for the program (and its children) to map.
    match value.to_bytes().strip_prefix(b"fd:") {
        Some(n) => {
            if let Some(fd) = std::str::from_utf8(n).ok().and_then(|n| n.parse().ok()) {
                map_fd(fd);
            }
        }
        None => {
            map(value);
        }
    }
}

extern "C" fn forked() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Maps the region file at `path` (a tlsscope region: its magic checked) for this process.
/// Returns whether it is mapped.
pub fn map(path: &std::ffi::CStr) -> bool {
    // SAFETY: open with a NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    let mapped = map_fd(fd);
    // SAFETY: fd is ours; the mapping stays valid after it is closed.
    unsafe { libc::close(fd) };
    mapped
}

/// Maps the region open at `fd` (left open: a program's children inherit it too).
fn map_fd(fd: i32) -> bool {
    let Some(ring_bytes) = region_ring_bytes(fd) else {
        return false;
    };
    let size = inproc_abi::region_bytes(ring_bytes);
    // Only a file that is a whole region: touching a mapping past its end would kill the
    // program (SIGBUS), and an inherited descriptor may be anything by now.
    // SAFETY: fstat writes the stat it is given; a bad fd is an error, not undefined.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_size as u64) < size as u64 {
        return false;
    }
    let Some(addr) = map_shared(fd, size) else {
        return false;
    };
    // A region mapped before (an earlier tlsscope run attached to this process) stays mapped:
    // a thread may be counting in it right now. Every thread takes a slot in the new one.
    REGION.store(addr, Ordering::Release);
    GENERATION.fetch_add(1, Ordering::Release);
    true
}

/// The ring size of the region open at `fd`, read from its header (mapped alone for that):
/// None unless the file starts with a tlsscope header with a valid ring size.
fn region_ring_bytes(fd: i32) -> Option<usize> {
    // SAFETY: fstat writes the stat it is given; a bad fd is an error, not undefined.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 || (st.st_size as u64) < HEADER_BYTES as u64 {
        return None;
    }
    let addr = map_shared(fd, HEADER_BYTES)?;
    // SAFETY: the mapping is HEADER_BYTES long, page-aligned, and starts with a Header.
    let header = unsafe { &*(addr as *const Header) };
    let ring_bytes = (header.magic.load(Ordering::Acquire) == MAGIC)
        .then(|| header.ring_bytes.load(Ordering::Relaxed))
        .filter(|&n| inproc_abi::valid_ring_bytes(n));
    // SAFETY: unmapping what was just mapped, never shared.
    unsafe { libc::munmap(addr.cast(), HEADER_BYTES) };
    ring_bytes.map(|n| n as usize)
}

/// A shared read-write mapping of the first `size` bytes of `fd`.
fn map_shared(fd: i32, size: usize) -> Option<*mut u8> {
    // SAFETY: a new shared mapping of a file the caller checked is at least `size` long; the
    // result is checked against MAP_FAILED.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    (addr != libc::MAP_FAILED).then_some(addr.cast())
}

/// The region's header, when one is mapped.
#[inline(always)]
pub fn header() -> Option<&'static Header> {
    let p = REGION.load(Ordering::Acquire);
    // SAFETY: REGION is null or a live mapping that starts with a Header; it is never unmapped.
    (!p.is_null()).then(|| unsafe { &*(p as *const Header) })
}

/// This thread's slot, taken on its first call (and again in a forked child).
#[inline(always)]
pub fn slot(header: &'static Header) -> Option<&'static Slot> {
    let generation = GENERATION.load(Ordering::Acquire);
    let (mut slot, taken_in) = SLOT.with(Cell::get);
    if slot.is_null() || taken_in != generation {
        slot = take(header);
        SLOT.with(|s| s.set((slot, generation)));
    }
    if slot == NO_SLOT {
        return None;
    }
    // SAFETY: `take` returns slots inside the mapping, which is never unmapped.
    Some(unsafe { &*slot })
}

#[cold]
fn take(header: &'static Header) -> *mut Slot {
    let i = header.slots_taken.fetch_add(1, Ordering::Relaxed) as usize;
    if i >= MAX_SLOTS {
        return NO_SLOT;
    }
    let base = REGION.load(Ordering::Acquire);
    // SAFETY: slot i < MAX_SLOTS lies within the mapping (the slots precede the rings).
    let slot = unsafe { &*(base.add(inproc_abi::slot_offset(i)) as *const Slot) };
    // SAFETY: getpid and gettid cannot fail.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    slot.tid.store(tid as u32, Ordering::Relaxed);
    // The PID last: the reader skips a slot whose PID is 0.
    slot.pid.store(pid as u32, Ordering::Release);
    slot as *const Slot as *mut Slot
}

/// The ring of the thread that owns `slot`, and its data.
pub fn ring_of(slot: &'static Slot) -> Option<(&'static Ring, *mut u8)> {
    let base = REGION.load(Ordering::Acquire);
    let first = base.wrapping_add(inproc_abi::slot_offset(0));
    let i =
        (slot as *const Slot as usize).checked_sub(first as usize)? / std::mem::size_of::<Slot>();
    if i >= MAX_SLOTS {
        return None; // a slot of a region mapped before this one
    }
    let ring_bytes = ring_bytes(base);
    // SAFETY: ring i and its data lie within the region's mapping (sized for its ring size),
    // never unmapped.
    unsafe {
        Some((
            &*(base.add(inproc_abi::ring_offset(i, ring_bytes)) as *const Ring),
            base.add(inproc_abi::ring_data_offset(i, ring_bytes)),
        ))
    }
}

/// The ring size of the region mapped at `base` (checked valid when it was mapped).
#[inline(always)]
pub fn ring_bytes(base: *const u8) -> usize {
    // SAFETY: `base` is a live region mapping, which starts with its Header.
    unsafe { &*(base as *const Header) }
        .ring_bytes
        .load(Ordering::Relaxed) as usize
}
