//! The built-in server's request head parser (`server::http::parse_request`).
//!
//! Properties: the head it reports lies inside the input and ends at the first blank line
//! (a byte less is incomplete); the method and path it returns are slices of that head; a
//! request that parses, written out again in canonical form, parses to the same request; and
//! the head scanner the server keeps across reads (`HeadScan`), fed the input in pieces, says
//! after every piece what one scan of everything so far says.

use server::http::{parse_request, route, HeadScan, HeadStatus, ParseError, Request};

/// Checks the request parser on `data` (see the module's properties); panics on a violation.
/// Accepted: a request head parsed.
pub fn check(data: &[u8]) -> bool {
    check_pieces(data);
    let request = match parse_request(data) {
        Ok(request) => request,
        Err(ParseError::Incomplete) => {
            assert!(
                !contains(data, b"\r\n\r\n"),
                "a complete head was called incomplete"
            );
            return false;
        }
        Err(ParseError::Bad | ParseError::Unsupported | ParseError::TooLarge) => return false,
    };
    check_bounds(data, &request);
    check_prefix(data, &request);
    check_round_trip(&request);
    // Routing takes what the parser returned; it must cope with any of it.
    let _ = route(request.method, request.path);
    true
}

/// `data`'s first byte picks the piece sizes (1 to 16 bytes, varying with the bytes read); the
/// rest is the stream. Stops at the first answer that is not "incomplete", as the server does.
fn check_pieces(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let mut scan = HeadScan::default();
    let (mut read, mut piece) = (0, usize::from(seed % 16) + 1);
    while read < stream.len() {
        read = (read + piece).min(stream.len());
        let so_far = &stream[..read];
        let status = scan.advance(so_far);
        assert_eq!(
            status,
            HeadScan::default().advance(so_far),
            "after {read} bytes in pieces"
        );
        if status != HeadStatus::Incomplete {
            return;
        }
        piece = usize::from((seed ^ stream[read - 1]) % 16) + 1;
    }
}

/// The head is within `data`, ends with the first blank line, and holds method and path.
fn check_bounds(data: &[u8], request: &Request<'_>) {
    let head = data
        .get(..request.head_bytes)
        .expect("head_bytes past the end of the input");
    assert!(
        head.ends_with(b"\r\n\r\n"),
        "the head does not end with a blank line"
    );
    assert!(
        !contains(&head[..head.len() - 1], b"\r\n\r\n"),
        "the head runs past the first blank line"
    );
    for (what, part) in [("method", request.method), ("path", request.path)] {
        assert!(
            is_within(part.as_bytes(), head),
            "the {what} is not a slice of the head"
        );
    }
    assert!(!request.method.is_empty() && request.path.starts_with('/'));
}

/// The head alone parses the same, and one byte less of it is incomplete.
fn check_prefix(data: &[u8], request: &Request<'_>) {
    let head = &data[..request.head_bytes];
    assert_eq!(parse_request(head).as_ref(), Ok(request));
    assert_eq!(
        parse_request(&head[..head.len() - 1]),
        Err(ParseError::Incomplete)
    );
}

/// The request written out canonically parses to the same method, path, keep-alive and body.
fn check_round_trip(request: &Request<'_>) {
    let text = canonical(request);
    let again = parse_request(&text)
        .unwrap_or_else(|e| panic!("{request:?} written as {text:?} does not parse: {e:?}"));
    assert_eq!(
        (again.method, again.path, again.keep_alive, again.body_bytes),
        (
            request.method,
            request.path,
            request.keep_alive,
            request.body_bytes
        ),
        "{request:?} written as {text:?} parses differently"
    );
}

/// An HTTP/1.1 head saying what `request` says, in the plainest way.
fn canonical(request: &Request<'_>) -> Vec<u8> {
    let connection = if request.keep_alive {
        "keep-alive"
    } else {
        "close"
    };
    format!(
        "{} {} HTTP/1.1\r\nConnection: {connection}\r\nContent-Length: {}\r\n\r\n",
        request.method, request.path, request.body_bytes
    )
    .into_bytes()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// True when `part` is a slice of `whole` (by address, not by content).
fn is_within(part: &[u8], whole: &[u8]) -> bool {
    let whole = whole.as_ptr_range();
    let part = part.as_ptr_range();
    whole.start <= part.start && part.end <= whole.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_requests_pass() {
        assert!(check(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert!(check(
            b"POST /bytes/5 HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello"
        ));
        assert!(!check(b"GET / HTTP/1.1\r\nHost"));
        assert!(!check(b"\xff\xfe\r\n\r\n"));
    }
}
