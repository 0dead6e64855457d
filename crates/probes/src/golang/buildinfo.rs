//! Go's build information, `.go.buildinfo`: the Go version that built the program and, for a
//! module build, its main module. The layout is `debug/buildinfo/buildinfo.go`'s (and
//! `cmd/link/internal/ld/data.go`, which writes it): a 32-byte header, 16-byte aligned, that
//! starts with the magic below, then the pointer size and a flags byte; with flag 2 (Go 1.18
//! and later) two varint-prefixed strings follow the header, before that the header holds the
//! addresses of two Go string headers.

/// The magic the build information starts with.
pub(crate) const MAGIC: &[u8; 14] = b"\xff Go buildinf:";
const HEADER_BYTES: usize = 32;
const ALIGN: usize = 16;

/// What the build information says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct BuildInfo {
    /// "go1.26.8".
    pub go_version: String,
    /// The module info text ("path\texample\nmod\texample\t(devel)\t\n..."), empty without it.
    pub modinfo: String,
}

/// Finds and reads the build information in `data` (the section, or the start of the first
/// writable segment). `read_at(address, bytes)` reads memory of the program, for the older
/// pointer form. `None` where there is none or it is unreadable.
pub(crate) fn parse(
    data: &[u8],
    read_at: impl Fn(u64, u64) -> Option<Vec<u8>>,
) -> Option<BuildInfo> {
    let at = (0..data.len())
        .step_by(ALIGN)
        .find(|&i| data[i..].starts_with(MAGIC) && data.len() - i >= HEADER_BYTES)?;
    let header = &data[at..at + HEADER_BYTES];
    let ptr_bytes = usize::from(header[14]);
    let flags = header[15];
    let (go_version, modinfo) = if flags & 2 != 0 {
        let rest = &data[at + HEADER_BYTES..];
        let (version, rest) = varint_string(rest)?;
        let modinfo = varint_string(rest).map(|(m, _)| m).unwrap_or_default();
        (version, modinfo)
    } else {
        if !matches!(ptr_bytes, 4 | 8) {
            return None;
        }
        let big_endian = flags & 1 != 0;
        let word = |b: &[u8]| -> Option<u64> {
            let b = b.get(..ptr_bytes)?;
            Some(match (ptr_bytes, big_endian) {
                (4, false) => u32::from_le_bytes(b.try_into().ok()?).into(),
                (4, true) => u32::from_be_bytes(b.try_into().ok()?).into(),
                (_, false) => u64::from_le_bytes(b.try_into().ok()?),
                (_, true) => u64::from_be_bytes(b.try_into().ok()?),
            })
        };
        let string_at = |address: u64| -> Option<Vec<u8>> {
            let head = read_at(address, 2 * ptr_bytes as u64)?;
            let (ptr, len) = (word(&head)?, word(head.get(ptr_bytes..)?)?);
            // Build info strings are short: a huge length is corruption, not a string to read.
            if len > 1 << 20 {
                return None;
            }
            read_at(ptr, len)
        };
        let version = string_at(word(&header[16..])?)?;
        let modinfo = word(&header[16 + ptr_bytes..])
            .and_then(string_at)
            .unwrap_or_default();
        (version, modinfo)
    };
    if go_version.is_empty() {
        return None;
    }
    Some(BuildInfo {
        go_version: String::from_utf8_lossy(&go_version).into_owned(),
        modinfo: strip_sentinels(&modinfo),
    })
}

/// The module info is framed by two 16-byte sentinels (cmd/go's infoStart and infoEnd), which
/// are not text: they come off before the rest is read as text.
fn strip_sentinels(b: &[u8]) -> String {
    if b.len() >= 33 && b[b.len() - 17] == b'\n' {
        String::from_utf8_lossy(&b[16..b.len() - 16]).into_owned()
    } else {
        String::new()
    }
}

/// The first field after `key\t` on the line that starts with it, in module info text.
pub(crate) fn modinfo_field<'a>(modinfo: &'a str, key: &str) -> Option<&'a str> {
    modinfo.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix('\t')?;
        rest.split('\t').next().filter(|s| !s.is_empty())
    })
}

/// A uvarint length, then that many bytes; with what follows.
fn varint_string(data: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut len: u64 = 0;
    let mut n = 0;
    for (i, &b) in data.iter().enumerate().take(10) {
        len |= u64::from(b & 0x7f).checked_shl(7 * i as u32)?;
        if b & 0x80 == 0 {
            n = i + 1;
            break;
        }
    }
    if n == 0 {
        return None;
    }
    let end = usize::try_from(len).ok()?.checked_add(n)?;
    let bytes = data.get(n..end)?;
    Some((bytes.to_vec(), &data[end..]))
}

/// Builds Go 1.18+ inline build information, for tests and the fuzz corpus.
#[doc(hidden)]
pub fn synthetic_buildinfo(go_version: &str, modinfo: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&[8, 2]);
    out.resize(HEADER_BYTES, 0);
    for s in [go_version.as_bytes(), modinfo] {
        // Short strings only: one length byte.
        assert!(s.len() < 0x80, "synthetic strings are short");
        out.push(s.len() as u8);
        out.extend_from_slice(s);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Framed as cmd/go frames it, by sentinels that are not UTF-8.
    fn framed(modinfo: &str) -> Vec<u8> {
        let mut out = b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6".to_vec();
        out.extend_from_slice(modinfo.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(b"\xf92C1\x86\x18 r\x00\x82B\x10A\x16\xd8\xf2");
        out
    }

    #[test]
    fn inline_strings_give_the_version_and_module() {
        let modinfo = framed("path\texample\nmod\texample\t(devel)\t");
        let mut data = vec![0u8; 48];
        data.extend(synthetic_buildinfo("go1.26.8", &modinfo));
        let info = parse(&data, |_, _| None).unwrap();
        assert_eq!(info.go_version, "go1.26.8");
        assert_eq!(modinfo_field(&info.modinfo, "mod"), Some("example"));
        assert_eq!(modinfo_field(&info.modinfo, "path"), Some("example"));
    }

    #[test]
    fn a_misaligned_magic_is_not_build_info() {
        let mut data = vec![0u8; 3];
        data.extend(synthetic_buildinfo("go1.26.8", b""));
        assert_eq!(parse(&data, |_, _| None), None);
    }

    #[test]
    fn pointers_to_string_headers_are_followed() {
        let mut data = MAGIC.to_vec();
        data.extend_from_slice(&[8, 0]);
        data.extend_from_slice(&0x1000u64.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        let memory = |address: u64, len: u64| -> Option<Vec<u8>> {
            let mut m = vec![0u8; 0x2000];
            m[0x1000..0x1008].copy_from_slice(&0x1800u64.to_le_bytes());
            m[0x1008..0x1010].copy_from_slice(&8u64.to_le_bytes());
            m[0x1800..0x1808].copy_from_slice(b"go1.16.3");
            let start = usize::try_from(address).ok()?;
            m.get(start..start.checked_add(usize::try_from(len).ok()?)?)
                .map(<[u8]>::to_vec)
        };
        let info = parse(&data, memory).unwrap();
        assert_eq!(info.go_version, "go1.16.3");
        assert_eq!(info.modinfo, "");
    }

    #[test]
    fn every_truncation_is_none_or_the_whole_version() {
        let data = synthetic_buildinfo("go1.26.8", b"");
        for len in 0..data.len() {
            if let Some(info) = parse(&data[..len], |_, _| None) {
                assert_eq!(info.go_version, "go1.26.8", "cut at {len}");
            }
        }
    }
}
