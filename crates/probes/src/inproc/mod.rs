//! The in-process backend: tlsscope's probe library (`crates/inproc`) inside the traced
//! program, started under it (`LD_PRELOAD`) or put into a running process (`attach`, with the
//! GOT entries of the wrapped functions swapped, `got`, from a stopped thread, `inject`); the
//! shared region it counts in (`region`); the tracer that reads it. Uses the target side
//! (catalog, plan, maps) and never the kernel backend.
//!
//! Functions a program calls inside one library without the PLT (libcrypto's internals) cannot
//! be wrapped: the plan lists them as not traced, with the kernel backend as the way to get
//! them.

pub mod attach;
mod got;
mod inject;
mod library;
mod region;
mod tracer;

// Each thread's sniff ring: by default, at least (trace copies no calls: the smallest), and
// which sizes are valid.
pub use inproc_abi::{valid_ring_bytes, DEFAULT_RING_BYTES, MIN_RING_BYTES};
pub use library::{library_file, LIBRARY_FILE_PREFIX};
pub use region::Region;
pub use tracer::{plan, UserPlan, UserTracer};
