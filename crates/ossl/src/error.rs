//! The crate's error type, and OpenSSL's error queue turned into readable messages.

use std::ffi::{c_char, c_int};
use std::fmt;
use std::path::PathBuf;

use crate::ffi;
use crate::library::Library;

/// Everything that can go wrong in `ossl`. Each message names the file, symbol or setting
/// involved and, where there is one, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot load {path}: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("{} is not a directory: pass an OpenSSL install prefix (holding lib/libssl.so.*) or a version built by `tlsscope openssl build`", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} holds no libssl.so.4, .so.3, .so.1.1 or unversioned libssl.so (looked in {}): pass an install prefix of OpenSSL, AWS-LC or BoringSSL, or a library built by `tlsscope openssl build`", dir.display(), looked_in.join(", "))]
    NoLibssl {
        dir: PathBuf,
        looked_in: Vec<String>,
    },
    #[error("{} has no symbol {symbol}: it is not OpenSSL 1.1.1 or later, AWS-LC or BoringSSL", path.display())]
    MissingSymbol { symbol: String, path: PathBuf },
    #[error("{} is {version:?}: tlsscope supports OpenSSL 1.1.1 and later, AWS-LC and BoringSSL", path.display())]
    Unsupported { path: PathBuf, version: String },
    /// A feature, group, key type or other algorithm the loaded library does not have. The
    /// command layer puts the setting that asked for it in front.
    #[error("{library} has no {what}{hint}")]
    NotInLibrary {
        /// The library's display name ("OpenSSL 4.0.3", "BoringSSL API 44").
        library: String,
        /// What is missing, in words ("ENGINE support", "key exchange group X25519MLKEM768").
        what: String,
        /// Said after it: the functions looked for, or where to find it (" (ENGINE_by_id)").
        hint: String,
    },
    #[error("this process already loaded {loaded}; it cannot also load {requested} (run each library in its own process)")]
    AlreadyLoaded { loaded: String, requested: String },
    #[error("{what} failed: {queue}")]
    OpenSsl { what: String, queue: ErrorQueue },
    #[error("invalid {setting} {value:?}: {queue}")]
    Setting {
        setting: &'static str,
        value: String,
        queue: ErrorQueue,
    },
    #[error("cannot read {what} {}: {source}", path.display())]
    File {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Engine(String),
    #[error("cannot use {what} {}: {queue}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        queue: ErrorQueue,
    },
}

/// The entries of OpenSSL's thread-local error queue at one moment, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorQueue(pub Vec<String>);

impl ErrorQueue {
    /// Drains the calling thread's error queue.
    pub fn take(lib: &Library) -> ErrorQueue {
        let api = lib.api();
        let mut entries = Vec::new();
        loop {
            let code = lib.err_get_error();
            if code == 0 || entries.len() >= 16 {
                break;
            }
            let mut buf = [0 as c_char; 256];
            // ERR_error_string_n always NUL-terminates within the buffer.
            lib.err_error_string(code, &mut buf);
            // SAFETY: NUL-terminated by ERR_error_string_n.
            entries.push(unsafe { ffi::string(buf.as_ptr()) }.unwrap_or_default());
        }
        // Whatever is left beyond 16 entries is noise from one failure; do not let it leak into
        // the next operation's diagnosis.
        // SAFETY: only touches the calling thread's queue.
        unsafe { (api.ERR_clear_error)() };
        ErrorQueue(entries)
    }

    /// True when OpenSSL queued nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The most specific reason: the `reason` field of the newest entry
    /// ("error:0A000410:SSL routines::sslv3 alert handshake failure" -> "sslv3 alert handshake
    /// failure").
    pub fn reason(&self) -> Option<&str> {
        self.0.last().map(|e| e.rsplit(':').next().unwrap_or(e))
    }
}

impl fmt::Display for ErrorQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no detail in OpenSSL's error queue");
        }
        // Each entry's last field is the readable reason; the codes before it are kept for the
        // first entry only, since that is what one pastes into a search.
        let reasons: Vec<&str> = self
            .0
            .iter()
            .map(|e| e.rsplit(':').next().unwrap_or(e))
            .filter(|r| !r.is_empty())
            .collect();
        let mut unique: Vec<&str> = Vec::with_capacity(reasons.len());
        for r in reasons {
            if !unique.contains(&r) {
                unique.push(r);
            }
        }
        write!(f, "{} ({})", unique.join("; "), self.0[0])
    }
}

/// What `SSL_get_error` says about a failed or incomplete I/O call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    None,
    Ssl,
    WantRead,
    WantWrite,
    WantX509Lookup,
    Syscall,
    ZeroReturn,
    WantConnect,
    WantAccept,
    WantAsync,
    WantAsyncJob,
    WantClientHelloCb,
    WantRetryVerify,
    Other(i32),
}

impl ErrorCode {
    /// Maps `SSL_get_error`'s return value.
    pub fn from_raw(code: c_int) -> ErrorCode {
        match code {
            ffi::SSL_ERROR_NONE => ErrorCode::None,
            ffi::SSL_ERROR_SSL => ErrorCode::Ssl,
            ffi::SSL_ERROR_WANT_READ => ErrorCode::WantRead,
            ffi::SSL_ERROR_WANT_WRITE => ErrorCode::WantWrite,
            ffi::SSL_ERROR_WANT_X509_LOOKUP => ErrorCode::WantX509Lookup,
            ffi::SSL_ERROR_SYSCALL => ErrorCode::Syscall,
            ffi::SSL_ERROR_ZERO_RETURN => ErrorCode::ZeroReturn,
            ffi::SSL_ERROR_WANT_CONNECT => ErrorCode::WantConnect,
            ffi::SSL_ERROR_WANT_ACCEPT => ErrorCode::WantAccept,
            ffi::SSL_ERROR_WANT_ASYNC => ErrorCode::WantAsync,
            ffi::SSL_ERROR_WANT_ASYNC_JOB => ErrorCode::WantAsyncJob,
            ffi::SSL_ERROR_WANT_CLIENT_HELLO_CB => ErrorCode::WantClientHelloCb,
            ffi::SSL_ERROR_WANT_RETRY_VERIFY => ErrorCode::WantRetryVerify,
            other => ErrorCode::Other(other),
        }
    }

    /// True for the codes that mean "call again later": the operation is not finished and
    /// nothing failed.
    pub fn is_retry(self) -> bool {
        matches!(
            self,
            ErrorCode::WantRead
                | ErrorCode::WantWrite
                | ErrorCode::WantX509Lookup
                | ErrorCode::WantConnect
                | ErrorCode::WantAccept
                | ErrorCode::WantAsync
                | ErrorCode::WantAsyncJob
                | ErrorCode::WantClientHelloCb
                | ErrorCode::WantRetryVerify
        )
    }

    /// OpenSSL's name for the code, e.g. "SSL_ERROR_WANT_READ".
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::None => "SSL_ERROR_NONE",
            ErrorCode::Ssl => "SSL_ERROR_SSL",
            ErrorCode::WantRead => "SSL_ERROR_WANT_READ",
            ErrorCode::WantWrite => "SSL_ERROR_WANT_WRITE",
            ErrorCode::WantX509Lookup => "SSL_ERROR_WANT_X509_LOOKUP",
            ErrorCode::Syscall => "SSL_ERROR_SYSCALL",
            ErrorCode::ZeroReturn => "SSL_ERROR_ZERO_RETURN",
            ErrorCode::WantConnect => "SSL_ERROR_WANT_CONNECT",
            ErrorCode::WantAccept => "SSL_ERROR_WANT_ACCEPT",
            ErrorCode::WantAsync => "SSL_ERROR_WANT_ASYNC",
            ErrorCode::WantAsyncJob => "SSL_ERROR_WANT_ASYNC_JOB",
            ErrorCode::WantClientHelloCb => "SSL_ERROR_WANT_CLIENT_HELLO_CB",
            ErrorCode::WantRetryVerify => "SSL_ERROR_WANT_RETRY_VERIFY",
            ErrorCode::Other(_) => "SSL_ERROR_UNKNOWN",
        }
    }
}

/// A TLS I/O call that failed for good: the `SSL_get_error` code, the OS error for
/// `SSL_ERROR_SYSCALL`, and OpenSSL's error queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsError {
    pub code: ErrorCode,
    pub os_error: Option<i32>,
    pub queue: ErrorQueue,
}

/// OpenSSL 3's reason for a peer that closed the connection without a close_notify.
const UNEXPECTED_EOF: &str = "unexpected eof while reading";

impl TlsError {
    /// True when the peer just closed the connection without a close_notify: OpenSSL 1.1.1
    /// reports that as `SSL_ERROR_SYSCALL` with no OS error, 3.x as an `SSL_ERROR_SSL` whose
    /// reason is "unexpected eof while reading". Either way the peer went away; nothing it
    /// sent was wrong.
    pub fn is_unexpected_eof(&self) -> bool {
        match self.code {
            ErrorCode::Syscall => matches!(self.os_error, None | Some(0)) && self.queue.is_empty(),
            ErrorCode::Ssl => self.queue.reason() == Some(UNEXPECTED_EOF),
            _ => false,
        }
    }

    /// The TLS alert named in the error, if the failure was one ("handshake failure",
    /// "protocol version", ...), with the "sslv3 alert"/"tlsv1 alert" prefix removed. AWS-LC
    /// and BoringSSL spell the reason as a constant ("SSLV3_ALERT_HANDSHAKE_FAILURE").
    pub fn alert(&self) -> Option<String> {
        let reason = self.queue.reason()?;
        if let Some(idx) = reason.find(" alert ") {
            return Some(reason[idx + " alert ".len()..].to_string());
        }
        let idx = reason.find("_ALERT_")?;
        Some(
            reason[idx + "_ALERT_".len()..]
                .to_ascii_lowercase()
                .replace('_', " "),
        )
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.os_error, self.queue.is_empty()) {
            (ErrorCode::Syscall, Some(0) | None, true) => {
                f.write_str("the peer closed the connection without a TLS close_notify")
            }
            (ErrorCode::Syscall, Some(errno), true) => {
                write!(f, "{}", std::io::Error::from_raw_os_error(errno))
            }
            (code, _, true) => f.write_str(code.name()),
            (_, _, false) => write!(f, "{}", self.queue),
        }
    }
}

impl std::error::Error for TlsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_reason_and_alert() {
        let q = ErrorQueue(vec![
            "error:0A000410:SSL routines::sslv3 alert handshake failure".into(),
        ]);
        assert_eq!(q.reason(), Some("sslv3 alert handshake failure"));
        let e = TlsError {
            code: ErrorCode::Ssl,
            os_error: None,
            queue: q,
        };
        assert_eq!(e.alert().as_deref(), Some("handshake failure"));
        let bssl = TlsError {
            code: ErrorCode::Ssl,
            os_error: None,
            queue: ErrorQueue(vec![
                "error:10000410:SSL routines:OPENSSL_internal:SSLV3_ALERT_HANDSHAKE_FAILURE".into(),
            ]),
        };
        assert_eq!(bssl.alert().as_deref(), Some("handshake failure"));
        assert!(e.to_string().starts_with("sslv3 alert handshake failure ("));
    }

    #[test]
    fn retry_codes() {
        assert!(ErrorCode::from_raw(ffi::SSL_ERROR_WANT_READ).is_retry());
        assert!(ErrorCode::from_raw(ffi::SSL_ERROR_WANT_WRITE).is_retry());
        assert!(!ErrorCode::from_raw(ffi::SSL_ERROR_SYSCALL).is_retry());
        assert!(!ErrorCode::from_raw(ffi::SSL_ERROR_ZERO_RETURN).is_retry());
        assert_eq!(ErrorCode::from_raw(99), ErrorCode::Other(99));
    }

    #[test]
    fn an_eof_without_close_notify_is_told_apart_in_both_versions() {
        let eof_111 = TlsError {
            code: ErrorCode::Syscall,
            os_error: Some(0),
            queue: ErrorQueue::default(),
        };
        let eof_3 = TlsError {
            code: ErrorCode::Ssl,
            os_error: None,
            queue: ErrorQueue(vec![
                "error:0A000126:SSL routines::unexpected eof while reading".into(),
            ]),
        };
        let reset = TlsError {
            code: ErrorCode::Syscall,
            os_error: Some(104),
            queue: ErrorQueue::default(),
        };
        let garbage = TlsError {
            code: ErrorCode::Ssl,
            os_error: None,
            queue: ErrorQueue(vec![
                "error:0A00010B:SSL routines::wrong version number".into()
            ]),
        };
        assert!(eof_111.is_unexpected_eof() && eof_3.is_unexpected_eof());
        assert!(!reset.is_unexpected_eof() && !garbage.is_unexpected_eof());
    }

    #[test]
    fn syscall_eof_reads_as_a_close_without_notify() {
        let e = TlsError {
            code: ErrorCode::Syscall,
            os_error: Some(0),
            queue: ErrorQueue::default(),
        };
        assert!(e.to_string().contains("close_notify"));
    }
}
