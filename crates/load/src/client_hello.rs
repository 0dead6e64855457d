//! Reads what the wire figures need from a ClientHello (RFC 8446 4.1.2): its size, the key
//! shares it carries (by group), and whether it offers a TLS 1.2 session ticket; and tells a
//! HelloRetryRequest from a ServerHello. It reads from borrowed bytes, allocates nothing and
//! never panics: input that is not a whole, well-formed message gives `None`.

/// The most key shares kept by group; more are counted, not named.
pub const MAX_KEY_SHARES: usize = 6;

/// A record's header: type (1), legacy version (2), length (2).
pub const RECORD_HEADER_BYTES: usize = 5;
/// The most plaintext one record carries (RFC 8446 5.1).
pub const MAX_RECORD_PAYLOAD: usize = 16384;

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const SERVER_HELLO: u8 = 2;
const EXT_SESSION_TICKET: u16 = 0x0023;
const EXT_PRE_SHARED_KEY: u16 = 0x0029;
const EXT_KEY_SHARE: u16 = 0x0033;

/// The ServerHello random that makes it a HelloRetryRequest (RFC 8446 4.1.3: SHA-256 of
/// "HelloRetryRequest").
pub const HELLO_RETRY_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
    0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// The key shares a ClientHello carried, in its order (TLS code points).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KeyShares {
    count: u8,
    groups: [u16; MAX_KEY_SHARES],
}

impl KeyShares {
    /// How many shares there were (all of them, also past [`MAX_KEY_SHARES`]).
    pub fn count(&self) -> usize {
        usize::from(self.count)
    }

    /// Their groups, the first [`MAX_KEY_SHARES`] of them.
    pub fn groups(&self) -> &[u16] {
        &self.groups[..self.count().min(MAX_KEY_SHARES)]
    }

    fn push(&mut self, group: u16) {
        let at = self.count();
        if let Some(slot) = self.groups.get_mut(at) {
            *slot = group;
        }
        self.count = self.count.saturating_add(1);
    }
}

/// What a ClientHello said that the wire figures report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The handshake message's bytes: its 4-byte header and body.
    pub message_bytes: usize,
    pub key_shares: KeyShares,
    /// The session_ticket extension carried a ticket (an empty one only asks for one).
    pub offers_ticket: bool,
    /// A pre_shared_key extension was there (TLS 1.3 resumption).
    pub offers_psk: bool,
}

impl ClientHello {
    /// The bytes of the records that carry the message, their headers included (one record
    /// unless the message is longer than a record's limit).
    pub fn record_bytes(&self) -> usize {
        let records = self.message_bytes.div_ceil(MAX_RECORD_PAYLOAD).max(1);
        self.message_bytes + records * RECORD_HEADER_BYTES
    }
}

/// Reads a ClientHello handshake message (starting at its type byte).
pub fn parse_message(message: &[u8]) -> Option<ClientHello> {
    let mut b = Reader(message);
    if b.u8()? != CLIENT_HELLO {
        return None;
    }
    let body_len = b.uint(3)?;
    let mut body = Reader(b.take(body_len)?);
    let mut hello = ClientHello {
        message_bytes: 4 + body_len,
        ..ClientHello::default()
    };
    body.take(2 + 32)?; // legacy_version, random
    body.vector(1)?; // legacy_session_id
    body.vector(2)?; // cipher_suites
    body.vector(1)?; // legacy_compression_methods
    if body.0.is_empty() {
        return Some(hello); // no extensions (SSL 3.0-style hello)
    }
    let mut extensions = Reader(body.vector(2)?);
    while !extensions.0.is_empty() {
        let kind = extensions.uint(2)? as u16;
        let data = extensions.vector(2)?;
        match kind {
            EXT_SESSION_TICKET => hello.offers_ticket = !data.is_empty(),
            EXT_PRE_SHARED_KEY => hello.offers_psk = true,
            EXT_KEY_SHARE => hello.key_shares = key_shares(data)?,
            _ => {}
        }
    }
    Some(hello)
}

/// Reads a ClientHello from a TLS record (starting at its header) that holds all of it.
pub fn parse_record(record: &[u8]) -> Option<ClientHello> {
    let mut b = Reader(record);
    if b.u8()? != HANDSHAKE {
        return None;
    }
    b.take(2)?;
    parse_message(b.vector(2)?)
}

/// True when a handshake message (starting at its type byte) is a HelloRetryRequest.
pub fn is_hello_retry_request(message: &[u8]) -> bool {
    message.first() == Some(&SERVER_HELLO) && message.get(6..38) == Some(&HELLO_RETRY_RANDOM[..])
}

/// The bytes from the start of the server's stream that tell a HelloRetryRequest: the
/// record header, the handshake header, the version and the random.
pub const SERVER_HELLO_PREFIX_BYTES: usize = RECORD_HEADER_BYTES + 4 + 2 + 32;

/// True when the server's stream starts (its first record) with a HelloRetryRequest.
pub fn stream_starts_with_hello_retry(prefix: &[u8]) -> bool {
    prefix.first() == Some(&HANDSHAKE)
        && prefix
            .get(RECORD_HEADER_BYTES..)
            .is_some_and(is_hello_retry_request)
}

/// `key_share`'s ClientHello form: client_shares<0..2^16-1> of (group, key_exchange<1..>).
fn key_shares(data: &[u8]) -> Option<KeyShares> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.vector(2)?);
    let mut shares = KeyShares::default();
    while !list.0.is_empty() {
        let group = list.uint(2)? as u16;
        list.vector(2)?;
        shares.push(group);
    }
    Some(shares)
}

/// The TLS name of a group (its IANA registry name; hybrids as the drafts spell them).
pub fn group_name(code: u16) -> Option<&'static str> {
    Some(match code {
        0x0017 => "secp256r1",
        0x0018 => "secp384r1",
        0x0019 => "secp521r1",
        0x001d => "x25519",
        0x001e => "x448",
        0x0100 => "ffdhe2048",
        0x0101 => "ffdhe3072",
        0x0102 => "ffdhe4096",
        0x0103 => "ffdhe6144",
        0x0104 => "ffdhe8192",
        0x0200 => "MLKEM512",
        0x0201 => "MLKEM768",
        0x0202 => "MLKEM1024",
        0x11eb => "SecP256r1MLKEM768",
        0x11ec => "X25519MLKEM768",
        0x11ed => "SecP384r1MLKEM1024",
        _ => return None,
    })
}

/// A group's name, or its code point in hex ("0x2a2a" for GREASE and unknown groups).
pub fn group_label(code: u16) -> String {
    group_name(code).map_or_else(|| format!("0x{code:04x}"), str::to_string)
}

/// A cursor over borrowed bytes; every read checks the length first.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// A big-endian integer of `width` (1 to 3) bytes.
    fn uint(&mut self, width: usize) -> Option<usize> {
        Some(
            self.take(width)?
                .iter()
                .fold(0, |a, &x| a << 8 | usize::from(x)),
        )
    }

    /// A vector with a `width`-byte length prefix.
    fn vector(&mut self, width: usize) -> Option<&'a [u8]> {
        let n = self.uint(width)?;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut e = kind.to_be_bytes().to_vec();
        e.extend((body.len() as u16).to_be_bytes());
        e.extend(body);
        e
    }

    fn key_share_ext(shares: &[(u16, usize)]) -> Vec<u8> {
        let mut list = Vec::new();
        for &(group, len) in shares {
            list.extend(group.to_be_bytes());
            list.extend((len as u16).to_be_bytes());
            list.extend(vec![0x42; len]);
        }
        let mut body = (list.len() as u16).to_be_bytes().to_vec();
        body.extend(list);
        ext(EXT_KEY_SHARE, &body)
    }

    /// A ClientHello record carrying `extensions` (already encoded).
    fn hello_record(extensions: &[Vec<u8>]) -> Vec<u8> {
        let ext: Vec<u8> = extensions.concat();
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(32);
        body.extend([9u8; 32]);
        body.extend([0, 2, 0x13, 0x01]);
        body.extend([1, 0]);
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut hs = vec![CLIENT_HELLO];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![HANDSHAKE, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn the_two_default_shares_of_openssl_3_5_are_read_in_order() {
        let rec = hello_record(&[
            ext(0x000a, &[0, 4, 0x11, 0xec, 0, 0x1d]),
            key_share_ext(&[(0x11ec, 1216), (0x001d, 32)]),
        ]);
        let hello = parse_record(&rec).expect("a ClientHello");
        assert_eq!(hello.key_shares.count(), 2);
        assert_eq!(hello.key_shares.groups(), &[0x11ec, 0x001d]);
        assert_eq!(hello.record_bytes(), rec.len());
        assert_eq!(hello.message_bytes, rec.len() - 5);
        let names: Vec<String> = hello
            .key_shares
            .groups()
            .iter()
            .map(|&g| group_label(g))
            .collect();
        assert_eq!(names, ["X25519MLKEM768", "x25519"]);
    }

    #[test]
    fn a_tls12_only_hello_has_no_key_shares_and_tickets_are_told_apart() {
        let with = parse_record(&hello_record(&[ext(EXT_SESSION_TICKET, &[1, 2, 3])])).unwrap();
        assert!(with.offers_ticket);
        assert_eq!(with.key_shares.count(), 0);
        let empty = parse_record(&hello_record(&[ext(EXT_SESSION_TICKET, &[])])).unwrap();
        assert!(!empty.offers_ticket);
        let psk = parse_record(&hello_record(&[
            key_share_ext(&[(0x001d, 32)]),
            ext(EXT_PRE_SHARED_KEY, &[0; 10]),
        ]))
        .unwrap();
        assert!(psk.offers_psk && !psk.offers_ticket);
    }

    #[test]
    fn more_shares_than_kept_are_counted() {
        let shares: Vec<(u16, usize)> = (0..9).map(|i| (0x0a0a + i, 1)).collect();
        let hello = parse_record(&hello_record(&[key_share_ext(&shares)])).unwrap();
        assert_eq!(hello.key_shares.count(), 9);
        assert_eq!(hello.key_shares.groups().len(), MAX_KEY_SHARES);
        assert_eq!(group_label(0x0a0a), "0x0a0a");
    }

    #[test]
    fn truncated_or_foreign_input_is_not_a_hello() {
        let rec = hello_record(&[key_share_ext(&[(0x001d, 32)])]);
        for cut in 0..rec.len() {
            assert_eq!(parse_record(&rec[..cut]), None, "cut at {cut}");
        }
        let mut app = rec.clone();
        app[0] = 23;
        assert_eq!(parse_record(&app), None);
        let mut bad_share = rec.clone();
        // The key_share list claims one byte more than the extension holds.
        let at = rec.len() - 32 - 2 - 2 - 2 - 1;
        bad_share[at] += 1;
        assert_eq!(parse_record(&bad_share), None);
    }

    #[test]
    fn a_hello_retry_request_is_told_by_its_random() {
        let mut hrr = vec![HANDSHAKE, 3, 3, 0, 80, SERVER_HELLO, 0, 0, 76, 3, 3];
        hrr.extend(HELLO_RETRY_RANDOM);
        assert!(stream_starts_with_hello_retry(&hrr));
        assert!(is_hello_retry_request(&hrr[5..]));
        hrr[20] ^= 1;
        assert!(!stream_starts_with_hello_retry(&hrr));
        assert!(!stream_starts_with_hello_retry(&hrr[..20]));
    }

    #[test]
    fn a_hello_longer_than_a_record_counts_every_record_header() {
        let hello = ClientHello {
            message_bytes: MAX_RECORD_PAYLOAD + 1,
            ..ClientHello::default()
        };
        assert_eq!(hello.record_bytes(), MAX_RECORD_PAYLOAD + 1 + 10);
    }
}
