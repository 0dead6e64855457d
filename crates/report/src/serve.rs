//! The built-in server's counters, as `serve` prints them when it stops.

use std::io::{self, Write};

use server::StatsSnapshot;

/// `serve`'s closing summary: connections, handshakes by kind and failure, requests, bytes.
pub fn summary(out: &mut impl Write, s: &StatsSnapshot) -> io::Result<()> {
    let h = &s.handshakes;
    writeln!(
        out,
        "tlsscope serve: stopped after {:.1} s",
        s.uptime_ms as f64 / 1000.0
    )?;
    writeln!(
        out,
        "  connections  accepted {}, closed {}, errors {}",
        s.connections.accepted, s.connections.closed, s.connections.errors
    )?;
    writeln!(
        out,
        "  handshakes   full {}, resumed by session ID {}, resumed by ticket {}, failed {} \
         (TLSv1.3 {}, TLSv1.2 {}, other {})",
        h.full, h.resumed_session_id, h.resumed_ticket, h.failed, h.tls13, h.tls12, h.other_version
    )?;
    for (reason, n) in &h.failure_reasons {
        writeln!(out, "    failed: {reason}: {n}")?;
    }
    writeln!(
        out,
        "  requests     {} (2xx {}, 4xx {}, 5xx {})",
        s.requests, s.responses.ok, s.responses.client_error, s.responses.server_error
    )?;
    writeln!(
        out,
        "  bytes        read {}, written {}",
        s.bytes.read, s.bytes.written
    )?;
    Ok(())
}
