//! Per-thread aggregates: recorded without locks or allocation in the common case, merged once
//! at the end of the run.

use std::collections::{BTreeMap, HashMap};

use ossl::{HandshakeIds, HandshakeKind, Negotiated};
use stats::LatencyHistogram;

use crate::result::ConnectionRow;
use crate::wire::WireByKind;

/// Latency histograms per phase.
#[derive(Clone, Debug, Default)]
pub struct Histograms {
    pub connect: LatencyHistogram,
    pub handshake: LatencyHistogram,
    pub ttfb: LatencyHistogram,
    pub request: LatencyHistogram,
    pub total: LatencyHistogram,
    pub total_uncorrected: LatencyHistogram,
    /// Open loop: how late the loop woke for each planned start (the pacer's own error, part
    /// of `total` but not the server's doing).
    pub pacer_late: LatencyHistogram,
}

impl Histograms {
    fn merge(&mut self, o: &Histograms) {
        self.connect.merge(&o.connect);
        self.handshake.merge(&o.handshake);
        self.ttfb.merge(&o.ttfb);
        self.request.merge(&o.request);
        self.total.merge(&o.total);
        self.total_uncorrected.merge(&o.total_uncorrected);
        self.pacer_late.merge(&o.pacer_late);
    }
}

/// Resumption bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resumption {
    pub offered: u64,
    pub resumed: u64,
    pub resumed_other_kind: u64,
    pub no_session: u64,
    pub unexpected: u64,
}

/// What one load thread measured.
#[derive(Debug, Default)]
pub struct Recorder {
    pub hist: Histograms,
    pub ops: u64,
    pub requests: u64,
    pub body_bytes: u64,
    pub handshakes: HashMap<HandshakeIds, u64>,
    /// The readable report of each distinct outcome, made the first time it is seen.
    pub names: HashMap<HandshakeIds, Negotiated>,
    pub resumption: Resumption,
    pub errors: BTreeMap<String, u64>,
    pub status: BTreeMap<u16, u64>,
    pub rows: Vec<ConnectionRow>,
    /// CPU seconds this thread used over the measured window.
    pub thread_cpu_s: f64,
    pub window_s: f64,
    /// Per second of the measured window (from its start): operations completed and errors.
    pub per_second: Vec<(u64, u64)>,
    /// Wire figures per kind of handshake.
    pub wire: WireByKind,
}

impl Recorder {
    /// Counts a completed handshake; `describe` makes the readable report the first time an
    /// outcome is seen.
    pub fn handshake(&mut self, ids: HandshakeIds, describe: impl FnOnce() -> Negotiated) {
        *self.handshakes.entry(ids).or_insert(0) += 1;
        self.names.entry(ids).or_insert_with(describe);
    }

    /// Counts an operation or an error (`error`) in the second `since_start` falls in.
    pub fn second(&mut self, since_start: std::time::Duration, error: bool) {
        let i = usize::try_from(since_start.as_secs()).unwrap_or(usize::MAX);
        // A run is bounded (duration or count, at most MAX_RUN): so is this.
        if i >= self.per_second.len() {
            if i > 86_400 {
                return;
            }
            self.per_second.resize(i + 1, (0, 0));
        }
        let slot = &mut self.per_second[i];
        if error {
            slot.1 += 1;
        } else {
            slot.0 += 1;
        }
    }

    /// Counts an error by kind.
    pub fn error(&mut self, kind: &str) {
        match self.errors.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.errors.insert(kind.to_string(), 1);
            }
        }
    }

    /// Counts a response status.
    pub fn status(&mut self, code: u16) {
        *self.status.entry(code).or_insert(0) += 1;
    }

    /// Adds another thread's figures.
    pub fn merge(&mut self, o: Recorder) {
        self.hist.merge(&o.hist);
        self.ops += o.ops;
        self.requests += o.requests;
        self.body_bytes += o.body_bytes;
        for (ids, n) in o.handshakes {
            *self.handshakes.entry(ids).or_insert(0) += n;
        }
        for (ids, name) in o.names {
            self.names.entry(ids).or_insert(name);
        }
        let r = &mut self.resumption;
        r.offered += o.resumption.offered;
        r.resumed += o.resumption.resumed;
        r.resumed_other_kind += o.resumption.resumed_other_kind;
        r.no_session += o.resumption.no_session;
        r.unexpected += o.resumption.unexpected;
        for (k, n) in o.errors {
            *self.errors.entry(k).or_insert(0) += n;
        }
        for (k, n) in o.status {
            *self.status.entry(k).or_insert(0) += n;
        }
        self.rows.extend(o.rows);
        self.wire.merge(&o.wire);
        if o.per_second.len() > self.per_second.len() {
            self.per_second.resize(o.per_second.len(), (0, 0));
        }
        for (mine, theirs) in self.per_second.iter_mut().zip(o.per_second) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
    }

    /// Handshakes by kind: (full, by session ID, by ticket).
    pub fn handshake_kinds(&self) -> (u64, u64, u64) {
        let mut kinds = (0, 0, 0);
        for (ids, n) in &self.handshakes {
            match ids.kind {
                HandshakeKind::Full => kinds.0 += n,
                HandshakeKind::ResumedSessionId => kinds.1 += n,
                HandshakeKind::ResumedTicket => kinds.2 += n,
            }
        }
        kinds
    }
}
