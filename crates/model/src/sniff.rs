//! `tlsscope sniff`'s results: one sniffed call as the writers see it (its JSON line's fields),
//! and the counts its closing summary and loss lines report.

use std::net::SocketAddr;

use serde::Serialize;

/// One sniffed call, as the writers see it.
#[derive(Clone, Debug, Serialize)]
pub struct Record<'a> {
    /// CLOCK_MONOTONIC nanoseconds at the call's start.
    pub start_ns: u64,
    pub latency_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: &'a str,
    pub fd: Option<i32>,
    /// The fd was taken from an earlier call on the same connection (this one made no syscall).
    pub fd_from_earlier_call: bool,
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    pub function: &'a str,
    /// "read", "write" or "handshake".
    pub direction: &'a str,
    pub ret: i64,
    /// Bytes the call moved; `data` holds the first of them.
    pub total_bytes: u64,
    /// Bytes over --max-bytes, not captured.
    pub uncaptured_bytes: u64,
    /// Pieces were lost (ring buffer full): `data` stops early.
    pub incomplete: bool,
    #[serde(skip)]
    pub data: &'a [u8],
}

/// Counts for the summary.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub calls: u64,
    /// Calls that passed --grep and are wholly in the output (or with --quiet only counted);
    /// `reads`, `writes` and `bytes` are of these.
    pub shown: u64,
    /// Calls that passed --grep but are not (wholly) in the output: it failed (a full disk)
    /// before they reached it.
    pub unwritten: u64,
    /// What the output file holds, in bytes, where it is a file whose size can be asked.
    pub output_bytes: Option<u64>,
    /// Writing the output failed (a full disk, a closed pipe): the capture stopped there, and
    /// what the probes had copied after it was never read.
    pub output_failed: bool,
    /// --quiet: nothing was written, so the summary says "counted", not "shown".
    pub quiet: bool,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub cut_calls: u64,
    pub cut_bytes: u64,
    pub incomplete: u64,
    pub failed_calls: u64,
}

/// Ring-buffer losses: calls lost in part or whole, records that did not fit, and NSPR calls
/// not sniffed because their layer could not be checked (counted in `calls` too).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Losses {
    pub calls: u64,
    pub records: u64,
    pub unchecked: u64,
}
