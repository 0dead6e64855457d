//! What the latency tracer and the sniffer share in loading their BPF programs: opening and
//! loading a skeleton, the thread filter in each program's configuration and its PID filter map,
//! the attach cookie and the callee placements' table, attaching a uprobe + uretprobe pair at
//! each attach point, the error when the kernel refuses every probe, and reading per-CPU
//! counters. Each tracer keeps only its own skeleton, maps and read-out.

use std::mem::MaybeUninit;
use std::path::Path;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, OpenObject, ProgramMut, UprobeMultiOpts};

use super::skel::latency::types::{
    ts_cookie, ts_cookie_field, ts_go_deferred_limits, ts_result_rule, ts_semantics, ts_sites,
};
use super::skel::sniff::types::{sn_count, sn_kind};
use super::skel::{latency, sniff};
use crate::catalog::{Count, Direction, Function, Semantics};
use crate::plan::{AttachPoint, CalleeSite, Missing, Placement, ResultRule, Threads};
use crate::Error;

/// Root, BPF and uprobes: say which is missing before libbpf says it less clearly.
pub fn check_can_trace() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::NotRoot);
    }
    if !Path::new("/sys/bus/event_source/devices/uprobe").exists() {
        return Err(Error::NoUprobes);
    }
    Ok(())
}

/// Opens the BPF object of program `name` (as errors call it) after checking that it can run,
/// with libbpf's log routed through [`super::log`] and its old warnings forgotten.
pub(crate) fn open<B: SkelBuilder<'static>>(builder: B, name: &str) -> Result<B::Output, Error> {
    check_can_trace()?;
    super::log::install();
    super::log::forget_warnings();
    // The skeleton borrows its object storage for as long as it lives; a tracer lives about as
    // long as the program, so the few bytes of storage are leaked.
    let storage: &'static mut MaybeUninit<OpenObject> = Box::leak(Box::new(MaybeUninit::uninit()));
    builder
        .open(storage)
        .map_err(|e| Error::bpf(&format!("opening the {name} BPF object"), e))
}

/// The program's read-only data (its `cfg`), to fill in between open and load.
pub(crate) fn rodata<'a, T>(rodata: Option<&'a mut T>, name: &str) -> Result<&'a mut T, Error> {
    rodata.ok_or_else(|| Error::Bpf {
        what: format!("setting the {name} program's configuration"),
        detail: "the object has no read-only data section".into(),
    })
}

/// Loads the opened program `name` into the kernel.
pub(crate) fn load<O: OpenSkel<'static>>(open: O, name: &str) -> Result<O::Output, Error> {
    open.load().map_err(|e| {
        Error::bpf(
            &format!("loading the {name} BPF programs into the kernel"),
            e,
        )
    })
}

/// `struct ts_filter` (`bpf/common.h`), of which each skeleton declares a type of its own.
pub(crate) trait ThreadFilter {
    /// `by_pid`, `by_comm` and `comm`.
    fn fields(&mut self) -> (&mut u8, &mut u8, &mut [i8; 16]);
}

macro_rules! thread_filter {
    ($($filter:ty),+) => {$(
        impl ThreadFilter for $filter {
            fn fields(&mut self) -> (&mut u8, &mut u8, &mut [i8; 16]) {
                (&mut self.by_pid, &mut self.by_comm, &mut self.comm)
            }
        }
    )+};
}

thread_filter!(latency::types::ts_filter, sniff::types::ts_filter);

/// Sets which threads the program looks at, for probes attached at `points` (in every process
/// when `attach_all`).
pub(crate) fn set_filter(
    filter: &mut impl ThreadFilter,
    threads: &Threads,
    points: &[AttachPoint],
    attach_all: bool,
) {
    let (by_pid, by_comm, comm_field) = filter.fields();
    // Probes attached in one process are filtered by the kernel already; the map lookup is only
    // needed for probes attached in every process (--lib, --binary, --attach-all) with -p.
    let anywhere = attach_all || points.iter().any(|p| p.pid == -1);
    *by_pid = u8::from(!threads.pids.is_empty() && anywhere);
    if let Some(comm) = &threads.comm {
        *by_comm = 1;
        *comm_field = c_name(comm);
    }
}

/// A name as the BPF programs compare it (a thread's comm, a file name): at most N - 1 bytes,
/// NUL-padded.
pub(crate) fn c_name<const N: usize>(name: &str) -> [i8; N] {
    let mut out = [0i8; N];
    for (dst, src) in out.iter_mut().zip(name.bytes().take(N.saturating_sub(1))) {
        *dst = src as i8;
    }
    out
}

/// Adds the processes to a program's PID filter map (`pids` in `bpf/common.bpf.h`).
pub(crate) fn allow_pids(map: &dyn MapCore, pids: &[u32]) -> Result<(), Error> {
    pids.iter().try_for_each(|&pid| allow_pid(map, pid))
}

/// Adds one process to a program's PID filter map.
pub(crate) fn allow_pid(map: &dyn MapCore, pid: u32) -> Result<(), Error> {
    map.update(&pid.to_ne_bytes(), &[1u8], MapFlags::ANY)
        .map_err(|e| Error::bpf("adding a process to the PID filter", e))
}

/// Takes one process out of a program's PID filter map; absent is fine.
pub(crate) fn forbid_pid(map: &dyn MapCore, pid: u32) {
    let _ = map.delete(&pid.to_ne_bytes());
}

/// An attach cookie as `TS_COOKIE_FUNC` and `TS_COOKIE_FIELD` (`bpf/common.h`) read it: the
/// function's index in the catalog, then one byte per field (see [`cookie_of`]).
pub(crate) fn cookie(func: u16, fields: &[u8]) -> u64 {
    debug_assert!(fields.len() <= ts_cookie::TS_COOKIE_FIELDS.0 as usize);
    let first = ts_cookie::TS_COOKIE_FUNC_BITS.0;
    let width = ts_cookie::TS_COOKIE_FIELD_BITS.0;
    fields
        .iter()
        .zip(0u32..)
        .fold(u64::from(func), |c, (&field, i)| {
            c | u64::from(field) << (first + width * i)
        })
}

/// The attach cookie of catalog function `id`: its id, then every field of `enum
/// ts_cookie_field` (`bpf/common.h`), whichever program it is for: each reads the fields it
/// needs. No callee placement (see [`cookie_at_site`]).
pub(crate) fn cookie_of(id: u16, function: &Function) -> u64 {
    cookie_at_site(id, function, 0)
}

/// Like [`cookie_of`], for a function probed at its callee: `site` indexes the program's
/// `cfg.sites` (0: not a callee placement).
pub(crate) fn cookie_at_site(id: u16, function: &Function, site: u8) -> u64 {
    let mut fields = [0u8; COOKIE_FIELDS];
    let mut set = |field: ts_cookie_field, value: u8| fields[field.0 as usize] = value;
    set(
        ts_cookie_field::TS_FIELD_SEMANTICS,
        function.semantics as u8,
    );
    if let Some(sniffed) = function.sniffed {
        set(ts_cookie_field::TS_FIELD_KIND, sniffed.direction as u8);
        set(ts_cookie_field::TS_FIELD_COUNT, sniffed.count as u8);
    }
    set(
        ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY,
        u8::from(function.tls_layer_only()),
    );
    set(ts_cookie_field::TS_FIELD_SITE, site);
    cookie(id, &fields)
}

/// `TS_COOKIE_FIELDS` in `bpf/common.h`.
const COOKIE_FIELDS: usize = ts_cookie::TS_COOKIE_FIELDS.0 as usize;

/// Each semantics of the catalog with the number `enum ts_semantics` (`bpf/latency.h`) gives it.
const SEMANTICS: [(Semantics, ts_semantics); 10] = [
    (Semantics::OpensslIo, ts_semantics::TS_SEM_OSSL_IO),
    (
        Semantics::OpensslShutdown,
        ts_semantics::TS_SEM_OSSL_SHUTDOWN,
    ),
    (
        Semantics::OpensslGetError,
        ts_semantics::TS_SEM_OSSL_GET_ERROR,
    ),
    (Semantics::Positive, ts_semantics::TS_SEM_POSITIVE),
    (Semantics::GnuTls, ts_semantics::TS_SEM_GNUTLS),
    (Semantics::NssStatus, ts_semantics::TS_SEM_NSS_STATUS),
    (Semantics::NsprIo, ts_semantics::TS_SEM_NSPR_IO),
    (Semantics::NonNegative, ts_semantics::TS_SEM_NONNEGATIVE),
    (Semantics::GoIo, ts_semantics::TS_SEM_GO_IO),
    (Semantics::GoError, ts_semantics::TS_SEM_GO_ERROR),
];

// The catalog numbers semantics, directions and counts as the programs do (`enum sn_kind` and
// `enum sn_count` in `bpf/sniff.h` too): the cookie carries the catalog's numbers. Checked when
// the crate is built.
const _: () = {
    let mut i = 0;
    while i < SEMANTICS.len() {
        assert!(SEMANTICS[i].0 as u32 == SEMANTICS[i].1 .0);
        i += 1;
    }
    assert!(Direction::Read as u32 == sn_kind::SN_READ.0);
    assert!(Direction::Write as u32 == sn_kind::SN_WRITE.0);
    assert!(Direction::Handshake as u32 == sn_kind::SN_HANDSHAKE.0);
    assert!(Count::Return as u32 == sn_count::SN_COUNT_RET.0);
    assert!(Count::Arg4Pointer as u32 == sn_count::SN_COUNT_ARG4_PTR.0);
};

/// A program's entry and return uprobe programs, attached together.
///
/// They are multi-uprobe programs: one link holds the probes of many offsets in one file, and
/// the kernel retires them together when it closes. Closing single-uprobe links took about
/// 0.1 s each here (a grace period per probe), 4-5 s for a trace of every function.
pub(crate) struct Uprobes<'a, 'obj> {
    pub entry: &'a ProgramMut<'obj>,
    pub ret: &'a ProgramMut<'obj>,
}

/// Probes at `offsets` (with their `cookies`) of one file, in one process or all.
pub(crate) struct Batch<'a> {
    pub pid: i32,
    pub path: &'a Path,
    pub offsets: Vec<usize>,
    pub cookies: Vec<u64>,
}

impl Uprobes<'_, '_> {
    /// Attaches the entry and the return probe at `offset` in `path`, in process `pid` (-1: in
    /// all): both or, when the kernel refuses either, neither, and why.
    pub fn attach(
        &self,
        pid: i32,
        path: &Path,
        offset: u64,
        cookie: u64,
    ) -> Result<[Link; 2], String> {
        let offset = usize::try_from(offset).map_err(|e| e.to_string())?;
        self.attach_batch(&Batch {
            pid,
            path,
            offsets: vec![offset],
            cookies: vec![cookie],
        })
    }

    /// Attaches the entry and the return probes of a whole batch: all of them, or none.
    pub fn attach_batch(&self, batch: &Batch<'_>) -> Result<[Link; 2], String> {
        let entry = attach_multi(self.entry, batch, false)?;
        // Should this one fail, dropping `entry` detaches it.
        let ret = attach_multi(self.ret, batch, true)?;
        Ok([entry, ret])
    }
}

pub(crate) fn attach_multi(
    prog: &ProgramMut<'_>,
    batch: &Batch<'_>,
    retprobe: bool,
) -> Result<Link, String> {
    let opts = UprobeMultiOpts {
        offsets: batch.offsets.clone(),
        cookies: batch.cookies.clone(),
        retprobe,
        ..Default::default()
    };
    prog.attach_uprobe_multi_with_opts(batch.pid, batch.path, "", opts)
        .map_err(|e| {
            format!(
                "the kernel refused the {}: {}",
                if retprobe { "uretprobe" } else { "uprobe" },
                super::log::with_reason(&e.to_string())
            )
        })
}

/// The probes of a plan that attached, and those the kernel refused.
#[derive(Default)]
pub(crate) struct Attachment {
    /// They detach when dropped.
    pub links: Vec<Link>,
    /// The points attached, each with the process it was attached in (-1: all).
    pub attached: Vec<AttachPoint>,
    /// The points the kernel refused, with why.
    pub refused: Vec<Missing>,
}

/// Attaches `uprobes` at every point, where and with the cookie `at` says (file offset,
/// cookie), in the point's process or, with `attach_all`, in every process: one batch per
/// file and process. A batch the kernel refuses is retried point by point, so that only the
/// points it refuses are missing, each with why. An error only when it refuses them all.
pub(crate) fn attach_points(
    uprobes: &Uprobes<'_, '_>,
    points: &[AttachPoint],
    attach_all: bool,
    at: &dyn Fn(&AttachPoint) -> (u64, u64),
) -> Result<Attachment, Error> {
    let mut out = Attachment {
        links: Vec::new(),
        attached: Vec::new(),
        refused: Vec::new(),
    };
    let pid_of = |p: &AttachPoint| if attach_all { -1 } else { p.pid };
    let mut groups: Vec<(i32, &Path, Vec<&AttachPoint>)> = Vec::new();
    for point in points {
        let key = (pid_of(point), point.path.as_path());
        match groups.iter_mut().find(|g| (g.0, g.1) == key) {
            Some(g) => g.2.push(point),
            None => groups.push((key.0, key.1, vec![point])),
        }
    }
    for (pid, path, group) in groups {
        let mut batch = Batch {
            pid,
            path,
            offsets: Vec::new(),
            cookies: Vec::new(),
        };
        for point in &group {
            let (offset, cookie) = at(point);
            batch
                .offsets
                .push(usize::try_from(offset).unwrap_or(usize::MAX));
            batch.cookies.push(cookie);
        }
        let attached = |p: &AttachPoint| AttachPoint { pid, ..p.clone() };
        if let Ok(links) = uprobes.attach_batch(&batch) {
            out.links.extend(links);
            out.attached.extend(group.iter().map(|p| attached(p)));
            continue;
        }
        for (i, point) in group.iter().enumerate() {
            let one = Batch {
                pid,
                path,
                offsets: vec![batch.offsets[i]],
                cookies: vec![batch.cookies[i]],
            };
            match uprobes.attach_batch(&one) {
                Ok(links) => {
                    out.links.extend(links);
                    out.attached.push(attached(point));
                }
                Err(reason) => out.refused.push(Missing {
                    function: point.function.name,
                    path: point.path.clone(),
                    reason: crate::plan::MissingReason::Other(reason),
                }),
            }
        }
    }
    if out.attached.is_empty() {
        return Err(all_refused(&out.refused));
    }
    Ok(out)
}

/// Attaches a plan's points: the C libraries' with `uprobes` (see [`attach_points`]) and Go's
/// with `go` (entry and return programs, see [`attach_go_points`]). An error only when the
/// kernel refuses them all.
pub(crate) fn attach_with_go(
    uprobes: &Uprobes<'_, '_>,
    points: &[AttachPoint],
    go: &GoPrograms<'_, '_>,
    go_points: &[AttachPoint],
    attach_all: bool,
    at: &dyn Fn(&AttachPoint) -> (u64, u64),
) -> Result<Attachment, Error> {
    let cookie = |p: &AttachPoint| cookie_of(p.id, p.function);
    let go = attach_go_points(go, go_points, attach_all, &cookie);
    let mut out = if points.is_empty() {
        if go.attached.is_empty() {
            return Err(all_refused(&go.refused));
        }
        Attachment::default()
    } else {
        attach_points(uprobes, points, attach_all, at)?
    };
    out.links.extend(go.links);
    out.attached.extend(go.attached);
    out.refused.extend(go.refused);
    Ok(out)
}

/// The programs Go's points attach: `enter` at a function's entry, `exit` at its return
/// instructions, and, for a tracer that reads returns at deferred calls, `deferred` at those
/// closures' branches with the map that describes each.
pub(crate) struct GoPrograms<'p, 'm> {
    pub enter: &'p ProgramMut<'p>,
    pub exit: &'p ProgramMut<'p>,
    pub deferred: Option<(&'p ProgramMut<'p>, &'m dyn MapCore)>,
}

/// `struct ts_go_deferred` (`bpf/common.h`) as bytes: three i32 result offsets (-1: none),
/// the number of sites, then TS_GO_DEFER_SITES i64 site deltas.
fn go_deferred_value(exit: &crate::plan::GoDeferredExit) -> Vec<u8> {
    let sites = ts_go_deferred_limits::TS_GO_DEFER_SITES.0 as usize;
    let mut out = Vec::with_capacity(16 + 8 * sites);
    for r in exit.results {
        let offset = r.and_then(|o| i32::try_from(o).ok()).unwrap_or(-1);
        out.extend(offset.to_ne_bytes());
    }
    let n = exit.site_deltas.len().min(sites);
    out.extend(u32::try_from(n).unwrap_or(0).to_ne_bytes());
    for i in 0..sites {
        out.extend(exit.site_deltas.get(i).copied().unwrap_or(0).to_ne_bytes());
    }
    out
}

/// The cookie of a deferred exit: the function's, with `TS_FIELD_DEFERRED` set to 1 + its
/// index in the `go_deferred` map.
fn deferred_cookie(cookie: u64, index: u32) -> u64 {
    let shift = ts_cookie::TS_COOKIE_FUNC_BITS.0
        + ts_cookie::TS_COOKIE_FIELD_BITS.0 * ts_cookie_field::TS_FIELD_DEFERRED.0;
    cookie & !(0xff << shift) | u64::from(index + 1) << shift
}

/// Attaches the deferred exits of one point (see [`GoPrograms`]), entering each in the map
/// from `*next` on; none where the point has none or the tracer reads no deferred exits.
fn attach_deferred(
    go: &GoPrograms<'_, '_>,
    point: &AttachPoint,
    pid: i32,
    cookie: u64,
    next: &mut u32,
) -> Result<Vec<Link>, String> {
    let crate::plan::Placement::GoExits { deferred, .. } = &point.placement else {
        return Ok(Vec::new());
    };
    let Some((program, map)) = go.deferred else {
        return Ok(Vec::new());
    };
    let mut links = Vec::new();
    for exit in deferred {
        let index = *next;
        if index >= ts_go_deferred_limits::TS_GO_DEFERRED.0 {
            return Err("more deferred exits than the tracer holds".into());
        }
        map.update(
            &index.to_ne_bytes(),
            &go_deferred_value(exit),
            MapFlags::ANY,
        )
        .map_err(|e| format!("describing a deferred exit: {e}"))?;
        *next += 1;
        let batch = Batch {
            pid,
            path: &point.path,
            offsets: vec![usize::try_from(exit.offset).unwrap_or(usize::MAX)],
            cookies: vec![deferred_cookie(cookie, index)],
        };
        links.push(attach_multi(program, &batch, false)?);
    }
    Ok(links)
}

/// Attaches Go's points: `enter` at each function's entry, `exit` at each of its return
/// instructions and `deferred` at its deferred exits (all plain uprobes, with the function's
/// cookie), one set of links per file and process. A point whose probes the kernel refuses is
/// missing, with why.
pub(crate) fn attach_go_points(
    go: &GoPrograms<'_, '_>,
    points: &[AttachPoint],
    attach_all: bool,
    cookie: &dyn Fn(&AttachPoint) -> u64,
) -> Attachment {
    let mut out = Attachment {
        links: Vec::new(),
        attached: Vec::new(),
        refused: Vec::new(),
    };
    let (enter, exit) = (go.enter, go.exit);
    let mut next_deferred = 0;
    for point in points {
        let crate::plan::Placement::GoExits { returns, .. } = &point.placement else {
            continue;
        };
        let pid = if attach_all { -1 } else { point.pid };
        let c = cookie(point);
        let entry = Batch {
            pid,
            path: &point.path,
            offsets: vec![usize::try_from(point.probe_offset()).unwrap_or(usize::MAX)],
            cookies: vec![c],
        };
        let exits = Batch {
            pid,
            path: &point.path,
            offsets: returns
                .iter()
                .map(|&r| usize::try_from(r).unwrap_or(usize::MAX))
                .collect(),
            cookies: vec![c; returns.len()],
        };
        let attached = attach_multi(enter, &entry, false).and_then(|entry_link| {
            // Should the exits fail, dropping the entry's link detaches it.
            let mut links = vec![entry_link];
            if !returns.is_empty() {
                links.push(attach_multi(exit, &exits, false)?);
            }
            links.extend(attach_deferred(go, point, pid, c, &mut next_deferred)?);
            Ok(links)
        });
        match attached {
            Ok(links) => {
                out.links.extend(links);
                out.attached.push(AttachPoint {
                    pid,
                    ..point.clone()
                });
            }
            Err(reason) => out.refused.push(Missing {
                function: point.function.name,
                path: point.path.clone(),
                reason: crate::plan::MissingReason::Other(reason),
            }),
        }
    }
    out
}

/// The error when the kernel refused every planned probe: how many, and the first refusal (they
/// nearly always share one cause). The functions the plan could not place are not the story.
fn all_refused(refused: &[Missing]) -> Error {
    let first = refused.first().map_or_else(
        || "no probe was planned".to_string(),
        |m| format!("{}: {}", m.function, m.reason),
    );
    Error::NothingToAttach {
        reasons: format!(
            "the kernel refused every probe ({}); the first: {first}",
            refused.len()
        ),
    }
}

/// Counter `index` of a program's per-CPU `counters` map, summed over the CPUs.
pub(crate) fn counter(counters: &dyn MapCore, index: u32, what: &str) -> Result<u64, Error> {
    let values = counters
        .lookup_percpu(&index.to_ne_bytes(), MapFlags::ANY)
        .map_err(|e| Error::bpf(what, e))?
        .unwrap_or_default();
    Ok(values.iter().map(|v| super::read_pod::<u64>(v)).sum())
}

/// Whether two points are probed at the same place the same way (in any processes).
fn same_site(a: &AttachPoint, b: &AttachPoint) -> bool {
    AttachPoint {
        pid: b.pid,
        ..a.clone()
    } == *b
}

/// The callee placements of a plan, numbered from 1 as the program's `cfg.sites` holds them.
pub(crate) struct Sites<'a> {
    points: Vec<&'a AttachPoint>,
}

impl<'a> Sites<'a> {
    /// Most callee placements (`TS_MAX_SITES` in `bpf/common.h`, index 0 unused).
    const ROOM: usize = ts_sites::TS_MAX_SITES.0 as usize - 1;

    /// The points, with the callee placements past the program's room back at their entries.
    /// A place probed in several processes (a server's workers) takes one site.
    pub(crate) fn fitted(points: &[AttachPoint]) -> Vec<AttachPoint> {
        let mut kept: Vec<&AttachPoint> = Vec::new();
        let mut out = points.to_vec();
        for p in &mut out {
            if !matches!(p.placement, Placement::Callee(_)) {
                continue;
            }
            if kept.iter().any(|k| same_site(k, p)) {
                continue;
            }
            if kept.len() < Sites::ROOM {
                kept.push(
                    points
                        .iter()
                        .find(|q| same_site(q, p))
                        .expect("from points"),
                );
            } else {
                p.placement = Placement::Entry { emulated: false };
            }
        }
        out
    }

    pub(crate) fn of(points: &'a [AttachPoint]) -> Sites<'a> {
        let mut sites: Vec<&AttachPoint> = Vec::new();
        for p in points {
            if matches!(p.placement, Placement::Callee(_)) && !sites.iter().any(|s| same_site(s, p))
            {
                sites.push(p);
            }
        }
        Sites { points: sites }
    }

    /// The point's site number, or 0 when it is not a callee placement.
    pub(crate) fn index_of(&self, point: &AttachPoint) -> u8 {
        if !matches!(point.placement, Placement::Callee(_)) {
            return 0;
        }
        self.points
            .iter()
            .position(|p| same_site(p, point))
            .map_or(0, |i| u8::try_from(i + 1).unwrap_or(0))
    }

    /// Fills a program's table (`cfg.sites`).
    pub(crate) fn write<T: SiteSlot>(&self, table: &mut [T]) {
        for (slot, point) in table.iter_mut().skip(1).zip(&self.points) {
            let Placement::Callee(site) = &point.placement else {
                continue;
            };
            let mut rules = [0u8; 3];
            let mut values = [0i32; 3];
            for (class, rule) in site.results.iter().enumerate() {
                let (number, value) = match *rule {
                    ResultRule::Callee => (ts_result_rule::TS_RESULT_CALLEE, 0),
                    ResultRule::Constant(c) => (ts_result_rule::TS_RESULT_CONSTANT, c),
                    ResultRule::OutInt => (ts_result_rule::TS_RESULT_OUT_INT, 0),
                };
                rules[class] = number.0 as u8;
                values[class] = value;
            }
            // Another point probed at the same instruction: its caller is told at the entry.
            let sole = self
                .points
                .iter()
                .filter(|q| q.path == point.path && q.probe_offset() == point.probe_offset())
                .count()
                == 1;
            slot.set(&SiteFields {
                return_delta: site.return_delta,
                rule: rules,
                value: values,
                sole_site: sole,
                positive_with_len3: sign_known_from_length(point.function, site),
            });
        }
    }
}

/// Whether a callee result > 0 is enough to know that the function's result is > 0 when the
/// call asked for bytes (`ts_site.positive_with_len3`): the function returns the count its
/// callee wrote through the fourth argument (SSL_read's `readbytes`), a count above zero
/// whenever bytes were asked for, and the callee's third argument is zero exactly when the
/// function's count is.
fn sign_known_from_length(function: &Function, site: &CalleeSite) -> bool {
    site.results[0] == ResultRule::OutInt && function.length_arg == Some(2) && site.zero_alike(2)
}

/// One `struct ts_site` (`bpf/common.h`), as both programs read it.
pub(crate) struct SiteFields {
    return_delta: i64,
    rule: [u8; 3],
    value: [i32; 3],
    sole_site: bool,
    positive_with_len3: bool,
}

/// A program's `struct ts_site`, which each skeleton declares as its own type.
pub(crate) trait SiteSlot {
    fn set(&mut self, fields: &SiteFields);
}

macro_rules! site_slot {
    ($skel:ident) => {
        impl SiteSlot for $skel::types::ts_site {
            fn set(&mut self, f: &SiteFields) {
                self.return_delta = f.return_delta;
                self.rule = f.rule;
                self.value = f.value;
                self.sole_site = u8::from(f.sole_site);
                self.positive_with_len3 = u8::from(f.positive_with_len3);
            }
        }
    };
}
site_slot!(latency);
site_slot!(sniff);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    /// Read back the way `TS_COOKIE_FUNC` and `TS_COOKIE_FIELD` in `bpf/common.h` do.
    fn field(cookie: u64, i: u32) -> u64 {
        (cookie >> (ts_cookie::TS_COOKIE_FUNC_BITS.0 + ts_cookie::TS_COOKIE_FIELD_BITS.0 * i))
            & 0xff
    }

    #[test]
    fn cookie_fields_come_back_as_the_programs_read_them() {
        let c = cookie(513, &[7, 0, 255]);
        assert_eq!(c & 0xffff, 513);
        assert_eq!((field(c, 0), field(c, 1), field(c, 2)), (7, 0, 255));
        // Every field fits in the cookie's 64 bits.
        let last = ts_cookie::TS_COOKIE_FUNC_BITS.0
            + ts_cookie::TS_COOKIE_FIELD_BITS.0 * ts_cookie::TS_COOKIE_FIELDS.0;
        assert!(last <= 64, "{last}");
        // Both programs are built from the one definition in common.h.
        assert_eq!(
            sniff::types::ts_cookie::TS_COOKIE_FUNC_BITS.0,
            ts_cookie::TS_COOKIE_FUNC_BITS.0
        );
        assert_eq!(
            sniff::types::ts_cookie::TS_COOKIE_FIELD_BITS.0,
            ts_cookie::TS_COOKIE_FIELD_BITS.0
        );
    }

    #[test]
    fn a_deferred_exit_cookie_keeps_the_functions_fields_and_adds_its_index() {
        let c = cookie(42, &[3, 1, 2, 0, 5]);
        let d = deferred_cookie(c, 6);
        assert_eq!(d & 0xffff, 42);
        for i in 0..5 {
            assert_eq!(field(d, i), field(c, i));
        }
        // 1 + the index, so that 0 says "not a deferred exit".
        assert_eq!(field(d, ts_cookie_field::TS_FIELD_DEFERRED.0), 7);
        assert_eq!(deferred_cookie(d, 0) >> 56, 1);
    }

    #[test]
    fn a_deferred_exit_is_described_as_struct_ts_go_deferred_lays_it_out() {
        let exit = crate::plan::GoDeferredExit {
            offset: 0x1000,
            results: [Some(0x20), None, Some(0x38)],
            site_deltas: vec![-5, 300],
        };
        let bytes = go_deferred_value(&exit);
        assert_eq!(
            bytes.len(),
            std::mem::size_of::<latency::types::ts_go_deferred>()
        );
        let word = |at: usize, n: usize| &bytes[at..at + n];
        assert_eq!(word(0, 4), 0x20i32.to_ne_bytes());
        assert_eq!(word(4, 4), (-1i32).to_ne_bytes());
        assert_eq!(word(8, 4), 0x38i32.to_ne_bytes());
        assert_eq!(word(12, 4), 2u32.to_ne_bytes());
        assert_eq!(word(16, 8), (-5i64).to_ne_bytes());
        assert_eq!(word(24, 8), 300i64.to_ne_bytes());
    }

    #[test]
    fn read_and_write_are_classed_without_reading_their_count() {
        use crate::catalog::Selection;
        use crate::plan::{PlacementMode, Plan, Target};
        let libssl = std::path::PathBuf::from("/usr/lib/x86_64-linux-gnu/libssl.so.3");
        assert!(libssl.exists(), "Debian's libssl3 (in make deps)");
        let only = [
            "SSL_read",
            "SSL_write",
            "SSL_peek",
            "SSL_read_ex",
            "SSL_write_ex",
        ];
        let selection = Selection::Latency {
            groups: crate::catalog::Groups::all(),
            only: only.iter().map(|s| s.to_string()).collect(),
            exact: false,
        };
        let plan = Plan::new(&[Target::Library(libssl)], selection)
            .unwrap()
            .with_placement(PlacementMode::Emulated);
        let mut known = Vec::new();
        for p in &plan.points {
            let Placement::Callee(site) = &p.placement else {
                continue;
            };
            if sign_known_from_length(p.function, site) {
                known.push(p.function.name);
            }
            // Without the count's argument check, or with another count, the count is read.
            let mut other = site.clone();
            other.zero_alike[2] = false;
            assert!(!sign_known_from_length(p.function, &other));
        }
        known.sort_unstable();
        // The _ex functions return 1 and leave the count behind their fourth argument.
        assert_eq!(
            known,
            ["SSL_peek", "SSL_read", "SSL_write"],
            "{:?}",
            plan.points
        );
    }

    #[test]
    fn names_are_cut_to_fit_with_their_nul() {
        let short: [i8; 16] = c_name("curl");
        assert_eq!(
            &short[..5],
            &[b'c' as i8, b'u' as i8, b'r' as i8, b'l' as i8, 0]
        );
        let long: [i8; 16] = c_name("a-thread-name-longer-than-15");
        assert_eq!(long[14], b'l' as i8);
        assert_eq!(long[15], 0);
    }

    #[test]
    fn catalog_cookies_carry_the_function_s_id_and_fields() {
        let read_ex = catalog::id_of("SSL_read_ex").unwrap();
        let c = cookie_of(read_ex, catalog::function(read_ex).unwrap());
        let field = |f: ts_cookie_field| (c >> (16 + 8 * f.0)) & 0xff;
        assert_eq!(c & 0xffff, u64::from(read_ex));
        assert_eq!(field(ts_cookie_field::TS_FIELD_SEMANTICS), 0);
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_KIND),
            u64::from(sn_kind::SN_READ.0)
        );
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_COUNT),
            u64::from(sn_count::SN_COUNT_ARG4_PTR.0)
        );
        let pr_send = catalog::id_of("PR_Send").unwrap();
        let c = cookie_of(pr_send, catalog::function(pr_send).unwrap());
        let field = |f: ts_cookie_field| (c >> (16 + 8 * f.0)) & 0xff;
        assert_eq!(field(ts_cookie_field::TS_FIELD_SEMANTICS), 6);
        assert_eq!(
            field(ts_cookie_field::TS_FIELD_KIND),
            u64::from(sn_kind::SN_WRITE.0)
        );
        assert_eq!(field(ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY), 1);
    }

    #[test]
    fn semantics_are_numbered_as_the_program_numbers_them() {
        // The catalog numbers them with literals: they must be the program's, every one.
        for (ours, theirs) in SEMANTICS {
            assert_eq!(u32::from(ours as u8), theirs.0, "{ours:?}");
        }
        let listed: Vec<Semantics> = SEMANTICS.iter().map(|&(ours, _)| ours).collect();
        for f in crate::catalog::CATALOG {
            assert!(listed.contains(&f.semantics), "{}", f.name);
        }
    }

    #[test]
    fn kinds_and_counts_are_numbered_as_the_program_numbers_them() {
        // `as u8` would cut a number over 255 without a word.
        for (ours, theirs) in [
            (Direction::Read as u8, sn_kind::SN_READ.0),
            (Direction::Write as u8, sn_kind::SN_WRITE.0),
            (Direction::Handshake as u8, sn_kind::SN_HANDSHAKE.0),
            (Count::Return as u8, sn_count::SN_COUNT_RET.0),
            (Count::Arg4Pointer as u8, sn_count::SN_COUNT_ARG4_PTR.0),
        ] {
            assert_eq!(u32::from(ours), theirs);
        }
        for d in [Direction::Read, Direction::Write, Direction::Handshake] {
            assert_eq!(Direction::from_raw(d as u8), d);
        }
        // Both programs are built from the one cookie definition.
        use sniff::types::ts_cookie_field as sniff_field;
        for (ours, theirs) in [
            (
                ts_cookie_field::TS_FIELD_SEMANTICS,
                sniff_field::TS_FIELD_SEMANTICS,
            ),
            (ts_cookie_field::TS_FIELD_KIND, sniff_field::TS_FIELD_KIND),
            (ts_cookie_field::TS_FIELD_COUNT, sniff_field::TS_FIELD_COUNT),
            (
                ts_cookie_field::TS_FIELD_TLS_LAYER_ONLY,
                sniff_field::TS_FIELD_TLS_LAYER_ONLY,
            ),
        ] {
            assert_eq!(ours.0, theirs.0);
            assert!(ours.0 < COOKIE_FIELDS as u32);
        }
    }
}
