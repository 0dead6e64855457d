//! The library's message callback (`SSL_set_msg_callback`): each record header and handshake
//! message a connection sends or receives, handed to an observer the connection owns.
//!
//! Why this and not a BIO or TCP_INFO: the callback is the library's own account of the
//! records, called where the library writes and parses them (every flavour has it), and it
//! also hands over the handshake messages in clear (the ClientHello's key shares, the
//! HelloRetryRequest), which no socket-level count can see. Its cost is one indirect call per
//! record and per handshake message, into the observer's own counters.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::ffi;
use crate::library::Library;

/// Receives what a connection's message callback reports. It runs inside the library's TLS
/// calls, on the thread making them: it must be quick and must not call back into the
/// connection.
pub trait MessageObserver: Send + 'static {
    /// A record's 5-byte header, as sent (`sent`) or received.
    fn record_header(&mut self, sent: bool, header: &[u8]);
    /// A whole handshake message, from its type byte on (in clear, also in TLS 1.3).
    fn handshake_message(&mut self, sent: bool, message: &[u8]);
    /// The observer, for reading its figures back ([`crate::Ssl::message_observer`]).
    fn as_any(&self) -> &dyn Any;
}

/// The observer as the callback's argument: a thin pointer to the boxed trait object.
pub(crate) type Observer = Box<Box<dyn MessageObserver>>;

/// Installs `observer` on `ssl`; false (and nothing installed) where the library lacks the
/// callback.
///
/// # Safety
/// `ssl` must be a live connection of `lib`, and `observer` must stay where it is (it is
/// boxed) until the connection is freed.
pub(crate) unsafe fn install(lib: &Library, ssl: *mut ffi::SSL, observer: &mut Observer) -> bool {
    let api = lib.api();
    let Some(set_callback) = api.SSL_set_msg_callback else {
        return false;
    };
    let arg = (&mut **observer as *mut Box<dyn MessageObserver>).cast::<c_void>();
    // SAFETY: live connection (caller); `arg` stays valid as long as the connection (caller).
    // OpenSSL sets the argument with a ctrl (its macro), AWS-LC and BoringSSL with a function.
    unsafe {
        match (api.SSL_set_msg_callback_arg, api.SSL_ctrl) {
            (Some(set_arg), _) => set_arg(ssl, arg),
            (None, Some(ctrl)) => {
                ctrl(ssl, ffi::SSL_CTRL_SET_MSG_CALLBACK_ARG, 0, arg);
            }
            (None, None) => return false,
        }
        set_callback(ssl, Some(on_message));
    }
    true
}

/// The message callback: passes record headers and handshake messages to the observer.
unsafe extern "C" fn on_message(
    write_p: c_int,
    _version: c_int,
    content_type: c_int,
    buf: *const c_void,
    len: usize,
    _ssl: *mut ffi::SSL,
    arg: *mut c_void,
) {
    if arg.is_null() || buf.is_null() {
        return;
    }
    if content_type != ffi::SSL3_RT_HEADER && content_type != ffi::SSL3_RT_HANDSHAKE {
        return;
    }
    // SAFETY: the library passes `len` readable bytes at `buf`, valid during the call.
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    // SAFETY: `arg` is the observer `install` set, alive as long as the connection; the
    // connection is used by one thread at a time (`&mut Ssl`), the one running this callback.
    let observer = unsafe { &mut *arg.cast::<Box<dyn MessageObserver>>() };
    let sent = write_p != 0;
    // A panic must not unwind into the library.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if content_type == ffi::SSL3_RT_HEADER {
            observer.record_header(sent, bytes);
        } else {
            observer.handshake_message(sent, bytes);
        }
    }));
}
