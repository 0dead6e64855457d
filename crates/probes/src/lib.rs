//! `probes`: eBPF uprobes on TLS libraries. Where to attach them (the TLS libraries a process
//! maps, the functions a library defines in `.dynsym` and, where it was not stripped, `.symtab`,
//! and their file offsets), the catalog of functions per library, the latency tracer that loads
//! `src/bpf/latency.bpf.c` and reads its in-kernel histograms, and the plaintext sniffer that
//! loads `src/bpf/sniff.bpf.c`; both load through one loader.

pub mod attach;
pub mod catalog;
mod got;
mod inject;
pub mod latency;
mod loader;
pub mod log;
pub mod maps;
pub mod placement;
pub mod plan;
mod skel;
pub mod sniff;
pub mod symbols;
pub mod syscalls;
pub mod user;

use std::path::PathBuf;

pub use catalog::{Group, Groups, Selection, CATALOG};
pub use latency::{Buckets, Calibration, Cell, Outcome, Snapshot, TraceConfig, Tracer};
pub use maps::{tls_libraries, LibraryKind, MappedLibrary, Mapping};
pub use placement::{Placement, PlacementMode};
pub use plan::{AttachPoint, Missing, Plan, Target, Threads};
pub use symbols::{Symbol, SymbolTable, Table};
pub use syscalls::{Edge, IdSource, SyscallHooks};

/// Which backend counts the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// eBPF uprobes in the kernel: any process, internal functions too; a trap per call.
    Kernel,
    /// tlsscope's library inside the traced program: the exported functions, tens of
    /// nanoseconds per call.
    User,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Kernel => "kernel",
            Backend::User => "user",
        }
    }
}

/// A running latency trace, whichever backend counts the calls: what `trace` and the lab read.
pub trait Trace {
    fn backend(&self) -> Backend;
    /// Everything counted so far (cumulative).
    fn snapshot(&self) -> Result<Snapshot, Error>;
    /// The last snapshot, taken when tracing ends.
    fn final_snapshot(&self) -> Result<Snapshot, Error> {
        self.snapshot()
    }
    fn attached(&self) -> &[latency::Attached];
    fn not_attached(&self) -> &[Missing];
    /// The kernel hooks the trace relies on, if any.
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        None
    }
    /// What one probed call costs, when measured.
    fn calibration(&self) -> Option<Calibration>;
    /// Probes the children the process targets forked since the start, where the backend
    /// must (the kernel's: a uprobe does not fire in a fork; the in-process library is
    /// inherited); returns (parent, child) per child newly followed.
    fn follow_children(&self) -> Vec<(u32, u32)> {
        Vec::new()
    }
}

impl Trace for Tracer {
    fn backend(&self) -> Backend {
        Backend::Kernel
    }
    fn snapshot(&self) -> Result<Snapshot, Error> {
        Tracer::snapshot(self)
    }
    fn final_snapshot(&self) -> Result<Snapshot, Error> {
        Tracer::final_snapshot(self)
    }
    fn attached(&self) -> &[latency::Attached] {
        Tracer::attached(self)
    }
    fn not_attached(&self) -> &[Missing] {
        Tracer::not_attached(self)
    }
    fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        Tracer::syscall_hooks(self)
    }
    fn calibration(&self) -> Option<Calibration> {
        Tracer::calibration(self)
    }
    fn follow_children(&self) -> Vec<(u32, u32)> {
        Tracer::follow_children(self)
    }
}

impl Trace for user::UserTracer {
    fn backend(&self) -> Backend {
        Backend::User
    }
    fn snapshot(&self) -> Result<Snapshot, Error> {
        user::UserTracer::snapshot(self)
    }
    fn attached(&self) -> &[latency::Attached] {
        user::UserTracer::attached(self)
    }
    fn not_attached(&self) -> &[Missing] {
        user::UserTracer::not_attached(self)
    }
    fn calibration(&self) -> Option<Calibration> {
        user::UserTracer::calibration(self)
    }
}

/// Errors finding libraries and symbols. Each names the file, symbol or process involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not an ELF file: {reason}", path.display())]
    NotElf { path: PathBuf, reason: String },
    #[error("{} does not define {symbol}{}", path.display(), if *stripped { " (it is stripped of its full symbol table: only exported functions can be probed; use a build from `tlsscope openssl build`)" } else { "" })]
    NoSymbol {
        symbol: String,
        path: PathBuf,
        stripped: bool,
    },
    #[error("{symbol} in {} is not in a loadable segment", path.display())]
    NotLoaded { symbol: String, path: PathBuf },
    #[error("cannot read the memory map of process {pid}: {source} (is the PID right, and are we allowed to look?)")]
    Process { pid: u32, source: std::io::Error },
    #[error("process {pid} maps no TLS library (OpenSSL, GnuTLS, NSS) and its executable defines no TLS function: is it the right process?")]
    NoTlsLibrary { pid: u32 },
    #[error("unknown function {name}: tlsscope traces {known}")]
    UnknownFunction { name: String, known: String },
    #[error("nothing to attach: {reasons}")]
    NothingToAttach { reasons: String },
    #[error("tracing needs root (CAP_BPF and CAP_PERFMON): run tlsscope as root, e.g. with sudo")]
    NotRoot,
    #[error("this kernel has no uprobes (/sys/bus/event_source/devices/uprobe is missing): use a kernel built with CONFIG_UPROBE_EVENTS")]
    NoUprobes,
    #[error("cannot attach the in-process backend to process {pid}: {reason}")]
    Attach { pid: u32, reason: String },
    #[error("--ring-size {bytes}: the in-process backend's rings (one per thread) take a power of two from {min} to {max} bytes")]
    RingSize { bytes: u64, min: u64, max: u64 },
    #[error("BPF: {what}: {detail}")]
    Bpf { what: String, detail: String },
}

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
    fn bpf(what: &str, e: libbpf_rs::Error) -> Error {
        Error::Bpf {
            what: what.to_string(),
            detail: log::with_reason(&e.to_string()),
        }
    }
}
