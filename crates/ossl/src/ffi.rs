//! The raw OpenSSL interface: opaque types, constants, and a table of function pointers resolved
//! with `dlsym` from the libssl/libcrypto under test.
//!
//! Only what tlsscope calls is listed. Names and signatures are OpenSSL's own; where 1.1.1 and
//! 3.x export a function under different names, the entry lists both and the first one found wins.
//! Constants are ones whose values are the same in 1.1.1 and 3.x (checked against both headers);
//! the `SSL_*` flags and modes used here have the same values in AWS-LC and BoringSSL.
//!
//! AWS-LC (5.12) and BoringSSL (API 44) keep most of OpenSSL's names but not all of its ABI:
//! what OpenSSL writes as macros over `SSL_ctrl`/`SSL_CTX_ctrl` they export as functions, and a
//! few shared functions take or return other types (`uint32_t` error codes and options,
//! `size_t`/`ssize_t` lengths). Those live in the table's `bssl_only` section, read from their
//! `include/openssl/*.h`; [`crate::Library`] calls them instead of the OpenSSL-typed entries.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_long, c_uchar, c_uint, c_ulong, c_void, CStr};

use crate::library::Flavour;

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("OpenSSL's opaque `", stringify!($name), "`.")]
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    SSL,
    SSL_CTX,
    SSL_METHOD,
    SSL_CIPHER,
    SSL_SESSION,
    BIO,
    BIO_METHOD,
    EVP_PKEY,
    EVP_PKEY_CTX,
    EVP_MD,
    EC_KEY,
    EC_GROUP,
    X509,
    X509_NAME,
    X509_EXTENSION,
    ASN1_INTEGER,
    ASN1_TIME,
    X509_STORE_CTX,
    ENGINE,
);

/// `SSL_CTX_set_keylog_callback`'s callback type.
pub type KeylogCallback = unsafe extern "C" fn(ssl: *const SSL, line: *const c_char);
/// `SSL_CTX_set_verify`'s callback type.
pub type VerifyCallback = unsafe extern "C" fn(ok: c_int, store: *mut X509_STORE_CTX) -> c_int;
/// `SSL_CTX_set_info_callback`'s callback type.
pub type InfoCallback = unsafe extern "C" fn(ssl: *const SSL, where_: c_int, ret: c_int);
/// `SSL_CTX_sess_set_new_cb`'s callback type: 1 when it keeps the session's reference.
pub type NewSessionCallback =
    unsafe extern "C" fn(ssl: *mut SSL, session: *mut SSL_SESSION) -> c_int;
/// `SSL_CTX_set_session_ticket_cb`'s generate callback type.
pub type TicketGenerateCallback = unsafe extern "C" fn(ssl: *mut SSL, arg: *mut c_void) -> c_int;
/// `SSL_CTX_set_session_ticket_cb`'s decrypt callback type.
pub type TicketDecryptCallback = unsafe extern "C" fn(
    ssl: *mut SSL,
    session: *mut SSL_SESSION,
    key_name: *const c_uchar,
    key_name_len: usize,
    status: c_int,
    arg: *mut c_void,
) -> c_int;

/// AWS-LC's and BoringSSL's parsed ClientHello (`SSL_CLIENT_HELLO`, `struct
/// ssl_early_callback_ctx` in their ssl.h): only its first field, the connection, is read here;
/// the rest is read through `SSL_early_callback_ctx_extension_get`.
#[repr(C)]
pub struct ClientHelloHead {
    pub ssl: *mut SSL,
}

/// `SSL_CTX_set_select_certificate_cb`'s callback type (AWS-LC, BoringSSL): returns
/// `ssl_select_cert_success` (1) to go on with the handshake.
pub type SelectCertificateCallback = unsafe extern "C" fn(hello: *const ClientHelloHead) -> c_int;

/// `ssl_select_cert_success`.
pub const SSL_SELECT_CERT_SUCCESS: c_int = 1;

/// The TLS extension a TLS 1.2 client offers its session ticket in (RFC 5077).
pub const TLSEXT_TYPE_SESSION_TICKET: u16 = 35;

/// `SSL_set_msg_callback`'s callback type: (write_p, version, content_type, buf, len, ssl, arg).
pub type MsgCallback = unsafe extern "C" fn(
    write_p: c_int,
    version: c_int,
    content_type: c_int,
    buf: *const c_void,
    len: usize,
    ssl: *mut SSL,
    arg: *mut c_void,
);
/// The message callback's content type for a record's 5-byte header.
pub const SSL3_RT_HEADER: c_int = 256;
/// The message callback's content type for a handshake message.
pub const SSL3_RT_HANDSHAKE: c_int = 22;
/// `SSL_set_msg_callback_arg`, a macro over `SSL_ctrl` in OpenSSL.
pub const SSL_CTRL_SET_MSG_CALLBACK_ARG: c_int = 16;

pub const OPENSSL_VERSION: c_int = 0;

pub const SSL_CTRL_MODE: c_int = 33;
pub const SSL_CTRL_SET_READ_AHEAD: c_int = 41;
pub const SSL_CTRL_SET_SESS_CACHE_MODE: c_int = 44;
pub const SSL_CTRL_SET_TLSEXT_HOSTNAME: c_int = 55;
pub const SSL_CTRL_SET_GROUPS_LIST: c_int = 92;
/// 1.1.1's `SSL_get_shared_group`; 3.x has the negotiated-group ctrl instead.
pub const SSL_CTRL_GET_SHARED_GROUP: c_int = 93;
pub const SSL_CTRL_SET_SIGALGS_LIST: c_int = 98;
pub const SSL_CTRL_GET_PEER_SIGNATURE_NID: c_int = 108;
pub const SSL_CTRL_GET_PEER_TMP_KEY: c_int = 109;
pub const SSL_CTRL_SET_MIN_PROTO_VERSION: c_int = 123;
pub const SSL_CTRL_SET_MAX_PROTO_VERSION: c_int = 124;
pub const SSL_CTRL_GET_SIGNATURE_NID: c_int = 132;
pub const SSL_CTRL_GET_TMP_KEY: c_int = 133;
/// 3.0 and later only.
pub const SSL_CTRL_GET_NEGOTIATED_GROUP: c_int = 134;

pub const TLSEXT_NAMETYPE_HOST_NAME: c_long = 0;

pub const SSL_MODE_ENABLE_PARTIAL_WRITE: c_long = 0x1;
pub const SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER: c_long = 0x2;
pub const SSL_MODE_RELEASE_BUFFERS: c_long = 0x10;
pub const SSL_MODE_ASYNC: c_long = 0x100;
/// `ENGINE_set_default`: every kind of method the engine has.
pub const ENGINE_METHOD_ALL: c_uint = 0xffff;
/// `ENGINE_set_default`: EVP_PKEY methods and their ASN.1 methods.
pub const ENGINE_METHOD_PKEY_METHS: c_uint = 0x200;
pub const ENGINE_METHOD_PKEY_ASN1_METHS: c_uint = 0x400;
/// `OPENSSL_init_crypto`: put the dynamic engine (which loads engines from files) in the
/// engine list; 1.1.1's `ENGINE_by_id` finds no engine file without it.
pub const OPENSSL_INIT_ENGINE_DYNAMIC: u64 = 0x400;
/// `OpenSSL_version`: the directory dynamic engines are looked for in ("ENGINESDIR: ...").
pub const OPENSSL_ENGINES_DIR: c_int = 5;

pub const SSL_OP_NO_TICKET: u64 = 1 << 14;
/// Refuse renegotiation (1.1.0h and later): a TLS 1.2 peer asking for it gets a
/// no_renegotiation warning alert and the connection carries on as it was.
pub const SSL_OP_NO_RENEGOTIATION: u64 = 1 << 30;

/// The info callback's `where` bits for an alert we sent.
pub const SSL_CB_WRITE_ALERT: c_int = 0x4000 | 0x08;
/// The alert description that refuses a renegotiation (RFC 5246, 7.2.2).
pub const SSL_AD_NO_RENEGOTIATION: c_int = 100;

/// `SSL_get_state`'s value before the first handshake message was accepted.
pub const TLS_ST_BEFORE: c_int = 0;

pub const SSL_SESS_CACHE_OFF: c_long = 0x0;
pub const SSL_SESS_CACHE_CLIENT: c_long = 0x1;
pub const SSL_SESS_CACHE_SERVER: c_long = 0x2;
pub const SSL_SESS_CACHE_NO_INTERNAL_STORE: c_long = 0x200;

pub const SSL_VERIFY_NONE: c_int = 0;
pub const SSL_VERIFY_PEER: c_int = 1;

pub const SSL_FILETYPE_PEM: c_int = 1;

pub const SSL_SENT_SHUTDOWN: c_int = 1;
pub const SSL_RECEIVED_SHUTDOWN: c_int = 2;

pub const SSL_ERROR_NONE: c_int = 0;
pub const SSL_ERROR_SSL: c_int = 1;
pub const SSL_ERROR_WANT_READ: c_int = 2;
pub const SSL_ERROR_WANT_WRITE: c_int = 3;
pub const SSL_ERROR_WANT_X509_LOOKUP: c_int = 4;
pub const SSL_ERROR_SYSCALL: c_int = 5;
pub const SSL_ERROR_ZERO_RETURN: c_int = 6;
pub const SSL_ERROR_WANT_CONNECT: c_int = 7;
pub const SSL_ERROR_WANT_ACCEPT: c_int = 8;
pub const SSL_ERROR_WANT_ASYNC: c_int = 9;
pub const SSL_ERROR_WANT_ASYNC_JOB: c_int = 10;
pub const SSL_ERROR_WANT_CLIENT_HELLO_CB: c_int = 11;
pub const SSL_ERROR_WANT_RETRY_VERIFY: c_int = 12;

pub const SSL_TICKET_FATAL_ERR_MALLOC: c_int = 0;
pub const SSL_TICKET_FATAL_ERR_OTHER: c_int = 1;
pub const SSL_TICKET_NONE: c_int = 2;
pub const SSL_TICKET_EMPTY: c_int = 3;
pub const SSL_TICKET_NO_DECRYPT: c_int = 4;
pub const SSL_TICKET_SUCCESS: c_int = 5;
pub const SSL_TICKET_SUCCESS_RENEW: c_int = 6;
pub const SSL_TICKET_RETURN_ABORT: c_int = 0;
pub const SSL_TICKET_RETURN_IGNORE: c_int = 1;
pub const SSL_TICKET_RETURN_IGNORE_RENEW: c_int = 2;
pub const SSL_TICKET_RETURN_USE: c_int = 3;
pub const SSL_TICKET_RETURN_USE_RENEW: c_int = 4;

pub const BIO_CTRL_INFO: c_int = 3;

pub const EVP_PKEY_ALG_CTRL: c_int = 0x1000;
pub const EVP_PKEY_CTRL_EC_PARAMGEN_CURVE_NID: c_int = EVP_PKEY_ALG_CTRL + 1;
pub const EVP_PKEY_CTRL_RSA_KEYGEN_BITS: c_int = EVP_PKEY_ALG_CTRL + 3;
pub const EVP_PKEY_OP_PARAMGEN: c_int = 1 << 1;
pub const EVP_PKEY_OP_KEYGEN: c_int = 1 << 2;

pub const MBSTRING_ASC: c_int = 0x1001;

pub const NID_RSA_ENCRYPTION: c_int = 6;
pub const NID_DH_KEY_AGREEMENT: c_int = 28;
pub const NID_SUBJECT_ALT_NAME: c_int = 85;
pub const NID_EC_PUBLIC_KEY: c_int = 408;
pub const NID_PRIME256V1: c_int = 415;
pub const NID_SHA1: c_int = 64;
pub const NID_SHA256: c_int = 672;
pub const NID_SHA384: c_int = 673;
pub const NID_SHA512: c_int = 674;
pub const NID_SECP384R1: c_int = 715;
pub const NID_SECP521R1: c_int = 716;
pub const NID_RSASSA_PSS: c_int = 912;
pub const NID_X25519: c_int = 1034;
pub const NID_X448: c_int = 1035;
pub const NID_ED25519: c_int = 1087;
pub const NID_ED448: c_int = 1088;
pub const NID_KX_ECDHE: c_int = 1038;
/// AWS-LC's and BoringSSL's numbers for the objects OpenSSL added after they forked (X25519,
/// Ed25519 and the like are numbered differently there; the others above are the same).
pub const BSSL_NID_ED25519: c_int = 949;
pub const BSSL_NID_ED448: c_int = 960;
/// 3.5 and later: ML-DSA (FIPS 204) keys and signatures.
pub const NID_ML_DSA_44: c_int = 1457;
pub const NID_ML_DSA_65: c_int = 1458;
pub const NID_ML_DSA_87: c_int = 1459;

/// Which of the two libraries a symbol comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Crypto,
    Ssl,
}

/// A symbol the library did not have.
#[derive(Debug)]
pub struct MissingSymbol {
    pub names: &'static [&'static str],
    pub which: Which,
}

/// Looks a symbol up by its names, first one found wins.
///
/// # Safety
/// `handle` must be a live handle from `dlopen`.
unsafe fn lookup(handle: *mut c_void, names: &[&str]) -> *mut c_void {
    for name in names {
        let Ok(cname) = std::ffi::CString::new(*name) else {
            continue;
        };
        // SAFETY: the caller guarantees `handle` came from dlopen and is still open; `cname` is
        // a NUL-terminated string that outlives the call.
        let p = unsafe { libc::dlsym(handle, cname.as_ptr()) };
        if !p.is_null() {
            return p;
        }
    }
    std::ptr::null_mut()
}

macro_rules! api {
    (
        required {
            $( $which:ident $name:ident $([$($alt:literal),+])? : fn($($arg:ty),*) -> $ret:ty; )*
        }
        optional {
            $( $owhich:ident $oname:ident : fn($($oarg:ty),*) -> $oret:ty; )*
        }
        openssl_only {
            $( $xwhich:ident $xname:ident : fn($($xarg:ty),*) -> $xret:ty; )*
        }
        bssl_only {
            $( $bwhich:ident $bname:ident $(= $bsym:literal)? : fn($($barg:ty),*) -> $bret:ty; )*
        }
    ) => {
        /// Every function tlsscope calls, resolved from the loaded library. Optional entries
        /// are `None` where the library does not have them; `openssl_only` entries are kept for
        /// OpenSSL alone and `bssl_only` ones for AWS-LC and BoringSSL alone (see
        /// [`Api::keep_flavour`]).
        pub struct Api {
            $( pub $name: unsafe extern "C" fn($($arg),*) -> $ret, )*
            $( pub $oname: Option<unsafe extern "C" fn($($oarg),*) -> $oret>, )*
            $( pub $xname: Option<unsafe extern "C" fn($($xarg),*) -> $xret>, )*
            $( pub $bname: Option<unsafe extern "C" fn($($barg),*) -> $bret>, )*
        }

        impl Api {
            /// Offers every required entry, by its first name, to `swap`, which may return
            /// another address for it (see `crate::inproc`).
            ///
            /// # Safety
            /// An address `swap` returns must be a function with the same C signature as the
            /// entry it replaces, callable for as long as the table is used.
            pub(crate) unsafe fn swap_entries(
                &mut self,
                mut swap: impl FnMut(&'static str, *mut c_void) -> Option<*mut c_void>,
            ) {
                $(
                    if let Some(p) = swap(stringify!($name), self.$name as *mut c_void) {
                        // SAFETY: the caller guarantees `p` has this entry's signature.
                        self.$name = unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                        };
                    }
                )*
            }

            /// Resolves every entry, failing on the first required symbol that is missing.
            ///
            /// # Safety
            /// Both handles must be live `dlopen` handles of a libcrypto and a libssl of the same
            /// OpenSSL build, kept open for as long as the returned table is used.
            pub unsafe fn resolve(
                crypto: *mut c_void,
                ssl: *mut c_void,
            ) -> Result<Api, MissingSymbol> {
                let handle = |which: Which| match which {
                    Which::Crypto => crypto,
                    Which::Ssl => ssl,
                };
                Ok(Api {
                    $(
                        $name: {
                            const NAMES: &[&str] = &[stringify!($name) $($(, $alt)+)?];
                            // SAFETY: the caller guarantees the handles are live.
                            let p = unsafe { lookup(handle(Which::$which), NAMES) };
                            if p.is_null() {
                                return Err(MissingSymbol { names: NAMES, which: Which::$which });
                            }
                            // SAFETY: the symbol has this C signature in every OpenSSL version
                            // the table names it for (checked against the 1.1.1 and 3.0 headers);
                            // where AWS-LC's or BoringSSL's differs, the `bssl_only` entry of the
                            // same symbol is called on those instead.
                            unsafe {
                                std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p)
                            }
                        },
                    )*
                    $(
                        $oname: {
                            // SAFETY: the caller guarantees the handles are live.
                            let p = unsafe { lookup(handle(Which::$owhich), &[stringify!($oname)]) };
                            if p.is_null() {
                                None
                            } else {
                                // SAFETY: as above, the signature is OpenSSL's own.
                                Some(unsafe {
                                    std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($oarg),*) -> $oret>(p)
                                })
                            }
                        },
                    )*
                    $(
                        $xname: {
                            // SAFETY: the caller guarantees the handles are live.
                            let p = unsafe { lookup(handle(Which::$xwhich), &[stringify!($xname)]) };
                            // SAFETY: the signature is OpenSSL's own; the entry is dropped for
                            // other flavours by `keep_flavour`.
                            (!p.is_null()).then(|| unsafe {
                                std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($xarg),*) -> $xret>(p)
                            })
                        },
                    )*
                    $(
                        $bname: {
                            const NAME: &str = bssl_symbol!($bname $(, $bsym)?);
                            // SAFETY: the caller guarantees the handles are live.
                            let p = unsafe { lookup(handle(Which::$bwhich), &[NAME]) };
                            // SAFETY: the signature is the one BoringSSL's and AWS-LC's headers
                            // declare; the entry is dropped for OpenSSL by `keep_flavour`.
                            (!p.is_null()).then(|| unsafe {
                                std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($barg),*) -> $bret>(p)
                            })
                        },
                    )*
                })
            }

            /// Drops the entries that do not belong to `flavour`: OpenSSL's `*_ctrl` entry
            /// points take OpenSSL's command numbers (AWS-LC's differ), and a BoringSSL-family
            /// function of the same name as an OpenSSL macro must never be called on OpenSSL.
            pub fn keep_flavour(&mut self, flavour: Flavour) {
                if flavour.is_openssl() {
                    $( self.$bname = None; )*
                } else {
                    $( self.$xname = None; )*
                }
            }
        }
    };
}

/// The symbol of a `bssl_only` entry: its own name, or the one given after `=`.
macro_rules! bssl_symbol {
    ($name:ident) => {
        stringify!($name)
    };
    ($name:ident, $sym:literal) => {
        $sym
    };
}

api! {
    required {
        Crypto OpenSSL_version_num: fn() -> c_ulong;
        Crypto OpenSSL_version: fn(c_int) -> *const c_char;
        Crypto ERR_get_error: fn() -> c_ulong;
        Crypto ERR_error_string_n: fn(c_ulong, *mut c_char, usize) -> ();
        Crypto ERR_clear_error: fn() -> ();
        Crypto BIO_new: fn(*const BIO_METHOD) -> *mut BIO;
        Crypto BIO_s_mem: fn() -> *const BIO_METHOD;
        Crypto BIO_new_mem_buf: fn(*const c_void, c_int) -> *mut BIO;
        Crypto BIO_free: fn(*mut BIO) -> c_int;
        Crypto BIO_ctrl: fn(*mut BIO, c_int, c_long, *mut c_void) -> c_long;
        Crypto BIO_new_bio_pair: fn(*mut *mut BIO, usize, *mut *mut BIO, usize) -> c_int;
        Crypto PEM_read_bio_PrivateKey: fn(*mut BIO, *mut *mut EVP_PKEY, *mut c_void, *mut c_void) -> *mut EVP_PKEY;
        Crypto PEM_read_bio_X509: fn(*mut BIO, *mut *mut X509, *mut c_void, *mut c_void) -> *mut X509;
        Crypto PEM_write_bio_X509: fn(*mut BIO, *mut X509) -> c_int;
        Crypto d2i_X509: fn(*mut *mut X509, *mut *const c_uchar, c_long) -> *mut X509;
        Crypto PEM_write_bio_PrivateKey: fn(*mut BIO, *mut EVP_PKEY, *const c_void, *const c_uchar, c_int, *mut c_void, *mut c_void) -> c_int;
        Crypto EVP_PKEY_CTX_new_id: fn(c_int, *mut c_void) -> *mut EVP_PKEY_CTX;
        Crypto EVP_PKEY_CTX_free: fn(*mut EVP_PKEY_CTX) -> ();
        Crypto EVP_PKEY_keygen_init: fn(*mut EVP_PKEY_CTX) -> c_int;
        Crypto EVP_PKEY_keygen: fn(*mut EVP_PKEY_CTX, *mut *mut EVP_PKEY) -> c_int;
        Crypto EVP_PKEY_free: fn(*mut EVP_PKEY) -> ();
        Crypto EVP_PKEY_get_id ["EVP_PKEY_id"]: fn(*const EVP_PKEY) -> c_int;
        Crypto EVP_PKEY_get_bits ["EVP_PKEY_bits"]: fn(*const EVP_PKEY) -> c_int;
        Crypto EVP_sha256: fn() -> *const EVP_MD;
        Crypto X509_new: fn() -> *mut X509;
        Crypto X509_free: fn(*mut X509) -> ();
        Crypto X509_set_version: fn(*mut X509, c_long) -> c_int;
        Crypto X509_get_serialNumber: fn(*mut X509) -> *mut ASN1_INTEGER;
        Crypto ASN1_INTEGER_set: fn(*mut ASN1_INTEGER, c_long) -> c_int;
        Crypto X509_gmtime_adj: fn(*mut ASN1_TIME, c_long) -> *mut ASN1_TIME;
        Crypto X509_getm_notBefore: fn(*const X509) -> *mut ASN1_TIME;
        Crypto X509_getm_notAfter: fn(*const X509) -> *mut ASN1_TIME;
        Crypto X509_set_pubkey: fn(*mut X509, *mut EVP_PKEY) -> c_int;
        Crypto X509_get_subject_name: fn(*const X509) -> *mut X509_NAME;
        Crypto X509_set_issuer_name: fn(*mut X509, *const X509_NAME) -> c_int;
        Crypto X509_NAME_add_entry_by_txt: fn(*mut X509_NAME, *const c_char, c_int, *const c_uchar, c_int, c_int, c_int) -> c_int;
        Crypto X509_sign: fn(*mut X509, *mut EVP_PKEY, *const EVP_MD) -> c_int;
        Crypto X509V3_EXT_conf_nid ["X509V3_EXT_nconf_nid"]: fn(*mut c_void, *mut c_void, c_int, *const c_char) -> *mut X509_EXTENSION;
        Crypto X509_add_ext: fn(*mut X509, *mut X509_EXTENSION, c_int) -> c_int;
        Crypto X509_EXTENSION_free: fn(*mut X509_EXTENSION) -> ();
        Crypto X509_get0_pubkey: fn(*const X509) -> *mut EVP_PKEY;
        Crypto X509_verify_cert_error_string: fn(c_long) -> *const c_char;
        Crypto OBJ_nid2sn: fn(c_int) -> *const c_char;

        Ssl TLS_client_method: fn() -> *const SSL_METHOD;
        Ssl TLS_server_method: fn() -> *const SSL_METHOD;
        Ssl SSL_CTX_new: fn(*const SSL_METHOD) -> *mut SSL_CTX;
        Ssl SSL_CTX_free: fn(*mut SSL_CTX) -> ();
        Ssl SSL_CTX_set_options: fn(*mut SSL_CTX, u64) -> u64;
        Ssl SSL_CTX_set_cipher_list: fn(*mut SSL_CTX, *const c_char) -> c_int;
        Ssl SSL_CTX_use_certificate: fn(*mut SSL_CTX, *mut X509) -> c_int;
        Ssl SSL_CTX_use_PrivateKey: fn(*mut SSL_CTX, *mut EVP_PKEY) -> c_int;
        Ssl SSL_CTX_use_certificate_chain_file: fn(*mut SSL_CTX, *const c_char) -> c_int;
        Ssl SSL_CTX_use_PrivateKey_file: fn(*mut SSL_CTX, *const c_char, c_int) -> c_int;
        Ssl SSL_CTX_check_private_key: fn(*const SSL_CTX) -> c_int;
        Ssl SSL_CTX_set_num_tickets: fn(*mut SSL_CTX, usize) -> c_int;
        Ssl SSL_CTX_set_keylog_callback: fn(*mut SSL_CTX, Option<KeylogCallback>) -> ();
        Ssl SSL_CTX_set_info_callback: fn(*mut SSL_CTX, Option<InfoCallback>) -> ();
        Ssl SSL_CTX_set_session_id_context: fn(*mut SSL_CTX, *const c_uchar, c_uint) -> c_int;
        Ssl SSL_CTX_set_verify: fn(*mut SSL_CTX, c_int, Option<VerifyCallback>) -> ();
        Ssl SSL_CTX_load_verify_locations: fn(*mut SSL_CTX, *const c_char, *const c_char) -> c_int;
        Ssl SSL_CTX_set_ex_data: fn(*mut SSL_CTX, c_int, *mut c_void) -> c_int;
        Ssl SSL_CTX_get_ex_data: fn(*const SSL_CTX, c_int) -> *mut c_void;
        Ssl SSL_new: fn(*mut SSL_CTX) -> *mut SSL;
        Ssl SSL_free: fn(*mut SSL) -> ();
        Ssl SSL_set_fd: fn(*mut SSL, c_int) -> c_int;
        Ssl SSL_set_bio: fn(*mut SSL, *mut BIO, *mut BIO) -> ();
        Ssl SSL_set_connect_state: fn(*mut SSL) -> ();
        Ssl SSL_set_accept_state: fn(*mut SSL) -> ();
        Ssl SSL_do_handshake: fn(*mut SSL) -> c_int;
        Ssl SSL_read: fn(*mut SSL, *mut c_void, c_int) -> c_int;
        Ssl SSL_write: fn(*mut SSL, *const c_void, c_int) -> c_int;
        Ssl SSL_get_error: fn(*const SSL, c_int) -> c_int;
        Ssl SSL_shutdown: fn(*mut SSL) -> c_int;
        Ssl SSL_set_shutdown: fn(*mut SSL, c_int) -> ();
        Ssl SSL_get_version: fn(*const SSL) -> *const c_char;
        Ssl SSL_version: fn(*const SSL) -> c_int;
        Ssl SSL_get_current_cipher: fn(*const SSL) -> *const SSL_CIPHER;
        Ssl SSL_CIPHER_get_name: fn(*const SSL_CIPHER) -> *const c_char;
        Ssl SSL_CIPHER_standard_name: fn(*const SSL_CIPHER) -> *const c_char;
        Ssl SSL_CIPHER_get_kx_nid: fn(*const SSL_CIPHER) -> c_int;
        Ssl SSL_session_reused: fn(*const SSL) -> c_int;
        Ssl SSL_get_session: fn(*const SSL) -> *mut SSL_SESSION;
        Ssl SSL_get1_session: fn(*mut SSL) -> *mut SSL_SESSION;
        Ssl SSL_set_session: fn(*mut SSL, *mut SSL_SESSION) -> c_int;
        Ssl SSL_SESSION_free: fn(*mut SSL_SESSION) -> ();
        Ssl SSL_SESSION_is_resumable: fn(*const SSL_SESSION) -> c_int;
        Ssl SSL_SESSION_has_ticket: fn(*const SSL_SESSION) -> c_int;
        Ssl SSL_get_SSL_CTX: fn(*const SSL) -> *mut SSL_CTX;
        Ssl SSL_set_ex_data: fn(*mut SSL, c_int, *mut c_void) -> c_int;
        Ssl SSL_get_ex_data: fn(*const SSL, c_int) -> *mut c_void;
        Ssl SSL_get_verify_result: fn(*const SSL) -> c_long;
        Ssl SSL_set1_host: fn(*mut SSL, *const c_char) -> c_int;
        Ssl SSL_get_certificate: fn(*const SSL) -> *mut X509;
        Ssl SSL_get1_peer_certificate ["SSL_get_peer_certificate"]: fn(*const SSL) -> *mut X509;
        Ssl SSL_pending: fn(*const SSL) -> c_int;
    }
    optional {
        // Missing from BoringSSL and/or AWS-LC (each has its own way, or none).
        Crypto EVP_PKEY_CTX_ctrl: fn(*mut EVP_PKEY_CTX, c_int, c_int, c_int, c_int, *mut c_void) -> c_int;
        Ssl SSL_CTX_set_ciphersuites: fn(*mut SSL_CTX, *const c_char) -> c_int;
        Ssl SSL_CTX_set_session_ticket_cb: fn(*mut SSL_CTX, Option<TicketGenerateCallback>, Option<TicketDecryptCallback>, *mut c_void) -> c_int;
        Ssl SSL_get_peer_signature_type_nid: fn(*const SSL, *mut c_int) -> c_int;
        Ssl SSL_get_state: fn(*const SSL) -> c_int;
        Crypto EVP_PKEY_CTX_set_rsa_keygen_bits: fn(*mut EVP_PKEY_CTX, c_int) -> c_int;
        Crypto EVP_PKEY_CTX_set_ec_paramgen_curve_nid: fn(*mut EVP_PKEY_CTX, c_int) -> c_int;
        Ssl SSL_get_signature_type_nid: fn(*const SSL, *mut c_int) -> c_int;
        Ssl SSL_group_to_name: fn(*mut SSL, c_int) -> *const c_char;
        Crypto EVP_PKEY_get0_EC_KEY: fn(*const EVP_PKEY) -> *const EC_KEY;
        Crypto EC_KEY_get0_group: fn(*const EC_KEY) -> *const EC_GROUP;
        Crypto EC_GROUP_get_curve_name: fn(*const EC_GROUP) -> c_int;
        // 3.0+: keys by algorithm name (ML-DSA from 3.5), for kinds without a legacy NID.
        Crypto EVP_PKEY_CTX_new_from_name: fn(*mut c_void, *const c_char, *const c_char) -> *mut EVP_PKEY_CTX;
        Crypto EVP_PKEY_get0_type_name: fn(*const EVP_PKEY) -> *const c_char;
        // Engines (absent from builds without them) and async jobs.
        Crypto ENGINE_by_id: fn(*const c_char) -> *mut ENGINE;
        Crypto ENGINE_ctrl_cmd_string: fn(*mut ENGINE, *const c_char, *const c_char, c_int) -> c_int;
        Crypto ENGINE_init: fn(*mut ENGINE) -> c_int;
        Crypto ENGINE_finish: fn(*mut ENGINE) -> c_int;
        Crypto ENGINE_free: fn(*mut ENGINE) -> c_int;
        Crypto ENGINE_set_default: fn(*mut ENGINE, c_uint) -> c_int;
        Crypto ENGINE_get_id: fn(*const ENGINE) -> *const c_char;
        Crypto OPENSSL_init_crypto: fn(u64, *const c_void) -> c_int;
        Ssl SSL_get_changed_async_fds: fn(*mut SSL, *mut c_int, *mut usize, *mut c_int, *mut usize) -> c_int;
        Ssl SSL_get_all_async_fds: fn(*mut SSL, *mut c_int, *mut usize) -> c_int;
        // The message callback (wire figures); the arg setter is a function in AWS-LC and
        // BoringSSL, an SSL_ctrl in OpenSSL.
        Ssl SSL_set_msg_callback: fn(*mut SSL, Option<MsgCallback>) -> ();
        Ssl SSL_set_msg_callback_arg: fn(*mut SSL, *mut c_void) -> ();
    }
    openssl_only {
        // OpenSSL's macros (SSL_CTX_set_mode, SSL_set_tlsext_host_name, ...) are these with a
        // command number; AWS-LC numbers its commands differently and BoringSSL has none.
        Ssl SSL_CTX_ctrl: fn(*mut SSL_CTX, c_int, c_long, *mut c_void) -> c_long;
        Ssl SSL_ctrl: fn(*mut SSL, c_int, c_long, *mut c_void) -> c_long;
    }
    bssl_only {
        // What OpenSSL writes as *_ctrl macros, BoringSSL and AWS-LC export as functions.
        Ssl SSL_CTX_set_mode: fn(*mut SSL_CTX, u32) -> u32;
        Ssl SSL_CTX_set_read_ahead: fn(*mut SSL_CTX, c_int) -> c_int;
        Ssl SSL_CTX_set_session_cache_mode: fn(*mut SSL_CTX, c_int) -> c_int;
        Ssl SSL_CTX_set_min_proto_version: fn(*mut SSL_CTX, u16) -> c_int;
        Ssl SSL_CTX_set_max_proto_version: fn(*mut SSL_CTX, u16) -> c_int;
        Ssl SSL_CTX_set1_groups_list: fn(*mut SSL_CTX, *const c_char) -> c_int;
        Ssl SSL_CTX_set1_sigalgs_list: fn(*mut SSL_CTX, *const c_char) -> c_int;
        Ssl SSL_set_tlsext_host_name: fn(*mut SSL, *const c_char) -> c_int;
        Ssl SSL_get_negotiated_group: fn(*const SSL) -> c_int;
        Ssl SSL_get_group_id: fn(*const SSL) -> u16;
        Ssl SSL_get_group_name: fn(u16) -> *const c_char;
        Ssl SSL_get_peer_signature_algorithm: fn(*const SSL) -> u16;
        Ssl SSL_get_signature_algorithm_name: fn(u16, c_int) -> *const c_char;
        Ssl SSL_in_init: fn(*const SSL) -> c_int;
        // A TLS 1.3 client's ticketed sessions arrive only through this callback.
        Ssl SSL_CTX_sess_set_new_cb: fn(*mut SSL_CTX, Option<NewSessionCallback>) -> ();
        // A server's look at the ClientHello: whether a TLS 1.2 client offered a ticket (they
        // have no ticket-decryption hook to say a resumption was by ticket).
        Ssl SSL_CTX_set_select_certificate_cb: fn(*mut SSL_CTX, Option<SelectCertificateCallback>) -> ();
        Ssl SSL_early_callback_ctx_extension_get: fn(*const ClientHelloHead, u16, *mut *const u8, *mut usize) -> c_int;
        Ssl SSL_get_ex_new_index: fn(c_long, *mut c_void, *mut c_void, *mut c_void, *mut c_void) -> c_int;
        Ssl SSL_SESSION_up_ref: fn(*mut SSL_SESSION) -> c_int;
        // The same symbols as required entries above, typed as these libraries declare them
        // where that differs from OpenSSL (32-bit error codes and options, size_t and
        // ssize_t lengths): called instead of those entries on these flavours.
        Crypto ERR_get_error_bssl = "ERR_get_error": fn() -> u32;
        Crypto ERR_error_string_n_bssl = "ERR_error_string_n": fn(u32, *mut c_char, usize) -> *mut c_char;
        Crypto BIO_new_mem_buf_bssl = "BIO_new_mem_buf": fn(*const c_void, isize) -> *mut BIO;
        Crypto X509_NAME_add_entry_by_txt_bssl = "X509_NAME_add_entry_by_txt": fn(*mut X509_NAME, *const c_char, c_int, *const c_uchar, isize, c_int, c_int) -> c_int;
        Ssl SSL_CTX_set_options_bssl = "SSL_CTX_set_options": fn(*mut SSL_CTX, u32) -> u32;
        Ssl SSL_CTX_set_session_id_context_bssl = "SSL_CTX_set_session_id_context": fn(*mut SSL_CTX, *const c_uchar, usize) -> c_int;
    }
}

/// Copies a C string owned by OpenSSL; `None` for a null pointer.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string valid for the duration of the call.
pub unsafe fn string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's guarantee.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
