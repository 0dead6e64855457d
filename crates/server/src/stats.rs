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
    /// Handshake failures by reason ("no shared cipher"): rare, so a lock is fine here.
    pub failure_reasons: Mutex<BTreeMap<String, u64>>,
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

    /// Counts a failed handshake and why.
    pub fn handshake_failed(&self, reason: &str) {
        bump(&self.handshakes_failed);
        let mut reasons = self
            .failure_reasons
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *reasons.entry(reason.to_string()).or_default() += 1;
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
}

/// A point-in-time sum of all workers' counters: what `/.well-known/tlsscope/stats` serves and
/// `tlsscope serve` prints at exit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    pub library: String,
    pub uptime_ms: u64,
    pub connections: ConnectionStats,
    pub handshakes: HandshakeStats,
    pub requests: u64,
    pub responses: ResponseStats,
    pub bytes: ByteStats,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConnectionStats {
    pub accepted: u64,
    pub closed: u64,
    /// Connections ended by a socket or TLS error after the handshake.
    pub errors: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct HandshakeStats {
    pub full: u64,
    pub resumed_session_id: u64,
    pub resumed_ticket: u64,
    pub failed: u64,
    pub tls12: u64,
    pub tls13: u64,
    pub other_version: u64,
    pub failure_reasons: BTreeMap<String, u64>,
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
}

/// Plaintext (application data) bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ByteStats {
    pub read: u64,
    pub written: u64,
}

impl ServerCounters {
    /// Counters for `workers` workers.
    pub fn new(workers: usize, library: String) -> ServerCounters {
        ServerCounters {
            workers: (0..workers).map(|_| WorkerCounters::default()).collect(),
            started: Instant::now(),
            library,
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
            uptime_ms: self.started.elapsed().as_millis() as u64,
            connections: ConnectionStats {
                accepted: sum(|w| &w.connections_accepted),
                closed: sum(|w| &w.connections_closed),
                errors: sum(|w| &w.connection_errors),
            },
            handshakes: HandshakeStats {
                full: sum(|w| &w.handshakes_full),
                resumed_session_id: sum(|w| &w.handshakes_resumed_session_id),
                resumed_ticket: sum(|w| &w.handshakes_resumed_ticket),
                failed: sum(|w| &w.handshakes_failed),
                tls12: sum(|w| &w.handshakes_tls12),
                tls13: sum(|w| &w.handshakes_tls13),
                other_version: sum(|w| &w.handshakes_other_version),
                failure_reasons,
            },
            requests: sum(|w| &w.requests),
            responses: ResponseStats {
                ok: sum(|w| &w.responses_2xx),
                client_error: sum(|w| &w.responses_4xx),
                server_error: sum(|w| &w.responses_5xx),
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
        let c = ServerCounters::new(2, "test".into());
        c.workers[0].handshake(HandshakeKind::Full, Some(TlsVersion::Tls1_3));
        c.workers[1].handshake(HandshakeKind::ResumedTicket, Some(TlsVersion::Tls1_3));
        c.workers[1].handshake(HandshakeKind::ResumedSessionId, Some(TlsVersion::Tls1_2));
        c.workers[0].handshake_failed("no shared cipher");
        c.workers[1].handshake_failed("no shared cipher");
        c.workers[0].response(200);
        c.workers[0].response(404);
        let s = c.snapshot();
        assert_eq!((s.handshakes.full, s.handshakes.resumed_ticket), (1, 1));
        assert_eq!(s.handshakes.resumed_session_id, 1);
        assert_eq!((s.handshakes.tls12, s.handshakes.tls13), (1, 2));
        assert_eq!(s.handshakes.completed(), 3);
        assert_eq!(s.handshakes.failure_reasons["no shared cipher"], 2);
        assert_eq!((s.responses.ok, s.responses.client_error), (1, 1));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["responses"]["2xx"], 1);
    }
}
