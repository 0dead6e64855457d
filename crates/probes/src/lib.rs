//! `probes`: eBPF uprobes on TLS libraries (issue 4). So far: where to attach them. Which TLS
//! libraries a process maps, the functions a library defines (exported `.dynsym`, and the
//! internal `.symtab` where it was not stripped), and the file offset of each.

pub mod maps;
pub mod symbols;

use std::path::PathBuf;

pub use maps::{tls_libraries, LibraryKind, MappedLibrary, Mapping};
pub use symbols::{Symbol, SymbolTable, Table};

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
}
