//! tlsscope's in-process probes: a shared library loaded into the traced program (with
//! `LD_PRELOAD`, or into a running process by tlsscope), which defines the TLS libraries'
//! functions, times each call to the real one and counts it in the shared region of
//! `inproc_abi` per function, outcome and latency bucket.
//!
//! The outcome is exact: in process, the wrapper asks the library itself (`SSL_get_error`,
//! `PR_GetError`) how a call that returned <= 0 ended. A wrapper never fails its caller: it
//! changes neither the arguments, the return value nor `errno`, and takes no lock; when the
//! region is missing or tlsscope has stopped, it only calls through.
//!
//! Every wrapper takes six integer arguments and returns the raw return register: on x86-64 and
//! aarch64 the first six integer or pointer arguments are passed in registers, so a function of
//! fewer arguments gets them unchanged (the rest are ignored), and its return value comes back
//! bit for bit. Every wrapped function takes at most six, none of them floating point.

mod region;
mod sniff;
mod sockets;
mod wrap;

pub use wrap::tlsscope_inproc_calibrate;
