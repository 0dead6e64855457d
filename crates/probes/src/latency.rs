//! The latency tracer: loads `bpf/latency.bpf.c`, attaches a uprobe + uretprobe pair per planned
//! function, and reads the kernel's per-CPU histograms. Dropping the [`Tracer`] detaches
//! everything (the links own the perf events; the kernel also detaches them if the process dies).

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, UprobeOpts};

use crate::catalog::{cookie, Semantics};
use crate::plan::{AttachPoint, Missing, Plan};
use crate::symbols::SymbolTable;
use crate::syscalls::{self, Edge, SyscallHooks};
use crate::Error;

mod skel {
    #![allow(clippy::all, clippy::pedantic, non_camel_case_types, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/latency.skel.rs"));
}

use skel::types::{ts_hist_key, ts_hist_value, ts_pending};
use skel::{LatencySkel, LatencySkelBuilder};

/// Outcome classes, as `enum ts_outcome` in `bpf/latency.h` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Success,
    Retry,
    /// The peer closed the connection cleanly (OpenSSL's `SSL_ERROR_ZERO_RETURN`).
    Closed,
    Failure,
    /// Retry or failure: the return value alone cannot tell, and no `SSL_get_error` followed.
    Unknown,
}

impl Outcome {
    /// The numbering of `enum ts_outcome` in `bpf/latency.h`.
    fn from_raw(raw: u8) -> Option<Outcome> {
        Some(match raw {
            0 => Outcome::Success,
            1 => Outcome::Retry,
            2 => Outcome::Failure,
            3 => Outcome::Unknown,
            4 => Outcome::Closed,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Retry => "retry",
            Outcome::Failure => "failure",
            Outcome::Unknown => "unknown",
            Outcome::Closed => "closed",
        }
    }
}

/// How latencies are bucketed in the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buckets {
    /// Powers of two of microseconds: bucket 0 is under 1 us, bucket b is [2^(b-1), 2^b) us.
    Log2,
    /// Like bpftrace's `lhist(us, min, max, step)`: bucket 0 under `min_us`, then `step_us` wide
    /// buckets, the last one everything at or over `max_us`.
    Linear {
        min_us: u64,
        max_us: u64,
        step_us: u64,
    },
}

impl Buckets {
    /// Most in-range linear buckets (`TS_MAX_LINEAR_BUCKETS` in `bpf/latency.h`).
    pub const MAX_LINEAR: u64 = 253;

    /// The checked linear settings, or why they do not work.
    pub fn linear(min_us: u64, max_us: u64, step_us: u64) -> Result<Buckets, String> {
        if step_us == 0 || max_us <= min_us {
            return Err(format!(
                "linear buckets need MIN < MAX and STEP > 0 (got {min_us},{max_us},{step_us})"
            ));
        }
        if (max_us - min_us).div_ceil(step_us) > Buckets::MAX_LINEAR {
            return Err(format!(
                "linear buckets {min_us},{max_us},{step_us} make more than {} buckets: use a larger step",
                Buckets::MAX_LINEAR
            ));
        }
        Ok(Buckets::Linear {
            min_us,
            max_us,
            step_us,
        })
    }

    /// In-range linear buckets.
    fn linear_count(&self) -> u64 {
        match *self {
            Buckets::Log2 => 0,
            Buckets::Linear {
                min_us,
                max_us,
                step_us,
            } => (max_us - min_us).div_ceil(step_us),
        }
    }

    /// Bucket `b`'s range in microseconds, `[low, high)`; `high` is `None` for the open top.
    pub fn range_us(&self, bucket: u8) -> (u64, Option<u64>) {
        let b = u64::from(bucket);
        match *self {
            Buckets::Log2 => match b {
                0 => (0, Some(1)),
                64.. => (1 << 63, None),
                _ => (1 << (b - 1), Some(1 << b)),
            },
            Buckets::Linear {
                min_us, step_us, ..
            } => {
                let n = self.linear_count();
                if b == 0 {
                    (0, Some(min_us))
                } else if b > n {
                    (min_us + n * step_us, None)
                } else {
                    (min_us + (b - 1) * step_us, Some(min_us + b * step_us))
                }
            }
        }
    }
}

/// What to trace and how to aggregate.
#[derive(Clone, Debug)]
pub struct TraceConfig {
    /// Only these processes (empty: any process that runs the probed code).
    pub pids: Vec<u32>,
    /// Only threads with this name (at most 15 bytes, as the kernel keeps it).
    pub comm: Option<String>,
    pub buckets: Buckets,
    /// Keep one histogram per process.
    pub per_pid: bool,
    /// Attach every probe for all processes and filter by PID in BPF, instead of attaching
    /// in each traced process. The traced process pays less per call (no per-task perf
    /// events to switch on every context switch); every other process running the library
    /// pays the breakpoint.
    pub attach_all: bool,
}

/// One histogram cell read from the kernel, summed over CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    /// The process, or 0 when not per process.
    pub pid: u32,
    /// The function's catalog id.
    pub function: u16,
    pub outcome: Outcome,
    pub bucket: u8,
    pub count: u64,
    pub total_ns: u64,
}

/// Everything the kernel has counted since the tracer started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub cells: Vec<Cell>,
    /// Probed calls (entry probe runs), including those of filtered-out processes, which pay
    /// the breakpoint too.
    pub calls: u64,
    /// Cells lost because the histogram map was full.
    pub dropped_cells: u64,
}

impl Snapshot {
    /// The change from `earlier` to `self` (both cumulative).
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let mut cells = Vec::new();
        for c in &self.cells {
            let before = earlier.cells.iter().find(|e| {
                (e.pid, e.function, e.outcome, e.bucket) == (c.pid, c.function, c.outcome, c.bucket)
            });
            let (count, total_ns) = match before {
                Some(e) => (
                    c.count.saturating_sub(e.count),
                    c.total_ns.saturating_sub(e.total_ns),
                ),
                None => (c.count, c.total_ns),
            };
            if count > 0 {
                cells.push(Cell {
                    count,
                    total_ns,
                    ..*c
                });
            }
        }
        Snapshot {
            cells,
            calls: self.calls.saturating_sub(earlier.calls),
            dropped_cells: self.dropped_cells.saturating_sub(earlier.dropped_cells),
        }
    }

    fn add(&mut self, cell: Cell) {
        let key = (cell.pid, cell.function, cell.outcome, cell.bucket);
        match self
            .cells
            .iter_mut()
            .find(|c| (c.pid, c.function, c.outcome, c.bucket) == key)
        {
            Some(c) => {
                c.count += cell.count;
                c.total_ns += cell.total_ns;
            }
            None => self.cells.push(cell),
        }
    }
}

/// A probe that is attached.
#[derive(Clone, Debug)]
pub struct Attached {
    pub point: AttachPoint,
}

/// A probe that could not be attached (or whose function was not found), with the reason.
pub type NotAttached = Missing;

/// The cost of one probed call, measured at start-up on a function in this program.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Calibration {
    pub calls: u64,
    pub plain_ns_per_call: f64,
    pub probed_ns_per_call: f64,
}

impl Calibration {
    /// What the probes add to one call.
    pub fn cost_ns_per_call(&self) -> f64 {
        (self.probed_ns_per_call - self.plain_ns_per_call).max(0.0)
    }
}

/// The function calibration probes. It only has to be a real call that is not inlined.
#[no_mangle]
#[inline(never)]
pub extern "C" fn tlsscope_calibration_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(2_654_435_761).rotate_left(7))
}

/// What trace loses without its syscall hooks, and how to get it back.
pub const SYSCALL_EXITS_EFFECT: &str = "OpenSSL calls returning <= 0 cannot be split into retry and failure and are classed unknown; --exact-outcomes settles them with SSL_get_error instead";

/// The catalog id used for calibration cells (never a catalog function).
const CALIBRATION_ID: u16 = u16::MAX;

/// A running latency trace. Detaches on drop.
pub struct Tracer {
    // Declared first: links drop (detach) before the skeleton's programs are unloaded.
    links: Vec<Link>,
    skel: LatencySkel<'static>,
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
        check_can_trace()?;
        crate::log::install();
        crate::log::forget_warnings();
        // The skeleton borrows its object storage for as long as it lives; a tracer lives
        // about as long as the program, so the few bytes of storage are leaked.
        let storage: &'static mut MaybeUninit<OpenObject> =
            Box::leak(Box::new(MaybeUninit::uninit()));
        let mut open = LatencySkelBuilder::default()
            .open(storage)
            .map_err(|e| Error::bpf("opening the latency BPF object", e))?;
        let rodata = open
            .maps
            .rodata_data
            .as_deref_mut()
            .ok_or_else(|| Error::Bpf {
                what: "setting the latency program's configuration".into(),
                detail: "the object has no read-only data section".into(),
            })?;
        let cfg = &mut rodata.cfg;
        // Probes attached in one process are filtered by the kernel already; the map lookup
        // is only needed for probes attached in every process (--lib, --binary) with -p.
        cfg.filter_pids = u8::from(
            !config.pids.is_empty()
                && (config.attach_all || plan.points.iter().any(|p| p.pid == -1)),
        );
        cfg.per_pid = u8::from(config.per_pid);
        cfg.exact = u8::from(plan.exact);
        if let Some(comm) = &config.comm {
            cfg.filter_comm = 1;
            cfg.comm = crate::comm_filter(comm);
        }
        if let Buckets::Linear {
            min_us, step_us, ..
        } = config.buckets
        {
            cfg.linear = 1;
            cfg.lin_min_us = min_us;
            cfg.lin_step_us = step_us;
            cfg.lin_buckets = u32::try_from(config.buckets.linear_count()).unwrap_or(u32::MAX);
        }
        let skel = open
            .load()
            .map_err(|e| Error::bpf("loading the latency BPF programs into the kernel", e))?;
        let mut tracer = Tracer {
            links: Vec::new(),
            skel,
            attach_all: config.attach_all,
            attached: Vec::new(),
            not_attached: plan.missing.clone(),
            syscall_hooks: None,
            calibration: None,
        };
        for pid in &config.pids {
            tracer.allow_pid(*pid)?;
        }
        for point in &plan.points {
            match tracer.attach(point) {
                Ok(()) => {
                    let pid = if tracer.attach_all { -1 } else { point.pid };
                    tracer.attached.push(Attached {
                        point: AttachPoint {
                            pid,
                            ..point.clone()
                        },
                    })
                }
                Err(reason) => tracer.not_attached.push(Missing {
                    function: point.function.name,
                    path: point.path.clone(),
                    reason,
                }),
            }
        }
        if tracer.attached.is_empty() {
            return Err(crate::all_refused(
                &tracer.not_attached[plan.missing.len()..],
            ));
        }
        let syscall_settled = !plan.exact
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

    fn allow_pid(&self, pid: u32) -> Result<(), Error> {
        crate::allow_pid(&self.skel.maps.pids, pid)
    }

    fn forbid_pid(&self, pid: u32) {
        let _ = self.skel.maps.pids.delete(&pid.to_ne_bytes());
    }

    /// Attaches the entry and return probes of one function; on failure, why.
    fn attach(&mut self, point: &AttachPoint) -> Result<(), String> {
        let cookie = cookie(point.id, point.function.semantics);
        let offset = usize::try_from(point.offset).map_err(|e| e.to_string())?;
        let pid = if self.attach_all { -1 } else { point.pid };
        let entry = self.attach_one(pid, &point.path, offset, cookie, false)?;
        let ret = self.attach_one(pid, &point.path, offset, cookie, true)?;
        self.links.push(entry);
        self.links.push(ret);
        Ok(())
    }

    fn attach_one(
        &self,
        pid: i32,
        path: &std::path::Path,
        offset: usize,
        cookie: u64,
        retprobe: bool,
    ) -> Result<Link, String> {
        let prog = if retprobe {
            &self.skel.progs.tls_return
        } else {
            &self.skel.progs.tls_enter
        };
        let opts = UprobeOpts {
            cookie,
            retprobe,
            ..Default::default()
        };
        prog.attach_uprobe_with_opts(pid, path, offset, opts)
            .map_err(|e| {
                format!(
                    "the kernel refused the {}: {}",
                    if retprobe { "uretprobe" } else { "uprobe" },
                    crate::log::with_reason(&e.to_string())
                )
            })
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
        let offset = table.uprobe_offset("tlsscope_calibration_target")?;
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        let plain = time_calls(calls);
        let me = std::process::id();
        self.allow_pid(me)?;
        let cookie = cookie(CALIBRATION_ID, Semantics::Positive);
        // Attached the way the real probes are, so the cost measured is theirs.
        let pid = if self.attach_all {
            -1
        } else {
            i32::try_from(me).unwrap_or(-1)
        };
        let probed = (|| {
            let entry = self.attach_one(pid, &exe, offset, cookie, false)?;
            let ret = self.attach_one(pid, &exe, offset, cookie, true)?;
            let t = time_calls(calls);
            drop((entry, ret));
            Ok::<Duration, String>(t)
        })();
        // Stays in the filter only when the user asked for this process.
        if !self.traces_pid(me) {
            self.forbid_pid(me);
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
            let k: ts_hist_key = crate::read_pod(&key);
            if k.func == CALIBRATION_ID {
                continue;
            }
            let Some(outcome) = Outcome::from_raw(k.outcome) else {
                continue;
            };
            let (mut count, mut total_ns) = (0u64, 0u64);
            for v in &values {
                let v: ts_hist_value = crate::read_pod(v);
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
        let counters = &self.skel.maps.counters;
        let sum = |index: u32| -> Result<u64, Error> {
            let values = counters
                .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
                .map_err(|e| Error::bpf("reading the probe counters", e))?
                .unwrap_or_default();
            Ok(values.iter().map(|v| crate::read_pod::<u64>(v)).sum())
        };
        snap.calls = sum(0)?;
        snap.dropped_cells = sum(1)?;
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
                let p: ts_pending = crate::read_pod(&value);
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

/// Root, BPF and uprobes: say which is missing before libbpf says it less clearly.
pub fn check_can_trace() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NotRoot);
    }
    if !std::path::Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        return Err(Error::NoUprobes);
    }
    Ok(())
}

/// The names of the BPF programs tlsscope loads (see `bpf/latency.bpf.c`).
pub const PROGRAM_NAMES: [&str; 3] = ["tls_enter", "tls_return", "sys_exit_io"];

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

fn time_calls(calls: u64) -> Duration {
    let start = Instant::now();
    let mut acc = 0u64;
    for i in 0..calls {
        acc = acc.wrapping_add(tlsscope_calibration_target(std::hint::black_box(i)));
    }
    std::hint::black_box(acc);
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_ranges() {
        let b = Buckets::Log2;
        assert_eq!(b.range_us(0), (0, Some(1)));
        assert_eq!(b.range_us(1), (1, Some(2)));
        assert_eq!(b.range_us(4), (8, Some(16)));
    }

    #[test]
    fn linear_ranges_like_lhist() {
        let b = Buckets::linear(0, 1000, 200).unwrap();
        assert_eq!(b.range_us(0), (0, Some(0)));
        assert_eq!(b.range_us(1), (0, Some(200)));
        assert_eq!(b.range_us(5), (800, Some(1000)));
        assert_eq!(b.range_us(6), (1000, None));
        assert!(Buckets::linear(0, 1000, 0).is_err());
        assert!(Buckets::linear(0, 1_000_000, 1).is_err());
    }

    #[test]
    fn snapshot_differences() {
        let cell = |count, total_ns| Cell {
            pid: 0,
            function: 3,
            outcome: Outcome::Success,
            bucket: 4,
            count,
            total_ns,
        };
        let a = Snapshot {
            cells: vec![cell(5, 50)],
            calls: 10,
            dropped_cells: 0,
        };
        let b = Snapshot {
            cells: vec![cell(8, 90)],
            calls: 16,
            dropped_cells: 0,
        };
        let d = b.since(&a);
        assert_eq!(d.cells, vec![cell(3, 40)]);
        assert_eq!(d.calls, 6);
        assert!(b.since(&b).cells.is_empty());
    }
}
