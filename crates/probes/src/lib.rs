//! `probes`: eBPF uprobes on TLS libraries. Where to attach them (the TLS libraries a process
//! maps, the functions a library defines in `.dynsym` and, where it was not stripped, `.symtab`,
//! and their file offsets), the catalog of functions per library, the latency tracer that loads
//! `src/bpf/latency.bpf.c` and reads its in-kernel histograms, and the plaintext sniffer that
//! loads `src/bpf/sniff.bpf.c`; both load through one loader.

pub mod catalog;
pub mod latency;
mod loader;
pub mod log;
pub mod maps;
pub mod plan;
mod skel;
pub mod sniff;
pub mod symbols;
pub mod syscalls;

use std::path::PathBuf;

pub use catalog::{Group, Groups, Selection, CATALOG};
pub use latency::{Buckets, Calibration, Cell, Outcome, Snapshot, TraceConfig, Tracer};
pub use maps::{tls_libraries, LibraryKind, MappedLibrary, Mapping};
pub use plan::{AttachPoint, Missing, Plan, Target, Threads};
pub use symbols::{Symbol, SymbolTable, Table};
pub use syscalls::{Edge, IdSource, SyscallHooks};

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
