//! The TLS libraries a process has mapped, from `/proc/PID/maps`, and the processes a target
//! takes in (its descendants running the same program).

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
    /// Go's crypto/tls, compiled into each Go program (no library is mapped): not in
    /// [`LibraryKind::ALL`], which lists the library files a process can map.
    Go,
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

/// Processes `pids` and their descendants that run the same program (a server's workers,
/// forked without exec), parents first: the processes a target's probes or library go into.
pub fn with_descendants(pids: &[u32]) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(ppid) = parent_of(pid) {
                parents.push((pid, ppid));
            }
        }
    }
    let exe = |pid: u32| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let mut out: Vec<u32> = pids.to_vec();
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        let program = exe(p);
        for &(child, parent) in &parents {
            if parent == p && !out.contains(&child) && program.is_some() && exe(child) == program {
                out.push(child);
            }
        }
        i += 1;
    }
    out
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) S ppid ...": the fields after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid`'s memory map names `file`.
pub(crate) fn maps_file(pid: u32, file: &Path) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|text| {
        parse_maps(&text)
            .iter()
            .any(|m| m.path.as_deref() == Some(file))
    })
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

    #[test]
    fn forked_workers_follow_their_parent_and_other_programs_do_not() {
        // SAFETY: the child only sleeps and exits (async-signal-safe calls), never returns.
        let worker = unsafe { libc::fork() };
        if worker == 0 {
            // SAFETY: as above.
            unsafe {
                libc::sleep(5);
                libc::_exit(0);
            }
        }
        let mut other = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let all = with_descendants(&[me]);
        assert_eq!(all[0], me);
        assert!(all.contains(&(worker as u32)), "{all:?}");
        assert!(!all.contains(&other.id()), "{all:?}");
        other.kill().unwrap();
        other.wait().unwrap();
        // SAFETY: ends and reaps the child forked above, by its PID.
        unsafe {
            libc::kill(worker, libc::SIGKILL);
            libc::waitpid(worker, std::ptr::null_mut(), 0);
        }
    }
}
