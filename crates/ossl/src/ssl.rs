//! One TLS connection (`SSL`), driven non-blocking over a socket the caller owns.

use std::ffi::{c_int, c_void, CString};
use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr;

use crate::context::{
    app_word, set_app_word, Context, Role, TlsVersion, RENEGOTIATION_REFUSED_SHIFT, TICKET_ACCEPTED,
};
use crate::error::{Error, ErrorCode, ErrorQueue, TlsError};
use crate::ffi;
use crate::group::Group;
use crate::library::Library;
use crate::pki::describe_pkey;

/// The result of a non-blocking TLS call.
#[derive(Debug, PartialEq, Eq)]
pub enum Io {
    /// Finished: bytes read or written (1 for a completed handshake; for shutdown 0 means our
    /// close_notify is sent, 1 that the peer's was received too).
    Done(usize),
    /// Call again when the socket is readable.
    WantRead,
    /// Call again when the socket is writable.
    WantWrite,
    /// Call again later for another reason (async job, callback), named by the code.
    Retry(ErrorCode),
    /// The peer closed the TLS connection cleanly (close_notify).
    Closed,
    /// The call failed for good.
    Failed(TlsError),
}

/// How a handshake established its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandshakeKind {
    /// A full handshake: key exchange and certificate signature.
    Full,
    /// TLS 1.2 resumption from the server's session cache, by session ID.
    ResumedSessionId,
    /// Resumption from a ticket: a TLS 1.2 RFC 5077 ticket or a TLS 1.3 PSK.
    ResumedTicket,
}

impl HandshakeKind {
    /// The name used in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            HandshakeKind::Full => "full",
            HandshakeKind::ResumedSessionId => "resumed_session_id",
            HandshakeKind::ResumedTicket => "resumed_ticket",
        }
    }

    /// True for either kind of resumption.
    pub fn is_resumed(self) -> bool {
        self != HandshakeKind::Full
    }
}

impl fmt::Display for HandshakeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a completed handshake negotiated, seen from either side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// "TLSv1.3", "TLSv1.2".
    pub version: String,
    /// OpenSSL's cipher name ("TLS_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384").
    pub cipher: String,
    /// The IANA/RFC name ("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384").
    pub cipher_standard: Option<String>,
    /// The key exchange group ("x25519", "secp256r1"); none for a TLS 1.2 resumption.
    pub group: Option<String>,
    /// The server's handshake signature ("rsa_pss_rsae_sha256"); none when resumed.
    pub signature: Option<String>,
    /// The server certificate's key ("RSA-2048", "ECDSA-P256", "Ed25519").
    pub server_key: Option<String>,
    /// Full, or resumed by session ID or by ticket.
    pub kind: HandshakeKind,
}

/// A TLS session that can be offered for resumption.
pub struct Session {
    lib: &'static Library,
    ptr: *mut ffi::SSL_SESSION,
}

// SAFETY: SSL_SESSION is reference counted atomically; a `Session` is moved between threads, not
// shared (it is not Sync), so no two threads use one at the same time.
unsafe impl Send for Session {}

impl Session {
    /// True when the session can be offered for resumption (OpenSSL's own check).
    pub fn is_resumable(&self) -> bool {
        // SAFETY: live session.
        unsafe { (self.lib.api().SSL_SESSION_is_resumable)(self.ptr) == 1 }
    }

    /// True when the session carries a ticket (rather than only a session ID).
    pub fn has_ticket(&self) -> bool {
        // SAFETY: live session.
        unsafe { (self.lib.api().SSL_SESSION_has_ticket)(self.ptr) == 1 }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: we own one reference.
        unsafe { (self.lib.api().SSL_SESSION_free)(self.ptr) };
    }
}

/// One TLS connection.
pub struct Ssl {
    ctx: Context,
    ptr: *mut ffi::SSL,
    /// The message callback's observer; dropped after the connection is freed.
    observer: Option<crate::messages::Observer>,
}

// SAFETY: an SSL object may move between threads as long as only one uses it at a time, which
// `&mut self` on every operation (and no Sync) guarantees.
unsafe impl Send for Ssl {}

impl Drop for Ssl {
    fn drop(&mut self) {
        let kept = self.kept_session();
        // SAFETY: we own the connection; the context outlives it through `self.ctx`. A session
        // the new-session hook kept is one reference of ours.
        unsafe {
            if !kept.is_null() {
                (self.api().SSL_SESSION_free)(kept);
            }
            (self.api().SSL_free)(self.ptr)
        };
    }
}

impl Ssl {
    /// A new connection from `ctx`, in the context's role (connect or accept state).
    pub fn new(ctx: &Context) -> Result<Ssl, Error> {
        let lib = ctx.library();
        // SAFETY: the context is live.
        let ptr = unsafe { (lib.api().SSL_new)(ctx.as_ptr()) };
        if ptr.is_null() {
            return Err(Error::OpenSsl {
                what: "SSL_new".into(),
                queue: ErrorQueue::take(lib),
            });
        }
        // SAFETY: fresh connection.
        unsafe {
            match ctx.role() {
                Role::Client => (lib.api().SSL_set_connect_state)(ptr),
                Role::Server => (lib.api().SSL_set_accept_state)(ptr),
            }
        }
        Ok(Ssl {
            ctx: ctx.clone(),
            ptr,
            observer: None,
        })
    }

    fn lib(&self) -> &'static Library {
        self.ctx.library()
    }

    fn api(&self) -> &'static ffi::Api {
        self.ctx.library().api()
    }

    /// Uses `fd` (a connected, non-blocking socket) for I/O. The caller keeps ownership and must
    /// keep the socket open for as long as this connection is used.
    pub fn set_fd(&mut self, fd: BorrowedFd<'_>) -> Result<(), Error> {
        // SAFETY: live connection; OpenSSL wraps the fd in a socket BIO that does not close it
        // (BIO_NOCLOSE is SSL_set_fd's behaviour).
        if unsafe { (self.api().SSL_set_fd)(self.ptr, fd.as_raw_fd()) } != 1 {
            return Err(Error::OpenSsl {
                what: "SSL_set_fd".into(),
                queue: ErrorQueue::take(self.lib()),
            });
        }
        Ok(())
    }

    /// A client and a server connection joined by an in-memory BIO pair (no sockets): what one
    /// writes the other reads, so both can be driven in one thread. Each side's buffer holds
    /// `buffer` bytes (a flight that does not fit is written in parts, as on a socket).
    pub fn memory_pair(
        client: &Context,
        server: &Context,
        buffer: usize,
    ) -> Result<(Ssl, Ssl), Error> {
        let c = Ssl::new(client)?;
        let s = Ssl::new(server)?;
        let api = c.api();
        let (mut cb, mut sb) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: both out-pointers are valid; on success each receives a new BIO we own.
        if unsafe { (api.BIO_new_bio_pair)(&mut cb, buffer, &mut sb, buffer) } != 1 {
            return Err(Error::OpenSsl {
                what: "BIO_new_bio_pair".into(),
                queue: ErrorQueue::take(c.lib()),
            });
        }
        // SAFETY: live connections; SSL_set_bio with the same BIO for reading and writing takes
        // over our one reference, and SSL_free frees it (the pair's halves unlink on free).
        unsafe {
            (api.SSL_set_bio)(c.ptr, cb, cb);
            (api.SSL_set_bio)(s.ptr, sb, sb);
        }
        Ok((c, s))
    }

    /// Sends `name` as SNI (clients).
    pub fn set_server_name(&mut self, name: &str) -> Result<(), Error> {
        let c = CString::new(name).map_err(|_| self.setting_error("SNI name", name))?;
        // SAFETY: live connection; the library copies the string.
        if !unsafe { self.lib().ssl_set_host_name(self.ptr, &c)? } {
            return Err(self.setting_error("SNI name", name));
        }
        Ok(())
    }

    /// Checks the peer certificate against `host` during verification (clients).
    pub fn set_verify_host(&mut self, host: &str) -> Result<(), Error> {
        let c = CString::new(host).map_err(|_| self.setting_error("verify host", host))?;
        // SAFETY: live connection; OpenSSL copies the string.
        if unsafe { (self.api().SSL_set1_host)(self.ptr, c.as_ptr()) } != 1 {
            return Err(self.setting_error("verify host", host));
        }
        Ok(())
    }

    fn setting_error(&self, setting: &'static str, value: &str) -> Error {
        Error::Setting {
            setting,
            value: value.to_string(),
            queue: ErrorQueue::take(self.lib()),
        }
    }

    /// Offers `session` for resumption (clients, before the handshake).
    pub fn set_session(&mut self, session: &Session) -> Result<(), Error> {
        // SAFETY: both live; OpenSSL takes its own reference to the session.
        if unsafe { (self.api().SSL_set_session)(self.ptr, session.ptr) } != 1 {
            return Err(Error::OpenSsl {
                what: "SSL_set_session".into(),
                queue: ErrorQueue::take(self.lib()),
            });
        }
        Ok(())
    }

    /// The connection's current session, to resume later. In TLS 1.3 a client only has a
    /// resumable session once it has read the server's NewSessionTicket, which arrives after the
    /// handshake: read application data (or wait for it) first.
    pub fn session(&self) -> Option<Session> {
        let kept = self.kept_session();
        if let (false, Some(up_ref)) = (kept.is_null(), self.api().SSL_SESSION_up_ref) {
            // SAFETY: the kept session is live while the connection holds it; the new
            // reference is the returned Session's.
            unsafe { up_ref(kept) };
            return Some(Session {
                lib: self.lib(),
                ptr: kept,
            });
        }
        // SAFETY: live connection; get1 returns a new reference or null.
        let ptr = unsafe { (self.api().SSL_get1_session)(self.ptr) };
        (!ptr.is_null()).then(|| Session {
            lib: self.lib(),
            ptr,
        })
    }

    /// The newest session AWS-LC's or BoringSSL's new-session hook kept for this client
    /// connection (borrowed); null elsewhere.
    fn kept_session(&self) -> *mut ffi::SSL_SESSION {
        let Some(index) = self.lib().session_index() else {
            return ptr::null_mut();
        };
        // SAFETY: live connection; the slot holds null or a session the hook stored.
        unsafe { (self.api().SSL_get_ex_data)(self.ptr, index).cast() }
    }

    /// Runs the handshake as far as the socket allows.
    pub fn do_handshake(&mut self) -> Io {
        // SAFETY: live connection with an fd set by the caller.
        self.io(|api, ssl| unsafe { (api.SSL_do_handshake)(ssl) }, true)
    }

    /// Reads decrypted application data into `buf`.
    pub fn read(&mut self, buf: &mut [u8]) -> Io {
        let len = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        let p = buf.as_mut_ptr().cast::<c_void>();
        // SAFETY: `p` is writable for `len` bytes for the duration of the call.
        self.io(|api, ssl| unsafe { (api.SSL_read)(ssl, p, len) }, false)
    }

    /// Writes application data from `buf`. With partial writes enabled (the default for
    /// contexts built here) it may write less than `buf.len()`.
    pub fn write(&mut self, buf: &[u8]) -> Io {
        if buf.is_empty() {
            return Io::Done(0);
        }
        let len = c_int::try_from(buf.len()).unwrap_or(c_int::MAX);
        let p = buf.as_ptr().cast::<c_void>();
        // SAFETY: `p` is readable for `len` bytes for the duration of the call.
        self.io(|api, ssl| unsafe { (api.SSL_write)(ssl, p, len) }, false)
    }

    /// Hands every record header and handshake message this connection sends or receives
    /// to `observer` (see [`crate::MessageObserver`]). False where the library lacks the
    /// message callback; the observer is then dropped.
    pub fn observe_messages(&mut self, observer: Box<dyn crate::MessageObserver>) -> bool {
        let mut boxed: crate::messages::Observer = Box::new(observer);
        // SAFETY: live connection; the box is kept in `self` until after SSL_free.
        let installed = unsafe { crate::messages::install(self.lib(), self.ptr, &mut boxed) };
        if installed {
            self.observer = Some(boxed);
        }
        installed
    }

    /// The observer given to [`Ssl::observe_messages`], if any.
    pub fn message_observer(&self) -> Option<&dyn crate::MessageObserver> {
        self.observer.as_deref().map(|b| &**b)
    }

    /// Sends what the library holds until its next write. AWS-LC and BoringSSL queue a TLS 1.3
    /// server's NewSessionTickets behind the handshake and send them with the next write, so a
    /// client that only handshakes would never get one and could never resume; a zero-byte
    /// `SSL_write` flushes them (BoringSSL's own way to flush a queued message). OpenSSL sends
    /// its tickets with the handshake's last flight: nothing to do, and nothing is called.
    pub fn flush_held_writes(&mut self) -> Io {
        if self.lib().flavour().is_openssl() {
            return Io::Done(0);
        }
        self.clear_errors();
        // SAFETY: live connection; a zero length reads nothing from the (static) buffer.
        let ret = unsafe { (self.api().SSL_write)(self.ptr, c"".as_ptr().cast(), 0) };
        if ret >= 0 {
            // 0 is success here: zero bytes of application data written.
            return Io::Done(0);
        }
        self.classify(ret)
    }

    /// Sends close_notify (and, called again, waits for the peer's).
    pub fn shutdown(&mut self) -> Io {
        self.clear_errors();
        // SAFETY: live connection.
        let ret = unsafe { (self.api().SSL_shutdown)(self.ptr) };
        match ret {
            1 => Io::Done(1),
            0 => Io::Done(0),
            _ => self.classify(ret),
        }
    }

    /// Marks the connection as shut down both ways without sending anything. OpenSSL removes
    /// a connection's session from the server's cache when the connection is freed without a
    /// completed shutdown, so a client that just closes would lose its session; nginx marks
    /// its connections the same way before freeing them.
    pub fn mark_shut_down(&mut self) {
        // SAFETY: live connection; this only sets flags.
        unsafe {
            (self.api().SSL_set_shutdown)(
                self.ptr,
                ffi::SSL_SENT_SHUTDOWN | ffi::SSL_RECEIVED_SHUTDOWN,
            )
        };
    }

    /// The async wait fds added and removed since the last call (`SSL_get_changed_async_fds`),
    /// after a call returned `WANT_ASYNC`: each becomes readable when its job can go on.
    /// Empty where the library has no async jobs.
    pub fn changed_async_fds(&mut self) -> (Vec<RawFd>, Vec<RawFd>) {
        let Some(changed) = self.api().SSL_get_changed_async_fds else {
            return (Vec::new(), Vec::new());
        };
        let (mut nadd, mut ndel) = (0usize, 0usize);
        // SAFETY: live connection; null arrays ask for the counts only.
        let ok = unsafe {
            changed(
                self.ptr,
                ptr::null_mut(),
                &mut nadd,
                ptr::null_mut(),
                &mut ndel,
            )
        };
        if ok != 1 || nadd + ndel == 0 {
            return (Vec::new(), Vec::new());
        }
        let mut add = vec![0 as RawFd; nadd];
        let mut del = vec![0 as RawFd; ndel];
        // SAFETY: the arrays hold the counts OpenSSL gave for this connection just now.
        let ok = unsafe {
            changed(
                self.ptr,
                add.as_mut_ptr(),
                &mut nadd,
                del.as_mut_ptr(),
                &mut ndel,
            )
        };
        if ok != 1 {
            return (Vec::new(), Vec::new());
        }
        add.truncate(nadd);
        del.truncate(ndel);
        (add, del)
    }

    /// Every async wait fd the connection has now (`SSL_get_all_async_fds`).
    pub fn all_async_fds(&self) -> Vec<RawFd> {
        let Some(all) = self.api().SSL_get_all_async_fds else {
            return Vec::new();
        };
        let mut n = 0usize;
        // SAFETY: live connection; a null array asks for the count.
        if unsafe { all(self.ptr, ptr::null_mut(), &mut n) } != 1 || n == 0 {
            return Vec::new();
        }
        let mut fds = vec![0 as RawFd; n];
        // SAFETY: the array holds the count OpenSSL gave just now.
        if unsafe { all(self.ptr, fds.as_mut_ptr(), &mut n) } != 1 {
            return Vec::new();
        }
        fds.truncate(n);
        fds
    }

    /// True once the handshake got past its first message: a server accepted a ClientHello
    /// (or any first message it could act on), a client sent its own. A server's handshake
    /// that failed while this is still false never received anything that looked like a TLS
    /// handshake: garbage, plain HTTP, another protocol. AWS-LC and BoringSSL have no such
    /// state (their `SSL_get_state` says only "in a handshake" or not): always true there.
    pub fn handshake_started(&self) -> bool {
        let Some(get_state) = self.api().SSL_get_state else {
            return true;
        };
        // SAFETY: live connection; this reads the state machine's current state.
        unsafe { get_state(self.ptr) != ffi::TLS_ST_BEFORE }
    }

    /// The renegotiations this connection refused since the last call (see
    /// [`crate::ContextBuilder::refuse_renegotiation`]); resets the count.
    pub fn take_renegotiations_refused(&mut self) -> u64 {
        let lib = self.lib();
        // SAFETY: live connection, used only through `&mut self`.
        let word = unsafe { app_word(lib, self.ptr) };
        let refused = word >> RENEGOTIATION_REFUSED_SHIFT;
        if refused > 0 {
            let keep = word & ((1 << RENEGOTIATION_REFUSED_SHIFT) - 1);
            // SAFETY: as above.
            unsafe { set_app_word(lib, self.ptr, keep) };
        }
        refused as u64
    }

    /// Bytes of decrypted data buffered inside OpenSSL, readable without touching the socket.
    pub fn pending(&self) -> usize {
        // SAFETY: live connection.
        unsafe { (self.api().SSL_pending)(self.ptr) }.max(0) as usize
    }

    fn clear_errors(&self) {
        // The error queue must be empty before an I/O call for SSL_get_error to be reliable.
        // SAFETY: only touches the calling thread's queue.
        unsafe { (self.api().ERR_clear_error)() };
    }

    fn io(&mut self, call: impl FnOnce(&ffi::Api, *mut ffi::SSL) -> c_int, handshake: bool) -> Io {
        self.clear_errors();
        let ret = call(self.api(), self.ptr);
        if ret > 0 {
            return Io::Done(if handshake { 1 } else { ret as usize });
        }
        self.classify(ret)
    }

    fn classify(&self, ret: c_int) -> Io {
        // Read errno before anything else can change it.
        let errno = std::io::Error::last_os_error().raw_os_error();
        // SAFETY: live connection; `ret` is the value the failed call returned.
        let code = ErrorCode::from_raw(unsafe { (self.api().SSL_get_error)(self.ptr, ret) });
        match code {
            ErrorCode::WantRead => Io::WantRead,
            ErrorCode::WantWrite => Io::WantWrite,
            ErrorCode::ZeroReturn => Io::Closed,
            c if c.is_retry() => Io::Retry(c),
            c => Io::Failed(TlsError {
                code: c,
                os_error: (c == ErrorCode::Syscall).then_some(errno.unwrap_or(0)),
                queue: ErrorQueue::take(self.lib()),
            }),
        }
    }

    /// True once a handshake resumed a session.
    pub fn session_reused(&self) -> bool {
        // SAFETY: live connection.
        unsafe { (self.api().SSL_session_reused)(self.ptr) == 1 }
    }

    /// The certificate verification result: `Ok` or X509's reason ("self-signed certificate").
    pub fn verify_result(&self) -> Result<(), String> {
        // SAFETY: live connection; the error string is static.
        unsafe {
            let code = (self.api().SSL_get_verify_result)(self.ptr);
            if code == 0 {
                return Ok(());
            }
            Err(
                ffi::string((self.api().X509_verify_cert_error_string)(code))
                    .unwrap_or_else(|| format!("verify error {code}")),
            )
        }
    }

    /// What the handshake negotiated. Call after `do_handshake` returned `Done`.
    pub fn negotiated(&self) -> Negotiated {
        let api = self.api();
        let role = self.ctx.role();
        // SAFETY: live connection; the getters return static strings or objects owned by the
        // connection (or, for get1, a new reference that `describe_cert` frees).
        unsafe {
            let cipher = (api.SSL_get_current_cipher)(self.ptr);
            let (cipher_name, cipher_standard) = if cipher.is_null() {
                (String::new(), None)
            } else {
                (
                    ffi::string((api.SSL_CIPHER_get_name)(cipher)).unwrap_or_default(),
                    ffi::string((api.SSL_CIPHER_standard_name)(cipher)),
                )
            };
            let server_key = self.server_key();
            Negotiated {
                version: ffi::string((api.SSL_get_version)(self.ptr)).unwrap_or_default(),
                cipher: cipher_name,
                cipher_standard,
                group: self.group(),
                signature: self.signature(role, server_key.as_deref()),
                server_key,
                kind: self.kind(role),
            }
        }
    }

    /// Full or resumed, and how: cheap enough to call on every handshake.
    pub fn handshake_kind(&self) -> HandshakeKind {
        self.kind(self.ctx.role())
    }

    /// The negotiated protocol version, once the handshake is done.
    pub fn protocol_version(&self) -> Option<TlsVersion> {
        // SAFETY: live connection.
        match unsafe { (self.api().SSL_version)(self.ptr) } {
            0x0301 => Some(TlsVersion::Tls1_0),
            0x0302 => Some(TlsVersion::Tls1_1),
            0x0303 => Some(TlsVersion::Tls1_2),
            0x0304 => Some(TlsVersion::Tls1_3),
            _ => None,
        }
    }

    fn kind(&self, role: Role) -> HandshakeKind {
        if !self.session_reused() {
            return HandshakeKind::Full;
        }
        let api = self.api();
        // SAFETY: live connection; get_session returns a borrowed pointer or null.
        let by_ticket = unsafe {
            (api.SSL_version)(self.ptr) >= 0x0304
                || match role {
                    Role::Server => app_word(self.lib(), self.ptr) & TICKET_ACCEPTED != 0,
                    Role::Client => {
                        let s = (api.SSL_get_session)(self.ptr);
                        !s.is_null() && (api.SSL_SESSION_has_ticket)(s) == 1
                    }
                }
        };
        if by_ticket {
            HandshakeKind::ResumedTicket
        } else {
            HandshakeKind::ResumedSessionId
        }
    }

    fn server_key(&self) -> Option<String> {
        let api = self.api();
        // SAFETY: live connection. get_certificate borrows; get1_peer_certificate returns a new
        // reference, freed here.
        unsafe {
            match self.ctx.role() {
                Role::Server => {
                    let cert = (api.SSL_get_certificate)(self.ptr);
                    (!cert.is_null())
                        .then(|| describe_pkey(self.lib(), (api.X509_get0_pubkey)(cert)))
                }
                Role::Client => {
                    let cert = (api.SSL_get1_peer_certificate)(self.ptr);
                    if cert.is_null() {
                        return None;
                    }
                    let d = describe_pkey(self.lib(), (api.X509_get0_pubkey)(cert));
                    (api.X509_free)(cert);
                    Some(d)
                }
            }
        }
    }

    /// The key exchange group's NID (0 when there was none, as in a TLS 1.2 resumption); on
    /// AWS-LC and BoringSSL, the group's TLS code point instead, which they name.
    fn group_nid(&self) -> c_int {
        let api = self.api();
        // A TLS 1.2 (or older) resumption exchanges no key: 3.x still answers with the group of
        // the handshake that made the session, which this handshake did not use (and rustls,
        // rightly, names none).
        // SAFETY: live connection.
        if unsafe { (api.SSL_version)(self.ptr) } < 0x0304 && self.session_reused() {
            return 0;
        }
        if let Some(group_id) = api.SSL_get_group_id {
            // SAFETY: live connection; returns the code point or 0.
            return unsafe { group_id(self.ptr) }.into();
        }
        let Some(ssl_ctrl) = api.SSL_ctrl else {
            return 0;
        };
        if self.lib().version().is_3x_or_later() {
            // SAFETY: SSL_get_negotiated_group is this ctrl on 3.x; it returns a NID or 0.
            return unsafe {
                ssl_ctrl(
                    self.ptr,
                    ffi::SSL_CTRL_GET_NEGOTIATED_GROUP,
                    0,
                    ptr::null_mut(),
                )
            } as c_int;
        }
        // 1.1.1 has no negotiated-group call: read the ephemeral key of the key exchange.
        let cmd = match self.ctx.role() {
            Role::Client => ffi::SSL_CTRL_GET_PEER_TMP_KEY,
            Role::Server => ffi::SSL_CTRL_GET_TMP_KEY,
        };
        let mut key: *mut ffi::EVP_PKEY = ptr::null_mut();
        // SAFETY: these ctrls store a new reference to the key (or nothing) in `key`.
        let ok = unsafe {
            ssl_ctrl(
                self.ptr,
                cmd,
                0,
                (&mut key as *mut *mut ffi::EVP_PKEY).cast(),
            )
        };
        if ok != 1 || key.is_null() {
            return self.server_tls12_group_nid_111();
        }
        let nid = self.group_nid_of_key(key);
        // SAFETY: we own the reference the ctrl returned.
        unsafe { (api.EVP_PKEY_free)(key) };
        nid
    }

    /// A 1.1.1 TLS 1.2 server frees its ephemeral key once the secret is derived, so ask which
    /// group it would pick: the first shared group, which is how 1.1.1 chooses (outside Suite B).
    fn server_tls12_group_nid_111(&self) -> c_int {
        let api = self.api();
        let Some(ssl_ctrl) = api.SSL_ctrl else {
            return 0;
        };
        if self.ctx.role() != Role::Server || self.session_reused() {
            return 0;
        }
        // SAFETY: live connection; the cipher is owned by the library; the ctrl returns a NID.
        unsafe {
            let cipher = (api.SSL_get_current_cipher)(self.ptr);
            if cipher.is_null() || (api.SSL_CIPHER_get_kx_nid)(cipher) != ffi::NID_KX_ECDHE {
                return 0;
            }
            (ssl_ctrl(self.ptr, ffi::SSL_CTRL_GET_SHARED_GROUP, 0, ptr::null_mut()) as c_int).max(0)
        }
    }

    /// The group of an ephemeral key: the curve's NID for EC keys, the key type otherwise.
    fn group_nid_of_key(&self, key: *const ffi::EVP_PKEY) -> c_int {
        let api = self.api();
        // SAFETY: `key` is live for this call; the EC getters return borrowed objects.
        unsafe {
            let id = (api.EVP_PKEY_get_id)(key);
            if id != ffi::NID_EC_PUBLIC_KEY {
                return id;
            }
            let (Some(get_ec), Some(get_group), Some(curve)) = (
                api.EVP_PKEY_get0_EC_KEY,
                api.EC_KEY_get0_group,
                api.EC_GROUP_get_curve_name,
            ) else {
                return id;
            };
            curve(get_group(get_ec(key)))
        }
    }

    /// The key exchange group the handshake used: None when it had no key exchange (a TLS
    /// 1.2 resumption), `Some(None)` for a group outside [`Group`]'s table. Allocates
    /// nothing: the server counts handshakes by it.
    pub fn key_exchange_group(&self) -> Option<Option<Group>> {
        let id = self.group_nid();
        (id > 0).then(|| self.group_of(id))
    }

    /// The table's group for what `group_nid` answered: a NID (or 3.5's code point with the
    /// unknown-NID bit) from OpenSSL, a TLS code point from AWS-LC and BoringSSL.
    fn group_of(&self, id: c_int) -> Option<Group> {
        if self.api().SSL_get_group_id.is_some() {
            u16::try_from(id).ok().and_then(Group::from_code_point)
        } else {
            Group::from_openssl_id(id)
        }
    }

    fn group(&self) -> Option<String> {
        let nid = self.group_nid();
        if nid <= 0 {
            return None;
        }
        if let Some(g) = self.group_of(nid) {
            return Some(g.name().to_string());
        }
        let api = self.api();
        if let Some(group_name) = api.SSL_get_group_name {
            // SAFETY: returns a static name or null for a code point.
            return unsafe { ffi::string(group_name(nid as u16)) }.map(|n| normalize_group(&n));
        }
        if nid == ffi::NID_DH_KEY_AGREEMENT {
            return Some("ffdhe".into());
        }
        // SAFETY: both return a static name or null.
        let name = unsafe {
            match api.SSL_group_to_name {
                Some(f) => ffi::string(f(self.ptr, nid)),
                None => ffi::string((api.OBJ_nid2sn)(nid)),
            }
        };
        name.map(|n| normalize_group(&n))
    }

    /// The server's handshake signature as (signature type NID, digest NID); (0, 0) when
    /// there was none. On AWS-LC and BoringSSL, (TLS SignatureScheme code point, 0) as the
    /// client saw it; their servers have no getter for their own signature.
    fn signature_nids(&self, role: Role) -> (c_int, c_int) {
        let api = self.api();
        if let Some(peer_sigalg) = api.SSL_get_peer_signature_algorithm {
            // A resumed session answers with the signature of the handshake that made it.
            if role == Role::Server || self.session_reused() {
                return (0, 0);
            }
            // SAFETY: live connection; returns the code point or 0.
            return (unsafe { peer_sigalg(self.ptr) }.into(), 0);
        }
        let (Some(ssl_ctrl), Some(get_peer_type)) =
            (api.SSL_ctrl, api.SSL_get_peer_signature_type_nid)
        else {
            return (0, 0);
        };
        let mut type_nid: c_int = 0;
        let mut md_nid: c_int = 0;
        // SAFETY: the getters write an int through the pointer and return 1 on success.
        let ok = unsafe {
            match (role, api.SSL_get_signature_type_nid) {
                (Role::Client, _) => {
                    get_peer_type(self.ptr, &mut type_nid) == 1
                        && ssl_ctrl(
                            self.ptr,
                            ffi::SSL_CTRL_GET_PEER_SIGNATURE_NID,
                            0,
                            (&mut md_nid as *mut c_int).cast(),
                        ) == 1
                }
                (Role::Server, Some(get_type)) => {
                    get_type(self.ptr, &mut type_nid) == 1
                        && ssl_ctrl(
                            self.ptr,
                            ffi::SSL_CTRL_GET_SIGNATURE_NID,
                            0,
                            (&mut md_nid as *mut c_int).cast(),
                        ) == 1
                }
                (Role::Server, None) => false,
            }
        };
        if ok {
            (type_nid, md_nid)
        } else {
            (0, 0)
        }
    }

    fn signature(&self, role: Role, server_key: Option<&str>) -> Option<String> {
        let (type_nid, md_nid) = self.signature_nids(role);
        if type_nid == 0 {
            return None;
        }
        if let Some(sigalg_name) = self.api().SSL_get_signature_algorithm_name {
            // SAFETY: returns a static name or null; 1 asks for the curve in ECDSA names
            // ("ecdsa_secp256r1_sha256"), as TLS 1.3 names them.
            return unsafe { ffi::string(sigalg_name(type_nid as u16, 1)) };
        }
        sigalg_name(type_nid, md_nid, server_key)
    }

    /// A cheap, allocation-free identity of what the handshake negotiated: equal identities
    /// mean equal [`Negotiated`] reports (for the same server certificate), so a load generator
    /// can count handshakes by identity and name each identity once.
    pub fn handshake_ids(&self) -> HandshakeIds {
        let role = self.ctx.role();
        // SAFETY: live connection; the cipher pointer is a static table entry of the library.
        let (version, cipher) = unsafe {
            (
                (self.api().SSL_version)(self.ptr),
                (self.api().SSL_get_current_cipher)(self.ptr) as usize,
            )
        };
        let (signature_type, signature_digest) = self.signature_nids(role);
        HandshakeIds {
            version,
            cipher,
            group: self.group_nid(),
            signature_type,
            signature_digest,
            kind: self.kind(role),
        }
    }

    /// True when the connection holds a session that can be offered for resumption: in TLS
    /// 1.3 only once the server's NewSessionTicket has been read.
    pub fn has_resumable_session(&self) -> bool {
        let kept = self.kept_session();
        // SAFETY: live connection; get_session borrows, as does the kept session.
        unsafe {
            let s = if kept.is_null() {
                (self.api().SSL_get_session)(self.ptr)
            } else {
                kept
            };
            !s.is_null() && (self.api().SSL_SESSION_is_resumable)(s) == 1
        }
    }
}

/// See [`Ssl::handshake_ids`]: NIDs, the protocol version and the cipher's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandshakeIds {
    pub version: c_int,
    /// The address of the library's cipher table entry: equal for equal ciphers.
    pub cipher: usize,
    pub group: c_int,
    pub signature_type: c_int,
    pub signature_digest: c_int,
    pub kind: HandshakeKind,
}

/// Names groups the way TLS does ("secp256r1", "x25519"), whatever OpenSSL version spells them.
fn normalize_group(name: &str) -> String {
    match name {
        "prime256v1" | "P-256" => "secp256r1".into(),
        "P-384" => "secp384r1".into(),
        "P-521" => "secp521r1".into(),
        other => other.to_ascii_lowercase(),
    }
}

/// The TLS SignatureScheme name for a signature type, digest and key.
fn sigalg_name(type_nid: c_int, md_nid: c_int, key: Option<&str>) -> Option<String> {
    let md = match md_nid {
        ffi::NID_SHA1 => "sha1",
        ffi::NID_SHA256 => "sha256",
        ffi::NID_SHA384 => "sha384",
        ffi::NID_SHA512 => "sha512",
        _ => "",
    };
    let name = match type_nid {
        ffi::NID_RSA_ENCRYPTION => format!("rsa_pkcs1_{md}"),
        ffi::NID_RSASSA_PSS if key.is_some_and(|k| k.starts_with("RSA-PSS")) => {
            format!("rsa_pss_pss_{md}")
        }
        ffi::NID_RSASSA_PSS => format!("rsa_pss_rsae_{md}"),
        ffi::NID_EC_PUBLIC_KEY => match md {
            "sha256" => "ecdsa_secp256r1_sha256".into(),
            "sha384" => "ecdsa_secp384r1_sha384".into(),
            "sha512" => "ecdsa_secp521r1_sha512".into(),
            other => format!("ecdsa_{other}"),
        },
        ffi::NID_ED25519 => "ed25519".into(),
        ffi::NID_ED448 => "ed448".into(),
        ffi::NID_ML_DSA_44 => "mldsa44".into(),
        ffi::NID_ML_DSA_65 => "mldsa65".into(),
        ffi::NID_ML_DSA_87 => "mldsa87".into(),
        other => format!("nid{other}_{md}"),
    };
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigalg_names_follow_the_tls_registry() {
        let n = |t, m, k| sigalg_name(t, m, k).unwrap();
        assert_eq!(
            n(ffi::NID_RSASSA_PSS, ffi::NID_SHA256, Some("RSA-2048")),
            "rsa_pss_rsae_sha256"
        );
        assert_eq!(
            n(ffi::NID_RSA_ENCRYPTION, ffi::NID_SHA384, None),
            "rsa_pkcs1_sha384"
        );
        assert_eq!(
            n(ffi::NID_EC_PUBLIC_KEY, ffi::NID_SHA384, None),
            "ecdsa_secp384r1_sha384"
        );
        assert_eq!(n(ffi::NID_ED25519, 0, None), "ed25519");
    }

    #[test]
    fn group_names_are_normalized() {
        assert_eq!(normalize_group("prime256v1"), "secp256r1");
        assert_eq!(normalize_group("X25519"), "x25519");
        assert_eq!(normalize_group("secp384r1"), "secp384r1");
    }
}
