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
        let file = object::File::parse(&*data).map_err(|e| Error::NotElf {
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
            .map(|s| (s.address(), s.size(), s.file_range().0))
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
        self.segments
            .iter()
            .find(|&&(start, size, _)| address >= start && address < start + size)
            .map(|&(start, _, offset)| address - start + offset)
    }
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
}
