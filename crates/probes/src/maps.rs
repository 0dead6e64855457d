//! The TLS libraries a process has mapped, from `/proc/PID/maps`.

use std::path::{Path, PathBuf};

use crate::Error;

/// The TLS library families tlsscope knows how to probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LibraryKind {
    /// OpenSSL's libssl.
    OpensslSsl,
    /// OpenSSL's libcrypto.
    OpensslCrypto,
    GnuTls,
    /// NSS's libssl3 and NSPR (PR_Read/PR_Write).
    Nss,
    Nspr,
}

impl LibraryKind {
    /// Every family, in the order plans look for them.
    pub const ALL: [LibraryKind; 5] = [
        LibraryKind::OpensslSsl,
        LibraryKind::OpensslCrypto,
        LibraryKind::GnuTls,
        LibraryKind::Nss,
        LibraryKind::Nspr,
    ];

    /// The family of a library file, by its name.
    pub fn of(path: &Path) -> Option<LibraryKind> {
        let name = path.file_name()?.to_str()?;
        let kind = if name.starts_with("libssl3.so") {
            LibraryKind::Nss
        } else if name.starts_with("libssl.so") {
            LibraryKind::OpensslSsl
        } else if name.starts_with("libcrypto.so") {
            LibraryKind::OpensslCrypto
        } else if name.starts_with("libgnutls.so") {
            LibraryKind::GnuTls
        } else if name.starts_with("libnspr4.so") {
            LibraryKind::Nspr
        } else {
            return None;
        };
        Some(kind)
    }
}

/// A TLS library file mapped into a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedLibrary {
    pub path: PathBuf,
    pub kind: LibraryKind,
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub executable: bool,
    /// Offset in the file of the mapping's first byte.
    pub offset: u64,
    pub path: Option<PathBuf>,
}

/// Parses `/proc/PID/maps` text.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    // The kernel ends each line with '\n' alone. `str::lines` would also take a '\r' before it
    // as part of the line ending, cutting it off a file name that ends in one.
    text.split('\n').filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    // start-end perms offset dev inode [path]; the path may contain spaces.
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields
        .next()
        .map(str::trim_start)
        .filter(|p| p.starts_with('/'));
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        path: path.map(PathBuf::from),
    })
}

/// The TLS libraries process `pid` maps, each once, in the order first mapped.
pub fn tls_libraries(pid: u32) -> Result<Vec<MappedLibrary>, Error> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Process { pid, source })?;
    let mut found: Vec<MappedLibrary> = Vec::new();
    for mapping in parse_maps(&text) {
        let Some(file) = mapping.path else {
            continue;
        };
        let Some(kind) = LibraryKind::of(&file) else {
            continue;
        };
        if !found.iter().any(|l| l.path == file) {
            found.push(MappedLibrary { path: file, kind });
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_with_and_without_paths() {
        let text = "7f0000000000-7f0000001000 r-xp 00002000 08:01 1234   /usr/lib/x86_64-linux-gnu/libssl.so.3\n\
                    7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0      [stack]\n\
                    7f0000002000-7f0000003000 r--p 00000000 08:01 99 /opt/my dir/libgnutls.so.30\n";
        let maps = parse_maps(text);
        assert_eq!(maps.len(), 3);
        assert_eq!(
            (maps[0].start, maps[0].offset, maps[0].executable),
            (0x7f00_0000_0000, 0x2000, true)
        );
        assert_eq!(maps[1].path, None);
        assert_eq!(
            maps[2].path.as_deref(),
            Some(Path::new("/opt/my dir/libgnutls.so.30"))
        );
    }

    /// Found by the proc_maps fuzz target: a file name may end in '\r' (any byte but '/' and
    /// NUL is allowed), which splitting on "\r\n" used to cut off.
    #[test]
    fn a_path_ending_in_carriage_return_keeps_it() {
        let text = "7f0000000000-7f0000001000 r-xp 00000000 08:01 7 /tmp/odd\r\n\
                    7f0000001000-7f0000002000 r-xp 00000000 08:01 8 /tmp/libssl.so.3\n";
        let maps = parse_maps(text);
        assert_eq!(maps[0].path.as_deref(), Some(Path::new("/tmp/odd\r")));
        assert_eq!(maps[1].path.as_deref(), Some(Path::new("/tmp/libssl.so.3")));
    }

    #[test]
    fn library_families_by_name() {
        let k = |p: &str| LibraryKind::of(Path::new(p));
        assert_eq!(k("/usr/lib/libssl.so.3"), Some(LibraryKind::OpensslSsl));
        assert_eq!(k("/x/lib/libssl.so.1.1"), Some(LibraryKind::OpensslSsl));
        // OpenSSL 4.0, and the unversioned names of AWS-LC's and BoringSSL's CMake builds.
        assert_eq!(k("/x/lib/libssl.so.4"), Some(LibraryKind::OpensslSsl));
        assert_eq!(k("/x/aws-lc/lib/libssl.so"), Some(LibraryKind::OpensslSsl));
        assert_eq!(
            k("/x/boringssl/lib/libcrypto.so"),
            Some(LibraryKind::OpensslCrypto)
        );
        assert_eq!(k("/usr/lib/libssl3.so"), Some(LibraryKind::Nss));
        assert_eq!(
            k("/usr/lib/libcrypto.so.3"),
            Some(LibraryKind::OpensslCrypto)
        );
        assert_eq!(k("/usr/lib/libgnutls.so.30"), Some(LibraryKind::GnuTls));
        assert_eq!(k("/usr/lib/libc.so.6"), None);
    }
}
