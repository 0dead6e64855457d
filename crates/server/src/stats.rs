//! What the server saw: counters kept per worker (no sharing on the hot path), summed on demand.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

use ossl::{HandshakeKind, TlsVersion};
use serde::Serialize;

/// One worker's counters. Only its worker writes them; readers sum all workers.
/// Aligned so two workers' counters never share a cache line.
#[derive(Default)]
#[repr(align(128))]
pub struct WorkerCounters {
    pub connections_accepted: AtomicU64,
    pub connections_closed: AtomicU64,
    pub handshakes_full: AtomicU64,
    pub handshakes_resumed_session_id: AtomicU64,
    pub handshakes_resumed_ticket: AtomicU64,
    pub handshakes_failed: AtomicU64,
    pub handshakes_tls12: AtomicU64,
    pub handshakes_tls13: AtomicU64,
    pub handshakes_other_version: AtomicU64,
    pub requests: AtomicU64,
    pub responses_2xx: AtomicU64,
    pub responses_4xx: AtomicU64,
    pub responses_5xx: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub connection_errors: AtomicU64,
    pub timeouts_handshake: AtomicU64,
    pub timeouts_request_head: AtomicU64,
    pub timeouts_keep_alive: AtomicU64,
    pub timeouts_stalled: AtomicU64,
    pub connections_shed: AtomicU64,
    pub accept_pauses: AtomicU64,
    pub responses_aborted: AtomicU64,
    pub closed_without_close_notify: AtomicU64,
    pub handshakes_failed_timeout: AtomicU64,
    pub handshakes_failed_not_tls: AtomicU64,
    pub handshakes_failed_peer_closed: AtomicU64,
    pub handshakes_failed_shed: AtomicU64,
    pub handshakes_failed_other: AtomicU64,
    pub renegotiations_refused: AtomicU64,
    /// TLS calls that returned `SSL_ERROR_WANT_ASYNC`: an async engine's job was paused.
    pub async_waits: AtomicU64,
    pub requests_pipelined: AtomicU64,
    pub rejected_head_too_large: AtomicU64,
    pub rejected_uri_too_long: AtomicU64,
    pub rejected_malformed: AtomicU64,
    pub rejected_unsupported: AtomicU64,
    pub responses_blocked: AtomicU64,
    /// Handshake failures by reason ("no shared cipher"): rare, so a lock is fine here.
    pub failure_reasons: Mutex<BTreeMap<String, u64>>,
}

/// Why a handshake did not complete: the classes [`HandshakeFailures`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not finished within the handshake timeout.
    Timeout,
    /// The client's first bytes were no TLS handshake (garbage, plain HTTP).
    NotTls,
    /// The client closed or reset the connection before finishing.
    PeerClosed,
    /// Closed unfinished to make room at the connection limit.
    Shed,
    /// Anything else: a TLS alert, no common version or cipher, a malformed message, or the
    /// server failing to set the connection up.
    Other,
}

/// Why the server refused a request without routing it; the response is an error and the
/// connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// 431: the head is over its size limit.
    HeadTooLarge,
    /// 414: the request line is over its size limit.
    UriTooLong,
    /// 400: not an HTTP/1.x request head.
    Malformed,
    /// 501: a body framing the server does not read (chunked uploads).
    Unsupported,
}

/// Which deadline closed a connection (see `ServerConfig::limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// The handshake did not finish in time.
    Handshake,
    /// A request head began but did not end in time.
    RequestHead,
    /// A kept-alive connection got no new request in time.
    KeepAlive,
    /// A request body or a response stopped moving.
    Stalled,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Relaxed);
}

impl WorkerCounters {
    /// Counts a completed handshake.
    pub fn handshake(&self, kind: HandshakeKind, version: Option<TlsVersion>) {
        bump(match kind {
            HandshakeKind::Full => &self.handshakes_full,
            HandshakeKind::ResumedSessionId => &self.handshakes_resumed_session_id,
            HandshakeKind::ResumedTicket => &self.handshakes_resumed_ticket,
        });
        bump(match version {
            Some(TlsVersion::Tls1_2) => &self.handshakes_tls12,
            Some(TlsVersion::Tls1_3) => &self.handshakes_tls13,
            _ => &self.handshakes_other_version,
        });
    }

    /// Counts a failed handshake, its class and its detailed reason.
    pub fn handshake_failed(&self, class: HandshakeFailure, reason: &str) {
        bump(&self.handshakes_failed);
        bump(match class {
            HandshakeFailure::Timeout => &self.handshakes_failed_timeout,
            HandshakeFailure::NotTls => &self.handshakes_failed_not_tls,
            HandshakeFailure::PeerClosed => &self.handshakes_failed_peer_closed,
            HandshakeFailure::Shed => &self.handshakes_failed_shed,
            HandshakeFailure::Other => &self.handshakes_failed_other,
        });
        let mut reasons = self
            .failure_reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // A flood of one failure must not allocate a key per connection.
        match reasons.get_mut(reason) {
            Some(n) => *n += 1,
            None => {
                reasons.insert(reason.to_string(), 1);
            }
        }
    }

    /// Counts a request refused before routing.
    pub fn rejected(&self, why: Rejection) {
        bump(match why {
            Rejection::HeadTooLarge => &self.rejected_head_too_large,
            Rejection::UriTooLong => &self.rejected_uri_too_long,
            Rejection::Malformed => &self.rejected_malformed,
            Rejection::Unsupported => &self.rejected_unsupported,
        });
    }

    /// Counts a connection closed by one of its deadlines.
    pub fn timed_out(&self, which: Timeout) {
        bump(match which {
            Timeout::Handshake => &self.timeouts_handshake,
            Timeout::RequestHead => &self.timeouts_request_head,
            Timeout::KeepAlive => &self.timeouts_keep_alive,
            Timeout::Stalled => &self.timeouts_stalled,
        });
    }

    /// Counts a response by its status class.
    pub fn response(&self, status: u16) {
        bump(match status {
            200..=299 => &self.responses_2xx,
            400..=499 => &self.responses_4xx,
            _ => &self.responses_5xx,
        });
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn one(counter: &AtomicU64) {
        bump(counter);
    }
}

/// Every worker's counters, and when the server started.
pub struct ServerCounters {
    pub workers: Vec<WorkerCounters>,
    pub started: Instant,
    pub library: String,
    pub library_flavour: String,
}

/// A point-in-time sum of all workers' counters: what `/.well-known/tlsscope/stats` serves and
/// `tlsscope serve` prints at exit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    /// The server's library and version: "OpenSSL 3.5.5", "AWS-LC 5.12.0", "BoringSSL API 44".
    pub library: String,
    /// Its flavour: "OpenSSL", "AWS-LC" or "BoringSSL" (absent before issue 31).
    #[serde(default)]
    pub library_flavour: String,
    pub uptime_ms: u64,
    pub connections: ConnectionStats,
    pub handshakes: HandshakeStats,
    /// Requests parsed and routed (refused ones are in `requests_rejected`).
    pub requests: u64,
    /// Of `requests`: those found already waiting in the input, read together with an earlier
    /// request of the same connection (HTTP/1.1 pipelining).
    pub requests_pipelined: u64,
    pub requests_rejected: RejectedStats,
    pub responses: ResponseStats,
    pub bytes: ByteStats,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConnectionStats {
    pub accepted: u64,
    pub closed: u64,
    /// Connections ended by a TLS error after the handshake (an alert, a bad record), or that
    /// could not be registered with the event loop.
    pub errors: u64,
    /// Connections closed by a deadline, by which one.
    pub timed_out: TimeoutStats,
    /// Connections closed to make room for a new one at the connection limit: each time, the
    /// one that had waited longest for its client (an unfinished handshake, a kept-alive
    /// connection without a request, a request head still arriving).
    pub shed: u64,
    /// Times the server stopped accepting because it was at the connection limit with every
    /// connection busy, or out of file descriptors; new connections waited in the backlog.
    pub accept_pauses: u64,
    /// Connections whose client went away (reset or closed) while a response was being sent.
    pub responses_aborted: u64,
    /// Connections whose client, after the handshake, closed or reset the connection without a
    /// TLS close_notify (a truncation TLS cannot tell from an end); not errors.
    #[serde(default)]
    pub closed_without_close_notify: u64,
}

/// Connections closed by each deadline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct TimeoutStats {
    /// The handshake was not finished within the handshake timeout (these are also failed
    /// handshakes).
    pub handshake: u64,
    /// A request head was not complete within the request timeout of its first byte.
    pub request_head: u64,
    /// A kept-alive connection got no new request within the idle timeout.
    pub keep_alive: u64,
    /// A request body or a response made no progress within the idle timeout.
    pub stalled: u64,
}

/// Requests answered with an error status and a close, before routing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RejectedStats {
    /// 431: a head over `http::MAX_HEAD_BYTES`.
    pub head_too_large: u64,
    /// 414: a request line over `http::MAX_REQUEST_LINE_BYTES`.
    pub uri_too_long: u64,
    /// 400: not an HTTP/1.x request head.
    pub malformed: u64,
    /// 501: a chunked request body.
    pub unsupported: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HandshakeStats {
    pub full: u64,
    pub resumed_session_id: u64,
    pub resumed_ticket: u64,
    pub failed: u64,
    /// `failed`, split by class (the classes add up to it).
    pub failed_by: HandshakeFailures,
    pub tls12: u64,
    pub tls13: u64,
    pub other_version: u64,
    /// Client requests for a TLS 1.2 renegotiation, refused with a no_renegotiation alert
    /// (counted when their connection closes).
    pub renegotiations_refused: u64,
    /// TLS calls (handshake, read or write) that returned `SSL_ERROR_WANT_ASYNC`: with an
    /// async engine, one per paused crypto operation. Absent before issue 18.
    #[serde(default)]
    pub async_waits: u64,
    pub failure_reasons: BTreeMap<String, u64>,
}

/// Failed handshakes by class; see [`HandshakeFailure`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HandshakeFailures {
    pub timeout: u64,
    pub not_tls: u64,
    pub peer_closed: u64,
    pub shed: u64,
    pub other: u64,
}

impl HandshakeStats {
    /// Completed handshakes of every kind.
    pub fn completed(&self) -> u64 {
        self.full + self.resumed_session_id + self.resumed_ticket
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ResponseStats {
    #[serde(rename = "2xx")]
    pub ok: u64,
    #[serde(rename = "4xx")]
    pub client_error: u64,
    #[serde(rename = "5xx")]
    pub server_error: u64,
    /// Times a response could not be written on because the client was not reading it (its
    /// socket buffer was full). Meanwhile the server reads nothing more from that client, so
    /// a client that pipelines requests without reading is held back by its own backlog.
    pub blocked_on_client: u64,
}

/// Plaintext (application data) bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ByteStats {
    pub read: u64,
    pub written: u64,
}

impl ServerCounters {
    /// Counters for `workers` workers.
    pub fn new(workers: usize, library: String, library_flavour: String) -> ServerCounters {
        ServerCounters {
            workers: (0..workers).map(|_| WorkerCounters::default()).collect(),
            started: Instant::now(),
            library,
            library_flavour,
        }
    }

    /// Sums every worker's counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        let sum = |f: fn(&WorkerCounters) -> &AtomicU64| -> u64 {
            self.workers.iter().map(|w| f(w).load(Relaxed)).sum()
        };
        let mut failure_reasons = BTreeMap::new();
        for w in &self.workers {
            let reasons = w
                .failure_reasons
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            for (reason, n) in reasons.iter() {
                *failure_reasons.entry(reason.clone()).or_default() += n;
            }
        }
        StatsSnapshot {
            library: self.library.clone(),
            library_flavour: self.library_flavour.clone(),
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: ConnectionStats {
                accepted: sum(|w| &w.connections_accepted),
                closed: sum(|w| &w.connections_closed),
                errors: sum(|w| &w.connection_errors),
                timed_out: TimeoutStats {
                    handshake: sum(|w| &w.timeouts_handshake),
                    request_head: sum(|w| &w.timeouts_request_head),
                    keep_alive: sum(|w| &w.timeouts_keep_alive),
                    stalled: sum(|w| &w.timeouts_stalled),
                },
                shed: sum(|w| &w.connections_shed),
                accept_pauses: sum(|w| &w.accept_pauses),
                responses_aborted: sum(|w| &w.responses_aborted),
                closed_without_close_notify: sum(|w| &w.closed_without_close_notify),
            },
            handshakes: HandshakeStats {
                full: sum(|w| &w.handshakes_full),
                resumed_session_id: sum(|w| &w.handshakes_resumed_session_id),
                resumed_ticket: sum(|w| &w.handshakes_resumed_ticket),
                failed: sum(|w| &w.handshakes_failed),
                failed_by: HandshakeFailures {
                    timeout: sum(|w| &w.handshakes_failed_timeout),
                    not_tls: sum(|w| &w.handshakes_failed_not_tls),
                    peer_closed: sum(|w| &w.handshakes_failed_peer_closed),
                    shed: sum(|w| &w.handshakes_failed_shed),
                    other: sum(|w| &w.handshakes_failed_other),
                },
                tls12: sum(|w| &w.handshakes_tls12),
                tls13: sum(|w| &w.handshakes_tls13),
                other_version: sum(|w| &w.handshakes_other_version),
                renegotiations_refused: sum(|w| &w.renegotiations_refused),
                async_waits: sum(|w| &w.async_waits),
                failure_reasons,
            },
            requests: sum(|w| &w.requests),
            requests_pipelined: sum(|w| &w.requests_pipelined),
            requests_rejected: RejectedStats {
                head_too_large: sum(|w| &w.rejected_head_too_large),
                uri_too_long: sum(|w| &w.rejected_uri_too_long),
                malformed: sum(|w| &w.rejected_malformed),
                unsupported: sum(|w| &w.rejected_unsupported),
            },
            responses: ResponseStats {
                ok: sum(|w| &w.responses_2xx),
                client_error: sum(|w| &w.responses_4xx),
                server_error: sum(|w| &w.responses_5xx),
                blocked_on_client: sum(|w| &w.responses_blocked),
            },
            bytes: ByteStats {
                read: sum(|w| &w.bytes_read),
                written: sum(|w| &w.bytes_written),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_sums_workers_and_classifies() {
        let c = ServerCounters::new(2, "test".into(), "OpenSSL".into());
        c.workers[0].handshake(HandshakeKind::Full, Some(TlsVersion::Tls1_3));
        c.workers[1].handshake(HandshakeKind::ResumedTicket, Some(TlsVersion::Tls1_3));
        c.workers[1].handshake(HandshakeKind::ResumedSessionId, Some(TlsVersion::Tls1_2));
        c.workers[0].handshake_failed(HandshakeFailure::Other, "no shared cipher");
        c.workers[1].handshake_failed(HandshakeFailure::Other, "no shared cipher");
        c.workers[1].handshake_failed(HandshakeFailure::Timeout, "timed out");
        c.workers[0].timed_out(Timeout::Handshake);
        c.workers[1].rejected(Rejection::UriTooLong);
        c.workers[0].response(200);
        c.workers[0].response(404);
        let s = c.snapshot();
        assert_eq!((s.handshakes.full, s.handshakes.resumed_ticket), (1, 1));
        assert_eq!(s.handshakes.resumed_session_id, 1);
        assert_eq!((s.handshakes.tls12, s.handshakes.tls13), (1, 2));
        assert_eq!(s.handshakes.completed(), 3);
        assert_eq!(s.handshakes.failure_reasons["no shared cipher"], 2);
        let by = &s.handshakes.failed_by;
        assert_eq!((s.handshakes.failed, by.other, by.timeout), (3, 2, 1));
        assert_eq!(s.connections.timed_out.handshake, 1);
        assert_eq!(s.requests_rejected.uri_too_long, 1);
        assert_eq!((s.responses.ok, s.responses.client_error), (1, 1));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["responses"]["2xx"], 1);
    }
}
