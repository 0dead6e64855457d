//! Sampled stacks: read from `perf script`, folded, and added up per function.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::tailcalls::Site;

/// One frame of a sampled stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Frame {
    /// The function, as the symbol table names it; None where neither `.symtab` nor `.dynsym`
    /// has a symbol covering the address (internal functions of a stripped library).
    pub function: Option<String>,
    /// The object it lies in, named without its version: `libcrypto` for `libcrypto.so.3` and
    /// `libcrypto.so.1.1` alike, `kernel` for the kernel, the file name for a program.
    pub object: String,
}

impl Frame {
    /// How the frame is named in folded stacks and tables: `function (object)`.
    pub fn label(&self) -> String {
        format!(
            "{} ({})",
            self.function.as_deref().unwrap_or("[unknown]"),
            self.object
        )
    }
}

/// One sample: its frames from the leaf (where the CPU was) to the root, and the CPU time it
/// stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Stack {
    pub pid: u32,
    pub tid: u32,
    pub frames: Vec<Frame>,
    /// Where each frame's code lies (empty where the stack was not read from perf).
    pub sites: Vec<Site>,
    pub weight_ns: u64,
}

/// A function's share of the samples.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionCost {
    pub frame: Frame,
    /// CPU time with the function itself running (the leaf of the stack).
    pub self_ns: u64,
    /// CPU time with the function anywhere on the stack (once per sample, recursion or not).
    pub total_ns: u64,
}

/// The samples of one recording.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub stacks: Vec<Stack>,
    /// Chunks of samples perf reported lost while recording (its buffer was full).
    pub lost_chunks: u64,
    /// When the first and the last sample were taken (seconds, perf's clock), if any were.
    pub span: Option<(f64, f64)>,
    /// Frames put back where a tail call had hidden them (see [`crate::tailcalls`]).
    pub restored_frames: u64,
}

/// An object's name without its directory and version: what lines frames up across library
/// versions.
pub fn object_name(dso: &str) -> String {
    if dso.starts_with("[kernel") {
        return "kernel".into();
    }
    if let Some(name) = dso.strip_prefix('[').and_then(|d| d.strip_suffix(']')) {
        return name.into();
    }
    let file = dso.rsplit('/').next().unwrap_or(dso);
    match file.find(".so") {
        Some(i) if file[i + 3..].is_empty() || file[i + 3..].starts_with('.') => file[..i].into(),
        _ => file.into(),
    }
}

/// Reads `perf script -F pid,tid,time,period,ip,sym,dso` output: a header line per sample
/// (`PID/TID TIME: PERIOD`, the PID padded to a width), then one tab-indented line per frame
/// (`ADDRESS SYMBOL (DSO)`), leaf first, then a blank line. Lines it cannot read are skipped and counted.
pub fn parse_perf_script(text: &str) -> (Profile, usize) {
    let mut profile = Profile::default();
    let mut skipped = 0;
    let mut current: Option<Stack> = None;
    let mut paths: HashMap<&str, Arc<str>> = HashMap::new();
    for line in text.lines() {
        if line.trim().is_empty() {
            if let Some(s) = current.take() {
                profile.stacks.push(s);
            }
            continue;
        }
        // Frames are indented with a tab; a header may start with spaces (perf pads the PID).
        if line.starts_with('\t') {
            match (current.as_mut(), parse_frame(line)) {
                (Some(s), Some((f, address, dso))) => {
                    let path = paths.entry(dso).or_insert_with(|| Arc::from(dso)).clone();
                    s.frames.push(f);
                    s.sites.push(Site { address, path });
                }
                _ => skipped += 1,
            }
            continue;
        }
        if let Some(s) = current.take() {
            profile.stacks.push(s);
        }
        match parse_header(line) {
            Some((s, time)) => {
                let (first, last) = profile.span.unwrap_or((time, time));
                profile.span = Some((first.min(time), last.max(time)));
                current = Some(s);
            }
            None => skipped += 1,
        }
    }
    if let Some(s) = current {
        profile.stacks.push(s);
    }
    (profile, skipped)
}

/// `PID/TID TIME: PERIOD`, and the time.
fn parse_header(line: &str) -> Option<(Stack, f64)> {
    let mut words = line.split_whitespace();
    let (pid, tid) = words.next()?.split_once('/')?;
    let time = words.next()?.strip_suffix(':')?.parse().ok()?;
    let weight_ns = words.next()?.parse().ok()?;
    let stack = Stack {
        pid: pid.parse().ok()?,
        tid: tid.parse().ok()?,
        frames: Vec::new(),
        sites: Vec::new(),
        weight_ns,
    };
    Some((stack, time))
}

/// `ADDRESS SYMBOL (DSO)`, with the address and the DSO's path; the symbol may hold spaces
/// (Rust and C++ names do).
fn parse_frame(line: &str) -> Option<(Frame, u64, &str)> {
    let line = line.trim();
    let (address, rest) = line.split_once(char::is_whitespace)?;
    let address = u64::from_str_radix(address, 16).ok()?;
    let rest = rest.trim();
    let (symbol, dso) = rest.strip_suffix(')')?.rsplit_once(" (")?;
    let symbol = symbol.trim();
    let frame = Frame {
        function: (symbol != "[unknown]" && !symbol.is_empty()).then(|| symbol.to_string()),
        object: object_name(dso),
    };
    Some((frame, address, dso))
}

/// The chunks of samples perf lost, from its warning on reading a recording ("Processed N
/// events and lost M chunks!"); 0 without the warning.
pub fn lost_chunks(perf_stderr: &str) -> u64 {
    perf_stderr
        .lines()
        .filter_map(|l| {
            let (_, after) = l.split_once(" and lost ")?;
            after.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

impl Profile {
    /// CPU time of every sample.
    pub fn total_ns(&self) -> u64 {
        self.stacks.iter().map(|s| s.weight_ns).sum()
    }

    /// Seconds from the first sample to the last.
    pub fn sampled_s(&self) -> f64 {
        self.span.map_or(0.0, |(first, last)| last - first)
    }

    /// Folded stacks (Brendan Gregg's format, as flame graph tools read it): `root;...;leaf`
    /// with the CPU time of all samples of that stack, in nanoseconds.
    pub fn folded(&self) -> BTreeMap<String, u64> {
        let mut folded = BTreeMap::new();
        for s in &self.stacks {
            let key = s
                .frames
                .iter()
                .rev()
                .map(|f| f.label().replace(';', ":"))
                .collect::<Vec<_>>()
                .join(";");
            *folded.entry(key).or_insert(0) += s.weight_ns;
        }
        folded
    }

    /// CPU time of the samples with a frame that `matches` anywhere on their stack (each sample
    /// once): the inclusive cost of a family of functions (locks, say).
    pub fn ns_with(&self, matches: impl Fn(&Frame) -> bool) -> u64 {
        self.stacks
            .iter()
            .filter(|s| s.frames.iter().any(&matches))
            .map(|s| s.weight_ns)
            .sum()
    }

    /// Every function's self and total time, costliest (by total) first.
    pub fn functions(&self) -> Vec<FunctionCost> {
        let mut costs: BTreeMap<&Frame, (u64, u64)> = BTreeMap::new();
        for s in &self.stacks {
            if let Some(leaf) = s.frames.first() {
                costs.entry(leaf).or_default().0 += s.weight_ns;
            }
            let mut seen = HashSet::new();
            for f in &s.frames {
                if seen.insert(f) {
                    costs.entry(f).or_default().1 += s.weight_ns;
                }
            }
        }
        let mut list: Vec<FunctionCost> = costs
            .into_iter()
            .map(|(frame, (self_ns, total_ns))| FunctionCost {
                frame: frame.clone(),
                self_ns,
                total_ns,
            })
            .collect();
        list.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.frame.cmp(&b.frame)));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_counts_each_sample_once_wherever_it_is_on_the_stack() {
        let frame = |f: &str| Frame {
            function: Some(f.into()),
            object: "libc".into(),
        };
        let stack = |frames: &[&str], ns| Stack {
            pid: 1,
            tid: 1,
            frames: frames.iter().map(|f| frame(f)).collect(),
            sites: Vec::new(),
            weight_ns: ns,
        };
        let p = Profile {
            stacks: vec![
                stack(&["lock_a", "lock_b", "main"], 10),
                stack(&["work", "lock_a", "main"], 20),
                stack(&["work", "main"], 40),
            ],
            ..Profile::default()
        };
        let locks = |f: &Frame| {
            f.function
                .as_deref()
                .is_some_and(|n| n.starts_with("lock_"))
        };
        assert_eq!(p.ns_with(locks), 30);
        assert_eq!(p.ns_with(|_| false), 0);
    }

    const SCRIPT: &str = "\
13927/13929 59922.320221:    1001001 
\t          2a387e [unknown] (/usr/lib/x86_64-linux-gnu/libcrypto.so.3)
\t          2a55bf SHA512_Update (/usr/lib/x86_64-linux-gnu/libcrypto.so.3)
\t          3ed40b ossl::ssl::Ssl::do_handshake (/work/main/target/release/tlsscope)
\t          48ec3e <std::sys::thread::unix::Thread>::new::thread_start (/work/main/target/release/tlsscope)

13927/13929 59924.320221:    2002002 
\tffffffff82200809 _raw_spin_unlock_irqrestore ([kernel.kallsyms])
\t          2a55bf SHA512_Update (/opt/ssl/1.1.1w/lib/libcrypto.so.1.1)
\t          2a55bf SHA512_Update (/opt/ssl/1.1.1w/lib/libcrypto.so.1.1)
\t          3ed40b ossl::ssl::Ssl::do_handshake (/work/main/target/release/tlsscope)

garbage here
";

    #[test]
    fn samples_are_read_leaf_first_with_their_period_and_unknown_frames_kept() {
        let (p, skipped) = parse_perf_script(SCRIPT);
        assert_eq!(skipped, 1, "the garbage line");
        assert_eq!(p.stacks.len(), 2);
        let s = &p.stacks[0];
        assert_eq!((s.pid, s.tid, s.weight_ns), (13927, 13929, 1_001_001));
        assert_eq!(s.frames.len(), 4);
        assert_eq!(s.frames[0].function, None);
        assert_eq!(s.frames[0].object, "libcrypto");
        assert_eq!(
            s.frames[3].function.as_deref(),
            Some("<std::sys::thread::unix::Thread>::new::thread_start")
        );
        assert_eq!(s.frames[3].object, "tlsscope");
        assert_eq!(p.stacks[1].frames[0].object, "kernel");
        assert_eq!(p.total_ns(), 3_003_003);
        assert!((p.sampled_s() - 2.0).abs() < 1e-6, "{}", p.sampled_s());
    }

    #[test]
    fn library_versions_fold_together_and_recursion_counts_once() {
        let (p, _) = parse_perf_script(SCRIPT);
        let f = p.functions();
        let sha = f
            .iter()
            .find(|c| c.frame.function.as_deref() == Some("SHA512_Update"))
            .unwrap();
        // libcrypto.so.3 and libcrypto.so.1.1 are one object; the second sample has the
        // function twice on its stack and counts once.
        assert_eq!(sha.frame.object, "libcrypto");
        assert_eq!(sha.total_ns, 3_003_003);
        assert_eq!(sha.self_ns, 0);
        let top = &f[0];
        assert_eq!(top.total_ns, 3_003_003);
        let folded = p.folded();
        assert_eq!(
            folded[
                "<std::sys::thread::unix::Thread>::new::thread_start (tlsscope);ossl::ssl::Ssl::do_handshake (tlsscope);SHA512_Update (libcrypto);[unknown] (libcrypto)"
            ],
            1_001_001
        );
    }

    #[test]
    fn object_names_lose_directory_and_version() {
        for (dso, name) in [
            ("/usr/lib/x86_64-linux-gnu/libssl.so.3", "libssl"),
            ("/x/libcrypto.so.1.1", "libcrypto"),
            ("/x/libfoo.so", "libfoo"),
            ("/usr/sbin/nginx", "nginx"),
            ("/x/my.solver", "my.solver"),
            ("[kernel.kallsyms]", "kernel"),
            ("[vdso]", "vdso"),
            ("[unknown]", "unknown"),
        ] {
            assert_eq!(object_name(dso), name, "{dso}");
        }
    }

    #[test]
    fn a_header_padded_with_spaces_is_a_header() {
        let (p, skipped) = parse_perf_script(
            "  1336/1341  60251.479516:    1001001 \n\t          129876 [unknown] (/x/libcrypto.so.3)\n\n  1336/1341  60251.480520:    1001001 \n\t 1 f (/x/a.so)\n",
        );
        assert_eq!(skipped, 0);
        assert_eq!(p.stacks.len(), 2);
        assert_eq!((p.stacks[0].pid, p.stacks[0].tid), (1336, 1341));
        assert_eq!(p.stacks[1].frames[0].function.as_deref(), Some("f"));
    }

    #[test]
    fn lost_chunks_are_read_from_perfs_warning() {
        assert_eq!(
            lost_chunks(
                "Warning:\nProcessed 1024 events and lost 3 chunks!\n\nCheck IO/CPU overload!\n"
            ),
            3
        );
        assert_eq!(lost_chunks("nothing lost\n"), 0);
    }
}
