//! libbpf's log, kept off the terminal. libbpf prints its warnings and progress to stderr by
//! default; tlsscope routes them here instead: shown only when verbose, and the warnings kept so
//! that an error can carry the one libbpf line that explains it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use libbpf_rs::PrintLevel;

/// How many recent warnings are kept for errors to quote.
const KEPT_WARNINGS: usize = 32;
/// How many of the verifier's last lines an error shows when verbose.
const VERIFIER_TAIL_LINES: usize = 8;

static VERBOSE: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
static WARNINGS: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// Routes libbpf's log through tlsscope. Idempotent; the probe loaders call it before any
/// libbpf call, so nothing raw reaches the terminal even when the program forgot to.
pub fn install() {
    INSTALL.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Debug, on_message)));
    });
}

/// Shows libbpf's whole log (debug level included) on stderr from now on, as `-v` asks.
pub fn set_verbose(verbose: bool) {
    VERBOSE.store(verbose, Ordering::Relaxed);
    install();
}

fn verbose() -> bool {
    VERBOSE.load(Ordering::Relaxed)
}

fn on_message(level: PrintLevel, message: String) {
    if verbose() {
        eprint!("{message}");
        if !message.ends_with('\n') {
            eprintln!();
        }
    }
    if level == PrintLevel::Warn {
        let mut kept = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() == KEPT_WARNINGS {
            kept.pop_front();
        }
        kept.push_back(message);
    }
}

/// Forgets the warnings given so far: a loader calls it before it starts, so an error quotes
/// only what libbpf said about that load.
pub(crate) fn forget_warnings() {
    take_warnings();
}

/// Takes the warnings libbpf has given since the last call, oldest first.
fn take_warnings() -> Vec<String> {
    let mut kept = WARNINGS.lock().unwrap_or_else(|e| e.into_inner());
    kept.drain(..).collect()
}

/// `detail` (libbpf-rs's error) followed by what libbpf said about it: its first warning since
/// the last error, which names the cause (later ones repeat "failed to load object"), and, when
/// verbose, the verifier's last lines.
pub fn with_reason(detail: &str) -> String {
    let warnings = take_warnings();
    let mut out = detail.to_string();
    if let Some(reason) = first_reason(&warnings) {
        if !detail.contains(&reason) {
            out.push_str(": libbpf says: ");
            out.push_str(&reason);
        }
    }
    if verbose() {
        if let Some(tail) = verifier_tail(&warnings) {
            out.push_str("\nthe verifier's last lines:\n");
            out.push_str(&tail);
        }
    }
    out
}

/// The first warning that is not the verifier's log, on one line without libbpf's prefix.
fn first_reason(warnings: &[String]) -> Option<String> {
    warnings
        .iter()
        .filter(|w| !w.contains("-- BEGIN PROG LOAD LOG --"))
        .map(|w| {
            let w = w.trim();
            w.strip_prefix("libbpf: ").unwrap_or(w).replace('\n', "; ")
        })
        .find(|w| !w.is_empty())
}

/// The last lines of the verifier's log, if libbpf printed one.
fn verifier_tail(warnings: &[String]) -> Option<String> {
    let log = warnings
        .iter()
        .rev()
        .find(|w| w.contains("-- BEGIN PROG LOAD LOG --"))?;
    let body: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("PROG LOAD LOG --") && !l.trim().is_empty())
        .collect();
    let start = body.len().saturating_sub(VERIFIER_TAIL_LINES);
    Some(body[start..].join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_warning_outside_the_verifier_log_is_the_reason() {
        let warnings = vec![
            "libbpf: prog 'tls_enter': BPF program load failed: Permission denied\n".to_string(),
            "libbpf: prog 'tls_enter': -- BEGIN PROG LOAD LOG --\n0: R1=ctx\nR2 invalid mem access 'scalar'\n-- END PROG LOAD LOG --\n".to_string(),
            "libbpf: failed to load object 'latency_bpf'\n".to_string(),
        ];
        assert_eq!(
            first_reason(&warnings).as_deref(),
            Some("prog 'tls_enter': BPF program load failed: Permission denied")
        );
        assert_eq!(
            verifier_tail(&warnings).as_deref(),
            Some("0: R1=ctx\nR2 invalid mem access 'scalar'")
        );
    }

    #[test]
    fn no_warning_no_reason() {
        assert_eq!(first_reason(&[]), None);
        assert_eq!(verifier_tail(&["libbpf: x".to_string()]), None);
    }
}
