//! The shared region the probe library writes and tlsscope reads (its layout is
//! `inproc_abi`'s): created and configured here, kept alive by a lease, read by the tracer.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use inproc_abi::{Header, Slot, MAGIC};

use super::library::library_dir;
use crate::histogram::Buckets;
use crate::Error;

/// The shared region: a memory file, mapped here and by the programs it is handed to. For a
/// program tlsscope starts, an anonymous one (memfd) it inherits; for a running process, a file
/// under the library's directory that the process opens itself, removed as soon as every
/// process has mapped it. The memory goes when the last process holding it ends.
pub struct Region {
    fd: std::os::fd::OwnedFd,
    base: *mut u8,
    /// The named file, until removed.
    path: Option<PathBuf>,
    /// Data bytes of each thread's sniff ring (the layout's, see `inproc_abi::region_bytes`).
    pub(super) ring_bytes: usize,
}

// SAFETY: the mapping is shared memory read and written only through atomics.
unsafe impl Send for Region {}

impl Region {
    /// Creates an anonymous region with the functions `enabled` timed and sniff rings of
    /// `ring_bytes` per thread.
    pub fn create(enabled: &[usize], buckets: Buckets, ring_bytes: u64) -> Result<Region, Error> {
        let io = |source| Error::Read {
            path: "memfd:tlsscope-region".into(),
            source,
        };
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let raw = unsafe { libc::memfd_create(c"tlsscope-region".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        // SAFETY: raw is a new descriptor that nothing else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        Region::configure(std::fs::File::from(fd), None, enabled, buckets, ring_bytes)
    }

    /// Creates a region in a file of its own (mode 0600) that running processes can open, in
    /// the library's directory; files that dead tlsscope runs left there are removed first.
    pub fn create_file(
        enabled: &[usize],
        buckets: Buckets,
        ring_bytes: u64,
    ) -> Result<Region, Error> {
        let dir = library_dir();
        remove_stale_regions(&dir);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!("region-{}-{nanos:09}", std::process::id()));
        let file = std::fs::create_dir_all(&dir)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
            })
            .map_err(|source| Error::Read {
                path: path.clone(),
                source,
            })?;
        Region::configure(file, Some(path), enabled, buckets, ring_bytes)
    }

    fn configure(
        file: std::fs::File,
        path: Option<PathBuf>,
        enabled: &[usize],
        buckets: Buckets,
        ring_bytes: u64,
    ) -> Result<Region, Error> {
        if !inproc_abi::valid_ring_bytes(ring_bytes) {
            return Err(Error::RingSize {
                bytes: ring_bytes,
                min: inproc_abi::MIN_RING_BYTES,
                max: inproc_abi::MAX_RING_BYTES,
            });
        }
        let size = inproc_abi::region_bytes(ring_bytes as usize);
        let io = |source| Error::Read {
            path: path
                .clone()
                .unwrap_or_else(|| "memfd:tlsscope-region".into()),
            source,
        };
        file.set_len(size as u64).map_err(io)?;
        // SAFETY: a shared mapping of the whole file, just sized; checked against MAP_FAILED.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io(std::io::Error::last_os_error()));
        }
        let region = Region {
            fd: file.into(),
            base: base.cast(),
            path,
            ring_bytes: ring_bytes as usize,
        };
        let h = region.header();
        for &i in enabled {
            if let Some(e) = h.enabled.get(i) {
                e.store(1, Ordering::Relaxed);
            }
        }
        if let Buckets::Linear {
            min_us, step_us, ..
        } = buckets
        {
            h.linear.store(1, Ordering::Relaxed);
            h.lin_min_us.store(min_us, Ordering::Relaxed);
            h.lin_step_us.store(step_us, Ordering::Relaxed);
            h.lin_buckets
                .store(buckets.linear_count(), Ordering::Relaxed);
        }
        h.lease_until_ns
            .store(monotonic_ns() + inproc_abi::LEASE_NS, Ordering::Relaxed);
        h.active.store(1, Ordering::Relaxed);
        h.ring_bytes.store(ring_bytes, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(region)
    }

    /// The region's file, while it has a name.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Gives the file to a process's user, so that it can open it (root only; else a no-op).
    pub fn give_to(&self, pid: u32) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}")) {
            // SAFETY: fchown on our own descriptor; a failure only means the process cannot
            // open the file, which it then reports.
            unsafe { libc::fchown(self.raw_fd(), meta.uid(), meta.gid()) };
        }
    }

    /// Removes the file's name: the processes that mapped it keep the memory.
    pub fn unlink(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The region's descriptor, which a started program inherits (see [`UserTracer::spawn`]).
    pub fn raw_fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }

    pub(super) fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header and lives as long as self.
        unsafe { &*(self.base as *const Header) }
    }

    pub(super) fn slot(&self, i: usize) -> &Slot {
        // SAFETY: i < MAX_SLOTS, so the slot lies within the mapping.
        unsafe { &*(self.base.add(inproc_abi::slot_offset(i)) as *const Slot) }
    }

    /// Ring `i` (slot `i`'s thread's) and its data.
    pub(super) fn ring(&self, i: usize) -> (&inproc_abi::Ring, *const u8) {
        // SAFETY: i < MAX_SLOTS: the ring and its data lie within the mapping.
        unsafe {
            (
                &*(self.base.add(inproc_abi::ring_offset(i, self.ring_bytes))
                    as *const inproc_abi::Ring),
                self.base
                    .add(inproc_abi::ring_data_offset(i, self.ring_bytes))
                    .cast_const(),
            )
        }
    }

    /// Makes every wrapper in every process only call through from now on.
    pub fn deactivate(&self) {
        self.header().active.store(0, Ordering::Relaxed);
    }

    /// Makes the wrappers time their calls again (while the lease holds).
    pub fn activate(&self) {
        self.header().active.store(1, Ordering::Relaxed);
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.deactivate();
        self.unlink();
        // SAFETY: unmapping our own mapping, of the region's size.
        unsafe { libc::munmap(self.base.cast(), inproc_abi::region_bytes(self.ring_bytes)) };
    }
}

/// Monotonic nanoseconds, the clock of the region's lease.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Removes region files of tlsscope runs that are gone ("region-PID-N", PID not running).
fn remove_stale_regions(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("region-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Renews the region's lease while tlsscope runs, from a thread of its own.
pub(super) struct Lease {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Lease {
    /// How often the lease is renewed: well within `inproc_abi::LEASE_NS`.
    const EVERY: std::time::Duration = std::time::Duration::from_millis(250);

    pub(super) fn keep(region: &Region) -> Lease {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let header = region.base as usize;
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            // SAFETY: the region stays mapped until this thread is joined (UserTracer drops
            // its Lease before its Region).
            let header = unsafe { &*(header as *const Header) };
            while !flag.load(Ordering::Relaxed) {
                header
                    .lease_until_ns
                    .store(monotonic_ns() + inproc_abi::LEASE_NS, Ordering::Relaxed);
                std::thread::park_timeout(Lease::EVERY);
            }
        });
        Lease {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
