//! The functions tlsscope observes, per library family: one catalog for every probe program
//! (the latency tracer and the plaintext sniffer), with what each program needs to know of a
//! function (how its return value says how the call ended; whether and how it moves data), and
//! the [`Selection`] each program makes from it.

use std::fmt;
use std::str::FromStr;

use crate::maps::LibraryKind;
use crate::skel::latency::types::{ts_cookie_field, ts_semantics};
use crate::skel::sniff::types::{sn_count, sn_kind};

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

/// What a sniffed call does with data: `enum sn_kind` in `bpf/sniff.h`, numbered as the
/// program numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Direction {
    /// The program received plaintext (`SSL_read`, ...).
    Read = sn_kind::SN_READ.0 as u8,
    /// The program sent plaintext (`SSL_write`, ...).
    Write = sn_kind::SN_WRITE.0 as u8,
    /// A handshake call (sniffed with `--handshake`): no data.
    Handshake = sn_kind::SN_HANDSHAKE.0 as u8,
}

impl Direction {
    /// The direction the program numbered `raw` (anything unknown is a handshake: no data).
    pub fn from_raw(raw: u8) -> Direction {
        const READ: u8 = Direction::Read as u8;
        const WRITE: u8 = Direction::Write as u8;
        match raw {
            READ => Direction::Read,
            WRITE => Direction::Write,
            _ => Direction::Handshake,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
            Direction::Handshake => "handshake",
        }
    }
}

/// Where a sniffed call's byte count is (`enum sn_count` in `bpf/sniff.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Count {
    /// The return value.
    Return = sn_count::SN_COUNT_RET.0 as u8,
    /// Through the `size_t *` fourth argument (`SSL_read_ex`, `SSL_write_ex`).
    Arg4Pointer = sn_count::SN_COUNT_ARG4_PTR.0 as u8,
}

/// What the sniffer does with a function's calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sniffed {
    pub direction: Direction,
    pub count: Count,
}

/// One function tlsscope can observe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    /// The name reported (the first of `symbols` for functions renamed between versions).
    pub name: &'static str,
    /// Symbol names to look for, in order, when not just `name`: later ones are older or
    /// newer spellings.
    pub symbols: &'static [&'static str],
    pub library: LibraryKind,
    pub group: Group,
    /// How the latency tracer classes a call's outcome.
    pub semantics: Semantics,
    /// Internal: only in libraries that kept their full symbol table.
    pub internal: bool,
    /// How the sniffer sees its calls; `None`: the sniffer does not probe it.
    pub sniffed: Option<Sniffed>,
    /// The argument (from 0) holding the count of bytes asked for, where a call that succeeds
    /// with a count above zero returns a count above zero: OpenSSL's `SSL_read`, `SSL_peek`
    /// and `SSL_write` (its record layer reads on until it has a byte, and writes at least
    /// one).
    pub length_arg: Option<u8>,
}

impl Function {
    /// NSPR's generic I/O serves every kind of file: sniffed only on NSS's TLS layer.
    pub fn tls_layer_only(&self) -> bool {
        self.library == LibraryKind::Nspr
    }
}

/// A function in the table below; `sniffed` is added with [`Function::sniffs`].
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
        sniffed: None,
        length_arg: None,
    }
}

impl Function {
    /// The function, sniffed as `direction` with its byte count in `count`.
    const fn sniffs(self, direction: Direction, count: Count) -> Function {
        Function {
            sniffed: Some(Sniffed { direction, count }),
            ..self
        }
    }

    /// The count of bytes asked for is argument `n` (from 0); see [`Function::length_arg`].
    const fn asks_bytes_in(self, n: u8) -> Function {
        Function {
            length_arg: Some(n),
            ..self
        }
    }

    /// A library's exported function named as it is spelt, outside the crypto group.
    const fn api(
        name: &'static str,
        library: LibraryKind,
        group: Group,
        semantics: Semantics,
    ) -> Function {
        f(name, &[], library, group, semantics, false)
    }
}

use Count::{Arg4Pointer, Return};
use Direction::{Read, Write};
use Group::{Crypto, Handshake, Io};
use LibraryKind::{GnuTls, Nspr, Nss, OpensslCrypto, OpensslSsl};
use Semantics::*;

/// A libcrypto function of the crypto group: exported (`internal` false) or internal.
const fn crypto(name: &'static str, semantics: Semantics, internal: bool) -> Function {
    f(name, &[], OpensslCrypto, Crypto, semantics, internal)
}

/// Every function tlsscope knows. The index of a function here is its id in the BPF maps and
/// events; a function whose `symbols` is empty is looked for by its name.
pub const CATALOG: &[Function] = &[
    Function::api("SSL_do_handshake", OpensslSsl, Handshake, OpensslIo)
        .sniffs(Direction::Handshake, Return),
    Function::api("SSL_connect", OpensslSsl, Handshake, OpensslIo),
    Function::api("SSL_accept", OpensslSsl, Handshake, OpensslIo),
    Function::api("SSL_read", OpensslSsl, Io, OpensslIo)
        .sniffs(Read, Return)
        .asks_bytes_in(2),
    Function::api("SSL_read_ex", OpensslSsl, Io, OpensslIo).sniffs(Read, Arg4Pointer),
    Function::api("SSL_peek", OpensslSsl, Io, OpensslIo).asks_bytes_in(2),
    Function::api("SSL_peek_ex", OpensslSsl, Io, OpensslIo),
    Function::api("SSL_write", OpensslSsl, Io, OpensslIo)
        .sniffs(Write, Return)
        .asks_bytes_in(2),
    Function::api("SSL_write_ex", OpensslSsl, Io, OpensslIo).sniffs(Write, Arg4Pointer),
    Function::api("SSL_shutdown", OpensslSsl, Io, OpensslShutdown),
    crypto("EVP_DigestSign", Positive, false),
    crypto("EVP_DigestSignFinal", Positive, false),
    crypto("EVP_DigestVerify", Positive, false),
    crypto("EVP_DigestVerifyFinal", Positive, false),
    crypto("EVP_PKEY_sign", Positive, false),
    crypto("EVP_PKEY_derive", Positive, false),
    crypto("EVP_PKEY_decrypt", Positive, false),
    crypto("EVP_PKEY_keygen", Positive, false),
    crypto("X509_verify_cert", Positive, false),
    crypto("rsa_ossl_private_decrypt", NonNegative, true),
    crypto("rsa_ossl_private_encrypt", NonNegative, true),
    crypto("ossl_ecdsa_sign", Positive, true),
    crypto("ossl_ecdh_compute_key", Positive, true),
    f(
        "ossl_x25519",
        &["ossl_x25519", "X25519"],
        OpensslCrypto,
        Crypto,
        Positive,
        true,
    ),
    Function::api("gnutls_handshake", GnuTls, Handshake, Semantics::GnuTls)
        .sniffs(Direction::Handshake, Return),
    Function::api("gnutls_record_send", GnuTls, Io, Semantics::GnuTls).sniffs(Write, Return),
    Function::api("gnutls_record_recv", GnuTls, Io, Semantics::GnuTls).sniffs(Read, Return),
    Function::api("SSL_ForceHandshake", Nss, Handshake, NssStatus)
        .sniffs(Direction::Handshake, Return),
    // NSS's data goes through NSPR: PR_Read/PR_Write, and PR_Recv/PR_Send, which curl and
    // tstclnt use.
    Function::api("PR_Read", Nspr, Io, NsprIo).sniffs(Read, Return),
    Function::api("PR_Write", Nspr, Io, NsprIo).sniffs(Write, Return),
    Function::api("PR_Recv", Nspr, Io, NsprIo).sniffs(Read, Return),
    Function::api("PR_Send", Nspr, Io, NsprIo).sniffs(Write, Return),
    // Not reported: settles OpenSSL calls that returned <= 0 (attached with any OpenSSL probe).
    Function::api("SSL_get_error", OpensslSsl, Io, OpensslGetError),
];

impl Function {
    /// The symbol names to look for, in order.
    pub fn spellings(&self) -> impl Iterator<Item = &'static str> {
        let own = self.symbols.is_empty().then_some(self.name);
        own.into_iter().chain(self.symbols.iter().copied())
    }
}

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

/// The attach cookie of function `id`: its id, then every field of `enum ts_cookie_field`
/// (`bpf/common.h`), whichever program it is for: each reads the fields it needs. No callee
/// placement (see [`cookie_at_site`]).
pub fn cookie(id: u16, function: &Function) -> u64 {
    cookie_at_site(id, function, 0)
}

/// Like [`cookie`], for a function probed at its callee: `site` indexes the latency
/// program's `cfg.sites` (0: not a callee placement).
pub fn cookie_at_site(id: u16, function: &Function, site: u8) -> u64 {
    let mut fields = [0u8; ts_cookie_field_count()];
    let mut set = |field: ts_cookie_field, value: u8| fields[field.0 as usize] = value;
    set(
        ts_cookie_field::TS_FIELD_SEMANTICS,
        function.semantics as u8,
    );
    if let Some(sniffed) = function.sniffed {
        set(ts_cookie_field::TS_FIELD_KIND, sniffed.direction as u8);
        set(ts_cookie_field::TS_FIELD_COUNT, sniffed.count as u8);
    }
    set(
        ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY,
        u8::from(function.tls_layer_only()),
    );
    set(ts_cookie_field::TS_FIELD_SITE, site);
    crate::loader::cookie(id, &fields)
}

/// `TS_COOKIE_FIELDS` in `bpf/common.h`.
const fn ts_cookie_field_count() -> usize {
    crate::skel::latency::types::ts_cookie::TS_COOKIE_FIELDS.0 as usize
}

/// Which catalog functions a probe program wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    /// The latency tracer's: the functions of `groups` or, when `only` is not empty, the ones
    /// it names; with `exact`, `SSL_get_error` comes with any OpenSSL libssl function whose
    /// <= 0 returns it settles.
    Latency {
        groups: Groups,
        only: Vec<String>,
        exact: bool,
    },
    /// The sniffer's: every function that moves plaintext, and with `handshake` the handshake
    /// calls (one per library: `SSL_connect` and `SSL_accept` go through `SSL_do_handshake`).
    Plaintext { handshake: bool },
}

impl Selection {
    /// The latency tracer's selection of `groups`.
    pub fn latency(groups: Groups, exact: bool) -> Selection {
        Selection::Latency {
            groups,
            only: Vec::new(),
            exact,
        }
    }

    /// The catalog functions of `group` this selection names outright (`only`).
    pub fn named_in(&self, group: Group) -> Vec<String> {
        let Selection::Latency { only, .. } = self else {
            return Vec::new();
        };
        only.iter()
            .filter(|n| id_of(n).is_some_and(|id| CATALOG[usize::from(id)].group == group))
            .cloned()
            .collect()
    }

    /// Whether the selection takes functions of `group`.
    pub fn takes(&self, group: Group) -> bool {
        match self {
            Selection::Latency { groups, only, .. } if only.is_empty() => groups.contains(group),
            Selection::Latency { .. } => !self.named_in(group).is_empty(),
            Selection::Plaintext { .. } => group != Group::Crypto,
        }
    }

    /// The selection without `group`'s functions (a selection by group only).
    pub fn without(self, group: Group) -> Selection {
        match self {
            Selection::Latency {
                groups,
                only,
                exact,
            } if only.is_empty() => Selection::Latency {
                groups: Groups(groups.0 & !(1 << group as u8)),
                only,
                exact,
            },
            other => other,
        }
    }

    /// Whether `SSL_get_error` settles OpenSSL's <= 0 returns.
    pub fn exact(&self) -> bool {
        matches!(self, Selection::Latency { exact: true, .. })
    }

    /// A name in `only` that the catalog lacks, as an error listing the names it has.
    pub fn check(&self) -> Result<(), crate::Error> {
        let Selection::Latency { only, .. } = self else {
            return Ok(());
        };
        match only.iter().find(|n| id_of(n).is_none()) {
            None => Ok(()),
            Some(unknown) => Err(crate::Error::UnknownFunction {
                name: unknown.clone(),
                known: CATALOG
                    .iter()
                    .filter(|f| f.semantics != OpensslGetError)
                    .map(|f| f.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
        }
    }

    /// The functions of `library` this selection wants, with their ids.
    pub fn functions(&self, library: LibraryKind) -> Vec<(u16, &'static Function)> {
        let of_library = (0u16..)
            .zip(CATALOG)
            .filter(move |(_, f)| f.library == library && f.semantics != OpensslGetError);
        match self {
            Selection::Latency {
                groups,
                only,
                exact,
            } => {
                let mut out: Vec<(u16, &'static Function)> = of_library
                    .filter(|(_, f)| {
                        if only.is_empty() {
                            groups.contains(f.group)
                        } else {
                            only.iter().any(|n| n == f.name)
                        }
                    })
                    .collect();
                let settles = |f: &Function| matches!(f.semantics, OpensslIo | OpensslShutdown);
                if *exact && out.iter().any(|(_, f)| settles(f)) {
                    out.push((get_error_id(), &CATALOG[usize::from(get_error_id())]));
                }
                out
            }
            Selection::Plaintext { handshake } => of_library
                .filter(|(_, f)| {
                    f.sniffed
                        .is_some_and(|s| s.direction != Direction::Handshake || *handshake)
                })
                .collect(),
        }
    }
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
        let read_ex = id_of("SSL_read_ex").unwrap();
        let c = cookie(read_ex, function(read_ex).unwrap());
        let field = |f: ts_cookie_field| (c >> (16 + 8 * f.0)) & 0xff;
        assert_eq!(c & 0xffff, u64::from(read_ex));
        assert_eq!(field(ts_cookie_field::TS_FIELD_SEMANTICS), 0);
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_KIND),
            u64::from(sn_kind::SN_READ.0)
        );
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_COUNT),
            u64::from(sn_count::SN_COUNT_ARG4_PTR.0)
        );
        let pr_send = id_of("PR_Send").unwrap();
        let c = cookie(pr_send, function(pr_send).unwrap());
        let field = |f: ts_cookie_field| (c >> (16 + 8 * f.0)) & 0xff;
        assert_eq!(field(ts_cookie_field::TS_FIELD_SEMANTICS), 6);
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_KIND),
            u64::from(sn_kind::SN_WRITE.0)
        );
        assert_eq!(field(ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY), 1);
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

    fn names(selection: &Selection, library: LibraryKind) -> Vec<&'static str> {
        selection
            .functions(library)
            .into_iter()
            .map(|(_, f)| f.name)
            .collect()
    }

    #[test]
    fn get_error_comes_with_openssl_io_only() {
        let io = names(&Selection::latency(Groups::only(Io), true), OpensslSsl);
        assert!(io.contains(&"SSL_get_error") && io.contains(&"SSL_read_ex"));
        let cheap = names(&Selection::latency(Groups::only(Io), false), OpensslSsl);
        assert!(!cheap.contains(&"SSL_get_error"));
        let crypto = names(&Selection::latency(Groups::only(Crypto), true), OpensslSsl);
        assert!(crypto.is_empty());
        assert_eq!(
            names(&Selection::latency(Groups::all(), true), GnuTls).len(),
            3
        );
        let only = Selection::Latency {
            groups: Groups::only(Handshake),
            only: vec!["SSL_write".into()],
            exact: false,
        };
        assert_eq!(names(&only, OpensslSsl), ["SSL_write"]);
        let bad = Selection::Latency {
            groups: Groups::all(),
            only: vec!["SSL_reed".into()],
            exact: false,
        };
        assert!(bad.check().unwrap_err().to_string().contains("SSL_reed"));
    }

    #[test]
    fn the_sniffer_wants_data_calls_and_one_handshake_call_per_library() {
        let data = Selection::Plaintext { handshake: false };
        assert_eq!(
            names(&data, OpensslSsl),
            ["SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex"]
        );
        assert_eq!(
            names(&data, Nspr),
            ["PR_Read", "PR_Write", "PR_Recv", "PR_Send"]
        );
        assert!(names(&data, OpensslCrypto).is_empty() && names(&data, Nss).is_empty());
        let with_handshake = Selection::Plaintext { handshake: true };
        let ssl = names(&with_handshake, OpensslSsl);
        assert!(ssl.contains(&"SSL_do_handshake") && !ssl.contains(&"SSL_connect"));
        assert_eq!(names(&with_handshake, Nss), ["SSL_ForceHandshake"]);
    }

    #[test]
    fn kinds_and_counts_are_numbered_as_the_program_numbers_them() {
        // `as u8` would cut a number over 255 without a word.
        for (ours, theirs) in [
            (Direction::Read as u8, sn_kind::SN_READ.0),
            (Direction::Write as u8, sn_kind::SN_WRITE.0),
            (Direction::Handshake as u8, sn_kind::SN_HANDSHAKE.0),
            (Count::Return as u8, sn_count::SN_COUNT_RET.0),
            (Count::Arg4Pointer as u8, sn_count::SN_COUNT_ARG4_PTR.0),
        ] {
            assert_eq!(u32::from(ours), theirs);
        }
        for d in [Direction::Read, Direction::Write, Direction::Handshake] {
            assert_eq!(Direction::from_raw(d as u8), d);
        }
        // Both programs are built from the one cookie definition.
        use crate::skel::sniff::types::ts_cookie_field as sniff_field;
        for (ours, theirs) in [
            (
                ts_cookie_field::TS_FIELD_SEMANTICS,
                sniff_field::TS_FIELD_SEMANTICS,
            ),
            (ts_cookie_field::TS_FIELD_KIND, sniff_field::TS_FIELD_KIND),
            (ts_cookie_field::TS_FIELD_COUNT, sniff_field::TS_FIELD_COUNT),
            (
                ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY,
                sniff_field::TS_FIELD_TLS_LAYER_ONLY,
            ),
        ] {
            assert_eq!(ours.0, theirs.0);
            assert!(ours.0 < ts_cookie_field_count() as u32);
        }
    }
}
