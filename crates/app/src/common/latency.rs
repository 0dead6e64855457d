//! Latency figures as trace and the lab read them from the kernel's (or the in-process
//! library's) cells: per function and outcome, where each kernel probe sits, and the one note
//! about the syscall hooks.

use model::trace::{FunctionStats, PlacementDoc};
use probes::{catalog, Buckets, Edge, Outcome, Snapshot, Trace};
use stats::buckets::{summarize, Bucket};

/// What trace loses without its syscall hooks, and how to get it back.
pub const SYSCALL_EXITS_EFFECT: &str = "OpenSSL calls returning <= 0 cannot be split into retry and failure and are classed unknown; --exact-outcomes settles them with SSL_get_error instead";

/// The one line worth saying about the tracer's syscall hooks, if any (a private tracefs mount,
/// or hooks missing and what that costs).
pub fn syscall_hooks_note(tracer: &dyn Trace) -> Option<String> {
    tracer
        .syscall_hooks()?
        .note(Edge::Exit, SYSCALL_EXITS_EFFECT)
}

/// Where a kernel probe sits, for the document.
pub fn placement_doc(point: &probes::AttachPoint) -> PlacementDoc {
    PlacementDoc {
        at: point.placement.name().to_string(),
        emulated: point.placement.emulated(),
        probe_offset: point.probe_offset(),
        unseen: point.placement.unseen().map(str::to_string),
        return_offsets: match &point.placement {
            probes::Placement::GoExits { returns, .. } => returns.clone(),
            _ => Vec::new(),
        },
        deferred_offsets: match &point.placement {
            probes::Placement::GoExits { deferred, .. } => {
                deferred.iter().map(|d| d.offset).collect()
            }
            _ => Vec::new(),
        },
    }
}

/// Groups the kernel's cells into one entry per (process, function, outcome), in catalog
/// order, then outcome order.
pub fn function_stats(snapshot: &Snapshot, buckets: Buckets) -> Vec<FunctionStats> {
    let mut keys: Vec<(u16, Outcome, u32)> = snapshot
        .cells
        .iter()
        .map(|c| (c.function, c.outcome, c.pid))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for (function, outcome, pid) in keys {
        let Some(f) = catalog::function(function) else {
            continue;
        };
        let cells = snapshot
            .cells
            .iter()
            .filter(|c| (c.function, c.outcome, c.pid) == (function, outcome, pid));
        let mut list: Vec<Bucket> = Vec::new();
        let mut total_ns = 0;
        for c in cells {
            let (low_us, high_us) = buckets.range_us(c.bucket);
            list.push(Bucket {
                low_us,
                high_us,
                count: c.count,
                total_ns: Some(c.total_ns),
            });
            total_ns += c.total_ns;
        }
        list.sort_by_key(|b| b.low_us);
        out.push(FunctionStats {
            function: f.name.to_string(),
            group: f.group.name().to_string(),
            outcome: outcome.name().to_string(),
            pid: (pid != 0).then_some(pid),
            summary: summarize(&list, total_ns),
            buckets: list,
        });
    }
    out
}
