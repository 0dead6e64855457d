//! What a plaintext capture hands over, whichever backend copies the calls: each sniffed call
//! with its bytes, the capture's counters, and what one poll found.

use crate::catalog::Direction;

/// One sniffed call, its pieces put back together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub start_ns: u64,
    pub latency_ns: u64,
    pub pid: u32,
    pub tid: u32,
    /// The thread's name (shared: the same few threads make every call).
    pub comm: std::sync::Arc<str>,
    /// The socket; `None` when the call made no syscall and the connection object was not
    /// seen with one before.
    pub fd: Option<i32>,
    /// The fd was not seen in this call but earlier with the same connection object.
    pub fd_from_earlier_call: bool,
    /// The library's connection object (`SSL *`, ...), to tell connections apart.
    pub connection: u64,
    /// (local, peer) of the socket, read from the kernel's socket during the call (or the
    /// earlier call the fd came from); `None` when the fd was not a TCP socket or unknown.
    pub endpoints: Option<(std::net::SocketAddr, std::net::SocketAddr)>,
    pub function: &'static str,
    pub direction: Direction,
    pub ret: i64,
    /// Bytes the call moved.
    pub total_bytes: u64,
    /// The captured bytes, where the backend copies them out (the kernel backend's assembler);
    /// the in-process backend leaves this empty and hands the bytes beside the call, read in
    /// place in its ring ([`CallSink`]).
    pub data: Vec<u8>,
    /// Bytes over the capture limit, not captured.
    pub uncaptured_bytes: u64,
    /// Some of its pieces were lost (ring buffer full): `data` has gaps at the end.
    pub incomplete: bool,
}

/// A capture's counters (the kernel's, or the in-process rings').
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SniffCounters {
    /// Calls the probes saw (whatever their fate in the ring buffer).
    pub calls: u64,
    /// Ring-buffer records that did not fit.
    pub lost_records: u64,
    /// Calls with at least one record lost (or, for NSPR, not checked: see `unchecked`).
    pub lost_calls: u64,
    /// NSPR calls not sniffed because their layer could not be checked (the process's memory
    /// map was locked at that instant); counted in `lost_calls` too.
    pub unchecked: u64,
    /// In-process wrappers that failed (a panic caught in them): each stopped copying its
    /// function's calls in its process from then on, so later calls were not captured.
    pub wrapper_failures: u64,
    /// Key log lines (`sniff --keylog`) that did not fit their ring buffer.
    pub lost_keys: u64,
}

/// Where a capture hands each completed call: the call, and its captured bytes (read in place
/// where the backend can; `Call::data` is then left empty).
pub type CallSink<'a> = dyn FnMut(&Call, &[u8]) + 'a;

/// What one poll of a capture found.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Polled {
    /// Calls handed to the sink.
    pub calls: usize,
    /// How full the fullest ring was when the poll began (0 to 1), where the backend can
    /// tell: the reader polls sooner when it nears full, and later when it stays nearly empty.
    pub fullest: Option<f64>,
}

/// (local, peer) from an address family (`AF_INET`: the first four bytes; `AF_INET6`) and two
/// (address, port) pairs, as both backends record them; None for any other family.
pub(crate) fn socket_pair(
    family: u16,
    local: (&[u8; 16], u16),
    peer: (&[u8; 16], u16),
) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let ip = |b: &[u8; 16]| -> Option<IpAddr> {
        match i32::from(family) {
            libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))),
            libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(*b))),
            _ => None,
        }
    };
    Some((
        SocketAddr::new(ip(local.0)?, local.1),
        SocketAddr::new(ip(peer.0)?, peer.1),
    ))
}
