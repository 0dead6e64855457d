//! The probes' Go program reader (`probes::GoBinary`), which reads `.gopclntab` and
//! `.go.buildinfo` of whatever executable a traced process runs: truncated, corrupt or hostile
//! files included.
//!
//! Properties: reading never panics; every function it lists is found again by its name; each
//! function's code lies inside the file, at its file offset, and is not empty; functions come
//! in address order without overlapping.

use std::path::Path;

use probes::GoBinary;

/// Checks the Go reader on `data` as an executable; panics on a violation. Accepted: a Go
/// program read.
pub fn check(data: &[u8]) -> bool {
    let Ok(go) = GoBinary::parse(Path::new("fuzz-go"), data) else {
        return false;
    };
    assert_eq!(go.functions().count(), go.len());
    let mut end = 0u64;
    for f in go.functions() {
        let found = go
            .function(&f.name)
            .unwrap_or_else(|| panic!("{} is listed but not found by name", f.name));
        assert_eq!(found.name, f.name);
        assert!(f.size > 0, "{} has no code", f.name);
        assert!(
            f.address >= end,
            "{} at {:#x} overlaps the one before",
            f.name,
            f.address
        );
        end = f.address + f.size;
        let code_end = f.file_offset.checked_add(f.size).expect("no overflow");
        assert!(
            code_end <= data.len() as u64,
            "{} at file offset {:#x} ({} bytes) runs past the end of {} bytes",
            f.name,
            f.file_offset,
            f.size,
            data.len()
        );
        let code = go.code(f).expect("the code of a listed function");
        assert_eq!(code, &data[f.file_offset as usize..code_end as usize]);
        assert_eq!(go.uprobe_offset(&f.name).unwrap(), found.file_offset);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The functions of the synthetic program: (name, offset into .text, code bytes).
    const FUNCTIONS: [(&str, u32, u32); 4] = [
        ("main.main", 0, 0x1d),
        ("crypto/tls.(*Conn).Read", 0x20, 0x31),
        ("crypto/tls.(*Conn).Write", 0x60, 0x18),
        ("runtime.goexit", 0x80, 0x10),
    ];

    /// A small static executable with a Go 1.20-layout function table and Go 1.18+ build
    /// information, linked by the C toolchain (`cc`, which `make deps` installs): a real file
    /// from a real linker, far smaller than a Go program. The table leaves its text start 0, as
    /// Go's linker now does, so the entries count from `.text`. This is how
    /// `fuzz/corpus/go_binary/synthetic-go1.20` was made.
    fn synthetic_go_program() -> Vec<u8> {
        let table = probes::golang::synthetic_table(0, &FUNCTIONS, 0xa0);
        let info = probes::golang::synthetic_buildinfo(
            "go1.26.8",
            b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6path\texample\nmod\texample\t(devel)\t\n\n\xf92C1\x86\x18 r\x00\x82B\x10A\x16\xd8\xf2",
        );
        let bytes = |b: &[u8]| {
            b.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let source = format!(
            ".section .text\n.globl _start\n_start:\n.fill 0xa0,1,0xcc\n\
             .section .gopclntab,\"a\"\n.byte {}\n\
             .section .go.buildinfo,\"aw\"\n.balign 16\n.byte {}\n",
            bytes(&table),
            bytes(&info)
        );
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("go.s"), source).expect("writing the source");
        let out = dir.path().join("go-program");
        let status = Command::new("cc")
            .args([
                "-nostdlib",
                "-static",
                "-no-pie",
                "-Wl,--build-id=none",
                "-o",
            ])
            .arg(&out)
            .arg(dir.path().join("go.s"))
            .status()
            .expect("running cc (make deps installs gcc)");
        assert!(status.success(), "cc failed: {status}");
        std::fs::read(&out).expect("reading the program")
    }

    #[test]
    fn a_synthetic_go_program_reads_with_its_functions_and_version() {
        let data = synthetic_go_program();
        assert!(check(&data));
        let go = GoBinary::parse(Path::new("go-program"), &data).unwrap();
        assert_eq!(go.go_version(), Some("go1.26.8"));
        assert_eq!(go.main_module(), Some("example"));
        let got: Vec<_> = go.functions().map(|f| (f.name.as_str(), f.size)).collect();
        let want: Vec<_> = FUNCTIONS
            .iter()
            .map(|&(n, _, s)| (n, u64::from(s)))
            .collect();
        assert_eq!(got, want);
        let read = go.function("crypto/tls.(*Conn).Read").unwrap();
        assert_eq!(
            read.address,
            go.function("main.main").unwrap().address + 0x20
        );
        assert!(go.code(read).unwrap().iter().all(|&b| b == 0xcc));
    }

    /// Every truncation: a file caught mid-write, or cut short on disk.
    #[test]
    fn every_truncation_of_a_synthetic_go_program() {
        let data = synthetic_go_program();
        for len in 0..data.len() {
            let _ = check(&data[..len]);
        }
    }

    /// Each byte flipped in turn: headers, tables and build information gone wrong.
    #[test]
    fn every_flipped_byte_of_a_synthetic_go_program() {
        let mut data = synthetic_go_program();
        for at in 0..data.len() {
            for flip in [0x01, 0x80, 0xff] {
                data[at] ^= flip;
                let _ = check(&data);
                data[at] ^= flip;
            }
        }
    }

    /// Writes the synthetic program to the corpus: `TLSSCOPE_WRITE_CORPUS=1 cargo test -p
    /// fuzz-checks go_binary`.
    #[test]
    fn the_committed_synthetic_program_can_be_made_again() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/go_binary/synthetic-go1.20");
        if std::env::var_os("TLSSCOPE_WRITE_CORPUS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, synthetic_go_program()).unwrap();
        }
        let committed = std::fs::read(&path).expect("the committed synthetic program");
        assert!(check(&committed));
    }
}
