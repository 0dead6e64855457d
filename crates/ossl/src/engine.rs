//! Crypto engines, through OpenSSL's ENGINE API (1.1.1 and 3.x). An async engine, such as the
//! `dasync` test engine of OpenSSL's source tree or Intel's QAT engine, pauses its operations as
//! async jobs; with `SSL_MODE_ASYNC` on, a TLS call then returns `SSL_ERROR_WANT_ASYNC` while
//! the job waits, and the job's wait fds say when to call again.

use std::ffi::CString;
use std::path::Path;
use std::ptr;

use crate::error::{Error, ErrorQueue};
use crate::ffi;
use crate::library::Library;

/// An engine, loaded, initialised and made the default for every method it implements; it
/// stays the default for the life of the process.
pub struct Engine {
    lib: &'static Library,
    ptr: *mut ffi::ENGINE,
    id: String,
}

impl Engine {
    /// Loads `name`: an engine id (looked for as `<id>.so` in `$OPENSSL_ENGINES` or the
    /// library's own engines directory) or a path to an engine's shared object. It then
    /// handles every algorithm it implements.
    pub fn load_default(lib: &'static Library, name: &str) -> Result<Engine, Error> {
        let api = lib.api();
        let (Some(by_id), Some(ctrl), Some(init), Some(set_default), Some(free), Some(get_id)) = (
            api.ENGINE_by_id,
            api.ENGINE_ctrl_cmd_string,
            api.ENGINE_init,
            api.ENGINE_set_default,
            api.ENGINE_free,
            api.ENGINE_get_id,
        ) else {
            // OpenSSL 4.0 removed ENGINE; AWS-LC and BoringSSL never had it.
            return Err(lib.not_in_library("ENGINE support", "ENGINE_by_id"));
        };
        let failed = |what: String| Error::OpenSsl {
            what,
            queue: ErrorQueue::take(lib),
        };
        if let Some(init_crypto) = api.OPENSSL_init_crypto {
            // SAFETY: a flag word and a null settings pointer.
            unsafe { init_crypto(ffi::OPENSSL_INIT_ENGINE_DYNAMIC, ptr::null()) };
        }
        let is_path = name.contains('/');
        let c = |s: &str| CString::new(s).map_err(|_| failed(format!("engine name {name:?}")));
        // SAFETY: the strings are NUL-terminated and outlive the calls; a null engine is
        // checked before use; every reference taken is released on the error paths.
        unsafe {
            let e = if is_path {
                let e = by_id(c("dynamic")?.as_ptr());
                if e.is_null() {
                    return Err(failed("the dynamic engine".into()));
                }
                let loaded = ctrl(e, c("SO_PATH")?.as_ptr(), c(name)?.as_ptr(), 0) == 1
                    && ctrl(e, c("LOAD")?.as_ptr(), ptr::null(), 0) == 1;
                if !loaded {
                    free(e);
                    return Err(failed(format!("loading engine {name}")));
                }
                e
            } else {
                let e = by_id(c(name)?.as_ptr());
                if e.is_null() {
                    return Err(not_found(lib, name));
                }
                e
            };
            if init(e) != 1 {
                free(e);
                return Err(failed(format!("initialising engine {name}")));
            }
            let engine = Engine {
                lib,
                ptr: e,
                id: ffi::string(get_id(e)).unwrap_or_else(|| name.to_string()),
            };
            if set_default(e, default_methods(lib)) != 1 {
                return Err(failed(format!("making engine {name} the default")));
            }
            Ok(engine)
        }
    }

    /// The engine's id ("dasync").
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let api = self.lib.api();
        // SAFETY: `ptr` holds one structural and one functional reference, taken in
        // `load_default`; the default tables keep their own.
        unsafe {
            if let Some(finish) = api.ENGINE_finish {
                finish(self.ptr);
            }
            if let Some(free) = api.ENGINE_free {
                free(self.ptr);
            }
        }
    }
}

/// What an engine is made the default for. Everything on 1.1.1. On 3.x, not its EVP_PKEY
/// methods: libssl's keys there are provider keys, which a legacy EVP_PKEY method cannot use
/// (signing fails with "operation not supported for this keytype"), so an engine's RSA, digests
/// and ciphers are used, and 3.x key offload is a provider's job.
fn default_methods(lib: &'static Library) -> std::ffi::c_uint {
    if lib.version().number >= 0x3000_0000 {
        ffi::ENGINE_METHOD_ALL
            & !(ffi::ENGINE_METHOD_PKEY_METHS | ffi::ENGINE_METHOD_PKEY_ASN1_METHS)
    } else {
        ffi::ENGINE_METHOD_ALL
    }
}

/// The async test engine OpenSSL's source tree builds, which `tlsscope openssl build` keeps.
pub const TEST_ENGINE: &str = "dasync";

/// Where `lib` would load the dasync engine from, when it is there.
pub fn test_engine_path(lib: &'static Library) -> Option<std::path::PathBuf> {
    let path = Path::new(&engines_dir(lib)).join(format!("{TEST_ENGINE}.so"));
    path.exists().then_some(path)
}

/// The directory a library looks for engines in (`$OPENSSL_ENGINES`, or the one it was built
/// with).
pub fn engines_dir(lib: &'static Library) -> String {
    if let Some(dir) = std::env::var_os("OPENSSL_ENGINES") {
        return Path::new(&dir).display().to_string();
    }
    // SAFETY: OpenSSL_version returns a static string for any type.
    let text = unsafe { ffi::string((lib.api().OpenSSL_version)(ffi::OPENSSL_ENGINES_DIR)) };
    let text = text.unwrap_or_default();
    // "ENGINESDIR: \"/usr/lib/x86_64-linux-gnu/engines-3\""
    text.split_once(": ")
        .map(|(_, v)| v.trim_matches('"').to_string())
        .unwrap_or(text)
}

fn not_found(lib: &'static Library, name: &str) -> Error {
    // The queue says only that the dynamic load failed; the directory says where it looked.
    let _ = ErrorQueue::take(lib);
    Error::Engine(format!(
        "engine {name} is not in {} (give the path to its .so, or use a library built by \
         `tlsscope openssl build` from 1.1.1 to 3.4, which keeps the dasync test engine; \
         3.5 and later are built without modules)",
        engines_dir(lib)
    ))
}
