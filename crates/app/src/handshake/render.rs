//! What `handshake` prints per connection: one line for people, or one JSON object.

use std::net::SocketAddr;
use std::time::Duration;

/// One connection as `handshake` reports it.
pub struct Connection<'a> {
    /// Its number, from 1.
    pub index: usize,
    pub negotiated: &'a ossl::Negotiated,
    pub connect: Duration,
    pub handshake: Duration,
    /// HTTP status and body bytes, when a request was sent.
    pub response: Option<(u16, usize)>,
    /// What the handshake put on the wire (see `load::wire` for what is counted).
    pub wire: Option<load::wire::WireCounts>,
}

impl<'a> Connection<'a> {
    /// What one connection got, numbered `index`.
    pub fn of(outcome: &'a crate::common::client::Outcome, index: usize) -> Connection<'a> {
        Connection {
            index,
            negotiated: &outcome.negotiated,
            connect: outcome.connect,
            handshake: outcome.handshake,
            response: outcome.response,
            wire: outcome.wire,
        }
    }
}

/// "#1 127.0.0.1:4433 TLSv1.3 ... full connect=0.79ms handshake=1.86ms GET / -> 200".
pub fn line(c: &Connection<'_>, addr: SocketAddr, request: Option<&str>) -> String {
    let n = c.negotiated;
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_string());
    let mut line = format!(
        "#{} {} {} {} group={} sig={} key={} {} connect={:.2}ms handshake={:.2}ms",
        c.index,
        addr,
        n.version,
        n.cipher,
        or_dash(&n.group),
        or_dash(&n.signature),
        or_dash(&n.server_key),
        n.kind,
        ms(c.connect),
        ms(c.handshake),
    );
    if let Some(w) = &c.wire {
        line.push_str(&format!(
            " wire client={}B server={}B hello={}B shares={} hrr={} round_trips={}",
            w.client_bytes,
            w.server_bytes,
            w.client_hello_bytes,
            share_names(w).join(","),
            if w.hello_retry { "yes" } else { "no" },
            w.round_trips
        ));
    }
    if let (Some(path), Some((status, bytes))) = (request, c.response) {
        line.push_str(&format!(
            " GET {path} -> {status} ({})",
            crate::render::words::count(bytes as u64, "byte")
        ));
    }
    line
}

/// One JSON object, as `handshake --json` prints per connection.
pub fn json(c: &Connection<'_>, lib: &ossl::Library) -> serde_json::Value {
    let n = c.negotiated;
    serde_json::json!({
        "connection": c.index,
        "library": lib.name(),
        "library_flavour": lib.flavour().name(),
        "library_version_number": lib.version().number,
        "version": n.version,
        "cipher": n.cipher,
        "cipher_standard": n.cipher_standard,
        "group": n.group,
        "signature": n.signature,
        "server_key": n.server_key,
        "handshake": n.kind.name(),
        "resumed": n.kind.is_resumed(),
        "connect_ms": ms(c.connect),
        "handshake_ms": ms(c.handshake),
        "status": c.response.map(|r| r.0),
        "body_bytes": c.response.map(|r| r.1),
        "wire": c.wire.as_ref().map(|w| serde_json::json!({
            "client_bytes": w.client_bytes,
            "server_bytes": w.server_bytes,
            "client_hello_bytes": w.client_hello_bytes,
            "key_shares": w.key_shares.count(),
            "key_share_groups": share_names(w),
            "hello_retry_request": w.hello_retry,
            "round_trips": w.round_trips,
        })),
    })
}

/// The ClientHello's key share groups by TLS name.
fn share_names(w: &load::wire::WireCounts) -> Vec<String> {
    w.key_shares
        .groups()
        .iter()
        .map(|&g| load::client_hello::group_label(g))
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
