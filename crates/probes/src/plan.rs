//! Where to attach: from the user's targets (a process, a binary, a library) and a program's
//! [`Selection`] of the catalog to a list of (file, offset, function) attach points, and the
//! functions that could not be found, each with its reason. One plan for every probe program
//! and backend. Plain file reading: no root, no BPF. A new plan has its probes at the functions'
//! entries; the kernel backend places them on emulated instructions ([`Plan::with_placement`],
//! in `kernel/placement.rs`).

use std::path::{Path, PathBuf};

use crate::catalog::{Function, Selection, CATALOG};
use crate::golang::{GoBinary, GoError};
use crate::maps::{tls_libraries, LibraryKind};
use crate::symbols::SymbolTable;
use crate::Error;

/// What to trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// The TLS libraries this process maps (or, when it maps none, its own executable).
    Pid(u32),
    /// A program with the TLS library linked in statically: its own symbol tables.
    Binary(PathBuf),
    /// A shared library, in every process that uses it. NSS's libssl brings in the NSPR beside
    /// it, where NSS's data calls are.
    Library(PathBuf),
}

/// Which threads a probe program looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Threads {
    /// Only these processes (empty: any process that runs the probed code).
    pub pids: Vec<u32>,
    /// Only threads with this name (at most 15 bytes, as the kernel keeps it).
    pub comm: Option<String>,
}

/// One uprobe + uretprobe pair to attach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachPoint {
    /// The function's id: its index in the catalog.
    pub id: u16,
    pub function: &'static Function,
    /// The symbol found (one of the function's spellings).
    pub symbol: &'static str,
    pub path: PathBuf,
    /// The function's own file offset (its first instruction).
    pub offset: u64,
    /// The process to attach in (the kernel installs the breakpoint only there), or -1: all.
    pub pid: i32,
    /// Where on the function the probes go (see [`AttachPoint::probe_offset`]).
    pub placement: Placement,
}

impl AttachPoint {
    /// The file offset the uprobe and uretprobe attach at.
    pub fn probe_offset(&self) -> u64 {
        self.placement.probe_offset(self.offset)
    }
}

/// A function that was looked for and is not traced, with why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub function: &'static str,
    pub path: PathBuf,
    pub reason: MissingReason,
}

/// Why a function is not probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingReason {
    /// Called inside its library without the PLT: only the kernel backend reaches it.
    InternalToLibrary,
    /// The attached processes call it through no GOT entry of their own (not at all, or
    /// through dlsym pointers): started under tlsscope, such a program is wrapped.
    NoOwnGotEntry,
    /// NSS's data calls are in NSPR, and its libnspr4.so is not beside libssl3.so.
    NsprNotBeside,
    /// Said by the code that found it (a symbol lookup, the kernel's refusal).
    Other(String),
}

impl std::fmt::Display for MissingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MissingReason::InternalToLibrary => f.write_str(
                "internal to its library (called without the PLT): only the kernel backend can \
                 probe it",
            ),
            MissingReason::NoOwnGotEntry => f.write_str(
                "the attached processes call it through no GOT entry of their own (not at all, \
                 or through dlsym pointers as tlsscope's built-in server does: start such a \
                 program under tlsscope)",
            ),
            MissingReason::NsprNotBeside => f.write_str(
                "NSS's data calls are in NSPR, and no libnspr4.so is beside its libssl3.so; \
                 name that file as a library to trace",
            ),
            MissingReason::Other(why) => f.write_str(why),
        }
    }
}

/// A probe that is attached.
#[derive(Clone, Debug)]
pub struct Attached {
    pub point: AttachPoint,
}

// Where on a function its probes go: carried by each point, decided by the kernel backend
// (`kernel/placement.rs`) for its uprobes; the in-process backend wraps at the entry.

/// How `--placement` chooses where the probes go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PlacementMode {
    /// On an instruction the kernel emulates where one is as good as the entry.
    #[default]
    Emulated,
    /// Always at the function's first instruction.
    Entry,
}

impl std::str::FromStr for PlacementMode {
    type Err = String;

    fn from_str(s: &str) -> Result<PlacementMode, String> {
        match s {
            "emulated" => Ok(PlacementMode::Emulated),
            "entry" => Ok(PlacementMode::Entry),
            other => Err(format!(
                "unknown placement '{other}' (choose from emulated, entry)"
            )),
        }
    }
}

/// Where a function's probes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The function's first instruction; `emulated` says whether the kernel emulates it.
    Entry { emulated: bool },
    /// The instruction after the `endbr64` the function starts with (4 bytes in); emulated.
    AfterEndbr,
    /// The function's first callee, for calls from the function only; emulated.
    Callee(CalleeSite),
    /// A Go function: its entry, and each of its return instructions (the file offsets in
    /// `returns`) instead of a return probe, which would rewrite a return address on a stack Go
    /// may move. The entry probe sits `entry_delta` bytes in: on the conditional branch of the
    /// prologue's stack check, which the kernel emulates (0: the first instruction,
    /// single-stepped); the returns are single-stepped. Returns that run a deferred closure
    /// are seen at that closure's stack-check branch instead (`deferred`, emulated), and are
    /// not in `returns`.
    GoExits {
        returns: Vec<u64>,
        entry_delta: u64,
        deferred: Vec<GoDeferredExit>,
    },
}

/// A Go function's returns seen at a deferred closure's stack-check branch, which the kernel
/// emulates, with the results read from the function's frame (see `go_defers`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoDeferredExit {
    /// The file offset of the closure's branch.
    pub offset: u64,
    /// Each result register's (RAX, RBX, RCX) offset in the function's frame, from its stack
    /// pointer; None where the returns do not reload it.
    pub results: [Option<u32>; 3],
    /// The return addresses of the function's deferred calls of the closure, less the
    /// branch's address (the same in the file and in any process).
    pub site_deltas: Vec<i64>,
}

impl Placement {
    /// As reports name it: "entry", "entry+4" or "callee".
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Entry { .. } => "entry",
            Placement::AfterEndbr => "entry+4",
            Placement::Callee(_) => "callee",
            Placement::GoExits { deferred, .. } if !deferred.is_empty() => "entry+deferred+returns",
            Placement::GoExits { .. } => "entry+returns",
        }
    }

    /// The calls this placement does not see, in words (a callee's: those the function answers
    /// before calling it); None where it sees every call.
    pub fn unseen(&self) -> Option<&str> {
        match self {
            Placement::Callee(site) => site.unseen.as_deref(),
            _ => None,
        }
    }

    /// Whether the kernel emulates the probed instruction (else it single-steps it).
    pub fn emulated(&self) -> bool {
        !matches!(
            self,
            Placement::Entry { emulated: false } | Placement::GoExits { entry_delta: 0, .. }
        )
    }

    /// The file offset the probes attach at, for a function at `entry`.
    pub fn probe_offset(&self, entry: u64) -> u64 {
        match self {
            Placement::Entry { .. } => entry,
            Placement::GoExits { entry_delta, .. } => entry + entry_delta,
            Placement::AfterEndbr => entry + ENDBR64_LEN,
            Placement::Callee(site) => site.probe_offset,
        }
    }
}

/// A function probed at its callee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CalleeSite {
    /// The file offset of the probed instruction in the callee (its entry, or after its
    /// `endbr64`).
    pub probe_offset: u64,
    /// The return address of a call from the function minus the probed address: the same in
    /// the file and in any process, as both lie in one ELF file.
    pub return_delta: i64,
    /// The function's result for a callee result > 0, == 0 and < 0, in that order.
    pub results: [ResultRule; 3],
    /// The calls that return before the callee is called, and so are not seen (an argument
    /// check failing), if any.
    pub unseen: Option<String>,
    /// Whether the callee gets the function's argument n (0: rdi ... 5: r9) as its own
    /// argument n: what a probe reading the function's arguments at the callee relies on.
    pub passes_on: [bool; 6],
    /// Whether the callee's argument n is zero exactly when the function's is: passed on, or
    /// its low half widened (SSL_read's `int num` made a `size_t` with `movslq`).
    pub zero_alike: [bool; 6],
}

impl CalleeSite {
    /// Whether the callee gets the function's argument `n` (from 0) as its own argument `n`.
    pub fn passes_on(&self, n: usize) -> bool {
        self.passes_on.get(n).copied().unwrap_or(false)
    }

    /// Whether the callee's argument `n` (from 0) is zero exactly when the function's is.
    pub fn zero_alike(&self, n: usize) -> bool {
        self.zero_alike.get(n).copied().unwrap_or(false)
    }
}

/// What a function returns, given its callee's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultRule {
    /// The callee's result as it is.
    Callee,
    /// This constant.
    Constant(i32),
    /// The int at the address the callee got as its fourth argument (SSL_read's byte count).
    OutInt,
}

/// `endbr64` is f3 0f 1e fa.
pub(crate) const ENDBR64_LEN: u64 = 4;

/// The returns of the Go function `found` (at virtual addresses `returns`) that still need a
/// probe of their own (file offsets), and the deferred exits that see the others: its
/// closures (`F.deferwrap1`, `F.func1`) with an emulated stack-check branch are the candidates.
fn go_deferred_exits(
    go: &GoBinary,
    found: &crate::golang::GoFunction,
    returns: &[u64],
) -> (Vec<u64>, Vec<GoDeferredExit>) {
    let file_offset = |address: u64| found.file_offset + (address - found.address);
    let prefix = format!("{}.", found.name);
    let closures: Vec<(&crate::golang::GoFunction, crate::go_defers::Closure)> = go
        .functions()
        .filter(|f| f.name.starts_with(&prefix))
        .filter_map(|f| {
            let delta = crate::exits::stack_check_branch(go.code(f)?, f.address)?;
            Some((
                f,
                crate::go_defers::Closure {
                    address: f.address,
                    branch_delta: delta,
                },
            ))
        })
        .collect();
    let Some(code) = go.code(found) else {
        return (
            returns.iter().map(|&r| file_offset(r)).collect(),
            Vec::new(),
        );
    };
    let candidates: Vec<crate::go_defers::Closure> = closures.iter().map(|(_, c)| *c).collect();
    let ends = crate::go_defers::ends(code, found.address, returns, &candidates);
    let deferred = ends
        .deferred
        .iter()
        .filter_map(|d| {
            let (f, _) = closures.iter().find(|(_, c)| *c == d.closure)?;
            Some(GoDeferredExit {
                offset: f.file_offset + d.closure.branch_delta,
                results: d.results,
                site_deltas: d.site_deltas.clone(),
            })
        })
        .collect();
    (
        ends.returns.iter().map(|&r| file_offset(r)).collect(),
        deferred,
    )
}

/// The Go program at `path`, or None when it is no Go program (its functions are then looked
/// for in its ELF symbol tables). A Go program this reader cannot read is an error.
fn go_program(path: &Path) -> Result<Option<GoBinary>, Error> {
    match GoBinary::read(path) {
        Ok(go) => Ok(Some(go)),
        Err(Error::Go(GoError::NotGo { .. })) | Err(Error::NotElf { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// NSS's libssl as found on disk when a process does not say: the name its mapping has.
const NSS_SSL_FILE: &str = "libssl3.so";

/// The attach points for a set of targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub points: Vec<AttachPoint>,
    pub missing: Vec<Missing>,
    pub selection: Selection,
    /// The file name of NSS's libssl, whose method tables mark an NSPR file as a TLS layer.
    pub nss_ssl_file: Option<String>,
    /// (process, child): descendants of a process target running its program with its TLS
    /// library mapped (a server's workers), probed too: a uprobe attached in one process does
    /// not fire in the children it forked.
    pub children: Vec<(u32, u32)>,
    /// Go programs' key log hooks, for a plaintext selection (`sniff --keylog`).
    pub key_logs: Vec<KeyLogPoint>,
}

/// Where a Go program's key log hook, `crypto/tls.(*Config).writeKeyLog`, is probed: Go calls
/// it with every handshake secret, and it returns at once when the program set no
/// KeyLogWriter, so an entry probe reads every secret of every program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyLogPoint {
    pub path: PathBuf,
    /// The process to attach in, or -1: all.
    pub pid: i32,
    /// The file offset of the probe: the entry, or the stack check's branch (emulated).
    pub offset: u64,
}

/// Go's key log hook, as `.gopclntab` names it.
pub const GO_KEY_LOG_FUNCTION: &str = "crypto/tls.(*Config).writeKeyLog";

impl Plan {
    /// Plans the functions `selection` wants in `targets`. Fails when a target cannot be read,
    /// when the selection names a function the catalog lacks, or when nothing at all can be
    /// attached.
    pub fn new(targets: &[Target], selection: Selection) -> Result<Plan, Error> {
        selection.check()?;
        let mut plan = Plan {
            points: Vec::new(),
            missing: Vec::new(),
            selection,
            nss_ssl_file: None,
            children: Vec::new(),
            key_logs: Vec::new(),
        };
        for target in targets {
            match target {
                Target::Pid(pid) => {
                    plan.add_process(*pid)?;
                    plan.add_children(*pid);
                }
                Target::Binary(path) => match go_program(path)? {
                    Some(go) => plan.add_go(&go, -1)?,
                    None => {
                        let table = SymbolTable::read(path)?;
                        plan.add_static(&table, -1);
                    }
                },
                Target::Library(path) => {
                    let table = SymbolTable::read(path)?;
                    match LibraryKind::of(path) {
                        Some(kind) => plan.add_library(&table, kind, -1),
                        None => plan.add_static(&table, -1),
                    }
                    if LibraryKind::of(path) == Some(LibraryKind::Nss) {
                        plan.add_nspr_beside(path)?;
                    }
                }
            }
        }
        if plan.points.is_empty() {
            return Err(Error::NothingToAttach {
                reasons: plan.why_nothing(),
            });
        }
        Ok(plan)
    }

    /// The points of Go's functions (probed at their entry and returns by programs of their
    /// own) and the others, apart.
    pub fn go_and_native(&self) -> (Vec<AttachPoint>, Vec<AttachPoint>) {
        self.points
            .iter()
            .cloned()
            .partition(|p| matches!(p.placement, Placement::GoExits { .. }))
    }

    /// Whether `SSL_get_error` settles OpenSSL's <= 0 returns.
    pub fn exact(&self) -> bool {
        self.selection.exact()
    }

    fn why_nothing(&self) -> String {
        if self.missing.is_empty() {
            return "the targets define none of the functions asked for".into();
        }
        self.missing
            .iter()
            .take(4)
            .map(|m| format!("{}: {}", m.function, m.reason))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn add_process(&mut self, pid: u32) -> Result<(), Error> {
        let libraries = tls_libraries(pid)?;
        let pid_arg = i32::try_from(pid).unwrap_or(-1);
        if libraries.is_empty() {
            // No TLS library mapped: the TLS code may be linked into the executable itself.
            let exe = PathBuf::from(format!("/proc/{pid}/exe"));
            let exe = std::fs::read_link(&exe).unwrap_or(exe);
            // Go's crypto/tls is compiled into every Go program.
            if let Some(go) = go_program(&exe)? {
                return self.add_go(&go, pid_arg);
            }
            let table = SymbolTable::read(&exe)?;
            let before = self.points.len();
            self.add_static(&table, pid_arg);
            if self.points.len() == before {
                return Err(Error::NoTlsLibrary { pid });
            }
            return Ok(());
        }
        for library in libraries {
            let table = SymbolTable::read(&library.path)?;
            self.add_library(&table, library.kind, pid_arg);
        }
        Ok(())
    }

    /// The points of process `pid` again in each of its descendants that runs its program and
    /// maps the same file (nginx's workers, forked from the master after it loaded libssl).
    fn add_children(&mut self, pid: u32) {
        for (child, theirs) in in_children(&self.points, pid, &[pid]) {
            self.children.push((pid, child));
            for point in theirs {
                self.push(point);
            }
        }
    }

    /// Every function of `kind` the selection wants: attach where found, else say why not.
    fn add_library(&mut self, table: &SymbolTable, kind: LibraryKind, pid: i32) {
        if kind == LibraryKind::Nss {
            self.note_nss_ssl(table.path());
        }
        for (id, function) in self.selection.functions(kind) {
            match find(table, function) {
                Ok(found) => self.push(point(table, id, function, found, pid)),
                Err(reason) => self.missing.push(Missing {
                    function: function.name,
                    path: table.path().to_path_buf(),
                    reason: MissingReason::Other(reason),
                }),
            }
        }
    }

    /// A binary with the library compiled in: whichever wanted functions it defines. Those
    /// it lacks are not reported one by one (a static OpenSSL program has no GnuTLS functions);
    /// the caller reports "nothing to attach" when it defines none.
    fn add_static(&mut self, table: &SymbolTable, pid: i32) {
        let before = self.points.len();
        for kind in LibraryKind::ALL {
            for (id, function) in self.selection.functions(kind) {
                if let Ok(found) = find(table, function) {
                    self.push(point(table, id, function, found, pid));
                }
            }
        }
        if self.points.len() == before {
            self.missing.push(Missing {
                function: "(any TLS function)",
                path: table.path().to_path_buf(),
                reason: MissingReason::Other(format!(
                    "{} defines none of tlsscope's {} functions (OpenSSL, GnuTLS, NSS) in the chosen groups",
                    table.path().display(),
                    CATALOG.len()
                )),
            });
        }
    }

    /// A Go program: each wanted crypto/tls function at its entry and its return instructions
    /// (where a return probe would rewrite a return address on a stack Go may move). Those it
    /// lacks are missing with why; a Go program with none of them has no TLS of its own.
    fn add_go(&mut self, go: &GoBinary, pid: i32) -> Result<(), Error> {
        let wanted = self.selection.functions(LibraryKind::Go);
        if wanted.is_empty() {
            // The selection takes none of Go's functions (a group Go has none in).
            self.missing.push(Missing {
                function: "(Go's crypto/tls)",
                path: go.path().to_path_buf(),
                reason: MissingReason::Other(
                    "a Go program: none of the functions asked for is one of Go's crypto/tls"
                        .into(),
                ),
            });
            return Ok(());
        }
        let before = self.points.len();
        for (id, function) in &wanted {
            let Some(found) = go.function(function.name) else {
                self.missing.push(Missing {
                    function: function.name,
                    path: go.path().to_path_buf(),
                    reason: MissingReason::Other(
                        "not in this Go program (not linked in, or inlined into its callers)"
                            .into(),
                    ),
                });
                continue;
            };
            let exits = go
                .code(found)
                .map(|code| crate::exits::exits(code, found.address))
                .unwrap_or_default();
            let returns: Vec<u64> = exits
                .returns
                .iter()
                .map(|r| found.file_offset + (r - found.address))
                .collect();
            if returns.is_empty() || !exits.tail_jumps.is_empty() {
                self.missing.push(Missing {
                    function: function.name,
                    path: go.path().to_path_buf(),
                    reason: MissingReason::Other(format!(
                        "its ends could not all be found in its code ({} return instructions, {} jumps out{})",
                        returns.len(),
                        exits.tail_jumps.len(),
                        exits
                            .undecoded_at
                            .map(|a| format!(", undecodable bytes at {a:#x}"))
                            .unwrap_or_default()
                    )),
                });
                continue;
            }
            // The returns that run a deferred closure are seen at its branch instead.
            let (returns, deferred) = go_deferred_exits(go, found, &exits.returns);
            self.push(AttachPoint {
                id: *id,
                function,
                symbol: function.name,
                path: go.path().to_path_buf(),
                offset: found.file_offset,
                pid,
                placement: Placement::GoExits {
                    returns,
                    deferred,
                    entry_delta: go
                        .code(found)
                        .and_then(|code| crate::exits::stack_check_branch(code, found.address))
                        .unwrap_or(0),
                },
            });
        }
        if matches!(self.selection, Selection::Plaintext { .. }) {
            if let Some(found) = go.function(GO_KEY_LOG_FUNCTION) {
                let delta = go
                    .code(found)
                    .and_then(|code| crate::exits::stack_check_branch(code, found.address))
                    .unwrap_or(0);
                self.key_logs.push(KeyLogPoint {
                    path: go.path().to_path_buf(),
                    pid,
                    offset: found.file_offset + delta,
                });
            }
        }
        if self.points.len() == before && wanted.iter().all(|(_, f)| go.function(f.name).is_none())
        {
            return Err(Error::GoWithoutTls {
                path: go.path().to_path_buf(),
                version: go.go_version().map(String::from),
                functions: wanted
                    .iter()
                    .map(|(_, f)| f.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(())
    }

    /// Remembers NSS's libssl file name (see [`Plan::tls_layer_file`]).
    fn note_nss_ssl(&mut self, path: &Path) {
        let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(name) = real.file_name().and_then(|n| n.to_str()) {
            self.nss_ssl_file = Some(name.to_string());
        }
    }

    /// For `--lib .../libssl3.so`: the NSPR beside it, where NSS's data calls are.
    fn add_nspr_beside(&mut self, nss_ssl: &Path) -> Result<(), Error> {
        if self.selection.functions(LibraryKind::Nspr).is_empty() {
            return Ok(());
        }
        let nspr = nss_ssl.with_file_name("libnspr4.so");
        if nspr.is_file() {
            let table = SymbolTable::read(&nspr)?;
            self.add_library(&table, LibraryKind::Nspr, -1);
            return Ok(());
        }
        self.missing.push(Missing {
            function: "PR_Read",
            path: nspr,
            reason: MissingReason::NsprNotBeside,
        });
        Ok(())
    }

    /// The file name the sniffer checks NSPR files against, when NSPR functions are probed.
    pub fn tls_layer_file(&self) -> Option<&str> {
        let probes_nspr = self.points.iter().any(|p| p.function.tls_layer_only());
        probes_nspr.then(|| self.nss_ssl_file.as_deref().unwrap_or(NSS_SSL_FILE))
    }

    fn push(&mut self, point: AttachPoint) {
        let same = |p: &AttachPoint| {
            p.path == point.path && p.offset == point.offset && p.pid == point.pid
        };
        if !self.points.iter().any(same) {
            self.points.push(point);
        }
    }

    /// The distinct files the plan attaches to.
    pub fn files(&self) -> Vec<&Path> {
        let mut files: Vec<&Path> = Vec::new();
        for p in &self.points {
            if !files.contains(&p.path.as_path()) {
                files.push(&p.path);
            }
        }
        files
    }
}

/// Process `root`'s points again in each of its descendants not `known` that runs its program
/// and maps the point's file, per child: a uprobe attached in one process does not fire in
/// the children it forks.
pub(crate) fn in_children(
    points: &[AttachPoint],
    root: u32,
    known: &[u32],
) -> Vec<(u32, Vec<AttachPoint>)> {
    let Ok(root_arg) = i32::try_from(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for child in crate::maps::with_descendants(&[root]) {
        let Ok(child_arg) = i32::try_from(child) else {
            continue;
        };
        if child == root || known.contains(&child) {
            continue;
        }
        let mut mapped: Vec<(&Path, bool)> = Vec::new();
        let mut theirs = Vec::new();
        for p in points.iter().filter(|p| p.pid == root_arg) {
            let maps = match mapped.iter().find(|(path, _)| *path == p.path) {
                Some(&(_, maps)) => maps,
                None => {
                    let maps = crate::maps::maps_file(child, &p.path);
                    mapped.push((&p.path, maps));
                    maps
                }
            };
            if maps {
                theirs.push(AttachPoint {
                    pid: child_arg,
                    ..p.clone()
                });
            }
        }
        if !theirs.is_empty() {
            out.push((child, theirs));
        }
    }
    out
}

fn point(
    table: &SymbolTable,
    id: u16,
    function: &'static Function,
    (symbol, offset): (&'static str, u64),
    pid: i32,
) -> AttachPoint {
    AttachPoint {
        id,
        function,
        symbol,
        path: table.path().to_path_buf(),
        offset,
        pid,
        placement: Placement::Entry { emulated: false },
    }
}

/// The first of the function's spellings the file defines, and its offset; or why not.
fn find(table: &SymbolTable, function: &'static Function) -> Result<(&'static str, u64), String> {
    let mut last = None;
    for symbol in function.spellings() {
        match table.uprobe_offset(symbol) {
            Ok(offset) => return Ok((symbol, offset)),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(Error::NoSymbol { stripped: true, .. }) if function.internal => {
            "internal function, and the library is stripped of its symbol table (use a build from `tlsscope openssl build`)".to_string()
        }
        Some(Error::NoSymbol { .. }) => "not defined by this library version".to_string(),
        Some(e) => e.to_string(),
        None => "no symbol name to look for".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{Group, Groups};

    fn system_libssl() -> PathBuf {
        let pid = std::process::id();
        // Load libssl into this test process so /proc/self/maps shows where it is.
        let _ = ossl::Library::load(&ossl::LibrarySource::System).expect("system OpenSSL loads");
        tls_libraries(pid)
            .unwrap()
            .into_iter()
            .find(|l| l.kind == LibraryKind::OpensslSsl)
            .expect("libssl mapped")
            .path
    }

    #[test]
    fn process_plan_finds_openssl_and_reports_stripped_internals() {
        let _ = system_libssl();
        let plan = Plan::new(
            &[Target::Pid(std::process::id())],
            Selection::latency(Groups::all(), true),
        )
        .unwrap();
        let names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        for want in [
            "SSL_do_handshake",
            "SSL_read_ex",
            "SSL_write",
            "SSL_get_error",
            "EVP_DigestSign",
            "EVP_PKEY_derive",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let pid = i32::try_from(std::process::id()).unwrap();
        assert!(plan.points.iter().all(|p| p.pid == pid));
        // Debian's libcrypto is stripped: the internals are reported, with the reason.
        let rsa = plan
            .missing
            .iter()
            .find(|m| m.function == "rsa_ossl_private_decrypt")
            .expect("stripped internals are reported, not dropped");
        assert!(
            rsa.reason.to_string().contains("stripped"),
            "{}",
            rsa.reason
        );
    }

    #[test]
    fn library_plan_attaches_everywhere_and_respects_groups() {
        let libssl = system_libssl();
        let plan = Plan::new(
            &[Target::Library(libssl.clone())],
            Selection::latency(Groups::only(Group::Handshake), false),
        )
        .unwrap();
        assert!(plan.points.iter().all(|p| p.pid == -1));
        let names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        assert!(names.contains(&"SSL_do_handshake"));
        assert!(
            !names.contains(&"SSL_read"),
            "io is not in the handshake group"
        );
        // The sniffer's selection of the same library: the data calls, from the one catalog.
        let sniff = Plan::new(
            &[Target::Library(libssl)],
            Selection::Plaintext { handshake: false },
        )
        .unwrap();
        let mut names: Vec<&str> = sniff.points.iter().map(|p| p.function.name).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex"]
        );
        assert!(!sniff.exact() && sniff.tls_layer_file().is_none());
    }

    #[test]
    fn an_nss_library_brings_its_nspr_for_trace_and_sniff_alike() {
        let nss = PathBuf::from("/usr/lib/x86_64-linux-gnu/libssl3.so");
        assert!(nss.exists(), "libnss3 (with libnss3-tools, in make deps)");
        let nspr_names = |plan: &Plan| {
            let mut names: Vec<&str> = plan
                .points
                .iter()
                .filter(|p| p.path.ends_with("libnspr4.so"))
                .map(|p| p.function.name)
                .collect();
            names.sort_unstable();
            names
        };
        let targets = [Target::Library(nss)];
        let trace = Plan::new(&targets, Selection::latency(Groups::only(Group::Io), false));
        let sniff = Plan::new(&targets, Selection::Plaintext { handshake: true });
        let (trace, sniff) = (trace.unwrap(), sniff.unwrap());
        let all_four = ["PR_Read", "PR_Recv", "PR_Send", "PR_Write"];
        assert_eq!(nspr_names(&trace), all_four);
        assert_eq!(nspr_names(&sniff), all_four);
        assert!(sniff
            .points
            .iter()
            .any(|p| p.function.name == "SSL_ForceHandshake"));
        assert_eq!(sniff.tls_layer_file(), Some("libssl3.so"));
    }

    #[test]
    fn named_functions_narrow_the_plan() {
        let _ = system_libssl();
        let only = vec!["SSL_read".to_string(), "EVP_PKEY_derive".to_string()];
        let pid = Target::Pid(std::process::id());
        let selection = |only: Vec<String>| Selection::Latency {
            groups: Groups::all(),
            only,
            exact: false,
        };
        let plan = Plan::new(std::slice::from_ref(&pid), selection(only)).unwrap();
        let mut names: Vec<&str> = plan.points.iter().map(|p| p.function.name).collect();
        names.sort_unstable();
        assert_eq!(names, ["EVP_PKEY_derive", "SSL_read"]);
        let bad = vec!["SSL_reed".to_string()];
        let err = Plan::new(&[pid], selection(bad)).unwrap_err();
        assert!(err.to_string().contains("SSL_reed"), "{err}");
    }

    #[test]
    fn a_binary_without_tls_functions_is_an_error() {
        let all = Selection::latency(Groups::all(), false);
        let err = Plan::new(&[Target::Binary("/bin/true".into())], all).unwrap_err();
        assert!(err.to_string().contains("defines none"), "{err}");
    }
}
