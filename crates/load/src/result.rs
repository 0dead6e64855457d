//! What a load run measured: plain data, serialized as the `result` of `tlsscope bench --json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stats::LatencySummary;

/// What each operation of a run was, as the result names it ("full", "resume", "keepalive").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    #[default]
    Full,
    Resume,
    Keepalive,
}

impl RunMode {
    /// The name in results and messages.
    pub fn name(self) -> &'static str {
        match self {
            RunMode::Full => "full",
            RunMode::Resume => "resume",
            RunMode::Keepalive => "keepalive",
        }
    }
}

impl std::fmt::Display for RunMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything one run measured, over the measured window (after warm-up).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// The client engine and library that made the connections. Absent in documents written
    /// before it was kept (those ran OpenSSL).
    #[serde(default)]
    pub client: crate::engine::ClientInfo,
    pub mode: RunMode,
    pub target: String,
    pub threads: usize,
    pub connections: usize,
    /// Planned operations per second (open loop); none for a closed loop.
    pub rate_per_s: Option<f64>,
    /// Seconds measured (warm-up excluded).
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Completed operations: connections in full/resume mode, requests in keepalive mode.
    pub ops: u64,
    pub ops_per_s: f64,
    pub handshakes: HandshakeCounts,
    pub requests: u64,
    pub requests_per_s: f64,
    /// Response body bytes read.
    pub body_bytes: u64,
    /// What the handshakes negotiated, by distinct outcome, most frequent first.
    pub negotiated: Vec<NegotiatedCount>,
    pub resumption: ResumptionCheck,
    pub latency: Latencies,
    /// Errors by kind ("refused", "reset", "timeout (handshake)", "tls alert: ...", "http 503").
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    /// Responses by HTTP status code.
    pub http_status: BTreeMap<String, u64>,
    pub cpu: CpuUsage,
    /// Per second of the measured window, in order: operations completed and errors (the
    /// last second may be partial). Absent in documents written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_second: Vec<SecondCounts>,
    /// When the target stopped answering for good: the seconds into the measured window after
    /// which no operation completed while errors went on. The rates above are over the whole
    /// window; `ops_per_s_while_up` is over the part before this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_lost_at_s: Option<f64>,
    /// Operations per second before the target stopped answering (with `target_lost_at_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_s_while_up: Option<f64>,
    /// Bytes on the wire, the ClientHello, key shares, HelloRetryRequests and round trips,
    /// per kind of handshake (`wire.counted` says what is counted). Absent when the client's
    /// library could not count them, and in results written before they existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<crate::wire::WireSummary>,
    /// Things the reader should know (the target stopped answering, ...).
    pub warnings: Vec<String>,
    /// The client set the rate rather than the server: for the command layer to put first
    /// among the warnings, in its words (it says which settings to change).
    #[serde(skip)]
    pub client_bottleneck: Option<crate::ClientBottleneck>,
    /// True when the run stopped early (Ctrl-C): the figures cover what ran.
    pub interrupted: bool,
}

/// One second of a run: operations completed and errors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecondCounts {
    pub ops: u64,
    pub errors: u64,
}

/// Completed handshakes, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandshakeCounts {
    pub total: u64,
    pub full: u64,
    pub resumed_session_id: u64,
    pub resumed_ticket: u64,
    pub per_s: u64,
}

/// One distinct negotiated outcome and how many handshakes got it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NegotiatedCount {
    pub version: String,
    pub cipher: String,
    /// Absent in compare documents written before this model was shared.
    #[serde(default)]
    pub cipher_standard: Option<String>,
    pub group: Option<String>,
    pub signature: Option<String>,
    #[serde(default)]
    pub server_key: Option<String>,
    /// "full", "resumed_session_id" or "resumed_ticket".
    pub handshake: String,
    pub count: u64,
}

impl NegotiatedCount {
    /// One handshake that negotiated `n`.
    pub fn one(n: &ossl::Negotiated) -> NegotiatedCount {
        NegotiatedCount {
            version: n.version.clone(),
            cipher: n.cipher.clone(),
            cipher_standard: n.cipher_standard.clone(),
            group: n.group.clone(),
            signature: n.signature.clone(),
            server_key: n.server_key.clone(),
            handshake: n.kind.name().to_string(),
            count: 1,
        }
    }

    /// The outcome in words: "TLSv1.3 TLS_AES_256_GCM_SHA384 x25519 rsa_pss_rsae_sha256 full"
    /// ("-" for a group or signature the handshake did not have).
    pub fn words(&self) -> String {
        format!(
            "{} {} {} {} {}",
            self.version,
            self.cipher,
            self.group.as_deref().unwrap_or("-"),
            self.signature.as_deref().unwrap_or("-"),
            self.handshake
        )
    }

    /// Adds `n` to `list`: to the entry with the same outcome, or as a new one.
    pub fn tally(list: &mut Vec<NegotiatedCount>, n: NegotiatedCount) {
        let key = |e: &NegotiatedCount| {
            (
                e.version.clone(),
                e.cipher.clone(),
                e.group.clone(),
                e.signature.clone(),
                e.server_key.clone(),
                e.handshake.clone(),
            )
        };
        let wanted = key(&n);
        match list.iter_mut().find(|e| key(e) == wanted) {
            Some(e) => e.count += n.count,
            None => list.push(n),
        }
    }
}

/// Did the run get the resumption behaviour it asked for?
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumptionCheck {
    /// Handshakes that offered a session.
    pub offered: u64,
    /// Of those, how many resumed.
    pub resumed: u64,
    /// Resumed, but not the way asked for (session ID when tickets were asked, or the reverse).
    pub resumed_other_kind: u64,
    /// Connections that closed without receiving a resumable session (no ticket from the
    /// server).
    pub no_session: u64,
    /// Resumed handshakes in a run that asked for full handshakes.
    pub unexpected_resumptions: u64,
    /// resumed / offered (1 when nothing was offered).
    pub resumed_ratio: f64,
    /// The mode's requirement was met: full: no resumption; resume: at least 99% of offers
    /// resumed the requested way.
    pub ok: bool,
    /// Why not, in a sentence.
    pub problem: Option<String>,
}

/// Latency per phase. `total` is timed from each operation's planned start (coordinated
/// omission corrected when `--rate` is used); `total_uncorrected` from its actual start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latencies {
    /// TCP connect.
    pub connect: LatencySummary,
    /// TLS handshake: ClientHello to handshake done.
    pub handshake: LatencySummary,
    /// Request sent to first response byte.
    pub ttfb: LatencySummary,
    /// Request sent to last response byte.
    pub request: LatencySummary,
    /// The whole operation: connection (full/resume) or request (keepalive).
    pub total: LatencySummary,
    pub total_uncorrected: LatencySummary,
    /// Open loop: how late the load thread woke for each completed operation's planned start,
    /// measured from the plan. It is part of `total`; the rest of `total - request` is queueing behind a slow
    /// server. Empty without `--rate`; absent in results written before it existed.
    #[serde(default)]
    pub pacer_late: LatencySummary,
}

/// CPU spent over the measured window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUsage {
    pub client_user_s: f64,
    pub client_system_s: f64,
    /// Client CPU seconds (user + system) per 1000 handshakes.
    pub client_cpu_s_per_1000_handshakes: f64,
    /// Client CPU seconds per 1000 HTTP requests (0 without requests); absent in results
    /// written before it existed.
    #[serde(default)]
    pub client_cpu_s_per_1000_requests: f64,
    pub handshakes_per_client_cpu_s: f64,
    /// openssl s_time's figure: connections per client *user* second.
    pub connections_per_user_s: f64,
    /// Each load thread's busy share of the window, in percent.
    pub thread_busy_pct: Vec<f64>,
    /// The server's CPU over the same window, when its PID was given.
    pub server: Option<ServerCpu>,
}

/// A server process's CPU over the measured window: the user/system split from /proc (whole
/// clock ticks), the busy share and the per-unit figures from its CPU-time clock (ns).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCpu {
    pub pid: u32,
    pub user_s: f64,
    pub system_s: f64,
    /// Of one CPU (100 = one core fully busy).
    pub busy_pct: f64,
    pub cpu_us_per_handshake: f64,
    /// Per HTTP request (0 without requests); absent in results written before it existed.
    #[serde(default)]
    pub cpu_us_per_request: f64,
}

/// One connection, for `--csv`: times in microseconds from the run's start (or durations).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionRow {
    pub thread: usize,
    pub start_us: u64,
    pub connect_us: u64,
    pub handshake_us: u64,
    pub ttfb_us: Option<u64>,
    pub request_us: Option<u64>,
    pub total_us: u64,
    pub handshake: String,
    pub version: String,
    pub cipher: String,
    pub group: Option<String>,
    pub requests: u32,
    pub error: Option<String>,
}
