//! One client connection: handshake, then HTTP requests until either side closes.

use std::os::fd::AsFd;

use mio::net::TcpStream;
use ossl::{Io, Ssl, TlsError};

use crate::http::{self, CannedIndex, ParseError, Route, MAX_HEAD_BYTES};
use crate::stats::{ServerCounters, WorkerCounters};

/// The bytes `/bytes/N` sends, repeated: one full TLS record's worth.
static PATTERN: [u8; 16 * 1024] = {
    let mut p = [0u8; 16 * 1024];
    let mut i = 0;
    while i < p.len() {
        p[i] = b'a' + (i % 26) as u8;
        i += 1;
    }
    p
};

/// What the worker should do with a connection after driving it.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Waiting for the socket: keep it registered.
    Keep,
    /// Finished or failed: drop it.
    Close,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Handshake,
    Read,
    Write,
}

/// Read-only things every connection of a worker needs.
pub struct WorkerShared<'a> {
    pub counters: &'a WorkerCounters,
    pub all_counters: &'a ServerCounters,
    pub index: &'a CannedIndex,
}

/// A client connection and its buffers.
pub struct Conn {
    // Dropped before `stream`: SSL_free must not outlive the fd it was given.
    ssl: Ssl,
    stream: TcpStream,
    phase: Phase,
    inbuf: Box<[u8]>,
    in_len: usize,
    out: Vec<u8>,
    out_pos: usize,
    /// Generated body bytes still to send after `out`.
    body_remaining: u64,
    /// Request body bytes still to read and throw away.
    discard_remaining: u64,
    /// The response to a `Connection: close` request went out before its body was read: read
    /// and discard the rest, then close (closing with unread input would reset the connection
    /// under a client still sending).
    close_after_body: bool,
    keep_alive: bool,
}

impl Conn {
    /// Wraps an accepted socket. `inbuf` comes from the worker's buffer pool.
    pub fn new(stream: TcpStream, mut ssl: Ssl, inbuf: Box<[u8]>) -> Result<Conn, ossl::Error> {
        ssl.set_fd(stream.as_fd())?;
        Ok(Conn {
            ssl,
            stream,
            phase: Phase::Handshake,
            inbuf,
            in_len: 0,
            out: Vec::new(),
            out_pos: 0,
            body_remaining: 0,
            discard_remaining: 0,
            close_after_body: false,
            keep_alive: true,
        })
    }

    /// The socket, for (de)registering with the poller.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Ends the connection, keeping its session in the cache however it ended, and gives
    /// the input buffer back to the worker's pool.
    pub fn finish(mut self) -> Box<[u8]> {
        self.ssl.mark_shut_down();
        self.inbuf
    }

    /// Makes as much progress as the socket allows. Edge-triggered readiness means this must
    /// run until OpenSSL asks to wait.
    pub fn drive(&mut self, w: &WorkerShared<'_>) -> Verdict {
        loop {
            let step = match self.phase {
                Phase::Handshake => self.handshake(w),
                Phase::Read => self.read(w),
                Phase::Write => self.write(w),
            };
            match step {
                Step::Continue => continue,
                Step::Wait => return Verdict::Keep,
                Step::Close => return Verdict::Close,
            }
        }
    }

    fn handshake(&mut self, w: &WorkerShared<'_>) -> Step {
        match self.ssl.do_handshake() {
            Io::Done(_) => {
                w.counters
                    .handshake(self.ssl.handshake_kind(), self.ssl.protocol_version());
                self.phase = Phase::Read;
                Step::Continue
            }
            Io::WantRead | Io::WantWrite | Io::Retry(_) => Step::Wait,
            Io::Closed => {
                w.counters
                    .handshake_failed("peer closed during the handshake");
                Step::Close
            }
            Io::Failed(e) => {
                w.counters.handshake_failed(&failure_reason(&e));
                Step::Close
            }
        }
    }

    fn read(&mut self, w: &WorkerShared<'_>) -> Step {
        if self.discard_remaining > 0 {
            let n = (self.discard_remaining as usize).min(self.in_len);
            self.consume(n);
            self.discard_remaining -= n as u64;
        }
        if self.close_after_body && self.discard_remaining == 0 {
            let _ = self.ssl.shutdown();
            return Step::Close;
        }
        if self.discard_remaining == 0 && self.in_len > 0 {
            match http::parse_request(&self.inbuf[..self.in_len]) {
                Ok(req) => {
                    let (head, body, keep_alive, route) = (
                        req.head_bytes,
                        req.body_bytes,
                        req.keep_alive,
                        http::route(req.method, req.path),
                    );
                    let head_only = req.method == "HEAD";
                    self.consume(head);
                    self.discard_remaining = body;
                    WorkerCounters::one(&w.counters.requests);
                    self.respond(w, route, keep_alive, head_only);
                    return Step::Continue;
                }
                Err(ParseError::Incomplete) if self.in_len < MAX_HEAD_BYTES => {}
                Err(ParseError::Incomplete) => return self.fail_request(w, 431),
                Err(ParseError::Bad) => return self.fail_request(w, 400),
                Err(ParseError::Unsupported) => return self.fail_request(w, 501),
            }
        }
        let free = if self.discard_remaining > 0 {
            // Throw request body away through the start of the buffer.
            self.in_len = 0;
            &mut self.inbuf[..]
        } else {
            &mut self.inbuf[self.in_len..]
        };
        match self.ssl.read(free) {
            Io::Done(n) => {
                self.in_len += n;
                WorkerCounters::add(&w.counters.bytes_read, n as u64);
                Step::Continue
            }
            unfinished => not_done(unfinished, w.counters),
        }
    }

    fn respond(&mut self, w: &WorkerShared<'_>, route: Route, keep_alive: bool, head_only: bool) {
        self.out.clear();
        self.out_pos = 0;
        self.body_remaining = 0;
        self.keep_alive = keep_alive;
        let status = match route {
            Route::Index if !head_only => {
                let canned = if keep_alive {
                    &w.index.keep_alive
                } else {
                    &w.index.close
                };
                self.out.extend_from_slice(canned);
                200
            }
            Route::Index => {
                let len = http::INDEX_PAGE.len() as u64;
                http::write_head(&mut self.out, 200, "text/html", len, keep_alive);
                200
            }
            Route::Bytes(n) => {
                http::write_head(
                    &mut self.out,
                    200,
                    "application/octet-stream",
                    n,
                    keep_alive,
                );
                if !head_only {
                    // The first part of the body goes out with the head, in one record.
                    let room = PATTERN.len().saturating_sub(self.out.len()) as u64;
                    let take = n.min(room) as usize;
                    self.out.extend_from_slice(&PATTERN[..take]);
                    self.body_remaining = n - take as u64;
                }
                200
            }
            Route::Stats => {
                let body = serde_json::to_vec_pretty(&w.all_counters.snapshot())
                    .unwrap_or_else(|_| b"{}".to_vec());
                http::write_head(
                    &mut self.out,
                    200,
                    "application/json",
                    body.len() as u64,
                    keep_alive,
                );
                if !head_only {
                    self.out.extend_from_slice(&body);
                }
                200
            }
            Route::NotFound => self.error_page(404, keep_alive),
            Route::MethodNotAllowed => self.error_page(405, keep_alive),
        };
        w.counters.response(status);
        self.phase = Phase::Write;
    }

    fn error_page(&mut self, status: u16, keep_alive: bool) -> u16 {
        let body: &[u8] = match status {
            404 => b"not found\n",
            405 => b"method not allowed\n",
            431 => b"request head too large\n",
            501 => b"chunked request bodies are not supported\n",
            _ => b"bad request\n",
        };
        http::write_head(
            &mut self.out,
            status,
            "text/plain",
            body.len() as u64,
            keep_alive,
        );
        self.out.extend_from_slice(body);
        status
    }

    fn fail_request(&mut self, w: &WorkerShared<'_>, status: u16) -> Step {
        self.out.clear();
        self.out_pos = 0;
        self.body_remaining = 0;
        self.keep_alive = false;
        self.in_len = 0;
        self.error_page(status, false);
        w.counters.response(status);
        self.phase = Phase::Write;
        Step::Continue
    }

    fn write(&mut self, w: &WorkerShared<'_>) -> Step {
        let chunk: &[u8] = if self.out_pos < self.out.len() {
            &self.out[self.out_pos..]
        } else if self.body_remaining > 0 {
            &PATTERN[..(self.body_remaining.min(PATTERN.len() as u64) as usize)]
        } else {
            return self.response_sent();
        };
        match self.ssl.write(chunk) {
            Io::Done(n) => {
                WorkerCounters::add(&w.counters.bytes_written, n as u64);
                if self.out_pos < self.out.len() {
                    self.out_pos += n;
                } else {
                    self.body_remaining -= n as u64;
                }
                Step::Continue
            }
            unfinished => not_done(unfinished, w.counters),
        }
    }

    fn response_sent(&mut self) -> Step {
        if !self.keep_alive && self.discard_remaining > 0 {
            self.close_after_body = true;
            self.out.clear();
            self.out_pos = 0;
            self.phase = Phase::Read;
            return Step::Continue;
        }
        if !self.keep_alive {
            // Best effort: send close_notify, then close without waiting for the peer's.
            let _ = self.ssl.shutdown();
            return Step::Close;
        }
        self.out.clear();
        self.out_pos = 0;
        self.phase = Phase::Read;
        Step::Continue
    }

    /// Drops the first `n` bytes of the input buffer (pipelined requests keep the rest).
    fn consume(&mut self, n: usize) {
        self.inbuf.copy_within(n..self.in_len, 0);
        self.in_len -= n;
    }
}

enum Step {
    Continue,
    Wait,
    Close,
}

/// The next step after a read or write that did not transfer data: wait for the socket, or
/// close (counting TLS protocol errors; a peer that just disconnects is not an error).
fn not_done(io: Io, counters: &WorkerCounters) -> Step {
    match io {
        Io::Done(_) => Step::Continue,
        Io::WantRead | Io::WantWrite | Io::Retry(_) => Step::Wait,
        Io::Closed => Step::Close,
        Io::Failed(e) => {
            if e.code == ossl::ErrorCode::Ssl {
                WorkerCounters::one(&counters.connection_errors);
            }
            Step::Close
        }
    }
}

/// A short, stable reason for a failed handshake, for counting.
fn failure_reason(e: &TlsError) -> String {
    match e.queue.reason() {
        Some(reason) => reason.to_string(),
        None => e.to_string(),
    }
}
