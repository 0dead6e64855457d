//! Symbols of an ELF file and the file offsets uprobes attach at. Plain file reading: no root.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::Error;

/// Which symbol table a symbol came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// `.dynsym`: exported functions; present even in stripped distribution libraries.
    Dynamic,
    /// `.symtab`: every function, internal ones too; removed by stripping.
    Full,
}

/// A function defined in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    /// The symbol's virtual address in the file (`st_value`).
    pub address: u64,
    pub size: u64,
    pub table: Table,
}

/// The functions an ELF file defines, and how to turn one into a uprobe offset.
#[derive(Debug)]
pub struct SymbolTable {
    path: PathBuf,
    functions: HashMap<String, Symbol>,
    /// (virtual address, size in memory, file offset) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    has_full_table: bool,
}

impl SymbolTable {
    /// Reads the function symbols of `path` (both tables; `.dynsym` wins on a name clash).
    pub fn read(path: &Path) -> Result<SymbolTable, Error> {
        let data = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        SymbolTable::parse(path, &data)
    }

    /// Reads the function symbols of an ELF file already in memory; `path` names it in errors.
    /// Public so that the fuzz targets can feed it bytes that never were a file.
    pub fn parse(path: &Path, data: &[u8]) -> Result<SymbolTable, Error> {
        let file = object::File::parse(data).map_err(|e| Error::NotElf {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        let mut functions = HashMap::new();
        let mut has_full_table = false;
        for symbol in file.symbols() {
            has_full_table = true;
            insert_function(&mut functions, &symbol, Table::Full);
        }
        // Exported names override internal ones of the same name.
        for symbol in file.dynamic_symbols() {
            insert_function(&mut functions, &symbol, Table::Dynamic);
        }
        let segments = file
            .segments()
            .filter_map(|s| file_backed(s.address(), s.size(), s.file_range(), data.len()))
            .collect();
        Ok(SymbolTable {
            path: path.to_path_buf(),
            functions,
            segments,
            has_full_table,
        })
    }

    /// The file these symbols come from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when the file kept its full symbol table (`.symtab`), so internal functions can
    /// be probed; distribution libraries are usually stripped of it.
    pub fn has_full_table(&self) -> bool {
        self.has_full_table
    }

    /// A function by name (without a version suffix).
    pub fn function(&self, name: &str) -> Option<&Symbol> {
        self.functions.get(name)
    }

    /// Every function the file defines, in no particular order.
    pub fn functions(&self) -> impl Iterator<Item = &Symbol> {
        self.functions.values()
    }

    /// How many functions the file defines.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    /// True when the file defines no function.
    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }

    /// The file offset of `name`'s first instruction: where a uprobe on this file attaches.
    pub fn uprobe_offset(&self, name: &str) -> Result<u64, Error> {
        let Some(symbol) = self.function(name) else {
            return Err(Error::NoSymbol {
                symbol: name.to_string(),
                path: self.path.clone(),
                stripped: !self.has_full_table,
            });
        };
        self.file_offset(symbol.address)
            .ok_or_else(|| Error::NotLoaded {
                symbol: name.to_string(),
                path: self.path.clone(),
            })
    }

    /// Translates a virtual address into a file offset through the loadable segments.
    fn file_offset(&self, address: u64) -> Option<u64> {
        // Differences, not `start + size`: a corrupt header can put a segment at the top of the
        // address space, where the sum would overflow.
        self.segments.iter().find_map(|&(start, size, offset)| {
            let into = address.checked_sub(start).filter(|&into| into < size)?;
            offset.checked_add(into)
        })
    }
}

/// A loadable segment as (virtual address, bytes, file offset), cut to the bytes the file holds:
/// a uprobe names a file offset, so an address past them (zero-filled memory such as `.bss`,
/// or a header that claims more than the file has) has none. `None` when no byte is in the file.
pub(crate) fn file_backed(
    address: u64,
    memory_bytes: u64,
    (offset, file_bytes): (u64, u64),
    data_bytes: usize,
) -> Option<(u64, u64, u64)> {
    let in_file = (data_bytes as u64).checked_sub(offset)?;
    let size = memory_bytes.min(file_bytes).min(in_file);
    (size > 0).then_some((address, size, offset))
}

fn insert_function<'data, S: ObjectSymbol<'data>>(
    functions: &mut HashMap<String, Symbol>,
    symbol: &S,
    table: Table,
) {
    if symbol.kind() != SymbolKind::Text || !symbol.is_definition() {
        return;
    }
    let Ok(name) = symbol.name() else {
        return;
    };
    // Versioned names from some tools read "SSL_read@@OPENSSL_3.0.0": keep the bare name.
    let name = name.split('@').next().unwrap_or(name);
    functions.insert(
        name.to_string(),
        Symbol {
            name: name.to_string(),
            address: symbol.address(),
            size: symbol.size(),
            table,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-PIE executable's layout: code at 0x401000 from file offset 0x1000, data at
    /// 0x403e10 from 0x2e10. Shared libraries often map code at address == offset, which
    /// would hide a missing translation.
    fn table() -> SymbolTable {
        let mut functions = HashMap::new();
        for (name, address) in [
            ("main", 0x401136),
            ("data_fn", 0x403e20),
            ("lost", 0x900000),
        ] {
            functions.insert(
                name.to_string(),
                Symbol {
                    name: name.to_string(),
                    address,
                    size: 16,
                    table: Table::Full,
                },
            );
        }
        SymbolTable {
            path: PathBuf::from("/bin/example"),
            functions,
            segments: vec![
                (0x400000, 0x600, 0),
                (0x401000, 0x1000, 0x1000),
                (0x403e10, 0x230, 0x2e10),
            ],
            has_full_table: true,
        }
    }

    #[test]
    fn addresses_translate_through_their_segment() {
        let t = table();
        assert_eq!(t.uprobe_offset("main").unwrap(), 0x1136);
        assert_eq!(t.uprobe_offset("data_fn").unwrap(), 0x2e20);
        let err = t.uprobe_offset("lost").unwrap_err().to_string();
        assert!(
            err.contains("lost") && err.contains("loadable segment"),
            "{err}"
        );
        let err = t.uprobe_offset("absent").unwrap_err().to_string();
        assert!(
            err.contains("does not define absent") && !err.contains("stripped"),
            "{err}"
        );
    }

    /// Found by the elf_symbols fuzz target: a copy of a small library whose first loadable
    /// segment claims file offset 0x2100 in a file of 0x1588 bytes. The uprobe offset of a
    /// function in it came out past the end of the file; now that segment holds no function.
    #[test]
    fn a_segment_past_the_end_of_the_file_has_no_offsets() {
        let data =
            include_bytes!("../../../fuzz/corpus/elf_symbols/crash-segment-offset-past-the-end.so");
        let t = SymbolTable::parse(Path::new("libtiny.so"), data).unwrap();
        let err = t.uprobe_offset("tlsscope_tiny").unwrap_err();
        assert!(matches!(err, Error::NotLoaded { .. }), "{err}");
    }

    /// Only the bytes a segment has in the file get offsets: not its zero-filled tail, nor
    /// what a header claims past the end of the file.
    #[test]
    fn segments_are_cut_to_the_bytes_in_the_file() {
        assert_eq!(
            file_backed(0x1000, 0x300, (0x800, 0x100), 0x2000),
            Some((0x1000, 0x100, 0x800))
        );
        assert_eq!(
            file_backed(0x1000, 0x300, (0x1f00, 0x300), 0x2000),
            Some((0x1000, 0x100, 0x1f00))
        );
        assert_eq!(file_backed(0x1000, 0x300, (0x2100, 0x300), 0x2000), None);
        assert_eq!(file_backed(0x1000, 0x300, (0x800, 0), 0x2000), None);
    }

    /// A segment at the top of the address space, as a corrupt header can claim: its end does
    /// not fit 64 bits, which used to overflow while looking an address up.
    #[test]
    fn a_segment_at_the_top_of_the_address_space() {
        let mut t = table();
        t.segments = vec![(u64::MAX - 0xff, 0x1000, 0x2000)];
        t.functions.get_mut("main").unwrap().address = u64::MAX - 0x10;
        assert_eq!(t.uprobe_offset("main").unwrap(), 0x20ef);
        t.segments = vec![(0x401000, 0x1000, u64::MAX - 0x100)];
        t.functions.get_mut("main").unwrap().address = 0x401fff;
        assert!(t.uprobe_offset("main").is_err());
    }
}
