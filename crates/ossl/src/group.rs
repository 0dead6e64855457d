//! Key exchange groups: one table of the groups tlsscope knows, with their TLS code points
//! (IANA "TLS Supported Groups"), the names OpenSSL takes, and the other spellings a group
//! list accepts. Every engine, the server's counters and the reports name groups from here.

use std::ffi::c_int;
use std::fmt;
use std::str::FromStr;

/// A key exchange group (TLS `NamedGroup`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    X25519,
    Secp256r1,
    Secp384r1,
    Secp521r1,
    X448,
    Ffdhe2048,
    Ffdhe3072,
    Ffdhe4096,
    Ffdhe6144,
    Ffdhe8192,
    Mlkem512,
    Mlkem768,
    Mlkem1024,
    X25519Mlkem768,
    Secp256r1Mlkem768,
    Secp384r1Mlkem1024,
}

/// One row of the table.
struct Entry {
    group: Group,
    code_point: u16,
    /// The IANA registry's name, which reports use.
    name: &'static str,
    /// The name OpenSSL's group lists take in every version that has the group.
    openssl: &'static str,
    /// OpenSSL's NID for groups that have one in 1.1.1 and 3.x (0: none; the ML-KEM groups
    /// are provider groups, reported by code point).
    nid: c_int,
    /// Other accepted spellings (compared without regard to case).
    spellings: &'static [&'static str],
    /// Has an ML-KEM part: needs OpenSSL 3.5+ or rustls on aws-lc-rs.
    post_quantum: bool,
}

const fn e(
    group: Group,
    code_point: u16,
    name: &'static str,
    openssl: &'static str,
    nid: c_int,
    spellings: &'static [&'static str],
    post_quantum: bool,
) -> Entry {
    Entry {
        group,
        code_point,
        name,
        openssl,
        nid,
        spellings,
        post_quantum,
    }
}

/// In `Group` order (a test checks).
const TABLE: &[Entry] = &[
    e(Group::X25519, 0x001d, "x25519", "X25519", 1034, &[], false),
    e(
        Group::Secp256r1,
        0x0017,
        "secp256r1",
        "P-256",
        415,
        &["prime256v1"],
        false,
    ),
    e(
        Group::Secp384r1,
        0x0018,
        "secp384r1",
        "P-384",
        715,
        &[],
        false,
    ),
    e(
        Group::Secp521r1,
        0x0019,
        "secp521r1",
        "P-521",
        716,
        &[],
        false,
    ),
    e(Group::X448, 0x001e, "x448", "X448", 1035, &[], false),
    e(
        Group::Ffdhe2048,
        0x0100,
        "ffdhe2048",
        "ffdhe2048",
        1126,
        &[],
        false,
    ),
    e(
        Group::Ffdhe3072,
        0x0101,
        "ffdhe3072",
        "ffdhe3072",
        1127,
        &[],
        false,
    ),
    e(
        Group::Ffdhe4096,
        0x0102,
        "ffdhe4096",
        "ffdhe4096",
        1128,
        &[],
        false,
    ),
    e(
        Group::Ffdhe6144,
        0x0103,
        "ffdhe6144",
        "ffdhe6144",
        1129,
        &[],
        false,
    ),
    e(
        Group::Ffdhe8192,
        0x0104,
        "ffdhe8192",
        "ffdhe8192",
        1130,
        &[],
        false,
    ),
    e(
        Group::Mlkem512,
        0x0200,
        "MLKEM512",
        "MLKEM512",
        0,
        &["ML-KEM-512"],
        true,
    ),
    e(
        Group::Mlkem768,
        0x0201,
        "MLKEM768",
        "MLKEM768",
        0,
        &["ML-KEM-768"],
        true,
    ),
    e(
        Group::Mlkem1024,
        0x0202,
        "MLKEM1024",
        "MLKEM1024",
        0,
        &["ML-KEM-1024"],
        true,
    ),
    e(
        Group::X25519Mlkem768,
        0x11ec,
        "X25519MLKEM768",
        "X25519MLKEM768",
        0,
        &[],
        true,
    ),
    e(
        Group::Secp256r1Mlkem768,
        0x11eb,
        "SecP256r1MLKEM768",
        "SecP256r1MLKEM768",
        0,
        &["P256MLKEM768"],
        true,
    ),
    e(
        Group::Secp384r1Mlkem1024,
        0x11ed,
        "SecP384r1MLKEM1024",
        "SecP384r1MLKEM1024",
        0,
        &["P384MLKEM1024"],
        true,
    ),
];

/// OpenSSL 3.5's `SSL_get_negotiated_group` answers with this bit and the code point for
/// groups without a NID (`TLSEXT_nid_unknown`).
const NID_UNKNOWN_BIT: c_int = 0x0100_0000;

impl Group {
    /// Every group, in table order.
    pub const ALL: [Group; 16] = [
        Group::X25519,
        Group::Secp256r1,
        Group::Secp384r1,
        Group::Secp521r1,
        Group::X448,
        Group::Ffdhe2048,
        Group::Ffdhe3072,
        Group::Ffdhe4096,
        Group::Ffdhe6144,
        Group::Ffdhe8192,
        Group::Mlkem512,
        Group::Mlkem768,
        Group::Mlkem1024,
        Group::X25519Mlkem768,
        Group::Secp256r1Mlkem768,
        Group::Secp384r1Mlkem1024,
    ];

    fn entry(self) -> &'static Entry {
        &TABLE[self as usize]
    }

    /// The position in [`Group::ALL`]: an index for per-group counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The TLS code point (`NamedGroup`), e.g. 0x11ec for X25519MLKEM768.
    pub fn code_point(self) -> u16 {
        self.entry().code_point
    }

    /// The IANA name reports use: "x25519", "secp256r1", "X25519MLKEM768".
    pub fn name(self) -> &'static str {
        self.entry().name
    }

    /// The name OpenSSL's group lists take ("P-256", "X25519MLKEM768").
    pub fn openssl_name(self) -> &'static str {
        self.entry().openssl
    }

    /// True for the ML-KEM groups, pure and hybrid.
    pub fn is_post_quantum(self) -> bool {
        self.entry().post_quantum
    }

    /// The group of a TLS code point.
    pub fn from_code_point(code_point: u16) -> Option<Group> {
        TABLE
            .iter()
            .find(|e| e.code_point == code_point)
            .map(|e| e.group)
    }

    /// The group of a name: the IANA one, OpenSSL's, or another accepted spelling, in any case.
    pub fn from_name(name: &str) -> Option<Group> {
        TABLE
            .iter()
            .find(|e| {
                e.name.eq_ignore_ascii_case(name)
                    || e.openssl.eq_ignore_ascii_case(name)
                    || e.spellings.iter().any(|s| s.eq_ignore_ascii_case(name))
            })
            .map(|e| e.group)
    }

    /// The group of what OpenSSL's negotiated-group call returns: a NID, or (3.5+, groups
    /// without one) the code point with the unknown-NID bit.
    pub fn from_openssl_id(id: c_int) -> Option<Group> {
        if id <= 0 {
            return None;
        }
        if id & NID_UNKNOWN_BIT != 0 {
            return u16::try_from(id & 0xffff)
                .ok()
                .and_then(Group::from_code_point);
        }
        TABLE.iter().find(|e| e.nid == id).map(|e| e.group)
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A group name that is not in the table.
#[derive(Debug, thiserror::Error)]
#[error("unknown key exchange group {name:?}: use {known}", name = .0, known = known_names())]
pub struct UnknownGroup(pub String);

fn known_names() -> String {
    TABLE.iter().map(|e| e.name).collect::<Vec<_>>().join(", ")
}

impl FromStr for Group {
    type Err = UnknownGroup;
    fn from_str(s: &str) -> Result<Group, UnknownGroup> {
        Group::from_name(s).ok_or_else(|| UnknownGroup(s.to_string()))
    }
}

/// Groups in preference order, written as OpenSSL lists them ("X25519MLKEM768:X25519").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupList(Vec<Group>);

impl GroupList {
    /// A list of `groups` (not empty).
    pub fn new(groups: Vec<Group>) -> Option<GroupList> {
        (!groups.is_empty()).then_some(GroupList(groups))
    }

    /// The groups, first preferred.
    pub fn groups(&self) -> &[Group] {
        &self.0
    }

    /// True when any group has an ML-KEM part.
    pub fn has_post_quantum(&self) -> bool {
        self.0.iter().any(|g| g.is_post_quantum())
    }

    /// The list in OpenSSL's syntax and spelling.
    pub fn openssl_list(&self) -> String {
        let names: Vec<&str> = self.0.iter().map(|g| g.openssl_name()).collect();
        names.join(":")
    }
}

impl fmt::Display for GroupList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|g| g.name()).collect();
        f.write_str(&names.join(":"))
    }
}

impl FromStr for GroupList {
    type Err = UnknownGroup;
    /// Names separated by ':' (OpenSSL's syntax); an empty list is an error.
    fn from_str(s: &str) -> Result<GroupList, UnknownGroup> {
        let mut groups = Vec::new();
        for name in s.split(':').map(str::trim).filter(|n| !n.is_empty()) {
            let g: Group = name.parse()?;
            if !groups.contains(&g) {
                groups.push(g);
            }
        }
        GroupList::new(groups).ok_or_else(|| UnknownGroup(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_enum_order_and_code_points_are_unique() {
        for (i, g) in Group::ALL.iter().enumerate() {
            assert_eq!(TABLE[i].group, *g);
            assert_eq!(g.index(), i);
        }
        assert_eq!(TABLE.len(), Group::ALL.len());
        for g in Group::ALL {
            assert_eq!(Group::from_code_point(g.code_point()), Some(g));
            assert_eq!(Group::from_name(g.name()), Some(g));
            assert_eq!(Group::from_name(g.openssl_name()), Some(g));
        }
    }

    #[test]
    fn spellings_and_lists_parse() {
        let l: GroupList = "x25519mlkem768:P-256:prime256v1:secp384r1".parse().unwrap();
        assert_eq!(
            l.groups(),
            [Group::X25519Mlkem768, Group::Secp256r1, Group::Secp384r1]
        );
        assert_eq!(l.openssl_list(), "X25519MLKEM768:P-256:P-384");
        assert_eq!(l.to_string(), "X25519MLKEM768:secp256r1:secp384r1");
        assert!(l.has_post_quantum());
        assert!(!"X25519:ffdhe2048"
            .parse::<GroupList>()
            .unwrap()
            .has_post_quantum());
        let e = "X25519:P-999".parse::<GroupList>().unwrap_err().to_string();
        assert!(
            e.contains("\"P-999\"") && e.contains("SecP256r1MLKEM768"),
            "{e}"
        );
        assert!("".parse::<GroupList>().is_err());
    }

    #[test]
    fn openssl_ids_name_the_group() {
        assert_eq!(Group::from_openssl_id(1034), Some(Group::X25519));
        assert_eq!(Group::from_openssl_id(415), Some(Group::Secp256r1));
        assert_eq!(
            Group::from_openssl_id(NID_UNKNOWN_BIT | 0x11ec),
            Some(Group::X25519Mlkem768)
        );
        assert_eq!(Group::from_openssl_id(0), None);
    }
}
