//! The probes' ELF symbol reader (`probes::SymbolTable`), which reads whatever library file a
//! traced process maps: truncated, corrupt or hostile files included.
//!
//! Properties: reading never panics; every function it lists is found again by its name, bare
//! of any version suffix; and every uprobe offset it gives points inside the file (a uprobe
//! names a file offset, so one past the end would attach nowhere, or somewhere else).

use std::path::Path;

use probes::{Error, SymbolTable};

/// Checks the symbol reader on `data` as an ELF file; panics on a violation. Accepted: a
/// symbol table read.
pub fn check(data: &[u8]) -> bool {
    let Ok(table) = SymbolTable::parse(Path::new("fuzz.so"), data) else {
        return false;
    };
    assert_eq!(table.functions().count(), table.len());
    for symbol in table.functions() {
        assert!(
            !symbol.name.contains('@'),
            "{:?} kept its version",
            symbol.name
        );
        assert_eq!(table.function(&symbol.name), Some(symbol));
        match table.uprobe_offset(&symbol.name) {
            Ok(offset) => assert!(
                offset < data.len() as u64,
                "{} at file offset {offset:#x}, past the end of {} bytes",
                symbol.name,
                data.len()
            ),
            Err(Error::NotLoaded { .. }) => {}
            Err(e) => panic!("{}: unexpected error {e}", symbol.name),
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A small shared library with a known function, built by the C compiler (`cc`, which
    /// `make deps` installs). A real file from a real linker, unlike any the fuzzer invents.
    fn tiny_library() -> Vec<u8> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let source = dir.path().join("tiny.c");
        let library = dir.path().join("libtiny.so");
        std::fs::write(
            &source,
            "int tlsscope_tiny(int x) { return x * 3 + 1; }\n\
             int tlsscope_tiny_other(int x) { return tlsscope_tiny(x) - 2; }\n",
        )
        .expect("writing the source");
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-nostdlib", "-o"])
            .arg(&library)
            .arg(&source)
            .status()
            .expect("running cc (make deps installs gcc)");
        assert!(status.success(), "cc failed: {status}");
        std::fs::read(&library).expect("reading the library")
    }

    #[test]
    fn a_real_library_reads_and_its_offsets_point_at_its_code() {
        let data = tiny_library();
        assert!(check(&data));
        let table = SymbolTable::parse(Path::new("libtiny.so"), &data).unwrap();
        let offset = table.uprobe_offset("tlsscope_tiny").unwrap();
        assert!(offset > 0 && offset < data.len() as u64);
    }

    /// Every truncation of a real library: a file caught mid-write, or cut short on disk.
    #[test]
    fn every_truncation_of_a_real_library() {
        let data = tiny_library();
        for len in 0..data.len() {
            let _ = check(&data[..len]);
        }
    }

    /// Each byte of the headers flipped in turn: lengths, offsets and counts gone wrong.
    #[test]
    fn corrupt_headers_of_a_real_library() {
        let mut data = tiny_library();
        for at in 0..data.len().min(1024) {
            for flip in [0x01, 0x80, 0xff] {
                data[at] ^= flip;
                let _ = check(&data);
                data[at] ^= flip;
            }
        }
    }
}
