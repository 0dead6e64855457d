//! The load engine's response parser (`load::ResponseParser`), which reads what a server sends
//! in whatever pieces the socket delivers.
//!
//! The input's first byte picks a read size; the rest is what the server sent. Properties:
//! the outcome (complete or not, status, body bytes, close, the error) does not depend on how
//! the bytes were split into reads; a parser reused after `reset` behaves as a new one; and the
//! body it counts is never more than the bytes it was given.

use load::{HttpError, ResponseParser};

/// What a parser made of one response: each field a caller reads.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// The first error, or whether the response was complete when the bytes ran out.
    fed: Result<bool, HttpError>,
    /// What `on_close` says if the connection closes then (after a complete feed only).
    on_close: Option<Result<(), HttpError>>,
    status: u16,
    body_bytes: u64,
    closes: bool,
}

/// Checks the response parser on `data` (see the module's properties); panics on a violation.
/// Accepted: a response complete when the bytes end, or at the connection's close.
pub fn check(data: &[u8]) -> bool {
    let Some((&split, response)) = data.split_first() else {
        return false;
    };
    let read_bytes = usize::from(split) + 1;
    let whole = outcome(&mut ResponseParser::new(), [response]);
    let in_reads = outcome(&mut ResponseParser::new(), response.chunks(read_bytes));
    assert_eq!(
        whole, in_reads,
        "the outcome depends on the read size ({read_bytes} bytes)"
    );
    let mut reused = ResponseParser::new();
    let _ = reused.feed(b"HTTP/1.0 500 Previous\r\nConnection: close\r\n\r\nleftover");
    reused.reset();
    assert_eq!(
        whole,
        outcome(&mut reused, [response]),
        "a reset parser differs from a new one"
    );
    assert!(
        whole.body_bytes <= response.len() as u64,
        "more body than bytes"
    );
    whole.fed == Ok(true) || whole.on_close == Some(Ok(()))
}

/// Feeds `reads` in order until the response is complete or fails, then closes if it may.
fn outcome<'a>(parser: &mut ResponseParser, reads: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    let mut fed = Ok(false);
    for read in reads {
        fed = parser.feed(read);
        if fed != Ok(false) {
            break;
        }
    }
    let on_close = fed.is_ok().then(|| parser.on_close());
    Outcome {
        fed,
        on_close,
        status: parser.status,
        body_bytes: parser.body_bytes,
        closes: parser.closes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_responses_pass() {
        assert!(check(
            b"\x03HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        ));
        assert!(check(b"\x00HTTP/1.0 200 OK\r\n\r\nbody until close"));
        assert!(check(b"\x07HTTP/1.1 204 No Content\r\n\r\n"));
        assert!(!check(b"\x01SSH-2.0-OpenSSH\r\n\r\n"));
    }
}
