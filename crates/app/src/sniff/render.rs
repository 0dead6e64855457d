//! `tlsscope sniff` output: a readable stream (a header line per call, then the payload with
//! non-printable bytes escaped, or a hex dump), JSON lines, header redaction, the lines that say
//! what the ring buffer lost, and the closing summary.

use std::io::{self, Write};
use std::net::SocketAddr;

use model::sniff::{Losses, Record, Tally};
use serde::Serialize;

/// The header line of a call, without its line end.
pub fn header(r: &Record<'_>) -> String {
    let mut line = Vec::with_capacity(160);
    push_header(&mut line, r);
    // Only ASCII and the (UTF-8) names and addresses were written.
    String::from_utf8_lossy(&line).into_owned()
}

/// Appends the header line of a call, without its line end. Built by hand, digits included: a
/// line per call is written at hundreds of thousands of calls a second, where `format!` took a
/// fifth of the reader's time.
pub fn push_header(line: &mut Vec<u8>, r: &Record<'_>) {
    // Seconds with microseconds, rounded, and whole microseconds.
    let micros = (r.start_ns + 500) / 1000;
    push_u64(line, micros / 1_000_000);
    line.push(b'.');
    let frac = micros % 1_000_000;
    for zeros in [100_000, 10_000, 1_000, 100, 10] {
        if frac < zeros {
            line.push(b'0');
        }
    }
    push_u64(line, frac);
    line.push(b' ');
    line.extend_from_slice(r.comm.as_bytes());
    line.push(b' ');
    push_u64(line, u64::from(r.pid));
    line.push(b'/');
    push_u64(line, u64::from(r.tid));
    line.extend_from_slice(b" fd ");
    match r.fd {
        Some(fd) => {
            push_i64(line, i64::from(fd));
            if r.fd_from_earlier_call {
                line.push(b'*');
            }
        }
        None => line.push(b'?'),
    }
    push_addr(line, r.local);
    line.extend_from_slice(if r.direction == "read" {
        b" <-"
    } else {
        b" ->"
    });
    push_addr(line, r.peer);
    line.push(b' ');
    line.extend_from_slice(r.function.as_bytes());
    line.extend_from_slice(b" ret ");
    push_i64(line, r.ret);
    line.push(b' ');
    push_u64(line, r.total_bytes);
    // Per call, allocating nothing: the one word `count` would make.
    line.extend_from_slice(if r.total_bytes == 1 {
        b" byte "
    } else {
        b" bytes "
    });
    push_u64(line, (r.latency_ns + 500) / 1000);
    line.extend_from_slice(b"us");
    if r.uncaptured_bytes > 0 {
        line.extend_from_slice(b" [");
        push_u64(line, r.uncaptured_bytes);
        line.extend_from_slice(if r.uncaptured_bytes == 1 {
            b" byte not captured: --max-bytes]"
        } else {
            b" bytes not captured: --max-bytes]"
        });
    }
    if r.incomplete {
        line.extend_from_slice(b" [incomplete: pieces lost, ring buffer full]");
    }
}

/// " a.b.c.d:port", " [v6]:port" or " ?", as `SocketAddr` shows it.
fn push_addr(line: &mut Vec<u8>, a: Option<SocketAddr>) {
    match a {
        Some(SocketAddr::V4(a)) => {
            line.push(b' ');
            for (i, o) in a.ip().octets().into_iter().enumerate() {
                if i > 0 {
                    line.push(b'.');
                }
                push_u64(line, u64::from(o));
            }
            line.push(b':');
            push_u64(line, u64::from(a.port()));
        }
        Some(a) => {
            let _ = write!(line, " {a}");
        }
        None => line.extend_from_slice(b" ?"),
    }
}

/// `n` in decimal.
fn push_u64(line: &mut Vec<u8>, n: u64) {
    line.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `n` in decimal, with its sign.
fn push_i64(line: &mut Vec<u8>, n: i64) {
    line.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Bytes the text output shows as they are: printable ASCII but the backslash, and tab.
const SHOWN_AS_IS: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0x20;
    while b <= 0x7e {
        table[b] = b != b'\\' as usize;
        b += 1;
    }
    table[b'\t' as usize] = true;
    table
};

/// How many bytes at the start of `bytes` are shown as they are. Eight bytes at a time while
/// none of them is below 0x20, above 0x7e or a backslash (plaintext is mostly such runs, and a
/// byte at a time this was the reader's largest cost); the rest by the table.
fn shown_as_is_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = 0;
    while let Some(word) = bytes.get(at..at + 8) {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let w = u64::from_ne_bytes(eight);
        // A high bit per byte below 0x20, above 0x7e, or equal to b'\\' (the usual
        // "has a byte less than / more than / equal to" word tricks: a borrow may flag a byte
        // after a flagged one, never a word with none, so a flagged word is rescanned below).
        let below = w.wrapping_sub(ONES * 0x20) & !w;
        // (0x7e + 1 has its high bit clear, 0x7f + 1 set; bytes with it set already are kept.)
        let above = w.wrapping_add(ONES) | w;
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let equal = backslash.wrapping_sub(ONES) & !backslash;
        if (below | above | equal) & HIGHS != 0 {
            break;
        }
        at += 8;
    }
    at + bytes[at..]
        .iter()
        .position(|&b| !SHOWN_AS_IS[usize::from(b)])
        .unwrap_or(bytes.len() - at)
}

/// Appends a call as text: its header line, then the payload, printable ASCII as is, line ends
/// kept, other bytes as \xHH.
pub fn push_text(out: &mut Vec<u8>, r: &Record<'_>) {
    push_header(out, r);
    out.push(b'\n');
    if r.data.is_empty() {
        return;
    }
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(r.data.len() + 16);
    let mut rest = r.data;
    while !rest.is_empty() {
        // Runs of bytes shown as they are, copied at once.
        let run = shown_as_is_prefix(rest);
        out.extend_from_slice(&rest[..run]);
        let Some(&b) = rest.get(run) else { break };
        match b {
            b'\n' => out.extend_from_slice(b"\\n\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.extend_from_slice(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]),
        }
        rest = &rest[run + 1..];
    }
    if out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
}

/// Writes a call as text (`push_text`).
pub fn write_text(w: &mut (impl Write + ?Sized), r: &Record<'_>) -> io::Result<()> {
    let mut out = Vec::with_capacity(r.data.len() + 200);
    push_text(&mut out, r);
    w.write_all(&out)
}

/// Header line, then a hex dump (offset, 16 bytes in hex, ASCII).
pub fn push_hex(out: &mut Vec<u8>, r: &Record<'_>) {
    push_header(out, r);
    out.push(b'\n');
    for (i, row) in r.data.chunks(16).enumerate() {
        push_hex_row(out, i * 16, row);
    }
}

/// One row of the dump: `  {offset:08x}  {up to 16 bytes in hex, 47 wide}  {them as ASCII}`,
/// from a table, not a string per byte.
fn push_hex_row(out: &mut Vec<u8>, offset: usize, row: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let _ = write!(out, "  {offset:08x}  ");
    let start = out.len();
    for (k, &b) in row.iter().enumerate() {
        if k > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(&[DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]]);
    }
    out.resize(start + 47, b' ');
    out.extend_from_slice(b"  ");
    out.extend(
        row.iter()
            .map(|&b| if (0x20..0x7f).contains(&b) { b } else { b'.' }),
    );
    out.push(b'\n');
}

#[derive(Serialize)]
struct JsonLine<'a> {
    #[serde(flatten)]
    record: &'a Record<'a>,
    /// The captured bytes, base64.
    data_base64: String,
}

/// One JSON object per line; the payload in base64.
pub fn write_json(w: &mut (impl Write + ?Sized), r: &Record<'_>) -> io::Result<()> {
    let line = JsonLine {
        record: r,
        data_base64: base64(r.data),
    };
    serde_json::to_writer(&mut *w, &line)?;
    writeln!(w)
}

/// A stream line saying how many more calls were lost since the last such line, as JSON or for
/// people.
pub fn write_lost_line(out: &mut dyn Write, json: bool, lost: &Losses) -> io::Result<()> {
    let Losses {
        calls,
        records,
        unchecked,
    } = *lost;
    if json {
        writeln!(
            out,
            "{{\"lost_calls\":{calls},\"lost_records\":{records},\"unchecked_calls\":{unchecked}}}"
        )
    } else if unchecked == calls {
        writeln!(
            out,
            "*** lost {}: whether their file was a TLS socket could not be checked",
            crate::render::words::count(calls, "NSPR call")
        )
    } else {
        writeln!(
            out,
            "*** lost {} ({}, {}): the ring buffer was full; use a larger --ring-size",
            crate::render::words::count(calls, "call"),
            crate::render::words::count(records, "record"),
            crate::render::words::count(unchecked, "unchecked NSPR call")
        )
    }
}

/// The closing summary: calls the probes saw (`seen_calls`), received, shown, cut, lost.
pub fn write_summary(
    out: &mut dyn Write,
    t: &Tally,
    seen_calls: u64,
    lost: &Losses,
    ended_by: Option<&str>,
    took: std::time::Duration,
) -> io::Result<()> {
    let why = ended_by.map(|w| format!(" ({w})")).unwrap_or_default();
    writeln!(
        out,
        "tlsscope sniff: stopped after {:.1} s{why}: {} seen by the probes, {} received; {} {} ({}, {}, {})",
        took.as_secs_f64(),
        crate::render::words::count(seen_calls, "call"),
        t.calls,
        t.shown,
        if t.quiet { "counted, none shown (--quiet)," } else { "shown" },
        crate::render::words::count(t.reads, "read"),
        crate::render::words::count(t.writes, "write"),
        crate::render::words::count(t.bytes, "byte")
    )?;
    writeln!(
        out,
        "tlsscope sniff: cut at --max-bytes: {} ({} not captured); calls that moved no data (failed or would block): {}; lost (ring buffer full): {}, {}",
        crate::render::words::count(t.cut_calls, "call"),
        crate::render::words::count(t.cut_bytes, "byte"),
        t.failed_calls,
        crate::render::words::count(lost.calls - lost.unchecked, "call"),
        crate::render::words::count(lost.records, "record")
    )?;
    if lost.unchecked > 0 {
        writeln!(
            out,
            "tlsscope sniff: NSPR calls not sniffed, their layer unchecked (memory map busy): {}",
            lost.unchecked
        )?;
    }
    if t.output_failed || t.unwritten > 0 {
        let held = t
            .output_bytes
            .map(|b| format!("; the output holds the {} shown, {b} bytes", t.shown))
            .unwrap_or_default();
        // Copied by the probes, neither lost in their ring nor read before the capture stopped.
        let unread = seen_calls.saturating_sub(t.calls + lost.calls);
        writeln!(
            out,
            "tlsscope sniff: not written: {} calls received and {unread} left unread, lost with the output{why}{held}",
            t.unwritten
        )?;
    }
    Ok(())
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = match chunk {
            [a, b, c] => u32::from(*a) << 16 | u32::from(*b) << 8 | u32::from(*c),
            [a, b] => u32::from(*a) << 16 | u32::from(*b) << 8,
            [a] => u32::from(*a) << 16,
            _ => unreachable!("chunks(3)"),
        };
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Replaces the values of Authorization, Proxy-Authorization, Cookie and Set-Cookie header
/// lines with "[redacted]" (case-insensitive names; the line ends are kept).
pub fn redact_headers(data: &[u8]) -> Vec<u8> {
    const NAMES: [&[u8]; 4] = [
        b"authorization:",
        b"proxy-authorization:",
        b"cookie:",
        b"set-cookie:",
    ];
    let mut out = Vec::with_capacity(data.len());
    let mut rest = data;
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        let (line, tail) = rest.split_at(end);
        let lower: Vec<u8> = line.iter().map(u8::to_ascii_lowercase).collect();
        match NAMES.iter().find(|n| lower.starts_with(n)) {
            Some(name) => {
                out.extend_from_slice(&line[..name.len()]);
                out.extend_from_slice(b" [redacted]");
                let eol = line
                    .iter()
                    .rposition(|&b| b != b'\r' && b != b'\n')
                    .map_or(0, |i| i + 1);
                out.extend_from_slice(&line[eol..]);
            }
            None => out.extend_from_slice(line),
        }
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_summary_counts_and_does_not_claim_to_have_shown() {
        let summary = |quiet: bool| {
            let t = Tally {
                calls: 7,
                shown: 7,
                quiet,
                ..Tally::default()
            };
            let mut out = Vec::new();
            let took = std::time::Duration::from_secs(1);
            write_summary(&mut out, &t, 7, &Losses::default(), None, took).unwrap();
            String::from_utf8(out).unwrap()
        };
        assert!(
            summary(true).contains("7 counted, none shown (--quiet)"),
            "{}",
            summary(true)
        );
        assert!(!summary(true).contains("7 shown"));
        assert!(summary(false).contains("7 shown ("), "{}", summary(false));
    }

    #[test]
    fn calls_the_output_lost_are_not_claimed_as_shown() {
        let t = Tally {
            calls: 10,
            shown: 4,
            unwritten: 6,
            output_bytes: Some(4096),
            output_failed: true,
            ..Tally::default()
        };
        let mut out = Vec::new();
        let took = std::time::Duration::from_secs(1);
        let why = Some("no space left");
        write_summary(&mut out, &t, 13, &Losses::default(), why, took).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("10 received; 4 shown ("), "{text}");
        assert!(
            text.contains(
                "not written: 6 calls received and 3 left unread, lost with the output (no space left); the output holds the 4 shown, 4096 bytes"
            ),
            "{text}"
        );
    }

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn redaction_keeps_everything_but_secret_values() {
        let req =
            b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cr3t\r\ncookie: a=b\r\n\r\nbody";
        let out = String::from_utf8(redact_headers(req)).unwrap();
        assert_eq!(
            out,
            "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: [redacted]\r\ncookie: [redacted]\r\n\r\nbody"
        );
    }

    #[test]
    fn header_digits_match_the_formatter() {
        let mut line = Vec::new();
        let text = |line: &Vec<u8>| String::from_utf8(line.clone()).unwrap();
        for n in [0u64, 7, 10, 99, 100, 65_535, u64::MAX] {
            line.clear();
            push_u64(&mut line, n);
            assert_eq!(text(&line), n.to_string());
        }
        for n in [0i64, -1, -42, i64::MIN, i64::MAX] {
            line.clear();
            push_i64(&mut line, n);
            assert_eq!(text(&line), n.to_string());
        }
        let a: SocketAddr = "[::1]:443".parse().unwrap();
        for addr in [Some(a), Some("10.0.0.255:8".parse().unwrap()), None] {
            line.clear();
            push_addr(&mut line, addr);
            assert_eq!(
                text(&line),
                addr.map_or(" ?".to_string(), |a| format!(" {a}"))
            );
        }
    }

    #[test]
    fn the_word_scan_stops_where_the_table_does() {
        // Every byte value, at every position of a word and past the first word, after runs
        // of plain bytes of every kind (a borrow from a lower byte must not hide it).
        for b in 0..=255u8 {
            for at in 0..20 {
                for fill in [b' ', b'~', b'a', b'\t'] {
                    let mut bytes = vec![fill; 24];
                    bytes[at] = b;
                    let want = bytes
                        .iter()
                        .position(|&c| !SHOWN_AS_IS[usize::from(c)])
                        .unwrap_or(bytes.len());
                    assert_eq!(shown_as_is_prefix(&bytes), want, "byte {b:#x} at {at}");
                }
            }
        }
        assert_eq!(shown_as_is_prefix(b""), 0);
    }

    #[test]
    fn text_escapes_non_printable_bytes() {
        let r = Record {
            start_ns: 1_500_000_000,
            latency_ns: 12_000,
            pid: 7,
            tid: 8,
            comm: "curl",
            fd: Some(5),
            fd_from_earlier_call: false,
            local: "127.0.0.1:40000".parse().ok(),
            peer: "127.0.0.1:443".parse().ok(),
            function: "SSL_write",
            direction: "write",
            ret: 6,
            total_bytes: 6,
            uncaptured_bytes: 0,
            incomplete: false,
            data: b"hi\r\n\x00\\",
        };
        let mut out = Vec::new();
        write_text(&mut out, &r).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("1.500000 curl 7/8 fd 5 127.0.0.1:40000 -> 127.0.0.1:443 SSL_write ret 6 6 bytes 12us\n"), "{text}");
        assert!(text.ends_with("hi\\r\\n\n\\x00\\x5c\n"), "{text:?}");
        let early = Record {
            start_ns: 2_000_042_499,
            fd: None,
            ..r
        };
        assert!(
            header(&early).starts_with("2.000042 curl 7/8 fd ? "),
            "{}",
            header(&early)
        );
    }

    #[test]
    fn hex_rows_are_the_classic_dump() {
        // Every byte value, in lengths that end mid-row, on a row, and after several rows.
        let all: Vec<u8> = (0..=255u8).chain(0..=40).collect();
        for len in [0, 1, 15, 16, 17, 33, all.len()] {
            let data = &all[..len];
            let mut out = Vec::new();
            for (i, row) in data.chunks(16).enumerate() {
                push_hex_row(&mut out, i * 16, row);
            }
            let mut want = String::new();
            for (i, row) in data.chunks(16).enumerate() {
                let hex: Vec<String> = row.iter().map(|b| format!("{b:02x}")).collect();
                let ascii: String = row
                    .iter()
                    .map(|&b| {
                        if (0x20..0x7f).contains(&b) {
                            b as char
                        } else {
                            '.'
                        }
                    })
                    .collect();
                want.push_str(&format!(
                    "  {:08x}  {:<47}  {ascii}\n",
                    i * 16,
                    hex.join(" ")
                ));
            }
            assert_eq!(String::from_utf8(out).unwrap(), want, "{len} bytes");
        }
    }
}
