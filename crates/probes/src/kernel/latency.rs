//! The latency tracer: loads `bpf/latency.bpf.c`, attaches a uprobe + uretprobe pair per planned
//! function, and reads the kernel's per-CPU histograms. Dropping the [`Tracer`] detaches
//! everything (the links own the perf events; the kernel also detaches them if the process dies).

use std::time::{Duration, Instant};

use libbpf_rs::{Link, MapCore, MapFlags};

use super::loader::{self, Sites, Uprobes};
use super::skel::latency::types::{
    ts_counter, ts_hist_key, ts_hist_value, ts_linear, ts_outcome, ts_pending,
};
use super::skel::latency::{LatencySkel, LatencySkelBuilder};
use super::syscalls::{self, Edge, SyscallHooks};
use crate::catalog::{Function, Semantics};
use crate::histogram::{Buckets, Calibration, Cell, Outcome, Snapshot};
use crate::plan::{AttachPoint, Attached, Missing, Placement, Plan, Threads};
use crate::symbols::SymbolTable;
use crate::Error;

pub use super::loader::check_can_trace;

/// The program's name in errors.
const PROGRAM: &str = "latency";

// The histogram's bucket count is the program's, checked when this crate is built.
const _: () = assert!(Buckets::MAX_LINEAR == ts_linear::TS_MAX_LINEAR_BUCKETS.0 as u64);

/// Each outcome with its number in `enum ts_outcome` (`bpf/latency.h`). Not the enum's
/// discriminants: those would order outcomes by the program's numbers, not as reports list them.
const OUTCOMES: [(ts_outcome, Outcome); 6] = [
    (ts_outcome::TS_SUCCESS, Outcome::Success),
    (ts_outcome::TS_RETRY, Outcome::Retry),
    (ts_outcome::TS_RETRY_ASYNC, Outcome::RetryAsync),
    (ts_outcome::TS_CLOSED, Outcome::Closed),
    (ts_outcome::TS_FAILURE, Outcome::Failure),
    (ts_outcome::TS_UNKNOWN, Outcome::Unknown),
];

/// The outcome the program numbered `raw`.
fn outcome_of(raw: u8) -> Option<Outcome> {
    OUTCOMES
        .iter()
        .find(|(number, _)| number.0 == u32::from(raw))
        .map(|&(_, outcome)| outcome)
}

/// What to trace and how to aggregate.
#[derive(Clone, Debug)]
pub struct TraceConfig {
    pub threads: Threads,
    pub buckets: Buckets,
    /// Keep one histogram per process.
    pub per_pid: bool,
    /// Attach every probe for all processes and filter by PID in BPF, instead of attaching
    /// in each traced process. The traced process pays less per call (no per-task perf
    /// events to switch on every context switch); every other process running the library
    /// pays the breakpoint.
    pub attach_all: bool,
}

/// A probe that could not be attached (or whose function was not found), with the reason.
pub type NotAttached = Missing;

/// The function calibration probes where the probes are single-stepped. It only has to be a
/// real call that is not inlined, starting with an instruction the kernel does not emulate
/// (here a `mov`), as `SSL_read`'s `sub rsp` is not.
#[no_mangle]
#[inline(never)]
pub extern "C" fn tlsscope_calibration_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(2_654_435_761).rotate_left(7))
}

// The function calibration probes where the probes sit on emulated instructions: it starts
// with `push rbx`, which the kernel emulates (see `placement`), as a probed callee does.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".globl tlsscope_calibration_emulated",
    ".type tlsscope_calibration_emulated, @function",
    "tlsscope_calibration_emulated:",
    "push rbx",
    "lea rax, [rdi + 7]",
    "pop rbx",
    "ret",
    ".size tlsscope_calibration_emulated, . - tlsscope_calibration_emulated",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn tlsscope_calibration_emulated(x: u64) -> u64;
}

/// A calibration target, by whether its first instruction is emulated.
fn calibration_target(emulated: bool) -> (&'static str, unsafe extern "C" fn(u64) -> u64) {
    #[cfg(target_arch = "x86_64")]
    if emulated {
        return (
            "tlsscope_calibration_emulated",
            tlsscope_calibration_emulated,
        );
    }
    let _ = emulated;
    (
        "tlsscope_calibration_target",
        tlsscope_calibration_target as unsafe extern "C" fn(u64) -> u64,
    )
}

/// The catalog id used for calibration cells (never a catalog function).
const CALIBRATION_ID: u16 = u16::MAX;

/// What the program is told of the calibration function: a plain call, > 0 success.
const CALIBRATION: Function = Function {
    name: "tlsscope_calibration_target",
    symbols: &[],
    library: crate::maps::LibraryKind::OpensslCrypto,
    group: crate::catalog::Group::Crypto,
    semantics: Semantics::Positive,
    internal: false,
    sniffed: None,
    length_arg: None,
};

/// A running latency trace. Detaches on drop.
pub struct Tracer {
    // Declared first: links drop (detach) before the skeleton's programs are unloaded.
    links: Vec<Link>,
    /// The probes attached since the start in children the process targets forked.
    late_links: std::sync::Mutex<Vec<Link>>,
    skel: LatencySkel<'static>,
    /// What to attach again in a child a process target forks later.
    follow: Follow,
    attach_all: bool,
    attached: Vec<Attached>,
    not_attached: Vec<NotAttached>,
    /// The syscall exits that settle OpenSSL's <= 0 returns; None where none is needed.
    syscall_hooks: Option<SyscallHooks>,
    calibration: Option<Calibration>,
}

impl Tracer {
    /// Loads the programs and attaches every planned probe. Probes that fail to attach are
    /// listed in [`Tracer::not_attached`]; it is an error only when none attaches.
    pub fn start(config: &TraceConfig, plan: &Plan) -> Result<Tracer, Error> {
        let mut open = loader::open(LatencySkelBuilder::default(), PROGRAM)?;
        let rodata = loader::rodata(open.maps.rodata_data.as_deref_mut(), PROGRAM)?;
        let cfg = &mut rodata.cfg;
        loader::set_filter(
            &mut cfg.filter,
            &config.threads,
            &plan.points,
            config.attach_all,
        );
        cfg.per_pid = u8::from(config.per_pid);
        cfg.exact = u8::from(plan.exact());
        if let Buckets::Linear {
            min_us, step_us, ..
        } = config.buckets
        {
            cfg.linear = 1;
            cfg.lin_min_us = min_us;
            cfg.lin_step_us = step_us;
            cfg.lin_buckets = u32::try_from(config.buckets.linear_count()).unwrap_or(u32::MAX);
        }
        // Go's functions are probed at their entry and returns by programs of their own.
        let (go_points, native) = plan.go_and_native();
        let points = Sites::fitted(&native);
        let sites = Sites::of(&points);
        sites.write(&mut cfg.sites);
        // Go's programs are loaded only for a Go program (and the others only beside them).
        open.progs.go_enter.set_autoload(!go_points.is_empty());
        open.progs.go_exit.set_autoload(!go_points.is_empty());
        open.progs
            .go_deferred_exit
            .set_autoload(!go_points.is_empty());
        let skel = loader::load(open, PROGRAM)?;
        loader::allow_pids(&skel.maps.pids, &config.threads.pids)?;
        let at = |p: &AttachPoint| {
            let cookie = loader::cookie_at_site(p.id, p.function, sites.index_of(p));
            (p.probe_offset(), cookie)
        };
        let attachment = loader::attach_with_go(
            &uprobes(&skel),
            &points,
            &loader::GoPrograms {
                enter: &skel.progs.go_enter,
                exit: &skel.progs.go_exit,
                deferred: Some((&skel.progs.go_deferred_exit, &skel.maps.go_deferred)),
            },
            &go_points,
            config.attach_all,
            &at,
        )?;
        let mut not_attached = plan.missing.clone();
        not_attached.extend(attachment.refused);
        let follow = Follow::of(plan, &points, &at, config.attach_all);
        let mut tracer = Tracer {
            links: attachment.links,
            late_links: std::sync::Mutex::new(Vec::new()),
            follow,
            skel,
            attach_all: config.attach_all,
            attached: attachment
                .attached
                .into_iter()
                .map(|point| Attached { point })
                .collect(),
            not_attached,
            syscall_hooks: None,
            calibration: None,
        };
        let syscall_settled = !plan.exact()
            && tracer.attached.iter().any(|a| {
                matches!(
                    a.point.function.semantics,
                    Semantics::OpensslIo | Semantics::OpensslShutdown
                )
            });
        if syscall_settled {
            tracer.attach_syscall_exits();
        }
        Ok(tracer)
    }

    /// Attaches the process targets' probes in the children they forked since the start
    /// (a respawned or reloaded server's new workers); returns (parent, child) per child
    /// newly probed.
    pub fn follow_children(&self) -> Vec<(u32, u32)> {
        let mut known = self.follow.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut followed = Vec::new();
        for &root in &self.follow.roots {
            for (child, points) in crate::plan::in_children(&self.follow.points, root, &known) {
                known.push(child);
                let at = |p: &AttachPoint| self.follow.probe_of(p);
                // A child that exits meanwhile refuses every probe: nothing to follow.
                if let Ok(attachment) =
                    loader::attach_points(&uprobes(&self.skel), &points, false, &at)
                {
                    self.late_links
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(attachment.links);
                    followed.push((root, child));
                }
            }
        }
        followed
    }

    /// The read/write-family syscall exits that settle OpenSSL calls returning <= 0 (see
    /// `sys_exit_io` in `bpf/latency.bpf.c`). Without them such calls are classed unknown.
    fn attach_syscall_exits(&mut self) {
        let (links, hooks) = syscalls::attach(&self.skel.progs.sys_exit_io, Edge::Exit);
        self.links.extend(links);
        self.syscall_hooks = Some(hooks);
    }

    /// The syscall hooks that settle OpenSSL's <= 0 returns: attached, missing (and why), or
    /// None when nothing traced needs them (`--exact-outcomes`, or no OpenSSL I/O function).
    pub fn syscall_hooks(&self) -> Option<&SyscallHooks> {
        self.syscall_hooks.as_ref()
    }

    pub fn attached(&self) -> &[Attached] {
        &self.attached
    }

    pub fn not_attached(&self) -> &[NotAttached] {
        &self.not_attached
    }

    pub fn calibration(&self) -> Option<Calibration> {
        self.calibration
    }

    /// Measures what a probed call costs: `calls` calls of a function in this program without
    /// and then with an entry and return probe on it (the same BPF programs). Its cells are
    /// kept out of every snapshot.
    pub fn calibrate(&mut self, calls: u64) -> Result<Calibration, Error> {
        let exe = std::fs::read_link("/proc/self/exe").map_err(|source| Error::Read {
            path: "/proc/self/exe".into(),
            source,
        })?;
        let table = SymbolTable::read(&exe)?;
        // Placed as most of the probes are: emulated costs a fraction of single-stepped.
        let emulated = self
            .attached
            .iter()
            .filter(|a| a.point.placement.emulated())
            .count();
        let (name, target) = calibration_target(emulated * 2 > self.attached.len());
        let offset = table.uprobe_offset(name)?;
        // Go's placement (entry and return instructions) where most of the probes are Go's.
        let go = self
            .attached
            .iter()
            .filter(|a| matches!(a.point.placement, Placement::GoExits { .. }))
            .count();
        let go_placement = (go * 2 > self.attached.len())
            .then(|| go_calibration_point(&exe, &table, name, offset))
            .transpose()?;
        let plain = time_calls(calls, target);
        let me = std::process::id();
        loader::allow_pid(&self.skel.maps.pids, me)?;
        let cookie = loader::cookie_of(CALIBRATION_ID, &CALIBRATION);
        // Attached the way the real probes are, so the cost measured is theirs.
        let pid = if self.attach_all {
            -1
        } else {
            i32::try_from(me).unwrap_or(-1)
        };
        let attached: Result<Vec<Link>, String> = match &go_placement {
            Some(point) => {
                let point = AttachPoint {
                    pid,
                    ..point.clone()
                };
                let a = loader::attach_go_points(
                    &loader::GoPrograms {
                        enter: &self.skel.progs.go_enter,
                        exit: &self.skel.progs.go_exit,
                        deferred: None,
                    },
                    std::slice::from_ref(&point),
                    false,
                    &|_| cookie,
                );
                match a.refused.first() {
                    Some(m) => Err(m.reason.to_string()),
                    None => Ok(a.links),
                }
            }
            None => uprobes(&self.skel)
                .attach(pid, &exe, offset, cookie)
                .map(Vec::from),
        };
        let probed = attached.map(|links| {
            let t = time_calls(calls, target);
            drop(links);
            t
        });
        // Stays in the filter only when the user asked for this process.
        if !self.traces_pid(me) {
            loader::forbid_pid(&self.skel.maps.pids, me);
        }
        let probed = probed.map_err(|detail| Error::Bpf {
            what: "calibrating the probe cost".into(),
            detail,
        })?;
        let per_call = |d: Duration| d.as_nanos() as f64 / calls.max(1) as f64;
        let calibration = Calibration {
            calls,
            plain_ns_per_call: per_call(plain),
            probed_ns_per_call: per_call(probed),
        };
        self.calibration = Some(calibration);
        Ok(calibration)
    }

    fn traces_pid(&self, pid: u32) -> bool {
        self.attached
            .iter()
            .any(|a| a.point.pid == i32::try_from(pid).unwrap_or(-1))
    }

    /// Everything counted so far (cumulative), calibration excluded.
    pub fn snapshot(&self) -> Result<Snapshot, Error> {
        let mut snap = Snapshot::default();
        let hist = &self.skel.maps.hist;
        for key in hist.keys() {
            let Some(values) = hist
                .lookup_percpu(&key, MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the latency histograms", e))?
            else {
                continue;
            };
            let k: ts_hist_key = super::read_pod(&key);
            if k.func == CALIBRATION_ID {
                continue;
            }
            let Some(outcome) = outcome_of(k.outcome) else {
                continue;
            };
            let (mut count, mut total_ns) = (0u64, 0u64);
            for v in &values {
                let v: ts_hist_value = super::read_pod(v);
                count += v.count;
                total_ns += v.total_ns;
            }
            snap.add(Cell {
                pid: k.pid,
                function: k.func,
                outcome,
                bucket: k.bucket,
                count,
                total_ns,
            });
        }
        let sum = |index: ts_counter| {
            loader::counter(
                &self.skel.maps.counters,
                index.0,
                "reading the probe counters",
            )
        };
        snap.calls = sum(ts_counter::TS_CALLS)?;
        snap.dropped_cells = sum(ts_counter::TS_DROPPED_CELLS)?;
        if let Some(c) = self.calibration {
            // The calibration's own entry probe runs (the probed half).
            snap.calls = snap.calls.saturating_sub(c.calls);
        }
        Ok(snap)
    }

    /// The final snapshot: [`Tracer::snapshot`] plus the calls still waiting for an
    /// `SSL_get_error` that will not come, counted as unknown.
    pub fn final_snapshot(&self) -> Result<Snapshot, Error> {
        let mut snap = self.snapshot()?;
        let pending = &self.skel.maps.pending;
        for key in pending.keys() {
            if let Ok(Some(value)) = pending.lookup(&key, MapFlags::ANY) {
                let p: ts_pending = super::read_pod(&value);
                snap.add(Cell {
                    pid: p.pid,
                    function: p.func,
                    outcome: Outcome::Unknown,
                    bucket: p.bucket,
                    count: 1,
                    total_ns: p.latency_ns,
                });
            }
        }
        Ok(snap)
    }
}

/// The names of the BPF programs tlsscope loads (see `bpf/latency.bpf.c`).
pub const PROGRAM_NAMES: [&str; 5] = [
    "tls_enter",
    "tls_return",
    "sys_exit_io",
    "go_enter",
    "go_exit",
];

/// The BPF programs loaded in the kernel right now that bear one of tlsscope's program names,
/// as (id, name). Empty when every tracer has detached and unloaded.
pub fn loaded_programs() -> Vec<(u32, String)> {
    libbpf_rs::query::ProgInfoIter::default()
        .filter_map(|info| {
            let name = info.name.to_string_lossy().into_owned();
            PROGRAM_NAMES
                .contains(&name.as_str())
                .then_some((info.id, name))
        })
        .collect()
}

/// The latency program's entry and return uprobes.
/// The process targets of a trace, with their probes as attached (offset and cookie), to
/// attach the same in children they fork later; and every process probed so far.
struct Follow {
    roots: Vec<u32>,
    points: Vec<AttachPoint>,
    probes: Vec<(AttachPoint, (u64, u64))>,
    known: std::sync::Mutex<Vec<u32>>,
}

impl Follow {
    fn of(
        plan: &Plan,
        points: &[AttachPoint],
        at: &dyn Fn(&AttachPoint) -> (u64, u64),
        attach_all: bool,
    ) -> Follow {
        let children: Vec<u32> = plan.children.iter().map(|&(_, c)| c).collect();
        let mut roots: Vec<u32> = Vec::new();
        for p in points {
            let Ok(pid) = u32::try_from(p.pid) else {
                continue;
            };
            if !attach_all && !children.contains(&pid) && !roots.contains(&pid) {
                roots.push(pid);
            }
        }
        let points: Vec<AttachPoint> = points
            .iter()
            .filter(|p| u32::try_from(p.pid).is_ok_and(|pid| roots.contains(&pid)))
            .cloned()
            .collect();
        let probes = points.iter().map(|p| (p.clone(), at(p))).collect();
        let mut known = roots.clone();
        known.extend(children);
        Follow {
            roots,
            points,
            probes,
            known: std::sync::Mutex::new(known),
        }
    }

    /// The offset and cookie of a root's point, for the same point in a child.
    fn probe_of(&self, point: &AttachPoint) -> (u64, u64) {
        self.probes
            .iter()
            .find(|(p, _)| {
                AttachPoint {
                    pid: point.pid,
                    ..p.clone()
                } == *point
            })
            .map_or((point.probe_offset(), 0), |&(_, probe)| probe)
    }
}

fn uprobes<'a>(skel: &'a LatencySkel<'static>) -> Uprobes<'a, 'static> {
    Uprobes {
        entry: &skel.progs.tls_enter,
        ret: &skel.progs.tls_return,
    }
}

/// The calibration target probed as Go's functions are: at its entry and its return
/// instructions (found by decoding it, as for Go's).
fn go_calibration_point(
    exe: &std::path::Path,
    table: &SymbolTable,
    name: &str,
    offset: u64,
) -> Result<AttachPoint, Error> {
    let symbol = table.function(name).ok_or_else(|| Error::NoSymbol {
        symbol: name.into(),
        path: exe.to_path_buf(),
        stripped: false,
    })?;
    let data = std::fs::read(exe).map_err(|source| Error::Read {
        path: exe.to_path_buf(),
        source,
    })?;
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    let end = start.saturating_add(usize::try_from(symbol.size).unwrap_or(0));
    let code = data.get(start..end).unwrap_or_default();
    let returns = crate::exits::exits(code, symbol.address)
        .returns
        .iter()
        .map(|r| offset + (r - symbol.address))
        .collect();
    Ok(AttachPoint {
        id: CALIBRATION_ID,
        function: &CALIBRATION,
        symbol: "tlsscope_calibration_target",
        path: exe.to_path_buf(),
        offset,
        pid: -1,
        placement: Placement::GoExits {
            returns,
            entry_delta: 0,
            deferred: Vec::new(),
        },
    })
}

fn time_calls(calls: u64, target: unsafe extern "C" fn(u64) -> u64) -> Duration {
    let start = Instant::now();
    let mut acc = 0u64;
    for i in 0..calls {
        // SAFETY: both targets take and return a u64 and touch nothing else.
        acc = acc.wrapping_add(unsafe { target(std::hint::black_box(i)) });
    }
    std::hint::black_box(acc);
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_in_process_region_numbers_outcomes_as_the_program_does() {
        for (number, theirs) in [
            (inproc_abi::SUCCESS, ts_outcome::TS_SUCCESS),
            (inproc_abi::RETRY, ts_outcome::TS_RETRY),
            (inproc_abi::FAILURE, ts_outcome::TS_FAILURE),
            (inproc_abi::UNKNOWN, ts_outcome::TS_UNKNOWN),
            (inproc_abi::CLOSED, ts_outcome::TS_CLOSED),
            (inproc_abi::RETRY_ASYNC, ts_outcome::TS_RETRY_ASYNC),
        ] {
            assert_eq!(u32::from(number), theirs.0);
        }
    }

    #[test]
    fn outcomes_are_numbered_as_the_program_numbers_them() {
        let all = [
            Outcome::Success,
            Outcome::Retry,
            Outcome::Closed,
            Outcome::Failure,
            Outcome::Unknown,
        ];
        for outcome in all {
            let numbers: Vec<u32> = OUTCOMES
                .iter()
                .filter(|(_, o)| *o == outcome)
                .map(|(n, _)| n.0)
                .collect();
            assert_eq!(numbers.len(), 1, "{outcome:?}");
            // The histogram key holds the number in a byte.
            let raw = u8::try_from(numbers[0]).expect("fits the key's byte");
            assert_eq!(outcome_of(raw), Some(outcome));
        }
        assert_eq!(outcome_of(u8::MAX), None);
    }
}
