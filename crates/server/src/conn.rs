//! One client connection: handshake, then HTTP requests until either side closes.

use std::os::fd::{AsFd, RawFd};
use std::time::Instant;

use mio::net::TcpStream;
use ossl::{ErrorCode, Io, Ssl, TlsError};

use crate::http::{self, CannedIndex, HeadScan, HeadStatus, ParseError, Route};
use crate::stats::{HandshakeFailure, Rejection, ServerCounters, Timeout, WorkerCounters};
use crate::Limits;

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

/// Steps (a handshake call, a read, a write, a response) one connection may take in one turn
/// before the worker moves on: a client that keeps its socket full (pipelined requests, a
/// fast download) gets its turn again after the others had theirs, not instead of them.
const TURN_STEPS: u32 = 64;

/// What the worker should do with a connection after driving it.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Waiting for the socket: keep it registered.
    Keep,
    /// Used up its turn with work left: drive it again after the others.
    Yield,
    /// Finished or failed: drop it.
    Close,
    /// A call returned `WANT_ASYNC`: an async engine's job is paused; watch its wait fds and
    /// drive the connection again when one is readable.
    Async,
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Handshake,
    Read,
    Write,
}

/// What a connection is doing, which decides its deadline and whether it may be shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The TLS handshake is not finished.
    Handshake,
    /// Kept alive between requests, no byte of the next one received.
    Idle,
    /// A request head has begun and is not complete.
    Head,
    /// Reading and throwing away a request body.
    Body,
    /// Sending a response.
    Response,
}

impl Stage {
    /// True where the connection waits on its client to send something it has not sent:
    /// those are the connections shed first at the connection limit.
    pub fn sheddable(self) -> bool {
        matches!(self, Stage::Handshake | Stage::Idle | Stage::Head)
    }

    /// The deadline that closes a connection in this stage.
    pub fn timeout(self) -> Timeout {
        match self {
            Stage::Handshake => Timeout::Handshake,
            Stage::Idle => Timeout::KeepAlive,
            Stage::Head => Timeout::RequestHead,
            Stage::Body | Stage::Response => Timeout::Stalled,
        }
    }
}

/// The worker's clock, read once per turn of its loop, and the deadlines that start now: the
/// hot path copies an instant instead of reading the clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    pub now: Instant,
    handshake_by: Instant,
    head_by: Instant,
    idle_by: Instant,
}

impl Clock {
    /// The clock at `now` under `limits`.
    pub fn new(now: Instant, limits: &Limits) -> Clock {
        Clock {
            now,
            handshake_by: now + limits.handshake_timeout,
            head_by: now + limits.request_timeout,
            idle_by: now + limits.idle_timeout,
        }
    }
}

/// Read-only things every connection of a worker needs.
pub struct WorkerShared<'a> {
    pub counters: &'a WorkerCounters,
    pub all_counters: &'a ServerCounters,
    pub index: &'a CannedIndex,
    pub clock: Clock,
}

/// A client connection and its buffers.
pub struct Conn {
    // Dropped before `stream`: SSL_free must not outlive the fd it was given.
    ssl: Ssl,
    stream: TcpStream,
    phase: Phase,
    inbuf: Box<[u8]>,
    in_len: usize,
    /// How far the head at the start of `inbuf` has been searched.
    scan: HeadScan,
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
    /// Input arrived since the last request was parsed; a request parsed without it was sent
    /// together with an earlier one (pipelined).
    fresh_input: bool,
    /// In the worker's list of connections to drive again.
    pub queued: bool,
    /// When the current wait on the client began (shedding takes the longest waiter first).
    since: Instant,
    /// When the connection is closed if it has not moved on by then.
    deadline: Instant,
    /// The worker's count of accepts when this one was accepted: tells the connection apart
    /// from a later one in the same slot.
    serial: u64,
    /// The async wait fds the worker watches for this connection (OpenSSL owns them).
    async_fds: Vec<RawFd>,
}

impl Conn {
    /// Wraps an accepted socket. `inbuf` comes from the worker's buffer pool.
    pub fn new(
        stream: TcpStream,
        mut ssl: Ssl,
        inbuf: Box<[u8]>,
        serial: u64,
        clock: &Clock,
    ) -> Result<Conn, ossl::Error> {
        ssl.set_fd(stream.as_fd())?;
        Ok(Conn {
            ssl,
            stream,
            phase: Phase::Handshake,
            inbuf,
            in_len: 0,
            scan: HeadScan::default(),
            out: Vec::new(),
            out_pos: 0,
            body_remaining: 0,
            discard_remaining: 0,
            close_after_body: false,
            keep_alive: true,
            fresh_input: false,
            queued: false,
            since: clock.now,
            deadline: clock.handshake_by,
            serial,
            async_fds: Vec::new(),
        })
    }

    /// After [`Verdict::Async`]: the wait fds to start watching and those to stop watching.
    pub fn async_fds_changed(&mut self) -> (Vec<RawFd>, Vec<RawFd>) {
        let (added, removed) = self.ssl.changed_async_fds();
        self.async_fds.retain(|fd| !removed.contains(fd));
        let added: Vec<RawFd> = added
            .into_iter()
            .filter(|fd| !self.async_fds.contains(fd))
            .collect();
        self.async_fds.extend(&added);
        (added, removed)
    }

    /// The async wait fds being watched, to stop watching before the connection is freed
    /// (freeing it closes them).
    pub fn take_async_fds(&mut self) -> Vec<RawFd> {
        std::mem::take(&mut self.async_fds)
    }

    /// The socket, for (de)registering with the poller.
    pub fn stream_mut(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Ends the connection, keeping its session in the cache however it ended, counting the
    /// renegotiations it refused, and gives the input buffer back to the worker's pool.
    pub fn finish(mut self, counters: &WorkerCounters) -> Box<[u8]> {
        let refused = self.ssl.take_renegotiations_refused();
        if refused > 0 {
            WorkerCounters::add(&counters.renegotiations_refused, refused);
        }
        self.ssl.mark_shut_down();
        self.inbuf
    }

    /// What the connection is doing now.
    pub fn stage(&self) -> Stage {
        match self.phase {
            Phase::Handshake => Stage::Handshake,
            Phase::Write => Stage::Response,
            Phase::Read if self.discard_remaining > 0 || self.close_after_body => Stage::Body,
            Phase::Read if self.in_len > 0 => Stage::Head,
            Phase::Read => Stage::Idle,
        }
    }

    /// When the current wait on the client began.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// When the connection is closed if it is still where it is.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The accept count that tells this connection apart from a later one in its slot.
    pub fn serial(&self) -> u64 {
        self.serial
    }

    /// Counts the connection as closed by its deadline.
    pub fn count_timeout(&self, counters: &WorkerCounters) {
        let stage = self.stage();
        counters.timed_out(stage.timeout());
        if stage == Stage::Handshake {
            counters.handshake_failed(HandshakeFailure::Timeout, "handshake timed out");
        }
    }

    /// Counts the connection as shed at the connection limit.
    pub fn count_shed(&self, counters: &WorkerCounters) {
        WorkerCounters::one(&counters.connections_shed);
        if self.stage() == Stage::Handshake {
            counters.handshake_failed(HandshakeFailure::Shed, "shed at the connection limit");
        }
    }

    /// Makes as much progress as the socket allows, up to a turn's worth. Edge-triggered
    /// readiness means a connection that stops before OpenSSL asks to wait must be driven
    /// again without a new event: the worker does that on [`Verdict::Yield`].
    pub fn drive(&mut self, w: &WorkerShared<'_>) -> Verdict {
        for _ in 0..TURN_STEPS {
            let step = match self.phase {
                Phase::Handshake => self.handshake(w),
                Phase::Read => self.read(w),
                Phase::Write => self.write(w),
            };
            match step {
                Step::Continue => continue,
                Step::Wait => return Verdict::Keep,
                Step::Close => return Verdict::Close,
                Step::Async => return Verdict::Async,
                // No async job was free: try again after the others had their turn.
                Step::Yield => return Verdict::Yield,
            }
        }
        Verdict::Yield
    }

    fn handshake(&mut self, w: &WorkerShared<'_>) -> Step {
        match self.ssl.do_handshake() {
            Io::Done(_) => {
                w.counters
                    .handshake(self.ssl.handshake_kind(), self.ssl.protocol_version());
                // AWS-LC and BoringSSL send TLS 1.3 tickets only with a write: send them now,
                // for clients that resume without a request. A write that would block leaves
                // them queued for the response; a failure shows on the next read.
                let _ = self.ssl.flush_held_writes();
                self.phase = Phase::Read;
                self.await_request(&w.clock);
                Step::Continue
            }
            Io::Retry(code) => async_step(code, w.counters),
            Io::WantRead | Io::WantWrite => Step::Wait,
            Io::Closed => {
                w.counters.handshake_failed(
                    HandshakeFailure::PeerClosed,
                    "peer closed during the handshake",
                );
                Step::Close
            }
            Io::Failed(e) => {
                w.counters
                    .handshake_failed(self.failure_class(&e), &failure_reason(&e));
                Step::Close
            }
        }
    }

    /// Sorts a failed handshake: the client went away, or OpenSSL refused what it read before
    /// or after it saw a handshake begin.
    fn failure_class(&self, e: &TlsError) -> HandshakeFailure {
        if e.code == ErrorCode::Syscall || e.is_unexpected_eof() {
            HandshakeFailure::PeerClosed
        } else if !self.ssl.handshake_started() {
            HandshakeFailure::NotTls
        } else {
            HandshakeFailure::Other
        }
    }

    /// Waits for the next request on a kept-alive connection: the idle deadline, or the
    /// request deadline when part of the next head is already here.
    fn await_request(&mut self, clock: &Clock) {
        self.since = clock.now;
        self.deadline = if self.in_len > 0 {
            clock.head_by
        } else {
            clock.idle_by
        };
    }

    /// The connection moved (body bytes read, response bytes written): it gets the idle
    /// timeout again before it counts as stalled.
    fn progressed(&mut self, clock: &Clock) {
        self.since = clock.now;
        self.deadline = clock.idle_by;
    }

    fn read(&mut self, w: &WorkerShared<'_>) -> Step {
        if self.discard_remaining > 0 && self.in_len > 0 {
            self.discard_buffered(&w.clock);
        }
        if self.close_after_body && self.discard_remaining == 0 {
            let _ = self.ssl.shutdown();
            return Step::Close;
        }
        if self.discard_remaining == 0 && self.in_len > 0 {
            match self.scan.advance(&self.inbuf[..self.in_len]) {
                HeadStatus::Complete(end) => return self.serve(w, end),
                HeadStatus::Incomplete => {}
                HeadStatus::LineTooLong => return self.reject(w, Rejection::UriTooLong),
                HeadStatus::TooLarge => return self.reject(w, Rejection::HeadTooLarge),
            }
        }
        let discarding = self.discard_remaining > 0;
        // The head scan refuses a full buffer, so there is always room here.
        let free = if discarding {
            // Throw request body away through the start of the buffer.
            self.in_len = 0;
            &mut self.inbuf[..]
        } else {
            &mut self.inbuf[self.in_len..]
        };
        match self.ssl.read(free) {
            Io::Done(n) => {
                if discarding {
                    self.progressed(&w.clock);
                } else if self.in_len == 0 {
                    // A head begins: it has the request timeout from now, however it trickles.
                    self.since = w.clock.now;
                    self.deadline = w.clock.head_by;
                }
                self.in_len += n;
                self.fresh_input = true;
                WorkerCounters::add(&w.counters.bytes_read, n as u64);
                Step::Continue
            }
            unfinished => self.not_done(unfinished, w.counters),
        }
    }

    /// Drops the buffered part of a request body; once it is all gone, what follows is the
    /// next request.
    fn discard_buffered(&mut self, clock: &Clock) {
        let n = (self.discard_remaining as usize).min(self.in_len);
        self.consume(n);
        self.discard_remaining -= n as u64;
        if self.discard_remaining == 0 && !self.close_after_body {
            self.await_request(clock);
        }
    }

    /// Parses the complete head ending at `end` and starts its response.
    fn serve(&mut self, w: &WorkerShared<'_>, end: usize) -> Step {
        let req = match http::parse_head(&self.inbuf[..self.in_len], end) {
            Ok(req) => req,
            Err(ParseError::Unsupported) => return self.reject(w, Rejection::Unsupported),
            Err(_) => return self.reject(w, Rejection::Malformed),
        };
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
        if !self.fresh_input {
            WorkerCounters::one(&w.counters.requests_pipelined);
        }
        self.fresh_input = false;
        self.respond(w, route, keep_alive, head_only);
        Step::Continue
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
        self.start_writing(&w.clock);
    }

    fn start_writing(&mut self, clock: &Clock) {
        self.phase = Phase::Write;
        self.progressed(clock);
    }

    fn error_page(&mut self, status: u16, keep_alive: bool) -> u16 {
        let body: &[u8] = match status {
            404 => b"not found\n",
            405 => b"method not allowed\n",
            414 => b"request line too long\n",
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

    /// Answers a request it will not route with an error, then closes: whatever else the
    /// client sent is not read.
    fn reject(&mut self, w: &WorkerShared<'_>, why: Rejection) -> Step {
        let status = match why {
            Rejection::HeadTooLarge => 431,
            Rejection::UriTooLong => 414,
            Rejection::Malformed => 400,
            Rejection::Unsupported => 501,
        };
        self.out.clear();
        self.out_pos = 0;
        self.body_remaining = 0;
        self.keep_alive = false;
        self.in_len = 0;
        self.scan.reset();
        self.error_page(status, false);
        w.counters.rejected(why);
        w.counters.response(status);
        self.start_writing(&w.clock);
        Step::Continue
    }

    fn write(&mut self, w: &WorkerShared<'_>) -> Step {
        let chunk: &[u8] = if self.out_pos < self.out.len() {
            &self.out[self.out_pos..]
        } else if self.body_remaining > 0 {
            &PATTERN[..(self.body_remaining.min(PATTERN.len() as u64) as usize)]
        } else {
            return self.response_sent(&w.clock);
        };
        match self.ssl.write(chunk) {
            Io::Done(n) => {
                WorkerCounters::add(&w.counters.bytes_written, n as u64);
                if self.out_pos < self.out.len() {
                    self.out_pos += n;
                } else {
                    self.body_remaining -= n as u64;
                }
                self.progressed(&w.clock);
                Step::Continue
            }
            Io::WantWrite => {
                // The client is not reading: nothing more is read from it until it does.
                WorkerCounters::one(&w.counters.responses_blocked);
                Step::Wait
            }
            unfinished => self.not_done(unfinished, w.counters),
        }
    }

    fn response_sent(&mut self, clock: &Clock) -> Step {
        self.out.clear();
        self.out_pos = 0;
        if !self.keep_alive && self.discard_remaining > 0 {
            self.close_after_body = true;
            self.phase = Phase::Read;
            self.progressed(clock);
            return Step::Continue;
        }
        if !self.keep_alive {
            // Best effort: send close_notify, then close without waiting for the peer's.
            let _ = self.ssl.shutdown();
            return Step::Close;
        }
        self.phase = Phase::Read;
        if self.discard_remaining > 0 {
            self.progressed(clock);
        } else {
            self.await_request(clock);
        }
        Step::Continue
    }

    /// Drops the first `n` bytes of the input buffer (pipelined requests keep the rest).
    fn consume(&mut self, n: usize) {
        self.inbuf.copy_within(n..self.in_len, 0);
        self.in_len -= n;
        self.scan.reset();
    }

    /// The next step after a read or write that did not transfer data: wait for the socket, or
    /// close, counting TLS protocol errors, and a client that went away mid-response (a peer
    /// that just disconnects between requests is no error).
    fn not_done(&self, io: Io, counters: &WorkerCounters) -> Step {
        let mid_response = self.phase == Phase::Write;
        match io {
            Io::Done(_) => Step::Continue,
            Io::Retry(code) => async_step(code, counters),
            Io::WantRead | Io::WantWrite => Step::Wait,
            Io::Closed => {
                if mid_response {
                    WorkerCounters::one(&counters.responses_aborted);
                }
                Step::Close
            }
            Io::Failed(e) => {
                if e.code == ErrorCode::Ssl && !e.is_unexpected_eof() {
                    WorkerCounters::one(&counters.connection_errors);
                } else {
                    // An EOF or a reset without close_notify.
                    WorkerCounters::one(&counters.closed_without_close_notify);
                    if mid_response {
                        WorkerCounters::one(&counters.responses_aborted);
                    }
                }
                Step::Close
            }
        }
    }
}

enum Step {
    Continue,
    Wait,
    Close,
    /// Paused on an async job (see [`Verdict::Async`]).
    Async,
    /// Call again next turn.
    Yield,
}

/// A retry that is not about the socket: an async job paused (counted), no async job free,
/// or a callback's retry (which a later call settles).
fn async_step(code: ErrorCode, counters: &WorkerCounters) -> Step {
    match code {
        ErrorCode::WantAsync => {
            WorkerCounters::one(&counters.async_waits);
            Step::Async
        }
        ErrorCode::WantAsyncJob => Step::Yield,
        _ => Step::Wait,
    }
}

/// A short, stable reason for a failed handshake, for counting.
fn failure_reason(e: &TlsError) -> std::borrow::Cow<'_, str> {
    match e.queue.reason() {
        Some(reason) => reason.into(),
        None => e.to_string().into(),
    }
}
