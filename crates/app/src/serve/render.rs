//! The built-in server's counters, as `serve` prints them when it stops.

use std::io::{self, Write};

use server::StatsSnapshot;

/// `serve`'s closing summary: connections, handshakes by kind and failure, requests, bytes, and
/// what the server's limits did to clients (lines shown only when something happened).
pub fn summary(out: &mut impl Write, s: &StatsSnapshot) -> io::Result<()> {
    writeln!(
        out,
        "tlsscope serve: stopped after {:.1} s",
        s.uptime_ms as f64 / 1000.0
    )?;
    connections(out, s)?;
    handshakes(out, s)?;
    requests(out, s)?;
    writeln!(
        out,
        "  bytes        read {}, written {}",
        s.bytes.read, s.bytes.written
    )?;
    Ok(())
}

fn connections(out: &mut impl Write, s: &StatsSnapshot) -> io::Result<()> {
    let c = &s.connections;
    writeln!(
        out,
        "  connections  accepted {}, closed {}, errors {}",
        c.accepted, c.closed, c.errors
    )?;
    let t = &c.timed_out;
    if t.handshake + t.request_head + t.keep_alive + t.stalled > 0 {
        writeln!(
            out,
            "    timed out: handshake {}, request head {}, kept alive without a request {}, \
             stalled body or response {}",
            t.handshake, t.request_head, t.keep_alive, t.stalled
        )?;
    }
    if c.shed + c.accept_pauses > 0 {
        writeln!(
            out,
            "    at the connection limit: {} shed (the longest waiting for their client), \
             accepting paused {}",
            c.shed,
            crate::render::words::count(c.accept_pauses, "time")
        )?;
    }
    if c.responses_aborted > 0 {
        writeln!(
            out,
            "    client gone mid-response (reset or closed): {}",
            c.responses_aborted
        )?;
    }
    Ok(())
}

fn handshakes(out: &mut impl Write, s: &StatsSnapshot) -> io::Result<()> {
    let h = &s.handshakes;
    writeln!(
        out,
        "  handshakes   full {}, resumed by session ID {}, resumed by ticket {}, failed {} \
         (TLSv1.3 {}, TLSv1.2 {}, other {})",
        h.full, h.resumed_session_id, h.resumed_ticket, h.failed, h.tls13, h.tls12, h.other_version
    )?;
    if h.failed > 0 {
        let f = &h.failed_by;
        writeln!(
            out,
            "    failed, by class: timed out {}, not TLS {}, client gone {}, shed {}, other {}",
            f.timeout, f.not_tls, f.peer_closed, f.shed, f.other
        )?;
    }
    if !h.by_group.is_empty() {
        let groups: Vec<String> = h.by_group.iter().map(|(g, n)| format!("{g} {n}")).collect();
        writeln!(out, "    by group: {}", groups.join(", "))?;
    }
    for (reason, n) in &h.failure_reasons {
        writeln!(out, "    failed: {reason}: {n}")?;
    }
    if h.renegotiations_refused > 0 {
        writeln!(
            out,
            "    renegotiations refused: {}",
            h.renegotiations_refused
        )?;
    }
    if h.async_waits > 0 {
        writeln!(
            out,
            "    async waits: {} (calls that returned WANT_ASYNC while an engine's job was paused)",
            h.async_waits
        )?;
    }
    Ok(())
}

fn requests(out: &mut impl Write, s: &StatsSnapshot) -> io::Result<()> {
    let r = &s.responses;
    writeln!(
        out,
        "  requests     {} (2xx {}, 4xx {}, 5xx {})",
        s.requests, r.ok, r.client_error, r.server_error
    )?;
    let j = &s.requests_rejected;
    if j.head_too_large + j.uri_too_long + j.malformed + j.unsupported > 0 {
        writeln!(
            out,
            "    refused and closed: head too large (431) {}, request line too long (414) {}, \
             malformed (400) {}, chunked body (501) {}",
            j.head_too_large, j.uri_too_long, j.malformed, j.unsupported
        )?;
    }
    if s.requests_pipelined + r.blocked_on_client > 0 {
        writeln!(
            out,
            "    pipelined {}; responses held up by a client not reading {}",
            s.requests_pipelined,
            crate::render::words::count(r.blocked_on_client, "time")
        )?;
    }
    Ok(())
}

/// "tlsscope serve: listening on https://ADDR (rsa2048, OpenSSL 3.5.5, 1 thread, session cache
/// on, tickets on)", with async mode's word where it is on.
pub fn listening(
    cfg: &crate::serve::config::ServeConfig,
    l: &crate::serve::session::Listening<'_>,
) -> String {
    let on_off = |on: bool| if on { "on" } else { "off" };
    let async_note = match (cfg.async_mode, l.engine) {
        (false, _) => String::new(),
        (true, Some(id)) => format!(", async with engine {id}"),
        (true, None) => ", async (no engine: nothing pauses)".into(),
    };
    format!(
        "tlsscope serve: listening on https://{} ({}, {}, {}, session cache {}, tickets {}{})",
        l.addr,
        l.cert_name,
        l.lib.name(),
        crate::render::words::count(cfg.threads, "thread"),
        on_off(cfg.settings.session_cache),
        on_off(cfg.settings.tickets),
        async_note,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_runs_print_no_hardening_lines() {
        let mut out = Vec::new();
        summary(&mut out, &StatsSnapshot::default()).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 5, "{text}");
    }

    #[test]
    fn hostile_clients_show_up_under_their_section() {
        let mut s = StatsSnapshot::default();
        s.connections.timed_out.request_head = 3;
        s.handshakes.failed = 2;
        s.handshakes.failed_by.not_tls = 2;
        s.handshakes.renegotiations_refused = 1;
        s.requests_rejected.uri_too_long = 4;
        let mut out = Vec::new();
        summary(&mut out, &s).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("request head 3"), "{text}");
        assert!(text.contains("not TLS 2"), "{text}");
        assert!(text.contains("renegotiations refused: 1"), "{text}");
        assert!(text.contains("request line too long (414) 4"), "{text}");
        assert!(!text.contains("pipelined"), "{text}");
    }
}
