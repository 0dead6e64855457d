//! Running under tlsscope's in-process probe library (`crates/inproc`): `tlsscope trace --
//! tlsscope serve`, and the lab's in-process rows.
//!
//! This OpenSSL is opened with `RTLD_LOCAL`, so the library cannot find its functions with
//! `dlsym(RTLD_NEXT)`, and tlsscope's own calls, made through the table [`crate::ffi::Api`]
//! resolved from the handles, would never pass its wrappers. When the library is in the
//! process, every function it wraps or asks (`inproc_abi::FUNCTIONS` and `HELPERS`) that this
//! OpenSSL has is written into its table of real functions, and tlsscope's table entries of the
//! wrapped functions are pointed at the wrappers: the same redirection the library gets from
//! the GOT in a program that links OpenSSL.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use inproc_abi::{FUNCTIONS, HELPERS, MAX_FUNCTIONS, REAL_SLOTS, REAL_TABLE};

use crate::ffi::Api;

/// Points `api` at the in-process library's wrappers when the library is loaded in this
/// process; returns whether it was.
///
/// # Safety
/// `crypto` and `ssl` must be live `dlopen` handles of the OpenSSL `api` was resolved from,
/// never closed.
pub(crate) unsafe fn route(api: &mut Api, crypto: *mut c_void, ssl: *mut c_void) -> bool {
    let Some((table, library)) = probe_library() else {
        return false;
    };
    let names = FUNCTIONS.iter().map(|f| f.name).enumerate().chain(
        HELPERS
            .iter()
            .enumerate()
            .map(|(i, &n)| (MAX_FUNCTIONS + i, n)),
    );
    for (slot, name) in names {
        // SAFETY: the caller guarantees both handles are live.
        let real = unsafe { symbol(ssl, name) }.or_else(|| unsafe { symbol(crypto, name) });
        if let Some(real) = real {
            table[slot].store(real as usize, Ordering::Release);
        }
    }
    let wrapper = |name: &str, _| {
        let index = inproc_abi::index_of(name)?;
        if table[index].load(Ordering::Acquire) == 0 {
            return None;
        }
        // SAFETY: the handle came from dlopen and is never closed.
        unsafe { symbol(library, name) }
    };
    // SAFETY: each address returned is the library's wrapper of the function of the same name,
    // which has that function's signature and calls the real one written above.
    unsafe { api.swap_entries(wrapper) };
    true
}

/// The library's table of real functions and a handle of the library, when it is loaded (it
/// is then first in the global scope, as `LD_PRELOAD` puts it).
fn probe_library() -> Option<(&'static [AtomicUsize; REAL_SLOTS], *mut c_void)> {
    // SAFETY: RTLD_DEFAULT searches the global scope; the name is a valid symbol name.
    let table = unsafe { symbol(libc::RTLD_DEFAULT, REAL_TABLE)? };
    // SAFETY: Dl_info is plain data (pointers), for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr fills `info` for an address inside a loaded object; `table` is one.
    if unsafe { libc::dladdr(table, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is the NUL-terminated path of the object already loaded; RTLD_NOLOAD
    // only returns a handle of it (raising its reference count, never dropped: it stays).
    let library = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if library.is_null() {
        return None;
    }
    // SAFETY: the library exports the table as `[AtomicUsize; REAL_SLOTS]` (crates/inproc,
    // wrap.rs) and is never unloaded while a handle is held.
    Some((
        unsafe { &*(table as *const [AtomicUsize; REAL_SLOTS]) },
        library,
    ))
}

/// `dlsym(handle, name)`, None when absent.
///
/// # Safety
/// `handle` must be a live `dlopen` handle or a pseudo-handle such as `RTLD_DEFAULT`.
unsafe fn symbol(handle: *mut c_void, name: &str) -> Option<*mut c_void> {
    let name = CString::new(name).ok()?;
    // SAFETY: the caller guarantees the handle; `name` is NUL-terminated and outlives the call.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_library_nothing_is_routed() {
        assert!(probe_library().is_none());
    }
}
