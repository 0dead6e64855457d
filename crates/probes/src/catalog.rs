//! The functions tlsscope observes, per library family: one catalog for every probe program
//! (the latency tracer and the plaintext sniffer), with what each program needs to know of a
//! function (how its return value says how the call ended; whether and how it moves data), and
//! the [`Selection`] each program makes from it.

use std::fmt;
use std::str::FromStr;

use crate::maps::LibraryKind;

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
/// `kernel/bpf/latency.h`, numbered as the program numbers it (the kernel backend checks the
/// numbers when the crate is built); the number travels in the attach cookie, and in the
/// in-process library's table (`inproc_abi::Semantics`, checked below).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Semantics {
    /// OpenSSL I/O and handshake calls: > 0 success; <= 0 settled by `SSL_get_error`.
    OpensslIo = 0,
    /// `SSL_shutdown`: >= 0 success; < 0 settled by `SSL_get_error`.
    OpensslShutdown = 1,
    /// `SSL_get_error`: settles the call before it; not reported itself.
    OpensslGetError = 2,
    /// > 0 success, <= 0 failure (libcrypto's EVP functions and most internals).
    Positive = 3,
    /// GnuTLS: >= 0 success, -28/-52 retry, other negatives failure.
    GnuTls = 4,
    /// NSS `SECStatus`: 0 success, -1 retry or failure (unknown without `PR_GetError`).
    NssStatus = 5,
    /// NSPR `PR_Read`/`PR_Write`: >= 0 success, -1 retry or failure (unknown).
    NsprIo = 6,
    /// >= 0 success (a length), < 0 failure.
    NonNegative = 7,
    /// Go's crypto/tls `(*Conn).Read`/`Write`: `(n int, err error)`; nil success, `io.EOF`
    /// closed, a passed deadline retry, other errors failure.
    GoIo = 8,
    /// Go's handshake: `err error`, as [`Semantics::GoIo`].
    GoError = 9,
}

/// What a sniffed call does with data: `enum sn_kind` in `kernel/bpf/sniff.h`, numbered as the
/// program numbers it (checked by the kernel backend when the crate is built).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Direction {
    /// The program received plaintext (`SSL_read`, ...).
    Read = 0,
    /// The program sent plaintext (`SSL_write`, ...).
    Write = 1,
    /// A handshake call (sniffed with `--handshake`): no data.
    Handshake = 2,
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

/// Where a sniffed call's byte count is (`enum sn_count` in `kernel/bpf/sniff.h`, numbered alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Count {
    /// The return value.
    Return = 0,
    /// Through the `size_t *` fourth argument (`SSL_read_ex`, `SSL_write_ex`).
    Arg4Pointer = 1,
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
use LibraryKind::{GnuTls, Go, Nspr, Nss, OpensslCrypto, OpensslSsl};
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
    // Go's crypto/tls, in the Go program itself. The handshake proper: the exported
    // HandshakeContext is inlined into its callers, and the handshakeContext it calls also
    // runs (and returns at once) at the start of every Read and Write; the side's own
    // handshake, called through a function value, runs once per handshake.
    Function::api("crypto/tls.(*Conn).serverHandshake", Go, Handshake, GoError)
        .sniffs(Direction::Handshake, Return),
    Function::api("crypto/tls.(*Conn).clientHandshake", Go, Handshake, GoError)
        .sniffs(Direction::Handshake, Return),
    Function::api("crypto/tls.(*Conn).Read", Go, Io, GoIo).sniffs(Read, Return),
    Function::api("crypto/tls.(*Conn).Write", Go, Io, GoIo).sniffs(Write, Return),
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

/// Whether the catalog says the in-process library can wrap `function`: exported (called
/// through a GOT entry), and reported (not `SSL_get_error`, which the library calls itself).
pub const fn wrapped_in_process(function: &Function) -> bool {
    !function.internal
        && !matches!(function.semantics, OpensslGetError)
        && !matches!(function.library, LibraryKind::Go)
}

/// Whether `table` (the in-process library's, `inproc_abi::FUNCTIONS`) holds exactly the
/// catalog's functions that the library can wrap, each with the catalog's semantics, and fits
/// the region. The library is built from its own table; this keeps it the catalog's.
const fn in_process_table_matches(catalog: &[Function], table: &[inproc_abi::Function]) -> bool {
    let mut i = 0;
    while i < table.len() {
        let mut found = false;
        let mut c = 0;
        while c < catalog.len() {
            if same_name(catalog[c].name, table[i].name) {
                if !wrapped_in_process(&catalog[c])
                    || catalog[c].semantics as u8 != table[i].semantics as u8
                {
                    return false;
                }
                found = true;
            }
            c += 1;
        }
        if !found {
            return false;
        }
        i += 1;
    }
    let mut c = 0;
    while c < catalog.len() {
        if wrapped_in_process(&catalog[c]) {
            let mut found = false;
            let mut i = 0;
            while i < table.len() {
                found |= same_name(catalog[c].name, table[i].name);
                i += 1;
            }
            if !found {
                return false;
            }
        }
        c += 1;
    }
    table.len() <= inproc_abi::MAX_FUNCTIONS
}

/// `a == b`, for a `const fn`.
const fn same_name(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// One catalog: the in-process library's table is checked against it when this crate is built.
const _: () = assert!(
    in_process_table_matches(CATALOG, inproc_abi::FUNCTIONS),
    "inproc_abi::FUNCTIONS differs from probes::catalog::CATALOG: the in-process library must \
     wrap exactly the catalog's exported functions, with the catalog's semantics"
);

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
    fn names_are_unique_and_ids_fit_in_16_bits() {
        for (i, a) in CATALOG.iter().enumerate() {
            assert!(
                CATALOG[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
        assert!(CATALOG.len() < usize::from(u16::MAX));
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
    fn the_in_process_table_check_rejects_a_table_that_differs_from_the_catalog() {
        use inproc_abi::Semantics as Abi;
        let abi = |name, semantics| inproc_abi::Function { name, semantics };
        assert!(in_process_table_matches(CATALOG, inproc_abi::FUNCTIONS));
        let short = &inproc_abi::FUNCTIONS[1..];
        assert!(
            !in_process_table_matches(CATALOG, short),
            "a function left out"
        );
        let mut wrong = inproc_abi::FUNCTIONS.to_vec();
        let read = wrong.iter().position(|f| f.name == "SSL_read").unwrap();
        wrong[read].semantics = Abi::Positive;
        assert!(
            !in_process_table_matches(CATALOG, &wrong),
            "other semantics"
        );
        let mut extra = inproc_abi::FUNCTIONS.to_vec();
        extra.push(abi("SSL_reed", Abi::OpensslIo));
        assert!(
            !in_process_table_matches(CATALOG, &extra),
            "not in the catalog"
        );
        let mut internal = inproc_abi::FUNCTIONS.to_vec();
        internal.push(abi("ossl_ecdsa_sign", Abi::Positive));
        assert!(
            !in_process_table_matches(CATALOG, &internal),
            "internal: not wrappable"
        );
        let mut get_error = inproc_abi::FUNCTIONS.to_vec();
        get_error.push(abi("SSL_get_error", Abi::OpensslIo));
        assert!(
            !in_process_table_matches(CATALOG, &get_error),
            "a helper, not wrapped"
        );
    }
}
