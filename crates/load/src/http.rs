//! The HTTP/1.1 client side: one request made once, responses parsed as they arrive.

/// Why a response could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// Not an HTTP/1.x response head, or one over 64 KiB.
    Malformed,
    /// Chunked bodies are not parsed: the target should send Content-Length (or close).
    Chunked,
    /// The connection closed before the response was complete.
    ClosedEarly,
}

impl HttpError {
    pub fn name(self) -> &'static str {
        match self {
            HttpError::Malformed => "http: malformed response",
            HttpError::Chunked => "http: chunked response (unsupported)",
            HttpError::ClosedEarly => "closed early (response)",
        }
    }
}

const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The request bytes, made once per run. As lean as HTTP/1.1 allows (keep-alive is its
/// default), so the server's cost per request is what a minimal request costs; wrk sends the
/// same. Every header line is work the server does on every request.
pub fn request_bytes(path: &str, host: &str, keep_alive: bool) -> Vec<u8> {
    let connection = if keep_alive {
        ""
    } else {
        "Connection: close\r\n"
    };
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{connection}\r\n").into_bytes()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Body { remaining: u64 },
    UntilClose,
    Done,
}

/// Parses one response at a time; reused across responses without allocating.
#[derive(Debug)]
pub struct ResponseParser {
    head: Vec<u8>,
    state: State,
    pub status: u16,
    pub body_bytes: u64,
    /// The server will close after this response.
    pub closes: bool,
}

impl Default for ResponseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseParser {
    pub fn new() -> ResponseParser {
        ResponseParser {
            head: Vec::with_capacity(1024),
            state: State::Head,
            status: 0,
            body_bytes: 0,
            closes: false,
        }
    }

    /// Readies the parser for the next response.
    pub fn reset(&mut self) {
        self.head.clear();
        self.state = State::Head;
        self.status = 0;
        self.body_bytes = 0;
        self.closes = false;
    }

    /// True once a complete response was parsed.
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Takes bytes read from the connection; returns true when the response is complete.
    /// Bytes after the end of the response (a pipelined reply) are not expected and ignored.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<bool, HttpError> {
        if self.state == State::Head {
            let before = self.head.len();
            self.head.extend_from_slice(data);
            // The blank line may straddle two reads: search from a little before the new bytes.
            let from = before.saturating_sub(3);
            let Some(pos) = memchr::memmem::find(&self.head[from..], b"\r\n\r\n").map(|p| p + from)
            else {
                if self.head.len() > MAX_HEAD_BYTES {
                    return Err(HttpError::Malformed);
                }
                return Ok(false);
            };
            let head_len = pos + 4;
            // The limit holds however the head was split into reads: here for a head that came
            // whole, above for one still arriving.
            if head_len > MAX_HEAD_BYTES {
                return Err(HttpError::Malformed);
            }
            self.parse_head(head_len)?;
            // What followed the head in this read is body.
            let consumed_here = head_len - before;
            data = &data[consumed_here..];
        }
        match self.state {
            State::Body { remaining } => {
                let take = (data.len() as u64).min(remaining);
                self.body_bytes += take;
                let remaining = remaining - take;
                self.state = if remaining == 0 {
                    State::Done
                } else {
                    State::Body { remaining }
                };
            }
            State::UntilClose => self.body_bytes += data.len() as u64,
            State::Head | State::Done => {}
        }
        Ok(self.state == State::Done)
    }

    /// The connection closed: completes a response framed by the close.
    pub fn on_close(&mut self) -> Result<(), HttpError> {
        match self.state {
            State::UntilClose => {
                self.state = State::Done;
                Ok(())
            }
            State::Done => Ok(()),
            _ => Err(HttpError::ClosedEarly),
        }
    }

    fn parse_head(&mut self, head_len: usize) -> Result<(), HttpError> {
        let head = std::str::from_utf8(&self.head[..head_len]).map_err(|_| HttpError::Malformed)?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().ok_or(HttpError::Malformed)?;
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        if !version.starts_with("HTTP/1.") {
            return Err(HttpError::Malformed);
        }
        self.status = parts
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or(HttpError::Malformed)?;
        self.closes = version == "HTTP/1.0";
        let mut length = None;
        for line in lines.filter(|l| !l.is_empty()) {
            let Some((name, value)) = line.split_once(':') else {
                return Err(HttpError::Malformed);
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<u64>().map_err(|_| HttpError::Malformed)?);
            } else if name.eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
            {
                return Err(HttpError::Chunked);
            } else if name.eq_ignore_ascii_case("connection") {
                if value.eq_ignore_ascii_case("close") {
                    self.closes = true;
                } else if value.eq_ignore_ascii_case("keep-alive") {
                    self.closes = false;
                }
            }
        }
        let no_body = self.status == 204 || self.status == 304 || (100..200).contains(&self.status);
        self.state = match (no_body, length) {
            (true, _) | (false, Some(0)) => State::Done,
            (false, Some(n)) => State::Body { remaining: n },
            (false, None) => {
                self.closes = true;
                State::UntilClose
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_across_reads() {
        let mut p = ResponseParser::new();
        assert!(!p.feed(b"HTTP/1.1 200 OK\r\nContent-Le").unwrap());
        assert!(!p.feed(b"ngth: 5\r\n\r").unwrap());
        assert!(!p.feed(b"\nab").unwrap());
        assert!(p.feed(b"cde").unwrap());
        assert_eq!((p.status, p.body_bytes, p.closes), (200, 5, false));
        p.reset();
        assert!(p
            .feed(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap());
        assert_eq!((p.status, p.closes), (404, true));
    }

    #[test]
    fn body_until_close_and_early_close() {
        let mut p = ResponseParser::new();
        assert!(!p
            .feed(b"HTTP/1.0 200 ok\r\nContent-type: text/html\r\n\r\nhello")
            .unwrap());
        assert!(p.closes);
        p.on_close().unwrap();
        assert!(p.is_done());
        assert_eq!(p.body_bytes, 5);
        let mut p = ResponseParser::new();
        p.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        assert_eq!(p.on_close(), Err(HttpError::ClosedEarly));
    }

    #[test]
    fn rejects_what_it_cannot_frame() {
        let mut p = ResponseParser::new();
        assert_eq!(
            p.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(HttpError::Chunked)
        );
        let mut p = ResponseParser::new();
        assert_eq!(
            p.feed(b"SSH-2.0-OpenSSH\r\n\r\n"),
            Err(HttpError::Malformed)
        );
    }

    /// A head over the limit is refused whether it arrives in one read or in many; it used to
    /// be refused only when the limit was crossed before the blank line arrived.
    #[test]
    fn a_head_over_64_kib_is_malformed_in_any_reads() {
        let mut response = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n".to_vec();
        while response.len() <= MAX_HEAD_BYTES {
            response.extend_from_slice(b"X-Padding: 0123456789abcdef\r\n");
        }
        response.extend_from_slice(b"\r\n");
        let mut p = ResponseParser::new();
        assert_eq!(p.feed(&response), Err(HttpError::Malformed));
        let mut p = ResponseParser::new();
        let in_reads = response
            .chunks(4096)
            .map(|read| p.feed(read))
            .find(|r| *r != Ok(false));
        assert_eq!(in_reads, Some(Err(HttpError::Malformed)));
    }

    #[test]
    fn request_is_well_formed() {
        let r = String::from_utf8(request_bytes("/x", "localhost", false)).unwrap();
        assert_eq!(
            r,
            "GET /x HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        );
        let r = String::from_utf8(request_bytes("/", "localhost", true)).unwrap();
        assert_eq!(r, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    }
}
