//! The wire figures of a kind of handshake in words, as bench's report and compare's tables
//! say them.

use load::wire::{FigureSummary, WireKind};

/// One kind of handshake's wire figures in words: bytes each way and the ClientHello per
/// handshake (a mean and its range when handshakes differed), key shares, round trips and
/// HelloRetryRequests.
pub fn words(k: &WireKind) -> String {
    let shares: Vec<String> = k
        .key_shares
        .iter()
        .map(|s| {
            if k.key_shares.len() == 1 {
                s.words()
            } else {
                format!("{} in {}", s.words(), s.handshakes)
            }
        })
        .collect();
    format!(
        "client {} B, server {} B per handshake; ClientHello {} B, key shares {}; round trips \
         {}; HelloRetryRequests {}",
        figure(&k.client_bytes),
        figure(&k.server_bytes),
        figure(&k.client_hello_bytes),
        shares.join(", "),
        figure(&k.round_trips),
        k.hello_retry_requests
    )
}

/// "290", or "295 (290-300)" when handshakes differed.
fn figure(f: &FigureSummary) -> String {
    if f.min == f.max {
        f.min.to_string()
    } else {
        format!("{:.0} ({}-{})", f.per_handshake, f.min, f.max)
    }
}
