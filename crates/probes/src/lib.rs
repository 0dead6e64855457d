//! `probes`: probes on TLS libraries, by two backends. Three floors, arrows pointing down only:
//!
//! - the target side, at the top of `src/`: the TLS libraries a process maps (`maps`), the
//!   functions a file defines and their offsets (`symbols`), the functions and Go version of a
//!   Go program (`golang`), the one catalog of functions tlsscope observes (`catalog`), the
//!   plan of where to attach (`plan`), and the plain results both backends produce
//!   (`histogram`, `capture`). It uses neither backend.
//! - the backends, each using the target side and never the other: `kernel/` (eBPF uprobes:
//!   the BPF programs, their loader, where on a function the probes go, the latency tracer and
//!   the plaintext sniffer) and `inproc/` (tlsscope's library inside the traced program:
//!   attaching, GOT patching, the shared region and its reader).
//! - `backend`: the traits `trace`, `sniff` and the lab read either backend through.

pub mod backend;
pub mod capture;
pub mod catalog;
mod error;
pub mod exits;
pub mod go_defers;
pub mod golang;
pub mod histogram;
pub mod inproc;
pub mod kernel;
pub mod maps;
pub mod plan;
pub mod symbols;

pub use backend::{Backend, Capture, Trace};
pub use capture::{Call, CallSink, Polled, SniffCounters};
pub use catalog::{Direction, Group, Groups, Selection, CATALOG};
pub use error::Error;
pub use golang::{GoBinary, GoError, GoFunction};
pub use histogram::{Buckets, Calibration, Cell, Outcome, Snapshot};
pub use inproc::attach::Refusal;
pub use inproc::UserTracer;
pub use kernel::latency::{TraceConfig, Tracer};
pub use kernel::sniff::{Assembler, SniffConfig, Sniffer};
pub use kernel::syscalls::{Edge, IdSource, SyscallHooks};
pub use maps::{tls_libraries, LibraryKind, MappedLibrary, Mapping};
pub use plan::{
    AttachPoint, Attached, GoDeferredExit, Missing, MissingReason, Placement, PlacementMode, Plan,
    Target, Threads,
};
pub use symbols::{Symbol, SymbolTable, Table};

// The module paths the command layer (cli, experiments) and the tests name, as they were before
// the backends had folders of their own.
pub use inproc as user;
pub use kernel::log;

/// The latency tracer's items, by their former path.
pub mod latency {
    pub use crate::histogram::{Buckets, Calibration, Cell, Outcome, Snapshot};
    pub use crate::kernel::latency::{
        check_can_trace, loaded_programs, NotAttached, TraceConfig, Tracer, PROGRAM_NAMES,
    };
    pub use crate::plan::Attached;
}

/// The plaintext capture's items, by their former path.
pub mod sniff {
    pub use crate::backend::Capture;
    pub use crate::capture::{Call, CallSink, Polled, SniffCounters};
    pub use crate::catalog::Direction;
    pub use crate::kernel::sniff::{Assembler, SniffConfig, Sniffer, SYSCALL_ENTERS_EFFECT};
}

/// Where on a function the probes go, by its former path: the plan's placement types.
pub mod placement {
    pub use crate::plan::{CalleeSite, Placement, PlacementMode, ResultRule};
}
