//! The ClientHello reader (`load::client_hello`) and the wire counter's stream reading
//! (`load::wire::WireTap`), which read what a peer put on the wire.
//!
//! The input is the start of a TLS byte stream (a client's ClientHello record, or a server's
//! first flight). Properties: nothing panics; what the reader reports stays inside the input
//! (the message is no longer than the bytes, the named shares no more than the counted ones);
//! a record and the message it carries read the same; and the counter's figures for the
//! stream do not depend on how the socket split it into reads.

use load::client_hello::{self, MAX_KEY_SHARES, RECORD_HEADER_BYTES};
use load::wire::WireTap;

/// Checks the reader and the counter on `data` (see the module's properties); panics on a
/// violation. Accepted: a ClientHello (a record or a bare message) or a HelloRetryRequest.
pub fn check(data: &[u8]) -> bool {
    let from_record = client_hello::parse_record(data);
    if let Some(h) = from_record {
        assert!(
            h.message_bytes + RECORD_HEADER_BYTES <= data.len(),
            "the message is longer than the bytes"
        );
        let message = &data[RECORD_HEADER_BYTES..];
        assert_eq!(
            client_hello::parse_message(message),
            Some(h),
            "the record and its message read differently"
        );
        assert!(h.key_shares.groups().len() <= h.key_shares.count().min(MAX_KEY_SHARES));
        assert!(h.record_bytes() >= h.message_bytes + RECORD_HEADER_BYTES);
    }
    let from_message = client_hello::parse_message(data);
    if let Some(h) = &from_message {
        assert!(
            h.message_bytes <= data.len(),
            "the message is longer than the bytes"
        );
    }
    let retry = client_hello::is_hello_retry_request(data);
    // The same stream, whole and in reads of a size the first byte picks.
    let read_bytes = usize::from(data.first().copied().unwrap_or(0)) + 1;
    let mut whole = WireTap::default();
    whole.sent(1);
    whole.received_stream(data);
    let mut in_reads = WireTap::default();
    in_reads.sent(1);
    for read in data.chunks(read_bytes) {
        in_reads.received_stream(read);
    }
    assert_eq!(
        whole.counts(),
        in_reads.counts(),
        "the figures depend on the read size ({read_bytes} bytes)"
    );
    assert_eq!(whole.counts().server_bytes, data.len() as u64);
    from_record.is_some() || from_message.is_some() || retry
}
