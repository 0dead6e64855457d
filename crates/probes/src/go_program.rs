//! A Go program as the plans see it: the Go release that built it, and its functions' entries,
//! sizes and code, found in `.gopclntab` (stripped programs included). Target side: plain file
//! reading.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::Object;

use crate::symbols::SymbolTable;
use crate::Error;

/// One function of a Go program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunction {
    pub address: u64,
    pub size: u64,
    /// Where its first instruction lies in the file: where a uprobe attaches.
    pub file_offset: u64,
}

/// A Go program's functions.
pub struct GoProgram {
    path: PathBuf,
    data: Vec<u8>,
    version: Option<String>,
    functions: HashMap<String, GoFunction>,
}

impl GoProgram {
    /// Reads `path`: None when it is no Go program (it has no `.gopclntab`).
    pub fn read(path: &Path) -> Result<Option<GoProgram>, Error> {
        let data = std::fs::read(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let is_go = object::File::parse(&*data)
            .map(|f| f.section_by_name(".gopclntab").is_some())
            .unwrap_or(false);
        if !is_go {
            return Ok(None);
        }
        let table = SymbolTable::parse(path, &data)?;
        let functions = table
            .functions()
            .filter_map(|s| {
                let file_offset = table.uprobe_offset(&s.name).ok()?;
                Some((
                    s.name.clone(),
                    GoFunction {
                        address: s.address,
                        size: s.size,
                        file_offset,
                    },
                ))
            })
            .collect();
        Ok(Some(GoProgram {
            path: path.to_path_buf(),
            data,
            version: None,
            functions,
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Go release that built it ("go1.26.8"), where the build info says.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    pub fn function(&self, name: &str) -> Option<&GoFunction> {
        self.functions.get(name)
    }

    /// The machine code of `f`, from the file.
    pub fn code(&self, f: &GoFunction) -> Option<&[u8]> {
        let start = usize::try_from(f.file_offset).ok()?;
        let end = start.checked_add(usize::try_from(f.size).ok()?)?;
        self.data.get(start..end)
    }
}
