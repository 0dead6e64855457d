//! The calls whose function differs by flavour, each in one place: OpenSSL's `*_ctrl` macros
//! against the functions AWS-LC and BoringSSL export instead, and the shared functions those two
//! declare with other integer types (see the `bssl_only` section of [`crate::ffi::Api`]).
//!
//! Every function here takes pointers the caller vouches for, as the `unsafe` on each says.

use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::ptr;

use crate::error::Error;
use crate::ffi;
use crate::library::Library;

impl Library {
    /// The error for a feature this library lacks, naming it ("OpenSSL 4.0.3 has no ENGINE
    /// support (ENGINE_by_id)").
    pub fn not_in_library(&self, feature: &'static str, missing: &'static str) -> Error {
        Error::NotInLibrary {
            library: self.name().to_string(),
            feature,
            missing,
        }
    }

    /// The NIDs of Ed25519 and Ed448 keys, which AWS-LC and BoringSSL number differently.
    pub(crate) fn nid_ed(&self) -> (c_int, c_int) {
        if self.flavour().is_openssl() {
            (ffi::NID_ED25519, ffi::NID_ED448)
        } else {
            (ffi::BSSL_NID_ED25519, ffi::BSSL_NID_ED448)
        }
    }

    /// `ERR_get_error`: the oldest code of this thread's error queue, 0 when empty.
    pub(crate) fn err_get_error(&self) -> u64 {
        let api = self.api();
        // SAFETY: both only touch the calling thread's queue; each is called with the return
        // type its library declares (uint32_t in AWS-LC and BoringSSL).
        unsafe {
            match api.ERR_get_error_bssl {
                Some(get) => u64::from(get()),
                // `unsigned long`: 64 bits here, not everywhere.
                #[allow(clippy::unnecessary_cast)]
                None => (api.ERR_get_error)() as u64,
            }
        }
    }

    /// `ERR_error_string_n` into `buf`, always NUL-terminated.
    pub(crate) fn err_error_string(&self, code: u64, buf: &mut [c_char]) {
        let api = self.api();
        // SAFETY: `buf` is writable for its whole length, which is what is passed. Codes from
        // AWS-LC and BoringSSL came from their 32-bit ERR_get_error.
        unsafe {
            match api.ERR_error_string_n_bssl {
                Some(string) => {
                    string(code as u32, buf.as_mut_ptr(), buf.len());
                }
                None => (api.ERR_error_string_n)(code as _, buf.as_mut_ptr(), buf.len()),
            }
        }
    }

    /// `BIO_new_mem_buf` over `bytes` (read-only, not copied).
    ///
    /// # Safety
    /// `bytes` must outlive the returned BIO.
    pub(crate) unsafe fn bio_new_mem_buf(&self, bytes: &[u8]) -> *mut ffi::BIO {
        let api = self.api();
        // SAFETY: the caller keeps `bytes` alive; the length is passed in the type the library
        // declares (int in OpenSSL, ssize_t in AWS-LC and BoringSSL).
        unsafe {
            match api.BIO_new_mem_buf_bssl {
                Some(new) => new(bytes.as_ptr().cast(), bytes.len() as isize),
                None => {
                    let Ok(len) = c_int::try_from(bytes.len()) else {
                        return ptr::null_mut();
                    };
                    (api.BIO_new_mem_buf)(bytes.as_ptr().cast(), len)
                }
            }
        }
    }

    /// `X509_NAME_add_entry_by_txt(name, field, MBSTRING_ASC, value, -1, -1, 0)`.
    ///
    /// # Safety
    /// `name` must be a live X509_NAME of this library.
    pub(crate) unsafe fn x509_name_add_text(
        &self,
        name: *mut ffi::X509_NAME,
        field: &CStr,
        value: &CStr,
    ) -> bool {
        let api = self.api();
        let value = value.as_ptr().cast();
        // SAFETY: the caller vouches for `name`; both strings are NUL-terminated (length -1)
        // and outlive the call, which copies them; the length has the library's own type.
        unsafe {
            match api.X509_NAME_add_entry_by_txt_bssl {
                Some(add) => add(name, field.as_ptr(), ffi::MBSTRING_ASC, value, -1, -1, 0) == 1,
                None => {
                    (api.X509_NAME_add_entry_by_txt)(
                        name,
                        field.as_ptr(),
                        ffi::MBSTRING_ASC,
                        value,
                        -1,
                        -1,
                        0,
                    ) == 1
                }
            }
        }
    }

    /// `SSL_CTX_set_options`: adds `options` (each fits in 32 bits, the width AWS-LC and
    /// BoringSSL take).
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_options(&self, ctx: *mut ffi::SSL_CTX, options: u64) {
        let api = self.api();
        // SAFETY: the caller vouches for `ctx`; each entry gets its library's own types.
        unsafe {
            match api.SSL_CTX_set_options_bssl {
                Some(set) => {
                    set(ctx, options as u32);
                }
                None => {
                    (api.SSL_CTX_set_options)(ctx, options);
                }
            }
        }
    }

    /// `SSL_CTX_set_session_id_context`.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_session_id_context(&self, ctx: *mut ffi::SSL_CTX, id: &[u8]) {
        let api = self.api();
        // SAFETY: the caller vouches for `ctx`; `id` outlives the call (it is copied); the
        // length has the library's own type (unsigned int, or size_t in AWS-LC/BoringSSL).
        unsafe {
            match api.SSL_CTX_set_session_id_context_bssl {
                Some(set) => set(ctx, id.as_ptr(), id.len()),
                None => (api.SSL_CTX_set_session_id_context)(ctx, id.as_ptr(), id.len() as _),
            };
        }
    }

    /// `SSL_CTX_ctrl` on OpenSSL, with one of OpenSSL's command numbers.
    ///
    /// # Safety
    /// `ctx` must be a live context; `parg` what the command takes (null or a NUL-terminated
    /// string that outlives the call).
    unsafe fn ctx_ctrl(
        &self,
        ctx: *mut ffi::SSL_CTX,
        cmd: c_int,
        larg: c_long,
        parg: *mut c_void,
        missing: &'static str,
    ) -> Result<c_long, Error> {
        let ctrl = self
            .api()
            .SSL_CTX_ctrl
            .ok_or_else(|| self.not_in_library("context setting", missing))?;
        // SAFETY: as the caller guarantees.
        Ok(unsafe { ctrl(ctx, cmd, larg, parg) })
    }

    /// `SSL_CTX_set_mode`: adds the `SSL_MODE_*` bits in `mode`.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_mode(
        &self,
        ctx: *mut ffi::SSL_CTX,
        mode: c_long,
    ) -> Result<(), Error> {
        if let Some(set) = self.api().SSL_CTX_set_mode {
            // SAFETY: the caller vouches for `ctx`; the modes used here fit in 32 bits.
            unsafe { set(ctx, mode as u32) };
            return Ok(());
        }
        // SAFETY: as above; the command takes an integer.
        unsafe {
            self.ctx_ctrl(
                ctx,
                ffi::SSL_CTRL_MODE,
                mode,
                ptr::null_mut(),
                "SSL_CTX_set_mode",
            )
        }
        .map(drop)
    }

    /// `SSL_CTX_set_read_ahead`.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_read_ahead(
        &self,
        ctx: *mut ffi::SSL_CTX,
        on: bool,
    ) -> Result<(), Error> {
        if let Some(set) = self.api().SSL_CTX_set_read_ahead {
            // SAFETY: the caller vouches for `ctx`.
            unsafe { set(ctx, on as c_int) };
            return Ok(());
        }
        // SAFETY: as above; the command takes an integer.
        unsafe {
            self.ctx_ctrl(
                ctx,
                ffi::SSL_CTRL_SET_READ_AHEAD,
                on as c_long,
                ptr::null_mut(),
                "SSL_CTX_set_read_ahead",
            )
        }
        .map(drop)
    }

    /// `SSL_CTX_set_session_cache_mode`.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_session_cache_mode(
        &self,
        ctx: *mut ffi::SSL_CTX,
        mode: c_long,
    ) -> Result<(), Error> {
        if let Some(set) = self.api().SSL_CTX_set_session_cache_mode {
            // SAFETY: the caller vouches for `ctx`; the modes fit in an int.
            unsafe { set(ctx, mode as c_int) };
            return Ok(());
        }
        // SAFETY: as above; the command takes an integer.
        unsafe {
            self.ctx_ctrl(
                ctx,
                ffi::SSL_CTRL_SET_SESS_CACHE_MODE,
                mode,
                ptr::null_mut(),
                "SSL_CTX_set_session_cache_mode",
            )
        }
        .map(drop)
    }

    /// `SSL_CTX_set_min_proto_version` (`max` false) or `..._max_...` (`max` true); true on
    /// success.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_proto_version(
        &self,
        ctx: *mut ffi::SSL_CTX,
        max: bool,
        version: u16,
    ) -> Result<bool, Error> {
        let api = self.api();
        let set = if max {
            api.SSL_CTX_set_max_proto_version
        } else {
            api.SSL_CTX_set_min_proto_version
        };
        if let Some(set) = set {
            // SAFETY: the caller vouches for `ctx`.
            return Ok(unsafe { set(ctx, version) } == 1);
        }
        let (cmd, missing) = if max {
            (
                ffi::SSL_CTRL_SET_MAX_PROTO_VERSION,
                "SSL_CTX_set_max_proto_version",
            )
        } else {
            (
                ffi::SSL_CTRL_SET_MIN_PROTO_VERSION,
                "SSL_CTX_set_min_proto_version",
            )
        };
        // SAFETY: as above; the command takes an integer.
        let r = unsafe { self.ctx_ctrl(ctx, cmd, version.into(), ptr::null_mut(), missing)? };
        Ok(r == 1)
    }

    /// `SSL_CTX_set1_groups_list`; true on success.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_groups(
        &self,
        ctx: *mut ffi::SSL_CTX,
        list: &CStr,
    ) -> Result<bool, Error> {
        if let Some(set) = self.api().SSL_CTX_set1_groups_list {
            // SAFETY: the caller vouches for `ctx`; the list is copied.
            return Ok(unsafe { set(ctx, list.as_ptr()) } == 1);
        }
        // SAFETY: as above; the command takes a NUL-terminated string.
        let r = unsafe {
            self.ctx_ctrl(
                ctx,
                ffi::SSL_CTRL_SET_GROUPS_LIST,
                0,
                list.as_ptr().cast_mut().cast(),
                "SSL_CTX_set1_groups_list",
            )?
        };
        Ok(r == 1)
    }

    /// `SSL_CTX_set1_sigalgs_list`; true on success.
    ///
    /// # Safety
    /// `ctx` must be a live context of this library.
    pub(crate) unsafe fn ctx_set_sigalgs(
        &self,
        ctx: *mut ffi::SSL_CTX,
        list: &CStr,
    ) -> Result<bool, Error> {
        if let Some(set) = self.api().SSL_CTX_set1_sigalgs_list {
            // SAFETY: the caller vouches for `ctx`; the list is copied.
            return Ok(unsafe { set(ctx, list.as_ptr()) } == 1);
        }
        // SAFETY: as above; the command takes a NUL-terminated string.
        let r = unsafe {
            self.ctx_ctrl(
                ctx,
                ffi::SSL_CTRL_SET_SIGALGS_LIST,
                0,
                list.as_ptr().cast_mut().cast(),
                "SSL_CTX_set1_sigalgs_list",
            )?
        };
        Ok(r == 1)
    }

    /// `SSL_set_tlsext_host_name`; true on success.
    ///
    /// # Safety
    /// `ssl` must be a live connection of this library.
    pub(crate) unsafe fn ssl_set_host_name(
        &self,
        ssl: *mut ffi::SSL,
        name: &CStr,
    ) -> Result<bool, Error> {
        let api = self.api();
        if let Some(set) = api.SSL_set_tlsext_host_name {
            // SAFETY: the caller vouches for `ssl`; the name is copied.
            return Ok(unsafe { set(ssl, name.as_ptr()) } == 1);
        }
        let ctrl = api
            .SSL_ctrl
            .ok_or_else(|| self.not_in_library("SNI setting", "SSL_set_tlsext_host_name"))?;
        // SAFETY: as above; this is the macro's ctrl, taking the name type and the string.
        let r = unsafe {
            ctrl(
                ssl,
                ffi::SSL_CTRL_SET_TLSEXT_HOSTNAME,
                ffi::TLSEXT_NAMETYPE_HOST_NAME,
                name.as_ptr().cast_mut().cast(),
            )
        };
        Ok(r == 1)
    }
}
