//! The kernel backend: eBPF uprobes. The BPF programs (`bpf/<name>.bpf.c` and their headers,
//! compiled by `build.rs`), their skeletons, the loader both programs share, where on a
//! function the probes go (`placement`), the latency tracer and the plaintext sniffer, the
//! syscall hooks they rely on, and libbpf's log. Uses the target side (catalog, plan, maps,
//! symbols) and never the in-process backend.

pub mod latency;
mod loader;
pub mod log;
pub mod placement;
mod skel;
pub mod sniff;
pub mod syscalls;

use crate::Error;

/// Reads a plain-data BPF value (a map value or ring-buffer record, written with the C layout)
/// into a skeleton type; bytes beyond the input stay zero.
fn read_pod<T: Copy + Default>(bytes: &[u8]) -> T {
    let mut value = T::default();
    let n = std::mem::size_of::<T>().min(bytes.len());
    // SAFETY: T is a plain `#[repr(C)]` struct or integer of the skeleton's types (no
    // pointers, every bit pattern valid); at most size_of::<T>() bytes are copied into it.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), n);
    }
    value
}

impl Error {
    /// A libbpf error while doing `what`, with libbpf's own explanation where it gave one.
    fn bpf(what: &str, e: libbpf_rs::Error) -> Error {
        Error::Bpf {
            what: what.to_string(),
            detail: log::with_reason(&e.to_string()),
        }
    }
}
