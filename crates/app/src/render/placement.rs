//! Where kernel probes sit, in one line: trace's report and sniff's start-up note say it alike.

use model::trace::PlacementDoc;

/// "placement: 8 of 11 functions on emulated instructions (4 entry, 4 callee); single-stepped:
/// SSL_connect, SSL_accept, SSL_get_error", for (function, placement) pairs (kernel probes).
pub fn placement_line<'a>(
    placed: impl IntoIterator<Item = (&'a str, &'a PlacementDoc)>,
) -> Option<String> {
    let placed: Vec<(&str, &PlacementDoc)> = placed.into_iter().collect();
    if placed.is_empty() {
        return None;
    }
    let emulated = placed.iter().filter(|(_, p)| p.emulated).count();
    let mut kinds: Vec<String> = Vec::new();
    for at in ["entry", "entry+4", "callee", "entry+returns"] {
        let n = placed
            .iter()
            .filter(|(_, p)| p.emulated && p.at == at)
            .count();
        if n > 0 {
            kinds.push(format!("{n} {at}"));
        }
    }
    let stepped: Vec<&str> = placed
        .iter()
        .filter(|(_, p)| !p.emulated)
        .map(|(f, _)| *f)
        .collect();
    let mut line = format!(
        "placement: {emulated} of {} on emulated instructions",
        crate::render::words::count(placed.len() as u64, "function")
    );
    if !kinds.is_empty() {
        line.push_str(&format!(" ({})", kinds.join(", ")));
    }
    if !stepped.is_empty() {
        line.push_str(&format!("; single-stepped: {}", stepped.join(", ")));
    }
    // Go's functions: the entry is placed; returns are seen at deferred closures' branches
    // (emulated) where they run one, else at the return instruction (single-stepped).
    let go_deferred: usize = placed.iter().map(|(_, p)| p.deferred_offsets.len()).sum();
    if go_deferred > 0 {
        line.push_str(&format!(
            "; Go's returns seen at {} (emulated)",
            crate::render::words::count(go_deferred as u64, "deferred call")
        ));
    }
    let go_returns: usize = placed.iter().map(|(_, p)| p.return_offsets.len()).sum();
    if go_returns > 0 {
        line.push_str(&format!(
            "; Go's return instructions single-stepped: {}",
            crate::render::words::count(go_returns as u64, "probe")
        ));
    }
    Some(line)
}
