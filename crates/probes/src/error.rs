//! The crate's one error type, for every module and both backends.

use std::path::PathBuf;

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
    #[error("{} is a Go program{} without Go's crypto/tls (none of {functions} is in it): it makes no TLS connections of its own", path.display(), version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default())]
    GoWithoutTls {
        path: PathBuf,
        version: Option<String>,
        functions: String,
    },
    #[error("unknown function {name}: tlsscope traces {known}")]
    UnknownFunction { name: String, known: String },
    #[error("nothing to attach: {reasons}")]
    NothingToAttach { reasons: String },
    #[error("tracing needs root (CAP_BPF and CAP_PERFMON): run tlsscope as root, e.g. with sudo")]
    NotRoot,
    #[error("this kernel has no uprobes (/sys/bus/event_source/devices/uprobe is missing): use a kernel built with CONFIG_UPROBE_EVENTS")]
    NoUprobes,
    #[error("cannot attach the in-process backend to process {pid}: {reason}")]
    Attach {
        pid: u32,
        reason: crate::inproc::attach::Refusal,
    },
    #[error("ring size {bytes}: the in-process backend's rings (one per thread) take a power of two from {min} to {max} bytes")]
    RingSize { bytes: u64, min: u64, max: u64 },
    #[error(transparent)]
    Go(#[from] crate::golang::GoError),
    #[error("BPF: {what}: {detail}")]
    Bpf { what: String, detail: String },
}
