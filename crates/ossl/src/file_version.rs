//! The version of a TLS library file that tlsscope observes but does not use: the traced
//! program's libssl (OpenSSL), libgnutls or NSS's libssl3, read from the file's bytes. Nothing
//! of it is loaded or run in tlsscope: the file may be any process's, and its initialisers are
//! its own business.

use std::path::{Path, PathBuf};

/// What a library file says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileVersion {
    /// "OpenSSL 3.0.19 27 Jan 2026", "AWS-LC 5.12.0", "BoringSSL", "GnuTLS 3.7.9", "NSS 3.87.1".
    pub text: String,
    /// OpenSSL's `OPENSSL_VERSION_NUMBER`, as its version text gives it; 0 for the others
    /// (AWS-LC and BoringSSL included: they all claim 1.1.1's).
    pub number: u64,
}

/// The version `path` carries, or that of the library it links to for it (OpenSSL's libssl
/// answers through the libcrypto beside it, or the system's). `None` when neither holds a
/// version string tlsscope knows.
pub fn version_of_file(path: &Path) -> Option<FileVersion> {
    let bytes = std::fs::read(path).ok()?;
    if let Some(v) = openssl_family_in(&bytes)
        .or_else(|| nss_in(&bytes))
        .or_else(|| gnutls_in(path, &bytes))
    {
        return Some(v);
    }
    libcrypto_for(path).find_map(|crypto| openssl_family_in(&std::fs::read(crypto).ok()?))
}

/// OpenSSL's version text, or AWS-LC's or BoringSSL's.
fn openssl_family_in(bytes: &[u8]) -> Option<FileVersion> {
    openssl_in(bytes).or_else(|| fork_in(bytes))
}

/// What `OpenSSL_version` answers in AWS-LC ("AWS-LC 5.12.0", "AWS-LC FIPS 3.0.0") and
/// BoringSSL ("BoringSSL"), strings of their own in their libcrypto.
fn fork_in(bytes: &[u8]) -> Option<FileVersion> {
    let aws_lc = strings_after(bytes, b"AWS-LC ").find_map(|rest| {
        let version = rest.strip_prefix("FIPS ").unwrap_or(rest);
        dotted(version).then(|| FileVersion {
            text: format!("AWS-LC {rest}"),
            number: 0,
        })
    });
    aws_lc.or_else(|| {
        strings_after(bytes, b"BoringSSL")
            .any(str::is_empty)
            .then(|| FileVersion {
                text: "BoringSSL".into(),
                number: 0,
            })
    })
}

/// The NUL-terminated strings of `bytes` that start with `prefix`, without it.
fn strings_after<'a>(bytes: &'a [u8], prefix: &'a [u8]) -> impl Iterator<Item = &'a str> + 'a {
    memchr::memmem::find_iter(bytes, prefix).filter_map(move |at| {
        // A string of its own: the prefix follows the NUL that ends the string before it.
        if at > 0 && bytes[at - 1] != 0 {
            return None;
        }
        let start = at + prefix.len();
        let len = memchr::memchr(0, &bytes[start..]).unwrap_or(bytes.len() - start);
        (len < 64)
            .then(|| std::str::from_utf8(&bytes[start..start + len]).ok())
            .flatten()
    })
}

/// OPENSSL_VERSION_TEXT ("OpenSSL 3.0.19 27 Jan 2026", "OpenSSL 1.1.1w  11 Sep 2023"), which
/// libcrypto holds, and the number it stands for.
fn openssl_in(bytes: &[u8]) -> Option<FileVersion> {
    strings_after(bytes, b"OpenSSL ").find_map(|rest| {
        let words: Vec<&str> = rest.split_whitespace().collect();
        let [version, day, month, year] = words[..] else {
            return None;
        };
        let dated = day.parse::<u8>().is_ok() && month.len() == 3 && year.parse::<u16>().is_ok();
        let number = openssl_number(version)?;
        dated.then(|| FileVersion {
            text: format!("OpenSSL {}", rest.trim_end()),
            number,
        })
    })
}

/// OPENSSL_VERSION_NUMBER from "3.0.19" (0x30000130: major, minor, patch) or "1.1.1w"
/// (0x1010117f: major, minor, fix, patch letter, release).
fn openssl_number(version: &str) -> Option<u64> {
    let mut parts = version.splitn(3, '.');
    let major: u64 = parts.next()?.parse().ok()?;
    let minor: u64 = parts.next()?.parse().ok()?;
    let last = parts.next()?;
    let digits = last
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(last.len());
    let patch: u64 = last[..digits].parse().ok()?;
    let letters = &last[digits..];
    if major >= 3 {
        return (letters.is_empty() || letters.starts_with('-'))
            .then_some(major << 28 | minor << 20 | patch << 4);
    }
    let letter = match letters.as_bytes() {
        [] => 0,
        [l @ b'a'..=b'z'] => u64::from(l - b'a' + 1),
        _ => return None,
    };
    Some(major << 28 | minor << 20 | patch << 12 | letter << 4 | 0xf)
}

/// NSS's "Version: NSS 3.87.1" (in libnss3 and NSS's libssl3).
fn nss_in(bytes: &[u8]) -> Option<FileVersion> {
    strings_after(bytes, b"Version: NSS ").find_map(|v| {
        dotted(v).then(|| FileVersion {
            text: format!("NSS {v}"),
            number: 0,
        })
    })
}

/// GnuTLS's version string ("3.7.9", a string of its own in libgnutls), for a libgnutls file.
fn gnutls_in(path: &Path, bytes: &[u8]) -> Option<FileVersion> {
    let name = path.file_name()?.to_str()?;
    if !name.starts_with("libgnutls.so") {
        return None;
    }
    strings_after(bytes, b"3.").find_map(|rest| {
        let v = format!("3.{rest}");
        dotted(&v).then(|| FileVersion {
            text: format!("GnuTLS {v}"),
            number: 0,
        })
    })
}

/// "3.87.1", "3.7.9": three numbers and two dots, nothing else.
fn dotted(v: &str) -> bool {
    let parts: Vec<&str> = v.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Where an OpenSSL libssl's libcrypto may be: beside it (a build's lib directory), then the
/// system's library directories; the same soname version ("libssl.so.3" -> "libcrypto.so.3").
fn libcrypto_for(path: &Path) -> impl Iterator<Item = PathBuf> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let crypto = name
        .strip_prefix("libssl.so")
        .map(|suffix| format!("libcrypto.so{suffix}"));
    let dirs = [
        path.parent().map(Path::to_path_buf),
        Some(PathBuf::from("/usr/lib/x86_64-linux-gnu")),
        Some(PathBuf::from("/lib/x86_64-linux-gnu")),
        Some(PathBuf::from("/usr/lib")),
    ];
    dirs.into_iter()
        .flatten()
        .filter_map(move |dir| Some(dir.join(crypto.as_ref()?)))
        .filter(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_libssl_names_its_openssl() {
        let path = Path::new("/usr/lib/x86_64-linux-gnu/libssl.so.3");
        let v = version_of_file(path).expect("Debian's libssl.so.3 answers");
        assert!(v.text.starts_with("OpenSSL 3."), "{v:?}");
        // What the library itself answers (tlsscope's own OpenSSL is the system's).
        let own = crate::Library::load(&crate::LibrarySource::System)
            .unwrap()
            .version();
        assert_eq!(v.text, own.text, "{v:?}");
        assert_eq!(v.number, own.number, "{v:?}");
    }

    #[test]
    fn gnutls_and_nss_name_themselves() {
        let gnutls = version_of_file(Path::new("/usr/lib/x86_64-linux-gnu/libgnutls.so.30"))
            .expect("libgnutls.so.30 answers");
        assert!(gnutls.text.starts_with("GnuTLS 3."), "{gnutls:?}");
        let nss = version_of_file(Path::new("/usr/lib/x86_64-linux-gnu/libssl3.so"))
            .expect("NSS's libssl3.so answers");
        assert!(nss.text.starts_with("NSS 3."), "{nss:?}");
    }

    #[test]
    fn version_numbers_follow_openssl_s_layout() {
        assert_eq!(openssl_number("3.0.19"), Some(0x3000_0130));
        assert_eq!(openssl_number("3.4.1"), Some(0x3040_0010));
        assert_eq!(openssl_number("1.1.1w"), Some(0x1010_117f));
        assert_eq!(openssl_number("1.1.1"), Some(0x1010_100f));
        assert_eq!(openssl_number("default"), None);
        let text = b"\0OpenSSL 1.1.1w  11 Sep 2023\0OpenSSL default\0";
        let v = openssl_in(text).unwrap();
        assert_eq!(v.text, "OpenSSL 1.1.1w  11 Sep 2023");
        assert_eq!(v.number, 0x1010_117f);
    }

    #[test]
    fn aws_lc_and_boringssl_name_themselves() {
        let v = fork_in(b"\0AWS-LC \0AWS-LC 5.12.0\0x").unwrap();
        assert_eq!((v.text.as_str(), v.number), ("AWS-LC 5.12.0", 0));
        let v = fork_in(b"\0compatible; BoringSSL\0BoringSSL\0").unwrap();
        assert_eq!(v.text, "BoringSSL");
        assert_eq!(fork_in(b"\0BoringSSL is great\0"), None);
    }

    #[test]
    fn a_file_that_is_no_tls_library_has_no_version() {
        assert_eq!(
            version_of_file(Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1")),
            None
        );
        assert_eq!(version_of_file(Path::new("/nonexistent/libssl.so.3")), None);
    }
}
