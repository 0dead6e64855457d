//! Go programs: the functions of any Go binary and the Go version that built it, from what Go
//! keeps in every executable. Stripped ones included: `go build -ldflags='-s -w'` removes the
//! ELF symbol table and DWARF, but the runtime needs `.gopclntab` (every function's name and
//! entry), and `go version` reads `.go.buildinfo`. Plain file reading: no root.

mod buildinfo;
mod pclntab;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection, ObjectSegment};

use crate::symbols::file_backed;
use crate::Error;

#[doc(hidden)]
pub use buildinfo::synthetic_buildinfo;
#[doc(hidden)]
pub use pclntab::synthetic_table;

/// Why a file's Go tables cannot be read. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum GoError {
    /// Neither a function table nor build information: not a Go program.
    #[error("{} is not a Go program: it has neither a .gopclntab section nor Go build information", path.display())]
    NotGo { path: PathBuf },
    /// A function table of a layout this reader does not know.
    #[error("{} has a Go function table with magic {magic:#010x}, which this reader does not know: it reads Go 1.16 and later (magics 0xfffffffa, 0xfffffff0, 0xfffffff1); the program was built by a Go too old, or too new, for it", path.display())]
    Unsupported { path: PathBuf, magic: u32 },
    /// The tables are inconsistent or cut short.
    #[error("{}: corrupt Go tables: {what}", path.display())]
    Corrupt { path: PathBuf, what: String },
}

/// A function of a Go program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    /// The Go symbol name, e.g. `crypto/tls.(*Conn).Read`.
    pub name: String,
    /// The virtual address of its first instruction.
    pub address: u64,
    /// Its code bytes, without the padding before the next function; never 0. See
    /// `exact_size` for the functions where padding is included.
    pub size: u64,
    /// True for Go functions, whose pc tables give their exact size; false for those without
    /// (C code a cgo program links in), whose size runs to the next function, the alignment
    /// padding (INT3s or NOPs) included.
    pub exact_size: bool,
    /// The file offset of its first instruction: where a uprobe on the file attaches.
    pub file_offset: u64,
}

/// A Go executable's functions and build information.
pub struct GoBinary {
    path: PathBuf,
    data: Vec<u8>,
    go_version: Option<String>,
    modinfo: String,
    pclntab_magic: u32,
    /// In address order.
    functions: Vec<GoFunction>,
    by_name: HashMap<String, usize>,
}

// By hand: the derived one would print the whole file.
impl std::fmt::Debug for GoBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoBinary")
            .field("path", &self.path)
            .field("bytes", &self.data.len())
            .field("go_version", &self.go_version)
            .field(
                "pclntab_magic",
                &format_args!("{:#010x}", self.pclntab_magic),
            )
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

impl GoBinary {
    /// Reads the Go program at `path`.
    pub fn read(path: &Path) -> Result<GoBinary, Error> {
        let data = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        GoBinary::from_bytes(path, data)
    }

    /// Reads a Go program already in memory (copied: the functions' code is read from it);
    /// `path` names it in errors. Public so that the fuzz targets can feed it any bytes.
    pub fn parse(path: &Path, data: &[u8]) -> Result<GoBinary, Error> {
        GoBinary::from_bytes(path, data.to_vec())
    }

    fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<GoBinary, Error> {
        let data = bytes.as_slice();
        let file = object::File::parse(data).map_err(|e| Error::NotElf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let corrupt = |what: String| {
            Error::from(GoError::Corrupt {
                path: path.to_path_buf(),
                what,
            })
        };
        let segments: Vec<(u64, u64, u64)> = file
            .segments()
            .filter_map(|s| file_backed(s.address(), s.size(), s.file_range(), data.len()))
            .collect();
        let read_at = |address: u64, bytes: u64| -> Option<Vec<u8>> {
            let offset = file_offset(&segments, address, bytes)?;
            let start = usize::try_from(offset).ok()?;
            data.get(start..start.checked_add(usize::try_from(bytes).ok()?)?)
                .map(<[u8]>::to_vec)
        };

        let info = buildinfo_bytes(&file, data).and_then(|b| buildinfo::parse(b, read_at));
        let section = [".gopclntab", ".data.rel.ro.gopclntab"]
            .iter()
            .find_map(|name| file.section_by_name(name));
        let Some(section) = section else {
            return Err(match info {
                None => GoError::NotGo {
                    path: path.to_path_buf(),
                }
                .into(),
                Some(_) => corrupt("Go build information but no .gopclntab section".into()),
            });
        };
        let table = section
            .data()
            .map_err(|e| corrupt(format!(".gopclntab: {e}")))?;
        let text = file.section_by_name(".text").map(|s| s.address());
        let table = pclntab::parse(table, text).map_err(|e| match e {
            pclntab::TableError::Unsupported(magic) => Error::from(GoError::Unsupported {
                path: path.to_path_buf(),
                magic,
            }),
            pclntab::TableError::Corrupt(what) => corrupt(format!(".gopclntab: {what}")),
        })?;

        let mut functions = Vec::with_capacity(table.functions.len());
        let mut by_name = HashMap::with_capacity(table.functions.len());
        for f in table.functions {
            let Some(file_offset) = file_offset(&segments, f.address, f.size) else {
                return Err(corrupt(format!(
                    "function {} at {:#x} ({} bytes) is not all in the file",
                    f.name, f.address, f.size
                )));
            };
            // A name can come twice: an assembly function's ABI wrapper has the name of the
            // function it wraps (the ELF symbol table calls one of them "NAME.abi0"). Lookups
            // by name give the first in address order; `functions_named` gives all.
            by_name.entry(f.name.clone()).or_insert(functions.len());
            functions.push(GoFunction {
                name: f.name,
                address: f.address,
                size: f.size,
                exact_size: f.exact_size,
                file_offset,
            });
        }
        let (go_version, modinfo) = match info {
            Some(i) => (Some(i.go_version), i.modinfo),
            None => (None, String::new()),
        };
        Ok(GoBinary {
            path: path.to_path_buf(),
            data: bytes,
            go_version,
            modinfo,
            pclntab_magic: table.magic,
            functions,
            by_name,
        })
    }

    /// The file these functions come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Go version that built the program, as `go version` prints it ("go1.26.8"); `None`
    /// when the program has a function table but no build information.
    pub fn go_version(&self) -> Option<&str> {
        self.go_version.as_deref()
    }

    /// The main module's path ("example"), for a program built in module mode.
    pub fn main_module(&self) -> Option<&str> {
        buildinfo::modinfo_field(&self.modinfo, "mod")
    }

    /// The main package's import path ("example", "example/cmd/server").
    pub fn main_package(&self) -> Option<&str> {
        buildinfo::modinfo_field(&self.modinfo, "path")
    }

    /// The magic of the function table, which tells its layout (0xfffffff1: Go 1.20 and later).
    pub fn pclntab_magic(&self) -> u32 {
        self.pclntab_magic
    }

    /// A function by its exact Go name, e.g. `crypto/tls.(*Conn).Read`.
    pub fn function(&self, name: &str) -> Option<&GoFunction> {
        self.by_name.get(name).map(|&i| &self.functions[i])
    }

    /// Every function of that name, in address order: one, or a function and its ABI wrapper.
    pub fn functions_named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a GoFunction> {
        self.functions.iter().filter(move |f| f.name == name)
    }

    /// Every function, in address order.
    pub fn functions(&self) -> impl Iterator<Item = &GoFunction> {
        self.functions.iter()
    }

    /// How many functions the program has.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// True when the program has no function (never, for a table that read).
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The code bytes of `function` (one of this binary's): `size` bytes from its file offset.
    pub fn code(&self, function: &GoFunction) -> Option<&[u8]> {
        let start = usize::try_from(function.file_offset).ok()?;
        let end = start.checked_add(usize::try_from(function.size).ok()?)?;
        self.data.get(start..end)
    }

    /// The file offset of `name`'s first instruction, or the error naming the function.
    pub fn uprobe_offset(&self, name: &str) -> Result<u64, Error> {
        self.function(name)
            .map(|f| f.file_offset)
            .ok_or_else(|| Error::NoSymbol {
                symbol: name.to_string(),
                path: self.path.clone(),
                stripped: false,
            })
    }
}

/// The bytes holding the build information: its section, or else (as `debug/buildinfo` does)
/// the start of the first writable, non-executable loadable segment.
fn buildinfo_bytes<'d>(file: &object::File<'d>, data: &'d [u8]) -> Option<&'d [u8]> {
    if let Some(section) = file.section_by_name(".go.buildinfo") {
        return section.data().ok();
    }
    let segment = file.segments().find(|s| {
        matches!(s.flags(), object::SegmentFlags::Elf { p_flags, .. } if p_flags & (object::elf::PF_W | object::elf::PF_X) == object::elf::PF_W)
    })?;
    let (offset, bytes) = segment.file_range();
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(bytes.min(64 * 1024)).ok()?;
    data.get(start..start.checked_add(len)?)
}

/// The file offset of `bytes` bytes at `address`, when all of them lie in one loadable segment's
/// file bytes.
fn file_offset(segments: &[(u64, u64, u64)], address: u64, bytes: u64) -> Option<u64> {
    segments.iter().find_map(|&(start, size, offset)| {
        let into = address.checked_sub(start)?;
        let end = into.checked_add(bytes)?;
        (into < size && end <= size).then_some(offset.checked_add(into)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_translate_only_when_wholly_in_one_segment() {
        let segments = [(0x400000, 0x2000, 0), (0x600000, 0x100, 0x3000)];
        assert_eq!(file_offset(&segments, 0x401000, 0x10), Some(0x1000));
        assert_eq!(file_offset(&segments, 0x401ff0, 0x10), Some(0x1ff0));
        assert_eq!(file_offset(&segments, 0x401ff0, 0x11), None);
        assert_eq!(file_offset(&segments, 0x600010, 8), Some(0x3010));
        assert_eq!(file_offset(&segments, 0x500000, 1), None);
        assert_eq!(file_offset(&[(u64::MAX - 4, 8, 0)], u64::MAX - 2, 8), None);
    }

    #[test]
    fn debug_output_leaves_out_the_file() {
        let go = GoBinary {
            path: PathBuf::from("/srv/app"),
            data: vec![0xcc; 4096],
            go_version: Some("go1.26.8".into()),
            modinfo: String::new(),
            pclntab_magic: 0xffff_fff1,
            functions: Vec::new(),
            by_name: HashMap::new(),
        };
        let text = format!("{go:?}");
        assert!(
            text.contains("bytes: 4096") && text.contains("0xfffffff1"),
            "{text}"
        );
        assert!(text.len() < 200, "{text}");
    }

    #[test]
    fn an_unsupported_table_names_the_file_and_its_magic() {
        let err = Error::from(GoError::Unsupported {
            path: PathBuf::from("/srv/old-app"),
            magic: 0xffff_fffb,
        });
        let text = err.to_string();
        assert!(
            text.contains("/srv/old-app")
                && text.contains("0xfffffffb")
                && text.contains("Go 1.16"),
            "{text}"
        );
    }

    #[test]
    fn a_file_that_is_not_elf_is_not_elf() {
        let err = GoBinary::parse(Path::new("x.txt"), b"hello").unwrap_err();
        assert!(matches!(err, Error::NotElf { .. }), "{err}");
    }
}
