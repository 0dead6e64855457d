//! The functions tlsscope traces, per library family, with how to read each one's return value.

use std::fmt;
use std::str::FromStr;

use crate::maps::LibraryKind;
use crate::skel::latency::types::ts_semantics;

/// Groups of probes, chosen with `--probes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Handshake calls: `SSL_do_handshake`, `SSL_connect`, `SSL_accept`, `gnutls_handshake`, ...
    Handshake,
    /// Record I/O: `SSL_read(_ex)`, `SSL_write(_ex)`, `SSL_peek(_ex)`, `SSL_shutdown`, ...
    Io,
    /// libcrypto: signing, key exchange, verification.
    Crypto,
}

impl Group {
    pub const ALL: [Group; 3] = [Group::Handshake, Group::Io, Group::Crypto];

    pub fn name(self) -> &'static str {
        match self {
            Group::Handshake => "handshake",
            Group::Io => "io",
            Group::Crypto => "crypto",
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of groups parsed from `handshake,io,crypto` or `all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Groups(u8);

impl Groups {
    pub fn all() -> Groups {
        Groups(0b111)
    }

    pub fn only(group: Group) -> Groups {
        Groups(1 << group as u8)
    }

    pub fn contains(self, group: Group) -> bool {
        self.0 & (1 << group as u8) != 0
    }

    pub fn with(self, group: Group) -> Groups {
        Groups(self.0 | (1 << group as u8))
    }
}

impl FromStr for Groups {
    type Err = String;

    fn from_str(s: &str) -> Result<Groups, String> {
        let mut groups = Groups(0);
        for word in s.split(',').map(str::trim) {
            groups = match word {
                "all" => Groups::all(),
                "handshake" => groups.with(Group::Handshake),
                "io" => groups.with(Group::Io),
                "crypto" => groups.with(Group::Crypto),
                other => {
                    return Err(format!(
                        "unknown probe group '{other}' (choose from handshake, io, crypto, all)"
                    ))
                }
            };
        }
        Ok(groups)
    }
}

/// How a function's return value says how the call ended: `enum ts_semantics` in
/// `bpf/latency.h`, numbered as the program numbers it; the number travels in the attach cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Semantics {
    /// OpenSSL I/O and handshake calls: > 0 success; <= 0 settled by `SSL_get_error`.
    OpensslIo = ts_semantics::TS_SEM_OSSL_IO.0 as u8,
    /// `SSL_shutdown`: >= 0 success; < 0 settled by `SSL_get_error`.
    OpensslShutdown = ts_semantics::TS_SEM_OSSL_SHUTDOWN.0 as u8,
    /// `SSL_get_error`: settles the call before it; not reported itself.
    OpensslGetError = ts_semantics::TS_SEM_OSSL_GET_ERROR.0 as u8,
    /// > 0 success, <= 0 failure (libcrypto's EVP functions and most internals).
    Positive = ts_semantics::TS_SEM_POSITIVE.0 as u8,
    /// GnuTLS: >= 0 success, -28/-52 retry, other negatives failure.
    GnuTls = ts_semantics::TS_SEM_GNUTLS.0 as u8,
    /// NSS `SECStatus`: 0 success, -1 retry or failure (unknown without `PR_GetError`).
    NssStatus = ts_semantics::TS_SEM_NSS_STATUS.0 as u8,
    /// NSPR `PR_Read`/`PR_Write`: >= 0 success, -1 retry or failure (unknown).
    NsprIo = ts_semantics::TS_SEM_NSPR_IO.0 as u8,
    /// >= 0 success (a length), < 0 failure.
    NonNegative = ts_semantics::TS_SEM_NONNEGATIVE.0 as u8,
}

/// One traceable function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// The name reported (the first of `symbols` for functions renamed between versions).
    pub name: &'static str,
    /// Symbol names to look for, in order: later ones are older or newer spellings.
    pub symbols: &'static [&'static str],
    pub library: LibraryKind,
    pub group: Group,
    pub semantics: Semantics,
    /// Internal: only in libraries that kept their full symbol table.
    pub internal: bool,
}

const fn f(
    name: &'static str,
    symbols: &'static [&'static str],
    library: LibraryKind,
    group: Group,
    semantics: Semantics,
    internal: bool,
) -> Function {
    Function {
        name,
        symbols,
        library,
        group,
        semantics,
        internal,
    }
}

use Group::{Crypto, Handshake, Io};
use LibraryKind::{GnuTls, Nspr, Nss, OpensslCrypto, OpensslSsl};
use Semantics::*;

/// Every function tlsscope knows. The index of a function here is its id in the BPF maps.
pub const CATALOG: &[Function] = &[
    f(
        "SSL_do_handshake",
        &["SSL_do_handshake"],
        OpensslSsl,
        Handshake,
        OpensslIo,
        false,
    ),
    f(
        "SSL_connect",
        &["SSL_connect"],
        OpensslSsl,
        Handshake,
        OpensslIo,
        false,
    ),
    f(
        "SSL_accept",
        &["SSL_accept"],
        OpensslSsl,
        Handshake,
        OpensslIo,
        false,
    ),
    f("SSL_read", &["SSL_read"], OpensslSsl, Io, OpensslIo, false),
    f(
        "SSL_read_ex",
        &["SSL_read_ex"],
        OpensslSsl,
        Io,
        OpensslIo,
        false,
    ),
    f("SSL_peek", &["SSL_peek"], OpensslSsl, Io, OpensslIo, false),
    f(
        "SSL_peek_ex",
        &["SSL_peek_ex"],
        OpensslSsl,
        Io,
        OpensslIo,
        false,
    ),
    f(
        "SSL_write",
        &["SSL_write"],
        OpensslSsl,
        Io,
        OpensslIo,
        false,
    ),
    f(
        "SSL_write_ex",
        &["SSL_write_ex"],
        OpensslSsl,
        Io,
        OpensslIo,
        false,
    ),
    f(
        "SSL_shutdown",
        &["SSL_shutdown"],
        OpensslSsl,
        Io,
        OpensslShutdown,
        false,
    ),
    f(
        "EVP_DigestSign",
        &["EVP_DigestSign"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_DigestSignFinal",
        &["EVP_DigestSignFinal"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_DigestVerify",
        &["EVP_DigestVerify"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_DigestVerifyFinal",
        &["EVP_DigestVerifyFinal"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_PKEY_sign",
        &["EVP_PKEY_sign"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_PKEY_derive",
        &["EVP_PKEY_derive"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_PKEY_decrypt",
        &["EVP_PKEY_decrypt"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "EVP_PKEY_keygen",
        &["EVP_PKEY_keygen"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "X509_verify_cert",
        &["X509_verify_cert"],
        OpensslCrypto,
        Crypto,
        Positive,
        false,
    ),
    f(
        "rsa_ossl_private_decrypt",
        &["rsa_ossl_private_decrypt"],
        OpensslCrypto,
        Crypto,
        NonNegative,
        true,
    ),
    f(
        "rsa_ossl_private_encrypt",
        &["rsa_ossl_private_encrypt"],
        OpensslCrypto,
        Crypto,
        NonNegative,
        true,
    ),
    f(
        "ossl_ecdsa_sign",
        &["ossl_ecdsa_sign"],
        OpensslCrypto,
        Crypto,
        Positive,
        true,
    ),
    f(
        "ossl_ecdh_compute_key",
        &["ossl_ecdh_compute_key"],
        OpensslCrypto,
        Crypto,
        Positive,
        true,
    ),
    f(
        "ossl_x25519",
        &["ossl_x25519", "X25519"],
        OpensslCrypto,
        Crypto,
        Positive,
        true,
    ),
    f(
        "gnutls_handshake",
        &["gnutls_handshake"],
        GnuTls,
        Handshake,
        Semantics::GnuTls,
        false,
    ),
    f(
        "gnutls_record_send",
        &["gnutls_record_send"],
        GnuTls,
        Io,
        Semantics::GnuTls,
        false,
    ),
    f(
        "gnutls_record_recv",
        &["gnutls_record_recv"],
        GnuTls,
        Io,
        Semantics::GnuTls,
        false,
    ),
    f(
        "SSL_ForceHandshake",
        &["SSL_ForceHandshake"],
        Nss,
        Handshake,
        NssStatus,
        false,
    ),
    f("PR_Read", &["PR_Read"], Nspr, Io, NsprIo, false),
    f("PR_Write", &["PR_Write"], Nspr, Io, NsprIo, false),
    // Not reported: settles OpenSSL calls that returned <= 0 (attached with any OpenSSL probe).
    f(
        "SSL_get_error",
        &["SSL_get_error"],
        OpensslSsl,
        Io,
        OpensslGetError,
        false,
    ),
];

/// The catalog id of `SSL_get_error`.
pub fn get_error_id() -> u16 {
    id_of("SSL_get_error").expect("SSL_get_error is in the catalog")
}

/// A function's id (its index in [`CATALOG`]) by reported name.
pub fn id_of(name: &str) -> Option<u16> {
    CATALOG
        .iter()
        .position(|f| f.name == name)
        .and_then(|i| u16::try_from(i).ok())
}

/// The function with id `id`.
pub fn function(id: u16) -> Option<&'static Function> {
    CATALOG.get(usize::from(id))
}

/// The attach cookie for function `id`: its id and semantics, as `bpf/latency.h` reads them.
pub fn cookie(id: u16, semantics: Semantics) -> u64 {
    crate::loader::cookie(id, &[semantics as u8])
}

/// The functions of `library` in `groups`. With `exact`, `SSL_get_error` comes with any
/// OpenSSL libssl function whose <= 0 returns it settles.
pub fn functions_for(
    library: LibraryKind,
    groups: Groups,
    exact: bool,
) -> Vec<(u16, &'static Function)> {
    let mut out: Vec<(u16, &'static Function)> = CATALOG
        .iter()
        .enumerate()
        .filter(|(_, f)| f.library == library && f.semantics != OpensslGetError)
        .filter(|(_, f)| groups.contains(f.group))
        .map(|(i, f)| (i as u16, f))
        .collect();
    let settles = |f: &Function| matches!(f.semantics, OpensslIo | OpensslShutdown);
    if exact && out.iter().any(|(_, f)| settles(f)) {
        out.push((get_error_id(), &CATALOG[usize::from(get_error_id())]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse() {
        let g: Groups = "handshake,crypto".parse().unwrap();
        assert!(g.contains(Group::Handshake) && g.contains(Group::Crypto));
        assert!(!g.contains(Group::Io));
        assert_eq!("all".parse::<Groups>().unwrap(), Groups::all());
        let err = "handshake,tls".parse::<Groups>().unwrap_err();
        assert!(err.contains("'tls'"), "{err}");
    }

    #[test]
    fn names_are_unique_and_ids_fit_the_cookie() {
        for (i, a) in CATALOG.iter().enumerate() {
            assert!(
                CATALOG[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
        assert!(CATALOG.len() < usize::from(u16::MAX));
        let c = cookie(7, Semantics::GnuTls);
        assert_eq!((c & 0xffff, (c >> 16) & 0xff), (7, 4));
    }

    #[test]
    fn semantics_are_numbered_as_the_program_numbers_them() {
        // `as u8` in the discriminants would cut a number over 255 without a word.
        for (ours, theirs) in [
            (OpensslIo, ts_semantics::TS_SEM_OSSL_IO),
            (OpensslShutdown, ts_semantics::TS_SEM_OSSL_SHUTDOWN),
            (OpensslGetError, ts_semantics::TS_SEM_OSSL_GET_ERROR),
            (Positive, ts_semantics::TS_SEM_POSITIVE),
            (Semantics::GnuTls, ts_semantics::TS_SEM_GNUTLS),
            (NssStatus, ts_semantics::TS_SEM_NSS_STATUS),
            (NsprIo, ts_semantics::TS_SEM_NSPR_IO),
            (NonNegative, ts_semantics::TS_SEM_NONNEGATIVE),
        ] {
            assert_eq!(u32::from(ours as u8), theirs.0, "{ours:?}");
        }
    }

    #[test]
    fn get_error_comes_with_openssl_io_only() {
        let io = functions_for(LibraryKind::OpensslSsl, Groups::only(Group::Io), true);
        assert!(io.iter().any(|(_, f)| f.name == "SSL_get_error"));
        assert!(io.iter().any(|(_, f)| f.name == "SSL_read_ex"));
        let cheap = functions_for(LibraryKind::OpensslSsl, Groups::only(Group::Io), false);
        assert!(!cheap.iter().any(|(_, f)| f.name == "SSL_get_error"));
        let crypto = functions_for(LibraryKind::OpensslSsl, Groups::only(Group::Crypto), true);
        assert!(crypto.is_empty());
        let gnutls = functions_for(LibraryKind::GnuTls, Groups::all(), true);
        assert_eq!(gnutls.len(), 3);
    }
}
