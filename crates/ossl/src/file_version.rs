//! The version of a TLS library file that tlsscope observes but does not use: the traced
//! program's libssl (OpenSSL), libgnutls or NSS's libssl3, asked through its own version
//! function after loading it privately (`RTLD_LOCAL`: nothing of it joins tlsscope's scope).

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a library file says of itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileVersion {
    /// "OpenSSL 3.0.19 27 Jan 2026", "GnuTLS 3.7.9", "NSS 3.87.1".
    pub text: String,
    /// OpenSSL's `OPENSSL_VERSION_NUMBER`; 0 for the others.
    pub number: u64,
}

/// Loads `path` (or finds it loaded) and asks its version, or that of the library it links to
/// for it (libssl answers through its libcrypto, NSS's libssl3 through libnss3). `None` when
/// the file cannot be loaded or has no version function tlsscope knows.
pub fn version_of_file(path: &Path) -> Option<FileVersion> {
    let name = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: dlopen with a NUL-terminated path; a null handle is handled. The handle is kept
    // (never closed): the object may be one the process uses.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        return None;
    }
    let symbol = |s: &CStr| {
        // SAFETY: dlsym on a live handle with a NUL-terminated name.
        let p = unsafe { libc::dlsym(handle, s.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let text_of = |p: *const libc::c_char| {
        // SAFETY: a non-null version string of the library is NUL-terminated and static.
        (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    if let Some(f) = symbol(c"OpenSSL_version") {
        type Text = unsafe extern "C" fn(libc::c_int) -> *const libc::c_char;
        type Number = unsafe extern "C" fn() -> libc::c_ulong;
        // SAFETY: OpenSSL_version(int) -> const char *; OpenSSL_version_num(void) ->
        // unsigned long, both in every OpenSSL since 1.1.0.
        let text = text_of(unsafe { std::mem::transmute::<*mut libc::c_void, Text>(f)(0) })?;
        let number = symbol(c"OpenSSL_version_num").map_or(0, |n| {
            // SAFETY: as above.
            (unsafe { std::mem::transmute::<*mut libc::c_void, Number>(n)() }) as u64
        });
        return Some(FileVersion { text, number });
    }
    type NoArgs = unsafe extern "C" fn() -> *const libc::c_char;
    if let Some(f) = symbol(c"gnutls_check_version") {
        type Check = unsafe extern "C" fn(*const libc::c_char) -> *const libc::c_char;
        // SAFETY: gnutls_check_version(NULL) returns the library's version string.
        let v = text_of(unsafe {
            std::mem::transmute::<*mut libc::c_void, Check>(f)(std::ptr::null())
        })?;
        return Some(FileVersion {
            text: format!("GnuTLS {v}"),
            number: 0,
        });
    }
    if let Some(f) = symbol(c"NSS_GetVersion") {
        // SAFETY: NSS_GetVersion(void) returns NSS's version string.
        let v = text_of(unsafe { std::mem::transmute::<*mut libc::c_void, NoArgs>(f)() })?;
        return Some(FileVersion {
            text: format!("NSS {v}"),
            number: 0,
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_libssl_names_its_openssl() {
        let path = Path::new("/usr/lib/x86_64-linux-gnu/libssl.so.3");
        let v = version_of_file(path).expect("Debian's libssl.so.3 answers");
        assert!(v.text.starts_with("OpenSSL 3."), "{v:?}");
        assert_eq!(v.number >> 28, 3, "{v:?}");
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
    fn a_file_that_is_no_tls_library_has_no_version() {
        assert_eq!(
            version_of_file(Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1")),
            None
        );
        assert_eq!(version_of_file(Path::new("/nonexistent/libssl.so.3")), None);
    }
}
