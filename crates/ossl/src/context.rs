//! TLS contexts (`SSL_CTX`): the settings shared by every connection of one client or server.

use std::ffi::{c_char, c_int, c_long, c_uchar, c_void, CStr, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::str::FromStr;
use std::sync::Arc;

use crate::error::{Error, ErrorQueue};
use crate::ffi;
use crate::group::GroupList;
use crate::library::Library;
use crate::pki::Credentials;

/// Which end of the connection a context is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// A TLS protocol version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsVersion {
    Tls1_0,
    Tls1_1,
    Tls1_2,
    Tls1_3,
}

impl TlsVersion {
    /// The wire value (`TLS1_2_VERSION` is 0x0303).
    pub fn raw(self) -> c_long {
        match self {
            TlsVersion::Tls1_0 => 0x0301,
            TlsVersion::Tls1_1 => 0x0302,
            TlsVersion::Tls1_2 => 0x0303,
            TlsVersion::Tls1_3 => 0x0304,
        }
    }

    /// OpenSSL's name, as `SSL_get_version` prints it ("TLSv1.3").
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls1_0 => "TLSv1",
            TlsVersion::Tls1_1 => "TLSv1.1",
            TlsVersion::Tls1_2 => "TLSv1.2",
            TlsVersion::Tls1_3 => "TLSv1.3",
        }
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A TLS version name that is not one of 1.0, 1.1, 1.2, 1.3.
#[derive(Debug, thiserror::Error)]
#[error("unknown TLS version {0:?}: use 1.2 or 1.3 (or 1.0, 1.1)")]
pub struct UnknownTlsVersion(pub String);

impl FromStr for TlsVersion {
    type Err = UnknownTlsVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        let bare = lower
            .trim_start_matches("tlsv")
            .trim_start_matches("tls")
            .trim_start_matches('v');
        match bare {
            "1" | "1.0" => Ok(TlsVersion::Tls1_0),
            "1.1" => Ok(TlsVersion::Tls1_1),
            "1.2" => Ok(TlsVersion::Tls1_2),
            "1.3" => Ok(TlsVersion::Tls1_3),
            _ => Err(UnknownTlsVersion(s.to_string())),
        }
    }
}

/// The handshake settings a client or server can choose, applied in one call by
/// [`ContextBuilder::apply`]. `None` keeps OpenSSL's default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    pub min_version: Option<TlsVersion>,
    pub max_version: Option<TlsVersion>,
    /// TLS 1.2-and-below cipher list.
    pub cipher_list: Option<String>,
    /// TLS 1.3 ciphersuites.
    pub ciphersuites: Option<String>,
    pub groups: Option<GroupList>,
    pub sigalgs: Option<String>,
    /// Server session cache (resumption by session ID; TLS 1.3 stateful tickets).
    pub session_cache: bool,
    /// Session tickets (TLS 1.2 tickets, TLS 1.3 stateless tickets).
    pub tickets: bool,
}

impl Settings {
    /// OpenSSL's defaults: any version, default ciphers and groups, cache and tickets on.
    pub fn new() -> Settings {
        Settings {
            session_cache: true,
            tickets: true,
            ..Settings::default()
        }
    }
}

/// Receives each NSS key log line ("CLIENT_RANDOM ...", "SERVER_HANDSHAKE_TRAFFIC_SECRET ...").
pub type KeylogSink = dyn Fn(&str) + Send + Sync;

/// Builds a [`Context`].
pub struct ContextBuilder {
    inner: Inner,
}

/// A configured `SSL_CTX`, shared by the connections made from it. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    lib: &'static Library,
    ptr: *mut ffi::SSL_CTX,
    role: Role,
    /// Owned here, pointed to by the SSL_CTX's app data while the key log callback is set.
    keylog: Option<Box<Box<KeylogSink>>>,
}

// SAFETY: after building, the SSL_CTX is only read (SSL_new takes its own reference under
// OpenSSL's internal locking), which OpenSSL supports from many threads.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

impl Drop for Inner {
    fn drop(&mut self) {
        // SAFETY: we own one reference to the context. Connections hold a `Context` clone, so
        // none outlives this; the key log sink is dropped only after the context is freed.
        unsafe { (self.lib.api().SSL_CTX_free)(self.ptr) };
    }
}

impl ContextBuilder {
    /// A new context for `role` with OpenSSL's defaults, plus partial writes, moving write
    /// buffers (what a non-blocking event loop needs) and read-ahead (see
    /// [`ContextBuilder::read_ahead`]).
    pub fn new(lib: &'static Library, role: Role) -> Result<ContextBuilder, Error> {
        let api = lib.api();
        // SAFETY: the method functions return static tables; SSL_CTX_new returns a new context
        // or null.
        let ptr = unsafe {
            let method = match role {
                Role::Client => (api.TLS_client_method)(),
                Role::Server => (api.TLS_server_method)(),
            };
            (api.SSL_CTX_new)(method)
        };
        if ptr.is_null() {
            return Err(Error::OpenSsl {
                what: "SSL_CTX_new".into(),
                queue: ErrorQueue::take(lib),
            });
        }
        let builder = ContextBuilder {
            inner: Inner {
                lib,
                ptr,
                role,
                keylog: None,
            },
        };
        // SAFETY: the context is live (and freed by `builder` on the error paths).
        unsafe {
            lib.ctx_set_mode(
                ptr,
                ffi::SSL_MODE_ENABLE_PARTIAL_WRITE | ffi::SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER,
            )?;
            lib.ctx_set_read_ahead(ptr, true)?;
        }
        if let (Role::Client, Some(set_new_cb), Some(_)) =
            (role, api.SSL_CTX_sess_set_new_cb, lib.session_index())
        {
            // SAFETY: live context; the callback only touches the connection it is given.
            unsafe {
                set_new_cb(ptr, Some(new_session));
                lib.ctx_set_session_cache_mode(
                    ptr,
                    ffi::SSL_SESS_CACHE_CLIENT | ffi::SSL_SESS_CACHE_NO_INTERNAL_STORE,
                )?;
            }
        }
        if role == Role::Server {
            // SAFETY: the context is live and the id outlives the call (it is copied).
            unsafe { lib.ctx_set_session_id_context(ptr, b"tlsscope") };
            if let Some(set_ticket_cb) = api.SSL_CTX_set_session_ticket_cb {
                // SAFETY: live context; the hook is a plain function that only touches the
                // connection it is given.
                unsafe { set_ticket_cb(ptr, None, Some(ticket_decrypted), ptr::null_mut()) };
            } else if let Some(set_hello_cb) = api.SSL_CTX_set_select_certificate_cb {
                // AWS-LC and BoringSSL have no ticket-decryption hook. With tickets on, a
                // TLS 1.2 ClientHello that offers a ticket is resumed by that ticket or not at
                // all (their ssl_get_prev_session looks a session ID up only when no ticket is
                // offered), so the ClientHello says how a resumption was made. Tickets off
                // (`tickets` below sets SSL_OP_NO_TICKET) uninstalls it.
                // SAFETY: live context; the hook only touches the connection it is given.
                unsafe { set_hello_cb(ptr, Some(ticket_offered)) };
            }
        }
        Ok(builder)
    }

    fn api(&self) -> &ffi::Api {
        self.inner.lib.api()
    }

    fn lib(&self) -> &'static Library {
        self.inner.lib
    }

    fn setting_error(&self, setting: &'static str, value: &str) -> Error {
        Error::Setting {
            setting,
            value: value.to_string(),
            queue: ErrorQueue::take(self.inner.lib),
        }
    }

    /// Applies every setting in `settings`.
    pub fn apply(&mut self, settings: &Settings) -> Result<&mut Self, Error> {
        if let Some(v) = settings.min_version {
            self.min_version(v)?;
        }
        if let Some(v) = settings.max_version {
            self.max_version(v)?;
        }
        if let Some(list) = &settings.cipher_list {
            self.cipher_list(list)?;
        }
        if let Some(list) = &settings.ciphersuites {
            self.ciphersuites(list)?;
        }
        if let Some(list) = &settings.groups {
            self.groups(list)?;
        }
        if let Some(list) = &settings.sigalgs {
            self.sigalgs(list)?;
        }
        self.session_cache(settings.session_cache)?;
        self.tickets(settings.tickets);
        if self.inner.role == Role::Server && !settings.session_cache && !settings.tickets {
            // Nothing could resume: do not send TLS 1.3 tickets nobody can use.
            self.tls13_tickets_sent(0);
        }
        Ok(self)
    }

    /// Read-ahead (on by default here): OpenSSL reads whatever the socket has in one `read`
    /// instead of each record's 5-byte header and then its body, halving the reads per
    /// handshake. nginx turns it on too. Callers must keep reading until OpenSSL asks for the
    /// socket (WantRead), since data can wait inside OpenSSL.
    pub fn read_ahead(&mut self, on: bool) -> Result<&mut Self, Error> {
        // SAFETY: live context.
        unsafe { self.lib().ctx_set_read_ahead(self.inner.ptr, on)? };
        Ok(self)
    }

    /// The lowest protocol version to negotiate.
    pub fn min_version(&mut self, v: TlsVersion) -> Result<&mut Self, Error> {
        // SAFETY: live context.
        if !unsafe {
            self.lib()
                .ctx_set_proto_version(self.inner.ptr, false, v.raw() as u16)?
        } {
            return Err(self.setting_error("minimum TLS version", v.name()));
        }
        Ok(self)
    }

    /// The highest protocol version to negotiate.
    pub fn max_version(&mut self, v: TlsVersion) -> Result<&mut Self, Error> {
        // SAFETY: live context.
        if !unsafe {
            self.lib()
                .ctx_set_proto_version(self.inner.ptr, true, v.raw() as u16)?
        } {
            return Err(self.setting_error("maximum TLS version", v.name()));
        }
        Ok(self)
    }

    /// The TLS 1.2-and-below cipher list, in OpenSSL's syntax ("ECDHE-RSA-AES128-GCM-SHA256").
    pub fn cipher_list(&mut self, list: &str) -> Result<&mut Self, Error> {
        let c = self.cstring("TLS 1.2 cipher list", list)?;
        // SAFETY: live context, NUL-terminated string.
        if unsafe { (self.api().SSL_CTX_set_cipher_list)(self.inner.ptr, c.as_ptr()) } != 1 {
            return Err(self.setting_error("TLS 1.2 cipher list", list));
        }
        Ok(self)
    }

    /// The TLS 1.3 ciphersuites ("TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256").
    pub fn ciphersuites(&mut self, list: &str) -> Result<&mut Self, Error> {
        let c = self.cstring("TLS 1.3 ciphersuites", list)?;
        // BoringSSL fixes its TLS 1.3 ciphersuites.
        let set = self.api().SSL_CTX_set_ciphersuites.ok_or_else(|| {
            self.lib()
                .not_in_library("TLS 1.3 ciphersuite setting", "SSL_CTX_set_ciphersuites")
        })?;
        // SAFETY: live context, NUL-terminated string.
        if unsafe { set(self.inner.ptr, c.as_ptr()) } != 1 {
            return Err(self.setting_error("TLS 1.3 ciphersuites", list));
        }
        Ok(self)
    }

    /// The key exchange groups, in preference order. A group the library does not have is
    /// refused by name (OpenSSL's own list error names none of them).
    pub fn groups(&mut self, list: &GroupList) -> Result<&mut Self, Error> {
        for group in list.groups() {
            if !self.set_groups(group.openssl_name()) {
                // Drain the queue this failure left: the refusal says all there is to say.
                let _ = ErrorQueue::take(self.inner.lib);
                let lib = self.inner.lib;
                return Err(Error::NotInLibrary {
                    what: format!("key exchange group {}", group.name()),
                    library: lib.name().to_string(),
                    hint: if group.is_post_quantum() && lib.is_openssl_before(0x3050_0000) {
                        " (OpenSSL has ML-KEM groups from 3.5)".to_owned()
                    } else {
                        String::new()
                    },
                });
            }
        }
        let all = list.openssl_list();
        if !self.set_groups(&all) {
            return Err(self.setting_error("groups", &all));
        }
        Ok(self)
    }

    /// Sets an OpenSSL group list; false when the library refuses it.
    fn set_groups(&self, list: &str) -> bool {
        // Names come from the group table: no NUL in them.
        let Ok(c) = CString::new(list) else {
            return false;
        };
        // SAFETY: live context.
        unsafe { self.lib().ctx_set_groups(self.inner.ptr, &c) }.unwrap_or(false)
    }

    /// The signature algorithms ("rsa_pss_rsae_sha256:ecdsa_secp256r1_sha256").
    pub fn sigalgs(&mut self, list: &str) -> Result<&mut Self, Error> {
        let c = self.cstring("signature algorithms", list)?;
        // SAFETY: live context.
        if !unsafe { self.lib().ctx_set_sigalgs(self.inner.ptr, &c)? } {
            return Err(self.setting_error("signature algorithms", list));
        }
        Ok(self)
    }

    /// Uses this key and certificate (the server's, or the client's for client auth).
    pub fn credentials(&mut self, creds: &Credentials) -> Result<&mut Self, Error> {
        let api = self.api();
        // SAFETY: live context and objects; OpenSSL takes its own references.
        let ok = unsafe {
            (api.SSL_CTX_use_certificate)(self.inner.ptr, creds.cert.as_ptr()) == 1
                && (api.SSL_CTX_use_PrivateKey)(self.inner.ptr, creds.key.as_ptr()) == 1
                && (api.SSL_CTX_check_private_key)(self.inner.ptr) == 1
        };
        if !ok {
            return Err(Error::OpenSsl {
                what: "using the certificate and key (do they belong together?)".into(),
                queue: ErrorQueue::take(self.inner.lib),
            });
        }
        Ok(self)
    }

    /// Server-side session cache (session ID resumption) on or off. Clients manage their
    /// sessions explicitly with [`crate::Ssl::session`] and [`crate::Ssl::set_session`], and
    /// keep none in the context: freeing a context marks the sessions in its store
    /// unresumable, which would stop a session outliving the context that made it (as with a
    /// context per connection, curl's way; curl sets the same mode).
    pub fn session_cache(&mut self, on: bool) -> Result<&mut Self, Error> {
        // An AWS-LC or BoringSSL client gets its sessions through the new-session callback
        // (see `new_session`), which only a client cache mode calls; it stores none itself.
        let keeps_via_callback = self.lib().session_index().is_some();
        let mode = match (self.inner.role, on) {
            (Role::Client, false) if keeps_via_callback => {
                ffi::SSL_SESS_CACHE_CLIENT | ffi::SSL_SESS_CACHE_NO_INTERNAL_STORE
            }
            (_, false) => ffi::SSL_SESS_CACHE_OFF,
            (Role::Server, true) => ffi::SSL_SESS_CACHE_SERVER,
            (Role::Client, true) => {
                ffi::SSL_SESS_CACHE_CLIENT | ffi::SSL_SESS_CACHE_NO_INTERNAL_STORE
            }
        };
        // SAFETY: live context.
        unsafe {
            self.lib()
                .ctx_set_session_cache_mode(self.inner.ptr, mode)?
        };
        Ok(self)
    }

    /// Session tickets (RFC 5077 in TLS 1.2, stateless PSK tickets in TLS 1.3) on or off. With
    /// tickets off and the cache on, a TLS 1.3 server still resumes, through stateful tickets
    /// that name a cache entry.
    pub fn tickets(&mut self, on: bool) -> &mut Self {
        if !on && self.inner.role == Role::Server {
            // A ticket offered to a server with tickets off is ignored: not a ticket resumption.
            if let Some(set_hello_cb) = self.api().SSL_CTX_set_select_certificate_cb {
                // SAFETY: live context; removing the hook.
                unsafe { set_hello_cb(self.inner.ptr, None) };
            }
        }
        if !on {
            // SAFETY: live context.
            unsafe {
                self.lib()
                    .ctx_set_options(self.inner.ptr, ffi::SSL_OP_NO_TICKET)
            };
        }
        self
    }

    /// Refuses renegotiation (`SSL_OP_NO_RENEGOTIATION`): a TLS 1.2 peer that asks for a new
    /// handshake on an established connection gets a no_renegotiation warning alert, not a
    /// handshake, so it cannot make this side redo the costly part of a handshake at will.
    /// TLS 1.3 has no renegotiation. Each refusal is counted on the connection; see
    /// [`crate::Ssl::take_renegotiations_refused`].
    pub fn refuse_renegotiation(&mut self) -> &mut Self {
        // SAFETY: live context; the callback is a plain function that only touches the
        // connection it is given.
        unsafe {
            // AWS-LC and BoringSSL never renegotiate unless asked to: no option to set (that
            // bit means something else there).
            if self.lib().flavour().is_openssl() {
                self.lib()
                    .ctx_set_options(self.inner.ptr, ffi::SSL_OP_NO_RENEGOTIATION);
            }
            (self.api().SSL_CTX_set_info_callback)(self.inner.ptr, Some(alert_sent));
        }
        self
    }

    /// How many TLS 1.3 tickets a server sends after a handshake (OpenSSL's default is 2).
    pub fn tls13_tickets_sent(&mut self, count: usize) -> &mut Self {
        // SAFETY: live context.
        unsafe { (self.api().SSL_CTX_set_num_tickets)(self.inner.ptr, count) };
        self
    }

    /// Lets TLS calls return `SSL_ERROR_WANT_ASYNC` while an async engine's job is paused
    /// (`SSL_MODE_ASYNC`), instead of waiting for it. Without an async engine nothing pauses.
    pub fn async_mode(&mut self) -> Result<&mut Self, Error> {
        // AWS-LC and BoringSSL have no async jobs (their bit 0x100 means another mode).
        if !self.lib().flavour().is_openssl() {
            return Err(self
                .lib()
                .not_in_library("async job support", "SSL_MODE_ASYNC"));
        }
        // SAFETY: live context.
        unsafe {
            self.lib()
                .ctx_set_mode(self.inner.ptr, ffi::SSL_MODE_ASYNC)?
        };
        Ok(self)
    }

    /// Sends every key log line to `sink` (the NSS key log format Wireshark reads).
    pub fn keylog(&mut self, sink: Box<KeylogSink>) -> &mut Self {
        let boxed: Box<Box<KeylogSink>> = Box::new(sink);
        let raw = &*boxed as *const Box<KeylogSink> as *mut c_void;
        // SAFETY: live context. The app data points into `boxed`, which `Inner` keeps (and so
        // keeps at a stable address) for as long as the context exists.
        unsafe {
            (self.api().SSL_CTX_set_ex_data)(self.inner.ptr, 0, raw);
            (self.api().SSL_CTX_set_keylog_callback)(self.inner.ptr, Some(keylog_line));
        }
        self.inner.keylog = Some(boxed);
        self
    }

    /// Verifies the peer's certificate: against `cafile` when given, else the system's trust
    /// store. Without this call, clients accept any certificate (measurement, not security).
    pub fn verify_peer(&mut self, cafile: Option<&Path>) -> Result<&mut Self, Error> {
        let api = self.api();
        let cafile_c = match cafile {
            Some(p) => {
                std::fs::metadata(p).map_err(|source| Error::File {
                    what: "CA file",
                    path: p.to_path_buf(),
                    source,
                })?;
                Some(self.cstring("CA file", &p.display().to_string())?)
            }
            None => None,
        };
        // SAFETY: live context; the path string outlives the call; a null directory is allowed.
        let ok = unsafe {
            (api.SSL_CTX_set_verify)(self.inner.ptr, ffi::SSL_VERIFY_PEER, None);
            match &cafile_c {
                Some(c) => {
                    (api.SSL_CTX_load_verify_locations)(self.inner.ptr, c.as_ptr(), ptr::null())
                        == 1
                }
                None => true,
            }
        };
        if !ok {
            return Err(Error::Pem {
                what: "CA file",
                path: cafile.map(Path::to_path_buf).unwrap_or_default(),
                queue: ErrorQueue::take(self.inner.lib),
            });
        }
        Ok(self)
    }

    fn cstring(&self, setting: &'static str, value: &str) -> Result<CString, Error> {
        CString::new(value).map_err(|_| Error::Setting {
            setting,
            value: value.to_string(),
            queue: ErrorQueue(vec!["contains a NUL byte".into()]),
        })
    }

    /// Finishes the context.
    pub fn build(self) -> Context {
        Context {
            inner: Arc::new(self.inner),
        }
    }
}

impl Context {
    /// The library this context belongs to.
    pub fn library(&self) -> &'static Library {
        self.inner.lib
    }

    /// Client or server.
    pub fn role(&self) -> Role {
        self.inner.role
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::SSL_CTX {
        self.inner.ptr
    }
}

/// A connection's app data (ex data index 0) is a word of flags and counts written by the
/// callbacks below. This bit: a server connection accepted a session ticket.
pub(crate) const TICKET_ACCEPTED: usize = 1;
/// The bits above [`TICKET_ACCEPTED`] count the renegotiations the connection refused.
pub(crate) const RENEGOTIATION_REFUSED_SHIFT: u32 = 1;

/// Reads a connection's app-data word.
///
/// # Safety
/// `ssl` must be a live connection of `lib`.
pub(crate) unsafe fn app_word(lib: &Library, ssl: *const ffi::SSL) -> usize {
    // SAFETY: the caller guarantees the connection is live; index 0 always exists.
    unsafe { (lib.api().SSL_get_ex_data)(ssl, 0) as usize }
}

/// Writes a connection's app-data word.
///
/// # Safety
/// `ssl` must be a live connection of `lib`, used by no other thread during the call.
pub(crate) unsafe fn set_app_word(lib: &Library, ssl: *const ffi::SSL, word: usize) {
    // SAFETY: as the caller guarantees; the word is stored as a pointer-sized integer, never
    // dereferenced.
    unsafe { (lib.api().SSL_set_ex_data)(ssl.cast_mut(), 0, word as *mut c_void) };
}

/// AWS-LC's and BoringSSL's ClientHello hook, installed only while tickets are on: marks the
/// connection when the client offers a non-empty TLS 1.2 ticket (see where it is installed).
/// Never refuses a handshake.
unsafe extern "C" fn ticket_offered(hello: *const ffi::ClientHelloHead) -> c_int {
    let Some(lib) = Library::loaded() else {
        return ffi::SSL_SELECT_CERT_SUCCESS;
    };
    let Some(get) = lib.api().SSL_early_callback_ctx_extension_get else {
        return ffi::SSL_SELECT_CERT_SUCCESS;
    };
    let (mut data, mut len) = (ptr::null::<u8>(), 0usize);
    // SAFETY: the library passes its live parsed ClientHello, whose first field is the
    // connection being handshaken, in the thread driving it; the out-pointers are ours.
    unsafe {
        if get(hello, ffi::TLSEXT_TYPE_SESSION_TICKET, &mut data, &mut len) == 1 && len > 0 {
            let ssl = (*hello).ssl;
            set_app_word(lib, ssl, app_word(lib, ssl) | TICKET_ACCEPTED);
        }
    }
    ffi::SSL_SELECT_CERT_SUCCESS
}

/// OpenSSL's ticket decryption hook: keeps OpenSSL's own decision, and marks the connection so
/// the server can tell ticket resumption from session-ID resumption.
unsafe extern "C" fn ticket_decrypted(
    ssl: *mut ffi::SSL,
    _session: *mut ffi::SSL_SESSION,
    _key_name: *const c_uchar,
    _key_name_len: usize,
    status: c_int,
    _arg: *mut c_void,
) -> c_int {
    match status {
        ffi::SSL_TICKET_SUCCESS | ffi::SSL_TICKET_SUCCESS_RENEW => {
            if let Some(lib) = Library::loaded() {
                // SAFETY: OpenSSL passes the live connection being handshaken, in the thread
                // driving it.
                unsafe { set_app_word(lib, ssl, app_word(lib, ssl) | TICKET_ACCEPTED) };
            }
            if status == ffi::SSL_TICKET_SUCCESS {
                ffi::SSL_TICKET_RETURN_USE
            } else {
                ffi::SSL_TICKET_RETURN_USE_RENEW
            }
        }
        ffi::SSL_TICKET_EMPTY | ffi::SSL_TICKET_NO_DECRYPT => ffi::SSL_TICKET_RETURN_IGNORE_RENEW,
        ffi::SSL_TICKET_NONE => ffi::SSL_TICKET_RETURN_IGNORE,
        _ => ffi::SSL_TICKET_RETURN_ABORT,
    }
}

/// AWS-LC's and BoringSSL's new-session hook on clients: a TLS 1.3 client's resumable
/// sessions (one per ticket) arrive only here, after the handshake, while `SSL_get_session`
/// keeps returning the handshake's own, unresumable one. Keeps the newest in the connection's
/// session slot, which [`crate::Ssl::session`] reads and `Ssl`'s drop frees.
unsafe extern "C" fn new_session(ssl: *mut ffi::SSL, session: *mut ffi::SSL_SESSION) -> c_int {
    let Some((lib, index)) = Library::loaded().and_then(|l| Some((l, l.session_index()?))) else {
        return 0;
    };
    let api = lib.api();
    // SAFETY: the library passes the live connection driving the handshake or read, in its
    // thread, and a session reference we may keep (returning 1); the slot holds null or a
    // reference this hook stored, released here when replaced.
    unsafe {
        let old = (api.SSL_get_ex_data)(ssl, index).cast::<ffi::SSL_SESSION>();
        if !old.is_null() {
            (api.SSL_SESSION_free)(old);
        }
        (api.SSL_set_ex_data)(ssl, index, session.cast());
    }
    1
}

/// OpenSSL's info hook, set by [`ContextBuilder::refuse_renegotiation`]: counts each
/// no_renegotiation alert the connection sends, which is how OpenSSL refuses a renegotiation.
unsafe extern "C" fn alert_sent(ssl: *const ffi::SSL, where_: c_int, ret: c_int) {
    if where_ & ffi::SSL_CB_WRITE_ALERT != ffi::SSL_CB_WRITE_ALERT
        || ret & 0xff != ffi::SSL_AD_NO_RENEGOTIATION
    {
        return;
    }
    let Some(lib) = Library::loaded() else {
        return;
    };
    // SAFETY: OpenSSL passes the live connection that is sending the alert, in the thread
    // driving it.
    unsafe {
        let word = app_word(lib, ssl);
        set_app_word(lib, ssl, word + (1 << RENEGOTIATION_REFUSED_SHIFT));
    }
}

/// OpenSSL's key log hook: forwards the line to the context's sink.
unsafe extern "C" fn keylog_line(ssl: *const ffi::SSL, line: *const c_char) {
    let Some(lib) = Library::loaded() else {
        return;
    };
    // SAFETY: OpenSSL passes a live connection; its context's app data is either null or the
    // sink installed by `ContextBuilder::keylog`, alive as long as the context.
    let sink = unsafe {
        let ctx = (lib.api().SSL_get_SSL_CTX)(ssl);
        (lib.api().SSL_CTX_get_ex_data)(ctx, 0) as *const Box<KeylogSink>
    };
    if sink.is_null() || line.is_null() {
        return;
    }
    // SAFETY: OpenSSL passes a NUL-terminated line valid during the call.
    let text = unsafe { CStr::from_ptr(line) }.to_string_lossy();
    // A panic must not unwind into OpenSSL.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: checked non-null above; see the first SAFETY comment for its validity.
        unsafe { (*sink)(&text) }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_versions_parse_in_common_spellings() {
        for s in ["1.3", "TLSv1.3", "tls1.3", "v1.3"] {
            assert_eq!(s.parse::<TlsVersion>().unwrap(), TlsVersion::Tls1_3, "{s}");
        }
        assert_eq!("1.2".parse::<TlsVersion>().unwrap().raw(), 0x0303);
        assert!("1.4".parse::<TlsVersion>().is_err());
        assert!(TlsVersion::Tls1_2 < TlsVersion::Tls1_3);
    }
}
