//! The wire figures of a handshake: bytes each way, the ClientHello's size and key shares,
//! HelloRetryRequests, round trips; counted per connection, summed per kind of handshake.
//!
//! What is counted: every TLS record (its 5-byte header and its body, as on the wire) that
//! each side sent from the client's first ClientHello until the client's handshake is done,
//! that is up to each side's Finished. Each side's records after that (TLS 1.3
//! NewSessionTickets, application data, alerts) are not. Round trips: the client flights the
//! server answered before the client could send its first application byte (TCP's own
//! handshake not included): 1 for TLS 1.3 and TLS 1.2 resumption, 2 for a full TLS 1.2
//! handshake, one more after a HelloRetryRequest.
//!
//! How: the rustls engine counts the bytes its socket reads and writes pass (it owns the I/O);
//! the OpenSSL engine counts the record headers OpenSSL's message callback reports (see
//! `ossl::MessageObserver`). Either way the counting is a few additions per record into the
//! connection's own [`WireTap`]: no allocation, no lock, no system call.

use std::any::Any;

use serde::{Deserialize, Serialize};

use crate::client_hello::{self, ClientHello, KeyShares, RECORD_HEADER_BYTES};

/// A change_cipher_spec record's type.
const CHANGE_CIPHER_SPEC: u8 = 20;

/// What one handshake put on the wire (a snapshot taken when the handshake is done).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireCounts {
    pub client_bytes: u64,
    pub server_bytes: u64,
    /// The first ClientHello's records, headers included (0 when it was not seen).
    pub client_hello_bytes: u64,
    pub key_shares: KeyShares,
    pub hello_retry: bool,
    pub round_trips: u32,
}

/// A connection's counters, fed by its engine's I/O.
#[derive(Clone, Debug)]
pub struct WireTap {
    counts: WireCounts,
    hello_seen: bool,
    /// The client sent since it last received: the next bytes received answer a flight.
    awaiting_reply: bool,
    /// The start of the server's byte stream (rustls), to tell a HelloRetryRequest.
    server_prefix: [u8; client_hello::SERVER_HELLO_PREFIX_BYTES],
    server_prefix_len: usize,
}

impl Default for WireTap {
    fn default() -> WireTap {
        WireTap {
            counts: WireCounts::default(),
            hello_seen: false,
            awaiting_reply: false,
            server_prefix: [0; client_hello::SERVER_HELLO_PREFIX_BYTES],
            server_prefix_len: 0,
        }
    }
}

impl WireTap {
    /// The figures so far.
    pub fn counts(&self) -> WireCounts {
        self.counts
    }

    /// The client put `bytes` on the wire.
    pub fn sent(&mut self, bytes: usize) {
        if bytes > 0 {
            self.counts.client_bytes += bytes as u64;
            self.awaiting_reply = true;
        }
    }

    /// The client received `bytes` from the server.
    pub fn received(&mut self, bytes: usize) {
        if bytes > 0 {
            self.counts.server_bytes += bytes as u64;
            if std::mem::take(&mut self.awaiting_reply) {
                self.counts.round_trips += 1;
            }
        }
    }

    /// The client sent a ClientHello; the first one is the one reported.
    pub fn client_hello(&mut self, hello: Option<ClientHello>) {
        if std::mem::replace(&mut self.hello_seen, true) {
            return;
        }
        if let Some(h) = hello {
            self.counts.client_hello_bytes = h.record_bytes() as u64;
            self.counts.key_shares = h.key_shares;
        }
    }

    /// The client received a handshake message (from its type byte on).
    pub fn server_message(&mut self, message: &[u8]) {
        if client_hello::is_hello_retry_request(message) {
            self.counts.hello_retry = true;
        }
    }

    /// The server's byte stream as it arrives (rustls): counted, and its start checked for a
    /// HelloRetryRequest.
    pub fn received_stream(&mut self, bytes: &[u8]) {
        self.received(bytes.len());
        let have = self.server_prefix_len;
        if have < self.server_prefix.len() {
            let n = (self.server_prefix.len() - have).min(bytes.len());
            self.server_prefix[have..have + n].copy_from_slice(&bytes[..n]);
            self.server_prefix_len += n;
            if self.server_prefix_len == self.server_prefix.len()
                && client_hello::stream_starts_with_hello_retry(&self.server_prefix)
            {
                self.counts.hello_retry = true;
            }
        }
    }
}

impl ossl::MessageObserver for WireTap {
    fn record_header(&mut self, sent: bool, header: &[u8]) {
        let Some(len) = header.get(3..5) else {
            return;
        };
        let bytes = RECORD_HEADER_BYTES + usize::from(u16::from_be_bytes([len[0], len[1]]));
        if sent && header[0] == CHANGE_CIPHER_SPEC {
            // The callback reports a record when the library seals it, which is not always
            // when it goes out: AWS-LC and BoringSSL seal TLS 1.3's compatibility
            // change_cipher_spec as the ServerHello arrives and send it with their Finished.
            // It never asks for an answer on its own (in TLS 1.2 a Finished follows it), so
            // it does not start a round trip.
            self.counts.client_bytes += bytes as u64;
        } else if sent {
            self.sent(bytes);
        } else {
            self.received(bytes);
        }
    }

    fn handshake_message(&mut self, sent: bool, message: &[u8]) {
        if sent {
            if message.first() == Some(&1) {
                self.client_hello(client_hello::parse_message(message));
            }
        } else {
            self.server_message(message);
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Per-thread sums of the wire figures of one kind of handshake.
#[derive(Clone, Debug, Default)]
pub struct WireTally {
    pub handshakes: u64,
    pub client_bytes: Figure,
    pub server_bytes: Figure,
    pub client_hello_bytes: Figure,
    pub round_trips: Figure,
    pub hello_retries: u64,
    /// Each distinct set of key shares and how many handshakes offered it (a handful of
    /// entries: found by a short scan, allocated once when first seen).
    pub key_shares: Vec<(KeyShares, u64)>,
}

impl WireTally {
    /// Adds one handshake.
    pub fn add(&mut self, c: &WireCounts) {
        self.handshakes += 1;
        self.client_bytes.add(c.client_bytes);
        self.server_bytes.add(c.server_bytes);
        self.client_hello_bytes.add(c.client_hello_bytes);
        self.round_trips.add(u64::from(c.round_trips));
        self.hello_retries += u64::from(c.hello_retry);
        match self.key_shares.iter_mut().find(|(k, _)| *k == c.key_shares) {
            Some((_, n)) => *n += 1,
            None => self.key_shares.push((c.key_shares, 1)),
        }
    }

    /// Adds another thread's sums.
    pub fn merge(&mut self, o: &WireTally) {
        self.handshakes += o.handshakes;
        self.client_bytes.merge(&o.client_bytes);
        self.server_bytes.merge(&o.server_bytes);
        self.client_hello_bytes.merge(&o.client_hello_bytes);
        self.round_trips.merge(&o.round_trips);
        self.hello_retries += o.hello_retries;
        for &(k, n) in &o.key_shares {
            match self.key_shares.iter_mut().find(|(mine, _)| *mine == k) {
                Some((_, m)) => *m += n,
                None => self.key_shares.push((k, n)),
            }
        }
    }

    /// The summary results report; none without handshakes.
    pub fn summary(&self) -> Option<WireKind> {
        if self.handshakes == 0 {
            return None;
        }
        let mut key_shares: Vec<KeySharesCount> = self
            .key_shares
            .iter()
            .map(|(k, n)| KeySharesCount {
                count: k.count(),
                groups: k
                    .groups()
                    .iter()
                    .map(|&g| client_hello::group_label(g))
                    .collect(),
                handshakes: *n,
            })
            .collect();
        key_shares.sort_by_key(|k| std::cmp::Reverse(k.handshakes));
        let n = self.handshakes;
        Some(WireKind {
            handshakes: n,
            client_bytes: self.client_bytes.summary(n),
            server_bytes: self.server_bytes.summary(n),
            client_hello_bytes: self.client_hello_bytes.summary(n),
            round_trips: self.round_trips.summary(n),
            hello_retry_requests: self.hello_retries,
            key_shares,
        })
    }
}

/// A per-handshake figure's sum and range.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figure {
    pub total: u64,
    pub min: Option<u64>,
    pub max: u64,
}

impl Figure {
    fn add(&mut self, v: u64) {
        self.total += v;
        self.min = Some(self.min.map_or(v, |m| m.min(v)));
        self.max = self.max.max(v);
    }

    fn merge(&mut self, o: &Figure) {
        self.total += o.total;
        self.min = match (self.min, o.min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max = self.max.max(o.max);
    }

    fn summary(&self, n: u64) -> FigureSummary {
        FigureSummary {
            per_handshake: self.total as f64 / n.max(1) as f64,
            total: self.total,
            min: self.min.unwrap_or(0),
            max: self.max,
        }
    }
}

/// The wire figures of a run, per kind of handshake (see the module's doc for what is
/// counted).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireSummary {
    /// What the byte counts cover, in a sentence (results carry their own definition).
    pub counted: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<WireKind>,
    /// Resumed handshakes, by session ID or ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<WireKind>,
}

impl WireSummary {
    /// Adds another run's figures of the same definition (rounds of a compare variant).
    pub fn merge(&mut self, o: &WireSummary) {
        for (mine, theirs) in [(&mut self.full, &o.full), (&mut self.resumed, &o.resumed)] {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.merge(t),
                (None, Some(t)) => *mine = Some(t.clone()),
                _ => {}
            }
        }
    }
}

impl WireKind {
    fn merge(&mut self, o: &WireKind) {
        self.handshakes += o.handshakes;
        let n = self.handshakes;
        for (mine, theirs) in [
            (&mut self.client_bytes, &o.client_bytes),
            (&mut self.server_bytes, &o.server_bytes),
            (&mut self.client_hello_bytes, &o.client_hello_bytes),
            (&mut self.round_trips, &o.round_trips),
        ] {
            mine.total += theirs.total;
            mine.min = mine.min.min(theirs.min);
            mine.max = mine.max.max(theirs.max);
            mine.per_handshake = mine.total as f64 / n.max(1) as f64;
        }
        self.hello_retry_requests += o.hello_retry_requests;
        for k in &o.key_shares {
            match self
                .key_shares
                .iter_mut()
                .find(|m| m.groups == k.groups && m.count == k.count)
            {
                Some(m) => m.handshakes += k.handshakes,
                None => self.key_shares.push(k.clone()),
            }
        }
        self.key_shares
            .sort_by_key(|k| std::cmp::Reverse(k.handshakes));
    }
}

/// The definition results carry with their wire figures.
pub const COUNTED: &str = "TLS records (5-byte header + body) each side sent from the first ClientHello up to its Finished (the client's handshake done); round trips: client flights the server answered before the client's first application byte, TCP's handshake excluded";

/// One kind of handshake's wire figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WireKind {
    pub handshakes: u64,
    /// Client to server.
    pub client_bytes: FigureSummary,
    /// Server to client.
    pub server_bytes: FigureSummary,
    /// The first ClientHello's record(s), headers included.
    pub client_hello_bytes: FigureSummary,
    pub round_trips: FigureSummary,
    /// Handshakes the server answered with a HelloRetryRequest.
    pub hello_retry_requests: u64,
    /// The key shares the first ClientHello carried, by set, most frequent first.
    pub key_shares: Vec<KeySharesCount>,
}

/// A figure per handshake: mean, sum and range.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FigureSummary {
    pub per_handshake: f64,
    pub total: u64,
    pub min: u64,
    pub max: u64,
}

/// A set of key shares (groups by TLS name, in the ClientHello's order) and how many
/// handshakes' ClientHello carried it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeySharesCount {
    pub count: usize,
    pub groups: Vec<String>,
    pub handshakes: u64,
}

impl KeySharesCount {
    /// "2 (X25519MLKEM768, x25519)", "0".
    pub fn words(&self) -> String {
        if self.groups.is_empty() {
            return self.count.to_string();
        }
        format!("{} ({})", self.count, self.groups.join(", "))
    }
}

/// Per kind: full, and resumed (either way).
#[derive(Clone, Debug, Default)]
pub struct WireByKind {
    pub full: WireTally,
    pub resumed: WireTally,
}

impl WireByKind {
    pub fn add(&mut self, resumed: bool, c: &WireCounts) {
        if resumed {
            self.resumed.add(c);
        } else {
            self.full.add(c);
        }
    }

    pub fn merge(&mut self, o: &WireByKind) {
        self.full.merge(&o.full);
        self.resumed.merge(&o.resumed);
    }

    /// None when no handshake was counted.
    pub fn summary(&self) -> Option<WireSummary> {
        let full = self.full.summary();
        let resumed = self.resumed.summary();
        (full.is_some() || resumed.is_some()).then(|| WireSummary {
            counted: COUNTED.to_string(),
            full,
            resumed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ossl::MessageObserver;

    #[test]
    fn round_trips_count_answered_flights_and_bytes_include_headers() {
        let mut tap = WireTap::default();
        // TLS 1.2 full: CH; server flight in two records; CKE+CCS+Fin; server NST+CCS+Fin.
        tap.record_header(true, &[22, 3, 1, 0, 100]);
        tap.record_header(false, &[22, 3, 3, 0, 50]);
        tap.record_header(false, &[22, 3, 3, 1, 0]);
        tap.record_header(true, &[22, 3, 3, 0, 37]);
        tap.record_header(true, &[20, 3, 3, 0, 1]);
        tap.record_header(false, &[20, 3, 3, 0, 1]);
        let c = tap.counts();
        assert_eq!(c.client_bytes, 105 + 42 + 6);
        assert_eq!(c.server_bytes, 55 + 261 + 6);
        assert_eq!(c.round_trips, 2);
    }

    #[test]
    fn a_change_cipher_spec_sealed_early_does_not_count_a_round_trip() {
        // AWS-LC's order of callbacks in a TLS 1.3 handshake: ClientHello, ServerHello, its
        // compatibility CCS, the rest of the server's flight, then the Finished.
        let mut tap = WireTap::default();
        tap.record_header(true, &[22, 3, 1, 5, 0]);
        tap.record_header(false, &[22, 3, 3, 0, 90]);
        tap.record_header(true, &[20, 3, 3, 0, 1]);
        tap.record_header(false, &[23, 3, 3, 4, 0]);
        tap.record_header(true, &[23, 3, 3, 0, 53]);
        let c = tap.counts();
        assert_eq!(c.round_trips, 1);
        assert_eq!(c.client_bytes, 1285 + 6 + 58);
    }

    #[test]
    fn a_hello_retry_is_seen_in_the_stream_however_it_is_cut() {
        let mut stream = vec![22, 3, 3, 0, 88, 2, 0, 0, 84, 3, 3];
        stream.extend(client_hello::HELLO_RETRY_RANDOM);
        stream.extend([0u8; 50]);
        for cut in 1..stream.len() {
            let mut tap = WireTap::default();
            tap.sent(10);
            tap.received_stream(&stream[..cut]);
            tap.received_stream(&stream[cut..]);
            let c = tap.counts();
            assert!(c.hello_retry, "cut at {cut}");
            assert_eq!(c.server_bytes, stream.len() as u64);
            assert_eq!(c.round_trips, 1);
        }
    }

    #[test]
    fn summaries_of_rounds_merge_as_their_tallies_would() {
        let one = |client_bytes: u64| {
            let mut t = WireByKind::default();
            t.add(
                false,
                &WireCounts {
                    client_bytes,
                    round_trips: 1,
                    ..WireCounts::default()
                },
            );
            t
        };
        let mut merged = one(300).summary().unwrap();
        merged.merge(&one(500).summary().unwrap());
        let mut both = one(300);
        both.merge(&one(500));
        assert_eq!(merged, both.summary().unwrap());
    }

    #[test]
    fn tallies_merge_into_per_handshake_figures_and_share_sets() {
        let mut a = WireTally::default();
        let c = WireCounts {
            client_bytes: 300,
            server_bytes: 1000,
            client_hello_bytes: 250,
            round_trips: 1,
            ..WireCounts::default()
        };
        a.add(&c);
        let mut b = WireTally::default();
        b.add(&WireCounts {
            client_bytes: 500,
            hello_retry: true,
            round_trips: 2,
            ..c
        });
        a.merge(&b);
        let s = a.summary().unwrap();
        assert_eq!(s.handshakes, 2);
        assert_eq!(s.client_bytes.total, 800);
        assert_eq!(s.client_bytes.per_handshake, 400.0);
        assert_eq!((s.client_bytes.min, s.client_bytes.max), (300, 500));
        assert_eq!(s.hello_retry_requests, 1);
        assert_eq!(s.key_shares.len(), 1);
        assert_eq!(s.key_shares[0].handshakes, 2);
        assert_eq!(s.key_shares[0].words(), "0");
    }
}
