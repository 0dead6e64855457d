//! Just enough HTTP/1.1 for a benchmark target: request heads, keep-alive, and three routes.

use std::io::Write;

/// Where the server's own counters are served, as JSON.
pub const STATS_PATH: &str = "/.well-known/tlsscope/stats";

/// The largest request head accepted; larger ones get 431 and the connection is closed.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// The longest request line accepted; longer ones get 414 and the connection is closed.
pub const MAX_REQUEST_LINE_BYTES: usize = 8 * 1024;

/// The page served at `/`: small, like nginx's default index page (615 bytes).
pub const INDEX_PAGE: &[u8] = b"<!DOCTYPE html>
<html>
<head>
<title>tlsscope</title>
<style>
body { width: 40em; margin: 0 auto; font-family: sans-serif; }
</style>
</head>
<body>
<h1>tlsscope built-in server</h1>
<p>This is the default page of the TLS/HTTP target that tlsscope runs for its
experiments. It is about as large as a web server's welcome page, so that a
request for it measures TLS and HTTP overhead rather than the transfer of data.</p>
<p>Other routes: <code>/bytes/N</code> returns N bytes, and
<code>/.well-known/tlsscope/stats</code> returns what the server counted, as JSON.</p>
<p><em>Measure, do not guess.</em></p>
</body>
</html>
";

/// A parsed request head.
#[derive(Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    /// False for `Connection: close`, and for HTTP/1.0 without `Connection: keep-alive`.
    pub keep_alive: bool,
    /// The request body length (`Content-Length`), which the server reads and discards.
    pub body_bytes: u64,
    /// Bytes the head took, including the blank line.
    pub head_bytes: usize,
}

/// Why a request head could not be used.
#[derive(Debug, PartialEq, Eq)]
pub enum ParseError {
    /// The head is not complete yet: read more.
    Incomplete,
    /// Malformed: answer 400 and close.
    Bad,
    /// A body framing this server does not handle (chunked uploads): answer 501 and close.
    Unsupported,
    /// The request line or the whole head is over its limit (see [`HeadStatus`]).
    TooLarge,
}

/// Parses one request head from the start of `buf`.
pub fn parse_request(buf: &[u8]) -> Result<Request<'_>, ParseError> {
    let mut scan = HeadScan::default();
    match scan.advance(buf) {
        HeadStatus::Complete(end) => parse_head(buf, end),
        HeadStatus::Incomplete => Err(ParseError::Incomplete),
        HeadStatus::LineTooLong | HeadStatus::TooLarge => Err(ParseError::TooLarge),
    }
}

/// Where a request head ends, found across reads without looking at a byte twice (a client
/// sending its head a byte at a time must not make the server rescan it on every byte).
#[derive(Clone, Debug, Default)]
pub struct HeadScan {
    /// Bytes already searched.
    scanned: usize,
    /// The end of the request line, once seen.
    line_end: Option<usize>,
}

/// What [`HeadScan::advance`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadStatus {
    /// The head ends at this offset (the blank line starts there).
    Complete(usize),
    /// Not yet: read more.
    Incomplete,
    /// The request line is longer than [`MAX_REQUEST_LINE_BYTES`]: answer 414.
    LineTooLong,
    /// The head is longer than [`MAX_HEAD_BYTES`]: answer 431.
    TooLarge,
}

impl HeadScan {
    /// Starts over, for the next request (its bytes now start the buffer).
    pub fn reset(&mut self) {
        *self = HeadScan::default();
    }

    /// Looks at the bytes of `buf` not seen yet; `buf` is the head so far, from its start.
    pub fn advance(&mut self, buf: &[u8]) -> HeadStatus {
        // Back up over a terminator split between two reads.
        let from = self.scanned.saturating_sub(3).min(buf.len());
        self.scanned = buf.len();
        if self.line_end.is_none() {
            self.line_end = memchr::memmem::find(&buf[from..], b"\r\n").map(|i| from + i);
        }
        match self.line_end {
            Some(end) if end > MAX_REQUEST_LINE_BYTES => return HeadStatus::LineTooLong,
            None if buf.len() > MAX_REQUEST_LINE_BYTES => return HeadStatus::LineTooLong,
            _ => {}
        }
        match memchr::memmem::find(&buf[from..], b"\r\n\r\n") {
            Some(i) if from + i + 4 > MAX_HEAD_BYTES => HeadStatus::TooLarge,
            Some(i) => HeadStatus::Complete(from + i),
            None if buf.len() >= MAX_HEAD_BYTES => HeadStatus::TooLarge,
            None => HeadStatus::Incomplete,
        }
    }
}

/// Parses the request head that ends (blank line excluded) at `end` of `buf`, as found by
/// [`HeadScan`].
pub fn parse_head(buf: &[u8], end: usize) -> Result<Request<'_>, ParseError> {
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| ParseError::Bad)?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().ok_or(ParseError::Bad)?;
    let mut parts = request_line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ParseError::Bad);
    };
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(ParseError::Bad),
    };
    if method.is_empty() || !path.starts_with('/') {
        return Err(ParseError::Bad);
    }
    let mut keep_alive = !http10;
    let mut body_bytes = 0;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or(ParseError::Bad)?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body_bytes = value.parse().map_err(|_| ParseError::Bad)?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ParseError::Unsupported);
        }
    }
    Ok(Request {
        method,
        path,
        keep_alive,
        body_bytes,
        head_bytes: end + 4,
    })
}

/// What to send back: a status, a content type, and the body's source.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Index,
    Bytes(u64),
    Stats,
    NotFound,
    MethodNotAllowed,
}

/// Picks the route for a request.
pub fn route(method: &str, path: &str) -> Route {
    if !matches!(method, "GET" | "HEAD" | "POST") {
        return Route::MethodNotAllowed;
    }
    let path = path.split('?').next().unwrap_or(path);
    if path == "/" || path == "/index.html" {
        return Route::Index;
    }
    if path == STATS_PATH {
        return Route::Stats;
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        if let Ok(n) = n.parse::<u64>() {
            return Route::Bytes(n);
        }
    }
    Route::NotFound
}

/// Writes a response head into `out`.
pub fn write_head(
    out: &mut Vec<u8>,
    status: u16,
    content_type: &str,
    content_length: u64,
    keep_alive: bool,
) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        _ => "Error",
    };
    let connection = if keep_alive { "keep-alive" } else { "close" };
    // Writing into a Vec cannot fail.
    let _ = write!(
        out,
        "HTTP/1.1 {status} {reason}\r\nServer: tlsscope\r\nContent-Type: {content_type}\r\n\
         Content-Length: {content_length}\r\nConnection: {connection}\r\n\r\n"
    );
}

/// The two complete responses for `/` (keep-alive and close), made once so the hot path copies
/// bytes instead of formatting.
pub struct CannedIndex {
    pub keep_alive: Vec<u8>,
    pub close: Vec<u8>,
}

impl CannedIndex {
    pub fn new() -> CannedIndex {
        let make = |keep_alive| {
            let mut v = Vec::with_capacity(INDEX_PAGE.len() + 160);
            write_head(
                &mut v,
                200,
                "text/html",
                INDEX_PAGE.len() as u64,
                keep_alive,
            );
            v.extend_from_slice(INDEX_PAGE);
            v
        };
        CannedIndex {
            keep_alive: make(true),
            close: make(false),
        }
    }
}

impl Default for CannedIndex {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_rules() {
        let r = parse_request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.keep_alive);
        assert_eq!(r.head_bytes, 27);
        let r = parse_request(b"GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let r = parse_request(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let r = parse_request(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n").unwrap();
        assert!(r.keep_alive);
    }

    #[test]
    fn incomplete_bad_and_unsupported() {
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHost"),
            Err(ParseError::Incomplete)
        );
        assert_eq!(parse_request(b"GARBAGE\r\n\r\n"), Err(ParseError::Bad));
        assert_eq!(parse_request(b"GET / HTTP/2\r\n\r\n"), Err(ParseError::Bad));
        assert_eq!(
            parse_request(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(ParseError::Unsupported)
        );
        let r = parse_request(b"POST / HTTP/1.1\r\nContent-Length: 12\r\n\r\nhello").unwrap();
        assert_eq!(r.body_bytes, 12);
    }

    #[test]
    fn a_head_is_found_across_reads() {
        let whole = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut scan = HeadScan::default();
        for n in 1..whole.len() {
            assert_eq!(scan.advance(&whole[..n]), HeadStatus::Incomplete, "{n}");
        }
        assert_eq!(scan.advance(whole), HeadStatus::Complete(whole.len() - 4));
        scan.reset();
        assert_eq!(
            scan.advance(b"GET / HTTP/1.1\r\n\r\n"),
            HeadStatus::Complete(14)
        );
    }

    #[test]
    fn long_request_lines_and_heads_are_refused() {
        let mut line = b"GET /".to_vec();
        line.resize(MAX_REQUEST_LINE_BYTES + 1, b'a');
        assert_eq!(HeadScan::default().advance(&line), HeadStatus::LineTooLong);
        line.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(HeadScan::default().advance(&line), HeadStatus::LineTooLong);

        let mut head = b"GET / HTTP/1.1\r\n".to_vec();
        while head.len() < MAX_HEAD_BYTES {
            head.extend_from_slice(b"X-Filler: 0123456789abcdef\r\n");
        }
        assert_eq!(HeadScan::default().advance(&head), HeadStatus::TooLarge);
        head.extend_from_slice(b"\r\n");
        assert_eq!(HeadScan::default().advance(&head), HeadStatus::TooLarge);
        assert_eq!(parse_request(&head), Err(ParseError::TooLarge));
    }

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/"), Route::Index);
        assert_eq!(route("GET", "/bytes/0"), Route::Bytes(0));
        assert_eq!(route("HEAD", "/bytes/1048576"), Route::Bytes(1 << 20));
        assert_eq!(route("GET", "/bytes/x"), Route::NotFound);
        assert_eq!(route("GET", STATS_PATH), Route::Stats);
        assert_eq!(route("DELETE", "/"), Route::MethodNotAllowed);
    }

    #[test]
    fn canned_index_has_the_right_length() {
        let c = CannedIndex::new();
        let text = String::from_utf8(c.close.clone()).unwrap();
        assert!(text.contains(&format!("Content-Length: {}\r\n", INDEX_PAGE.len())));
        assert!(text.contains("Connection: close"));
        assert!(c.keep_alive.ends_with(INDEX_PAGE));
    }
}
